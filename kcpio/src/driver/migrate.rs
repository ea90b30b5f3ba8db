//! A listener's migration decisions, sans-IO: what a datagram of a live
//! conversation from another address does ([`from_elsewhere`]), the path
//! probe toward a candidate ([`probe`]) and how a listener builds the
//! session of a new conversation ([`listener_conn`]).
//!
//! The tokio driver calls these with its table, the session's `Conn` (under
//! its lock) and its clock; the deterministic simulator
//! (`kcpio/tests/sim`, through [`sim_support`]) calls the same functions
//! with a virtual clock and a seeded link. Counting, logging, the transmit
//! slots and `peer_addr` stay the driver's.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::table::{Inbound, SessionId, Table};
use crate::config::ConfigInner;
use crate::conn::{Conn, Transmit};

/// What a datagram of `id`'s conversation from another address decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing new (a replay, a late copy): dropped, counted
    /// `migration_stale`.
    Stale,
    /// The candidate answered the path probe from its address: the session
    /// moved (the table re-keyed, the old address tombstoned, the path's
    /// estimates reset when the IP changed). Deliver the datagram.
    Moved {
        /// The address the session left.
        old: SocketAddr,
        /// The address it moved to.
        new: SocketAddr,
    },
    /// Fresh, or an answer that did not count yet: `from` is the
    /// candidate; deliver the datagram, and send a path probe ([`probe`])
    /// when the slots allow (`again`: at once, the last one was answered).
    Candidate {
        /// A kcp-go peer's answer that came while its old address was
        /// still heard: probe again without waiting for the spacing.
        again: bool,
    },
    /// Stale (dropped, counted `migration_stale`), but from a kcp-go
    /// peer's possible new address while its old one is silent
    /// ([`Table::stale_seen`]: a weak candidate): send it a path nudge
    /// ([`probe`]) when the slots allow. What the peer acknowledges of it
    /// is bound to it, and makes the candidate a fresh one.
    Nudge,
}

/// A datagram (`plain` opened, `wire` bytes as received) of session `id`'s
/// conversation from `from`, an address that is not the session's
/// (`Route::Migrate`). Fresh (something `conn` never received): `from`
/// becomes the candidate. From the candidate after a probe, the answer:
/// the session moves. Anything else is stale; from a kcp-go peer while its
/// address is silent, stale but probed ([`Verdict::Nudge`]).
///
/// The answer, from a kcpio client (it clocks its probes and answers:
/// [`Conn::peer_clocks`]), is a WINS that echoes this candidate's probe tag
/// and is stamped later than anything it sent before, so neither a replay
/// nor a copy of its answer to another probe (a mirror ahead of it on the
/// path) counts. A kcp-go client's WINS carries nothing to bind: any WINS
/// counts, if the session's address was silent for
/// [`HOME_SILENCE`](super::table::HOME_SILENCE) before the probe (a peer
/// still heard there has not moved).
pub(crate) fn from_elsewhere<S>(
    table: &mut Table<S>,
    id: SessionId,
    conn: &mut Conn,
    from: SocketAddr,
    plain: &[u8],
    wire: usize,
    now: Duration,
) -> Verdict {
    if Inbound::parse(plain).is_ok_and(|i| i.is_opener()) {
        // A conversation's first datagram from elsewhere: a replay, or a
        // client restarted with the same conv, which cannot prove it owns
        // the session: it gets none (it may once this one ended).
        return Verdict::Stale;
    }
    let binds = conn.peer_clocks();
    // A weak candidate that acknowledged its nudge proved it receives
    // there: validated from now on as a fresh one is, with a probe at once.
    let nudged = table
        .candidate(id)
        .filter(|c| c.addr == from && c.weak)
        .and_then(|c| c.nudge)
        .is_some_and(|n| conn.is_nudge_answer(plain, n));
    if nudged && conn.error().is_none() {
        table.candidate_seen(id, from, wire, true);
        return Verdict::Candidate { again: true };
    }
    // A weak candidate's answers never count (see `Table::stale_seen`).
    let answer = match table.candidate(id).filter(|c| c.addr == from && !c.weak) {
        Some(c) if binds => c.tag.is_some_and(|t| conn.is_bound_answer(plain, t)),
        Some(_) => Inbound::parse(plain).is_ok_and(|i| i.has_wins()),
        None => false,
    };
    let fresh = conn.error().is_none() && conn.is_fresh(plain);
    if !table.candidate_seen(id, from, wire, fresh) {
        let alive = conn.error().is_none();
        if alive && !binds && table.stale_seen(id, from, wire, now) {
            return Verdict::Nudge;
        }
        return Verdict::Stale;
    }
    if answer {
        if let Some((old, new)) = table.migrate(id, now, !binds) {
            // NAT rebinding (same IP) keeps the path's estimates.
            if old.ip() != new.ip() {
                conn.reset_path();
            }
            return Verdict::Moved { old, new };
        }
        if !binds {
            return Verdict::Candidate { again: true };
        }
    }
    if fresh {
        Verdict::Candidate { again: false }
    } else if table.candidate(id).is_some_and(|c| c.weak) {
        Verdict::Nudge
    } else {
        Verdict::Stale
    }
}

/// The path probe (one WASK, FEC-framed when FEC is on) toward `id`'s
/// candidate, written at `slot[header_len()..]` as `poll_transmit` writes,
/// when its budget allows now (at most [`CANDIDATE_FACTOR`] × the bytes
/// received from it, one per [`PROBE_SPACING`] unless `again`); charged to
/// the budget.
///
/// [`CANDIDATE_FACTOR`]: super::table::CANDIDATE_FACTOR
/// [`PROBE_SPACING`]: super::table::PROBE_SPACING
pub(crate) fn probe<S>(
    table: &mut Table<S>,
    id: SessionId,
    conn: &mut Conn,
    now: Duration,
    again: bool,
    slot: &mut [u8],
) -> Option<Transmit> {
    let wire = conn.path_probe_wire_len();
    if !table.probe_candidate(id, wire, now, again) {
        return None;
    }
    if table.candidate(id).is_some_and(|c| c.weak) {
        // A PUSH without data its peer acknowledges, bound to this nudge;
        // a WASK (which carries the window) before the peer acknowledged
        // anything.
        if let Some((t, nudge)) = conn.poll_path_nudge(now, slot) {
            table.set_nudge(id, nudge);
            return Some(t);
        }
    }
    let tag = table.probe_tag(id, |nth| conn.probe_tag(nth))?;
    conn.poll_path_probe(now, tag, slot)
}

/// Where a probe goes: `id`'s candidate address.
pub(crate) fn candidate_addr<S>(table: &Table<S>, id: SessionId) -> Option<SocketAddr> {
    table.candidate(id).map(|c| c.addr)
}

/// A listener's session for a new conversation `conv` at `now`: held to
/// the anti-amplification budget until its peer proves it receives (the
/// address may be forged), and speaking the FEC datagram extension only in
/// kind.
pub(crate) fn listener_conn(conv: u32, config: Arc<ConfigInner>, now: Duration) -> Option<Conn> {
    let mut conn = Conn::with_config(conv, config, now).ok()?;
    conn.require_proof(now);
    conn.answer_datagram_fec_only();
    Some(conn)
}

/// The listener's session table and migration rules, for the
/// deterministic simulator (`kcpio/tests/sim`): the driver's code, driven
/// by a virtual clock. Not part of the API.
#[doc(hidden)]
pub mod sim_support {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::super::table::{self, Inbound, SessionId, Table};
    use crate::{Config, Conn};

    /// A session of the [`Listener`] (an opaque table key).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Session(SessionId);

    /// The table's routing of one opened datagram.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Route {
        /// Deliver to this session (its value: the simulator's node).
        Deliver(Session, usize),
        /// A new conversation: build its `Conn` with [`Listener::accept`].
        Accept(u32),
        /// A datagram of this session's conversation from another address:
        /// ask [`Listener::from_elsewhere`].
        Migrate(Session, usize),
        /// Dropped (the table's reason).
        Drop(String),
    }

    /// What [`Listener::from_elsewhere`] decided.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Verdict {
        /// Dropped as stale.
        Stale,
        /// The session moved from `.0` to `.1`; deliver.
        Moved(SocketAddr, SocketAddr),
        /// Fresh from a candidate (or an answer that did not count yet:
        /// `.0`); deliver, and ask [`Listener::probe`].
        Candidate(bool),
        /// Stale, dropped; but ask [`Listener::probe`] (a weak candidate).
        Nudge,
    }

    /// A listener socket's session table, sessions valued by `usize`.
    pub struct Listener {
        table: Table<usize>,
        config: Config,
    }

    impl std::fmt::Debug for Listener {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Listener")
                .field("sessions", &self.table.live())
                .finish_non_exhaustive()
        }
    }

    impl Listener {
        /// An accepting table with `config`'s caps and migration switch, as
        /// the driver builds a listener's.
        #[must_use]
        pub fn new(config: &Config) -> Self {
            let c = &config.inner;
            let mut table = Table::new(true, c.max_sessions, c.accept_backlog);
            let (burst, per_second) = c.sessions_per_source;
            table.set_source_rate(burst, per_second);
            table.set_migration(c.migration);
            Self {
                table,
                config: config.clone(),
            }
        }

        /// Routes an opened datagram (`plain`; `sealed` the bytes as
        /// received, for the replay fingerprint) from `from`.
        pub fn route(
            &mut self,
            from: SocketAddr,
            plain: &[u8],
            sealed: &[u8],
            now: Duration,
            backlog: usize,
        ) -> Route {
            let inbound = match Inbound::parse(plain) {
                Ok(i) => i,
                Err(r) => return Route::Drop(format!("{r:?}")),
            };
            let print = || {
                use std::hash::{DefaultHasher, Hash, Hasher};
                let mut h = DefaultHasher::new();
                sealed.hash(&mut h);
                h.finish()
            };
            let value = |t: &Table<usize>, id| t.get(id).copied().unwrap_or(usize::MAX);
            // One shard: nothing is forwarded.
            match self
                .table
                .route(from, &inbound, now, || backlog, print, |_| false)
            {
                table::Route::Deliver(id) => Route::Deliver(Session(id), value(&self.table, id)),
                table::Route::Migrate(id) => Route::Migrate(Session(id), value(&self.table, id)),
                table::Route::Accept {
                    conv,
                    replaces: None,
                    displaces: None,
                    evicts: None,
                } => Route::Accept(conv),
                table::Route::Accept { .. } => {
                    Route::Drop("a takeover or an eviction (not modelled)".into())
                }
                table::Route::Drop(r) => Route::Drop(format!("{r:?}")),
                table::Route::Forwarded => Route::Drop("forwarded (one shard: never)".into()),
            }
        }

        /// The `Conn` the driver builds for an accepted conversation, and
        /// its entry (`value` names it) for `peer`.
        pub fn accept(
            &mut self,
            peer: SocketAddr,
            conv: u32,
            now: Duration,
            value: usize,
        ) -> Option<(Session, Conn)> {
            let conn = super::listener_conn(conv, self.config.inner.clone(), now)?;
            let id = self.table.insert(peer, conv, false, |_| value);
            Some((Session(id), conn))
        }

        /// After input: the session's peer proved it receives. True when
        /// it just did: the driver hands it to `accept` now.
        pub fn set_proven(&mut self, s: Session, conn: &Conn, now: Duration) -> bool {
            conn.is_proven() && self.table.set_proven(s.0, now)
        }

        /// [`from_elsewhere`](super::from_elsewhere) on this table.
        pub fn from_elsewhere(
            &mut self,
            s: Session,
            conn: &mut Conn,
            from: SocketAddr,
            plain: &[u8],
            wire: usize,
            now: Duration,
        ) -> Verdict {
            match super::from_elsewhere(&mut self.table, s.0, conn, from, plain, wire, now) {
                super::Verdict::Stale => Verdict::Stale,
                super::Verdict::Moved { old, new } => Verdict::Moved(old, new),
                super::Verdict::Candidate { again } => Verdict::Candidate(again),
                super::Verdict::Nudge => Verdict::Nudge,
            }
        }

        /// [`probe`](super::probe): the probe's length at
        /// `slot[header_len()..]` and its destination.
        pub fn probe(
            &mut self,
            s: Session,
            conn: &mut Conn,
            now: Duration,
            again: bool,
            slot: &mut [u8],
        ) -> Option<(usize, SocketAddr)> {
            let to = super::candidate_addr(&self.table, s.0)?;
            let t = super::probe(&mut self.table, s.0, conn, now, again, slot)?;
            Some((t.len, to))
        }

        /// Where the session's datagrams go now (the driver sends to it).
        #[must_use]
        pub fn peer(&self, s: Session) -> Option<SocketAddr> {
            self.table.peer(s.0)
        }
    }
}
