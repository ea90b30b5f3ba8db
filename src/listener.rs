//! [`KcpListener`]: accepts KCP sessions on one UDP socket, used like
//! `tokio::net::TcpListener`.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::ToSocketAddrs;

use crate::config::Config;
use crate::driver::{self, Accept, DriverShared, lock};
use crate::session::KcpStream;

/// Counters of a listener's socket, from [`KcpListener::stats`].
///
/// Every datagram that does not reach a session is counted under one reason
/// and dropped; none is logged above `debug`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenerStats {
    /// Datagrams received on the socket.
    pub datagrams_in: u64,
    /// Their bytes.
    pub bytes_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// Dropped: failed decryption or integrity check, or too short.
    pub bad_crypto: u64,
    /// FEC packets the decoder refused.
    pub bad_fec: u64,
    /// Packets the ARQ refused (malformed, or too short after decryption).
    pub bad_kcp: u64,
    /// Dropped: no session for the address and no conv to create one.
    pub unknown_session: u64,
    /// Dropped: another conv than the address's session (not a takeover).
    pub conv_mismatch: u64,
    /// Dropped: a late packet of a recently closed session.
    pub tombstoned: u64,
    /// New peers refused because the accept backlog was full.
    pub refused_backlog: u64,
    /// New peers refused because the session cap was reached.
    pub refused_cap: u64,
    /// Out-of-band packets (not supported; dropped).
    pub oob: u64,
    /// Receive errors (ICMP reports, truncation), never fatal.
    pub recv_errors: u64,
    /// Send errors other than a full buffer.
    pub send_errors: u64,
    /// Sessions created.
    pub sessions_opened: u64,
    /// Sessions freed.
    pub sessions_closed: u64,
    /// Sessions alive now (accepted, waiting in the backlog, or lingering).
    pub sessions_live: u64,
    /// Sessions waiting to be accepted now.
    pub backlog: usize,
    /// Receive system calls made (`recvmmsg` or one-datagram calls).
    pub recv_syscalls: u64,
    /// Send system calls made (`sendmmsg` or one-datagram calls).
    pub send_syscalls: u64,
    /// Datagrams cut short by a small receive buffer, dropped.
    pub truncated: u64,
    /// Session deadlines that fired (ARQ ticks, idle timeouts, lingers): a
    /// quiet session with nothing in flight and no idle timeout adds none.
    pub timer_fires: u64,
    /// UDP sockets behind these figures (more than one with
    /// [`ConfigBuilder::reuse_port`](crate::ConfigBuilder::reuse_port)).
    pub sockets: usize,
}

/// The counters of a group of listener sockets, summed.
fn group_stats(drivers: &[Arc<DriverShared>]) -> ListenerStats {
    let mut sum = ListenerStats::default();
    for d in drivers {
        let s = socket_stats(d);
        sum.datagrams_in += s.datagrams_in;
        sum.bytes_in += s.bytes_in;
        sum.datagrams_out += s.datagrams_out;
        sum.bytes_out += s.bytes_out;
        sum.bad_crypto += s.bad_crypto;
        sum.bad_fec += s.bad_fec;
        sum.bad_kcp += s.bad_kcp;
        sum.unknown_session += s.unknown_session;
        sum.conv_mismatch += s.conv_mismatch;
        sum.tombstoned += s.tombstoned;
        sum.refused_backlog += s.refused_backlog;
        sum.refused_cap += s.refused_cap;
        sum.oob += s.oob;
        sum.recv_errors += s.recv_errors;
        sum.send_errors += s.send_errors;
        sum.sessions_opened += s.sessions_opened;
        sum.sessions_closed += s.sessions_closed;
        sum.sessions_live += s.sessions_live;
        // One shared backlog: counted once.
        sum.backlog = s.backlog;
        sum.recv_syscalls += s.recv_syscalls;
        sum.send_syscalls += s.send_syscalls;
        sum.truncated += s.truncated;
        sum.timer_fires += s.timer_fires;
        sum.sockets += 1;
    }
    sum
}

pub(crate) fn socket_stats(d: &DriverShared) -> ListenerStats {
    let c = &d.counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let sys = d.udp.stats();
    ListenerStats {
        datagrams_in: get(&c.datagrams_in),
        bytes_in: get(&c.bytes_in),
        datagrams_out: get(&c.datagrams_out),
        bytes_out: get(&c.bytes_out),
        bad_crypto: get(&c.bad_crypto),
        bad_fec: get(&c.bad_fec),
        bad_kcp: get(&c.bad_kcp),
        unknown_session: get(&c.unknown_session),
        conv_mismatch: get(&c.conv_mismatch),
        tombstoned: get(&c.tombstoned),
        refused_backlog: get(&c.refused_backlog),
        refused_cap: get(&c.refused_cap),
        oob: get(&c.oob),
        recv_errors: get(&c.recv_errors),
        send_errors: get(&c.send_errors),
        sessions_opened: get(&c.sessions_opened),
        sessions_closed: get(&c.sessions_closed),
        sessions_live: get(&c.sessions_live),
        backlog: lock(&d.accept.queue).queue.len(),
        recv_syscalls: sys.recv_syscalls,
        send_syscalls: sys.send_syscalls,
        truncated: sys.truncated,
        timer_fires: get(&c.timer_fires),
        sockets: 1,
    }
}

/// A KCP server socket: one UDP socket, one driver task, many sessions.
///
/// A session is created by the first datagram from a new address that opens
/// (decrypts and verifies) and parses as a KCP packet for a new conversation
/// (kcp-go's rule, WIRE 6.2), FEC-framed or not, and waits in a bounded
/// backlog until [`accept`](Self::accept) takes it. Peers beyond the backlog
/// or the session cap are refused and counted. A late datagram of a closed
/// session never creates a new one (closed sessions leave a tombstone for a
/// minute); a new conversation starting at sn 0 from the same address
/// replaces the old session, as kcp-go does for a restarted client.
///
/// With [`ConfigBuilder::reuse_port`](crate::ConfigBuilder::reuse_port)`(n)`
/// the listener binds `n` sockets to one port with `SO_REUSEPORT`, one driver
/// task each, so a server spreads its peers over `n` cores; `accept` takes
/// sessions from all of them.
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
            let notified = self.accept.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut q = lock(&self.accept.queue);
                while let Some((session, peer)) = q.queue.pop_front() {
                    // A session that failed while waiting (idle timeout, taken
                    // over by a restarted peer) is not worth handing out.
                    if lock(&session.state).error.is_some() {
                        continue;
                    }
                    // More may be waiting for other accept callers.
                    if !q.queue.is_empty() {
                        self.accept.notify.notify_one();
                    }
                    return Ok((KcpStream::from_session(session), peer));
                }
                if q.closed {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "kcp listener driver stopped",
                    ));
                }
            }
            notified.await;
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
    #[must_use]
    pub fn stats(&self) -> ListenerStats {
        group_stats(&self.drivers)
    }

    /// The counters of each socket of a
    /// [`reuse_port`](crate::ConfigBuilder::reuse_port) group, in bind order
    /// (one entry without it): how the kernel spread the peers.
    #[must_use]
    pub fn stats_per_socket(&self) -> Vec<ListenerStats> {
        self.drivers.iter().map(|d| socket_stats(d)).collect()
    }
}

impl Drop for KcpListener {
    fn drop(&mut self) {
        for d in &self.drivers {
            d.close_listener();
        }
    }
}
