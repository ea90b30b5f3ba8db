//! The adaptive stream FEC's decoder (and its sender, fed the reports the
//! input forges): a `Conn` with fixed 10/3 FEC and `adaptive_fec` on,
//! negotiated by a window probe tagged 0xD4, then fed data shards, stream
//! parity and reports.
//!
//! Input: one selector byte (bit 0: AES-GCM-sized slot layout, else
//! `null`; bit 1: the session also writes to its stream), then records
//! `[advance, kind, len_lo, len_hi, bytes...]`: the clock moves `advance`
//! ms, and `len` bytes arrive as one opened datagram: as given when
//! `kind & 3 == 0`; else the first 4 bytes are the sequence word and the
//! rest the body of a data shard (`kind & 3 == 1`: flag 0xF1, `size`, the
//! body as its KCP bytes), a stream parity packet (2: flag 0xF2, marker
//! 0x8A, the body as its row) or a report (3: the OOB flag, marker 0x8B,
//! the session's conv, the body as the counters).
//!
//! Checks: no panic; one `poll_transmit` drain is bounded; the session's
//! output always fits a datagram; reads never exceed what the buffer holds.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use kcpio::{Config, Conn, Key, Method, Preset};
use libfuzzer_sys::fuzz_target;

const CONV: u32 = 0x0102_0304;

/// The two configurations, built once (a passphrase's PBKDF2 per input
/// was most of an iteration's time); a `Config` is immutable.
fn config(aead: bool) -> &'static Config {
    static CONFIGS: OnceLock<[Config; 2]> = OnceLock::new();
    let build = |method| {
        Config::builder()
            .preset(Preset::Fast3)
            .crypto(method, Key::passphrase("fuzz"))
            .fec(10, 3)
            .adaptive_fec(true)
            .build()
            .expect("the fuzz configuration is valid")
    };
    &CONFIGS.get_or_init(|| [build(Method::Null), build(Method::Aes128Gcm)])[usize::from(aead)]
}

fuzz_target!(|data: &[u8]| {
    let [sel, rest @ ..] = data else {
        return;
    };
    let mut rest: &[u8] = rest;
    let Ok(mut conn) = Conn::new(CONV, config(sel & 1 != 0)) else {
        return;
    };
    conn.answer_datagram_fec_only();
    // The peer's offer: a WASK opener with the stream extension's tag.
    let mut wask = [0u8; 24];
    wask[..4].copy_from_slice(&CONV.to_le_bytes());
    wask[4] = 83;
    wask[5] = 0xD4;
    let mut now = Duration::ZERO;
    let _ = conn.handle_packet(now, &wask);
    assert!(conn.adaptive_fec_negotiated());
    let mut slot = vec![0u8; conn.max_datagram()];
    let mut buf = vec![0u8; 1 << 16];
    let mut packet = Vec::with_capacity(2048);
    let write = sel & 2 != 0;
    let mut written = 0u32;
    while let [adv, kind, lo, hi, tail @ ..] = rest {
        now += Duration::from_millis(u64::from(*adv));
        let n = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
        let (bytes, tail) = tail.split_at(n);
        rest = tail;
        packet.clear();
        let word = bytes.get(..4).unwrap_or(&[0; 4]);
        let body = bytes.get(4..).unwrap_or_default();
        match kind & 3 {
            0 => packet.extend_from_slice(bytes),
            1 => {
                packet.extend_from_slice(word);
                packet.extend_from_slice(&0xF1u16.to_le_bytes());
                packet.extend_from_slice(&((2 + body.len()) as u16).to_le_bytes());
                packet.extend_from_slice(body);
            }
            2 => {
                packet.extend_from_slice(word);
                packet.extend_from_slice(&[0xF2, 0x8A]);
                packet.extend_from_slice(body);
            }
            _ => {
                packet.extend_from_slice(word);
                packet.extend_from_slice(&0xF3u16.to_le_bytes());
                packet.extend_from_slice(&[0, 0x8B]);
                packet.extend_from_slice(&CONV.to_le_bytes());
                packet.extend_from_slice(body);
            }
        }
        let _ = conn.handle_packet(now, &packet);
        while let Ok(k) = conn.read(&mut buf) {
            assert!(k <= buf.len());
            if k == 0 {
                break;
            }
        }
        if write && written < 10_000 {
            let len = usize::from(*lo) * 8;
            let _ = conn.write(&buf[..len]);
            written += 1;
        }
        conn.handle_timeout(now);
        let mut out = 0;
        while let Some(t) = conn.poll_transmit(now, &mut slot) {
            assert!(conn.header_len() + t.len <= slot.len());
            out += 1;
            assert!(out <= 4096, "an unbounded drain");
        }
    }
});
