//! The whole receive path as the driver runs it today, through public APIs:
//! crypto open, classify, FEC decode (with recovery), ARQ input, with
//! flushes, stream reads and timer ticks on a virtual clock.
//!
//! Input: a method selector (`kcpio_fuzz::ALL`), the session's conv, the
//! FEC shape (0 = the decoder's 1 + 1 guess), then records `ctl u8, len u16,
//! datagram`: `ctl & 1` flushes, `ctl & 2` reads, `ctl >> 2` advances the
//! clock (in 5 ms steps).
//!
//! Out-of-band packets (flag 0xF3) go where the driver routes them: to a
//! session of their conv, here a FEC-enabled `Conn`, whose bounded datagram
//! queue `ctl & 2` also drains.
//!
//! Checks: the opened range lies within the datagram; a readable stream
//! yields bytes; emitted datagrams fit the MTU; FEC memory stays within its
//! documented bound; the datagram queue never holds more than its bound and
//! hands out whole payloads.
#![no_main]

use std::sync::LazyLock;

use std::time::Duration;

use kcpio::arq::{ArqConfig, Kcp, Origin, Timestamp, Timing};
use kcpio::conn::DATAGRAM_QUEUE_LEN;
use kcpio::crypto::PacketCrypto;
use kcpio::fec::{self, FecDecoder, MAX_PACKET, PacketKind};
use kcpio::{Config, Conn, ConnError};
use kcpio_fuzz::arq::{drain, read_stream};
use kcpio_fuzz::{ALL, Reader, crypto};
use libfuzzer_sys::fuzz_target;

static CRYPTOS: LazyLock<Vec<PacketCrypto>> =
    LazyLock::new(|| ALL.iter().map(|&m| crypto(m)).collect());

/// The driver's floor for a decrypted packet (`min(24, 8 + 4)`, as kcp-go).
const MIN_PACKET: usize = 12;

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let c = &CRYPTOS[usize::from(r.u8()) % ALL.len()];
    let conv = r.u32();
    let (d, p) = (usize::from(r.u8()), usize::from(r.u8()));
    let cfg = ArqConfig {
        stream: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut kcp = Kcp::new(conv, &cfg).unwrap();
    let mut dec: Option<FecDecoder> = None;
    let oob_config = Config::builder().fec(3, 1).build().unwrap();
    let mut oob = Conn::new(conv, &oob_config).unwrap();
    let mut taken = 0u64;
    let mut now = 0u32;
    let mut scratch = vec![0u8; MAX_PACKET];
    let mut read = vec![0u8; 4096];
    let mut out = Vec::new();
    let mut datagram = Vec::with_capacity(2048);
    for _ in 0..5_000 {
        if r.is_empty() {
            break;
        }
        let ctl = r.u8();
        datagram.clear();
        datagram.extend_from_slice(r.record());
        let t = Timestamp::from_millis(now);
        let len = datagram.len();
        if let Ok(range) = c.open(&mut datagram) {
            assert!(range.start <= range.end && range.end <= len);
            let packet = &datagram[range];
            if packet.len() >= MIN_PACKET {
                match fec::classify(packet) {
                    PacketKind::Kcp => {
                        let _ = kcp.handle_datagram(t, packet, Origin::Regular);
                    }
                    kind @ (PacketKind::Data | PacketKind::Parity) => {
                        if kind == PacketKind::Data {
                            if let Some(payload) = fec::data_payload(packet) {
                                let _ = kcp.handle_datagram(t, payload, Origin::Regular);
                            }
                        }
                        let dec = dec.get_or_insert_with(|| FecDecoder::new(d.max(1), p.max(1)));
                        let _ = dec.handle(packet);
                        while let Some(n) = dec.poll_recovered(&mut scratch) {
                            assert!(n >= 24);
                            let _ = kcp.handle_datagram(t, &scratch[..n], Origin::Recovered);
                        }
                        let bound = FecDecoder::memory_bound(dec.max_shards());
                        assert!(dec.memory_usage() <= bound);
                    }
                    PacketKind::Oob => {
                        let (oob_conv, body) = fec::oob_payload(packet).expect("classified as OOB");
                        assert!(body.len() + 12 <= packet.len());
                        // The session table delivers only the session's own conv.
                        if oob_conv == conv {
                            let now = Duration::from_millis(u64::from(now));
                            let r = oob.handle_packet(now, packet);
                            assert!(r.accepted && r.bad_kcp == 0);
                        }
                    }
                }
            }
        }
        if ctl & 1 != 0 {
            out.clear();
            drain(&mut kcp, t, cfg.mtu, &mut out);
        }
        if ctl & 2 != 0 {
            loop {
                match oob.recv_datagram(&mut read) {
                    Ok(n) => {
                        assert!(n + 12 <= MAX_PACKET);
                        taken += 1;
                    }
                    Err(ConnError::WouldBlock) => break,
                    Err(e) => panic!("recv_datagram: {e}"),
                }
            }
            read_stream(&mut kcp, &mut read);
        }
        if ctl >> 2 != 0 {
            now = now.wrapping_add(u32::from(ctl >> 2) * 5);
            kcp.handle_timeout(Timestamp::from_millis(now));
        }
        let st = oob.stats();
        assert!(st.oob_received - taken <= DATAGRAM_QUEUE_LEN as u64);
    }
});
