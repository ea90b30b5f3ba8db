#!/usr/bin/env bash
# Seeds the fuzz corpora (fuzz/corpus/<target>/) from the kcp-go vectors in
# kcpio/tests/vectors: crypto.json's datagrams for the crypto targets, fec.json's
# shard groups for the FEC and pipeline targets, kcp_exchange.json's
# datagrams for the ARQ and pipeline targets, the kcptun captures' smux
# streams for the multiplexer. Each seed is laid out as the
# target reads its input (see the header of each fuzz_targets/*.rs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python3 - "$here" <<'PY'
import json, os, struct, sys, hashlib

here = sys.argv[1]
vec = os.path.join(here, "..", "kcpio", "tests", "vectors")
load = lambda n: json.load(open(os.path.join(vec, n)))

def put(target, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def rec(b):
    return struct.pack("<H", len(b)) + b

# Method order of kcpio_fuzz::{CFB, PLAIN, ALL}.
CFB = ["aes", "aes-128", "aes-192", "blowfish", "twofish", "cast5", "3des", "tea", "xtea", "sm4"]
PLAIN = ["xor", "none", "null"]
ALL = ["null", "none", "xor", "aes", "aes-128", "aes-192", "salsa20", "blowfish", "twofish",
       "cast5", "3des", "tea", "xtea", "sm4", "aes-128-gcm"]
FAMILY = {"crypto_cfb": CFB, "crypto_salsa20": ["salsa20"], "crypto_plain": PLAIN,
          "crypto_gcm": ["aes-128-gcm"]}

crypto = load("crypto.json")
for c in crypto["ciphers"]:
    grams = [bytes.fromhex(k["datagram_hex"]) for k in c["cases"]]
    sample = c.get("session_pipeline_sample")
    if sample:
        grams.append(bytes.fromhex(sample["datagram_hex"]))
    for target, names in FAMILY.items():
        if c["name"] in names:
            for g in grams:
                put(target, bytes([names.index(c["name"])]) + g)
    # Pipeline: method, conv, FEC shape 0+0 (off), then one datagram.
    if sample:
        conv = sample["kcp_segments"][0]["conv"]
        head = bytes([ALL.index(c["name"])]) + struct.pack("<I", conv) + bytes([0, 0])
        put("pipeline", head + bytes([0]) + rec(grams[-1]))

fec = load("fec.json")
for g in fec["groups"]:
    d, p = g["data_shards"], g["parity_shards"]
    packets = [bytes.fromhex(x["datagram_hex"]) for x in g["packets"]]
    shards = [bytes.fromhex(x["rs_shard_hex"]) for x in g["packets"]]
    if g["crypt"] == "null":
        # fec_decoder: shape, then (ctl, record) per packet; drop one data
        # shard so the parity has something to rebuild.
        for lost in range(min(d, 3)):
            body = b"".join(bytes([1]) + rec(pk) for i, pk in enumerate(packets) if i != lost)
            put("fec_decoder", bytes([d, p]) + body)
    method = ALL.index(g["crypt"])
    body = b"".join(bytes([0]) + rec(pk) for pk in packets[1:])
    put("pipeline", bytes([method]) + struct.pack("<I", g["conv"]) + bytes([d, p]) + body)

# pipeline: kcp-go's OOB datagram (null crypto) for its conv, read back.
o = fec["oob_example"]
put("pipeline", bytes([ALL.index("null")]) + struct.pack("<I", o["conv"]) + bytes([3, 2]) +
    (bytes([0]) + rec(bytes.fromhex(o["datagram_hex"]))) * 3 + bytes([2]) + rec(b""))

# fec_roundtrip: shape, then sizes and a loss mask.
for d, p in [(10, 3), (3, 2), (1, 1), (20, 5)]:
    put("fec_roundtrip", bytes([d, p]) + bytes([100, 7, 200, 13, 40, 255, 2, 9] * 8))

kx = load("kcp_exchange.json")
for e in kx["session_exchanges"]:
    grams = [(x["dir"], bytes.fromhex(x["hex"])) for x in e["datagrams"]]
    for side in ("c2s", "s2c"):
        mine = [gm for dr, gm in grams if dr == side]
        # arq_input: two config bytes, conv, then "datagram, tick, flush,
        # read"; the second byte picks the preset's controller, the model
        # with ACK repetition, and the model with every kcpio-only option.
        ops = b"".join(bytes([0, 0]) + rec(gm) + bytes([8, 6, 4, 255]) for gm in mine)
        for opts in (0x00, 0x07, 0x3F):
            put("arq_input", bytes([0x44, opts]) + struct.pack("<I", e["conv"]) + ops)
        null = struct.pack("<I", e["conv"])
        put("pipeline", bytes([0]) + null + bytes([0, 0]) +
            b"".join(bytes([3]) + rec(gm) for gm in mine))
# mux_session: the smux byte streams of the real kcptun captures, as the
# server (c2s) and the client (s2c) receive them, v1 or v2 per capture.
import glob
for path in sorted(glob.glob(os.path.join(vec, "kcptun", "*.json"))):
    cap = json.load(open(path))
    for side, role in (("c2s", 2), ("s2c", 0)):
        stream = cap.get("streams", {}).get(side, {})
        frames = stream.get("smux_frames") or []
        if not frames:
            continue
        raw = b"".join(bytes.fromhex(f["hex"]) for f in frames)
        v2 = 1 if frames[0].get("ver") == 2 else 0
        for step in (1, 7, 64):
            put("mux_session", bytes([v2 | role | (step << 2) & 0xFF]) + raw)
# conn: a listener's session (proof required, each preset, FEC or not)
# fed one side of each exchange; session_table: openers, data, time and
# proofs from a few addresses.
for e in kx["session_exchanges"]:
    mine = [bytes.fromhex(x["hex"]) for x in e["datagrams"] if x["dir"] == "c2s"]
    body = b"".join(bytes([5]) + struct.pack("<H", len(gm)) + gm for gm in mine)
    for sel in (0x20, 0x24, 0x28, 0x25, 0x00):
        put("conn", bytes([sel]) + struct.pack("<I", e["conv"]) + body)
def seg(conv, cmd, sn, una, payload=b""):
    return struct.pack("<IBBHIIII", conv, cmd, 0, 32, 0, sn, una, len(payload)) + payload
for cap in (1, 4, 0x3f):
    ops = b""
    for i in range(12):
        pk = seg(100 + i, 81, 0, 0, b"data")           # an opener, 28 bytes
        ops += bytes([(len(pk) // 4) << 3, i]) + pk
        ops += bytes([(len(pk) // 4) << 3, i]) + pk    # its replay, same address
        late = seg(100 + i, 81, 3, 2, b"data")
        ops += bytes([(len(late) // 4) << 3 | 1, i + 8]) + late
        ops += bytes([5, i, 3, 200, 6, i, 4, 2])         # proof, time, removal, minutes
    put("session_table", bytes([cap]) + ops)
# arq_pair: a few writes, flushes, deliveries, ticks and reads.
for opts in (0x00, 0x07, 0x3F):
    put("arq_pair", bytes([0x44, opts, 0, 0x10, 0x27, 32, 64, 0, 2, 0xC0, 0xC0, 0x80 | 40, 0xC1, 0, 1, 16, 8]))
# dgram_fec: data shards (some fragments), a k=2 m=1 parity, a report,
# a copy of a lost shard, a report saying its sender takes copies.
def ext(adv, kind, word, body):
    b = struct.pack("<I", word) + body
    return bytes([adv, kind]) + struct.pack("<H", len(b)) + b
for sel in (0, 1, 2, 3):
    recs = b""
    for i in range(6):
        body = struct.pack("<HBH", i, 0, 10) + bytes([i]) * 10
        recs += ext(2, 1, i, body)
    body = struct.pack("<HBH", 9, 0x10, 4) + b"frag"
    recs += ext(1, 1 | (0x10 << 2), 6, body)
    recs += ext(1, 2, 0, bytes([2, 1]) + bytes(15))
    recs += ext(60, 3, 0, bytes(26))
    body = struct.pack("<HBH", 7, 0, 10) + bytes([7]) * 10
    recs += ext(1, 0x80, 8, body)
    recs += ext(60, 3 | (1 << 2), 0, bytes(26))
    put("dgram_fec", bytes([sel]) + recs)
# stream_fec: data shards carrying a KCP ACK, a k=2 m=1 parity for them,
# a report.
for sel in (0, 1, 2, 3):
    recs = b""
    for i in range(4):
        kcp = struct.pack("<IBBHIIII", 0x01020304, 82, 0, 128, i, 0, 0, 0)
        recs += ext(2, 1, i, kcp)
    word = 0 | (1 << 16)  # first 0, k 2, m 1, idx 0
    recs += ext(1, 2, word, bytes(26))
    recs += ext(60, 3, 0, struct.pack("<III", 3, 1, 1))
    put("stream_fec", bytes([sel]) + recs)
# faketcp_codec: the kcptun --tcp capture's packets, in order, once as a
# flow before the kernel's handshake and once after.
cap = os.path.join(here, "..", "kcpio", "src", "sys", "faketcp", "kcptun_tcp_capture.txt")
pkts = [bytes.fromhex(l.split("\t", 1)[1].strip()) for l in open(cap)
        if l.strip() and not l.startswith("#")]
for sel in (0, 1, 3):
    put("faketcp_codec", bytes([sel]) + b"".join(struct.pack(">H", len(p)) + p for p in pkts))
PY
for t in "$here"/corpus/*; do echo "$(basename "$t"): $(ls "$t" | wc -l) seeds"; done
