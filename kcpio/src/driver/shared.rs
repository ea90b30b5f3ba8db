//! The contract between handles (streams, listeners) and the driver task.
//!
//! - Each session is a [`SessionShared`]: its [`Conn`] behind a
//!   `std::sync::Mutex` held only for pure state changes (never across an
//!   `.await` or a system call), plus the wakers of the handles.
//! - A handle locks, calls the `Conn`, registers a waker on
//!   `WouldBlock`, and asks the driver to look at the session only when the
//!   call moved the session's deadline earlier than the one the driver
//!   armed ([`SessionState::needs_driver`]): it never reads the clock or
//!   other driver state to decide. The request pushes the session's id into
//!   the driver's inbox once (`queued` deduplicates, so the inbox is bounded
//!   by the number of sessions) and wakes the driver task.
//! - A listener's driver that woke a session's reader may leave the session
//!   `deferred` for that reader ([`SessionState::deferred`]): the reader's
//!   next call clears it, and the last such call wakes the driver, from the
//!   reader's task.
//! - The accept backlog ([`Accept`]) is the one queue between the drivers of
//!   a listener and its `accept` calls; only its methods touch it.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::Notify;

use super::sink::{Sink, SinkBatch};
use super::stats::Counters;
use super::table::SessionId;
use crate::config::ConfigInner;
use crate::conn::{Conn, ConnError};
use crate::sys::UdpState;

/// Locks a mutex, ignoring poisoning: every critical section leaves the
/// state consistent, and a panic elsewhere must not take the socket down.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Wakes an optional waker, leaving the slot empty.
pub(crate) fn wake(slot: &mut Option<Waker>) {
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

/// Writes at least this long copy their bytes outside the session's lock
/// ([`SessionShared::poll_write_lent`]); shorter ones copy under it, one
/// lock instead of two.
pub(crate) const LENT_WRITE_MIN: usize = 8 * 1024;

/// Segments one lent write takes at most (about 86 KiB at the default mtu):
/// the buffers it holds on its stack.
pub(crate) const LENT_WRITE_SEGMENTS: usize = 64;

/// Which waker a blocked call waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// Reads and `recv_message`.
    Read,
    /// Writes, `send_message` and shutdown.
    Write,
    /// `recv_datagram`.
    DatagramRead,
    /// `send_datagram`.
    DatagramWrite,
}

/// A session's state under its lock.
pub(crate) struct SessionState {
    pub(crate) conn: Conn,
    pub(crate) read_waker: Option<Waker>,
    pub(crate) write_waker: Option<Waker>,
    /// A task waiting in `recv_datagram` / `send_datagram`.
    pub(crate) dgram_read_waker: Option<Waker>,
    pub(crate) dgram_write_waker: Option<Waker>,
    /// In the driver's inbox or ready queue.
    pub(crate) queued: bool,
    /// A listener's session fed input that woke its reader, waiting in the
    /// driver's deferred list for the reader's next call
    /// ([`DriverShared::deferred_readers`]); cleared by that call or when
    /// the driver services the session.
    pub(crate) deferred: bool,
    /// The deadline the driver armed for this session (time since the
    /// driver's epoch); `None` when none is armed or it fired.
    pub(crate) armed: Option<Duration>,
    /// Removed from the driver's table.
    pub(crate) removed: bool,
    /// [`SessionShared::sink`] holds a sink: the driver takes received
    /// datagrams out of the `Conn` for it instead of waking
    /// [`dgram_read_waker`](Self::dgram_read_waker).
    pub(crate) has_sink: bool,
    /// The address the peer moved to (a validated migration); `None`:
    /// still [`SessionShared::peer`].
    pub(crate) moved_to: Option<SocketAddr>,
    /// The client's local address after it rebound its socket; `None`:
    /// still the driver's first [`DriverShared::local_addr`].
    pub(crate) rebound_to: Option<SocketAddr>,
    /// The session's place in the table of the driver that runs it.
    pub(crate) id: SessionId,
    /// The driver that runs it: the one that made it, or, after its peer
    /// moved to an address the kernel steers to another socket of the
    /// listener, that socket's driver.
    pub(crate) driver: Arc<DriverShared>,
}

impl SessionState {
    pub(crate) fn new(conn: Conn, id: SessionId, driver: Arc<DriverShared>) -> Self {
        Self {
            conn,
            read_waker: None,
            write_waker: None,
            dgram_read_waker: None,
            dgram_write_waker: None,
            queued: false,
            deferred: false,
            armed: None,
            removed: false,
            has_sink: false,
            moved_to: None,
            rebound_to: None,
            id,
            driver,
        }
    }

    /// The last call moved the session's deadline earlier than the one the
    /// driver armed: output or a timer is due that the driver does not know
    /// of.
    fn needs_driver(&self) -> bool {
        self.conn
            .poll_timeout()
            .is_some_and(|t| self.armed.is_none_or(|a| t < a))
    }

    /// Clears [`deferred`](Self::deferred), counting it out of its driver's
    /// [`DriverShared::deferred_readers`]. True when it was the last one.
    pub(crate) fn clear_deferred(&mut self) -> bool {
        std::mem::take(&mut self.deferred)
            && self.driver.deferred_readers.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Wakes the handles after the session failed or was removed.
    pub(crate) fn wake_all(&mut self) {
        wake(&mut self.read_waker);
        wake(&mut self.write_waker);
        wake(&mut self.dgram_read_waker);
        wake(&mut self.dgram_write_waker);
    }
}

/// One session as seen by its handles.
pub(crate) struct SessionShared {
    pub(crate) peer: SocketAddr,
    pub(crate) conv: u32,
    pub(crate) state: Mutex<SessionState>,
    /// Handle calls waiting for [`state`](Self::state) (found it held):
    /// the driver, writing datagrams under the lock, lets go after the
    /// datagram it is on, so a waiter gets the lock while it still spins
    /// rather than sleeping in the kernel until the driver is done.
    pub(crate) waiting: AtomicUsize,
    /// The driver that made it: its local address and clock (the same for
    /// every socket of a listener); the one that runs it is
    /// [`SessionState::driver`].
    pub(crate) driver: Arc<DriverShared>,
    /// The application's consumer of received datagrams, called by the
    /// driver that runs the session with the session unlocked
    /// ([`super::sink`]); only that driver and `set_sink` lock it.
    pub(crate) sink: Mutex<Option<Sink>>,
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
    /// Runs one application call on the session's `Conn`: `Ready` with its
    /// verdict, or `Pending` with `cx` registered on `side` when it says
    /// `WouldBlock`. Tells the driver when the call needs it.
    pub(crate) fn poll_call<T>(
        &self,
        cx: &Context<'_>,
        side: Side,
        call: impl FnOnce(&mut Conn) -> Result<T, ConnError>,
    ) -> Poll<io::Result<T>> {
        let mut st = self.lock_for_call();
        let verdict = call(&mut st.conn);
        // The last deferred reader to run wakes the listener's driver, which
        // then flushes the ACKs with whatever the readers wrote: from this
        // task, so tokio runs the driver next on this worker.
        if side == Side::Read && st.clear_deferred() {
            st.driver.wake_with(|_| {});
        }
        if st.needs_driver() {
            self.notify_driver(&mut st);
        }
        match verdict {
            Err(ConnError::WouldBlock) => {
                let slot = match side {
                    Side::Read => &mut st.read_waker,
                    Side::Write => &mut st.write_waker,
                    Side::DatagramRead => &mut st.dgram_read_waker,
                    Side::DatagramWrite => &mut st.dgram_write_waker,
                };
                register(slot, cx);
                Poll::Pending
            }
            v => Poll::Ready(v.map_err(io::Error::from)),
        }
    }

    /// A stream write of at least [`LENT_WRITE_MIN`] bytes: as
    /// `poll_call(Side::Write, write)`, but the bytes are copied into the
    /// send slots' buffers with the session unlocked (taken twice, briefly:
    /// to lend the buffers, and to queue them), so the reader's calls and
    /// the driver do not wait on a thread for the copy. At most
    /// [`LENT_WRITE_SEGMENTS`] segments per call.
    pub(crate) fn poll_write_lent(&self, cx: &Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut bufs: [Vec<u8>; LENT_WRITE_SEGMENTS] = [const { Vec::new() }; LENT_WRITE_SEGMENTS];
        let lent = {
            let mut st = self.lock_for_call();
            let begun = st.conn.begin_lent_write(data, &mut bufs);
            match begun {
                Ok(lent) if lent.lent > 0 => lent,
                Ok(lent) => {
                    // Merged into the tail segment only: done.
                    if st.needs_driver() {
                        self.notify_driver(&mut st);
                    }
                    return Poll::Ready(Ok(lent.merged));
                }
                Err(ConnError::WouldBlock) => {
                    register(&mut st.write_waker, cx);
                    return Poll::Pending;
                }
                Err(e) => return Poll::Ready(Err(e.into())),
            }
        };
        lent.fill(data, &mut bufs);
        let mut st = self.lock_for_call();
        let verdict = st.conn.end_lent_write(&lent, &mut bufs);
        if st.needs_driver() {
            self.notify_driver(&mut st);
        }
        // Another writer (a shared `&KcpStream`) found the slots lent and
        // waits: it may go on now.
        wake(&mut st.write_waker);
        drop(st);
        Poll::Ready(verdict.map_err(io::Error::from))
    }

    /// Runs one application call that never waits (`try_*`): `WouldBlock`
    /// comes back as an `io::ErrorKind::WouldBlock` error, no waker kept.
    pub(crate) fn try_call<T>(
        &self,
        call: impl FnOnce(&mut Conn) -> Result<T, ConnError>,
    ) -> io::Result<T> {
        let mut st = lock(&self.state);
        let verdict = call(&mut st.conn);
        if st.needs_driver() {
            self.notify_driver(&mut st);
        }
        drop(st);
        verdict.map_err(|e| match e {
            // The relay's drain ends on this after every wake-up: a bare
            // kind allocates nothing (a `ConnError` payload would).
            ConnError::WouldBlock => io::ErrorKind::WouldBlock.into(),
            e => e.into(),
        })
    }

    /// Locks the session for a handle's call: when the lock is held, the
    /// call counts itself in [`waiting`](Self::waiting) while it waits.
    fn lock_for_call(&self) -> MutexGuard<'_, SessionState> {
        match self.state.try_lock() {
            Ok(st) => st,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.waiting.fetch_add(1, Ordering::Relaxed);
                let st = lock(&self.state);
                self.waiting.fetch_sub(1, Ordering::Relaxed);
                st
            }
        }
    }

    /// A handle call waits for the session's lock.
    pub(crate) fn handle_waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// The driver's clock now, for calls that stamp what they queue.
    pub(crate) fn now(&self) -> Duration {
        self.driver.now()
    }

    /// Reads the session's `Conn` (stats, error).
    pub(crate) fn with_conn<T>(&self, f: impl FnOnce(&Conn) -> T) -> T {
        f(&lock(&self.state).conn)
    }

    /// Asks the driver to look at this session: `st.queued` deduplicates.
    fn notify_driver(&self, st: &mut SessionState) {
        if st.queued || st.removed {
            return;
        }
        st.queued = true;
        st.driver.push_inbox(st.id);
    }

    /// Installs (or with `None` removes) the session's datagram sink. One
    /// already installed is dropped here, outside both locks. When
    /// datagrams wait in the session, the driver is asked to hand them over.
    pub(crate) fn set_sink(&self, sink: Option<Sink>) {
        let on = sink.is_some();
        let old = std::mem::replace(&mut *lock(&self.sink), sink);
        {
            let mut st = lock(&self.state);
            st.has_sink = on;
            if on && st.conn.datagram_readable() {
                self.notify_driver(&mut st);
            }
        }
        drop(old);
    }

    /// Hands `batch` (taken from this session's `Conn` by its driver) to the
    /// sink; dropped when the sink was removed since.
    pub(crate) fn hand_to_sink(&self, batch: &SinkBatch) {
        if let Some(sink) = lock(&self.sink).as_mut() {
            batch.hand(sink);
        }
    }

    /// All user handles are gone: the session flushes for up to `linger`,
    /// then the driver frees it.
    pub(crate) fn release(&self) {
        let mut st = lock(&self.state);
        st.conn.release();
        st.read_waker = None;
        st.write_waker = None;
        st.dgram_read_waker = None;
        st.dgram_write_waker = None;
        st.has_sink = false;
        self.notify_driver(&mut st);
        drop(st);
        // The sink may hold a handle of its own session (a relay's): the
        // cycle ends here at the latest.
        drop(lock(&self.sink).take());
    }
}

/// Messages from handles, and from the listener's other drivers, to the
/// driver task.
#[derive(Default)]
pub(crate) struct Inbox {
    pub(crate) dirty: Vec<SessionId>,
    pub(crate) waker: Option<Waker>,
    pub(crate) listener_closed: bool,
    /// Datagrams another socket of the listener received for a session of
    /// this one (its peer is moving), at most [`MAX_FORWARDED`].
    pub(crate) forwarded: Vec<Forwarded>,
    /// Sessions another driver hands to this one: their peer moved to an
    /// address the kernel steers to this socket.
    pub(crate) adopted: Vec<Adopted>,
    /// The task has ended: sessions handed to it are refused.
    pub(crate) gone: bool,
}

/// Datagrams waiting in one driver's inbox from its listener's other
/// drivers. While it is full, [`DriverShared::forward`] refuses more, and
/// the receiving driver handles the datagram as though no shard held its
/// conv: admission, where a datagram from the middle of a session is
/// refused as no opener (and counted so).
pub(crate) const MAX_FORWARDED: usize = 256;

/// A datagram received by another socket of the listener, opened.
pub(crate) struct Forwarded {
    pub(crate) peer: SocketAddr,
    /// When it arrived at the shard that received it (the shards share one
    /// clock).
    pub(crate) arrived: Duration,
    /// Its size on the wire.
    pub(crate) wire: usize,
    /// The plaintext.
    pub(crate) plain: Vec<u8>,
    /// The driver that received it (index in the listener's group).
    pub(crate) from: usize,
    /// Forwarded a second time: its session had left the first driver it
    /// was forwarded to. Never forwarded again.
    pub(crate) again: bool,
}

/// A session moving to this driver, with its peer's new address.
pub(crate) struct Adopted {
    pub(crate) session: Arc<SessionShared>,
    pub(crate) peer: SocketAddr,
}

/// The part of a driver its handles see.
pub(crate) struct DriverShared {
    pub(crate) local_addr: SocketAddr,
    /// The socket's batched-I/O state (capabilities and system-call counters).
    pub(crate) udp: UdpState,
    pub(crate) config: Arc<ConfigInner>,
    pub(crate) inbox: Mutex<Inbox>,
    pub(crate) counters: Counters,
    pub(crate) accept: Arc<Accept>,
    /// The driver's clock's epoch, for handles that stamp what they queue.
    pub(crate) epoch: tokio::time::Instant,
    /// A listener's sessions with [`SessionState::deferred`] set: the
    /// driver left them for their readers without yielding, and the reader
    /// that brings this to zero wakes it.
    pub(crate) deferred_readers: AtomicUsize,
}

impl DriverShared {
    /// The driver's clock: time since its epoch.
    pub(crate) fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.epoch)
    }
}

impl fmt::Debug for DriverShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl DriverShared {
    pub(crate) fn wake_with(&self, change: impl FnOnce(&mut Inbox)) {
        let waker = {
            let mut inbox = lock(&self.inbox);
            change(&mut inbox);
            inbox.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn push_inbox(&self, id: SessionId) {
        self.wake_with(|inbox| inbox.dirty.push(id));
    }

    /// Hands this driver a datagram another socket received for one of its
    /// sessions; false (dropped) when [`MAX_FORWARDED`] are waiting.
    pub(crate) fn forward(&self, f: Forwarded) -> bool {
        let mut taken = false;
        self.wake_with(|inbox| {
            if inbox.forwarded.len() < MAX_FORWARDED {
                inbox.forwarded.push(f);
                taken = true;
            }
        });
        taken
    }

    /// Hands this driver a session whose peer now reaches this socket.
    ///
    /// # Errors
    ///
    /// The session back when this driver's task has ended (its listener
    /// closed and its sessions were done): the caller keeps it.
    pub(crate) fn adopt(&self, a: Adopted) -> Result<(), Adopted> {
        let mut refused = None;
        self.wake_with(|inbox| {
            if inbox.gone {
                refused = Some(a);
            } else {
                inbox.adopted.push(a);
            }
        });
        refused.map_or(Ok(()), Err)
    }

    /// The task is ending: true, and no session can be handed to it from
    /// now on, unless one was handed over since its inbox was last drained
    /// (it must run on for it).
    pub(crate) fn end(&self) -> bool {
        let mut inbox = lock(&self.inbox);
        inbox.gone = inbox.adopted.is_empty();
        inbox.gone
    }

    /// The listener handle is gone: refuse new peers, drop the backlog, and
    /// stop once the remaining sessions are done.
    pub(crate) fn close_listener(&self) {
        self.wake_with(|inbox| inbox.listener_closed = true);
    }

    /// This socket's counters.
    pub(crate) fn stats(&self) -> super::stats::ListenerStats {
        let mut s = self.counters.snapshot(&self.udp.stats());
        s.backlog = self.accept.len();
        s
    }
}

/// What [`Accept::take`] found.
pub(crate) enum Taken {
    /// A session and its peer.
    Session(Arc<SessionShared>, SocketAddr),
    /// Nothing yet.
    Empty,
    /// Every driver is gone.
    Closed,
}

/// The accept backlog of a listener, shared by its drivers (one, or one per
/// `SO_REUSEPORT` socket); bounded by `accept_backlog` (the table's
/// admission asks [`len`](Self::len)).
///
/// Two kinds of waiter share it: `accept` futures, any number, queued on a
/// [`Notify`]; and one `poll_accept` waker, the most recent one given
/// (tokio's rule for `poll_*` methods). A new session, or a `take` that
/// leaves more behind, wakes one of the first and the second.
#[derive(Default)]
pub(crate) struct Accept {
    queue: Mutex<AcceptQueue>,
    notify: Notify,
}

#[derive(Default)]
struct AcceptQueue {
    queue: VecDeque<(Arc<SessionShared>, SocketAddr)>,
    /// A driver is gone: `accept` fails.
    closed: bool,
    /// The waker of the latest `poll_accept` that found nothing.
    poll_waker: Option<Waker>,
}

impl Accept {
    /// Sessions waiting.
    pub(crate) fn len(&self) -> usize {
        lock(&self.queue).queue.len()
    }

    /// Wakes one `accept` future and the `poll_accept` waker; `waker` was
    /// taken from the queue under its lock.
    fn wake(&self, waker: Option<Waker>) {
        self.notify.notify_one();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// A new session for `accept`.
    pub(crate) fn push(&self, session: Arc<SessionShared>, peer: SocketAddr) {
        let waker = {
            let mut q = lock(&self.queue);
            q.queue.push_back((session, peer));
            q.poll_waker.take()
        };
        self.wake(waker);
    }

    /// The next session still worth handing out (one that failed while
    /// waiting, by idle timeout or takeover, is skipped).
    pub(crate) fn take(&self) -> Taken {
        let (taken, more, waker) = {
            let mut q = lock(&self.queue);
            let taken = Self::take_locked(&mut q);
            // More may be waiting for other accept callers.
            let more = matches!(taken, Taken::Session(..)) && !q.queue.is_empty();
            let waker = if more { q.poll_waker.take() } else { None };
            (taken, more, waker)
        };
        if more {
            self.wake(waker);
        }
        taken
    }

    /// [`take`](Self::take) for `poll_accept`: `Pending` with `cx`'s waker
    /// stored in place of any earlier one when nothing waits.
    pub(crate) fn poll_take(&self, cx: &Context<'_>) -> Poll<Taken> {
        let mut q = lock(&self.queue);
        match Self::take_locked(&mut q) {
            Taken::Empty => {
                register(&mut q.poll_waker, cx);
                Poll::Pending
            }
            taken => {
                let more = !q.queue.is_empty();
                drop(q);
                if more {
                    self.notify.notify_one();
                }
                Poll::Ready(taken)
            }
        }
    }

    fn take_locked(q: &mut AcceptQueue) -> Taken {
        while let Some((session, peer)) = q.queue.pop_front() {
            if session.with_conn(Conn::error).is_some() {
                continue;
            }
            return Taken::Session(session, peer);
        }
        if q.closed {
            Taken::Closed
        } else {
            Taken::Empty
        }
    }

    /// Waits for [`push`](Self::push) or [`close`](Self::close); enable the
    /// returned future before calling [`take`](Self::take).
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// `driver` stops: `accept` fails from now on, and its sessions leave
    /// the backlog (returned, for the driver to free).
    pub(crate) fn close(&self, driver: &Arc<DriverShared>) -> Vec<SessionId> {
        let (ids, waker) = {
            let mut q = lock(&self.queue);
            q.closed = true;
            // Only this driver's sessions: the backlog may be shared with the
            // other sockets of a `reuse_port` group.
            let mine = |s: &Arc<SessionShared>| {
                let st = lock(&s.state);
                Arc::ptr_eq(&st.driver, driver).then_some(st.id)
            };
            let mut ids = Vec::new();
            q.queue.retain(|(s, _)| match mine(s) {
                Some(id) => {
                    ids.push(id);
                    false
                }
                None => true,
            });
            (ids, q.poll_waker.take())
        };
        self.notify.notify_waiters();
        if let Some(w) = waker {
            w.wake();
        }
        ids
    }
}
