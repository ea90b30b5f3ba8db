//! FEC tests: kcp-go's vectors, recovery under loss, the seqid wrap, ratio
//! learning, the group deadline, and hostile input.

use super::codec::{self, ReferenceCodec};
use super::*;
use crate::arq::Timestamp;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

#[derive(Deserialize)]
struct Vectors {
    groups: Vec<Group>,
    oob_example: Oob,
    paws_table: Vec<PawsRow>,
}

#[derive(Deserialize)]
struct Group {
    name: String,
    data_shards: usize,
    parity_shards: usize,
    packets: Vec<Packet>,
    recovery: Option<Recovery>,
}

#[derive(Deserialize)]
struct Packet {
    datagram_hex: String,
    decrypted_hex: Option<String>,
    seqid: u32,
    flag: u16,
}

impl Packet {
    /// The FEC packet (crypto removed: nonce 16 + CRC 4 for the aes-128 group).
    fn fec(&self) -> Vec<u8> {
        match &self.decrypted_hex {
            Some(h) => hex::decode(h).unwrap()[20..].to_vec(),
            None => hex::decode(&self.datagram_hex).unwrap(),
        }
    }
}

#[derive(Deserialize)]
struct Recovery {
    dropped_packet_indices: Vec<usize>,
    recovered_kcp_packets_hex: Vec<String>,
}

#[derive(Deserialize)]
struct Oob {
    conv: u32,
    payload_hex: String,
    datagram_hex: String,
}

#[derive(Deserialize)]
struct PawsRow {
    data_shards: usize,
    parity_shards: usize,
    paws: u32,
    max_seqid: u32,
}

fn vectors() -> Vectors {
    serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/fec.json"
    )))
    .unwrap()
}

fn group(name: &str) -> Group {
    vectors()
        .groups
        .into_iter()
        .find(|g| g.name == name)
        .unwrap()
}

fn ms(t: u32) -> Timestamp {
    Timestamp::from_millis(t)
}

/// Encodes `kcp` as one data shard at `now`; returns the data packet and
/// whatever `poll_parity` yields after it.
fn encode(enc: &mut FecEncoder, now: Timestamp, kcp: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut buf = vec![0u8; MAX_PACKET];
    buf[DATA_HEADER..DATA_HEADER + kcp.len()].copy_from_slice(kcp);
    let n = enc.encode(now, &mut buf, kcp.len());
    assert_eq!(n, DATA_HEADER + kcp.len());
    let mut extra = Vec::new();
    let mut out = vec![0u8; MAX_PACKET];
    while let Some(m) = enc.poll_parity(&mut out) {
        extra.push(out[..m].to_vec());
    }
    (buf[..n].to_vec(), extra)
}

fn drain(dec: &mut FecDecoder) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; MAX_PACKET];
    while let Some(n) = dec.poll_recovered(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// Re-encodes a captured group's KCP packets and compares every emitted
/// packet with kcp-go's, byte for byte, with our codec and the reference.
fn reproduce(g: &Group, times: &[u32]) {
    let data: Vec<&Packet> = g.packets.iter().filter(|p| p.flag == 0xF1).collect();
    assert_eq!(data.len(), times.len());
    for reference in [false, true] {
        let mut enc = if reference {
            FecEncoder::with_codec(Box::new(
                ReferenceCodec::new(g.data_shards, g.parity_shards).unwrap(),
            ))
        } else {
            FecEncoder::new(g.data_shards, g.parity_shards).unwrap()
        };
        let mut emitted = Vec::new();
        for (p, &t) in data.iter().zip(times) {
            let fec = p.fec();
            let (d, extra) = encode(&mut enc, ms(t), &fec[DATA_HEADER..]);
            emitted.push(d);
            emitted.extend(extra);
        }
        let want: Vec<Vec<u8>> = g.packets.iter().map(Packet::fec).collect();
        assert_eq!(emitted.len(), want.len(), "{}", g.name);
        for (i, (a, b)) in emitted.iter().zip(&want).enumerate() {
            assert_eq!(
                hex::encode(a),
                hex::encode(b),
                "{} packet {i} (reference codec: {reference})",
                g.name
            );
            assert_eq!(read_u32(a, 0), Some(g.packets[i].seqid));
        }
    }
}

#[test]
fn parity_of_the_10_3_plain_group_is_kcp_gos() {
    reproduce(&group("rs_10_3_plain"), &[0; 10]);
}

#[test]
fn parity_of_the_3_2_aes128_group_is_kcp_gos() {
    reproduce(&group("rs_3_2_aes128"), &[1000, 1001, 1002]);
}

#[test]
fn parity_is_skipped_after_a_500ms_gap_but_seqids_advance() {
    let g = group("rs_3_2_skip_parity");
    // 2nd -> 3rd data shard: 600 ms, so the first group gets no parity.
    reproduce(&g, &[0, 10, 610, 620, 630, 640]);
    let mut enc = FecEncoder::new(3, 2).unwrap();
    for t in [0, 10, 510] {
        encode(&mut enc, ms(t), &[0x51; 30]);
    }
    // Exactly 500 ms is already non-continuous (kcp-go: `now - last < 500`).
    assert_eq!(enc.stats().parity_skipped, 1);
    assert_eq!(enc.next_seqid(), 5);
    for t in [511, 512] {
        encode(&mut enc, ms(t), &[0x51; 30]);
    }
    let (_, parity) = encode(&mut enc, ms(1011), &[0x51; 30]);
    assert_eq!(parity.len(), 2);
    assert_eq!(enc.stats().parity_out, 2);
}

#[test]
fn recovery_scenario_rebuilds_kcp_gos_dropped_packets() {
    let g = group("rs_10_3_plain");
    let rec = g.recovery.as_ref().unwrap();
    for reference in [false, true] {
        let mut dec = if reference {
            FecDecoder::with_codec(Box::new(ReferenceCodec::new(10, 3).unwrap()))
        } else {
            FecDecoder::new(10, 3)
        };
        let mut got = Vec::new();
        for (i, p) in g.packets.iter().enumerate() {
            if rec.dropped_packet_indices.contains(&i) {
                continue;
            }
            dec.handle(&p.fec()).unwrap();
            got.extend(drain(&mut dec));
        }
        let want: Vec<Vec<u8>> = rec
            .recovered_kcp_packets_hex
            .iter()
            .map(|h| hex::decode(h).unwrap())
            .collect();
        assert_eq!(got, want);
        assert_eq!(dec.stats().recovered, 3);
        assert_eq!(dec.stats().data_in, 7);
        assert_eq!(dec.stats().parity_in, 3);
    }
}

#[test]
fn paws_table_and_the_wrap_of_the_encoder() {
    let v = vectors();
    for row in &v.paws_table {
        let total = row.data_shards + row.parity_shards;
        assert_eq!(paws(total), row.paws);
        let mut enc = FecEncoder::new(row.data_shards, row.parity_shards).unwrap();
        if row.data_shards == 1 {
            // The very first one-shard group has no previous shard: no parity.
            let (_, parity) = encode(&mut enc, ms(0), &[0x51; 24]);
            assert!(parity.is_empty());
        }
        enc.set_next_seqid(row.paws - total as u32);
        let mut seqids = Vec::new();
        for _ in 0..row.data_shards {
            let (d, parity) = encode(&mut enc, ms(0), &[0x51; 24]);
            seqids.push(read_u32(&d, 0).unwrap());
            seqids.extend(parity.iter().map(|p| read_u32(p, 0).unwrap()));
        }
        assert_eq!(seqids.len(), total);
        assert_eq!(*seqids.last().unwrap(), row.max_seqid);
        assert_eq!(enc.next_seqid(), 0, "wraps to 0 at paws");
    }
}

#[test]
fn oob_and_bare_kcp_packets_are_classified() {
    let oob = vectors().oob_example;
    let d = hex::decode(&oob.datagram_hex).unwrap();
    assert_eq!(classify(&d), PacketKind::Oob);
    assert_eq!(
        oob_payload(&d),
        Some((oob.conv, &hex::decode(&oob.payload_hex).unwrap()[..]))
    );
    assert_eq!(data_payload(&d), None);
    let mut buf = vec![0u8; 8];
    buf.extend_from_slice(&d[8..]);
    assert_eq!(encode_oob(&mut buf, d.len() - 8), d.len());
    assert_eq!(buf, d, "kcp-go's SendOOB framing");
    assert_eq!(encode_oob(&mut buf, d.len()), 0, "too short a buffer");
    let mut kcp = [0u8; 24];
    kcp[4] = 81;
    assert_eq!(classify(&kcp), PacketKind::Kcp);
    assert_eq!(classify(&[0xF1; 5]), PacketKind::Kcp);
    let g = group("rs_10_3_plain");
    assert_eq!(classify(&g.packets[0].fec()), PacketKind::Data);
    assert_eq!(classify(&g.packets[12].fec()), PacketKind::Parity);
    assert_eq!(
        data_payload(&g.packets[0].fec()),
        Some(&g.packets[0].fec()[8..])
    );
    assert_eq!(data_payload(&g.packets[12].fec()), None);
    let mut dec = FecDecoder::new(10, 3);
    assert_eq!(dec.handle(&d), Err(FecDecodeError::NotFec { flag: 0xF3 }));
    assert_eq!(
        dec.handle(&[0; 7]),
        Err(FecDecodeError::Truncated { len: 7 })
    );
    assert_eq!(
        dec.handle(&[0; 1501]),
        Err(FecDecodeError::TooLong { len: 1501 })
    );
    let mut beyond = g.packets[0].fec();
    beyond[..4].copy_from_slice(&paws(13).to_le_bytes());
    assert_eq!(
        dec.handle(&beyond),
        Err(FecDecodeError::BeyondPaws { seqid: paws(13) })
    );
    assert_eq!(dec.stats().dropped_malformed, 3);
    assert_eq!(dec.stats().dropped_beyond_paws, 1);
}

/// A KCP-looking packet of `len` bytes (>= 24) whose content names `tag`.
fn kcp_packet(tag: u32, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[..4].copy_from_slice(&tag.to_le_bytes());
    p[4] = 81;
    for (i, b) in p.iter_mut().enumerate().skip(24) {
        *b = (tag as usize * 31 + i) as u8;
    }
    p
}

/// Sends `groups` groups through `enc`, losing the packets `lose` picks, and
/// checks that every KCP packet reaches the receiver directly or recovered.
fn run_link(
    enc: &mut FecEncoder,
    dec: &mut FecDecoder,
    rng: &mut ChaCha8Rng,
    groups: usize,
    mut lose: impl FnMut(&mut ChaCha8Rng, usize, usize) -> Vec<bool>,
) -> (usize, usize) {
    let (d, p) = (enc.data_shards(), enc.parity_shards());
    let mut sent = Vec::new();
    let mut delivered = std::collections::BTreeSet::new();
    let mut recovered = 0;
    let mut tag = 0u32;
    for g in 0..groups {
        let mut wire = Vec::new();
        for _ in 0..d {
            let len = rng.random_range(24..=1392);
            let kcp = kcp_packet(tag, len);
            tag += 1;
            let (data, parity) = encode(enc, ms(g as u32), &kcp);
            sent.push(kcp);
            wire.push(data);
            wire.extend(parity);
        }
        // A first group of one shard has no previous shard: kcp-go's continuity
        // rule skips its parity, so it is sent without loss.
        let lost = if wire.len() == d + p {
            lose(rng, g, d + p)
        } else {
            vec![false; wire.len()]
        };
        for (pkt, lost) in wire.iter().zip(lost) {
            if lost {
                continue;
            }
            if let Some(k) = data_payload(pkt) {
                delivered.insert(k.to_vec());
            }
            dec.handle(pkt).unwrap();
            for r in drain(dec) {
                assert!(sent.contains(&r), "recovered packet was sent");
                delivered.insert(r);
                recovered += 1;
            }
        }
    }
    (delivered.len(), recovered)
}

/// Picks exactly `k` distinct lost positions out of `n`.
fn lose_k(rng: &mut ChaCha8Rng, n: usize, k: usize) -> Vec<bool> {
    let mut v = vec![false; n];
    let mut left = k;
    while left > 0 {
        let i = rng.random_range(0..n);
        if !v[i] {
            v[i] = true;
            left -= 1;
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    /// Any loss of at most `parity` shards per group is repaired, whatever the
    /// shard sizes.
    #[test]
    fn any_loss_up_to_parity_is_recovered(d in 1usize..=12, p in 1usize..=4, seed in any::<u64>()) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut enc = FecEncoder::new(d, p).unwrap();
        let mut dec = FecDecoder::new(d, p);
        let groups = 6;
        let (delivered, _) = run_link(&mut enc, &mut dec, &mut rng, groups, |rng, _, n| {
            let k = rng.random_range(0..=p);
            lose_k(rng, n, k)
        });
        prop_assert_eq!(delivered, groups * d);
        prop_assert_eq!(dec.stats().unrecoverable, 0);
    }
}

#[test]
fn losses_straddling_the_seqid_wrap_are_recovered() {
    for (d, p) in [(10, 3), (3, 2), (1, 1), (7, 4)] {
        let total = d + p;
        let mut rng = ChaCha8Rng::seed_from_u64(total as u64);
        let mut enc = FecEncoder::new(d, p).unwrap();
        // Two groups before the wrap, three after.
        enc.set_next_seqid(paws(total) - 2 * total as u32);
        let mut dec = FecDecoder::new(d, p);
        let (delivered, recovered) = run_link(&mut enc, &mut dec, &mut rng, 5, |rng, _, n| {
            lose_k(rng, n, p)
        });
        assert_eq!(delivered, 5 * d, "{d}+{p}");
        assert!(recovered > 0);
        assert_eq!(dec.stats().unrecoverable, 0);
        assert_eq!(
            dec.stats().dropped_stale,
            0,
            "groups after the wrap are newer, not stale"
        );
    }
}

#[test]
fn a_receiver_with_another_ratio_learns_the_senders() {
    // kcp-go's own tests run a 10/3 client against a 10/1 server.
    for ((sd, sp), (rd, rp)) in [
        ((10, 3), (10, 1)),
        ((10, 3), (0, 0)),
        ((3, 2), (10, 3)),
        ((1, 1), (20, 10)),
    ] {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut enc = FecEncoder::new(sd, sp).unwrap();
        let mut dec = FecDecoder::new(rd, rp);
        // Lossless warm-up: the receiver notices the mismatch and relearns.
        run_link(&mut enc, &mut dec, &mut rng, 4, |_, _, n| vec![false; n]);
        assert_eq!(dec.shape(), (sd, sp), "{sd}/{sp} vs {rd}/{rp}");
        let (delivered, recovered) = run_link(&mut enc, &mut dec, &mut rng, 8, |rng, _, n| {
            lose_k(rng, n, sp)
        });
        assert_eq!(delivered, 8 * sd);
        assert!(recovered > 0);
    }
}

#[test]
fn duplicate_late_and_stale_shards_are_dropped_and_counted() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut enc = FecEncoder::new(3, 2).unwrap();
    let mut wire = Vec::new();
    for g in 0..6 {
        for _ in 0..3 {
            let (d, p) = encode(&mut enc, ms(g), &kcp_packet(rng.random(), 40));
            wire.push(d);
            wire.extend(p);
        }
    }
    let mut dec = FecDecoder::new(3, 2);
    dec.handle(&wire[0]).unwrap();
    dec.handle(&wire[0]).unwrap();
    assert_eq!(dec.stats().dropped_duplicate, 1);
    dec.handle(&wire[1]).unwrap();
    dec.handle(&wire[3]).unwrap(); // third shard of group 0: decoded (shard 2 rebuilt)
    assert_eq!(drain(&mut dec).len(), 1);
    dec.handle(&wire[2]).unwrap(); // late: group 0 is already decoded
    assert_eq!(dec.stats().dropped_stale, 1);
    // Group 5 arrives: groups 0 and 1 fall out of the window.
    dec.handle(&wire[25]).unwrap();
    dec.handle(&wire[5]).unwrap(); // group 1: stale now
    assert_eq!(dec.stats().dropped_stale, 2);
    assert_eq!(dec.stats().recovered, 1);
}

/// A PUSH of 100 bytes, `sn`, its payload filled with `fill`: two
/// incarnations of one kcp-go session send the same headers (conv, cmd, sn,
/// len) with other bytes.
fn push_of(fill: u8, sn: u32) -> Vec<u8> {
    let mut p = vec![fill; 124];
    p[..4].copy_from_slice(&0x5eed_0001u32.to_le_bytes());
    p[4..8].copy_from_slice(&[81, 0, 0, 1]);
    p[8..12].copy_from_slice(&1000u32.to_le_bytes());
    p[12..16].copy_from_slice(&sn.to_le_bytes());
    p[16..20].copy_from_slice(&0u32.to_le_bytes());
    p[20..24].copy_from_slice(&100u32.to_le_bytes());
    p
}

/// A kcp-go listener re-creates a dropped session for the peer's next
/// packet, and the new session numbers its shards (and its KCP segments)
/// from 0 again. A group holding shards of both incarnations rebuilds a
/// packet that is garbage wherever their shards differ, while the bytes
/// they share (conv, cmd, sn, len here) come through: it would be taken as
/// a PUSH. Reed-Solomon carries no checksum, so a seqid that arrives again
/// with other bytes makes its group rebuild nothing; the next groups, which
/// hold only the new incarnation's shards, recover as before.
#[test]
fn a_group_mixing_two_incarnations_of_the_sender_rebuilds_nothing() {
    let mut first = FecEncoder::new(10, 3).unwrap();
    let mut second = FecEncoder::new(10, 3).unwrap();
    let old: Vec<Vec<u8>> = (0..5)
        .map(|sn| encode(&mut first, ms(sn), &push_of(b'a', sn)).0)
        .collect();
    let (mut data, mut parity) = (Vec::new(), Vec::new());
    for sn in 0..20 {
        let (d, p) = encode(&mut second, ms(100 + sn), &push_of(b'b', sn));
        data.push(d);
        parity.extend(p);
    }
    assert_eq!(parity.len(), 6);
    let mut dec = FecDecoder::new(10, 3);
    for d in &old {
        dec.handle(d).unwrap();
    }
    // The new incarnation's group 0: its first shard, the 6th to 9th (the
    // 10th lost) and one parity shard would make ten with the old five.
    dec.handle(&data[0]).unwrap();
    for d in &data[5..9] {
        dec.handle(d).unwrap();
    }
    dec.handle(&parity[0]).unwrap();
    let rebuilt = drain(&mut dec);
    assert!(
        rebuilt.is_empty(),
        "rebuilt from a mixed group: {:02x?}",
        rebuilt.iter().map(|p| &p[..32]).collect::<Vec<_>>()
    );
    assert_eq!(dec.stats().dropped_conflicting, 1);
    // Group 1, the new incarnation's alone: one shard lost, rebuilt intact.
    for d in data[10..20]
        .iter()
        .filter(|d| d[..4] != 15u32.to_le_bytes())
    {
        dec.handle(d).unwrap();
    }
    dec.handle(&parity[3]).unwrap();
    assert_eq!(drain(&mut dec), vec![push_of(b'b', 12)]);
    // A true duplicate (same seqid, same bytes) is only a duplicate.
    let mut dec = FecDecoder::new(10, 3);
    dec.handle(&data[0]).unwrap();
    dec.handle(&data[0]).unwrap();
    assert_eq!(
        (
            dec.stats().dropped_duplicate,
            dec.stats().dropped_conflicting
        ),
        (1, 0)
    );
}

#[test]
fn unrecoverable_groups_are_counted_when_they_leave_the_window() {
    let mut enc = FecEncoder::new(3, 1).unwrap();
    let mut dec = FecDecoder::new(3, 1);
    for g in 0..8u32 {
        for i in 0..3 {
            let (d, p) = encode(&mut enc, ms(g), &kcp_packet(g * 3 + i, 30));
            // Group 0 loses two data shards: more than its one parity.
            if !(g == 0 && i < 2) {
                dec.handle(&d).unwrap();
            }
            for x in p {
                dec.handle(&x).unwrap();
            }
        }
    }
    assert_eq!(dec.stats().unrecoverable, 1);
    assert_eq!(dec.stats().full_groups, 7);
}

#[test]
fn group_deadline_is_off_by_default() {
    let mut enc = FecEncoder::new(10, 3).unwrap();
    assert_eq!(enc.group_deadline(), None);
    encode(&mut enc, ms(0), &kcp_packet(1, 30));
    assert_eq!(enc.poll_timeout(), None);
    enc.handle_timeout(ms(100_000));
    assert_eq!(enc.poll_parity(&mut [0u8; MAX_PACKET]), None);
    assert_eq!(enc.next_seqid(), 1);
}

#[test]
fn group_deadline_closes_a_sparse_group_so_a_lost_message_is_rebuilt() {
    let mut enc = FecEncoder::new(10, 3).unwrap();
    enc.set_group_deadline(Some(20));
    assert_eq!(enc.poll_timeout(), None, "no group open");
    let msg = kcp_packet(42, 88);
    let (data, extra) = encode(&mut enc, ms(1000), &msg);
    assert!(extra.is_empty());
    assert_eq!(enc.poll_timeout(), Some(ms(1020)));
    let (data2, _) = encode(&mut enc, ms(1010), &kcp_packet(43, 30));
    assert_eq!(
        enc.poll_timeout(),
        Some(ms(1020)),
        "the deadline runs from the group's first shard"
    );
    enc.handle_timeout(ms(1019));
    assert_eq!(enc.poll_parity(&mut [0u8; MAX_PACKET]), None);
    enc.handle_timeout(ms(1020));
    assert_eq!(enc.poll_timeout(), None);
    let mut out = Vec::new();
    let mut buf = vec![0u8; MAX_PACKET];
    while let Some(n) = enc.poll_parity(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    assert_eq!(out.len(), 8 + 3, "8 fillers then 3 parity");
    for (i, f) in out[..8].iter().enumerate() {
        assert_eq!(f.len(), 12, "kcp-go's smallest accepted FEC packet");
        assert_eq!(read_u32(f, 0), Some(2 + i as u32));
        assert_eq!(classify(f), PacketKind::Data);
        assert_eq!(read_u16(f, 6), Some(6));
        assert_eq!(data_payload(f), None, "fillers never reach the ARQ");
    }
    for (k, pkt) in out[8..].iter().enumerate() {
        assert_eq!(classify(pkt), PacketKind::Parity);
        assert_eq!(read_u32(pkt, 0), Some(10 + k as u32));
        assert_eq!(
            pkt.len(),
            data.len(),
            "parity is as long as the longest data packet"
        );
    }
    assert_eq!(enc.next_seqid(), 13);
    assert_eq!(enc.stats().deadline_groups, 1);
    assert_eq!(enc.stats().deadline_fillers, 8);
    assert_eq!(enc.stats().parity_out, 3);

    // The message is lost; the receiver rebuilds it from the rest, and the
    // rebuilt fillers are not handed out.
    let mut dec = FecDecoder::new(10, 3);
    let mut got = Vec::new();
    for pkt in std::iter::once(&data2).chain(&out) {
        dec.handle(pkt).unwrap();
        got.extend(drain(&mut dec));
    }
    assert_eq!(got, vec![msg.clone()]);
    // Also when fillers are lost too (3 losses: message + 2 fillers).
    let mut dec = FecDecoder::new(10, 3);
    let mut got = Vec::new();
    for pkt in std::iter::once(&data2).chain(&out[2..]) {
        dec.handle(pkt).unwrap();
        got.extend(drain(&mut dec));
    }
    assert_eq!(got, vec![msg]);
    assert_eq!(dec.stats().dropped_bad_recovered, 2, "two rebuilt fillers");

    // The next group starts clean at seqid 13 and fills normally.
    let mut enc2 = enc;
    let (d, _) = encode(&mut enc2, ms(1030), &kcp_packet(44, 30));
    assert_eq!(read_u32(&d, 0), Some(13));
}

/// Heap bytes a decoder holds (arenas, queue, slots).
fn decoder_heap(dec: &FecDecoder) -> usize {
    dec.memory_usage()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_bytes_never_panic_the_decoder(packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1600), 0..40)) {
        let mut dec = FecDecoder::new(3, 2);
        let mut buf = [0u8; MAX_PACKET];
        for p in &packets {
            let _ = dec.handle(p);
            while dec.poll_recovered(&mut buf).is_some() {}
            let _ = classify(p);
            let _ = data_payload(p);
            let _ = oob_payload(p);
        }
    }

    #[test]
    fn random_shards_with_plausible_headers_never_panic(
        shards in proptest::collection::vec((0u32..600, any::<bool>(), 8usize..200, any::<u8>()), 0..300),
        d in 1usize..8, p in 1usize..4,
    ) {
        let mut dec = FecDecoder::new(d, p);
        let mut buf = [0u8; MAX_PACKET];
        for (seqid, data, len, fill) in shards {
            let mut pkt = vec![fill; len];
            pkt[..4].copy_from_slice(&seqid.to_le_bytes());
            pkt[4..6].copy_from_slice(&(if data { 0xF1u16 } else { 0xF2 }).to_le_bytes());
            let _ = dec.handle(&pkt);
            while let Some(n) = dec.poll_recovered(&mut buf) {
                prop_assert!(n >= 24);
            }
        }
    }
}

#[test]
fn decoder_memory_stays_bounded_under_an_endless_stream_of_random_shards() {
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let mut dec = FecDecoder::new(10, 3);
    let mut buf = [0u8; MAX_PACKET];
    // The most any shape can hold: 4 groups of 256 shards, plus the recovery
    // arena and the learning ring.
    let bound = FecDecoder::memory_bound(dec.max_shards());
    let mut peak = 0;
    let mut seqid = 0u32;
    for i in 0..60_000u32 {
        // Mostly a plausible stream with jumps, shape changes and garbage.
        let len = rng.random_range(0..1600);
        let mut pkt: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if len >= 8 && rng.random_range(0..4) != 0 {
            seqid = match rng.random_range(0..20) {
                0 => rng.random(),
                1 => seqid.wrapping_sub(rng.random_range(0..5000)),
                _ => seqid.wrapping_add(1),
            };
            pkt[..4].copy_from_slice(&seqid.to_le_bytes());
            let shape = 2 + (i / 5000) % 200;
            let flag: u16 = if seqid % shape < shape / 2 {
                0xF1
            } else {
                0xF2
            };
            pkt[4..6].copy_from_slice(&flag.to_le_bytes());
        }
        let _ = dec.handle(&pkt);
        while dec.poll_recovered(&mut buf).is_some() {}
        peak = peak.max(decoder_heap(&dec));
    }
    assert!(peak <= bound, "peak {peak} > bound {bound}");
    assert!(
        dec.stats().retunes > 0,
        "the stream made the decoder relearn its shape"
    );
}

#[test]
fn encoder_and_decoder_can_move_between_threads_and_sit_behind_a_mutex() {
    fn check<T: Send + Sync>() {}
    check::<FecEncoder>();
    check::<FecDecoder>();
}

/// Writes a deadline-closed group (two real KCP packets, 8 fillers, 3 parity)
/// as hex lines to `$KCPIO_FILLER_DUMP`, for `lab/scripts/kcpgo_filler_check.sh`,
/// which feeds them to a real kcp-go session.
#[test]
#[ignore = "run by lab/scripts/kcpgo_filler_check.sh"]
fn dump_deadline_group_for_kcp_go() {
    let seg = |sn: u32, body: &[u8]| {
        let mut p = Vec::new();
        p.extend_from_slice(&0x1122_3344u32.to_le_bytes());
        p.extend_from_slice(&[81, 0]);
        p.extend_from_slice(&128u16.to_le_bytes());
        p.extend_from_slice(&5u32.to_le_bytes());
        p.extend_from_slice(&sn.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&(body.len() as u32).to_le_bytes());
        p.extend_from_slice(body);
        p
    };
    let mut enc = FecEncoder::new(10, 3).unwrap();
    enc.set_group_deadline(Some(20));
    let mut lines = Vec::new();
    for (sn, body) in [
        (0u32, &b"first message, lost on the wire"[..]),
        (1, &b"second"[..]),
    ] {
        let (d, x) = encode(&mut enc, ms(sn), &seg(sn, body));
        lines.push(hex::encode(d));
        assert!(x.is_empty());
    }
    enc.handle_timeout(ms(20));
    let mut buf = vec![0u8; MAX_PACKET];
    while let Some(n) = enc.poll_parity(&mut buf) {
        lines.push(hex::encode(&buf[..n]));
    }
    let path =
        std::env::var("KCPIO_FILLER_DUMP").unwrap_or_else(|_| "/tmp/kcpio_fillers.txt".into());
    std::fs::write(path, lines.join("\n")).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    /// Reordering across neighbouring groups and duplicated packets do not
    /// stop recovery of up to `parity` losses per group, and nothing is
    /// handed out twice from one group.
    #[test]
    fn reordered_and_duplicated_shards_still_recover(d in 1usize..=10, p in 1usize..=4, seed in any::<u64>()) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut enc = FecEncoder::new(d, p).unwrap();
        let mut dec = FecDecoder::new(d, p);
        let groups = 8;
        let mut sent = Vec::new();
        let mut wire = Vec::new();
        for g in 0..groups {
            let mut group = Vec::new();
            for _ in 0..d {
                let kcp = kcp_packet(sent.len() as u32, rng.random_range(24..=600));
                let (data, parity) = encode(&mut enc, ms(1000 + g as u32), &kcp);
                sent.push(kcp);
                group.push(data);
                group.extend(parity);
            }
            // A first one-shard group has no parity (continuity rule): no loss there.
            let lost = if group.len() == d + p { { let k = rng.random_range(0..=p); lose_k(&mut rng, d + p, k) } } else { vec![false; group.len()] };
            for (pkt, l) in group.into_iter().zip(lost) {
                if !l {
                    if rng.random_range(0..5) == 0 {
                        wire.push(pkt.clone());
                    }
                    wire.push(pkt);
                }
            }
        }
        // Local reordering: each packet moves at most `d + p` places.
        let mut keyed: Vec<(usize, Vec<u8>)> =
            wire.into_iter().enumerate().map(|(i, w)| (i + rng.random_range(0..=d + p), w)).collect();
        keyed.sort_by_key(|(k, _)| *k);
        let wire: Vec<Vec<u8>> = keyed.into_iter().map(|(_, w)| w).collect();
        let mut delivered = std::collections::BTreeSet::new();
        let mut recovered = Vec::new();
        for pkt in &wire {
            if let Some(k) = data_payload(pkt) {
                delivered.insert(k.to_vec());
            }
            dec.handle(pkt).unwrap();
            for r in drain(&mut dec) {
                prop_assert!(sent.contains(&r));
                recovered.push(r.clone());
                delivered.insert(r);
            }
        }
        prop_assert_eq!(delivered.len(), sent.len());
        let unique: std::collections::BTreeSet<_> = recovered.iter().collect();
        prop_assert_eq!(unique.len(), recovered.len(), "a packet recovered twice");
    }
}

#[test]
fn the_skip_parity_capture_decodes_without_recovery() {
    let g = group("rs_3_2_skip_parity");
    let mut dec = FecDecoder::new(3, 2);
    for p in &g.packets {
        dec.handle(&p.fec()).unwrap();
        assert!(drain(&mut dec).is_empty());
    }
    assert_eq!(dec.stats().full_groups, 2);
    assert_eq!(
        dec.stats().dropped_stale,
        2,
        "the second group's parity arrives after it completed"
    );
    // Losing a data shard of the second group is repaired by its parity.
    let mut dec = FecDecoder::new(3, 2);
    let mut got = Vec::new();
    for p in g.packets.iter().filter(|p| p.seqid != 6) {
        dec.handle(&p.fec()).unwrap();
        got.extend(drain(&mut dec));
    }
    let lost = g.packets.iter().find(|p| p.seqid == 6).unwrap().fec();
    assert_eq!(got, vec![lost[8..].to_vec()]);
}

#[test]
fn steady_lossy_traffic_keeps_decoder_memory_within_four_arenas() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut enc = FecEncoder::new(10, 3).unwrap();
    let mut dec = FecDecoder::new(10, 3);
    let mut snapshot = None;
    let mut buf = vec![0u8; MAX_PACKET];
    let mut out = vec![0u8; MAX_PACKET];
    for g in 0..600u32 {
        if g == 100 {
            snapshot = Some(dec.memory_usage());
        }
        for i in 0..10 {
            let len = rng.random_range(24..=1392);
            buf[DATA_HEADER..DATA_HEADER + len].copy_from_slice(&kcp_packet(g * 10 + i, len));
            let n = enc.encode(ms(g), &mut buf, len);
            if rng.random_range(0..14) != 0 {
                dec.handle(&buf[..n]).unwrap();
                while dec.poll_recovered(&mut out).is_some() {}
            }
            while let Some(m) = enc.poll_parity(&mut out) {
                if rng.random_range(0..14) != 0 {
                    let parity = out[..m].to_vec();
                    dec.handle(&parity).unwrap();
                    while dec.poll_recovered(&mut out).is_some() {}
                }
            }
        }
    }
    assert!(dec.stats().recovered > 100);
    // Arenas come from a pool: an undecodable group keeps one until it leaves the
    // window, so at most four exist; the rest is the recovery arena and the
    // learner's ring.
    let bound = 4 * 10 * SHARD_STRIDE + 3 * SHARD_STRIDE + 64 * 1024;
    assert!(
        dec.memory_usage() <= bound,
        "{} > {bound}",
        dec.memory_usage()
    );
    assert!(snapshot.unwrap() <= dec.memory_usage());
}

/// Codecs of one shape share its matrix and tables; another shape gets its
/// own; a shape nobody uses is rebuilt (and equal) when it is needed again.
#[test]
fn codecs_of_one_shape_share_it() {
    use super::codec::VandermondeCodec;
    // A shape no other test uses, so parallel tests do not change the counts.
    let a = VandermondeCodec::new(37, 5).unwrap();
    let b = VandermondeCodec::new(37, 5).unwrap();
    let other = VandermondeCodec::new(37, 6).unwrap();
    assert!(a.shares_shape_with(&b));
    assert!(!a.shares_shape_with(&other));
    assert_eq!(a.shape_users(), 2);
    assert_eq!(other.shape_users(), 1);
    let matrix = a.matrix().to_vec();
    drop((a, b));
    let again = VandermondeCodec::new(37, 5).unwrap();
    assert_eq!(again.shape_users(), 1);
    assert_eq!(again.matrix(), &matrix[..]);
}

/// An idle encoder and decoder hold arenas for the shards they saw, not for
/// whole groups; a full group brings them to size.
#[test]
fn arenas_grow_with_the_shards_seen() {
    let mut enc = FecEncoder::new(10, 3).unwrap();
    let mut dec = FecDecoder::new(10, 3);
    let empty = dec.memory_usage();
    let (data, parity) = encode(&mut enc, ms(0), &[0x51; 40]);
    assert!(parity.is_empty());
    dec.handle(&data).unwrap();
    let one = dec.memory_usage();
    assert!(one - empty <= 2 * SHARD_STRIDE, "{empty} -> {one}");
    let mut wire = vec![];
    for i in 1..10u32 {
        let (d, p) = encode(&mut enc, ms(i), &[0x52; 40]);
        wire.push(d);
        wire.extend(p);
    }
    assert_eq!(wire.len(), 9 + 3, "the group's parity came out");
    // Lose shard 1: the decoder rebuilds it (its recovery buffer appears).
    for p in &wire[1..] {
        dec.handle(p).unwrap();
    }
    assert_eq!(drain(&mut dec), vec![vec![0x52; 40]]);
    // The next group's first shard frames the group: the shape is confirmed
    // from the stream.
    assert_eq!(dec.learned_shape(), None);
    let (d, _) = encode(&mut enc, ms(10), &[0x53; 40]);
    dec.handle(&d).unwrap();
    assert_eq!(dec.learned_shape(), Some((10, 3)));
    // Ten 42-byte shards take 64 bytes each, and one rebuilt packet its own.
    assert!(
        dec.memory_usage() <= one + 4096,
        "{one} -> {}",
        dec.memory_usage()
    );
}

/// A shard of `len` bytes (header included) whose kind follows `d + p`.
fn tiny_shard(seqid: u32, d: usize, p: usize, len: usize) -> Vec<u8> {
    let total = (d + p) as u32;
    let flag: u16 = if seqid % total < d as u32 { 0xF1 } else { 0xF2 };
    let mut pkt = vec![0u8; len.max(8)];
    pkt[..4].copy_from_slice(&seqid.to_le_bytes());
    pkt[4..6].copy_from_slice(&flag.to_le_bytes());
    pkt[6..8].copy_from_slice(&2u16.to_le_bytes());
    pkt
}

/// Teaches `dec` the shape `d + p` with two framed groups of 12-byte shards
/// starting at group `first`; returns the next free group.
fn teach(dec: &mut FecDecoder, d: usize, p: usize, first: u32) -> u32 {
    let total = (d + p) as u32;
    for seqid in first * total..(first + 2) * total + 1 {
        let _ = dec.handle(&tiny_shard(seqid, d, p, 12));
    }
    first + 3
}

/// Decoder memory follows the shards received, not their positions: tiny
/// shards at high positions, over many groups and shape changes, cost a few
/// tens of KiB, within the documented bound (an arena zero-filled per group
/// would cost ~385 KiB for one 12-byte parity shard at position 255), and a
/// learned shape above the limit is refused.
#[test]
fn tiny_shards_at_high_positions_cannot_inflate_decoder_memory() {
    for max in [DEFAULT_MAX_SHARDS, MAX_SHARDS] {
        let mut dec = FecDecoder::with_max_shards(10, 3, max);
        let mut buf = [0u8; MAX_PACKET];
        let mut peak = 0;
        let mut group = 0u32;
        // Shapes an attacker cycles through: the largest the limit allows,
        // lopsided ones, and one above the limit (refused when max < 256).
        let shapes = [
            (max - 1, 1),
            (max / 2, max / 2),
            (2, max - 2),
            (200, 56),
            (10, 3),
        ];
        for round in 0..4 {
            for &(d, p) in &shapes {
                group = teach(&mut dec, d, p, group);
                let (d, p) = dec.shape();
                let total = (d + p) as u32;
                // One 12-byte shard at the last position of each of many groups,
                // and a few tiny data shards near the end of the data range.
                for g in group..group + 500 {
                    let _ = dec.handle(&tiny_shard(g * total + total - 1, d, p, 12));
                    if d > 2 {
                        let _ = dec.handle(&tiny_shard(g * total + d as u32 - 1, d, p, 12));
                    }
                    while dec.poll_recovered(&mut buf).is_some() {}
                    peak = peak.max(dec.memory_usage());
                }
                group += 500 + round;
            }
        }
        eprintln!("limit {max}: peak {peak} bytes");
        // Mostly the codec of the largest shape (matrix and the inversion
        // scratch of a rebuild the teaching groups trigger); the stored
        // shards themselves are a few KiB.
        let limit = if max == DEFAULT_MAX_SHARDS { 64 } else { 256 };
        assert!(
            peak <= limit * 1024,
            "limit {max}: peak {peak} bytes under the tiny-shard attack"
        );
        assert!(peak <= FecDecoder::memory_bound(max));
        if max < 200 + 56 {
            assert!(dec.stats().refused_shapes > 0);
        }
        assert!(dec.stats().retunes >= 4 * 4);
    }
}

/// Memory per group follows what arrived: `data - 1` tiny shards and one
/// full one cost `data` full strides (a kcp-go receiver holds a 1,500-byte
/// buffer per shard too), and everything stays within `memory_bound`.
#[test]
fn one_large_shard_widens_only_its_own_group() {
    let (d, p) = (100, 28);
    let mut dec = FecDecoder::with_max_shards(d, p, 128);
    let total = (d + p) as u32;
    let base = dec.memory_usage();
    for seqid in 0..(d as u32 - 2) {
        dec.handle(&tiny_shard(seqid, d, p, 12)).unwrap();
    }
    let tiny = dec.memory_usage() - base;
    assert!(tiny <= (d - 2) * 32 * 2, "{tiny}");
    dec.handle(&tiny_shard(d as u32 - 2, d, p, MAX_PACKET))
        .unwrap();
    let wide = dec.memory_usage() - base;
    assert!(wide <= d * SHARD_STRIDE * 2, "{wide}");
    // The parity completes the group (one data shard missing): rebuilt, and
    // the arena goes back to the pool.
    dec.handle(&tiny_shard(total - 1, d, p, 12)).unwrap();
    assert!(dec.memory_usage() <= FecDecoder::memory_bound(128));
    assert_eq!(dec.stats().unrecoverable, 0);
}

#[test]
fn the_documented_bounds() {
    // The default limit keeps a session's FEC state near 1 MiB at worst.
    let b = FecDecoder::memory_bound(DEFAULT_MAX_SHARDS);
    assert!((512 * 1024..2 * 1024 * 1024).contains(&b), "{b}");
    assert!(FecDecoder::memory_bound(14) < 256 * 1024);
    // A limit below the initial shape is raised to it.
    assert_eq!(FecDecoder::with_max_shards(10, 3, 4).max_shards(), 13);
    assert_eq!(
        FecDecoder::with_max_shards(10, 3, 1000).max_shards(),
        MAX_SHARDS
    );
}

/// The conv field of a parity packet read as a data shard (packet offset 8).
fn parity_conv(p: &[u8]) -> Option<u32> {
    read_u32(p, SHARD_OFFSET + 2)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Guard shards: whatever the shape, the conv (zero bytes included) and
    /// the KCP packets (all of one conv, any lengths and bytes), no parity
    /// shard carries the conv where a data shard does, so no receiver that
    /// takes parity for data (kcp-go v5.6.1 on a wrong guess) can accept it;
    /// one guard per group, 24 bytes, refused as a KCP packet.
    #[test]
    fn guarded_parity_never_carries_the_conv(
        data in 2usize..=24,
        parity in 1usize..=6,
        conv in prop_oneof![Just(0u32), Just(0x0000_00ff), any::<u32>()],
        lens in proptest::collection::vec(24usize..400, 60),
        seed in any::<u64>(),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut enc = FecEncoder::new(data, parity).unwrap();
        enc.set_guard(Some(conv));
        let mut guards = 0;
        let mut parities = 0;
        for (i, &len) in lens.iter().enumerate() {
            let mut kcp = vec![0u8; len];
            rng.fill(&mut kcp[..]);
            kcp[..4].copy_from_slice(&conv.to_le_bytes());
            let (_, extra) = encode(&mut enc, ms(i as u32), &kcp);
            for p in extra {
                match classify(&p) {
                    PacketKind::Parity => {
                        parities += 1;
                        prop_assert_ne!(parity_conv(&p), Some(conv));
                    }
                    PacketKind::Data => {
                        guards += 1;
                        prop_assert_eq!(p.len(), 24);
                        prop_assert_eq!(data_payload(&p), None);
                        prop_assert_eq!(read_u32(&p, DATA_HEADER), Some(!conv));
                    }
                    k => prop_assert!(false, "unexpected {:?}", k),
                }
            }
        }
        let groups = lens.len() / (data - 1);
        prop_assert_eq!(guards, groups);
        // With two data shards the first group closes at the first encode,
        // with no earlier shard: the continuity rule skips its parity.
        let emitted = if data == 2 { groups - 1 } else { groups };
        prop_assert_eq!(parities, emitted * parity);
        prop_assert_eq!(enc.stats().parity_guarded, 0);
    }
}

#[test]
fn guards_are_off_by_default_and_take_a_data_slot_when_on() {
    let mut enc = FecEncoder::new(3, 1).unwrap();
    assert_eq!(enc.guard(), None);
    enc.set_guard(Some(7));
    assert_eq!(enc.guard(), Some(7));
    // Two KCP packets, then the guard (seqid 2) and the parity (seqid 3).
    let (_, extra) = encode(&mut enc, ms(0), &kcp_packet(1, 30));
    assert!(extra.is_empty());
    let (_, extra) = encode(&mut enc, ms(1), &kcp_packet(2, 30));
    let seqids: Vec<(u32, PacketKind)> = extra
        .iter()
        .map(|p| (read_u32(p, 0).unwrap(), classify(p)))
        .collect();
    assert_eq!(seqids, vec![(2, PacketKind::Data), (3, PacketKind::Parity)]);
    assert_eq!(enc.stats().guard_shards, 1);
    assert_eq!(enc.stats().data_out, 2);
    // After a pause the continuity rule skips the parity; the guard still goes.
    encode(&mut enc, ms(1000), &kcp_packet(3, 30));
    let (_, extra) = encode(&mut enc, ms(2000), &kcp_packet(4, 30));
    assert_eq!(extra.len(), 1);
    assert_eq!(classify(&extra[0]), PacketKind::Data);
    assert_eq!(enc.stats().parity_skipped, 1);
    assert_eq!(enc.next_seqid(), 8);
    // Off again: full groups of KCP packets.
    enc.set_guard(None);
    for i in 0..3 {
        encode(&mut enc, ms(2001 + i), &kcp_packet(5 + i, 30));
    }
    assert_eq!(enc.stats().guard_shards, 2);
    assert_eq!(enc.next_seqid(), 12);
    // One data shard: parity equals the data, nothing to guard.
    let mut one = FecEncoder::new(1, 2).unwrap();
    one.set_guard(Some(7));
    assert_eq!(one.guard(), None);
}

#[test]
fn a_deadline_group_with_guards_ends_in_its_guard() {
    let mut enc = FecEncoder::new(4, 2).unwrap();
    enc.set_group_deadline(Some(20));
    enc.set_guard(Some(0x0102_0304));
    encode(&mut enc, ms(0), &kcp_packet(1, 30));
    enc.handle_timeout(ms(20));
    let mut kinds = Vec::new();
    let mut buf = vec![0u8; MAX_PACKET];
    while let Some(n) = enc.poll_parity(&mut buf) {
        let p = &buf[..n];
        kinds.push((read_u32(p, 0).unwrap(), n, classify(p)));
        if classify(p) == PacketKind::Parity {
            assert_ne!(parity_conv(p), Some(0x0102_0304));
        }
    }
    assert_eq!(
        kinds,
        vec![
            (1, 12, PacketKind::Data),
            (2, 12, PacketKind::Data),
            (3, 24, PacketKind::Data),
            (4, 6 + 2 + 30, PacketKind::Parity),
            (5, 6 + 2 + 30, PacketKind::Parity),
        ]
    );
    assert_eq!(enc.stats().deadline_fillers, 2);
    assert_eq!(enc.stats().guard_shards, 1);
}

/// The decoder confirms the shape it was given from the stream's framing,
/// and learns another one by retuning; a stream that never frames a group
/// confirms nothing.
#[test]
fn the_decoder_learns_or_confirms_the_senders_shape() {
    let feed = |dec: &mut FecDecoder, d: usize, p: usize, from: u32, to: u32| {
        for seqid in from..to {
            let _ = dec.handle(&tiny_shard(seqid, d, p, 40));
        }
    };
    let mut same = FecDecoder::new(10, 3);
    feed(&mut same, 10, 3, 0, 13);
    assert_eq!(same.learned_shape(), None, "no parity-to-data edge yet");
    feed(&mut same, 10, 3, 13, 14);
    assert_eq!(same.learned_shape(), Some((10, 3)));
    let mut other = FecDecoder::new(10, 3);
    feed(&mut other, 20, 5, 0, 60);
    assert_eq!(other.learned_shape(), Some((20, 5)));
    let mut data_only = FecDecoder::new(10, 3);
    feed(&mut data_only, 10, 3, 0, 10);
    assert_eq!(data_only.learned_shape(), None);
}

/// The matrix work a peer's shards make this thread's decoders do.
fn matrix_work() -> u64 {
    codec::MATRIX_WORK.with(std::cell::Cell::get)
}

/// A shard of the given kind, whatever shape the decoder assumes.
fn shard_of_kind(seqid: u32, data: bool) -> Vec<u8> {
    let mut pkt = vec![0u8; 12];
    pkt[..4].copy_from_slice(&seqid.to_le_bytes());
    pkt[4..6].copy_from_slice(&(if data { 0xF1u16 } else { 0xF2 }).to_le_bytes());
    pkt[6..8].copy_from_slice(&2u16.to_le_bytes());
    pkt
}

/// A framed group of shape `d + p` at `start` (a multiple of `d + p`): the
/// parity shard before it, the group, the data shard after it.
fn framed(start: u32, d: u32, p: u32) -> Vec<Vec<u8>> {
    let mut v = vec![shard_of_kind(start - 1, false)];
    v.extend((start..start + d).map(|s| shard_of_kind(s, true)));
    v.extend((start + d..start + d + p).map(|s| shard_of_kind(s, false)));
    v.push(shard_of_kind(start + d + p, true));
    v
}

/// A peer alternating between two large shapes used to make the decoder
/// build a codec (a 127 x 127 inversion: ~1 ms of CPU) every four 12-byte
/// datagrams, about a thousand times the cost of ordinary shards: a CPU
/// amplification found by a slow fuzz input. Now a different shape is
/// adopted at most once per its own size of shards, and building one costs
/// `O(total * data)`, so the matrix work per datagram stays below the
/// largest shape's size.
#[test]
fn alternating_shapes_cost_bounded_matrix_work_per_datagram() {
    let mut dec = FecDecoder::new(10, 3);
    let (a, b) = (128 * 8, 128 * (1 << 24));
    let before = matrix_work();
    let mut sent = 0u64;
    for round in 0..3u32 {
        let mut pkts = framed(a, 127, 1);
        pkts.extend(framed(b, 126, 2));
        // Shards that contradict either shape, next to one frame then the
        // other, so each search finds the shape not in use.
        for k in 0..60u32 {
            let near = if (round * 60 + k) % 2 == 0 { b } else { a };
            pkts.extend((0..4).map(|j| shard_of_kind(near + 512 + 128 * (j + 4 * k), false)));
        }
        for p in &pkts {
            let _ = dec.handle(p);
            sent += 1;
        }
    }
    let work = matrix_work() - before;
    let retunes = dec.stats().retunes;
    eprintln!("{sent} shards: {retunes} shape changes, matrix work {work}");
    assert!(retunes >= 3, "the attack does change the shape");
    assert!(
        retunes <= sent / 128 + 1,
        "{retunes} shape changes from {sent} shards"
    );
    assert!(
        work <= 128 * sent,
        "matrix work {work} for {sent} shards ({} each)",
        work / sent
    );
}
