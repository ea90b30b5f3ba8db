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
            let plain = d[range].to_vec();
            let r = self.conns[to].handle_packet(self.now, &plain);
            // FEC deadline fillers and guard shards carry no KCP packet and
            // are no bad input either.
            assert_eq!(r.bad_kcp, 0, "to {to}: {plain:?}");
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

/// fast3, 256-packet windows, stream mode, FEC 10/3, AES.
fn fast3_fec_stream() -> Config {
    config(
        Config::builder()
            .preset(crate::Preset::Fast3)
            .window(256, 256)
            .stream(true)
            .fec(10, 3),
    )
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
    let c = fast3_fec_stream();
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

/// kcp-go's `SendOOB` capture (tests/vectors/fec.json, `oob_example`): FEC
/// 3/2, no crypto.
#[test]
fn datagrams_are_framed_as_kcpgo_oob_packets() {
    let v: serde_json::Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/fec.json"
    )))
    .unwrap();
    let oob = &v["oob_example"];
    let conv = oob["conv"].as_u64().unwrap() as u32;
    let payload = hex::decode(oob["payload_hex"].as_str().unwrap()).unwrap();
    let datagram = hex::decode(oob["datagram_hex"].as_str().unwrap()).unwrap();
    let c = Config::builder().fec(3, 2).build().unwrap();
    let mut conn = Conn::new(conv, &c).unwrap();
    conn.send_datagram(&payload).unwrap();
    assert_eq!(conn.poll_timeout(), Some(Duration::ZERO), "due at once");
    let mut slot = vec![0u8; conn.max_datagram()];
    let t = conn.poll_transmit(Duration::ZERO, &mut slot).unwrap();
    assert_eq!(&slot[..t.len], &datagram[..], "byte for byte kcp-go's");
    assert!(!t.parity);
    assert_eq!(conn.poll_transmit(Duration::ZERO, &mut slot), None);
    // The FEC seqid counter is untouched: the first data shard is seqid 0.
    conn.write(b"stream").unwrap();
    let t = conn.poll_transmit(Duration::ZERO, &mut slot).unwrap();
    assert_eq!(fec::classify(&slot[..t.len]), PacketKind::Data);
    assert_eq!(&slot[..4], &0u32.to_le_bytes());
    let s = conn.stats();
    assert_eq!((s.oob_sent, s.datagrams_out), (1, 2));
    assert_eq!(s.fec_out.data_out, 1, "the OOB packet is no shard");

    // kcp-go's packet, received: queued for recv_datagram, not the ARQ.
    let mut peer = Conn::new(conv, &c).unwrap();
    let r = peer.handle_packet(Duration::ZERO, &datagram);
    assert!(r.accepted && r.bad_kcp == 0 && !r.bad_fec);
    assert!(peer.datagram_readable() && !peer.readable());
    let mut buf = [0u8; 64];
    let n = peer.recv_datagram(&mut buf).unwrap();
    assert_eq!(&buf[..n], &payload[..]);
    assert_eq!(peer.recv_datagram(&mut buf), Err(ConnError::WouldBlock));
    assert_eq!(peer.stats().oob_received, 1);
    assert_eq!(peer.stats().arq.segments_in, 0);
}

#[test]
fn datagram_limits_and_verdicts() {
    // FEC off: unsupported both ways, as kcp-go.
    let off = config(Config::builder());
    let mut conn = Conn::new(1, &off).unwrap();
    assert_eq!(conn.max_datagram_payload(), 0);
    assert_eq!(
        conn.send_datagram(b"x"),
        Err(ConnError::DatagramsUnsupported)
    );
    assert_eq!(
        conn.recv_datagram(&mut [0; 8]),
        Err(ConnError::DatagramsUnsupported)
    );
    let e = std::io::Error::from(ConnError::DatagramsUnsupported);
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
    // Received anyway (a peer with FEC on): dropped and counted.
    let mut oob = vec![0u8; 12];
    oob[8..].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(fec::encode_oob(&mut oob, 4), 12);
    assert!(conn.handle_packet(Duration::ZERO, &oob).accepted);
    assert_eq!(conn.stats().oob_dropped, 1);

    // FEC on, AES (CFB): 1400 - 20 - 8 - 4.
    let on = config(Config::builder().fec(10, 3));
    let mut conn = Conn::new(1, &on).unwrap();
    let max = conn.max_datagram_payload();
    assert_eq!(max, 1368);
    assert_eq!(
        conn.send_datagram(&vec![0; max + 1]),
        Err(ConnError::DatagramTooLarge { len: max + 1, max })
    );
    let crypto = on.packet_crypto();
    let mut slot = vec![0u8; conn.max_datagram()];
    conn.send_datagram(&vec![0xab; max]).unwrap();
    let t = conn.poll_transmit(Duration::ZERO, &mut slot).unwrap();
    let n = crypto.seal(&mut slot, t.len, &[7; 16]).unwrap();
    assert_eq!(n, 1400, "the largest payload fills the mtu exactly");
    let plain = crypto.open(&mut slot[..n]).unwrap();
    let (conv, body) = fec::oob_payload(&slot[plain]).unwrap();
    assert_eq!((conv, body.len()), (1, max));

    // The send queue: bounded in datagrams, then in bytes; drained by
    // poll_transmit.
    for _ in 0..DATAGRAM_QUEUE_LEN {
        conn.send_datagram(b"tick").unwrap();
    }
    assert_eq!(conn.send_datagram(b"tick"), Err(ConnError::WouldBlock));
    assert!(!conn.datagram_writable());
    let mut sent = 0;
    while conn.poll_transmit(Duration::ZERO, &mut slot).is_some() {
        sent += 1;
    }
    assert_eq!(sent, DATAGRAM_QUEUE_LEN);
    assert!(conn.datagram_writable());
    let fit = DATAGRAM_QUEUE_BYTES / max;
    for _ in 0..fit {
        conn.send_datagram(&vec![1; max]).unwrap();
    }
    assert_eq!(
        conn.send_datagram(&vec![1; max]),
        Err(ConnError::WouldBlock)
    );
    while conn.poll_transmit(Duration::ZERO, &mut slot).is_some() {}

    // The receive queue: overflow dropped and counted; a short buffer
    // leaves the datagram queued; another conv is refused.
    let mut peer = Conn::new(1, &on).unwrap();
    let mut oob = vec![0u8; 8 + 4 + 100];
    oob[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(fec::encode_oob(&mut oob, 104), 112);
    for _ in 0..DATAGRAM_QUEUE_LEN + 6 {
        assert!(peer.handle_packet(Duration::ZERO, &oob).accepted);
    }
    let s = peer.stats();
    assert_eq!((s.oob_received, s.oob_dropped), (64, 6));
    assert_eq!(
        peer.recv_datagram(&mut [0; 99]),
        Err(ConnError::BufferTooSmall { needed: 100 })
    );
    assert_eq!(peer.recv_datagram(&mut [0; 100]), Ok(100));
    oob[8..12].copy_from_slice(&2u32.to_le_bytes());
    let r = peer.handle_packet(Duration::ZERO, &oob);
    assert!(!r.accepted && r.bad_kcp == 1);
    // Failure: queued datagrams still come out, then the reason.
    peer.abort(SessionError::Reset);
    assert_eq!(
        peer.send_datagram(b"x"),
        Err(ConnError::Closed(SessionError::Reset))
    );
    for _ in 0..DATAGRAM_QUEUE_LEN - 1 {
        assert_eq!(peer.recv_datagram(&mut [0; 100]), Ok(100));
    }
    assert_eq!(
        peer.recv_datagram(&mut [0; 100]),
        Err(ConnError::Closed(SessionError::Reset))
    );
}

/// Datagrams both ways under loss while the stream runs: the stream stays
/// exact, the datagrams that arrive are intact, none reaches the ARQ.
#[test]
fn datagrams_beside_the_stream_under_loss() {
    let c = fast3_fec_stream();
    let mut pair = Pair::new(c, 10);
    let total = 200_000;
    let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
    let (mut sent, mut got) = (0, Vec::with_capacity(total));
    let mut buf = vec![0u8; 4096];
    let (mut dg_sent, mut dg_got) = ([0u32; 2], [0u32; 2]);
    // Datagrams for 2.9 s, then 100 ms for the last ones to land.
    for ms in 0..3_000u32 {
        if sent < total
            && let Ok(n) = pair.conns[0].write(&data[sent..])
        {
            sent += n;
        }
        for (side, (conn, count)) in pair.conns.iter_mut().zip(&mut dg_sent).enumerate() {
            if ms < 2_900 && ms % 3 == side as u32 {
                let payload = [ms.to_le_bytes(), (!ms).to_le_bytes()].concat();
                if conn.send_datagram(&payload).is_ok() {
                    *count += 1;
                }
            }
        }
        pair.step();
        while let Ok(n) = pair.conns[1].read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        for (conn, count) in pair.conns.iter_mut().zip(&mut dg_got) {
            while let Ok(n) = conn.recv_datagram(&mut buf) {
                assert_eq!(n, 8);
                let a = u32::from_le_bytes(buf[..4].try_into().unwrap());
                let b = u32::from_le_bytes(buf[4..8].try_into().unwrap());
                assert_eq!(a, !b, "intact");
                *count += 1;
            }
        }
    }
    assert!(got == data, "the stream is exact");
    for side in 0..2 {
        let other = 1 - side;
        // 10% loss each way and never retransmitted.
        assert!(dg_got[other] < dg_sent[side], "{dg_got:?} {dg_sent:?}");
        assert!(
            dg_got[other] * 10 > dg_sent[side] * 8,
            "{dg_got:?} {dg_sent:?}"
        );
        let s = pair.conns[side].stats();
        assert_eq!(s.input_errors, 0, "no datagram reached the ARQ");
        assert_eq!(s.oob_sent, u64::from(dg_sent[side]));
    }
}

/// Guard shards (see `FecEncoder::set_guard`) go out until the peer is seen
/// sending our own FEC shape, and in every group while it sends none or
/// another shape; the receiving `Conn` counts none of them as bad input.
#[test]
fn guard_shards_stop_once_the_peer_sends_our_shape() {
    // kcp-go's pace (32-segment windows, 100 ms flushes): the peer's first
    // group comes back before many of ours left.
    let b = || Config::builder().kcp_go_defaults();
    let fec = config(b().fec(4, 2));
    let guards = |peer: Config| {
        let mut pair = Pair::new(fec.clone(), 0);
        pair.conns[1] = Conn::new(0x1234, &peer).unwrap();
        stream(&mut pair, 100_000, 20_000);
        let out = pair.conns[0].stats().fec_out;
        (out.guard_shards, out.data_out)
    };
    let (same, data) = guards(fec.clone());
    assert!(data > 60, "{data} data shards");
    assert!(
        same <= 8,
        "{same} guard shards before the peer's shape was seen"
    );
    for peer in [config(b()), config(b().fec(10, 3))] {
        let (g, data) = guards(peer);
        assert!(g >= data / 3 - 1, "{g} guards for {data} data shards");
    }
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

/// Every preset, with its own FEC and with kcptun's 10/3.
fn presets() -> Vec<(String, Config)> {
    let mut out = Vec::new();
    for p in crate::Preset::ALL {
        out.push((format!("{p:?}"), config(Config::builder().preset(p))));
        out.push((
            format!("{p:?} fec 10/3"),
            config(Config::builder().preset(p).fec(10, 3)),
        ));
    }
    out
}

/// One 1,400-byte request from an address that never answers, to an echo
/// `Conn` that requires proof (or not): wire bytes in, wire bytes out over
/// 60 s, and how the server session ended.
fn reflect(config: &Config, proof: bool) -> (u64, u64, Option<SessionError>) {
    let mut client = Conn::new(9, config).unwrap();
    let mut slot = vec![0u8; client.max_datagram()];
    client.write(&[7u8; 1400]).unwrap();
    client.handle_timeout(Duration::ZERO);
    let t = client.poll_transmit(Duration::ZERO, &mut slot).unwrap();
    let h = client.header_len();
    let opener = slot[h..h + t.len].to_vec();
    let mut server = Conn::new(9, config).unwrap();
    let wire_in = (opener.len() + server.overhead) as u64;
    if proof {
        server.require_proof(Duration::ZERO);
    }
    let _ = server.handle_packet(Duration::ZERO, &opener);
    let mut out = 0u64;
    let mut buf = [0u8; 2048];
    let mut now = Duration::ZERO;
    while now < Duration::from_secs(60) && server.error().is_none() {
        if let Ok(n) = server.read(&mut buf) {
            server.write(&buf[..n]).unwrap();
        }
        server.handle_timeout(now);
        while let Some(t) = server.poll_transmit(now, &mut slot) {
            out += (t.len + server.overhead) as u64;
        }
        now += Duration::from_millis(5);
    }
    (wire_in, out, server.error())
}

/// Anti-amplification: until the peer proves it receives, every preset sends at
/// most 3x what it received (retransmissions, parity and fillers counted),
/// and the session ends after `PROOF_TIMEOUT`.
#[test]
fn an_unproven_peer_gets_at_most_three_times_its_bytes() {
    for (name, c) in presets() {
        let (wire_in, out, end) = reflect(&c, true);
        assert!(
            out <= AMPLIFICATION_FACTOR * wire_in,
            "{name}: {out} B sent for {wire_in} B received"
        );
        assert!(out > 0, "{name}: the ACK and the echo's start went out");
        assert_eq!(end, Some(SessionError::DeadLink), "{name}");
    }
    // Without the rule (a client's session), the same request reflects
    // far more: what the rule prevents.
    let (wire_in, out, _) = reflect(
        &config(Config::builder().preset(crate::Preset::LowLatency)),
        false,
    );
    assert!(out > 10 * wire_in, "{out} vs {wire_in}");
}

/// A configured proof timeout replaces the default: the unproven session
/// of a silent address ends at 2 s instead of 10 s (on the virtual clock).
#[test]
fn a_configured_proof_timeout_takes_effect() {
    for (timeout, name) in [(Duration::from_secs(2), "2 s"), (PROOF_TIMEOUT, "default")] {
        let c = config(Config::builder().proof_timeout(timeout));
        let mut client = Conn::new(9, &c).unwrap();
        let mut slot = vec![0u8; client.max_datagram()];
        client.write(b"hello").unwrap();
        client.handle_timeout(Duration::ZERO);
        let t = client.poll_transmit(Duration::ZERO, &mut slot).unwrap();
        let h = client.header_len();
        let mut server = Conn::new(9, &c).unwrap();
        server.require_proof(Duration::ZERO);
        let _ = server.handle_packet(Duration::ZERO, &slot[h..h + t.len]);
        let mut now = Duration::ZERO;
        while server.error().is_none() && now < Duration::from_secs(60) {
            now += Duration::from_millis(5);
            server.handle_timeout(now);
            while server.poll_transmit(now, &mut slot).is_some() {}
        }
        assert_eq!(server.error(), Some(SessionError::DeadLink), "{name}");
        assert!(
            now >= timeout && now <= timeout + Duration::from_millis(5),
            "{name}: ended at {now:?}"
        );
    }
}

/// A real peer proves itself within its first round trip, by acknowledging
/// data or answering the window probe, so legitimate traffic is not held.
#[test]
fn a_real_peer_proves_itself_in_one_round_trip() {
    for (name, c) in presets() {
        // Data first: the echo's ACK and data prove it.
        let mut pair = Pair::new(c.clone(), 0);
        pair.conns[1].require_proof(Duration::ZERO);
        pair.conns[0].write(b"hello").unwrap();
        let mut steps = 0;
        while !pair.conns[1].is_proven() && steps < 1000 {
            pair.step();
            steps += 1;
        }
        assert!(pair.conns[1].is_proven(), "{name}");
        // Two 20 ms legs plus the two sides' flush intervals at most.
        assert!(steps <= 40 + 2 * 100 + 10, "{name}: {steps} ms");
        // Idle after connecting (a WASK opener, nothing written): the WINS
        // answer to the server's WASK proves it.
        let mut pair = Pair::new(c, 0);
        pair.conns[1].require_proof(Duration::ZERO);
        pair.conns[0].kcp.request_window_probe();
        for _ in 0..1000 {
            pair.step();
        }
        assert!(pair.conns[1].is_proven(), "{name}: idle peer");
        assert_eq!(pair.conns[1].error(), None, "{name}");
    }
}

/// A forged ACK or WINS before anything was sent proves nothing.
#[test]
fn proof_needs_an_answer_to_what_was_sent() {
    let c = config(Config::builder());
    let mut server = Conn::new(3, &c).unwrap();
    server.require_proof(Duration::ZERO);
    let seg = |cmd: u8, sn: u32, una: u32| {
        let h = crate::arq::segment::Header {
            conv: 3,
            cmd,
            wnd: 32,
            sn,
            una,
            ..Default::default()
        };
        let mut b = [0u8; 24];
        h.encode(&mut b);
        b
    };
    let _ = server.handle_packet(Duration::ZERO, &seg(83, 0, 0));
    // In the same batch, before our first WASK left: a WINS and ACKs.
    let _ = server.handle_packet(Duration::ZERO, &seg(84, 0, 0));
    let _ = server.handle_packet(Duration::ZERO, &seg(82, 0, 1));
    assert!(!server.is_proven());
    // Our WASK (and WINS) leave; a WINS now answers it.
    server.handle_timeout(Duration::ZERO);
    let mut slot = vec![0u8; server.max_datagram()];
    while server.poll_transmit(Duration::ZERO, &mut slot).is_some() {}
    assert!(server.stats().arq.wask_out > 0);
    let _ = server.handle_packet(Duration::from_millis(5), &seg(84, 0, 0));
    assert!(server.is_proven());
}

/// Everything `conn` sends at `now` (its timers run first), as plaintext.
fn drain_plain(conn: &mut Conn, now: Duration) -> Vec<Vec<u8>> {
    let mut slot = vec![0u8; conn.max_datagram()];
    let h = conn.header_len();
    conn.handle_timeout(now);
    let mut out = Vec::new();
    while let Some(t) = conn.poll_transmit(now, &mut slot) {
        out.push(slot[h..h + t.len].to_vec());
    }
    out
}

/// The KCP commands a plaintext datagram carries (none for parity).
fn commands(packet: &[u8]) -> Vec<u8> {
    let kcp = match fec::classify(packet) {
        PacketKind::Kcp => packet,
        PacketKind::Data => fec::data_payload(packet).unwrap(),
        _ => return Vec::new(),
    };
    crate::arq::segment::Segments::new(kcp)
        .map(|s| s.unwrap().cmd())
        .collect()
}

/// The client's next output (its answer to a probe, at its next flush)
/// reaches the server; returns when it left.
fn answer_probe(client: &mut Conn, server: &mut Conn, mut now: Duration) -> Duration {
    for _ in 0..1_000 {
        let sent = drain_plain(client, now);
        if !sent.is_empty() {
            for p in sent {
                let _ = server.handle_packet(now, &p);
            }
            return now;
        }
        now += Duration::from_millis(1);
    }
    panic!("the client sent nothing");
}

/// A listener's session that writes as soon as it is accepted and whose
/// first flush is lost: the data behind it waits over the budget, and the
/// session still answers each of the client's probes (with its own proof
/// probe) in a lone control packet within the budget, unframed even with
/// FEC on; the client's answer proves it and the data leaves. Every preset,
/// with and without kcptun's FEC. (Before, the held data blocked the
/// answers and the client's connect timed out.)
#[test]
fn a_held_session_answers_probes_alone_within_the_budget() {
    const WASK: u8 = 83;
    const WINS: u8 = 84;
    let mut alone = 0;
    for (name, c) in presets() {
        let mut client = Conn::new(9, &c).unwrap();
        let mut server = Conn::new(9, &c).unwrap();
        let over = server.overhead as u64;
        let (mut wire_in, mut out) = (0u64, 0u64);
        let mut now = Duration::ZERO;
        client.connect(now);
        server.require_proof(now);
        for p in drain_plain(&mut client, now) {
            wire_in += p.len() as u64 + over;
            let _ = server.handle_packet(now, &p);
        }
        server.write(&[5u8; 6_000]).unwrap();
        // The first flush, lost.
        for p in drain_plain(&mut server, now) {
            out += p.len() as u64 + over;
        }
        assert!(out <= AMPLIFICATION_FACTOR * wire_in, "{name}");
        assert!(server.held.is_some(), "{name}: data waits over the budget");
        // The client's probe again, 250 ms on.
        now += PROBE_FIRST_WAIT;
        for p in drain_plain(&mut client, now) {
            wire_in += p.len() as u64 + over;
            let _ = server.handle_packet(now, &p);
        }
        let Some((held, _)) = server.held else {
            panic!("{name}: nothing held");
        };
        let answer = drain_plain(&mut server, now);
        if out + (held as u64 + over) <= AMPLIFICATION_FACTOR * wire_in {
            // LowLatency's client said enough for the held body to fit.
            assert!(commands(&answer[0]).contains(&81), "{name}: the held body");
            continue;
        }
        alone += 1;
        assert_eq!(answer.len(), 1, "{name}: one lone answer");
        out += answer[0].len() as u64 + over;
        assert!(
            out <= AMPLIFICATION_FACTOR * wire_in,
            "{name}: {out} vs {wire_in}"
        );
        assert_eq!(fec::classify(&answer[0]), PacketKind::Kcp, "{name}");
        let mut cmds = commands(&answer[0]);
        cmds.sort_unstable();
        assert_eq!(cmds, [WASK, WINS], "{name}: the answer and the proof probe");
        assert!(server.held.is_some() && !server.is_proven(), "{name}");
        // The client connects and answers the proof probe (at its next
        // flush): the data leaves.
        let _ = client.handle_packet(now, &answer[0]);
        assert!(!client.is_connecting(), "{name}");
        now = answer_probe(&mut client, &mut server, now);
        assert!(server.is_proven(), "{name}");
        // The held packet at once, then the rest (a lossless exchange
        // without delay): the client reads all 6,000 bytes.
        let first = drain_plain(&mut server, now);
        assert!(commands(&first[0]).contains(&81), "{name}: the held data");
        let mut read = 0;
        let mut buf = [0u8; 8_192];
        for p in first {
            let _ = client.handle_packet(now, &p);
        }
        for _ in 0..2_000 {
            now += Duration::from_millis(1);
            for p in drain_plain(&mut client, now) {
                let _ = server.handle_packet(now, &p);
            }
            for p in drain_plain(&mut server, now) {
                let _ = client.handle_packet(now, &p);
            }
            while let Ok(n) = client.read(&mut buf) {
                read += n;
            }
        }
        assert_eq!(read, 6_000, "{name}");
    }
    assert!(alone >= 10, "{alone} of 12 held over the budget");
}

/// The proof probe is asked again while the peer is silent: a client that
/// connected (it got the answer to its probe) and waits for a server that
/// speaks first sends nothing more, so once its answer to the first proof
/// probe is lost, the session gets proof only from a probe of its own. It
/// goes out 250 ms after the last input, then 500 ms later, within the
/// budget (so it stops when that is spent), and the session ends unproven
/// at the proof deadline when nothing answers.
#[test]
fn an_unproven_session_asks_again_while_its_peer_is_silent() {
    let c = config(Config::builder());
    let mut client = Conn::new(9, &c).unwrap();
    let mut server = Conn::new(9, &c).unwrap();
    let over = server.overhead as u64;
    let mut now = Duration::ZERO;
    client.connect(now);
    server.require_proof(now);
    let mut wire_in = 0;
    for p in drain_plain(&mut client, now) {
        wire_in += p.len() as u64 + over;
        let _ = server.handle_packet(now, &p);
    }
    server.write(&[5u8; 6_000]).unwrap();
    let mut out = 0;
    for p in drain_plain(&mut server, now) {
        out += p.len() as u64 + over;
        let _ = client.handle_packet(now, &p);
    }
    // The client connected; its answer to the proof probe is lost.
    assert!(!client.is_connecting());
    let _ = drain_plain(&mut client, now);
    let mut probes = Vec::new();
    while server.error().is_none() && now < Duration::from_secs(20) {
        now = server.poll_timeout().expect("a deadline").max(now);
        for p in drain_plain(&mut server, now) {
            out += p.len() as u64 + over;
            assert_eq!(commands(&p), [83], "a lone WASK");
            probes.push(now.as_millis());
        }
        assert!(out <= AMPLIFICATION_FACTOR * wire_in, "{out} vs {wire_in}");
    }
    assert_eq!(probes, [250], "one fits the budget: {out} of {wire_in} x 3");
    assert_eq!(server.error(), Some(SessionError::DeadLink));
    assert_eq!(now, PROOF_TIMEOUT);
    // Answered, it proves the session.
    let mut server = Conn::new(9, &c).unwrap();
    let mut client = Conn::new(9, &c).unwrap();
    let mut now = Duration::ZERO;
    client.connect(now);
    server.require_proof(now);
    for p in drain_plain(&mut client, now) {
        let _ = server.handle_packet(now, &p);
    }
    let _ = drain_plain(&mut server, now);
    now += PROBE_FIRST_WAIT;
    let probe = drain_plain(&mut server, now);
    assert_eq!(probe.len(), 1);
    let _ = client.handle_packet(now, &probe[0]);
    answer_probe(&mut client, &mut server, now);
    assert!(server.is_proven());
}

/// A silent unproven peer whose session is held by the budget still meets
/// the idle timeout when that comes before the proof deadline.
#[test]
fn a_held_unproven_session_still_idles_out() {
    let c = config(
        Config::builder()
            .preset(crate::Preset::LowLatency)
            .idle_timeout(Duration::from_secs(2)),
    );
    let (wire_in, out, end) = reflect(&c, true);
    assert!(out <= AMPLIFICATION_FACTOR * wire_in, "{out} vs {wire_in}");
    assert_eq!(end, Some(SessionError::IdleTimeout));
}

/// Port-unreachable reports: refused while connecting; once established
/// one stray report (the peer answering meanwhile) never fails the
/// session, a streak with nothing valid in between does, probing as it
/// goes; with `icmp_reset(false)` reports change nothing.
#[test]
fn port_unreachable_streaks_fail_an_established_session_and_strays_do_not() {
    let c = config(Config::builder());
    let mut pair = Pair::new(c.clone(), 0);
    pair.conns[0].connect(Duration::ZERO);
    pair.conns[0].handle_unreachable(Duration::ZERO);
    assert_eq!(pair.conns[0].error(), Some(SessionError::Refused));

    let mut pair = Pair::new(c.clone(), 0);
    stream(&mut pair, 10_000, 5_000);
    // Strays: one report every second, the peer alive in between.
    for _ in 0..5 {
        let now = pair.now;
        pair.conns[0].handle_unreachable(now);
        for _ in 0..1000 {
            pair.step();
        }
        assert_eq!(pair.conns[0].error(), None);
    }
    stream(&mut pair, 10_000, 5_000);
    // Two quick reports, then the peer answers the probe: no failure.
    let now = pair.now;
    pair.conns[0].handle_unreachable(now);
    pair.conns[0].handle_unreachable(now);
    for _ in 0..100 {
        pair.step();
    }
    pair.conns[0].handle_unreachable(pair.now);
    assert_eq!(pair.conns[0].error(), None, "the answer ended the streak");
    for _ in 0..100 {
        pair.step();
    }

    // The peer is gone: a report every 50 ms fails the session once the
    // streak spans UNREACHABLE_SPAN, with probes every 250 ms meanwhile.
    pair.blackout = true;
    for _ in 0..2000 {
        pair.step();
    }
    let start = pair.now;
    let wask = pair.conns[0].stats().arq.wask_out;
    while pair.conns[0].error().is_none() {
        assert!(pair.now - start < UNREACHABLE_MAX_SPAN + Duration::from_millis(100));
        let now = pair.now;
        pair.conns[0].handle_unreachable(now);
        for _ in 0..50 {
            pair.step();
        }
    }
    assert_eq!(pair.conns[0].error(), Some(SessionError::PortUnreachable));
    assert!(pair.now - start >= UNREACHABLE_SPAN);
    assert!(pair.conns[0].stats().arq.wask_out > wask, "probed");
    let e = std::io::Error::from(ConnError::Closed(SessionError::PortUnreachable));
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);

    // Switched off: nothing but the idle timeout ends it.
    let mut pair = Pair::new(config(Config::builder().icmp_reset(false)), 0);
    stream(&mut pair, 10_000, 5_000);
    pair.blackout = true;
    for _ in 0..20 {
        let now = pair.now;
        pair.conns[0].handle_unreachable(now);
        for _ in 0..50 {
            pair.step();
        }
    }
    assert_eq!(pair.conns[0].error(), None);
}

/// Migration's freshness: every datagram a session received is stale
/// afterwards (a replay moves nothing), while new data, and a
/// retransmission stamped later, are fresh.
#[test]
fn received_datagrams_are_stale_and_new_ones_fresh() {
    let c = config(Config::builder().window(64, 64).stream(true));
    let crypto = c.packet_crypto();
    let mut pair = Pair::new(c.clone(), 0);
    pair.delay = Duration::ZERO;
    let mut seen = [Vec::new(), Vec::new()];
    let run = |pair: &mut Pair, ms: u64, seen: &mut [Vec<Vec<u8>>; 2], fresh_first: bool| {
        for _ in 0..ms {
            for k in 0..2 {
                pair.conns[k].handle_timeout(pair.now);
            }
            pair.transmit();
            while let Some((_, to, mut d)) = pair.flight.pop_front() {
                let r = crypto.open(&mut d).unwrap();
                let plain = d[r].to_vec();
                if fresh_first && to == 1 && seen[1].is_empty() {
                    assert!(pair.conns[1].is_fresh(&plain), "new data is fresh");
                }
                let got = pair.conns[to].handle_packet(pair.now, &plain);
                assert_eq!(got.bad_kcp, 0);
                seen[to].push(plain);
            }
            pair.now += Duration::from_millis(1);
        }
    };
    pair.conns[0].write(&[7u8; 30_000]).unwrap();
    run(&mut pair, 300, &mut seen, true);
    let mut buf = vec![0u8; 65536];
    assert_eq!(pair.conns[1].read(&mut buf), Ok(30_000));
    run(&mut pair, 100, &mut seen, false);
    for (to, list) in seen.iter().enumerate() {
        assert!(!list.is_empty());
        for p in list {
            assert!(!pair.conns[to].is_fresh(p), "a replay to {to} is stale");
        }
    }
    // A retransmission: the same segment stamped later is fresh again for
    // a receiver that lost the ACK's way back.
    let mut retrans = seen[1]
        .iter()
        .find(|p| p.get(4) == Some(&81))
        .expect("a PUSH")
        .clone();
    let ts = u32::from_le_bytes(retrans[8..12].try_into().unwrap());
    retrans[8..12].copy_from_slice(&ts.wrapping_add(100_000).to_le_bytes());
    assert!(pair.conns[1].is_fresh(&retrans));
}

/// Migration's freshness for FEC datagrams (a `--udp` tunnel's session
/// carries nothing else while its flows send): a data shard the receiver
/// never had is fresh; every extension packet it received is stale
/// afterwards (a replay from elsewhere moves nothing), and parity and
/// reports never are fresh.
#[test]
fn datagram_shards_are_fresh_until_received() {
    let cfg = Config::builder()
        .crypto(Method::Aes128Gcm, Key::passphrase("fresh datagrams"))
        .datagram_fec(true)
        .build()
        .unwrap();
    let crypto = cfg.packet_crypto();
    let mut client = Conn::new(0x4242, &cfg).unwrap();
    client.connect(Duration::ZERO);
    let mut server = Conn::new(0x4242, &cfg).unwrap();
    server.require_proof(Duration::ZERO);
    server.answer_datagram_fec_only();
    let mut slot = vec![0u8; 1500];
    // What `from` sends now, sealed and opened as on the wire.
    let mut sent = |from: &mut Conn, now: Duration| {
        let mut out = Vec::new();
        from.handle_timeout(now);
        while let Some(tx) = from.poll_transmit(now, &mut slot) {
            let n = crypto
                .seal(&mut slot, tx.len, &[7; 16][..crypto.nonce_len()])
                .unwrap();
            let range = crypto.open(&mut slot[..n]).unwrap();
            out.push(slot[range].to_vec());
        }
        out
    };
    let mut to_server: Vec<Vec<u8>> = Vec::new();
    let (mut fresh_data, mut stale_other) = (0, 0);
    for t in 0..400u64 {
        let now = Duration::from_millis(t);
        if t % 5 == 0 && client.datagram_fec_negotiated() {
            let _ = client.send_datagram(&[t as u8; 300]);
        }
        for plain in sent(&mut client, now) {
            if dgram_fec::ext_type(&plain).is_some() {
                if server.is_fresh(&plain) {
                    let kind = dgram_fec::ext_type(&plain).map(|(_, t)| t);
                    assert!(
                        matches!(kind, Some(0 | 1)),
                        "only data shards and their copies are fresh: {kind:?}"
                    );
                    fresh_data += 1;
                } else {
                    stale_other += 1;
                }
            }
            let _ = server.handle_packet(now, &plain);
            to_server.push(plain);
        }
        for plain in sent(&mut server, now) {
            let _ = client.handle_packet(now, &plain);
        }
        let mut buf = [0u8; 2048];
        while server.recv_datagram(&mut buf).is_ok() {}
    }
    assert!(client.datagram_fec_negotiated() && server.datagram_fec_negotiated());
    assert!(fresh_data > 50, "new data shards are fresh: {fresh_data}");
    assert!(stale_other > 0, "parity is never fresh");
    let replays = to_server
        .iter()
        .filter(|p| dgram_fec::ext_type(p).is_some())
        .count();
    assert!(replays > fresh_data);
    for p in &to_server {
        assert!(!server.is_fresh(p), "a replay is stale");
    }
}
