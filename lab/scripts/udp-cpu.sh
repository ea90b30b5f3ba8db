#!/usr/bin/env bash
# CPU per delivered GB of UDP carriers on loopback (issue 27): lab's udpprobe
# sends a paced load through each carrier to a probe receiver, and each
# carrier end's utime+stime over the run is divided by the bytes delivered.
#
#   lab/scripts/udp-cpu.sh [--reps N] [--rate PPS] [--size B] [--secs S] [--count] NAME=BIN... [speeder] [floor] [floor-tokio]
#
#   NAME=BIN  a kcpio-tunnel binary (client and server --udp, kcptun's
#             default flags with --mtu 1400, as field.sh's UDP rows)
#   speeder   UDPspeeder -f20:10 --mode 0 (as published; SPEEDER_BIN=/path/to/speederv2,
#             never part of this repository)
#   floor     two lab udpfloor forwarders in a row (no coding, no cipher, a
#             blocking receive and a send per datagram): the least a relay
#             that wakes per datagram pays on this machine
#   floor-tokio  the same two forwarders, each one task on a current-thread
#             tokio runtime (udpfloor --tokio: epoll, as kcpio-tunnel --udp):
#             the least a relay built on tokio pays
#
# --count: each end also runs under `perf stat` (root; syscall tracepoints)
#   for the run, and the script prints per delivered datagram, per end: context
#   switches, futex and write (tokio's eventfd unpark) calls, epoll_wait,
#   recvmmsg/recvmsg/recvfrom, sendmmsg/sendmsg/sendto. The tracepoints cost
#   CPU: take CPU figures from runs without --count.
#
# Defaults: 3 reps, the bulk probe's 800 datagrams/s of 1200 B, 20 s. The
# carriers run one after another in every rep (order rotated per rep), so a
# ratio compares runs of the same minutes. Prints one line per run and, per
# carrier, the medians of client, server and both ends' CPU-s per delivered
# GB, and the median over reps of each carrier's ratio to the first carrier
# of that rep. UDPSPEEDER_ARGS / KCPIO_ARGS add flags to both ends.
#
# Loopback has no loss: kcpio's adaptive FEC sends little parity there while
# UDPspeeder always sends 20:10, so the ratio to UDPspeeder here is not the
# field's (field.sh --udp-probe has the lossy path); it compares builds of
# kcpio, and shows where the per-datagram cost is.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

REPS=3 RATE=800 SIZE=1200 SECS=20 COUNT=0
CARRIERS=()
while [ $# -gt 0 ]; do
	case $1 in
	--reps) REPS=$2; shift ;;
	--rate) RATE=$2; shift ;;
	--size) SIZE=$2; shift ;;
	--secs) SECS=$2; shift ;;
	--count) COUNT=1 ;;
	-h | --help) sed -n '2,33p' "$0"; exit 0 ;;
	*=*) CARRIERS+=("$1") ;;
	speeder) CARRIERS+=("speeder=${SPEEDER_BIN:-$(command -v speederv2 || true)}") ;;
	floor) CARRIERS+=("floor=") ;;
	floor-tokio) CARRIERS+=("floor-tokio=") ;;
	*) die "unknown argument $1" ;;
	esac
	shift
done
[ ${#CARRIERS[@]} -gt 0 ] || die "name at least one carrier (NAME=BIN or speeder)"
[ "$REPS" -ge 1 ] && [ "$REPS" -le 20 ] || die "--reps takes 1..20"
PROBE=${UDPPROBE_BIN:-}
if [ -z "$PROBE" ]; then build_example udpprobe || die "udpprobe did not build"; PROBE=$EXAMPLE_BIN; fi
FLOOR=${UDPFLOOR_BIN:-}
for i in "${!CARRIERS[@]}"; do
	if [ "${CARRIERS[$i]}" = floor= ] || [ "${CARRIERS[$i]}" = floor-tokio= ]; then
		if [ -z "$FLOOR" ]; then build_example udpfloor || die "udpfloor did not build"; FLOOR=$EXAMPLE_BIN; fi
		CARRIERS[i]="${CARRIERS[$i]}$FLOOR"
	fi
done
for c in "${CARRIERS[@]}"; do [ -x "${c#*=}" ] || die "${c%%=*}: ${c#*=} is not an executable"; done
EVENTS=context-switches
for s in futex write epoll_wait epoll_pwait recvmmsg recvmsg recvfrom sendmmsg sendmsg sendto; do EVENTS+=",syscalls:sys_enter_$s"; done
if [ "$COUNT" = 1 ]; then
	command -v perf >/dev/null || die "--count needs perf"
	[ "$(perf list 'syscalls:sys_enter_futex' 2>/dev/null | grep -c sys_enter_futex)" -gt 0 ] \
		|| die "--count: perf has no syscall tracepoints here (run as root)"
fi

RUN="$OUT/udp-cpu-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"
RES="$RUN/runs.tsv"
log "results in $RUN; $RATE datagrams/s of $SIZE B for $SECS s, $REPS reps; load $(cut -d' ' -f1-3 /proc/loadavg)"
# Loopback ports of this script only.
TGT=39000 SRVP=39001 CLIP=39011

cpu_s() { python3 -c 'import sys; print(int(sys.argv[1])/int(sys.argv[2]))' "$(cpu_ticks "$1" 2>/dev/null || echo 0)" "$CLK_TCK"; }

# one_run REP NAME BIN: appends "rep name client_s server_s delivered_bytes lost load" to RES.
one_run() {
	local rep=$1 name=$2 bin=$3 f="$RUN/$1-$2" sp cp rp
	# shellcheck disable=SC2206
	if [ "$name" = floor ] || [ "$name" = floor-tokio ]; then
		local how=()
		[ "$name" = floor-tokio ] && how=(--tokio)
		"$bin" --listen "127.0.0.1:$SRVP" --to "127.0.0.1:$TGT" --secs "$((${SECS%.*} + 60))" "${how[@]}" >"$f.srv" 2>&1 &
		sp=$!; CHILDREN+=("$sp")
		"$bin" --listen "127.0.0.1:$CLIP" --to "127.0.0.1:$SRVP" --secs "$((${SECS%.*} + 60))" "${how[@]}" >"$f.cli" 2>&1 &
		cp=$!; CHILDREN+=("$cp")
		wait_line "$f.cli" 'listening on' 10 >/dev/null || die "floor did not start: $(tail -c 300 "$f.cli")"
	elif [ "$name" = speeder ]; then
		local extra=(${UDPSPEEDER_ARGS:-})
		"$bin" -s -l "127.0.0.1:$SRVP" -r "127.0.0.1:$TGT" -f20:10 --mode 0 -k passwd "${extra[@]}" >"$f.srv" 2>&1 &
		sp=$!; CHILDREN+=("$sp")
		"$bin" -c -l "127.0.0.1:$CLIP" -r "127.0.0.1:$SRVP" -f20:10 --mode 0 -k passwd "${extra[@]}" >"$f.cli" 2>&1 &
		cp=$!; CHILDREN+=("$cp")
	else
		local extra=(${KCPIO_ARGS:-})
		"$bin" server --udp -l "127.0.0.1:$SRVP" -t "127.0.0.1:$TGT" --mtu 1400 "${extra[@]}" >"$f.srv" 2>&1 &
		sp=$!; CHILDREN+=("$sp")
		# Every socket of the server's SO_REUSEPORT group is bound once it
		# says so: a client whose handshake reached the group's first socket
		# before the second was bound has its later packets steered to the
		# second, which (migration off) does not know the session, and the
		# session dies (dead_link) 10 s later.
		wait_line "$f.srv" 'listening on' 10 >/dev/null || die "$name: the server did not start: $(tail -c 300 "$f.srv")"
		"$bin" client --udp -l "127.0.0.1:$CLIP" -r "127.0.0.1:$SRVP" --mtu 1400 "${extra[@]}" >"$f.cli" 2>&1 &
		cp=$!; CHILDREN+=("$cp")
		wait_line "$f.cli" 'set MTU = [0-9]+' 10 >/dev/null || die "$name: no session: $(tail -c 300 "$f.cli")"
	fi
	sleep 1
	"$PROBE" recv --listen "127.0.0.1:$TGT" --secs "$((${SECS%.*} + 30))" --idle 3 --json >"$f.recv" 2>&1 &
	rp=$!; CHILDREN+=("$rp")
	sleep 0.3
	local c0 s0 c1 s1 la pc=() q
	la=$(cut -d' ' -f1 /proc/loadavg)
	if [ "$COUNT" = 1 ]; then
		for q in "cli:$cp" "srv:$sp"; do
			perf stat -x, -e "$EVENTS" -p "${q#*:}" -o "$f.${q%%:*}.perf" 2>/dev/null &
			pc+=($!); CHILDREN+=($!)
		done
		sleep 0.3
	fi
	c0=$(cpu_s "$cp"); s0=$(cpu_s "$sp")
	"$PROBE" send --to "127.0.0.1:$CLIP" --rate "$RATE" --size "$SIZE" --secs "$SECS" --json >"$f.send" 2>&1 || true
	wait "$rp" || true
	forget "$rp"
	c1=$(cpu_s "$cp"); s1=$(cpu_s "$sp")
	for q in "${pc[@]}"; do
		kill -INT "$q" 2>/dev/null || true
		wait "$q" 2>/dev/null || true
		forget "$q"
	done
	stop "$cp"; stop "$sp"
	python3 - "$f" "$rep" "$name" "$c0" "$c1" "$s0" "$s1" "$la" >>"$RES" <<'PY'
import json, sys
f, rep, name, c0, c1, s0, s1, la = sys.argv[1:]
v = json.loads(open(f + ".recv").read().strip().splitlines()[-1])
print(rep, name, float(c1) - float(c0), float(s1) - float(s0), v["bytes"], v["lost"], la, sep="\t")
PY
	tail -1 "$RES" | awk -v r="$RATE" '{ printf "[rep %s] %-10s client %.3f s, server %.3f s; %d B delivered, %d lost; %.1f + %.1f CPU-s/GB (load %s)\n", $1, $2, $3, $4, $5, $6, $3/$5*1e9, $4/$5*1e9, $7 }' >&2
	if [ "$COUNT" = 1 ]; then
		# Per delivered datagram: the receiver's bytes over --size.
		python3 - "$f" "$SIZE" "$EVENTS" >&2 <<'PY'
import json, sys
f, size, events = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
n = json.loads(open(f + ".recv").read().strip().splitlines()[-1])["bytes"] / size
def counts(end):
    c = {}
    for line in open(f"{f}.{end}.perf"):
        p = line.strip().split(",")
        if len(p) > 2 and p[2] in events:
            try:
                c[p[2]] = float(p[0])
            except ValueError:
                pass
    return c
cli, srv = counts("cli"), counts("srv")
print(f"    per delivered datagram ({n:.0f}):   client   server")
for e in events:
    a, b = cli.get(e), srv.get(e)
    if not a and not b:
        continue
    print(f"    {e.removeprefix('syscalls:sys_enter_'):<28} {(a or 0) / max(n, 1):8.3f} {(b or 0) / max(n, 1):8.3f}")
PY
	fi
}

N=${#CARRIERS[@]}
for rep in $(seq "$REPS"); do
	for i in $(seq 0 $((N - 1))); do
		c=${CARRIERS[$(((i + rep - 1) % N))]}
		one_run "$rep" "${c%%=*}" "${c#*=}"
	done
done

python3 - "$RES" "${CARRIERS[0]%%=*}" <<'PY'
import statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
first = sys.argv[2]
by = {}
for rep, name, c, s, b, lost, la in rows:
    c, s, b = float(c), float(s), float(b)
    if b <= 0:
        continue
    by.setdefault(name, {})[rep] = (c / b * 1e9, s / b * 1e9, (c + s) / b * 1e9, int(lost), la)
print("| carrier | runs | client CPU-s/GB | server | both (median; runs) | ratio to %s (median of per-rep) | lost | load |" % first)
print("|---|---:|---:|---:|---|---:|---:|---|")
for name, reps in by.items():
    v = list(reps.values())
    ratios = [reps[r][2] / by[first][r][2] for r in reps if r in by.get(first, {})]
    print(f"| {name} | {len(v)} | {st.median(x[0] for x in v):.2f} | {st.median(x[1] for x in v):.2f} "
          f"| {st.median(x[2] for x in v):.2f} ({', '.join(f'{x[2]:.1f}' for x in v)}) "
          f"| {st.median(ratios):.2f} | {sum(x[3] for x in v)} | {', '.join(x[4] for x in v)} |")
PY
