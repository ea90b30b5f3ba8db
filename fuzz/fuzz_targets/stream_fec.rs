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

use std::time::Duration;

use kcpio::ConfigBuilder;
use kcpio_fuzz::ext::{CONV, config, drain, next_record, offered};
use libfuzzer_sys::fuzz_target;

fn extend(b: ConfigBuilder) -> ConfigBuilder {
    b.fec(10, 3).adaptive_fec(true)
}

fuzz_target!(|data: &[u8]| {
    let [sel, rest @ ..] = data else {
        return;
    };
    let mut rest: &[u8] = rest;
    // The peer's offer: a WASK opener with the stream extension's tag.
    let Some(mut conn) = offered(config(sel & 1 != 0, extend), 0xD4) else {
        return;
    };
    assert!(conn.adaptive_fec_negotiated());
    let mut now = Duration::ZERO;
    let mut slot = vec![0u8; conn.max_datagram()];
    let mut buf = vec![0u8; 1 << 16];
    let mut packet = Vec::with_capacity(2048);
    let write = sel & 2 != 0;
    let mut written = 0u32;
    while let Some(r) = next_record(&mut rest) {
        now += r.advance;
        let bytes = r.bytes;
        packet.clear();
        let word = bytes.get(..4).unwrap_or(&[0; 4]);
        let body = bytes.get(4..).unwrap_or_default();
        match r.kind & 3 {
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
            let len = usize::from(r.len_lo) * 8;
            let _ = conn.write(&buf[..len]);
            written += 1;
        }
        drain(&mut conn, now, &mut slot);
    }
});
