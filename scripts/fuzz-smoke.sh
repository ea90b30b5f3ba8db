#!/usr/bin/env bash
# Fuzz smoke: builds every cargo-fuzz target in fuzz/ (`cargo fuzz list`:
# the crypto, FEC, ARQ and pipeline decoders, the smux session, a whole
# `Conn` as a listener's session, the FEC datagram extension's decoder
# (`dgram_fec`), the adaptive stream FEC's (`stream_fec`), the fake-TCP codec (`faketcp_codec`), and the session table) and runs each for a
# few seconds from the seed corpora (fuzz/seed.sh, taken from kcpio/tests/vectors).
# Fails on a build error or on any crash, leak of the memory limit, or
# timeout. Needs the nightly toolchain; installs cargo-fuzz if it is missing.
#
#   scripts/fuzz-smoke.sh            # every target, FUZZ_SECS (default 8) each
#   FUZZ_SECS=60 scripts/fuzz-smoke.sh fec_decoder pipeline
#   FUZZ_TARGET_DIR=/elsewhere scripts/fuzz-smoke.sh   # build there (default fuzz/target)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${FUZZ_SECS:-8}
cd "$root/fuzz"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz-smoke: the nightly toolchain is required" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz
fi

./seed.sh >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
tdir=${FUZZ_TARGET_DIR:-$root/fuzz/target}
cargo +nightly fuzz build -O --target-dir "$tdir"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bin="$tdir/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"
status=0
for t in "${targets[@]}"; do
    mkdir -p "$out/$t"
    # New units go to the scratch directory; the seeds are only read.
    if "$bin/$t" "$out/$t" "corpus/$t" -max_total_time="$secs" -rss_limit_mb=2048 \
        -max_len=8192 -timeout=10 -artifact_prefix="$out/$t/" >"$out/$t.log" 2>&1; then
        echo "fuzz-smoke: $t ok: $(grep -E '^#[0-9]+' "$out/$t.log" | tail -1 | awk '{print $1, $3, $4, $5, $6}')"
    else
        echo "fuzz-smoke: $t FAILED" >&2
        grep -v '^#' "$out/$t.log" | tail -40 >&2
        mkdir -p "$root/fuzz/artifacts/$t"
        cp "$out/$t"/crash-* "$out/$t"/leak-* "$out/$t"/timeout-* "$out/$t"/oom-* \
            "$root/fuzz/artifacts/$t/" 2>/dev/null || true
        status=1
    fi
done
exit $status
