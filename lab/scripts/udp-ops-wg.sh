#!/bin/bash
# udp-ops-wg.sh BIN restart|outage [OUTAGE_S]: a real WireGuard (wireguard-go)
# through `kcpio-tunnel --udp` between two network namespaces of its own
# (a clean veth), an inner ping every 0.1 s, and one failure at t = 10 s:
#   restart: the tunnel server killed, started again on its port 3 s later
#   restart-noicmp: the same, with the server's namespace sending no ICMP
#            (a firewall), so the client learns only from silence
#   outage:  every packet between the namespaces dropped for OUTAGE_S (40) s
# Prints the inner ping's loss and the gap it saw, from the kill (or the
# cut) and from the server's return (or the mend) to the first reply after.
# Root; loopback-free: only the namespaces it creates, removed on exit.
set -euo pipefail
BIN=$(readlink -f "$1"); WHAT=$2; OUT_S=${3:-40}
C=ops27c$$ S=ops27s$$ WGC=owgc$$ WGS=owgs$$
RUN=$(mktemp -d /tmp/udp-ops-wg.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	ip netns del "$C" 2>/dev/null || true
	ip netns del "$S" 2>/dev/null || true
	rm -rf "$RUN"
}
trap cleanup EXIT
ip netns add "$C"; ip netns add "$S"
ip link add vc$$ type veth peer name vs$$
ip link set vc$$ netns "$C"; ip link set vs$$ netns "$S"
ip -n "$C" addr add 10.77.0.2/24 dev vc$$; ip -n "$S" addr add 10.77.0.1/24 dev vs$$
for n in "$C" "$S"; do ip -n "$n" link set lo up; done
ip -n "$C" link set vc$$ up; ip -n "$S" link set vs$$ up
(umask 077; wg genkey >"$RUN/s.key"; wg genkey >"$RUN/c.key")
wg pubkey <"$RUN/s.key" >"$RUN/s.pub"; wg pubkey <"$RUN/c.key" >"$RUN/c.pub"
server() {
	ip netns exec "$S" "$BIN" server --udp -l 10.77.0.1:29901 -t 127.0.0.1:51820 --mtu 1400 --snmpperiod 0 >>"$RUN/srv.log" 2>&1 &
	SRV=$!; PIDS+=("$SRV")
}
server
ip netns exec "$C" "$BIN" client --udp -l 127.0.0.1:29911 -r 10.77.0.1:29901 --mtu 1400 --snmpperiod 0 >"$RUN/cli.log" 2>&1 &
PIDS+=("$!")
sleep 1
MTU=$(grep -o 'set MTU = [0-9]*' "$RUN/cli.log" | head -1 | grep -o '[0-9]*$')
wg_end() { # ns ifc addr key peerpub peer [endpoint]
	WG_PROCESS_FOREGROUND=1 ip netns exec "$1" wireguard-go -f "$2" >"$RUN/$2.log" 2>&1 &
	PIDS+=("$!")
	for _ in $(seq 50); do ip -n "$1" link show "$2" >/dev/null 2>&1 && break; sleep 0.1; done
	ip -n "$1" addr add "$3/24" dev "$2"
	if [ -n "${7:-}" ]; then
		ip netns exec "$1" wg set "$2" private-key "$4" peer "$(cat "$5")" allowed-ips "$6/32" endpoint "$7" persistent-keepalive 25
	else
		ip netns exec "$1" wg set "$2" listen-port 51820 private-key "$4" peer "$(cat "$5")" allowed-ips "$6/32"
	fi
	ip -n "$1" link set "$2" mtu "$MTU" up
}
wg_end "$S" "$WGS" 10.99.0.1 "$RUN/s.key" "$RUN/c.pub" 10.99.0.2
wg_end "$C" "$WGC" 10.99.0.2 "$RUN/c.key" "$RUN/s.pub" 10.99.0.1 127.0.0.1:29911
ip netns exec "$C" ping -n -c 1 -w 10 10.99.0.1 >/dev/null
case $WHAT in restart*) TOTAL=45 ;; outage) TOTAL=$((OUT_S + 30)) ;; *) exit 2 ;; esac
if [ "$WHAT" = restart-noicmp ]; then
	ip netns exec "$S" iptables -I OUTPUT -o vs$$ -p icmp -j DROP
fi
ip netns exec "$C" ping -n -D -i 0.1 -W 1 -w "$TOTAL" 10.99.0.1 >"$RUN/ping.log" 2>&1 &
PING=$!; PIDS+=("$PING")
sleep 10
T0=$(date +%s.%N)
if [ "$WHAT" != outage ]; then
	kill -9 "$SRV"; wait "$SRV" 2>/dev/null || true
	sleep 3; server
else
	ip netns exec "$S" iptables -I INPUT -i vs$$ -j DROP
	ip netns exec "$S" iptables -I OUTPUT -o vs$$ -j DROP
	sleep "$OUT_S"
	ip netns exec "$S" iptables -D INPUT -i vs$$ -j DROP
	ip netns exec "$S" iptables -D OUTPUT -o vs$$ -j DROP
fi
T1=$(date +%s.%N)
wait "$PING" || true
python3 - "$RUN/ping.log" "$T0" "$T1" "$WHAT" <<'PY'
import re, sys
log, t0, t1, what = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
times = [float(m.group(1)) for m in re.finditer(r"^\[(\d+\.\d+)\] \d+ bytes from", open(log).read(), re.M)]
tail = open(log).read().strip().splitlines()[-2:]
before = max((t for t in times if t < t0), default=None)
after = min((t for t in times if t > t0 + 0.05), default=None)
print(what, "|", " ".join(tail))
if after:
    print(f"{what}: inner ping gap {after - before:.1f} s; first reply {after - t1:+.1f} s after the "
          f"{'server was back' if what.startswith('restart') else 'path was back'}")
else:
    print(f"{what}: no reply after the event")
PY
echo "--- client log"; grep -a "udp session\|moving\|lost\|replacement" "$RUN/cli.log" | cut -c1-160 | tail -8
