#!/usr/bin/env bash
# kcpio against kcp-go on this machine, side by side.
#
#   lab/scripts/vs-kcpgo.sh [--quick] [--reps N]
#       [--only sink,sink-aes,idle,idle-ka,echo1k,many,limits,bulk,echo-inproc]
#
# Builds the repository's Go peer (testkit/interop/kcpgo-peer) and
# `cargo build --release --example peer`, runs both with identical flags,
# N repetitions each (default 3, interleaved), and prints medians and
# kcpio/kcp-go ratios for:
#   sink      one session, sink, 256 MiB, windows 1024, fast3, crypto off:
#             MB/s, CPU-seconds per GB of the client and of the server;
#             both ends get --sockbuf 4194304 (--sockbuf N to change, 0 = OS
#             default): with the 208 KiB default the receiver's socket
#             overflows and kcp-go retransmits ~60% extra (30 MB/s here)
#   sink-aes  the same with aes-128 + FEC 10/3
#   idle      10,000 sessions opened to one listener (one 64 B echo each),
#             then held idle 30 s at interval 10 ms (fast3): the server's
#             CPU % over the hold and its resident memory per session, and
#             kcpio's client's bytes in + out per second during the hold
#   idle-ka   the same with kcpio's keepalive on (--keepalive 10s, idle
#             timeout 30 s) on both ends; kcpio only (kcp-go has none):
#             compare with the idle row
#   echo1k    1,000 sessions each echoing 64 messages of 64 B (ping-pong,
#             fast3): total time and CPU-seconds of client + server
#   many      16 sessions sinking 64 MiB each into one listener (aes-128,
#             windows 1024, fast3): aggregate MB/s, CPU-s per GB, and the
#             client's retransmitted segments (zero on a loss-free loopback
#             when the listener keeps up); kcpio only (kcp-go's peer stalls)
# And against the machine rather than kcp-go (same repetitions, interleaved):
#   limits    lab's udplimit: TCP, plain sendmmsg/recvmmsg and UDP GSO/GRO
#             moving the sink's bytes one way (1400-byte datagrams): MB/s and
#             the sender's and receiver's CPU-s per GB; the sink rows are
#             divided by them (client ~ sender, server ~ receiver); its
#             senders generate the sink's pattern and its receivers check it,
#             as the peers do
#   bulk      lab's bulk: 64 MiB one way with the default Config beside a
#             TcpStream in one process: MB/s and kcpio/TCP per run
#   echo-inproc  lab's echo_inproc: 1,000 sessions x 64 x 64 B ping-pong in
#             one process (2 runtime threads), kcpio and tokio_kcp 0.9.8 in
#             separate processes: total time and process CPU-seconds
# Client CPU comes from /usr/bin/time, server CPU and RSS from /proc/PID.
# --quick: 32 MiB sinks (and limits, bulk), 8 MiB per many-session sink,
# 1,000 idle sessions held 6 s, 200 echo sessions, one repetition. Loopback only; every child is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

REPS=3
SINK_BYTES=$((256 << 20))
IDLE_N=10000
IDLE_HOLD=30
ECHO_N=1000
ECHO_MSGS=64
ONLY="sink,sink-aes,idle,idle-ka,echo1k,many,limits,bulk,echo-inproc"
MANY_N=16
MANY_BYTES=$((64 << 20))
BULK_MIB=64
SOCKBUF=4194304
while [ $# -gt 0 ]; do
	case $1 in
	--quick) REPS=1; SINK_BYTES=$((32 << 20)); IDLE_N=1000; IDLE_HOLD=6; ECHO_N=200; MANY_BYTES=$((8 << 20)); BULK_MIB=32 ;;
	--reps) REPS=$2; shift ;;
	--only) ONLY=$2; shift ;;
	--sockbuf) SOCKBUF=$2; shift ;;
	--idle-sessions) IDLE_N=$2; shift ;;
	--idle-hold) IDLE_HOLD=$2; shift ;;
	-h | --help) sed -n '2,41p' "$0"; exit 0 ;;
	*) die "unknown argument $1" ;;
	esac
	shift
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }

start_run vs-kcpgo
build_go
build_rust
LAB_BINS=()
for b in udplimit bulk echo_inproc; do
	if build_example "$b"; then LAB_BINS+=("$b"); fi
done
has_bin() { [[ " ${LAB_BINS[*]} " == *" $1 "* ]]; }
LIMITS_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/udplimit"
BULK_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/bulk"
ECHO_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/echo_inproc"
IMPLS=(kcp-go)
[ -n "$KCPIO_PEER" ] && IMPLS+=(kcpio)
log "implementations: ${IMPLS[*]}; $REPS repetition(s); results in $RUN"

# Each client session has its own UDP socket: raise the fd limit for the idle test.
if want idle || want idle-ka; then
	need=$((IDLE_N + 200))
	if [ "$(ulimit -n)" -lt "$need" ]; then
		ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
	fi
	if [ "$(ulimit -n)" -lt "$need" ]; then
		loud "ulimit -n is $(ulimit -n) (hard $(ulimit -Hn)), below the $need the idle test needs: using $(($(ulimit -n) - 200)) sessions"
		IDLE_N=$(($(ulimit -n) - 200))
	fi
fi

secs() { python3 -c 'import sys; print(float(sys.argv[1]) / float(sys.argv[2]))' "$1" "$2"; }

start_server() { # IMPL MODE FILE FLAGS... -> SRV PORT
	local b; b=$(peer_bin "$1")
	local mode=$2 f=$3; shift 3
	"$b" "$mode" --addr 127.0.0.1:0 --quiet "$@" >"$f.srv" 2>&1 &
	SRV=$!; CHILDREN+=("$SRV")
	if ! PORT=$(port_of "$(wait_line "$f.srv" 'listening on' 10)") || [ -z "$PORT" ]; then
		log "  FAILED: $1 $mode did not start: $(head -c 300 "$f.srv" | tr '\n' ' ')"
		stop "$SRV"
		return 1
	fi
}

# sink TEST IMPL REP FLAGS...
sink() {
	local test=$1 impl=$2 rep=$3; shift 3
	local f="$RUN/$test-$impl-$rep" b; b=$(peer_bin "$impl")
	start_server "$impl" sink-server "$f" --idle 10s "$@" || return 0
	log "$test $impl #$rep"
	if ! /usr/bin/time -f '%U %S %M' -o "$f.time" "$b" client --addr "127.0.0.1:$PORT" --sink --bytes "$SINK_BYTES" \
		--timeout 600s --json "$@" >"$f.json" 2>"$f.err"; then
		log "  FAILED (see $f.json $f.err)"; stop "$SRV"; return 0
	fi
	local st; st=$(cpu_ticks "$SRV")
	stop "$SRV"
	local gb; gb=$(python3 -c "print($SINK_BYTES / 1e9)")
	record "$test" mbps "$impl" "$rep" "$(jget "$f.json" mb_per_s)"
	record "$test" cpu_gb_client "$impl" "$rep" "$(secs "$(timecpu "$f.time")" "$gb")"
	record "$test" cpu_gb_server "$impl" "$rep" "$(secs "$(secs "$st" "$CLK_TCK")" "$gb")"
	record "$test" cpu_gb_total "$impl" "$rep" "$(python3 -c "print(($(timecpu "$f.time")+$st/$CLK_TCK)/$gb)")"
}

# idle TEST IMPL REP FLAGS...
idle() {
	local test=$1 impl=$2 rep=$3; shift 3
	local f="$RUN/$test-$impl-$rep" b; b=$(peer_bin "$impl")
	local flags=(--nodelay fast3 "$@")
	start_server "$impl" echo-server "$f" --idle 600s "${flags[@]}" || return 0
	sleep 1
	local rss0; rss0=$(rss_kb "$SRV")
	log "idle $impl #$rep: opening $IDLE_N sessions, holding ${IDLE_HOLD}s"
	"$b" client --addr "127.0.0.1:$PORT" --parallel "$IDLE_N" --messages 1 --size 64 --hold "${IDLE_HOLD}s" \
		--timeout 300s --json --snmp "${flags[@]}" >"$f.json" 2>"$f.err" &
	local cli=$!; CHILDREN+=("$cli")
	if ! wait_line "$f.err" '^holding' 300 >/dev/null; then
		log "  FAILED: the client never started holding (see $f.err)"; stop "$cli"; stop "$SRV"; return 0
	fi
	local settle=2 window=$((IDLE_HOLD - 4))
	[ "$window" -lt 1 ] && window=1
	sleep "$settle"
	local t0 w0 t1 w1 rss1
	t0=$(cpu_ticks "$SRV"); w0=$(date +%s.%N)
	sleep "$window"
	t1=$(cpu_ticks "$SRV"); w1=$(date +%s.%N); rss1=$(rss_kb "$SRV")
	wait "$cli" || log "  client reported failure (see $f.json)"
	stop "$SRV"
	# sessions that completed their one echo: the ones the server really holds
	local live; live=$(jget "$f.json" received 2>/dev/null || echo 0)
	if [ "$live" -lt "$IDLE_N" ]; then
		loud "idle $impl #$rep: only $live of $IDLE_N sessions opened (see $f.json); per-session RSS is over $live"
	fi
	record "$test" sessions_open "$impl" "$rep" "$live"
	record "$test" server_cpu_pct "$impl" "$rep" "$(python3 -c "print(100*($t1-$t0)/$CLK_TCK/($w1-$w0))")"
	[ "$live" -gt 0 ] && record "$test" rss_kb_per_session "$impl" "$rep" "$(python3 -c "print(($rss1-$rss0)/$live)")"
	record "$test" open_s "$impl" "$rep" "$(python3 -c "print($(jget "$f.json" elapsed_ms)/1000)")"
	# The client's bytes in + out during the hold (kcpio's peer prints its
	# counters as the hold begins and at the end), per second of hold.
	local io; io=$(python3 -c '
import re, sys
lines = open(sys.argv[1]).read().splitlines()
def total(prefix):
    l = [x for x in lines if x.startswith(prefix)][-1]
    return int(re.search(r"\bOutBytes=(\d+)", l)[1]) + int(re.search(r"\bInBytes=(\d+)", l)[1])
print(total("snmp:") - total("hold-start snmp:"))' "$f.json" 2>/dev/null || true)
	if [ -n "$io" ]; then
		record "$test" bytes_per_s "$impl" "$rep" "$(python3 -c "print($io / $IDLE_HOLD)")"
	fi
}

# echo1k IMPL REP
echo1k() {
	local impl=$1 rep=$2 f="$RUN/echo1k-$impl-$2" b; b=$(peer_bin "$impl")
	local flags=(--nodelay fast3)
	start_server "$impl" echo-server "$f" --idle 60s "${flags[@]}" || return 0
	local s0; s0=$(cpu_ticks "$SRV")
	log "echo1k $impl #$rep: $ECHO_N sessions x $ECHO_MSGS x 64 B"
	if ! /usr/bin/time -f '%U %S %M' -o "$f.time" "$b" client --addr "127.0.0.1:$PORT" --parallel "$ECHO_N" \
		--messages "$ECHO_MSGS" --size 64 --timeout 120s --json "${flags[@]}" >"$f.json" 2>"$f.err"; then
		log "  FAILED (see $f.json $f.err)"; stop "$SRV"; return 0
	fi
	local s1; s1=$(cpu_ticks "$SRV")
	stop "$SRV"
	record echo1k total_s "$impl" "$rep" "$(python3 -c "print($(jget "$f.json" elapsed_ms)/1000)")"
	record echo1k cpu_s "$impl" "$rep" "$(python3 -c "print($(timecpu "$f.time") + ($s1-$s0)/$CLK_TCK)")"
}

# many IMPL REP: $MANY_N sessions sinking $MANY_BYTES each into one listener.
many() {
	local impl=$1 rep=$2 f="$RUN/many-$1-$2" b; b=$(peer_bin "$1")
	local flags=(--sndwnd 1024 --rcvwnd 1024 --nodelay fast3 --sockbuf "$SOCKBUF" --crypt aes-128)
	start_server "$impl" sink-server "$f" --idle 10s "${flags[@]}" || return 0
	log "many $impl #$rep: $MANY_N sessions x $((MANY_BYTES >> 20)) MiB into one listener"
	if ! /usr/bin/time -f '%U %S %M' -o "$f.time" "$b" client --addr "127.0.0.1:$PORT" --sink --parallel "$MANY_N" \
		--bytes "$MANY_BYTES" --timeout 600s --json --snmp "${flags[@]}" >"$f.json" 2>"$f.err"; then
		log "  FAILED (see $f.json $f.err)"; stop "$SRV"; return 0
	fi
	local st; st=$(cpu_ticks "$SRV")
	stop "$SRV"
	local gb; gb=$(python3 -c "print($MANY_N * $MANY_BYTES / 1e9)")
	record many mbps "$impl" "$rep" "$(jget "$f.json" mb_per_s)"
	record many cpu_gb_client "$impl" "$rep" "$(secs "$(timecpu "$f.time")" "$gb")"
	record many cpu_gb_server "$impl" "$rep" "$(secs "$(secs "$st" "$CLK_TCK")" "$gb")"
	local re; re=$(sed -nE 's/.*RetransSegs=([0-9]+).*/\1/p' "$f.json" | tail -1)
	[ -n "$re" ] && record many retrans "$impl" "$rep" "$re"
}

# limits REP: udplimit's three modes, one run each, into the sink's figures.
limits() {
	local rep=$1 f="$RUN/limits-$1"
	log "limits #$rep: tcp, sendmmsg, gso ($((SINK_BYTES >> 20)) MiB)"
	if ! "$LIMITS_BIN" --reps 1 --mib $((SINK_BYTES >> 20)) --sockbuf "$SOCKBUF" --json >"$f.json" 2>"$f.err"; then
		log "  FAILED (see $f.json $f.err)"; return 0
	fi
	python3 - "$f.json" "$rep" >>"$RES" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    r = json.loads(line)
    for metric, key in (("mbps", "mb_per_s"), ("cpu_gb_client", "cpu_gb_send"), ("cpu_gb_server", "cpu_gb_recv")):
        print(f"sink\t{metric}\t{r['mode']}\t{sys.argv[2]}\t{r[key]}")
    print(f"sink\tcpu_gb_total\t{r['mode']}\t{sys.argv[2]}\t{r['cpu_gb_send'] + r['cpu_gb_recv']}")
PY
}

# bulk REP: the default Config beside TCP, one run.
bulk() {
	local rep=$1 f="$RUN/bulk-$1"
	log "bulk #$rep: default Config, $BULK_MIB MiB, kcpio then TCP"
	if ! timeout 300 "$BULK_BIN" 1 "$BULK_MIB" >"$f.out" 2>"$f.err"; then
		log "  FAILED (see $f.out $f.err)"; return 0
	fi
	local k t
	read -r k t < <(awk '$1 == "1" && NF == 4 { print $2, $3 }' "$f.out")
	record bulk mbps kcpio "$rep" "$k"
	record bulk mbps tcp "$rep" "$t"
	record bulk ratio kcpio "$rep" "$(python3 -c "print($k / $t)")"
}

# echo_inproc IMPL REP
echo_inproc() {
	local impl=$1 rep=$2 f="$RUN/echo-inproc-$1-$2"
	log "echo-inproc $impl #$rep: $ECHO_N sessions x $ECHO_MSGS x 64 B in one process"
	if ! "$ECHO_BIN" --impl "$impl" --sessions "$ECHO_N" --messages "$ECHO_MSGS" --size 64 --threads 2 --json >"$f.json" 2>"$f.err"; then
		log "  FAILED (see $f.json $f.err)"; return 0
	fi
	record echo-inproc total_s "$impl" "$rep" "$(jget "$f.json" total_s)"
	record echo-inproc cpu_s "$impl" "$rep" "$(jget "$f.json" cpu_s)"
}

for rep in $(seq "$REPS"); do
	want limits && has_bin udplimit && limits "$rep"
	want bulk && has_bin bulk && bulk "$rep"
	if want echo-inproc && has_bin echo_inproc; then
		echo_inproc kcpio "$rep"
		echo_inproc tokio_kcp "$rep"
	fi
	for impl in "${IMPLS[@]}"; do
		want sink && sink sink "$impl" "$rep" --sndwnd 1024 --rcvwnd 1024 --nodelay fast3 --sockbuf "$SOCKBUF"
		want sink-aes && sink sink-aes "$impl" "$rep" --sndwnd 1024 --rcvwnd 1024 --nodelay fast3 --sockbuf "$SOCKBUF" \
			--crypt aes-128 --datashard 10 --parityshard 3
		want idle && idle idle "$impl" "$rep"
		[ "$impl" = kcpio ] && want idle-ka && idle idle-ka "$impl" "$rep" --keepalive 10s
		want echo1k && echo1k "$impl" "$rep"
		# kcp-go's peer is left out: at 16 x 1024-segment windows into one
		# socket it backed off for minutes here (4-8% CPU, no progress).
		[ "$impl" = kcpio ] && want many && many "$impl" "$rep"
	done
done

python3 - "$RES" "$SINK_BYTES" "$IDLE_N" "$IDLE_HOLD" "$ECHO_N" "$ECHO_MSGS" "$REPS" "$SOCKBUF" <<'PY' | tee "$RUN/table.md"
import statistics, sys
res, sink_bytes, idle_n, idle_hold, echo_n, echo_msgs, reps, sockbuf = sys.argv[1:]
vals = {}
for line in open(res):
    test, metric, impl, rep, v = line.rstrip("\n").split("\t")
    vals.setdefault((test, metric), {}).setdefault(impl, []).append(float(v))
rows = [
    ("sink", "mbps", f"sink {int(sink_bytes)>>20} MiB, wnd 1024, fast3, no crypto: MB/s", "≥ 2.0", True),
    ("sink", "cpu_gb_client", "  … client CPU-s per GB", "", False),
    ("sink", "cpu_gb_server", "  … server CPU-s per GB", "", False),
    ("sink", "cpu_gb_total", "  … client+server CPU-s per GB", "≤ 0.5", False),
    ("sink-aes", "mbps", f"sink {int(sink_bytes)>>20} MiB, aes-128 + FEC 10/3: MB/s", "≥ 2.0", True),
    ("sink-aes", "cpu_gb_client", "  … client CPU-s per GB", "", False),
    ("sink-aes", "cpu_gb_server", "  … server CPU-s per GB", "", False),
    ("sink-aes", "cpu_gb_total", "  … client+server CPU-s per GB", "≤ 0.5", False),
    ("idle", "sessions_open", f"{idle_n} sessions opened to one listener: how many completed their echo", "1.00", False),
    ("idle", "server_cpu_pct", "  … held idle, interval 10 ms: server CPU %", "≤ 0.25", False),
    ("idle", "rss_kb_per_session", "  … server RSS per session (KiB)", "≤ 0.5", False),
    ("idle", "open_s", "  … time to open them all (s)", "", False),
    ("idle", "bytes_per_s", "  … client bytes in + out per second during the hold", "", False),
    ("idle-ka", "server_cpu_pct", "  … with kcpio's keepalive (10 s): server CPU %", "", False),
    ("idle-ka", "rss_kb_per_session", "  … with keepalive: server RSS per session (KiB)", "", False),
    ("idle-ka", "bytes_per_s", "  … with keepalive: client bytes in + out per second during the hold", "", False),
    ("echo1k", "total_s", f"{echo_n} sessions × {echo_msgs} × 64 B echo: total time (s)", "≤ 0.5", False),
    ("echo1k", "cpu_s", "  … client+server CPU-seconds", "≤ 0.5", False),
    ("many", "mbps", "16 sessions × 64 MiB into one listener, aes-128: aggregate MB/s", "", True),
    ("many", "cpu_gb_client", "  … client CPU-s per GB", "", False),
    ("many", "cpu_gb_server", "  … server CPU-s per GB", "", False),
    ("many", "retrans", "  … client's retransmitted segments", "", False),
]
def fmt(v):
    if v is None: return "–"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
print(f"\n### kcpio vs kcp-go on this machine: medians of {reps} run(s)\n")
print("| measurement | kcp-go | kcpio | kcpio / kcp-go | target ratio | runs (kcp-go; kcpio) |")
print("|---|---:|---:|---:|---:|---|")
for test, metric, label, target, _ in rows:
    d = vals.get((test, metric))
    if not d: continue
    g = statistics.median(d["kcp-go"]) if "kcp-go" in d else None
    k = statistics.median(d["kcpio"]) if "kcpio" in d else None
    ratio = f"{k/g:.2f}×" if g and k is not None else "–"
    runs = "; ".join(", ".join(fmt(x) for x in d.get(i, [])) for i in ("kcp-go", "kcpio"))
    print(f"| {label} | {fmt(g)} | {fmt(k)} | {ratio} | {target} | {runs} |")

# Against the machine: kcpio's rows divided by TCP, the raw UDP limits and
# tokio_kcp, each measured in the same run.
def spread(xs):
    return f"{fmt(min(xs))}–{fmt(max(xs))}" if xs else "–"
mach = [
    ("sink", "mbps", "tcp", "sink MB/s: kcpio / TCP", "≥ 0.7"),
    ("sink", "mbps", "sendmmsg", "sink MB/s: kcpio / sendmmsg", ""),
    ("sink", "mbps", "gso", "sink MB/s: kcpio / GSO+GRO", ""),
    ("sink", "cpu_gb_client", "tcp", "client CPU-s per GB: kcpio / TCP sender", "≤ 2.5"),
    ("sink", "cpu_gb_client", "sendmmsg", "client CPU-s per GB: kcpio / sendmmsg sender", ""),
    ("sink", "cpu_gb_client", "gso", "client CPU-s per GB: kcpio / GSO sender", ""),
    ("sink", "cpu_gb_server", "tcp", "server CPU-s per GB: kcpio / TCP receiver", "≤ 2.5"),
    ("sink", "cpu_gb_server", "sendmmsg", "server CPU-s per GB: kcpio / recvmmsg receiver", ""),
    ("sink", "cpu_gb_server", "gso", "server CPU-s per GB: kcpio / GRO receiver", ""),
    ("bulk", "mbps", "tcp", "default Config bulk MB/s: kcpio / TCP (median of medians)", "≥ 0.5"),
    ("echo-inproc", "total_s", "tokio_kcp", f"{echo_n} sessions × {echo_msgs} × 64 B in one process: time, kcpio / tokio_kcp", "≤ 0.5"),
    ("echo-inproc", "cpu_s", "tokio_kcp", "  … process CPU-s, kcpio / tokio_kcp", "≤ 0.5"),
]
shown = False
for test, metric, base, label, target in mach:
    d = vals.get((test, metric), {})
    if "kcpio" not in d or base not in d: continue
    if not shown:
        print(f"\n### kcpio against the machine and tokio_kcp: medians of {reps} run(s), same run\n")
        print("| measurement | baseline | kcpio | ratio | target | spread (baseline; kcpio) |")
        print("|---|---:|---:|---:|---:|---|")
        shown = True
    b, k = statistics.median(d[base]), statistics.median(d["kcpio"])
    print(f"| {label} | {fmt(b)} | {fmt(k)} | {k/b:.2f}× | {target} | {spread(d[base])}; {spread(d['kcpio'])} |")
r = vals.get(("bulk", "ratio"), {}).get("kcpio", [])
if r:
    print(f"| default Config bulk: kcpio/TCP per run (median; min) | | {statistics.median(r):.2f} | | ≥ 0.5; ≥ 0.3 | {min(r):.2f}–{max(r):.2f} |")
for test, label in (("sink", "raw limits"),):
    for base in ("tcp", "sendmmsg", "gso"):
        d = {m: vals.get((test, m), {}).get(base, []) for m in ("mbps", "cpu_gb_client", "cpu_gb_server")}
        if d["mbps"]:
            print(f"| {base} alone: MB/s; sender, receiver CPU-s per GB | {fmt(statistics.median(d['mbps']))} | | | | {fmt(statistics.median(d['cpu_gb_client']))}; {fmt(statistics.median(d['cpu_gb_server']))} |")
PY
log "table and raw results in $RUN"
