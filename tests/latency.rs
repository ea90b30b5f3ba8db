//! Tail latency under loss (issue 7), in simulated time.
//!
//! Two sans-IO endpoints (ARQ + FEC encoder and decoder, no sockets, no
//! crypto) talk over a seeded simulated link: 20 ms each way, 0–2 ms of
//! per-packet jitter (so packets can be reordered), and independent loss of
//! every datagram, both directions, parity and acks included, as the NFQUEUE
//! impairer of `scripts/latency.sh` does. The client writes one 64-byte
//! message every 1/60 s for a simulated minute, the server echoes every byte
//! at once, and the client records each message's round trip. The clock is
//! virtual and jumps from event to event: the figures depend only on the
//! seed, never on the machine.
//!
//! The test asserts a loose bound on the low-latency preset's p99 and max at
//! 5% loss, and that it beats kcp-go's fast3 settings on the same seeded link
//! (the scripted run on real sockets is `scripts/latency.sh`).
//!
//! `cargo test --release --test latency -- --ignored --nocapture sweep` prints
//! the figures of several settings over several seeds (used to choose the
//! preset's values).

#[path = "support/stats.rs"]
mod stats;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use kcpio::arq::{ArqConfig, Kcp, Origin, Preset, Timestamp};
use kcpio::fec::{self, FecDecoder, FecEncoder, PacketKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// IPv4 + UDP header bytes, for the wire yardstick.
const IP_UDP: u64 = 28;
/// One simulated minute of 60 Hz messages.
const MESSAGES: u64 = 3600;
const RATE_HZ: u64 = 60;
const SIZE: usize = 64;
const START: u64 = 1_000;

/// One contender: ARQ parameters plus the sending side's FEC.
#[derive(Clone, Debug)]
struct Setup {
    name: &'static str,
    arq: ArqConfig,
    fec: Option<(usize, usize)>,
    fec_deadline: Option<u32>,
}

fn kcp_go(preset: Preset, fec: Option<(usize, usize)>, name: &'static str) -> Setup {
    Setup {
        name,
        arq: ArqConfig::preset(preset),
        fec,
        fec_deadline: None,
    }
}

/// `kcpio::Preset::LowLatency` on the sans-IO types, from the preset's own
/// definition.
fn lowlat() -> Setup {
    let p = Preset::LowLatency;
    let fec = p.fec();
    Setup {
        name: "kcpio lowlat",
        arq: p.arq_config(),
        fec: fec.map(|(shape, _)| shape),
        fec_deadline: fec.map(|(_, d)| d.as_millis() as u32),
    }
}

struct Endpoint {
    kcp: Kcp,
    enc: Option<FecEncoder>,
    dec: FecDecoder,
}

impl Endpoint {
    fn new(s: &Setup) -> Self {
        let mtu = s.arq.mtu - if s.fec.is_some() { fec::DATA_HEADER } else { 0 };
        let arq = ArqConfig {
            mtu,
            ..s.arq.clone()
        };
        let enc = s.fec.map(|(d, p)| {
            let mut e = FecEncoder::new(d, p).unwrap();
            e.set_group_deadline(s.fec_deadline);
            e
        });
        Self {
            kcp: Kcp::new(0x1234, &arq).unwrap(),
            enc,
            dec: FecDecoder::new(1, 1),
        }
    }

    fn next_timeout(&self) -> Option<Timestamp> {
        let a = self.kcp.poll_timeout();
        let b = self.enc.as_ref().and_then(FecEncoder::poll_timeout);
        match (a, b) {
            (Some(x), Some(y)) => Some(x.earliest(y)),
            (x, y) => x.or(y),
        }
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: u64,
    seq: u64,
    to_server: bool,
    bytes: Vec<u8>,
}

/// What one run measured.
#[derive(Debug, Default, Clone)]
struct Figures {
    sent: u64,
    received: u64,
    /// Round trips in ms, sorted.
    rtts: Vec<u64>,
    wire_bytes: u64,
    retrans: u64,
    fec_recovered: u64,
}

impl Figures {
    fn pct(&self, p: f64) -> u64 {
        stats::percentile(&self.rtts, p).unwrap_or(u64::MAX)
    }
    fn max(&self) -> u64 {
        self.rtts.last().copied().unwrap_or(u64::MAX)
    }
    fn wire_x(&self) -> f64 {
        self.wire_bytes as f64 / (2 * self.sent * SIZE as u64) as f64
    }
}

struct Sim {
    client: Endpoint,
    server: Endpoint,
    rng: ChaCha8Rng,
    loss: f64,
    delay: u64,
    jitter: u64,
    wire: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    now: u64,
    wire_bytes: u64,
    buf: Vec<u8>,
    pbuf: Vec<u8>,
}

impl Sim {
    fn ts(&self) -> Timestamp {
        Timestamp::from_millis(self.now as u32)
    }

    fn put_on_wire(&mut self, to_server: bool, bytes: &[u8]) {
        self.wire_bytes += bytes.len() as u64 + IP_UDP;
        if self.rng.random_bool(self.loss) {
            return;
        }
        let j = if self.jitter > 0 {
            self.rng.random_range(0..=self.jitter)
        } else {
            0
        };
        self.seq += 1;
        self.wire.push(Reverse(InFlight {
            at: self.now + self.delay + j,
            seq: self.seq,
            to_server,
            bytes: bytes.to_vec(),
        }));
    }

    /// Everything `side` has to send now, as the driver sends it: each KCP
    /// packet framed as a data shard, then any fillers and parity.
    fn drain(&mut self, server: bool) {
        let now = self.ts();
        loop {
            let ep = if server {
                &mut self.server
            } else {
                &mut self.client
            };
            let hf = if ep.enc.is_some() {
                fec::DATA_HEADER
            } else {
                0
            };
            let Some(n) = ep.kcp.poll_transmit(now, &mut self.buf[hf..]) else {
                break;
            };
            let len = match ep.enc.as_mut() {
                Some(e) => e.encode(now, &mut self.buf, n),
                None => n,
            };
            let pkt = self.buf[..len].to_vec();
            self.put_on_wire(!server, &pkt);
            self.drain_parity(server);
        }
        self.drain_parity(server);
    }

    fn drain_parity(&mut self, server: bool) {
        loop {
            let ep = if server {
                &mut self.server
            } else {
                &mut self.client
            };
            let Some(e) = ep.enc.as_mut() else { return };
            let Some(n) = e.poll_parity(&mut self.pbuf) else {
                return;
            };
            let pkt = self.pbuf[..n].to_vec();
            self.put_on_wire(!server, &pkt);
        }
    }

    fn deliver(&mut self, to_server: bool, bytes: &[u8]) {
        let now = self.ts();
        let ep = if to_server {
            &mut self.server
        } else {
            &mut self.client
        };
        match fec::classify(bytes) {
            PacketKind::Kcp => {
                let _ = ep.kcp.handle_datagram(now, bytes, Origin::Regular);
            }
            PacketKind::Data | PacketKind::Parity => {
                if let Some(k) = fec::data_payload(bytes) {
                    let _ = ep.kcp.handle_datagram(now, k, Origin::Regular);
                }
                let _ = ep.dec.handle(bytes);
                while let Some(n) = ep.dec.poll_recovered(&mut self.pbuf) {
                    let _ = ep
                        .kcp
                        .handle_datagram(now, &self.pbuf[..n], Origin::Recovered);
                }
            }
            PacketKind::Oob => {}
        }
    }
}

/// Run `setup` on a link with `loss` and `seed`; `MESSAGES` at 60 Hz.
fn run(setup: &Setup, loss: f64, seed: u64) -> Figures {
    let mut sim = Sim {
        client: Endpoint::new(setup),
        server: Endpoint::new(setup),
        rng: ChaCha8Rng::seed_from_u64(seed),
        loss,
        delay: 20,
        jitter: 2,
        wire: BinaryHeap::new(),
        seq: 0,
        now: START,
        wire_bytes: 0,
        buf: vec![0u8; 1500],
        pbuf: vec![0u8; 1500],
    };
    let mut sent_at = Vec::with_capacity(MESSAGES as usize);
    let mut fig = Figures::default();
    let mut rx = Vec::new();
    let mut backlog: Vec<u8> = Vec::new();
    let mut echo = vec![0u8; 4096];
    let end = START + MESSAGES * 1000 / RATE_HZ + 10_000;
    let mut steps = 0u64;
    while sim.now < end && fig.received < MESSAGES {
        steps += 1;
        assert!(steps < 10_000_000, "simulation did not settle");
        // 1. datagrams due now
        while let Some(Reverse(top)) = sim.wire.peek() {
            if top.at > sim.now {
                break;
            }
            let Reverse(p) = sim.wire.pop().unwrap();
            sim.deliver(p.to_server, &p.bytes);
        }
        // 2. the client's next message
        let next_msg = START + fig.sent * 1000 / RATE_HZ;
        if fig.sent < MESSAGES && next_msg <= sim.now {
            let mut m = [0u8; SIZE];
            m[..8].copy_from_slice(&fig.sent.to_le_bytes());
            backlog.extend_from_slice(&m);
            sent_at.push(sim.now);
            fig.sent += 1;
        }
        // a full send window holds the application back, as a blocking write
        if !backlog.is_empty() {
            let n = sim.client.kcp.send(&backlog);
            backlog.drain(..n);
        }
        // 3. timers, then applications, then output; repeat while output is
        //    pending at this instant.
        for _ in 0..4 {
            let now = sim.ts();
            for server in [false, true] {
                let ep = if server {
                    &mut sim.server
                } else {
                    &mut sim.client
                };
                if ep.kcp.poll_timeout().is_some_and(|t| now.diff(t) >= 0) {
                    ep.kcp.handle_timeout(now);
                }
                if let Some(e) = ep.enc.as_mut() {
                    if e.poll_timeout().is_some_and(|t| now.diff(t) >= 0) {
                        e.handle_timeout(now);
                    }
                }
            }
            // server: echo everything readable
            loop {
                // read only what can be echoed at once (backpressure)
                let room = sim.server.kcp.send_capacity().min(echo.len());
                let n = sim.server.kcp.recv(&mut echo[..room]);
                if n == 0 {
                    break;
                }
                assert_eq!(sim.server.kcp.send(&echo[..n]), n);
            }
            // client: frame the echo by SIZE
            loop {
                let n = sim.client.kcp.recv(&mut echo);
                if n == 0 {
                    break;
                }
                rx.extend_from_slice(&echo[..n]);
                while rx.len() >= SIZE {
                    let idx = u64::from_le_bytes(rx[..8].try_into().unwrap());
                    assert_eq!(idx, fig.received, "echo out of order");
                    fig.rtts.push(sim.now - sent_at[idx as usize]);
                    fig.received += 1;
                    rx.drain(..SIZE);
                }
            }
            sim.drain(false);
            sim.drain(true);
            let due = [sim.client.next_timeout(), sim.server.next_timeout()]
                .into_iter()
                .flatten()
                .any(|t| now.diff(t) >= 0);
            if !due {
                break;
            }
        }
        // 4. jump to the next event
        let mut next = u64::MAX;
        if let Some(Reverse(top)) = sim.wire.peek() {
            next = next.min(top.at);
        }
        if fig.sent < MESSAGES {
            next = next.min(START + fig.sent * 1000 / RATE_HZ);
        }
        if !backlog.is_empty() && sim.client.kcp.send_capacity() > 0 {
            next = sim.now;
        }
        for t in [sim.client.next_timeout(), sim.server.next_timeout()]
            .into_iter()
            .flatten()
        {
            let d = t.diff(sim.ts()).max(1) as u64;
            next = next.min(sim.now + d);
        }
        sim.now = next.max(sim.now + 1);
    }
    fig.rtts.sort_unstable();
    fig.wire_bytes = sim.wire_bytes;
    let (c, s) = (sim.client.kcp.stats(), sim.server.kcp.stats());
    fig.retrans = c.retransmits() + s.retransmits();
    fig.fec_recovered = sim.client.dec.stats().recovered + sim.server.dec.stats().recovered;
    fig
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

#[test]
fn lowlat_keeps_the_tail_short_at_5_percent_loss() {
    let low = lowlat();
    let fast3 = kcp_go(Preset::Fast3, None, "kcp-go fast3");
    let fast3_fec = kcp_go(Preset::Fast3, Some((10, 3)), "kcp-go fast3 + FEC 10/3");
    let mut low_p99 = Vec::new();
    let mut low_max = Vec::new();
    for seed in 1..=3 {
        let l = run(&low, 0.05, seed);
        let f = run(&fast3, 0.05, seed);
        let ff = run(&fast3_fec, 0.05, seed);
        for fig in [&l, &f, &ff] {
            assert_eq!(fig.received, MESSAGES, "every message came back");
            // the floor: one round trip
            assert!(fig.pct(0.0) >= 40);
        }
        // Loose bounds (the simulated figures are about p99 ~45-50, max ~100):
        assert!(
            l.pct(99.0) <= 65,
            "lowlat p99 {} (seed {seed})",
            l.pct(99.0)
        );
        assert!(l.max() <= 160, "lowlat max {} (seed {seed})", l.max());
        // and clearly better than kcp-go's settings on the same link
        assert!(
            l.pct(99.0) * 10 <= f.pct(99.0) * 7,
            "lowlat p99 {} vs fast3 {} (seed {seed})",
            l.pct(99.0),
            f.pct(99.0)
        );
        assert!(l.pct(99.0) < ff.pct(99.0));
        assert!(l.fec_recovered > 0);
        low_p99.push(l.pct(99.0));
        low_max.push(l.max());
    }
    assert!(median(low_p99) <= 60);
    assert!(median(low_max) <= 130);
}

#[test]
fn a_clean_link_costs_one_round_trip() {
    let low = lowlat();
    let f = run(&low, 0.0, 7);
    assert_eq!(f.received, MESSAGES);
    // one round trip plus at most the 2 ms of jitter each way
    assert!(f.max() <= 46, "max {} on a loss-free link", f.max());
}

fn print_row(s: &Setup, loss: f64, seeds: &[u64]) {
    let figs: Vec<Figures> = seeds.iter().map(|&sd| run(s, loss, sd)).collect();
    let m = |f: &dyn Fn(&Figures) -> u64| median(figs.iter().map(f).collect());
    let wire = {
        let mut w: Vec<f64> = figs.iter().map(Figures::wire_x).collect();
        w.sort_by(f64::total_cmp);
        w[w.len() / 2]
    };
    println!(
        "| {:.0}% | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} |",
        loss * 100.0,
        s.name,
        m(&|f| f.pct(50.0)),
        m(&|f| f.pct(90.0)),
        m(&|f| f.pct(99.0)),
        m(&|f| f.pct(99.9)),
        m(&|f| f.max()),
        wire,
        m(&|f| f.retrans),
        m(&|f| f.fec_recovered),
    );
}

/// The settings the preset was chosen from (medians over seeds).
#[test]
#[ignore = "a sweep for choosing the preset, prints a table"]
fn sweep() {
    let seeds = [1, 2, 3, 4, 5];
    let f3 = ArqConfig::preset(Preset::Fast3);
    let ack = ArqConfig {
        ack_nodelay: true,
        ..f3.clone()
    };
    let r1 = ArqConfig {
        fast_resend: 1,
        ..ack.clone()
    };
    let tuned = ArqConfig {
        min_rto: Some(10),
        backoff_percent: Some(25),
        max_rto: Some(100),
        tail_probe: true,
        ..r1.clone()
    };
    let mk = |name, arq: &ArqConfig, fec, dl| Setup {
        name,
        arq: arq.clone(),
        fec,
        fec_deadline: dl,
    };
    let setups = vec![
        mk("default", &ArqConfig::default(), None, None),
        mk("fast3", &f3, None, None),
        mk("fast3 + FEC 10/3", &f3, Some((10, 3)), None),
        mk("f3 + FEC 2/2 dl 10", &f3, Some((2, 2)), Some(10)),
        mk("ack + FEC 2/2 dl 10", &ack, Some((2, 2)), Some(10)),
        mk("r1 + FEC 2/2 dl 10", &r1, Some((2, 2)), Some(10)),
        mk("r1 + FEC 2/2 no dl", &r1, Some((2, 2)), None),
        mk("tuned + FEC 2/2 no dl", &tuned, Some((2, 2)), None),
        mk("f3 + FEC 2/2 no dl", &f3, Some((2, 2)), None),
        mk("tuned + FEC 2/2 dl 5", &tuned, Some((2, 2)), Some(5)),
        mk("tuned + FEC 2/2 dl 15", &tuned, Some((2, 2)), Some(15)),
        mk("tuned + FEC 3/3 dl 10", &tuned, Some((3, 3)), Some(10)),
        mk("tuned + FEC 3/2 dl 5", &tuned, Some((3, 2)), Some(5)),
        mk("tuned + FEC 1/2", &tuned, Some((1, 2)), None),
        lowlat(),
    ];
    println!("| loss | setup | p50 | p90 | p99 | p99.9 | max | wire x | retrans | FEC rec |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for loss in [0.01, 0.05] {
        for s in &setups {
            print_row(s, loss, &seeds);
        }
    }
}
