//! The one typed configuration for streams and listeners.
//!
//! [`Config::builder`] starts from kcpio's defaults (kcptun's `fast` timing
//! with windows for a long fat path, liveness on; see
//! [`ConfigBuilder`]); [`ConfigBuilder::kcp_go_defaults`] gives kcp-go's
//! exact ones. Every setter documents its default and what kcp-go or
//! kcptun calls it. [`ConfigBuilder::build`]
//! validates the whole set once (MTU against the headers, windows, FEC shape,
//! key) and derives a passphrase key once, so opening a session never fails on
//! configuration.
//! A value outside its documented range is refused with a [`ConfigError`]
//! that names it and the range; nothing is clamped silently.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use crate::arq::Preset;
use crate::arq::config::{MAX_INTERVAL, MIN_INTERVAL};
use crate::arq::{self, ArqConfig, Congestion};
use crate::conn::PROOF_TIMEOUT;
use crate::crypto::{self, MAX_DATAGRAM, Method, PacketCrypto};
use crate::driver::table;
use crate::fec;

/// Smallest KCP mtu accepted: one segment header plus at least one byte.
const MIN_KCP_MTU: usize = 25;
/// [`ConfigBuilder::idle_timeout`]'s default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// [`ConfigBuilder::keepalive`]'s default.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(10);
/// [`ConfigBuilder::connect_timeout`]'s default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The range of [`ConfigBuilder::keepalive`] and
/// [`ConfigBuilder::connect_timeout`] when on.
const LIFECYCLE_RANGE_MS: (u64, u64) = (100, 86_400_000);
/// Bytes one side must be able to write before the peer reads, at least
/// (see [`Config::write_capacity`]): a request of this size answered by an
/// echo that writes back as it reads cannot deadlock.
pub const MIN_WRITE_CAPACITY: usize = 16 * 1024;

/// [`Config::write_capacity`] of an ARQ configuration.
fn write_capacity(a: &ArqConfig) -> usize {
    (2 * usize::from(a.snd_wnd) + usize::from(a.rcv_wnd))
        * a.mtu.saturating_sub(arq::segment::HEADER_LEN)
}
/// The longest time any duration option accepts (a day): far beyond any
/// useful setting, and clear of arithmetic overflow.
const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);
/// The shortest idle timeout accepted: KCP's default flush interval and
/// minimum RTO. A shorter one ends live sessions between two ordinary
/// packets.
const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(100);
/// The longest retransmission timeout, floor or cap (KCP's `IKCP_RTO_MAX`).
const MAX_RTO: Duration = Duration::from_millis(60_000);
/// The longest FEC group deadline.
const MAX_FEC_GROUP_DEADLINE: Duration = Duration::from_secs(5);
/// Largest `rto_backoff_percent`: a timeout grows at most elevenfold per
/// expiry.
const MAX_BACKOFF_PERCENT: u32 = 1000;
/// Largest DSCP code point (6 bits).
const MAX_DSCP: u8 = 63;
/// Largest socket buffer asked for (1 GiB; the kernel caps it lower).
const MAX_SOCKET_BUFFER: usize = 1 << 30;
/// Largest accept backlog.
const MAX_ACCEPT_BACKLOG: usize = 1 << 16;
/// Largest session cap of one listener socket (2^24).
const MAX_SESSIONS: usize = 1 << 24;
/// Largest `reuse_port` group.
const MAX_REUSE_PORT: usize = 256;

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
    /// The ARQ refused its parameters.
    Arq(arq::ArqConfigError),
    /// A value outside its documented range (named, with the range).
    /// Durations are given in whole milliseconds, and their name says so:
    /// `idle_timeout (ms)`.
    OutOfRange {
        /// The builder option (with the argument, for options that take
        /// several: `window(recv)`; with the unit for durations).
        name: &'static str,
        /// The value asked for.
        value: u64,
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// An option that only works together with another one.
    Requires {
        /// The option set.
        name: &'static str,
        /// What it needs, as the builder spells it.
        needs: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MtuTooSmall { mtu, overhead } => write!(
                f,
                "mtu {mtu} is too small: {overhead} bytes of crypto/FEC headers leave less than {MIN_KCP_MTU} for KCP"
            ),
            Self::InvalidFec { data, parity } => write!(
                f,
                "invalid FEC shape {data} data + {parity} parity shards: \
                 use 0 + 0 for off, or both at least 1 and at most 255 in all"
            ),
            Self::InvalidKey(e) => write!(f, "invalid key: {e}"),
            Self::Arq(e) => write!(f, "invalid ARQ parameters: {e}"),
            Self::OutOfRange {
                name,
                value,
                min,
                max,
            } => write!(f, "{name} = {value} is outside {min}..={max}"),
            Self::Requires { name, needs } => write!(f, "{name} needs {needs}"),
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
    /// Sessions one source IP may open at once, then per second.
    pub(crate) sessions_per_source: (u32, u32),
    /// How long a listener's session may stay unproven.
    pub(crate) proof_timeout: Duration,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) keepalive: Option<Duration>,
    pub(crate) connect_probe: bool,
    pub(crate) connect_timeout: Option<Duration>,
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
            .field("sessions_per_source", &c.sessions_per_source)
            .field("proof_timeout", &c.proof_timeout)
            .field("idle_timeout", &c.idle_timeout)
            .field("keepalive", &c.keepalive)
            .field("connect_probe", &c.connect_probe)
            .field("connect_timeout", &c.connect_timeout)
            .field("linger", &c.linger)
            .field("conv", &c.conv)
            .field("batching", &c.batching)
            .field("reuse_port", &c.reuse_port)
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    /// The configuration of [`Config::builder`]`().build()`: every option at
    /// its documented default.
    ///
    /// # Panics
    ///
    /// Never: it takes no input, and `default_is_the_builders_default`
    /// proves the documented defaults build (no datagram reaches this).
    fn default() -> Self {
        ConfigBuilder::default()
            .build()
            .expect("the default configuration is valid")
    }
}

impl Config {
    /// A builder starting from kcpio's defaults (see [`ConfigBuilder`]).
    #[must_use]
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// The KCP mtu: [`mtu`](ConfigBuilder::mtu) less the crypto header, the
    /// FEC header (when sending FEC) and the AEAD tag, as kcp-go computes it.
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

    /// Bytes one side can write, in stream mode, before the peer must read:
    /// this side holds `2 × send window` segments (in flight and queued) and
    /// the peer's receive window holds `receive window` unread ones, each of
    /// up to `mss` (the KCP mtu minus 24) bytes, so `(2 × send + receive) ×
    /// mss` when the peer uses the same windows. A writer that writes more
    /// before reading anything waits, and two peers that both do so (an echo
    /// client writing its whole request first) wait for each other. Message
    /// mode holds as many segments, of whole messages.
    ///
    /// | windows | mss 1376 (no cipher, no FEC) |
    /// | --- | --- |
    /// | 1024/1024 (the default) | 4.2 MB |
    /// | 128/512 (kcptun's client) | 1.0 MB |
    /// | 32/32 (kcp-go's default) | 132 KB |
    #[must_use]
    pub fn write_capacity(&self) -> usize {
        write_capacity(&self.inner.arq)
    }

    /// Whether the session is a byte stream that merges small writes (true)
    /// or keeps message boundaries (false).
    #[must_use]
    pub fn is_stream(&self) -> bool {
        self.inner.arq.stream
    }
}

/// Builds a [`Config`]; every setter documents its default.
///
/// # The defaults, and why
///
/// kcpio's defaults are chosen for a user who replaces a `TcpStream`, from
/// measurements beside kcp-go's defaults (the repository's lossy-link demo,
/// `cargo run --release --example demo`, aes-128, a 60 Hz echo of 64-byte
/// messages and a bulk transfer; one run each on a shared 2-core machine):
///
/// | path | kcp-go's defaults | these defaults | `Fast3`, same windows |
/// | --- | --- | --- | --- |
/// | loopback relay: echo p50 / p99, bulk | 1.5 / 10.1 ms, 77 kB/s | 1.3 / 12.8 ms, 65 MB/s | 1.3 / 8.9 ms, 47 MB/s |
/// | 100 ms RTT, 5% loss each way: echo p50 / p99, bulk | 3.2 / 6.3 s, 17 kB/s | 156 / 377 ms, 3.1 MB/s | 125 / 305 ms, 4.0 MB/s |
///
/// - ARQ timing [`Preset::Fast`] (kcptun's `fast`, kcptun's own default:
///   30 ms flush interval, fast retransmit after 2 skipping ACKs, no
///   congestion window). kcp-go's [`Preset::Default`] (100 ms, no fast
///   retransmit, a congestion window that restarts at one segment after
///   every loss) collapses on loss. [`Preset::Fast3`] is about 20% better
///   on the lossy path but its 30 ms RTO floor resent 10,831 segments
///   spuriously on the loaded loopback (29% less goodput), and it wakes
///   three times as often per busy session: pick it for latency on a path
///   you know.
/// - Windows 1024/1024 segments: 1.4 MB in flight, a 100 Mbit/s × 100 ms
///   path's bandwidth-delay product (kcp-go's 32/32 caps a session at 32
///   segments per round trip: 4.4 Mbit/s at 100 ms). The rings grow on
///   demand, so an idle session does not pay for them; a busy one holds up
///   to `2 × (send + receive)` segments.
/// - Liveness on: [`connect_probe`](Self::connect_probe), a 10 s
///   [`keepalive`](Self::keepalive), a 30 s
///   [`idle_timeout`](Self::idle_timeout), no
///   [`dead_link`](Self::dead_link) limit.
///
/// Nothing of this changes the wire format: a kcp-go peer with any settings
/// talks to it. [`kcp_go_defaults`](Self::kcp_go_defaults) gives kcp-go's
/// exact behaviour.
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
    ack_repeat: bool,
    congestion: Option<Congestion>,
    max_window: Option<u16>,
    rate_limit: u64,
    dscp: u8,
    recv_buffer: Option<usize>,
    send_buffer: Option<usize>,
    accept_backlog: usize,
    max_sessions: usize,
    sessions_per_source: (u32, u32),
    proof_timeout: Duration,
    idle_timeout: Option<Duration>,
    /// `None`: the default (derived from the idle timeout).
    keepalive: Option<Option<Duration>>,
    connect_probe: bool,
    connect_timeout: Option<Duration>,
    dead_link: u32,
    linger: Duration,
    conv: Option<u32>,
    batching: bool,
    reuse_port: usize,
}

impl Default for ConfigBuilder {
    fn default() -> Self {
        Self {
            preset: Preset::Fast,
            mtu: 1400,
            snd_wnd: 1024,
            rcv_wnd: 1024,
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
            ack_repeat: true,
            congestion: None,
            max_window: None,
            rate_limit: 0,
            dscp: 0,
            recv_buffer: None,
            send_buffer: None,
            accept_backlog: 128,
            max_sessions: 4096,
            sessions_per_source: (table::RATE_BURST, table::RATE_PER_SEC),
            proof_timeout: PROOF_TIMEOUT,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            keepalive: None,
            connect_probe: true,
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            dead_link: 0,
            linger: Duration::from_secs(5),
            conv: None,
            batching: true,
            reuse_port: 1,
        }
    }
}

impl ConfigBuilder {
    /// kcp-go's exact defaults (a `kcp.DialWithOptions` session): the
    /// [`Preset::Default`] timing (`0, 100, 0, 0`), windows 32/32, and none
    /// of kcpio's liveness: no connect probe, no keepalive, no idle timeout,
    /// no dead-link limit; each ACK sent once ([`ack_repeat`](Self::ack_repeat)
    /// off). Settings made before this call are overwritten, later ones win.
    #[must_use]
    pub fn kcp_go_defaults(mut self) -> Self {
        self.preset = Preset::Default;
        self.snd_wnd = 32;
        self.rcv_wnd = 32;
        self.connect_probe = false;
        self.keepalive = Some(None);
        self.idle_timeout = None;
        self.dead_link = 0;
        self.ack_repeat = false;
        self
    }

    /// The ARQ preset: nodelay, flush interval, fast resend, congestion window.
    /// Default: [`Preset::Fast`] (kcptun's `fast`, `0, 30, 2, 1`; kcp-go's
    /// own default is [`Preset::Default`], see
    /// [`kcp_go_defaults`](Self::kcp_go_defaults)).
    #[must_use]
    pub fn preset(mut self, preset: Preset) -> Self {
        self.preset = preset;
        self
    }

    /// The largest datagram sent, headers included (kcp-go `SetMtu`).
    /// Default: 1400. kcptun uses 1350.
    ///
    /// Range: up to 1500 (kcp-go's limit), and at least the crypto and FEC
    /// headers plus 25 bytes (one KCP segment header and one byte of data).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] above
    /// 1500 and [`ConfigError::MtuTooSmall`] below the headers' needs.
    #[must_use]
    pub fn mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }

    /// Send and receive windows in segments (kcp-go `SetWindowSize`).
    /// Default: 1024 and 1024 (kcp-go: 32 and 32). kcptun uses 128/512
    /// (client) and 1024/1024 (server).
    ///
    /// Range: 1..=65535 each.
    ///
    /// Capacity ([`Config::write_capacity`]): a side can write `2 × its send
    /// window + the peer's receive window` segments of up to mss bytes (mss =
    /// [`Config::kcp_mtu`] − 24) before its writes wait for the peer to read:
    /// 96 × 1376 = 132,096 bytes with both at 32 and the 1400-byte mtu. In
    /// flight at once are at most `min(send window, the peer's receive
    /// window)` segments.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] for a
    /// window of 0, and when the windows let a side write less than
    /// [`MIN_WRITE_CAPACITY`] (16 KiB) before the peer reads: an echo of one
    /// such request would deadlock.
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
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::InvalidKey`] when the
    /// key does not suit the method (a raw key shorter than
    /// [`Method::key_len`]).
    #[must_use]
    pub fn crypto(mut self, method: Method, key: Key) -> Self {
        self.method = method;
        self.key = key;
        self
    }

    /// Reed-Solomon FEC on the send side: `parity` parity shards after every
    /// `data` data shards. `(0, 0)` turns it off. Default: off. kcptun uses
    /// 10 and 3. Receiving FEC works whatever this is set to.
    ///
    /// Range: `(0, 0)`, or both at least 1 with `data + parity` at most 255.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::InvalidFec`] outside
    /// that range.
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
    /// count the fillers as `KCPInErrors`).
    ///
    /// Range: 1 ms..=5 s, counted in whole milliseconds (a fraction is cut
    /// off); only with FEC on ([`fec`](Self::fec), or a preset with FEC).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with
    /// [`ConfigError::OutOfRange`] outside the range and with
    /// [`ConfigError::Requires`] when FEC is off.
    #[must_use]
    pub fn fec_group_deadline(mut self, deadline: Duration) -> Self {
        self.fec_group_deadline = Some(deadline);
        self
    }

    /// The largest FEC group (data + parity shards) this side's decoder will
    /// learn from a peer and hold. Default
    /// [`fec::DEFAULT_MAX_SHARDS`](crate::fec::DEFAULT_MAX_SHARDS) (128;
    /// kcptun's default is 10 + 3). A peer sending larger groups is not
    /// decoded (its packets still reach the ARQ, so nothing is lost but the
    /// FEC recovery); the per-session decoder memory is bounded by
    /// [`FecDecoder::memory_bound`](crate::fec::FecDecoder::memory_bound) of
    /// this limit whatever the peer sends.
    ///
    /// Range: 2..=256.
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
    /// minimum RTO to 30 ms, `interval` is the flush period in ms, `resend`
    /// the fast-retransmit threshold (0 = off), `nc` turns the congestion
    /// window off. Default: the preset's values.
    ///
    /// Range: `interval` 10..=5000 (kcp-go clamps to these bounds; kcpio
    /// refuses instead); any `resend`.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] for an
    /// `interval` outside 10..=5000.
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
    /// [`Congestion::Bbr`] is kcpio's model-based controller, for long or
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
    /// Meant for [`Congestion::Bbr`], which bounds what is in flight by
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
    /// it works with kcp-go peers. Default: kcp-go's ([`Preset::LowLatency`]:
    /// 20 ms).
    ///
    /// Range: 1 ms..=60 s, in whole milliseconds (a fraction is cut off),
    /// and not above the [`max_rto`](Self::max_rto) cap in force (the
    /// lowlat preset caps at 200 ms: raise `max_rto` with it).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with
    /// [`ConfigError::OutOfRange`] outside the range.
    #[must_use]
    pub fn min_rto(mut self, floor: Duration) -> Self {
        self.min_rto = Some(floor);
        self
    }

    /// **kcpio-only**: how much a segment's retransmission timeout grows
    /// each time it expires, in percent of the current RTO estimate (kcp-go:
    /// 100 without nodelay, 50 with it; 0 keeps it constant). Default:
    /// kcp-go's ([`Preset::LowLatency`]: 25).
    ///
    /// Range: 0..=1000.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] above
    /// 1000.
    #[must_use]
    pub fn rto_backoff_percent(mut self, percent: u32) -> Self {
        self.rto_backoff_percent = Some(percent);
        self
    }

    /// **kcpio-only**: cap of a segment's backed-off retransmission timeout
    /// (kcp-go: none). Default: none ([`Preset::LowLatency`]: 200 ms).
    ///
    /// Range: from the RTO floor in force ([`min_rto`](Self::min_rto), else
    /// kcp-go's 30 ms with nodelay and 100 ms without) to 60 s, in whole
    /// milliseconds.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with
    /// [`ConfigError::OutOfRange`] outside the range.
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

    /// **kcpio-only**: send every acknowledgement twice, in two flushes,
    /// so that a lost ACK packet does not make the peer resend the
    /// segments it named although they arrived (KCP has no selective
    /// acknowledgement ranges: on a path losing 9% of the packets towards
    /// the sender, about 9% of what the sender puts on the wire is such
    /// needless resends). A copy is skipped once the cumulative
    /// acknowledgement covers its segment. Receiver side; kcp-go senders
    /// benefit as kcpio's do (a copy for a segment already acknowledged
    /// changes nothing on either). Costs up to twice the ACK bytes on the
    /// return path: 24 bytes per segment received. Default: true (false
    /// with [`kcp_go_defaults`](Self::kcp_go_defaults)).
    #[must_use]
    pub fn ack_repeat(mut self, on: bool) -> Self {
        self.ack_repeat = on;
        self
    }

    /// Pacing of everything a socket sends, in bytes per second (kcp-go
    /// `SetRateLimit`), with a burst of 96,000 bytes. Applies per UDP
    /// socket: per client stream, and to the listener's sessions together.
    /// Default: 0 (unlimited). Range: any.
    #[must_use]
    pub fn rate_limit(mut self, bytes_per_sec: u64) -> Self {
        self.rate_limit = bytes_per_sec;
        self
    }

    /// DSCP code point for outgoing datagrams (IPv4 TOS = `dscp << 2`, IPv6
    /// traffic class = `dscp << 2`). Default: 0 (the OS default is left
    /// untouched).
    ///
    /// Range: 0..=63 (six bits).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] above
    /// 63.
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
    ///
    /// Range: 0..=1 GiB each (the kernel caps what it grants at
    /// `net.core.rmem_max` and `wmem_max`).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] above
    /// 1 GiB.
    #[must_use]
    pub fn socket_buffers(mut self, recv: usize, send: usize) -> Self {
        self.recv_buffer = (recv > 0).then_some(recv);
        self.send_buffer = (send > 0).then_some(send);
        self
    }

    /// Sessions a listener holds that were not yet accepted; a new peer
    /// beyond this is refused (counted, its datagram dropped). Default: 128
    /// (kcp-go's `acceptBacklog`).
    ///
    /// Range: 1..=65536.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// the range.
    #[must_use]
    pub fn accept_backlog(mut self, backlog: usize) -> Self {
        self.accept_backlog = backlog;
        self
    }

    /// Sessions a listener socket holds at once (accepted, pending or
    /// closing); a new peer beyond this is refused and counted. Default:
    /// 4096.
    ///
    /// Range: 1..=16,777,216 (2^24).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// the range.
    #[must_use]
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max;
        self
    }

    /// Sessions one source IP address may open on a listener socket:
    /// `burst` at once, then `per_second` (a token bucket per address, kept
    /// for the 65,536 addresses that opened sessions last). A conversation
    /// opener beyond it is dropped and counted
    /// ([`ListenerStats::refused_rate`](crate::ListenerStats::refused_rate)),
    /// so one host flooding openers from every port it has cannot fill
    /// [`max_sessions`](Self::max_sessions) on its own. Default: 1,024 at
    /// once, then 256 per second (one host running a thousand clients at
    /// once, as a test or a NAT may, still gets in).
    ///
    /// Range: 1..=16,777,216 (2^24) each.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// the range.
    #[must_use]
    pub fn sessions_per_source(mut self, burst: u32, per_second: u32) -> Self {
        self.sessions_per_source = (burst, per_second);
        self
    }

    /// How long a listener's new session has to prove that its peer
    /// receives what this side sends (by acknowledging a segment, or
    /// answering the window probe the session sends at once) before it
    /// fails with `TimedOut` (source
    /// [`SessionError::DeadLink`](crate::SessionError::DeadLink)). Until
    /// then the session sends that address at most three times the bytes
    /// it received from it, so replayed or spoofed datagrams cannot turn
    /// the server into a reflector. A real peer proves itself within its
    /// first round trip. Client sessions chose their peer and start proven.
    /// Default: 10 s ([`PROOF_TIMEOUT`]).
    ///
    /// Range: 100 ms..=24 h. Keep it well above the path's round trip.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// the range.
    #[must_use]
    pub fn proof_timeout(mut self, timeout: Duration) -> Self {
        self.proof_timeout = timeout;
        self
    }

    /// A session that receives nothing valid for this long fails with
    /// `TimedOut` (source [`SessionError::IdleTimeout`](crate::SessionError::IdleTimeout)):
    /// pending and later reads and writes fail, and a listener frees the
    /// session, so departed clients never fill
    /// [`max_sessions`](Self::max_sessions). `None` (or
    /// [`Duration::ZERO`]) turns it off. Default: 30 s
    /// ([`DEFAULT_IDLE_TIMEOUT`], smux's pairing with a 10 s keepalive).
    ///
    /// With the [`keepalive`](Self::keepalive) on, a quiet but alive peer
    /// answers our probes, so only a vanished peer (or path) times out. A
    /// peer with neither keepalive nor traffic for this long is taken as
    /// gone; kcp-go sends no keepalives of its own but answers ours.
    ///
    /// Range: off, or 100 ms..=24 h. 100 ms is KCP's default flush interval
    /// and minimum RTO: a shorter timeout ends live sessions between two
    /// ordinary packets. Keep it well above the path's round trip and the
    /// peer's sending gaps.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// the range.
    #[must_use]
    pub fn idle_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.idle_timeout = timeout.into().filter(|d| !d.is_zero());
        self
    }

    /// **kcpio's keepalive**: when this side sent nothing for this long, it
    /// sends a KCP window probe (WASK, 24 bytes plus the cipher's and UDP's
    /// headers), which kcp-go, C KCP and kcpio answer with a window report
    /// (WINS) at their next flush. Both the probe and the answer restart the
    /// idle timers, so an idle session costs one small datagram each way per
    /// interval (the peer's answer doubles as its own keepalive) and one
    /// timer deadline per interval. `None` turns it off. Default: 10 s
    /// ([`DEFAULT_KEEPALIVE`]), or a third of the idle timeout when that is
    /// shorter than 30 s; also 10 s with the idle timeout off, so a peer
    /// with an idle timeout of its own keeps hearing from us.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// 100 ms..=24 h, or when not shorter than the idle timeout (the peer's
    /// answer would come too late).
    #[must_use]
    pub fn keepalive(mut self, interval: impl Into<Option<Duration>>) -> Self {
        self.keepalive = Some(interval.into());
        self
    }

    /// Whether [`KcpStream::connect`](crate::KcpStream::connect) proves the
    /// peer is there before it returns: it sends a KCP window probe (WASK
    /// with `sn` and `una` 0, which kcp-go's and kcpio's listeners take as
    /// a new conversation, so their `accept` returns at once), resends it
    /// after 250 ms, 500 ms, 1 s, then every 2 s, and returns once any valid
    /// datagram of the conversation arrived. Off: `connect` returns at once
    /// and sends nothing until the first write (for a peer that must see
    /// data first). Default: on.
    #[must_use]
    pub fn connect_probe(mut self, on: bool) -> Self {
        self.connect_probe = on;
        self
    }

    /// How long [`KcpStream::connect`](crate::KcpStream::connect) waits for
    /// the answer to its probe before failing with `TimedOut` (source
    /// [`SessionError::ConnectTimeout`](crate::SessionError::ConnectTimeout),
    /// naming the likely causes: no server, a different key or cipher, a
    /// blocked path). `None` waits for ever (wrap the call in
    /// `tokio::time::timeout` to bound it yourself). Default: 5 s
    /// ([`DEFAULT_CONNECT_TIMEOUT`]).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// 100 ms..=24 h.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.connect_timeout = timeout.into();
        self
    }

    /// Transmissions of one segment after which the peer is declared dead
    /// and the session fails with `TimedOut` (source
    /// [`SessionError::DeadLink`](crate::SessionError::DeadLink)). 0 never
    /// gives up, kcp-go's behaviour. Default: 0.
    ///
    /// Why off: with the keepalive and idle timeout on by default, a peer
    /// that vanished is noticed within the idle timeout whatever was in
    /// flight, while a retransmission count also kills live sessions on a
    /// flooded or briefly dark path (20 transmissions of fast3 take about
    /// 2 to 20 s of back-off), where kcp-go carries on. Set it (KCP's
    /// classic value is 20) to fail sooner while data is unacknowledged.
    /// Range: any.
    #[must_use]
    pub fn dead_link(mut self, transmissions: u32) -> Self {
        self.dead_link = transmissions;
        self
    }

    /// How long `shutdown` waits for everything written to be acknowledged,
    /// and how long a dropped stream keeps delivering its unsent data in the
    /// background. Default: 5 s.
    ///
    /// Range: 0..=24 h (0: `shutdown` fails at once unless everything was
    /// acknowledged, and a dropped stream is freed at once).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with
    /// [`ConfigError::OutOfRange`] above 24 h.
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
    /// Range: 1..=256.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// the range.
    ///
    /// [`KcpListener::bind`]: crate::KcpListener::bind
    #[must_use]
    pub fn reuse_port(mut self, n: usize) -> Self {
        self.reuse_port = n;
        self
    }

    /// The keepalive and connect timeout are in range, and the keepalive
    /// comes before the idle timeout.
    fn check_lifecycle(&self) -> Result<(), ConfigError> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (min, max) = LIFECYCLE_RANGE_MS;
        for (name, value) in [
            ("keepalive (ms)", self.keepalive.flatten()),
            ("connect_timeout (ms)", self.connect_timeout),
        ] {
            if let Some(v) = value.map(ms).filter(|v| !(min..=max).contains(v)) {
                return Err(ConfigError::OutOfRange {
                    name,
                    value: v,
                    min,
                    max,
                });
            }
        }
        if let (Some(Some(k)), Some(idle)) = (self.keepalive, self.idle_timeout) {
            if k >= idle {
                return Err(ConfigError::OutOfRange {
                    name: "keepalive (ms, below idle_timeout)",
                    value: ms(k),
                    min,
                    max: ms(idle).saturating_sub(1),
                });
            }
        }
        Ok(())
    }

    /// Validates the settings and derives the key.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first setting outside its documented
    /// range, or the first combination that cannot work.
    pub fn build(self) -> Result<Config, ConfigError> {
        self.check_limits()?;
        self.check_lifecycle()?;
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
        // The preset's deadline rides with FEC (the preset's own shape or an
        // explicit one); an explicit `fec_group_deadline` needs FEC on.
        let fec_group_deadline = match (self.fec_group_deadline, fec) {
            (Some(_), None) => {
                return Err(ConfigError::Requires {
                    name: "fec_group_deadline",
                    needs: "FEC on: fec(data, parity) with both at least 1",
                });
            }
            (Some(d), Some(_)) => Some(d),
            (None, Some(_)) => preset_fec.map(|(_, d)| d),
            (None, None) => None,
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
        let min_mtu = overhead + MIN_KCP_MTU;
        if self.mtu < min_mtu {
            return Err(ConfigError::MtuTooSmall {
                mtu: self.mtu,
                overhead,
            });
        }
        range("mtu", self.mtu, min_mtu, MAX_DATAGRAM)?;
        let kcp_mtu = self.mtu - overhead;
        let mut arq = self.preset.arq_config();
        if let Some((nodelay, interval, resend, nc)) = self.nodelay {
            arq.nodelay = nodelay;
            arq.interval = interval;
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
        if let Some(d) = self.min_rto {
            arq.min_rto = Some(ms(d));
        }
        if let Some(p) = self.rto_backoff_percent {
            arq.backoff_percent = Some(p);
        }
        if let Some(d) = self.max_rto {
            arq.max_rto = Some(ms(d));
        }
        if self.min_rto.is_some() || self.max_rto.is_some() {
            check_rto_cap(&arq)?;
        }
        if let Some(on) = self.tail_probe {
            arq.tail_probe = on;
        }
        arq.ack_repeat = self.ack_repeat;
        if let Some(c) = self.congestion {
            arq.congestion = Some(c);
        }
        arq.max_window = self.max_window;
        // 0 = never give up: a transmission count no segment reaches.
        arq.dead_link = if self.dead_link == 0 {
            u32::MAX
        } else {
            self.dead_link
        };
        arq.validate().map_err(ConfigError::Arq)?;
        let capacity = write_capacity(&arq);
        if capacity < MIN_WRITE_CAPACITY {
            return Err(ConfigError::OutOfRange {
                name: "window: bytes writable before the peer reads, (2 x send + receive) x mss",
                value: capacity as u64,
                min: MIN_WRITE_CAPACITY as u64,
                max: u64::MAX,
            });
        }
        Ok(Config {
            inner: Arc::new(ConfigInner {
                arq,
                mtu: self.mtu,
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
                sessions_per_source: self.sessions_per_source,
                proof_timeout: self.proof_timeout,
                idle_timeout: self.idle_timeout,
                keepalive: self.keepalive.unwrap_or_else(|| {
                    let third = self.idle_timeout.map_or(DEFAULT_KEEPALIVE, |i| i / 3);
                    Some(DEFAULT_KEEPALIVE.min(third)).filter(|k| !k.is_zero())
                }),
                connect_probe: self.connect_probe,
                connect_timeout: self.connect_timeout,
                linger: self.linger,
                conv: self.conv,
                batching: self.batching,
                reuse_port: self.reuse_port,
            }),
        })
    }

    /// The range of every option that stands on its own (the ones that
    /// depend on others are checked where they are combined).
    fn check_limits(&self) -> Result<(), ConfigError> {
        range("window(send)", self.snd_wnd, 1, u16::MAX)?;
        range("window(recv)", self.rcv_wnd, 1, u16::MAX)?;
        if let Some((_, interval, _, _)) = self.nodelay {
            range("nodelay(interval)", interval, MIN_INTERVAL, MAX_INTERVAL)?;
        }
        range("fec_max_shards", self.fec_max_shards, 2, 256)?;
        if let Some(d) = self.fec_group_deadline {
            let min = Duration::from_millis(1);
            time_range("fec_group_deadline (ms)", d, min, MAX_FEC_GROUP_DEADLINE)?;
        }
        if let Some(d) = self.min_rto {
            time_range("min_rto (ms)", d, Duration::from_millis(1), MAX_RTO)?;
        }
        if let Some(p) = self.rto_backoff_percent {
            range("rto_backoff_percent", p, 0, MAX_BACKOFF_PERCENT)?;
        }
        range("dscp", self.dscp, 0, MAX_DSCP)?;
        let recv = self.recv_buffer.unwrap_or(0);
        range("socket_buffers(recv)", recv, 0, MAX_SOCKET_BUFFER)?;
        let send = self.send_buffer.unwrap_or(0);
        range("socket_buffers(send)", send, 0, MAX_SOCKET_BUFFER)?;
        range("accept_backlog", self.accept_backlog, 1, MAX_ACCEPT_BACKLOG)?;
        range("max_sessions", self.max_sessions, 1, MAX_SESSIONS)?;
        let (burst, per_second) = self.sessions_per_source;
        let max = MAX_SESSIONS as u32;
        range("sessions_per_source(burst)", burst, 1, max)?;
        range("sessions_per_source(per_second)", per_second, 1, max)?;
        let (min, max) = (MIN_IDLE_TIMEOUT, MAX_DURATION);
        time_range("proof_timeout (ms)", self.proof_timeout, min, max)?;
        if let Some(idle) = self.idle_timeout {
            time_range("idle_timeout (ms)", idle, MIN_IDLE_TIMEOUT, MAX_DURATION)?;
        }
        time_range("linger (ms)", self.linger, Duration::ZERO, MAX_DURATION)?;
        range("reuse_port", self.reuse_port, 1, MAX_REUSE_PORT)?;
        Ok(())
    }
}

/// Whole milliseconds of a duration already checked against its range.
fn ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// `Ok` when `min <= value <= max`, else [`ConfigError::OutOfRange`].
fn range<T>(name: &'static str, value: T, min: T, max: T) -> Result<(), ConfigError>
where
    T: PartialOrd + TryInto<u64>,
{
    if min <= value && value <= max {
        return Ok(());
    }
    let wide = |v: T| v.try_into().unwrap_or(u64::MAX);
    Err(ConfigError::OutOfRange {
        name,
        value: wide(value),
        min: wide(min),
        max: wide(max),
    })
}

/// `Ok` when `min <= value <= max`, else [`ConfigError::OutOfRange`] in
/// whole milliseconds (`name` says "(ms)").
fn time_range(
    name: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    Err(ConfigError::OutOfRange {
        name,
        value: ms(value),
        min: ms(min),
        max: ms(max),
    })
}

/// The backed-off RTO cap in force must not be below the RTO floor in force
/// (explicit, the preset's, or kcp-go's).
fn check_rto_cap(arq: &ArqConfig) -> Result<(), ConfigError> {
    let kcp_go_floor = if arq.nodelay { 30 } else { 100 };
    let floor = arq.min_rto.unwrap_or(kcp_go_floor);
    match arq.max_rto {
        Some(cap) => time_range(
            "max_rto (ms)",
            Duration::from_millis(cap.into()),
            Duration::from_millis(floor.into()),
            MAX_RTO,
        ),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_kcp_go_defaults_match_kcp_go() {
        let c = Config::builder().build().unwrap();
        assert_eq!(c.kcp_mtu(), 1400);
        assert_eq!((c.inner.arq.snd_wnd, c.inner.arq.rcv_wnd), (1024, 1024));
        assert_eq!((c.inner.arq.interval, c.inner.arq.fast_resend), (30, 2));
        assert!(c.inner.arq.no_congestion && !c.inner.arq.nodelay);
        assert_eq!(c.inner.arq.dead_link, u32::MAX);
        assert!(!c.is_stream());
        assert_eq!(c.inner.accept_backlog, 128);
        assert_eq!(c.inner.idle_timeout, Some(DEFAULT_IDLE_TIMEOUT));
        assert_eq!(c.inner.keepalive, Some(DEFAULT_KEEPALIVE));
        assert_eq!(c.inner.connect_timeout, Some(DEFAULT_CONNECT_TIMEOUT));
        assert!(c.inner.connect_probe);
        assert_eq!(c.write_capacity(), 3 * 1024 * 1376);
        assert_eq!(c.inner.sessions_per_source, (1024, 256));
        assert_eq!(c.inner.proof_timeout, Duration::from_secs(10));

        let k = Config::builder().kcp_go_defaults().build().unwrap();
        assert_eq!((k.inner.arq.snd_wnd, k.inner.arq.rcv_wnd), (32, 32));
        assert_eq!((k.inner.arq.interval, k.inner.arq.fast_resend), (100, 0));
        assert!(!k.inner.arq.no_congestion);
        assert_eq!(k.inner.arq.dead_link, u32::MAX);
        assert_eq!((k.inner.idle_timeout, k.inner.keepalive), (None, None));
        assert!(!k.inner.connect_probe);
        assert_eq!(k.write_capacity(), 96 * 1376);
    }

    #[test]
    fn liveness_options_are_optional_and_range_checked() {
        let secs = Duration::from_secs;
        let c = Config::builder().idle_timeout(None).build().unwrap();
        assert_eq!(c.inner.idle_timeout, None);
        assert_eq!(c.inner.keepalive, Some(DEFAULT_KEEPALIVE));
        // A short idle timeout brings the default keepalive down with it.
        let c = Config::builder().idle_timeout(secs(3)).build().unwrap();
        assert_eq!(c.inner.keepalive, Some(secs(1)));
        let c = Config::builder()
            .idle_timeout(Duration::ZERO)
            .keepalive(None)
            .connect_timeout(None)
            .build()
            .unwrap();
        assert_eq!(
            (
                c.inner.idle_timeout,
                c.inner.keepalive,
                c.inner.connect_timeout
            ),
            (None, None, None)
        );
        let err = |b: ConfigBuilder| b.build().unwrap_err();
        for e in [
            err(Config::builder().keepalive(Duration::from_millis(99))),
            err(Config::builder().keepalive(secs(86_401))),
            err(Config::builder().connect_timeout(Duration::from_millis(1))),
            err(Config::builder().idle_timeout(secs(5)).keepalive(secs(5))),
        ] {
            assert!(matches!(e, ConfigError::OutOfRange { .. }), "{e}");
        }
        let e = err(Config::builder().idle_timeout(secs(5)).keepalive(secs(6)));
        assert!(e.to_string().contains("100..=4999"), "{e}");
    }

    #[test]
    fn windows_too_small_for_an_echo_are_refused() {
        // (2 x 2 + 2) x 1376 = 8 KB: a 16 KiB request echoed back deadlocks.
        let e = Config::builder().window(2, 2).build().unwrap_err();
        assert!(
            matches!(e, ConfigError::OutOfRange { value: 8256, .. }),
            "{e}"
        );
        assert!(Config::builder().window(4, 4).build().is_ok());
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
        assert_eq!(mtu(1500, Method::Null, (0, 0)), 1500);
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
            ConfigError::OutOfRange {
                name: "window(send)",
                value: 0,
                min: 1,
                max: 65535
            }
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
            ConfigError::OutOfRange {
                name: "accept_backlog",
                ..
            }
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
            .nodelay(false, 10, 3, false)
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
        for p in Preset::ALL {
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

    /// Every range rule of the builder: the value just outside each bound is
    /// refused with an error naming the option, the value and the range;
    /// the bound itself is accepted.
    #[test]
    fn every_range_rule_refuses_and_names_value_and_range() {
        let b = Config::builder;
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        let fec = || b().fec(10, 3);
        let lowlat = || b().preset(Preset::LowLatency);
        let refused: Vec<(ConfigBuilder, &str, &str)> = vec![
            (b().mtu(9000), "mtu", "mtu = 9000 is outside 25..=1500"),
            (b().mtu(1501), "mtu", "mtu = 1501 is outside 25..=1500"),
            (
                b().window(0, 32),
                "window(send)",
                "window(send) = 0 is outside 1..=65535",
            ),
            (
                b().window(32, 0),
                "window(recv)",
                "window(recv) = 0 is outside 1..=65535",
            ),
            (
                b().nodelay(true, 9, 2, true),
                "nodelay(interval)",
                "nodelay(interval) = 9 is outside 10..=5000",
            ),
            (
                b().nodelay(false, 5001, 0, false),
                "nodelay(interval)",
                "= 5001 is outside 10..=5000",
            ),
            (
                b().fec_max_shards(1),
                "fec_max_shards",
                "fec_max_shards = 1 is outside 2..=256",
            ),
            (
                b().fec_max_shards(257),
                "fec_max_shards",
                "= 257 is outside 2..=256",
            ),
            (
                fec().fec_group_deadline(Duration::ZERO),
                "fec_group_deadline (ms)",
                "fec_group_deadline (ms) = 0 is outside 1..=5000",
            ),
            (
                fec().fec_group_deadline(ms(5001)),
                "fec_group_deadline (ms)",
                "= 5001 is outside 1..=5000",
            ),
            (
                b().fec_group_deadline(ms(10)),
                "fec_group_deadline",
                "fec_group_deadline needs FEC on",
            ),
            (
                lowlat().fec(0, 0).fec_group_deadline(ms(10)),
                "fec_group_deadline",
                "needs FEC on",
            ),
            (
                b().min_rto(Duration::ZERO),
                "min_rto (ms)",
                "min_rto (ms) = 0 is outside 1..=60000",
            ),
            (
                b().min_rto(Duration::from_micros(999)),
                "min_rto (ms)",
                "= 0 is outside 1..=60000",
            ),
            (
                b().min_rto(ms(60_001)),
                "min_rto (ms)",
                "= 60001 is outside 1..=60000",
            ),
            (
                b().rto_backoff_percent(1001),
                "rto_backoff_percent",
                "rto_backoff_percent = 1001 is outside 0..=1000",
            ),
            (
                b().min_rto(ms(50)).max_rto(ms(40)),
                "max_rto (ms)",
                "max_rto (ms) = 40 is outside 50..=60000",
            ),
            (
                b().max_rto(ms(99)),
                "max_rto (ms)",
                "= 99 is outside 100..=60000",
            ),
            (
                b().preset(Preset::Fast3).max_rto(ms(29)),
                "max_rto (ms)",
                "= 29 is outside 30..=60000",
            ),
            (
                lowlat().min_rto(ms(300)),
                "max_rto (ms)",
                "= 200 is outside 300..=60000",
            ),
            (
                b().max_rto(ms(60_001)),
                "max_rto (ms)",
                "= 60001 is outside 100..=60000",
            ),
            (b().dscp(64), "dscp", "dscp = 64 is outside 0..=63"),
            (b().dscp(255), "dscp", "dscp = 255 is outside 0..=63"),
            (
                b().socket_buffers((1 << 30) + 1, 0),
                "socket_buffers(recv)",
                "= 1073741825 is outside 0..=1073741824",
            ),
            (
                b().socket_buffers(0, usize::MAX),
                "socket_buffers(send)",
                "is outside 0..=1073741824",
            ),
            (
                b().accept_backlog(0),
                "accept_backlog",
                "accept_backlog = 0 is outside 1..=65536",
            ),
            (
                b().accept_backlog(65_537),
                "accept_backlog",
                "= 65537 is outside 1..=65536",
            ),
            (
                b().max_sessions(0),
                "max_sessions",
                "max_sessions = 0 is outside 1..=16777216",
            ),
            (
                b().max_sessions((1 << 24) + 1),
                "max_sessions",
                "is outside 1..=16777216",
            ),
            (
                b().sessions_per_source(0, 1),
                "sessions_per_source(burst)",
                "sessions_per_source(burst) = 0 is outside 1..=16777216",
            ),
            (
                b().sessions_per_source(1, 0),
                "sessions_per_source(per_second)",
                "= 0 is outside 1..=16777216",
            ),
            (
                b().sessions_per_source((1 << 24) + 1, 1),
                "sessions_per_source(burst)",
                "= 16777217 is outside 1..=16777216",
            ),
            (
                b().proof_timeout(ms(99)),
                "proof_timeout (ms)",
                "proof_timeout (ms) = 99 is outside 100..=86400000",
            ),
            (
                b().proof_timeout(s(86_401)),
                "proof_timeout (ms)",
                "= 86401000 is outside 100..=86400000",
            ),
            (
                b().idle_timeout(Duration::from_nanos(1)),
                "idle_timeout (ms)",
                "idle_timeout (ms) = 0 is outside 100..=86400000",
            ),
            (
                b().idle_timeout(ms(99)),
                "idle_timeout (ms)",
                "= 99 is outside 100..=86400000",
            ),
            (
                b().idle_timeout(s(86_401)),
                "idle_timeout (ms)",
                "= 86401000 is outside 100..=86400000",
            ),
            (
                b().linger(s(86_401)),
                "linger (ms)",
                "linger (ms) = 86401000 is outside 0..=86400000",
            ),
            (
                b().reuse_port(0),
                "reuse_port",
                "reuse_port = 0 is outside 1..=256",
            ),
            (
                b().reuse_port(257),
                "reuse_port",
                "= 257 is outside 1..=256",
            ),
        ];
        for (builder, name, message) in refused {
            let err = builder.build().unwrap_err();
            let named = match &err {
                ConfigError::OutOfRange { name, .. } | ConfigError::Requires { name, .. } => *name,
                other => panic!("{name}: untyped refusal {other:?}"),
            };
            assert_eq!(named, name, "{err}");
            assert!(err.to_string().contains(message), "{name}: {err}");
        }
        let accepted: Vec<ConfigBuilder> = vec![
            b().mtu(1500),
            b().window(1, 1024),
            b().window(1024, 1),
            b().window(u16::MAX, u16::MAX),
            b().nodelay(true, 10, 2, true),
            b().nodelay(false, 5000, 0, false),
            b().fec_max_shards(2),
            b().fec_max_shards(256),
            fec().fec_group_deadline(ms(1)),
            fec().fec_group_deadline(ms(5000)),
            lowlat().fec_group_deadline(ms(30)),
            b().min_rto(ms(1)),
            b().min_rto(ms(60_000)),
            b().rto_backoff_percent(0),
            b().rto_backoff_percent(1000),
            b().max_rto(ms(100)),
            b().max_rto(ms(60_000)),
            b().preset(Preset::Fast3).max_rto(ms(30)),
            b().min_rto(ms(5)).max_rto(ms(5)),
            lowlat().min_rto(ms(300)).max_rto(ms(300)),
            b().dscp(63),
            b().socket_buffers(1 << 30, 1 << 30),
            b().accept_backlog(1),
            b().accept_backlog(65_536),
            b().max_sessions(1),
            b().max_sessions(1 << 24),
            b().sessions_per_source(1, 1),
            b().sessions_per_source(1 << 24, 1 << 24),
            b().proof_timeout(ms(100)),
            b().proof_timeout(s(86_400)),
            b().idle_timeout(Duration::ZERO),
            b().idle_timeout(ms(100)),
            b().idle_timeout(s(86_400)),
            b().linger(Duration::ZERO),
            b().linger(s(86_400)),
            b().reuse_port(1),
            b().reuse_port(256),
        ];
        for builder in accepted {
            let shown = format!("{builder:?}");
            builder.build().unwrap_or_else(|e| panic!("{e}: {shown}"));
        }
    }

    #[test]
    fn nothing_is_clamped() {
        let ms = Duration::from_millis;
        let c = Config::builder().mtu(1500).build().unwrap();
        assert_eq!((c.inner.mtu, c.kcp_mtu()), (1500, 1500));
        let c = Config::builder()
            .nodelay(true, 5000, 0, false)
            .build()
            .unwrap();
        assert_eq!(c.inner.arq.interval, 5000);
        let c = Config::builder()
            .min_rto(ms(1))
            .max_rto(ms(1))
            .build()
            .unwrap();
        assert_eq!(
            (c.inner.arq.min_rto, c.inner.arq.max_rto),
            (Some(1), Some(1))
        );
        let c = Config::builder().dscp(63).build().unwrap();
        assert_eq!(c.inner.dscp, 63);
    }

    #[test]
    fn default_is_the_builders_default() {
        let a = Config::default();
        let b = Config::builder().build().unwrap();
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
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
