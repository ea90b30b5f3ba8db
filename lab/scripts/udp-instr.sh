#!/usr/bin/env bash
# Instructions and cache misses per delivered datagram, per end, of UDP
# carriers on loopback (issue 27): each end runs under valgrind's callgrind
# (cache simulation on), a paced udpprobe load goes through the carrier, and
# the counts of that window (zeroed at its start, dumped at its end through
# callgrind_control) less an idle window of the same length (no traffic) are
# divided by the datagrams delivered, split by area of the code.
#
#   lab/scripts/udp-instr.sh [--rate PPS] [--size B] [--secs S] NAME=BIN... [floor-tokio]
#
#   NAME=BIN     a kcpio-tunnel binary (client and server --udp, --mtu 1400,
#                kcptun's defaults otherwise, as udp-cpu.sh)
#   floor-tokio  two lab udpfloor --tokio forwarders (UDPFLOOR_BIN)
#
# Defaults: 150 datagrams/s of 1200 B for 20 s (valgrind keeps up with this
# on a shared core; the script prints the loss so a run that fell behind is
# seen). Counts are deterministic up to the timing of wake-ups: unlike CPU
# time on this box they do not swing with the load. The areas come from each
# function's symbol (inlined code counts in its caller):
# tools/callgrind-areas.py. Needs valgrind (callgrind_control, vgdb).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

RATE=150 SIZE=1200 SECS=20
CARRIERS=()
while [ $# -gt 0 ]; do
	case $1 in
	--rate) RATE=$2; shift ;;
	--size) SIZE=$2; shift ;;
	--secs) SECS=$2; shift ;;
	-h | --help) sed -n '2,21p' "$0"; exit 0 ;;
	*=*) CARRIERS+=("$1") ;;
	floor-tokio) CARRIERS+=("floor-tokio=${UDPFLOOR_BIN:-}") ;;
	*) die "unknown argument $1" ;;
	esac
	shift
done
[ ${#CARRIERS[@]} -gt 0 ] || die "name at least one carrier"
command -v callgrind_control >/dev/null || die "needs valgrind's callgrind_control"
PROBE=${UDPPROBE_BIN:-}
if [ -z "$PROBE" ]; then build_example udpprobe || die "udpprobe did not build"; PROBE=$EXAMPLE_BIN; fi
for i in "${!CARRIERS[@]}"; do
	if [ "${CARRIERS[$i]}" = floor-tokio= ]; then
		build_example udpfloor || die "udpfloor did not build"
		CARRIERS[i]="floor-tokio=$EXAMPLE_BIN"
	fi
done
RUN="$OUT/udp-instr-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"
log "results in $RUN; $RATE datagrams/s of $SIZE B for $SECS s; load $(cut -d' ' -f1-3 /proc/loadavg)"
TGT=39100 SRVP=39101 CLIP=39111
VG=(valgrind --tool=callgrind --cache-sim=yes --dump-instr=no --collect-jumps=no --vgdb=yes)

# zero PIDS / dump PIDS: each valgrind'd end's counters zeroed, or written
# to its next numbered file (the idle window's is .1, the loaded one's .2).
zero() { local p; for p in "$@"; do callgrind_control -z "$p" >/dev/null; done; }
dump() { local p; for p in "$@"; do callgrind_control -d "$p" >/dev/null; done; }

one() {
	local name=$1 bin=$2 f="$RUN/$1" sp cp rp
	if [ "$name" = floor-tokio ]; then
		"${VG[@]}" --callgrind-out-file="$f.srv.%p" "$bin" --listen "127.0.0.1:$SRVP" --to "127.0.0.1:$TGT" --secs 600 --tokio >"$f.srv" 2>&1 &
		sp=$!; CHILDREN+=("$sp")
		"${VG[@]}" --callgrind-out-file="$f.cli.%p" "$bin" --listen "127.0.0.1:$CLIP" --to "127.0.0.1:$SRVP" --secs 600 --tokio >"$f.cli" 2>&1 &
		cp=$!; CHILDREN+=("$cp")
		wait_line "$f.cli" 'listening on' 60 >/dev/null || die "floor did not start: $(tail -c 300 "$f.cli")"
	else
		"${VG[@]}" --callgrind-out-file="$f.srv.%p" "$bin" server --udp -l "127.0.0.1:$SRVP" -t "127.0.0.1:$TGT" --mtu 1400 >"$f.srv" 2>&1 &
		sp=$!; CHILDREN+=("$sp")
		wait_line "$f.srv" 'listening on' 60 >/dev/null || die "$name: the server did not start: $(tail -c 300 "$f.srv")"
		"${VG[@]}" --callgrind-out-file="$f.cli.%p" "$bin" client --udp -l "127.0.0.1:$CLIP" -r "127.0.0.1:$SRVP" --mtu 1400 >"$f.cli" 2>&1 &
		cp=$!; CHILDREN+=("$cp")
		wait_line "$f.cli" 'set MTU = [0-9]+' 60 >/dev/null || die "$name: no session: $(tail -c 300 "$f.cli")"
	fi
	sleep 3
	# A warm-up run opens the flow and fills the caches of both ends.
	"$PROBE" recv --listen "127.0.0.1:$TGT" --secs 30 --idle 2 --json >"$f.warm" 2>&1 &
	rp=$!; CHILDREN+=("$rp")
	sleep 0.3
	"$PROBE" send --to "127.0.0.1:$CLIP" --rate "$RATE" --size "$SIZE" --secs 2 --json >/dev/null 2>&1 || true
	wait "$rp" || true; forget "$rp"
	# Idle window: no traffic.
	zero "$cp" "$sp"; sleep "$((SECS + 2))"; dump "$cp" "$sp"
	# Loaded window: the same length.
	"$PROBE" recv --listen "127.0.0.1:$TGT" --secs "$((SECS + 30))" --idle 2 --json >"$f.recv" 2>&1 &
	rp=$!; CHILDREN+=("$rp")
	sleep 0.3
	zero "$cp" "$sp"
	"$PROBE" send --to "127.0.0.1:$CLIP" --rate "$RATE" --size "$SIZE" --secs "$SECS" --json >"$f.send" 2>&1 || true
	sleep 2
	dump "$cp" "$sp"
	wait "$rp" || true; forget "$rp"
	stop "$cp"; stop "$sp"
	python3 "$LAB/tools/callgrind-areas.py" "$name" "$SIZE" "$f.recv" \
		"$f.cli.$cp.1" "$f.cli.$cp.2" "$f.srv.$sp.1" "$f.srv.$sp.2" | tee -a "$RUN/table.md"
}

for c in "${CARRIERS[@]}"; do one "${c%%=*}" "${c#*=}"; done
log "load $(cut -d' ' -f1-3 /proc/loadavg); tables in $RUN/table.md"
