//! [`Session`]: one smux session, sans-IO.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

use super::config::{MuxConfig, Version};
use super::frame::{Cmd, HEADER_LEN, Header, INITIAL_PEER_WINDOW, ProtocolError, UPD_LEN, Upd};

/// A stream id (odd for streams the client opens, even for the server's).
pub type StreamId = u32;

/// The default of [`stream_send_buffer`](super::MuxConfigBuilder::stream_send_buffer):
/// bytes an application may queue on one stream before writes return 0,
/// two maximum-size frames.
pub const STREAM_SEND_BUFFER: usize = 2 * 65_536;

/// FINs answering refused SYNs that may wait for `poll_transmit`; further
/// refusals are counted and not answered.
pub const REFUSED_QUEUE: usize = 1024;

/// A drained receive buffer with more capacity than this is freed, so an
/// idle stream holds little memory.
const SHRINK_ABOVE: usize = 64 * 1024;
/// A drained send buffer with more capacity than this is freed. Lower than
/// for receiving: a writer whose reads are paused (a budget, a slow peer)
/// leaves its stream's send buffer drained, and thousands of those each
/// keeping up to 64 KiB took a quarter of a gigabyte. A stream whose source
/// outpaces the session keeps a non-empty buffer and allocates nothing.
const SEND_KEEP: usize = 4 * 1024;

/// Which end of the session this is: it decides the stream ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Opens streams 3, 5, 7, … (Go smux's `Client`).
    Client,
    /// Opens streams 2, 4, 6, … (Go smux's `Server`).
    Server,
}

/// Why a session ended. After any of these the session sends nothing more
/// (smux has no goodbye frame; the peer sees silence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The peer sent a frame smux cannot accept.
    Protocol(ProtocolError),
    /// No frame arrived during a whole keepalive timeout period.
    KeepaliveTimeout,
    /// The session was closed locally.
    Closed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Protocol(e) => e.fmt(f),
            Self::KeepaliveTimeout => {
                f.write_str("smux keepalive timeout: nothing received from the peer")
            }
            Self::Closed => f.write_str("smux session closed"),
        }
    }
}

impl std::error::Error for Error {}

/// Why a stream operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamError {
    /// The session ended.
    Session(Error),
    /// No such stream (never opened here, or already closed).
    Unknown,
    /// Write after `shutdown_write` or `close`.
    WriteClosed,
    /// v2: the peer acknowledged more bytes than were sent (Go smux's
    /// `ErrConsumed`).
    PeerConsumedTooMuch,
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Session(e) => e.fmt(f),
            Self::Unknown => f.write_str("no such smux stream"),
            Self::WriteClosed => f.write_str("smux stream closed for writing"),
            Self::PeerConsumedTooMuch => {
                f.write_str("smux peer acknowledged more bytes than were sent")
            }
        }
    }
}

impl std::error::Error for StreamError {}

/// Why [`Session::open_stream`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The session ended.
    Session(Error),
    /// [`max_open_streams`](super::MuxConfigBuilder::max_open_streams) are open.
    TooManyStreams,
    /// The stream ids are used up (Go smux's `ErrGoAway`); open a new session.
    IdsExhausted,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Session(e) => e.fmt(f),
            Self::TooManyStreams => f.write_str("smux session has its maximum of open streams"),
            Self::IdsExhausted => f.write_str("smux stream ids exhausted; open a new session"),
        }
    }
}

impl std::error::Error for OpenError {}

/// Something the application side may want to wake up for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The stream became readable or writable, reached end of stream, or
    /// its FIN went out.
    Stream(StreamId),
    /// A stream is waiting in [`Session::accept_stream`].
    Incoming,
    /// The session ended; see [`Session::error`].
    Closed,
}

/// Counters of one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MuxStats {
    /// Frames parsed from the peer.
    pub frames_in: u64,
    /// Frames emitted by `poll_transmit`.
    pub frames_out: u64,
    /// PSH frames for a stream that is unknown, closed, or past its FIN:
    /// their payload is dropped.
    pub dropped_frames: u64,
    /// Payload bytes of those frames.
    pub dropped_bytes: u64,
    /// SYNs refused (answered with a FIN), for any of the reasons below or
    /// because nobody accepts any more.
    pub refused_streams: u64,
    /// ... of them because `max_open_streams` were open.
    pub refused_limit: u64,
    /// ... of them because the accept backlog was full.
    pub refused_backlog: u64,
    /// ... of them because the peer opened more than
    /// `stream_opens_per_second`.
    pub refused_rate: u64,
    /// Refused SYNs left unanswered because [`REFUSED_QUEUE`] FINs were
    /// already waiting (the stream stays unknown here; its data is dropped).
    pub unanswered_refusals: u64,
    /// Writes that found the session's send budget spent (they wait).
    pub send_budget_waits: u64,
    /// SYNs for a stream id already open (ignored, as Go smux does).
    pub duplicate_syns: u64,
    /// UPD frames in a v1 session (skipped, as v1.5.16 tolerates them).
    pub ignored_upds: u64,
}

#[derive(Debug)]
struct Stream {
    /// Payload received, not yet read.
    recv: VecDeque<u8>,
    /// Payload written, not yet emitted.
    send: VecDeque<u8>,
    syn_pending: bool,
    upd_pending: bool,
    in_ctl: bool,
    in_ready: bool,
    in_events: bool,
    /// A write found the session's send budget spent: wake it when it frees.
    budget_wait: bool,
    /// FIN queued behind `send`.
    write_closed: bool,
    fin_sent: bool,
    peer_fin: bool,
    /// The application closed the stream: received data is discarded and
    /// the entry goes once its FIN is out.
    closed: bool,
    consumed_error: bool,
    // v2 flow control, as Go smux counts it (all wrapping u32).
    num_read: u32,
    incr: u32,
    num_written: u32,
    peer_consumed: u32,
    peer_window: u32,
}

impl Stream {
    fn new(syn_pending: bool) -> Self {
        Self {
            recv: VecDeque::new(),
            send: VecDeque::new(),
            syn_pending,
            upd_pending: false,
            in_ctl: false,
            in_ready: false,
            in_events: false,
            budget_wait: false,
            write_closed: false,
            fin_sent: false,
            peer_fin: false,
            closed: false,
            consumed_error: false,
            num_read: 0,
            incr: 0,
            num_written: 0,
            peer_consumed: 0,
            peer_window: INITIAL_PEER_WINDOW,
        }
    }

    /// v2: bytes the peer's window still admits (`peerWindow - inflight`);
    /// `None` if the peer acknowledged more than was sent.
    fn window(&self, version: Version) -> Option<usize> {
        if version == Version::V1 {
            return Some(usize::MAX);
        }
        let inflight = self.num_written.wrapping_sub(self.peer_consumed) as i32;
        if inflight < 0 {
            return None;
        }
        let win = (self.peer_window as i32).wrapping_sub(inflight);
        Some(usize::try_from(win).unwrap_or(0))
    }

    fn has_output(&self, version: Version) -> bool {
        let fin = self.write_closed && !self.fin_sent && self.send.is_empty();
        fin || (!self.send.is_empty() && self.window(version).is_none_or(|w| w > 0))
    }
}

/// Where the input decoder is in the byte stream.
#[derive(Clone, Copy, Debug)]
enum Rx {
    /// Collecting a header; `have == 8` means one is complete but waits
    /// (a SYN while the accept backlog is full).
    Header { buf: [u8; HEADER_LEN], have: usize },
    /// Inside a PSH payload: `remaining` bytes go to `sid`, or are dropped.
    Payload {
        sid: StreamId,
        remaining: usize,
        deliver: bool,
    },
    /// Inside a UPD body.
    Upd {
        sid: StreamId,
        buf: [u8; UPD_LEN],
        have: usize,
    },
}

/// The first tick of a ticker with `period`, due at `due`, after `now`.
fn next_tick(due: Duration, period: Duration, now: Duration) -> Duration {
    let missed = (now - due).as_nanos() / period.as_nanos().max(1);
    let missed = u32::try_from(missed).unwrap_or(u32::MAX - 1);
    due.saturating_add(period.saturating_mul(missed + 1))
}

/// Writes a header and body at `buf[*n..]` if they fit.
fn put(buf: &mut [u8], n: &mut usize, h: Header, body: &[u8]) -> bool {
    let total = HEADER_LEN + body.len();
    let Some(out) = buf.get_mut(*n..*n + total) else {
        return false;
    };
    h.emit(out);
    out[HEADER_LEN..].copy_from_slice(body);
    *n += total;
    true
}

/// One smux session, sans-IO: bytes of the underlying stream in, bytes out,
/// `now` passed in.
///
/// # Call contract
///
/// - **Input**: feed what the transport delivers to
///   [`handle_input`](Self::handle_input). It returns how much it consumed;
///   keep the rest and offer it again. It consumes nothing while
///   [`wants_input`](Self::wants_input) is false (the receive budget is spent
///   or the accept backlog is full): stop reading the transport then, which
///   pushes back on the peer. Frames may straddle calls.
/// - **Output**: call [`poll_transmit`](Self::poll_transmit) with a buffer
///   (at least [`HEADER_LEN`] + 1 bytes; 64 KiB or more is efficient) and
///   write what it fills, in order, to the transport, whenever
///   [`has_transmit`](Self::has_transmit) or after any other call.
/// - **Time**: call [`handle_timeout`](Self::handle_timeout) with the time
///   since any fixed origin (the same one given to [`new`](Self::new)) when
///   [`poll_timeout`](Self::poll_timeout) is reached.
/// - **Streams**: [`open_stream`](Self::open_stream),
///   [`accept_stream`](Self::accept_stream), then [`read`](Self::read),
///   [`write`](Self::write), [`shutdown_write`](Self::shutdown_write),
///   [`close`](Self::close) by id. [`poll_event`](Self::poll_event) says
///   which streams changed, for waking their tasks.
///
/// # Memory bounds
///
/// What the peer can make this session hold: received payload up to the
/// receive budget plus one frame (65,535 bytes); at most
/// `max_open_streams` stream entries (a few hundred bytes each when idle)
/// plus `accept_backlog` of them unaccepted, opened at most
/// `stream_opens_per_second` a second; [`REFUSED_QUEUE`] pending
/// refusals. What the application can queue: `stream_send_buffer` bytes per
/// stream and `session_send_buffer` for all together (the writes beyond
/// wait: backpressure, never a drop). Everything else is a flag per stream.
#[derive(Debug)]
pub struct Session {
    version: Version,
    config: MuxConfig,
    next_id: u32,
    ids_exhausted: bool,
    streams: HashMap<StreamId, Stream>,
    accept: VecDeque<StreamId>,
    accepting: bool,
    /// Receive tokens left (Go's `bucket`); may go below zero by one frame.
    bucket: i64,
    rx: Rx,
    ctl: VecDeque<StreamId>,
    ready: VecDeque<StreamId>,
    refused: VecDeque<StreamId>,
    events: VecDeque<StreamId>,
    /// Streams whose writes wait for the session send budget.
    budget_waiters: VecDeque<StreamId>,
    /// Bytes queued for sending, all streams together.
    send_total: usize,
    /// Stream-open tokens left, and when they were last refilled.
    open_tokens: u32,
    open_refill: Duration,
    now: Duration,
    incoming_event: bool,
    closed_event: bool,
    nop_pending: bool,
    next_ping: Option<Duration>,
    next_check: Option<Duration>,
    active: bool,
    error: Option<Error>,
    stats: MuxStats,
}

impl Session {
    /// A session for `role`, started at `now`.
    #[must_use]
    pub fn new(role: Role, config: &MuxConfig, now: Duration) -> Self {
        let (next_ping, next_check) = match config.keepalive {
            Some((interval, timeout)) => (Some(now + interval), Some(now + timeout)),
            None => (None, None),
        };
        Self {
            version: config.version,
            config: config.clone(),
            next_id: match role {
                Role::Client => 1,
                Role::Server => 0,
            },
            ids_exhausted: false,
            streams: HashMap::new(),
            accept: VecDeque::new(),
            accepting: true,
            bucket: config.receive_buffer as i64,
            rx: Rx::Header {
                buf: [0; HEADER_LEN],
                have: 0,
            },
            ctl: VecDeque::new(),
            ready: VecDeque::new(),
            refused: VecDeque::new(),
            events: VecDeque::new(),
            budget_waiters: VecDeque::new(),
            send_total: 0,
            open_tokens: config.stream_opens_per_second,
            open_refill: now,
            now,
            incoming_event: false,
            closed_event: false,
            nop_pending: false,
            next_ping,
            next_check,
            active: false,
            error: None,
            stats: MuxStats::default(),
        }
    }

    // ---- getters ---------------------------------------------------------

    /// Why the session ended, if it has.
    #[must_use]
    pub const fn error(&self) -> Option<Error> {
        self.error
    }

    /// The session's counters.
    #[must_use]
    pub const fn stats(&self) -> MuxStats {
        self.stats
    }

    /// Streams with an entry (open, unaccepted, or closed with a FIN still
    /// to send).
    #[must_use]
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Incoming streams not yet accepted.
    #[must_use]
    pub fn backlog_len(&self) -> usize {
        self.accept.len()
    }

    /// Payload bytes received and not yet read, all streams together.
    #[must_use]
    pub fn buffered(&self) -> usize {
        (self.config.receive_buffer as i64 - self.bucket).max(0) as usize
    }

    /// Whether [`handle_input`](Self::handle_input) would consume anything.
    #[must_use]
    pub fn wants_input(&self) -> bool {
        if self.error.is_some() {
            return false;
        }
        match self.rx {
            Rx::Header { have: 0, .. } => self.bucket > 0,
            _ => true,
        }
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) has frames to emit.
    #[must_use]
    pub fn has_transmit(&self) -> bool {
        self.error.is_none()
            && (self.nop_pending
                || !self.refused.is_empty()
                || !self.ctl.is_empty()
                || !self.ready.is_empty())
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due, `None`
    /// without keepalive or after the session ended.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        if self.error.is_some() {
            return None;
        }
        match (self.next_ping, self.next_check) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Bytes queued for sending and not yet emitted, all streams together
    /// (at most the session send buffer).
    #[must_use]
    pub const fn send_buffered(&self) -> usize {
        self.send_total
    }

    /// Bytes queued on a stream and not yet emitted (0 for an unknown one).
    #[must_use]
    pub fn send_queued(&self, sid: StreamId) -> usize {
        self.streams.get(&sid).map_or(0, |s| s.send.len())
    }

    // ---- session-level mutators -----------------------------------------

    /// Ends the session locally: nothing more is sent or accepted.
    pub fn close(&mut self) {
        self.fail(Error::Closed);
    }

    /// Stop queueing incoming streams: further SYNs are answered with a FIN
    /// (the application will never accept them).
    pub fn refuse_incoming(&mut self) {
        self.accepting = false;
    }

    fn fail(&mut self, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
            self.closed_event = true;
        }
    }

    /// The next thing that changed, for waking the tasks waiting on it.
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.closed_event {
            self.closed_event = false;
            return Some(Event::Closed);
        }
        if self.incoming_event {
            self.incoming_event = false;
            return Some(Event::Incoming);
        }
        while let Some(sid) = self.events.pop_front() {
            if let Some(s) = self.streams.get_mut(&sid) {
                s.in_events = false;
                return Some(Event::Stream(sid));
            }
        }
        None
    }

    fn event(events: &mut VecDeque<StreamId>, sid: StreamId, s: &mut Stream) {
        if !s.in_events {
            s.in_events = true;
            events.push_back(sid);
        }
    }

    fn queue_ready(ready: &mut VecDeque<StreamId>, sid: StreamId, s: &mut Stream, v: Version) {
        if !s.in_ready && s.has_output(v) {
            s.in_ready = true;
            ready.push_back(sid);
        }
    }

    fn queue_ctl(ctl: &mut VecDeque<StreamId>, sid: StreamId, s: &mut Stream) {
        if !s.in_ctl {
            s.in_ctl = true;
            ctl.push_back(sid);
        }
    }

    // ---- time ------------------------------------------------------------

    /// Runs the keepalive: queues a NOP every interval, and ends the session
    /// with [`Error::KeepaliveTimeout`] when a timeout check finds nothing
    /// received since the previous check (unless input is paused by this
    /// side's own backpressure, as in Go smux).
    pub fn handle_timeout(&mut self, now: Duration) {
        self.set_time(now);
        if self.error.is_some() {
            return;
        }
        let Some((interval, timeout)) = self.config.keepalive else {
            return;
        };
        if let Some(t) = self.next_ping.filter(|t| now >= *t) {
            self.nop_pending = true;
            // Like a Go ticker: skip missed ticks rather than bursting.
            self.next_ping = Some(next_tick(t, interval, now));
        }
        if let Some(t) = self.next_check.filter(|t| now >= *t) {
            let self_paused = !self.wants_input();
            if !self.active && !self_paused {
                self.fail(Error::KeepaliveTimeout);
                return;
            }
            self.active = false;
            self.next_check = Some(next_tick(t, timeout, now));
        }
    }

    /// Tells the session the time (since the origin given to
    /// [`new`](Self::new)) without running its timers: the stream-open rate
    /// limit refills from it. Call it before [`handle_input`](Self::handle_input)
    /// when time may have passed; [`handle_timeout`](Self::handle_timeout)
    /// does it too. Time going backwards is ignored.
    pub fn set_time(&mut self, now: Duration) {
        if now <= self.now {
            return;
        }
        self.now = now;
        let rate = u128::from(self.config.stream_opens_per_second);
        let burst = self.config.stream_opens_per_second;
        if self.open_tokens >= burst {
            self.open_refill = now;
            return;
        }
        let elapsed = now.saturating_sub(self.open_refill).as_nanos();
        let add = elapsed * rate / 1_000_000_000;
        if add == 0 {
            return;
        }
        let add = u32::try_from(add).unwrap_or(u32::MAX);
        self.open_tokens = self.open_tokens.saturating_add(add).min(burst);
        if self.open_tokens >= burst {
            self.open_refill = now;
        } else {
            // Keep the fraction of a token already earned.
            let used = u128::from(add) * 1_000_000_000 / rate;
            let used = u64::try_from(used).unwrap_or(u64::MAX);
            self.open_refill += Duration::from_nanos(used);
        }
    }

    // ---- input -----------------------------------------------------------

    /// Parses bytes of the underlying stream and returns how many were
    /// consumed (fewer than offered when input pauses; see
    /// [`wants_input`](Self::wants_input)).
    ///
    /// # Errors
    ///
    /// The fatal [`Error`] that ended the session, now or before: a
    /// [`ProtocolError`] for a version mismatch, an unknown command or an
    /// impossible length.
    pub fn handle_input(&mut self, input: &[u8]) -> Result<usize, Error> {
        let mut pos = 0;
        loop {
            if let Some(e) = self.error {
                return Err(e);
            }
            match self.rx {
                Rx::Header { mut buf, have } => {
                    if have < HEADER_LEN {
                        if (have == 0 && self.bucket <= 0) || pos == input.len() {
                            return Ok(pos);
                        }
                        let take = (HEADER_LEN - have).min(input.len() - pos);
                        buf[have..have + take].copy_from_slice(&input[pos..pos + take]);
                        pos += take;
                        self.rx = Rx::Header {
                            buf,
                            have: have + take,
                        };
                        if have + take < HEADER_LEN {
                            return Ok(pos);
                        }
                        self.active = true;
                        self.stats.frames_in += 1;
                    }
                    self.dispatch(Header::from_bytes(&buf));
                }
                Rx::Payload {
                    sid,
                    remaining,
                    deliver,
                } => {
                    if pos == input.len() {
                        return Ok(pos);
                    }
                    let take = remaining.min(input.len() - pos);
                    let chunk = &input[pos..pos + take];
                    pos += take;
                    let stream = if deliver {
                        self.streams.get_mut(&sid)
                    } else {
                        None
                    };
                    if let Some(s) = stream {
                        s.recv.extend(chunk);
                        self.bucket -= take as i64;
                        Self::event(&mut self.events, sid, s);
                    } else {
                        self.stats.dropped_bytes += take as u64;
                    }
                    self.rx = if take == remaining {
                        Self::header_state()
                    } else {
                        Rx::Payload {
                            sid,
                            remaining: remaining - take,
                            deliver,
                        }
                    };
                }
                Rx::Upd { sid, mut buf, have } => {
                    if pos == input.len() {
                        return Ok(pos);
                    }
                    let take = (UPD_LEN - have).min(input.len() - pos);
                    buf[have..have + take].copy_from_slice(&input[pos..pos + take]);
                    pos += take;
                    if have + take < UPD_LEN {
                        self.rx = Rx::Upd {
                            sid,
                            buf,
                            have: have + take,
                        };
                        continue;
                    }
                    self.rx = Self::header_state();
                    self.handle_upd(sid, Upd::from_bytes(&buf));
                }
            }
        }
    }

    const fn header_state() -> Rx {
        Rx::Header {
            buf: [0; HEADER_LEN],
            have: 0,
        }
    }

    /// Acts on a complete header.
    fn dispatch(&mut self, h: Header) {
        let cmd = match h.validate(self.version.as_u8()) {
            Ok(cmd) => cmd,
            Err(e) => {
                self.fail(Error::Protocol(e));
                return;
            }
        };
        let sid = h.sid;
        match cmd {
            Cmd::Nop => {}
            Cmd::Syn => {
                if self.streams.contains_key(&sid) {
                    self.stats.duplicate_syns += 1;
                } else if !self.accepting {
                    self.refuse(sid);
                } else if self.streams.len() >= self.config.max_open_streams {
                    self.stats.refused_limit += 1;
                    self.refuse(sid);
                } else if self.accept.len() >= self.config.accept_backlog {
                    self.stats.refused_backlog += 1;
                    self.refuse(sid);
                } else if self.open_tokens == 0 {
                    self.stats.refused_rate += 1;
                    self.refuse(sid);
                } else {
                    self.open_tokens -= 1;
                    self.streams.insert(sid, Stream::new(false));
                    self.accept.push_back(sid);
                    self.incoming_event = true;
                }
            }
            Cmd::Fin => {
                if let Some(s) = self.streams.get_mut(&sid) {
                    s.peer_fin = true;
                    Self::event(&mut self.events, sid, s);
                }
            }
            Cmd::Psh => {
                let len = h.len as usize;
                if len > 0 {
                    let deliver = self
                        .streams
                        .get(&sid)
                        .is_some_and(|s| !s.peer_fin && !s.closed);
                    if !deliver {
                        self.stats.dropped_frames += 1;
                    }
                    self.rx = Rx::Payload {
                        sid,
                        remaining: len,
                        deliver,
                    };
                    return;
                }
            }
            Cmd::Upd => {
                self.rx = Rx::Upd {
                    sid,
                    buf: [0; UPD_LEN],
                    have: 0,
                };
                return;
            }
        }
        self.rx = Self::header_state();
    }

    /// Answers a SYN with a FIN (if fewer than [`REFUSED_QUEUE`] wait).
    fn refuse(&mut self, sid: StreamId) {
        self.stats.refused_streams += 1;
        if self.refused.len() < REFUSED_QUEUE {
            if !self.refused.contains(&sid) {
                self.refused.push_back(sid);
            }
        } else {
            self.stats.unanswered_refusals += 1;
        }
    }

    fn handle_upd(&mut self, sid: StreamId, upd: Upd) {
        if self.version == Version::V1 {
            self.stats.ignored_upds += 1;
            return;
        }
        if let Some(s) = self.streams.get_mut(&sid) {
            s.peer_consumed = upd.consumed;
            s.peer_window = upd.window;
            if s.window(self.version).is_none() {
                s.consumed_error = true;
            }
            Self::queue_ready(&mut self.ready, sid, s, self.version);
            Self::event(&mut self.events, sid, s);
        }
    }

    // ---- streams ---------------------------------------------------------

    /// Opens a stream: registers it, then queues its SYN (so data the peer
    /// sends at once is not lost).
    ///
    /// # Errors
    ///
    /// [`OpenError`] if the session ended, `max_open_streams` are open, or
    /// the ids are used up.
    pub fn open_stream(&mut self) -> Result<StreamId, OpenError> {
        if let Some(e) = self.error {
            return Err(OpenError::Session(e));
        }
        if self.streams.len() >= self.config.max_open_streams {
            return Err(OpenError::TooManyStreams);
        }
        // Ids a peer already uses (smux does not check parity) are skipped;
        // there are fewer than max_open_streams of them.
        loop {
            if self.ids_exhausted {
                return Err(OpenError::IdsExhausted);
            }
            let Some(next) = self.next_id.checked_add(2) else {
                self.ids_exhausted = true;
                return Err(OpenError::IdsExhausted);
            };
            self.next_id = next;
            if !self.streams.contains_key(&next) {
                break;
            }
        }
        let sid = self.next_id;
        let mut s = Stream::new(true);
        Self::queue_ctl(&mut self.ctl, sid, &mut s);
        self.streams.insert(sid, s);
        Ok(sid)
    }

    /// Takes the oldest incoming stream, if any.
    pub fn accept_stream(&mut self) -> Option<StreamId> {
        if self.error.is_some() {
            return None;
        }
        self.accept.pop_front()
    }

    /// Whether a [`read`](Self::read) of `sid` would return now: it has
    /// received bytes, the peer's FIN, or the session's error. Nothing is
    /// consumed, so a caller can take budget for a read before making it.
    ///
    /// # Errors
    ///
    /// [`StreamError::Unknown`] for a stream not open here.
    pub fn readable(&self, sid: StreamId) -> Result<bool, StreamError> {
        Ok(self.read_ready(sid)?.is_some())
    }

    /// What a [`read`](Self::read) of `sid` would return now: `Some(n)`
    /// bytes received and unread, `Some(0)` at the end of the stream (the
    /// peer's FIN, or the session's error, with nothing left to read),
    /// `None` when it would wait. A caller that takes budget for a read
    /// takes no more than `n`, and none to read an end.
    ///
    /// # Errors
    ///
    /// [`StreamError::Unknown`] for a stream not open here.
    pub fn read_ready(&self, sid: StreamId) -> Result<Option<usize>, StreamError> {
        let s = self.streams.get(&sid).ok_or(StreamError::Unknown)?;
        Ok(
            if !s.recv.is_empty() || s.peer_fin || self.error.is_some() {
                Some(s.recv.len())
            } else {
                None
            },
        )
    }

    /// Reads received payload of `sid` into `buf`: `Ok(Some(n))` with
    /// `n > 0` bytes, `Ok(Some(0))` at end of stream (the peer's FIN, after
    /// all data) or for an empty `buf`, `Ok(None)` when nothing is there yet.
    /// In v2 a read queues the UPD Go smux would send (on the first read and
    /// after each half window).
    ///
    /// # Errors
    ///
    /// [`StreamError::Unknown`] for a stream not open here; the session's
    /// error once buffered data is drained.
    pub fn read(&mut self, sid: StreamId, buf: &mut [u8]) -> Result<Option<usize>, StreamError> {
        let version = self.version;
        let threshold = self.config.stream_window / 2;
        let s = self.streams.get_mut(&sid).ok_or(StreamError::Unknown)?;
        if buf.is_empty() {
            return Ok(Some(0));
        }
        if s.recv.is_empty() {
            if let Some(e) = self.error {
                return Err(StreamError::Session(e));
            }
            return Ok(if s.peer_fin { Some(0) } else { None });
        }
        let n = {
            let (a, b) = s.recv.as_slices();
            let n1 = a.len().min(buf.len());
            buf[..n1].copy_from_slice(&a[..n1]);
            let n2 = b.len().min(buf.len() - n1);
            buf[n1..n1 + n2].copy_from_slice(&b[..n2]);
            n1 + n2
        };
        s.recv.drain(..n);
        if s.recv.is_empty() && s.recv.capacity() > SHRINK_ABOVE {
            s.recv = VecDeque::new();
        }
        self.bucket += n as i64;
        if version == Version::V2 {
            s.num_read = s.num_read.wrapping_add(n as u32);
            s.incr = s.incr.wrapping_add(n as u32);
            if s.incr >= threshold || s.num_read == n as u32 {
                s.incr = 0;
                s.upd_pending = true;
                Self::queue_ctl(&mut self.ctl, sid, s);
            }
        }
        Ok(Some(n))
    }

    /// Queues `data` on `sid`, as much as the stream's send buffer and the
    /// session's send budget admit, and returns how many bytes were taken:
    /// 0 when either is full (wait for [`Event::Stream`]).
    ///
    /// # Errors
    ///
    /// [`StreamError`] if the stream is unknown or write-closed, the peer
    /// broke v2 accounting, or the session ended.
    pub fn write(&mut self, sid: StreamId, data: &[u8]) -> Result<usize, StreamError> {
        let (room, budget_spent) = self.room(sid, !data.is_empty())?;
        if budget_spent {
            self.stats.send_budget_waits += 1;
        }
        let n = data.len().min(room);
        let s = self.streams.get_mut(&sid).ok_or(StreamError::Unknown)?;
        s.send.extend(&data[..n]);
        self.send_total += n;
        Self::queue_ready(&mut self.ready, sid, s, self.version);
        Ok(n)
    }

    /// How many bytes [`write`](Self::write) would take on `sid` now (the
    /// stream's send buffer and the session's budget, whichever is
    /// smaller). 0 means wait for [`Event::Stream`]: as with a write, the
    /// stream is woken when the session's budget frees.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    pub fn write_room(&mut self, sid: StreamId) -> Result<usize, StreamError> {
        self.room(sid, true).map(|(room, _)| room)
    }

    /// What [`write`](Self::write) and [`write_room`](Self::write_room)
    /// share: the checks, and the room (the stream's send buffer and the
    /// session's budget, whichever is smaller). When the stream has room
    /// but the session's budget is spent and `wants` is set, the stream is
    /// queued to be woken when the budget frees, and the second value is
    /// `true`.
    fn room(&mut self, sid: StreamId, wants: bool) -> Result<(usize, bool), StreamError> {
        let s = self.streams.get_mut(&sid).ok_or(StreamError::Unknown)?;
        if let Some(e) = self.error {
            return Err(StreamError::Session(e));
        }
        if s.consumed_error {
            return Err(StreamError::PeerConsumedTooMuch);
        }
        if s.write_closed {
            return Err(StreamError::WriteClosed);
        }
        let stream_room = self.config.stream_send_buffer.saturating_sub(s.send.len());
        let session_room = self
            .config
            .session_send_buffer
            .saturating_sub(self.send_total);
        let budget_spent = wants && stream_room > 0 && session_room == 0;
        if budget_spent && !s.budget_wait {
            s.budget_wait = true;
            self.budget_waiters.push_back(sid);
        }
        Ok((stream_room.min(session_room), budget_spent))
    }

    /// Half-closes `sid`: queues a FIN behind its queued data. Returns
    /// whether the FIN has been emitted by `poll_transmit`. Reads continue
    /// until the peer's FIN.
    ///
    /// # Errors
    ///
    /// [`StreamError`] if the stream is unknown or the session ended before
    /// the FIN went out.
    pub fn shutdown_write(&mut self, sid: StreamId) -> Result<bool, StreamError> {
        let s = self.streams.get_mut(&sid).ok_or(StreamError::Unknown)?;
        if s.fin_sent {
            return Ok(true);
        }
        if let Some(e) = self.error {
            return Err(StreamError::Session(e));
        }
        s.write_closed = true;
        Self::queue_ready(&mut self.ready, sid, s, self.version);
        Ok(false)
    }

    /// Closes `sid` for good (the handle is gone): received data is
    /// discarded, a FIN follows the queued data, and the entry is freed once
    /// it is out. Unknown ids are ignored.
    pub fn close_stream(&mut self, sid: StreamId) {
        let Some(s) = self.streams.get_mut(&sid) else {
            return;
        };
        self.bucket += s.recv.len() as i64;
        s.recv = VecDeque::new();
        s.closed = true;
        s.write_closed = true;
        if self.error.is_some() {
            if let Some(s) = self.streams.remove(&sid) {
                self.send_total -= s.send.len();
            }
            return;
        }
        Self::queue_ready(&mut self.ready, sid, s, self.version);
        self.try_remove(sid);
    }

    /// Frees the entry of a closed stream whose FIN is out.
    fn try_remove(&mut self, sid: StreamId) -> bool {
        if self
            .streams
            .get(&sid)
            .is_some_and(|s| s.closed && s.fin_sent)
        {
            if let Some(s) = self.streams.remove(&sid) {
                self.bucket += s.recv.len() as i64;
            }
            return true;
        }
        false
    }

    // ---- output ----------------------------------------------------------

    /// Writes whole frames into `buf` and returns how many bytes: control
    /// frames first (NOP, SYN, UPD, refusals), then data round-robin over
    /// the streams, each stream's FIN after its data. Returns 0 when there
    /// is nothing to send (or the session ended).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> usize {
        if self.error.is_some() {
            return 0;
        }
        let v = self.version.as_u8();
        let mut n = 0;
        let mut frames = 0u64;
        if self.nop_pending {
            if !put(buf, &mut n, Header::new(v, Cmd::Nop, 0, 0), &[]) {
                return n;
            }
            frames += 1;
            self.nop_pending = false;
        }
        while let Some(&sid) = self.refused.front() {
            if !put(buf, &mut n, Header::new(v, Cmd::Fin, 0, sid), &[]) {
                self.stats.frames_out += frames;
                return n;
            }
            frames += 1;
            self.refused.pop_front();
        }
        while let Some(&sid) = self.ctl.front() {
            let Some(s) = self.streams.get_mut(&sid) else {
                self.ctl.pop_front();
                continue;
            };
            if s.syn_pending {
                if !put(buf, &mut n, Header::new(v, Cmd::Syn, 0, sid), &[]) {
                    self.stats.frames_out += frames;
                    return n;
                }
                frames += 1;
                s.syn_pending = false;
            }
            if s.upd_pending {
                let upd = Upd {
                    consumed: s.num_read,
                    window: self.config.stream_window,
                };
                let h = Header::new(v, Cmd::Upd, UPD_LEN as u16, sid);
                if !put(buf, &mut n, h, &upd.to_bytes()) {
                    self.stats.frames_out += frames;
                    return n;
                }
                frames += 1;
            }
            s.upd_pending = false;
            s.in_ctl = false;
            self.ctl.pop_front();
        }
        let frame_size = self.config.max_frame_size;
        // Each turn emits a frame (bounded by `buf`) or takes a stream off
        // the queue, so this ends.
        while let Some(sid) = self.ready.pop_front() {
            let Some(s) = self.streams.get_mut(&sid) else {
                continue;
            };
            s.in_ready = false;
            let room = buf.len().saturating_sub(n + HEADER_LEN);
            if !s.send.is_empty() {
                let Some(win) = s.window(self.version) else {
                    s.consumed_error = true;
                    Self::event(&mut self.events, sid, s);
                    continue;
                };
                let take = s.send.len().min(frame_size).min(win).min(room);
                if take == 0 {
                    if room == 0 {
                        // Out of room: keep its place for the next call.
                        s.in_ready = true;
                        self.ready.push_front(sid);
                        break;
                    }
                    continue; // window closed: a UPD requeues it
                }
                let out = &mut buf[n..n + HEADER_LEN + take];
                Header::new(v, Cmd::Psh, take as u16, sid).emit(out);
                let (a, b) = s.send.as_slices();
                let k = a.len().min(take);
                out[HEADER_LEN..HEADER_LEN + k].copy_from_slice(&a[..k]);
                out[HEADER_LEN + k..].copy_from_slice(&b[..take - k]);
                s.send.drain(..take);
                self.send_total -= take;
                if s.send.is_empty() && s.send.capacity() > SEND_KEEP {
                    s.send = VecDeque::new();
                }
                s.num_written = s.num_written.wrapping_add(take as u32);
                n += HEADER_LEN + take;
                frames += 1;
                Self::event(&mut self.events, sid, s);
            }
            if s.send.is_empty() && s.write_closed && !s.fin_sent {
                if n + HEADER_LEN > buf.len() {
                    s.in_ready = true;
                    self.ready.push_front(sid);
                    break;
                }
                Header::new(v, Cmd::Fin, 0, sid).emit(&mut buf[n..]);
                n += HEADER_LEN;
                frames += 1;
                s.fin_sent = true;
                if s.send.capacity() > 0 {
                    s.send = VecDeque::new();
                }
                Self::event(&mut self.events, sid, s);
                self.try_remove(sid);
                continue;
            }
            Self::queue_ready(&mut self.ready, sid, s, self.version);
        }
        self.stats.frames_out += frames;
        if self.send_total < self.config.session_send_buffer {
            while let Some(sid) = self.budget_waiters.pop_front() {
                if let Some(s) = self.streams.get_mut(&sid) {
                    s.budget_wait = false;
                    Self::event(&mut self.events, sid, s);
                }
            }
        }
        n
    }
}
