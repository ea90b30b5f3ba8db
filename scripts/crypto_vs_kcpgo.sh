#!/usr/bin/env bash
# Runs kcp-go v5.6.72's crypt benchmarks and ours (benches/crypto.rs) in one
# sitting, alternating ROUNDS times so both see the same machine load, and
# prints the per-packet time of each (median over rounds) and the ratio
# kcp-go time / our time (> 1 means we are faster).
#
#   scripts/crypto_vs_kcpgo.sh [ROUNDS] [FILTER]
#
# Needs Go and the kcp-go module (go mod download github.com/xtaci/kcp-go/v5@v5.6.72).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
FILTER=${2:-.}
OUT=${OUT:-target/crypto_vs_kcpgo}
mkdir -p "$OUT"
rm -f "$OUT"/go.*.txt "$OUT"/rs.*.txt

MOD="$(go env GOMODCACHE)/github.com/xtaci/kcp-go/v5@v5.6.72"
[ -d "$MOD" ] || (cd /tmp && go mod download github.com/xtaci/kcp-go/v5@v5.6.72)
GODIR="$OUT/kcp-go"
if [ ! -d "$GODIR" ]; then
  cp -r "$MOD" "$GODIR"
  chmod -R u+w "$GODIR"
fi
(cd "$GODIR" && go test -c -o kcpgo.test . >/dev/null)
cargo bench --bench crypto --no-run >/dev/null 2>&1

GO_NAMES='^Benchmark(SM4|AES128|AES192|AES256|TEA|XOR|Blowfish|None|Cast5|3DES|Twofish|XTEA|Salsa20|CRC32|CFB_AES_128_CRC32|AEAD_AES_128_GCM|CFB_Salsa20_CRC32)$'
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS: kcp-go" >&2
  (cd "$GODIR" && ./kcpgo.test -test.run xxx -test.bench "$GO_NAMES" -test.benchtime 1s) \
    | grep '^Benchmark' | grep -E "$FILTER" > "$OUT/go.$r.txt" || true
  echo "round $r/$ROUNDS: kcpio" >&2
  cargo bench --bench crypto -- --warm-up-time 1 --measurement-time 2 "crypt/" 2>/dev/null \
    | grep -E '^crypt/|time:' > "$OUT/rs.$r.txt" || true
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import re, statistics, sys, glob
out, rounds = sys.argv[1], int(sys.argv[2])
unit = {'ps': 1e-3, 'ns': 1, 'µs': 1e3, 'us': 1e3, 'ms': 1e6, 's': 1e9}
go, rs = {}, {}
for f in sorted(glob.glob(f"{out}/go.*.txt")):
    for line in open(f):
        m = re.match(r'Benchmark(\S+?)-\d+\s+\d+\s+([\d.]+) ns/op', line)
        if m:
            go.setdefault(m.group(1), []).append(float(m.group(2)))
for f in sorted(glob.glob(f"{out}/rs.*.txt")):
    name = None
    for line in open(f):
        m = re.match(r'crypt/(\S+)', line)
        if m:
            name = m.group(1)
        m = re.search(r'time:\s+\[\S+ \S+ (\S+) (\S+)', line)
        if m and name:
            rs.setdefault(name, []).append(float(m.group(1)) * unit[m.group(2)])
            name = None
print(f"{'benchmark':<20} {'kcp-go ns/op':>14} {'kcpio ns/op':>14} {'ratio':>7}")
for name in go:
    g = statistics.median(go[name])
    r = statistics.median(rs[name]) if name in rs else float('nan')
    print(f"{name:<20} {g:>14.1f} {r:>14.1f} {g / r:>6.2f}x")
PY
