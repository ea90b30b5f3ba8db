//! The smux session (`kcpio::mux`) fed an arbitrary byte stream.
//!
//! Input: one selector byte (bit 0: v1/v2, bit 1: client/server role, the
//! rest: how many bytes each `handle_input` call gets and how far the
//! virtual clock moves between calls), then the peer's byte stream.
//!
//! The application side accepts, writes, closes, and every few rounds opens
//! a stream of its own, writes what `write_room` admits and half-closes or
//! closes it (stream lifecycles).
//!
//! Checks (inside `kcpio::fuzzing::mux_session`): open streams, the accept
//! backlog, buffered bytes and queued output (the session send budget)
//! never exceed the configured budgets, a write takes exactly what
//! `write_room` said, and a malformed frame ends the session with an error
//! instead of a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kcpio::fuzzing::mux_session(data);
});
