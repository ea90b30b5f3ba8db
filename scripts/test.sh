#!/usr/bin/env bash
# The README's test command: every unit, simulation, property, socket and interop
# test of every workspace member, then the Go peers' and tools' own tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets --locked
cargo test --workspace --doc --locked

# The Go peer, relay and TCP baseline serve the interop tests and the side-by-side
# scripts; their own tests run wherever Go is (CI sets KCPIO_REQUIRE_GO=1).
if command -v go >/dev/null 2>&1; then
  for dir in testkit/interop/kcpgo-peer testkit/interop/kcpgo561 testkit/interop/smux-peer lab/tools/relay lab/tools/tcpecho; do
    (cd "$dir" && go test -buildvcs=false -count=1 ./...)
  done
  # the smux peer again against smux v1.5.16 (go.mod pins v1.5.58)
  (cd testkit/interop/smux-peer && go test -modfile=go.v1516.mod -buildvcs=false -count=1 ./...)
elif [ "${KCPIO_REQUIRE_GO:-0}" = 1 ]; then
  echo "FATAL: Go is required (KCPIO_REQUIRE_GO=1) but not found" >&2
  exit 1
else
  echo "SKIPPED: Go not found; the Go tools' tests did not run" >&2
fi
