#!/usr/bin/env bash
# Regenerates ../../../kcpio/tests/vectors/arq_kcpgo_trace.json: runs kcp-go v5.6.72's
# KCP state machine (a temporary copy whose clock is made settable, see
# hook.go.txt) through the scenarios in main.go on a virtual clock, emulating
# how a kcp-go UDPSession drives it. tests arq::tests::kcpgo_trace replays the
# same scenarios through kcpio's arq and compares every datagram.
set -euo pipefail
cd "$(dirname "$0")"
src="$(go env GOMODCACHE)/github.com/xtaci/kcp-go/v5@v5.6.72"
[ -d "$src" ] || (cd /tmp && go mod download github.com/xtaci/kcp-go/v5@v5.6.72)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/kcp-go"
chmod -R u+w "$work/kcp-go"
# currentMs becomes a variable so SetClock can replace it.
sed -i 's/^func currentMs() uint32 { return \(.*\) }$/var currentMs = func() uint32 { return \1 }/' "$work/kcp-go/kcp.go"
grep -q '^var currentMs = func' "$work/kcp-go/kcp.go"
cp hook.go.txt "$work/kcp-go/zz_kcpio_hook.go"
cp main.go "$work/main.go"
cat > "$work/go.mod" <<MOD
module kcpio/interop/kcpgo-arq-trace

go 1.24.0

require github.com/xtaci/kcp-go/v5 v5.6.72

replace github.com/xtaci/kcp-go/v5 => ./kcp-go
MOD
cp "$src/go.sum" "$work/go.sum"
(cd "$work" && GOFLAGS=-mod=mod go run . ) > "$work/out.json"
mv "$work/out.json" ../../../kcpio/tests/vectors/arq_kcpgo_trace.json
echo "wrote kcpio/tests/vectors/arq_kcpgo_trace.json"
