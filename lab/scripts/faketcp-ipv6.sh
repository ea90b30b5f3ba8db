#!/usr/bin/env bash
# Side by side: a download through `kcpio-tunnel --tcp` and through kcptun
# `--tcp` (tcpraw), over IPv4 and over IPv6, between two private network
# namespaces joined by a veth (no impairment; 10.88.0.0/24 and fd88::/64,
# `nodad`). Runs interleaved; prints each run's MB/s and the CPU seconds of
# the two tunnel processes, then medians and the ratios kcpio/kcptun (same
# family) and IPv6/IPv4 (same program). GRO is on at both veths (with
# ethtool), and each kcpio run prints the fake-TCP segments the server
# refused and found merged, and its retransmissions (a segment merged on the
# way to the client is dropped there and resent): `faketcp-ipv6.sh 1024 1`
# is the 1 GiB GRO check.
#
#   lab/scripts/faketcp-ipv6.sh [MB] [RUNS]
#
# Root (namespaces, raw sockets, firewall rules: all die with the
# namespaces). Needs kcptun (scripts/install-kcptun.sh) and python3; builds
# kcpio-tunnel in release mode (KCPIO_TUNNEL_BIN: measure that binary).
set -euo pipefail
# shellcheck source=bench-lib.sh
. "$(dirname "$0")/bench-lib.sh"
cd "$ROOT"
MB=${1:-500}
RUNS=${2:-3}
BYTES=$((MB << 20))
if [ -n "${KCPIO_TUNNEL_BIN:-}" ]; then
  TUNNEL=$KCPIO_TUNNEL_BIN
else
  build_example kcpio-tunnel || die "kcpio-tunnel did not build"
  TUNNEL=$EXAMPLE_BIN
fi
command -v kcptun-client >/dev/null || die "kcptun missing: scripts/install-kcptun.sh"

C=ftv6c$$; S=ftv6s$$
for ns in "$C" "$S"; do
  ip netns add "$ns" || die "needs root (network namespaces)"
  NAMESPACES+=("$ns")
  ip -n "$ns" link set lo up
done
ip link add c0 netns "$C" type veth peer name s0 netns "$S"
ip -n "$C" addr add 10.88.0.1/24 dev c0
ip -n "$S" addr add 10.88.0.2/24 dev s0
ip -n "$C" -6 addr add fd88::1/64 dev c0 nodad
ip -n "$S" -6 addr add fd88::2/64 dev s0 nodad
ip -n "$C" link set c0 up
ip -n "$S" link set s0 up
# GRO on at both ends (veth does it with XDP off only when asked): a run of
# PSH segments may then reach the raw socket merged, which kcpio must
# detect and count ("merged" below), never decode as one datagram.
GRO=off
if command -v ethtool >/dev/null \
  && ip netns exec "$C" ethtool -K c0 gro on 2>/dev/null \
  && ip netns exec "$S" ethtool -K s0 gro on 2>/dev/null; then
  GRO=on
fi
echo "GRO on both veths: $GRO"
LOGS=$(mktemp -d)

# The source: BYTES of a fixed pattern to every connection at 127.0.0.1:5301
# in the server namespace (bounded: 4 connections per run, all runs).
ip netns exec "$S" python3 - "$BYTES" "$((4 * 4 * RUNS))" <<'PY' &
import socket, sys
n, conns = int(sys.argv[1]), int(sys.argv[2])
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", 5301)); l.listen(8)
buf = bytes(range(256)) * 256
for _ in range(conns):
    c, _ = l.accept(); left = n
    try:
        while left > 0:
            k = min(left, len(buf)); c.sendall(buf[:k]); left -= k
    except OSError:
        pass
    c.close()
PY
CHILDREN+=("$!")
want=$(python3 -c "import hashlib,sys; n=int(sys.argv[1]); b=bytes(range(256))*256; h=hashlib.sha1(); [h.update(b[:min(len(b), n-i)]) for i in range(0, n, len(b))]; print(h.hexdigest())" "$BYTES")

# wait_port NS PORT: until something listens on TCP PORT in NS (10 s at most).
wait_port() {
  local i
  for i in $(seq 100); do
    ip netns exec "$1" ss -Hltn | grep -q ":$2 " && return 0
    sleep 0.1
  done
  die "nothing listens on $2 in $1"
}

# run PROGRAM FAMILY: one download; prints "seconds cpu-seconds".
run() {
  local prog=$1 fam=$2 host srv cli
  if [ "$fam" = 6 ]; then host="[fd88::2]"; else host=10.88.0.2; fi
  if [ "$prog" = kcpio ]; then
    : >"$LOGS/srv.log"
    ip netns exec "$S" "$TUNNEL" server --tcp -l "$host:29900" -t 127.0.0.1:5301 --quiet --log "$LOGS/srv.log" 2>/dev/null & srv=$!
    CHILDREN+=("$srv"); wait_port "$S" 29900
    ip netns exec "$C" "$TUNNEL" client --tcp -l 127.0.0.1:12950 -r "$host:29900" --quiet 2>/dev/null & cli=$!
  else
    ip netns exec "$S" kcptun-server --tcp -l "$host:29900" -t 127.0.0.1:5301 --quiet >/dev/null 2>&1 & srv=$!
    CHILDREN+=("$srv"); wait_port "$S" 29900
    ip netns exec "$C" kcptun-client --tcp -l 127.0.0.1:12950 -r "$host:29900" --quiet >/dev/null 2>&1 & cli=$!
  fi
  CHILDREN+=("$cli"); wait_port "$C" 12950
  local out
  out=$(ip netns exec "$C" timeout 300 python3 - <<'PY'
import hashlib, socket, time
c = socket.create_connection(("127.0.0.1", 12950)); c.settimeout(60)
h = hashlib.sha1(); n = 0; t = time.monotonic()
try:
    while True:
        b = c.recv(1 << 16)
        if not b: break
        h.update(b); n += len(b)
except OSError:
    pass
print(f"{time.monotonic() - t:.3f} {h.hexdigest()} {n}")
PY
)
  local cpu=0 p seg=""
  for p in "$srv" "$cli"; do cpu=$((cpu + $(cpu_ticks "$p"))); done
  if [ "$prog" = kcpio ]; then
    # The server's stats line (SIGUSR1): the fake-TCP segments it refused
    # and found merged, and its retransmissions. The client keeps its
    # socket's counters to itself, but a segment merged on the way to it
    # would be dropped there and resent by the server: 0 retransmissions on
    # this lossless link means none was.
    kill -USR1 "$srv" 2>/dev/null || true
    sleep 0.3
    seg=$(grep -o 'retransmits [0-9]*\|tcp segments refused [0-9]* merged [0-9]*' "$LOGS/srv.log" | tail -2 | tr '\n' ' ' \
      | awk '{for (i = 1; i < NF; i++) { if ($i == "retransmits") x = $(i + 1); if ($i == "refused") r = $(i + 1); if ($i == "merged") m = $(i + 1) } }
             END {if (x == "" || m == "") printf ", no stats line from the server";
                  else printf ", server: segments refused %d merged %d, retransmits %d", r, m, x}')
  fi
  stop "$cli"; stop "$srv"
  # The next server binds the same port: let the kernel socket go.
  sleep 0.5
  set -- $out
  [ "$2" = "$want" ] || die "$prog IPv$fam: hash mismatch ($3 of $BYTES bytes)"
  echo "$1 $(awk -v t="$cpu" -v hz="$CLK_TCK" 'BEGIN{printf "%.2f", t/hz}')$seg"
}

median() { sort -n | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

RESULT=$(mktemp)
declare -A rates cpus
for i in $(seq "$RUNS"); do
  for fam in 4 6; do
    for prog in kcptun kcpio; do
      run "$prog" "$fam" >"$RESULT"
      read -r s c seg <"$RESULT"
      c=${c%,}
      r=$(awk -v s="$s" -v m="$MB" 'BEGIN{printf "%.1f", m * 1.048576 / s}')
      echo "run $i $prog IPv$fam: $r MB/s ($s s), tunnel CPU $c s${seg:+, $seg}, load $(cut -d' ' -f1 /proc/loadavg)"
      rates[$prog$fam]+="$r"$'\n'; cpus[$prog$fam]+="$c"$'\n'
    done
  done
done
declare -A med
for k in kcptun4 kcpio4 kcptun6 kcpio6; do
  med[$k]=$(printf '%s' "${rates[$k]}" | median)
  echo "median $k: ${med[$k]} MB/s, CPU $(printf '%s' "${cpus[$k]}" | median) s"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a / b}'; }
echo "kcpio/kcptun: IPv4 $(ratio "${med[kcpio4]}" "${med[kcptun4]}"), IPv6 $(ratio "${med[kcpio6]}" "${med[kcptun6]}")"
rm -f "$RESULT"; rm -rf "$LOGS"
echo "IPv6/IPv4: kcpio $(ratio "${med[kcpio6]}" "${med[kcpio4]}"), kcptun $(ratio "${med[kcptun6]}" "${med[kcptun4]}")"
