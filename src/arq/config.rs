//! ARQ parameters: kcp-go's defaults and the kcptun presets (WIRE.md 3.1, 3.10).

use core::fmt;

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
    /// and FEC headers (WIRE.md 2.5). Must exceed 24 (kcp-go v5.6.72; C needs 50).
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
    /// **kcpio-only** (issue 7): floor of the retransmission timeout in ms,
    /// instead of kcp-go's 30 (with `nodelay`) or 100. Values below 1 are
    /// taken as 1. Only changes when this side retransmits, so it is safe
    /// with a kcp-go peer. Default `None` (kcp-go's floors).
    pub min_rto: Option<u32>,
    /// **kcpio-only** (issue 7): what a segment's RTO grows by each time it
    /// times out, in percent of the current RTO estimate: 100 is kcp-go
    /// without `nodelay` (waits R, 2R, 3R, ...), 50 kcp-go with it (R, 1.5R,
    /// 2R, ...), 0 keeps the wait at R. Default `None` (kcp-go's rule).
    pub backoff_percent: Option<u32>,
    /// **kcpio-only** (issue 7): cap in ms of one segment's backed-off RTO
    /// (kcp-go's is uncapped). Default `None`.
    pub max_rto: Option<u32>,
    /// **kcpio-only** (issue 7): tail-loss probe. A segment sent with nothing
    /// behind it can only be recovered by its RTO, since no later ACK can
    /// mark it skipped; with this on, its first retransmission comes after
    /// `max(srtt * 3 / 2, srtt + interval)` when that is sooner than the RTO,
    /// and that probe does not back the RTO off (TCP's TLP, RFC 8985).
    /// Retransmissions only, so a kcp-go peer cannot tell. Default false.
    pub tail_probe: bool,
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
        }
    }
}

/// kcp-go's default and the kcptun `mode` presets for
/// `(nodelay, interval, resend, nc)` (WIRE.md 3.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Preset {
    /// kcp-go `NewKCP`: 0, 100, 0, 0.
    #[default]
    Default,
    /// kcptun `normal`: 0, 40, 2, 1.
    Normal,
    /// kcptun `fast` (kcptun's default): 0, 30, 2, 1.
    Fast,
    /// kcptun `fast2`: 1, 20, 2, 1.
    Fast2,
    /// kcptun `fast3`: 1, 10, 2, 1.
    Fast3,
}

impl Preset {
    /// `(nodelay, interval, resend, nc)` of this preset.
    #[must_use]
    pub const fn params(self) -> (bool, u32, u32, bool) {
        match self {
            Preset::Default => (false, 100, 0, false),
            Preset::Normal => (false, 40, 2, true),
            Preset::Fast => (false, 30, 2, true),
            Preset::Fast2 => (true, 20, 2, true),
            Preset::Fast3 => (true, 10, 2, true),
        }
    }

    /// Every preset, for sweeps.
    pub const ALL: [Preset; 5] = [
        Preset::Default,
        Preset::Normal,
        Preset::Fast,
        Preset::Fast2,
        Preset::Fast3,
    ];
}

impl ArqConfig {
    /// kcp-go defaults with the preset's `(nodelay, interval, resend, nc)`.
    #[must_use]
    pub fn preset(p: Preset) -> Self {
        let mut c = Self::default();
        c.apply_preset(p);
        c
    }

    /// Overwrite `nodelay`, `interval`, `fast_resend` and `no_congestion` from `p`.
    pub fn apply_preset(&mut self, p: Preset) {
        let (nodelay, interval, resend, nc) = p.params();
        self.nodelay = nodelay;
        self.interval = interval;
        self.fast_resend = resend;
        self.no_congestion = nc;
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
