#!/bin/bash
# udp-ops-wg.sh BIN restart|outage [OUTAGE_S] [udp|beside]: a real WireGuard
# (wireguard-go) through `kcpio-tunnel --udp` (or, with `beside`, a TCP
# client's `--udplisten` and a server's `--udptarget`, TCP streams beside
# the flows) between two network namespaces of its own
# (a clean veth), an inner ping every 0.1 s, and one failure at t = 10 s:
#   restart: the tunnel server killed, started again on its port 3 s later
#   restart-noicmp: the same, with the server's namespace sending no ICMP
#            (a firewall), so the client learns only from silence
#   outage:  every packet between the namespaces dropped for OUTAGE_S (40) s
# Prints the inner ping's loss and the gap it saw, from the kill (or the
# cut) and from the server's return (or the mend) to the first reply after;
# with `beside`, also when a new TCP connection through the tunnel first
# echoed after that, and how a TCP connection opened before it ended.
# Root; loopback-free: only the namespaces it creates, removed on exit.
set -euo pipefail
BIN=$(readlink -f "$1"); WHAT=$2; OUT_S=${3:-40}; MODE=${4:-udp}
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
if [ "$MODE" = beside ]; then
	# The streams' target: a TCP echo in the server's namespace.
	ip netns exec "$S" python3 -c '
import socket, threading
l = socket.create_server(("127.0.0.1", 7))
def echo(c):
    while (d := c.recv(65536)):
        c.sendall(d)
    c.close()
while True:
    threading.Thread(target=echo, args=(l.accept()[0],), daemon=True).start()' &
	PIDS+=("$!")
	SRV_ARGS="-l 10.77.0.1:29901 -t 127.0.0.1:7 --udptarget 127.0.0.1:51820"
	CLI_ARGS="-l 127.0.0.1:29912 --udplisten 127.0.0.1:29911"
else
	SRV_ARGS="--udp -l 10.77.0.1:29901 -t 127.0.0.1:51820"
	CLI_ARGS="--udp -l 127.0.0.1:29911"
fi
server() {
	ip netns exec "$S" "$BIN" server $SRV_ARGS --mtu 1400 --snmpperiod 0 >>"$RUN/srv.log" 2>&1 &
	SRV=$!; PIDS+=("$SRV")
}
server
ip netns exec "$C" "$BIN" client $CLI_ARGS -r 10.77.0.1:29901 --mtu 1400 --snmpperiod 0 >"$RUN/cli.log" 2>&1 &
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
if [ "$MODE" = beside ]; then
	# A TCP connection opened before the failure, asked to echo every
	# 0.2 s; and after the failure a new connection every 0.5 s until one
	# echoes. Each line: the time and what happened.
	ip netns exec "$C" python3 -c '
import socket, sys, time, threading
end = time.time() + float(sys.argv[1])
def old():
    c = socket.create_connection(("127.0.0.1", 29912)); c.settimeout(1)
    while time.time() < end:
        try:
            c.sendall(b"old")
            d = c.recv(3)
            if not d:
                print(f"{time.time():.3f} old ended"); return
        except socket.timeout:
            continue
        except OSError as e:
            print(f"{time.time():.3f} old ended {e}"); return
        time.sleep(0.2)
    print(f"{time.time():.3f} old lives")
def new():
    while time.time() < end:
        try:
            c = socket.create_connection(("127.0.0.1", 29912), timeout=0.5)
            c.settimeout(0.5); c.sendall(b"new")
            if c.recv(3) == b"new":
                print(f"{time.time():.3f} new ok", flush=True)
        except OSError:
            pass
        time.sleep(0.5)
threading.Thread(target=old, daemon=True).start(); new()' "$TOTAL" >"$RUN/tcp.log" 2>&1 &
	PIDS+=("$!")
fi
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
if [ "$MODE" = beside ]; then
	python3 - "$RUN/tcp.log" "$T0" "$T1" <<'PY'
import sys
t0, t1 = float(sys.argv[2]), float(sys.argv[3])
lines = [l.split(" ", 1) for l in open(sys.argv[1]).read().split("\n") if l]
new = min((float(t) for t, w in lines if w == "new ok" and float(t) > t1), default=None)
old = [(float(t), w) for t, w in lines if w.startswith("old")]
print("tcp: new connection echoes", f"{new - t1:+.1f} s after the event ended" if new else "never")
print("tcp: connection opened before:", f"{old[0][1]} {old[0][0] - t1:+.1f} s after the event ended" if old else "?")
PY
fi
echo "--- client log"; grep -a "udp session\|moving\|lost\|replacement\|old session\|ended" "$RUN/cli.log" | cut -c1-160 | tail -8
