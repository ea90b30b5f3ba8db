#!/usr/bin/env bash
# Stream floods and slow readers, kcpio-tunnel beside kcptun-server on loopback: `attack streams` (one session opens N
# smux streams, PACE per 0.6 s or all at once with 0, never reads them, then
# a second session downloads) against kcptun-server and `kcpio-tunnel
# server`, each forwarding to a target that sends 64 MiB per connection.
# The attacker binds 127.0.0.3; another client downloads 64 MiB from
# 127.0.0.2 while the attack holds, and again 3 s after the attacker left (a
# FIN on each of its streams). Prints each server's RSS and descriptors
# before, at the peak under attack, 5 s after the attacker left and SETTLE s
# (15; 75 shows the sessions' end: an attacker's sessions live until smux's
# keepalive timeout, 30-60 s) after the attack tool ended, when the
# descriptors and the memory came back, beside the attack's JSON line (streams
# the server ended, both downloads' bytes), and whether each download was
# complete.
#
# The target's send buffer is pinned at 64 KiB a connection: thousands of
# stalled connections with autotuned buffers (1.1 MB each measured) take
# the host past tcp_mem, and the kernel then resets a connection closed with
# bytes unsent (TcpExtTCPAbortOnMemory, "TCP: out of memory" in dmesg): the
# download ended 32 KiB short in a third of the runs, with either server.
# The kernel's count is printed per server; a run where it moved measured
# the host, not the tunnel.
#
#   lab/scripts/hostile-streams.sh [N] [PACE] [HOLD] [SESSIONS]
#     2000 500 10: 2,000 slow readers;  20000 0 10: a stream-open flood;
#     10000 500 10 200: 200 sessions x 50 streams
#
# Needs kcptun (scripts/install-kcptun.sh) and python3. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-2000}
PACE=${2:-500}
HOLD=${3:-10}
SESSIONS=${4:-1}
SETTLE=${SETTLE:-15}
# KCPIO_BIN_DIR: take kcpio-tunnel and attack from there instead of building.
if [ -n "${KCPIO_BIN_DIR:-}" ]; then
    BIN=$KCPIO_BIN_DIR
else
    cargo build --release --quiet -p kcpio-tunnel -p kcpio-lab --bin kcpio-tunnel --bin attack
    BIN=${CARGO_TARGET_DIR:-target}/release
fi
command -v kcptun-server >/dev/null || { echo "kcptun missing: scripts/install-kcptun.sh" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" || true
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
python3 lab/scripts/download-target.py 39877 2>"$TMP/target.log" &
sleep 0.5
now_ms() { date +%s%3N; }
for name in kcptun kcpio; do
    if [ "$name" = kcptun ]; then SERVER=(kcptun-server); else SERVER=("$BIN/kcpio-tunnel" server); fi
    "${SERVER[@]}" -l 127.0.0.1:39878 -t 127.0.0.1:39877 --quiet --nocomp >"$TMP/$name.log" 2>&1 &
    SP=$!
    sleep 1
    base_rss=$(awk '/VmRSS/{print $2}' "/proc/$SP/status")
    base_fd=$(ls "/proc/$SP/fd" | wc -l)
    aborts=$(nstat -az TcpExtTCPAbortOnMemory 2>/dev/null | awk '/TcpExt/{print $2}')
    "$BIN/attack" streams 127.0.0.1:39878 aes "$N" "$PACE" "$HOLD" nocomp "sessions=$SESSIONS" from=127.0.0.3 >"$TMP/$name.out" 2>&1 &
    AP=$!
    # Samples (ms, RSS KiB, descriptors) while the attack runs and for
    # SETTLE s after it ends.
    : >"$TMP/$name.samples"
    settle_end=""
    while :; do
        if [ -z "$settle_end" ] && ! kill -0 "$AP" 2>/dev/null; then settle_end=$(( $(now_ms) + SETTLE * 1000 )); fi
        [ -n "$settle_end" ] && [ "$(now_ms)" -ge "$settle_end" ] && break
        r=$(awk '/VmRSS/{print $2}' "/proc/$SP/status" 2>/dev/null || echo 0)
        f=$(ls "/proc/$SP/fd" 2>/dev/null | wc -l)
        echo "$(now_ms) ${r:-0} $f" >>"$TMP/$name.samples"
        sleep 0.5
    done
    aborts=$(( $(nstat -az TcpExtTCPAbortOnMemory 2>/dev/null | awk '/TcpExt/{print $2}') - ${aborts:-0} ))
    cat "$TMP/$name.out"
    left=$(grep -o '"left_at_ms":[0-9]*' "$TMP/$name.out" | cut -d: -f2 || true)
    awk -v name="$name" -v left="${left:-0}" -v base_rss="$base_rss" -v base_fd="$base_fd" -v aborts="$aborts" '
        { t[NR] = $1; r[NR] = $2; f[NR] = $3
          if (left == 0 || $1 < left) { if ($2 > pr) pr = $2; if ($3 > pf) pf = $3 }
          if (left > 0 && $1 >= left + 5000 && !at5) { at5 = 1; r5 = $2; f5 = $3 }
          if (left > 0 && $1 >= left && tf == "" && $3 <= base_fd + 16) tf = ($1 - left) / 1000
          if (left > 0 && $1 >= left && tr == "" && $2 <= pr / 4) tr = ($1 - left) / 1000 }
        END {
          printf "%s: before %d MB / %d fds; peak under attack %d MB RSS / %d fds; 5 s after it left %s; at the end (%d s after) %d MB / %d fds; descriptors back (within 16 of before) after %s s, RSS under a quarter of its peak after %s s; TCP connections the kernel aborted for memory: %d\n",
            name, base_rss / 1024, base_fd, pr / 1024, pf,
            (at5 ? sprintf("%d MB / %d fds", r5 / 1024, f5) : "n/a"),
            (left > 0 ? (t[NR] - left) / 1000 : 0), r[NR] / 1024, f[NR],
            (tf == "" ? "never" : tf), (tr == "" ? "never" : tr), aborts
        }' "$TMP/$name.samples"
    grep -q '"legit_bytes":67108864,' "$TMP/$name.out" && echo "$name: download during the attack complete" || echo "$name: download during the attack SHORT"
    grep -q '"after_bytes":67108864,' "$TMP/$name.out" && echo "$name: download after the attack complete" || echo "$name: download after the attack SHORT"
    kill "$SP" 2>/dev/null || true
    wait "$SP" 2>/dev/null || true
done
