#!/usr/bin/env bash
# Compares kcp-go v5.6.72's crypt benchmarks (crypt_test.go) with ours
# (kcpio/benches/crypto.rs, same names and sizes) and its FEC 10/3 benchmarks
# (fec_test.go's FECEncode/FECDecode against kcpio/benches/fec.rs) in one
# sitting, per packet.
#
#   lab/scripts/crypto_vs_kcpgo.sh [ROUNDS] [FILTER]
#
# Both sides are measured in CPU time, which the other jobs of a shared
# machine disturb far less than wall-clock time:
# - kcp-go: its test binary runs each benchmark a fixed number of times
#   (-test.benchtime Nx, N sized for about a second), and the user+sys time of
#   that run minus the time of a 1x run (startup) is divided by N;
# - kcpio: the bench binary's KCPIO_BENCH_CPU_MS mode reads its own thread's
#   CPU time.
# The two alternate for ROUNDS rounds; the table shows medians and the ratio
# kcp-go time / kcpio time (> 1 means kcpio is faster).
#
# BEFORE=DIR adds a column: DIR holds an earlier build's bench executables
# (named `crypto` and `fec`, copied from target/release/deps), measured in the
# same rounds, so a change is shown against kcp-go before and after at once.
#
# Needs Go and the kcp-go module (go mod download github.com/xtaci/kcp-go/v5@v5.6.72).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
FILTER=${2:-}
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
cargo bench -p kcpio --bench crypto --bench fec --no-run >/dev/null 2>&1
rs_bin() { # $1 = bench target name
  cargo bench -p kcpio --bench "$1" --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]==sys.argv[1] and m.get("executable"): print(m["executable"])' "$1"
}
RSBIN=$(rs_bin crypto)
FECBIN=$(rs_bin fec)

NAMES="SM4 AES128 AES192 AES256 TEA XOR Blowfish None Cast5 3DES Twofish XTEA Salsa20 CRC32 CFB_AES_128_CRC32 AEAD_AES_128_GCM CFB_Salsa20_CRC32 FECEncode FECDecode"

go_cpu_round() { # $1 = output file
  python3 - "$GODIR" "$1" "$FILTER" $NAMES <<'PY'
import re, subprocess, sys, statistics
godir, out, filt, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def run(name, n):
    p = subprocess.run(["/usr/bin/time", "-f", "CPU %U %S", "./kcpgo.test", "-test.run", "xxx",
                        "-test.bench", f"^Benchmark{name}$", "-test.benchtime", f"{n}x"],
                       cwd=godir, capture_output=True, text=True)
    m = re.search(r"CPU ([\d.]+) ([\d.]+)", p.stderr)
    w = re.search(r"\s([\d.]+) ns/op", p.stdout)
    return float(m.group(1)) + float(m.group(2)), float(w.group(1)) if w else None
base = statistics.median(run("CRC32", 1)[0] for _ in range(3))
with open(out, "w") as f:
    for name in names:
        if filt and filt not in name:
            continue
        _, est = run(name, 200)
        n = max(1000, int(1.0e9 / est))
        cpu, _ = run(name, n)
        f.write(f"{name} {max(cpu - base, 0) * 1e9 / n:.1f}\n")
PY
}

rs_round() { # $1 = crypto bench, $2 = fec bench, $3 = output file
  KCPIO_BENCH_CPU_MS=700 KCPIO_BENCH_FILTER="crypt/$FILTER" "$1" --bench \
    | sed -n 's|^crypt/\([^ ]*\) \([0-9.]*\) ns/op cpu|\1 \2|p' > "$3"
  KCPIO_BENCH_CPU_MS=700 KCPIO_BENCH_FILTER="FEC/$FILTER" "$2" --bench \
    | sed -n 's|^FEC/\([^ ]*\) \([0-9.]*\) ns/op cpu|\1 \2|p' >> "$3"
}

rm -f "$OUT"/before.*.txt
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS: kcp-go" >&2
  go_cpu_round "$OUT/go.$r.txt"
  if [ -n "${BEFORE:-}" ]; then
    echo "round $r/$ROUNDS: kcpio before ($BEFORE)" >&2
    rs_round "$BEFORE/crypto" "$BEFORE/fec" "$OUT/before.$r.txt"
  fi
  echo "round $r/$ROUNDS: kcpio" >&2
  rs_round "$RSBIN" "$FECBIN" "$OUT/rs.$r.txt"
done

python3 - "$OUT" <<'PY'
import glob, statistics, sys
out = sys.argv[1]
def load(side):
    d = {}
    for f in sorted(glob.glob(f"{out}/{side}.*.txt")):
        for line in open(f):
            name, ns = line.split()
            d.setdefault(name, []).append(float(ns))
    return d
go, rs, before = load("go"), load("rs"), load("before")
med = lambda d, n: statistics.median(d[n]) if n in d else float("nan")
if before:
    print(f"{'benchmark':<20} {'kcp-go ns/op':>13} {'before ns/op':>13} {'kcpio ns/op':>12} {'before/kcp-go':>14} {'kcpio/kcp-go':>13}")
else:
    print(f"{'benchmark':<20} {'kcp-go ns/op':>13} {'kcpio ns/op':>12} {'kcpio/kcp-go speed':>19}")
for name, g in go.items():
    gm, rm = statistics.median(g), med(rs, name)
    if before:
        bm = med(before, name)
        print(f"{name:<20} {gm:>13.1f} {bm:>13.1f} {rm:>12.1f} {gm / bm:>13.2f}x {gm / rm:>12.2f}x")
    else:
        print(f"{name:<20} {gm:>13.1f} {rm:>12.1f} {gm / rm:>18.2f}x")
PY
