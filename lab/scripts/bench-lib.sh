# Shared helpers for lab/scripts/latency.sh, lab/scripts/vs-kcpgo.sh and lab/scripts/vs-smux.sh (sourced, not run).
# Builds the Go peer and tools into lab/scripts/out/bin, the Rust peer with cargo,
# tracks child processes and namespaces, and cleans them up on exit.

# ROOT is the workspace; LAB the lab crate (scripts, tools, results).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LAB="$ROOT/lab"
INTEROP="$ROOT/testkit/interop"
OUT="$LAB/scripts/out"
BIN="$OUT/bin"
mkdir -p "$BIN"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
loud() {
	printf '\n########################################################################\n' >&2
	printf '### %s\n' "$@" >&2
	printf '########################################################################\n\n' >&2
}

# --- child processes and namespaces -----------------------------------------
CHILDREN=()
NAMESPACES=()
cleanup() {
	local p
	for p in "${CHILDREN[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	sleep 0.2
	for p in "${CHILDREN[@]}"; do
		kill -9 "$p" 2>/dev/null || true
	done
	for p in "${NAMESPACES[@]}"; do
		ip netns pids "$p" 2>/dev/null | while read -r q; do kill -9 "$q" 2>/dev/null || true; done
		ip netns del "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop PID: SIGTERM, wait up to 3 s, then SIGKILL; forget it.
stop() {
	local pid=$1 i
	kill "$pid" 2>/dev/null || true
	for i in $(seq 30); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	forget "$pid"
}

# forget PID: drop a child that has already been waited for, so that cleanup
# never signals a PID the system may have reused.
forget() {
	local keep=() p
	for p in "${CHILDREN[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	CHILDREN=("${keep[@]}")
}

# wait_line FILE REGEX [SECONDS]: wait until FILE has a line matching REGEX; print it.
wait_line() {
	local f=$1 re=$2 secs=${3:-10} i
	for i in $(seq $((secs * 10))); do
		if grep -qE "$re" "$f" 2>/dev/null; then
			grep -m1 -E "$re" "$f"
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# port_of "listening on 127.0.0.1:1234 ..." -> 1234
port_of() { sed -nE 's/.*listening on [^ ]*:([0-9]+).*/\1/p' <<<"$1" | head -1; }

# --- /proc readings -------------------------------------------------------
CLK_TCK=$(getconf CLK_TCK)
# cpu_ticks PID: utime+stime in clock ticks
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
# rss_kb PID
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# --- builds -----------------------------------------------------------------
build_go() {
	command -v go >/dev/null || die "go is not installed"
	log "building the Go peer and tools"
	(cd "$INTEROP/kcpgo-peer" && go build -o "$BIN/kcpgo-peer" .) || die "go build kcpgo-peer failed"
	(cd "$LAB/tools/relay" && go build -o "$BIN/relay" .) || die "go build relay failed"
	(cd "$LAB/tools/tcpecho" && go build -o "$BIN/tcpecho" .) || die "go build tcpecho failed"
}

# build_rust: sets KCPIO_PEER to the binary, or empty (loudly) when there is none.
# KCPIO_PEER_BIN=/path/to/peer in the environment uses that binary and skips the build.
KCPIO_PEER=""
build_rust() {
	if [ -n "${KCPIO_PEER_BIN:-}" ]; then
		[ -x "$KCPIO_PEER_BIN" ] || die "KCPIO_PEER_BIN=$KCPIO_PEER_BIN is not an executable"
		KCPIO_PEER="$KCPIO_PEER_BIN"
		log "kcpio peer: $KCPIO_PEER (from KCPIO_PEER_BIN, not rebuilt)"
		return 0
	fi
	if build_example peer; then KCPIO_PEER=$EXAMPLE_BIN; fi
}

# build_example NAME: builds the workspace binary NAME (the lab's `peer`,
# `mux_peer`, `attack`, or `kcpio-tunnel`) with cargo in release; leaves its
# path in EXAMPLE_BIN and returns 0, or says loudly that every row needing it
# is skipped and returns 1.
EXAMPLE_BIN=""
build_example() {
	EXAMPLE_BIN=""
	local pkg=kcpio-lab
	[ "$1" = kcpio-tunnel ] && pkg=kcpio-tunnel
	command -v cargo >/dev/null || { loud "cargo not found: every row that needs $1 is SKIPPED"; return 1; }
	log "cargo build --release -p $pkg --bin $1"
	if (cd "$ROOT" && cargo build --release -p "$pkg" --bin "$1" >&2); then
		EXAMPLE_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/$1"
	else
		loud "cargo build --release -p $pkg --bin $1 FAILED: every row that needs it is SKIPPED"
		return 1
	fi
}

# build_impairer: installs iptables, libnetfilter-queue-dev and a C compiler
# with apt-get when missing and compiles lab/tools/impairer into $BIN/impairer.
build_impairer() {
	local need=()
	command -v iptables >/dev/null || need+=(iptables)
	[ -f /usr/include/libnetfilter_queue/libnetfilter_queue.h ] || need+=(libnetfilter-queue-dev)
	command -v cc >/dev/null || need+=(gcc)
	if [ ${#need[@]} -gt 0 ]; then
		log "installing ${need[*]} (apt-get)"
		apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
	fi
	cc -O2 -Wall -o "$BIN/impairer" "$LAB/tools/impairer/impairer.c" -lnetfilter_queue -lnfnetlink
}

# start_impairer LOGFILE NS ARGS...: runs lab/tools/impairer inside namespace NS
# (its NFQUEUE rule must already be there), waits for its ready line and
# leaves its PID in IMPAIRER_PID; returns 1 if it did not come up. It prints
# its counters to LOGFILE when stopped.
IMPAIRER_PID=""
start_impairer() {
	local f=$1 ns=$2
	shift 2
	ip netns exec "$ns" "$BIN/impairer" "$@" >"$f" 2>&1 &
	IMPAIRER_PID=$!
	CHILDREN+=("$IMPAIRER_PID")
	wait_line "$f" 'impairer ready' 5 >/dev/null
}

# peer_bin IMPL -> path of the peer binary for kcp-go or kcpio
peer_bin() {
	case $1 in
	kcp-go) echo "$BIN/kcpgo-peer" ;;
	kcpio) echo "$KCPIO_PEER" ;;
	*) die "unknown impl $1" ;;
	esac
}

# --- side-by-side runs (vs-kcpgo.sh, vs-smux.sh) -----------------------------
# start_run NAME: RUN=lab/scripts/out/NAME-<timestamp>, RES=$RUN/results.tsv (empty);
# installs GNU time for the clients' CPU figures.
start_run() {
	RUN="$OUT/$1-$(date +%Y%m%d-%H%M%S)"
	mkdir -p "$RUN"
	RES="$RUN/results.tsv"
	: >"$RES"
	if [ ! -x /usr/bin/time ]; then
		log "installing GNU time (apt-get)"
		apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >&2
	fi
}
# record TEST METRIC IMPL REP VALUE: one row of $RES
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$RES"; }
# jget FILE FIELD: a field of the last JSON line in FILE
jget() { python3 -c 'import json,sys; print(json.loads([l for l in open(sys.argv[1]).read().strip().splitlines() if l.startswith("{")][-1])[sys.argv[2]])' "$1" "$2"; }
# timecpu FILE: user+sys seconds from a `/usr/bin/time -f '%U %S %M'` file
timecpu() { awk '{ print $1 + $2 }' "$1"; }
