//! Copying between a TCP connection and a stream, with half-close.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kcpio::mux::MuxStream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::stats::Stats;

/// Copy buffer per direction of a forwarded connection.
const COPY_BUF: usize = 64 * 1024;

/// Copies both ways between a TCP connection and a stream. A direction
/// that ends cleanly is half-closed on the other side (TCP shutdown, or a
/// FIN); the other direction then runs until it ends, or for at most
/// `closewait` when that is set. An error in either ends both.
pub(crate) async fn forward(
    conn: Conn,
    stream: MuxStream,
    closewait: Duration,
    stats: &Stats,
) -> io::Result<(u64, u64)> {
    match conn {
        Conn::Tcp(tcp) => {
            let _ = tcp.set_nodelay(true);
            let (r, w) = tcp.into_split();
            halves(r, w, stream, closewait, stats).await
        }
        #[cfg(unix)]
        Conn::Unix(unix) => {
            let (r, w) = unix.into_split();
            halves(r, w, stream, closewait, stats).await
        }
    }
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
    tr: impl AsyncRead + Unpin,
    tw: impl AsyncWrite + Unpin,
    stream: MuxStream,
    closewait: Duration,
    stats: &Stats,
) -> io::Result<(u64, u64)> {
    let (sr, sw) = stream.into_split();
    let up = pipe(tr, sw, &stats.tcp_in);
    let down = pipe(sr, tw, &stats.tcp_out);
    tokio::pin!(up, down);
    let wait = |first: io::Result<u64>| async move {
        let n = first?;
        Ok::<_, io::Error>(n)
    };
    tokio::select! {
        r = &mut up => {
            let u = wait(r).await?;
            let d = second(down, closewait).await?;
            Ok((u, d))
        }
        r = &mut down => {
            let d = wait(r).await?;
            let u = second(up, closewait).await?;
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

/// Copies `from` into `to` until EOF, then shuts `to` down (a FIN or a TCP
/// half-close).
async fn pipe(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    counter: &AtomicU64,
) -> io::Result<u64> {
    let mut buf = vec![0u8; COPY_BUF];
    let mut total = 0u64;
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            to.shutdown().await?;
            return Ok(total);
        }
        to.write_all(&buf[..n]).await?;
        total += n as u64;
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}
