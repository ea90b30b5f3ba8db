# Shared helpers for scripts/latency.sh, scripts/vs-kcpgo.sh and scripts/vs-smux.sh (sourced, not run).
# Builds the Go peer and tools into scripts/out/bin, the Rust peer with cargo,
# tracks child processes and namespaces, and cleans them up on exit.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/scripts/out"
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
	local keep=() p
	for p in "${CHILDREN[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
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
	(cd "$ROOT/interop/kcpgo-peer" && go build -o "$BIN/kcpgo-peer" .) || die "go build kcpgo-peer failed"
	(cd "$ROOT/tools/relay" && go build -o "$BIN/relay" .) || die "go build relay failed"
	(cd "$ROOT/tools/tcpecho" && go build -o "$BIN/tcpecho" .) || die "go build tcpecho failed"
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
	if [ ! -f "$ROOT/examples/peer.rs" ]; then
		loud "examples/peer.rs is missing: every kcpio row is SKIPPED"
		return 0
	fi
	command -v cargo >/dev/null || { loud "cargo not found: every kcpio row is SKIPPED"; return 0; }
	log "cargo build --release --example peer"
	if (cd "$ROOT" && cargo build --release --example peer >&2); then
		KCPIO_PEER="$ROOT/target/release/examples/peer"
	else
		loud "cargo build --release --example peer FAILED: every kcpio row is SKIPPED"
	fi
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
# start_run NAME: RUN=scripts/out/NAME-<timestamp>, RES=$RUN/results.tsv (empty);
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
jget() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$1" "$2"; }
# timecpu FILE: user+sys seconds from a `/usr/bin/time -f '%U %S %M'` file
timecpu() { awk '{ print $1 + $2 }' "$1"; }
