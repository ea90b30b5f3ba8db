//! Congestion control: which segments this side may send, and when.
//!
//! Sender side only: a controller changes when this end admits new data and
//! how fast it lets segments leave, never the wire format or what the peer
//! sees (ACKs, windows, `una` are produced exactly as before). Three
//! controllers exist ([`Congestion`]), one file each:
//!
//! * `None` and `Kcp` are kcp-go's two modes (`nc = 1` and `nc = 0`),
//!   byte-identical to kcp-go, as the differential trace checks. `None` is
//!   the windows alone; `Kcp` is [`KcpCwnd`] (`kcp.rs`).
//! * `Bbr` is [`Bbr`] (`bbr.rs`): a model of the path in the spirit of
//!   BBR (startup, drain, a windowed maximum of the delivery rate, the
//!   minimum RTT, pacing).
//!
//! The state machine holds one [`Controller`] and calls only it: the window
//! and admission of phase 4, pacing deadlines, every transmission and
//! delivery, `una` advances, the flush's retransmissions, and three answers
//! that shape loss detection. What stays in the state machine is kcp-go's:
//! the sequence-space windows `min(snd_wnd, rmt_wnd)`, which segments are
//! resent by which rule, and the RTO.

mod bbr;
mod kcp;

pub use bbr::BbrStats;
pub(crate) use bbr::TxStamp;

use super::segment::HEADER_LEN;
use bbr::Bbr;
use kcp::KcpCwnd;

/// How this side paces and limits what it sends.
///
/// Sender side only: the peer needs no support and sees no difference on
/// the wire, so every choice works against kcp-go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Congestion {
    /// No congestion control (kcp-go `nc = 1`): as much in flight as the send
    /// window and the peer's receive window allow, sent as soon as it can
    /// go. Fills any bottleneck queue whose path holds less than the window.
    None,
    /// KCP's classic congestion window (kcp-go `nc = 0`): slow start from a
    /// threshold of 2 segments, halving on fast retransmit, restart from 1
    /// segment on timeout. Byte-identical to kcp-go. Collapses on lossy or
    /// long paths, since every loss is read as congestion.
    Kcp,
    /// **kcpio-only**: a model of the path in the spirit of BBR. Measures the
    /// delivery rate and RTT from every acknowledgement, paces segments at
    /// the bottleneck rate it found and keeps about two bandwidth-delay
    /// products in flight, probing periodically for more bandwidth and a
    /// lower RTT. Random loss (up to about 15%) does not lower its rate;
    /// loss together with a standing queue does. Send and receive windows
    /// still cap what is in flight, so size them to at least twice the
    /// path's bandwidth-delay product in segments.
    Bbr,
}

impl Congestion {
    /// The controller called `name`: `none`, `kcp` or `bbr`; `model`, its
    /// earlier name, is accepted for [`Bbr`](Self::Bbr) too.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "kcp" => Some(Self::Kcp),
            "bbr" | "model" => Some(Self::Bbr),
            _ => None,
        }
    }
}

/// The controller one [`Kcp`](crate::arq::Kcp) runs, with its state: the
/// interface the state machine calls.
///
/// All calls take the caller's clock (`now`, ms) where they need one; none
/// allocates. The state machine calls, per flush and per packet:
///
/// * [`on_clock`](Self::on_clock) on every call that carries `now`;
/// * [`window`](Self::window), then [`may_admit`](Self::may_admit) and
///   [`on_admit`](Self::on_admit) per queued segment, then
///   [`after_admission`](Self::after_admission), in phase 4 (admission);
/// * [`on_transmit`](Self::on_transmit) for every segment phase 5 sends, and
///   [`on_flush`](Self::on_flush) once phase 5 scanned what is in flight;
/// * [`on_delivered`](Self::on_delivered) the first time a segment is known
///   to have arrived (only when [`samples_deliveries`](Self::samples_deliveries)),
///   and [`on_una_advanced`](Self::on_una_advanced) once per packet that
///   moved `una`;
/// * [`next_send`](Self::next_send) from `poll_timeout`, while queued data
///   waits and the sequence-space window has room.
///
/// Its answers also shape loss detection:
/// [`reorder_window`](Self::reorder_window),
/// [`rearms_fast_resend`](Self::rearms_fast_resend) and
/// [`rto_floor`](Self::rto_floor). For `None` and `Kcp` every hook but
/// `window`, `on_una_advanced` and `on_flush` is a no-op and every answer
/// kcp-go's, so those two stay byte-identical to kcp-go.
#[derive(Clone, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per session, inline as the state it replaced; boxing would allocate"
)]
pub(crate) enum Controller {
    /// kcp-go `nc = 1`: the windows alone, nothing to keep.
    None,
    /// kcp-go `nc = 0`.
    Kcp(KcpCwnd),
    /// The BBR-style model.
    Bbr(Bbr),
}

impl Controller {
    /// The controller `choice` names, for segments of `mss` bytes and a
    /// flush every `interval` ms.
    /// The same kind of controller, started over (a new network path).
    pub(crate) fn restarted(&self, mss: u32, interval: u32) -> Self {
        let choice = match self {
            Self::None => Congestion::None,
            Self::Kcp(_) => Congestion::Kcp,
            Self::Bbr(_) => Congestion::Bbr,
        };
        Self::new(choice, mss, interval)
    }

    pub(crate) fn new(choice: Congestion, mss: u32, interval: u32) -> Self {
        match choice {
            Congestion::None => Self::None,
            Congestion::Kcp => Self::Kcp(KcpCwnd::new(mss)),
            // A packet of `mss + header` bytes carries this many ACKs.
            Congestion::Bbr => Self::Bbr(Bbr::new(
                interval,
                (mss + HEADER_LEN as u32) / HEADER_LEN as u32,
            )),
        }
    }

    /// A call brought the clock to `now`: pacing tokens accrue.
    #[inline]
    pub(crate) fn on_clock(&mut self, now: u32) {
        if let Self::Bbr(b) = self {
            b.refill(now);
        }
    }

    /// Phase 4's window: the sequence-space window `win`
    /// (`min(snd_wnd, rmt_wnd)`) capped at the controller's own.
    #[inline]
    pub(crate) fn window(&self, win: u32) -> u32 {
        match self {
            Self::Kcp(k) => k.window(win),
            Self::None | Self::Bbr(_) => win,
        }
    }

    /// One more queued segment may enter the window now, besides
    /// [`window`](Self::window): BBR's pacing token and in-flight cap.
    #[inline]
    pub(crate) fn may_admit(&self) -> bool {
        match self {
            Self::Bbr(b) => b.may_admit(),
            Self::None | Self::Kcp(_) => true,
        }
    }

    /// A queued segment entered the window at `now`.
    #[inline]
    pub(crate) fn on_admit(&mut self, now: u32) {
        if let Self::Bbr(b) = self {
            b.on_admit(now);
        }
    }

    /// Phase 4 is done: data is still `queued` or not, and the
    /// sequence-space window has `room` for more or not.
    pub(crate) fn after_admission(&mut self, queued: bool, room: bool) {
        if let Self::Bbr(b) = self {
            b.after_admission(queued, room);
        }
    }

    /// When the next paced burst may leave (ms), if pacing is what holds
    /// queued data back; `None` when nothing is paced. Asked only while data
    /// is queued and the sequence-space window has room.
    pub(crate) fn next_send(&self, now: u32) -> Option<u32> {
        match self {
            Self::Bbr(b) => b.next_send(now),
            Self::None | Self::Kcp(_) => None,
        }
    }

    /// Phase 5 may retransmit a segment now: pacing allows it (a model
    /// controller lets retransmissions run at most one burst ahead of its
    /// tokens); always for kcp-go's controllers.
    pub(crate) fn may_retransmit(&self) -> bool {
        match self {
            Self::Bbr(b) => b.may_retransmit(),
            Self::None | Self::Kcp(_) => true,
        }
    }

    /// When a retransmission held back by [`may_retransmit`](Self::may_retransmit)
    /// may leave (ms); `None` for kcp-go's controllers, which hold none.
    pub(crate) fn next_retransmit(&self, now: u32) -> Option<u32> {
        match self {
            Self::Bbr(b) => Some(b.next_retransmit(now)),
            Self::None | Self::Kcp(_) => None,
        }
    }

    /// Phase 5 sends a segment at `now` that went out `xmit` times before;
    /// `evidence` when fast or early retransmit sent it (ACKs of later
    /// segments arrived). `stamp` is the segment's delivery state, written
    /// at its first transmission.
    #[inline]
    pub(crate) fn on_transmit(&mut self, stamp: &mut TxStamp, xmit: u32, evidence: bool, now: u32) {
        if let Self::Bbr(b) = self {
            // A timeout may be spurious (a lost ACK, a delay spike) and is
            // not counted as a loss, nor is the loss of a resend: the loss
            // rate is that of first transmissions (a resend lost again, now
            // resent fast too, would count a segment twice and cut the rate
            // on a queue a competing flow keeps full).
            b.on_transmit(stamp, xmit == 0, evidence && xmit == 1, now);
        }
    }

    /// The end of a flush that scanned what is in flight: `fast` segments
    /// went by fast or early retransmit, `timeouts` by their RTO;
    /// `in_flight` segments are unacknowledged, `win` was phase 4's window
    /// and `resent` is the fast-resend threshold (`u32::MAX` when off).
    pub(crate) fn on_flush(
        &mut self,
        fast: u64,
        timeouts: u64,
        in_flight: u32,
        win: u32,
        resent: u32,
    ) {
        if let Self::Kcp(k) = self {
            k.on_flush(fast, timeouts, in_flight, win, resent);
        }
    }

    /// The controller wants [`on_delivered`](Self::on_delivered) for every
    /// segment (and the state machine marks segments acknowledged then).
    #[inline]
    pub(crate) fn samples_deliveries(&self) -> bool {
        matches!(self, Self::Bbr(_))
    }

    /// A segment sent with `stamp` is known delivered at `now`; `rtt` is
    /// the echo of the transmission the ACK answers, when known; `fresh`
    /// when that was its only transmission.
    #[inline]
    pub(crate) fn on_delivered(
        &mut self,
        stamp: &TxStamp,
        now: u32,
        rtt: Option<u32>,
        fresh: bool,
    ) {
        if let Self::Bbr(b) = self {
            b.on_delivered(stamp, now, rtt, fresh);
        }
    }

    /// A packet moved `una` forward; `rmt_wnd` is the peer's window now.
    pub(crate) fn on_una_advanced(&mut self, rmt_wnd: u32) {
        if let Self::Kcp(k) = self {
            k.on_una_advanced(rmt_wnd);
        }
    }

    /// How much later (ms) than a segment another must have been sent for
    /// its ACK to count as a skip of the first; `None`: kcp-go's rule, any
    /// segment sent no later counts.
    pub(crate) fn reorder_window(&self) -> Option<u32> {
        match self {
            Self::Bbr(b) => Some(b.reorder_window()),
            Self::None | Self::Kcp(_) => None,
        }
    }

    /// A fast-resent segment may be fast-resent again at once; kcp-go
    /// disables fast retransmit for it until its next timeout.
    #[inline]
    pub(crate) fn rearms_fast_resend(&self) -> bool {
        matches!(self, Self::Bbr(_))
    }

    /// The lowest RTO a segment's first transmission gets (ms), given the
    /// smoothed RTT `srtt` (0 before a sample) and the flush `interval`; 0
    /// (kcp-go's RTO as is) but with BBR.
    pub(crate) fn rto_floor(&self, srtt: u32, interval: u32) -> u32 {
        match self {
            Self::Bbr(b) => b.rto_floor(srtt, interval),
            Self::None | Self::Kcp(_) => 0,
        }
    }

    /// What BBR currently estimates; `None` with the other controllers.
    pub(crate) fn bbr_stats(&self) -> Option<BbrStats> {
        match self {
            Self::Bbr(b) => Some(b.stats()),
            Self::None | Self::Kcp(_) => None,
        }
    }

    /// KCP's `(cwnd, ssthresh)`, for tests.
    #[cfg(test)]
    pub(crate) fn kcp_state(&self) -> Option<(u32, u32)> {
        match self {
            Self::Kcp(k) => Some(k.state()),
            Self::None | Self::Bbr(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Congestion;

    #[test]
    fn names_include_the_models_earlier_one() {
        assert_eq!(Congestion::from_name("none"), Some(Congestion::None));
        assert_eq!(Congestion::from_name("kcp"), Some(Congestion::Kcp));
        assert_eq!(Congestion::from_name("bbr"), Some(Congestion::Bbr));
        assert_eq!(Congestion::from_name("model"), Some(Congestion::Bbr));
        assert_eq!(Congestion::from_name("cubic"), None);
    }
}
