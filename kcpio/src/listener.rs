//! [`KcpListener`]: accepts KCP sessions on one UDP socket, used like
//! `tokio::net::TcpListener`.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::net::ToSocketAddrs;

use crate::config::Config;
use crate::driver::shared::{Accept, DriverShared, Taken};
pub use crate::driver::stats::ListenerStats;
use crate::driver::{self};
use crate::stream::KcpStream;

/// The counters of a group of listener sockets, summed.
fn group_stats(drivers: &[Arc<DriverShared>]) -> ListenerStats {
    let mut sum = ListenerStats::default();
    for d in drivers {
        sum.merge(&d.stats());
    }
    sum
}

/// What `accept` and `poll_accept` return for a [`Taken`] (`None`: nothing
/// yet).
fn accepted(taken: Taken) -> Option<io::Result<(KcpStream, SocketAddr)>> {
    match taken {
        Taken::Session(session, peer) => Some(Ok((KcpStream::from_session(session), peer))),
        Taken::Closed => Some(Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "kcp listener driver stopped",
        ))),
        Taken::Empty => None,
    }
}

/// A KCP server: UDP sockets on one port (one per core), a driver task
/// each, many sessions.
///
/// A session is created by a datagram from a new address that opens
/// (decrypts and verifies), parses as KCP all through, FEC-framed or not,
/// and **begins a conversation**: its first segment is a PUSH with sn 0 and
/// una 0 (the first datagram of every kcp-go, C KCP and kcpio sender) or a
/// window probe (WASK) with una 0 (kcpio's connect probe). The session
/// answers, and asks the peer to prove it receives (the window probe it
/// sends with its first reply, which kcp-go, C KCP and kcpio peers answer
/// at their next flush); once the peer has, the session waits in a bounded
/// backlog until [`accept`](Self::accept) takes it. So `accept` returns a
/// session about one round trip (plus the peer's flush interval) after its
/// first datagram, and never one whose peer never answered (a forged
/// source address). A new
/// conversation's opener from an address that has a session replaces it, as
/// kcp-go does for a restarted client; it is checked completely first, so a
/// datagram that could not open a session never disturbs one, and a session
/// whose peer proved it receives is replaced only once the newcomer's peer
/// proves it too (until then it keeps its datagrams): a replayed opener of
/// anyone's conversation, sent from its address, does not end it.
///
/// # Hostile peers
///
/// Every refusal is counted in [`ListenerStats`]; all memory below is
/// bounded, per socket (the replay and per-source memories: per
/// listener). Who may open a session is decided in one place, the
/// admission policy (`kcpio/src/driver/admission.rs`), before any
/// state for the newcomer exists; its memories are maps keyed by what
/// peers send, hashed under random keys, each holding at most 65,536
/// entries and forgetting the oldest first.
///
/// - **Late datagrams** of a finished conversation never open a session:
///   they are no openers. A retransmitted opener of a session closed less
///   than a minute ago is refused by its tombstone (`tombstoned`; at most
///   65,536 kept, about 9 MiB).
/// - **Replays**: a datagram that opened a session is remembered (a keyed
///   64-bit hash of its bytes as received) for 15 minutes, at most 65,536
///   of them (about 4 MiB; under a sustained flood of openers the horizon
///   shrinks to the time 65,536 openers take); the same datagram opens
///   nothing again, from any address (`replayed`). Nor does any opener of
///   a conversation whose peer proved it receives in the last 15 minutes
///   (its conv remembered, at most 65,536, about 2 MiB): a replay of its
///   other opener-shaped datagrams, which replayed answers would prove,
///   never reaches `accept` again. A client that drew a conv so
///   remembered (one chance in 65,536 at worst) dials again with another.
/// - **Session cap and backlog**: at most
///   [`max_sessions`](crate::ConfigBuilder::max_sessions) sessions (4,096,
///   over all the listener's sockets; `refused_cap`). A new peer is refused
///   while [`accept_backlog`](crate::ConfigBuilder::accept_backlog) (128)
///   sessions whose peers proved they receive wait for `accept`
///   (`refused_backlog`); sessions admitted before that, whose peers prove
///   afterwards, still join them (they are real), so more may wait, within
///   the session cap. Unproven sessions wait in the table, not in the
///   backlog: forged openers never fill it, however slowly the
///   application accepts.
/// - **Per-source limit**: one source IP address creates at most 1,024
///   sessions in a burst and 256 per second after that (a token bucket per
///   address, 65,536 addresses remembered, about 7 MiB; `refused_rate`);
///   set with
///   [`ConfigBuilder::sessions_per_source`](crate::ConfigBuilder::sessions_per_source).
/// - **Anti-amplification**: until the peer proves it receives (it
///   acknowledges a segment the session sent, or answers the window probe
///   the session sends with its first reply), the session sends it at most
///   3× the bytes it received, retransmissions, FEC parity and fillers
///   included (see [`Conn::require_proof`](crate::Conn::require_proof)).
///   kcp-go, C KCP and kcpio peers prove themselves within their first
///   round trip, so they are not held back; data held over the budget
///   never holds back the ACKs and probes that let them (a server that
///   writes first and lost its first flush still answers connect probes).
/// - **Unproven sessions end**: a session whose peer has not proved it
///   receives within 10 s
///   ([`ConfigBuilder::proof_timeout`](crate::ConfigBuilder::proof_timeout))
///   fails with [`SessionError::DeadLink`](crate::SessionError::DeadLink); at the
///   session cap, the oldest such session is evicted for a newcomer
///   (`evicted_unproven`; it never reached `accept`), so forged openers
///   cannot lock real clients out,
///   but only once 3 × `max_sessions` openers per 4 MiB of its socket's
///   receive buffer have come after it (its proof may be queued behind
///   that many: 4 MiB holds about 10,000 small datagrams); until then
///   newcomers are refused
///   (`refused_cap`) and remembered (at most 65,536 (peer, conv), about
///   4 MiB), and a remembered peer's retransmitted opener evicts at once,
///   as a real client retransmits and a one-shot forged opener does not.
///   A flood of them holds at most `max_sessions` unproven sessions, each
///   as small as a session that received one datagram (a few KiB: at the
///   default cap of 4,096, tens of MiB in all); the queue of them is at
///   most 2 × `max_sessions` + 64 ids.
///
/// # Sockets and cores
///
/// The listener binds one UDP socket per core the process may use, to the
/// same address with `SO_REUSEPORT`, one driver task each, so a server
/// spreads its peers over the cores (give the runtime that many worker
/// threads); `accept` takes sessions from all of them. The kernel steers
/// each peer address to one socket. The count is
/// [`ConfigBuilder::reuse_port`](crate::ConfigBuilder::reuse_port) (one
/// socket with fake TCP). The limits above are the listener's, whatever the
/// socket a peer reaches; a migrating session follows its peer to another
/// socket.
///
/// Dropping the listener refuses new peers and drops the sessions not yet
/// accepted; accepted streams keep working, and the socket closes when the
/// last of them is gone.
///
/// # Examples
///
/// ```no_run
/// use kcpio::{Config, KcpListener};
/// use tokio::io::copy;
///
/// # async fn run() -> std::io::Result<()> {
/// let config = Config::builder().build().unwrap();
/// let listener = KcpListener::bind("127.0.0.1:29900", &config).await?;
/// loop {
///     let (stream, _peer) = listener.accept().await?;
///     tokio::spawn(async move {
///         let (mut r, mut w) = stream.into_split();
///         let _ = copy(&mut r, &mut w).await;
///     });
/// }
/// # }
/// ```
pub struct KcpListener {
    /// One driver per socket (several with `reuse_port`), never empty.
    drivers: Vec<Arc<DriverShared>>,
    /// The backlog every driver feeds.
    accept: Arc<Accept>,
    local_addr: SocketAddr,
}

impl fmt::Debug for KcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KcpListener")
            .field("local_addr", &self.local_addr)
            .field("sockets", &self.drivers.len())
            .finish()
    }
}

impl KcpListener {
    /// Binds a UDP socket at `addr` (the first address it resolves to) and
    /// starts its driver task. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// Resolution errors, `InvalidInput` when `addr` resolves to nothing, and
    /// socket errors (`AddrInUse`, buffer sizes, DSCP).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> std::io::Result<()> {
    /// let config = kcpio::Config::builder().build().unwrap();
    /// let listener = kcpio::KcpListener::bind("127.0.0.1:0", &config).await?;
    /// println!("listening on {}", listener.local_addr()?);
    /// # Ok(()) }
    /// ```
    pub async fn bind<A: ToSocketAddrs>(addr: A, config: &Config) -> io::Result<KcpListener> {
        let addr = tokio::net::lookup_host(addr).await?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "address resolved to nothing")
        })?;
        let drivers = driver::spawn_listener(addr, config.inner.clone())?;
        let first = drivers
            .first()
            .ok_or_else(|| io::Error::other("no listener socket"))?;
        let accept = first.accept.clone();
        let local_addr = first.local_addr;
        Ok(Self {
            drivers,
            accept,
            local_addr,
        })
    }

    /// Waits for the next session and returns it with the peer's address.
    ///
    /// Any number of tasks may wait in `accept` at once (each session goes
    /// to one of them), beside [`poll_accept`](Self::poll_accept): both take
    /// from the same backlog.
    ///
    /// # Errors
    ///
    /// `ConnectionAborted` when the driver task is gone (the runtime is
    /// shutting down).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a session is taken from the backlog only when it is
    /// returned, so a cancelled `accept` loses nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(listener: kcpio::KcpListener) -> std::io::Result<()> {
    /// let (stream, peer) = listener.accept().await?;
    /// println!("{peer} conv {:08x}", stream.conv());
    /// # Ok(()) }
    /// ```
    pub async fn accept(&self) -> io::Result<(KcpStream, SocketAddr)> {
        loop {
            let notified = self.accept.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(accepted) = accepted(self.accept.take()) {
                return accepted;
            }
            notified.await;
        }
    }

    /// Polls for the next session, as `TcpListener::poll_accept`.
    ///
    /// Returns `Poll::Pending` when none is waiting, and schedules the
    /// current task to be woken when one arrives. Only the `Waker` from the
    /// `Context` of the most recent call is scheduled: a call from another
    /// task replaces the earlier task's waker, so poll from one task at a
    /// time (use [`accept`](Self::accept) to wait from several).
    ///
    /// # Errors
    ///
    /// As [`accept`](Self::accept).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(listener: kcpio::KcpListener) -> std::io::Result<()> {
    /// let (stream, peer) = std::future::poll_fn(|cx| listener.poll_accept(cx)).await?;
    /// # let _ = (stream, peer); Ok(()) }
    /// ```
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(KcpStream, SocketAddr)>> {
        match self.accept.poll_take(cx) {
            Poll::Ready(taken) => accepted(taken).map_or(Poll::Pending, Poll::Ready),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The local address of the listener's socket.
    ///
    /// # Errors
    ///
    /// None today; `io::Result` as `TcpListener::local_addr`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }

    /// A snapshot of the socket's counters: traffic, drops by reason,
    /// refusals, sessions (summed over the sockets of a `reuse_port` group).
    ///
    /// Refused peers (`refused_backlog`, `refused_cap`) are distinct
    /// addresses, each counted at its first refused datagram of a refusal
    /// episode; an episode ends when the listener (any of its sockets) admits a new
    /// session, after
    /// which a peer refused again counts again. Their datagrams are counted
    /// apart (`refused_backlog_datagrams`, `refused_cap_datagrams`). Each
    /// socket remembers up to 4,096 refused addresses per episode (under
    /// 64 KiB); in a flood of more distinct addresses the peer counts err
    /// high, never low.
    #[must_use]
    pub fn stats(&self) -> ListenerStats {
        group_stats(&self.drivers)
    }

    /// The counters of each socket of a
    /// [`reuse_port`](crate::ConfigBuilder::reuse_port) group, in bind order
    /// (one entry without it): how the kernel spread the peers.
    #[must_use]
    pub fn stats_per_socket(&self) -> Vec<ListenerStats> {
        self.drivers.iter().map(|d| d.stats()).collect()
    }
}

impl Drop for KcpListener {
    fn drop(&mut self) {
        for d in &self.drivers {
            d.close_listener();
        }
    }
}
