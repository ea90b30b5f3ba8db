#!/usr/bin/env bash
# Side by side on loopback: a download through kcptun-client + kcptun-server
# and through `kcpio-tunnel client` + `kcpio-tunnel server`, the same
# kcptun flags on every end, runs interleaved. Prints each run's seconds and
# the CPU seconds of the two tunnel processes, then medians.
#
#   lab/scripts/tunnel-vs-kcptun.sh [MB] [RUNS] [-- extra flags for all four ends]
#
# Needs kcptun (scripts/install-kcptun.sh) and python3; builds kcpio-tunnel in
# release mode. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/../.."
MB=${1:-50}
RUNS=${2:-3}
shift $(( $# >= 2 ? 2 : $# ))
[ "${1:-}" = "--" ] && shift
FLAGS=("$@")
# KCPIO_TUNNEL_BIN: measure that binary instead of building this tree's;
# KCPIO_FLAGS: flags for the two kcpio-tunnel ends only (e.g. --maxbuffer).
if [ -n "${KCPIO_TUNNEL_BIN:-}" ]; then
  TUNNEL=$KCPIO_TUNNEL_BIN
else
  cargo build --release --quiet -p kcpio-tunnel
  TUNNEL=${CARGO_TARGET_DIR:-target}/release/kcpio-tunnel
fi
read -r -a KFLAGS <<< "${KCPIO_FLAGS:-}"
command -v kcptun-client >/dev/null || { echo "kcptun missing: scripts/install-kcptun.sh" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# The source: MB megabytes of random bytes to every connection.
head -c $((MB * 1000000)) /dev/urandom > "$work/data"
want=$(sha1sum < "$work/data" | cut -d' ' -f1)
src=$(free_port)
python3 - "$src" "$work/data" <<'EOF' &
import socket, sys, threading
data = open(sys.argv[2], 'rb').read()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(16)
def serve(c):
    try: c.sendall(data)
    finally: c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
pids+=($!)

# One download: prints "seconds cpu_seconds" (CPU of both tunnel processes).
run() {
  local kind=$1 udp tcp cli srv
  udp=$(free_port); tcp=$(free_port)
  if [ "$kind" = kcptun ]; then
    kcptun-server -l "127.0.0.1:$udp" -t "127.0.0.1:$src" --quiet "${FLAGS[@]}" 2>/dev/null & srv=$!
    kcptun-client -l "127.0.0.1:$tcp" -r "127.0.0.1:$udp" --quiet "${FLAGS[@]}" 2>/dev/null & cli=$!
  else
    "$TUNNEL" server -l "127.0.0.1:$udp" -t "127.0.0.1:$src" --quiet "${FLAGS[@]}" "${KFLAGS[@]}" 2>/dev/null & srv=$!
    "$TUNNEL" client -l "127.0.0.1:$tcp" -r "127.0.0.1:$udp" --quiet "${FLAGS[@]}" "${KFLAGS[@]}" 2>/dev/null & cli=$!
  fi
  pids+=("$srv" "$cli")
  sleep 0.5
  local out
  out=$(python3 - "$tcp" <<'EOF'
import hashlib, socket, sys, time
c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
h = hashlib.sha1(); n = 0; t = time.monotonic()
while True:
    b = c.recv(1 << 16)
    if not b: break
    h.update(b); n += len(b)
print(f"{time.monotonic() - t:.3f} {h.hexdigest()} {n}")
EOF
)
  local ticks cpu=0
  for p in "$srv" "$cli"; do
    ticks=$(awk '{print $14 + $15}' "/proc/$p/stat")
    cpu=$((cpu + ticks))
  done
  kill "$srv" "$cli" 2>/dev/null || true
  wait "$srv" "$cli" 2>/dev/null || true
  set -- $out
  [ "$2" = "$want" ] || { echo "$kind: hash mismatch ($3 bytes)" >&2; exit 1; }
  echo "$1 $(awk -v t="$cpu" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", t/hz}')"
}

median() { sort -n | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A secs cpus
for i in $(seq "$RUNS"); do
  for kind in kcptun kcpio; do
    read -r s c < <(run "$kind")
    echo "run $i $kind: ${s} s, ${MB} MB, $(awk -v s="$s" -v m="$MB" 'BEGIN{printf "%.1f", m/s}') MB/s, tunnel CPU ${c} s"
    secs[$kind]+="$s"$'\n'; cpus[$kind]+="$c"$'\n'
  done
done
for kind in kcptun kcpio; do
  ms=$(printf '%s' "${secs[$kind]}" | median); mc=$(printf '%s' "${cpus[$kind]}" | median)
  echo "median $kind: ${ms} s ($(awk -v s="$ms" -v m="$MB" 'BEGIN{printf "%.1f", m/s}') MB/s), CPU ${mc} s"
done
