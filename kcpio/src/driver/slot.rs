//! What the routing table and the admission policy share: a session's
//! place in the table ([`SessionId`]) and why a datagram reached no
//! session ([`Refusal`]). Below both, so neither imports the other's file.

/// A slot in the table, with a generation so a stale id never reaches a
/// newer session in the same slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SessionId {
    pub(super) idx: u32,
    pub(super) generation: u32,
}

/// Why a datagram reached no session; each maps to one socket counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Too short, or a new conversation whose KCP packet does not parse.
    BadKcp,
    /// An out-of-band packet (unreliable datagram) that matches no session:
    /// unknown address, or another conv than the address's session. It
    /// never creates or replaces a session.
    Oob,
    /// No session for the address and nothing to create one from.
    UnknownSession,
    /// Another conv than the address's session, and not a takeover.
    ConvMismatch,
    /// A late packet of a recently closed session.
    Tombstoned,
    /// The session cap is reached.
    SessionCap,
    /// The accept backlog is full.
    Backlog,
    /// A new conversation (or a takeover) whose datagram is not a
    /// conversation opener: a late or forged packet.
    NotOpener,
    /// A session-opening datagram seen before (a replay).
    Replay,
    /// The source address opened sessions faster than the per-source limit.
    RateLimited,
    /// A datagram of a live session from another address that tells the
    /// session nothing new (a replay, or a duplicate): it moves nothing.
    Stale,
}
