#!/usr/bin/env bash
# The hostile-peer attacks (lab/src/bin/attack.rs) against a kcpio and a kcp-go
# v5.6.72 echo server (lab/src/bin/peer.rs, testkit/interop/kcpgo-peer), side by side,
# on loopback. Prints one JSON line per attack and server, and the server's
# peak resident memory (VmHWM) after the flood.
#
#   lab/scripts/hostile-vs-kcpgo.sh [--only reflect,replay,takeover,flood,late,capflood]
#                               [--flood-secs N] [--runs N] [--late-at S,S]
#
#   reflect   one 1,400-byte request from an address that never answers, per
#             preset (crypto null, 11 s): bytes sent back per byte received
#   replay    one captured aes-128 opener replayed from 20 addresses: how
#             many replayers got an answer (sessions opened by replay)
#   takeover  forged datagrams (another conv at sn 0, no opener) from a live
#             session's address: does the session survive
#   flood     forged openers (aes-128) from fresh source addresses for N s
#             (default 5), then a real kcpio client connects and echoes
#             during the flood: its time, and the server's peak memory
#   late      a client echoes once and falls silent; each server ends the
#             session after 2 s without input (--idle 2s, as its echo server
#             does); then the conversation's late datagrams arrive from the
#             same address at +3 s (the client writes again and retransmits)
#             and +62 s (those datagrams again, captured) after that end
#             (--late-at, aes-128): sessions opened and bytes sent back
#   capflood  the flood (aes-128, --flood-secs) against kcpio with its
#             default session cap (4,096; --default-cap) and kcp-go (its
#             listener has no cap): the real client's time to its echo and
#             the server's peak memory, --runs N (default 5) runs per server
#             interleaved (the order alternates), each run and the medians
#   timing    (only with KCPIO_PEER_BEFORE=/path/to/an older peer binary)
#             a kcp-go client and a kcpio client each echo 1 KiB through a
#             fresh session to the older and to this kcpio echo server,
#             20 times interleaved: median time from dial to verified echo
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"
ONLY="reflect,replay,takeover,flood,late,capflood,timing"
FLOOD_SECS=5
RUNS=5
LATE_AT=3,62
while [ $# -gt 0 ]; do
	case $1 in
	--only) ONLY=$2; shift ;;
	--flood-secs) FLOOD_SECS=$2; shift ;;
	--runs) RUNS=$2; shift ;;
	--late-at) LATE_AT=$2; shift ;;
	-h | --help) sed -n '2,20p' "$0"; exit 0 ;;
	*) die "unknown argument $1" ;;
	esac
	shift
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }

start_run hostile
build_go
build_rust
build_example attack || die "the attack tool does not build"
ATTACK=$EXAMPLE_BIN
[ -n "$KCPIO_PEER" ] || die "the kcpio peer does not build"

start() { # IMPL FILE FLAGS... -> SRV PORT
	local b; b=$(peer_bin "$1")
	local f=$2; shift 2
	"$b" echo-server --addr 127.0.0.1:0 --idle 60s "$@" >"$f.srv" 2>&1 &
	SRV=$!; CHILDREN+=("$SRV")
	PORT=$(port_of "$(wait_line "$f.srv" 'listening on' 10)")
}
hwm_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
median() { python3 -c 'import sys,statistics; v=[float(x) for x in sys.argv[1:]]; print("%.1f [%.1f-%.1f]" % (statistics.median(v), min(v), max(v)))' "$@"; }

if want timing && [ -n "${KCPIO_PEER_BEFORE:-}" ]; then
	declare -A T
	"$KCPIO_PEER_BEFORE" echo-server --addr 127.0.0.1:0 >"$RUN/timing-before.srv" 2>&1 &
	B=$!; CHILDREN+=("$B"); BP=$(port_of "$(wait_line "$RUN/timing-before.srv" 'listening on' 10)")
	"$KCPIO_PEER" echo-server --addr 127.0.0.1:0 >"$RUN/timing-after.srv" 2>&1 &
	A=$!; CHILDREN+=("$A"); AP=$(port_of "$(wait_line "$RUN/timing-after.srv" 'listening on' 10)")
	for i in $(seq 20); do
		for side in before after; do
			port=$BP; [ "$side" = after ] && port=$AP
			for cl in kcp-go kcpio; do
				ms=$("$(peer_bin "$cl")" client --addr "127.0.0.1:$port" --bytes 1024 --chunk 1024 --json | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["elapsed_ms"])')
				T[$side-$cl]+="$ms "
			done
		done
	done
	stop "$A"; stop "$B"
	for cl in kcp-go kcpio; do
		echo "timing $cl client, 1 KiB echo ms, median [min-max]: before $(median ${T[before-$cl]}) after $(median ${T[after-$cl]})"
	done
fi

for impl in kcp-go kcpio; do
	if want reflect; then
		presets=(default normal fast fast2 fast3)
		[ "$impl" = kcpio ] && presets+=(lowlat)
		pids=()
		for p in "${presets[@]}"; do
			start "$impl" "$RUN/reflect-$impl-$p" --nodelay "$p" --crypt null
			"$ATTACK" reflect "127.0.0.1:$PORT" null "$p" 11 >"$RUN/reflect-$impl-$p.json" &
			pids+=("$!:$SRV")
		done
		for ps in "${pids[@]}"; do
			wait "${ps%%:*}"; stop "${ps##*:}"
		done
		for p in "${presets[@]}"; do
			echo "$impl $(cat "$RUN/reflect-$impl-$p.json")"
		done
	fi
	if want replay; then
		start "$impl" "$RUN/replay-$impl" --crypt aes-128
		r=$("$ATTACK" replay "127.0.0.1:$PORT" aes-128 20)
		sleep 0.5
		opened=$(grep -c 'session open' "$RUN/replay-$impl.srv" || true)
		stop "$SRV"
		echo "$impl $r sessions_opened=$opened"
	fi
	if want takeover; then
		start "$impl" "$RUN/takeover-$impl" --crypt null
		r=$("$ATTACK" takeover "127.0.0.1:$PORT")
		stop "$SRV"
		echo "$impl $r"
	fi
	if want flood; then
		start "$impl" "$RUN/flood-$impl" --crypt aes-128 --quiet
		base=$(rss_kb "$SRV")
		r=$("$ATTACK" flood "127.0.0.1:$PORT" aes-128 "$FLOOD_SECS")
		peak=$(hwm_kb "$SRV")
		stop "$SRV"
		echo "$impl $r rss_before_kb=$base peak_kb=$peak"
	fi
done

if want late; then
	# Both servers at once: the run takes the last point plus a few seconds.
	echo "late: load before $(load)"
	pids=()
	for impl in kcp-go kcpio; do
		start "$impl" "$RUN/late-$impl" --crypt aes-128 --idle 2s
		"$ATTACK" late "127.0.0.1:$PORT" aes-128 2 "$LATE_AT" "$RUN/late-$impl.srv" >"$RUN/late-$impl.json" &
		pids+=("$!:$SRV")
	done
	for ps in "${pids[@]}"; do
		wait "${ps%%:*}"; stop "${ps##*:}"
	done
	for impl in kcp-go kcpio; do
		echo "$impl $(cat "$RUN/late-$impl.json")"
	done
	echo "late: load after $(load)"
fi

if want capflood; then
	declare -A MS PEAK
	for run in $(seq "$RUNS"); do
		order=(kcp-go kcpio)
		[ $((run % 2)) -eq 0 ] && order=(kcpio kcp-go)
		for impl in "${order[@]}"; do
			cap=(); [ "$impl" = kcpio ] && cap=(--default-cap)
			start "$impl" "$RUN/capflood-$impl-$run" --crypt aes-128 --quiet "${cap[@]}"
			l=$(load)
			r=$("$ATTACK" flood "127.0.0.1:$PORT" aes-128 "$FLOOD_SECS")
			peak=$(hwm_kb "$SRV")
			stop "$SRV"
			echo "capflood run $run $impl $r peak_kb=$peak load=$l"
			MS[$impl]+="$(sed -nE 's/.*"client_ms":([0-9.]+).*/\1/p' <<<"$r") "
			PEAK[$impl]+="$((peak / 1024)) "
		done
	done
	for impl in kcp-go kcpio; do
		echo "capflood $impl: client ms median [min-max] $(median ${MS[$impl]}); peak MiB $(median ${PEAK[$impl]})"
	done
fi
