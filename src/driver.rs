//! The one task per UDP socket.
//!
//! A [`Driver`] owns a UDP socket and every session on it. It is the only
//! place that reads the clock, draws random numbers, or makes system calls;
//! streams and listeners talk to it through shared state:
//!
//! - each session's [`SessionShared`] holds the ARQ, FEC coder state, wakers
//!   and flags behind a `std::sync::Mutex` that is held only for pure state
//!   changes (never across an `.await` or a system call);
//! - a session that needs the driver (new data written, window opened,
//!   dropped, shut down) pushes its id into the driver's inbox once
//!   (a `queued` flag deduplicates, so the inbox is bounded by the number of
//!   sessions) and wakes the driver task.
//!
//! One wake-up of the driver: drain the inbox, receive a batch of datagrams
//! (open, FEC, ARQ, wake readers), fire due timers, let the sessions that have
//! something to say write datagrams into the reused transmit slots (FEC, then
//! seal), and send them in batches. A wake-up does a bounded number of
//! rounds, then wakes itself and yields, so a flood cannot starve the runtime.
//! When the socket is not writable the unsent datagrams stay in their slots
//! and the sessions stay queued; nothing we produced is ever dropped, the KCP
//! windows are the flow control.
//!
//! Timers: one deadline heap with lazy invalidation (an entry counts only if
//! it still equals the session's current deadline) and one `Sleep`, reset only
//! when the earliest deadline moves. A session with nothing in flight and no
//! idle timeout has no deadline at all and costs nothing while quiet.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::arq::{Kcp, Origin, Timestamp};
use crate::config::{ConfigInner, MAX_DATAGRAM};
use crate::crypto::PacketCrypto;
use crate::fec::{self, FecDecoder, FecEncoder, PacketKind};
use crate::sys::{BATCH_SIZE, RecvMeta, Transmit, UdpState};

/// Receive batches (of up to `BATCH_SIZE` messages) a listener reads per
/// round, and rounds per wake-up before the driver yields.
const MAX_ROUNDS: usize = 8;
/// Sessions serviced per round at most.
const SESSIONS_PER_ROUND: usize = 256;
/// Receive buffers of a client socket (a listener uses `BATCH_SIZE`).
const CLIENT_RECV_BUFFERS: usize = 8;
/// How long a closed (peer address, conv) keeps late datagrams from
/// creating a new session.
const TOMBSTONE_TTL: Duration = Duration::from_secs(60);
/// Tombstones kept at most; the oldest go first.
const MAX_TOMBSTONES: usize = 65_536;
/// Rate limiter burst in bytes (kcp-go: 64 datagrams of 1500 bytes).
const RATE_BURST: f64 = 96_000.0;
/// Receive buffer asked for when the configuration leaves it to us.
const DEFAULT_RECV_BUFFER: usize = 4 << 20;
/// Smallest plaintext worth looking at (kcp-go: `min(24, 8 + 4)`).
const MIN_PACKET: usize = 12;

/// Locks a mutex, ignoring poisoning: every critical section leaves the
/// state consistent, and a panic elsewhere must not take the socket down.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A slot in the driver's session table, with a generation so a stale id
/// never reaches a newer session in the same slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SessionId {
    idx: u32,
    generation: u32,
}

/// Why a session stopped working; turned into an `io::Error` per call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SessionError {
    /// A segment reached the dead-link transmission limit.
    DeadLink,
    /// Nothing valid arrived for the idle timeout.
    Idle,
    /// The peer started a new conversation from the same address.
    Reset,
    /// The driver went away (runtime shut down, listener dropped before
    /// accept).
    Aborted,
}

impl SessionError {
    pub(crate) fn to_io(self) -> io::Error {
        match self {
            Self::DeadLink => io::Error::new(
                io::ErrorKind::TimedOut,
                "kcp peer unreachable: retransmission limit (dead_link) reached",
            ),
            Self::Idle => io::Error::new(
                io::ErrorKind::TimedOut,
                "kcp session idle: nothing received within idle_timeout",
            ),
            Self::Reset => io::Error::new(
                io::ErrorKind::ConnectionReset,
                "kcp peer restarted the conversation from the same address",
            ),
            Self::Aborted => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "kcp session driver stopped",
            ),
        }
    }
}

/// Wire counters of one session (plain integers under the session lock).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WireCounters {
    pub(crate) datagrams_in: u64,
    pub(crate) bytes_in: u64,
    pub(crate) datagrams_out: u64,
    pub(crate) bytes_out: u64,
    pub(crate) parity_out: u64,
    pub(crate) parity_in: u64,
    pub(crate) input_errors: u64,
}

/// Everything a session shares between its handles and the driver.
pub(crate) struct SessionState {
    pub(crate) kcp: Kcp,
    fec_enc: Option<FecEncoder>,
    pub(crate) fec_dec: Option<FecDecoder>,
    pub(crate) read_waker: Option<Waker>,
    pub(crate) write_waker: Option<Waker>,
    /// Set once; every later read and write fails with it.
    pub(crate) error: Option<SessionError>,
    /// `shutdown` was called: writes fail, the driver wakes the writer when
    /// everything was acknowledged or at `shutdown_deadline`.
    pub(crate) write_closed: bool,
    pub(crate) shutdown_deadline: Option<Instant>,
    /// Every user handle is gone: flush in the background until
    /// `release_deadline`, then free.
    released: bool,
    release_deadline: Option<Instant>,
    /// In the driver's inbox or ready queue.
    queued: bool,
    /// The timer currently scheduled in the driver's heap.
    pub(crate) deadline: Option<Instant>,
    last_input: Instant,
    /// Removed from the driver's table.
    removed: bool,
    pub(crate) wire: WireCounters,
}

impl SessionState {
    /// The FEC encoder's counters (default when FEC is off).
    pub(crate) fn fec_enc_stats(&self) -> fec::FecStats {
        self.fec_enc
            .as_ref()
            .map(|e| e.stats().clone())
            .unwrap_or_default()
    }
}

/// One session as seen by its handles.
pub(crate) struct SessionShared {
    id: SessionId,
    pub(crate) peer: SocketAddr,
    pub(crate) conv: u32,
    pub(crate) state: Mutex<SessionState>,
    pub(crate) driver: Arc<DriverShared>,
}

impl fmt::Debug for SessionShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("peer", &self.peer)
            .field("conv", &self.conv)
            .finish_non_exhaustive()
    }
}

impl SessionShared {
    /// Asks the driver to look at this session (after a write, a read that
    /// opened the window, shutdown or drop). Call with the state lock
    /// released or pass the guard: `st.queued` deduplicates.
    pub(crate) fn notify_driver(&self, st: &mut SessionState) {
        if st.queued || st.removed {
            return;
        }
        st.queued = true;
        self.driver.push_inbox(self.id);
    }

    /// All user handles are gone.
    pub(crate) fn release(&self) {
        let mut st = lock(&self.state);
        st.released = true;
        st.read_waker = None;
        st.write_waker = None;
        st.release_deadline = Some(Instant::now() + self.driver.config.linger);
        self.notify_driver(&mut st);
    }

    /// The configuration of the socket this session lives on.
    pub(crate) fn config(&self) -> &ConfigInner {
        &self.driver.config
    }
}

/// Wakes an optional waker, leaving the slot empty.
fn wake(slot: &mut Option<Waker>) {
    if let Some(w) = slot.take() {
        w.wake();
    }
}

/// Stores `cx`'s waker in `slot` unless it is already there.
pub(crate) fn register(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

/// Socket-level counters (relaxed atomics), shared with listener and stream
/// handles for their `stats()`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) datagrams_in: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) datagrams_out: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) bad_crypto: AtomicU64,
    pub(crate) bad_fec: AtomicU64,
    pub(crate) bad_kcp: AtomicU64,
    pub(crate) unknown_session: AtomicU64,
    pub(crate) conv_mismatch: AtomicU64,
    pub(crate) tombstoned: AtomicU64,
    pub(crate) refused_backlog: AtomicU64,
    pub(crate) refused_cap: AtomicU64,
    pub(crate) oob: AtomicU64,
    pub(crate) recv_errors: AtomicU64,
    pub(crate) send_errors: AtomicU64,
    pub(crate) sessions_opened: AtomicU64,
    pub(crate) sessions_closed: AtomicU64,
    pub(crate) sessions_live: AtomicU64,
    /// Session deadlines that fired (ARQ ticks, idle, linger).
    pub(crate) timer_fires: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn add(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}

/// Messages from handles to the driver task.
#[derive(Default)]
struct Inbox {
    dirty: Vec<SessionId>,
    waker: Option<Waker>,
    listener_closed: bool,
}

/// The accept backlog of a listener, shared by its drivers (one, or one per
/// `SO_REUSEPORT` socket).
#[derive(Default)]
pub(crate) struct Accept {
    pub(crate) queue: Mutex<AcceptQueue>,
    pub(crate) notify: Notify,
}

/// Sessions created by a listener and not yet accepted (bounded by
/// `accept_backlog`).
#[derive(Default)]
pub(crate) struct AcceptQueue {
    pub(crate) queue: VecDeque<(Arc<SessionShared>, SocketAddr)>,
    /// The driver is gone: `accept` fails.
    pub(crate) closed: bool,
}

/// The part of a driver its handles see.
pub(crate) struct DriverShared {
    pub(crate) local_addr: SocketAddr,
    /// The socket's batched-I/O state (capabilities and system-call counters).
    pub(crate) udp: UdpState,
    pub(crate) config: Arc<ConfigInner>,
    inbox: Mutex<Inbox>,
    pub(crate) counters: Counters,
    pub(crate) accept: Arc<Accept>,
}

impl fmt::Debug for DriverShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl DriverShared {
    fn push_inbox(&self, id: SessionId) {
        let waker = {
            let mut inbox = lock(&self.inbox);
            inbox.dirty.push(id);
            inbox.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The listener handle is gone: refuse new peers, drop the backlog, and
    /// stop once the remaining sessions are done.
    pub(crate) fn close_listener(&self) {
        let waker = {
            let mut inbox = lock(&self.inbox);
            inbox.listener_closed = true;
            inbox.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Whose socket this is.
#[derive(Clone, Copy, Debug)]
enum Role {
    /// A client stream: one session, one peer.
    Client,
    /// A listener: sessions are created by the first valid packet of a peer.
    Listener,
}

/// A session slot in the driver's table.
struct Slot {
    generation: u32,
    session: Option<Arc<SessionShared>>,
}

/// Token bucket for `rate_limit`.
struct RateLimiter {
    rate: f64,
    tokens: f64,
    last: Instant,
}

/// The task that owns one UDP socket and all sessions on it.
pub(crate) struct Driver {
    shared: Arc<DriverShared>,
    socket: UdpSocket,
    crypto: Arc<PacketCrypto>,
    role: Role,
    epoch: Instant,
    rng: ChaCha20Rng,
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    by_addr: HashMap<SocketAddr, SessionId>,
    tombstones: HashMap<(SocketAddr, u32), Instant>,
    tomb_order: VecDeque<((SocketAddr, u32), Instant)>,
    heap: BinaryHeap<Reverse<(Instant, SessionId)>>,
    sleep: Pin<Box<Sleep>>,
    sleep_at: Option<Instant>,
    ready: VecDeque<SessionId>,
    /// Sessions fed input that woke a reader: serviced at the next poll,
    /// after the driver yielded once, so a reply the application writes
    /// meanwhile leaves in the same datagram as the ACKs.
    deferred: Vec<SessionId>,
    inbox_scratch: Vec<SessionId>,
    /// Packets of the current receive batch, by session (reused).
    routed: Vec<Routed>,
    listener_open: bool,
    // Receive buffers: `rx_count` buffers of `rx_size` bytes, laid end to end.
    rx: Vec<u8>,
    rx_size: usize,
    rx_count: usize,
    rx_meta: Vec<RecvMeta>,
    // Transmit slots of `stride` bytes (the configured MTU, the largest
    // datagram we send), laid end to end so a run of full-size datagrams to
    // one peer is contiguous and goes out as one GSO message:
    // `[tx_sent, tx_count)` wait to be sent, `[tx_sealed, tx_count)` still
    // need sealing.
    tx: Vec<u8>,
    stride: usize,
    tx_len: Vec<usize>,
    tx_dest: Vec<SocketAddr>,
    tx_slots: usize,
    tx_count: usize,
    tx_sealed: usize,
    tx_sent: usize,
    // Recovered-packet scratch for the FEC decoder.
    scratch: Vec<u8>,
    nonce: [u8; 16],
    rate: Option<RateLimiter>,
    rate_wait: Option<Instant>,
}

/// A received packet routed to a session, waiting in the batch for
/// [`Driver::deliver_routed`]: the plaintext is `rx[start..end]`.
#[derive(Clone, Copy)]
struct Routed {
    id: SessionId,
    start: usize,
    end: usize,
    kind: PacketKind,
    /// The datagram's size on the wire.
    wire: usize,
}

/// What a call to [`Driver::service`] ended with.
#[derive(PartialEq, Eq)]
enum Serviced {
    Done,
    /// The transmit slots are full; the session stays queued.
    SlotsFull,
}

impl Driver {
    /// Builds a driver around a bound, non-blocking socket. `udp` was made by
    /// `UdpState::new` on the same socket.
    fn new(
        socket: UdpSocket,
        udp: UdpState,
        config: Arc<ConfigInner>,
        role: Role,
        accept: Arc<Accept>,
    ) -> io::Result<Self> {
        let local_addr = socket.local_addr()?;
        let crypto = config.crypto.clone();
        let parity = config.fec.map_or(0, |(_, p)| p);
        let tx_slots = BATCH_SIZE + parity;
        let stride = config.mtu.clamp(1, MAX_DATAGRAM);
        let rx_count = match role {
            Role::Client => CLIENT_RECV_BUFFERS,
            Role::Listener => BATCH_SIZE,
        };
        let rx_size = if udp.gro_segments() > 1 {
            (udp.gro_segments() * MAX_DATAGRAM).min(65_536)
        } else {
            MAX_DATAGRAM
        };
        let now = Instant::now();
        let rate = (config.rate_limit > 0).then(|| RateLimiter {
            rate: config.rate_limit as f64,
            tokens: RATE_BURST,
            last: now,
        });
        let shared = Arc::new(DriverShared {
            local_addr,
            udp,
            config,
            inbox: Mutex::new(Inbox::default()),
            counters: Counters::default(),
            accept,
        });
        Ok(Self {
            shared,
            socket,
            crypto,
            role,
            epoch: now,
            rng: ChaCha20Rng::from_os_rng(),
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            by_addr: HashMap::new(),
            tombstones: HashMap::new(),
            tomb_order: VecDeque::new(),
            heap: BinaryHeap::new(),
            sleep: Box::pin(tokio::time::sleep_until(now)),
            sleep_at: None,
            ready: VecDeque::new(),
            deferred: Vec::new(),
            inbox_scratch: Vec::new(),
            routed: Vec::with_capacity(rx_count * 4),
            listener_open: matches!(role, Role::Listener),
            rx: vec![0; rx_count * rx_size],
            rx_size,
            rx_count,
            rx_meta: vec![RecvMeta::default(); rx_count],
            tx: vec![0; tx_slots * stride],
            stride,
            tx_len: vec![0; tx_slots],
            tx_dest: vec![local_addr; tx_slots],
            tx_slots,
            tx_count: 0,
            tx_sealed: 0,
            tx_sent: 0,
            scratch: vec![0; MAX_DATAGRAM],
            nonce: [0; 16],
            rate,
            rate_wait: None,
        })
    }

    /// The shared half, for handles.
    fn shared(&self) -> &Arc<DriverShared> {
        &self.shared
    }

    /// Wrapping KCP clock: milliseconds since the driver started.
    fn ts(&self, now: Instant) -> Timestamp {
        let ms = now.saturating_duration_since(self.epoch).as_millis();
        Timestamp::from_millis(ms as u32)
    }

    /// The instant of a KCP timestamp, given `now` and its timestamp.
    fn instant_of(now: Instant, now_ts: Timestamp, at: Timestamp) -> Instant {
        let ms = at.diff(now_ts).max(0) as u64;
        now + Duration::from_millis(ms)
    }

    fn session(&self, id: SessionId) -> Option<&Arc<SessionShared>> {
        let slot = self.slots.get(id.idx as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.session.as_ref()
    }

    /// Creates a session for `peer`/`conv` and registers it.
    /// The session starts queued, so the driver services it once and arms
    /// its timers (an idle timeout runs from creation).
    fn insert_session(&mut self, peer: SocketAddr, conv: u32, mut st: SessionState) -> SessionId {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    session: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.slots.get(idx as usize).map_or(0, |s| s.generation);
        let id = SessionId { idx, generation };
        st.queued = true;
        self.ready.push_back(id);
        let session = Arc::new(SessionShared {
            id,
            peer,
            conv,
            state: Mutex::new(st),
            driver: self.shared.clone(),
        });
        if let Some(slot) = self.slots.get_mut(idx as usize) {
            slot.session = Some(session);
        }
        self.by_addr.insert(peer, id);
        self.live += 1;
        bump(&self.shared.counters.sessions_opened);
        bump(&self.shared.counters.sessions_live);
        tracing::debug!(%peer, conv, local = %self.shared.local_addr, "kcp session opened");
        id
    }

    /// A fresh session state for `conv`.
    fn new_state(&self, conv: u32, now: Instant) -> Option<SessionState> {
        let config = &self.shared.config;
        let mut kcp = Kcp::new(conv, &config.arq).ok()?;
        // Input ACKs flushed late (see `deferred`) share the reply's datagram.
        kcp.set_merge_flushes(true);
        let fec_enc = match config.fec {
            Some((d, p)) => {
                let mut enc = FecEncoder::new(d, p).ok()?;
                enc.set_group_deadline(config.fec_group_deadline);
                Some(enc)
            }
            None => None,
        };
        Some(SessionState {
            kcp,
            fec_enc,
            fec_dec: None,
            read_waker: None,
            write_waker: None,
            error: None,
            write_closed: false,
            shutdown_deadline: None,
            released: false,
            release_deadline: None,
            queued: false,
            deadline: None,
            last_input: now,
            removed: false,
            wire: WireCounters::default(),
        })
    }

    /// Frees a session: out of the table, tombstoned, handles woken with
    /// `error` (if they are still there).
    fn remove_session(&mut self, id: SessionId, error: SessionError, now: Instant) {
        let Some(slot) = self.slots.get_mut(id.idx as usize) else {
            return;
        };
        if slot.generation != id.generation {
            return;
        }
        let Some(session) = slot.session.take() else {
            return;
        };
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.idx);
        self.live -= 1;
        if self.by_addr.get(&session.peer) == Some(&id) {
            self.by_addr.remove(&session.peer);
        }
        self.add_tombstone(session.peer, session.conv, now);
        {
            let mut st = lock(&session.state);
            st.removed = true;
            st.deadline = None;
            if !st.released && st.error.is_none() {
                st.error = Some(error);
            }
            wake(&mut st.read_waker);
            wake(&mut st.write_waker);
        }
        bump(&self.shared.counters.sessions_closed);
        self.shared
            .counters
            .sessions_live
            .fetch_sub(1, Ordering::Relaxed);
        tracing::debug!(peer = %session.peer, conv = session.conv, "kcp session closed");
    }

    fn add_tombstone(&mut self, peer: SocketAddr, conv: u32, now: Instant) {
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

    fn prune_tombstones(&mut self, now: Instant) {
        while let Some(&(_, until)) = self.tomb_order.front() {
            if until > now {
                break;
            }
            self.pop_tombstone();
        }
    }

    /// Takes the handles' notifications; registers the task's waker.
    fn drain_inbox(&mut self, cx: &Context<'_>, now: Instant) {
        let listener_closed;
        {
            let mut inbox = lock(&self.shared.inbox);
            std::mem::swap(&mut inbox.dirty, &mut self.inbox_scratch);
            register(&mut inbox.waker, cx);
            listener_closed = inbox.listener_closed;
        }
        self.ready.extend(self.inbox_scratch.drain(..));
        if listener_closed && self.listener_open {
            self.listener_open = false;
            let backlog: Vec<_> = {
                let mut q = lock(&self.shared.accept.queue);
                q.closed = true;
                // Only this driver's sessions: the backlog may be shared
                // with the other sockets of a `reuse_port` group.
                let mine = |s: &Arc<SessionShared>| Arc::ptr_eq(&s.driver, &self.shared);
                let ids = q
                    .queue
                    .iter()
                    .filter(|(s, _)| mine(s))
                    .map(|(s, _)| s.id)
                    .collect();
                q.queue.retain(|(s, _)| !mine(s));
                ids
            };
            for id in backlog {
                self.remove_session(id, SessionError::Aborted, now);
            }
        }
    }

    /// One receive system call and the datagrams it brought. `Ready(true)`
    /// when something was received, `Pending` when the socket is drained.
    fn poll_recv_batch(&mut self, cx: &mut Context<'_>, now: Instant) -> Poll<bool> {
        let got = loop {
            match self.socket.poll_recv_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => {
                    bump(&self.shared.counters.recv_errors);
                    return Poll::Ready(false);
                }
                Poll::Ready(Ok(())) => {}
            }
            let (socket, udp, rx, meta) = (
                &self.socket,
                &self.shared.udp,
                &mut self.rx,
                &mut self.rx_meta,
            );
            let size = self.rx_size;
            let count = self.rx_count;
            // A short batch (fewer messages than asked for) means the kernel
            // found the queue empty: `recvmmsg` and the portable loop stop
            // early only at EAGAIN or at an error, and errors cannot arise
            // mid-queue here (driver sockets are never connected and do not
            // set IP_RECVERR, so no ICMP error is queued; the portable path
            // says when it holds one back). Reporting it to tokio as
            // `WouldBlock` clears the readiness now instead of with one more
            // `recvmmsg` that would return EAGAIN. A datagram that arrives
            // meanwhile is not missed: tokio clears only the readiness it
            // handed out, not an event delivered after it.
            let mut drained = 0;
            let res = socket.try_io(Interest::READABLE, || {
                let mut chunks = rx.chunks_mut(size);
                let mut bufs: [IoSliceMut<'_>; BATCH_SIZE] =
                    std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
                let n = count.min(udp.batch_size());
                let got = udp.recv(
                    socket2::SockRef::from(socket),
                    bufs.get_mut(..n).unwrap_or_default(),
                    meta,
                )?;
                if got > 0 && got < n && !udp.recv_error_pending() {
                    drained = got;
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(got)
            });
            match res {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && drained > 0 => break drained,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => {
                    // ICMP errors, truncation reports...: counted, never fatal.
                    bump(&self.shared.counters.recv_errors);
                    return Poll::Ready(false);
                }
            }
        };
        for i in 0..got {
            let Some(&m) = self.rx_meta.get(i) else { break };
            let start = i * self.rx_size;
            let end = start + m.len.min(self.rx_size);
            let mut off = start;
            let stride = m.stride.max(1);
            while off < end {
                let next = (off + stride).min(end);
                self.handle_datagram(m.addr, off, next, now);
                off = next;
            }
        }
        self.deliver_routed(now);
        Poll::Ready(got > 0)
    }

    /// One datagram, `self.rx[start..end]`, from `peer`: opened in place,
    /// classified and routed (queued in `routed` for its session).
    fn handle_datagram(&mut self, peer: SocketAddr, start: usize, end: usize, now: Instant) {
        let counters = &self.shared.counters;
        bump(&counters.datagrams_in);
        add(&counters.bytes_in, end - start);
        let Some(datagram) = self.rx.get_mut(start..end) else {
            return;
        };
        let range = match self.crypto.open(datagram) {
            Ok(r) => r,
            Err(_) => {
                bump(&counters.bad_crypto);
                tracing::trace!(%peer, "datagram failed to open");
                return;
            }
        };
        let (pstart, pend) = (start + range.start, start + range.end);
        if pend > end || pstart > pend || pend - pstart < MIN_PACKET {
            bump(&counters.bad_kcp);
            return;
        }
        let Some(packet) = self.rx.get(pstart..pend) else {
            return;
        };
        let kind = fec::classify(packet);
        let (conv, sn) = match kind {
            PacketKind::Kcp => (read_u32(packet, 0), read_u32(packet, 12)),
            PacketKind::Data => (read_u32(packet, 8), read_u32(packet, 20)),
            PacketKind::Parity => (None, None),
            PacketKind::Oob => {
                bump(&counters.oob);
                return;
            }
        };
        let id = match self.by_addr.get(&peer).copied() {
            Some(id) => {
                let current = self.session(id).map(|s| s.conv);
                match (conv, current) {
                    (Some(c), Some(cur)) if c != cur => {
                        let takeover = sn == Some(0)
                            && matches!(self.role, Role::Listener)
                            && self.listener_open;
                        if !takeover {
                            bump(&self.shared.counters.conv_mismatch);
                            return;
                        }
                        // kcp-go: a new conversation at sn 0 from the same
                        // address replaces the old one (a restarted client).
                        self.remove_session(id, SessionError::Reset, now);
                        match self.create_from(peer, c, pstart, pend, kind, now) {
                            Some(id) => id,
                            None => return,
                        }
                    }
                    _ => id,
                }
            }
            None => match (self.role, conv) {
                (Role::Listener, Some(c)) if self.listener_open => {
                    match self.create_from(peer, c, pstart, pend, kind, now) {
                        Some(id) => id,
                        None => return,
                    }
                }
                _ => {
                    bump(&self.shared.counters.unknown_session);
                    return;
                }
            },
        };
        self.routed.push(Routed {
            id,
            start: pstart,
            end: pend,
            kind,
            wire: end - start,
        });
    }

    /// A listener's new session from its first packet `rx[pstart..pend]`.
    /// Refused (and counted) by a tombstone, the backlog or the session cap,
    /// or when the packet does not pass KCP input on a scratch ARQ: garbage
    /// that happens to decrypt never creates a session. The caller then
    /// delivers the packet to the new session.
    fn create_from(
        &mut self,
        peer: SocketAddr,
        conv: u32,
        pstart: usize,
        pend: usize,
        kind: PacketKind,
        now: Instant,
    ) -> Option<SessionId> {
        let shared = self.shared.clone();
        let counters = &shared.counters;
        self.prune_tombstones(now);
        if self.tombstones.contains_key(&(peer, conv)) {
            bump(&counters.tombstoned);
            return None;
        }
        if self.live >= self.shared.config.max_sessions {
            bump(&counters.refused_cap);
            return None;
        }
        if lock(&self.shared.accept.queue).queue.len() >= self.shared.config.accept_backlog {
            bump(&counters.refused_backlog);
            return None;
        }
        // Validate before registering: only a packet that parses as KCP for
        // this conv creates a session.
        let st = self.new_state(conv, now)?;
        let packet = self.rx.get(pstart..pend)?;
        let kcp_bytes = match kind {
            PacketKind::Kcp => packet,
            PacketKind::Data => fec::data_payload(packet)?,
            _ => return None,
        };
        let mut probe = Kcp::new(conv, &self.shared.config.arq).ok()?;
        if probe
            .handle_datagram(self.ts(now), kcp_bytes, Origin::Regular)
            .is_err()
        {
            bump(&counters.bad_kcp);
            return None;
        }
        let id = self.insert_session(peer, conv, st);
        if let Some(session) = self.session(id).cloned() {
            lock(&self.shared.accept.queue)
                .queue
                .push_back((session, peer));
            self.shared.accept.notify.notify_one();
        }
        Some(id)
    }

    /// Feeds the packets routed in this receive batch to their sessions:
    /// grouped by session (arrival order kept within each), so a session's
    /// lock is taken once per batch, not once per datagram.
    fn deliver_routed(&mut self, now: Instant) {
        if self.routed.is_empty() {
            return;
        }
        // Offsets grow in arrival order, so (id, start) keeps each session's order.
        self.routed.sort_unstable_by_key(|r| (r.id, r.start));
        let now_ts = self.ts(now);
        let mut i = 0;
        while let Some(first) = self.routed.get(i) {
            let id = first.id;
            let mut j = i + 1;
            while self.routed.get(j).is_some_and(|r| r.id == id) {
                j += 1;
            }
            self.deliver_run(id, i, j, now, now_ts);
            i = j;
        }
        self.routed.clear();
    }

    /// `routed[from..to]`, all for session `id`: FEC, ARQ, then wakers.
    fn deliver_run(
        &mut self,
        id: SessionId,
        from: usize,
        to: usize,
        now: Instant,
        now_ts: Timestamp,
    ) {
        let Some(session) = self.slots.get(id.idx as usize).and_then(|s| {
            (s.generation == id.generation)
                .then_some(s.session.as_ref())
                .flatten()
        }) else {
            return;
        };
        let counters = &self.shared.counters;
        let config = &self.shared.config;
        let (read_waker, write_waker);
        {
            let mut guard = lock(&session.state);
            let st = &mut *guard;
            if st.error.is_some() {
                return;
            }
            let mut ok = false;
            for r in self.routed.get(from..to).unwrap_or_default() {
                let Some(packet) = self.rx.get(r.start..r.end) else {
                    continue;
                };
                st.wire.datagrams_in += 1;
                st.wire.bytes_in += r.wire as u64;
                match r.kind {
                    PacketKind::Kcp => {
                        match st.kcp.handle_datagram(now_ts, packet, Origin::Regular) {
                            Ok(()) => ok = true,
                            Err(_) => {
                                st.wire.input_errors += 1;
                                bump(&counters.bad_kcp);
                            }
                        }
                    }
                    PacketKind::Data | PacketKind::Parity => {
                        if r.kind == PacketKind::Data {
                            match fec::data_payload(packet)
                                .map(|p| st.kcp.handle_datagram(now_ts, p, Origin::Regular))
                            {
                                Some(Ok(())) => ok = true,
                                _ => {
                                    st.wire.input_errors += 1;
                                    bump(&counters.bad_kcp);
                                }
                            }
                        } else {
                            st.wire.parity_in += 1;
                        }
                        let dec = st.fec_dec.get_or_insert_with(|| {
                            let (d, p) = config.fec.unwrap_or((1, 1));
                            FecDecoder::new(d, p)
                        });
                        if dec.handle(packet).is_err() {
                            bump(&counters.bad_fec);
                        } else {
                            ok |= r.kind == PacketKind::Parity;
                        }
                        while let Some(n) = dec.poll_recovered(&mut self.scratch) {
                            let Some(rec) = self.scratch.get(..n) else {
                                break;
                            };
                            if st
                                .kcp
                                .handle_datagram(now_ts, rec, Origin::Recovered)
                                .is_err()
                            {
                                st.wire.input_errors += 1;
                                bump(&counters.bad_kcp);
                            }
                        }
                    }
                    PacketKind::Oob => {}
                }
            }
            if ok {
                st.last_input = now;
            }
            read_waker = if st.kcp.readable() {
                st.read_waker.take()
            } else {
                None
            };
            write_waker = if st.kcp.send_capacity() > 0 || st.kcp.is_flushed() {
                st.write_waker.take()
            } else {
                None
            };
            if !st.queued {
                st.queued = true;
                if read_waker.is_some() {
                    self.deferred.push(id);
                } else {
                    self.ready.push_back(id);
                }
            }
        }
        // Woken outside the lock, so the reader does not block on it.
        if let Some(w) = read_waker {
            w.wake();
        }
        if let Some(w) = write_waker {
            w.wake();
        }
    }

    /// Moves sessions whose deadline passed to the ready queue.
    fn fire_timers(&mut self, now: Instant) {
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if at > now {
                break;
            }
            self.heap.pop();
            let Some(session) = self
                .slots
                .get(id.idx as usize)
                .filter(|s| s.generation == id.generation)
                .and_then(|s| s.session.as_ref())
            else {
                continue;
            };
            let mut st = lock(&session.state);
            if st.deadline != Some(at) {
                continue; // stale entry
            }
            st.deadline = None;
            bump(&self.shared.counters.timer_fires);
            if !st.queued {
                st.queued = true;
                self.ready.push_back(id);
            }
        }
        // Lazy invalidation leaves stale entries; rebuild when they dominate.
        if self.heap.len() > 4 * self.live + 1024 {
            let mut entries = Vec::with_capacity(self.live);
            for slot in &self.slots {
                if let Some(s) = &slot.session {
                    if let Some(at) = lock(&s.state).deadline {
                        entries.push(Reverse((at, s.id)));
                    }
                }
            }
            self.heap = BinaryHeap::from(entries);
        }
    }

    /// Lets up to `SESSIONS_PER_ROUND` ready sessions transmit. Returns false
    /// when the socket blocked with datagrams still waiting.
    fn service_ready(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        for _ in 0..SESSIONS_PER_ROUND {
            let Some(id) = self.ready.pop_front() else {
                return true;
            };
            loop {
                match self.service(id, now) {
                    Serviced::Done => break,
                    Serviced::SlotsFull => {
                        if !self.poll_flush_tx(cx, now) {
                            self.ready.push_front(id);
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// Runs a session's timers, collects its datagrams, checks its liveness
    /// and schedules its next deadline.
    fn service(&mut self, id: SessionId, now: Instant) -> Serviced {
        let now_ts = self.ts(now);
        let Some(session) = self.session(id).cloned() else {
            return Serviced::Done;
        };
        let config = self.shared.config.clone();
        let hc = self.crypto.header_len();
        let hf = config.fec_header();
        let kcp_mtu = config.arq.mtu;
        let need = 1 + config.fec.map_or(0, |(_, p)| p);
        let mut remove = None;
        {
            let mut guard = lock(&session.state);
            let st = &mut *guard;
            if st.error.is_none() {
                if let Some(t) = st.kcp.poll_timeout() {
                    if now_ts.diff(t) >= 0 {
                        st.kcp.handle_timeout(now_ts);
                    }
                }
                // kcpio-only FEC group deadline: close a group that did not
                // fill in time (fillers and parity come out of poll_parity).
                if let Some(enc) = st.fec_enc.as_mut() {
                    if enc.poll_timeout().is_some_and(|t| now_ts.diff(t) >= 0) {
                        enc.handle_timeout(now_ts);
                    }
                }
                loop {
                    // Parity of the group the last packet completed (or
                    // deadline fillers) first, so none is left undrained when
                    // the next packet is encoded.
                    if let Some(enc) = st.fec_enc.as_mut() {
                        loop {
                            let base = self.tx_count * self.stride;
                            let Some(buf) = self.tx.get_mut(base + hc..base + self.stride) else {
                                return Serviced::SlotsFull;
                            };
                            let Some(p) = enc.poll_parity(buf) else { break };
                            self.push_tx(session.peer, p);
                            st.wire.datagrams_out += 1;
                            st.wire.parity_out += 1;
                            st.wire.bytes_out += p as u64;
                        }
                    }
                    if self.tx_slots - self.tx_count < need {
                        return Serviced::SlotsFull;
                    }
                    let base = self.tx_count * self.stride;
                    let Some(slot) = self.tx.get_mut(base..base + self.stride) else {
                        return Serviced::Done;
                    };
                    let Some(kcp_buf) = slot.get_mut(hc + hf..hc + hf + kcp_mtu) else {
                        return Serviced::Done;
                    };
                    let Some(n) = st.kcp.poll_transmit(now_ts, kcp_buf) else {
                        break;
                    };
                    let payload = match (st.fec_enc.as_mut(), slot.get_mut(hc..)) {
                        (Some(enc), Some(buf)) => enc.encode(now_ts, buf, n),
                        _ => n,
                    };
                    self.push_tx(session.peer, payload);
                    st.wire.datagrams_out += 1;
                    st.wire.bytes_out += payload as u64;
                }
                if st.kcp.is_dead() {
                    st.error = Some(SessionError::DeadLink);
                    tracing::info!(peer = %session.peer, conv = session.conv, "kcp peer unreachable (dead link)");
                } else if let Some(idle) = config.idle_timeout {
                    if now.saturating_duration_since(st.last_input) >= idle {
                        st.error = Some(SessionError::Idle);
                        tracing::info!(peer = %session.peer, conv = session.conv, "kcp session idle timeout");
                    }
                }
            }
            let flushed = st.kcp.is_flushed();
            if st.error.is_some() {
                wake(&mut st.read_waker);
                wake(&mut st.write_waker);
                remove = st.error;
            } else if st.released
                && ((flushed && st.kcp.poll_timeout().is_none())
                    || st.release_deadline.is_none_or(|d| now >= d))
            {
                // Released: gone once nothing is left to send (data
                // acknowledged, last ACKs out), or at the linger deadline.
                remove = Some(SessionError::Aborted);
            } else {
                if st.write_waker.is_some() && (st.kcp.send_capacity() > 0 || flushed) {
                    wake(&mut st.write_waker);
                }
                if let Some(d) = st.shutdown_deadline {
                    if now >= d || flushed {
                        wake(&mut st.write_waker);
                    }
                }
                // Next deadline: the ARQ's, the idle timeout, shutdown and
                // release lingers.
                let mut next = st
                    .kcp
                    .poll_timeout()
                    .map(|t| Self::instant_of(now, now_ts, t));
                let mut consider = |t: Option<Instant>| {
                    if let Some(t) = t {
                        next = Some(next.map_or(t, |n: Instant| n.min(t)));
                    }
                };
                consider(config.idle_timeout.map(|i| st.last_input + i));
                consider(
                    st.fec_enc
                        .as_ref()
                        .and_then(FecEncoder::poll_timeout)
                        .map(|t| Self::instant_of(now, now_ts, t)),
                );
                if !flushed {
                    consider(st.shutdown_deadline.filter(|&d| d > now));
                    consider(st.release_deadline);
                }
                if next != st.deadline {
                    st.deadline = next;
                    if let Some(t) = next {
                        self.heap.push(Reverse((t, id)));
                    }
                }
            }
            st.queued = false;
        }
        if let Some(err) = remove {
            self.remove_session(id, err, now);
        }
        Serviced::Done
    }

    fn push_tx(&mut self, dest: SocketAddr, payload: usize) {
        if let (Some(len), Some(d)) = (
            self.tx_len.get_mut(self.tx_count),
            self.tx_dest.get_mut(self.tx_count),
        ) {
            *len = payload;
            *d = dest;
            self.tx_count += 1;
        }
    }

    /// Seals the datagrams not yet sealed.
    fn seal_pending(&mut self) {
        let nonce_len = self.crypto.nonce_len().min(self.nonce.len());
        let plain = self.crypto.header_len() == 0 && self.crypto.trailer_len() == 0;
        while self.tx_sealed < self.tx_count {
            let i = self.tx_sealed;
            self.tx_sealed += 1;
            if plain {
                continue;
            }
            let base = i * self.stride;
            let (Some(buf), Some(len)) = (
                self.tx.get_mut(base..base + self.stride),
                self.tx_len.get_mut(i),
            ) else {
                continue;
            };
            let nonce = self.nonce.get_mut(..nonce_len).unwrap_or_default();
            self.rng.fill_bytes(nonce);
            match self.crypto.seal(buf, *len, nonce) {
                Ok(n) => *len = n,
                Err(_) => *len = 0, // cannot happen with our headroom; never sent
            }
        }
    }

    /// Sends what is in the transmit slots. Returns true when they are all
    /// gone (and reset), false when the socket (or the rate limit) blocked.
    fn poll_flush_tx(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        self.seal_pending();
        while self.tx_sent < self.tx_count {
            if let Some(rate) = self.rate.as_mut() {
                let elapsed = now.saturating_duration_since(rate.last).as_secs_f64();
                rate.last = now;
                rate.tokens = (rate.tokens + elapsed * rate.rate).min(RATE_BURST);
                if rate.tokens < 0.0 {
                    let wait = Duration::from_secs_f64(-rate.tokens / rate.rate);
                    self.rate_wait = Some(now + wait);
                    return false;
                }
            }
            self.rate_wait = None;
            match self.socket.poll_send_ready(cx) {
                Poll::Pending => return false,
                Poll::Ready(Err(_)) => bump(&self.shared.counters.send_errors),
                Poll::Ready(Ok(())) => {}
            }
            let stride = self.stride;
            let max_run = self
                .shared
                .udp
                .max_gso_segments()
                .min(65_507 / stride.max(1))
                .max(1);
            let mut transmits = [Transmit {
                destination: self.shared.local_addr,
                contents: &[],
                segment_size: None,
            }; BATCH_SIZE];
            // Slots per transmit, to map "n transmits sent" back to slots.
            let mut spans = [0usize; BATCH_SIZE];
            let mut n = 0;
            let mut i = self.tx_sent;
            while i < self.tx_count && n < BATCH_SIZE {
                let dest = self
                    .tx_dest
                    .get(i)
                    .copied()
                    .unwrap_or(self.shared.local_addr);
                let first = self.tx_len.get(i).copied().unwrap_or(0);
                if first == 0 {
                    // A slot that failed to seal is never sent: skip it when
                    // it leads the batch, else end the batch before it.
                    if n == 0 {
                        self.tx_sent += 1;
                        i += 1;
                        continue;
                    }
                    break;
                }
                // A GSO run: full-stride datagrams to one peer, the last may be
                // shorter; they are contiguous because slots are `stride` apart.
                let mut j = i + 1;
                let mut total = first;
                if first == stride {
                    while j < self.tx_count && j - i < max_run {
                        let (len, d) = (
                            self.tx_len.get(j).copied().unwrap_or(0),
                            self.tx_dest.get(j).copied(),
                        );
                        if d != Some(dest) || len == 0 || len > stride {
                            break;
                        }
                        total += len;
                        j += 1;
                        if len < stride {
                            break;
                        }
                    }
                }
                let base = i * stride;
                if let (Some(t), Some(span)) = (transmits.get_mut(n), spans.get_mut(n)) {
                    t.destination = dest;
                    t.contents = self.tx.get(base..base + total).unwrap_or_default();
                    t.segment_size = (j - i > 1).then_some(stride);
                    *span = j - i;
                }
                n += 1;
                i = j;
            }
            if n == 0 {
                continue;
            }
            let batch = transmits.get(..n).unwrap_or_default();
            let res = self.socket.try_io(Interest::WRITABLE, || {
                self.shared
                    .udp
                    .send(socket2::SockRef::from(&self.socket), batch)
            });
            match res {
                Ok(sent) => {
                    let sent = sent.clamp(1, n.max(1));
                    let sent_bytes: usize = batch.iter().take(sent).map(|t| t.contents.len()).sum();
                    let slots: usize = spans.iter().take(sent).sum();
                    add(&self.shared.counters.datagrams_out, slots);
                    add(&self.shared.counters.bytes_out, sent_bytes);
                    if let Some(rate) = self.rate.as_mut() {
                        rate.tokens -= sent_bytes as f64;
                    }
                    self.tx_sent += slots.max(1);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => {
                    // About transmits[0] only (unreachable, too large...):
                    // drop it; KCP retransmits what mattered.
                    bump(&self.shared.counters.send_errors);
                    self.tx_sent += spans.first().copied().unwrap_or(1).max(1);
                }
            }
        }
        self.tx_count = 0;
        self.tx_sealed = 0;
        self.tx_sent = 0;
        true
    }

    /// Points the one `Sleep` at the earliest deadline. Returns true when
    /// that deadline has already passed (the caller runs another round).
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> bool {
        let mut next = self.heap.peek().map(|Reverse((t, _))| *t);
        if let Some(w) = self.rate_wait {
            next = Some(next.map_or(w, |n| n.min(w)));
        }
        let Some(at) = next else {
            self.sleep_at = None;
            return false;
        };
        if self.sleep_at != Some(at) {
            self.sleep.as_mut().reset(at);
            self.sleep_at = Some(at);
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            self.sleep_at = None;
            return true;
        }
        false
    }

    fn finished(&self) -> bool {
        let idle_tx = self.tx_count == 0;
        match self.role {
            Role::Client => self.live == 0 && idle_tx,
            Role::Listener => !self.listener_open && self.live == 0 && idle_tx,
        }
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut rounds = 0;
        // Deferred by the last poll's input: their readers have run since.
        this.ready.extend(this.deferred.drain(..));
        loop {
            let now = Instant::now();
            this.drain_inbox(cx, now);
            let mut more = false;
            let batches = match this.role {
                Role::Client => 1,
                Role::Listener => 2,
            };
            for _ in 0..batches {
                match this.poll_recv_batch(cx, now) {
                    Poll::Ready(_) => more = true,
                    Poll::Pending => break,
                }
            }
            this.fire_timers(now);
            let unblocked = this.service_ready(cx, now) && this.poll_flush_tx(cx, now);
            if unblocked && !this.ready.is_empty() {
                more = true;
            }
            if this.finished() {
                return Poll::Ready(());
            }
            if !this.deferred.is_empty() {
                // Yield once so the woken readers run (and perhaps reply)
                // before these sessions flush.
                cx.waker().wake_by_ref();
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
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        {
            let mut q = lock(&self.shared.accept.queue);
            q.closed = true;
            let shared = &self.shared;
            q.queue.retain(|(s, _)| !Arc::ptr_eq(&s.driver, shared));
        }
        self.shared.accept.notify.notify_waiters();
        for slot in &mut self.slots {
            if let Some(s) = slot.session.take() {
                let mut st = lock(&s.state);
                st.removed = true;
                if st.error.is_none() {
                    st.error = Some(SessionError::Aborted);
                }
                wake(&mut st.read_waker);
                wake(&mut st.write_waker);
            }
        }
    }
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let bytes: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_le_bytes(bytes))
}

/// Opens a UDP socket bound to `bind`, configured from `config`, with its
/// batched-I/O state.
fn open_socket(
    bind: SocketAddr,
    config: &ConfigInner,
    reuse_port: bool,
) -> io::Result<(UdpSocket, UdpState)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = Domain::for_address(bind);
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    match config.recv_buffer {
        Some(n) => sock.set_recv_buffer_size(n)?,
        // Best effort: the kernel caps it at rmem_max and reports double.
        None => {
            if sock
                .recv_buffer_size()
                .is_ok_and(|n| n < DEFAULT_RECV_BUFFER)
            {
                let _ = sock.set_recv_buffer_size(DEFAULT_RECV_BUFFER);
            }
        }
    }
    if let Some(n) = config.send_buffer {
        sock.set_send_buffer_size(n)?;
    }
    if config.dscp != 0 {
        let tos = u32::from(config.dscp) << 2;
        if bind.is_ipv4() {
            sock.set_tos(tos)?;
        } else {
            #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
            sock.set_tclass_v6(tos)?;
        }
    }
    if reuse_port {
        #[cfg(all(unix, not(any(target_os = "solaris", target_os = "illumos"))))]
        sock.set_reuse_port(true)?;
    }
    sock.bind(&bind.into())?;
    let udp = UdpState::new(socket2::SockRef::from(&sock), config.batching)?;
    let std_sock: std::net::UdpSocket = sock.into();
    let socket = UdpSocket::from_std(std_sock)?;
    Ok((socket, udp))
}

/// Binds the listener's sockets at `addr` and spawns one driver per socket:
/// one socket, or `config.reuse_port` sockets bound to the same address with
/// `SO_REUSEPORT` (the first one's port when `addr` asks for port 0), all
/// feeding one accept backlog. Every socket is bound before any driver runs.
pub(crate) fn spawn_listener(
    addr: SocketAddr,
    config: Arc<ConfigInner>,
) -> io::Result<Vec<Arc<DriverShared>>> {
    let n = if cfg!(all(
        unix,
        not(any(target_os = "solaris", target_os = "illumos"))
    )) {
        config.reuse_port.max(1)
    } else {
        1
    };
    let accept = Arc::new(Accept::default());
    let mut drivers = Vec::with_capacity(n);
    let mut bind = addr;
    for _ in 0..n {
        let (socket, udp) = open_socket(bind, &config, n > 1)?;
        let driver = Driver::new(socket, udp, config.clone(), Role::Listener, accept.clone())?;
        bind = driver.shared.local_addr;
        drivers.push(driver);
    }
    let shared = drivers.iter().map(|d| d.shared().clone()).collect();
    for driver in drivers {
        tokio::spawn(driver);
    }
    Ok(shared)
}

/// Binds a client socket for `peer` (unspecified address of its family,
/// port 0), creates the one session and spawns the driver.
pub(crate) fn spawn_client(
    peer: SocketAddr,
    config: Arc<ConfigInner>,
) -> io::Result<Arc<SessionShared>> {
    let bind: SocketAddr = if peer.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let (socket, udp) = open_socket(bind, &config, false)?;
    let accept = Arc::new(Accept::default());
    let mut driver = Driver::new(socket, udp, config, Role::Client, accept)?;
    let now = Instant::now();
    let conv = match driver.shared.config.conv {
        Some(c) => c,
        None => driver.rng.next_u32(),
    };
    let st = driver
        .new_state(conv, now)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid ARQ configuration"))?;
    let id = driver.insert_session(peer, conv, st);
    let session = driver
        .session(id)
        .cloned()
        .ok_or_else(|| io::Error::other("session table inconsistent"))?;
    tokio::spawn(driver);
    Ok(session)
}
