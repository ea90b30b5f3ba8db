//! Copying between a TCP connection and a stream, with half-close.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kcpio::mux::{MuxStream, OwnedReadHalf, OwnedWriteHalf};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::io::poll_read_buf;

use crate::limits::Charge;
use crate::stats::Stats;

/// The most one read of a forwarded connection takes. The buffer exists
/// only while data flows: it is allocated when a read starts and freed when
/// the source has nothing (a stalled or idle stream holds none), and the
/// direction into the tunnel reads no more than the stream's send buffer
/// has room for, so a stream whose peer does not read holds nothing here.
pub(crate) const COPY_BUF: usize = 64 * 1024;

/// With `--closewait` set: after the peer's FIN, how long the direction
/// toward the peer may hold its source back (no room, no budget) without
/// moving a byte before the stream is ended. A kcptun client closes its whole stream on FIN, and an
/// attacker that leaves reads nothing: either way that direction would
/// otherwise hold a slot, a descriptor and its queued bytes for the whole
/// `--closewait`.
pub(crate) const PEER_GONE_STALL: Duration = Duration::from_secs(5);

/// Copies both ways between a TCP connection and a stream. A direction
/// that ends cleanly is half-closed on the other side (TCP shutdown, or a
/// FIN); the other direction then runs until it ends, or for at most
/// `closewait` when that is set. With `closewait` set, a direction toward
/// a peer that sent its FIN also ends once it has held its source's bytes
/// back for [`PEER_GONE_STALL`] without giving the peer one (waiting for
/// room in the stream, or for the buffer budget, which a peer that reads
/// nothing keeps spent; counted in `streams_peer_gone`). An error in either
/// ends both.
///
/// A TCP connection that fails (a reset: its peer's kernel may have
/// discarded bytes its application wrote) is counted in `tcp_errors`: the
/// stream still ends with a FIN, because smux has no reset frame, so the
/// far end sees an end of stream, not an error (kcptun does the same).
///
/// With a `budget`, what is read from `conn` is charged to it until the
/// session no longer holds it, what is read from `stream` until it is
/// written into `conn`, and nothing is read either way while it is spent:
/// a slow reader at either end holds at most the budget, not a copy buffer
/// per stream.
pub(crate) async fn forward(
    conn: Conn,
    stream: MuxStream,
    closewait: Duration,
    stats: &Stats,
    budget: Option<&Charge>,
) -> io::Result<(u64, u64)> {
    match conn {
        Conn::Tcp(tcp) => {
            let _ = tcp.set_nodelay(true);
            let (r, w) = tcp.into_split();
            halves(r, w, stream, closewait, stats, budget).await
        }
        #[cfg(unix)]
        Conn::Unix(unix) => {
            let (r, w) = unix.into_split();
            halves(r, w, stream, closewait, stats, budget).await
        }
    }
}

/// A source whose readiness can be awaited without reading from it, so a
/// forwarder takes budget only once there is something to read.
pub(crate) trait Ready {
    /// Waits until a read would not block (data, EOF or an error); returns
    /// how many bytes a read would return where the source knows (`Some(0)`:
    /// the end), `None` where it does not (a socket).
    fn ready(&self) -> impl Future<Output = io::Result<Option<usize>>> + Send;
}

impl Ready for tokio::net::tcp::OwnedReadHalf {
    async fn ready(&self) -> io::Result<Option<usize>> {
        self.readable().await.map(|()| None)
    }
}

impl Ready for OwnedReadHalf {
    async fn ready(&self) -> io::Result<Option<usize>> {
        self.readable().await.map(Some)
    }
}

#[cfg(unix)]
impl Ready for tokio::net::unix::OwnedReadHalf {
    async fn ready(&self) -> io::Result<Option<usize>> {
        self.readable().await.map(|()| None)
    }
}

/// The budget a read of a source that reported `ready` takes: at most
/// `want`, no more than the source holds, and none for its end (which must
/// not wait behind a spent budget: a stream whose peer sent its FIN would
/// otherwise keep its slot until some budget came back).
fn budget_for(ready: Option<usize>, want: usize) -> usize {
    ready.map_or(want, |n| n.min(want))
}

/// A connection at the near end of a stream: TCP, or a Unix socket (a
/// server's `-t /path`).
pub(crate) enum Conn {
    /// A TCP connection.
    Tcp(TcpStream),
    /// A Unix stream socket.
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

/// Whether a server target names a Unix socket: anything that is not
/// `host:port`, as kcptun decides.
pub(crate) fn is_unix_path(target: &str) -> bool {
    target
        .rsplit_once(':')
        .is_none_or(|(_, port)| port.parse::<u16>().is_err())
}

/// Dials a server target: `host:port` over TCP, else a Unix socket path.
pub(crate) async fn dial(target: &str) -> io::Result<Conn> {
    #[cfg(unix)]
    if is_unix_path(target) {
        return Ok(Conn::Unix(tokio::net::UnixStream::connect(target).await?));
    }
    Ok(Conn::Tcp(TcpStream::connect(target).await?))
}

/// [`forward`] over a connection's two halves.
async fn halves(
    tr: impl AsyncRead + Ready + Unpin,
    tw: impl AsyncWrite + Unpin,
    stream: MuxStream,
    closewait: Duration,
    stats: &Stats,
    budget: Option<&Charge>,
) -> io::Result<(u64, u64)> {
    let (sr, sw) = stream.into_split();
    // Set while `up` waits for its source; `moved` counts what it has
    // given the peer.
    let source_idle = AtomicBool::new(false);
    let moved = AtomicU64::new(0);
    let up = pipe_in(
        tr,
        sw,
        (&stats.tcp_in, &stats.tcp_errors),
        budget,
        (&source_idle, &moved),
    );
    let down = pipe(sr, tw, stats, budget);
    tokio::pin!(up, down);
    tokio::select! {
        r = &mut up => {
            let u = r?;
            let d = second(down, closewait).await?;
            Ok((u, d))
        }
        r = &mut down => {
            let d = r?;
            if closewait.is_zero() {
                return Ok((up.await?, d));
            }
            let stalled = async {
                let mut last = moved.load(Ordering::Relaxed);
                let mut since = tokio::time::Instant::now();
                let mut tick = tokio::time::interval(PEER_GONE_STALL / 5);
                loop {
                    tick.tick().await;
                    let now = moved.load(Ordering::Relaxed);
                    if now != last || source_idle.load(Ordering::Relaxed) {
                        last = now;
                        since = tokio::time::Instant::now();
                    } else if since.elapsed() >= PEER_GONE_STALL {
                        return;
                    }
                }
            };
            let u = tokio::select! {
                u = second(up, closewait) => u?,
                () = stalled => {
                    stats.streams_peer_gone.fetch_add(1, Ordering::Relaxed);
                    moved.load(Ordering::Relaxed)
                }
            };
            Ok((u, d))
        }
    }
}

async fn second(
    f: Pin<&mut impl Future<Output = io::Result<u64>>>,
    closewait: Duration,
) -> io::Result<u64> {
    if closewait.is_zero() {
        f.await
    } else {
        Ok(tokio::time::timeout(closewait, f).await.unwrap_or(Ok(0))?)
    }
}

/// Reads at most `limit` bytes from `from` into `buf`, which takes its
/// memory for the read (uninitialised: no 64 KiB fill per read) and gives
/// it back if `from` has nothing yet.
async fn read_lazy(
    from: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    limit: usize,
) -> io::Result<usize> {
    std::future::poll_fn(|cx| poll_lazy(from, buf, limit, cx)).await
}

/// [`read_lazy`] if `from` has something now, else `None` (a readiness
/// that turned out spurious).
async fn read_now(
    from: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    limit: usize,
) -> io::Result<Option<usize>> {
    std::future::poll_fn(|cx| match poll_lazy(from, buf, limit, cx) {
        Poll::Pending => Poll::Ready(Ok(None)),
        Poll::Ready(r) => Poll::Ready(r.map(Some)),
    })
    .await
}

/// One poll of [`read_lazy`].
fn poll_lazy(
    from: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    limit: usize,
    cx: &mut std::task::Context<'_>,
) -> Poll<io::Result<usize>> {
    buf.clear();
    buf.reserve(limit);
    let mut room = BufMut::limit(&mut *buf, limit);
    match poll_read_buf(Pin::new(&mut *from), cx, &mut room) {
        Poll::Pending => {
            *buf = BytesMut::new();
            Poll::Pending
        }
        ready => ready,
    }
}

/// Bytes counted in a gauge while a write is pending (also when it is
/// cancelled or fails).
struct Held<'a>(&'a AtomicU64, u64);

impl<'a> Held<'a> {
    fn new(gauge: &'a AtomicU64, n: usize) -> Self {
        gauge.fetch_add(n as u64, Ordering::Relaxed);
        Self(gauge, n as u64)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::Relaxed);
    }
}

/// Awaits `f`, freeing `buf`'s memory if `f` has to wait: a forwarder
/// waiting for its source, for budget or for room holds no copy buffer
/// (thousands of stalled streams would each keep 64 KiB).
async fn idle<F: Future>(buf: &mut BytesMut, f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        let r = f.as_mut().poll(cx);
        if r.is_pending() && buf.capacity() > 0 {
            *buf = BytesMut::new();
        }
        r
    })
    .await
}

/// `r`, with a failure counted in `errors`.
fn counted<T>(r: io::Result<T>, errors: &AtomicU64) -> io::Result<T> {
    if r.is_err() {
        errors.fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// Copies a stream (`from`) into a TCP connection (`to`) until EOF, then
/// shuts `to` down (a TCP half-close); the connection's failures are
/// counted in `tcp_errors`. With a `budget`, it waits until `from` has
/// something, then for as much budget as it means to read, and keeps that
/// charged until `to` has taken the bytes: a connection that does not read
/// holds what it was given last, within the budget.
async fn pipe(
    mut from: impl AsyncRead + Ready + Unpin,
    mut to: impl AsyncWrite + Unpin,
    stats: &Stats,
    budget: Option<&Charge>,
) -> io::Result<u64> {
    let (counter, tcp_errors) = (&stats.tcp_out, &stats.tcp_errors);
    let mut buf = BytesMut::new();
    let mut total = 0u64;
    loop {
        let (n, _reserved) = match budget {
            None => (read_lazy(&mut from, &mut buf, COPY_BUF).await?, None),
            Some(b) => {
                let ready = idle(&mut buf, from.ready()).await?;
                let want = budget_for(ready, COPY_BUF);
                if want == 0 {
                    // The end (or the session's error) takes no budget; a
                    // one-byte read returns it (an empty one would not ask).
                    match read_now(&mut from, &mut buf, 1).await? {
                        Some(n) => (n, None),
                        None => continue,
                    }
                } else {
                    let r = idle(&mut buf, b.reserve(want)).await?;
                    match read_now(&mut from, &mut buf, r.bytes()).await? {
                        Some(n) => (n, Some(r)),
                        None => continue,
                    }
                }
            }
        };
        if n == 0 {
            counted(to.shutdown().await, tcp_errors)?;
            return Ok(total);
        }
        let held = Held::new(&stats.copy_held, n);
        counted(to.write_all(&buf[..n]).await, tcp_errors)?;
        drop(held);
        total += n as u64;
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// [`pipe`] the other way, from a TCP connection into a stream: reads from
/// `from` only what the stream can take at once, so when the peer stops
/// reading, this stops reading `from` (which pushes back on the TCP sender)
/// and holds no buffer. With a `budget`, it waits for `from` to be
/// readable, then for as much budget as it means to read, and reads no
/// more than that.
///
/// `source_idle` is set while it waits for `from` to have something, and
/// `moved` counts the bytes it gave the stream: the caller's view of a
/// peer that takes nothing (moved stands still while the source is not
/// idle: the stream, its session or the budget hold it back).
async fn pipe_in(
    mut from: impl AsyncRead + Ready + Unpin,
    mut to: OwnedWriteHalf,
    (counter, tcp_errors): (&AtomicU64, &AtomicU64),
    budget: Option<&Charge>,
    (source_idle, moved): (&AtomicBool, &AtomicU64),
) -> io::Result<u64> {
    let mut buf = BytesMut::new();
    let mut total = 0u64;
    loop {
        // Wait for room; a stream that has none holds no buffer either.
        let room = idle(&mut buf, to.writable()).await?;
        let want = room.min(COPY_BUF);
        source_idle.store(true, Ordering::Relaxed);
        let (n, reserved) = match budget {
            None => (
                counted(read_lazy(&mut from, &mut buf, want).await, tcp_errors)?,
                None,
            ),
            Some(b) => {
                let ready = counted(idle(&mut buf, from.ready()).await, tcp_errors)?;
                source_idle.store(false, Ordering::Relaxed);
                let r = idle(&mut buf, b.reserve(budget_for(ready, want))).await?;
                match counted(read_now(&mut from, &mut buf, r.bytes()).await, tcp_errors)? {
                    Some(n) => (n, Some(r)),
                    None => continue,
                }
            }
        };
        source_idle.store(false, Ordering::Relaxed);
        if n == 0 {
            to.shutdown().await?;
            return Ok(total);
        }
        to.write_all(&buf[..n]).await?;
        if let Some(r) = reserved {
            r.commit(n);
        }
        total += n as u64;
        moved.store(total, Ordering::Relaxed);
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}
