//! Entry points for the fuzz targets in `fuzz/`, compiled only under
//! `--cfg fuzzing` (which cargo-fuzz sets), as quinn-proto's `fuzzing`
//! module: they reach internals that are not part of the API.

/// The session table's routing and admission fed an arbitrary sequence of
/// datagrams, clock jumps, proofs and removals: the `session_table` target.
///
/// # Panics
///
/// Only when one of the table's invariants breaks (a bug): its books
/// balance, sessions stay under the cap, and every memory (tombstones,
/// replay fingerprints, per-source buckets, the unproven queue) within its
/// bound.
pub fn session_table(data: &[u8]) {
    crate::driver::table::fuzz(data);
}

/// A fresh smux session (both roles and versions, small budgets) fed
/// arbitrary bytes, its output drained: the `mux_session` target. Never
/// panics on any input.
///
/// # Panics
///
/// Only if a budget is exceeded (a bug).
pub fn mux_session(data: &[u8]) {
    crate::mux::fuzz_session(data);
}

/// The fake-TCP codec (the segments a raw socket reads, as `kcptun --tcp`
/// peers and forgers send them) and one flow's sequence tracking: the
/// `faketcp_codec` target. Never panics on any input.
///
/// # Panics
///
/// Only when an invariant breaks (a bug): see the target's header.
pub fn faketcp_codec(data: &[u8]) {
    crate::sys::faketcp::codec::fuzz(data);
}
