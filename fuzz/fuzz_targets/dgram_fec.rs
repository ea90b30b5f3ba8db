//! The FEC datagram extension's decoder (and its sender, fed the reports
//! the input forges): a `Conn` with `datagram_fec` on, negotiated by a
//! tagged window probe, then fed extension packets.
//!
//! Input: one selector byte (bit 0: AES-GCM-sized slot layout, else
//! `null`; bit 1: the session also sends datagrams), then records `[advance,
//! kind, len_lo, len_hi, bytes...]`: the clock moves `advance` ms, and
//! `len` bytes arrive as one opened datagram: as given when `kind & 3 == 0`,
//! else framed as an extension packet of type `kind & 3` (data, parity,
//! report) with the session's conv, the first 4 bytes as the sequence
//! word and `kind >> 2` as byte 6 (fragment or parity index), the rest as
//! the body.
//!
//! Checks: no panic; every received datagram fits
//! `max_datagram_payload`; one `poll_transmit` drain is bounded; the
//! session's output always fits a datagram.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use kcpio::{Config, Conn, Key, Method, Preset};
use libfuzzer_sys::fuzz_target;

const CONV: u32 = 0x0102_0304;

/// The two configurations, built once: a passphrase's key derivation
/// (PBKDF2, 4,096 rounds) per input was most of an iteration's time. A
/// `Config` is immutable, so sharing it keeps every input deterministic.
fn config(aead: bool) -> &'static Config {
    static CONFIGS: OnceLock<[Config; 2]> = OnceLock::new();
    let build = |method| {
        Config::builder()
            .preset(Preset::Fast3)
            .crypto(method, Key::passphrase("fuzz"))
            .datagram_fec(true)
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
    // The peer's offer: a WASK opener with the extension's tag.
    let mut wask = [0u8; 24];
    wask[..4].copy_from_slice(&CONV.to_le_bytes());
    wask[4] = 83;
    wask[5] = 0xD1;
    let mut now = Duration::ZERO;
    let _ = conn.handle_packet(now, &wask);
    assert!(conn.datagram_fec_negotiated());
    let max = conn.max_datagram_payload();
    let mut slot = vec![0u8; conn.max_datagram()];
    let mut buf = vec![0u8; 1 << 16];
    let mut packet = Vec::with_capacity(2048);
    let send = sel & 2 != 0;
    let mut sent = 0u32;
    while let [adv, kind, lo, hi, tail @ ..] = rest {
        now += Duration::from_millis(u64::from(*adv));
        let n = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
        let (bytes, tail) = tail.split_at(n);
        rest = tail;
        packet.clear();
        if kind & 3 == 0 {
            packet.extend_from_slice(bytes);
        } else {
            let word = bytes.get(..4).unwrap_or(&[0; 4]);
            packet.extend_from_slice(word);
            packet.extend_from_slice(&0xF3u16.to_le_bytes());
            packet.push(kind >> 2);
            packet.push(0x84 | (kind & 3));
            packet.extend_from_slice(&CONV.to_le_bytes());
            packet.extend_from_slice(bytes.get(4..).unwrap_or_default());
        }
        let _ = conn.handle_packet(now, &packet);
        while let Ok(k) = conn.recv_datagram(&mut buf) {
            assert!(k <= max, "a {k}-byte datagram beyond the {max}-byte maximum");
        }
        if send && sent < 10_000 {
            let len = usize::from(*lo) * 16 % (max + 1);
            let _ = conn.send_datagram(&buf[..len]);
            sent += 1;
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
