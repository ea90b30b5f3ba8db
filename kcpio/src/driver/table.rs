//! The session table of one socket, sans-IO: slots with generations, demux
//! by (peer address, conv), takeover and the deadline heap; who may open a
//! session is [`admission`](super::admission)'s.
//!
//! The driver asks one question per opened datagram,
//! [`Table::route`]`(peer, &inbound, now, backlog, fingerprint)`, and gets one
//! [`Route`]: deliver to a session, accept a new conversation (optionally
//! replacing the address's old one), or drop for a counted reason. A new
//! conversation's first packet is fully parsed ([`Inbound::validate`]) and
//! passes [admission](Admission::admit) before the driver builds anything.
//!
//! Time is a `Duration` since the driver's epoch; nothing here reads a
//! clock, so the rules are unit-tested without sockets (`tests` below).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;

use super::admission::{Admission, Limits};
use crate::arq::segment::{self, Command, Segments};
use crate::config::{DEFAULT_SOURCE_BURST as RATE_BURST, DEFAULT_SOURCE_RATE as RATE_PER_SEC};
use crate::fec::{self, PacketKind};

/// Smallest plaintext worth looking at (kcp-go: `min(24, 8 + 4)`).
const MIN_PACKET: usize = 12;

pub(crate) use super::slot::{Refusal, SessionId};

/// The one routing decision per datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Hand it to this session.
    Deliver(SessionId),
    /// A new conversation passed validation and admission: create its
    /// session (after removing `replaces`) and deliver.
    Accept {
        /// The new conversation.
        conv: u32,
        /// The address's session that never proved it receives, replaced
        /// at once by a restarted peer (or another forged opener).
        replaces: Option<SessionId>,
        /// The address's proven session, which the new one takes over only
        /// once its own peer proves it receives ([`Table::displace`],
        /// [`Table::settle_takeover`]): until then it keeps its datagrams,
        /// so a replayed opener cannot end it.
        displaces: Option<SessionId>,
        /// The oldest session that never proved it receives, evicted to
        /// make room at the session cap.
        evicts: Option<SessionId>,
    },
    /// A datagram of this session's conversation from another address
    /// (migration on): the driver decides with the session whether it is
    /// fresh ([`Table::candidate_seen`]), and whether it answers the path
    /// probe ([`Inbound::has_wins`], [`Table::migrate`]).
    Migrate(SessionId),
    /// Another shard of the listener took it: no session here holds its
    /// conv, the shard whose session does validates it.
    Forwarded,
    /// Drop and count.
    Drop(Refusal),
}

/// How many times the bytes received from a candidate address may be sent
/// to it before it answered (QUIC's anti-amplification factor).
pub(crate) const CANDIDATE_FACTOR: u64 = 3;
/// The shortest wait between two path probes to one candidate.
pub(crate) const PROBE_SPACING: Duration = Duration::from_millis(100);
/// How long the session's current address must have been silent before
/// the probe an answer counts for. A client that moved is silent at its old
/// address; one still heard there just before has not moved, and the
/// candidate is a copy of its datagrams sent from elsewhere (a mirror that
/// outruns it, whose copy of the client's answer to some other probe would
/// otherwise move the session to the mirror).
pub(crate) const HOME_SILENCE: Duration = Duration::from_millis(100);

/// An address a session's peer may have moved to: it sent an authentic
/// datagram newer than anything the session had received; not yet shown
/// to receive there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) addr: SocketAddr,
    /// Wire bytes received from it.
    pub(crate) received: u64,
    /// Wire bytes sent to it (path probes).
    pub(crate) sent: u64,
    /// When the last probe left.
    pub(crate) probed_at: Option<Duration>,
    /// Which candidate of the session this is (probe tags differ).
    pub(crate) nth: u32,
    /// The tag its probes carry, fixed at the first.
    pub(crate) tag: Option<u32>,
    /// Nothing fresh came from it yet ([`Table::stale_seen`]): nudged, but
    /// no answer counts until a fresh datagram, or the acknowledgement of
    /// its last nudge, comes from it.
    pub(crate) weak: bool,
    /// The `(sn, ts)` of its last path nudge (`Conn::poll_path_nudge`).
    pub(crate) nudge: Option<(u32, u32)>,
}

/// The header fields routing needs from an opened datagram, read once
/// through `arq::segment`'s field offsets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inbound<'a> {
    /// The KCP bytes (empty for parity).
    kcp: &'a [u8],
    /// The first segment's conv, when there are enough bytes.
    conv: Option<u32>,
    /// The first segment begins a conversation (see [`Inbound::is_opener`]).
    opener: bool,
    /// An out-of-band packet: delivered only to its conv's session.
    oob: bool,
}

/// How many sessions have a conv, and one of them.
#[derive(Clone, Copy, Debug)]
struct ConvIndex {
    id: SessionId,
    count: u32,
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
                    opener: false,
                    oob: true,
                });
            }
        };
        let cmd = kcp.get(segment::field::CMD).copied();
        let sn = le32(kcp, segment::field::SN);
        let una = le32(kcp, segment::field::UNA);
        let opener = una == Some(0)
            && match cmd.and_then(Command::from_u8) {
                Some(Command::Push) => sn == Some(0),
                Some(Command::Wask) => true,
                _ => false,
            };
        Ok(Self {
            kcp,
            conv: le32(kcp, segment::field::CONV),
            opener,
            oob: false,
        })
    }

    /// A conversation opener: the first segment is a PUSH with `sn == 0`
    /// and `una == 0` (what every kcp-go, C KCP and kcpio sender's first
    /// datagram carries), or a window probe (WASK, kcpio's connect probe)
    /// with `una == 0`. Nothing later in a conversation looks like one:
    /// once the peer received anything its `una` is above 0, and its own
    /// first segment was acknowledged before it could send sn 1 alone.
    pub(crate) fn is_opener(&self) -> bool {
        self.opener
    }

    /// The first segment's conv, when there are enough bytes.
    pub(crate) fn conv(&self) -> Option<u32> {
        self.conv
    }

    /// The packet carries a window update (WINS) among its segments: the
    /// answer to a path probe.
    pub(crate) fn has_wins(&self) -> bool {
        Segments::new(self.kcp).any(|s| {
            s.is_ok_and(|s| {
                Some(s.cmd()) == Some(Command::Wins as u8) && Some(s.conv()) == self.conv
            })
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
    /// The peer proved it receives (the driver reports it from `Conn`).
    proven: bool,
    /// An address the peer may have moved to, being validated.
    candidate: Option<Candidate>,
    /// When a datagram last came from `peer` (migration on).
    heard: Duration,
    /// Candidates so far.
    candidacies: u32,
    /// The proven session this one takes over from its address once its
    /// own peer proves it receives (a restarted client's, or a replayed
    /// opener's that never will).
    displaces: Option<SessionId>,
    session: S,
}

struct Slot<S> {
    generation: u32,
    entry: Option<Entry<S>>,
}

/// The entry `id` names in `slots`, unless it was removed since.
fn entry_in<S>(slots: &[Slot<S>], id: SessionId) -> Option<&Entry<S>> {
    let slot = slots.get(id.idx as usize)?;
    (slot.generation == id.generation)
        .then_some(slot.entry.as_ref())
        .flatten()
}

/// `id` names a session that has not proved it receives.
fn unproven_in<S>(slots: &[Slot<S>], id: SessionId) -> bool {
    entry_in(slots, id).is_some_and(|e| !e.proven)
}

/// Sessions by peer address, with the last address looked up
/// remembered: a receive batch is mostly one peer's datagrams, and
/// hashing a `SocketAddr` (SipHash, keyed) is the lookup's whole cost.
/// Every insertion and removal forgets the remembered one.
#[derive(Default)]
struct AddrIndex {
    map: HashMap<SocketAddr, SessionId>,
    last: Cell<Option<(SocketAddr, SessionId)>>,
}

impl AddrIndex {
    fn get(&self, peer: &SocketAddr) -> Option<SessionId> {
        if let Some((addr, id)) = self.last.get()
            && addr == *peer
        {
            return Some(id);
        }
        let id = *self.map.get(peer)?;
        self.last.set(Some((*peer, id)));
        Some(id)
    }

    fn contains_key(&self, peer: &SocketAddr) -> bool {
        self.get(peer).is_some()
    }

    fn insert(&mut self, peer: SocketAddr, id: SessionId) {
        self.last.set(None);
        self.map.insert(peer, id);
    }

    fn remove(&mut self, peer: &SocketAddr) {
        self.last.set(None);
        self.map.remove(peer);
    }
}

/// The sessions of one socket and their timers; `S` is the driver's
/// session handle (an `Arc`), opaque here.
pub(crate) struct Table<S> {
    slots: Vec<Slot<S>>,
    free: Vec<u32>,
    live: usize,
    by_addr: AddrIndex,
    /// Sessions by conv, for migration: a conv held by more than one
    /// session (two clients that drew the same) never migrates.
    by_conv: HashMap<u32, ConvIndex>,
    /// Sessions follow their peer to a validated new address.
    migration: bool,
    heap: BinaryHeap<Reverse<(Duration, SessionId)>>,
    /// Sessions that have not proved they receive.
    unproven_live: usize,
    /// New conversations are accepted (a listener that is still open).
    accepting: bool,
    /// Who may open a session (tombstones, replays, the cap, the backlog,
    /// per-source rates) and the unproven queue.
    admission: Admission,
}

impl<S> Table<S> {
    /// An empty table; `accepting` for a listener.
    pub(crate) fn new(accepting: bool, max_sessions: usize, backlog_cap: usize) -> Self {
        let limits = Limits::new(max_sessions, RATE_BURST, RATE_PER_SEC);
        Self::with_limits(accepting, limits, backlog_cap)
    }

    /// An empty table of one shard of a listener: the session cap, the
    /// replay memory and the per-source limits are `limits`, shared with
    /// the listener's other shards.
    pub(crate) fn with_limits(accepting: bool, limits: Arc<Limits>, backlog_cap: usize) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            by_addr: AddrIndex::default(),
            by_conv: HashMap::new(),
            migration: false,
            heap: BinaryHeap::new(),
            unproven_live: 0,
            accepting,
            admission: Admission::with_limits(limits, backlog_cap),
        }
    }

    /// The receive buffer the socket was granted (bytes): how many openers
    /// may queue ahead of a proof ([`Admission::set_recv_buffer`]).
    pub(crate) fn set_recv_buffer(&mut self, bytes: usize) {
        self.admission.set_recv_buffer(bytes);
    }

    /// Sessions one source IP address may open at once (`burst`), and per
    /// second after that (default [`RATE_BURST`], [`RATE_PER_SEC`]).
    pub(crate) fn set_source_rate(&mut self, burst: u32, per_sec: u32) {
        self.admission.set_source_rate(burst, per_sec);
    }

    /// Sessions follow their peer to a new address it proves it receives
    /// at (a listener with [`ConfigBuilder::migration`](crate::ConfigBuilder::migration)).
    pub(crate) fn set_migration(&mut self, on: bool) {
        self.migration = on;
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
    /// Returns the sessions whose peers have not proved they receive: they
    /// never reached the accept backlog and never will, so the driver
    /// removes them.
    pub(crate) fn stop_accepting(&mut self) -> Vec<SessionId> {
        self.accepting = false;
        let slots = self.slots.iter().zip(0u32..);
        slots
            .filter(|(s, _)| s.entry.as_ref().is_some_and(|e| !e.proven))
            .map(|(s, idx)| SessionId {
                idx,
                generation: s.generation,
            })
            .collect()
    }

    fn entry(&self, id: SessionId) -> Option<&Entry<S>> {
        entry_in(&self.slots, id)
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

    /// Sessions that have not proved they receive.
    #[cfg(test)]
    pub(crate) fn unproven(&self) -> usize {
        self.unproven_live
    }

    /// Records that `id`'s peer proved it receives at `now` (idempotent,
    /// O(1)). True when it just did on an accepting table: a listener's
    /// session joins the accept backlog now, and only now (see
    /// [`Admission::admit`]'s backlog rule), whether or not the backlog is
    /// full, as its peer is real. Its conv opens no other session for a
    /// while ([`Admission::proven`]).
    pub(crate) fn set_proven(&mut self, id: SessionId, now: Duration) -> bool {
        let accepting = self.accepting;
        if let Some(e) = self.entry_mut(id)
            && !e.proven
        {
            e.proven = true;
            let conv = e.conv;
            self.unproven_live -= 1;
            self.admission.proven(conv, now);
            return accepting;
        }
        false
    }

    /// Registers a session for `peer`/`conv`; `make` builds it knowing its
    /// id. `proven` is false for a listener's sessions, which count as
    /// unproven until [`set_proven`](Self::set_proven).
    pub(crate) fn insert(
        &mut self,
        peer: SocketAddr,
        conv: u32,
        proven: bool,
        make: impl FnOnce(SessionId) -> S,
    ) -> SessionId {
        self.admission.inserted();
        let id = self.place(peer, conv, proven, make);
        if !proven {
            self.unproven_live += 1;
            let slots = &self.slots;
            self.admission
                .unproven_added(id, self.unproven_live, |id| unproven_in(slots, id));
        }
        id
    }

    /// A slot, the address and conv indexes for a new entry.
    fn place(
        &mut self,
        peer: SocketAddr,
        conv: u32,
        proven: bool,
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
                proven,
                candidate: None,
                heard: Duration::ZERO,
                candidacies: 0,
                displaces: None,
                session: make(id),
            });
        }
        self.by_addr.insert(peer, id);
        self.by_conv
            .entry(conv)
            .and_modify(|c| c.count += 1)
            .or_insert(ConvIndex { id, count: 1 });
        self.live += 1;
        id
    }

    /// Takes a session out: its slot's generation moves on, its
    /// (peer, conv) is tombstoned until `now + TOMBSTONE_TTL` when its peer
    /// had proved it receives. (An unproven session leaves no tombstone: its
    /// peer, if real, never got an answer and still retransmits its opener,
    /// which may then open a session again.)
    pub(crate) fn remove(&mut self, id: SessionId, now: Duration) -> Option<S> {
        let entry = self.take_entry(id, |_| true)?;
        self.admission.removed();
        if entry.proven {
            self.admission.closed(entry.peer, entry.conv, now);
        } else {
            self.unproven_live -= 1;
        }
        Some(entry.session)
    }

    /// Takes `id`'s entry out of the slots and indexes, when `which`
    /// agrees.
    fn take_entry(&mut self, id: SessionId, which: impl Fn(&Entry<S>) -> bool) -> Option<Entry<S>> {
        let slot = self.slots.get_mut(id.idx as usize)?;
        if slot.generation != id.generation || !slot.entry.as_ref().is_some_and(which) {
            return None;
        }
        let entry = slot.entry.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.idx);
        self.live -= 1;
        if self.by_addr.get(&entry.peer) == Some(id) {
            self.by_addr.remove(&entry.peer);
            // A newcomer that never proved gives the address back to the
            // session it would have taken over.
            if let Some(old) = entry.displaces
                && self.entry(old).is_some_and(|o| o.peer == entry.peer)
            {
                self.by_addr.insert(entry.peer, old);
            }
        }
        self.forget_conv(id, entry.conv);
        Some(entry)
    }

    /// `new`, just inserted at `old`'s address, takes `old` over once its
    /// peer proves it receives ([`settle_takeover`](Self::settle_takeover));
    /// until then `old` keeps the datagrams of its conv from there.
    pub(crate) fn displace(&mut self, new: SessionId, old: SessionId) {
        if self.entry(old).is_some()
            && let Some(e) = self.entry_mut(new)
        {
            e.displaces = Some(old);
        }
    }

    /// The session `id` took over, once `id`'s peer proved it receives:
    /// the driver removes it (as kcp-go replaces a restarted client's old
    /// conversation). `None` otherwise, and from then on.
    pub(crate) fn settle_takeover(&mut self, id: SessionId) -> Option<SessionId> {
        let e = self.entry_mut(id).filter(|e| e.proven)?;
        let old = e.displaces.take()?;
        let peer = e.peer;
        // Not one that moved away meanwhile (its peer is elsewhere now).
        self.entry(old)
            .is_some_and(|o| o.peer == peer)
            .then_some(old)
    }

    /// `id`, which held `conv`, left the conv index.
    fn forget_conv(&mut self, id: SessionId, conv: u32) {
        if let Some(c) = self.by_conv.get_mut(&conv) {
            c.count -= 1;
            if c.count == 0 {
                self.by_conv.remove(&conv);
            } else if c.id == id {
                // Two sessions drew this conv (rare): find the other one.
                let other = self.slots.iter().enumerate().find_map(|(idx, s)| {
                    s.entry.as_ref().filter(|e| e.conv == conv)?;
                    Some(SessionId {
                        idx: idx as u32,
                        generation: s.generation,
                    })
                });
                if let (Some(o), Some(c)) = (other, self.by_conv.get_mut(&conv)) {
                    c.id = o;
                }
            }
        }
    }

    // ------------------------------------------------------------ routing

    /// Where a datagram from `peer` goes. `backlog` reports the accept
    /// backlog's length and `fingerprint` a keyed hash of the whole
    /// datagram as received (opened in place: a function of its sealed
    /// bytes); both are asked only for a would-be new conversation.
    /// `elsewhere` is offered, with migration on, a datagram from an
    /// unknown address whose conv no session here holds (perhaps one of
    /// another shard of the listener, whose peer moved to an address the
    /// kernel steers here); it returns whether it took it
    /// ([`Route::Forwarded`]). The address is looked up once.
    pub(crate) fn route(
        &mut self,
        peer: SocketAddr,
        inbound: &Inbound<'_>,
        now: Duration,
        backlog: impl FnOnce() -> usize,
        fingerprint: impl FnOnce() -> u64,
        elsewhere: impl FnOnce(u32) -> bool,
    ) -> Route {
        if inbound.oob {
            // Unreliable datagrams reach an existing session of their conv
            // only: they never open, take over or close one. From an
            // unknown address, with migration on, they go to their conv's
            // migrating session (as any datagram does), which takes the
            // address as a candidate only for a datagram-extension shard
            // it never had (`Conn::is_fresh`), moving once its path probe
            // is answered: a `--udp` tunnel's session carries nothing else
            // while its flows send. From the session's own address they
            // clear a candidate, as any datagram from home does.
            let Some(id) = self.by_addr.get(&peer) else {
                return self
                    .migrating(inbound)
                    .map_or(Route::Drop(Refusal::Oob), Route::Migrate);
            };
            let id = self.displaced_for(id, inbound).unwrap_or(id);
            let home = self
                .entry_mut(id)
                .filter(|e| inbound.conv == Some(e.conv))
                .map(|e| {
                    e.candidate = None;
                    e.heard = now;
                });
            return match home {
                Some(()) => Route::Deliver(id),
                None => Route::Drop(Refusal::Oob),
            };
        }
        let Some(id) = self.by_addr.get(&peer) else {
            if self.migration
                && let Some(conv) = inbound.conv
            {
                match self.by_conv.get(&conv) {
                    Some(c) => {
                        if let Some(id) = self.alone_proven(c, conv) {
                            return Route::Migrate(id);
                        }
                    }
                    None => {
                        if elsewhere(conv) {
                            return Route::Forwarded;
                        }
                    }
                }
            }
            return match inbound.conv {
                Some(conv) if self.accepting => {
                    self.admit_new(peer, conv, None, inbound, now, backlog, fingerprint)
                }
                _ => Route::Drop(Refusal::UnknownSession),
            };
        };
        // The datagrams of a session a newcomer would take over still
        // reach it until the newcomer's peer proves it receives.
        let id = self.displaced_for(id, inbound).unwrap_or(id);
        let current = self.entry_mut(id).map(|e| {
            // The peer still sends from its address: whatever sent from
            // the candidate (a copy relayed from elsewhere) does not move
            // it. Only its own conv's datagrams (or parity, which names
            // none) say so: another conv's, dropped below, are anyone's.
            if inbound.conv.is_none_or(|c| c == e.conv) {
                e.candidate = None;
                e.heard = now;
            }
            (e.conv, e.proven, e.displaces)
        });
        match (inbound.conv, current) {
            (Some(conv), Some((cur, proven, displaced))) if conv != cur => {
                // kcp-go: a new conversation from the same address replaces
                // the old one (a restarted client). Only an opener may, and
                // only once it passed everything a newcomer must; a proven
                // session is replaced only once the newcomer's peer proves
                // it receives (a replayed opener's never does).
                if !(inbound.opener && self.accepting) {
                    return Route::Drop(Refusal::ConvMismatch);
                }
                // An unproven one frees its place at once (admission counts
                // it so); a displaced one keeps it until it goes.
                let replaces = (!proven).then_some(id);
                let route =
                    self.admit_new(peer, conv, replaces, inbound, now, backlog, fingerprint);
                match route {
                    Route::Accept { conv, evicts, .. } => Route::Accept {
                        conv,
                        replaces,
                        displaces: if proven {
                            Some(id)
                        } else {
                            displaced.filter(|&d| self.entry(d).is_some())
                        },
                        evicts,
                    },
                    other => other,
                }
            }
            _ => Route::Deliver(id),
        }
    }

    /// The session that `id` (the session at the datagram's address)
    /// would take over, when the datagram is of its conv.
    fn displaced_for(&self, id: SessionId, inbound: &Inbound<'_>) -> Option<SessionId> {
        let e = self.entry(id)?;
        let old = e.displaces?;
        let o = self.entry(old)?;
        (inbound.conv == Some(o.conv) && o.peer == e.peer).then_some(old)
    }

    /// The proven session, alone with its conv, that a datagram from an
    /// unknown address belongs to, when migration is on. Openers too: a
    /// live conversation's datagram that looks like an opener (a client's
    /// first PUSH before it received anything has `sn` and `una` 0) must
    /// not open a second session for a replay of it; a new client that drew
    /// a live conv (one chance in 2^32 per pair) is refused as stale and
    /// dials again with another.
    fn migrating(&self, inbound: &Inbound<'_>) -> Option<SessionId> {
        if !self.migration {
            return None;
        }
        let conv = inbound.conv?;
        self.alone_proven(self.by_conv.get(&conv)?, conv)
    }

    /// The session `c` indexes for `conv`, when it is proven and alone with
    /// its conv (one that may migrate).
    fn alone_proven(&self, c: &ConvIndex, conv: u32) -> Option<SessionId> {
        let e = self.entry(c.id)?;
        (c.count == 1 && e.proven && e.conv == conv).then_some(c.id)
    }

    // ------------------------------------------------- across shards

    /// Where a datagram another shard forwarded goes: the session at its
    /// address, or the migrating session of its conv (never a new one).
    pub(crate) fn route_forwarded(&self, peer: SocketAddr, inbound: &Inbound<'_>) -> Route {
        let (mismatch, stale) = if inbound.oob {
            (Refusal::Oob, Refusal::Oob)
        } else {
            (Refusal::ConvMismatch, Refusal::Stale)
        };
        match self.by_addr.get(&peer) {
            Some(id) if self.entry(id).is_some_and(|e| inbound.conv == Some(e.conv)) => {
                Route::Deliver(id)
            }
            Some(_) => Route::Drop(mismatch),
            None => self
                .migrating(inbound)
                .map_or(Route::Drop(stale), Route::Migrate),
        }
    }

    /// Takes a proven session out to hand it to another shard: no
    /// tombstone, and its place under the shared cap stays taken (the
    /// other shard's [`adopt`](Self::adopt) keeps it).
    pub(crate) fn detach(&mut self, id: SessionId) -> Option<S> {
        self.take_entry(id, |e| e.proven).map(|e| e.session)
    }

    /// A proven session another shard detached, now at `peer`; `None`
    /// when a session of this table holds `peer` already (it keeps it).
    pub(crate) fn adopt(&mut self, peer: SocketAddr, conv: u32, session: S) -> Option<SessionId> {
        if self.by_addr.contains_key(&peer) {
            return None;
        }
        let id = self.place(peer, conv, true, |_| session);
        Some(id)
    }

    /// The place the detached session of a failed [`adopt`](Self::adopt)
    /// held under the shared cap is free.
    pub(crate) fn release_place(&self) {
        self.admission.removed();
    }

    // ---------------------------------------------------------- migration

    /// The session's peer address now (it changes when it migrates).
    pub(crate) fn peer(&self, id: SessionId) -> Option<SocketAddr> {
        self.entry(id).map(|e| e.peer)
    }

    /// `id`'s candidate address, if any.
    pub(crate) fn candidate(&self, id: SessionId) -> Option<Candidate> {
        self.entry(id).and_then(|e| e.candidate)
    }

    /// A datagram of `wire` bytes from `from` for `id`, which the session
    /// found `fresh` (newer than anything it received). Returns whether
    /// `from` is (now) the candidate: a fresh datagram makes its address
    /// the candidate (replacing another: the latest wins); a stale one
    /// from the candidate still counts toward its budget, and from any
    /// other address changes nothing.
    pub(crate) fn candidate_seen(
        &mut self,
        id: SessionId,
        from: SocketAddr,
        wire: usize,
        fresh: bool,
    ) -> bool {
        let Some(e) = self.entry_mut(id) else {
            return false;
        };
        match e.candidate.as_mut() {
            Some(c) if c.addr == from => {
                c.received = c.received.saturating_add(wire as u64);
                c.weak &= !fresh;
                true
            }
            _ if fresh => {
                Self::new_candidate(e, from, wire, false);
                true
            }
            _ => false,
        }
    }

    fn new_candidate(e: &mut Entry<S>, from: SocketAddr, wire: usize, weak: bool) {
        e.candidacies = e.candidacies.wrapping_add(1);
        e.candidate = Some(Candidate {
            addr: from,
            received: wire as u64,
            sent: 0,
            probed_at: None,
            nth: e.candidacies,
            tag: None,
            weak,
            nudge: None,
        });
    }

    /// A stale datagram of `wire` bytes from `from`, not the candidate,
    /// for `id`, whose peer cannot bind its answers (a kcp-go client):
    /// when the session's address has been silent for [`HOME_SILENCE`] and
    /// no fresh candidate is being validated, `from` becomes a weak
    /// candidate (replacing another weak one), to be probed within the
    /// same budget. Returns whether it did.
    ///
    /// Why: a kcp-go client whose address changed while everything it sent
    /// was acknowledged and the session's window was closed (its receiver
    /// full, as an echo whose replies stall makes it) sends nothing fresh:
    /// only window probes every 7 s or more, which carry nothing new. The
    /// probe it gets back carries the session's window, so it sends again,
    /// and that is fresh. A weak candidate's answers never move the
    /// session: a replayed WINS cannot, only the validation that follows
    /// a fresh datagram from there.
    pub(crate) fn stale_seen(
        &mut self,
        id: SessionId,
        from: SocketAddr,
        wire: usize,
        now: Duration,
    ) -> bool {
        let Some(e) = self.entry_mut(id) else {
            return false;
        };
        if e.candidate.is_some_and(|c| !c.weak) || now.saturating_sub(e.heard) < HOME_SILENCE {
            return false;
        }
        Self::new_candidate(e, from, wire, true);
        true
    }

    /// Whether a path probe of `wire` bytes may go to `id`'s candidate now:
    /// within [`CANDIDATE_FACTOR`] times what it sent, at most one per
    /// [`PROBE_SPACING`] (unless `again`: the last one was answered).
    /// Charges it when it may.
    pub(crate) fn probe_candidate(
        &mut self,
        id: SessionId,
        wire: usize,
        now: Duration,
        again: bool,
    ) -> bool {
        let Some(c) = self.entry_mut(id).and_then(|e| e.candidate.as_mut()) else {
            return false;
        };
        let wire = wire as u64;
        let spaced = again
            || c.probed_at
                .is_none_or(|t| now.saturating_sub(t) >= PROBE_SPACING);
        if !spaced || c.sent + wire > c.received.saturating_mul(CANDIDATE_FACTOR) {
            return false;
        }
        c.sent += wire;
        c.probed_at = Some(now);
        true
    }

    /// `id`'s weak candidate was sent the path nudge `nudge`.
    pub(crate) fn set_nudge(&mut self, id: SessionId, nudge: (u32, u32)) {
        if let Some(c) = self.entry_mut(id).and_then(|e| e.candidate.as_mut()) {
            c.nudge = Some(nudge);
        }
    }

    /// The tag of `id`'s candidate's probes: the first one's, else `tag`.
    pub(crate) fn probe_tag(&mut self, id: SessionId, tag: impl FnOnce(u32) -> u32) -> Option<u32> {
        let c = self.entry_mut(id)?.candidate.as_mut()?;
        Some(*c.tag.get_or_insert_with(|| tag(c.nth)))
    }

    /// `id`'s candidate answered the probe from its address: the session
    /// moves there (the table re-keyed; the old address tombstoned for its
    /// conv). With `home_silence` (an answer that cannot be bound to the
    /// probe: a kcp-go peer's plain WINS), not when the current address was
    /// heard less than [`HOME_SILENCE`] before the last probe (the answer
    /// is ignored; a later probe may count). Returns the old and new
    /// addresses.
    pub(crate) fn migrate(
        &mut self,
        id: SessionId,
        now: Duration,
        home_silence: bool,
    ) -> Option<(SocketAddr, SocketAddr)> {
        if self
            .candidate(id)
            .is_some_and(|c| self.by_addr.contains_key(&c.addr))
        {
            // A session opened at that address meanwhile: it keeps it.
            return self
                .entry_mut(id)
                .and_then(|e| e.candidate.take())
                .and(None);
        }
        let e = self.entry_mut(id)?;
        let candidate = e.candidate.filter(|c| !c.weak)?;
        let probed = candidate.probed_at?;
        if home_silence && probed.saturating_sub(e.heard) < HOME_SILENCE {
            return None;
        }
        let c = e.candidate.take()?;
        let old = std::mem::replace(&mut e.peer, c.addr);
        e.heard = now;
        let conv = e.conv;
        if self.by_addr.get(&old) == Some(id) {
            self.by_addr.remove(&old);
        }
        self.by_addr.insert(c.addr, id);
        self.admission.closed(old, conv, now);
        Some((old, c.addr))
    }

    #[allow(clippy::too_many_arguments)]
    fn admit_new(
        &mut self,
        peer: SocketAddr,
        conv: u32,
        replaces: Option<SessionId>,
        inbound: &Inbound<'_>,
        now: Duration,
        backlog: impl FnOnce() -> usize,
        fingerprint: impl FnOnce() -> u64,
    ) -> Route {
        if !inbound.opener {
            return Route::Drop(Refusal::NotOpener);
        }
        if !inbound.validate(conv) {
            return Route::Drop(Refusal::BadKcp);
        }
        let slots = &self.slots;
        let admitted = self.admission.admit(
            peer,
            conv,
            replaces,
            now,
            |id| unproven_in(slots, id),
            backlog,
            fingerprint,
        );
        match admitted {
            Ok(evicts) => Route::Accept {
                conv,
                replaces,
                displaces: None,
                evicts,
            },
            Err(r) => Route::Drop(r),
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
        if let (Some(armed), Some(later)) = (e.deadline, at)
            && armed < later
        {
            // The armed entry fires first and the driver re-arms then:
            // a deadline that only moves later (an idle timer restarted
            // by every datagram) costs no heap entry per packet.
            return false;
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

/// The session table's fuzz body (`kcpio::fuzzing::session_table`): an
/// arbitrary sequence of datagrams from a few addresses, clock jumps (up to
/// hours, so every horizon passes), proofs, removals and timers, with the
/// driver's part played as the driver plays it. After every step the
/// table's books must balance and every store must stay within its bound.
///
/// # Panics
///
/// Only when an invariant breaks (a bug).
#[cfg(any(test, fuzzing))]
pub(crate) fn fuzz(data: &[u8]) {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let Some((&cfg, mut rest)) = data.split_first() else {
        return;
    };
    let max_sessions = usize::from(cfg % 8) + 1;
    let backlog_cap = usize::from(cfg >> 3 & 7) + 1;
    let mut t: Table<u32> = Table::new(true, max_sessions, backlog_cap);
    t.set_migration(cfg & 0x40 != 0);
    let mut now = Duration::ZERO;
    let mut ids: Vec<SessionId> = Vec::new();
    let mut backlog = 0usize;
    let take = |n: usize, rest: &mut &[u8]| -> Vec<u8> {
        let (a, b) = rest.split_at(n.min(rest.len()));
        *rest = b;
        a.to_vec()
    };
    let mut steps = 0;
    while let [op, arg, tail @ ..] = rest {
        let (op, arg) = (*op, *arg);
        rest = tail;
        steps += 1;
        if steps > 4096 {
            break;
        }
        let pick = |ids: &[SessionId]| ids.get(usize::from(arg) % ids.len().max(1)).copied();
        match op % 8 {
            0..=2 => {
                let peer = SocketAddr::from(([127, 0, 0, arg & 7], 1000 + u16::from(arg >> 3 & 3)));
                let len = usize::from(op >> 3) * 4;
                let packet = take(len, &mut rest);
                let route = match Inbound::parse(&packet) {
                    Ok(i) => {
                        let print = || {
                            let mut h = DefaultHasher::new();
                            packet.hash(&mut h);
                            h.finish()
                        };
                        // Another shard takes it when the input says so.
                        t.route(peer, &i, now, || backlog, print, |_| arg & 32 == 32)
                    }
                    Err(r) => Route::Drop(r),
                };
                match route {
                    Route::Accept {
                        conv,
                        replaces,
                        displaces,
                        evicts,
                    } => {
                        assert!(Inbound::parse(&packet).is_ok_and(|i| i.is_opener()));
                        assert!(backlog < backlog_cap, "admitted at a full backlog");
                        for old in [replaces, evicts].into_iter().flatten() {
                            assert!(t.remove(old, now).is_some(), "a removable session");
                        }
                        // Unproven: it joins the backlog when it proves.
                        let id = t.insert(peer, conv, false, |_| conv);
                        if let Some(old) = displaces {
                            assert!(
                                t.entry(old).is_some_and(|o| o.proven),
                                "displaces a proven one"
                            );
                            t.displace(id, old);
                        }
                        ids.push(id);
                    }
                    Route::Deliver(id) => assert!(t.get(id).is_some()),
                    Route::Migrate(id) => {
                        // The driver's part: freshness is the session's
                        // verdict, played here by the input.
                        assert!(t.get(id).is_some());
                        let seen = t.candidate_seen(id, peer, packet.len(), arg & 1 == 1)
                            || (arg & 8 == 8 && t.stale_seen(id, peer, packet.len(), now));
                        if seen {
                            t.probe_candidate(id, 52, now, false);
                            if arg & 2 == 2 {
                                let weak = t.candidate(id).is_some_and(|c| c.weak);
                                let moved = t.migrate(id, now, arg & 4 == 4);
                                assert!(!(weak && moved.is_some()), "a weak candidate moved");
                            }
                        }
                        if let Some(c) = t.candidate(id) {
                            assert!(c.sent <= c.received * CANDIDATE_FACTOR);
                        }
                    }
                    Route::Forwarded => {
                        // Offered only what no session here could take.
                        let i = Inbound::parse(&packet).ok();
                        let conv = i.as_ref().and_then(|i| i.conv);
                        assert!(t.migration && !i.is_some_and(|i| i.oob));
                        assert!(!t.by_addr.contains_key(&peer), "the address is a session's");
                        assert!(conv.is_some_and(|c| !t.by_conv.contains_key(&c)));
                    }
                    Route::Drop(_) => {}
                }
            }
            3 => now += Duration::from_millis(u64::from(arg) * 37),
            4 => now += Duration::from_secs(u64::from(arg) * 60),
            5 if arg & 128 == 128 => backlog = backlog.saturating_sub(1), // accept
            5 => {
                if let Some(id) = pick(&ids) {
                    let was_unproven = unproven_in(&t.slots, id);
                    let joins = t.set_proven(id, now);
                    // Once per session, when it proves: the backlog's
                    // only way in, full or not.
                    assert_eq!(joins, was_unproven, "joins the backlog when it proves");
                    backlog += usize::from(joins);
                    // A takeover settles when the newcomer proves.
                    if let Some(old) = t.settle_takeover(id) {
                        assert!(t.remove(old, now).is_some(), "a removable session");
                    }
                }
            }
            6 => {
                if let Some(id) = pick(&ids) {
                    t.remove(id, now);
                }
            }
            _ => {
                if let Some(id) = pick(&ids) {
                    t.schedule(id, Some(now + Duration::from_millis(u64::from(arg))));
                }
                while t.pop_due(now).is_some() {}
            }
        }
        ids.retain(|&id| t.get(id).is_some());
        t.check(max_sessions);
    }
}

#[cfg(any(test, fuzzing))]
impl<S> Table<S> {
    /// The books balance and every store is within its bound.
    fn check(&self, max_sessions: usize) {
        let entries: Vec<_> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.entry.as_ref().map(|e| (i, s.generation, e)))
            .collect();
        assert_eq!(entries.len(), self.live);
        assert!(self.live <= max_sessions);
        assert_eq!(
            entries.iter().filter(|(_, _, e)| !e.proven).count(),
            self.unproven_live
        );
        // Every session is at its address, or displaced there by the
        // newcomer that holds it.
        let mut displaced = 0;
        for &(idx, generation, e) in &entries {
            let id = SessionId {
                idx: idx as u32,
                generation,
            };
            let at = self.by_addr.map.get(&e.peer).copied();
            if at != Some(id) {
                let by = at.and_then(|a| self.entry(a)).and_then(|a| a.displaces);
                assert_eq!(
                    by,
                    Some(id),
                    "a session neither at its address nor displaced"
                );
                displaced += 1;
            }
        }
        assert_eq!(self.by_addr.map.len() + displaced, self.live);
        if let Some((peer, id)) = self.by_addr.last.get() {
            assert_eq!(
                self.by_addr.map.get(&peer),
                Some(&id),
                "a stale remembered address"
            );
        }
        for (peer, id) in &self.by_addr.map {
            assert_eq!(self.entry(*id).map(|e| e.peer), Some(*peer));
        }
        self.admission.check();
        assert!(self.free.len() + self.live == self.slots.len());
        let convs: u32 = self.by_conv.values().map(|c| c.count).sum();
        assert_eq!(convs as usize, self.live);
        for (conv, c) in &self.by_conv {
            assert_eq!(self.entry(c.id).map(|e| e.conv), Some(*conv));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::admission::{MAX_REPLAY, REPLAY_HORIZON, TOMBSTONE_TTL};
    use std::hash::{DefaultHasher, Hash, Hasher};

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn ip(n: u32) -> SocketAddr {
        SocketAddr::from((std::net::Ipv4Addr::from(0x7f00_0000 | n), 4000))
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// A KCP packet: one segment `cmd` for `conv` at `sn` with `una`,
    /// FEC-framed when `fec`; `tag` varies the payload (as a fresh nonce
    /// would vary a sealed datagram).
    fn seg(cmd: u8, conv: u32, sn: u32, una: u32, fec: bool, tag: u8) -> Vec<u8> {
        let mut p = Vec::new();
        if fec {
            p.extend_from_slice(&7u32.to_le_bytes());
            p.extend_from_slice(&0xf1u16.to_le_bytes());
            p.extend_from_slice(&30u16.to_le_bytes());
        }
        let len = if cmd == 81 { 4 } else { 0 };
        let h = segment::Header {
            conv,
            cmd,
            wnd: 32,
            sn,
            una,
            ts: u32::from(tag),
            len,
            ..Default::default()
        };
        let mut head = [0u8; segment::HEADER_LEN];
        h.encode(&mut head);
        p.extend_from_slice(&head);
        if cmd == 81 {
            p.extend_from_slice(&[b'd', b'a', b't', tag]);
        }
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

    /// A PUSH (an opener at sn 0 and una 0).
    fn push(conv: u32, sn: u32, fec: bool) -> Vec<u8> {
        seg(81, conv, sn, 0, fec, 0)
    }

    fn print(packet: &[u8]) -> u64 {
        let mut h = DefaultHasher::new();
        packet.hash(&mut h);
        h.finish()
    }

    fn route_at(t: &mut Table<u32>, peer: SocketAddr, packet: &[u8], now: Duration) -> Route {
        match Inbound::parse(packet) {
            Ok(i) => t.route(peer, &i, now, || 0, || print(packet), |_| false),
            Err(r) => Route::Drop(r),
        }
    }

    fn route(t: &mut Table<u32>, peer: SocketAddr, packet: &[u8], now: u64) -> Route {
        route_at(t, peer, packet, secs(now))
    }

    /// Routes and, on `Accept`, does what the driver does; the new session
    /// is proven when `proven`.
    fn feed_as(
        t: &mut Table<u32>,
        peer: SocketAddr,
        packet: &[u8],
        now: Duration,
        proven: bool,
    ) -> Route {
        let r = route_at(t, peer, packet, now);
        if let Route::Accept {
            conv,
            replaces,
            displaces,
            evicts,
        } = r
        {
            for old in [replaces, evicts].into_iter().flatten() {
                t.remove(old, now);
            }
            let id = t.insert(peer, conv, proven, |_| conv);
            if let Some(old) = displaces {
                t.displace(id, old);
            }
            // A proven newcomer settles its takeover at once.
            if let Some(old) = t.settle_takeover(id) {
                t.remove(old, now);
            }
        }
        r
    }

    fn feed(t: &mut Table<u32>, peer: SocketAddr, packet: &[u8], now: u64) -> Route {
        feed_as(t, peer, packet, secs(now), true)
    }

    fn accept(conv: u32) -> Route {
        Route::Accept {
            conv,
            replaces: None,
            displaces: None,
            evicts: None,
        }
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
    fn openers_are_the_first_segments_of_conversations() {
        let opener = |p: &[u8]| Inbound::parse(p).map(|i| i.is_opener()).unwrap_or(false);
        // kcp-go / C KCP / kcpio: the first write's PUSH sn 0 una 0, alone,
        // FEC-framed, or followed by more segments.
        assert!(opener(&push(5, 0, false)));
        assert!(opener(&push(5, 0, true)));
        let mut several = push(5, 0, false);
        several.extend_from_slice(&seg(81, 5, 1, 0, false, 0));
        assert!(opener(&several));
        // kcpio's connect probe.
        assert!(opener(&seg(83, 5, 0, 0, false, 0)));
        // Anything later in a conversation.
        assert!(!opener(&seg(81, 5, 0, 1, false, 0)), "una moved");
        assert!(!opener(&seg(81, 5, 4, 0, false, 0)), "sn moved");
        assert!(!opener(&seg(82, 5, 0, 0, false, 0)), "an ACK");
        assert!(!opener(&seg(84, 5, 0, 0, false, 0)), "a WINS");
        assert!(!opener(&seg(83, 5, 0, 2, false, 0)), "a later WASK");
        assert!(!opener(&seg(99, 5, 0, 0, false, 0)), "no command");
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
        bad.extend_from_slice(&seg(99, 5, 1, 0, false, 0));
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
        // Not an opener: a late or forged packet opens nothing.
        assert_eq!(
            route(&mut t, addr(2), &push(6, 3, false), 0),
            Route::Drop(Refusal::NotOpener)
        );
        assert_eq!(t.live(), 0);
        // FEC-framed or not.
        assert_eq!(feed(&mut t, addr(1), &push(5, 0, true), 0), accept(5));
        assert_eq!(
            feed(&mut t, addr(2), &seg(83, 6, 0, 0, false, 0), 0),
            accept(6)
        );
        // Cap reached, every session proven.
        assert_eq!(
            route(&mut t, addr(3), &push(7, 0, false), 0),
            Route::Drop(Refusal::SessionCap)
        );
        // Backlog full.
        let mut t2: Table<u32> = Table::new(true, 10, 1);
        let p = push(1, 0, false);
        let i = Inbound::parse(&p).unwrap();
        assert_eq!(
            t2.route(addr(1), &i, Duration::ZERO, || 1, || 1, |_| false),
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

    /// A forged datagram from a live session's address, with
    /// another conv and sn 0 but no opener (or no valid KCP), leaves the
    /// session alone.
    #[test]
    fn takeover_by_a_forged_non_opener_is_refused() {
        let (mut t, id) = with_session(10);
        // The attack's 24-byte datagram: another conv, sn 0, no command.
        let forged = seg(99, 6, 0, 0, false, 0);
        assert_eq!(forged.len(), 24);
        assert_eq!(
            route(&mut t, addr(1), &forged, 1),
            Route::Drop(Refusal::ConvMismatch)
        );
        // sn 0 but una above 0: a packet from inside another conversation.
        assert_eq!(
            route(&mut t, addr(1), &seg(81, 6, 0, 3, false, 0), 1),
            Route::Drop(Refusal::ConvMismatch)
        );
        // An opener whose tail is not KCP is validated before anything.
        let mut half = push(6, 0, false);
        half.extend_from_slice(&seg(81, 7, 1, 0, false, 0));
        assert_eq!(
            route(&mut t, addr(1), &half, 1),
            Route::Drop(Refusal::BadKcp)
        );
        assert_eq!(
            route(&mut t, addr(1), &push(5, 2, false), 1),
            Route::Deliver(id)
        );
        assert_eq!(t.live(), 1);
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
        let cid = c.insert(addr(1), 9, true, |_| 9);
        assert_eq!(route(&mut c, addr(1), &oob(9), 0), Route::Deliver(cid));
    }

    /// kcp-go's takeover (a restarted client's new conv from the old
    /// one's address), held until the newcomer's peer proves it receives:
    /// until then the old session keeps its conv's datagrams, and a
    /// newcomer that never proves (a replayed opener) gives the address
    /// back when it goes. Once it proves, the old session goes, tombstoned.
    #[test]
    fn takeover_replaces_and_tombstones_the_old_conversation_once_the_newcomer_proves() {
        let (mut t, old) = with_session(2);
        let r = feed_as(&mut t, addr(1), &push(6, 0, false), secs(1), false);
        assert_eq!(
            r,
            Route::Accept {
                conv: 6,
                replaces: None,
                displaces: Some(old),
                evicts: None,
            }
        );
        t.check(2);
        assert_eq!(t.live(), 2);
        // The old conv's datagrams still reach the old session; the new
        // conv's the newcomer.
        assert_eq!(
            route(&mut t, addr(1), &push(5, 3, false), 1),
            Route::Deliver(old)
        );
        let Route::Deliver(new) = route(&mut t, addr(1), &push(6, 1, false), 1) else {
            panic!("the newcomer's conv delivers")
        };
        // A replayed opener's newcomer never proves: it goes (its proof
        // timeout), and the old session has its address back.
        assert_eq!(t.remove(new, secs(11)), Some(6));
        t.check(2);
        assert_eq!(
            route(&mut t, addr(1), &push(5, 4, false), 11),
            Route::Deliver(old)
        );
        // A restarted client's newcomer proves: the old session goes.
        let r = feed_as(&mut t, addr(1), &push(7, 0, false), secs(12), false);
        assert!(matches!(r, Route::Accept { displaces: Some(o), .. } if o == old));
        let Route::Deliver(new) = route(&mut t, addr(1), &push(7, 1, false), 12) else {
            panic!("the newcomer's conv delivers")
        };
        assert!(t.set_proven(new, Duration::ZERO));
        assert_eq!(t.settle_takeover(new), Some(old));
        assert_eq!(t.settle_takeover(new), None, "once");
        assert_eq!(t.remove(old, secs(12)), Some(5));
        t.check(2);
        assert_eq!(t.live(), 1);
        // Late packets of the old conv: a mismatch, and a retransmitted
        // opener of it is tombstoned.
        assert_eq!(
            route(&mut t, addr(1), &push(5, 3, false), 13),
            Route::Drop(Refusal::ConvMismatch)
        );
        assert_eq!(
            route(&mut t, addr(1), &seg(81, 5, 0, 0, false, 9), 13),
            Route::Drop(Refusal::Tombstoned)
        );
        t.stop_accepting();
        assert_eq!(
            route(&mut t, addr(1), &push(8, 0, false), 13),
            Route::Drop(Refusal::ConvMismatch)
        );
    }

    /// An unproven session at the address is replaced at once (it frees
    /// its place, even at the cap), and a newcomer replacing the newcomer
    /// of a pending takeover inherits it.
    #[test]
    fn an_unproven_session_is_replaced_at_once_and_a_pending_takeover_passes_on() {
        let mut t: Table<u32> = Table::new(true, 2, 10);
        feed_as(&mut t, addr(1), &push(5, 0, false), secs(0), false);
        let Route::Deliver(first) = route(&mut t, addr(1), &push(5, 1, false), 0) else {
            panic!()
        };
        let r = feed_as(&mut t, addr(1), &push(6, 0, false), secs(1), false);
        assert!(
            matches!(r, Route::Accept { replaces: Some(f), displaces: None, .. } if f == first),
            "{r:?}"
        );
        assert_eq!(t.live(), 1);
        let Route::Deliver(six) = route(&mut t, addr(1), &push(6, 1, false), 1) else {
            panic!()
        };
        assert!(t.set_proven(six, Duration::ZERO));
        // A takeover of the proven one is pending...
        let r = feed_as(&mut t, addr(1), &push(7, 0, false), secs(2), false);
        assert!(matches!(r, Route::Accept { displaces: Some(s), .. } if s == six));
        let Route::Deliver(seven) = route(&mut t, addr(1), &push(7, 1, false), 2) else {
            panic!()
        };
        // ...when another opener replaces its newcomer: the takeover is
        // the new one's.
        let r = feed_as(&mut t, addr(1), &push(8, 0, false), secs(3), false);
        assert_eq!(
            r,
            Route::Accept {
                conv: 8,
                replaces: Some(seven),
                displaces: Some(six),
                evicts: None,
            }
        );
        t.check(2);
        assert_eq!(
            route(&mut t, addr(1), &push(6, 2, false), 3),
            Route::Deliver(six)
        );
    }

    /// A conversation whose peer proved it receives opens no second
    /// session within the replay horizon, from any address: a replay of
    /// its other opener-shaped datagrams (a retransmitted probe, the first
    /// PUSH after it), which replayed answers would prove and hand to
    /// `accept`, is refused. (Only the one datagram that opened it was.)
    #[test]
    fn a_proven_conversation_is_not_opened_again_by_a_replay() {
        let mut t: Table<u32> = Table::new(true, 10, 10);
        feed_as(&mut t, addr(1), &push(5, 0, false), secs(0), false);
        let Route::Deliver(id) = route(&mut t, addr(1), &push(5, 1, false), 0) else {
            panic!()
        };
        assert!(t.set_proven(id, secs(0)));
        // While it lives (no migration): another address.
        let probe = seg(83, 5, 0, 0, false, 1);
        assert_eq!(
            route(&mut t, addr(2), &probe, 1),
            Route::Drop(Refusal::Replay)
        );
        // After it ended: from anywhere, its own address included once the
        // tombstone is gone, until the horizon.
        assert_eq!(t.remove(id, secs(2)), Some(5));
        let late = secs(2) + TOMBSTONE_TTL + secs(1);
        assert_eq!(
            route_at(&mut t, addr(1), &seg(81, 5, 0, 0, false, 2), late),
            Route::Drop(Refusal::Replay)
        );
        assert_eq!(
            route_at(&mut t, addr(3), &seg(81, 5, 0, 0, false, 3), late),
            Route::Drop(Refusal::Replay)
        );
        // Another conv is welcome; after the horizon, so is this one.
        assert!(matches!(
            route_at(&mut t, addr(3), &push(6, 0, false), late),
            Route::Accept { .. }
        ));
        assert!(matches!(
            route_at(
                &mut t,
                addr(4),
                &seg(81, 5, 0, 0, false, 4),
                REPLAY_HORIZON + secs(1)
            ),
            Route::Accept { .. }
        ));
        t.check(10);
    }

    /// A tombstone refreshed by a second close of the same (peer, conv)
    /// keeps its first place in the memory's order: it refuses until its
    /// own time is up, not until it reaches the front.
    #[test]
    fn a_tombstone_refuses_until_its_own_time_only() {
        let mut t: Table<u32> = Table::new(true, 10, 10);
        t.admission.closed(addr(1), 5, secs(0));
        t.admission.closed(addr(2), 6, secs(1));
        // (addr 1, conv 5) again, later: its value moves, its place not.
        t.admission.closed(addr(1), 5, secs(30));
        let after = secs(1) + TOMBSTONE_TTL + secs(1);
        // addr 2's expired behind the refreshed one at the front.
        assert!(matches!(
            route_at(&mut t, addr(2), &push(6, 0, false), after),
            Route::Accept { .. }
        ));
        assert_eq!(
            route_at(&mut t, addr(1), &push(5, 0, false), after),
            Route::Drop(Refusal::Tombstoned)
        );
    }

    #[test]
    fn tombstones_refuse_until_they_expire() {
        let (mut t, id) = with_session(10);
        assert_eq!(t.remove(id, secs(10)), Some(5));
        assert_eq!(t.remove(id, secs(10)), None, "once");
        // A retransmission of the opener (fresh bytes, same conv).
        let again = seg(81, 5, 0, 0, false, 1);
        assert_eq!(
            route(&mut t, addr(1), &again, 11),
            Route::Drop(Refusal::Tombstoned)
        );
        // Another conv from the same address is welcome.
        assert!(matches!(
            route(&mut t, addr(1), &push(6, 0, false), 11),
            Route::Accept { .. }
        ));
        let expiry = 10 + TOMBSTONE_TTL.as_secs();
        assert_eq!(
            route(&mut t, addr(1), &again, expiry - 1),
            Route::Drop(Refusal::Tombstoned)
        );
        assert!(matches!(
            route(&mut t, addr(1), &again, expiry),
            Route::Accept { .. }
        ));
    }

    /// Nothing of a finished conversation opens a session, at
    /// +3 s, +62 s or +10 min (late packets are no openers; its opener is
    /// tombstoned, then remembered as a replay); a client restarted on the
    /// same port always gets in.
    #[test]
    fn a_finished_conversation_never_resurrects() {
        for (k, after) in [3u64, 62, 600].into_iter().enumerate() {
            let mut t = Table::new(true, 10, 10);
            let opener = push(5, 0, false);
            feed(&mut t, addr(1), &opener, 0);
            let Route::Deliver(id) = route(&mut t, addr(1), &push(5, 1, false), 0) else {
                panic!()
            };
            t.remove(id, secs(5));
            let at = 5 + after;
            // A client whose path went dark retransmits its oldest segment.
            for late in [seg(81, 5, 7, 6, false, 0), seg(82, 5, 3, 4, false, 0)] {
                assert_eq!(
                    route(&mut t, addr(1), &late, at),
                    Route::Drop(Refusal::NotOpener),
                    "+{after} s"
                );
            }
            let replayed = route(&mut t, addr(1), &opener, at);
            let expect = if after < TOMBSTONE_TTL.as_secs() {
                Refusal::Tombstoned
            } else {
                Refusal::Replay
            };
            assert_eq!(replayed, Route::Drop(expect), "+{after} s");
            // The same client restarted on the same port: a new conv.
            let fresh = 100 + k as u32;
            assert_eq!(
                feed(&mut t, addr(1), &push(fresh, 0, false), at),
                accept(fresh)
            );
        }
    }

    /// A datagram that opened a session opens no other, from any
    /// address, for the horizon; the memory of them is bounded.
    #[test]
    fn replayed_openers_are_refused_from_any_address() {
        let mut t = Table::new(true, 100, 100);
        let opener = push(5, 0, false);
        assert_eq!(feed(&mut t, ip(1), &opener, 0), accept(5));
        for n in 2..22 {
            assert_eq!(
                route(&mut t, ip(n), &opener, 1),
                Route::Drop(Refusal::Replay)
            );
        }
        assert_eq!(t.live(), 1);
        let horizon = REPLAY_HORIZON.as_secs();
        assert_eq!(
            route(&mut t, ip(30), &opener, horizon - 1),
            Route::Drop(Refusal::Replay)
        );
        assert!(matches!(
            route(&mut t, ip(30), &opener, horizon),
            Route::Accept { .. }
        ));
        // Bounded: the oldest fingerprints go first.
        // (Accepted and never inserted: each keeps its place under the cap.)
        let mut t: Table<u32> = Table::new(true, MAX_REPLAY + 10, 10);
        for n in 0..(MAX_REPLAY as u32 + 10) {
            let p = push(n, 0, false);
            let i = Inbound::parse(&p).unwrap();
            let r = t.route(ip(n), &i, Duration::ZERO, || 0, || u64::from(n), |_| false);
            assert!(matches!(r, Route::Accept { .. }));
        }
        assert!(t.admission.replay_len() <= MAX_REPLAY);
    }

    /// One source address opens at most `RATE_BURST` sessions at
    /// once and `RATE_PER_SEC` per second after; others are unaffected.
    #[test]
    fn session_creation_is_rate_limited_per_source() {
        let mut t = Table::new(true, 10_000, 10_000);
        let src = |port| SocketAddr::from(([127, 0, 0, 7], port));
        let mut port = 1000;
        let mut opened = |t: &mut Table<u32>, now: Duration, from: SocketAddr| {
            port += 1;
            let from = if from.port() == 0 { src(port) } else { from };
            feed_as(t, from, &push(u32::from(port), 0, false), now, true)
        };
        for _ in 0..RATE_BURST {
            assert!(matches!(
                opened(&mut t, secs(0), src(0)),
                Route::Accept { .. }
            ));
        }
        assert_eq!(
            opened(&mut t, secs(0), src(0)),
            Route::Drop(Refusal::RateLimited)
        );
        // Another source is not limited by this one.
        assert!(matches!(
            opened(&mut t, secs(0), ip(9)),
            Route::Accept { .. }
        ));
        // A second later: RATE_PER_SEC more.
        let mut got = 0;
        for _ in 0..2 * RATE_PER_SEC {
            if matches!(opened(&mut t, secs(1), src(0)), Route::Accept { .. }) {
                got += 1;
            }
        }
        assert_eq!(got, RATE_PER_SEC);
    }

    /// The per-source limit is configurable (`ConfigBuilder::sessions_per_source`):
    /// a burst of 3, then 2 per second, on the table's clock.
    #[test]
    fn a_configured_source_rate_takes_effect() {
        let mut t = Table::new(true, 10_000, 10_000);
        t.set_source_rate(3, 2);
        let src = |port| SocketAddr::from(([127, 0, 0, 7], port));
        let accepted = |t: &mut Table<u32>, now: Duration, port: u16| {
            let r = feed_as(t, src(port), &push(u32::from(port), 0, false), now, true);
            matches!(r, Route::Accept { .. })
        };
        let burst: Vec<bool> = (1..=5).map(|p| accepted(&mut t, secs(0), p)).collect();
        assert_eq!(burst, [true, true, true, false, false]);
        // Half a second refills one; a second two, never more than the burst.
        assert!(accepted(&mut t, Duration::from_millis(500), 10));
        assert!(!accepted(&mut t, Duration::from_millis(500), 11));
        let later: usize = (20..30).filter(|&p| accepted(&mut t, secs(1), p)).count();
        assert_eq!(later, 1);
        let much_later: usize = (30..40).filter(|&p| accepted(&mut t, secs(100), p)).count();
        assert_eq!(much_later, 3);
    }

    /// `n` openers of new conversations from new addresses (from `first`
    /// on), each refused at the cap.
    fn refused_openers(t: &mut Table<u32>, first: u32, n: u32) {
        for k in first..first + n {
            let r = route(t, ip(k), &push(k, 0, false), 0);
            assert_eq!(r, Route::Drop(Refusal::SessionCap), "opener {k}");
        }
    }

    /// At the session cap, the oldest session that never proved
    /// it receives makes room for a newcomer; proven sessions are never
    /// evicted, and an unproven session leaves no tombstone.
    /// A table at its cap of 4: peers 1 and 4 proven, 2 and 3 not; the
    /// ids of 2 and 3.
    fn at_the_cap_with_two_unproven(t: &mut Table<u32>) -> (SessionId, SessionId) {
        let at = Duration::ZERO;
        feed_as(t, ip(1), &push(1, 0, false), at, true);
        feed_as(t, ip(2), &push(2, 0, false), at, false);
        feed_as(t, ip(3), &push(3, 0, false), at, false);
        feed_as(t, ip(4), &push(4, 0, false), at, true);
        assert_eq!((t.live(), t.unproven()), (4, 2));
        let Route::Deliver(second) = route(t, ip(2), &push(2, 1, false), 0) else {
            panic!()
        };
        let Route::Deliver(third) = route(t, ip(3), &push(3, 1, false), 0) else {
            panic!()
        };
        (second, third)
    }

    /// The opener of peer 5 is admitted in place of `evicted`.
    fn newcomer_evicts(t: &mut Table<u32>, evicted: SessionId) {
        let r = feed_as(t, ip(5), &push(5, 0, false), Duration::ZERO, false);
        assert_eq!(
            r,
            Route::Accept {
                conv: 5,
                replaces: None,
                displaces: None,
                evicts: Some(evicted),
            }
        );
    }

    #[test]
    fn unproven_sessions_make_room_at_the_cap() {
        let mut t = Table::new(true, 4, 100);
        let at = Duration::ZERO;
        let (second, third) = at_the_cap_with_two_unproven(&mut t);
        // Not before 3 x the cap openers came after it: its proof could
        // still be queued behind them.
        refused_openers(&mut t, 100, 10);
        // The oldest unproven goes.
        newcomer_evicts(&mut t, second);
        assert_eq!((t.live(), t.unproven()), (4, 2));
        // No tombstone: its real peer, retransmitting its opener, gets in.
        t.set_proven(third, Duration::ZERO);
        assert_eq!(t.unproven(), 1);
        refused_openers(&mut t, 200, 12);
        let r = feed_as(&mut t, ip(2), &seg(81, 2, 0, 0, false, 1), at, true);
        assert!(
            matches!(
                r,
                Route::Accept {
                    evicts: Some(_),
                    ..
                }
            ),
            "{r:?}"
        );
        assert_eq!((t.live(), t.unproven()), (4, 0));
        // Everyone proven: the cap holds.
        assert_eq!(
            route(&mut t, ip(6), &push(6, 0, false), 0),
            Route::Drop(Refusal::SessionCap)
        );
    }

    /// A socket with a larger receive buffer queues more openers ahead of
    /// a peer's proof: the eviction horizon grows with it (4 MiB: 3 × the
    /// cap openers; 16 MiB: 12 ×).
    #[test]
    fn a_larger_receive_buffer_lengthens_the_eviction_horizon() {
        let mut t = Table::new(true, 4, 100);
        t.set_recv_buffer(16 << 20);
        let (second, _) = at_the_cap_with_two_unproven(&mut t);
        // With 4 MiB the 11th refused opener here would evict (see
        // `unproven_sessions_make_room_at_the_cap`); with 16 MiB the 47th.
        refused_openers(&mut t, 100, 46);
        newcomer_evicts(&mut t, second);
    }

    /// A peer whose opener was refused because the oldest unproven
    /// session was too young to evict gets in with its retransmission (a
    /// flood's one-shot openers never come again).
    #[test]
    fn a_refused_openers_retransmission_evicts_a_young_unproven_session() {
        let mut t = Table::new(true, 2, 100);
        let at = Duration::ZERO;
        feed_as(&mut t, ip(1), &push(1, 0, false), at, false);
        feed_as(&mut t, ip(2), &push(2, 0, false), at, false);
        let Route::Deliver(first) = route(&mut t, ip(1), &push(1, 1, false), 0) else {
            panic!()
        };
        refused_openers(&mut t, 100, 2);
        let again = feed_as(&mut t, ip(100), &push(100, 0, false), at, false);
        assert_eq!(
            again,
            Route::Accept {
                conv: 100,
                replaces: None,
                displaces: None,
                evicts: Some(first),
            }
        );
    }

    /// The accept backlog holds only sessions whose peers proved they
    /// receive. An application that accepts nothing under a flood of forged
    /// openers (which never prove): the backlog stays empty, so each real
    /// client gets in at the cap (its opener, or its retransmission, evicts
    /// the oldest unproven session) and joins the backlog once it proves.
    /// Proven sessions do fill it: a newcomer is then refused, while one
    /// admitted before it filled still joins when it proves (it is real).
    /// (When every admitted session joined the backlog at once, the flood
    /// filled it with its first two and locked every real client out.)
    #[test]
    fn only_proven_sessions_reach_the_accept_backlog() {
        let mut t: Table<u32> = Table::new(true, 8, 2);
        // Sessions handed to `accept` and never taken.
        let mut backlog = 0usize;
        let at = Duration::ZERO;
        // The driver's part for one opener of `conv` from `ip(conv)`.
        let open = |t: &mut Table<u32>, backlog: usize, conv: u32, tag: u8| {
            let p = seg(81, conv, 0, 0, false, tag);
            let i = Inbound::parse(&p).unwrap();
            let r = t.route(ip(conv), &i, at, || backlog, || print(&p), |_| false);
            let Route::Accept {
                conv,
                replaces,
                evicts,
                ..
            } = r
            else {
                return Err(r);
            };
            for old in [replaces, evicts].into_iter().flatten() {
                t.remove(old, at);
            }
            Ok(t.insert(ip(conv), conv, false, |_| conv))
        };
        let flood = |t: &mut Table<u32>, backlog: usize, from: u32| {
            let admitted = (from..from + 500)
                .filter(|&k| open(t, backlog, k, 0).is_ok())
                .count();
            assert!(admitted > 8, "the flood cycles the table: {admitted}");
            assert_eq!(t.live(), 8);
        };
        // A real client: admitted by its first opener or the retransmission
        // of a refused one (remembered), then it proves.
        let connect = |t: &mut Table<u32>, backlog: usize, client: u32| {
            for tag in 1..=2 {
                match open(t, backlog, client, tag) {
                    Ok(id) => return Ok(id),
                    Err(Route::Drop(Refusal::SessionCap)) if tag == 1 => {}
                    Err(r) => return Err(r),
                }
            }
            unreachable!()
        };
        flood(&mut t, backlog, 1000);
        assert_eq!(t.unproven(), 8);
        assert_eq!(backlog, 0, "no forged session joined the backlog");
        let first = connect(&mut t, backlog, 1).expect("a real client gets in");
        // Joins the backlog once it proves, and once only.
        assert!(t.set_proven(first, Duration::ZERO));
        assert!(!t.set_proven(first, Duration::ZERO));
        backlog += 1;
        flood(&mut t, backlog, 2000);
        // Two more clients admitted while one place is free: both prove
        // and both join, the second past the backlog's bound.
        let second = connect(&mut t, backlog, 2).expect("admitted");
        let third = connect(&mut t, backlog, 3).expect("admitted");
        for id in [second, third] {
            assert!(t.set_proven(id, at), "a proven session joins, full or not");
            backlog += 1;
        }
        assert_eq!(backlog, 3);
        // A full backlog of proven sessions refuses newcomers.
        assert_eq!(
            connect(&mut t, backlog, 4),
            Err(Route::Drop(Refusal::Backlog))
        );
        // The listener closes: the unproven sessions, never handed to
        // `accept`, are the driver's to remove; new ones open nothing.
        let unproven = t.stop_accepting();
        assert_eq!(unproven.len(), t.unproven());
        assert!(!unproven.contains(&first) && !unproven.contains(&second));
        assert_eq!(t.unproven(), 8 - 3);
    }

    #[test]
    fn generations_keep_stale_ids_out() {
        let mut t = Table::new(true, 10, 10);
        let a = t.insert(addr(1), 1, true, |_| 1);
        t.remove(a, Duration::ZERO);
        let b = t.insert(addr(2), 2, true, |_| 2);
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
        let a = t.insert(addr(1), 1, true, |_| 1);
        let b = t.insert(addr(2), 2, true, |_| 2);
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

    /// With migration on, an out-of-band packet of a live session's conv
    /// from an unknown address goes to that session to judge (a `--udp`
    /// tunnel's client sends nothing else while its flows send), also when
    /// another shard forwards it; never to a new session, and without
    /// migration it is dropped. One from the session's own address clears
    /// a candidate, as any datagram from home does.
    #[test]
    fn oob_packets_of_a_moved_peer_reach_their_session_to_judge() {
        let (mut t, id) = with_session(10);
        let r = route(&mut t, addr(2), &oob(5), 0);
        assert_eq!(r, Route::Drop(Refusal::Oob), "migration off");
        t.set_migration(true);
        assert_eq!(route(&mut t, addr(2), &oob(5), 0), Route::Migrate(id));
        let r = route(&mut t, addr(2), &oob(6), 0);
        assert_eq!(r, Route::Drop(Refusal::Oob), "another conv");
        let (mine, other) = (oob(5), oob(6));
        let i = Inbound::parse(&mine).unwrap();
        assert_eq!(t.route_forwarded(addr(3), &i), Route::Migrate(id));
        let i = Inbound::parse(&other).unwrap();
        assert_eq!(t.route_forwarded(addr(3), &i), Route::Drop(Refusal::Oob));
        assert!(t.candidate_seen(id, addr(2), 16, true));
        assert!(t.candidate(id).is_some());
        assert_eq!(route(&mut t, addr(1), &oob(5), 0), Route::Deliver(id));
        assert!(t.candidate(id).is_none(), "heard at home: it has not moved");
        assert_eq!(t.live(), 1);
    }

    /// What the table offers another shard (`elsewhere`), from its one
    /// address lookup: with migration on, a datagram from an unknown
    /// address whose conv no session here holds, and nothing else (not a
    /// session's address, a conv held here, parity, out-of-band packets).
    /// Taken, it is `Forwarded`; declined, admission goes on as before.
    #[test]
    fn only_datagrams_no_session_here_could_take_are_offered_elsewhere() {
        let (mut t, id) = with_session(10);
        let mut offered = Vec::new();
        let mut go = |t: &mut Table<u32>, peer: SocketAddr, p: &[u8], take: bool| {
            let i = Inbound::parse(p).unwrap();
            let elsewhere = |conv| {
                offered.push(conv);
                take
            };
            t.route(peer, &i, secs(1), || 0, || print(p), elsewhere)
        };
        let other = push(6, 3, false);
        // Migration off: never offered.
        let r = go(&mut t, addr(2), &other, true);
        assert_eq!(r, Route::Drop(Refusal::NotOpener));
        t.set_migration(true);
        // Another conv from an unknown address: offered, and taken.
        assert_eq!(go(&mut t, addr(2), &other, true), Route::Forwarded);
        // Declined: admission as before (a non-opener, an opener).
        let r = go(&mut t, addr(2), &other, false);
        assert_eq!(r, Route::Drop(Refusal::NotOpener));
        let r = go(&mut t, addr(3), &push(7, 0, false), false);
        assert!(matches!(r, Route::Accept { conv: 7, .. }), "{r:?}");
        // The session's address, even with another conv; the session's
        // conv from elsewhere (it migrates here); parity; out-of-band.
        assert_eq!(
            go(&mut t, addr(1), &push(5, 2, false), true),
            Route::Deliver(id)
        );
        let r = go(&mut t, addr(1), &other, true);
        assert_eq!(r, Route::Drop(Refusal::ConvMismatch));
        assert_eq!(
            go(&mut t, addr(4), &push(5, 2, false), true),
            Route::Migrate(id)
        );
        let mut parity = vec![0u8; 20];
        parity[4..6].copy_from_slice(&0xf2u16.to_le_bytes());
        let r = go(&mut t, addr(4), &parity, true);
        assert_eq!(r, Route::Drop(Refusal::UnknownSession));
        assert_eq!(
            go(&mut t, addr(4), &oob(6), true),
            Route::Drop(Refusal::Oob)
        );
        assert_eq!(
            offered,
            [6, 6, 7],
            "offered only what no session here could take"
        );
    }

    /// Migration transcript: a non-opener of a live conversation from
    /// another address goes to the driver (`Migrate`); only a fresh one
    /// makes a candidate; probes stay within 3x what the candidate sent and
    /// one per `PROBE_SPACING`; the answer after a probe moves the session
    /// (re-keyed, the old address tombstoned for the conv); stale
    /// datagrams (replays) from anywhere never make or move anything.
    #[test]
    fn migration_candidate_validation_and_move() {
        let ms = Duration::from_millis;
        let (mut t, id) = with_session(10);
        let data = push(5, 7, false);
        // Off: refused as before.
        assert_eq!(
            route(&mut t, addr(2), &data, 1),
            Route::Drop(Refusal::NotOpener)
        );
        t.set_migration(true);
        assert_eq!(route(&mut t, addr(2), &data, 1), Route::Migrate(id));
        // Openers of the live conv too (a replayed first PUSH opens no
        // second session); other convs go to admission; parity (no conv)
        // is unknown.
        assert_eq!(
            route(&mut t, addr(3), &seg(81, 5, 0, 0, false, 9), 1),
            Route::Migrate(id)
        );
        assert!(matches!(
            route(&mut t, addr(3), &seg(81, 6, 0, 0, false, 9), 1),
            Route::Accept { .. }
        ));
        let mut parity = vec![0u8; 20];
        parity[4..6].copy_from_slice(&0xf2u16.to_le_bytes());
        assert_eq!(
            route(&mut t, addr(2), &parity, 1),
            Route::Drop(Refusal::UnknownSession)
        );
        // Stale (a replay): no candidate, nothing to probe.
        assert!(!t.candidate_seen(id, addr(2), 60, false));
        assert_eq!(t.candidate(id), None);
        assert!(!t.probe_candidate(id, 52, ms(0), false));
        assert_eq!(t.migrate(id, ms(0), false), None);
        // Fresh: a candidate; no move before a probe left.
        assert!(t.candidate_seen(id, addr(2), 60, true));
        assert_eq!(t.migrate(id, ms(0), false), None);
        assert_eq!(t.candidate(id).map(|c| c.addr), Some(addr(2)));
        // The 3x budget and the spacing.
        assert!(t.probe_candidate(id, 52, ms(0), false));
        assert!(!t.probe_candidate(id, 52, ms(50), false), "spaced");
        assert!(t.probe_candidate(id, 52, ms(100), false));
        assert!(t.probe_candidate(id, 52, ms(200), false));
        assert!(
            !t.probe_candidate(id, 52, ms(300), false),
            "156 + 52 > 3 x 60"
        );
        assert_eq!(t.candidate(id).map(|c| c.sent), Some(156));
        // More from the candidate (stale or not) raises its budget.
        assert!(t.candidate_seen(id, addr(2), 60, false));
        assert!(t.probe_candidate(id, 52, ms(400), false));
        // A stale datagram from a third address changes nothing.
        assert!(!t.candidate_seen(id, addr(4), 60, false));
        assert_eq!(t.candidate(id).map(|c| c.addr), Some(addr(2)));
        // Another conv's datagram from the session's address (anyone's:
        // a captured one, spoofed) is dropped and says nothing of the
        // peer: the candidacy stands. (It ended it, so such datagrams
        // every 100 ms kept a moved client from ever being followed.)
        assert_eq!(
            route(&mut t, addr(1), &push(9, 3, false), 1),
            Route::Drop(Refusal::ConvMismatch)
        );
        assert_eq!(t.candidate(id).map(|c| c.addr), Some(addr(2)));
        // A datagram of its conv from the session's own address ends the
        // candidacy: the peer is still there.
        assert_eq!(
            route(&mut t, addr(1), &push(5, 8, false), 1),
            Route::Deliver(id)
        );
        assert_eq!(t.candidate(id), None);
        // Again, and the answer: it does not count while the session's
        // address was heard just before the probe (a mirror outrunning
        // the peer) ...
        assert!(t.candidate_seen(id, addr(2), 60, true));
        assert!(t.probe_candidate(id, 52, ms(1050), false));
        let wins = seg(84, 5, 0, 3, false, 0);
        assert!(Inbound::parse(&wins).unwrap().has_wins());
        assert!(!Inbound::parse(&data).unwrap().has_wins());
        assert_eq!(route(&mut t, addr(2), &wins, 1), Route::Migrate(id));
        assert_eq!(t.migrate(id, ms(1060), true), None);
        // ... and once it was silent for HOME_SILENCE before a probe (the
        // refused answer is probed again at once: `again`), the session
        // moves.
        assert!(!t.probe_candidate(id, 52, ms(1100), false), "spaced");
        assert!(t.probe_candidate(id, 52, ms(1100), true));
        assert_eq!(t.migrate(id, ms(1110), true), Some((addr(1), addr(2))));
        assert_eq!(t.peer(id), Some(addr(2)));
        assert_eq!(route(&mut t, addr(2), &data, 1), Route::Deliver(id));
        // The old address is another address now: even an opener from it
        // is only a datagram of the session to check for freshness.
        assert_eq!(route(&mut t, addr(1), &data, 1), Route::Migrate(id));
        assert_eq!(
            route(&mut t, addr(1), &seg(81, 5, 0, 0, false, 4), 2),
            Route::Migrate(id)
        );
        t.check(10);
    }

    /// A stale datagram from elsewhere makes a weak candidate only once the
    /// session's address was silent for `HOME_SILENCE` and no fresh
    /// candidate is being validated; a weak candidate is probed within the
    /// same 3x budget, its answers move nothing, and a fresh datagram from
    /// it makes it a candidate like any other.
    #[test]
    fn weak_candidates_are_budgeted_and_never_move_a_session() {
        let ms = Duration::from_millis;
        let (mut t, id) = with_session(10);
        t.set_migration(true);
        // Heard at home at 1 s: stale datagrams from elsewhere just after
        // change nothing.
        assert_eq!(
            route(&mut t, addr(1), &push(5, 8, false), 1),
            Route::Deliver(id)
        );
        assert!(!t.stale_seen(id, addr(2), 60, ms(1050)));
        assert_eq!(t.candidate(id), None);
        // Silent for HOME_SILENCE: a weak candidate.
        assert!(t.stale_seen(id, addr(2), 60, ms(1100)));
        let c = t.candidate(id).unwrap();
        assert!(c.weak && c.addr == addr(2) && c.received == 60);
        // The budget: 3 x 60 bytes.
        assert!(t.probe_candidate(id, 52, ms(1100), false));
        t.set_nudge(id, (7, 1100));
        assert!(t.probe_candidate(id, 52, ms(1200), false));
        assert!(t.probe_candidate(id, 52, ms(1300), false));
        assert!(
            !t.probe_candidate(id, 52, ms(1400), false),
            "156 + 52 > 180"
        );
        // Its answer moves nothing, whatever the home's silence.
        assert_eq!(t.migrate(id, ms(5000), true), None);
        assert_eq!(t.migrate(id, ms(5000), false), None);
        assert_eq!(t.peer(id), Some(addr(1)));
        // Another stale address replaces a weak candidate (fresh budget).
        assert!(t.stale_seen(id, addr(3), 60, ms(1500)));
        assert_eq!(
            t.candidate(id).map(|c| (c.addr, c.sent, c.nudge)),
            Some((addr(3), 0, None))
        );
        // A fresh datagram from it: a candidate as any fresh one.
        assert!(t.candidate_seen(id, addr(3), 60, true));
        assert!(!t.candidate(id).unwrap().weak);
        // Which a stale one from elsewhere no longer replaces.
        assert!(!t.stale_seen(id, addr(4), 60, ms(1600)));
        assert_eq!(t.candidate(id).map(|c| c.addr), Some(addr(3)));
        assert!(t.probe_candidate(id, 52, ms(1600), false));
        assert_eq!(t.migrate(id, ms(1610), true), Some((addr(1), addr(3))));
        t.check(10);
    }

    /// Only a proven session alone with its conv migrates.
    #[test]
    fn migration_needs_a_proven_session_with_a_unique_conv() {
        let mut t = Table::new(true, 10, 10);
        t.set_migration(true);
        feed_as(&mut t, addr(1), &push(5, 0, false), secs(0), false);
        assert_eq!(
            route(&mut t, addr(2), &push(5, 3, false), 0),
            Route::Drop(Refusal::NotOpener),
            "unproven"
        );
        // Another client drew the same conv meanwhile: neither migrates.
        feed_as(&mut t, addr(3), &seg(81, 5, 0, 0, false, 9), secs(0), false);
        assert_eq!(t.live(), 2);
        let Route::Deliver(a) = route(&mut t, addr(1), &push(5, 1, false), 0) else {
            panic!()
        };
        t.set_proven(a, Duration::ZERO);
        assert_eq!(
            route(&mut t, addr(2), &push(5, 3, false), 0),
            Route::Drop(Refusal::NotOpener)
        );
        // Alone with it again (the other left, whichever was indexed): the
        // proven one migrates.
        let Route::Deliver(b) = route(&mut t, addr(3), &push(5, 1, false), 0) else {
            panic!()
        };
        t.remove(b, secs(1));
        assert_eq!(
            route(&mut t, addr(2), &push(5, 3, false), 1),
            Route::Migrate(a)
        );
        t.check(10);
    }

    /// The fuzz body (`kcpio::fuzzing::session_table`) on openers among
    /// clock jumps, proofs, removals and timers: it runs in every test run,
    /// and the table's books balance throughout.
    #[test]
    fn fuzz_body_keeps_the_books() {
        let mut data = vec![3 | (2 << 3)]; // cap 4, backlog 3
        for n in 0..300u32 {
            let p = push(n % 50, 0, n % 3 == 0);
            data.extend([((p.len() / 4) << 3) as u8, n as u8]);
            data.extend(&p[..p.len() / 4 * 4]);
            data.extend([3 + (n % 5) as u8, (n * 7) as u8]);
            // Later datagrams of the same convs from other addresses.
            let late = push(n % 50, 1 + n % 7, false);
            data.extend([((late.len() / 4) << 3) as u8, (n * 13) as u8]);
            data.extend(&late[..late.len() / 4 * 4]);
            data.extend([5, n as u8]);
        }
        fuzz(&data);
        // The same with migration on.
        data[0] |= 0x40;
        fuzz(&data);
    }
}
