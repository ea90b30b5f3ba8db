//! The tokio surface: [`Mux`] drives a [`Session`] over any byte stream on one
//! task and hands out [`MuxStream`]s.
//!
//! This is the only part of `mux` that reads the clock and spawns a task.

mod snappy;
mod stream;

pub use snappy::Snappy;
pub use stream::{MuxStream, OwnedReadHalf, OwnedWriteHalf};

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use super::{Error, Event, MuxConfig, MuxStats, OpenError, Role, Session, StreamError, StreamId};

/// Bytes read from the transport per call.
const READ_BUF: usize = 64 * 1024;
/// Bytes of frames written to the transport per call: two maximum frames.
const WRITE_BUF: usize = 2 * (65_535 + 8) + 16;
/// Driver iterations per wake-up before it yields to other tasks.
const DRIVER_ROUNDS: usize = 32;

/// A multiplexed session over one byte stream: smux v1 or v2, wire-compatible
/// with Go's `xtaci/smux` (v1.5.16 to v1.5.58) and so with kcptun.
///
/// One end is the [`client`](Mux::client) (its streams get odd ids), the
/// other the [`server`](Mux::server) (even ids); either end may open and
/// accept streams. Each [`MuxStream`] is an independent `AsyncRead +
/// AsyncWrite` with its own end of stream; a keepalive notices a dead peer.
///
/// # Tasks and memory
///
/// The constructor spawns one task that owns the transport (so it must be
/// called inside a tokio runtime); streams are plain handles, no task each.
/// The session lives while the `Mux` or any of its streams does; when all
/// are gone the task sends what is queued (including the streams' FINs),
/// shuts the transport down and ends. Memory is bounded as described on
/// [`Session`] and [`MuxConfig`]: the receive budget, the accept backlog,
/// the stream limit and open rate, and the send buffers (per stream and per
/// session). [`buffered`](Mux::buffered) and
/// [`send_buffered`](Mux::send_buffered) say what is held now.
///
/// # Backpressure
///
/// A stream whose reader stops holds its data in the session's receive
/// budget. In v2 the peer also stops after the stream's window, so only that
/// stream stalls; in v1 (no window) the session stops reading the transport
/// once the budget is spent, which stalls every stream until the reader
/// resumes (as in Go smux). Writers wait when their stream's send buffer,
/// the session's send budget, or (in v2) the peer's window is full, so a
/// peer that does not read stops a forwarder from reading its source.
pub struct Mux {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    accept: Notify,
}

pub(crate) struct State {
    pub(crate) session: Session,
    wakers: HashMap<StreamId, Wakers>,
    driver: Option<Waker>,
    /// The transport's error, once it failed (the session is closed then).
    io_error: Option<(io::ErrorKind, String)>,
    /// `Mux` plus stream handles alive.
    handles: usize,
}

#[derive(Default)]
struct Wakers {
    read: Option<Waker>,
    write: Option<Waker>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl State {
    pub(crate) fn wake_driver(&self) {
        if let Some(w) = &self.driver {
            w.wake_by_ref();
        }
    }

    fn session_error(&self, e: Error) -> io::Error {
        match (e, &self.io_error) {
            (Error::Closed, Some((kind, msg))) => io::Error::new(*kind, msg.clone()),
            (Error::Closed, None) => io::Error::new(io::ErrorKind::NotConnected, e),
            (Error::KeepaliveTimeout, _) => io::Error::new(io::ErrorKind::TimedOut, e),
            (Error::Protocol(_), _) => io::Error::new(io::ErrorKind::InvalidData, e),
        }
    }

    pub(crate) fn stream_error(&self, e: StreamError) -> io::Error {
        match e {
            StreamError::Session(e) => self.session_error(e),
            StreamError::Unknown => io::Error::new(io::ErrorKind::NotConnected, e),
            StreamError::WriteClosed => io::Error::new(io::ErrorKind::BrokenPipe, e),
            StreamError::PeerConsumedTooMuch => io::Error::new(io::ErrorKind::InvalidData, e),
        }
    }

    pub(crate) fn set_read_waker(&mut self, sid: StreamId, w: &Waker) {
        let slot = &mut self.wakers.entry(sid).or_default().read;
        if !slot.as_ref().is_some_and(|old| old.will_wake(w)) {
            *slot = Some(w.clone());
        }
    }

    pub(crate) fn set_write_waker(&mut self, sid: StreamId, w: &Waker) {
        let slot = &mut self.wakers.entry(sid).or_default().write;
        if !slot.as_ref().is_some_and(|old| old.will_wake(w)) {
            *slot = Some(w.clone());
        }
    }

    /// A stream handle went away for good.
    pub(crate) fn release_stream(&mut self, sid: StreamId) {
        self.session.close_stream(sid);
        self.wakers.remove(&sid);
        self.handles -= 1;
        self.wake_driver();
    }

    fn new_stream(&mut self, sid: StreamId) {
        self.wakers.insert(sid, Wakers::default());
        self.handles += 1;
    }
}

impl Mux {
    /// Starts the client end of a session over `io` (streams 3, 5, 7, …, as
    /// Go smux's `Client`).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (it spawns the session's task).
    pub fn client<T>(io: T, config: &MuxConfig) -> Self
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        Self::start(io, config, Role::Client)
    }

    /// Starts the server end of a session over `io` (streams 2, 4, 6, …, as
    /// Go smux's `Server`).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (it spawns the session's task).
    pub fn server<T>(io: T, config: &MuxConfig) -> Self
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        Self::start(io, config, Role::Server)
    }

    fn start<T>(io: T, config: &MuxConfig, role: Role) -> Self
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let epoch = Instant::now();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                session: Session::new(role, config, Duration::ZERO),
                wakers: HashMap::new(),
                driver: None,
                io_error: None,
                handles: 1,
            }),
            accept: Notify::new(),
        });
        let driver = Driver {
            io,
            shared: Arc::clone(&shared),
            epoch,
            sleep: Box::pin(tokio::time::sleep_until(epoch)),
            sleep_at: None,
            rbuf: vec![0; READ_BUF].into_boxed_slice(),
            rpos: 0,
            rlen: 0,
            wbuf: vec![0; WRITE_BUF].into_boxed_slice(),
            wpos: 0,
            wlen: 0,
            flush_pending: false,
            wake: Vec::new(),
        };
        tokio::spawn(driver);
        Self { shared }
    }

    /// Opens a stream: its SYN is queued at once, and data written to it
    /// follows the SYN.
    ///
    /// # Errors
    ///
    /// The session's error if it has ended (see
    /// [`accept_stream`](Mux::accept_stream)); `ErrorKind::Other` wrapping
    /// an [`OpenError`] if `max_open_streams` are open or the stream ids are
    /// used up.
    ///
    /// # Cancel safety
    ///
    /// Completes without waiting; cancel safe.
    pub async fn open_stream(&self) -> io::Result<MuxStream> {
        let mut st = self.shared.lock();
        match st.session.open_stream() {
            Ok(sid) => {
                st.new_stream(sid);
                st.wake_driver();
                Ok(MuxStream::new(Arc::clone(&self.shared), sid))
            }
            Err(OpenError::Session(e)) => Err(st.session_error(e)),
            Err(e) => Err(io::Error::other(e)),
        }
    }

    /// Waits for the peer to open a stream.
    ///
    /// # Errors
    ///
    /// When the session ends: `InvalidData` for a protocol error (the
    /// message names what arrived), `TimedOut` for a keepalive timeout,
    /// the transport's error, or `NotConnected` after [`close`](Mux::close).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a stream is taken from the backlog only when this
    /// returns it.
    pub async fn accept_stream(&self) -> io::Result<MuxStream> {
        loop {
            let notified = self.shared.accept.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.shared.lock();
                let was_paused = !st.session.wants_input();
                if let Some(sid) = st.session.accept_stream() {
                    st.new_stream(sid);
                    if was_paused {
                        st.wake_driver();
                    }
                    return Ok(MuxStream::new(Arc::clone(&self.shared), sid));
                }
                if let Some(e) = st.session.error() {
                    return Err(st.session_error(e));
                }
            }
            notified.await;
        }
    }

    /// Ends the session now: streams fail, nothing more is sent (smux has no
    /// goodbye; the peer notices through its keepalive), and the transport
    /// is shut down.
    pub fn close(&self) {
        let mut st = self.shared.lock();
        st.session.close();
        st.wake_driver();
    }

    /// Whether the session has ended (closed, failed, or timed out).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.shared.lock().session.error().is_some()
    }

    /// Streams open in this session.
    #[must_use]
    pub fn stream_count(&self) -> usize {
        self.shared.lock().session.stream_count()
    }

    /// The session's counters.
    #[must_use]
    pub fn stats(&self) -> MuxStats {
        self.shared.lock().session.stats()
    }

    /// Payload received and not yet read, all streams together (at most the
    /// receive buffer plus one frame).
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.shared.lock().session.buffered()
    }

    /// Bytes written to streams and not yet handed to the transport, all
    /// streams together (at most the session send buffer).
    #[must_use]
    pub fn send_buffered(&self) -> usize {
        self.shared.lock().session.send_buffered()
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        // Nobody can accept any more: refuse new streams, close queued ones.
        st.session.refuse_incoming();
        while let Some(sid) = st.session.accept_stream() {
            st.session.close_stream(sid);
        }
        st.handles -= 1;
        st.wake_driver();
    }
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Mux")
            .field("streams", &st.session.stream_count())
            .field("error", &st.session.error())
            .finish_non_exhaustive()
    }
}

/// The session's task: moves bytes between the transport and the
/// [`Session`], runs its timers and wakes the stream handles.
struct Driver<T> {
    io: T,
    shared: Arc<Shared>,
    epoch: Instant,
    sleep: Pin<Box<Sleep>>,
    sleep_at: Option<Duration>,
    rbuf: Box<[u8]>,
    rpos: usize,
    rlen: usize,
    wbuf: Box<[u8]>,
    wpos: usize,
    wlen: usize,
    flush_pending: bool,
    wake: Vec<Waker>,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Driver<T> {
    /// The transport failed: end the session with its error.
    fn fail(&mut self, e: &io::Error) {
        let shared = Arc::clone(&self.shared);
        let mut st = shared.lock();
        if st.session.error().is_none() {
            st.io_error = Some((e.kind(), format!("smux transport: {e}")));
            st.session.close();
        }
        self.collect_wakers(&mut st);
        drop(st);
        self.wake_all();
    }

    fn collect_wakers(&mut self, st: &mut State) {
        while let Some(ev) = st.session.poll_event() {
            match ev {
                Event::Stream(sid) => {
                    if let Some(w) = st.wakers.get_mut(&sid) {
                        self.wake.extend(w.read.take());
                        self.wake.extend(w.write.take());
                    }
                }
                Event::Incoming => self.shared.accept.notify_waiters(),
                Event::Closed => {
                    self.shared.accept.notify_waiters();
                    for w in st.wakers.values_mut() {
                        self.wake.extend(w.read.take());
                        self.wake.extend(w.write.take());
                    }
                }
            }
        }
    }

    fn wake_all(&mut self) {
        for w in self.wake.drain(..) {
            w.wake();
        }
    }

    /// One round; `Ok(true)` if anything moved, `Err(())` when the task is
    /// done.
    fn round(&mut self, cx: &mut Context<'_>) -> Result<bool, ()> {
        let mut progress = false;
        while self.wpos < self.wlen {
            match Pin::new(&mut self.io).poll_write(cx, &self.wbuf[self.wpos..self.wlen]) {
                Poll::Ready(Ok(0)) => {
                    self.fail(&io::ErrorKind::WriteZero.into());
                    return Err(());
                }
                Poll::Ready(Ok(n)) => {
                    self.wpos += n;
                    progress = true;
                }
                Poll::Ready(Err(e)) => {
                    self.fail(&e);
                    return Err(());
                }
                Poll::Pending => break,
            }
        }
        if self.wpos == self.wlen && self.flush_pending {
            match Pin::new(&mut self.io).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.flush_pending = false,
                Poll::Ready(Err(e)) => {
                    self.fail(&e);
                    return Err(());
                }
                Poll::Pending => {}
            }
        }

        let now = self.epoch.elapsed();
        let shared = Arc::clone(&self.shared);
        let mut st = shared.lock();
        if !st.driver.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            st.driver = Some(cx.waker().clone());
        }
        st.session.set_time(now);
        if self.rpos < self.rlen
            && let Ok(n) = st.session.handle_input(&self.rbuf[self.rpos..self.rlen])
        {
            self.rpos += n;
            progress |= n > 0;
        }
        st.session.handle_timeout(now);
        if self.wpos == self.wlen {
            self.wpos = 0;
            self.wlen = st.session.poll_transmit(&mut self.wbuf);
            if self.wlen > 0 {
                progress = true;
                self.flush_pending = true;
            }
        }
        self.collect_wakers(&mut st);
        let ended = st.session.error().is_some();
        let idle = st.handles == 0 && !st.session.has_transmit() && self.wpos == self.wlen;
        let want_read = !ended && self.rpos == self.rlen && st.session.wants_input();
        let deadline = st.session.poll_timeout();
        drop(st);
        self.wake_all();

        if ended || idle {
            return Err(());
        }
        if want_read {
            let mut rb = ReadBuf::new(&mut self.rbuf);
            match Pin::new(&mut self.io).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    if n == 0 {
                        let e = io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the peer closed the underlying stream",
                        );
                        self.fail(&e);
                        return Err(());
                    }
                    self.rpos = 0;
                    self.rlen = n;
                    progress = true;
                }
                Poll::Ready(Err(e)) => {
                    self.fail(&e);
                    return Err(());
                }
                Poll::Pending => {}
            }
        }
        if let Some(d) = deadline {
            if self.sleep_at != Some(d) {
                self.sleep.as_mut().reset(self.epoch + d);
                self.sleep_at = Some(d);
            }
            if self.sleep.as_mut().poll(cx).is_ready() {
                self.sleep_at = None;
                progress = true;
            }
        }
        Ok(progress)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Future for Driver<T> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        for _ in 0..DRIVER_ROUNDS {
            match this.round(cx) {
                Ok(true) => {}
                Ok(false) => return Poll::Pending,
                Err(()) => {
                    // Flush what is written, then shut the transport down
                    // (errors no longer matter: nobody is left to see them).
                    return match Pin::new(&mut this.io).poll_shutdown(cx) {
                        Poll::Pending => Poll::Pending,
                        Poll::Ready(_) => Poll::Ready(()),
                    };
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
