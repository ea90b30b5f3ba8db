//! [`KcpStream`]: a reliable, ordered byte stream (or message channel) over
//! KCP, used like `tokio::net::TcpStream`.

use std::fmt;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use tokio::io::ReadBuf;
use tokio::net::ToSocketAddrs;

use crate::config::{Config, DEFAULT_RECV_BUFFER};
use crate::conn::{Conn, SessionStats};
use crate::driver::{self, io as dio, shared::SessionShared, shared::Side};
pub(crate) mod split;

use split::{OwnedReadHalf, OwnedWriteHalf, ReadHalf, WriteHalf};

/// Holds a session for one or two handles; when the last is dropped the
/// session keeps flushing in the background for up to `linger`, then is freed.
pub(crate) struct Handle {
    pub(crate) session: Arc<SessionShared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.session.release();
    }
}

/// A reliable, ordered stream over UDP: the tokio handle on one KCP session.
///
/// Implements [`AsyncRead`](tokio::io::AsyncRead) and
/// [`AsyncWrite`](tokio::io::AsyncWrite) like `tokio::net::TcpStream`, on
/// `&KcpStream` too (as std's `Read for &TcpStream`): a stream behind an
/// `Arc` can carry a byte stream in one task and datagrams in another. The
/// session keeps one read waker and one write waker, so one task reads and
/// one writes at a time.
/// Made by [`KcpStream::connect`] (client) or
/// [`KcpListener::accept`](crate::KcpListener::accept) (server). All the I/O
/// happens on the socket's driver task; a stream only moves bytes in and out
/// of its ARQ, so every method is cheap and never blocks a thread.
///
/// KCP has no handshake and no FIN: `connect` proves the peer is there with
/// a window probe (see [`connect`](Self::connect)), and the peer never sees
/// an end of stream. A read returns `Ok(0)` only for an empty buffer.
/// Liveness is on by default: a quiet session sends a keepalive probe every
/// 10 s ([`ConfigBuilder::keepalive`](crate::ConfigBuilder::keepalive)),
/// which the peer answers, and a peer that vanished is noticed by
/// [`ConfigBuilder::idle_timeout`](crate::ConfigBuilder::idle_timeout) (30 s):
/// pending and later reads and writes fail with `TimedOut`. The error's
/// source is a [`SessionError`](crate::SessionError) that tells the reasons
/// apart (`IdleTimeout`, `DeadLink` when
/// [`dead_link`](crate::ConfigBuilder::dead_link) is set, `Reset` when the
/// peer restarted).
///
/// With FEC on, the session also carries unreliable datagrams beside the
/// stream ([`send_datagram`](Self::send_datagram),
/// [`recv_datagram`](Self::recv_datagram)), byte-compatible with kcp-go's
/// out-of-band packets.
///
/// Dropping the stream (both halves after [`into_split`](Self::into_split))
/// lets the driver deliver what was written, for up to
/// [`ConfigBuilder::linger`](crate::ConfigBuilder::linger), then frees it.
///
/// How it differs from a `TcpStream` (handshake, end of stream, liveness,
/// capacity): see
/// [the crate docs](crate#kcpstream-and-tcpstream-the-differences).
///
/// # Examples
///
/// ```no_run
/// use kcpio::{Config, KcpStream};
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
///
/// # async fn run() -> std::io::Result<()> {
/// let config = Config::builder().build().unwrap();
/// let mut stream = KcpStream::connect("127.0.0.1:29900", &config).await?;
/// stream.write_all(b"hello").await?;
/// let mut buf = [0; 5];
/// stream.read_exact(&mut buf).await?;
/// # Ok(()) }
/// ```
pub struct KcpStream {
    inner: Arc<Handle>,
}

impl fmt::Debug for KcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_stream(f, "KcpStream", self.session())
    }
}

impl KcpStream {
    /// Opens a session to `addr` and proves the peer is there, as
    /// `TcpStream::connect` does: every address `addr` resolves to is tried
    /// in order, each on a new UDP socket bound to the unspecified address of
    /// its family (port 0) and connected to it, with its own driver task.
    ///
    /// KCP has no handshake; kcpio's connect sends a KCP window probe (a
    /// WASK, which kcp-go, C KCP and kcpio answer with a WINS; kcp-go's and
    /// kcpio's listeners create the session on it, so their `accept`
    /// returns now), resends it with back-off, and returns once any valid
    /// datagram of the conversation arrived, or fails after
    /// [`ConfigBuilder::connect_timeout`](crate::ConfigBuilder::connect_timeout)
    /// (5 s by default). With
    /// [`ConfigBuilder::connect_probe`](crate::ConfigBuilder::connect_probe)`(false)`
    /// it sends nothing and returns at once, as before. To bind the client
    /// to a chosen local address or bring your own socket, use
    /// [`KcpSocket`](crate::KcpSocket). The conversation id is
    /// [`ConfigBuilder::conv`](crate::ConfigBuilder::conv) or a random one.
    /// Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// The last address's error when none answered:
    /// - `ConnectionRefused` (source
    ///   [`SessionError::Refused`](crate::SessionError::Refused)): the host
    ///   reported nothing listening on that port (ICMP port unreachable);
    /// - `TimedOut` (source
    ///   [`SessionError::ConnectTimeout`](crate::SessionError::ConnectTimeout)):
    ///   no answer within the connect timeout: no server there, a server
    ///   with another key or cipher (nothing either side sends opens at the
    ///   other), or a path that drops UDP;
    /// - resolution errors, `InvalidInput` when `addr` resolves to nothing,
    ///   and socket errors (bind, buffer sizes, DSCP);
    /// - with [`Carrier::FakeTcp`](crate::Carrier::FakeTcp): the kernel
    ///   handshake's errors (`ConnectionRefused` when no TCP listener is
    ///   there, `TimedOut` when it does not complete within the connect
    ///   timeout), `PermissionDenied` naming `CAP_NET_RAW` or `CAP_NET_ADMIN`
    ///   without them, `Unsupported` outside Linux.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled connect releases the session it started and
    /// closes its socket.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> std::io::Result<()> {
    /// let config = kcpio::Config::builder().build().unwrap();
    /// let stream = kcpio::KcpStream::connect("127.0.0.1:29900", &config).await?;
    /// println!("conv {:08x} from {}", stream.conv(), stream.local_addr()?);
    /// # Ok(()) }
    /// ```
    pub async fn connect<A: ToSocketAddrs>(addr: A, config: &Config) -> io::Result<KcpStream> {
        let mut last = None;
        for peer in tokio::net::lookup_host(addr).await? {
            let bind: SocketAddr = if peer.is_ipv4() {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let attempt = match dio::bind_socket(bind, &config.inner, false, DEFAULT_RECV_BUFFER) {
                Ok(socket) => Self::connect_socket(socket, peer, config, true).await,
                Err(e) => Err(e),
            };
            match attempt {
                Ok(stream) => return Ok(stream),
                Err(e) => {
                    tracing::debug!(%peer, "kcp connect failed: {e}");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "address resolved to nothing")
        }))
    }

    /// Opens a session to `peer` on `socket` (bound, its options set): a
    /// new driver task connects the socket and runs the session; returns
    /// once the peer answered the connect probe (at once without one). The
    /// one connect path: [`connect`](Self::connect) and
    /// [`KcpSocket::connect`](crate::KcpSocket::connect) both end here.
    /// `any_port`: the socket's port was the kernel's pick (bound to port
    /// 0), not the caller's.
    pub(crate) async fn connect_socket(
        socket: socket2::Socket,
        peer: SocketAddr,
        config: &Config,
        any_port: bool,
    ) -> io::Result<KcpStream> {
        let session = if config.inner.carrier == crate::Carrier::FakeTcp {
            // The kernel's TCP socket takes the UDP socket's address; the
            // UDP socket is not used. A port the caller chose is kept; a
            // port the kernel picked for UDP is not asked of TCP (the two
            // port spaces are apart: a UDP port free now may be a TCP port
            // in use, by another fake-TCP flow whose UDP socket was
            // dropped as this one is), so TCP picks its own.
            let mut bind = socket
                .local_addr()?
                .as_socket()
                .ok_or(io::ErrorKind::AddrNotAvailable)?;
            if any_port {
                bind.set_port(0);
            }
            drop(socket);
            driver::spawn_fake_tcp_client(bind, peer, config.inner.clone()).await?
        } else {
            driver::spawn_client(socket, peer, config.inner.clone())?
        };
        let stream = Self::from_session(session);
        stream.established().await?;
        Ok(stream)
    }

    /// Waits for the connect probe's answer (at once without a probe).
    async fn established(&self) -> io::Result<()> {
        poll_fn(|cx| {
            self.session()
                .poll_call(cx, Side::Read, |c| c.established())
        })
        .await
    }

    pub(crate) fn from_session(session: Arc<SessionShared>) -> Self {
        Self {
            inner: Arc::new(Handle { session }),
        }
    }

    /// A stream of the session `inner` holds (reunited halves).
    pub(crate) fn from_handle(inner: Arc<Handle>) -> Self {
        Self { inner }
    }

    pub(crate) fn session(&self) -> &Arc<SessionShared> {
        &self.inner.session
    }

    /// Splits the stream into a read half and a write half that can move to
    /// different tasks. The session lives until both are dropped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(stream: kcpio::KcpStream) -> std::io::Result<()> {
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    ///
    /// let (mut r, mut w) = stream.into_split();
    /// let writer = tokio::spawn(async move { w.write_all(b"hello").await });
    /// let mut buf = [0; 5];
    /// r.read_exact(&mut buf).await?;
    /// writer.await??;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        split::split_owned(self.inner)
    }

    /// Splits the stream into a read half and a write half borrowed from it,
    /// for use in one task (for example in `tokio::join!` or
    /// `tokio::io::copy` both ways); costs nothing. Use
    /// [`into_split`](Self::into_split) to move the halves to other tasks.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(mut stream: kcpio::KcpStream) -> std::io::Result<()> {
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    ///
    /// let (mut r, mut w) = stream.split();
    /// let mut buf = [0; 5];
    /// let (wrote, read) = tokio::join!(w.write_all(b"hello"), r.read_exact(&mut buf));
    /// wrote?;
    /// read?;
    /// # Ok(()) }
    /// ```
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        split::split(self)
    }

    /// Sends `msg` as one message (message mode): the peer's
    /// [`recv_message`](Self::recv_message) gets exactly these bytes. Waits
    /// while the send window is full.
    ///
    /// # Errors
    ///
    /// `Unsupported` in stream mode; `InvalidInput` for an empty message or
    /// one longer than 255 segments; `BrokenPipe` after shutdown (each with a
    /// [`ConnError`](crate::ConnError) source); `TimedOut` /
    /// `ConnectionReset` / `ConnectionAborted` when the session failed (with
    /// a [`SessionError`](crate::SessionError) source).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the message is queued whole or not at all.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(stream: kcpio::KcpStream) -> std::io::Result<()> {
    /// stream.send_message(b"ping").await?;
    /// let mut buf = [0; 1500];
    /// let n = stream.recv_message(&mut buf).await?;
    /// # let _ = n; Ok(()) }
    /// ```
    pub async fn send_message(&self, msg: &[u8]) -> io::Result<()> {
        poll_fn(|cx| poll_send_message(self.session(), cx, msg)).await
    }

    /// Receives one whole message into `buf` (message mode), returning its
    /// length. A session keeps one read waker: receive from one task at a
    /// time (as with `AsyncRead`).
    ///
    /// # Errors
    ///
    /// `Unsupported` in stream mode; `InvalidInput` when `buf` is shorter than
    /// the next message (which stays queued); session failures as for reads.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a message is taken only when it is returned.
    pub async fn recv_message(&self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| poll_recv_message(self.session(), cx, buf)).await
    }

    /// The largest payload [`send_datagram`](Self::send_datagram) takes:
    /// the KCP mtu minus 4 (kcp-go's `GetOOBMaxSize`), e.g. 1368 bytes with
    /// the default mtu of 1400 and a CFB-family cipher; 0 when FEC is off
    /// (and the extension not negotiated). With the FEC datagram extension
    /// ([`ConfigBuilder::datagram_fec`](crate::ConfigBuilder::datagram_fec))
    /// negotiated (by the time `connect` or `accept` returns, between kcpio
    /// ends) datagrams are fragmented: 16 packets' worth, 21,648 bytes at
    /// the default mtu under `aes-128-gcm` (one packet carries 1,353).
    #[must_use]
    pub fn max_datagram_payload(&self) -> usize {
        self.session().with_conn(Conn::max_datagram_payload)
    }

    /// Sends `payload` as one unreliable datagram beside the stream,
    /// byte-compatible with kcp-go's out-of-band packets (`SendOOB`; the
    /// peer's `SetOOBHandler` or [`recv_datagram`](Self::recv_datagram)
    /// receives it). It is sent once, never retransmitted, and may be lost,
    /// duplicated or reordered; the stream's reliability and order are not
    /// affected. Needs FEC on ([`ConfigBuilder::fec`](crate::ConfigBuilder::fec)),
    /// as in kcp-go, or the FEC datagram extension
    /// ([`ConfigBuilder::datagram_fec`](crate::ConfigBuilder::datagram_fec))
    /// negotiated with a kcpio peer, which protects datagrams with adaptive FEC and
    /// never waits (a full queue drops its oldest, counted). Waits only while the session's send queue is full
    /// ([`DATAGRAM_QUEUE_LEN`](crate::conn::DATAGRAM_QUEUE_LEN) datagrams or
    /// [`DATAGRAM_QUEUE_BYTES`](crate::conn::DATAGRAM_QUEUE_BYTES) bytes,
    /// drained by the driver at once); see
    /// [`try_send_datagram`](Self::try_send_datagram) to never wait.
    ///
    /// # Errors
    ///
    /// `Unsupported` when FEC is off and the extension is not negotiated
    /// (a kcp-go or kcptun peer); `InvalidInput` for a payload longer
    /// than [`max_datagram_payload`](Self::max_datagram_payload) (each with a
    /// [`ConnError`](crate::ConnError) source); `TimedOut` /
    /// `ConnectionReset` / `ConnectionAborted` when the session failed (with
    /// a [`SessionError`](crate::SessionError) source).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the datagram is queued whole or not at all.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> std::io::Result<()> {
    /// let config = kcpio::Config::builder().fec(10, 3).build().unwrap();
    /// let stream = kcpio::KcpStream::connect("127.0.0.1:29900", &config).await?;
    /// stream.send_datagram(b"position 12,40").await?;
    /// let mut buf = vec![0; stream.max_datagram_payload()];
    /// let n = stream.recv_datagram(&mut buf).await?;
    /// println!("{:?}", &buf[..n]);
    /// # Ok(()) }
    /// ```
    pub async fn send_datagram(&self, payload: &[u8]) -> io::Result<()> {
        poll_fn(|cx| poll_send_datagram(self.session(), cx, payload)).await
    }

    /// [`send_datagram`](Self::send_datagram) without waiting.
    ///
    /// # Errors
    ///
    /// `WouldBlock` while the send queue is full, else as
    /// [`send_datagram`](Self::send_datagram).
    pub fn try_send_datagram(&self, payload: &[u8]) -> io::Result<()> {
        let now = self.session().now();
        self.session()
            .try_call(|c| c.send_datagram_at(now, payload))
    }

    /// Receives the next unreliable datagram (sent by the peer's
    /// [`send_datagram`](Self::send_datagram) or kcp-go's `SendOOB`) into
    /// `buf`, returning its length. Up to
    /// [`DATAGRAM_QUEUE_LEN`](crate::conn::DATAGRAM_QUEUE_LEN) datagrams
    /// ([`DATAGRAM_QUEUE_BYTES`](crate::conn::DATAGRAM_QUEUE_BYTES) bytes;
    /// with the FEC datagram extension negotiated
    /// [`DATAGRAM_FEC_RECV_QUEUE_LEN`](crate::conn::DATAGRAM_FEC_RECV_QUEUE_LEN)
    /// and its bytes) wait for it; later ones are dropped and counted in
    /// [`SessionStats::oob_dropped`]. A session keeps one datagram-receive
    /// waker: receive from one task at a time.
    ///
    /// # Errors
    ///
    /// `Unsupported` when FEC is off; `InvalidInput` when `buf` is shorter
    /// than the datagram (which stays queued; a buffer of
    /// [`max_datagram_payload`](Self::max_datagram_payload) bytes fits what
    /// a peer with the same configuration sends, 1488 bytes fits anything);
    /// session failures as for reads, once no datagram is left.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a datagram is taken only when it is returned.
    pub async fn recv_datagram(&self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| poll_recv_datagram(self.session(), cx, buf)).await
    }

    /// [`recv_datagram`](Self::recv_datagram) without waiting: the next
    /// datagram already received, for a relay that drains the queue after
    /// one wake-up and hands the batch on in one go.
    ///
    /// # Errors
    ///
    /// `WouldBlock` when no datagram is queued (no waker is kept), else as
    /// [`recv_datagram`](Self::recv_datagram).
    pub fn try_recv_datagram(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.session().try_call(|c| c.recv_datagram(buf))
    }

    /// Hands every datagram the session receives to `sink`, called by the
    /// session's driver task right after the packets that delivered them
    /// (kcp-go's `SetOOBHandler`): a relay passes them on from there, with
    /// no task of its own woken per datagram. Each call gets the datagrams
    /// delivered since the last one (all the session holds: at most
    /// [`DATAGRAM_FEC_RECV_QUEUE_LEN`](crate::conn::DATAGRAM_FEC_RECV_QUEUE_LEN)
    /// with the FEC datagram extension, else
    /// [`DATAGRAM_QUEUE_LEN`](crate::conn::DATAGRAM_QUEUE_LEN)), in the
    /// order [`recv_datagram`](Self::recv_datagram) would return them;
    /// datagrams already queued go to the sink at the driver's next look at
    /// the session. While a sink is installed `recv_datagram` gets no
    /// datagrams, only the session's failure (so a task can still wait for
    /// the end there). Replaces any sink installed before.
    ///
    /// The sink runs on the driver's task, which serves every session of
    /// the socket: it must not wait (no blocking call; a socket send that
    /// would block drops and counts instead, as [`RelaySocket`] does), must
    /// not panic, and must not install or clear this session's sink. It may
    /// call the session's other methods (the session is not locked while
    /// it runs). A sink that holds a handle of its own session keeps the
    /// session alive until it is cleared
    /// ([`clear_datagram_sink`](Self::clear_datagram_sink)); dropping every
    /// handle of the session drops the sink too.
    ///
    /// [`RelaySocket`]: crate::RelaySocket
    pub fn set_datagram_sink(&self, sink: impl FnMut(&[&[u8]]) + Send + 'static) {
        self.session().set_sink(Some(Box::new(sink)));
    }

    /// Removes the sink [`set_datagram_sink`](Self::set_datagram_sink)
    /// installed (waiting for a call in progress to return), and drops it:
    /// datagrams go to [`recv_datagram`](Self::recv_datagram) again (a
    /// batch the driver, on another thread, took for the sink just before
    /// is dropped). It must not be called from the sink itself.
    pub fn clear_datagram_sink(&self) {
        self.session().set_sink(None);
    }

    /// Polls for the next unreliable datagram, as
    /// `tokio::net::UdpSocket::poll_recv`: on `Ready(Ok(()))` it was put
    /// into `buf`'s unfilled part; `Pending` keeps `cx`'s waker (only the
    /// most recent one is woken).
    ///
    /// # Errors
    ///
    /// As [`recv_datagram`](Self::recv_datagram).
    pub fn poll_recv_datagram(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_recv_datagram_buf(self.session(), cx, buf)
    }
}

/// Reads a session's counters from anywhere, without owning its stream;
/// made by [`KcpStream::stats_handle`] (or a half's). Cheap to clone.
#[derive(Clone, Debug)]
pub struct StatsHandle {
    conv: u32,
    session: Weak<SessionShared>,
}

impl StatsHandle {
    /// A handle on `session` that does not keep it alive.
    pub(crate) fn of(session: &Arc<SessionShared>) -> Self {
        Self {
            conv: session.conv,
            session: Arc::downgrade(session),
        }
    }

    /// The session's counters now, as [`KcpStream::stats`]; `None` once the
    /// session is gone (every handle dropped and its linger over, or the
    /// driver stopped).
    #[must_use]
    pub fn stats(&self) -> Option<SessionStats> {
        self.session.upgrade().map(|s| stats_of(&s))
    }

    /// The KCP conversation id of the session.
    #[must_use]
    pub fn conv(&self) -> u32 {
        self.conv
    }
}

pub(crate) fn stats_of(s: &SessionShared) -> SessionStats {
    s.with_conn(Conn::stats)
}

// The handle side of the contract in `driver::shared`: each call locks the
// session, asks its `Conn`, and registers a waker on `WouldBlock`.

pub(crate) fn poll_read(
    s: &SessionShared,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    if buf.remaining() == 0 {
        return Poll::Ready(Ok(()));
    }
    s.poll_call(cx, Side::Read, |c| c.read(buf.initialize_unfilled()))
        .map_ok(|n| buf.advance(n))
}

pub(crate) fn poll_write(
    s: &SessionShared,
    cx: &mut Context<'_>,
    data: &[u8],
) -> Poll<io::Result<usize>> {
    if data.len() >= driver::shared::LENT_WRITE_MIN {
        return s.poll_write_lent(cx, data);
    }
    s.poll_call(cx, Side::Write, |c| c.write(data))
}

pub(crate) fn poll_flush(s: &SessionShared) -> Poll<io::Result<()>> {
    match s.with_conn(Conn::error) {
        Some(e) => Poll::Ready(Err(e.into())),
        None => Poll::Ready(Ok(())),
    }
}

pub(crate) fn poll_shutdown(s: &SessionShared, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    s.poll_call(cx, Side::Write, Conn::shutdown)
}

pub(crate) fn poll_send_message(
    s: &SessionShared,
    cx: &mut Context<'_>,
    msg: &[u8],
) -> Poll<io::Result<()>> {
    s.poll_call(cx, Side::Write, |c| c.send_message(msg))
}

pub(crate) fn poll_send_datagram(
    s: &SessionShared,
    cx: &mut Context<'_>,
    payload: &[u8],
) -> Poll<io::Result<()>> {
    let now = s.now();
    s.poll_call(cx, Side::DatagramWrite, |c| {
        c.send_datagram_at(now, payload)
    })
}

pub(crate) fn poll_recv_datagram(
    s: &SessionShared,
    cx: &mut Context<'_>,
    buf: &mut [u8],
) -> Poll<io::Result<usize>> {
    s.poll_call(cx, Side::DatagramRead, |c| c.recv_datagram(buf))
}

pub(crate) fn poll_recv_datagram_buf(
    s: &SessionShared,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    s.poll_call(cx, Side::DatagramRead, |c| {
        c.recv_datagram(buf.initialize_unfilled())
    })
    .map_ok(|n| buf.advance(n))
}

pub(crate) fn poll_recv_message(
    s: &SessionShared,
    cx: &mut Context<'_>,
    buf: &mut [u8],
) -> Poll<io::Result<usize>> {
    s.poll_call(cx, Side::Read, |c| c.recv_message(buf))
}

/// The `Debug` form of a stream or half called `name`.
pub(crate) fn debug_stream(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    s: &SessionShared,
) -> fmt::Result {
    f.debug_struct(name)
        .field("peer", &s.peer)
        .field("conv", &s.conv)
        .field("local", &s.driver.local_addr)
        .finish()
}

/// `peer_addr`, `local_addr`, `conv` and `stats`, on the stream and on each
/// half alike: every half answers for the whole session.
macro_rules! stream_accessors {
    ($handle:ty) => {
        impl $handle {
            /// The peer's address: on a listener's session, the address
            /// the peer last moved to
            /// ([`ConfigBuilder::migration`](crate::ConfigBuilder::migration)).
            ///
            /// # Errors
            ///
            /// None today; `io::Result` as `TcpStream::peer_addr`.
            pub fn peer_addr(&self) -> ::std::io::Result<::std::net::SocketAddr> {
                let session = self.session();
                let moved = $crate::driver::shared::lock(&session.state).moved_to;
                Ok(moved.unwrap_or(session.peer))
            }

            /// The local address of the UDP socket this session uses
            /// (shared with the listener's other sessions on the server
            /// side). A client whose local address stopped working rebinds
            /// its socket: from then on this is the new socket's address.
            ///
            /// # Errors
            ///
            /// None today; `io::Result` as `TcpStream::local_addr`.
            pub fn local_addr(&self) -> ::std::io::Result<::std::net::SocketAddr> {
                let session = self.session();
                let rebound = $crate::driver::shared::lock(&session.state).rebound_to;
                Ok(rebound.unwrap_or(session.driver.local_addr))
            }

            /// The KCP conversation id.
            #[must_use]
            pub fn conv(&self) -> u32 {
                self.session().conv
            }

            /// A snapshot of the session's counters, RTT estimate and queue.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn show(stream: &kcpio::KcpStream) {
            /// let st = stream.stats();
            /// println!(
            ///     "srtt {:?}, rto {:?}, {} RTO and {} fast retransmissions, {} recovered by FEC",
            ///     st.srtt, st.rto, st.arq.retransmit_rto, st.arq.retransmit_fast, st.fec_in.recovered
            /// );
            /// # }
            /// ```
            #[must_use]
            pub fn stats(&self) -> $crate::SessionStats {
                $crate::stream::stats_of(self.session())
            }

            /// A handle that reads this session's [`stats`](Self::stats)
            /// without owning the stream: for a monitoring task while the
            /// stream itself is moved into something that owns its transport
            /// (a [`Mux`](crate::mux::Mux), a `Framed`). It does not keep
            /// the session alive.
            #[must_use]
            pub fn stats_handle(&self) -> $crate::StatsHandle {
                $crate::stream::StatsHandle::of(self.session())
            }
        }
    };
}

pub(crate) use stream_accessors;

stream_accessors!(KcpStream);

/// `AsyncRead` on the session, for the stream and its read halves.
macro_rules! stream_async_read {
    ($handle:ty) => {
        impl ::tokio::io::AsyncRead for $handle {
            /// Copies received bytes into `buf`. Keeps the read waker (one
            /// per session, shared with `recv_message` and the read halves).
            fn poll_read(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &mut ::tokio::io::ReadBuf<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                $crate::stream::poll_read(self.session(), cx, buf)
            }
        }
    };
}

pub(crate) use stream_async_read;

/// `AsyncWrite` on the session, for the stream and its write halves.
macro_rules! stream_async_write {
    ($handle:ty) => {
        impl ::tokio::io::AsyncWrite for $handle {
            /// Queues as much of `buf` as the send window takes (at most 64
            /// segments a call for a `buf` of 8 KiB or more, whose bytes are
            /// copied with the session unlocked); `Pending` (write waker
            /// kept) when the window is full, until acknowledgements free it.
            fn poll_write(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &[u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                $crate::stream::poll_write(self.session(), cx, buf)
            }

            /// Written data is already with the driver: ready at once.
            fn poll_flush(
                self: ::std::pin::Pin<&mut Self>,
                _cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                $crate::stream::poll_flush(self.session())
            }

            /// Stops writing and completes once everything written was
            /// acknowledged, or fails with `TimedOut` after `linger`.
            /// Reading still works.
            fn poll_shutdown(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                $crate::stream::poll_shutdown(self.session(), cx)
            }
        }
    };
}

pub(crate) use stream_async_write;

stream_async_read!(KcpStream);
stream_async_write!(KcpStream);
// As std's `Read for &TcpStream`: a stream shared behind an `Arc` (its byte
// stream under a mux, its datagrams in another task) reads and writes
// through a shared reference. The session keeps one read and one write
// waker, so one task reads and one writes at a time, as with the halves.
stream_async_read!(&KcpStream);
stream_async_write!(&KcpStream);
