//! The halves of a [`KcpStream`]: owned ([`KcpStream::into_split`]) and
//! borrowed ([`KcpStream::split`]), as `tokio::net::tcp::split` and
//! `split_owned`. Every half answers the session's accessors.

use std::fmt;
use std::future::poll_fn;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::ReadBuf;

use super::{
    Handle, KcpStream, debug_stream, poll_recv_datagram, poll_recv_datagram_buf, poll_recv_message,
    poll_send_datagram, poll_send_message, stream_accessors, stream_async_read, stream_async_write,
};
use crate::conn::Conn;
use crate::driver::shared::SessionShared;

/// Both owned halves of the stream whose handle is `inner`.
pub(crate) fn split_owned(inner: Arc<Handle>) -> (OwnedReadHalf, OwnedWriteHalf) {
    (
        OwnedReadHalf {
            inner: inner.clone(),
        },
        OwnedWriteHalf { inner },
    )
}

/// Both halves borrowed from `stream`.
pub(crate) fn split(stream: &KcpStream) -> (ReadHalf<'_>, WriteHalf<'_>) {
    (ReadHalf { stream }, WriteHalf { stream })
}

/// The read half of a [`KcpStream`], from [`KcpStream::into_split`].
///
/// Reading works as on the stream; the accessors answer for the whole
/// session. [`reunite`](Self::reunite) puts the stream back together.
pub struct OwnedReadHalf {
    inner: Arc<Handle>,
}

/// The write half of a [`KcpStream`], from [`KcpStream::into_split`].
///
/// Dropping it does not shut the stream down (unlike tokio's TCP write
/// half: KCP has no end-of-stream marker to send); call `shutdown` to wait
/// for acknowledgement. The session lives until both halves are dropped.
pub struct OwnedWriteHalf {
    inner: Arc<Handle>,
}

/// The read half of a [`KcpStream`] borrowed by [`KcpStream::split`].
pub struct ReadHalf<'a> {
    stream: &'a KcpStream,
}

/// The write half of a [`KcpStream`] borrowed by [`KcpStream::split`].
pub struct WriteHalf<'a> {
    stream: &'a KcpStream,
}

/// The halves given to [`OwnedReadHalf::reunite`] (or
/// [`OwnedWriteHalf::reunite`]) came from different streams; both are
/// handed back unchanged.
#[derive(Debug)]
pub struct ReuniteError(pub OwnedReadHalf, pub OwnedWriteHalf);

impl fmt::Display for ReuniteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tried to reunite halves that are not from the same KcpStream")
    }
}

impl std::error::Error for ReuniteError {}

/// Joins two halves of one stream; hands both back otherwise.
fn reunite(read: OwnedReadHalf, write: OwnedWriteHalf) -> Result<KcpStream, ReuniteError> {
    if Arc::ptr_eq(&read.inner, &write.inner) {
        // The session lives on in `read`'s handle.
        drop(write);
        Ok(KcpStream::from_handle(read.inner))
    } else {
        Err(ReuniteError(read, write))
    }
}

impl fmt::Debug for OwnedReadHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_stream(f, "OwnedReadHalf", &self.inner.session)
    }
}

impl fmt::Debug for OwnedWriteHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_stream(f, "OwnedWriteHalf", &self.inner.session)
    }
}

impl fmt::Debug for ReadHalf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_stream(f, "ReadHalf", self.stream.session())
    }
}

impl fmt::Debug for WriteHalf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_stream(f, "WriteHalf", self.stream.session())
    }
}

stream_accessors!(OwnedReadHalf);
stream_accessors!(OwnedWriteHalf);
stream_accessors!(ReadHalf<'_>);
stream_accessors!(WriteHalf<'_>);

impl OwnedReadHalf {
    fn session(&self) -> &Arc<SessionShared> {
        &self.inner.session
    }

    /// Joins this half with its write half into the original stream, as
    /// `tokio::net::tcp::OwnedReadHalf::reunite`.
    ///
    /// # Errors
    ///
    /// [`ReuniteError`], holding both halves unchanged, when they come from
    /// different streams.
    pub fn reunite(self, other: OwnedWriteHalf) -> Result<KcpStream, ReuniteError> {
        reunite(self, other)
    }

    /// Receives one whole message; see [`KcpStream::recv_message`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::recv_message`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn recv_message(&self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| poll_recv_message(self.session(), cx, buf)).await
    }

    /// Receives the next unreliable datagram; see
    /// [`KcpStream::recv_datagram`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::recv_datagram`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn recv_datagram(&self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| poll_recv_datagram(&self.inner.session, cx, buf)).await
    }

    /// Polls for the next unreliable datagram; see
    /// [`KcpStream::poll_recv_datagram`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::recv_datagram`].
    pub fn poll_recv_datagram(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_recv_datagram_buf(&self.inner.session, cx, buf)
    }
}

impl OwnedWriteHalf {
    fn session(&self) -> &Arc<SessionShared> {
        &self.inner.session
    }

    /// Joins this half with its read half into the original stream; see
    /// [`OwnedReadHalf::reunite`].
    ///
    /// # Errors
    ///
    /// [`ReuniteError`] when the halves come from different streams.
    pub fn reunite(self, other: OwnedReadHalf) -> Result<KcpStream, ReuniteError> {
        reunite(other, self)
    }

    /// Sends one whole message; see [`KcpStream::send_message`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::send_message`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn send_message(&self, msg: &[u8]) -> io::Result<()> {
        poll_fn(|cx| poll_send_message(self.session(), cx, msg)).await
    }

    /// The largest datagram payload; see
    /// [`KcpStream::max_datagram_payload`].
    #[must_use]
    pub fn max_datagram_payload(&self) -> usize {
        self.inner.session.with_conn(Conn::max_datagram_payload)
    }

    /// Sends one unreliable datagram; see [`KcpStream::send_datagram`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::send_datagram`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn send_datagram(&self, payload: &[u8]) -> io::Result<()> {
        poll_fn(|cx| poll_send_datagram(&self.inner.session, cx, payload)).await
    }

    /// [`send_datagram`](Self::send_datagram) without waiting; see
    /// [`KcpStream::try_send_datagram`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::try_send_datagram`].
    pub fn try_send_datagram(&self, payload: &[u8]) -> io::Result<()> {
        let now = self.inner.session.now();
        self.inner
            .session
            .try_call(|c| c.send_datagram_at(now, payload))
    }
}

impl ReadHalf<'_> {
    fn session(&self) -> &Arc<SessionShared> {
        self.stream.session()
    }

    /// Receives one whole message; see [`KcpStream::recv_message`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::recv_message`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn recv_message(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.recv_message(buf).await
    }

    /// Receives one unreliable datagram; see [`KcpStream::recv_datagram`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::recv_datagram`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn recv_datagram(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.recv_datagram(buf).await
    }

    /// Polls for the next unreliable datagram; see
    /// [`KcpStream::poll_recv_datagram`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::recv_datagram`].
    pub fn poll_recv_datagram(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.stream.poll_recv_datagram(cx, buf)
    }
}

impl WriteHalf<'_> {
    fn session(&self) -> &Arc<SessionShared> {
        self.stream.session()
    }

    /// Sends one whole message; see [`KcpStream::send_message`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::send_message`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn send_message(&self, msg: &[u8]) -> io::Result<()> {
        self.stream.send_message(msg).await
    }

    /// The largest unreliable datagram payload; see
    /// [`KcpStream::max_datagram_payload`].
    #[must_use]
    pub fn max_datagram_payload(&self) -> usize {
        self.stream.max_datagram_payload()
    }

    /// Sends one unreliable datagram; see [`KcpStream::send_datagram`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::send_datagram`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn send_datagram(&self, payload: &[u8]) -> io::Result<()> {
        self.stream.send_datagram(payload).await
    }

    /// [`send_datagram`](Self::send_datagram) without waiting; see
    /// [`KcpStream::try_send_datagram`].
    ///
    /// # Errors
    ///
    /// As [`KcpStream::try_send_datagram`].
    pub fn try_send_datagram(&self, payload: &[u8]) -> io::Result<()> {
        self.stream.try_send_datagram(payload)
    }
}

impl AsRef<KcpStream> for ReadHalf<'_> {
    fn as_ref(&self) -> &KcpStream {
        self.stream
    }
}

impl AsRef<KcpStream> for WriteHalf<'_> {
    fn as_ref(&self) -> &KcpStream {
        self.stream
    }
}

stream_async_read!(OwnedReadHalf);
stream_async_read!(ReadHalf<'_>);
stream_async_write!(OwnedWriteHalf);
stream_async_write!(WriteHalf<'_>);
