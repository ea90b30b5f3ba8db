#!/usr/bin/env bash
# kcpio's mux against Go smux, side by side.
#
#   lab/scripts/vs-smux.sh [--quick] [--reps N] [--only sink1,sink100,aes1,aes100,bare,idle]
#
# Builds testkit/interop/smux-peer (Go smux v1.5.58 over kcp-go v5.6.72; --smux-v1516
# uses v1.5.16), testkit/interop/kcpgo-peer, `cargo build --release -p kcpio-lab --bin
# mux_peer` and `--bin peer`, runs each row N times (default 3,
# interleaved) and prints medians and kcpio/Go ratios:
#   sink1    one stream, sink of 256 MiB, over one session: fast3, windows
#            1024, mtu 1350, no crypto, 4 MiB socket buffers; smux v2,
#            frames 32768, session buffer 4 MiB, stream buffer 2 MiB
#            (kcptun's): MB/s, client+server CPU-s per GB
#   sink100  100 concurrent streams on one session, 256 MiB in total
#   aes1, aes100   the same with aes-128 + FEC 10/3
#   bare     the mux overhead: the bare sink of the same KCP settings
#            (kcpgo-peer / lab/src/bin/peer.rs, stream mode) against the mux
#            with one stream, as mux/bare throughput per implementation
#   idle     10,000 streams opened on one session (one 64 B echo each) and
#            held idle: server RSS delta per stream (KiB)
# Client CPU from /usr/bin/time, server CPU and RSS from /proc/PID.
# --quick: 32 MiB sinks, 1,000 idle streams, one repetition.
# Until lab/src/bin/mux_peer.rs exists the kcpio rows print n/a.
# Loopback only; every child is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

REPS=3
SINK_BYTES=$((256 << 20))
IDLE_N=10000
IDLE_HOLD=8
ONLY="sink1,sink100,aes1,aes100,bare,idle"
MODFILE=""
while [ $# -gt 0 ]; do
	case $1 in
	--quick) REPS=1; SINK_BYTES=$((32 << 20)); IDLE_N=1000 ;;
	--reps) REPS=$2; shift ;;
	--only) ONLY=$2; shift ;;
	--idle-streams) IDLE_N=$2; shift ;;
	--smux-v1516) MODFILE="-modfile=go.v1516.mod" ;;
	-h | --help) sed -n '2,27p' "$0"; exit 0 ;;
	*) die "unknown argument $1" ;;
	esac
	shift
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }

start_run vs-smux
build_go
log "building interop/smux-peer ${MODFILE:-(smux v1.5.58)}"
(cd "$INTEROP/smux-peer" && go build -buildvcs=false $MODFILE -o "$BIN/smux-peer" .) || die "go build smux-peer failed"
build_rust
# build_lab NAME VAR: the lab's binary NAME (cargo, release) into VAR, or empty (loudly).
build_lab() {
	local name=$1 var=$2
	if build_example "$name"; then printf -v "$var" '%s' "$EXAMPLE_BIN"; else printf -v "$var" '%s' ""; fi
}
[ -n "$MUX_PEER" ] || build_lab mux_peer MUX_PEER

# mux_bin IMPL -> the mux peer of go-smux or kcpio (empty: not available)
mux_bin() { case $1 in go) echo "$BIN/smux-peer" ;; kcpio) echo "$MUX_PEER" ;; esac; }
# bare_bin IMPL -> the bare KCP peer of kcp-go or kcpio
bare_bin() { case $1 in go) echo "$BIN/kcpgo-peer" ;; kcpio) echo "$KCPIO_PEER" ;; esac; }

per_gb() { python3 -c "print(($1) / ($SINK_BYTES / 1e9))"; }

KCP=(--mode fast3 --sndwnd 1024 --rcvwnd 1024 --mtu 1350 --sockbuf 4194304)
SMUX=(--smuxver 2 --framesize 32768 --smuxbuf 4194304 --streambuf 2097152)
AES=(--crypt aes-128 --datashard 10 --parityshard 3)

# mux_sink TEST IMPL REP STREAMS EXTRA...: smux-peer (or mux_peer) sink over kcp
mux_sink() {
	local test=$1 impl=$2 rep=$3 streams=$4; shift 4
	local b; b=$(mux_bin "$impl")
	[ -n "$b" ] || return 0
	local f="$RUN/$test-$impl-$rep"
	"$b" server --listen 127.0.0.1:0 --transport kcp --app sink --timeout 900s --quiet "${KCP[@]}" "${SMUX[@]}" "$@" >"$f.srv" 2>&1 &
	local srv=$!; CHILDREN+=("$srv")
	local line
	if ! line=$(wait_line "$f.srv" '^LISTENING ' 10); then
		log "  FAILED: $impl mux server did not start: $(head -c 300 "$f.srv")"; stop "$srv"; return 0
	fi
	log "$test $impl #$rep ($streams streams)"
	if ! /usr/bin/time -f '%U %S %M' -o "$f.time" "$b" client --connect "${line#LISTENING }" --transport kcp --app sink \
		--streams "$streams" --bytes $((SINK_BYTES / streams)) --timeout 600s --quiet "${KCP[@]}" "${SMUX[@]}" "$@" >"$f.json" 2>"$f.err"; then
		log "  FAILED (see $f.json $f.err)"; stop "$srv"; return 0
	fi
	local st; st=$(cpu_ticks "$srv")
	stop "$srv"
	record "$test" mbps "$impl" "$rep" "$(jget "$f.json" mbps)"
	record "$test" cpu_gb "$impl" "$rep" "$(per_gb "$(timecpu "$f.time") + $st / $CLK_TCK")"
}

# bare_sink IMPL REP: the bare KCP sink with the same KCP settings (stream mode, as kcptun)
bare_sink() {
	local impl=$1 rep=$2 b; b=$(bare_bin "$impl")
	[ -n "$b" ] || return 0
	local f="$RUN/bare-$impl-$rep"
	local flags=(--nodelay fast3 --sndwnd 1024 --rcvwnd 1024 --mtu 1350 --sockbuf 4194304 --stream)
	"$b" sink-server --addr 127.0.0.1:0 --quiet --idle 10s "${flags[@]}" >"$f.srv" 2>&1 &
	local srv=$!; CHILDREN+=("$srv")
	local port
	if ! port=$(port_of "$(wait_line "$f.srv" 'listening on' 10)") || [ -z "$port" ]; then
		log "  FAILED: bare $impl server did not start"; stop "$srv"; return 0
	fi
	log "bare $impl #$rep"
	if ! /usr/bin/time -f '%U %S %M' -o "$f.time" "$b" client --addr "127.0.0.1:$port" --sink --bytes "$SINK_BYTES" \
		--timeout 600s --json "${flags[@]}" >"$f.json" 2>"$f.err"; then
		log "  FAILED (see $f.json $f.err)"; stop "$srv"; return 0
	fi
	local st; st=$(cpu_ticks "$srv")
	stop "$srv"
	record bare mbps "$impl" "$rep" "$(jget "$f.json" mb_per_s)"
	record bare cpu_gb "$impl" "$rep" "$(per_gb "$(timecpu "$f.time") + $st / $CLK_TCK")"
}

# idle IMPL REP: IDLE_N streams on one session, one 64 B echo each, held idle
idle() {
	local impl=$1 rep=$2 b; b=$(mux_bin "$impl")
	[ -n "$b" ] || return 0
	local f="$RUN/idle-$impl-$rep"
	"$b" server --listen 127.0.0.1:0 --transport kcp --app echo --timeout 900s --quiet "${KCP[@]}" "${SMUX[@]}" >"$f.srv" 2>&1 &
	local srv=$!; CHILDREN+=("$srv")
	local line
	if ! line=$(wait_line "$f.srv" '^LISTENING ' 10); then
		log "  FAILED: $impl mux server did not start"; stop "$srv"; return 0
	fi
	sleep 1
	local rss0; rss0=$(rss_kb "$srv")
	log "idle $impl #$rep: $IDLE_N streams held ${IDLE_HOLD}s"
	"$b" client --connect "${line#LISTENING }" --transport kcp --app idle --streams "$IDLE_N" --bytes 64 \
		--hold "${IDLE_HOLD}s" --timeout 300s --quiet "${KCP[@]}" "${SMUX[@]}" >"$f.json" 2>"$f.err" &
	local cli=$!; CHILDREN+=("$cli")
	if ! wait_line "$f.err" '^holding' 300 >/dev/null; then
		log "  FAILED: the client never started holding (see $f.err)"; stop "$cli"; stop "$srv"; return 0
	fi
	sleep 2
	local rss1; rss1=$(rss_kb "$srv")
	wait "$cli" || log "  client reported failure (see $f.json)"
	stop "$srv"
	record idle rss_kb_per_stream "$impl" "$rep" "$(python3 -c "print(($rss1 - $rss0) / $IDLE_N)")"
}

IMPLS=(go kcpio)
for rep in $(seq "$REPS"); do
	for impl in "${IMPLS[@]}"; do
		want sink1 && mux_sink sink1 "$impl" "$rep" 1
		want sink100 && mux_sink sink100 "$impl" "$rep" 100
		want aes1 && mux_sink aes1 "$impl" "$rep" 1 "${AES[@]}"
		want aes100 && mux_sink aes100 "$impl" "$rep" 100 "${AES[@]}"
		want bare && bare_sink "$impl" "$rep"
		want idle && idle "$impl" "$rep"
	done
done

python3 - "$RES" "$SINK_BYTES" "$IDLE_N" "$REPS" <<'PY' | tee "$RUN/table.md"
import statistics, sys
res, sink_bytes, idle_n, reps = sys.argv[1:]
vals = {}
for line in open(res):
    test, metric, impl, rep, v = line.rstrip("\n").split("\t")
    vals.setdefault((test, metric), {}).setdefault(impl, []).append(float(v))
def med(test, metric, impl):
    d = vals.get((test, metric), {}).get(impl)
    return statistics.median(d) if d else None
def fmt(v):
    if v is None: return "n/a"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
mib = int(sink_bytes) >> 20
rows = [
    ("sink1", "mbps", f"1 stream, sink {mib} MiB, fast3, wnd 1024, no crypto: MB/s"),
    ("sink1", "cpu_gb", "  … client+server CPU-s per GB"),
    ("sink100", "mbps", f"100 streams, {mib} MiB in total, no crypto: MB/s"),
    ("sink100", "cpu_gb", "  … client+server CPU-s per GB"),
    ("aes1", "mbps", "1 stream, aes-128 + FEC 10/3: MB/s"),
    ("aes1", "cpu_gb", "  … client+server CPU-s per GB"),
    ("aes100", "mbps", "100 streams, aes-128 + FEC 10/3: MB/s"),
    ("aes100", "cpu_gb", "  … client+server CPU-s per GB"),
    ("bare", "mbps", f"bare KCP sink, same settings (kcp-go / KcpStream): MB/s"),
    ("bare", "cpu_gb", "  … client+server CPU-s per GB"),
    ("idle", "rss_kb_per_stream", f"{idle_n} idle streams on one session: server RSS per stream (KiB)"),
]
print(f"\n### kcpio mux vs Go smux (over kcp-go) on this machine: medians of {reps} run(s)\n")
print("| measurement | Go smux | kcpio mux | kcpio / Go | runs (Go; kcpio) |")
print("|---|---:|---:|---:|---|")
for test, metric, label in rows:
    if (test, metric) not in vals: continue
    g, k = med(test, metric, "go"), med(test, metric, "kcpio")
    ratio = f"{k/g:.2f}×" if g and k is not None else "n/a"
    runs = "; ".join(", ".join(fmt(x) for x in vals[(test, metric)].get(i, [])) or "n/a" for i in ("go", "kcpio"))
    print(f"| {label} | {fmt(g)} | {fmt(k)} | {ratio} | {runs} |")
b_go, b_k = med("bare", "mbps", "go"), med("bare", "mbps", "kcpio")
s_go, s_k = med("sink1", "mbps", "go"), med("sink1", "mbps", "kcpio")
if b_go or b_k:
    r = lambda s, b: f"{s/b:.2f}" if s and b else "n/a"
    print(f"\nmux overhead, 1-stream mux MB/s over bare sink MB/s: Go smux/kcp-go {r(s_go, b_go)}, "
          f"kcpio mux/KcpStream {r(s_k, b_k)} (target ≥ 0.90)")
PY
log "table and raw results in $RUN"
