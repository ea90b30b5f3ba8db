//! RTT estimation and every retransmission-timeout rule, in one place
//! (WIRE.md 3.3 and the RTO row of 3.4).
//!
//! Keeping the minimum RTO, the estimator and the back-off step together is
//! what lets a later kcpio-only low-latency option (a configurable minimum RTO,
//! a different back-off factor) change one type without touching the state
//! machine. The defaults here are kcp-go v5.6.72's.

/// `IKCP_RTO_NDL`: minimum RTO with nodelay.
pub(crate) const RTO_NODELAY_MIN: u32 = 30;
/// `IKCP_RTO_MIN`: minimum RTO without nodelay.
pub(crate) const RTO_MIN: u32 = 100;
/// `IKCP_RTO_DEF`: RTO before the first sample.
pub(crate) const RTO_DEFAULT: u32 = 200;
/// `IKCP_RTO_MAX`: cap of the estimator's RTO (a segment's own backed-off RTO is not capped).
pub(crate) const RTO_MAX: u32 = 60_000;

/// How a segment's own RTO grows on each timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backoff {
    /// kcp-go without nodelay: `rto += rx_rto` (waits R, 2R, 3R, ...).
    ///
    /// kcp-go differs from C here: C's nodelay 0 adds `max(rto, rx_rto)`
    /// (doubling) and delays the first retransmission by `rx_rto/8`.
    AddFull,
    /// kcp-go with nodelay: `rto += rx_rto / 2` (waits R, 1.5R, 2R, ...).
    ///
    /// C's nodelay 1 adds `rto/2` (x1.5 each time); only C's nodelay >= 2 is
    /// additive like this.
    AddHalf,
    /// kcpio-only (`ArqConfig::backoff_percent`): `rto += rx_rto * pct / 100`.
    Percent(u32),
}

/// The smoothed RTT, its variance and the resulting `rx_rto`, plus the
/// per-segment back-off rule.
#[derive(Clone, Debug)]
pub(crate) struct Rtt {
    srtt: i32,
    rttvar: i32,
    rto: u32,
    min_rto: u32,
    interval: u32,
    backoff: Backoff,
    /// kcpio-only cap of a segment's backed-off RTO (`ArqConfig::max_rto`).
    max_seg_rto: Option<u32>,
}

impl Rtt {
    pub(crate) fn new(nodelay: bool, interval: u32) -> Self {
        Self {
            srtt: 0,
            rttvar: 0,
            rto: RTO_DEFAULT,
            min_rto: if nodelay { RTO_NODELAY_MIN } else { RTO_MIN },
            interval,
            backoff: if nodelay {
                Backoff::AddHalf
            } else {
                Backoff::AddFull
            },
            max_seg_rto: None,
        }
    }

    /// Apply the kcpio-only RTO options of `ArqConfig` (all `None`: kcp-go's
    /// rules unchanged).
    pub(crate) fn with_options(
        mut self,
        min_rto: Option<u32>,
        backoff_percent: Option<u32>,
        max_rto: Option<u32>,
    ) -> Self {
        if let Some(m) = min_rto {
            self.min_rto = m.max(1);
            self.rto = self.rto.max(self.min_rto);
        }
        if let Some(p) = backoff_percent {
            self.backoff = Backoff::Percent(p);
        }
        self.max_seg_rto = max_rto.map(|m| m.max(1));
        self
    }

    /// Forgets the samples (a new network path): the estimates start over
    /// from the initial RTO, the options stay.
    pub(crate) fn reset(&mut self) {
        self.srtt = 0;
        self.rttvar = 0;
        self.rto = RTO_DEFAULT.max(self.min_rto);
    }

    /// Smoothed RTT in ms (kcp-go `rx_srtt`).
    pub(crate) fn srtt(&self) -> i32 {
        self.srtt
    }

    /// RTT variance in ms (kcp-go `rx_rttvar`).
    #[cfg(test)]
    pub(crate) fn rttvar(&self) -> i32 {
        self.rttvar
    }

    /// Current retransmission timeout in ms (kcp-go `rx_rto`).
    pub(crate) fn rto(&self) -> u32 {
        self.rto
    }

    /// Fold one sample in (kcp-go `update_ack`). kcp-go's RFC 6298-style
    /// variant with shifts and a 1/32 weight for samples far below the
    /// expected range; C uses plain 1/4 and 1/8 averages and keeps srtt >= 1.
    /// Go's int32/uint32 arithmetic wraps, so this does too.
    pub(crate) fn sample(&mut self, rtt: i32) {
        if self.srtt == 0 {
            self.srtt = rtt;
            self.rttvar = rtt >> 1;
        } else {
            let mut delta = rtt.wrapping_sub(self.srtt);
            self.srtt = self.srtt.wrapping_add(delta >> 3);
            delta = delta.wrapping_abs();
            let step = delta.wrapping_sub(self.rttvar);
            if rtt < self.srtt.wrapping_sub(self.rttvar) {
                self.rttvar = self.rttvar.wrapping_add(step >> 5);
            } else {
                self.rttvar = self.rttvar.wrapping_add(step >> 2);
            }
        }
        let rto = (self.srtt as u32).wrapping_add(self.interval.max((self.rttvar as u32) << 2));
        self.rto = rto.max(self.min_rto).min(RTO_MAX);
    }

    /// A segment's RTO for its first transmission and after a fast or early
    /// retransmission.
    pub(crate) fn initial(&self) -> u32 {
        self.rto
    }

    /// A segment's next RTO after it timed out with `seg_rto`.
    pub(crate) fn backoff(&self, seg_rto: u32) -> u32 {
        let next = match self.backoff {
            Backoff::AddFull => seg_rto.wrapping_add(self.rto),
            Backoff::AddHalf => seg_rto.wrapping_add(self.rto / 2),
            Backoff::Percent(p) => {
                let step = u64::from(self.rto) * u64::from(p) / 100;
                seg_rto.saturating_add(u32::try_from(step).unwrap_or(u32::MAX))
            }
        };
        match self.max_seg_rto {
            Some(cap) => next.min(cap.max(self.rto)),
            None => next,
        }
    }

    /// kcpio-only tail-loss probe timeout: `max(srtt * 3 / 2, srtt +
    /// interval)`, or `None` before the first RTT sample.
    pub(crate) fn probe_timeout(&self) -> Option<u32> {
        if self.srtt <= 0 {
            return None;
        }
        let srtt = self.srtt as u32;
        Some((srtt + srtt / 2).max(srtt.saturating_add(self.interval)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_then_smoothing_follow_kcp_go() {
        let mut r = Rtt::new(false, 100);
        assert_eq!(r.rto(), 200);
        r.sample(50);
        assert_eq!((r.srtt(), r.rttvar()), (50, 25));
        // 50 + max(100, 100) = 150
        assert_eq!(r.rto(), 150);
        r.sample(90);
        // delta 40: srtt 55, |delta| 40, 90 >= 55-25 so rttvar += (40-25)>>2 = 3
        assert_eq!((r.srtt(), r.rttvar()), (55, 28));
        assert_eq!(r.rto(), 55 + 112);
        r.sample(0);
        // delta -55: srtt += -55>>3 = -7 -> 48; 0 < 48-28 so rttvar += (55-28)>>5 = 0
        assert_eq!((r.srtt(), r.rttvar()), (48, 28));
    }

    #[test]
    fn min_rto_and_backoff_follow_nodelay() {
        let mut fast = Rtt::new(true, 10);
        fast.sample(2);
        assert_eq!(fast.rto(), 30);
        assert_eq!(fast.backoff(30), 45);
        let mut slow = Rtt::new(false, 10);
        slow.sample(2);
        assert_eq!(slow.rto(), 100);
        assert_eq!(slow.backoff(100), 200);
        assert_eq!(slow.backoff(200), 300);
    }

    #[test]
    fn kcpio_options_floor_step_and_cap() {
        let mut r = Rtt::new(true, 10).with_options(Some(15), Some(25), Some(70));
        r.sample(2);
        // 2 + max(10, 4) = 12, floored at 15 instead of kcp-go's 30
        assert_eq!(r.rto(), 15);
        assert_eq!(r.backoff(15), 18);
        r.sample(40);
        let rto = r.rto();
        assert!(rto > 15);
        // capped at 70, never below the estimate itself
        assert_eq!(r.backoff(69), 70);
        assert_eq!(r.backoff(1000), 70);
        assert_eq!(Rtt::new(true, 10).probe_timeout(), None);
        let mut p = Rtt::new(true, 10);
        p.sample(40);
        assert_eq!(p.probe_timeout(), Some(60));
        let mut q = Rtt::new(true, 30);
        q.sample(40);
        assert_eq!(q.probe_timeout(), Some(70));
    }

    #[test]
    fn no_options_is_kcp_go() {
        let mut a = Rtt::new(true, 10);
        let mut b = Rtt::new(true, 10).with_options(None, None, None);
        for s in [40, 45, 38, 90, 41] {
            a.sample(s);
            b.sample(s);
            assert_eq!(a.rto(), b.rto());
            assert_eq!(a.backoff(a.rto()), b.backoff(b.rto()));
        }
    }

    #[test]
    fn huge_samples_wrap_without_panicking() {
        let mut r = Rtt::new(false, 5000);
        r.sample(i32::MAX);
        r.sample(0);
        r.sample(i32::MAX);
        assert!(r.rto() <= RTO_MAX);
    }
}
