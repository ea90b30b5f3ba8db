#!/usr/bin/env bash
# Where one kcpio sink session's thread wake-ups come from (issue 28).
#
#   lab/scripts/wakeups.sh [--mib 256] [--workers 2] [--side client|server]
#       [--top 12] PEER_BINARY
#
# Runs one `peer sink-server` + `peer client --sink` pair on loopback (the
# flags of client-cpu.sh: windows 1024, fast3, crypt null, --sockbuf
# 4194304; each side on a tokio runtime of --workers threads), twice:
#
# 1. under `perf stat` on both processes: context switches, CPU migrations,
#    and the futex, write (tokio's eventfd unpark), sendmmsg, recvmmsg and
#    epoll_wait system calls, with the run's MB/s;
# 2. under `perf record --call-graph dwarf` of the futex and write calls of
#    --side, then prints the --top call paths: the first frames above the
#    system call that are not libc, std's futex or mio, so a mutex handover
#    (`SessionShared::poll_call`, `Driver::service`), a worker unpark
#    (`notify_parked_local` and who called it), a timer re-arm
#    (`Sleep::reset`) or a task woken from the driver (`deliver_run`) shows
#    by name.
#
# Needs perf with syscall tracepoints (root). Build the peer first
# (`cargo build --release -p kcpio-lab --bin peer`) and run it under the
# measurement lock. Loopback only; children stopped on exit. Output and
# perf data in lab/scripts/out/wakeups-<timestamp>/.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

MIB=256
WORKERS=2
SIDE=client
TOP=12
BIN=""
while [ $# -gt 0 ]; do
	case $1 in
	--mib) MIB=$2; shift ;;
	--workers) WORKERS=$2; shift ;;
	--side) SIDE=$2; shift ;;
	--top) TOP=$2; shift ;;
	-h | --help) sed -n '2,25p' "$0"; exit 0 ;;
	-*) die "unknown option $1" ;;
	*) BIN=$1 ;;
	esac
	shift
done
[ -x "$BIN" ] || die "give the peer binary (cargo build --release -p kcpio-lab --bin peer)"
[[ $SIDE == client || $SIDE == server ]] || die "--side is client or server"
command -v perf >/dev/null || die "perf is not installed"
[ "$(perf list 'syscalls:sys_enter_futex' 2>/dev/null | grep -c sys_enter_futex)" -gt 0 ] \
	|| die "perf has no syscall tracepoints here (run as root)"

start_run wakeups
BYTES=$((MIB << 20))
FLAGS=(--sndwnd 1024 --rcvwnd 1024 --nodelay fast3 --crypt null --sockbuf 4194304)
EVENTS=context-switches,cpu-migrations
for s in futex write sendmmsg recvmmsg epoll_wait; do EVENTS+=",syscalls:sys_enter_$s"; done
export TOKIO_WORKER_THREADS=$WORKERS
log "$BIN, $MIB MiB, $WORKERS workers, load: $(cut -d' ' -f1-3 /proc/loadavg)"

# server LOG: starts the sink server, sets SRV and PORT.
server() {
	"$BIN" sink-server --addr 127.0.0.1:0 --quiet --idle 10s "${FLAGS[@]}" >"$1" 2>&1 &
	SRV=$!
	CHILDREN+=("$SRV")
	PORT=$(port_of "$(wait_line "$1" 'listening on' 10)") || true
	[ -n "$PORT" ] || die "the sink server did not start (see $1)"
}

client_cmd() {
	echo "$BIN" client --addr "127.0.0.1:$PORT" --sink --bytes "$BYTES" --timeout 600s --json "${FLAGS[@]}"
}

# 1. counts, both sides.
server "$RUN/stat.srv"
perf stat -x, -e "$EVENTS" -p "$SRV" -o "$RUN/stat-server.csv" &
PSTAT=$!
CHILDREN+=("$PSTAT")
sleep 0.3
# shellcheck disable=SC2046
perf stat -x, -e "$EVENTS" -o "$RUN/stat-client.csv" $(client_cmd) >"$RUN/stat.json" 2>"$RUN/stat.err" \
	|| die "the client failed (see $RUN/stat.err)"
kill -INT "$PSTAT" 2>/dev/null || true
wait "$PSTAT" 2>/dev/null || true
forget "$PSTAT"
stop "$SRV"
log "perf stat run: $(jget "$RUN/stat.json" mb_per_s) MB/s"
printf '%-32s %12s %12s   (per %d MiB)\n' event client server "$MIB"
for e in ${EVENTS//,/ }; do
	c=$(awk -F, -v e="$e" '$3 == e { print $1 }' "$RUN/stat-client.csv")
	s=$(awk -F, -v e="$e" '$3 == e { print $1 }' "$RUN/stat-server.csv")
	printf '%-32s %12s %12s\n' "${e#syscalls:sys_enter_}" "${c:-?}" "${s:-?}"
done

# 2. call paths of one side's futex and write calls.
server "$RUN/rec.srv"
REC=(perf record -q -e syscalls:sys_enter_futex,syscalls:sys_enter_write --call-graph dwarf,16384 -o "$RUN/$SIDE.data")
if [ "$SIDE" = server ]; then
	"${REC[@]}" -p "$SRV" 2>"$RUN/rec.err" &
	PREC=$!
	CHILDREN+=("$PREC")
	sleep 0.3
	# shellcheck disable=SC2046
	$(client_cmd) >"$RUN/rec.json" 2>"$RUN/rec.err2" || die "the client failed (see $RUN/rec.err2)"
	kill -INT "$PREC" 2>/dev/null || true
	wait "$PREC" 2>/dev/null || true
	forget "$PREC"
else
	# shellcheck disable=SC2046
	"${REC[@]}" $(client_cmd) >"$RUN/rec.json" 2>"$RUN/rec.err" || die "the client failed (see $RUN/rec.err)"
fi
stop "$SRV"
log "perf record run: $(jget "$RUN/rec.json" mb_per_s) MB/s"

# Each sample: the call kind (futex wait / futex wake / write), then the
# first five frames above the system call's plumbing.
perf script -i "$RUN/$SIDE.data" 2>/dev/null | python3 -c '
import re, sys
from collections import Counter
top = int(sys.argv[1])
skip = re.compile(r"^(syscall|__GI_|__libc|std::sys|<std::sys|<?parking_lot|mio::|tokio::runtime::io::driver|tokio::runtime::driver::|<&std::fs|<std::fs|core::ptr::drop_in_place|<std::sync::poison::mutex::MutexGuard|std::sync::poison|kcpio::driver::shared::lock$|\[unknown\])")
noise = re.compile(r"(harness|task::core|catch_unwind|task::raw|coop::|loom::|context::scoped|LocalKey|AssertUnwindSafe|panicking|with_current|with_scheduler|\{\{closure\}\}$|task::waker|wake_by_val|wake_by_ref|RawTask|Schedule for.*>::schedule$|Waker>::wake|::unpark$|Handle::unpark|kcpio::driver::shared::wake$)")
counts = Counter()
kind, frames = None, []
def flush():
    if kind is not None:
        counts[(kind, " <- ".join(frames[:5]))] += 1
for line in sys.stdin:
    line = line.rstrip("\n")
    if "sys_enter_" in line:
        flush()
        if "sys_enter_write" in line:
            kind = "write"
        else:
            op = re.search(r"op: (0x[0-9a-f]+)", line)
            code = int(op.group(1), 16) & 0x7f if op else -1
            kind = {0: "futex wait", 9: "futex wait", 1: "futex wake", 10: "futex wake"}.get(code, "futex")
        frames = []
        continue
    if not line.strip():
        continue
    m = re.match(r"\s+[0-9a-f]+ (.*?)(\+0x[0-9a-f]+)? \(", line)
    if not m or kind is None:
        continue
    f = m.group(1).replace(" (inlined)", "")
    f = re.sub(r"tokio::runtime::scheduler::multi_thread::(worker::)?(<impl [^>]*>::)?", "mt::", f)
    if skip.match(f) or noise.search(f):
        continue
    if not frames or frames[-1] != f:
        frames.append(f)
flush()
total = sum(counts.values())
print(f"\n{total} futex/write calls recorded on the '"$SIDE"' side; top paths:")
for (k, path), n in counts.most_common(top):
    print(f"{n:6d} {100 * n / max(total, 1):5.1f}%  {k:10s} {path[:300]}")
' "$TOP"
log "load after: $(cut -d' ' -f1-3 /proc/loadavg); files in $RUN"
