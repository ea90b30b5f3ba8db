//! Per-connection counters (kcp-go keeps these in its global `DefaultSnmp`).

/// Counters of one [`Kcp`](super::Kcp). All monotonically increasing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArqStats {
    /// Packets given to `handle_datagram`.
    pub datagrams_in: u64,
    /// Segments accepted from input (kcp-go `InSegs`).
    pub segments_in: u64,
    /// PUSH segments received.
    pub push_in: u64,
    /// ACK segments received.
    pub acks_in: u64,
    /// WASK segments received.
    pub wask_in: u64,
    /// WINS segments received.
    pub wins_in: u64,
    /// Received PUSH segments that were duplicates or outside the window
    /// (kcp-go `RepeatSegs`; regular packets only).
    pub repeat_segments: u64,
    /// Packets written by `poll_transmit`.
    pub datagrams_out: u64,
    /// Segments written by `poll_transmit` (kcp-go `OutSegs`).
    pub segments_out: u64,
    /// PUSH segments written, first transmissions and retransmissions.
    pub push_out: u64,
    /// ACK segments written.
    pub acks_out: u64,
    /// WASK (window probe) segments written.
    pub wask_out: u64,
    /// WINS (window announcement) segments written.
    pub wins_out: u64,
    /// Retransmissions after the segment's RTO expired (kcp-go `LostSegs`).
    pub retransmit_rto: u64,
    /// Fast retransmissions (skipped by `fast_resend` ACKs; kcp-go `FastRetransSegs`).
    pub retransmit_fast: u64,
    /// Early retransmissions (kcp-go `EarlyRetransSegs`).
    pub retransmit_early: u64,
    /// kcpio-only tail-loss probes (`ArqConfig::tail_probe`): a segment with
    /// nothing behind it resent at the probe timeout, before its RTO.
    pub retransmit_probe: u64,
    /// Packets dropped, shorter than a header.
    pub input_truncated: u64,
    /// Packets cut at a segment of another conversation.
    pub input_conv_mismatch: u64,
    /// Packets cut at a segment whose length exceeds the packet.
    pub input_bad_length: u64,
    /// Packets cut at an unknown command.
    pub input_bad_command: u64,
    /// Control segments (ACK/WASK/WINS) dropped because `poll_transmit` was
    /// not called and the output queue reached its bound.
    pub output_dropped: u64,
    /// Flushes that left data queued because the window was full: the
    /// oldest unacknowledged segment plus `min(send window, peer's receive
    /// window)` was reached. Counted for the send window when it is the
    /// smaller, else for the peer's (`*_window_stalls`). Steady growth during
    /// a transfer means the windows, not the path or the congestion
    /// controller, limit throughput.
    pub send_window_stalls: u64,
    /// See `send_window_stalls`: the peer's advertised receive window was
    /// the limit.
    pub peer_window_stalls: u64,
}

impl ArqStats {
    /// All retransmissions (kcp-go `RetransSegs`).
    #[must_use]
    pub fn retransmits(&self) -> u64 {
        self.retransmit_rto + self.retransmit_fast + self.retransmit_early + self.retransmit_probe
    }
}
