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
//!
//! One file per concern: [`Config`] and its validated values here, the
//! options in `builder.rs`, every default and range in `defaults.rs`, the
//! checks and derivation in `validate.rs`, [`Preset`] in `preset.rs`,
//! [`Key`] in `key.rs`, [`ConfigError`] in `error.rs`. An option is added
//! with its default and range in `defaults.rs`, its setter in `builder.rs`,
//! its check in `validate.rs` and, when the session needs it, a field of
//! [`ConfigInner`] (and its line in `Config`'s `Debug`) here.
//!
//! This module depends only on the leaves' own configuration (`arq`,
//! `fec`, `crypto`); the layers above (`conn`, the driver) take their
//! defaults from here.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::arq::ArqConfig;
use crate::crypto::{Method, PacketCrypto};
use crate::fec;

mod builder;
mod carrier;
mod defaults;
mod error;
mod key;
mod preset;
mod validate;

pub use builder::ConfigBuilder;
pub use carrier::Carrier;
pub(crate) use defaults::{
    DATAGRAM_FEC_MIN_PLAIN, DEFAULT_RECV_BUFFER, DEFAULT_SOURCE_BURST, DEFAULT_SOURCE_RATE,
    LISTENER_RECV_BUFFER,
};
pub use defaults::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_DATAGRAM_FEC_DEADLINE, DEFAULT_DATAGRAM_FEC_RESIDUAL_PPM,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_KEEPALIVE, MIN_WRITE_CAPACITY, PROOF_TIMEOUT,
};
pub use error::ConfigError;
pub use key::Key;
pub use preset::Preset;

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
    /// The FEC datagram extension: on, its group deadline, residual target.
    pub(crate) datagram_fec: bool,
    pub(crate) adaptive_fec: bool,
    pub(crate) datagram_fec_deadline: Duration,
    pub(crate) datagram_fec_residual: f64,
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
    /// Repeated ICMP port-unreachable reports fail an established client session.
    pub(crate) icmp_reset: bool,
    /// A listener moves a session to its peer's validated new address.
    pub(crate) migration: bool,
    pub(crate) linger: Duration,
    pub(crate) conv: Option<u32>,
    pub(crate) batching: bool,
    pub(crate) carrier: Carrier,
    /// Listener shards; `None`: one per available core.
    pub(crate) reuse_port: Option<usize>,
}

impl ConfigInner {
    /// The listener's `SO_REUSEPORT` sockets: the configured count, or one
    /// per core the process may use (fake TCP: one unless configured);
    /// one where `SO_REUSEPORT` is missing.
    pub(crate) fn listener_shards(&self) -> usize {
        if !cfg!(all(
            unix,
            not(any(target_os = "solaris", target_os = "illumos"))
        )) {
            return 1;
        }
        // Fake TCP shards (raw sockets, each BPF-filtered to a share of
        // the peers) are opt-in: one unless `reuse_port` says otherwise.
        let default = || match self.carrier {
            Carrier::FakeTcp => 1,
            Carrier::Udp => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        self.reuse_port
            .unwrap_or_else(default)
            .clamp(1, defaults::MAX_REUSE_PORT)
    }

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
            .field("datagram_fec", &c.datagram_fec)
            .field("adaptive_fec", &c.adaptive_fec)
            .field("datagram_fec_deadline", &c.datagram_fec_deadline)
            .field("idle_timeout", &c.idle_timeout)
            .field("keepalive", &c.keepalive)
            .field("connect_probe", &c.connect_probe)
            .field("connect_timeout", &c.connect_timeout)
            .field("icmp_reset", &c.icmp_reset)
            .field("migration", &c.migration)
            .field("linger", &c.linger)
            .field("conv", &c.conv)
            .field("batching", &c.batching)
            .field("carrier", &c.carrier)
            .field("reuse_port", &c.reuse_port)
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    /// The configuration of [`Config::builder`]`().build()`: every option at
    /// its documented default (no cipher: [`crate::Method::Null`]).
    /// Assembled without the builder's checks, which the defaults pass
    /// (`default_is_the_builders_default`), so it cannot fail.
    fn default() -> Self {
        ConfigBuilder::default().assemble(PacketCrypto::null())
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
        validate::write_capacity(&self.inner.arq)
    }

    /// Whether the session is a byte stream that merges small writes (true)
    /// or keeps message boundaries (false).
    #[must_use]
    pub fn is_stream(&self) -> bool {
        self.inner.arq.stream
    }

    /// Whether sessions follow their peer to a new address
    /// ([`ConfigBuilder::migration`](crate::ConfigBuilder::migration); its
    /// default depends on the cipher).
    #[must_use]
    pub fn migration(&self) -> bool {
        self.inner.migration
    }
}
#[cfg(test)]
mod tests;
