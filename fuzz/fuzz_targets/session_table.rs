//! The listener's session table (routing, admission by opener, replay
//! refusal, per-source limits, eviction of unproven sessions, tombstones,
//! timers) fed an arbitrary sequence of steps.
//!
//! Input: one byte for the session cap (1..=8) and the accept backlog
//! (1..=8), then two-byte steps `op arg`: a datagram of `4 * (op >> 3)`
//! bytes taken from the input, from one of 32 addresses; a clock jump (up
//! to 9 s, or up to 4 h); a proof; a removal; a timer.
//!
//! Checks (inside `kcpio::fuzzing::session_table`): only openers are accepted;
//! the table's books balance (sessions, addresses, unproven count); the
//! cap holds; tombstones, replay fingerprints and per-source buckets stay
//! within their bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kcpio::fuzzing::session_table(data);
});
