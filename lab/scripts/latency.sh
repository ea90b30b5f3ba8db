#!/usr/bin/env bash
# Tail latency under loss: kcp-go, kcpio and TCP through one impaired link.
#
#   sudo lab/scripts/latency.sh [--quick] [--duration 30s] [--losses "0.01 0.05"] [--delay 20ms]
#                           [--jitter 0ms] [--rate 60] [--size 64] [--seed 1] [--impair auto|nfqueue|relay]
#                           [--only REGEX]   (only the contenders whose name matches, for iterating)
#
# Every contender runs its echo server and client inside one private network
# namespace (kcpio-lat-PID) whose loopback OUTPUT chain goes through an
# NFQUEUE impairer (lab/tools/impairer): each packet, of any protocol, is dropped
# with probability LOSS or delayed by DELAY, so one RTT is 2*DELAY and TCP
# sees exactly the impairment KCP sees. Without NFQUEUE (--impair relay, or
# auto when the namespace cannot be set up) KCP rows go through the user-space
# UDP relay (lab/tools/relay) instead and the TCP row is skipped: a TCP proxy
# cannot drop segments the way a link does.
#
# The low-latency preset of kcpio is passed as KCPIO_LOWLAT_FLAGS (default
# "--nodelay lowlat"), applied to both its server and client.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

DURATION=30s
LOSSES="0.01 0.05"
DELAY=20ms
JITTER=0ms
RATE=60
SIZE=64
SEED=1
IMPAIR=auto
ONLY=""
TCP_CC=${TCP_CC:-bbr}
KCPIO_LOWLAT_FLAGS=${KCPIO_LOWLAT_FLAGS:---nodelay lowlat}
while [ $# -gt 0 ]; do
	case $1 in
	--quick) DURATION=5s ;;
	--duration) DURATION=$2; shift ;;
	--losses) LOSSES=$2; shift ;;
	--delay) DELAY=$2; shift ;;
	--jitter) JITTER=$2; shift ;;
	--rate) RATE=$2; shift ;;
	--size) SIZE=$2; shift ;;
	--seed) SEED=$2; shift ;;
	--impair) IMPAIR=$2; shift ;;
	--only) ONLY=$2; shift ;;
	-h | --help) sed -n '2,20p' "$0"; exit 0 ;;
	*) die "unknown argument $1" ;;
	esac
	shift
done

RUN="$OUT/latency-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"

NS=""
NSX=()  # command prefix that runs inside the namespace
setup_namespace() {
	NS="kcpio-lat-$$"
	ip netns add "$NS" || return 1
	NAMESPACES+=("$NS")
	ip -n "$NS" link set lo up || return 1
	ip netns exec "$NS" iptables -A OUTPUT -o lo -j NFQUEUE --queue-num 0 || return 1
	NSX=(ip netns exec "$NS")
	# prove it: a UDP echo through a 20 ms impairer must take >= 40 ms
	local f="$RUN/selftest"
	local ip
	start_impairer "$f.imp" "$NS" --delay 20ms --lifetime 30s || { stop "$IMPAIRER_PID"; return 1; }
	ip=$IMPAIRER_PID
	"${NSX[@]}" "$BIN/kcpgo-peer" echo-server --addr 127.0.0.1:0 --quiet --duration 20s >"$f.srv" 2>&1 &
	local sp=$!; CHILDREN+=("$sp")
	local port; port=$(port_of "$(wait_line "$f.srv" 'listening on' 5)") || true
	local ok=1
	if [ -n "$port" ] && "${NSX[@]}" "$BIN/kcpgo-peer" client --addr "127.0.0.1:$port" --nodelay fast3 \
		--messages 5 --size 64 --json >"$f.json" 2>&1; then
		local p50; p50=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rtt_p50_ms"])' "$f.json")
		log "namespace self-test: kcp-go ping-pong through the impairer, p50 RTT $p50 ms (expect ~40)"
		python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 39 else 1)' "$p50" || ok=0
	else
		ok=0
	fi
	stop "$sp"; stop "$ip"
	[ $ok = 1 ]
}

build_go
if [ "$IMPAIR" != relay ]; then
	if [ "$(id -u)" != 0 ]; then
		[ "$IMPAIR" = nfqueue ] && die "NFQUEUE needs root"
		loud "not root: falling back to the user-space relay (KCP only, no TCP row)"
		IMPAIR=relay
	elif ! build_impairer || ! setup_namespace; then
		[ "$IMPAIR" = nfqueue ] && die "NFQUEUE impairment could not be set up"
		loud "NFQUEUE impairment could not be set up: falling back to the user-space relay (KCP only, no TCP row)"
		IMPAIR=relay
	else
		IMPAIR=nfqueue
	fi
fi
build_rust
log "impairment: $IMPAIR, loss {$LOSSES}, delay $DELAY each way, jitter $JITTER, $RATE Hz x $SIZE B for $DURATION, seed $SEED; results in $RUN"

# contenders: name|impl|flags for both ends
CONTENDERS=(
	"kcp-go default|kcp-go|--nodelay default"
	"kcp-go fast3|kcp-go|--nodelay fast3"
	"kcp-go fast3 + FEC 10/3|kcp-go|--nodelay fast3 --datashard 10 --parityshard 3"
	"kcpio default|kcpio|--nodelay default"
	"kcpio fast3|kcpio|--nodelay fast3"
	"kcpio fast3 + FEC 10/3|kcpio|--nodelay fast3 --datashard 10 --parityshard 3"
	"kcpio low-latency preset|kcpio|$KCPIO_LOWLAT_FLAGS"
	"kcp-go with lowlat's kcp-go-expressible settings (1,10,1,1 + acknodelay + FEC 2/2)|kcp-go|--nodelay 1,10,1,1 --acknodelay --datashard 2 --parityshard 2"
	"TCP ($TCP_CC, TCP_NODELAY)|tcp|--cc $TCP_CC"
)

dur_s() { python3 -c 'import sys,re; m=re.fullmatch(r"([0-9.]+)(ms|s|m)?", sys.argv[1]); v=float(m.group(1)); u=m.group(2) or "s"; print(int(v*{"ms":0.001,"s":1,"m":60}[u])+1)' "$1"; }
SAFETY=$(($(dur_s "$DURATION") + 60))

# server_failed FILE NAME SRVPID IMPPID: a server that would not start (e.g. a
# flag the peer does not know) becomes a FAILED row, not the end of the run.
server_failed() {
	local f=$1 name=$2
	log "  $name: the server did not start: $(head -c 300 "$f.srv" | tr '\n' ' ')"
	stop "$3"
	[ -n "$4" ] && stop "$4"
	printf '{"error": "server did not start: %s"}\n' "$(head -c 200 "$f.srv" | tr -d '"\\\n')" >"$f.json"
}

# run_one LOSS NAME IMPL FLAGS -> writes $RUN/<n>.json and .wire
N=0
run_one() {
	local loss=$1 name=$2 impl=$3 flags=$4
	N=$((N + 1))
	local f="$RUN/$N" srvbin clibin
	printf '%s\n%s\n' "$loss" "$name" >"$f.meta"
	if [ "$impl" = tcp ]; then
		if [ "$IMPAIR" != nfqueue ]; then
			log "SKIP $name at loss $loss: TCP needs the NFQUEUE impairer"
			echo skipped >"$f.skip"; return 0
		fi
		srvbin=("$BIN/tcpecho" server); clibin=("$BIN/tcpecho" client)
	else
		local b; b=$(peer_bin "$impl")
		if [ -z "$b" ]; then
			log "SKIP $name at loss $loss: no kcpio peer binary"
			echo skipped >"$f.skip"; return 0
		fi
		srvbin=("$b" echo-server --idle 60s); clibin=("$b" client)
	fi
	# shellcheck disable=SC2206
	local fl=($flags)
	local imp srv port target
	if [ "$IMPAIR" = nfqueue ]; then
		start_impairer "$f.imp" "$NS" --loss "$loss" --delay "$DELAY" --jitter "$JITTER" --seed "$SEED" \
			--lifetime "$((SAFETY + 30))s" || die "impairer did not start (see $f.imp)"
		imp=$IMPAIRER_PID
		"${NSX[@]}" "${srvbin[@]}" --addr 127.0.0.1:0 --quiet --duration "${SAFETY}s" "${fl[@]}" >"$f.srv" 2>&1 &
		srv=$!; CHILDREN+=("$srv")
		if ! port=$(port_of "$(wait_line "$f.srv" 'listening on' 10)") || [ -z "$port" ]; then
			server_failed "$f" "$name" "$srv" "$imp"; return 0
		fi
		target="127.0.0.1:$port"
	else
		"${srvbin[@]}" --addr 127.0.0.1:0 --quiet --duration "${SAFETY}s" "${fl[@]}" >"$f.srv" 2>&1 &
		srv=$!; CHILDREN+=("$srv")
		if ! port=$(port_of "$(wait_line "$f.srv" 'listening on' 10)") || [ -z "$port" ]; then
			server_failed "$f" "$name" "$srv" ""; return 0
		fi
		"$BIN/relay" --listen 127.0.0.1:0 --target "127.0.0.1:$port" --loss "$loss" --delay "$DELAY" \
			--jitter "$JITTER" --seed "$SEED" --duration "$((SAFETY + 30))s" >"$f.imp" 2>&1 &
		imp=$!; CHILDREN+=("$imp")
		target="127.0.0.1:$(port_of "$(wait_line "$f.imp" 'listening on' 5)")"
	fi
	log "loss $loss: $name"
	"${NSX[@]}" "${clibin[@]}" --addr "$target" --rate "$RATE" --size "$SIZE" --duration "$DURATION" \
		--json --tag "$name" "${fl[@]}" >"$f.json" 2>"$f.err" || log "  $name: client reported failure (see $f.json / $f.err)"
	stop "$srv"
	stop "$imp"
	# the impairer/relay prints its counters on exit
	grep -E '^(impairer|relay):' "$f.imp" >"$f.wire" || true
}

for loss in $LOSSES; do
	for c in "${CONTENDERS[@]}"; do
		IFS='|' read -r name impl flags <<<"$c"
		if [ -n "$ONLY" ] && ! grep -qE "$ONLY" <<<"$name"; then continue; fi
		run_one "$loss" "$name" "$impl" "$flags"
	done
done

python3 - "$RUN" "$IMPAIR" "$DELAY" "$RATE" "$SIZE" "$DURATION" "$SEED" <<'PY' | tee "$RUN/table.md"
import json, os, re, sys
run, impair, delay, rate, size, duration, seed = sys.argv[1:]
rows = []
n = 1
while os.path.exists(f"{run}/{n}.meta"):
    loss, name = open(f"{run}/{n}.meta").read().split("\n")[:2]
    r = {"loss": float(loss), "name": name}
    if os.path.exists(f"{run}/{n}.skip"):
        r["skip"] = True
    else:
        try:
            r.update(json.loads(open(f"{run}/{n}.json").read().strip().splitlines()[-1]))
        except Exception as e:
            r["error"] = f"no JSON ({e})"
        wire = open(f"{run}/{n}.wire").read() if os.path.exists(f"{run}/{n}.wire") else ""
        kv = dict(re.findall(r"(\w+)=(\d+)", wire))
        ipbytes = None
        if wire.startswith("impairer"):
            proto = "tcp" if r.get("impl") == "tcp" else "udp"
            ipbytes = int(kv.get(f"{proto}_bytes", 0))
        elif wire.startswith("relay"):
            m = re.findall(r"(c2s|s2c): in=(\d+) in_bytes=(\d+)", wire)
            ipbytes = sum(int(b) + 28 * int(p) for _, p, b in m)
        if ipbytes is not None and r.get("payload_bytes"):
            r["wire_x"] = ipbytes / (2 * r["payload_bytes"])
    rows.append(r)
    n += 1

def f(v, d=1):
    return "–" if v is None else f"{v:.{d}f}"

print(f"\n### Echo RTT under loss: {rate} Hz x {size} B for {duration}, {delay} each way, seed {seed}, impairment: {impair}\n")
print("RTT in ms. *wire ×* = IP bytes on the impaired link, both directions, dropped packets included, over 2 × payload bytes;")
print("*client ×* = the client's own transport bytes sent over its payload bytes (KCP: UDP payload incl. KCP/FEC headers; TCP: payload + 32 B/segment).\n")
print("| loss | contender | sent | lost | mean | p50 | p90 | p99 | p99.9 | max | wire × | client × | retrans | FEC rec |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    lp = f"{r['loss']*100:g}%"
    if r.get("skip"):
        print(f"| {lp} | {r['name']} | skipped | | | | | | | | | | | |")
        continue
    if "error" in r and "sent" not in r:
        print(f"| {lp} | {r['name']} | FAILED: {r['error']} | | | | | | | | | | | |")
        continue
    flag = "" if r.get("pass") else " (FAIL)"
    print(f"| {lp} | {r['name']}{flag} | {r.get('sent',0)} | {r.get('lost',0)} | {f(r.get('rtt_mean_ms'))} | {f(r.get('rtt_p50_ms'))} | "
          f"{f(r.get('rtt_p90_ms'))} | {f(r.get('rtt_p99_ms'))} | {f(r.get('rtt_p999_ms'))} | {f(r.get('rtt_max_ms'))} | "
          f"{f(r.get('wire_x'),2)} | {f(r.get('overhead'),2)} | {r.get('retrans_segs',0)} | {r.get('fec_recovered',0)} |")
PY
log "table and raw JSON in $RUN"
