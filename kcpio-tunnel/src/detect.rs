//! What a session's first bytes say: snappy framing or not, and the smux
//! version; the transports that put those bytes back or watch them.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use kcpio::mux::{Snappy, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The first bytes of a snappy framed stream (the stream identifier chunk).
pub(crate) const SNAPPY_MAGIC: [u8; 10] =
    [0xff, 0x06, 0x00, 0x00, 0x73, 0x4e, 0x61, 0x50, 0x70, 0x59];

/// Any transport a mux can run over.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Looks at the first bytes a transport delivers.
type FirstBytesCheck = Box<dyn FnOnce(&[u8]) + Send>;

/// A transport whose first reads return bytes already taken from it (the
/// server's detection), and whose first bytes read go to a check once (the
/// client's mismatch diagnosis). Writes pass through.
pub(crate) struct Tap<T> {
    prefix: Vec<u8>,
    pos: usize,
    check: Option<FirstBytesCheck>,
    inner: T,
}

impl<T> Tap<T> {
    pub(crate) fn prefixed(prefix: Vec<u8>, inner: T) -> Self {
        Self {
            prefix,
            pos: 0,
            check: None,
            inner,
        }
    }

    pub(crate) fn watched(inner: T, check: impl FnOnce(&[u8]) + Send + 'static) -> Self {
        Self {
            prefix: Vec::new(),
            pos: 0,
            check: Some(Box::new(check)),
            inner,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tap<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let pos = self.pos;
            buf.put_slice(&self.prefix[pos..pos + n]);
            self.pos += n;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before
            && let Some(check) = self.check.take()
        {
            check(&buf.filled()[before..]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tap<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a client's first bytes say about how it talks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Detected {
    /// Whether the peer snappy-frames the session.
    pub(crate) compressed: bool,
    /// The smux version the peer speaks.
    pub(crate) version: Version,
}

/// Reads the first bytes of a server session: a snappy stream identifier
/// (compression on) or not, then the first smux frame's version byte.
/// Returns the transport with those bytes put back, ready for the mux.
pub(crate) async fn detect<T: Io + 'static>(mut io: T) -> io::Result<(Box<dyn Io>, Detected)> {
    let mut head = Vec::with_capacity(SNAPPY_MAGIC.len());
    let mut byte = [0u8; 64];
    loop {
        let n = io
            .read(&mut byte[..SNAPPY_MAGIC.len() - head.len().min(SNAPPY_MAGIC.len())])
            .await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before a first frame",
            ));
        }
        head.extend_from_slice(&byte[..n]);
        if head[0] != SNAPPY_MAGIC[0] || head.len() >= SNAPPY_MAGIC.len() {
            break;
        }
    }
    let compressed = head[0] == SNAPPY_MAGIC[0];
    if compressed && head[..] != SNAPPY_MAGIC {
        return Err(bad_start(&head));
    }
    let io = Tap::prefixed(head.clone(), io);
    let (mut io, first): (Box<dyn Io>, u8) = if compressed {
        let mut s = Snappy::new(io);
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        (Box::new(s), b[0])
    } else {
        (Box::new(io), head[0])
    };
    let version = match first {
        1 => Version::V1,
        2 => Version::V2,
        _ => return Err(bad_start(&[first])),
    };
    if compressed {
        io = Box::new(Tap::prefixed(vec![first], io));
    }
    Ok((
        io,
        Detected {
            compressed,
            version,
        },
    ))
}

fn bad_start(head: &[u8]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the client's first bytes {head:02x?} are neither a snappy stream nor an smux v1/v2 frame"
        ),
    )
}
