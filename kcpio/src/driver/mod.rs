//! The one task per UDP socket.
//!
//! A [`Driver`] owns a UDP socket and every session on it. It is the only
//! place that reads the clock, draws random numbers, or makes system calls.
//! It is split by concern:
//!
//! - [`table`]: the sans-IO session table (demux by address and conv,
//!   takeover, tombstones, admission, the deadline heap);
//! - [`io`]: the socket half (receive batch, open, transmit slots, seal,
//!   GSO runs, rate limit);
//! - [`shared`]: what handles see (each session's [`Conn`] under a lock,
//!   wakers, the inbox, the accept backlog);
//! - [`stats`]: the socket counters;
//! - this file: the task loop, the one `Sleep`, the deferred flush and the
//!   bounded rounds.
//!
//! One wake-up of the driver: drain the inbox, receive a batch of datagrams
//! (open, route, then one session lock per session per batch: `Conn` input,
//! wake readers), fire due timers, let the sessions that have something to
//! say write datagrams into the reused transmit slots, seal them (outside
//! any session lock) and send them in batches. A wake-up does a bounded
//! number of rounds, then yields (woken again from tokio's deferred list:
//! `yield_after_woken`), so a flood cannot starve the runtime. When the
//! socket is not writable the unsent datagrams stay in their slots and the
//! sessions stay queued; nothing we produced is ever dropped, the KCP
//! windows are the flow control.
//!
//! Time: the driver's clock is a `Duration` since its `epoch`, the time
//! [`Conn`] and the table take; only the `Sleep` sees a tokio `Instant`.

pub(crate) mod admission;
mod bounded;
mod group;
pub(crate) mod io;
pub(crate) mod migrate;
pub(crate) mod shared;
pub(crate) mod sink;
mod slot;
pub(crate) mod stats;
pub(crate) mod table;

use std::collections::VecDeque;
use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use self::admission::Limits;
use self::group::Group;
use self::io::{Io, Socket, open_listener_socket, wrap_socket};
use self::shared::{
    Accept, Adopted, DriverShared, Forwarded, Inbox, SessionShared, SessionState, lock, register,
    wake,
};
use self::sink::SinkBatch;
use self::stats::{add, bump};
use self::table::{Inbound, Refusal, Route, SessionId, Table};
use crate::config::ConfigInner;
use crate::conn::{Conn, SessionError};
use crate::sys::UdpState;

/// Receive batches a listener reads per round, and rounds per wake-up
/// before the driver yields.
const MAX_ROUNDS: usize = 8;
/// Sessions serviced per round at most.
const SESSIONS_PER_ROUND: usize = 256;
/// A client rebinds its socket at most this often.
const REBIND_SPACING: Duration = Duration::from_millis(200);

/// Whose socket this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// A client stream: one session, one peer.
    Client,
    /// A listener: sessions are created by the first valid packet of a peer.
    Listener,
}

/// A received packet routed to a session, waiting in the batch for
/// [`Driver::deliver_routed`]: the plaintext is `rx[start..end]`.
#[derive(Clone, Copy)]
struct Routed {
    id: SessionId,
    start: usize,
    end: usize,
    /// When it arrived (the kernel's stamp on the driver's clock, else
    /// the batch's processing time).
    arrived: Duration,
}

/// The plaintext of one datagram: in the receive batch, or forwarded by
/// another shard of the listener (with its arrival time there: the shards
/// share one clock).
#[derive(Clone, Copy)]
enum Plain<'a> {
    Rx(usize, usize),
    Forwarded(&'a [u8], Duration),
}

/// What a call to [`Driver::service`] ended with.
#[derive(PartialEq, Eq)]
enum Serviced {
    Done,
    /// The transmit slots are full; the session stays queued.
    SlotsFull,
    /// A handle call waits for the session's lock: the driver let go of it
    /// with more to write; the session stays queued, and the next call
    /// resumes (its timers already run).
    Yielded,
}

/// The task that owns one UDP socket and all sessions on it.
pub(crate) struct Driver {
    shared: Arc<DriverShared>,
    io: Io,
    table: Table<Arc<SessionShared>>,
    role: Role,
    epoch: Instant,
    sleep: Pin<Box<Sleep>>,
    sleep_at: Option<Duration>,
    ready: VecDeque<SessionId>,
    /// Sessions fed input that woke a reader: serviced at the next poll,
    /// after the driver yielded once, so a reply the application writes
    /// meanwhile leaves in the same datagram as the ACKs.
    deferred: Vec<SessionId>,
    /// A listener left `deferred` for its readers without yielding: it is
    /// polled again by the last of them to call, by its socket or its
    /// timers, and at the latest at this time (one flush interval after).
    deferred_until: Option<Duration>,
    inbox_scratch: Vec<SessionId>,
    /// Packets of the current receive batch, by session (reused).
    routed: Vec<Routed>,
    /// Free slots a session needs before it may produce a datagram: one
    /// plus a FEC group's parity, so a completed group goes out together.
    slots_needed: usize,
    /// Addresses refused admission since the last session was admitted.
    refused_peers: stats::RefusedPeers,
    /// Keys the fingerprints of session-opening datagrams (replay refusal).
    fingerprint: RandomState,
    /// When a client last rebound its socket.
    rebound_at: Option<Duration>,
    /// A listener's shared state and this driver's index in it (`None`
    /// for a client).
    group: Option<(Arc<Group>, usize)>,
    /// Datagrams and sessions from the listener's other drivers (reused).
    forwarded: Vec<Forwarded>,
    adopted: Vec<Adopted>,
    /// Datagrams taken from a session for its sink (reused).
    sink_batch: SinkBatch,
}

impl Driver {
    /// Builds a driver around a bound, non-blocking socket. `udp` was made by
    /// `UdpState::new` on the same socket.
    fn new(
        socket: Socket,
        udp: UdpState,
        config: Arc<ConfigInner>,
        role: Role,
        accept: Arc<Accept>,
        group: Option<(Arc<Group>, usize)>,
    ) -> std::io::Result<Self> {
        let listener = role == Role::Listener;
        let io = Io::new(socket, &udp, &config, listener);
        let local_addr = io.local_addr()?;
        let (now, mut table) = match &group {
            Some((g, _)) => {
                let limits = g.limits.clone();
                let table = Table::with_limits(listener, limits, config.accept_backlog);
                (g.epoch, table)
            }
            None => {
                let table = Table::new(listener, config.max_sessions, config.accept_backlog);
                (Instant::now(), table)
            }
        };
        let (burst, per_second) = config.sessions_per_source;
        table.set_source_rate(burst, per_second);
        table.set_migration(listener && config.migration);
        if let Some(bytes) = io.recv_buffer() {
            table.set_recv_buffer(bytes);
        }
        let slots_needed = 1 + config.fec.map_or(0, |(_, p)| p);
        let shared = Arc::new(DriverShared {
            local_addr,
            udp,
            config,
            inbox: Mutex::new(Inbox::default()),
            counters: stats::Counters::default(),
            accept,
            epoch: now,
            deferred_readers: std::sync::atomic::AtomicUsize::new(0),
        });
        Ok(Self {
            shared,
            io,
            table,
            role,
            epoch: now,
            sleep: Box::pin(tokio::time::sleep_until(now)),
            sleep_at: None,
            ready: VecDeque::new(),
            deferred: Vec::new(),
            deferred_until: None,
            inbox_scratch: Vec::new(),
            routed: Vec::with_capacity(crate::sys::BATCH_SIZE * 4),
            slots_needed,
            refused_peers: group
                .as_ref()
                .map_or_else(stats::RefusedPeers::default, |(g, _)| {
                    stats::RefusedPeers::shared(g.refusal_episode.clone())
                }),
            fingerprint: group
                .as_ref()
                .map_or_else(RandomState::new, |(g, _)| g.fingerprint.clone()),
            rebound_at: None,
            group,
            forwarded: Vec::new(),
            adopted: Vec::new(),
            sink_batch: SinkBatch::new(),
        })
    }

    /// The driver's clock: time since its epoch.
    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.epoch)
    }

    /// Creates a session for `peer`/`conv` and registers it. The session
    /// starts queued, so the driver services it once and arms its timers
    /// (an idle timeout runs from creation).
    fn insert_session(
        &mut self,
        peer: SocketAddr,
        conv: u32,
        now: Duration,
    ) -> Option<(SessionId, Arc<SessionShared>)> {
        // A listener's peer may be a forged address: it is held to the
        // anti-amplification budget until it proves it receives.
        let proven = self.role == Role::Client;
        let config = self.shared.config.clone();
        let conn = if proven {
            Conn::with_config(conv, config, now).ok()?
        } else {
            migrate::listener_conn(conv, config, now)?
        };
        let driver = self.shared.clone();
        let id = self.table.insert(peer, conv, proven, |id| {
            let mut st = SessionState::new(conn, id, driver.clone());
            st.queued = true;
            Arc::new(SessionShared {
                peer,
                conv,
                state: Mutex::new(st),
                waiting: std::sync::atomic::AtomicUsize::new(0),
                driver,
                sink: Mutex::new(None),
            })
        });
        if let Some((g, me)) = &self.group {
            g.added(conv, *me);
        }
        self.ready.push_back(id);
        self.shared.counters.opened();
        self.refused_peers.new_episode();
        tracing::debug!(%peer, conv, local = %self.shared.local_addr, "kcp session opened");
        self.table.get(id).cloned().map(|s| (id, s))
    }

    /// Frees a session: out of the table, tombstoned, its `Conn` failed
    /// with `reason` unless it already failed, its handles woken.
    fn remove_session(&mut self, id: SessionId, reason: SessionError, now: Duration) {
        let Some(session) = self.table.remove(id, now) else {
            return;
        };
        {
            let mut st = lock(&session.state);
            st.removed = true;
            st.armed = None;
            st.clear_deferred();
            st.conn.abort(reason);
            st.wake_all();
        }
        self.shared.counters.closed();
        if let Some((g, _)) = &self.group {
            g.removed(session.conv);
        }
        tracing::debug!(peer = %session.peer, conv = session.conv, "kcp session closed");
    }

    /// Takes the handles' notifications; registers the task's waker.
    fn drain_inbox(&mut self, cx: &Context<'_>, now: Duration) {
        let listener_closed;
        {
            let mut inbox = lock(&self.shared.inbox);
            std::mem::swap(&mut inbox.dirty, &mut self.inbox_scratch);
            if !inbox.forwarded.is_empty() || !inbox.adopted.is_empty() {
                std::mem::swap(&mut inbox.forwarded, &mut self.forwarded);
                std::mem::swap(&mut inbox.adopted, &mut self.adopted);
            }
            register(&mut inbox.waker, cx);
            listener_closed = inbox.listener_closed;
        }
        self.ready.extend(self.inbox_scratch.drain(..));
        if !self.adopted.is_empty() || !self.forwarded.is_empty() {
            self.take_from_shards(now);
        }
        if listener_closed && self.table.accepting() {
            // The sessions waiting for `accept`, and those still waiting in
            // the table for their peer's proof, which would have joined them.
            let unproven = self.table.stop_accepting();
            for id in self
                .shared
                .accept
                .close(&self.shared)
                .into_iter()
                .chain(unproven)
            {
                self.remove_session(id, SessionError::Aborted, now);
            }
        }
    }

    /// One receive system call and the datagrams it brought. `Ready` when
    /// the socket had something (datagrams or an error), `Pending` when it
    /// is drained.
    fn poll_recv_batch(&mut self, cx: &mut Context<'_>, now: Duration) -> Poll<()> {
        let Poll::Ready(got) = self.io.poll_recv(cx, &self.shared, now) else {
            return Poll::Pending;
        };
        for i in 0..got {
            let Some(datagrams) = self.io.message(i) else {
                break;
            };
            for d in datagrams {
                self.route_datagram(d, now);
            }
        }
        self.deliver_routed(now);
        Poll::Ready(())
    }

    /// One datagram: opened in place, routed by the table, and queued in
    /// `routed` for its session (a new one made first when the table
    /// accepts a new conversation).
    fn route_datagram(&mut self, d: io::Datagram, now: Duration) {
        let counters = &self.shared.counters;
        bump(&counters.datagrams_in);
        add(&counters.bytes_in, d.end - d.start);
        let Some(range) = self.io.open(d) else {
            counters.bad_crypto(d.peer, &mut self.refused_peers);
            return;
        };
        let plain = self.io.rx(range.clone());
        let route = match Inbound::parse(plain) {
            Ok(inbound) => {
                let accept = &self.shared.accept;
                // The whole datagram as opened in place is a function of
                // the bytes received: a replay has the same fingerprint.
                let whole = self.io.rx(d.start..d.end);
                let keys = &self.fingerprint;
                let group = self.group.as_ref();
                self.table.route(
                    d.peer,
                    &inbound,
                    now,
                    || accept.len(),
                    || keys.hash_one(whole),
                    |conv| forward_foreign(group, conv, d, plain),
                )
            }
            Err(r) => Route::Drop(r),
        };
        let id = match route {
            Route::Forwarded => {
                bump(&counters.forwarded);
                return;
            }
            Route::Deliver(id) => id,
            Route::Migrate(id) => {
                let plain = Plain::Rx(range.start, range.end);
                let wire = d.end - d.start;
                let Some(id) = self.datagram_from_elsewhere(id, d.peer, wire, plain, now) else {
                    return;
                };
                id
            }
            Route::Drop(r) => {
                let episode = &mut self.refused_peers;
                self.shared.counters.refused(r, d.peer, episode);
                return;
            }
            Route::Accept {
                conv,
                replaces,
                displaces,
                evicts,
            } => {
                if let Some(old) = replaces {
                    self.remove_session(old, SessionError::Reset, now);
                }
                if let Some(unproven) = evicts {
                    bump(&self.shared.counters.evicted_unproven);
                    self.remove_session(unproven, SessionError::DeadLink, now);
                }
                // It waits in the table, not in the accept backlog, until
                // its peer proves it receives (`deliver_run`); so does the
                // takeover of a proven session at its address.
                let Some((id, _)) = self.insert_session(d.peer, conv, now) else {
                    return;
                };
                if let Some(old) = displaces {
                    self.table.displace(id, old);
                }
                id
            }
        };
        self.routed.push(Routed {
            id,
            start: range.start,
            end: range.end,
            arrived: d.arrived,
        });
    }

    /// Sessions and datagrams the listener's other drivers handed over.
    fn take_from_shards(&mut self, now: Duration) {
        let mut adopted = std::mem::take(&mut self.adopted);
        for a in adopted.drain(..) {
            self.adopt(a);
        }
        self.adopted = adopted;
        let mut forwarded = std::mem::take(&mut self.forwarded);
        for f in forwarded.drain(..) {
            self.take_forwarded(f, now);
        }
        self.forwarded = forwarded;
    }

    /// A session another driver hands over: its peer's new address reaches
    /// this socket. It is serviced at once (its timers re-armed here).
    fn adopt(&mut self, a: Adopted) {
        let conv = a.session.conv;
        // Live here from now on (the giving socket counted it out).
        bump(&self.shared.counters.sessions_live);
        let mut st = lock(&a.session.state);
        match self.table.adopt(a.peer, conv, a.session.clone()) {
            Some(id) => {
                // Counted out of the giving driver's deferred readers.
                st.clear_deferred();
                st.id = id;
                st.driver = self.shared.clone();
                st.armed = None;
                st.queued = true;
                self.ready.push_back(id);
            }
            None => {
                // A session opened at that address meanwhile keeps it.
                st.removed = true;
                st.conn.abort(SessionError::Reset);
                st.wake_all();
                self.shared.counters.closed();
                self.table.release_place();
                if let Some((g, _)) = &self.group {
                    g.removed(conv);
                }
            }
        }
    }

    /// A datagram another shard received for a session of this one: to
    /// the session at its address, or validated as a migration; when the
    /// session ends up at that address, it goes to the shard that receives
    /// it.
    fn take_forwarded(&mut self, f: Forwarded, now: Duration) {
        let Ok(inbound) = Inbound::parse(&f.plain) else {
            return;
        };
        let id = match self.table.route_forwarded(f.peer, &inbound) {
            Route::Deliver(id) => id,
            Route::Migrate(id) => {
                let plain = Plain::Forwarded(&f.plain, f.arrived);
                let Some(id) = self.datagram_from_elsewhere(id, f.peer, f.wire, plain, now) else {
                    return;
                };
                id
            }
            Route::Drop(Refusal::Stale) => {
                // No session of its conv here: handed to another shard
                // since it was forwarded (or closed).
                let counters = &self.shared.counters;
                if inbound.conv().is_some_and(|c| self.forward_again(c, f)) {
                    bump(&counters.reforwarded);
                } else {
                    bump(&counters.forwarded_dropped);
                }
                return;
            }
            Route::Drop(r) => {
                let episode = &mut self.refused_peers;
                self.shared.counters.refused(r, f.peer, episode);
                return;
            }
            Route::Accept { .. } | Route::Forwarded => return,
        };
        self.deliver_run(id, Plain::Forwarded(&f.plain, f.arrived), now);
        if self.table.peer(id) == Some(f.peer) {
            self.hand_off(id, f.from);
        }
    }

    /// A datagram forwarded here for a session no longer here: when it was
    /// handed to another shard meanwhile (the datagram waited in this
    /// driver's queue), passed on to that shard, as its own socket would
    /// have received it. Once: `false` (dropped, `forwarded_dropped`) for
    /// one forwarded again already, or when that shard's queue is full.
    fn forward_again(&self, conv: u32, mut f: Forwarded) -> bool {
        let Some((g, me)) = &self.group else {
            return false;
        };
        if f.again {
            return false;
        }
        let Some(home) = g.home_elsewhere(conv, *me).and_then(|h| g.shard(h)) else {
            return false;
        };
        f.again = true;
        home.forward(f)
    }

    /// Session `id` moved to an address shard `to` receives: it leaves this
    /// table for that shard's (kept here once the listener is closed, as
    /// that driver may be gone). Nothing when `to` is this shard (a
    /// datagram forwarded back to the shard that received it).
    fn hand_off(&mut self, id: SessionId, to: usize) {
        let Some((g, me)) = &self.group else {
            return;
        };
        if to == *me {
            return;
        }
        let (Some(target), Some(peer)) = (g.shard(to).cloned(), self.table.peer(id)) else {
            return;
        };
        if !self.table.accepting() {
            return;
        }
        let Some(session) = self.table.detach(id) else {
            return;
        };
        let conv = session.conv;
        g.moved(conv, to);
        let live = &self.shared.counters.sessions_live;
        live.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        match target.adopt(Adopted { session, peer }) {
            Ok(()) => bump(&self.shared.counters.handed_off),
            // That driver has ended (the listener closed as the peer
            // moved): the session stays here, or no driver would serve it.
            Err(a) => {
                g.moved(conv, *me);
                self.adopt(a);
            }
        }
    }

    /// A datagram of session `id`'s conversation from an address that is
    /// not the session's (migration on): [`migrate::from_elsewhere`]
    /// decides (stale: dropped; the candidate's answer: the session moved;
    /// fresh: the candidate, probed within its budget when slots are free).
    /// Returns the session to deliver to.
    fn datagram_from_elsewhere(
        &mut self,
        id: SessionId,
        from: SocketAddr,
        wire: usize,
        plain: Plain<'_>,
        now: Duration,
    ) -> Option<SessionId> {
        let session = self.table.get(id)?.clone();
        let mut st = lock(&session.state);
        let plain = match plain {
            Plain::Rx(start, end) => self.io.rx(start..end),
            Plain::Forwarded(p, _) => p,
        };
        match migrate::from_elsewhere(&mut self.table, id, &mut st.conn, from, plain, wire, now) {
            migrate::Verdict::Stale => {
                let episode = &mut self.refused_peers;
                self.shared.counters.refused(Refusal::Stale, from, episode);
                None
            }
            migrate::Verdict::Moved { old, new } => {
                st.moved_to = Some(new);
                bump(&self.shared.counters.migrations);
                tracing::info!(%old, %new, conv = session.conv, "kcp session moved to its peer's new address");
                Some(id)
            }
            migrate::Verdict::Candidate { again } => {
                self.path_probe(id, &mut st.conn, from, again, now);
                Some(id)
            }
            migrate::Verdict::Nudge => {
                let episode = &mut self.refused_peers;
                self.shared.counters.refused(Refusal::Stale, from, episode);
                self.path_probe(id, &mut st.conn, from, false, now);
                None
            }
        }
    }

    /// A path probe to `id`'s candidate `to` ([`migrate::probe`]), when
    /// the transmit slots and its budget allow.
    fn path_probe(
        &mut self,
        id: SessionId,
        conn: &mut Conn,
        to: SocketAddr,
        again: bool,
        now: Duration,
    ) {
        if self.io.free_slots() >= self.slots_needed {
            let slot = self.io.next_slot();
            if let Some(t) = migrate::probe(&mut self.table, id, conn, now, again, slot) {
                self.io.push(to, t.len);
                bump(&self.shared.counters.path_probes);
            }
        }
    }

    /// Feeds the packets routed in this receive batch to their sessions:
    /// grouped by session (arrival order kept within each), so a session's
    /// lock is taken once per batch, not once per datagram.
    fn deliver_routed(&mut self, now: Duration) {
        if self.routed.is_empty() {
            return;
        }
        // Offsets grow in arrival order, so (id, start) keeps each session's order.
        self.routed.sort_unstable_by_key(|r| (r.id, r.start));
        let mut i = 0;
        while let Some(first) = self.routed.get(i) {
            let id = first.id;
            let mut j = i + 1;
            while self.routed.get(j).is_some_and(|r| r.id == id) {
                j += 1;
            }
            self.deliver_run(id, Plain::Rx(i, j), now);
            i = j;
        }
        self.routed.clear();
    }

    /// `routed[from..to]` (given as `Plain::Rx(from, to)`), all for
    /// session `id`, or one forwarded packet: into its `Conn`, then wakers,
    /// and the session queued (deferred when a reader woke).
    fn deliver_run(&mut self, id: SessionId, packets: Plain<'_>, now: Duration) {
        let Some(session) = self.table.get(id) else {
            return;
        };
        let counters = &self.shared.counters;
        let (read_waker, write_waker, dgram_waker, proven, sunk);
        {
            let mut guard = lock(&session.state);
            let st = &mut *guard;
            if st.conn.error().is_some() {
                return;
            }
            let connecting = st.conn.is_connecting();
            let mut feed = |packet: &[u8], arrived: Duration| {
                let got = st.conn.handle_packet_at(now, arrived, packet);
                add(&counters.bad_kcp, got.bad_kcp as usize);
                if got.bad_fec {
                    bump(&counters.bad_fec);
                }
            };
            match packets {
                Plain::Rx(from, to) => {
                    for r in self.routed.get(from..to).unwrap_or_default() {
                        feed(self.io.rx(r.start..r.end), r.arrived);
                    }
                }
                Plain::Forwarded(p, arrived) => feed(p, arrived),
            }
            // With a sink, what arrived goes to it, not to a reader.
            sunk = st.has_sink && self.sink_batch.take(&mut st.conn);
            // A waiting `connect` listens on the read waker.
            let answered = connecting && !st.conn.is_connecting();
            read_waker = if st.conn.readable() || answered {
                st.read_waker.take()
            } else {
                None
            };
            write_waker = if st.conn.writable() {
                st.write_waker.take()
            } else {
                None
            };
            dgram_waker = if st.conn.datagram_readable() {
                st.dgram_read_waker.take()
            } else {
                None
            };
            proven = st.conn.is_proven();
            if !st.queued {
                st.queued = true;
                if read_waker.is_some() {
                    self.deferred.push(id);
                    if self.role == Role::Listener {
                        st.deferred = true;
                        let readers = &self.shared.deferred_readers;
                        readers.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    }
                } else {
                    self.ready.push_back(id);
                }
            }
        }
        if sunk {
            session.hand_to_sink(&self.sink_batch);
        }
        // A listener's session joins the accept backlog once its peer has
        // proved it receives: forged openers never reach `accept`.
        if proven
            && self.table.set_proven(id, now)
            && let Some(session) = self.table.get(id)
        {
            self.shared.accept.push(session.clone(), session.peer);
        }
        // A restarted peer proved it receives: the session it took over
        // from its address goes (kcp-go replaces it at the opener).
        if proven && let Some(old) = self.table.settle_takeover(id) {
            self.remove_session(old, SessionError::Reset, now);
        }
        // Woken outside the lock, so the reader does not block on it.
        if let Some(w) = read_waker {
            w.wake();
        }
        if let Some(w) = write_waker {
            w.wake();
        }
        if let Some(w) = dgram_waker {
            w.wake();
        }
    }

    /// A client socket reported the peer's port unreachable: the session
    /// decides ([`Conn::handle_unreachable`]: a probing session fails with
    /// `Refused`; an established one probes, and fails with
    /// `PortUnreachable` when the reports go on), and is serviced now.
    fn take_refusal(&mut self, now: Duration) {
        if !std::mem::take(&mut self.io.refused) || self.role != Role::Client {
            return;
        }
        let Some(session) = self.table.sessions().next().cloned() else {
            return;
        };
        let mut st = lock(&session.state);
        st.conn.handle_unreachable(now);
        if st.conn.error().is_some() {
            st.wake_all();
        }
        if !st.queued {
            st.queued = true;
            self.ready.push_back(st.id);
        }
    }

    /// A client's send failed because its local address stopped working
    /// (`ENETUNREACH`, `EADDRNOTAVAIL`, `ENETDOWN`: the interface went
    /// away, the network changed): a new socket, bound to the unspecified
    /// address and connected to the peer (the route picks the new local
    /// address), replaces it, at most once per [`REBIND_SPACING`]; the
    /// session keeps its `Conn` and sends a probe at once, so the peer sees
    /// the new address (a migrating listener follows at the first fresh
    /// datagram). The stream's `local_addr` reports the new socket's. A
    /// fake-TCP client does not rebind: its flow belongs to one kernel
    /// connection.
    fn take_path_failure(&mut self, now: Duration) {
        if !std::mem::take(&mut self.io.path_failed)
            || self.role != Role::Client
            || !self.io.is_udp()
        {
            return;
        }
        if self
            .rebound_at
            .is_some_and(|t| now.saturating_sub(t) < REBIND_SPACING)
        {
            return;
        }
        self.rebound_at = Some(now);
        let Some(session) = self.table.sessions().next().cloned() else {
            return;
        };
        let id = lock(&session.state).id;
        let peer = self.table.peer(id).unwrap_or(session.peer);
        let any = if peer.is_ipv4() {
            SocketAddr::from(([0, 0, 0, 0], 0))
        } else {
            SocketAddr::from(([0u16; 8], 0))
        };
        let config = &self.shared.config;
        let socket = io::bind_socket(any, config, false, crate::config::DEFAULT_RECV_BUFFER)
            .and_then(|s| s.connect(&peer.into()).map(|()| s))
            .and_then(|s| wrap_socket(s, config));
        match socket {
            Ok((socket, _)) => {
                let local = socket.local_addr().ok();
                self.io.replace_socket(socket);
                bump(&self.shared.counters.rebinds);
                tracing::info!(%peer, ?local, "kcp client rebound: its local address stopped working");
                let mut st = lock(&session.state);
                st.rebound_to = local;
                st.conn.path_changed(now);
                if !st.queued {
                    st.queued = true;
                    self.ready.push_back(id);
                }
            }
            Err(e) => tracing::debug!(%peer, "kcp client could not rebind: {e}"),
        }
    }

    /// Moves sessions whose deadline passed to the ready queue.
    fn fire_timers(&mut self, now: Duration) {
        while let Some(id) = self.table.pop_due(now) {
            let Some(session) = self.table.get(id) else {
                continue;
            };
            let mut st = lock(&session.state);
            st.armed = None;
            bump(&self.shared.counters.timer_fires);
            if !st.queued {
                st.queued = true;
                self.ready.push_back(id);
            }
        }
    }

    /// Lets up to `SESSIONS_PER_ROUND` ready sessions transmit. Returns false
    /// when the socket blocked with datagrams still waiting.
    fn service_ready(&mut self, cx: &mut Context<'_>, now: Duration) -> bool {
        for _ in 0..SESSIONS_PER_ROUND {
            let Some(id) = self.ready.pop_front() else {
                return true;
            };
            let mut resume = false;
            loop {
                match self.service(id, now, resume) {
                    Serviced::Done => break,
                    // Each yield wrote at least one datagram, so this ends.
                    Serviced::Yielded => resume = true,
                    Serviced::SlotsFull => {
                        if !self.io.poll_flush(cx, now, &self.shared) {
                            self.ready.push_front(id);
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// Runs a session's timers, collects its datagrams into the transmit
    /// slots, frees it when finished, else arms its next deadline.
    /// `resume`: a call after `SlotsFull` or `Yielded` (its timers ran).
    fn service(&mut self, id: SessionId, now: Duration, resume: bool) -> Serviced {
        let Some(session) = self.table.get(id).cloned() else {
            return Serviced::Done;
        };
        let (finished, sunk);
        let dest = self.table.peer(id).unwrap_or(session.peer);
        {
            let mut guard = lock(&session.state);
            let st = &mut *guard;
            st.clear_deferred();
            if !resume {
                st.conn.handle_timeout(now);
            }
            loop {
                if self.io.free_slots() < self.slots_needed {
                    return Serviced::SlotsFull;
                }
                let Some(t) = st.conn.poll_transmit(now, self.io.next_slot()) else {
                    break;
                };
                self.io.push(dest, t.len);
                if session.handle_waiting() {
                    return Serviced::Yielded;
                }
            }
            finished = st.conn.is_finished();
            // Datagrams queued before a sink was installed.
            sunk = st.has_sink && self.sink_batch.take(&mut st.conn);
            if let Some(e) = st.conn.error() {
                st.wake_all();
                // A session whose peer never proved it receives (a forged
                // source, at the proof timeout: a flood would say a line
                // each, thousands a minute) and a failed connect (its caller
                // has the error) are debug; the stats count both.
                if e != SessionError::Aborted {
                    if st.conn.is_proven() && e != SessionError::ConnectTimeout {
                        tracing::info!(peer = %session.peer, conv = session.conv, "kcp session failed: {e}");
                    } else {
                        tracing::debug!(peer = %session.peer, conv = session.conv, "kcp session failed: {e}");
                    }
                }
            } else if !finished {
                if st.conn.writable() {
                    wake(&mut st.write_waker);
                }
                if st.conn.datagram_writable() {
                    wake(&mut st.dgram_write_waker);
                }
                let next = st.conn.poll_timeout();
                if next != st.armed {
                    st.armed = next;
                    self.table.schedule(id, next);
                }
            }
            st.queued = false;
        }
        if sunk {
            session.hand_to_sink(&self.sink_batch);
        }
        if finished {
            // Released sessions that are done, and failed ones.
            self.remove_session(id, SessionError::Aborted, now);
        }
        Serviced::Done
    }

    /// Points the one `Sleep` at the earliest deadline. Returns true when
    /// that deadline has already passed (the caller runs another round).
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> bool {
        let mut next = self.table.next_deadline();
        let also = [self.io.rate_wait, self.deferred_until];
        for w in also.into_iter().flatten() {
            next = Some(next.map_or(w, |n| n.min(w)));
        }
        let Some(at) = next else {
            self.sleep_at = None;
            return false;
        };
        if self.sleep_at != Some(at) {
            self.sleep.as_mut().reset(self.epoch + at);
            self.sleep_at = Some(at);
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            self.sleep_at = None;
            return true;
        }
        false
    }

    fn finished(&self) -> bool {
        let idle = self.table.live() == 0 && !self.io.has_pending();
        match self.role {
            Role::Client => idle,
            Role::Listener => !self.table.accepting() && idle,
        }
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut rounds = 0;
        // Deferred by the last poll's input: their readers have run since
        // (or did not call in time).
        this.ready.extend(this.deferred.drain(..));
        this.deferred_until = None;
        loop {
            let now = this.now();
            this.drain_inbox(cx, now);
            let mut more = false;
            let mut drained = false;
            let batches = match this.role {
                Role::Client => 1,
                Role::Listener => 2,
            };
            // A batch that emptied the socket (its readiness cleared) is
            // followed by one more poll, which only registers the readiness
            // waker (no system call), rather than by a whole round: at one
            // datagram per wake-up that round was a clock read, a flush and
            // a timer poll per datagram for nothing.
            for poll in 1..=batches + 1 {
                match this.poll_recv_batch(cx, now) {
                    Poll::Pending => {
                        drained = true;
                        break;
                    }
                    // The budget is spent: by a batch that left datagrams
                    // waiting, or by the extra poll after a drained one
                    // (datagrams came meanwhile).
                    Poll::Ready(())
                        if poll >= batches && (poll > batches || !this.io.recv_drained()) =>
                    {
                        more = true;
                        break;
                    }
                    Poll::Ready(()) => {}
                }
            }
            this.take_refusal(now);
            this.take_path_failure(now);
            this.fire_timers(now);
            let unblocked =
                this.service_ready(cx, now) && this.io.poll_flush(cx, now, &this.shared);
            if unblocked && !this.ready.is_empty() {
                more = true;
            }
            // A send just reported the peer's port unreachable: act now.
            more |= this.io.refused || this.io.path_failed;
            // Not while a session another shard handed over waits in the
            // inbox: this task must run on to serve it.
            if this.finished() && this.shared.end() {
                return Poll::Ready(());
            }
            if !this.deferred.is_empty() {
                // A listener whose socket is drained (its readiness waker
                // registered) and whose ready sessions are all serviced
                // waits for the readers it woke: the last one to call wakes
                // it from its own task, so tokio polls the driver next on
                // that worker. A yield is woken from tokio's deferred list
                // only after the worker searched for work, and a searching
                // worker that finds work wakes the idle one, for nothing,
                // once per receive batch. A reader that does not call leaves
                // the ACKs for the next datagram, handle call or timer, at
                // the latest one flush interval on.
                if this.role == Role::Listener && drained && this.ready.is_empty() {
                    let interval = u64::from(this.shared.config.arq.interval);
                    this.deferred_until = Some(now + Duration::from_millis(interval));
                    if !this.poll_timer(cx) {
                        return Poll::Pending;
                    }
                }
                // Yield once so the woken readers run (and perhaps reply)
                // before these sessions flush.
                yield_after_woken(cx);
                return Poll::Pending;
            }
            if this.poll_timer(cx) {
                more = true;
            }
            if !more {
                return Poll::Pending;
            }
            rounds += 1;
            if rounds >= MAX_ROUNDS {
                // Bounded work per wake-up: let other tasks run.
                yield_after_woken(cx);
                return Poll::Pending;
            }
        }
    }
}

/// Has the driver polled again once the tasks it just woke (readers, on
/// this worker) and the others ready here have run, without asking another
/// worker to take it: the yield after waking readers and after
/// [`MAX_ROUNDS`].
///
/// `cx.waker().wake_by_ref()` from inside `poll` is a yield that tokio's
/// multi-thread scheduler announces to a parked worker (a futex or eventfd
/// wake-up per receive batch), which then steals the driver while the
/// reader runs here: every batch crossed cores, the received bytes were
/// read cold, and a bulk receiver spent a tenth of its CPU switching
/// tasks. `yield_now`'s first poll instead queues the waker on this
/// worker's deferred list, woken when the worker has run what is ready
/// (the readers just woken sit in its LIFO slot); a reader that writes a
/// reply meanwhile wakes the driver itself, as any handle does. Outside a
/// tokio runtime (or where it has no deferred list) it wakes at once, as
/// before. The future is dropped after its first poll: the waker it
/// queued stays queued.
fn yield_after_woken(cx: &mut Context<'_>) {
    let mut yielded = std::pin::pin!(tokio::task::yield_now());
    if yielded.as_mut().poll(cx).is_ready() {
        cx.waker().wake_by_ref();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.shared.accept.close(&self.shared);
        for s in self.table.sessions() {
            let mut st = lock(&s.state);
            st.removed = true;
            st.conn.abort(SessionError::Aborted);
            st.wake_all();
        }
    }
}

/// Binds the listener's sockets at `addr` and spawns one driver per socket:
/// one socket, or [`ConfigInner::listener_shards`] sockets bound to the same
/// address with `SO_REUSEPORT` (the first one's port when `addr` asks for
/// port 0), all feeding one accept backlog and sharing one [`Group`]. Every
/// socket is bound before any driver runs.
pub(crate) fn spawn_listener(
    addr: SocketAddr,
    config: Arc<ConfigInner>,
) -> std::io::Result<Vec<Arc<DriverShared>>> {
    let n = config.listener_shards();
    let accept = Arc::new(Accept::default());
    let (burst, per_second) = config.sessions_per_source;
    let limits = Limits::new(config.max_sessions, burst, per_second);
    let group = Arc::new(Group::new(Instant::now(), limits, n, config.migration));
    let mut drivers = Vec::with_capacity(n);
    let mut bind = addr;
    // Fake TCP opens its shards together (they share the kernel's socket).
    let mut fake_tcp = io::open_fake_tcp_shards(addr, &config, n)?.into_iter();
    for index in 0..n {
        let (socket, udp) = match fake_tcp.next() {
            Some(shard) => shard,
            None => open_listener_socket(bind, &config, n)?,
        };
        let member = Some((group.clone(), index));
        let driver = Driver::new(
            socket,
            udp,
            config.clone(),
            Role::Listener,
            accept.clone(),
            member,
        )?;
        bind = driver.shared.local_addr;
        drivers.push(driver);
    }
    let shared: Vec<_> = drivers.iter().map(|d| d.shared.clone()).collect();
    group.set_shards(shared.clone());
    for driver in drivers {
        tokio::spawn(driver);
    }
    Ok(shared)
}

/// Connects the bound client socket `sock` to `peer` (so the kernel
/// reports an ICMP port unreachable, and `local_addr` is the address the
/// route picked), creates the one session, starts its connect probe when
/// the configuration asks for it, and spawns the driver.
pub(crate) fn spawn_client(
    sock: socket2::Socket,
    peer: SocketAddr,
    config: Arc<ConfigInner>,
) -> std::io::Result<Arc<SessionShared>> {
    sock.connect(&peer.into())?;
    let (socket, udp) = wrap_socket(sock, &config)?;
    spawn_client_on(Socket::Udp(socket), udp, peer, config)
}

/// Opens a fake-TCP flow to `peer` from `bind` (a real kernel handshake;
/// [`crate::Carrier::FakeTcp`]) and runs the client session on it as
/// [`spawn_client`] does on UDP.
pub(crate) async fn spawn_fake_tcp_client(
    bind: SocketAddr,
    peer: SocketAddr,
    config: Arc<ConfigInner>,
) -> std::io::Result<Arc<SessionShared>> {
    let handshake =
        crate::sys::faketcp::FakeTcp::connect(bind, peer, crate::crypto::MAX_DATAGRAM, config.dscp);
    // The kernel's handshake retries SYNs for about two minutes; the
    // connect timeout bounds it as it bounds the connect probe.
    let fake = match config.connect_timeout {
        Some(limit) => tokio::time::timeout(limit, handshake).await.map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "fake TCP: the kernel's handshake did not complete within connect_timeout",
            )
        })??,
        None => handshake.await?,
    };
    let socket = Socket::FakeTcp(Box::new(crate::sys::faketcp::FakeTcpSocket::new(fake)?));
    spawn_client_on(socket, UdpState::for_fake_tcp(), peer, config)
}

/// The client session on a connected `socket`, its driver spawned.
fn spawn_client_on(
    socket: Socket,
    udp: UdpState,
    peer: SocketAddr,
    config: Arc<ConfigInner>,
) -> std::io::Result<Arc<SessionShared>> {
    let accept = Arc::new(Accept::default());
    let mut driver = Driver::new(socket, udp, config, Role::Client, accept, None)?;
    let conv = match driver.shared.config.conv {
        Some(c) => c,
        None => driver.io.random_conv(),
    };
    let now = driver.now();
    let (_, session) = driver.insert_session(peer, conv, now).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "kcp configuration refused by the ARQ or FEC",
        )
    })?;
    {
        let mut st = lock(&session.state);
        if driver.shared.config.connect_probe {
            st.conn.connect(now);
        }
        // A listener that follows its clients needs a fresh datagram from
        // the new address: a client that only downloads sends one when its
        // data stops coming.
        st.conn.probe_when_quiet(driver.shared.config.migration);
    }
    tokio::spawn(driver);
    Ok(session)
}

/// A datagram of `conv` from an address no session of this shard (`group`:
/// the listener's group and this driver's index) has, and a conv none of
/// them holds: when another shard's session alone holds it (its peer moved
/// to an address the kernel steers here), handed to that shard's driver.
/// Returns whether it was (false: no such session, or that driver's queue
/// of them is full).
fn forward_foreign(
    group: Option<&(Arc<Group>, usize)>,
    conv: u32,
    d: io::Datagram,
    plain: &[u8],
) -> bool {
    let Some((g, me)) = group else {
        return false;
    };
    if !g.crosses() {
        return false;
    }
    let Some(home) = g.home_elsewhere(conv, *me).and_then(|h| g.shard(h)) else {
        return false;
    };
    home.forward(Forwarded {
        peer: d.peer,
        arrived: d.arrived,
        wire: d.end - d.start,
        plain: plain.to_vec(),
        from: *me,
        again: false,
    })
}
