//! Two `Conn`s over an in-memory link on a virtual clock: data under loss,
//! and the lifecycle rules (idle, dead link, shutdown, release, abort).

use std::collections::VecDeque;
use std::time::Duration;

use super::*;
use crate::config::{Config, ConfigBuilder, Key};
use crate::crypto::Method;

/// A deterministic xorshift for losses and nonces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Two sessions and the datagrams in flight between them (sealed bytes,
/// delivered after `delay`).
struct Pair {
    conns: [Conn; 2],
    config: Config,
    /// (due, to, datagram)
    flight: VecDeque<(Duration, usize, Vec<u8>)>,
    now: Duration,
    loss: u64,
    /// Drop everything (a dead peer).
    blackout: bool,
    rng: Rng,
    slot: Vec<u8>,
    delay: Duration,
}

impl Pair {
    fn new(config: Config, loss: u64) -> Self {
        let conns = [
            Conn::new(0x1234, &config).unwrap(),
            Conn::new(0x1234, &config).unwrap(),
        ];
        let slot = vec![0; conns[0].max_datagram()];
        Self {
            conns,
            config,
            flight: VecDeque::new(),
            now: Duration::ZERO,
            loss,
            blackout: false,
            rng: Rng(0x9e37_79b9_7f4a_7c15),
            slot,
            delay: Duration::from_millis(20),
        }
    }

    /// Drains both sessions' output into the link.
    fn transmit(&mut self) {
        let crypto = self.config.packet_crypto();
        for from in 0..2 {
            while let Some(t) = self.conns[from].poll_transmit(self.now, &mut self.slot) {
                let mut nonce = [0u8; 16];
                nonce.iter_mut().for_each(|b| *b = self.rng.next() as u8);
                let n = crypto
                    .seal(&mut self.slot, t.len, &nonce[..crypto.nonce_len()])
                    .unwrap();
                if self.blackout || self.rng.chance(self.loss) {
                    continue;
                }
                let due = self.now + self.delay;
                self.flight
                    .push_back((due, 1 - from, self.slot[..n].to_vec()));
            }
        }
    }

    /// One millisecond: deliver what is due, run timers, transmit.
    fn step(&mut self) {
        let config = self.config.clone();
        let crypto = config.packet_crypto();
        while self
            .flight
            .front()
            .is_some_and(|(due, _, _)| *due <= self.now)
        {
            let (_, to, mut d) = self.flight.pop_front().unwrap();
            let range = crypto.open(&mut d).unwrap();
            let r = self.conns[to].handle_packet(self.now, &d[range]);
            assert_eq!(r.bad_kcp, 0);
            assert!(!r.bad_fec);
        }
        for c in &mut self.conns {
            if c.poll_timeout().is_some_and(|t| t <= self.now) {
                c.handle_timeout(self.now);
            }
        }
        self.transmit();
        self.now += Duration::from_millis(1);
    }
}

fn config(b: ConfigBuilder) -> Config {
    b.crypto(Method::Aes128, Key::passphrase("conn tests"))
        .build()
        .unwrap()
}

/// Streams `total` bytes from 0 to 1 and checks them, within `limit_ms`.
fn stream(pair: &mut Pair, total: usize, limit_ms: u64) {
    let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
    let (mut sent, mut got) = (0, Vec::with_capacity(total));
    let mut buf = vec![0u8; 4096];
    for _ in 0..limit_ms {
        if sent < total {
            match pair.conns[0].write(&data[sent..]) {
                Ok(n) => sent += n,
                Err(ConnError::WouldBlock) => {}
                Err(e) => panic!("write: {e}"),
            }
        }
        pair.transmit();
        pair.step();
        loop {
            match pair.conns[1].read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(ConnError::WouldBlock) => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        if got.len() == total {
            break;
        }
    }
    assert_eq!(got.len(), total, "delivered within {limit_ms} ms");
    assert!(got == data, "in order, intact");
}

#[test]
fn stream_survives_loss_with_fec_and_cipher() {
    let c = config(
        Config::builder()
            .preset(crate::Preset::Fast3)
            .window(256, 256)
            .stream(true)
            .fec(10, 3),
    );
    let mut pair = Pair::new(c, 10);
    stream(&mut pair, 300_000, 60_000);
    let s = pair.conns[1].stats();
    assert!(
        s.fec_in.recovered > 0,
        "FEC rebuilt some of the lost shards"
    );
    assert!(
        pair.conns[0].stats().arq.retransmit_fast + pair.conns[0].stats().arq.retransmit_rto > 0
    );
}

#[test]
fn messages_keep_their_boundaries() {
    let c = config(Config::builder().preset(crate::Preset::Fast2));
    let mut pair = Pair::new(c, 5);
    let msgs: Vec<Vec<u8>> = (1..40).map(|n| vec![n as u8; n * 97]).collect();
    let mut next = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 8192];
    for _ in 0..30_000 {
        while next < msgs.len() {
            match pair.conns[0].send_message(&msgs[next]) {
                Ok(()) => next += 1,
                Err(ConnError::WouldBlock) => break,
                Err(e) => panic!("{e}"),
            }
        }
        pair.step();
        while let Ok(n) = pair.conns[1].recv_message(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        if got.len() == msgs.len() {
            break;
        }
    }
    assert_eq!(got, msgs);
    assert_eq!(
        pair.conns[1].recv_message(&mut [0u8; 1]),
        Err(ConnError::WouldBlock)
    );
}

#[test]
fn application_verdicts() {
    let c = config(Config::builder().stream(true));
    let mut conn = Conn::new(1, &c).unwrap();
    assert_eq!(conn.send_message(b"x"), Err(ConnError::StreamMode));
    assert_eq!(conn.recv_message(&mut [0; 4]), Err(ConnError::StreamMode));
    assert_eq!(conn.read(&mut [0; 4]), Err(ConnError::WouldBlock));
    assert_eq!(conn.write(b""), Ok(0));
    assert_eq!(conn.shutdown(), Ok(()), "nothing written: flushed at once");
    assert_eq!(conn.write(b"late"), Err(ConnError::WriteShutdown));
    let e = std::io::Error::from(ConnError::WriteShutdown);
    assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);

    let c = config(Config::builder());
    let mut conn = Conn::new(1, &c).unwrap();
    assert_eq!(
        conn.send_message(b""),
        Err(ConnError::Message(crate::arq::SendError::Empty))
    );
    conn.abort(SessionError::Reset);
    conn.abort(SessionError::Aborted);
    assert_eq!(
        conn.error(),
        Some(SessionError::Reset),
        "the first reason stays"
    );
    assert_eq!(
        conn.write(b"x"),
        Err(ConnError::Closed(SessionError::Reset))
    );
    assert!(conn.is_finished() && conn.readable() && conn.writable());
    let e = std::io::Error::from(ConnError::Closed(SessionError::Reset));
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    let inner = e.get_ref().and_then(|e| e.downcast_ref::<SessionError>());
    assert_eq!(inner, Some(&SessionError::Reset));
}

#[test]
fn idle_timeout_fires_at_its_deadline_and_input_restarts_it() {
    // The idle rule alone: no keepalive answers to keep the pair alive.
    let c = config(
        Config::builder()
            .idle_timeout(Duration::from_secs(2))
            .keepalive(None),
    );
    let mut pair = Pair::new(c, 0);
    // A quiet session: the only deadline is the idle timeout.
    assert_eq!(pair.conns[0].poll_timeout(), Some(Duration::from_secs(2)));
    pair.conns[0].write(b"ping").unwrap();
    for _ in 0..1500 {
        pair.step();
    }
    // Input at ~20 ms moved peer 1's idle deadline; peer 0 got its ACK.
    let d1 = pair.conns[1].poll_timeout().unwrap();
    assert!(d1 > Duration::from_secs(2), "{d1:?}");
    let d0 = pair.conns[0].poll_timeout().unwrap();
    assert!(d0 > d1, "peer 0 heard the ACK after peer 1 heard the data");
    while pair.now <= d0 {
        assert_eq!(pair.conns[0].error(), None, "not before {d0:?}");
        pair.step();
    }
    assert_eq!(pair.conns[0].error(), Some(SessionError::IdleTimeout));
    assert_eq!(pair.conns[1].error(), Some(SessionError::IdleTimeout));
    assert_eq!(pair.conns[0].poll_timeout(), None);
    assert!(pair.conns[0].is_finished());
    assert_eq!(
        pair.conns[0].read(&mut [0; 4]),
        Err(ConnError::Closed(SessionError::IdleTimeout))
    );
}

#[test]
fn dead_link_after_the_retransmission_limit() {
    let c = config(Config::builder().preset(crate::Preset::Fast3).dead_link(5));
    let mut pair = Pair::new(c, 0);
    pair.blackout = true;
    pair.conns[0].write(b"into the void").unwrap();
    for _ in 0..60_000 {
        pair.step();
        if pair.conns[0].error().is_some() {
            break;
        }
    }
    assert_eq!(pair.conns[0].error(), Some(SessionError::DeadLink));
    assert_eq!(
        pair.conns[0].write(b"x"),
        Err(ConnError::Closed(SessionError::DeadLink))
    );
}

#[test]
fn shutdown_waits_for_acknowledgement_or_linger() {
    let c = config(
        Config::builder()
            .preset(crate::Preset::Fast3)
            .linger(Duration::from_secs(1)),
    );
    let mut pair = Pair::new(c.clone(), 0);
    pair.conns[0].write(b"bye").unwrap();
    assert_eq!(pair.conns[0].shutdown(), Err(ConnError::WouldBlock));
    let mut done = false;
    for _ in 0..500 {
        pair.step();
        if pair.conns[0].shutdown() == Ok(()) {
            done = true;
            break;
        }
    }
    assert!(done, "acknowledged within one round trip or so");

    // The same against a dead peer: the linger runs out.
    let mut pair = Pair::new(c, 0);
    pair.blackout = true;
    pair.conns[0].write(b"bye").unwrap();
    assert_eq!(pair.conns[0].shutdown(), Err(ConnError::WouldBlock));
    let mut verdict = Err(ConnError::WouldBlock);
    for _ in 0..2000 {
        pair.step();
        if pair.conns[0].writable() {
            verdict = pair.conns[0].shutdown();
            if verdict != Err(ConnError::WouldBlock) {
                break;
            }
        }
    }
    assert_eq!(verdict, Err(ConnError::LingerExpired));
    assert!(pair.now >= Duration::from_secs(1));
    assert!(pair.now < Duration::from_millis(1100));
}

#[test]
fn release_finishes_once_delivered_or_at_linger() {
    let c = config(
        Config::builder()
            .preset(crate::Preset::Fast3)
            .linger(Duration::from_secs(1)),
    );
    let mut pair = Pair::new(c.clone(), 0);
    pair.conns[0].write(b"last words").unwrap();
    pair.conns[0].release();
    assert!(!pair.conns[0].is_finished());
    assert_eq!(pair.conns[0].poll_timeout(), Some(pair.now), "arms at once");
    let mut finished_at = None;
    for _ in 0..500 {
        pair.step();
        if pair.conns[0].is_finished() {
            finished_at = Some(pair.now);
            break;
        }
    }
    assert!(finished_at.is_some(), "finished after the ACK");
    assert_eq!(pair.conns[0].error(), None);
    let mut buf = [0u8; 16];
    let n = pair.conns[1].read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"last words");

    let mut pair = Pair::new(c, 0);
    pair.blackout = true;
    pair.conns[0].write(b"last words").unwrap();
    pair.conns[0].release();
    for _ in 0..2000 {
        pair.step();
        if pair.conns[0].is_finished() {
            break;
        }
    }
    assert!(pair.conns[0].is_finished());
    assert!(pair.now >= Duration::from_secs(1) && pair.now < Duration::from_millis(1100));
}

#[test]
fn garbage_is_counted_not_fatal() {
    let c = config(Config::builder().fec(3, 1));
    let mut conn = Conn::new(9, &c).unwrap();
    let r = conn.handle_packet(Duration::ZERO, &[0xff; 40]);
    assert!(!r.accepted);
    assert_eq!(r.bad_kcp, 1);
    let r = conn.handle_packet(Duration::ZERO, &[]);
    assert_eq!(r.bad_kcp, 1);
    // A parity header with a nonsense shard.
    let mut parity = [0u8; 30];
    parity[4..6].copy_from_slice(&0xf2u16.to_le_bytes());
    let _ = conn.handle_packet(Duration::ZERO, &parity);
    assert_eq!(conn.error(), None);
    assert_eq!(conn.stats().input_errors, 2);
    // A slot too short for a datagram takes nothing.
    conn.write(b"x").unwrap();
    assert_eq!(conn.poll_transmit(Duration::ZERO, &mut [0u8; 10]), None);
    let mut slot = vec![0u8; conn.max_datagram()];
    assert!(conn.poll_transmit(Duration::ZERO, &mut slot).is_some());
}

#[test]
fn keepalive_keeps_a_quiet_pair_alive_and_a_dark_one_fails_at_idle() {
    let c = config(
        Config::builder()
            .idle_timeout(Duration::from_secs(3))
            .keepalive(Duration::from_secs(1)),
    );
    let mut pair = Pair::new(c, 0);
    // Before the conversation began there is nothing to keep alive: the
    // idle timeout is the only deadline.
    assert_eq!(pair.conns[0].poll_timeout(), Some(Duration::from_secs(3)));
    // Peer 0 opens (as a client does): peer 1's first output is its answer.
    pair.conns[0].connect(Duration::ZERO);
    for _ in 0..10_000 {
        pair.step();
    }
    for c in &pair.conns {
        assert_eq!(c.error(), None, "alive peers answer the probes");
    }
    let (a, b) = (pair.conns[0].stats(), pair.conns[1].stats());
    // Each side probes when it sent nothing for 1 s, and the other's WINS
    // answer counts as sending: about one probe per second in all.
    let probes = a.arq.wask_out + b.arq.wask_out;
    assert_eq!(probes, 10, "the opener and one probe per second");
    assert_eq!(b.arq.wask_out, 0, "the answers keep peer 1 quiet");
    assert_eq!(a.arq.wins_in + b.arq.wins_in, probes);
    // The path goes dark: both fail 3 s after their last input.
    pair.blackout = true;
    let dark = pair.now;
    while pair.conns.iter().any(|c| c.error().is_none()) {
        assert!(pair.now < dark + Duration::from_secs(4));
        pair.step();
    }
    for c in &pair.conns {
        assert_eq!(c.error(), Some(SessionError::IdleTimeout));
    }
}

#[test]
fn connect_probe_is_answered_or_times_out_on_its_schedule() {
    let c = config(Config::builder().connect_timeout(Duration::from_secs(2)));
    // Answered: the first WASK comes back as a WINS within a round trip
    // and a flush interval.
    let mut pair = Pair::new(c.clone(), 0);
    pair.conns[0].connect(Duration::ZERO);
    assert_eq!(pair.conns[0].established(), Err(ConnError::WouldBlock));
    assert!(pair.conns[0].is_connecting());
    while pair.conns[0].is_connecting() {
        assert!(pair.now < Duration::from_millis(200));
        pair.step();
    }
    assert_eq!(pair.conns[0].established(), Ok(()));
    assert_eq!(pair.conns[0].stats().arq.wask_out, 1);
    assert_eq!(pair.conns[1].stats().arq.wask_in, 1);
    // Nobody answers: WASKs at 0, 250, 750, 1750 ms, then the timeout at 2 s.
    let mut pair = Pair::new(c, 0);
    pair.blackout = true;
    pair.conns[0].connect(Duration::ZERO);
    let mut sent_at = Vec::new();
    let mut last = 0;
    while pair.conns[0].error().is_none() {
        assert!(pair.now < Duration::from_secs(3));
        pair.step();
        let n = pair.conns[0].stats().arq.wask_out;
        if n != last {
            sent_at.push(pair.now.as_millis() - 1);
            last = n;
        }
    }
    assert_eq!(sent_at, [0, 250, 750, 1750]);
    assert_eq!(pair.now, Duration::from_millis(2001));
    assert_eq!(
        pair.conns[0].established(),
        Err(ConnError::Closed(SessionError::ConnectTimeout))
    );
    let e = std::io::Error::from(ConnError::Closed(SessionError::ConnectTimeout));
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    assert!(e.to_string().contains("different key"), "{e}");
}

#[test]
fn write_capacity_is_what_a_writer_gets_in_before_the_peer_reads() {
    let c = config(Config::builder().stream(true).window(16, 16));
    let cap = c.write_capacity();
    assert_eq!(cap, (2 * 16 + 16) * (1380 - 24));
    let mut pair = Pair::new(c, 0);
    // Whole segments: a write's last partial segment leaves before the
    // next write could fill it, so odd sizes hold less.
    let chunk = vec![7u8; 3 * (1380 - 24)];
    let mut written = 0;
    for _ in 0..3000 {
        if let Ok(n) = pair.conns[0].write(&chunk) {
            written += n;
        }
        pair.step();
    }
    assert_eq!(written, cap, "no reader: the writer stops at the capacity");
    let mut held = 0;
    let mut buf = vec![0u8; 1 << 20];
    while let Ok(n) = pair.conns[1].read(&mut buf) {
        held += n;
    }
    assert_eq!(held, 16 * (1380 - 24), "the peer holds its receive window");
}
