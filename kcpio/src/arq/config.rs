//! ARQ parameters: kcp-go's defaults and kcptun's timing modes.

use core::fmt;

use super::cc::Congestion;
use super::segment::HEADER_LEN;

/// Smallest accepted flush interval in ms (kcp-go `NoDelay` clamps to it).
pub const MIN_INTERVAL: u32 = 10;
/// Largest accepted flush interval in ms (kcp-go `NoDelay` clamps to it).
pub const MAX_INTERVAL: u32 = 5000;
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

/// kcp-go's `SetNoDelay(nodelay, interval, resend, nc)`: the four ARQ
/// timing parameters kcptun's `mode`s choose. Plain data; the constants
/// are kcp-go's default and kcptun's modes.
///
/// | constant | nodelay | interval | resend | nc |
/// | --- | --- | --- | --- | --- |
/// | [`KCP_GO`](Self::KCP_GO) (kcp-go's `NewKCP`) | off | 100 ms | 0 | off |
/// | [`NORMAL`](Self::NORMAL) (kcptun `normal`) | off | 40 ms | 2 | on |
/// | [`FAST`](Self::FAST) (kcptun `fast`) | off | 30 ms | 2 | on |
/// | [`FAST2`](Self::FAST2) (kcptun `fast2`) | on | 20 ms | 2 | on |
/// | [`FAST3`](Self::FAST3) (kcptun `fast3`) | on | 10 ms | 2 | on |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Timing {
    /// [`ArqConfig::nodelay`].
    pub nodelay: bool,
    /// [`ArqConfig::interval`], in ms.
    pub interval: u32,
    /// [`ArqConfig::fast_resend`]: skipping ACKs before a fast
    /// retransmission, 0 = off.
    pub resend: u32,
    /// [`ArqConfig::no_congestion`].
    pub nc: bool,
}

impl Timing {
    /// kcp-go's defaults (`NewKCP`): `0, 100, 0, 0`.
    pub const KCP_GO: Self = Self::new(false, 100, 0, false);
    /// kcptun `normal`: `0, 40, 2, 1`.
    pub const NORMAL: Self = Self::new(false, 40, 2, true);
    /// kcptun `fast` (kcptun's default): `0, 30, 2, 1`.
    pub const FAST: Self = Self::new(false, 30, 2, true);
    /// kcptun `fast2`: `1, 20, 2, 1`.
    pub const FAST2: Self = Self::new(true, 20, 2, true);
    /// kcptun `fast3`: `1, 10, 2, 1`.
    pub const FAST3: Self = Self::new(true, 10, 2, true);

    /// The four numbers in kcp-go's `SetNoDelay` order.
    #[must_use]
    pub const fn new(nodelay: bool, interval: u32, resend: u32, nc: bool) -> Self {
        Self {
            nodelay,
            interval,
            resend,
            nc,
        }
    }
}

impl ArqConfig {
    /// kcp-go's defaults with `timing`'s `(nodelay, interval, resend, nc)`.
    #[must_use]
    pub fn with_timing(timing: Timing) -> Self {
        let mut c = Self::default();
        c.set_timing(timing);
        c
    }

    /// Overwrite `nodelay`, `interval`, `fast_resend` and `no_congestion`
    /// from `timing`, as kcp-go's `SetNoDelay`.
    pub fn set_timing(&mut self, timing: Timing) {
        self.nodelay = timing.nodelay;
        self.interval = timing.interval;
        self.fast_resend = timing.resend;
        self.no_congestion = timing.nc;
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
