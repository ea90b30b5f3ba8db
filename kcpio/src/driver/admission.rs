//! Admission, sans-IO: whether a validated conversation opener gets a
//! session, decided before any state for it exists.
//!
//! The routing table ([`Table`](super::table::Table)) checks that a new
//! conversation's first packet is an opener and parses; then it asks
//! [`Admission::admit`], the one place the rules live, in this order:
//!
//! | rule | refusal | memory (bound) |
//! |---|---|---|
//! | the same (peer, conv) closed less than [`TOMBSTONE_TTL`] ago | `Tombstoned` | tombstones ([`MAX_TOMBSTONES`], oldest forgotten first) |
//! | the same datagram opened a session within [`REPLAY_HORIZON`], from any address | `Replay` | keyed 64-bit fingerprints ([`MAX_REPLAY`], oldest first) |
//! | a session of the same conv proved its peer receives within [`REPLAY_HORIZON`] (a replay of a conversation's other datagrams, whose replayed answers would prove it again) | `Replay` | convs ([`MAX_REPLAY`], oldest first) |
//! | the session cap, unless the oldest session that never proved its return path can be evicted (once it has had time to prove itself, or for the retransmitted opener of a peer refused so) | `SessionCap` | the unproven queue (at most 2 × sessions + 64 ids), refused openers ([`MAX_REFUSED`], oldest first) |
//! | the accept backlog is full: `accept_backlog` proven sessions wait for `accept` | `Backlog` | (the backlog's own bound) |
//! | the source IP's token bucket (burst, then per second) | `RateLimited` | buckets ([`MAX_RATE_SOURCES`], oldest first) |
//!
//! A session joins the accept backlog only once its peer proved it
//! receives ([`Table::set_proven`](super::table::Table::set_proven)); until
//! then it waits in the table, under the session cap and its eviction rule.
//! So forged openers, which never prove, never fill the backlog (nor reach
//! `accept`), however slowly the application accepts: a flood of them
//! competes with a real client only at the cap, where a real client's
//! retransmitted opener evicts. A session admitted while the backlog had
//! room that proves once it is full still joins it (its peer is real, and
//! was admitted), so the backlog may exceed `accept_backlog` by the
//! sessions that were unproven when it filled, within the session cap.
//!
//! Each memory is a [`BoundedMap`] keyed by what the peer sends, hashed
//! under random keys. Time is a `Duration` since the driver's epoch (one
//! epoch for all the sockets of a listener); nothing here reads a clock.
//!
//! A listener's `SO_REUSEPORT` sockets (shards) each have their own table
//! and [`Admission`], and share one [`Limits`]: the session count the cap
//! applies to (an atomic, reserved before a session is made, so the cap
//! is exact across shards), and the memories a peer could dodge by
//! reaching another shard from another port (the replay fingerprints and
//! the per-source buckets), behind one mutex taken only for a would-be new
//! session, never for a session's datagrams. Tombstones and the unproven
//! queue stay per shard: a (peer address, conv) always reaches the same
//! shard, and a shard evicts only its own sessions.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::bounded::BoundedMap;
use super::slot::{Refusal, SessionId};

/// How long a closed (peer address, conv) keeps late datagrams from
/// creating a new session.
pub(crate) const TOMBSTONE_TTL: Duration = Duration::from_secs(60);
/// Tombstones kept at most (about 9 MiB when full); the oldest go first.
pub(crate) const MAX_TOMBSTONES: usize = 65_536;
/// How long the fingerprint of a datagram that opened a session refuses
/// the same datagram again, from any address.
pub(crate) const REPLAY_HORIZON: Duration = Duration::from_secs(15 * 60);
/// Fingerprints kept at most (with their expiry and order: about 4 MiB
/// when full); the oldest go first, so under a sustained flood of openers
/// the horizon shrinks to the time 65,536 openers take.
pub(crate) const MAX_REPLAY: usize = 65_536;
/// Source addresses whose buckets are remembered (about 7 MiB when full);
/// the least recently created go first (a forgotten address has a full
/// bucket again).
pub(crate) const MAX_RATE_SOURCES: usize = 65_536;

/// Openers that must reach the cap check after an unproven session was
/// admitted before it may be evicted for a newcomer, per session of the
/// cap (12,288 at the default cap of 4,096), per 4 MiB of the socket's
/// receive buffer ([`Admission::set_recv_buffer`]). Its peer's proof comes
/// back behind whatever the socket queued meanwhile (a 4 MiB receive
/// buffer holds about 10,000 small datagrams), so a session evicted after
/// fewer openers could not have proved itself, and a flood that keeps the
/// queue full would evict every real client. Refusing the newcomer instead
/// is cheap, so the driver also drains a flood faster; a real client whose
/// opener is refused retransmits it.
const EVICT_AFTER_PER_SESSION: u64 = 3;

/// (peer, conv) of openers refused because the oldest unproven session
/// could not be evicted yet, remembered (about 4 MiB when full, oldest
/// first) so that the peer's retransmitted opener may evict it: a real
/// client retransmits its opener, a flood of one-shot forged openers does
/// not.
pub(crate) const MAX_REFUSED: usize = 65_536;

/// A source address's session-creation allowance (a token bucket in
/// thousandths of a session).
#[derive(Clone, Copy, Debug)]
struct Bucket {
    milli: u64,
    at: Duration,
}

/// What the shards of one listener share: the session count and the
/// memories keyed by what any shard may see (see the module's text).
pub(crate) struct Limits {
    /// Sessions in all the shards' tables, plus the ones admitted and not
    /// yet inserted.
    live: AtomicUsize,
    max_sessions: usize,
    memo: Mutex<Memo>,
}

/// The shared memories, under [`Limits`]'s lock.
struct Memo {
    /// Fingerprints of the datagrams that opened sessions, and until when.
    replay: BoundedMap<u64, Duration>,
    /// Convs of sessions whose peers proved they receive, and until when.
    proven: BoundedMap<u32, Duration>,
    /// Session creations per source address.
    sources: BoundedMap<IpAddr, Bucket>,
    /// Sessions a source IP may open at once, and per second after that.
    rate_burst: u32,
    rate_per_sec: u32,
}

impl Memo {
    /// One session creation from `ip`, if its bucket has a token.
    fn take_token(&mut self, ip: IpAddr, now: Duration) -> bool {
        const ONE: u64 = 1000;
        let full = u64::from(self.rate_burst) * ONE;
        let b = match self.sources.get_mut(&ip) {
            Some(b) => b,
            None => self.sources.insert(
                ip,
                Bucket {
                    milli: full,
                    at: now,
                },
            ),
        };
        let elapsed = now.saturating_sub(b.at).as_millis() as u64;
        b.milli = (b.milli + elapsed.saturating_mul(u64::from(self.rate_per_sec))).min(full);
        b.at = now;
        if b.milli < ONE {
            return false;
        }
        b.milli -= ONE;
        true
    }
}

impl Limits {
    /// At most `max_sessions` sessions; a source IP opens `rate_burst`
    /// sessions at once, then `rate_per_sec` per second.
    pub(crate) fn new(max_sessions: usize, rate_burst: u32, rate_per_sec: u32) -> Arc<Self> {
        Arc::new(Self {
            live: AtomicUsize::new(0),
            max_sessions,
            memo: Mutex::new(Memo {
                replay: BoundedMap::new(MAX_REPLAY),
                proven: BoundedMap::new(MAX_REPLAY),
                sources: BoundedMap::new(MAX_RATE_SOURCES),
                rate_burst,
                rate_per_sec,
            }),
        })
    }

    /// Sessions counted against the cap now (all shards).
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    fn memo(&self) -> MutexGuard<'_, Memo> {
        self.memo
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reserves a place under the cap; false when it is full.
    fn reserve(&self) -> bool {
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_sessions).then_some(n + 1)
            })
            .is_ok()
    }
}

/// The admission state of one socket's table: its memories, the unproven
/// queue and the limits shared with the listener's other sockets.
pub(crate) struct Admission {
    /// (peer, conv) of recently closed proven sessions, and until when.
    tombstones: BoundedMap<(SocketAddr, u32), Duration>,
    /// The session count and the memories shared by a listener's shards.
    limits: Arc<Limits>,
    /// Places reserved under the cap by [`admit`](Self::admit) whose
    /// sessions are not inserted yet.
    reserved: usize,
    /// Sessions that have not proved they receive, oldest first, each with
    /// the count of openers seen when it was admitted (ids of proven or
    /// removed sessions are skipped lazily).
    unproven: VecDeque<(SessionId, u64)>,
    /// Openers that reached the session cap's check.
    openers: u64,
    /// (peer, conv) of openers refused while the oldest unproven session
    /// was too young to evict.
    refused: BoundedMap<(SocketAddr, u32), ()>,
    /// Openers that must follow an unproven session before it may be
    /// evicted.
    evict_after: u64,
    max_sessions: usize,
    backlog_cap: usize,
}

impl Admission {
    /// One shard's admission under a listener's shared `limits`.
    pub(crate) fn with_limits(limits: Arc<Limits>, backlog_cap: usize) -> Self {
        let max_sessions = limits.max_sessions;
        Self {
            tombstones: BoundedMap::new(MAX_TOMBSTONES),
            limits,
            reserved: 0,
            unproven: VecDeque::new(),
            openers: 0,
            refused: BoundedMap::new(MAX_REFUSED),
            evict_after: EVICT_AFTER_PER_SESSION.saturating_mul(max_sessions as u64),
            max_sessions,
            backlog_cap,
        }
    }

    /// The receive buffer this shard's socket was granted, in bytes: the
    /// eviction horizon is `EVICT_AFTER_PER_SESSION` × the cap per 4 MiB
    /// of it (rounded up), as a larger buffer queues more openers ahead of
    /// a peer's proof.
    pub(crate) fn set_recv_buffer(&mut self, bytes: usize) {
        let per_4mib = bytes.div_ceil(crate::config::DEFAULT_RECV_BUFFER).max(1) as u64;
        self.evict_after = EVICT_AFTER_PER_SESSION
            .saturating_mul(self.max_sessions as u64)
            .saturating_mul(per_4mib);
    }

    /// Sessions one source IP address may open at once (`burst`), and per
    /// second after that (for every shard sharing the limits).
    pub(crate) fn set_source_rate(&mut self, burst: u32, per_sec: u32) {
        let mut memo = self.limits.memo();
        memo.rate_burst = burst;
        memo.rate_per_sec = per_sec;
    }

    /// A session joined the table: it takes a place reserved by `admit`,
    /// or (a client's session, a table without admission) a new one.
    pub(crate) fn inserted(&mut self) {
        if self.reserved > 0 {
            self.reserved -= 1;
        } else {
            self.limits.live.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A session left the table: its place under the cap is free.
    pub(crate) fn removed(&self) {
        self.limits.live.fetch_sub(1, Ordering::AcqRel);
    }

    /// May a validated conversation opener from `peer` get a session? The
    /// rules in the module's order, each refusal a [`Refusal`] with its own
    /// counter (the opener rule itself is the caller's):
    ///
    /// 1. a tombstone of the same (peer, conv) refuses the retransmitted
    ///    opener of a conversation closed less than `TOMBSTONE_TTL` ago;
    /// 2. a datagram that opened a session within `REPLAY_HORIZON` (the
    ///    last `MAX_REPLAY` of them) is a replay, from any address; so is
    ///    an opener of a conv whose session proved its peer receives
    ///    within it ([`proven`](Self::proven)): a replay of another of
    ///    that conversation's datagrams that looks like an opener (a
    ///    retransmitted probe, a first PUSH after it), which replayed
    ///    answers would prove again and hand to `accept`;
    /// 3. the session cap (the sessions of every shard sharing the
    ///    limits; a takeover, `replaces`, frees its slot): when it is
    ///    reached, the oldest session that
    ///    never proved it receives is evicted for the newcomer, so forged
    ///    openers cannot hold the table, but only once
    ///    `EVICT_AFTER_PER_SESSION` × the cap openers have come since its
    ///    own (its proof could not have been read before), else the
    ///    newcomer is refused and remembered: its retransmitted opener
    ///    (same peer and conv) evicts the oldest unproven session at once;
    /// 4. the accept backlog (`backlog()`, asked only here): the proven
    ///    sessions waiting for `accept` (an unproven session waits in the
    ///    table and joins the backlog when it proves, full or not);
    /// 5. the source address's creation rate (a burst, then a rate per
    ///    second), charged last so refused openers cost nothing.
    ///
    /// `fingerprint()` is a keyed hash of the datagram as received, asked
    /// once the tombstone passed; `is_unproven` tells a live unproven
    /// session's id from a stale one. On success the fingerprint is
    /// remembered, a place under the cap is reserved for the new session
    /// (the next [`inserted`](Self::inserted) takes it), and the evicted
    /// session (if any) is returned for the driver to remove. The shared
    /// memories are locked once, for the checks after the tombstone.
    #[expect(
        clippy::too_many_arguments,
        reason = "the opener's facts and the table's, each asked lazily"
    )]
    pub(crate) fn admit(
        &mut self,
        peer: SocketAddr,
        conv: u32,
        replaces: Option<SessionId>,
        now: Duration,
        is_unproven: impl Fn(SessionId) -> bool,
        backlog: impl FnOnce() -> usize,
        fingerprint: impl FnOnce() -> u64,
    ) -> Result<Option<SessionId>, Refusal> {
        // Expiry is read from the value: a key inserted again keeps its
        // first place in the order, so `expire` may stop before it.
        let unexpired = |until: Option<&Duration>| until.is_some_and(|&u| u > now);
        self.tombstones.expire(|&until| until <= now);
        if unexpired(self.tombstones.get(&(peer, conv))) {
            return Err(Refusal::Tombstoned);
        }
        let limits = self.limits.clone();
        let mut memo = limits.memo();
        memo.replay.expire(|&until| until <= now);
        memo.replay.make_room();
        memo.proven.expire(|&until| until <= now);
        if unexpired(memo.proven.get(&conv)) {
            return Err(Refusal::Replay);
        }
        let print = fingerprint();
        if memo.replay.contains_key(&print) {
            return Err(Refusal::Replay);
        }
        let mut evicts = None;
        self.openers += 1;
        let live = limits.live();
        if live.saturating_sub(usize::from(replaces.is_some())) >= self.max_sessions {
            let Some((id, seen)) = self
                .oldest_unproven(is_unproven)
                .filter(|&(id, _)| Some(id) != replaces)
            else {
                return Err(Refusal::SessionCap);
            };
            let retry = self.refused.contains_key(&(peer, conv));
            if self.openers - seen <= self.evict_after && !retry {
                self.refused.insert((peer, conv), ());
                return Err(Refusal::SessionCap);
            }
            evicts = Some(id);
        }
        if backlog() >= self.backlog_cap {
            return Err(Refusal::Backlog);
        }
        // A takeover or an eviction frees the place its newcomer takes;
        // otherwise reserve one (another shard may have taken the last).
        if replaces.is_some() || evicts.is_some() {
            limits.live.fetch_add(1, Ordering::AcqRel);
        } else if !limits.reserve() {
            return Err(Refusal::SessionCap);
        }
        if !memo.take_token(peer.ip(), now) {
            limits.live.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::RateLimited);
        }
        memo.replay.insert(print, now + REPLAY_HORIZON);
        self.reserved += 1;
        Ok(evicts)
    }

    /// A session that must prove its return path joined the table;
    /// `unproven_live` counts such sessions now, and `is_unproven` tells
    /// which queued ids still are (the rest are dropped when they pile up).
    pub(crate) fn unproven_added(
        &mut self,
        id: SessionId,
        unproven_live: usize,
        is_unproven: impl Fn(SessionId) -> bool,
    ) {
        self.unproven.push_back((id, self.openers));
        if self.unproven.len() > 2 * unproven_live + 64 {
            self.unproven.retain(|&(id, _)| is_unproven(id));
        }
    }

    /// A session of `conv` proved at `now` that its peer receives: no
    /// opener of `conv` opens another until `now + REPLAY_HORIZON` (the
    /// last `MAX_REPLAY` such convs, shared by the listener's shards). A
    /// new client that drew it (one chance in 65,536 at worst) is refused
    /// as a replay until it dials again with another.
    pub(crate) fn proven(&self, conv: u32, now: Duration) {
        let mut memo = self.limits.memo();
        memo.proven.make_room();
        memo.proven.insert(conv, now + REPLAY_HORIZON);
    }

    /// A proven session for (`peer`, `conv`) closed at `now`: its late
    /// datagrams open nothing until `now + TOMBSTONE_TTL`.
    pub(crate) fn closed(&mut self, peer: SocketAddr, conv: u32, now: Duration) {
        self.tombstones.insert((peer, conv), now + TOMBSTONE_TTL);
    }

    /// The oldest session that has not proved it receives, and the count
    /// of openers when it was admitted.
    fn oldest_unproven(
        &mut self,
        is_unproven: impl Fn(SessionId) -> bool,
    ) -> Option<(SessionId, u64)> {
        while let Some(&(id, seen)) = self.unproven.front() {
            if is_unproven(id) {
                return Some((id, seen));
            }
            self.unproven.pop_front();
        }
        None
    }

    /// Fingerprints remembered.
    #[cfg(test)]
    pub(crate) fn replay_len(&self) -> usize {
        self.limits.memo().replay.len()
    }

    /// Every memory is within its bound (the unproven queue: insertion
    /// compacts it past 2 × unproven + 64, so it never exceeds
    /// 2 × max_sessions + 64, though it may exceed twice what is unproven
    /// now).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn check(&self) {
        assert!(self.unproven.len() <= 2 * self.max_sessions + 64);
        self.tombstones.check();
        self.refused.check();
        assert!(self.refused.len() <= MAX_REFUSED);
        let memo = self.limits.memo();
        memo.replay.check();
        memo.proven.check();
        memo.sources.check();
        assert!(self.tombstones.len() <= MAX_TOMBSTONES);
        assert!(memo.replay.len() <= MAX_REPLAY);
        assert!(memo.proven.len() <= MAX_REPLAY);
        assert!(memo.sources.len() <= MAX_RATE_SOURCES);
    }
}
