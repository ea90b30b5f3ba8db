//! [`MuxConfig`]: smux's knobs, validated as Go smux's `VerifyConfig` does.

use core::fmt;
use core::time::Duration;

use super::frame::MAX_PAYLOAD;

/// The smux protocol version. Both ends must use the same one.
///
/// The versions share the frame layout; v2 adds per-stream flow control
/// (UPD frames), so one stream whose reader stops stalls only itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Version {
    /// Version 1: no per-stream window. The default of Go smux and of
    /// Debian's kcptun 20210922 (`--smuxver 1`).
    #[default]
    V1,
    /// Version 2: per-stream credit windows. The default of kcptun since
    /// November 2025 (`--smuxver 2`).
    V2,
}

impl Version {
    /// The version byte on the wire.
    #[must_use]
    pub const fn as_u8(self) -> u8 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
        }
    }
}

/// Configuration of one smux session (both ends of a session may differ in
/// everything but [`version`](MuxConfigBuilder::version)).
///
/// Defaults, beside Go smux's `DefaultConfig()` and kcptun's flags:
///
/// | knob | kcpio | Go smux | kcptun 20210922 (Debian) | kcptun 2026 |
/// | --- | --- | --- | --- | --- |
/// | [`version`](MuxConfigBuilder::version) | 1 | 1 | `--smuxver 1` | `--smuxver 2` |
/// | [`keepalive_interval`](MuxConfigBuilder::keepalive_interval) | 10 s | 10 s | `--keepalive 10` | 10 |
/// | [`keepalive_timeout`](MuxConfigBuilder::keepalive_timeout) | 30 s | 30 s | 30 s (fixed) | 30 s |
/// | [`max_frame_size`](MuxConfigBuilder::max_frame_size) | 32,768 | 32,768 | 32,768 | `--framesize 8192` |
/// | [`receive_buffer`](MuxConfigBuilder::receive_buffer) | 4 MiB | 4 MiB | `--smuxbuf 4194304` | same |
/// | [`stream_window`](MuxConfigBuilder::stream_window) | 2 MiB | 64 KiB | `--streambuf 2097152` | same |
/// | [`accept_backlog`](MuxConfigBuilder::accept_backlog) | 1,024 | 1,024 (fixed) | | |
/// | [`max_open_streams`](MuxConfigBuilder::max_open_streams) | 65,536 | unbounded | | |
/// | [`stream_opens_per_second`](MuxConfigBuilder::stream_opens_per_second) | 1,024 (burst 1,024) | unbounded | | |
/// | [`stream_send_buffer`](MuxConfigBuilder::stream_send_buffer) | 128 KiB | unbounded | | |
/// | [`session_send_buffer`](MuxConfigBuilder::session_send_buffer) | 8 MiB | unbounded | | |
///
/// The stream window follows kcptun rather than Go smux: 64 KiB per round
/// trip is too little for a stream over a long KCP link.
///
/// # Limits against a hostile peer
///
/// The last five rows bound what a peer holding the transport's key can
/// make a session hold; a normal workload (a browser's few hundred
/// connections, bursts of a few hundred opens) never meets them. What exceeds
/// a limit is refused at the smallest unit: a SYN over the stream limit, the
/// accept backlog or the open rate is answered with a FIN and counted in
/// [`MuxStats`](super::MuxStats) (`refused_streams` and the reason's own
/// counter); the session and its other streams live on. The send buffers are
/// backpressure, not refusals: a write returns 0 (the writer waits) while its
/// stream holds `stream_send_buffer` bytes or the session's streams together
/// hold `session_send_buffer`, so a peer that stops reading costs at most
/// `session_send_buffer` of queued output per session, whatever the
/// application writes. Received data is bounded by
/// [`receive_buffer`](MuxConfigBuilder::receive_buffer) (plus one frame).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MuxConfig {
    pub(crate) version: Version,
    pub(crate) keepalive: Option<(Duration, Duration)>,
    pub(crate) max_frame_size: usize,
    pub(crate) receive_buffer: usize,
    pub(crate) stream_window: u32,
    pub(crate) accept_backlog: usize,
    pub(crate) max_open_streams: usize,
    pub(crate) stream_opens_per_second: u32,
    pub(crate) stream_send_buffer: usize,
    pub(crate) session_send_buffer: usize,
}

impl Default for MuxConfig {
    fn default() -> Self {
        Self {
            version: Version::V1,
            keepalive: Some((Duration::from_secs(10), Duration::from_secs(30))),
            max_frame_size: 32_768,
            receive_buffer: 4 * 1024 * 1024,
            stream_window: 2 * 1024 * 1024,
            accept_backlog: 1024,
            max_open_streams: 65_536,
            stream_opens_per_second: 1024,
            stream_send_buffer: super::session::STREAM_SEND_BUFFER,
            session_send_buffer: 8 * 1024 * 1024,
        }
    }
}

impl MuxConfig {
    /// A builder starting from the defaults in the table above.
    pub fn builder() -> MuxConfigBuilder {
        MuxConfigBuilder {
            config: Self::default(),
            keepalive_off: false,
        }
    }

    /// The protocol version.
    #[must_use]
    pub const fn version(&self) -> Version {
        self.version
    }

    /// Keepalive interval and timeout, `None` when disabled.
    #[must_use]
    pub const fn keepalive(&self) -> Option<(Duration, Duration)> {
        self.keepalive
    }

    /// The largest PSH payload this end sends.
    #[must_use]
    pub const fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// The session's receive budget in bytes.
    #[must_use]
    pub const fn receive_buffer(&self) -> usize {
        self.receive_buffer
    }

    /// The per-stream window advertised in v2 UPD frames.
    #[must_use]
    pub const fn stream_window(&self) -> u32 {
        self.stream_window
    }

    /// Incoming streams waiting for `accept`.
    #[must_use]
    pub const fn accept_backlog(&self) -> usize {
        self.accept_backlog
    }

    /// The most streams open at once, both directions together.
    #[must_use]
    pub const fn max_open_streams(&self) -> usize {
        self.max_open_streams
    }

    /// Streams the peer may open per second (and in one burst).
    #[must_use]
    pub const fn stream_opens_per_second(&self) -> u32 {
        self.stream_opens_per_second
    }

    /// Bytes one stream may queue for sending.
    #[must_use]
    pub const fn stream_send_buffer(&self) -> usize {
        self.stream_send_buffer
    }

    /// Bytes all streams of the session together may queue for sending.
    #[must_use]
    pub const fn session_send_buffer(&self) -> usize {
        self.session_send_buffer
    }
}

/// Builds a [`MuxConfig`]; see its table for the defaults.
#[derive(Clone, Debug)]
#[must_use]
pub struct MuxConfigBuilder {
    config: MuxConfig,
    keepalive_off: bool,
}

/// A [`MuxConfigBuilder`] setting Go smux would refuse (`VerifyConfig`), or
/// one kcpio cannot honour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MuxConfigError(&'static str);

impl fmt::Display for MuxConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid mux configuration: {}", self.0)
    }
}

impl std::error::Error for MuxConfigError {}

impl MuxConfigBuilder {
    /// Protocol version (kcptun `--smuxver`); must match the peer's.
    pub fn version(mut self, version: Version) -> Self {
        self.config.version = version;
        self
    }

    /// How often a NOP keepalive frame is sent (kcptun `--keepalive`).
    pub fn keepalive_interval(mut self, interval: Duration) -> Self {
        if let Some(k) = &mut self.config.keepalive {
            k.0 = interval;
        }
        self
    }

    /// The session dies when a check, run every `timeout`, finds that no
    /// frame arrived since the previous check: a silent peer is noticed after
    /// one to two timeouts. Go smux's `KeepAliveTimeout`; must be at least
    /// the interval.
    pub fn keepalive_timeout(mut self, timeout: Duration) -> Self {
        if let Some(k) = &mut self.config.keepalive {
            k.1 = timeout;
        }
        self
    }

    /// Sends no NOP and never times out (Go smux's `KeepAliveDisabled`).
    /// A Go peer with keepalive on closes such a session when idle.
    pub fn disable_keepalive(mut self) -> Self {
        self.keepalive_off = true;
        self
    }

    /// The largest PSH payload sent, 1..=65,535 (kcptun `--framesize`).
    /// Frames of any size up to 65,535 are accepted whatever this is.
    pub fn max_frame_size(mut self, bytes: usize) -> Self {
        self.config.max_frame_size = bytes;
        self
    }

    /// The session receive budget (Go smux's `MaxReceiveBuffer`, kcptun
    /// `--smuxbuf`): payload received but not yet read by the application,
    /// all streams together. When it is spent the session stops reading the
    /// transport until the application reads; it may be exceeded by one
    /// frame.
    pub fn receive_buffer(mut self, bytes: usize) -> Self {
        self.config.receive_buffer = bytes;
        self
    }

    /// The window advertised to the peer in v2 (Go smux's `MaxStreamBuffer`,
    /// kcptun `--streambuf`); at most the receive buffer.
    pub fn stream_window(mut self, bytes: u32) -> Self {
        self.config.stream_window = bytes;
        self
    }

    /// Incoming streams queued for `accept`. A SYN arriving when it is full
    /// is answered with a FIN and counted (`refused_backlog`): an
    /// application that does not accept stalls nobody else. (Go smux stops
    /// reading the session instead, which a peer's SYN flood turns into a
    /// stall of every stream.)
    pub fn accept_backlog(mut self, streams: usize) -> Self {
        self.config.accept_backlog = streams;
        self
    }

    /// The most streams open at once (opened and accepted, including those
    /// closed locally whose FIN is not yet sent). A SYN beyond it is
    /// answered with a FIN; `open_stream` fails.
    pub fn max_open_streams(mut self, streams: usize) -> Self {
        self.config.max_open_streams = streams;
        self
    }

    /// Streams the peer may open per second, as a token bucket holding one
    /// second's worth (so a burst of this many is accepted at once). A SYN
    /// finding the bucket empty is answered with a FIN and counted
    /// (`refused_rate`). Needs the time: [`Session::set_time`] or
    /// [`Session::handle_timeout`](super::Session::handle_timeout).
    ///
    /// [`Session::set_time`]: super::Session::set_time
    pub fn stream_opens_per_second(mut self, opens: u32) -> Self {
        self.config.stream_opens_per_second = opens;
        self
    }

    /// Bytes one stream may queue for sending before writes wait (default
    /// [`STREAM_SEND_BUFFER`](super::STREAM_SEND_BUFFER)); at least one
    /// byte. What a stalled stream costs on the send side.
    pub fn stream_send_buffer(mut self, bytes: usize) -> Self {
        self.config.stream_send_buffer = bytes;
        self
    }

    /// Bytes all streams of the session together may queue for sending
    /// before writes wait; at least the stream send buffer. Bounds the send
    /// side of a session whose peer stops reading, however many streams it
    /// opened.
    pub fn session_send_buffer(mut self, bytes: usize) -> Self {
        self.config.session_send_buffer = bytes;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`MuxConfigError`] for a zero keepalive interval, a timeout shorter
    /// than the interval, a frame size outside 1..=65,535, a zero or
    /// over-`i32::MAX` buffer, a stream window above the receive buffer,
    /// a zero backlog, stream limit or open rate, or a zero stream send
    /// buffer or a session send buffer below it.
    pub fn build(self) -> Result<MuxConfig, MuxConfigError> {
        let mut c = self.config;
        if self.keepalive_off {
            c.keepalive = None;
        }
        if let Some((interval, timeout)) = c.keepalive {
            if interval.is_zero() {
                return Err(MuxConfigError("keepalive interval must be positive"));
            }
            if timeout < interval {
                return Err(MuxConfigError(
                    "keepalive timeout must be at least the interval",
                ));
            }
        }
        if c.max_frame_size == 0 || c.max_frame_size > MAX_PAYLOAD {
            return Err(MuxConfigError("max frame size must be in 1..=65535"));
        }
        if c.receive_buffer == 0 || c.receive_buffer > i32::MAX as usize {
            return Err(MuxConfigError("receive buffer must be in 1..=2147483647"));
        }
        if c.stream_window == 0 || c.stream_window as usize > c.receive_buffer {
            return Err(MuxConfigError(
                "stream window must be positive and at most the receive buffer",
            ));
        }
        if c.accept_backlog == 0 || c.max_open_streams == 0 {
            return Err(MuxConfigError(
                "accept backlog and max open streams must be positive",
            ));
        }
        if c.stream_opens_per_second == 0 {
            return Err(MuxConfigError("stream opens per second must be positive"));
        }
        if c.stream_send_buffer == 0 || c.session_send_buffer < c.stream_send_buffer {
            return Err(MuxConfigError(
                "stream send buffer must be positive and at most the session send buffer",
            ));
        }
        Ok(c)
    }
}
