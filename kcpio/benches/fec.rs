//! FEC throughput, shaped like kcp-go's `BenchmarkFECEncode` and
//! `BenchmarkFECDecode` (fec_test.go): 10 data + 3 parity shards, 1500-byte
//! packets, one packet per iteration, throughput in packet bytes.
//!
//! - `FECEncode`: one 1500-byte FEC packet (8-byte header + 1492 KCP bytes)
//!   through the encoder per iteration, parity drained every 10th.
//! - `FECDecode`: one 1500-byte shard per iteration (seqid = iteration,
//!   data/parity by position, about 1 in 13 lost at random), recovered
//!   packets drained. kcp-go's run includes its per-packet `make`; ours reuses
//!   one buffer, as the driver does.
//! - `gf256`: the raw codec on one 10+3 group of 1500-byte shards, kcpio's
//!   kernel against `reed-solomon-erasure`'s pure-Rust path.

use criterion::{Criterion, Throughput, black_box, criterion_main};
use kcpio::arq::Timestamp;
use kcpio::fec::{FecDecoder, FecEncoder, bench_support};

const DATA: usize = 10;
const PARITY: usize = 3;
const PAYLOAD: usize = 1500;

fn fec(c: &mut Criterion) {
    let mut g = c.benchmark_group("FEC");
    g.throughput(Throughput::Bytes(PAYLOAD as u64));

    g.bench_function("FECEncode", |b| {
        let mut enc = FecEncoder::new(DATA, PARITY).unwrap();
        let mut buf = vec![0u8; PAYLOAD];
        let mut out = vec![0u8; PAYLOAD];
        let now = Timestamp::from_millis(0);
        b.iter(|| {
            let n = enc.encode(now, &mut buf, PAYLOAD - 8);
            while let Some(m) = enc.poll_parity(&mut out) {
                black_box(&out[..m]);
            }
            n
        });
    });

    g.bench_function("FECDecode", |b| {
        let mut dec = FecDecoder::new(DATA, PARITY);
        let mut pkt = vec![0u8; PAYLOAD];
        let mut out = vec![0u8; PAYLOAD];
        let mut i: u32 = 0;
        let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
        b.iter(|| {
            let seqid = i;
            i = i.wrapping_add(1);
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng.is_multiple_of((DATA + PARITY) as u64) {
                return; // lost
            }
            pkt[..4].copy_from_slice(&seqid.to_le_bytes());
            let flag: u16 = if seqid as usize % (DATA + PARITY) >= DATA {
                0xF2
            } else {
                0xF1
            };
            pkt[4..6].copy_from_slice(&flag.to_le_bytes());
            let _ = dec.handle(&pkt);
            while let Some(m) = dec.poll_recovered(&mut out) {
                black_box(&out[..m]);
            }
        });
    });
    g.finish();

    let stride = PAYLOAD;
    let len = PAYLOAD;
    let data: Vec<u8> = (0..DATA * stride).map(|i| (i * 7 + 3) as u8).collect();
    let mut g = c.benchmark_group("gf256");
    g.throughput(Throughput::Bytes((DATA * len) as u64));
    let best = bench_support::kernel();
    for kernel in ["avx2", "ssse3", "portable"] {
        if kernel == "avx2" && best != "avx2" || kernel == "ssse3" && best == "portable" {
            continue;
        }
        g.bench_function(format!("encode_10_3_kcpio_{kernel}"), |b| {
            let mut codec = bench_support::Codec::new(DATA, PARITY).unwrap();
            codec.set_kernel(kernel);
            let mut parity = vec![0u8; PARITY * stride];
            b.iter(|| assert!(codec.encode(black_box(&data), stride, len, &mut parity)));
        });
    }
    g.bench_function("encode_10_3_reed_solomon_erasure", |b| {
        let rs = reed_solomon_erasure::galois_8::ReedSolomon::new(DATA, PARITY).unwrap();
        let shards: Vec<&[u8]> = data.chunks(stride).collect();
        let mut parity = vec![vec![0u8; len]; PARITY];
        b.iter(|| rs.encode_sep(black_box(&shards), &mut parity).unwrap());
    });
    g.finish();
}

// `criterion_group!` expands to an undocumented `pub fn`; a private module
// keeps it out of `missing_docs`.
mod entry {
    criterion::criterion_group!(benches, super::fec);
}
criterion_main!(entry::benches);
