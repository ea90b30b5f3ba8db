#!/usr/bin/env bash
# The field test, recreated (issues 15 and 16): a 100 MiB HTTP download over an
# emulated long, lossy path, through bare TCP, Debian's kcptun, kcp-go, kcpio.
#
#   sudo lab/scripts/field.sh                        # the lossy and the clean path, every row, 3 reps
#   sudo lab/scripts/field.sh --path lossy --reps 1 --only 'TCP|kcptun'
#   sudo lab/scripts/field.sh --rate 20 --rtt 50 --loss 0.01 --queue 0.5   # one custom path
#   sudo lab/scripts/field.sh --grid [--grid-rates "20 100"] [--grid-rtts "50 200"]
#                         [--grid-losses "0 1 5 9"] [--grid-queues "0.5 2"]   # the congestion grid
#
# options: --path lossy|lossy9|clean|both (default both = lossy then clean)
#          --rate MBIT --rtt MS --loss P (each way) | --loss-down P --loss-up P
#          --jitter MS (uniform +-, per packet) --queue BDP (bottleneck queue in BDPs)
#          --reps N (3) --cap SECONDS (120) --size-mib N (100) --only REGEX (rows whose name matches)
#          --compete bbr|cubic (one competing TCP download beside each row; reports Jain's index)
#          --probe-hz N (10; the concurrent ping probe) --no-kcpio (no cargo build, kcpio rows n/a)
#          --udp-probe (instead of downloads: lab's udpprobe bulk and game loads, direct / over
#          kcpio-tunnel --udp / over UDPspeeder, on 20 Mbit/s, 200 ms, 4.6% each way; --probe-secs N (20),
#          --probe-loss P (0.046; each way: the bulk load's 9% row is --probe-loss 0.09),
#          --probe-rate MBIT (20; 10 makes the bulk load's redundancy overload the path))
#
# The WireGuard rows (wireguard-go, userspace) download through a WireGuard
# tunnel direct, over kcpio-tunnel --udp, and over UDPspeeder -f20:10 --mode 0:
#   sudo lab/scripts/field.sh --only WireGuard --size-mib 50 --path lossy9
# UDPspeeder is never part of this repository: build it yourself for a
# measurement and give its path as SPEEDER_BIN=/path/to/speederv2 (or put
# speederv2 on PATH); without it its rows say n/a. Likewise udp2raw (the row
# "kcptun over udp2raw faketcp": kcptun's default UDP tunnel carried by
# udp2raw --raw-mode faketcp --cipher-mode xor -a --fix-gro) is never part of
# this repository: UDP2RAW_BIN=/path/to/udp2raw, or udp2raw on PATH.
# KCPIO_TUNNEL_BIN=/path/to/kcpio-tunnel (and KCPIO_PEER_BIN for the peer)
# use binaries built beforehand instead of building them.
#          --drop-udp (both routers drop every UDP packet: a network that blocks UDP;
#                      the UDP rows fail, the --tcp (fake TCP) rows pass)
#
# Topology (four private namespaces, nothing else):
#   srv [s0] -- [rs0] rs [rs1] --tbf--> [rc1] rc [rc0] -- [c0] cli
# Downstream (srv -> cli) packets meet the tbf bottleneck on rs1, then the
# NFQUEUE impairer in rc (random loss, RTT/2 delay, jitter); upstream packets
# meet the tbf on rc1, then the impairer in rs. Queue limit = QUEUE x BDP
# bytes (at least 32 full packets). Offloads are off on every veth, so the
# queue and the impairer see wire-sized packets. Every bulk transfer goes
# srv -> cli: curl in cli fetches from an HTTP server in srv (directly or
# through a tunnel whose server end is in srv); the KCP peers run their
# sending client in srv and the sink-server in cli.
#
# The impairers and the bottleneck sit on the routers rs and rc, never on the
# end hosts: a carrier that reads its packets from a raw socket (kcptun --tcp,
# kcpio --tcp, udp2raw) gets a copy before the end host's netfilter and qdisc,
# so an impairer there would never see (or delay, or drop) them.
#
# A row is one small function call in ROWS below; a new contender is one line.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

PATHS=both
RATE="" RTT="" LOSS_DOWN="" LOSS_UP="" JITTER=0 QUEUE=1
REPS=3 CAP=120 SIZE_MIB=100 ONLY="" COMPETE="" PROBE_HZ=10
UDP_PROBE=0 PROBE_SECS=20 PROBE_LOSS=0.046 PROBE_RATE=20
NO_KCPIO=0 DROP_UDP=0 GRID=0 GRID_RATES="20 100" GRID_RTTS="50 200" GRID_LOSSES="0 1 5 9" GRID_QUEUES="0.5 2"
while [ $# -gt 0 ]; do
	case $1 in
	--path) PATHS=$2; shift ;;
	--rate) RATE=$2; PATHS=custom; shift ;;
	--rtt) RTT=$2; PATHS=custom; shift ;;
	--loss) LOSS_DOWN=$2; LOSS_UP=$2; PATHS=custom; shift ;;
	--loss-down) LOSS_DOWN=$2; PATHS=custom; shift ;;
	--loss-up) LOSS_UP=$2; PATHS=custom; shift ;;
	--jitter) JITTER=$2; shift ;;
	--queue) QUEUE=$2; shift ;;
	--reps) REPS=$2; shift ;;
	--cap) CAP=$2; shift ;;
	--size-mib) SIZE_MIB=$2; shift ;;
	--only) ONLY=$2; shift ;;
	--compete) COMPETE=$2; shift ;;
	--probe-hz) PROBE_HZ=$2; shift ;;
	--no-kcpio) NO_KCPIO=1 ;;
	--udp-probe) UDP_PROBE=1 ;;
	--probe-secs) PROBE_SECS=$2; shift ;;
	--probe-loss) PROBE_LOSS=$2; shift ;;
	--probe-rate) PROBE_RATE=$2; shift ;;
	--drop-udp) DROP_UDP=1 ;;
	--grid) GRID=1 ;;
	--grid-rates) GRID_RATES=$2; GRID=1; shift ;;
	--grid-rtts) GRID_RTTS=$2; GRID=1; shift ;;
	--grid-losses) GRID_LOSSES=$2; GRID=1; shift ;;
	--grid-queues) GRID_QUEUES=$2; GRID=1; shift ;;
	-h | --help) sed -n '2,40p' "$0"; exit 0 ;;
	*) die "unknown argument $1" ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || die "field.sh needs root (network namespaces, tc, iptables)"
case $COMPETE in "" | bbr | cubic) ;; *) die "--compete takes bbr or cubic" ;; esac

RUN="$OUT/field-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN/www"
SIZE=$((SIZE_MIB * 1048576))
FIELDPY=(python3 "$LAB/scripts/field.py")

# --- tools ------------------------------------------------------------------
"$ROOT/scripts/install-kcptun.sh" >&2 || loud "kcptun could not be installed: its rows will fail"
for t in ping:iputils-ping ethtool:ethtool curl:curl wireguard-go:wireguard-go wg:wireguard-tools; do
	command -v "${t%%:*}" >/dev/null || { log "installing ${t#*:}"; apt-get install -y -qq "${t#*:}" >&2; }
done
build_impairer
build_go
TUNNEL=""
if [ $NO_KCPIO = 1 ]; then
	loud "--no-kcpio: no cargo build, every kcpio row is SKIPPED"
else
	build_rust
	if [ -n "${KCPIO_TUNNEL_BIN:-}" ]; then
		# a tunnel built beforehand (e.g. at the commit being measured)
		[ -x "$KCPIO_TUNNEL_BIN" ] || die "KCPIO_TUNNEL_BIN=$KCPIO_TUNNEL_BIN is not an executable"
		TUNNEL=$KCPIO_TUNNEL_BIN
		log "kcpio-tunnel: $TUNNEL (from KCPIO_TUNNEL_BIN, not rebuilt)"
	elif build_example kcpio-tunnel; then TUNNEL=$EXAMPLE_BIN; fi
fi
PROBE=""
if [ $UDP_PROBE = 1 ] && build_example udpprobe; then PROBE=$EXAMPLE_BIN; fi
SPEEDER=${SPEEDER_BIN:-$(command -v speederv2 || true)}
[ -n "$SPEEDER" ] && [ -x "$SPEEDER" ] || { SPEEDER=""; loud "no UDPspeeder (SPEEDER_BIN unset, speederv2 not on PATH): its rows are n/a"; }
UDP2RAW=${UDP2RAW_BIN:-$(command -v udp2raw || true)}
[ -n "$UDP2RAW" ] && [ -x "$UDP2RAW" ] || { UDP2RAW=""; loud "no udp2raw (UDP2RAW_BIN unset, udp2raw not on PATH): its rows are n/a"; }
# kcpio-tunnel speaks kcptun's flags; a checkout whose tunnel does not
# know --smuxver (the old own-framing one) gets n/a in the kcpio tunnel rows.
TUNNEL_COMPAT=0
# (the help is read whole first: `grep -q` closing the pipe early would fail
# the pipeline under pipefail)
if [ -n "$TUNNEL" ] && [[ "$("$TUNNEL" client --help 2>&1 || true)" == *--smuxver* ]]; then TUNNEL_COMPAT=1; fi

# --- the path -----------------------------------------------------------------
S="kfield-s-$$" RS="kfield-rs-$$" RC="kfield-rc-$$" C="kfield-c-$$"
SRV_IP=10.77.1.1 CLI_IP=10.77.3.2
build_topology() {
	local ns
	for ns in "$S" "$RS" "$RC" "$C"; do
		ip netns add "$ns"
		NAMESPACES+=("$ns")
		ip -n "$ns" link set lo up
	done
	# veth pairs are created straight inside the namespaces: no interface of
	# this topology ever exists in the host's namespace.
	ip link add name s0 netns "$S" type veth peer name rs0 netns "$RS"
	ip link add name rs1 netns "$RS" type veth peer name rc1 netns "$RC"
	ip link add name rc0 netns "$RC" type veth peer name c0 netns "$C"
	local pair
	for pair in "$S s0 10.77.1.1/24" "$RS rs0 10.77.1.2/24" "$RS rs1 10.77.2.1/24" "$RC rc1 10.77.2.2/24" \
		"$RC rc0 10.77.3.1/24" "$C c0 10.77.3.2/24"; do
		set -- $pair
		ip -n "$1" addr add "$3" dev "$2"
		ip -n "$1" link set "$2" up
		ip netns exec "$1" ethtool -K "$2" tso off gso off gro off tx-udp-segmentation off >/dev/null 2>&1 ||
			ip netns exec "$1" ethtool -K "$2" tso off gso off gro off >/dev/null
	done
	ip -n "$S" route add default via 10.77.1.2
	ip -n "$C" route add default via 10.77.3.1
	ip -n "$RS" route add 10.77.3.0/24 via 10.77.2.2
	ip -n "$RC" route add 10.77.1.0/24 via 10.77.2.1
	ip netns exec "$RS" sysctl -qw net.ipv4.ip_forward=1
	ip netns exec "$RC" sysctl -qw net.ipv4.ip_forward=1
	# impairers: downstream in rc (packets that came over the bottleneck from rs),
	# upstream in rs (packets that came over the bottleneck from rc)
	ip netns exec "$RC" iptables -A FORWARD -i rc1 -j NFQUEUE --queue-num 0
	ip netns exec "$RS" iptables -A FORWARD -i rs1 -j NFQUEUE --queue-num 0
	if [ $DROP_UDP = 1 ]; then
		# a network that blocks UDP: both routers drop it before it is impaired
		ip netns exec "$RC" iptables -I FORWARD -p udp -j DROP
		ip netns exec "$RS" iptables -I FORWARD -p udp -j DROP
	fi
	# nothing leaves: each namespace holds lo and its own veths only
	for ns in "$S" "$RS" "$RC" "$C"; do
		ip -n "$ns" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -vqE '^(lo|s0|rs0|rs1|rc1|rc0|c0)$' &&
			die "namespace $ns has an unexpected interface"
	done
	# the HTTP server and the file behind every row
	head -c "$SIZE" /dev/urandom >"$RUN/www/file.bin"
	FILE_SHA=$(sha256sum "$RUN/www/file.bin" | cut -d' ' -f1)
	echo bbr >"$RUN/cc"
	ip netns exec "$S" "${FIELDPY[@]}" http "$RUN/www" 8080 "$RUN/cc" >"$RUN/http.log" 2>&1 &
	CHILDREN+=("$!")
	wait_listen "$S" tcp 8080 || die "the HTTP server did not start"
}

# wait_listen NS tcp|udp PORT: up to 10 s
wait_listen() {
	local i flag=-Hltn
	[ "$2" = udp ] && flag=-Hlun
	for i in $(seq 100); do
		[ -n "$(ip netns exec "$1" ss "$flag" "sport = :$3")" ] && return 0
		sleep 0.1
	done
	return 1
}

# set_path NAME RATE_MBIT RTT_MS LOSS_DOWN LOSS_UP JITTER_MS QUEUE_BDP
set_path() {
	P_NAME=$1 P_RATE=$2 P_RTT=$3 P_LD=$4 P_LU=$5 P_JIT=$6 P_Q=$7
	P_QBYTES=$(python3 -c 'import sys; r,t,q=map(float,sys.argv[1:]); print(max(int(q*r*1e6/8*t/1e3), 32*1514))' "$P_RATE" "$P_RTT" "$P_Q")
	local burst; burst=$(python3 -c 'import sys; print(max(int(float(sys.argv[1])*1e6/8/1000), 4*1514))' "$P_RATE")
	ip netns exec "$RS" tc qdisc replace dev rs1 root tbf rate "${P_RATE}mbit" burst "$burst" limit "$P_QBYTES"
	ip netns exec "$RC" tc qdisc replace dev rc1 root tbf rate "${P_RATE}mbit" burst "$burst" limit "$P_QBYTES"
	P_DELAY=$(python3 -c 'import sys; print(float(sys.argv[1])/2)' "$P_RTT")ms
	log "path $P_NAME: ${P_RATE} Mbit/s, RTT ${P_RTT} ms (${P_DELAY} each way), loss ${P_LD} down / ${P_LU} up, jitter ±${P_JIT} ms, queue ${P_Q} BDP = ${P_QBYTES} B"
}

IMP_DOWN="" IMP_UP=""
start_impairers() { # FILEPREFIX SEED
	start_impairer "$1.imp-down" "$RC" --loss "$P_LD" --delay "$P_DELAY" --jitter "${P_JIT}ms" --seed "$2" \
		--lifetime "$((CAP + 120))s" || die "impairer did not start"
	IMP_DOWN=$IMPAIRER_PID
	start_impairer "$1.imp-up" "$RS" --loss "$P_LU" --delay "$P_DELAY" --jitter "${P_JIT}ms" --seed "$(($2 + 1000))" \
		--lifetime "$((CAP + 120))s" || die "impairer did not start"
	IMP_UP=$IMPAIRER_PID
}
stop_impairers() { stop "$IMP_DOWN"; stop "$IMP_UP"; }

snap() { "${FIELDPY[@]}" snap "$S" s0 "$C" c0 "$RS" rs1 "$RC" rc1; }
now() { date +%s.%N; }
# cpu_of PID...: summed utime+stime in seconds (0 for a PID that is gone)
cpu_of() {
	local t=0 p
	for p in "$@"; do t=$((t + $(cpu_ticks "$p" 2>/dev/null || echo 0))); done
	python3 -c 'import sys; print(int(sys.argv[1])/int(sys.argv[2]))' "$t" "$CLK_TCK"
}

# --- rows ---------------------------------------------------------------------
# Each row function gets the run's file prefix F first and writes F.res
# ("key value" lines): status ok|failed|n/a, bytes, secs, partial 0|1,
# hash_ok 0|1, cpu_s (tunnel/peer processes, client + server), t0/t1 (epoch
# of the transfer), note.

# http_fetch F URL: curl in cli, sha256 of what arrived, capped at CAP seconds.
http_fetch() {
	local f=$1 url=$2 t0 t1
	t0=$(now)
	# in the background and waited for, so that a signal stops the run at once
	ip netns exec "$C" bash -c 'curl -sS --max-time "$1" -w "%{stderr}CURL %{size_download} %{time_total} %{exitcode}\n" "$2" | sha256sum' \
		_ "$CAP" "$url" >"$f.sha" 2>"$f.curl" &
	local w=$!
	CHILDREN+=("$w")
	wait "$w" || true
	forget "$w"
	t1=$(now)
	local line by secs rc sha
	line=$(grep -m1 '^CURL ' "$f.curl" || echo "CURL 0 0 99")
	read -r _ by secs rc <<<"$line"
	sha=$(cut -d' ' -f1 "$f.sha")
	{
		echo "bytes $by"
		echo "secs $secs"
		echo "t0 $t0"
		echo "t1 $t1"
		[ "$by" = "$SIZE" ] && echo "partial 0" || echo "partial 1"
		[ "$sha" = "$FILE_SHA" ] && echo "hash_ok 1" || echo "hash_ok 0"
		[ "$by" -gt 0 ] && echo "status ok" || echo "status failed"
		[ "$rc" = 0 ] || echo "note curl exit $rc"
	} >>"$f.res"
}

# row_tcp F CC: bare TCP, the HTTP server's socket set to congestion control CC.
row_tcp() {
	echo "$2" >"$RUN/cc"
	http_fetch "$1" "http://$SRV_IP:8080/file.bin"
	echo bbr >"$RUN/cc"
}

# tunnel_cmd IMPL client|server: the command line of one tunnel end.
tunnel_cmd() {
	case $1:$2 in
	kcptun:client) echo "kcptun-client -l 127.0.0.1:12948 -r $SRV_IP:29900 --quiet" ;;
	kcptun:server) echo "kcptun-server -l $SRV_IP:29900 -t 127.0.0.1:8080 --quiet" ;;
	kcpio:client) echo "$TUNNEL client -l 127.0.0.1:12948 -r $SRV_IP:29900" ;;
	kcpio:server) echo "$TUNNEL server -l $SRV_IP:29900 -t 127.0.0.1:8080" ;;
	esac
}

# row_tunnel F CLIENT_IMPL SERVER_IMPL FLAGS [KCPIO_FLAGS]: a kcptun-style
# tunnel (kcptun or kcpio's kcpio-tunnel, either end), the HTTP download
# through it; FLAGS on both ends, KCPIO_FLAGS on the kcpio ends only.
row_tunnel() {
	local f=$1 ci=$2 si=$3 flags=${4:-} kflags=${5:-}
	local need_compat=0
	[ "$ci" = kcpio ] || [ "$si" = kcpio ] && need_compat=1
	if [ $need_compat = 1 ] && [ -z "$TUNNEL" ]; then
		printf 'status n/a\nnote kcpio-tunnel did not build\n' >"$f.res"; return
	fi
	if [ $need_compat = 1 ] && [ $TUNNEL_COMPAT = 0 ]; then
		printf 'status n/a\nnote kcpio-tunnel is not kcptun-compatible yet\n' >"$f.res"; return
	fi
	# shellcheck disable=SC2206
	local fl=($flags) sc cc sp cp
	read -r -a sc <<<"$(tunnel_cmd "$si" server)"
	read -r -a cc <<<"$(tunnel_cmd "$ci" client)"
	# shellcheck disable=SC2206
	[ "$si" = kcpio ] && sc+=($kflags)
	# shellcheck disable=SC2206
	[ "$ci" = kcpio ] && cc+=($kflags)
	ip netns exec "$S" "${sc[@]}" "${fl[@]}" >"$f.srv" 2>&1 &
	sp=$!; CHILDREN+=("$sp")
	ip netns exec "$C" "${cc[@]}" "${fl[@]}" >"$f.cli" 2>&1 &
	cp=$!; CHILDREN+=("$cp")
	# --tcp (fake TCP): the server end listens on a kernel TCP socket
	local proto=udp
	[[ " $flags $kflags " == *" --tcp "* ]] && proto=tcp
	if ! wait_listen "$S" "$proto" 29900 || ! wait_listen "$C" tcp 12948; then
		printf 'status failed\nnote tunnel did not start: %s\n' "$(tail -c 200 "$f.srv" "$f.cli" | tr '\n' ' ')" >"$f.res"
		stop "$sp"; stop "$cp"; return
	fi
	local c0; c0=$(cpu_of "$sp" "$cp")
	http_fetch "$f" "http://127.0.0.1:12948/file.bin"
	echo "cpu_s $(python3 -c 'import sys; print(float(sys.argv[1])-float(sys.argv[2]))' "$(cpu_of "$sp" "$cp")" "$c0")" >>"$f.res"
	kill -0 "$sp" 2>/dev/null || echo "note the tunnel server died" >>"$f.res"
	stop "$sp"; stop "$cp"
}

# row_udp2raw F: kcptun (default flags, UDP) carried by udp2raw's fake TCP
# (--raw-mode faketcp --cipher-mode xor -a --fix-gro, the field test's best
# row): kcptun-server on 127.0.0.1:29900 in srv behind a udp2raw server on
# SRV_IP:29903; in cli kcptun-client sends to a udp2raw client on
# 127.0.0.1:29904. udp2raw's -a adds its iptables rules inside the
# namespaces (they go with them). CPU: all four processes.
row_udp2raw() {
	local f=$1 ksp kcp usp ucp
	if [ -z "$UDP2RAW" ]; then printf 'status n/a\nnote no udp2raw binary (UDP2RAW_BIN)\n' >"$f.res"; return; fi
	local u=(--raw-mode faketcp --cipher-mode xor -a --fix-gro -k passwd)
	ip netns exec "$S" kcptun-server -l 127.0.0.1:29900 -t 127.0.0.1:8080 --quiet >"$f.srv" 2>&1 &
	ksp=$!; CHILDREN+=("$ksp")
	ip netns exec "$S" "$UDP2RAW" -s -l "$SRV_IP:29903" -r 127.0.0.1:29900 "${u[@]}" >"$f.u2r-srv" 2>&1 &
	usp=$!; CHILDREN+=("$usp")
	ip netns exec "$C" "$UDP2RAW" -c -l 127.0.0.1:29904 -r "$SRV_IP:29903" "${u[@]}" >"$f.u2r-cli" 2>&1 &
	ucp=$!; CHILDREN+=("$ucp")
	ip netns exec "$C" kcptun-client -l 127.0.0.1:12948 -r 127.0.0.1:29904 --quiet >"$f.cli" 2>&1 &
	kcp=$!; CHILDREN+=("$kcp")
	if ! wait_listen "$S" udp 29900 || ! wait_listen "$C" udp 29904 || ! wait_listen "$C" tcp 12948 ||
		! wait_line "$f.u2r-cli" 'changed state (from .* )?to ready|client_ready' 15 >/dev/null; then
		printf 'status failed\nnote udp2raw or kcptun did not start: %s\n' \
			"$(tail -c 200 "$f.u2r-srv" "$f.u2r-cli" | tr '\n' ' ')" >"$f.res"
		stop "$kcp"; stop "$ucp"; stop "$usp"; stop "$ksp"; return
	fi
	local c0; c0=$(cpu_of "$ksp" "$kcp" "$usp" "$ucp")
	http_fetch "$f" "http://127.0.0.1:12948/file.bin"
	echo "cpu_s $(python3 -c 'import sys; print(float(sys.argv[1])-float(sys.argv[2]))' "$(cpu_of "$ksp" "$kcp" "$usp" "$ucp")" "$c0")" >>"$f.res"
	stop "$kcp"; stop "$ucp"; stop "$usp"; stop "$ksp"
}

# row_peer F IMPL FLAGS: KCP directly (no tunnel, no crypto, no FEC): the
# peer's client in srv sends SIZE pattern bytes to a sink-server in cli.
row_peer() {
	local f=$1 b; b=$(peer_bin "$2")
	if [ -z "$b" ]; then printf 'status n/a\nnote no %s peer binary\n' "$2" >"$f.res"; return; fi
	# shellcheck disable=SC2206
	local fl=($3 --stream --mtu 1350 --sockbuf 4194304) sp port
	ip netns exec "$C" "$b" sink-server --addr "$CLI_IP:0" --quiet --max-sessions 1 --idle 10s \
		--duration "$((CAP + 60))s" "${fl[@]}" >"$f.srv" 2>&1 &
	sp=$!; CHILDREN+=("$sp")
	if ! port=$(port_of "$(wait_line "$f.srv" 'listening on' 10)") || [ -z "$port" ]; then
		printf 'status failed\nnote sink-server did not start: %s\n' "$(head -c 200 "$f.srv" | tr '\n' ' ')" >"$f.res"
		stop "$sp"; return
	fi
	local c0 t0 t1; c0=$(cpu_of "$sp"); t0=$(now)
	ip netns exec "$S" "$b" client --addr "$CLI_IP:$port" --sink --bytes "$SIZE" --timeout "${CAP}s" --json \
		"${fl[@]}" >"$f.peer.json" 2>"$f.peer.err" &
	local w=$!
	CHILDREN+=("$w")
	wait "$w" || true
	forget "$w"
	t1=$(now)
	local cs; cs=$(cpu_of "$sp")
	stop "$sp"
	python3 - "$f.peer.json" "$SIZE" "$c0" "$cs" "$t0" "$t1" >>"$f.res" <<'PY'
import json, sys
p, size, c0, c1, t0, t1 = sys.argv[1:]
try:
    j = json.loads(open(p).read().strip().splitlines()[-1])
except Exception as e:
    print("status failed"); print(f"note no client JSON ({e})"); sys.exit()
by = int(j.get("bytes_verified", 0)); secs = j.get("elapsed_ms", 0) / 1000
print(f"bytes {by}"); print(f"secs {secs}"); print(f"t0 {t0}"); print(f"t1 {t1}")
print("partial", 0 if by >= int(size) else 1); print("hash_ok", 1 if j.get("pass") else 0)
print("status", "ok" if by > 0 else "failed")
print("cpu_s", float(c1) - float(c0) + j.get("cpu_user_s", 0) + j.get("cpu_sys_s", 0))
print("steady_MBps", j.get("steady_mb_per_s", 0))
if not j.get("pass"): print("note", str(j.get("error", "client failed"))[:120])
PY
}

# --- UDP carriers: WireGuard and the probe's loads ------------------------------
# udp_carrier F KIND TARGET_PORT: starts a UDP carrier whose server end (in srv)
# sends to 127.0.0.1:TARGET_PORT: kcpio (kcpio-tunnel --udp, kcptun's default
# flags with --mtu 1400 so that WireGuard's 1280 fits) or speeder (UDPspeeder
# -f20:10 --mode 0, as published, defaults otherwise); "direct" starts none.
# Leaves the client end's address in CARRIER_AT (in cli), the processes in
# CARRIER_PIDS, and for kcpio the MTU it prints for WireGuard in CARRIER_WG_MTU.
# Returns 1 after writing n/a or failed to F.res.
CARRIER_AT="" CARRIER_PIDS=() CARRIER_WG_MTU=""
udp_carrier() {
	local f=$1 kind=$2 port=$3 sp cp
	CARRIER_PIDS=() CARRIER_WG_MTU=""
	case $kind in
	direct)
		CARRIER_AT="$SRV_IP:$port"
		return 0
		;;
	kcpio)
		[ -n "$TUNNEL" ] || { printf 'status n/a\nnote kcpio-tunnel did not build\n' >>"$f.res"; return 1; }
		ip netns exec "$S" "$TUNNEL" server --udp -l "$SRV_IP:29901" -t "127.0.0.1:$port" --mtu 1400 --snmpperiod 5 >"$f.srv" 2>&1 &
		sp=$!
		ip netns exec "$C" "$TUNNEL" client --udp -l 127.0.0.1:29911 -r "$SRV_IP:29901" --mtu 1400 --snmpperiod 5 >"$f.cli" 2>&1 &
		cp=$!
		CARRIER_AT=127.0.0.1:29911
		;;
	speeder)
		[ -n "$SPEEDER" ] || { printf 'status n/a\nnote no UDPspeeder binary (SPEEDER_BIN)\n' >>"$f.res"; return 1; }
		ip netns exec "$S" "$SPEEDER" -s -l "$SRV_IP:29902" -r "127.0.0.1:$port" -f20:10 --mode 0 -k passwd >"$f.srv" 2>&1 &
		sp=$!
		ip netns exec "$C" "$SPEEDER" -c -l 127.0.0.1:29912 -r "$SRV_IP:29902" -f20:10 --mode 0 -k passwd >"$f.cli" 2>&1 &
		cp=$!
		CARRIER_AT=127.0.0.1:29912
		;;
	*) die "unknown carrier $kind" ;;
	esac
	CHILDREN+=("$sp" "$cp")
	CARRIER_PIDS=("$sp" "$cp")
	if ! wait_listen "$C" udp "${CARRIER_AT##*:}"; then
		printf 'status failed\nnote carrier did not start: %s\n' "$(tail -c 200 "$f.srv" "$f.cli" | tr '\n' ' ')" >>"$f.res"
		udp_carrier_stop; return 1
	fi
	if [ "$kind" = kcpio ]; then
		CARRIER_WG_MTU=$(wait_line "$f.cli" 'set MTU = [0-9]+' 10 | sed -nE 's/.*set MTU = ([0-9]+).*/\1/p')
		[ -n "$CARRIER_WG_MTU" ] || { printf 'status failed\nnote no session: %s\n' "$(tail -c 200 "$f.cli" | tr '\n' ' ')" >>"$f.res"; udp_carrier_stop; return 1; }
	fi
}
udp_carrier_stop() {
	local p
	for p in "${CARRIER_PIDS[@]}"; do stop "$p"; done
	CARRIER_PIDS=()
}

# WireGuard keys, made once per run; interfaces named per process (the UAPI
# socket directory is shared by every namespace).
WG_S="kwgs$$" WG_C="kwgc$$"
wg_keys() {
	[ -f "$RUN/wg-s.key" ] && return 0
	(umask 077; wg genkey >"$RUN/wg-s.key"; wg genkey >"$RUN/wg-c.key")
	wg pubkey <"$RUN/wg-s.key" >"$RUN/wg-s.pub"
	wg pubkey <"$RUN/wg-c.key" >"$RUN/wg-c.pub"
}
# wg_end NS IFACE ADDR KEY PEER_PUB PEER_IP MTU [ENDPOINT]: one wireguard-go end (its PID in WG_PID)
WG_PID=""
wg_end() {
	local ns=$1 ifc=$2 addr=$3 key=$4 pub=$5 peer=$6 mtu=$7 ep=${8:-} i
	WG_PROCESS_FOREGROUND=1 ip netns exec "$ns" wireguard-go -f "$ifc" >"$RUN/$ifc.log" 2>&1 &
	WG_PID=$!
	CHILDREN+=("$WG_PID")
	for i in $(seq 50); do ip -n "$ns" link show "$ifc" >/dev/null 2>&1 && break; sleep 0.1; done
	ip -n "$ns" addr add "$addr/24" dev "$ifc"
	if [ -n "$ep" ]; then
		ip netns exec "$ns" wg set "$ifc" private-key "$key" peer "$(cat "$pub")" allowed-ips "$peer/32" endpoint "$ep" persistent-keepalive 25
	else
		ip netns exec "$ns" wg set "$ifc" listen-port 51820 private-key "$key" peer "$(cat "$pub")" allowed-ips "$peer/32"
	fi
	ip -n "$ns" link set "$ifc" mtu "$mtu" up
}

# row_wg F KIND: the download through WireGuard (MTU 1420 direct, 1280 over
# UDPspeeder as in its published WireGuard runs, what kcpio-tunnel prints over it).
row_wg() {
	local f=$1 kind=$2 mtu ws wc
	command -v wireguard-go >/dev/null || { printf 'status n/a\nnote no wireguard-go\n' >"$f.res"; return; }
	wg_keys
	udp_carrier "$f" "$kind" 51820 || return 0
	case $kind in direct) mtu=1420 ;; speeder) mtu=1280 ;; kcpio) mtu=$CARRIER_WG_MTU ;; esac
	wg_end "$S" "$WG_S" 10.99.0.1 "$RUN/wg-s.key" "$RUN/wg-c.pub" 10.99.0.2 "$mtu"
	ws=$WG_PID
	wg_end "$C" "$WG_C" 10.99.0.2 "$RUN/wg-c.key" "$RUN/wg-s.pub" 10.99.0.1 "$mtu" "$CARRIER_AT"
	wc=$WG_PID
	local c0; c0=$(cpu_of "${CARRIER_PIDS[@]}" "$ws" "$wc")
	# the handshake first (bounded), then the download
	ip netns exec "$C" ping -n -c 1 -w 10 10.99.0.1 >/dev/null 2>&1 || true
	http_fetch "$f" "http://10.99.0.1:8080/file.bin"
	echo "cpu_s $(python3 -c 'import sys; print(float(sys.argv[1])-float(sys.argv[2]))' "$(cpu_of "${CARRIER_PIDS[@]}" "$ws" "$wc")" "$c0")" >>"$f.res"
	echo "note WireGuard MTU $mtu" >>"$f.res"
	stop "$wc"; stop "$ws"
	ip -n "$C" link del "$WG_C" 2>/dev/null || true
	ip -n "$S" link del "$WG_S" 2>/dev/null || true
	udp_carrier_stop
}

# run_probe REP LOAD KIND: the probe's LOAD (bulk|game) for PROBE_SECS over
# KIND; one JSON line appended to $RUN/probe.jsonl.
run_probe() {
	local rep=$1 load=$2 kind=$3
	N=$((N + 1))
	local f="$RUN/$N" rp
	: >"$f.res"
	log "[probe rep $rep] $load over $kind"
	start_impairers "$f" "$((rep * 2 + 1))"
	if udp_carrier "$f" "$kind" 9000; then
		ip netns exec "$S" "$PROBE" recv --listen 0.0.0.0:9000 --secs "$((PROBE_SECS + 30))" --idle 3 --json >"$f.recv" 2>&1 &
		rp=$!; CHILDREN+=("$rp")
		wait_listen "$S" udp 9000 || die "the probe receiver did not start"
		local c0; c0=$(cpu_of "${CARRIER_PIDS[@]}")
		snap >"$f.snap0"
		ip netns exec "$C" "$PROBE" send --to "$CARRIER_AT" --preset "$load" --secs "$PROBE_SECS" --json >"$f.send" 2>&1 || true
		wait "$rp" || true
		forget "$rp"
		snap >"$f.snap1"
		echo "cpu_s $(python3 -c 'import sys; print(float(sys.argv[1])-float(sys.argv[2]))' "$(cpu_of "${CARRIER_PIDS[@]}")" "$c0")" >>"$f.res"
		udp_carrier_stop
	fi
	stop_impairers
	python3 - "$f" "$load" "$kind" "$rep" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RUN/probe.jsonl" <<'PY'
import json, sys
f, load, kind, rep, la = sys.argv[1:]
r = {"load": load, "kind": kind, "rep": int(rep), "load_avg": la}
res = dict(l.strip().partition(" ")[::2] for l in open(f + ".res") if l.strip())
r["note"] = res.get("note", "")
try:
    s = json.loads(open(f + ".send").read().strip().splitlines()[-1])
    v = json.loads(open(f + ".recv").read().strip().splitlines()[-1])
    a = json.loads(open(f + ".snap0").read()); b = json.loads(open(f + ".snap1").read())
    r.update({k: v[k] for k in ("expected", "received", "lost", "loss", "duplicates", "reordered",
                               "delay_ms_p50", "delay_ms_p99", "delay_ms_max")})
    sent = s["sent"]
    r["wire_pkts_x"] = (b["cli_tx_pkts"] - a["cli_tx_pkts"]) / sent
    r["wire_bytes_x"] = (b["cli_tx_ip_bytes"] - a["cli_tx_ip_bytes"]) / (sent * (s["size"] + 28))
    r["cpu_s"] = float(res.get("cpu_s", 0) or 0)
    r["status"] = "ok"
except Exception as e:
    r["status"] = res.get("status", "failed")
    r["note"] = (r["note"] + f" ({e})").strip()
print(json.dumps(r))
PY
	sleep 1
}

# probe_table: medians per load and carrier, as markdown.
probe_table() {
	python3 - "$RUN/probe.jsonl" <<'PY'
import json, sys, statistics as st
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| load | carrier | runs | loss % | one-way delay p50 / p99 / max, ms (base 100) | wire pkts × | wire bytes × | CPU c+s, s |")
print("|---|---|---:|---:|---|---:|---:|---:|")
seen = []
for r in runs:
    if (r["load"], r["kind"]) not in seen:
        seen.append((r["load"], r["kind"]))
for load, kind in seen:
    rs = [r for r in runs if r["load"] == load and r["kind"] == kind and r["status"] == "ok"]
    if not rs:
        notes = {r.get("note", "") for r in runs if r["load"] == load and r["kind"] == kind}
        print(f"| {load} | {kind} | 0 | n/a: {'; '.join(sorted(notes))} | | | | |")
        continue
    m = lambda k: st.median(r[k] for r in rs)
    print(f"| {load} | {kind} | {len(rs)} | {m('loss') * 100:.3f} | {m('delay_ms_p50'):.1f} / {m('delay_ms_p99'):.1f} / {m('delay_ms_max'):.1f} "
          f"| {m('wire_pkts_x'):.2f} | {m('wire_bytes_x'):.2f} | {m('cpu_s'):.2f} |")
PY
}

KCP_NC1="--nodelay fast3 --sndwnd 1024 --rcvwnd 1024"
KCP_NC0="--nodelay 1,10,2,0 --sndwnd 1024 --rcvwnd 1024"
# kcpio's model-based controller (--congestion model, kcpio only): fast3's
# timing, windows of 16384: two BDPs of the 100 Mbit/s x 200 ms path in
# flight plus the out-of-order data a segment lost several times in a row
# holds back at 9% loss (on the simulator, kcpio/tests/cc.rs field_point, 8192
# held it to 76% of rate x (1 - loss) from 5 s on, 16384 to 93%).
# The receiving peer sends every ACK twice (--ackrepeat, kcpio's default,
# kcpio only): a lost ACK packet otherwise makes the sender resend about a
# flush's worth of segments that arrived (9% of the wire at 9% loss).
KCP_MODEL="--nodelay fast3 --sndwnd 16384 --rcvwnd 16384 --congestion model --ackrepeat"
# the same with every ACK sent once (kcp-go's receiver)
KCP_MODEL_ONCE="--nodelay fast3 --sndwnd 16384 --rcvwnd 16384 --congestion model"
# the same with windows that size themselves from 1024 (--maxwnd, kcpio only)
KCP_MODEL_AUTO="--nodelay fast3 --sndwnd 1024 --rcvwnd 1024 --maxwnd 16384 --congestion model --ackrepeat"
# the library's defaults (Config::builder(): kcptun's fast timing, windows
# 1024, each ACK sent twice) with no controller and with the model
KCPIO_DEFAULTS_NC1="--nodelay fast --sndwnd 1024 --rcvwnd 1024 --ackrepeat"
KCPIO_DEFAULTS_MODEL="--nodelay fast --sndwnd 1024 --rcvwnd 1024 --ackrepeat --congestion model"
FAST3_1024="--mode fast3 --sndwnd 1024 --rcvwnd 1024"
# the kcpio tunnel's defaults are kcptun's plus the model-based controller and
# windows growing to 16384 segments; this is kcptun's own behaviour instead
# (no controller, fixed windows): the tunnel's default before that change
TUNNEL_NC1="--congestion none --maxwnd 0"
# name|function and arguments (after F)
ROWS=(
	"TCP BBR|row_tcp bbr"
	"TCP CUBIC|row_tcp cubic"
	"kcptun default|row_tunnel kcptun kcptun"
	"kcptun fast3 1024|row_tunnel kcptun kcptun '$FAST3_1024'"
	"kcp-go fast3 1024 nc=1|row_peer kcp-go '$KCP_NC1'"
	"kcp-go 1,10,2 1024 nc=0|row_peer kcp-go '$KCP_NC0'"
	"kcpio fast3 1024 nc=1|row_peer kcpio '$KCP_NC1'"
	"kcpio 1,10,2 1024 nc=0|row_peer kcpio '$KCP_NC0'"
	"kcpio fast3 16384 model|row_peer kcpio '$KCP_MODEL'"
	"kcpio fast3 16384 model, ACKs once|row_peer kcpio '$KCP_MODEL_ONCE'"
	"kcpio defaults nc=1|row_peer kcpio '$KCPIO_DEFAULTS_NC1'"
	"kcpio defaults model|row_peer kcpio '$KCPIO_DEFAULTS_MODEL'"
	"kcpio fast3 1024..16384 model|row_peer kcpio '$KCP_MODEL_AUTO'"
	"kcpio tunnel kcptun-compatible default|row_tunnel kcpio kcpio"
	"kcpio tunnel kcptun-compatible default --fixedfec|row_tunnel kcpio kcpio '' '--fixedfec'"
	"kcpio tunnel kcptun-compatible fast3 1024|row_tunnel kcpio kcpio '$FAST3_1024'"
	"kcpio tunnel kcptun nc=1|row_tunnel kcpio kcpio '$TUNNEL_NC1'"
	"kcpio client ↔ kcptun server default|row_tunnel kcpio kcptun"
	"kcptun client ↔ kcpio server default|row_tunnel kcptun kcpio"
	"kcptun client ↔ kcpio server kcptun nc=1|row_tunnel kcptun kcpio '' '$TUNNEL_NC1'"
	"WireGuard direct|row_wg direct"
	"WireGuard over kcpio-tunnel --udp|row_wg kcpio"
	"WireGuard over UDPspeeder -f20:10 --mode 0|row_wg speeder"
	"kcptun default --tcp|row_tunnel kcptun kcptun --tcp"
	"kcpio tunnel kcptun-compatible default --tcp|row_tunnel kcpio kcpio --tcp"
	"kcptun over udp2raw faketcp|row_udp2raw"
)

# --- one run ------------------------------------------------------------------
N=0
run_row() { # REP NAME CALL
	local rep=$1 name=$2 call=$3
	N=$((N + 1))
	local f="$RUN/$N"
	printf '{"path": "%s", "row": "%s", "rep": %d, "rate_mbit": %s, "rtt_ms": %s, "loss_down": %s, "loss_up": %s, "jitter_ms": %s, "queue_bdp": %s, "queue_bytes": %s, "size": %s, "cap_s": %s, "compete": "%s", "load_before": "%s"}\n' \
		"$P_NAME" "$name" "$rep" "$P_RATE" "$P_RTT" "$P_LD" "$P_LU" "$P_JIT" "$P_Q" "$P_QBYTES" "$SIZE" "$CAP" "$COMPETE" \
		"$(cut -d' ' -f1-3 /proc/loadavg)" >"$f.meta"
	: >"$f.res"
	# shellcheck disable=SC2086
	eval "set -- $call"
	local fn=$1; shift
	if [ "$fn" = row_tunnel ] && { [ "$1" = kcpio ] || [ "$2" = kcpio ]; } && [ $TUNNEL_COMPAT = 0 ]; then
		"$fn" "$f" "$@" # prints n/a without touching the path
		"${FIELDPY[@]}" record "$RUN" "$N"
		return
	fi
	log "[$P_NAME rep $rep] $name"
	start_impairers "$f" "$((rep * 2 + 1))"
	local pp fp="" fsp=""
	ip netns exec "$C" ping -n -i "$(python3 -c "print(1/$PROBE_HZ)")" -W 3 "$SRV_IP" >"$f.ping" 2>&1 &
	pp=$!; CHILDREN+=("$pp")
	if [ -n "$COMPETE" ]; then
		ip netns exec "$S" "${FIELDPY[@]}" serve 9000 "$COMPETE" >/dev/null 2>&1 &
		fsp=$!; CHILDREN+=("$fsp")
		wait_listen "$S" tcp 9000 || die "the competing-flow server did not start"
		ip netns exec "$C" "${FIELDPY[@]}" fetch "$SRV_IP" 9000 "$f.flow" "$((CAP + 30))" &
		fp=$!; CHILDREN+=("$fp")
		sleep 5 # let it reach its share before the row starts
	fi
	snap >"$f.snap0"
	"$fn" "$f" "$@"
	snap >"$f.snap1"
	[ -n "$fp" ] && { stop "$fp"; stop "$fsp"; }
	kill -INT "$pp" 2>/dev/null || true
	stop "$pp"
	stop_impairers
	"${FIELDPY[@]}" record "$RUN" "$N"
	log "  $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["status"], "%.2f MB/s" % r.get("goodput_MBps", 0), "partial" if r.get("partial") else "", r.get("note", ""))' "$f.json")"
	sleep 1 # let the queues drain
}

run_path() { # runs every selected row REPS times, interleaved
	local rep r name call
	for rep in $(seq "$REPS"); do
		for r in "${ROWS[@]}"; do
			name=${r%%|*} call=${r#*|}
			if [ -n "$ONLY" ] && ! grep -qE "$ONLY" <<<"$name"; then continue; fi
			run_row "$rep" "$name" "$call"
		done
	done
}

UDP_NOTE=""
[ $DROP_UDP = 1 ] && UDP_NOTE=", UDP dropped"
build_topology
log "results in $RUN; load average $(cut -d' ' -f1-3 /proc/loadavg); kcpio tunnel kcptun-compatible: $TUNNEL_COMPAT"
{
	echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr); $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "kcptun: $(dpkg-query -W -f '${Version}' kcptun 2>/dev/null || echo none); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$RUN/machine.txt" >&2

if [ $UDP_PROBE = 1 ]; then
	[ -n "$PROBE" ] || die "udpprobe did not build"
	set_path "probe ($PROBE_LOSS each way)" "$PROBE_RATE" 200 "$PROBE_LOSS" "$PROBE_LOSS" "$JITTER" "$QUEUE"
	for rep in $(seq "$REPS"); do
		for load in bulk game; do
			for kind in direct kcpio speeder; do
				if [ -n "$ONLY" ] && ! grep -qE "$ONLY" <<<"$load $kind"; then continue; fi
				run_probe "$rep" "$load" "$kind"
			done
		done
	done
	{
		cat "$RUN/machine.txt"
		echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
		echo
		echo "### udpprobe: ${P_RATE} Mbit/s, RTT ${P_RTT} ms, loss ${P_LD} each way, ${PROBE_SECS} s a run"
		echo
		probe_table
	} | tee "$RUN/table.md"
	rm -f "$RUN/www/file.bin"
	exit 0
fi

if [ $GRID = 1 ]; then
	for rate in $GRID_RATES; do for rtt in $GRID_RTTS; do for loss in $GRID_LOSSES; do for q in $GRID_QUEUES; do
		lp=$(python3 -c "print($loss/100)")
		set_path "grid ${rate}Mbit ${rtt}ms ${loss}% q${q}" "$rate" "$rtt" "$lp" "$lp" "$JITTER" "$q"
		run_path
	done; done; done; done
else
	case $PATHS in
	both) todo="lossy clean" ;;
	*) todo=$PATHS ;;
	esac
	for p in $todo; do
		case $p in
		# the field test's "9% ping loss" is a round-trip figure: 4.6% each way
		lossy) set_path "lossy (field test: 9% round trip = 4.6% each way)$UDP_NOTE" 100 200 0.046 0.046 "$JITTER" "$QUEUE" ;;
		lossy9) set_path "lossy9 (9% each way)$UDP_NOTE" 100 200 0.09 0.09 "$JITTER" "$QUEUE" ;;
		clean) set_path "clean$UDP_NOTE" 50 1 0 0 "$JITTER" "$QUEUE" ;;
		custom) set_path "custom" "${RATE:-100}" "${RTT:-200}" "${LOSS_DOWN:-0}" "${LOSS_UP:-${LOSS_DOWN:-0}}" "$JITTER" "$QUEUE" ;;
		*) die "unknown path $p" ;;
		esac
		run_path
	done
fi

{
	cat "$RUN/machine.txt"
	echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
	"${FIELDPY[@]}" table "$RUN"
} | tee "$RUN/table.md"
rm -f "$RUN/www/file.bin"
log "table in $RUN/table.md, every run in $RUN/results.json"
