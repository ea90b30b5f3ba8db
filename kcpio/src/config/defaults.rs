//! Every default and every range of [`ConfigBuilder`]'s options, in one
//! place.
//!
//! [`ConfigBuilder::default`] below is the one list of kcpio's defaults;
//! the constants name the ones the documentation or a lower layer refers
//! to. Ranges are checked by `validate.rs` against the constants here; a
//! leaf's own limits (the ARQ's flush interval, the FEC decoder's shard
//! count, the largest datagram) stay defined in the leaf, which enforces
//! them too, and are imported here under their own names.
//!
//! An option's default and range live here even when a lower layer
//! consumes them (the proof timeout in `conn`, the per-source rate in the
//! driver's session table), so that layer imports them from `config` and
//! `config` imports nothing from it. What a [`Preset`] sets is the preset's
//! definition, in `preset.rs`.

use std::time::Duration;

use super::{Carrier, ConfigBuilder, Key, Preset};
use crate::crypto::Method;

// The leaves' own defaults and limits that options here take or check
// against, defined (and enforced) in the leaf that needs them.
pub(super) use crate::arq::config::{MAX_INTERVAL, MIN_INTERVAL};
pub(super) use crate::crypto::MAX_DATAGRAM;
pub(super) use crate::fec::{DEFAULT_MAX_SHARDS, MAX_SHARDS};

// ---- Defaults -------------------------------------------------------------

/// [`ConfigBuilder::idle_timeout`]'s default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// [`ConfigBuilder::keepalive`]'s default.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(10);
/// [`ConfigBuilder::connect_timeout`]'s default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// [`ConfigBuilder::datagram_fec_deadline`]'s default: a rebuilt
/// datagram is at most about this late; at 800 datagrams/s groups of 12.
pub const DEFAULT_DATAGRAM_FEC_DEADLINE: Duration = Duration::from_millis(15);
/// [`ConfigBuilder::datagram_fec_residual_ppm`]'s default: 10^-4.
pub const DEFAULT_DATAGRAM_FEC_RESIDUAL_PPM: u32 = 100;
/// The plaintext a packet must leave for the datagram extension's longest
/// loss report (its layout is `conn::dgram_fec`'s, which checks this at
/// compile time): validation refuses an mtu with less under
/// `datagram_fec`.
pub(crate) const DATAGRAM_FEC_MIN_PLAIN: usize = 50;
/// [`ConfigBuilder::mtu`]'s default, kcp-go's.
pub(super) const DEFAULT_MTU: usize = 1400;
/// [`ConfigBuilder::window`]'s default, send and receive: a 100 Mbit/s ×
/// 100 ms path's bandwidth-delay product at the default mtu.
pub(super) const DEFAULT_WINDOW: u16 = 1024;
/// kcp-go's send and receive windows
/// ([`ConfigBuilder::kcp_go_defaults`]).
pub(super) const KCP_GO_WINDOW: u16 = 32;
/// [`ConfigBuilder::accept_backlog`]'s default (kcp-go's `acceptBacklog`).
pub(super) const DEFAULT_ACCEPT_BACKLOG: usize = 128;
/// [`ConfigBuilder::max_sessions`]'s default.
pub(super) const DEFAULT_MAX_SESSIONS: usize = 4096;
/// [`ConfigBuilder::linger`]'s default.
pub(super) const DEFAULT_LINGER: Duration = Duration::from_secs(5);
/// How long a peer has to prove it receives (see
/// [`Conn::require_proof`](crate::Conn::require_proof)) before the session
/// fails with [`SessionError::DeadLink`](crate::SessionError::DeadLink),
/// unless configured otherwise: the default of
/// [`ConfigBuilder::proof_timeout`].
pub const PROOF_TIMEOUT: Duration = Duration::from_secs(10);
/// Sessions one source IP address may open in a burst (a host running a
/// thousand clients at once, as a test or a NAT may, still gets in)...
/// (the default of [`ConfigBuilder::sessions_per_source`], and of the
/// driver's session table)
pub(crate) const DEFAULT_SOURCE_BURST: u32 = 1024;
/// ...and per second after that (a token bucket per source IP address): a
/// single host flooding openers from every port it has creates no more.
pub(crate) const DEFAULT_SOURCE_RATE: u32 = 256;
/// The UDP receive buffer the driver asks for when
/// [`socket_buffers`](super::ConfigBuilder::socket_buffers) leaves it to
/// kcpio (best effort: raised to this when the system default is smaller;
/// the kernel caps it at `net.core.rmem_max`). kcptun uses 4 MiB too.
pub(crate) const DEFAULT_RECV_BUFFER: usize = 4 << 20;
/// The receive buffer a listener asks for in all, split over its
/// [`reuse_port`](super::ConfigBuilder::reuse_port) sockets (never less than
/// [`DEFAULT_RECV_BUFFER`] each) when
/// [`socket_buffers`](super::ConfigBuilder::socket_buffers) leaves it to
/// kcpio: its sessions' windows share it (16 senders' 1,024-segment
/// windows are about 23 MB), and one socket of 4 MiB lost up to 2.6% of
/// their datagrams on loopback while its driver waited for a core (none at
/// 16 MiB; `lab/results/SHARDS.md`).
pub(crate) const LISTENER_RECV_BUFFER: usize = 16 << 20;

impl Default for ConfigBuilder {
    /// kcpio's defaults, as each setter documents them (see
    /// [`ConfigBuilder`] for why).
    fn default() -> Self {
        Self {
            preset: Preset::Fast,
            mtu: DEFAULT_MTU,
            snd_wnd: DEFAULT_WINDOW,
            rcv_wnd: DEFAULT_WINDOW,
            stream: false,
            method: Method::Null,
            key: Key::raw(Vec::new()),
            fec: None,
            fec_group_deadline: None,
            fec_max_shards: DEFAULT_MAX_SHARDS,
            datagram_fec: false,
            adaptive_fec: false,
            datagram_fec_deadline: DEFAULT_DATAGRAM_FEC_DEADLINE,
            datagram_fec_residual_ppm: DEFAULT_DATAGRAM_FEC_RESIDUAL_PPM,
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
            accept_backlog: DEFAULT_ACCEPT_BACKLOG,
            max_sessions: DEFAULT_MAX_SESSIONS,
            sessions_per_source: (DEFAULT_SOURCE_BURST, DEFAULT_SOURCE_RATE),
            proof_timeout: PROOF_TIMEOUT,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            keepalive: None,
            connect_probe: true,
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            icmp_reset: true,
            migration: None,
            dead_link: 0,
            linger: DEFAULT_LINGER,
            conv: None,
            batching: true,
            carrier: Carrier::Udp,
            reuse_port: None,
        }
    }
}

// ---- Ranges ---------------------------------------------------------------

/// Smallest KCP mtu accepted: one segment header plus at least one byte.
pub(super) const MIN_KCP_MTU: usize = 25;
/// Bytes one side must be able to write before the peer reads, at least
/// (see [`Config::write_capacity`](super::Config::write_capacity)): a
/// request of this size answered by an echo that writes back as it reads
/// cannot deadlock.
pub const MIN_WRITE_CAPACITY: usize = 16 * 1024;
/// The range of [`ConfigBuilder::keepalive`] and
/// [`ConfigBuilder::connect_timeout`] when on.
pub(super) const LIFECYCLE_RANGE_MS: (u64, u64) = (100, 86_400_000);
/// The longest time any duration option accepts (a day): far beyond any
/// useful setting, and clear of arithmetic overflow.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);
/// The shortest idle timeout accepted: KCP's default flush interval and
/// minimum RTO. A shorter one ends live sessions between two ordinary
/// packets.
pub(super) const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(100);
/// The shortest RTO floor ([`ConfigBuilder::min_rto`]) accepted.
pub(super) const MIN_RTO: Duration = Duration::from_millis(1);
/// The longest retransmission timeout, floor or cap (KCP's `IKCP_RTO_MAX`).
pub(super) const MAX_RTO: Duration = Duration::from_millis(60_000);
/// Largest `rto_backoff_percent`: a timeout grows at most elevenfold per
/// expiry.
pub(super) const MAX_BACKOFF_PERCENT: u32 = 1000;
/// Largest FEC group sent, data + parity shards.
pub(super) const MAX_FEC_GROUP: usize = 255;
/// The shortest FEC group deadline.
pub(super) const MIN_FEC_GROUP_DEADLINE: Duration = Duration::from_millis(1);
/// The longest FEC group deadline.
pub(super) const MAX_FEC_GROUP_DEADLINE: Duration = Duration::from_secs(5);
/// Smallest [`ConfigBuilder::fec_max_shards`]: one data and one parity
/// shard. The largest is the decoder's [`MAX_SHARDS`].
pub(super) const MIN_FEC_MAX_SHARDS: usize = 2;
/// The range of [`ConfigBuilder::datagram_fec_deadline`].
pub(super) const DATAGRAM_FEC_DEADLINE_RANGE: (Duration, Duration) =
    (Duration::from_millis(1), Duration::from_secs(1));
/// The largest [`ConfigBuilder::datagram_fec_residual_ppm`].
pub(super) const MAX_DATAGRAM_FEC_RESIDUAL_PPM: u32 = 100_000;
/// Largest DSCP code point (6 bits).
pub(super) const MAX_DSCP: u8 = 63;
/// Largest socket buffer asked for (1 GiB; the kernel caps it lower).
pub(super) const MAX_SOCKET_BUFFER: usize = 1 << 30;
/// Largest accept backlog.
pub(super) const MAX_ACCEPT_BACKLOG: usize = 1 << 16;
/// Largest session cap of one listener socket (2^24); also the largest
/// per-source burst and rate.
pub(super) const MAX_SESSIONS: usize = 1 << 24;
/// Largest `reuse_port` group.
pub(super) const MAX_REUSE_PORT: usize = 256;
