//! kcpio's FEC stream into kcp-go v5.6.1, the engine of Debian's kcptun
//! 20210922, when that end has FEC off (or another shape) and guesses.
//!
//! v5.6.1's decoder starts from a 1 data + 1 parity guess and, unlike later
//! releases, decodes with its guess until it has learned the sender's shape:
//! each parity shard is "rebuilt" as a data shard equal to itself and handed
//! to KCP. Every parity row of the Reed-Solomon code sums to 1, so the parity
//! of a group of full-size pushes carries their common conv, cmd, len and
//! una: it passes for a push with a blend of their sequence numbers and
//! garbage payload, which KCP delivers in place of the real segment. kcp-go
//! v5.6.1's own sender trips it the same way (`kcpio/tests/vectors/kcpgo561_infer.json`,
//! written by `testkit/interop/kcpgo561`). kcpio's encoder puts a guard shard in each
//! group until the peer is seen sending its shape (`FecEncoder::set_guard`).
//!
//! The vector tests need nothing; the replay test runs the real v5.6.1 on a
//! stream recorded from kcpio's `Conn` (Go needed; skipped without it
//! unless `KCPIO_REQUIRE_GO=1`).

use kcpio_testkit as support;

use std::time::Duration;

use kcpio::fec::{DATA_HEADER, FecDecoder, FecEncoder, data_payload};
use kcpio::{Config, Conn, Preset};
use serde::Deserialize;

#[derive(Deserialize)]
struct Vectors {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    data_shards: usize,
    parity_shards: usize,
    conv: u32,
    mss: usize,
    datagrams_hex: Vec<String>,
    receiver: Receiver,
}

#[derive(Deserialize)]
struct Receiver {
    expected: usize,
    delivered: usize,
    first_mismatch: i64,
    intact: bool,
}

fn vectors() -> Vectors {
    serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/kcpgo561_infer.json"
    )))
    .unwrap()
}

fn datagrams(c: &Case) -> Vec<Vec<u8>> {
    c.datagrams_hex
        .iter()
        .map(|h| hex::decode(h).unwrap())
        .collect()
}

fn le16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn is_parity(p: &[u8]) -> bool {
    p.len() >= 6 && le16(p, 4) == 0xF2
}

/// What a v5.6.1 decoder still on its 1 + 1 guess hands to KCP for this
/// parity packet: the shard from its size field on, read as a data shard
/// (`size`, then `size - 2` bytes of KCP packet). `None` when the size is
/// out of range or the bytes are shorter than a KCP header.
fn parity_as_packet(p: &[u8]) -> Option<&[u8]> {
    let shard = &p[6..];
    let size = le16(shard, 0);
    (size >= 2 + 24 && size <= shard.len()).then(|| &shard[2..size])
}

/// Whether KCP of conversation `conv` would take this parity for a packet of
/// its own: the bytes pass as a push (or any command) for `conv`.
fn reads_as_packet_of(p: &[u8], conv: u32) -> bool {
    parity_as_packet(p).is_some_and(|k| le32(k, 0) == conv && (81..=84).contains(&k[4]))
}

/// The KCP packets of a case's data shards, in seqid order.
fn kcp_packets(c: &Case) -> Vec<Vec<u8>> {
    let mut data: Vec<(u32, Vec<u8>)> = datagrams(c)
        .iter()
        .filter_map(|d| data_payload(d).map(|k| (le32(d, 0), k.to_vec())))
        .collect();
    data.sort_by_key(|(s, _)| *s);
    data.into_iter().map(|(_, k)| k).collect()
}

/// Our encoder over `packets` (all at one instant): every FEC packet in
/// sending order.
fn encode_all(enc: &mut FecEncoder, packets: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let now = kcpio::arq::Timestamp::from_millis(0);
    let mut out = Vec::new();
    for k in packets {
        let mut buf = vec![0u8; 1500];
        buf[DATA_HEADER..DATA_HEADER + k.len()].copy_from_slice(k);
        let n = enc.encode(now, &mut buf, k.len());
        out.push(buf[..n].to_vec());
        let mut p = vec![0u8; 1500];
        while let Some(m) = enc.poll_parity(&mut p) {
            out.push(p[..m].to_vec());
        }
    }
    out
}

/// `packets` through a guarded encoder of the case's shape and conv.
fn guarded_stream(c: &Case, packets: &[Vec<u8>]) -> (FecEncoder, Vec<Vec<u8>>) {
    let mut enc = FecEncoder::new(c.data_shards, c.parity_shards).unwrap();
    enc.set_guard(Some(c.conv));
    let stream = encode_all(&mut enc, packets);
    (enc, stream)
}

/// The recorded fault itself: kcp-go v5.6.1 sending to v5.6.1 with FEC off.
/// The receiver delivered a wrong segment, and that segment's sequence
/// number is the one a parity shard of the first group carries when read as
/// a packet.
#[test]
fn kcp_go_561_delivers_a_parity_shard_read_as_a_push() {
    for c in vectors().cases {
        let shape = (c.data_shards, c.parity_shards);
        let r = &c.receiver;
        assert!(!r.intact, "{shape:?}: the recorded receiver was not hit");
        assert_eq!(r.delivered, r.expected, "{shape:?}");
        let bad = usize::try_from(r.first_mismatch).expect("a mismatch");
        assert_eq!(bad % c.mss, 0, "{shape:?}: the damage starts at a segment");
        let bad_sn = (bad / c.mss) as u32;
        let group0_parity: Vec<Vec<u8>> = datagrams(&c)
            .into_iter()
            .filter(|d| is_parity(d) && (le32(d, 0) as usize) < shape.0 + shape.1)
            .collect();
        assert_eq!(group0_parity.len(), shape.1, "{shape:?}");
        assert!(
            group0_parity.iter().all(|p| reads_as_packet_of(p, c.conv)),
            "{shape:?}: every parity shard of the first group reads as a packet"
        );
        let sns: Vec<u32> = group0_parity
            .iter()
            .map(|p| le32(parity_as_packet(p).unwrap(), 12))
            .collect();
        assert!(
            sns.contains(&bad_sn),
            "{shape:?}: the corrupt segment {bad_sn} is one of the parity's sns {sns:?}"
        );
    }
}

/// On kcp-go's own packets our encoder without guards emits kcp-go's parity
/// byte for byte, hazard included; with guards no parity shard reads as a
/// packet of the conversation.
#[test]
fn guard_shards_keep_parity_from_reading_as_a_packet() {
    for c in vectors().cases {
        let shape = (c.data_shards, c.parity_shards);
        let packets = kcp_packets(&c);
        let mut plain = FecEncoder::new(shape.0, shape.1).unwrap();
        let ours = encode_all(&mut plain, &packets);
        let theirs = datagrams(&c);
        assert_eq!(ours, theirs, "{shape:?}: same bytes as kcp-go v5.6.1");
        assert!(
            ours.iter()
                .any(|p| is_parity(p) && reads_as_packet_of(p, c.conv))
        );

        let (guarded, stream) = guarded_stream(&c, &packets);
        let parity: Vec<&Vec<u8>> = stream.iter().filter(|p| is_parity(p)).collect();
        assert!(!parity.is_empty(), "{shape:?}: parity is still sent");
        for p in &parity {
            assert!(
                !reads_as_packet_of(p, c.conv),
                "{shape:?}: seqid {} reads as a packet",
                le32(p, 0)
            );
        }
        // One guard per group, refused by any KCP (too short), and the only
        // data shards that are not the KCP packets.
        let guards = stream
            .iter()
            .filter(|p| le16(p, 4) == 0xF1 && data_payload(p).is_none())
            .count();
        assert_eq!(guards as u64, guarded.stats().guard_shards);
        assert_eq!(guards, packets.len() / (shape.0 - 1), "{shape:?}");
    }
}

/// A guarded stream loses nothing for a kcpio receiver: with one real data
/// shard lost per group, each is rebuilt; guards are never handed out.
#[test]
fn guarded_groups_recover_lost_packets() {
    for c in vectors().cases {
        let shape = (c.data_shards, c.parity_shards);
        let packets = kcp_packets(&c);
        let (enc, stream) = guarded_stream(&c, &packets);
        let total = (shape.0 + shape.1) as u32;
        let mut dec = FecDecoder::new(shape.0, shape.1);
        let mut lost = Vec::new();
        let mut delivered = Vec::new();
        let mut buf = vec![0u8; 1500];
        for p in &stream {
            let seqid = le32(p, 0);
            // The first data shard of every complete group is lost.
            let complete = (seqid / total + 1) * total <= enc.next_seqid();
            if seqid.is_multiple_of(total) && complete {
                lost.push(data_payload(p).unwrap().to_vec());
                continue;
            }
            if let Some(k) = data_payload(p) {
                delivered.push(k.to_vec());
            }
            dec.handle(p).unwrap();
            while let Some(n) = dec.poll_recovered(&mut buf) {
                delivered.push(buf[..n].to_vec());
            }
        }
        assert!(!lost.is_empty());
        for k in &lost {
            assert!(
                delivered.contains(k),
                "{shape:?}: a lost packet was rebuilt"
            );
        }
        assert_eq!(dec.stats().recovered, lost.len() as u64, "{shape:?}");
        delivered.sort();
        let mut want = packets.clone();
        want.sort();
        assert_eq!(delivered, want, "{shape:?}: exactly the KCP packets");
    }
}

/// Records what a kcpio `Conn` with FEC `shape` sends for `payload` to a
/// kcpio receiver with FEC off (which answers with ACKs, no FEC), on a
/// lossless link and a virtual clock; `offer`: the sender offers the adaptive stream FEC (it has no connect
/// probe, so its offer leaves alone right after its first datagram, and
/// the receiver, FEC off, answers untagged).
fn record_conn_stream(
    shape: (usize, usize),
    offer: bool,
    conv: u32,
    payload: &[u8],
) -> Vec<Vec<u8>> {
    let tx_cfg = Config::builder()
        .preset(Preset::Fast)
        .fec(shape.0, shape.1)
        .adaptive_fec(offer)
        .mtu(1350)
        .window(128, 1024)
        .stream(true)
        .build()
        .unwrap();
    let rx_cfg = Config::builder()
        .preset(Preset::Fast)
        .mtu(1350)
        .window(1024, 1024)
        .stream(true)
        .build()
        .unwrap();
    let mut tx = Conn::new(conv, &tx_cfg).unwrap();
    let mut rx = Conn::new(conv, &rx_cfg).unwrap();
    let mut now = Duration::ZERO;
    let mut written = 0;
    let mut read = Vec::new();
    let mut sent = Vec::new();
    let mut slot = vec![0u8; 1500];
    let mut buf = vec![0u8; 65536];
    for _ in 0..100_000 {
        while written < payload.len() {
            match tx.write(&payload[written..]) {
                Ok(n) => written += n,
                Err(_) => break,
            }
        }
        tx.handle_timeout(now);
        while let Some(t) = tx.poll_transmit(now, &mut slot) {
            let d = slot[..t.len].to_vec();
            let _ = rx.handle_packet(now, &d);
            sent.push(d);
        }
        while let Ok(n) = rx.read(&mut buf) {
            if n == 0 {
                break;
            }
            read.extend_from_slice(&buf[..n]);
        }
        rx.handle_timeout(now);
        while let Some(t) = rx.poll_transmit(now, &mut slot) {
            let d = slot[..t.len].to_vec();
            let _ = tx.handle_packet(now, &d);
        }
        if read.len() == payload.len() {
            break;
        }
        let next = [tx.poll_timeout(), rx.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_millis(10));
        now = next.max(now + Duration::from_millis(1));
    }
    assert_eq!(read, payload, "the kcpio receiver got the stream");
    sent
}

/// The real kcp-go v5.6.1 with FEC off, fed what kcpio sends with FEC
/// 20/5, 10/3 and 5/2, delivers every byte right.
#[test]
fn kcpio_fec_into_an_inferring_kcpgo_561_is_intact() {
    static BIN: std::sync::OnceLock<Result<std::path::PathBuf, String>> =
        std::sync::OnceLock::new();
    let built = BIN.get_or_init(|| support::gopeer::build_go("interop/kcpgo561", "kcpgo561", &[]));
    let Some(bin) = support::gopeer::available(built, "kcp-go v5.6.1") else {
        return;
    };
    let mut payload = vec![0u8; 400_000];
    support::pattern::fill(&mut payload, 7);
    // The last: a client without the connect probe offering the adaptive
    // stream FEC, its offer a WASK (`frg` 0xD4) alone, without the FEC
    // header, right after its first datagram: v5.6.1 (kcptun's) hands it
    // to KCP, which takes it as any WASK.
    let mut base = None;
    for (shape, offer) in [
        ((20, 5), false),
        ((10, 3), false),
        ((5, 2), false),
        ((10, 3), true),
    ] {
        let conv = 0x1234_5678;
        let sent = record_conn_stream(shape, offer, conv, &payload);
        let lone: Vec<_> = (sent.iter().enumerate())
            .filter(|(_, d)| d.len() == 24 && d[4] == 83)
            .map(|(i, d)| (i, d[5]))
            .collect();
        assert_eq!(lone, if offer { vec![(1, 0xD4)] } else { vec![] });
        let doc = serde_json::json!({
            "conv": conv,
            "datagrams_hex": sent.iter().map(hex::encode).collect::<Vec<_>>(),
            "expected_hex": hex::encode(&payload),
        });
        let file = std::env::temp_dir().join(format!(
            "kcpio-kcpgo561-{}-{}-{}.json",
            std::process::id(),
            shape.0,
            shape.1
        ));
        std::fs::write(&file, doc.to_string()).unwrap();
        let out = std::process::Command::new(&bin)
            .arg("replay")
            .arg(&file)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&file);
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{shape:?}: {report} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
        eprintln!("{shape:?}, offer {offer}: {r}");
        assert_eq!(r["intact"], true, "{shape:?}: kcp-go v5.6.1 delivered {r}");
        // The lone WASK is no KCP input error: as many as without it.
        if shape == (10, 3) {
            let errors = r["kcp_in_errors"].as_u64();
            assert_eq!(*base.get_or_insert(errors), errors, "{r}");
        }
    }
}
