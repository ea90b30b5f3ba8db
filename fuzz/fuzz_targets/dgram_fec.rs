//! The FEC datagram extension's decoder (and its sender, fed the reports
//! the input forges): a `Conn` with `datagram_fec` on, negotiated by a
//! tagged window probe, then fed extension packets.
//!
//! Input: one selector byte (bit 0: AES-GCM-sized slot layout, else
//! `null`; bit 1: the session also sends datagrams), then records `[advance,
//! kind, len_lo, len_hi, bytes...]`: the clock moves `advance` ms, and
//! `len` bytes arrive as one opened datagram: as given when `kind & 3 == 0`
//! and bit 7 is clear, else framed as an extension packet of type `kind &
//! 3` (a copy of a one-shard group's data shard, data, parity, report)
//! with the session's conv, the first 4 bytes as the sequence word and
//! `kind >> 2` as byte 6 (fragment, parity or copy index; a report's flags,
//! bit 0 saying the peer takes copies, which a sending session then sends
//! for its groups of one, bit 1 that it takes groups of up to 64 data and
//! 32 parity shards, which a sending session then makes), the rest as
//! the body. A report of 50 bytes or more carries the echo (the `seq` its
//! queue figure was measured on), which a sending session (bit 1) runs
//! forward against its send log: any `seq`, sent or not, in the log or
//! overwritten, with any queue figure.
//!
//! Checks: no panic; every received datagram fits
//! `max_datagram_payload`; one `poll_transmit` drain is bounded; the
//! session's output always fits a datagram.
#![no_main]

use std::time::Duration;

use kcpio::ConfigBuilder;
use kcpio_fuzz::ext::{CONV, config, drain, next_record, offered};
use libfuzzer_sys::fuzz_target;

fn extend(b: ConfigBuilder) -> ConfigBuilder {
    b.datagram_fec(true)
}

fuzz_target!(|data: &[u8]| {
    let [sel, rest @ ..] = data else {
        return;
    };
    let mut rest: &[u8] = rest;
    // The peer's offer: a WASK opener with the extension's tag.
    let Some(mut conn) = offered(config(sel & 1 != 0, extend), 0xD1) else {
        return;
    };
    assert!(conn.datagram_fec_negotiated());
    let mut now = Duration::ZERO;
    let max = conn.max_datagram_payload();
    let mut slot = vec![0u8; conn.max_datagram()];
    let mut buf = vec![0u8; 1 << 16];
    let mut packet = Vec::with_capacity(2048);
    let send = sel & 2 != 0;
    let mut sent = 0u32;
    while let Some(r) = next_record(&mut rest) {
        now += r.advance;
        let (bytes, kind) = (r.bytes, r.kind);
        packet.clear();
        if kind & 0x83 == 0 {
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
            assert!(
                k <= max,
                "a {k}-byte datagram beyond the {max}-byte maximum"
            );
        }
        if send && sent < 10_000 {
            let len = usize::from(r.len_lo) * 16 % (max + 1);
            let _ = conn.send_datagram(&buf[..len]);
            sent += 1;
        }
        drain(&mut conn, now, &mut slot);
    }
});
