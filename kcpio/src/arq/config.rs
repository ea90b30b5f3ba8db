//! ARQ parameters: kcp-go's defaults and the kcptun presets.

use core::fmt;

use super::cc::Congestion;
use super::segment::HEADER_LEN;

/// Smallest accepted flush interval in ms (kcp-go `NoDelay` clamps to it).
pub const MIN_INTERVAL: u32 = 10;
/// Largest accepted flush interval in ms (kcp-go `NoDelay` clamps to it).
pub const MAX_INTERVAL: u32 = 5000;
/// [`Preset::LowLatency`]: RTO floor in ms (kcpio-only).
const LOWLAT_MIN_RTO_MS: u32 = 20;
/// [`Preset::LowLatency`]: RTO growth per timeout, percent of the RTO (kcpio-only).
const LOWLAT_BACKOFF_PERCENT: u32 = 25;
/// [`Preset::LowLatency`]: cap of a segment's backed-off RTO in ms (kcpio-only).
const LOWLAT_MAX_RTO_MS: u32 = 200;
/// [`Preset::LowLatency`]: FEC data and parity shards.
const LOWLAT_FEC: (usize, usize) = (2, 2);
/// [`Preset::LowLatency`]: FEC group deadline in ms (kcpio-only).
const LOWLAT_FEC_DEADLINE_MS: u64 = 10;
/// Largest KCP mtu accepted: the largest UDP payload over IPv4.
pub const MAX_MTU: usize = 65_507;

/// The ARQ parameters, plain data. `Default` gives kcp-go's `NewKCP` values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArqConfig {
    /// KCP mtu: the largest KCP packet, after the session deducted its crypto
    /// and FEC headers. Must exceed 24 (kcp-go v5.6.72; C needs 50).
    /// Default 1400.
    pub mtu: usize,
    /// Send window in segments. Default 32.
    pub snd_wnd: u16,
    /// Receive window in segments. Default 32 (kcp-go: no floor; C floors at 128).
    pub rcv_wnd: u16,
    /// kcp-go `nodelay`: minimum RTO 30 ms instead of 100 ms, and the gentler
    /// RTO back-off (`+rx_rto/2` instead of `+rx_rto`). Default false.
    pub nodelay: bool,
    /// Flush period in ms, clamped to [10, 5000] as kcp-go's `NoDelay` does. Default 100.
    pub interval: u32,
    /// Fast-retransmit threshold in skipping ACKs, 0 = off (early retransmit
    /// stays on regardless, as in kcp-go). Default 0.
    pub fast_resend: u32,
    /// `nc`: no congestion window (window = min(snd_wnd, rmt_wnd)). Default false.
    pub no_congestion: bool,
    /// Stream mode: [`Kcp::send`](super::Kcp::send) appends to the last segment
    /// still waiting for a sequence number. Default false.
    pub stream: bool,
    /// kcp-go `SetWriteDelay`: when false, every `send` flushes at once; when
    /// true, queued data waits for the periodic flush unless the send buffer
    /// holds at least `snd_wnd` segments. Default false.
    pub write_delay: bool,
    /// kcp-go `SetACKNoDelay`: acknowledge every input at once instead of at
    /// the next periodic flush. Default false.
    pub ack_nodelay: bool,
    /// Transmissions of one segment after which [`Kcp::is_dead`](super::Kcp::is_dead)
    /// turns true. Default 20.
    pub dead_link: u32,
    /// **kcpio-only**: floor of the retransmission timeout in ms,
    /// instead of kcp-go's 30 (with `nodelay`) or 100. Values below 1 are
    /// taken as 1. Only changes when this side retransmits, so it is safe
    /// with a kcp-go peer. Default `None` (kcp-go's floors).
    pub min_rto: Option<u32>,
    /// **kcpio-only**: what a segment's RTO grows by each time it
    /// times out, in percent of the current RTO estimate: 100 is kcp-go
    /// without `nodelay` (waits R, 2R, 3R, ...), 50 kcp-go with it (R, 1.5R,
    /// 2R, ...), 0 keeps the wait at R. Default `None` (kcp-go's rule).
    pub backoff_percent: Option<u32>,
    /// **kcpio-only**: cap in ms of one segment's backed-off RTO
    /// (kcp-go's is uncapped). Default `None`.
    pub max_rto: Option<u32>,
    /// **kcpio-only**: tail-loss probe. A segment sent with nothing
    /// behind it can only be recovered by its RTO, since no later ACK can
    /// mark it skipped; with this on, its first retransmission comes after
    /// `max(srtt * 3 / 2, srtt + interval)` when that is sooner than the RTO,
    /// and that probe does not back the RTO off (TCP's TLP, RFC 8985).
    /// Retransmissions only, so a kcp-go peer cannot tell. Default false.
    pub tail_probe: bool,
    /// **kcpio-only**: the congestion controller. `None` (the default)
    /// follows `no_congestion` as kcp-go does: [`Congestion::None`] when it
    /// is true, [`Congestion::Kcp`] when false; `Some` overrides it. Sender
    /// side only, so it is safe with a kcp-go peer.
    pub congestion: Option<Congestion>,
    /// **kcpio-only**: windows that size themselves. When set, `snd_wnd` and
    /// `rcv_wnd` are where the windows start, and each doubles, up to this
    /// many segments, when the path asks for more: the receive window when
    /// the peer's data in flight reaches three quarters of it (the path's
    /// bandwidth-delay product plus what loss recovery holds exceeds it),
    /// the send window when it, not the peer's window or the congestion
    /// controller, is what holds queued data back. A kcp-go peer honours
    /// the larger window it is advertised. Memory grows only as the windows
    /// do and is bounded by this value as by `snd_wnd`/`rcv_wnd`. Default
    /// `None` (fixed windows, as kcp-go).
    pub max_window: Option<u16>,
    /// **kcpio-only**: every acknowledgement is sent twice, in the flush
    /// that first carries it and again, ahead of the new ones, in the next
    /// flush that carries any, unless the cumulative `una` covers it by
    /// then. KCP acknowledges each segment once and has no selective
    /// acknowledgement ranges, so a lost ACK packet (with a flush's worth
    /// of ACKs in it) makes the sender resend every segment it named,
    /// although they arrived: at 9% loss on the return path, about 9% of
    /// what the sender puts on the wire. Repeated, an ACK is lost only when
    /// both copies are. Costs up to twice the ACK bytes on the return path
    /// (24 bytes per received segment). A kcp-go sender handles the copies
    /// as kcpio's does: an ACK for a segment already acknowledged changes
    /// nothing, and a copy never counts towards a fast retransmission of a
    /// segment sent after the one it names. Default false.
    pub ack_repeat: bool,
}

impl Default for ArqConfig {
    fn default() -> Self {
        Self {
            mtu: 1400,
            snd_wnd: 32,
            rcv_wnd: 32,
            nodelay: false,
            interval: 100,
            fast_resend: 0,
            no_congestion: false,
            stream: false,
            write_delay: false,
            ack_nodelay: false,
            dead_link: 20,
            min_rto: None,
            backoff_percent: None,
            max_rto: None,
            tail_probe: false,
            congestion: None,
            max_window: None,
            ack_repeat: false,
        }
    }
}

/// The presets, kcp-go's default and kcptun's `mode`s plus kcpio's
/// `lowlat`: `nodelay`, `interval`, fast `resend` and `nc`.
/// One type for the ARQ ([`ArqConfig::preset`]) and the public surface
/// ([`ConfigBuilder::preset`](crate::ConfigBuilder::preset), re-exported as
/// `kcpio::Preset`).
///
/// | preset | nodelay | interval | resend | nc |
/// | --- | --- | --- | --- | --- |
/// | [`Default`](Preset::Default) (kcp-go's `NewKCP`) | off | 100 ms | 0 | off |
/// | [`Normal`](Preset::Normal) (kcptun `normal`) | off | 40 ms | 2 | on |
/// | [`Fast`](Preset::Fast) (kcptun `fast`, kcptun's default) | off | 30 ms | 2 | on |
/// | [`Fast2`](Preset::Fast2) (kcptun `fast2`) | on | 20 ms | 2 | on |
/// | [`Fast3`](Preset::Fast3) (kcptun `fast3`) | on | 10 ms | 2 | on |
/// | [`LowLatency`](Preset::LowLatency) (kcpio only, `lowlat`) | on | 10 ms | 1 | on |
///
/// [`LowLatency`](Preset::LowLatency) sets more than these four: see its
/// documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Preset {
    /// kcp-go's defaults: no nodelay, 100 ms interval, no fast resend,
    /// congestion control on.
    #[default]
    Default,
    /// kcptun `normal`: 40 ms interval, fast resend after 2 skips, no congestion window.
    Normal,
    /// kcptun `fast`: 30 ms interval, fast resend after 2 skips, no congestion window.
    Fast,
    /// kcptun `fast2`: nodelay, 20 ms interval, fast resend 2, no congestion window.
    Fast2,
    /// kcptun `fast3`: nodelay, 10 ms interval, fast resend 2, no congestion window.
    Fast3,
    /// **kcpio's low-latency preset** (name `lowlat`): for small
    /// messages at a steady rate (game state, voice, interactive tunnels) on
    /// lossy links, where the worst case matters more than bandwidth.
    ///
    /// On the wire it is kcp-go-compatible: a kcp-go peer with any settings
    /// talks to it unchanged. It sets
    ///
    /// * fast3's ARQ timing with fast resend after **1** skipping ACK
    ///   (nodelay, 10 ms interval, resend 1, no congestion window);
    /// * ACK without delay ([`ack_nodelay`](crate::ConfigBuilder::ack_nodelay));
    /// * **kcpio-only**, changing only when this side retransmits: a 20 ms
    ///   RTO floor ([`min_rto`](crate::ConfigBuilder::min_rto)), a back-off of
    ///   +25% of the RTO per timeout capped at 200 ms
    ///   ([`rto_backoff_percent`](crate::ConfigBuilder::rto_backoff_percent),
    ///   [`max_rto`](crate::ConfigBuilder::max_rto)), and the tail-loss probe
    ///   ([`tail_probe`](crate::ConfigBuilder::tail_probe));
    /// * unless [`fec`](crate::ConfigBuilder::fec) is set, FEC **2 data + 2 parity**
    ///   shards with the **kcpio-only** 10 ms group deadline
    ///   ([`fec_group_deadline`](crate::ConfigBuilder::fec_group_deadline)): a group
    ///   that has not filled 10 ms after its first packet is closed with
    ///   12-byte filler shards and its parity leaves at once, so a lost
    ///   packet is rebuilt about 10 ms late instead of a round trip or more.
    ///   A kcp-go receiver decodes these groups like any other (it counts the
    ///   fillers as `KCPInErrors`).
    ///
    /// The cost is bandwidth: two parity shards per two packets, fillers,
    /// and an ACK datagram per message, several times the payload in bytes
    /// on the wire. Most of the gain in tail latency comes from the small
    /// FEC groups, which kcp-go can be configured for too (`1,10,1,1`, ACK
    /// without delay, FEC 2/2); the group deadline keeps parity prompt when
    /// packets are sparse. The repository's `lab/results/LATENCY.md` has the
    /// measurements, dated, with the machine.
    LowLatency,
}

impl Preset {
    /// Every preset, kcp-go's and kcpio's, in the order above.
    pub const ALL: [Preset; 6] = [
        Preset::Default,
        Preset::Normal,
        Preset::Fast,
        Preset::Fast2,
        Preset::Fast3,
        Preset::LowLatency,
    ];

    /// `(nodelay, interval, resend, nc)` of this preset.
    #[must_use]
    pub const fn params(self) -> (bool, u32, u32, bool) {
        match self {
            Preset::Default => (false, 100, 0, false),
            Preset::Normal => (false, 40, 2, true),
            Preset::Fast => (false, 30, 2, true),
            Preset::Fast2 => (true, 20, 2, true),
            Preset::Fast3 => (true, 10, 2, true),
            Preset::LowLatency => (true, 10, 1, true),
        }
    }

    /// The preset called `name` by kcptun's `--mode` flag (`normal`, `fast`,
    /// `fast2`, `fast3`), `default` for kcp-go's own defaults, `lowlat` for
    /// [`LowLatency`](Self::LowLatency).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::Default),
            "normal" => Some(Self::Normal),
            "fast" => Some(Self::Fast),
            "fast2" => Some(Self::Fast2),
            "fast3" => Some(Self::Fast3),
            "lowlat" => Some(Self::LowLatency),
            _ => None,
        }
    }

    /// The name [`from_name`](Self::from_name) takes.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Normal => "normal",
            Self::Fast => "fast",
            Self::Fast2 => "fast2",
            Self::Fast3 => "fast3",
            Self::LowLatency => "lowlat",
        }
    }

    /// The FEC shape (data, parity) and group deadline this preset turns on
    /// when [`ConfigBuilder::fec`](crate::ConfigBuilder::fec) is not set;
    /// `None` for the kcp-go presets. Plain data: the ARQ runs no FEC.
    #[must_use]
    pub fn fec(self) -> Option<((usize, usize), core::time::Duration)> {
        match self {
            Self::LowLatency => Some((
                LOWLAT_FEC,
                core::time::Duration::from_millis(LOWLAT_FEC_DEADLINE_MS),
            )),
            _ => None,
        }
    }

    /// The ARQ parameters of this preset on top of kcp-go's defaults
    /// (same as [`ArqConfig::preset`]).
    #[must_use]
    pub fn arq_config(self) -> ArqConfig {
        ArqConfig::preset(self)
    }
}

impl ArqConfig {
    /// kcp-go defaults with the preset's `(nodelay, interval, resend, nc)`.
    #[must_use]
    pub fn preset(p: Preset) -> Self {
        let mut c = Self::default();
        c.apply_preset(p);
        c
    }

    /// Overwrite `nodelay`, `interval`, `fast_resend` and `no_congestion` from
    /// `p`; [`Preset::LowLatency`] also sets `ack_nodelay` and the kcpio-only
    /// `min_rto`, `backoff_percent`, `max_rto` and `tail_probe`.
    pub fn apply_preset(&mut self, p: Preset) {
        let (nodelay, interval, resend, nc) = p.params();
        self.nodelay = nodelay;
        self.interval = interval;
        self.fast_resend = resend;
        self.no_congestion = nc;
        if p == Preset::LowLatency {
            self.ack_nodelay = true;
            self.min_rto = Some(LOWLAT_MIN_RTO_MS);
            self.backoff_percent = Some(LOWLAT_BACKOFF_PERCENT);
            self.max_rto = Some(LOWLAT_MAX_RTO_MS);
            self.tail_probe = true;
        }
    }

    /// The controller in effect: [`congestion`](Self::congestion) if set,
    /// else the one `no_congestion` names.
    #[must_use]
    pub fn controller(&self) -> Congestion {
        match self.congestion {
            Some(c) => c,
            None if self.no_congestion => Congestion::None,
            None => Congestion::Kcp,
        }
    }

    /// Check the values a [`Kcp`](super::Kcp) cannot run with. `interval` is
    /// not an error: it is clamped to [10, 5000] as kcp-go does.
    ///
    /// # Errors
    /// [`ArqConfigError`] naming the first offending field.
    pub fn validate(&self) -> Result<(), ArqConfigError> {
        if self.mtu <= HEADER_LEN {
            return Err(ArqConfigError::MtuTooSmall { mtu: self.mtu });
        }
        if self.mtu > MAX_MTU {
            return Err(ArqConfigError::MtuTooLarge { mtu: self.mtu });
        }
        if self.snd_wnd == 0 {
            return Err(ArqConfigError::ZeroSendWindow);
        }
        if self.rcv_wnd == 0 {
            return Err(ArqConfigError::ZeroReceiveWindow);
        }
        if self.dead_link == 0 {
            return Err(ArqConfigError::ZeroDeadLink);
        }
        Ok(())
    }

    /// `interval` clamped to [10, 5000] ms.
    #[must_use]
    pub fn clamped_interval(&self) -> u32 {
        self.interval.clamp(MIN_INTERVAL, MAX_INTERVAL)
    }
}

/// An [`ArqConfig`] value the state machine cannot run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArqConfigError {
    /// `mtu` must exceed the 24-byte segment header.
    MtuTooSmall {
        /// The rejected value.
        mtu: usize,
    },
    /// `mtu` above 65507, the largest UDP payload.
    MtuTooLarge {
        /// The rejected value.
        mtu: usize,
    },
    /// `snd_wnd` is 0.
    ZeroSendWindow,
    /// `rcv_wnd` is 0.
    ZeroReceiveWindow,
    /// `dead_link` is 0.
    ZeroDeadLink,
}

impl fmt::Display for ArqConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MtuTooSmall { mtu } => {
                write!(
                    f,
                    "KCP mtu {mtu} leaves no room for data (must exceed {HEADER_LEN})"
                )
            }
            Self::MtuTooLarge { mtu } => write!(f, "KCP mtu {mtu} exceeds {MAX_MTU}"),
            Self::ZeroSendWindow => f.write_str("send window must be at least 1 segment"),
            Self::ZeroReceiveWindow => f.write_str("receive window must be at least 1 segment"),
            Self::ZeroDeadLink => f.write_str("dead_link must be at least 1 transmission"),
        }
    }
}

impl std::error::Error for ArqConfigError {}
