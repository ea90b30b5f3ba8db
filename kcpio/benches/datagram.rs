//! One FEC-protected datagram's whole sans-IO path, both ends: what
//! `kcpio-tunnel --udp` pays per datagram beside the driver and tokio.
//!
//! A client and a server `Conn` with the FEC datagram extension negotiated
//! (the tunnel's flags: `fast`, kcptun's `-datashard 10 -parityshard 3`
//! made adaptive, mtu 1400), on a zero-delay link that loses 5% of the
//! client's packets (a fixed xorshift; `KCPIO_BENCH_LOSS`, in 1/1000), so the sender's adaptive parity is
//! what it makes on such a path. One iteration is one 1200-byte datagram
//! 1.25 ms after the last (800/s, the bulk probe's rate):
//! `send_datagram_at` → `handle_timeout` → `poll_transmit` → `seal` →
//! (lost or) `open` → the server's `handle_packet_at` → `recv_datagram`,
//! then the server's output (reports, ACKs) sealed, opened and handed to
//! the client. Parity, reports and the KCP flushes fall where the rate puts
//! them, so an iteration's mean includes their share.
//!
//! Cases: `aes` (kcptun's default cipher, AES-256-CFB) and `aes-128-gcm`.
//!
//! With `KCPIO_BENCH_CPU_MS=M` set, criterion is skipped: rounds
//! (`KCPIO_BENCH_ROUNDS`, 5) each run every case for `M` ms of this
//! thread's CPU time and print the CPU time per datagram, then each case's
//! median (a loaded machine disturbs CPU time far less than wall time).
//! With `KCPIO_BENCH_DATAGRAMS=N` set, each case runs N datagrams once and
//! exits (for `perf stat` or `valgrind --tool=cachegrind`: the difference
//! of two runs' counts over the difference of their N is the cost per
//! datagram); `KCPIO_BENCH_CASE` picks one case, and `KCPIO_BENCH_COLD=1`
//! writes over an 8 MiB buffer before each datagram (`evict`), as the
//! tunnel's other work between two datagrams does, so a cache simulator's
//! misses outside `evict` count the cache lines one datagram touches.

use std::time::Duration;

use criterion::{Criterion, black_box};
use kcpio::{Config, Conn, Key, Method, Preset};
use kcpio_testkit::cpu::ns_per_call;

/// The bulk probe's rate and size.
const GAP: Duration = Duration::from_micros(1250);
const SIZE: usize = 1200;
/// The client's packets lost, in 1/1000 (`KCPIO_BENCH_LOSS` overrides:
/// 0 is `udp-cpu.sh`'s loopback).
fn loss_permille() -> u64 {
    std::env::var("KCPIO_BENCH_LOSS").map_or(50, |l| l.parse().expect("KCPIO_BENCH_LOSS: permille"))
}

struct Path {
    client: Conn,
    server: Conn,
    config: Config,
    now: Duration,
    rng: u64,
    loss: u64,
    slot: Box<[u8]>,
    buf: Box<[u8]>,
    payload: Box<[u8]>,
    nonce: u64,
    delivered: u64,
    sent: u64,
}

impl Path {
    fn new(method: Method) -> Self {
        let config = Config::builder()
            .preset(Preset::Fast)
            .crypto(method, Key::passphrase("bench"))
            .fec(10, 3)
            .adaptive_fec(true)
            .mtu(1400)
            .stream(true)
            .datagram_fec(true)
            .build()
            .expect("valid");
        let mut client = Conn::new(1, &config).expect("client");
        client.connect(Duration::ZERO);
        let mut server = Conn::new(1, &config).expect("server");
        server.require_proof(Duration::ZERO);
        server.answer_datagram_fec_only();
        let mut p = Self {
            client,
            server,
            config,
            now: Duration::ZERO,
            rng: 0x9e37_79b9_7f4a_7c15,
            loss: loss_permille(),
            slot: vec![0u8; 1500].into_boxed_slice(),
            buf: vec![0u8; 65536].into_boxed_slice(),
            payload: vec![0x5a; SIZE].into_boxed_slice(),
            nonce: 0,
            delivered: 0,
            sent: 0,
        };
        // Negotiate, then settle the loss model and the parity it buys
        // (several seconds of reports at 800/s).
        for _ in 0..8_000 {
            p.step();
        }
        assert!(
            p.client.datagram_fec_negotiated() && p.server.datagram_fec_negotiated(),
            "the extension is negotiated"
        );
        let st = p.client.stats().datagram_fec;
        assert!(
            p.loss == 0 || st.parity_out > 0,
            "parity is sent on a lossy path: {st:?}"
        );
        p
    }

    fn lost(&mut self) -> bool {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % 1000 < self.loss
    }

    /// Seals the `len` plaintext bytes at `slot[header..]` and opens them
    /// again (the receiver's side of the wire); the opened range.
    fn wire(&mut self, len: usize) -> std::ops::Range<usize> {
        let crypto = self.config.packet_crypto();
        self.nonce = self.nonce.wrapping_add(1);
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&self.nonce.to_le_bytes());
        let n = crypto
            .seal(&mut self.slot, len, &nonce[..crypto.nonce_len()])
            .expect("seal");
        crypto.open(&mut self.slot[..n]).expect("open")
    }

    /// One datagram from the client, and everything both ends then send.
    fn step(&mut self) {
        self.now += GAP;
        let now = self.now;
        self.sent += 1;
        self.payload[..8].copy_from_slice(&self.sent.to_le_bytes());
        let _ = self.client.send_datagram_at(now, &self.payload);
        self.client.handle_timeout(now);
        while let Some(tx) = self.client.poll_transmit(now, &mut self.slot) {
            let range = self.wire(tx.len);
            if !self.lost() {
                let _ = self.server.handle_packet_at(now, now, &self.slot[range]);
            }
        }
        while let Ok(n) = self.server.recv_datagram(&mut self.buf) {
            self.delivered += 1;
            black_box(&self.buf[..n]);
        }
        self.server.handle_timeout(now);
        while let Some(tx) = self.server.poll_transmit(now, &mut self.slot) {
            let range = self.wire(tx.len);
            let _ = self.client.handle_packet_at(now, now, &self.slot[range]);
        }
    }
}

fn cases() -> Vec<(&'static str, Path)> {
    vec![
        ("aes", Path::new(Method::Aes)),
        ("aes-128-gcm", Path::new(Method::Aes128Gcm)),
    ]
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("datagram_round_trip");
    for (name, mut p) in cases() {
        g.bench_function(name, |b| b.iter(|| p.step()));
        let st = p.client.stats().datagram_fec;
        eprintln!(
            "{name}: {} of {} delivered, parity {} for {} data shards",
            p.delivered, p.sent, st.parity_out, st.data_shards_out
        );
    }
    g.finish();
}

fn cpu_time_mode(millis: u64, rounds: usize) {
    let budget = Duration::from_millis(millis);
    let mut cases = cases();
    let mut per = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for (i, (name, p)) in cases.iter_mut().enumerate() {
            let ns = ns_per_call(budget, || p.step());
            println!("round {round} {name} {:.2} us cpu per datagram", ns / 1e3);
            per[i].push(ns);
        }
    }
    for (i, (name, p)) in cases.iter().enumerate() {
        per[i].sort_by(f64::total_cmp);
        let st = p.client.stats().datagram_fec;
        println!(
            "median {name} {:.2} us cpu per datagram ({} of {} delivered, parity {} for {} data shards)",
            per[i][per[i].len() / 2] / 1e3,
            p.delivered,
            p.sent,
            st.parity_out,
            st.data_shards_out
        );
    }
}

/// Writes over a buffer larger than the caches below the last level.
#[inline(never)]
fn evict(buf: &mut [u8]) {
    for line in buf.chunks_mut(64) {
        line[0] = line[0].wrapping_add(1);
    }
    black_box(&*buf);
}

fn count_mode(datagrams: u64) {
    let cold = std::env::var("KCPIO_BENCH_COLD").is_ok_and(|c| c == "1");
    let mut junk = vec![0u8; if cold { 8 << 20 } else { 0 }];
    for (name, mut p) in cases() {
        if std::env::var("KCPIO_BENCH_CASE").is_ok_and(|c| c != name) {
            continue;
        }
        for _ in 0..datagrams {
            if cold {
                evict(&mut junk);
            }
            p.step();
        }
        let st = p.client.stats().datagram_fec;
        println!(
            "{name}: {datagrams} datagrams, {} delivered, parity {} for {} data shards, {} reports",
            p.delivered, st.parity_out, st.data_shards_out, st.reports_in
        );
    }
}

fn main() {
    if let Ok(n) = std::env::var("KCPIO_BENCH_DATAGRAMS") {
        count_mode(n.parse().expect("KCPIO_BENCH_DATAGRAMS: a number"));
        return;
    }
    if let Ok(ms) = std::env::var("KCPIO_BENCH_CPU_MS") {
        let rounds = std::env::var("KCPIO_BENCH_ROUNDS").map_or(5, |r| r.parse().expect("rounds"));
        cpu_time_mode(ms.parse().expect("KCPIO_BENCH_CPU_MS: a number"), rounds);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
