//! FEC encoder to decoder over a lossy link chosen by the input.
//!
//! Input: data and parity counts, then per KCP packet a length byte and a
//! loss byte (bit 0: the data shard is lost; bits 1..: which parity shards
//! of a completed group are lost).
//!
//! Checks: every recovered packet is one that was lost, recovered once,
//! byte for byte; every group that delivered at least `data` shards
//! rebuilds all its lost packets.
#![no_main]

use std::collections::{HashMap, HashSet};

use kcpio::arq::Timestamp;
use kcpio::fec::{DATA_HEADER, FecDecoder, FecEncoder, MAX_PACKET};
use kcpio_fuzz::Reader;
use libfuzzer_sys::fuzz_target;

/// A KCP-sized packet whose bytes identify it.
fn packet(id: u32, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|k| (k as u32 ^ id.wrapping_mul(2_654_435_761)) as u8)
        .collect();
    p[..4].copy_from_slice(&id.to_le_bytes());
    p
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let d = 1 + usize::from(r.u8() % 20);
    let p = 1 + usize::from(r.u8() % 10);
    let total = (d + p) as u32;
    let mut enc = FecEncoder::new(d, p).unwrap();
    let mut dec = FecDecoder::new(d, p);
    let now = Timestamp::from_millis(0);
    let mut buf = vec![0u8; MAX_PACKET];
    let mut out = vec![0u8; MAX_PACKET];
    let mut lost: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut recovered: HashSet<u32> = HashSet::new();
    // Shards delivered per group, and the ids of each group's data.
    let mut delivered: HashMap<u32, usize> = HashMap::new();
    let mut members: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut complete: HashSet<u32> = HashSet::new();
    let mut drain =
        |dec: &mut FecDecoder, lost: &HashMap<u32, Vec<u8>>, recovered: &mut HashSet<u32>| {
            while let Some(n) = dec.poll_recovered(&mut out) {
                let id = u32::from_le_bytes(out[..4].try_into().unwrap());
                let want = lost.get(&id).expect("recovered a packet that was not lost");
                assert_eq!(&out[..n], &want[..], "recovered bytes differ");
                assert!(recovered.insert(id), "recovered twice");
            }
        };
    let mut id = 0u32;
    while !r.is_empty() && id < 2000 {
        let len = 24 + usize::from(r.u8()) * 5;
        let loss = r.u8();
        let kcp = packet(id, len);
        buf[DATA_HEADER..DATA_HEADER + len].copy_from_slice(&kcp);
        let seqid = enc.next_seqid();
        let group = seqid / total;
        let n = enc.encode(now, &mut buf, len);
        members.entry(group).or_default().push(id);
        if loss & 1 == 0 {
            *delivered.entry(group).or_default() += 1;
            dec.handle(&buf[..n]).unwrap();
            drain(&mut dec, &lost, &mut recovered);
        } else {
            lost.insert(id, kcp);
        }
        let mut parity = vec![0u8; MAX_PACKET];
        let mut bit = 1;
        while let Some(m) = enc.poll_parity(&mut parity) {
            complete.insert(group);
            if (loss >> bit) & 1 == 0 {
                *delivered.entry(group).or_default() += 1;
                dec.handle(&parity[..m]).unwrap();
                drain(&mut dec, &lost, &mut recovered);
            }
            bit = (bit % 7) + 1;
        }
        id += 1;
    }
    for g in &complete {
        if delivered.get(g).copied().unwrap_or(0) >= d {
            for m in &members[g] {
                if lost.contains_key(m) {
                    assert!(recovered.contains(m), "group {g}: packet {m} not rebuilt");
                }
            }
        }
    }
});
