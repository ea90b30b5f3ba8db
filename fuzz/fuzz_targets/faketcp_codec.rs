//! The fake-TCP codec (`kcpio::sys::faketcp::codec`) fed arbitrary packets.
//!
//! Input: one selector byte (bit 0: the kernel's handshake is done; bit 1:
//! each answer's sequence space is given back; bit 2: IPv6; all of it
//! seeds the timestamp base), then packets, each a big-endian `u16` length
//! and that many bytes of an IPv4 packet as the raw socket reads it (with
//! bit 2: a TCP segment as an IPv6 raw socket reads it).
//!
//! Checks (inside `kcpio::fuzzing::faketcp_codec`): a parsed payload is
//! exactly where its offset says, a delivered payload is never empty nor
//! longer than a datagram (merged or forged segments are refused, never
//! cut), and every answer the flow numbers parses back with its sequence
//! and acknowledgement numbers, flags and payload.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kcpio::fuzzing::faketcp_codec(data);
});
