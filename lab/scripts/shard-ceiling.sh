#!/usr/bin/env bash
# Can this machine show a listener's shard scaling? The arithmetic, measured.
#
#   lab/scripts/shard-ceiling.sh [--reps N] [--mib N] [--cipher none|aes]
#       [--cores N] [--freq HZ] [--fanin PATH] [--udplimit PATH]
#
# Issue 28's target is "16 sessions into one listener: with 2 shards >= 1.6x
# one shard's aggregate". One shard is one driver task: its saturated rate
# is 1 / D GB/s, D the driver's CPU seconds per GB. Two shards share the
# machine's cores with everything else the run needs per GB: the sessions'
# readers (the application copying out of kcpio), and the load generator
# (on loopback the sender also pays the kernel's delivery of each datagram).
# So on C idle cores, 2 shards move at most C / (S + G) GB/s, S the whole
# server's CPU per GB (drivers + readers), G the generator's, and
#
#     2 shards / 1 shard  <=  C * D / (S + G)   (and <= 2).
#
# Each repetition measures, in this order:
#   G: `udplimit --modes gso --payload static` (one sender thread, 46
#      datagrams of 1400 B per UDP_SEGMENT message, a GRO receiver): the
#      cheapest any sender of these bytes can be on loopback, no KCP at all;
#   S: `fanin 1 MIB 16 1,2` (its server runtime threads' CPU per GB, both
#      shard counts, the clients in the same process);
#   D / S: `fanin 1 MIB 16 1` again under `perf record --call-graph dwarf`;
#      every sample of the server's threads whose stack holds the driver's
#      `Future::poll` is the driver's, `kcpio::stream::poll_read` the
#      readers', the rest other (spawns, parking).
# `--cipher none` (default) sets FANIN_CIPHER=none; `aes` is fanin's aes-128.
# Prints one line per repetition (load beside it), then medians (min-max)
# and the ceiling on `--cores` (default 2) idle cores: with the measured G,
# with G = 0 (a generator that costs nothing), and the cores 1.6x needs.
# Needs root (perf) and release builds of fanin and udplimit
# (cargo build --release -p kcpio-lab --bin fanin --bin udplimit).
# Loopback only; everything runs in the foreground and ends with its run.
# Run it under the shared lock: flock /tmp/kcpio-measure.lock lab/scripts/...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REPS=5
MIB=64
CIPHER=none
CORES=2
FREQ=499
FANIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/fanin"
UDPLIMIT="${CARGO_TARGET_DIR:-$ROOT/target}/release/udplimit"
while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift ;;
	--mib) MIB=$2; shift ;;
	--cipher) CIPHER=$2; shift ;;
	--cores) CORES=$2; shift ;;
	--freq) FREQ=$2; shift ;;
	--fanin) FANIN=$2; shift ;;
	--udplimit) UDPLIMIT=$2; shift ;;
	-h | --help) sed -n '2,33p' "$0"; exit 0 ;;
	*) echo "unknown argument $1" >&2; exit 1 ;;
	esac
	shift
done
case $CIPHER in none | aes) ;; *) echo "--cipher none|aes" >&2; exit 1 ;; esac
for b in "$FANIN" "$UDPLIMIT"; do [ -x "$b" ] || { echo "no binary at $b" >&2; exit 1; }; done
command -v perf >/dev/null || { echo "needs perf" >&2; exit 1; }
[ "$REPS" -ge 1 ] && [ "$REPS" -le 50 ] || { echo "--reps 1..50" >&2; exit 1; }

RUN="$ROOT/lab/scripts/out/shard-ceiling-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"
RES="$RUN/results.tsv"
: >"$RES"
export FANIN_CIPHER=$CIPHER
[ "$CIPHER" = aes ] && unset FANIN_CIPHER
echo "shard-ceiling: $REPS reps, 16 x $MIB MiB, cipher $CIPHER, $CORES cores; raw output in $RUN"

for rep in $(seq 1 "$REPS"); do
	load=$(cut -d' ' -f1 /proc/loadavg)
	"$UDPLIMIT" --modes gso --payload static --reps 1 --mib 256 --json >"$RUN/gso-$rep.json" 2>"$RUN/gso-$rep.err"
	"$FANIN" 1 "$MIB" 16 1,2 >"$RUN/fanin-$rep.txt" 2>"$RUN/fanin-$rep.err"
	perf record -q -F "$FREQ" --call-graph dwarf,32768 -o "$RUN/perf-$rep.data" -- \
		"$FANIN" 1 "$MIB" 16 1 >"$RUN/fanin-perf-$rep.txt" 2>"$RUN/perf-$rep.err"
	perf script -i "$RUN/perf-$rep.data" --comm fanin-server -F comm,ip,sym \
		>"$RUN/perf-$rep.script" 2>/dev/null
	rm -f "$RUN/perf-$rep.data"
	python3 - "$RUN" "$rep" "$load" >>"$RES" <<'EOF'
import json, sys
run, rep, load = sys.argv[1:]
gso = [json.loads(l) for l in open(f"{run}/gso-{rep}.json") if l.startswith("{")][-1]
def fanin(path):
    # run shards MB/s ... CPU-s/GB server client, per shard count
    rows = {}
    for line in open(path):
        t = line.replace("(", " ").replace(")", " ").split()
        if len(t) > 5 and t[0].isdigit() and t[1].isdigit():
            rows[int(t[1])] = (float(t[2]), float(t[-2]), float(t[-1]))
    return rows
plain = fanin(f"{run}/fanin-{rep}.txt")
drv = rd = other = 0
for s in open(f"{run}/perf-{rep}.script").read().split("\n\n"):
    if not s.strip().startswith("fanin-server"):
        continue
    if "Driver as core::future::future::Future>::poll" in s:
        drv += 1
    elif "kcpio::stream::poll_read" in s:
        rd += 1
    else:
        other += 1
n = max(drv + rd + other, 1)
m1, s1, c1 = plain[1]
m2, s2, c2 = plain[2]
print("\t".join(str(x) for x in (rep, load, gso["cpu_gb_send"], m1, s1, c1, m2, s2, c2,
                                  drv / n, rd / n, other / n, n)))
EOF
	IFS=$'\t' read -r _ l g m1 s1 c1 m2 s2 c2 dfrac rfrac _ n < <(tail -1 "$RES")
	printf 'rep %d (load %s): G %.3f | 1 shard %.1f MB/s S %.3f clients %.3f | 2 shards %.1f MB/s (%.2fx) S %.3f | D/S %.3f readers %.3f (%d samples)\n' \
		"$rep" "$l" "$g" "$m1" "$s1" "$c1" "$m2" "$(python3 -c "print($m2/$m1)")" "$s2" "$dfrac" "$rfrac" "$n"
done

python3 - "$RES" "$CORES" <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().strip().splitlines()]
cores = float(sys.argv[2])
col = lambda i: [float(r[i]) for r in rows]
def fmt(v):
    return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
G, S1, DS, RD = col(2), col(4), col(9), col(10)
ratio = [b / a for a, b in zip(col(3), col(6))]
print(f"\nmedians of {len(rows)} (min-max), load {min(col(1))}-{max(col(1))}:")
print(f"  G, raw GSO sender CPU-s/GB:             {fmt(G)}")
print(f"  S, 1-shard server CPU-s/GB:             {fmt(S1)}")
print(f"  D/S, driver's share of the server:      {fmt(DS)}  (readers {fmt(RD)})")
print(f"  fanin 2 shards / 1 shard (kcpio clients): {fmt(ratio)}")
g, s, ds = (statistics.median(v) for v in (G, S1, DS))
d = ds * s
print(f"  D = {d:.3f} CPU-s/GB: one shard saturates at {1 / d:.2f} GB/s")
print(f"  ceiling on {cores:g} idle cores: {min(2, cores * d / (s + g)):.2f}x with G = {g:.3f}; "
      f"{min(2, cores * d / s):.2f}x with G = 0")
print(f"  1.6x needs {1.6 * (s + g) / d:.2f} idle cores with G = {g:.3f} ({1.6 * s / d:.2f} with G = 0)")
EOF
