//! The one typed configuration for streams and listeners.
//!
//! [`Config::builder`] starts from kcp-go's defaults; every setter documents
//! its default and what kcp-go or kcptun calls it. [`ConfigBuilder::build`]
//! validates the whole set once (MTU against the headers, windows, FEC shape,
//! key) and derives a passphrase key once, so opening a session never fails on
//! configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use crate::arq::Preset;
use crate::arq::{self, ArqConfig, Congestion};
use crate::crypto::{self, MAX_DATAGRAM, Method, PacketCrypto};
use crate::fec;

/// Smallest KCP mtu accepted: one segment header plus at least one byte.
const MIN_KCP_MTU: usize = 25;

/// Key material for the packet cipher.
#[derive(Clone)]
pub struct Key(KeyInner);

#[derive(Clone)]
enum KeyInner {
    Raw(Vec<u8>),
    Passphrase(String),
}

impl Key {
    /// Raw key bytes. A key longer than the method needs is cut to the
    /// method's length ([`Method::key_len`]), as kcptun does with its 32-byte
    /// derived key.
    #[must_use]
    pub fn raw(bytes: impl Into<Vec<u8>>) -> Self {
        Self(KeyInner::Raw(bytes.into()))
    }

    /// A kcptun passphrase (`--key`): derived once, in
    /// [`ConfigBuilder::build`], with PBKDF2-HMAC-SHA1 (salt `kcp-go`, 4096
    /// rounds, 32 bytes) like kcptun.
    #[must_use]
    pub fn passphrase(passphrase: impl Into<String>) -> Self {
        Self(KeyInner::Passphrase(passphrase.into()))
    }

    fn bytes(&self) -> Vec<u8> {
        match &self.0 {
            KeyInner::Raw(b) => b.clone(),
            KeyInner::Passphrase(p) => crypto::derive_key(p).to_vec(),
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            KeyInner::Raw(b) => write!(f, "Key::raw({} bytes)", b.len()),
            KeyInner::Passphrase(_) => f.write_str("Key::passphrase(..)"),
        }
    }
}

/// Why [`ConfigBuilder::build`] refused a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The MTU leaves no room for a KCP segment once the crypto and FEC
    /// headers are taken off (kcp mtu = min(mtu, 1500) - crypto header -
    /// FEC header - AEAD tag must be at least 25 bytes).
    MtuTooSmall {
        /// The MTU asked for.
        mtu: usize,
        /// Bytes the crypto and FEC layers take from every datagram.
        overhead: usize,
    },
    /// A window of 0 segments.
    ZeroWindow,
    /// The FEC shape is invalid (both numbers must be 0 to turn FEC off, or
    /// both positive with at most 255 shards in all).
    InvalidFec {
        /// Data shards asked for.
        data: usize,
        /// Parity shards asked for.
        parity: usize,
    },
    /// The key does not suit the cipher (for example too short).
    InvalidKey(crypto::KeyError),
    /// A limit that must be positive is zero (named).
    ZeroLimit(&'static str),
    /// The ARQ refused its parameters.
    Arq(arq::ArqConfigError),
    /// A value outside its documented range (named, with the range).
    OutOfRange {
        /// The builder option.
        name: &'static str,
        /// The value asked for.
        value: u64,
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MtuTooSmall { mtu, overhead } => write!(
                f,
                "mtu {mtu} is too small: {overhead} bytes of crypto/FEC headers leave less than {MIN_KCP_MTU} for KCP"
            ),
            Self::ZeroWindow => f.write_str("send and receive windows must be at least 1 segment"),
            Self::InvalidFec { data, parity } => {
                write!(f, "invalid FEC shape {data} data + {parity} parity shards")
            }
            Self::InvalidKey(e) => write!(f, "invalid key: {e}"),
            Self::ZeroLimit(name) => write!(f, "{name} must be positive"),
            Self::Arq(e) => write!(f, "invalid ARQ parameters: {e}"),
            Self::OutOfRange {
                name,
                value,
                min,
                max,
            } => write!(f, "{name} = {value} is outside {min}..={max}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidKey(e) => Some(e),
            Self::Arq(e) => Some(e),
            _ => None,
        }
    }
}

/// A validated configuration for [`KcpStream`](crate::KcpStream) and
/// [`KcpListener`](crate::KcpListener). Cheap to clone.
///
/// Both ends of a connection must agree on the cipher and key; everything
/// else (presets, windows, FEC on the sending side, modes) is local, as in
/// kcp-go.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use kcpio::{Config, Key, Method, Preset};
///
/// let config = Config::builder()
///     .preset(Preset::Fast3)
///     .window(1024, 1024)
///     .stream(true)
///     .crypto(Method::Aes128, Key::passphrase("it's a secret"))
///     .fec(10, 3)
///     .idle_timeout(Duration::from_secs(30))
///     .build()
///     .unwrap();
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct Config {
    pub(crate) inner: Arc<ConfigInner>,
}

/// The validated values, shared by every session of a socket.
pub(crate) struct ConfigInner {
    pub(crate) arq: ArqConfig,
    pub(crate) mtu: usize,
    pub(crate) method: Method,
    pub(crate) crypto: Arc<PacketCrypto>,
    pub(crate) fec: Option<(usize, usize)>,
    pub(crate) fec_group_deadline: Option<u32>,
    /// The largest FEC shape (data + parity) a receiving decoder learns.
    pub(crate) fec_max_shards: usize,
    pub(crate) rate_limit: u64,
    pub(crate) dscp: u8,
    pub(crate) recv_buffer: Option<usize>,
    pub(crate) send_buffer: Option<usize>,
    pub(crate) accept_backlog: usize,
    pub(crate) max_sessions: usize,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) linger: Duration,
    pub(crate) conv: Option<u32>,
    pub(crate) batching: bool,
    pub(crate) reuse_port: usize,
}

impl ConfigInner {
    /// 8 with the FEC encoder on, else 0.
    pub(crate) fn fec_header(&self) -> usize {
        if self.fec.is_some() {
            fec::DATA_HEADER
        } else {
            0
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.inner;
        f.debug_struct("Config")
            .field("mtu", &c.mtu)
            .field("kcp_mtu", &c.arq.mtu)
            .field("snd_wnd", &c.arq.snd_wnd)
            .field("rcv_wnd", &c.arq.rcv_wnd)
            .field("nodelay", &c.arq.nodelay)
            .field("interval", &c.arq.interval)
            .field("fast_resend", &c.arq.fast_resend)
            .field("no_congestion", &c.arq.no_congestion)
            .field("congestion", &c.arq.controller())
            .field("stream", &c.arq.stream)
            .field("method", &c.method.name())
            .field("fec", &c.fec)
            .field("fec_group_deadline", &c.fec_group_deadline)
            .field("write_delay", &c.arq.write_delay)
            .field("ack_nodelay", &c.arq.ack_nodelay)
            .field("dead_link", &c.arq.dead_link)
            .field("rate_limit", &c.rate_limit)
            .field("dscp", &c.dscp)
            .field("accept_backlog", &c.accept_backlog)
            .field("max_sessions", &c.max_sessions)
            .field("idle_timeout", &c.idle_timeout)
            .field("linger", &c.linger)
            .field("conv", &c.conv)
            .field("batching", &c.batching)
            .field("reuse_port", &c.reuse_port)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// A builder starting from kcp-go's defaults.
    #[must_use]
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// The KCP mtu after the crypto and FEC headers are deducted (WIRE 2.5).
    #[must_use]
    pub fn kcp_mtu(&self) -> usize {
        self.inner.arq.mtu
    }

    /// The packet cipher.
    #[must_use]
    pub fn method(&self) -> Method {
        self.inner.method
    }

    /// The packet cipher with its key schedule: what seals and opens the
    /// datagrams of a [`Conn`](crate::Conn) driven by hand.
    #[must_use]
    pub fn packet_crypto(&self) -> &PacketCrypto {
        &self.inner.crypto
    }

    /// Whether the session is a byte stream that merges small writes (true)
    /// or keeps message boundaries (false).
    #[must_use]
    pub fn is_stream(&self) -> bool {
        self.inner.arq.stream
    }
}

/// Builds a [`Config`]; every setter documents its default.
#[derive(Clone, Debug)]
pub struct ConfigBuilder {
    preset: Preset,
    mtu: usize,
    snd_wnd: u16,
    rcv_wnd: u16,
    stream: bool,
    method: Method,
    key: Key,
    fec: Option<(usize, usize)>,
    fec_group_deadline: Option<Duration>,
    fec_max_shards: usize,
    nodelay: Option<(bool, u32, u32, bool)>,
    write_delay: bool,
    ack_nodelay: Option<bool>,
    min_rto: Option<Duration>,
    rto_backoff_percent: Option<u32>,
    max_rto: Option<Duration>,
    tail_probe: Option<bool>,
    congestion: Option<Congestion>,
    max_window: Option<u16>,
    rate_limit: u64,
    dscp: u8,
    recv_buffer: Option<usize>,
    send_buffer: Option<usize>,
    accept_backlog: usize,
    max_sessions: usize,
    idle_timeout: Duration,
    dead_link: u32,
    linger: Duration,
    conv: Option<u32>,
    batching: bool,
    reuse_port: usize,
}

impl Default for ConfigBuilder {
    fn default() -> Self {
        Self {
            preset: Preset::Default,
            mtu: 1400,
            snd_wnd: 32,
            rcv_wnd: 32,
            stream: false,
            method: Method::Null,
            key: Key::raw(Vec::new()),
            fec: None,
            fec_group_deadline: None,
            fec_max_shards: fec::DEFAULT_MAX_SHARDS,
            nodelay: None,
            write_delay: false,
            ack_nodelay: None,
            min_rto: None,
            rto_backoff_percent: None,
            max_rto: None,
            tail_probe: None,
            congestion: None,
            max_window: None,
            rate_limit: 0,
            dscp: 0,
            recv_buffer: None,
            send_buffer: None,
            accept_backlog: 128,
            max_sessions: 4096,
            idle_timeout: Duration::ZERO,
            dead_link: 20,
            linger: Duration::from_secs(5),
            conv: None,
            batching: true,
            reuse_port: 1,
        }
    }
}

impl ConfigBuilder {
    /// The ARQ preset: nodelay, flush interval, fast resend, congestion window.
    /// Default: [`Preset::Default`] (kcp-go's `0, 100, 0, 0`).
    #[must_use]
    pub fn preset(mut self, preset: Preset) -> Self {
        self.preset = preset;
        self
    }

    /// The largest datagram sent, headers included (kcp-go `SetMtu`); clamped
    /// to 1500. Default: 1400. kcptun uses 1350.
    #[must_use]
    pub fn mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }

    /// Send and receive windows in segments (kcp-go `SetWindowSize`).
    /// Default: 32 and 32. kcptun uses 128/512 (client) and 1024/1024 (server).
    #[must_use]
    pub fn window(mut self, send: u16, recv: u16) -> Self {
        self.snd_wnd = send;
        self.rcv_wnd = recv;
        self
    }

    /// Stream mode (true: small writes are merged into full segments) or
    /// message mode (false: each write is one message of up to one segment,
    /// and [`KcpStream::send_message`](crate::KcpStream::send_message) sends
    /// whole messages). Default: false, as kcp-go; kcptun uses true.
    #[must_use]
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Per-packet encryption: `method` with `key`. Default: [`Method::Null`]
    /// (no crypto header at all). Both ends must agree.
    #[must_use]
    pub fn crypto(mut self, method: Method, key: Key) -> Self {
        self.method = method;
        self.key = key;
        self
    }

    /// Reed-Solomon FEC on the send side: `parity` parity shards after every
    /// `data` data shards. `(0, 0)` turns it off. Default: off. kcptun uses
    /// 10 and 3. Receiving FEC works whatever this is set to.
    #[must_use]
    pub fn fec(mut self, data: usize, parity: usize) -> Self {
        self.fec = Some((data, parity));
        self
    }

    /// **kcpio-only** (off by default): an FEC group that has not filled
    /// `deadline` after its first data shard is closed with filler shards so
    /// its parity goes out at once; a lost packet at a low packet rate is then
    /// rebuilt within about one round trip instead of waiting for a
    /// retransmission. kcp-go receivers decode such groups as usual (they
    /// count the fillers as `KCPInErrors`). Whole milliseconds; only with
    /// [`fec`](Self::fec) on.
    #[must_use]
    pub fn fec_group_deadline(mut self, deadline: Duration) -> Self {
        self.fec_group_deadline = Some(deadline);
        self
    }

    /// The largest FEC group (data + parity shards) this side's decoder will
    /// learn from a peer and hold, 2..=256. Default
    /// [`fec::DEFAULT_MAX_SHARDS`](crate::fec::DEFAULT_MAX_SHARDS) (128;
    /// kcptun's default is 10 + 3). A peer sending larger groups is not
    /// decoded (its packets still reach the ARQ, so nothing is lost but the
    /// FEC recovery); the per-session decoder memory is bounded by
    /// [`FecDecoder::memory_bound`](crate::fec::FecDecoder::memory_bound) of
    /// this limit whatever the peer sends.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// 2..=256.
    #[must_use]
    pub fn fec_max_shards(mut self, shards: usize) -> Self {
        self.fec_max_shards = shards;
        self
    }

    /// Custom ARQ timing instead of a [`preset`](Self::preset), as kcp-go's
    /// `SetNoDelay(nodelay, interval, resend, nc)`: `nodelay` lowers the
    /// minimum RTO to 30 ms, `interval` is the flush period in ms (clamped to
    /// 10..=5000), `resend` the fast-retransmit threshold (0 = off), `nc`
    /// turns the congestion window off. Default: the preset's values.
    #[must_use]
    pub fn nodelay(mut self, nodelay: bool, interval: u32, resend: u32, nc: bool) -> Self {
        self.nodelay = Some((nodelay, interval, resend, nc));
        self
    }

    /// The congestion controller: how this side limits and paces what it
    /// sends. Sender side only: the peer sees no difference on the wire, so
    /// any choice works with kcp-go and kcptun peers. Default: what the
    /// preset's (or [`nodelay`](Self::nodelay)'s) `nc` says, as in kcp-go:
    /// [`Congestion::Kcp`] for [`Preset::Default`], [`Congestion::None`] for
    /// kcptun's modes and [`Preset::LowLatency`]; setting it overrides `nc`.
    ///
    /// [`Congestion::Model`] is kcpio's model-based controller, for long or
    /// lossy paths and shared bottlenecks: it paces at the bandwidth it
    /// measures and does not slow down on random loss. Give it windows of
    /// at least twice the path's bandwidth-delay product in segments
    /// ([`window`](Self::window)).
    #[must_use]
    pub fn congestion(mut self, controller: Congestion) -> Self {
        self.congestion = Some(controller);
        self
    }

    /// **kcpio-only**: windows that size themselves. The send and receive
    /// windows start at [`window`](Self::window)'s values and each doubles,
    /// up to `max` segments, when the path needs more: the receive window
    /// when the peer's data in flight reaches three quarters of it, the send
    /// window when it (not the peer's window or the congestion controller)
    /// holds data back. kcp-go peers honour the larger window advertised.
    /// Memory is taken only as the windows grow and is bounded as for
    /// windows of `max` segments (about `2 × max × mtu` bytes per direction).
    /// Meant for [`Congestion::Model`], which bounds what is in flight by
    /// itself; with [`Congestion::None`] the window is the only limit, so a
    /// sender grows it to `max`. Default: off (fixed windows, as kcp-go).
    #[must_use]
    pub fn max_window(mut self, max: u16) -> Self {
        self.max_window = Some(max);
        self
    }

    /// Write delay (kcp-go `SetWriteDelay`): when true a write does not flush
    /// at once; data leaves at the next interval tick. Default: false.
    #[must_use]
    pub fn write_delay(mut self, on: bool) -> Self {
        self.write_delay = on;
        self
    }

    /// ACK without delay (kcp-go `SetACKNoDelay`): every input that queues an
    /// ACK flushes at once. Default: false ([`Preset::LowLatency`]: true).
    #[must_use]
    pub fn ack_nodelay(mut self, on: bool) -> Self {
        self.ack_nodelay = Some(on);
        self
    }

    /// **kcpio-only**: the floor of the retransmission timeout, instead of
    /// kcp-go's 30 ms (nodelay) or 100 ms. A lower floor lets a lost packet
    /// be resent about one smoothed RTT plus four deviations after it left
    /// on a short, steady path. Only this side's retransmissions change, so
    /// it works with kcp-go peers. Whole milliseconds, at least 1. Default:
    /// kcp-go's ([`Preset::LowLatency`]: 20 ms).
    #[must_use]
    pub fn min_rto(mut self, floor: Duration) -> Self {
        self.min_rto = Some(floor);
        self
    }

    /// **kcpio-only**: how much a segment's retransmission timeout grows
    /// each time it expires, in percent of the current RTO estimate (kcp-go:
    /// 100 without nodelay, 50 with it; 0 keeps it constant). Default:
    /// kcp-go's ([`Preset::LowLatency`]: 25).
    #[must_use]
    pub fn rto_backoff_percent(mut self, percent: u32) -> Self {
        self.rto_backoff_percent = Some(percent);
        self
    }

    /// **kcpio-only**: cap of a segment's backed-off retransmission timeout
    /// (kcp-go: none). Default: none ([`Preset::LowLatency`]: 200 ms).
    #[must_use]
    pub fn max_rto(mut self, cap: Duration) -> Self {
        self.max_rto = Some(cap);
        self
    }

    /// **kcpio-only**: tail-loss probe. The newest segment, which no later
    /// ACK can report as skipped, is resent once after `max(1.5 × srtt,
    /// srtt + interval)` when that comes before its RTO, without backing the
    /// RTO off (like TCP's TLP). Retransmissions only: kcp-go peers are
    /// unaffected. Default: false ([`Preset::LowLatency`]: true).
    #[must_use]
    pub fn tail_probe(mut self, on: bool) -> Self {
        self.tail_probe = Some(on);
        self
    }

    /// Pacing of everything a socket sends, in bytes per second (kcp-go
    /// `SetRateLimit`; 0 = unlimited). Applies per UDP socket: per client
    /// stream, and to the listener's sessions together. Default: 0.
    #[must_use]
    pub fn rate_limit(mut self, bytes_per_sec: u64) -> Self {
        self.rate_limit = bytes_per_sec;
        self
    }

    /// DSCP code point for outgoing datagrams (IPv4 TOS = `dscp << 2`, IPv6
    /// traffic class = `dscp << 2`). Default: 0 (the OS default is left
    /// untouched).
    #[must_use]
    pub fn dscp(mut self, dscp: u8) -> Self {
        self.dscp = dscp;
        self
    }

    /// Socket receive and send buffer sizes in bytes (`SO_RCVBUF`,
    /// `SO_SNDBUF`); 0 means the default. Default: the send buffer is the
    /// OS default; the receive buffer is raised to 4 MiB when the OS default
    /// is smaller (the kernel caps it at `net.core.rmem_max`), because a
    /// listener's many peers, or one peer's full window, overflow Linux's
    /// 208 KiB default in a burst and every drop costs a retransmission
    /// timeout. kcptun uses 4 MiB each.
    #[must_use]
    pub fn socket_buffers(mut self, recv: usize, send: usize) -> Self {
        self.recv_buffer = (recv > 0).then_some(recv);
        self.send_buffer = (send > 0).then_some(send);
        self
    }

    /// Sessions a listener holds that were not yet accepted; a new peer
    /// beyond this is refused (counted, its datagram dropped). Default: 128
    /// (kcp-go's `acceptBacklog`).
    #[must_use]
    pub fn accept_backlog(mut self, backlog: usize) -> Self {
        self.accept_backlog = backlog;
        self
    }

    /// Sessions a listener holds at once (accepted, pending or closing); a
    /// new peer beyond this is refused and counted. Default: 4096.
    #[must_use]
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max;
        self
    }

    /// A session that receives nothing valid for this long fails with
    /// `TimedOut`. [`Duration::ZERO`] turns it off (KCP has no keepalive, so
    /// a quiet but alive peer is not told apart from a gone one). Default:
    /// off.
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Transmissions of one segment after which the peer is declared dead
    /// and the session fails with `TimedOut`. 0 never gives up (kcp-go's
    /// behaviour). Default: 20 (KCP's `dead_link`).
    #[must_use]
    pub fn dead_link(mut self, transmissions: u32) -> Self {
        self.dead_link = transmissions;
        self
    }

    /// How long `shutdown` waits for everything written to be acknowledged,
    /// and how long a dropped stream keeps delivering its unsent data in the
    /// background. Default: 5 s.
    #[must_use]
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// The conversation id a client uses; `None` draws a random one from the
    /// driver's CSPRNG (kcp-go's `DialWithOptions`). Ignored by listeners,
    /// which take the peer's. Default: `None`.
    #[must_use]
    pub fn conv(mut self, conv: Option<u32>) -> Self {
        self.conv = conv;
        self
    }

    /// Batched system calls (`recvmmsg`/`sendmmsg` with GRO/GSO on Linux).
    /// `false` forces the portable one-datagram-per-call path. Default: true.
    #[must_use]
    pub fn batching(mut self, on: bool) -> Self {
        self.batching = on;
        self
    }

    /// Listener sockets: with `n > 1`, [`KcpListener::bind`] binds `n` UDP
    /// sockets to the same address with `SO_REUSEPORT`, each run by its own
    /// driver task, all feeding one accept backlog. The kernel spreads peers
    /// over the sockets by a hash of their address (one peer always reaches
    /// the same socket), so a busy server uses up to `n` cores; give the
    /// runtime that many worker threads. `max_sessions` applies per socket.
    /// Ignored by clients and where `SO_REUSEPORT` does not exist
    /// (non-Unix). Default: 1 (one socket, no `SO_REUSEPORT`).
    ///
    /// [`KcpListener::bind`]: crate::KcpListener::bind
    #[must_use]
    pub fn reuse_port(mut self, n: usize) -> Self {
        self.reuse_port = n;
        self
    }

    /// Validates the settings and derives the key.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first setting that cannot work.
    pub fn build(self) -> Result<Config, ConfigError> {
        if self.snd_wnd == 0 || self.rcv_wnd == 0 {
            return Err(ConfigError::ZeroWindow);
        }
        if self.accept_backlog == 0 {
            return Err(ConfigError::ZeroLimit("accept_backlog"));
        }
        if self.max_sessions == 0 {
            return Err(ConfigError::ZeroLimit("max_sessions"));
        }
        if self.reuse_port == 0 {
            return Err(ConfigError::ZeroLimit("reuse_port"));
        }
        let preset_fec = self.preset.fec();
        let fec_shape = self
            .fec
            .or_else(|| preset_fec.map(|(shape, _)| shape))
            .unwrap_or((0, 0));
        let fec = match fec_shape {
            (0, 0) => None,
            (data, parity) => {
                if data == 0 || parity == 0 || data + parity > 255 {
                    return Err(ConfigError::InvalidFec { data, parity });
                }
                fec::FecEncoder::new(data, parity)
                    .map_err(|_| ConfigError::InvalidFec { data, parity })?;
                Some((data, parity))
            }
        };
        let need = self.method.key_len();
        // No PBKDF2 run (4096 rounds) for a method that takes no key.
        let mut key = if need == 0 {
            Vec::new()
        } else {
            self.key.bytes()
        };
        if key.len() > need {
            key.truncate(need);
        }
        let crypto = PacketCrypto::new(self.method, &key).map_err(ConfigError::InvalidKey)?;
        let fec_header = if fec.is_some() { fec::DATA_HEADER } else { 0 };
        let overhead = crypto.header_len() + fec_header + crypto.trailer_len();
        let kcp_mtu = self.mtu.min(MAX_DATAGRAM).saturating_sub(overhead);
        if kcp_mtu < MIN_KCP_MTU {
            return Err(ConfigError::MtuTooSmall {
                mtu: self.mtu,
                overhead,
            });
        }
        let mut arq = self.preset.arq_config();
        if let Some((nodelay, interval, resend, nc)) = self.nodelay {
            arq.nodelay = nodelay;
            arq.interval = interval.clamp(10, 5000);
            arq.fast_resend = resend;
            arq.no_congestion = nc;
        }
        arq.mtu = kcp_mtu;
        arq.snd_wnd = self.snd_wnd;
        arq.rcv_wnd = self.rcv_wnd;
        arq.stream = self.stream;
        arq.write_delay = self.write_delay;
        if let Some(on) = self.ack_nodelay {
            arq.ack_nodelay = on;
        }
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX).max(1);
        if let Some(d) = self.min_rto {
            arq.min_rto = Some(ms(d));
        }
        if let Some(p) = self.rto_backoff_percent {
            arq.backoff_percent = Some(p);
        }
        if let Some(d) = self.max_rto {
            arq.max_rto = Some(ms(d));
        }
        if let Some(on) = self.tail_probe {
            arq.tail_probe = on;
        }
        if let Some(c) = self.congestion {
            arq.congestion = Some(c);
        }
        arq.max_window = self.max_window;
        // The preset's deadline only rides with the preset's own shape or an
        // explicit one; `fec_group_deadline` always wins.
        let fec_group_deadline = self
            .fec_group_deadline
            .or_else(|| preset_fec.map(|(_, d)| d));
        // 0 = never give up: a transmission count no segment reaches.
        arq.dead_link = if self.dead_link == 0 {
            u32::MAX
        } else {
            self.dead_link
        };
        arq.validate().map_err(ConfigError::Arq)?;
        if !(2..=256).contains(&self.fec_max_shards) {
            return Err(ConfigError::OutOfRange {
                name: "fec_max_shards",
                value: u64::try_from(self.fec_max_shards).unwrap_or(u64::MAX),
                min: 2,
                max: 256,
            });
        }
        Ok(Config {
            inner: Arc::new(ConfigInner {
                arq,
                mtu: self.mtu.min(MAX_DATAGRAM),
                method: self.method,
                crypto: Arc::new(crypto),
                fec,
                fec_group_deadline: fec_group_deadline.map(ms),
                fec_max_shards: self.fec_max_shards,
                rate_limit: self.rate_limit,
                dscp: self.dscp,
                recv_buffer: self.recv_buffer,
                send_buffer: self.send_buffer,
                accept_backlog: self.accept_backlog,
                max_sessions: self.max_sessions,
                idle_timeout: (!self.idle_timeout.is_zero()).then_some(self.idle_timeout),
                linger: self.linger,
                conv: self.conv,
                batching: self.batching,
                reuse_port: self.reuse_port,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_kcp_go() {
        let c = Config::builder().build().unwrap();
        assert_eq!(c.kcp_mtu(), 1400);
        assert_eq!(c.inner.arq.snd_wnd, 32);
        assert_eq!(c.inner.arq.rcv_wnd, 32);
        assert_eq!(c.inner.arq.interval, 100);
        assert!(!c.is_stream());
        assert_eq!(c.inner.accept_backlog, 128);
    }

    #[test]
    fn fec_max_shards_is_range_checked() {
        assert_eq!(
            Config::builder().build().unwrap().inner.fec_max_shards,
            fec::DEFAULT_MAX_SHARDS
        );
        assert_eq!(
            Config::builder()
                .fec_max_shards(13)
                .build()
                .unwrap()
                .inner
                .fec_max_shards,
            13
        );
        for bad in [0, 1, 257] {
            let err = Config::builder().fec_max_shards(bad).build().unwrap_err();
            assert!(matches!(
                err,
                ConfigError::OutOfRange {
                    name: "fec_max_shards",
                    ..
                }
            ));
            assert!(err.to_string().contains("2..=256"), "{err}");
        }
    }

    #[test]
    fn kcp_mtu_deducts_headers_like_wire_2_5() {
        let mtu = |mtu, m: Method, fec: (usize, usize)| {
            Config::builder()
                .mtu(mtu)
                .crypto(m, Key::passphrase("k"))
                .fec(fec.0, fec.1)
                .build()
                .unwrap()
                .kcp_mtu()
        };
        assert_eq!(mtu(1400, Method::Null, (0, 0)), 1400);
        assert_eq!(mtu(1400, Method::Aes, (0, 0)), 1380);
        assert_eq!(mtu(1400, Method::Null, (10, 3)), 1392);
        assert_eq!(mtu(1400, Method::Aes, (10, 3)), 1372);
        assert_eq!(mtu(1350, Method::Aes, (10, 3)), 1322);
        assert_eq!(mtu(1400, Method::Aes128Gcm, (0, 0)), 1372);
        assert_eq!(mtu(1400, Method::Aes128Gcm, (10, 3)), 1364);
        assert_eq!(mtu(9000, Method::Null, (0, 0)), 1500);
    }

    #[test]
    fn invalid_settings_are_typed_errors() {
        let e = Config::builder()
            .mtu(50)
            .crypto(Method::Aes128Gcm, Key::passphrase("k"))
            .fec(10, 3)
            .build()
            .unwrap_err();
        assert_eq!(
            e,
            ConfigError::MtuTooSmall {
                mtu: 50,
                overhead: 36
            }
        );
        assert_eq!(
            Config::builder().window(0, 32).build().unwrap_err(),
            ConfigError::ZeroWindow
        );
        assert!(matches!(
            Config::builder().fec(10, 0).build().unwrap_err(),
            ConfigError::InvalidFec { .. }
        ));
        assert!(matches!(
            Config::builder().fec(200, 100).build().unwrap_err(),
            ConfigError::InvalidFec { .. }
        ));
        assert!(matches!(
            Config::builder().accept_backlog(0).build().unwrap_err(),
            ConfigError::ZeroLimit("accept_backlog")
        ));
    }

    #[test]
    fn key_and_dead_link_rules() {
        assert!(matches!(
            Config::builder()
                .crypto(Method::Aes128, Key::raw(vec![1u8; 8]))
                .build()
                .unwrap_err(),
            ConfigError::InvalidKey(_)
        ));
        // A longer raw key is cut to the method's length, like kcptun's prefix.
        Config::builder()
            .crypto(Method::Aes128, Key::raw(vec![1u8; 32]))
            .build()
            .unwrap();
        let c = Config::builder().dead_link(0).build().unwrap();
        assert_eq!(c.inner.arq.dead_link, u32::MAX);
    }

    #[test]
    fn custom_nodelay_overrides_the_preset() {
        let c = Config::builder()
            .preset(Preset::Fast3)
            .nodelay(false, 1, 3, false)
            .build()
            .unwrap();
        assert!(!c.inner.arq.nodelay);
        assert_eq!(c.inner.arq.interval, 10);
        assert_eq!(c.inner.arq.fast_resend, 3);
        assert!(!c.inner.arq.no_congestion);
    }

    #[test]
    fn presets_follow_kcptun() {
        let c = Config::builder().preset(Preset::Fast3).build().unwrap();
        assert!(c.inner.arq.nodelay);
        assert_eq!(c.inner.arq.interval, 10);
        assert_eq!(c.inner.arq.fast_resend, 2);
        assert!(c.inner.arq.no_congestion);
        assert_eq!(Preset::from_name("fast2"), Some(Preset::Fast2));
        assert_eq!(Preset::from_name("turbo"), None);
    }

    #[test]
    fn lowlat_preset_sets_its_knobs_and_options_override_them() {
        assert_eq!(Preset::from_name("lowlat"), Some(Preset::LowLatency));
        for p in [
            Preset::Default,
            Preset::Normal,
            Preset::Fast,
            Preset::Fast2,
            Preset::Fast3,
            Preset::LowLatency,
        ] {
            assert_eq!(Preset::from_name(p.name()), Some(p));
        }
        let c = Config::builder()
            .preset(Preset::LowLatency)
            .build()
            .unwrap();
        let a = &c.inner.arq;
        assert!(a.nodelay && a.no_congestion && a.ack_nodelay && a.tail_probe);
        assert_eq!((a.interval, a.fast_resend), (10, 1));
        assert_eq!(a.min_rto, Some(20));
        assert_eq!(a.backoff_percent, Some(25));
        assert_eq!(a.max_rto, Some(200));
        assert_eq!(c.inner.fec, Some((2, 2)));
        assert_eq!(c.inner.fec_group_deadline, Some(10));
        assert_eq!(c.kcp_mtu(), 1392);
        // Explicit settings win over the preset's.
        let c = Config::builder()
            .preset(Preset::LowLatency)
            .fec(0, 0)
            .ack_nodelay(false)
            .tail_probe(false)
            .min_rto(Duration::from_millis(50))
            .build()
            .unwrap();
        assert_eq!(c.inner.fec, None);
        assert!(!c.inner.arq.ack_nodelay && !c.inner.arq.tail_probe);
        assert_eq!(c.inner.arq.min_rto, Some(50));
        let c = Config::builder()
            .preset(Preset::LowLatency)
            .fec(10, 3)
            .build()
            .unwrap();
        assert_eq!(c.inner.fec, Some((10, 3)));
        assert_eq!(c.inner.fec_group_deadline, Some(10));
        // The kcp-go presets carry none of the kcpio-only knobs.
        for p in [Preset::Default, Preset::Fast3] {
            let c = Config::builder().preset(p).build().unwrap();
            let a = &c.inner.arq;
            assert_eq!(
                (a.min_rto, a.backoff_percent, a.max_rto),
                (None, None, None)
            );
            assert!(!a.tail_probe && !a.ack_nodelay);
            assert_eq!(c.inner.fec, None);
            assert_eq!(c.inner.fec_group_deadline, None);
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let c = Config::builder()
            .crypto(Method::Aes128, Key::passphrase("hunter2"))
            .build()
            .unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(!format!("{:?}", Key::passphrase("hunter2")).contains("hunter2"));
    }
}
