//! The session table of one socket, sans-IO: slots with generations, demux
//! by (peer address, conv), takeover, tombstones, admission and the
//! deadline heap.
//!
//! The driver asks one question per opened datagram,
//! [`Table::route`]`(peer, &inbound, now, backlog)`, and gets one
//! [`Route`]: deliver to a session, accept a new conversation (optionally
//! replacing the address's old one), or drop for a counted reason. A new
//! conversation's first packet is fully parsed ([`Inbound::validate`]) and
//! passes [admission](Table::admit) before the driver builds anything.
//!
//! Time is a `Duration` since the driver's epoch; nothing here reads a
//! clock, so the rules are unit-tested without sockets (`tests` below).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use crate::arq::segment::{self, Command, Segments};
use crate::fec::{self, PacketKind};

/// How long a closed (peer address, conv) keeps late datagrams from
/// creating a new session.
pub(crate) const TOMBSTONE_TTL: Duration = Duration::from_secs(60);
/// Tombstones kept at most; the oldest go first.
const MAX_TOMBSTONES: usize = 65_536;
/// Smallest plaintext worth looking at (kcp-go: `min(24, 8 + 4)`).
const MIN_PACKET: usize = 12;

/// A slot in the table, with a generation so a stale id never reaches a
/// newer session in the same slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SessionId {
    idx: u32,
    generation: u32,
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
}

/// The one routing decision per datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Hand it to this session.
    Deliver(SessionId),
    /// A new conversation passed validation and admission: create its
    /// session (after removing `replaces`, a takeover) and deliver.
    Accept {
        /// The new conversation.
        conv: u32,
        /// The address's old session, replaced by a restarted peer.
        replaces: Option<SessionId>,
    },
    /// Drop and count.
    Drop(Refusal),
}

/// The header fields routing needs from an opened datagram, read once
/// through `arq::segment`'s field offsets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inbound<'a> {
    /// The KCP bytes (empty for parity).
    kcp: &'a [u8],
    /// The first segment's conv and sn, when there are enough bytes (an
    /// out-of-band packet's conv, no sn).
    conv: Option<u32>,
    sn: Option<u32>,
    /// An out-of-band packet: delivered only to its conv's session.
    oob: bool,
}

fn le32(b: &[u8], at: std::ops::Range<usize>) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at)?.try_into().ok()?))
}

impl<'a> Inbound<'a> {
    /// Classifies an opened datagram's plaintext.
    ///
    /// # Errors
    ///
    /// [`Refusal::BadKcp`] when it is too short to be anything.
    pub(crate) fn parse(plain: &'a [u8]) -> Result<Self, Refusal> {
        if plain.len() < MIN_PACKET {
            return Err(Refusal::BadKcp);
        }
        let kind = fec::classify(plain);
        let kcp = match kind {
            PacketKind::Kcp => plain,
            // A data shard too short for a KCP packet (a group-deadline
            // filler, a guard shard) carries no conv, like parity: it goes
            // to the address's session, for its FEC decoder.
            PacketKind::Data => fec::data_payload(plain).unwrap_or_default(),
            PacketKind::Parity => &[],
            PacketKind::Oob => {
                return Ok(Self {
                    kcp: &[],
                    conv: fec::oob_payload(plain).map(|(conv, _)| conv),
                    sn: None,
                    oob: true,
                });
            }
        };
        Ok(Self {
            kcp,
            conv: le32(kcp, segment::field::CONV),
            sn: le32(kcp, segment::field::SN),
            oob: false,
        })
    }

    /// A new conversation's first packet must be KCP for `conv` all
    /// through (what the ARQ would accept), so garbage that happens to
    /// decrypt never creates a session.
    pub(crate) fn validate(&self, conv: u32) -> bool {
        let mut any = false;
        for seg in Segments::new(self.kcp) {
            match seg {
                Ok(s) if s.conv() == conv && Command::from_u8(s.cmd()).is_some() => any = true,
                _ => return false,
            }
        }
        any
    }
}

/// One session's entry.
struct Entry<S> {
    peer: SocketAddr,
    conv: u32,
    /// The deadline scheduled in the heap (lazy invalidation: a heap entry
    /// counts only while it equals this).
    deadline: Option<Duration>,
    session: S,
}

struct Slot<S> {
    generation: u32,
    entry: Option<Entry<S>>,
}

/// The sessions of one socket and their timers; `S` is the driver's
/// session handle (an `Arc`), opaque here.
pub(crate) struct Table<S> {
    slots: Vec<Slot<S>>,
    free: Vec<u32>,
    live: usize,
    by_addr: HashMap<SocketAddr, SessionId>,
    tombstones: HashMap<(SocketAddr, u32), Duration>,
    tomb_order: VecDeque<((SocketAddr, u32), Duration)>,
    heap: BinaryHeap<Reverse<(Duration, SessionId)>>,
    /// New conversations are accepted (a listener that is still open).
    accepting: bool,
    max_sessions: usize,
    backlog_cap: usize,
}

impl<S> Table<S> {
    /// An empty table; `accepting` for a listener.
    pub(crate) fn new(accepting: bool, max_sessions: usize, backlog_cap: usize) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            by_addr: HashMap::new(),
            tombstones: HashMap::new(),
            tomb_order: VecDeque::new(),
            heap: BinaryHeap::new(),
            accepting,
            max_sessions,
            backlog_cap,
        }
    }

    /// Sessions in the table.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Whether new conversations are still accepted.
    pub(crate) fn accepting(&self) -> bool {
        self.accepting
    }

    /// Refuse new conversations from now on (the listener is gone).
    pub(crate) fn stop_accepting(&mut self) {
        self.accepting = false;
    }

    fn entry(&self, id: SessionId) -> Option<&Entry<S>> {
        let slot = self.slots.get(id.idx as usize)?;
        (slot.generation == id.generation)
            .then_some(slot.entry.as_ref())
            .flatten()
    }

    fn entry_mut(&mut self, id: SessionId) -> Option<&mut Entry<S>> {
        let slot = self.slots.get_mut(id.idx as usize)?;
        (slot.generation == id.generation)
            .then_some(slot.entry.as_mut())
            .flatten()
    }

    /// The session of `id`, unless it was removed since.
    pub(crate) fn get(&self, id: SessionId) -> Option<&S> {
        self.entry(id).map(|e| &e.session)
    }

    /// Every session, for shutting down.
    pub(crate) fn sessions(&self) -> impl Iterator<Item = &S> {
        self.slots
            .iter()
            .filter_map(|s| s.entry.as_ref().map(|e| &e.session))
    }

    /// Registers a session for `peer`/`conv`; `make` builds it knowing its id.
    pub(crate) fn insert(
        &mut self,
        peer: SocketAddr,
        conv: u32,
        make: impl FnOnce(SessionId) -> S,
    ) -> SessionId {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.slots.get(idx as usize).map_or(0, |s| s.generation);
        let id = SessionId { idx, generation };
        if let Some(slot) = self.slots.get_mut(idx as usize) {
            slot.entry = Some(Entry {
                peer,
                conv,
                deadline: None,
                session: make(id),
            });
        }
        self.by_addr.insert(peer, id);
        self.live += 1;
        id
    }

    /// Takes a session out: its slot's generation moves on, its
    /// (peer, conv) is tombstoned until `now + TOMBSTONE_TTL`.
    pub(crate) fn remove(&mut self, id: SessionId, now: Duration) -> Option<S> {
        let slot = self.slots.get_mut(id.idx as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        let entry = slot.entry.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.idx);
        self.live -= 1;
        if self.by_addr.get(&entry.peer) == Some(&id) {
            self.by_addr.remove(&entry.peer);
        }
        self.add_tombstone(entry.peer, entry.conv, now);
        Some(entry.session)
    }

    // ------------------------------------------------------------ routing

    /// Where a datagram from `peer` goes. `backlog` reports the accept
    /// backlog's length; it is asked only for a new conversation.
    pub(crate) fn route(
        &mut self,
        peer: SocketAddr,
        inbound: &Inbound<'_>,
        now: Duration,
        backlog: impl FnOnce() -> usize,
    ) -> Route {
        if inbound.oob {
            // Unreliable datagrams reach an existing session of their conv
            // only: they never open, take over or close one.
            return match self.by_addr.get(&peer) {
                Some(&id) if self.entry(id).is_some_and(|e| inbound.conv == Some(e.conv)) => {
                    Route::Deliver(id)
                }
                _ => Route::Drop(Refusal::Oob),
            };
        }
        let Some(&id) = self.by_addr.get(&peer) else {
            return match inbound.conv {
                Some(conv) if self.accepting => {
                    self.admit_new(peer, conv, None, inbound, now, backlog)
                }
                _ => Route::Drop(Refusal::UnknownSession),
            };
        };
        let current = self.entry(id).map(|e| e.conv);
        match (inbound.conv, current) {
            (Some(conv), Some(cur)) if conv != cur => {
                // kcp-go: a new conversation at sn 0 from the same address
                // replaces the old one (a restarted client).
                if inbound.sn == Some(0) && self.accepting {
                    self.admit_new(peer, conv, Some(id), inbound, now, backlog)
                } else {
                    Route::Drop(Refusal::ConvMismatch)
                }
            }
            _ => Route::Deliver(id),
        }
    }

    fn admit_new(
        &mut self,
        peer: SocketAddr,
        conv: u32,
        replaces: Option<SessionId>,
        inbound: &Inbound<'_>,
        now: Duration,
        backlog: impl FnOnce() -> usize,
    ) -> Route {
        if !inbound.validate(conv) {
            return Route::Drop(Refusal::BadKcp);
        }
        match self.admit(peer, conv, replaces.is_some(), now, backlog) {
            Ok(()) => Route::Accept { conv, replaces },
            Err(r) => Route::Drop(r),
        }
    }

    /// Admission: may a validated new conversation from `peer` get a
    /// session? Every rule about who gets state lives here, in this order:
    ///
    /// 1. a tombstone of the same (peer, conv) refuses late packets of a
    ///    closed session;
    /// 2. the session cap (`max_sessions`; a takeover frees its slot);
    /// 3. the accept backlog (`accept_backlog`).
    ///
    /// Later rules plug in here, before any state exists: issue 12's
    /// connect probe, issue 13's admission by proof, anti-amplification
    /// (answer no more than the newcomer sent), replay refusal and
    /// per-source rate limits. Each refusal is a [`Refusal`] variant with
    /// its own counter.
    fn admit(
        &mut self,
        peer: SocketAddr,
        conv: u32,
        takeover: bool,
        now: Duration,
        backlog: impl FnOnce() -> usize,
    ) -> Result<(), Refusal> {
        self.prune_tombstones(now);
        if self.tombstones.contains_key(&(peer, conv)) {
            return Err(Refusal::Tombstoned);
        }
        if self.live - usize::from(takeover) >= self.max_sessions {
            return Err(Refusal::SessionCap);
        }
        if backlog() >= self.backlog_cap {
            return Err(Refusal::Backlog);
        }
        Ok(())
    }

    fn add_tombstone(&mut self, peer: SocketAddr, conv: u32, now: Duration) {
        let until = now + TOMBSTONE_TTL;
        while self.tomb_order.len() >= MAX_TOMBSTONES {
            self.pop_tombstone();
        }
        self.tombstones.insert((peer, conv), until);
        self.tomb_order.push_back(((peer, conv), until));
    }

    fn pop_tombstone(&mut self) {
        if let Some((key, until)) = self.tomb_order.pop_front() {
            if self.tombstones.get(&key) == Some(&until) {
                self.tombstones.remove(&key);
            }
        }
    }

    fn prune_tombstones(&mut self, now: Duration) {
        while let Some(&(_, until)) = self.tomb_order.front() {
            if until > now {
                break;
            }
            self.pop_tombstone();
        }
    }

    // ------------------------------------------------------------- timers

    /// Arms `id`'s timer at `at` (or disarms it). Returns whether it changed.
    pub(crate) fn schedule(&mut self, id: SessionId, at: Option<Duration>) -> bool {
        let Some(e) = self.entry_mut(id) else {
            return false;
        };
        if e.deadline == at {
            return false;
        }
        if let (Some(armed), Some(later)) = (e.deadline, at) {
            if armed < later {
                // The armed entry fires first and the driver re-arms then:
                // a deadline that only moves later (an idle timer restarted
                // by every datagram) costs no heap entry per packet.
                return false;
            }
        }
        e.deadline = at;
        if let Some(t) = at {
            self.heap.push(Reverse((t, id)));
        }
        true
    }

    /// The next session whose timer is due at `now`, its timer disarmed.
    pub(crate) fn pop_due(&mut self, now: Duration) -> Option<SessionId> {
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if at > now {
                break;
            }
            self.heap.pop();
            match self.entry_mut(id) {
                Some(e) if e.deadline == Some(at) => {
                    e.deadline = None;
                    return Some(id);
                }
                _ => continue, // stale entry
            }
        }
        // Lazy invalidation leaves stale entries; rebuild when they dominate.
        if self.heap.len() > 4 * self.live + 1024 {
            let mut entries = Vec::with_capacity(self.live);
            for (idx, slot) in self.slots.iter().enumerate() {
                if let Some(at) = slot.entry.as_ref().and_then(|e| e.deadline) {
                    let id = SessionId {
                        idx: idx as u32,
                        generation: slot.generation,
                    };
                    entries.push(Reverse((at, id)));
                }
            }
            self.heap = BinaryHeap::from(entries);
        }
        None
    }

    /// The earliest armed deadline (may be a stale entry's, which only
    /// wakes the driver early).
    pub(crate) fn next_deadline(&self) -> Option<Duration> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A KCP PUSH packet for `conv` at `sn`, FEC-framed when `fec`.
    fn push(conv: u32, sn: u32, fec: bool) -> Vec<u8> {
        let mut p = Vec::new();
        if fec {
            p.extend_from_slice(&7u32.to_le_bytes());
            p.extend_from_slice(&0xf1u16.to_le_bytes());
            p.extend_from_slice(&30u16.to_le_bytes());
        }
        let h = segment::Header {
            conv,
            cmd: 81,
            wnd: 32,
            sn,
            len: 4,
            ..Default::default()
        };
        let mut head = [0u8; segment::HEADER_LEN];
        h.encode(&mut head);
        p.extend_from_slice(&head);
        p.extend_from_slice(b"data");
        p
    }

    /// kcp-go's `SendOOB` framing of a 4-byte payload for `conv`.
    fn oob(conv: u32) -> Vec<u8> {
        let mut p = vec![0u8; 16];
        p[8..12].copy_from_slice(&conv.to_le_bytes());
        p[12..].copy_from_slice(b"ping");
        assert_eq!(fec::encode_oob(&mut p, 8), 16);
        p
    }

    fn route(t: &mut Table<u32>, peer: SocketAddr, packet: &[u8], now: u64) -> Route {
        match Inbound::parse(packet) {
            Ok(i) => t.route(peer, &i, Duration::from_secs(now), || 0),
            Err(r) => Route::Drop(r),
        }
    }

    /// Routes and, on `Accept`, does what the driver does.
    fn feed(t: &mut Table<u32>, peer: SocketAddr, packet: &[u8], now: u64) -> Route {
        let r = route(t, peer, packet, now);
        if let Route::Accept { conv, replaces } = r {
            if let Some(old) = replaces {
                t.remove(old, Duration::from_secs(now));
            }
            t.insert(peer, conv, |_| conv);
        }
        r
    }

    /// A listener table with conv 5 open from `addr(1)`, and its id.
    fn with_session(max_sessions: usize) -> (Table<u32>, SessionId) {
        let mut t = Table::new(true, max_sessions, 10);
        feed(&mut t, addr(1), &push(5, 0, false), 0);
        let Route::Deliver(id) = route(&mut t, addr(1), &push(5, 1, false), 0) else {
            panic!("the same conv delivers")
        };
        (t, id)
    }

    #[test]
    fn new_conversations_are_validated_then_admitted() {
        let mut t = Table::new(true, 2, 8);
        assert_eq!(
            route(&mut t, addr(1), &[0; 5], 0),
            Route::Drop(Refusal::BadKcp)
        );
        assert_eq!(
            route(&mut t, addr(1), &oob(5), 0),
            Route::Drop(Refusal::Oob),
            "an OOB packet never opens a session"
        );
        // Decrypts, but is not KCP all through: no session.
        let mut bad = push(5, 0, false);
        bad[segment::field::CMD] = 99;
        assert_eq!(
            route(&mut t, addr(1), &bad, 0),
            Route::Drop(Refusal::BadKcp)
        );
        let mut short = push(5, 0, false);
        short.truncate(26);
        assert_eq!(
            route(&mut t, addr(1), &short, 0),
            Route::Drop(Refusal::BadKcp)
        );
        assert_eq!(t.live(), 0);
        // FEC-framed or not.
        let a = feed(&mut t, addr(1), &push(5, 0, true), 0);
        assert_eq!(
            a,
            Route::Accept {
                conv: 5,
                replaces: None
            }
        );
        let b = feed(&mut t, addr(2), &push(6, 3, false), 0);
        assert_eq!(
            b,
            Route::Accept {
                conv: 6,
                replaces: None
            }
        );
        // Cap reached.
        assert_eq!(
            route(&mut t, addr(3), &push(7, 0, false), 0),
            Route::Drop(Refusal::SessionCap)
        );
        // Backlog full.
        let mut t2: Table<u32> = Table::new(true, 10, 1);
        let p = push(1, 0, false);
        let i = Inbound::parse(&p).unwrap();
        assert_eq!(
            t2.route(addr(1), &i, Duration::ZERO, || 1),
            Route::Drop(Refusal::Backlog)
        );
        // A client table accepts nothing.
        let mut c: Table<u32> = Table::new(false, 10, 10);
        assert_eq!(
            route(&mut c, addr(1), &push(1, 0, false), 0),
            Route::Drop(Refusal::UnknownSession)
        );
    }

    #[test]
    fn known_address_delivers_or_refuses_other_convs() {
        let (mut t, id) = with_session(10);
        assert_eq!(t.get(id), Some(&5));
        // Parity carries no conv: goes to the address's session.
        let mut parity = vec![0u8; 20];
        parity[4..6].copy_from_slice(&0xf2u16.to_le_bytes());
        assert_eq!(route(&mut t, addr(1), &parity, 0), Route::Deliver(id));
        // Another conv mid-stream is not a takeover.
        assert_eq!(
            route(&mut t, addr(1), &push(6, 4, false), 0),
            Route::Drop(Refusal::ConvMismatch)
        );
        // Parity from an unknown address.
        assert_eq!(
            route(&mut t, addr(9), &parity, 0),
            Route::Drop(Refusal::UnknownSession)
        );
    }

    #[test]
    fn oob_packets_reach_their_session_only() {
        let (mut t, id) = with_session(10);
        assert_eq!(route(&mut t, addr(1), &oob(5), 0), Route::Deliver(id));
        // Another conv, even one kcp-go would take over with: dropped, the
        // session stays.
        assert_eq!(
            route(&mut t, addr(1), &oob(6), 0),
            Route::Drop(Refusal::Oob)
        );
        assert_eq!(
            route(&mut t, addr(2), &oob(5), 0),
            Route::Drop(Refusal::Oob)
        );
        assert_eq!(t.live(), 1);
        assert_eq!(t.get(id), Some(&5));
        // A client table routes them too.
        let mut c: Table<u32> = Table::new(false, 10, 10);
        let cid = c.insert(addr(1), 9, |_| 9);
        assert_eq!(route(&mut c, addr(1), &oob(9), 0), Route::Deliver(cid));
    }

    #[test]
    fn takeover_replaces_and_tombstones_the_old_conversation() {
        let (mut t, old) = with_session(1);
        // A restarted client: new conv at sn 0, even at the cap (it frees a slot).
        let r = feed(&mut t, addr(1), &push(6, 0, false), 1);
        assert_eq!(
            r,
            Route::Accept {
                conv: 6,
                replaces: Some(old)
            }
        );
        assert_eq!(t.live(), 1);
        assert_eq!(t.get(old), None, "the old id is stale");
        // Late packets of the old conv: a mismatch, and its tombstone
        // refuses it as a new takeover.
        assert_eq!(
            route(&mut t, addr(1), &push(5, 3, false), 2),
            Route::Drop(Refusal::ConvMismatch)
        );
        assert_eq!(
            route(&mut t, addr(1), &push(5, 0, false), 2),
            Route::Drop(Refusal::Tombstoned)
        );
        t.stop_accepting();
        assert_eq!(
            route(&mut t, addr(1), &push(7, 0, false), 2),
            Route::Drop(Refusal::ConvMismatch)
        );
    }

    #[test]
    fn tombstones_refuse_until_they_expire() {
        let (mut t, id) = with_session(10);
        assert_eq!(t.remove(id, Duration::from_secs(10)), Some(5));
        assert_eq!(t.remove(id, Duration::from_secs(10)), None, "once");
        assert_eq!(
            route(&mut t, addr(1), &push(5, 2, false), 11),
            Route::Drop(Refusal::Tombstoned)
        );
        // Another conv from the same address is welcome.
        assert!(matches!(
            route(&mut t, addr(1), &push(6, 0, false), 11),
            Route::Accept { .. }
        ));
        let expiry = 10 + TOMBSTONE_TTL.as_secs();
        assert_eq!(
            route(&mut t, addr(1), &push(5, 2, false), expiry - 1),
            Route::Drop(Refusal::Tombstoned)
        );
        assert!(matches!(
            route(&mut t, addr(1), &push(5, 2, false), expiry),
            Route::Accept { .. }
        ));
    }

    #[test]
    fn generations_keep_stale_ids_out() {
        let mut t = Table::new(true, 10, 10);
        let a = t.insert(addr(1), 1, |_| 1);
        t.remove(a, Duration::ZERO);
        let b = t.insert(addr(2), 2, |_| 2);
        assert_eq!((a.idx, b.idx), (0, 0), "the slot is reused");
        assert_ne!(a, b);
        assert_eq!(t.get(a), None);
        assert_eq!(t.get(b), Some(&2));
        assert!(
            !t.schedule(a, Some(Duration::ZERO)),
            "a stale id arms nothing"
        );
        assert_eq!(t.remove(a, Duration::ZERO), None);
        assert_eq!(t.live(), 1);
    }

    #[test]
    fn deadline_heap_fires_in_order_and_skips_stale_entries() {
        let mut t = Table::new(true, 10, 10);
        let ms = Duration::from_millis;
        let a = t.insert(addr(1), 1, |_| 1);
        let b = t.insert(addr(2), 2, |_| 2);
        assert!(t.schedule(a, Some(ms(30))));
        assert!(!t.schedule(a, Some(ms(30))), "unchanged");
        assert!(t.schedule(b, Some(ms(20))));
        assert!(t.schedule(a, Some(ms(10)))); // the 30 ms entry is now stale
        assert_eq!(t.next_deadline(), Some(ms(10)));
        assert_eq!(t.pop_due(ms(5)), None);
        assert_eq!(t.pop_due(ms(40)), Some(a));
        assert_eq!(t.pop_due(ms(40)), Some(b));
        assert_eq!(t.pop_due(ms(40)), None, "the stale 30 ms entry is skipped");
        // A removed session's timer never fires.
        t.schedule(a, Some(ms(50)));
        t.remove(a, ms(45));
        assert_eq!(t.pop_due(ms(60)), None);
        // Disarmed.
        t.schedule(b, Some(ms(70)));
        t.schedule(b, None);
        assert_eq!(t.pop_due(ms(80)), None);
        // Moved later: no new heap entry; the armed one fires early and the
        // driver re-arms at the later time.
        assert!(t.schedule(b, Some(ms(100))));
        let entries = t.heap.len();
        for later in 101..1000 {
            assert!(!t.schedule(b, Some(ms(later))));
        }
        assert_eq!(t.heap.len(), entries, "no entry per later deadline");
        assert_eq!(t.pop_due(ms(100)), Some(b));
        assert!(t.schedule(b, Some(ms(999))));
        assert_eq!(t.pop_due(ms(998)), None);
        assert_eq!(t.pop_due(ms(999)), Some(b));
    }

    #[test]
    fn short_data_shards_reach_the_address_session() {
        // A group-deadline filler (12 bytes) and a guard shard (24 bytes):
        // data shards with no KCP packet, so no conv to check.
        let shard = |payload: &[u8]| {
            let mut p = 9u32.to_le_bytes().to_vec();
            p.extend_from_slice(&0xf1u16.to_le_bytes());
            p.extend_from_slice(&(2 + payload.len() as u16).to_le_bytes());
            p.extend_from_slice(payload);
            p
        };
        let filler = shard(&[0; 4]);
        let mut guard_payload = [0u8; 16];
        guard_payload[..4].copy_from_slice(&(!5u32).to_le_bytes());
        let guard = shard(&guard_payload);
        let (mut t, id) = with_session(4);
        for p in [&filler, &guard] {
            assert_eq!(route(&mut t, addr(1), p, 0), Route::Deliver(id));
            // From an address without a session: nothing to create one from.
            assert_eq!(
                route(&mut t, addr(2), p, 0),
                Route::Drop(Refusal::UnknownSession)
            );
        }
    }
}
