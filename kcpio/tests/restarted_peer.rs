//! A kcp-go listener that dropped our session re-creates it for our next
//! packet (same address, same conv): the new incarnation starts again at
//! KCP sn 0 and FEC seqid 0 while our `Conn` still holds the first
//! incarnation's state. What a kcpio client delivers from it must be the new
//! incarnation's stream, from its first byte, or nothing.
//!
//! The server incarnations here are kcpio's own ARQ and FEC encoder shaped
//! as kcp-go's (stream mode, FEC 10/3 without guards, seqids and sn from 0),
//! fed our client's real packets; everything runs on a virtual clock.

use std::time::Duration;

use kcpio::arq::{ArqConfig, Kcp, Origin, Timestamp, Timing};
use kcpio::fec::{self, FecEncoder};
use kcpio::{Config, Conn, ConnError, Method};

const CONV: u32 = 0x5eed_0001;

/// One incarnation of the kcp-go server's session.
struct Incarnation {
    kcp: Kcp,
    fec: FecEncoder,
    /// Bytes its application read, in order.
    read: Vec<u8>,
}

impl Incarnation {
    fn new() -> Self {
        let mut cfg = ArqConfig::with_timing(Timing::FAST);
        cfg.stream = true;
        Self {
            kcp: Kcp::new(CONV, &cfg).unwrap(),
            fec: FecEncoder::new(10, 3).unwrap(),
            read: Vec::new(),
        }
    }

    /// One of our plaintext packets (data shards carry KCP; parity is not
    /// modelled on this side).
    fn input(&mut self, now: Timestamp, packet: &[u8]) {
        if let Some(kcp) = fec::data_payload(packet) {
            let _ = self.kcp.handle_datagram(now, kcp, Origin::Regular);
        }
        let mut buf = [0u8; 2048];
        loop {
            let n = self.kcp.recv(&mut buf);
            if n == 0 {
                break;
            }
            self.read.extend_from_slice(&buf[..n]);
        }
    }

    /// Everything it has to send now, FEC-framed, parity after the shard
    /// that closed its group (as kcp-go sends them).
    fn output(&mut self, now: Timestamp) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if self.kcp.poll_timeout().is_some_and(|t| t.diff(now) <= 0) {
            self.kcp.handle_timeout(now);
        }
        let mut buf = [0u8; 1600];
        while let Some(n) = self.kcp.poll_transmit(now, &mut buf[8..]) {
            let len = self.fec.encode(now, &mut buf, n);
            out.push(buf[..len].to_vec());
            let mut p = [0u8; 1600];
            while let Some(m) = self.fec.poll_parity(&mut p) {
                out.push(p[..m].to_vec());
            }
        }
        out
    }
}

/// Our client session and the server's current incarnation on a
/// lossless, instant link but for the server's packets `lose` picks.
struct Link {
    client: Conn,
    slot: Vec<u8>,
    server: Incarnation,
    now: Duration,
    /// Incarnations so far (0 for the first).
    incarnation: usize,
    /// Which of the server's packets are lost: `(incarnation, seqid)`.
    lose: Box<dyn Fn(usize, u32) -> bool>,
    /// What the client read, in order.
    delivered: Vec<u8>,
}

impl Link {
    fn new(lose: impl Fn(usize, u32) -> bool + 'static) -> Self {
        // kcptun's client defaults as `kcpio-tunnel` sets them: fast, stream
        // mode, FEC 10/3 (crypto does not matter to the receive path).
        let config = Config::builder()
            .preset(kcpio::Preset::Fast)
            .stream(true)
            .fec(10, 3)
            .crypto(Method::None, kcpio::Key::passphrase("restart"))
            .build()
            .unwrap();
        let client = Conn::new(CONV, &config).unwrap();
        let slot = vec![0; client.max_datagram()];
        Self {
            client,
            slot,
            server: Incarnation::new(),
            now: Duration::ZERO,
            incarnation: 0,
            lose: Box::new(lose),
            delivered: Vec::new(),
        }
    }

    fn ts(&self) -> Timestamp {
        Timestamp::from_millis(self.now.as_millis() as u32)
    }

    /// Runs `ms` milliseconds of both ends.
    fn run(&mut self, ms: u64) {
        for _ in 0..ms {
            let ts = self.ts();
            let h = self.client.header_len();
            while let Some(t) = self.client.poll_transmit(self.now, &mut self.slot) {
                let packet = self.slot[h..h + t.len].to_vec();
                self.server.input(ts, &packet);
            }
            for packet in self.server.output(ts) {
                let seqid = u32::from_le_bytes([packet[0], packet[1], packet[2], packet[3]]);
                if (self.lose)(self.incarnation, seqid) {
                    continue;
                }
                let _ = self.client.handle_packet(self.now, &packet);
            }
            if self.client.poll_timeout().is_some_and(|t| t <= self.now) {
                self.client.handle_timeout(self.now);
            }
            let mut buf = [0u8; 4096];
            loop {
                match self.client.read(&mut buf) {
                    Ok(n) => self.delivered.extend_from_slice(&buf[..n]),
                    Err(ConnError::WouldBlock) => break,
                    Err(e) => panic!("read: {e}"),
                }
            }
            self.now += Duration::from_millis(1);
        }
    }

    /// The listener drops the session (its ACKs flushed, as kcp-go's
    /// `Close` does) and makes a new one for our next packet.
    fn restart(&mut self) -> Incarnation {
        self.incarnation += 1;
        std::mem::replace(&mut self.server, Incarnation::new())
    }
}

/// The interop flake's exchange, packet for packet: our smux v2 opener
/// kills incarnation 1 (it read our first segment and ACKed it, nothing
/// else); our keepalive 10 s later creates incarnation 2, which holds it
/// (its sn 0 never came) and at 20 s sends its own keepalive as kcptun's
/// snappy writer does: the stream identifier and chunk header (sn 0), then
/// the 8-byte smux v1 NOP (sn 1), each flushed on its own.
#[test]
fn a_restarted_kcp_go_session_is_read_from_its_first_byte() {
    const HEAD: [u8; 18] = [
        0xff, 0x06, 0x00, 0x00, 0x73, 0x4e, 0x61, 0x50, 0x70, 0x59, 0x01, 0x0c, 0x00, 0x00, 0x82,
        0x37, 0xbc, 0x1d,
    ];
    const NOP: [u8; 8] = [0x01, 0x03, 0, 0, 0, 0, 0, 0];
    let mut link = Link::new(|_, _| false);
    link.client.connect(link.now);
    link.run(20);
    link.client.write(&[0xff; 39]).unwrap();
    link.run(200);
    let first = link.restart();
    assert_eq!(first.read.len(), 39, "incarnation 1 read our opener");
    link.run(9_800);
    link.client.write(&[0x01; 16]).unwrap();
    link.run(10_000);
    assert!(link.delivered.is_empty());
    link.client.write(&[0x01; 16]).unwrap();
    link.run(5);
    assert_eq!(link.server.kcp.send(&HEAD), HEAD.len());
    link.run(1);
    assert_eq!(link.server.kcp.send(&NOP), NOP.len());
    link.run(500);
    let want: Vec<u8> = HEAD.iter().chain(&NOP).copied().collect();
    assert_eq!(link.delivered, want);
}

/// Incarnation 2 reuses incarnation 1's seqids, so a group on our side may
/// hold shards of both; rebuilt from such a mix, a packet is garbage
/// wherever the two incarnations' shards differ (kcp-go's FEC has no
/// checksum). Whatever a restart does to the stream (incarnation 2's first
/// segments are behind what incarnation 1 delivered), every byte delivered
/// must be one the server wrote: over every loss pattern of incarnation 2's
/// first ten shards.
#[test]
fn a_restarted_session_s_reused_seqids_deliver_no_garbage() {
    let (mut refused, mut rebuilt) = (0, 0);
    for connect in [false, true] {
        for mask in 0u32..1024 {
            let mut link =
                Link::new(move |inc, seqid| inc == 1 && seqid < 10 && mask & (1 << seqid) != 0);
            if connect {
                link.client.connect(link.now);
            }
            link.run(20);
            for _ in 0..5 {
                assert_eq!(link.server.kcp.send(&[b'a'; 100]), 100);
                link.run(1);
            }
            link.run(200);
            assert_eq!(link.delivered, vec![b'a'; 500]);
            link.restart();
            link.client.write(b"ping").unwrap();
            link.run(5);
            for _ in 0..40 {
                assert_eq!(link.server.kcp.send(&[b'b'; 100]), 100);
                link.run(1);
            }
            link.run(1_500);
            let strange = link
                .delivered
                .iter()
                .filter(|b| **b != b'a' && **b != b'b')
                .count();
            assert_eq!(
                strange, 0,
                "connect {connect}, lost {mask:010b}: {strange} bytes no incarnation wrote"
            );
            assert_eq!(link.delivered.len(), 4_000, "incarnation 2 from its sn 5");
            let fec = link.client.stats().fec_in;
            refused += u64::from(fec.dropped_conflicting > 0);
            rebuilt += fec.recovered;
        }
    }
    // The patterns did reach the decoder's mixed groups.
    assert!(refused > 1_000, "{refused} runs saw a reused seqid");
    assert!(rebuilt > 0);
}
