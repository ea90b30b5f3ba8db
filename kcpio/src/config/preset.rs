//! [`Preset`]: kcp-go's default, kcptun's `mode`s and kcpio's `lowlat`,
//! each a bundle of ARQ timing ([`arq::Timing`](crate::arq::Timing)) and,
//! for `lowlat`, more ARQ options and an FEC shape. The ARQ knows only its
//! timing; the bundle is a session-level choice, so it lives here.

use std::time::Duration;

use crate::arq::{ArqConfig, Timing};

/// [`Preset::LowLatency`]: fast3's timing with fast resend after one
/// skipping ACK.
const LOWLAT_TIMING: Timing = Timing::new(true, 10, 1, true);
/// [`Preset::LowLatency`]: RTO floor in ms (kcpio-only).
const LOWLAT_MIN_RTO_MS: u32 = 20;
/// [`Preset::LowLatency`]: RTO growth per timeout, percent of the RTO (kcpio-only).
const LOWLAT_BACKOFF_PERCENT: u32 = 25;
/// [`Preset::LowLatency`]: cap of a segment's backed-off RTO in ms (kcpio-only).
const LOWLAT_MAX_RTO_MS: u32 = 200;
/// [`Preset::LowLatency`]: FEC data and parity shards.
const LOWLAT_FEC: (usize, usize) = (2, 2);
/// [`Preset::LowLatency`]: FEC group deadline (kcpio-only).
const LOWLAT_FEC_DEADLINE: Duration = Duration::from_millis(10);

/// The presets, kcp-go's default and kcptun's `mode`s plus kcpio's
/// `lowlat`: `nodelay`, `interval`, fast `resend` and `nc`, and for
/// `lowlat` more ARQ options and an FEC shape. What
/// [`ConfigBuilder::preset`](crate::ConfigBuilder::preset) takes;
/// [`arq_config`](Self::arq_config) gives the sans-IO ARQ its part.
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
        let t = self.timing();
        (t.nodelay, t.interval, t.resend, t.nc)
    }

    /// The ARQ timing of this preset: kcp-go's and kcptun's from the ARQ's
    /// own table.
    const fn timing(self) -> Timing {
        match self {
            Preset::Default => Timing::KCP_GO,
            Preset::Normal => Timing::NORMAL,
            Preset::Fast => Timing::FAST,
            Preset::Fast2 => Timing::FAST2,
            Preset::Fast3 => Timing::FAST3,
            Preset::LowLatency => LOWLAT_TIMING,
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
    /// `None` for the kcp-go presets.
    #[must_use]
    pub fn fec(self) -> Option<((usize, usize), Duration)> {
        match self {
            Self::LowLatency => Some((LOWLAT_FEC, LOWLAT_FEC_DEADLINE)),
            _ => None,
        }
    }

    /// The ARQ parameters of this preset on top of kcp-go's defaults:
    /// its `(nodelay, interval, resend, nc)`; [`LowLatency`](Self::LowLatency)
    /// also sets `ack_nodelay` and the kcpio-only `min_rto`,
    /// `backoff_percent`, `max_rto` and `tail_probe`.
    #[must_use]
    pub fn arq_config(self) -> ArqConfig {
        let mut c = ArqConfig::with_timing(self.timing());
        if self == Preset::LowLatency {
            c.ack_nodelay = true;
            c.min_rto = Some(LOWLAT_MIN_RTO_MS);
            c.backoff_percent = Some(LOWLAT_BACKOFF_PERCENT);
            c.max_rto = Some(LOWLAT_MAX_RTO_MS);
            c.tail_probe = true;
        }
        c
    }
}
