//! The FEC decoder fed arbitrary packets, with recovery polling.
//!
//! Input: initial data and parity counts, a shard-limit selector, then
//! records `ctl u8, len u16, bytes`: `ctl & 2` synthesizes a plausible header
//! (seqid near the last one, kind from `ctl & 4`) in front of the bytes,
//! `ctl & 1` drains recovered packets after the packet.
//!
//! Checks: memory never exceeds `FecDecoder::memory_bound` for the decoder's
//! limit; the learned shape never exceeds the limit; recovered packets are
//! KCP-sized; every packet is counted once.
#![no_main]

use kcpio::fec::{FecDecoder, MAX_PACKET};
use kcpio_fuzz::Reader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    // Small initial shapes (a codec of a large one costs an O(d^3) matrix
    // inversion per run); the stream can still teach large ones.
    let (d, p) = (usize::from(r.u8() % 24), usize::from(r.u8() % 12));
    let max = [13, 64, 128, 256][usize::from(r.u8() % 4)];
    let mut dec = FecDecoder::with_max_shards(d, p, max);
    let max = dec.max_shards();
    let bound = FecDecoder::memory_bound(max);
    let mut buf = vec![0u8; MAX_PACKET];
    let mut seqid = 0u32;
    let mut handled = 0u64;
    let mut pkt = Vec::with_capacity(2048);
    for _ in 0..10_000 {
        if r.is_empty() {
            break;
        }
        let ctl = r.u8();
        pkt.clear();
        if ctl & 2 != 0 {
            seqid = match ctl >> 5 {
                0 => r.u32(),
                1 => seqid.wrapping_sub(u32::from(r.u8())),
                _ => seqid.wrapping_add(u32::from(ctl >> 5) - 1),
            };
            pkt.extend_from_slice(&seqid.to_le_bytes());
            pkt.extend_from_slice(&(if ctl & 4 != 0 { 0xF1u16 } else { 0xF2 }).to_le_bytes());
        }
        pkt.extend_from_slice(r.record());
        let _ = dec.handle(&pkt);
        handled += 1;
        if ctl & 1 != 0 {
            while let Some(n) = dec.poll_recovered(&mut buf) {
                assert!((24..=MAX_PACKET - 8).contains(&n), "recovered {n} bytes");
            }
        }
        let (d, p) = dec.shape();
        assert!(d >= 1 && p >= 1 && d + p <= max, "shape {d}+{p} over {max}");
        let used = dec.memory_usage();
        assert!(used <= bound, "{used} > {bound}");
    }
    let s = dec.stats();
    assert_eq!(s.data_in + s.parity_in + s.dropped_malformed, handled);
});
