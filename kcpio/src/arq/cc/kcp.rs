//! [`KcpCwnd`]: KCP's classic congestion window
//! ([`Congestion::Kcp`](super::Congestion::Kcp), kcp-go `nc = 0`).
//!
//! Slow start from a threshold of 2 segments, then additive increase counted
//! in bytes (`incr`); halving on fast or early retransmit; restart from one
//! segment on timeout. Byte-identical to kcp-go v5.6.72 (the cwnd update in
//! `Input` and the congestion response at the end of `flush`), which the
//! differential trace checks: the arithmetic wraps where kcp-go's `uint32`
//! does. kcp-go's early retransmit counts as a "change" like a fast one (C
//! KCP counts only fast ones), and a timeout halves the window phase 4 used
//! (as C 1.7 does; C 2.0 halves cwnd).

/// `IKCP_THRESH_INIT` / `IKCP_THRESH_MIN`.
const THRESH_MIN: u32 = 2;

/// The window, its byte counter and the slow-start threshold.
#[derive(Clone, Debug)]
pub(crate) struct KcpCwnd {
    mss: u32,
    cwnd: u32,
    incr: u32,
    ssthresh: u32,
}

impl KcpCwnd {
    /// A window of one segment. A kcp-go session runs one flush when it is
    /// created; on an empty connection its only effect is raising cwnd from
    /// 0 to 1 (a raw kcp-go or C KCP starts at 0 and admits nothing on its
    /// first flush).
    pub(crate) fn new(mss: u32) -> Self {
        Self {
            mss,
            cwnd: 1,
            incr: mss,
            ssthresh: THRESH_MIN,
        }
    }

    /// Phase 4's window: the sequence-space window `win` capped at cwnd.
    pub(crate) fn window(&self, win: u32) -> u32 {
        win.min(self.cwnd)
    }

    /// `una` moved forward in a packet: Reno-like growth (as C), while
    /// cwnd is below the peer's window `rmt_wnd` and never past it.
    pub(crate) fn on_una_advanced(&mut self, rmt_wnd: u32) {
        if self.cwnd >= rmt_wnd {
            return;
        }
        let mss = self.mss;
        if self.cwnd < self.ssthresh {
            self.cwnd += 1;
            self.incr = self.incr.wrapping_add(mss);
        } else {
            if self.incr < mss {
                self.incr = mss;
            }
            self.incr = self
                .incr
                .wrapping_add((mss.wrapping_mul(mss)) / self.incr + mss / 16);
            if (self.cwnd.wrapping_add(1)).wrapping_mul(mss) <= self.incr {
                self.cwnd = self.incr.div_ceil(mss.max(1));
            }
        }
        if self.cwnd > rmt_wnd {
            self.cwnd = rmt_wnd;
            self.incr = rmt_wnd.wrapping_mul(mss);
        }
    }

    /// The end of a flush that scanned what is in flight: `fast` segments
    /// went by fast or early retransmit, `timeouts` by their RTO; `in_flight`
    /// segments are unacknowledged, `win` was phase 4's window and `resent`
    /// is kcp-go's fast-resend threshold (`u32::MAX` when off).
    pub(crate) fn on_flush(
        &mut self,
        fast: u64,
        timeouts: u64,
        in_flight: u32,
        win: u32,
        resent: u32,
    ) {
        let mss = self.mss;
        if fast > 0 {
            self.ssthresh = (in_flight / 2).max(THRESH_MIN);
            // u32 arithmetic as in kcp-go: with fast resend off this wraps
            // to ssthresh - 1.
            self.cwnd = self.ssthresh.wrapping_add(resent);
            self.incr = self.cwnd.wrapping_mul(mss);
        }
        if timeouts > 0 {
            self.ssthresh = (win / 2).max(THRESH_MIN);
            self.cwnd = 1;
            self.incr = mss;
        }
        if self.cwnd < 1 {
            self.cwnd = 1;
            self.incr = mss;
        }
    }

    /// `(cwnd, ssthresh)`, for tests.
    #[cfg(test)]
    pub(crate) fn state(&self) -> (u32, u32) {
        (self.cwnd, self.ssthresh)
    }
}
