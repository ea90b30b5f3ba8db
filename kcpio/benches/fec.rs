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
//!
//! With `KCPIO_BENCH_CPU_MS=M` set, criterion is skipped and `FEC/FECEncode`
//! and `FEC/FECDecode` each run for `M` ms of this thread's CPU time, printing
//! the CPU time per packet (the mode `benches/crypto.rs` documents;
//! `lab/scripts/crypto_vs_kcpgo.sh` puts them beside kcp-go's).

use std::time::Duration;

use criterion::{Criterion, Throughput, black_box};
use kcpio::arq::Timestamp;
use kcpio::fec::{FecDecoder, FecEncoder, bench_support};
use kcpio_testkit::cpu::ns_per_call;

const DATA: usize = 10;
const PARITY: usize = 3;
const PAYLOAD: usize = 1500;

/// One `FECEncode` iteration: a 1500-byte packet in, parity drained.
fn encode_case() -> impl FnMut() -> usize {
    let mut enc = FecEncoder::new(DATA, PARITY).unwrap();
    let mut buf = vec![0u8; PAYLOAD];
    let mut out = vec![0u8; PAYLOAD];
    let now = Timestamp::from_millis(0);
    move || {
        let n = enc.encode(now, &mut buf, PAYLOAD - 8);
        while let Some(m) = enc.poll_parity(&mut out) {
            black_box(&out[..m]);
        }
        n
    }
}

/// One `FECDecode` iteration: a shard in (or lost), recoveries drained.
fn decode_case() -> impl FnMut() {
    let mut dec = FecDecoder::new(DATA, PARITY);
    let mut pkt = vec![0u8; PAYLOAD];
    let mut out = vec![0u8; PAYLOAD];
    let mut i: u32 = 0;
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    move || {
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
    }
}

fn fec(c: &mut Criterion) {
    let mut g = c.benchmark_group("FEC");
    g.throughput(Throughput::Bytes(PAYLOAD as u64));
    g.bench_function("FECEncode", |b| b.iter(encode_case()));
    g.bench_function("FECDecode", |b| b.iter(decode_case()));
    g.finish();

    let stride = PAYLOAD;
    let len = PAYLOAD;
    let data: Vec<u8> = (0..DATA * stride).map(|i| (i * 7 + 3) as u8).collect();
    let mut g = c.benchmark_group("gf256");
    g.throughput(Throughput::Bytes((DATA * len) as u64));
    // The kernels from the CPU's best down to the portable one.
    let all = ["gfni512", "gfni", "avx2", "ssse3", "portable"];
    let best = bench_support::kernel();
    let from = all.iter().position(|&k| k == best).unwrap_or(all.len() - 1);
    for kernel in &all[from..] {
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

/// Runs `run` until it has used `millis` of CPU time; prints ns per iteration.
fn cpu_time(name: &str, millis: u64, mut run: impl FnMut()) {
    (0..1000).for_each(|_| run());
    let ns = ns_per_call(Duration::from_millis(millis), run);
    println!("{name} {ns:.1} ns/op cpu");
}

// `criterion_group!` expands to an undocumented `pub fn`; a private module
// keeps it out of `missing_docs`.
mod entry {
    criterion::criterion_group!(benches, super::fec);
}

fn main() {
    if let Ok(ms) = std::env::var("KCPIO_BENCH_CPU_MS") {
        let ms = ms.parse().expect("KCPIO_BENCH_CPU_MS: a number");
        let filter = std::env::var("KCPIO_BENCH_FILTER").unwrap_or_default();
        let mut enc = encode_case();
        for (name, run) in [
            (
                "FEC/FECEncode",
                &mut (move || {
                    black_box(enc());
                }) as &mut dyn FnMut(),
            ),
            ("FEC/FECDecode", &mut decode_case()),
        ] {
            if name.contains(&filter) {
                cpu_time(name, ms, run);
            }
        }
        return;
    }
    entry::benches();
    Criterion::default().configure_from_args().final_summary();
}
