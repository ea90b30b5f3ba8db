//! A whole `Conn` (ARQ, FEC, lifecycle, anti-amplification) fed arbitrary
//! datagrams as a listener's session: an echo application writes back what
//! it reads.
//!
//! Input: one selector byte (bits 0-2: preset; bit 3: FEC 3/2; bit 4:
//! message mode; bit 5: proof required), the conv (4 bytes, little
//! endian), then records `[advance, len_lo, len_hi, bytes...]`: the clock
//! moves `4 * advance` ms, then `len` bytes arrive as one opened datagram
//! (crypto `null`).
//!
//! Checks: no panic; until the peer has proved it receives, the bytes sent
//! stay within 3x the bytes received; `read` never returns 0 bytes into a
//! non-empty buffer; one `poll_transmit` drain is bounded; the session's
//! output always fits a datagram.
#![no_main]

use std::time::Duration;

use kcpio::{Config, Conn, ConnError, Preset};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [sel, c0, c1, c2, c3, rest @ ..] = data else {
        return;
    };
    let mut rest: &[u8] = rest;
    let sel = *sel;
    let conv = u32::from_le_bytes([*c0, *c1, *c2, *c3]);
    let preset = Preset::ALL[usize::from(sel & 7) % 6];
    let mut b = Config::builder().preset(preset).stream(sel & 16 == 0);
    if sel & 8 != 0 {
        b = b.fec(3, 2);
    }
    let Ok(config) = b.build() else {
        return;
    };
    let Ok(mut conn) = Conn::new(conv, &config) else {
        return;
    };
    let proof = sel & 32 != 0;
    if proof {
        conn.require_proof(Duration::ZERO);
    }
    let mut now = Duration::ZERO;
    let mut slot = vec![0u8; conn.max_datagram()];
    let mut buf = vec![0u8; 4096];
    // Once proven, the budget no longer applies.
    let mut proven = !proof;
    while let [adv, lo, hi, tail @ ..] = rest {
        now += Duration::from_millis(u64::from(*adv) * 4);
        let n = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
        let (packet, tail) = tail.split_at(n);
        rest = tail;
        let _ = conn.handle_packet(now, packet);
        for _ in 0..4 {
            match conn.read(&mut buf) {
                Ok(0) => panic!("read returned 0 bytes into a non-empty buffer"),
                Ok(k) => {
                    let _ = conn.write(&buf[..k]);
                }
                Err(ConnError::WouldBlock | ConnError::Closed(_)) => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        let _ = conn.recv_message(&mut buf);
        conn.handle_timeout(now);
        let mut drained = 0;
        while let Some(t) = conn.poll_transmit(now, &mut slot) {
            assert!(conn.header_len() + t.len <= slot.len());
            drained += 1;
            assert!(drained < 100_000, "an unbounded drain");
        }
        let s = conn.stats();
        if !proven && !conn.is_proven() {
            // Crypto `null`: wire = plaintext, no overhead.
            assert!(
                s.bytes_out <= 3 * s.bytes_in,
                "{} B out for {} B in while unproven",
                s.bytes_out,
                s.bytes_in
            );
        }
        proven |= conn.is_proven();
    }
});
