#!/usr/bin/env bash
# A soak of kcpio-tunnel's server under the hostile mix, on loopback: for
# SECS seconds, `attack streams` cycles through slow readers (2,000
# never-reading streams, 500 per 0.6 s), a stream-open flood (20,000 at
# once) and many sessions x streams (5,000 over 100 sessions), each held
# HOLD s and followed by another client's 64 MiB download; meanwhile a
# legitimate kcpio-tunnel client downloads 64 MiB after 64 MiB through its
# own session. The attacker binds 127.0.0.3, the bulk client 127.0.0.1 and
# the attack's own second download 127.0.0.2: three clients to the server,
# which shares its slots and budget per source address. Every SAMPLE s it records the server's RSS, descriptors,
# threads, forwarded streams and buffer budget charged; after the attacks
# and the bulk stop, it waits SETTLE s and samples once more.
#
# Prints the samples (also in $OUT/samples.tsv) and a summary: peak RSS and
# descriptors, the median RSS of the first and last thirds (flat when they
# are close), the downloads that completed, and what is left once the
# attackers are gone. The server runs with its defaults, `--nocomp`.
#
#   lab/scripts/hostile-soak.sh [SECS=600] [SAMPLE=5] [HOLD=15] [SETTLE=45]
#
# Needs python3. Loopback only; every loop is bounded by SECS.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-600}
SAMPLE=${2:-5}
HOLD=${3:-15}
SETTLE=${4:-45}
# KCPIO_BIN_DIR: take kcpio-tunnel and attack from there instead of building.
if [ -n "${KCPIO_BIN_DIR:-}" ]; then
    BIN=$KCPIO_BIN_DIR
else
    cargo build --release --quiet -p kcpio-tunnel -p kcpio-lab --bin kcpio-tunnel --bin attack
    BIN=${CARGO_TARGET_DIR:-target}/release
fi
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=20000
ulimit -n "$(( hard < 20000 ? hard : 20000 ))"
OUT=lab/scripts/out/hostile-soak-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$OUT"
TARGET=39891 SERVER=39892 ENTRY=39893
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

cat > "$OUT/bulk.py" <<'PY'
import socket, sys, time
port, until = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
done = short = 0
while time.monotonic() < until:
    got = 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            while time.monotonic() < until + 30:
                b = c.recv(1 << 16)
                if not b:
                    break
                got += len(b)
    except OSError as e:
        print(f"bulk error: {e}", flush=True)
    if got == 64 << 20:
        done += 1
    elif time.monotonic() < until:
        short += 1
        print(f"bulk short: {got} B", flush=True)
        time.sleep(1)
print(f"bulk: {done} downloads of 64 MiB complete, {short} short", flush=True)
PY

python3 lab/scripts/download-target.py "$TARGET" 2>"$OUT/target.log" &
sleep 0.5
"$BIN/kcpio-tunnel" server -l 127.0.0.1:$SERVER -t 127.0.0.1:$TARGET --nocomp \
    --quiet --snmpperiod 1 --log "$OUT/server.log" &
SP=$!
"$BIN/kcpio-tunnel" client -l 127.0.0.1:$ENTRY -r 127.0.0.1:$SERVER --nocomp \
    --quiet --snmpperiod 0 --log "$OUT/client.log" &
sleep 1

START=$(date +%s)
END=$((START + SECS))
python3 "$OUT/bulk.py" "$ENTRY" "$SECS" >"$OUT/bulk.out" 2>&1 &
BULK=$!
(
    i=0
    while [ "$(date +%s)" -lt "$END" ]; do
        case $((i % 3)) in
            0) args=(2000 500 "$HOLD" nocomp) ;;
            1) args=(20000 0 "$HOLD" nocomp) ;;
            2) args=(5000 500 "$HOLD" nocomp sessions=100) ;;
        esac
        timeout $((HOLD + 120)) "$BIN/attack" streams 127.0.0.1:$SERVER aes "${args[@]}" from=127.0.0.3 \
            >>"$OUT/attack.out" 2>&1 || echo "{\"attack\":\"failed\",\"rc\":$?}" >>"$OUT/attack.out"
        i=$((i + 1))
    done
) &
ATTACK=$!

# The last stats line's figure after WORDS (empty when there is none yet).
stat_after() { { grep -a 'limits: streams' "$OUT/server.log" 2>/dev/null || true; } | tail -1 | sed -n "s/.*$1 \([0-9]*\).*/\1/p"; }
sample() {
    local t=$1
    local rss fds thr str bud
    rss=$(awk '/VmRSS/{print int($2 / 1024)}' /proc/$SP/status)
    thr=$(awk '/Threads/{print $2}' /proc/$SP/status)
    fds=$(ls /proc/$SP/fd | wc -l)
    str=$(stat_after 'limits: streams')
    bud=$(stat_after 'buffer budget')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$rss" "$fds" "$thr" "${str:--}" "${bud:--}" | tee -a "$OUT/samples.tsv"
}
printf 't_s\trss_mb\tfds\tthreads\tstreams\tbudget_b\n' | tee "$OUT/samples.tsv"
while [ "$(date +%s)" -lt "$END" ]; do
    kill -0 $SP || { echo "SERVER DIED" | tee -a "$OUT/samples.tsv"; exit 1; }
    sample $(( $(date +%s) - START ))
    sleep "$SAMPLE"
done
wait "$BULK" || true
kill "$ATTACK" 2>/dev/null || true
pkill -P "$ATTACK" 2>/dev/null || true
wait "$ATTACK" 2>/dev/null || true
sleep "$SETTLE"
sample "after+${SETTLE}s"

python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(f"{out}/samples.tsv")][1:]
during = [r for r in rows if not r[0].startswith("after")]
after = [r for r in rows if r[0].startswith("after")]
rss = [int(r[1]) for r in during]
third = max(1, len(rss) // 3)
print(f"samples: {len(during)} during, peak RSS {max(rss)} MB, "
      f"median RSS first third {statistics.median(rss[:third])} MB, last third {statistics.median(rss[-third:])} MB")
print(f"peak descriptors {max(int(r[2]) for r in during)}, peak threads {max(int(r[3]) for r in during)}, "
      f"peak streams {max(int(r[4]) for r in during if r[4] != '-')}")
if after:
    a = after[-1]
    print(f"after the attackers left ({a[0]}): RSS {a[1]} MB, descriptors {a[2]}, streams {a[4]}, budget {a[5]} B")
attacks = kinds = 0
complete = {}
for line in open(f"{out}/attack.out"):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if j.get("attack") != "streams":
        print("attack run failed:", line.strip())
        continue
    key = f"{j['n']}/{j['pace']}/{j['sessions']}"
    ok = j["legit_bytes"] == 64 << 20
    c = complete.setdefault(key, [0, 0])
    c[0] += ok
    c[1] += 1
for k, (ok, n) in complete.items():
    print(f"attack n/pace/sessions {k}: another client's 64 MiB complete in {ok} of {n} runs")
PY
cat "$OUT/bulk.out"
echo "kept in $OUT"
