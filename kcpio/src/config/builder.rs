//! [`ConfigBuilder`]: the options, each setter with its default, range and
//! kcp-go or kcptun name. The defaults themselves are in `defaults.rs`;
//! [`build`](ConfigBuilder::build) is in `validate.rs`.

use std::time::Duration;

use super::defaults::KCP_GO_WINDOW;
use super::{Carrier, Key, Preset};
use crate::arq::Congestion;
use crate::crypto::Method;
// What the setters' documentation links to.
#[cfg(doc)]
use super::{
    Config, ConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_KEEPALIVE,
    MIN_WRITE_CAPACITY, PROOF_TIMEOUT,
};

/// Builds a [`Config`]; every setter documents its default.
///
/// # The defaults, and why
///
/// kcpio's defaults are chosen for a user who replaces a `TcpStream` on a
/// long or lossy path (the repository's `lab/results/SUMMARY.md` has the
/// measurements behind them, dated, with the machine):
///
/// - ARQ timing [`Preset::Fast`] (kcptun's `fast`, kcptun's own default:
///   30 ms flush interval, fast retransmit after 2 skipping ACKs, no
///   congestion window). kcp-go's [`Preset::Default`] (100 ms, no fast
///   retransmit, a congestion window that restarts at one segment after
///   every loss) collapses on loss. [`Preset::Fast3`] recovers faster on a
///   lossy path, but its 30 ms RTO floor resends spuriously on a loaded
///   host and it wakes three times as often per busy session: pick it for
///   latency on a path you know.
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
    pub(super) preset: Preset,
    pub(super) mtu: usize,
    pub(super) snd_wnd: u16,
    pub(super) rcv_wnd: u16,
    pub(super) stream: bool,
    pub(super) method: Method,
    pub(super) key: Key,
    pub(super) fec: Option<(usize, usize)>,
    pub(super) fec_group_deadline: Option<Duration>,
    pub(super) fec_max_shards: usize,
    pub(super) datagram_fec: bool,
    pub(super) adaptive_fec: bool,
    pub(super) datagram_fec_deadline: Duration,
    pub(super) datagram_fec_residual_ppm: u32,
    pub(super) nodelay: Option<(bool, u32, u32, bool)>,
    pub(super) write_delay: bool,
    pub(super) ack_nodelay: Option<bool>,
    pub(super) min_rto: Option<Duration>,
    pub(super) rto_backoff_percent: Option<u32>,
    pub(super) max_rto: Option<Duration>,
    pub(super) tail_probe: Option<bool>,
    pub(super) ack_repeat: bool,
    pub(super) congestion: Option<Congestion>,
    pub(super) max_window: Option<u16>,
    pub(super) rate_limit: u64,
    pub(super) dscp: u8,
    pub(super) recv_buffer: Option<usize>,
    pub(super) send_buffer: Option<usize>,
    pub(super) accept_backlog: usize,
    pub(super) max_sessions: usize,
    pub(super) sessions_per_source: (u32, u32),
    pub(super) proof_timeout: Duration,
    pub(super) idle_timeout: Option<Duration>,
    /// `None`: the default (derived from the idle timeout).
    pub(super) keepalive: Option<Option<Duration>>,
    pub(super) connect_probe: bool,
    pub(super) connect_timeout: Option<Duration>,
    pub(super) icmp_reset: bool,
    /// `None`: the default (on where the cipher authenticates).
    pub(super) migration: Option<bool>,
    pub(super) dead_link: u32,
    pub(super) linger: Duration,
    pub(super) conv: Option<u32>,
    pub(super) batching: bool,
    pub(super) carrier: Carrier,
    /// `None`: one socket per available core.
    pub(super) reuse_port: Option<usize>,
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
        self.snd_wnd = KCP_GO_WINDOW;
        self.rcv_wnd = KCP_GO_WINDOW;
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

    /// **kcpio-only**: FEC-protected unreliable datagrams between kcpio
    /// ends (see [`Conn`](crate::Conn)'s "Unreliable datagrams"). Off by
    /// default. On, a client offers the extension on its window probes
    /// (the connect probe; without one, a window probe alone right after
    /// its first datagram), and a listener's session answers in kind only
    /// after hearing the offer; until both sides spoke, and always with a
    /// kcp-go or kcptun peer, datagrams leave as kcp-go OOB packets and the
    /// wire is exactly kcp-go's. On also allows datagrams without stream
    /// FEC ([`fec`](Self::fec)).
    ///
    /// # Errors
    ///
    /// On, [`build`](Self::build) fails with [`ConfigError::OutOfRange`]
    /// when the [`mtu`](Self::mtu) leaves a packet under 50 bytes of
    /// plaintext, the extension's loss report (an mtu under 78 with
    /// `aes-128-gcm`).
    #[must_use]
    pub fn datagram_fec(mut self, on: bool) -> Self {
        self.datagram_fec = on;
        self
    }

    /// **kcpio-only**: adaptive stream FEC between kcpio ends. Off by
    /// default; it needs [`fec`](Self::fec), whose shape then serves kcp-go
    /// and kcptun peers (always) and a kcpio peer until both sides offered.
    /// On, a client offers it on its window probes and a listener's session
    /// answers in kind only after hearing the offer (as for
    /// [`datagram_fec`](Self::datagram_fec)); once both spoke, each group is
    /// the data shards sent within the group deadline
    /// ([`fec_group_deadline`](Self::fec_group_deadline), 10 ms when unset;
    /// at most 32) and its parity the fewest shards that meet a residual
    /// loss of 10^-4 on the loss the receiver reports (none on a path that
    /// shows none, nor on one whose round trip is within twice the
    /// deadline; at most half the group's data), the ARQ repairing the
    /// rest. A kcp-go or kcptun peer sees exactly the fixed shape's wire.
    #[must_use]
    pub fn adaptive_fec(mut self, on: bool) -> Self {
        self.adaptive_fec = on;
        self
    }

    /// **kcpio-only**: the datagram extension's one latency knob, the
    /// longest a group of data shards stays open before its parity leaves
    /// (so about the largest delay a rebuilt datagram gets beyond the
    /// path's). Groups hold as many shards as arrive in this time (at most
    /// 32); a datagram stream slower than one per half of it gets parity
    /// after every datagram. Default: 15 ms
    /// ([`DEFAULT_DATAGRAM_FEC_DEADLINE`](crate::DEFAULT_DATAGRAM_FEC_DEADLINE)).
    ///
    /// Range: 1 ms..=1 s.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// the range.
    #[must_use]
    pub fn datagram_fec_deadline(mut self, deadline: Duration) -> Self {
        self.datagram_fec_deadline = deadline;
        self
    }

    /// **kcpio-only**: the residual loss the datagram extension aims at
    /// after FEC, in parts per million of datagrams; the sender picks the
    /// fewest parity shards that meet it on the loss (and loss bursts) the
    /// receiver reports. Default: 100 (10^-4,
    /// [`DEFAULT_DATAGRAM_FEC_RESIDUAL_PPM`](crate::DEFAULT_DATAGRAM_FEC_RESIDUAL_PPM)).
    ///
    /// Range: 1..=100,000.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// the range.
    #[must_use]
    pub fn datagram_fec_residual_ppm(mut self, ppm: u32) -> Self {
        self.datagram_fec_residual_ppm = ppm;
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
    /// when the peer's data in flight reaches three quarters of it (held
    /// behind a hole, or, once this side has a round-trip sample, arriving
    /// within a round trip beyond where its left edge stood), the send
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
    /// is smaller, because one peer's full window overflows Linux's 208 KiB
    /// default in a burst and every drop costs a retransmission. A
    /// listener's sockets share 16 MiB instead (at least 4 MiB each: 16 MiB
    /// on one socket, 8 MiB on each of two, 4 MiB from four on): its
    /// sessions' windows share the buffer (16 senders with the default
    /// 1,024-segment windows may have about 23 MB in flight), and while its
    /// driver waits for a busy core their bursts queue there. On loopback,
    /// one 4 MiB socket lost 0.04–2.6% of such senders' datagrams, one of
    /// 16 MiB none (figures in the repository's `lab/results/SHARDS.md`).
    /// When the OS grants less than asked (`net.core.rmem_max`), kcpio asks
    /// past the cap with `SO_RCVBUFFORCE`, which a process with
    /// `CAP_NET_ADMIN` is granted; otherwise the capped size stays. kcptun
    /// uses 4 MiB each.
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

    /// Sessions whose peers proved they receive that a listener holds for
    /// [`accept`](crate::KcpListener::accept); while this many wait, a new
    /// peer is refused (counted, its datagram dropped). A session admitted
    /// before, whose peer proves later, still joins them (within
    /// [`max_sessions`](Self::max_sessions)); sessions not yet proven wait
    /// apart, under `max_sessions` alone. Default: 128 (kcp-go's
    /// `acceptBacklog`).
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

    /// Sessions a listener holds at once (accepted, pending or closing),
    /// over all its [`reuse_port`](Self::reuse_port) sockets; a new peer
    /// beyond this is refused and counted. Default: 4096.
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
    /// data first); with [`datagram_fec`](Self::datagram_fec) or
    /// [`adaptive_fec`](Self::adaptive_fec) on, the offer follows that
    /// first datagram in a window probe of its own. Default: on.
    #[must_use]
    pub fn connect_probe(mut self, on: bool) -> Self {
        self.connect_probe = on;
        self
    }

    /// Whether an established client session fails with `ConnectionReset`
    /// ([`SessionError::PortUnreachable`](crate::SessionError::PortUnreachable))
    /// when its peer's host keeps reporting the port unreachable (ICMP),
    /// instead of retransmitting until the idle timeout (kcp-go's
    /// behaviour). Default: on.
    ///
    /// One report never fails a session: it starts a streak, and the
    /// session sends a window probe at once and every 250 ms while the
    /// streak lasts. Any valid datagram ends the streak. The session fails
    /// at the third report once the streak is at least
    /// [`UNREACHABLE_SPAN`](crate::conn::UNREACHABLE_SPAN) or the session's
    /// RTO old, whichever is longer (capped at 1 s): a live peer has
    /// answered a probe by then. A killed server is noticed within about
    /// 300 ms of the first send that reaches its host.
    ///
    /// The trade-off: ICMP is not authenticated. An attacker who can send
    /// ICMP to the client and knows both addresses and ports (on the path,
    /// or guessing them) can end a session whose peer answers more slowly
    /// than the streak lasts, as it can a TCP connection with a forged RST.
    /// Turn it off where that matters more than noticing a dead peer fast;
    /// the idle timeout still ends the session. Only a client socket
    /// (connected to its peer) receives these reports.
    #[must_use]
    pub fn icmp_reset(mut self, on: bool) -> Self {
        self.icmp_reset = on;
        self
    }

    /// Whether a listener moves a session to the new address of its peer
    /// (NAT rebinding, a phone leaving Wi-Fi for mobile data): an
    /// authentic datagram of the session from another address that is
    /// newer than anything the session received makes that address a
    /// candidate; the listener sends it a window probe (at most 3 times
    /// the bytes it received from there) and moves the session when the
    /// answer, an authentic window update (WINS), comes back from there. A
    /// kcp-go or kcptun client answers such a probe, so it needs nothing
    /// new. Same IP address, new port: the congestion and RTT state stays;
    /// a new IP address resets the path's RTT estimate and congestion
    /// window. Replayed datagrams, and copies of the client's datagrams sent
    /// from elsewhere, move nothing: a kcpio client binds its answer to the
    /// probe (a window update stamped with its clock that echoes the
    /// probe's tag); a kcp-go client's answer counts only once its old
    /// address fell silent.
    ///
    /// A kcp-go client that sends nothing fresh after its address changed
    /// (everything it sent was acknowledged and the session's window is
    /// closed, so it only probes the window, every 0.5 s and then less
    /// often: a probe carries nothing a replay could not) is nudged: once
    /// its old address has been silent for 100 ms, such a probe's address
    /// gets a PUSH without data for a segment the client holds (within the
    /// same 3 times budget), which the client acknowledges with the nudge's
    /// own `sn` and `ts`; that acknowledgement counts as fresh, and the
    /// address is validated as above. A kcp-go client that only downloads
    /// sends nothing at all once its data goes to its old address (kcp-go
    /// has no timer that sends without a reason): nothing tells the
    /// listener where it went until it next writes (a kcptun client's smux
    /// keepalive, every 10 s by default, does).
    ///
    /// Only a session whose peer proved it receives (it acknowledged the
    /// listener's data or answered its window probe: the first round trip)
    /// moves: a client whose address changes before that is refused at the
    /// new one, and its session fails unproven
    /// ([`proof_timeout`](Self::proof_timeout)).
    ///
    /// On a client, it turns on the quiet probe: when no data came for
    /// 400 ms, the client sends a window probe stamped with its clock (again
    /// after 800 ms and 1.6 s while nothing is heard), so a client that only
    /// downloads and whose address changed is found again without writing.
    /// A kcp-go listener answers it as any window probe.
    ///
    /// A client restarted with a fixed [`conv`](Self::conv) from a new
    /// address, while its old session is alive on the listener, is refused
    /// until that session times out ([`idle_timeout`](Self::idle_timeout)):
    /// its openers are stale for the old session, and so is the rest of
    /// what it sends once the old peer acknowledged more than two windows
    /// (its `una` starts at 0). It is not handed the old session, which it
    /// cannot prove it owns; but a session younger than that cannot tell it
    /// from its own peer, and may move to it (both ends then stall until
    /// the idle timeout). Let clients draw their conv (the default) or turn
    /// migration off where clients restart with a fixed one.
    ///
    /// Default: on with `aes-128-gcm`, the one cipher whose datagrams an
    /// attacker without the key can neither forge nor bend; off otherwise.
    /// With the other ciphers an attacker who never held the key can alter
    /// a captured datagram (CFB/CTR-style ciphers and `xor` with a CRC32
    /// that is not a MAC, or no integrity at all with `none` and `null`)
    /// so that it looks newer, and point the session at an address of its
    /// choice after one forged answer. Nothing changes on the wire toward
    /// peers that never change their address.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::Requires`] when
    /// turned on with another cipher.
    #[must_use]
    pub fn migration(mut self, on: bool) -> Self {
        self.migration = Some(on);
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

    /// What carries the datagrams: [`Carrier::Udp`] (the default) or
    /// [`Carrier::FakeTcp`], each datagram as one TCP segment of a flow
    /// the kernel opened with a real handshake, wire-compatible with
    /// `kcptun --tcp` (xtaci/tcpraw), for networks that drop or throttle UDP.
    ///
    /// A fake-TCP segment's header is 24 bytes longer than UDP's, so the
    /// datagram (and the KCP mtu) shrink by 24 bytes: with the default
    /// [`mtu`](Self::mtu) of 1400 the IP packets have the same size in
    /// both carriers. Fake TCP is Linux-only (IPv4 and IPv6) and needs
    /// `CAP_NET_RAW` and `CAP_NET_ADMIN` (root): see [`Carrier::FakeTcp`].
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::MtuTooSmall`] when
    /// the mtu less 24 leaves too little for KCP. Binding and connecting
    /// report the missing privileges or platform.
    #[must_use]
    pub fn carrier(mut self, carrier: Carrier) -> Self {
        self.carrier = carrier;
        self
    }

    /// Listener sockets (shards): [`KcpListener::bind`] binds `n` UDP
    /// sockets to the same address with `SO_REUSEPORT`, each run by its own
    /// driver task with its own session table, all feeding one accept
    /// backlog. The kernel spreads peers over the sockets by a hash of their
    /// address (one peer always reaches the same socket), so a busy server
    /// uses up to `n` cores; give the runtime that many worker threads.
    /// With [`Carrier::FakeTcp`] the `n` sockets are raw sockets, each
    /// filtered in the kernel (classic BPF) to a hash share of the peers'
    /// addresses and ports, behind one kernel listening socket whose
    /// handshakes go to the socket that owns the peer.
    ///
    /// Default: one socket per core the process may use
    /// (`std::thread::available_parallelism`, at most 256) where
    /// `SO_REUSEPORT` exists; one socket elsewhere (non-Unix), and one with
    /// [`Carrier::FakeTcp`] unless set. Ignored by clients.
    ///
    /// The shards share no lock on the path of a session's datagrams. What
    /// holds for the listener as a whole holds across them:
    /// [`max_sessions`](Self::max_sessions) counts every shard's sessions
    /// (one atomic counter, reserved before a session is made),
    /// [`accept_backlog`](Self::accept_backlog) is one backlog, and the
    /// per-source limit ([`sessions_per_source`](Self::sessions_per_source))
    /// and the replay memory are one store for the listener, consulted only
    /// for a would-be new session. A migrating peer
    /// ([`migration`](Self::migration)) whose new address hashes to another
    /// shard is followed there: that shard hands the peer's datagrams to the
    /// session's shard until the move is validated, then the session moves
    /// to the shard that receives its new address. [`KcpListener::stats`]
    /// sums the shards; [`KcpListener::stats_per_socket`] shows each.
    ///
    /// Range: 1..=256.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`] outside
    /// the range.
    ///
    /// [`KcpListener::bind`]: crate::KcpListener::bind
    /// [`KcpListener::stats`]: crate::KcpListener::stats
    /// [`KcpListener::stats_per_socket`]: crate::KcpListener::stats_per_socket
    #[must_use]
    pub fn reuse_port(mut self, n: usize) -> Self {
        self.reuse_port = Some(n);
        self
    }
}
