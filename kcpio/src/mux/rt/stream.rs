//! [`MuxStream`] and its halves: thin handles over the shared [`Session`](crate::mux::Session).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Shared;
use crate::mux::StreamId;

/// One stream of a [`Mux`](super::Mux) session, `AsyncRead + AsyncWrite`
/// like a `TcpStream`.
///
/// - Reads return the peer's data in order, then EOF (`Ok(0)`) after the
///   peer's FIN.
/// - Writes queue data (at most the configured stream send buffer, and
///   only while the session's send budget lasts) for the session's task;
///   `flush` waits until it has been handed to the transport.
/// - `shutdown` is a half-close: it sends a FIN after the queued data and
///   completes once the FIN is handed to the transport. Reading keeps
///   working until the peer's FIN.
/// - Dropping the stream closes it: a FIN follows any queued data, and data
///   still arriving is discarded.
///
/// Every `poll_*` method keeps the waker of its last call: one for reads,
/// one for writes, flush and shutdown.
pub struct MuxStream {
    handle: Handle,
}

struct Handle {
    shared: Arc<Shared>,
    sid: StreamId,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.lock().release_stream(self.sid);
    }
}

impl Handle {
    fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut st = self.shared.lock();
        let was_paused = !st.session.wants_input();
        match st.session.read(self.sid, buf.initialize_unfilled()) {
            Ok(Some(n)) => {
                buf.advance(n);
                if (was_paused && st.session.wants_input()) || st.session.has_transmit() {
                    st.wake_driver();
                }
                Poll::Ready(Ok(()))
            }
            Ok(None) => {
                st.set_read_waker(self.sid, cx.waker());
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(st.stream_error(e))),
        }
    }

    fn poll_write(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut st = self.shared.lock();
        match st.session.write(self.sid, data) {
            Ok(0) => {
                st.set_write_waker(self.sid, cx.waker());
                Poll::Pending
            }
            Ok(n) => {
                st.wake_driver();
                Poll::Ready(Ok(n))
            }
            Err(e) => Poll::Ready(Err(st.stream_error(e))),
        }
    }

    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut st = self.shared.lock();
        match st.session.read_ready(self.sid) {
            Ok(Some(n)) => Poll::Ready(Ok(n)),
            Ok(None) => {
                st.set_read_waker(self.sid, cx.waker());
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(st.stream_error(e))),
        }
    }

    fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut st = self.shared.lock();
        match st.session.write_room(self.sid) {
            Ok(0) => {
                st.set_write_waker(self.sid, cx.waker());
                Poll::Pending
            }
            Ok(n) => Poll::Ready(Ok(n)),
            Err(e) => Poll::Ready(Err(st.stream_error(e))),
        }
    }

    fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.shared.lock();
        if st.session.send_queued(self.sid) == 0 {
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = st.session.error() {
            return Poll::Ready(Err(st.stream_error(crate::mux::StreamError::Session(e))));
        }
        st.set_write_waker(self.sid, cx.waker());
        Poll::Pending
    }

    fn poll_shutdown(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.shared.lock();
        match st.session.shutdown_write(self.sid) {
            Ok(true) => Poll::Ready(Ok(())),
            Ok(false) => {
                st.wake_driver();
                st.set_write_waker(self.sid, cx.waker());
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(st.stream_error(e))),
        }
    }

    /// Queues the FIN without waiting (a dropped write half).
    fn shutdown_now(&self) {
        let mut st = self.shared.lock();
        if st.session.shutdown_write(self.sid).is_ok() {
            st.wake_driver();
        }
    }
}

impl MuxStream {
    pub(super) fn new(shared: Arc<Shared>, sid: StreamId) -> Self {
        Self {
            handle: Handle { shared, sid },
        }
    }

    /// The stream id on the wire.
    #[must_use]
    pub fn id(&self) -> StreamId {
        self.handle.sid
    }

    /// Splits the stream into a read half and a write half that can move to
    /// different tasks. The stream closes when both are dropped; dropping
    /// the write half alone half-closes it (like tokio's `OwnedWriteHalf`).
    #[must_use]
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        let h = Arc::new(self.handle);
        (
            OwnedReadHalf {
                handle: Arc::clone(&h),
            },
            OwnedWriteHalf { handle: h },
        )
    }
}

impl std::fmt::Debug for MuxStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxStream")
            .field("id", &self.handle.sid)
            .finish_non_exhaustive()
    }
}

/// The read half of a [`MuxStream`], from [`MuxStream::into_split`].
pub struct OwnedReadHalf {
    handle: Arc<Handle>,
}

/// The write half of a [`MuxStream`], from [`MuxStream::into_split`].
/// Dropping it half-closes the stream (a FIN after the queued data).
pub struct OwnedWriteHalf {
    handle: Arc<Handle>,
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        self.handle.shutdown_now();
    }
}

impl OwnedReadHalf {
    /// The stream id on the wire.
    #[must_use]
    pub fn id(&self) -> StreamId {
        self.handle.sid
    }

    /// Waits until a read would not wait: received bytes, the peer's FIN
    /// or an error are there. Returns the bytes a read would return now, 0
    /// at the end of the stream (a read then returns 0, or the session's
    /// error). Nothing is consumed, so a forwarder can take buffer space
    /// for a read only once there is something to read, no more than is
    /// there, and none to read an end.
    ///
    /// # Errors
    ///
    /// As a read: the stream is no longer open here (`NotConnected`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it consumes nothing.
    pub async fn readable(&self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.handle.poll_readable(cx)).await
    }

    /// [`readable`](Self::readable) as a poll method; keeps the waker of the
    /// last call (the one reads use).
    ///
    /// # Errors
    ///
    /// As [`readable`](Self::readable).
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.handle.poll_readable(cx)
    }
}

impl OwnedWriteHalf {
    /// The stream id on the wire.
    #[must_use]
    pub fn id(&self) -> StreamId {
        self.handle.sid
    }

    /// Waits until the stream's send buffer and the session's send budget
    /// have room and returns how many bytes a write would take now (only
    /// this half writes, so a write of at most that many completes at
    /// once). A forwarder reads at most that much from its source, so a
    /// stream whose peer does not read stops reading its source without
    /// holding a copy buffer.
    ///
    /// # Errors
    ///
    /// As a write: the stream is write-closed, or the session ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it reserves nothing.
    pub async fn writable(&self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.handle.poll_writable(cx)).await
    }

    /// [`writable`](Self::writable) as a poll method; keeps the waker of the
    /// last call (the one writes and flushes use).
    ///
    /// # Errors
    ///
    /// As [`writable`](Self::writable).
    pub fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.handle.poll_writable(cx)
    }
}

impl std::fmt::Debug for OwnedReadHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedReadHalf")
            .field("id", &self.handle.sid)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for OwnedWriteHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedWriteHalf")
            .field("id", &self.handle.sid)
            .finish_non_exhaustive()
    }
}

/// `AsyncRead` for a type whose `handle` field derefs to a [`Handle`].
macro_rules! delegate_read {
    ($t:ty) => {
        impl AsyncRead for $t {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                self.handle.poll_read(cx, buf)
            }
        }
    };
}

/// `AsyncWrite` for a type whose `handle` field derefs to a [`Handle`];
/// `poll_shutdown` is the half-close (a FIN after the queued data, complete
/// once it is handed to the transport; reads continue until the peer's FIN).
macro_rules! delegate_write {
    ($t:ty) => {
        impl AsyncWrite for $t {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.handle.poll_write(cx, buf)
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.handle.poll_flush(cx)
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.handle.poll_shutdown(cx)
            }
        }
    };
}

delegate_read!(MuxStream);
delegate_write!(MuxStream);
delegate_read!(OwnedReadHalf);
delegate_write!(OwnedWriteHalf);
