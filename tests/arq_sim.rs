//! Simulation harness for the sans-IO ARQ: two endpoints, a virtual clock
//! that jumps to the next event, and a seeded lossy link (loss, duplication,
//! reordering, jitter, an MTU cap). Deterministic: every run is fixed by its
//! seed, and time never comes from the wall clock.
//!
//! The grid sends 4 MiB of seeded random bytes through every preset x loss
//! {0, 1, 5, 10, 20, 30}% x {stream, message} and checks every byte arrives
//! in order exactly once (and, in message mode, every message boundary),
//! within a bounded number of steps. Every run starts just below the 2^32
//! wrap of both the clock and the sequence numbers, so both wrap mid-transfer.
//! The grid's per-run figures (steps, virtual time, datagrams, retransmissions)
//! are snapshotted in `tests/snapshots/`, so a behaviour change is a diff.
//!
//! With 0-10 ms of jitter per packet, packets of one flush are often
//! reordered, and kcp-go's fast (resend 2) and early retransmits fire on
//! that reordering even without loss; `a_clean_link_needs_no_retransmission`
//! shows none on a link that keeps order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use kcpio::arq::{ArqConfig, Kcp, Origin, Preset, RecvError, SendError, Timestamp};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Properties of one direction of the link.
#[derive(Clone, Copy, Debug)]
struct LinkCfg {
    loss: f64,
    dup: f64,
    /// Probability that a packet is held back an extra 3 * jitter.
    reorder: f64,
    delay: u32,
    jitter: u32,
    /// Largest datagram the path carries; a bigger one fails the test.
    mtu_cap: usize,
    /// Drop everything (a silent peer).
    blackhole: bool,
}

impl LinkCfg {
    fn lossy(loss: f64, mtu_cap: usize) -> Self {
        Self {
            loss,
            dup: 0.01,
            reorder: 0.02,
            delay: 20,
            jitter: 10,
            mtu_cap,
            blackhole: false,
        }
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: u32,
    seq: u64,
    to_b: bool,
    bytes: Vec<u8>,
}

/// Two endpoints and the link between them.
struct Pair {
    a: Kcp,
    b: Kcp,
    a_to_b: LinkCfg,
    b_to_a: LinkCfg,
    rng: ChaCha8Rng,
    /// Virtual time as an unwrapped counter; the endpoints see it mod 2^32.
    now: u64,
    base: u32,
    wire: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    steps: u64,
    buf: Vec<u8>,
    sent_datagrams: u64,
}

impl Pair {
    fn new(cfg: &ArqConfig, link: LinkCfg, seed: u64, base: u32, initial_sn: u32) -> Self {
        let mut a = Kcp::new(0x1234_5678, cfg).unwrap();
        let mut b = Kcp::new(0x1234_5678, cfg).unwrap();
        assert!(a.set_initial_sn(initial_sn) && b.set_initial_sn(initial_sn));
        Self {
            a,
            b,
            a_to_b: link,
            b_to_a: link,
            rng: ChaCha8Rng::seed_from_u64(seed),
            now: 0,
            base,
            wire: BinaryHeap::new(),
            seq: 0,
            steps: 0,
            buf: vec![0; 65_536],
            sent_datagrams: 0,
        }
    }

    fn ts(&self) -> Timestamp {
        Timestamp::from_millis(self.base.wrapping_add(self.now as u32))
    }

    /// Unwrapped time of an endpoint deadline (never in the past).
    fn unwrap_deadline(&self, d: Timestamp) -> u64 {
        let ahead = d.diff(self.ts());
        self.now + ahead.max(0) as u64
    }

    /// Drain an endpoint's output onto the link.
    fn drain(&mut self, from_a: bool) {
        let now = self.ts();
        loop {
            let k = if from_a { &mut self.a } else { &mut self.b };
            let Some(n) = k.poll_transmit(now, &mut self.buf) else {
                break;
            };
            self.sent_datagrams += 1;
            let link = if from_a { self.a_to_b } else { self.b_to_a };
            assert!(
                n <= link.mtu_cap,
                "a {n}-byte datagram exceeds the path MTU {}",
                link.mtu_cap
            );
            if link.blackhole || self.rng.random::<f64>() < link.loss {
                continue;
            }
            let copies = if self.rng.random::<f64>() < link.dup {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let mut delay = link.delay + self.rng.random_range(0..=link.jitter);
                if self.rng.random::<f64>() < link.reorder {
                    delay += 3 * link.jitter;
                }
                self.seq += 1;
                self.wire.push(Reverse(InFlight {
                    at: (self.now + u64::from(delay)) as u32,
                    seq: self.seq,
                    to_b: from_a,
                    bytes: self.buf[..n].to_vec(),
                }));
            }
        }
    }

    /// Advance to the next event (a delivery or a deadline) and process
    /// everything due then. Returns `false` when nothing at all is pending.
    fn step(&mut self) -> bool {
        self.steps += 1;
        let mut next: Option<u64> = self.wire.peek().map(|Reverse(p)| u64::from(p.at));
        for d in [self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
        {
            let d = self.unwrap_deadline(d);
            next = Some(next.map_or(d, |n| n.min(d)));
        }
        let Some(next) = next else { return false };
        self.now = self.now.max(next);
        let now = self.ts();
        while let Some(Reverse(p)) = self.wire.peek() {
            if u64::from(p.at) > self.now {
                break;
            }
            let Reverse(p) = self.wire.pop().unwrap();
            let k = if p.to_b { &mut self.b } else { &mut self.a };
            k.handle_datagram(now, &p.bytes, Origin::Regular).unwrap();
            self.drain(!p.to_b);
        }
        for is_a in [true, false] {
            let k = if is_a { &mut self.a } else { &mut self.b };
            if k.poll_timeout().is_some_and(|d| now.diff(d) >= 0) {
                k.handle_timeout(now);
            }
            self.drain(is_a);
        }
        true
    }
}

/// Seeded random bytes.
fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    ChaCha8Rng::seed_from_u64(seed ^ 0x5eed).fill_bytes(&mut v);
    v
}

struct Outcome {
    steps: u64,
    virtual_ms: u64,
    datagrams: u64,
    retransmits: u64,
}

/// Move `data` from a to b. Stream mode: `send`/`recv` with random chunk
/// sizes. Message mode: random message sizes (up to 3 segments) through
/// `send_message`/`recv_message`, boundaries checked. Panics on any
/// corruption, loss, duplication or when `max_steps` is exceeded.
fn transfer(
    p: &mut Pair,
    data: &[u8],
    stream: bool,
    max_steps: u64,
    reader_pause: Option<(u64, u64)>,
) -> Outcome {
    let mss = p.a.mss();
    let mut rng = ChaCha8Rng::seed_from_u64(data.len() as u64 ^ 0xabcdef);
    let mut sent = 0usize;
    let mut received: Vec<u8> = Vec::with_capacity(data.len());
    let mut checked = 0usize;
    let mut msg_lens: Vec<usize> = Vec::new();
    let mut got_lens: Vec<usize> = Vec::new();
    let mut next_msg = rng.random_range(1..=3 * mss);
    let mut rbuf = vec![0u8; 8 * mss];
    while received.len() < data.len() {
        assert!(
            p.steps < max_steps,
            "no completion within {max_steps} steps ({} of {} bytes)",
            received.len(),
            data.len()
        );
        // Application writes.
        if stream {
            while sent < data.len() {
                let chunk = rng.random_range(1..=16 * mss).min(data.len() - sent);
                let n = p.a.send(&data[sent..sent + chunk]);
                sent += n;
                if n < chunk {
                    break;
                }
            }
        } else {
            while sent < data.len() {
                let len = next_msg.min(data.len() - sent);
                match p.a.send_message(&data[sent..sent + len]) {
                    Ok(()) => {
                        msg_lens.push(len);
                        sent += len;
                        next_msg = rng.random_range(1..=3 * mss);
                    }
                    Err(SendError::WouldBlock) => break,
                    Err(e) => panic!("send_message: {e}"),
                }
            }
        }
        p.drain(true);
        // Application reads (unless paused).
        let paused = reader_pause.is_some_and(|(from, to)| p.now >= from && p.now < to);
        if !paused {
            if stream {
                loop {
                    let cap = rng.random_range(1..=rbuf.len());
                    let n = p.b.recv(&mut rbuf[..cap]);
                    if n == 0 {
                        break;
                    }
                    received.extend_from_slice(&rbuf[..n]);
                }
            } else {
                loop {
                    match p.b.recv_message(&mut rbuf) {
                        Ok(n) => {
                            got_lens.push(n);
                            received.extend_from_slice(&rbuf[..n]);
                        }
                        Err(RecvError::NotReady) => break,
                        Err(e) => panic!("recv_message: {e}"),
                    }
                }
            }
            p.drain(false);
        }
        assert!(received.len() <= data.len(), "more bytes than sent");
        // Check only what arrived since the last step (the rest was checked).
        if received.len() > checked {
            let fresh = &received[checked..];
            if let Some(at) = fresh.iter().zip(&data[checked..]).position(|(a, b)| a != b) {
                panic!("corrupted or reordered at byte {}", checked + at);
            }
            checked = received.len();
        }
        if received.len() < data.len() {
            assert!(
                p.step(),
                "deadlock: nothing pending with {} bytes missing",
                data.len() - received.len()
            );
        }
    }
    assert_eq!(received, data);
    if !stream {
        assert_eq!(got_lens, msg_lens, "message boundaries");
    }
    // Settle: nothing more may be delivered.
    for _ in 0..10_000 {
        if p.a.is_flushed()
            && p.a.poll_timeout().is_none()
            && p.b.poll_timeout().is_none()
            && p.wire.is_empty()
        {
            break;
        }
        if !p.step() {
            break;
        }
    }
    assert_eq!(p.b.recv(&mut rbuf), 0, "bytes after the end");
    assert!(p.a.is_flushed(), "sender still holds unacknowledged data");
    Outcome {
        steps: p.steps,
        virtual_ms: p.now,
        datagrams: p.sent_datagrams,
        retransmits: p.a.stats().retransmits(),
    }
}

const MIB4: usize = 4 << 20;

fn grid_config(preset: Preset, stream: bool) -> ArqConfig {
    ArqConfig {
        snd_wnd: 128,
        rcv_wnd: 128,
        stream,
        // Message mode runs under a smaller MTU to exercise the cap.
        mtu: if stream { 1400 } else { 1200 },
        ..ArqConfig::preset(preset)
    }
}

fn run_grid(stream: bool) {
    let mut table = String::new();
    for (pi, preset) in Preset::ALL.into_iter().enumerate() {
        for (li, loss) in [0.0, 0.01, 0.05, 0.10, 0.20, 0.30].into_iter().enumerate() {
            let seed = (pi * 10 + li) as u64 + if stream { 0 } else { 1000 };
            let cfg = grid_config(preset, stream);
            // Clock and sequence numbers start just below the wrap.
            let base = u32::MAX - 3_000 - seed as u32;
            let first_sn = u32::MAX - 700;
            let mut p = Pair::new(&cfg, LinkCfg::lossy(loss, cfg.mtu), seed, base, first_sn);
            let data = payload(seed, MIB4);
            let o = transfer(&mut p, &data, stream, 60_000, None);
            table.push_str(&format!(
                "{preset:?} loss {:>2}%: {:>6} steps, {:>7} virtual ms, {:>6} datagrams, {:>5} retransmits\n",
                (loss * 100.0) as u32,
                o.steps,
                o.virtual_ms,
                o.datagrams,
                o.retransmits
            ));
            // Sequence numbers crossed 2^32.
            assert!(data.len() / cfg.mtu > 700);
        }
    }
    let mode = if stream { "stream" } else { "message" };
    eprintln!("{mode} mode:\n{table}");
    snapshot(&format!("arq_sim_grid_{mode}.txt"), &table);
}

/// Compare `text` with the committed snapshot `tests/snapshots/<name>` (the
/// run is deterministic, so any behaviour change shows up as a reviewable
/// diff); `UPDATE_SNAPSHOTS=1` rewrites it instead.
fn snapshot(name: &str, text: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_SNAPSHOTS=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        text, want,
        "simulation results changed; review, then UPDATE_SNAPSHOTS=1"
    );
}

#[test]
fn grid_stream_mode_4mib_every_preset_and_loss() {
    run_grid(true);
}

#[test]
fn grid_message_mode_4mib_every_preset_and_loss() {
    run_grid(false);
}

#[test]
fn sequence_numbers_and_clock_wrap_mid_transfer() {
    let cfg = grid_config(Preset::Fast3, true);
    let base = u32::MAX - 200;
    let first_sn = u32::MAX - 50;
    let mut p = Pair::new(&cfg, LinkCfg::lossy(0.05, cfg.mtu), 77, base, first_sn);
    let data = payload(77, 512 << 10);
    transfer(&mut p, &data, true, 100_000, None);
    // Both wrapped: the clock is past 0 again and sn went through u32::MAX.
    assert!(p.ts().as_millis() < base);
    let segments = data.len().div_ceil(p.a.mss()) as u32;
    assert!(segments > 50);
}

#[test]
fn a_zero_receive_window_recovers_through_probing() {
    let cfg = ArqConfig {
        snd_wnd: 64,
        rcv_wnd: 16,
        stream: true,
        ..ArqConfig::preset(Preset::Fast2)
    };
    let mut p = Pair::new(&cfg, LinkCfg::lossy(0.10, cfg.mtu), 99, 1_000, 0);
    let data = payload(99, 1 << 20);
    // The reader stops for 5 virtual seconds early on: the window closes.
    let o = transfer(&mut p, &data, true, 200_000, Some((200, 5_200)));
    assert!(
        p.a.stats().wask_out >= 2,
        "the sender probed the closed window: {:?}",
        p.a.stats()
    );
    assert!(
        p.b.stats().wins_out >= 1,
        "the receiver announced its window"
    );
    assert!(o.virtual_ms > 5_200);
}

#[test]
fn a_silent_peer_trips_dead_link() {
    let cfg = ArqConfig::preset(Preset::Fast3);
    let mut link = LinkCfg::lossy(0.0, cfg.mtu);
    link.blackhole = true;
    let mut p = Pair::new(&cfg, link, 5, 0, 0);
    assert_eq!(p.a.send(b"is anyone there?"), 16);
    p.drain(true);
    let mut steps = 0;
    while !p.a.is_dead() {
        assert!(p.step());
        steps += 1;
        assert!(steps < 100_000, "never declared dead");
    }
    // 20 transmissions with fast3's back-off (200 ms, then +100 ms each time).
    let pushes = p.a.stats().push_out;
    assert_eq!(pushes, 20);
    assert_eq!(p.a.stats().retransmit_rto, 19);
    let expected: u64 = (0..19).map(|i| 200 + 100 * i).sum();
    assert!(
        p.now >= expected && p.now < expected + 20 * 10,
        "dead after {} ms, expected ~{expected}",
        p.now
    );
    // Like kcp-go, the core keeps retransmitting; giving up is the driver's call.
    assert!(p.a.poll_timeout().is_some());
}

#[test]
fn a_clean_link_needs_no_retransmission() {
    for preset in Preset::ALL {
        let cfg = grid_config(preset, true);
        let link = LinkCfg {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            delay: 15,
            jitter: 0,
            mtu_cap: cfg.mtu,
            blackhole: false,
        };
        let mut p = Pair::new(&cfg, link, 3, 0, 0);
        let data = payload(3, 1 << 20);
        let o = transfer(&mut p, &data, true, 20_000, None);
        assert_eq!(o.retransmits, 0, "{preset:?}: {:?}", p.a.stats());
        assert_eq!(p.b.stats().repeat_segments, 0);
    }
}
