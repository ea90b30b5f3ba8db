//! What a session's first bytes say: snappy framing or not, and the smux
//! version; the transports that put those bytes back or watch them.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use kcpio::mux::frame::{Cmd, Header};
use kcpio::mux::snappy::{MAX_BLOCK, MAX_ENCODED_BLOCK, STREAM_IDENTIFIER};
use kcpio::mux::{Snappy, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The first bytes of a snappy framed stream (the stream identifier chunk).
pub(crate) const SNAPPY_MAGIC: [u8; 10] = STREAM_IDENTIFIER;

/// What a compressing client's first bytes from its server are when they do
/// not start with the snappy stream identifier.
///
/// A KCP session delivers its bytes in order from the first, so a server
/// that compresses always shows the identifier first; the bytes that come
/// instead say what the server does. An smux header and a snappy chunk
/// header can look alike (an uncompressed chunk and smux v1 both start with
/// 0x01), so both readings are tried on the whole header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnframedStart {
    /// An smux frame header that is no snappy chunk header: the server does
    /// not compress. The frame's version byte.
    Smux(u8),
    /// A snappy chunk header that is no smux header: a compressed stream
    /// read from past its start. The smux version byte inside an
    /// uncompressed chunk, when the bytes reach it.
    SnappyChunk(Option<u8>),
    /// Both readings fit, neither does, or too few bytes to tell.
    Unclear,
}

/// Reads `b`, a session's first bytes (not the snappy identifier), as
/// [`UnframedStart`].
pub(crate) fn unframed_start(b: &[u8]) -> UnframedStart {
    let Some(&[t, b1, b2, b3]) = b.get(..4) else {
        return UnframedStart::Unclear;
    };
    // smux: version 1 or 2, a header its own version's session takes (the
    // stream id does not matter here); UPD only from a v2 peer.
    let header = Header {
        version: t,
        cmd: b1,
        len: u16::from_le_bytes([b2, b3]),
        sid: 0,
    };
    let smux = matches!(t, 1 | 2)
        && header
            .validate(t)
            .is_ok_and(|cmd| cmd != Cmd::Upd || t == 2);
    // snappy framing: a compressed (0x00) or uncompressed (0x01) chunk holds
    // a 4-byte checksum and at most 64 KiB of data (compressed, at most
    // snappy's worst case for it); padding (0xfe) and the skippable types
    // (0x80..=0xfd) any length; 0x02..=0x7f are reserved.
    let chunk_len = u32::from_le_bytes([b1, b2, b3, 0]);
    let snappy = match t {
        0x00 => (5..=4 + MAX_ENCODED_BLOCK as u32).contains(&chunk_len),
        0x01 => (5..=4 + MAX_BLOCK as u32).contains(&chunk_len),
        0x80..=0xfe => true,
        _ => false,
    };
    match (smux, snappy) {
        (true, false) => UnframedStart::Smux(t),
        (false, true) => {
            UnframedStart::SnappyChunk((t == 0x01).then(|| b.get(8).copied()).flatten())
        }
        _ => UnframedStart::Unclear,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_frame_without_snappy_reads_as_smux() {
        // smux v1 NOP, as a --nocomp kcptun server's keepalive opens its session.
        assert_eq!(
            unframed_start(&[1, 3, 0, 0, 0, 0, 0, 0]),
            UnframedStart::Smux(1)
        );
        // smux v2 SYN of stream 3, and a v2 window update.
        assert_eq!(
            unframed_start(&[2, 0, 0, 0, 3, 0, 0, 0]),
            UnframedStart::Smux(2)
        );
        assert_eq!(
            unframed_start(&[2, 4, 8, 0, 3, 0, 0, 0]),
            UnframedStart::Smux(2)
        );
    }

    #[test]
    fn a_chunk_without_its_identifier_is_no_missing_compression() {
        // The uncompressed chunk that holds an smux v1 NOP: the stream's
        // second chunk, or its first without the identifier.
        assert_eq!(
            unframed_start(&[0x01, 0x0c, 0, 0, 0x82, 0x37, 0xbc, 0x1d, 1, 3, 0, 0]),
            UnframedStart::SnappyChunk(Some(1))
        );
        assert_eq!(
            unframed_start(&[0x01, 0x0c, 0, 0]),
            UnframedStart::SnappyChunk(None)
        );
        assert_eq!(
            unframed_start(&[0x00, 0x20, 0, 0, 1, 2, 3, 4, 5]),
            UnframedStart::SnappyChunk(None)
        );
    }

    #[test]
    fn ambiguous_or_short_bytes_say_so() {
        // smux v1 PSH of 3 bytes, also an uncompressed chunk of 770 bytes.
        assert_eq!(
            unframed_start(&[1, 2, 3, 0, 1, 0, 0, 0]),
            UnframedStart::Unclear
        );
        assert_eq!(unframed_start(&[1, 3, 0]), UnframedStart::Unclear);
        // A reserved snappy type that is no smux version either.
        assert_eq!(unframed_start(&[0x30, 0, 0, 0]), UnframedStart::Unclear);
    }
}
