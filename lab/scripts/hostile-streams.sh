#!/usr/bin/env bash
# Stream floods and slow readers, kcpio-tunnel beside kcptun-server on loopback: `attack streams` (one session opens N
# smux streams, PACE per 0.6 s or all at once with 0, never reads them, then
# a second session downloads) against kcptun-server and `kcpio-tunnel
# server`, each forwarding to a target that sends 64 MiB per connection.
# Prints each server's peak RSS and descriptors beside the attack's JSON
# line (streams the server ended, the second session's bytes), and whether
# the second download was complete.
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
for name in kcptun kcpio; do
    if [ "$name" = kcptun ]; then SERVER=(kcptun-server); else SERVER=("$BIN/kcpio-tunnel" server); fi
    "${SERVER[@]}" -l 127.0.0.1:39878 -t 127.0.0.1:39877 --quiet --nocomp >"$TMP/$name.log" 2>&1 &
    SP=$!
    sleep 1
    aborts=$(nstat -az TcpExtTCPAbortOnMemory 2>/dev/null | awk '/TcpExt/{print $2}')
    "$BIN/attack" streams 127.0.0.1:39878 aes "$N" "$PACE" "$HOLD" nocomp "sessions=$SESSIONS" >"$TMP/$name.out" 2>&1 &
    AP=$!
    peak=0; peakfd=0
    while kill -0 "$AP" 2>/dev/null; do
        r=$(awk '/VmRSS/{print $2}' "/proc/$SP/status" 2>/dev/null || echo 0)
        f=$(ls "/proc/$SP/fd" 2>/dev/null | wc -l)
        [ "${r:-0}" -gt "$peak" ] && peak=$r
        [ "$f" -gt "$peakfd" ] && peakfd=$f
        sleep 0.5
    done
    aborts=$(( $(nstat -az TcpExtTCPAbortOnMemory 2>/dev/null | awk '/TcpExt/{print $2}') - ${aborts:-0} ))
    echo "$name: peak RSS $((peak / 1024)) MB, peak descriptors $peakfd, TCP connections the kernel aborted for memory: $aborts"
    cat "$TMP/$name.out"
    grep -q '"legit_bytes":67108864,' "$TMP/$name.out" && echo "$name: download complete" || echo "$name: download SHORT"
    kill "$SP" 2>/dev/null || true
    wait "$SP" 2>/dev/null || true
done
