//! [`Bbr`]: a model of the path in the spirit of BBR
//! ([`Congestion::Bbr`](super::Congestion::Bbr)).
//!
//! Units are segments and milliseconds (the ARQ's clock). The state machine
//! calls it through [`Controller`](super::Controller), at four points:
//!
//! * [`Bbr::on_transmit`] for every segment it puts on the wire (first
//!   transmissions and retransmissions), which stamps the segment with the
//!   delivery state of that moment and spends one pacing token;
//! * [`Bbr::on_delivered`] the first time a segment is known to have
//!   arrived (an ACK naming it, or `una` moving past it), with the echoed
//!   timestamp when the ACK names the transmission it answers: one RTT
//!   sample per ACK and one delivery-rate sample per segment;
//! * [`Bbr::refill`] with the clock on every call, which adds pacing
//!   tokens at the pacing rate (capped at two bursts, or at a sixteenth of
//!   a round trip when a late wake-up finds data the pacer held back);
//! * [`Bbr::may_admit`] before admitting each new segment into the window.
//!
//! From the samples it keeps a windowed maximum of the delivery rate (the
//! bottleneck bandwidth, over the last 10 round trips) and a windowed
//! minimum of the RTT (10 s), and derives a pacing rate (gain × bandwidth)
//! and an in-flight cap (gain × bandwidth × min RTT). The gains follow BBR's
//! phases: *startup* (×2.89 until the bandwidth stops growing by 25% for
//! three rounds, or, sooner, until a whole round's RTT samples stand above
//! the minimum as a queue would), *drain* (until in flight is back under one
//! BDP, checked on every ACK), *probe bandwidth* (eight rounds of 1.25,
//! 0.75, then six of 1.0) and *probe RTT* (in flight capped at half a BDP
//! for 200 ms when the minimum RTT was not seen again for 10 s).
//!
//! Startup also keeps a window of its own, as slow start does: 32 segments,
//! plus one for each segment delivered and each loss found, so that it
//! doubles per round trip whatever the random loss; it stops growing as soon
//! as an RTT sample shows a queue (the pipe is full), and startup paces it
//! out in half a round trip. In-flight cap and pacing rate in startup are
//! the larger of the model's and this window's: samples of the delivery
//! rate average over a round trip of a flight that doubles, and on their
//! own grew what is in flight only ~1.65-fold per round at 9% loss.
//!
//! With the model the state machine also detects loss with a reordering
//! window ([`Bbr::reorder_window`], as RACK does): an ACK is evidence that
//! a segment was lost only if it names one sent at least that much later,
//! and a segment resent by fast retransmit may be resent that way again
//! (kcp-go waits for the resend's timeout).
//!
//! [`Bbr::rto_floor`] keeps the state machine's first retransmission
//! timeout above `Bbr::queued_rtt` (the round trip of everything in flight
//! queued at the bottleneck) and at 1 s before the first RTT sample: KCP's
//! own RTO (srtt plus a few ms) resends the whole flight when a queue the
//! model built, or a path longer than 200 ms, delays the ACKs.
//!
//! **Random loss against a full queue.** Every retransmission is counted as
//! a loss. A round trip whose losses come without a standing queue (its
//! smallest RTT sample stays within an eighth, at least 5 ms and at least
//! the flush interval, of the minimum) is random loss: the rate is not lowered, the loss rate is
//! folded into a baseline, and the pacing rate is raised by `1 / (1 −
//! 0.75 × baseline)` (at most for 15% loss) so that the bottleneck stays full
//! although part of what crosses it is lost after it. A round whose loss
//! rate exceeds the baseline by 2 points *while* the RTT shows a standing
//! queue is queue overflow: the bandwidth estimate is cut to 85%, startup
//! ends, and the loss compensation is off until a round without a queue.
//! A standing queue that outlives four rounds in the probe-bandwidth phase
//! (the path slowed, or another flow now takes a share) cuts the estimate
//! to 90%: flows that share a bottleneck this way converge on equal shares.
//!
//! Memory: a fixed-size struct, no allocation.

const STARTUP_GAIN: f64 = 2.885;
const DRAIN_GAIN: f64 = 1.0 / STARTUP_GAIN;
const CWND_GAIN: f64 = 2.0;
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// Round trips the bandwidth maximum is kept.
const BW_ROUNDS: u64 = 10;
/// How long a minimum RTT stays valid without being seen again (ms).
const MIN_RTT_WINDOW: u32 = 10_000;
/// Time spent in probe RTT (ms).
const PROBE_RTT_TIME: u32 = 200;
/// Smallest in-flight cap, segments; the pacing rate is never below this
/// per minimum RTT (tokens, which every transmission waits for, keep coming).
const MIN_CWND: f64 = 4.0;
/// In-flight cap before the first sample, segments: where startup's
/// window starts (kcp-go's `nc = 1` sends a whole window, 1024 for kcptun).
const INITIAL_CWND: f64 = 32.0;
/// RTT assumed before the first sample (ms).
const INITIAL_RTT: u32 = 100;
/// A segment's first RTO before any RTT sample, ms (RFC 6298's initial 1 s).
const INITIAL_RTO: u32 = 1000;
/// Largest loss rate compensated in the pacing rate.
const MAX_COMPENSATED_LOSS: f64 = 0.15;
/// Loss-rate excess over the baseline that, with a standing queue, means overflow.
const OVERFLOW_EXCESS: f64 = 0.02;
/// The bandwidth estimate after an overflow, as a fraction.
const OVERFLOW_BETA: f64 = 0.85;
/// Rounds in a row with a standing queue after which the estimate is cut.
const STANDING_ROUNDS: u32 = 3;
/// The bandwidth estimate after a standing queue, as a fraction.
const STANDING_BETA: f64 = 0.9;
/// Fewest transmissions in a round for its loss rate to count.
const MIN_ROUND_SENT: u32 = 16;
/// A startup round losing more than this overflowed the queue: no random
/// loss the pacing compensates (at most `MAX_COMPENSATED_LOSS`) comes near.
const STARTUP_LOSS_EXIT: f64 = 0.25;

/// How far above the minimum RTT a round's RTT must stay to show a
/// standing queue: an eighth of it, at least 5 ms, and at least the flush
/// `interval`: a receiver that has less than a packet of ACKs to send
/// sends them at its next flush (kcp-go's), so until the flight fills a
/// packet of ACKs its RTT samples stand up to an interval above the
/// minimum with no queue at all (on the field's clean path, 1 ms, that
/// ended startup in its second round at a third of the rate).
fn queue_slack(min_rtt: u32, interval: u32) -> u32 {
    (min_rtt / 8).max(5).max(interval)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// Per-segment delivery state recorded at its latest transmission.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TxStamp {
    /// Segments delivered when it was sent (wrapping).
    pub(crate) delivered: u32,
    /// When the latest of those was delivered (ms).
    pub(crate) delivered_ms: u32,
    /// When it was sent, and when the segment whose delivery was the latest
    /// then had been sent (ms): the send-side span of its rate sample.
    pub(crate) sent_ms: u32,
    pub(crate) first_sent_ms: u32,
    /// Nothing else was waiting to be sent: the rate it yields is a floor.
    pub(crate) app_limited: bool,
}

/// A windowed maximum over round trips (the newest, the best of the current
/// window, kept as two entries: enough for a monotone estimate that forgets).
#[derive(Clone, Copy, Debug, Default)]
struct MaxFilter {
    best: (u64, f64),
    second: (u64, f64),
}

impl MaxFilter {
    fn get(&self) -> f64 {
        self.best.1
    }

    fn update(&mut self, round: u64, v: f64) {
        if v >= self.best.1 || round.saturating_sub(self.best.0) >= BW_ROUNDS {
            // A new best, or the best aged out: the runner-up (if still
            // young enough and better) takes over first.
            if v < self.best.1
                && round.saturating_sub(self.second.0) < BW_ROUNDS
                && self.second.1 > v
            {
                self.best = self.second;
                self.second = (round, v);
            } else {
                self.best = (round, v);
                self.second = (round, v);
            }
        } else if v >= self.second.1 || round.saturating_sub(self.second.0) >= BW_ROUNDS / 2 {
            self.second = (round, v);
        }
    }

    fn scale(&mut self, f: f64) {
        self.best.1 *= f;
        self.second.1 = self.second.1.min(self.best.1);
    }
}

/// The model-based controller's state (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct Bbr {
    mode: Mode,
    /// Segments delivered so far (wrapping).
    delivered: u32,
    delivered_ms: u32,
    /// Segments sent and not yet delivered (first transmissions only).
    inflight: u32,
    round: u64,
    next_round_delivered: u32,
    bw: MaxFilter,
    min_rtt: Option<u32>,
    min_rtt_stamp: u32,
    /// The bandwidth at the last startup growth check, and rounds without growth.
    full_bw: f64,
    full_bw_rounds: u32,
    cycle: usize,
    cycle_stamp: u32,
    probe_rtt_until: Option<u32>,
    /// This round: transmissions, retransmissions, smallest RTT sample.
    round_sent: u32,
    /// The last counted round's transmissions.
    last_round_sent: u32,
    round_lost: u32,
    round_min_rtt: Option<u32>,
    /// Startup's window: `INITIAL_CWND`, plus one for every segment
    /// delivered and every loss found while the RTT showed no queue.
    startup_cwnd: f64,
    /// The latest RTT sample showed no standing queue.
    no_queue: bool,
    /// Loss rate of rounds without a standing queue (EWMA).
    loss_base: f64,
    /// The last counted round showed a standing queue.
    queue: bool,
    /// Consecutive counted rounds with a standing queue.
    queue_rounds: u32,
    /// Pacing tokens, segments (may go below zero after retransmissions).
    tokens: f64,
    last_refill: Option<u32>,
    /// When the segment delivered last was sent (ms).
    first_sent_ms: u32,
    /// The last flush left data waiting for tokens alone (window room,
    /// in-flight room): the pacer, not the path, was holding it back.
    held: bool,
    /// A sender with nothing queued: the next transmissions are app-limited.
    app_limited: bool,
    /// ACK aggregation: the current epoch's start (ms) and the segments
    /// delivered since, and the windowed maximum (over round trips) of how
    /// far deliveries ran ahead of the bandwidth estimate in an epoch.
    ack_epoch_ms: u32,
    ack_epoch_acked: u32,
    extra_acked: MaxFilter,
    /// ACKs one packet carries: a kcp-go receiver sends them when it has
    /// that many, else at its next flush.
    ack_batch: u32,
    interval: u32,
    stats: BbrStats,
}

/// What the model-based controller currently believes; see
/// [`Kcp::congestion_state`](crate::arq::Kcp::congestion_state).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct BbrStats {
    /// Bottleneck bandwidth estimate, segments per second.
    pub bandwidth: f64,
    /// Minimum RTT seen in the window, ms (0 before the first sample).
    pub min_rtt: u32,
    /// Current pacing rate, segments per second.
    pub pacing_rate: f64,
    /// Current in-flight cap, segments.
    pub cwnd: u32,
    /// Segments in flight now (sent, not yet known delivered).
    pub inflight: u32,
    /// Loss rate attributed to random loss (not to the queue).
    pub random_loss: f64,
    /// Rounds judged to be queue overflow (each cut the estimate to 85%).
    pub overflow_rounds: u64,
    /// Standing queues that outlived four rounds (each cut the estimate to 90%).
    pub standing_cuts: u64,
    /// Startup phases ended by a queue standing for a whole round trip.
    pub startup_queue_exits: u64,
    /// Startup phases ended by a round losing more than a quarter of what
    /// it sent (a queue too short for its delay to show).
    pub startup_loss_exits: u64,
    /// Room left in the in-flight cap for ACKs that come in batches,
    /// segments (the largest burst of deliveries ahead of the rate in the
    /// last 10 round trips, at most one flush interval at the rate, at
    /// least a packet of ACKs on a path shorter than the interval).
    pub extra_acked: u32,
    /// Round trips counted.
    pub rounds: u64,
    /// The startup phase has ended.
    pub filled: bool,
}

impl Bbr {
    /// A controller for a session flushing every `interval` ms whose
    /// peer's packets carry `ack_batch` ACKs.
    pub(crate) fn new(interval: u32, ack_batch: u32) -> Self {
        Self {
            mode: Mode::Startup,
            delivered: 0,
            delivered_ms: 0,
            inflight: 0,
            round: 0,
            next_round_delivered: 0,
            bw: MaxFilter::default(),
            min_rtt: None,
            min_rtt_stamp: 0,
            full_bw: 0.0,
            full_bw_rounds: 0,
            cycle: 0,
            cycle_stamp: 0,
            probe_rtt_until: None,
            round_sent: 0,
            last_round_sent: 0,
            round_lost: 0,
            round_min_rtt: None,
            startup_cwnd: INITIAL_CWND,
            no_queue: true,
            loss_base: 0.0,
            queue: false,
            queue_rounds: 0,
            tokens: INITIAL_CWND,
            last_refill: None,
            first_sent_ms: 0,
            held: false,
            app_limited: false,
            ack_epoch_ms: 0,
            ack_epoch_acked: 0,
            extra_acked: MaxFilter::default(),
            ack_batch,
            interval,
            stats: BbrStats::default(),
        }
    }

    /// An RTT sample of `rtt` shows a standing queue above the minimum `min`.
    fn shows_queue(&self, rtt: u32, min: u32) -> bool {
        rtt > min + queue_slack(min, self.interval)
    }

    fn pacing_gain(&self) -> f64 {
        match self.mode {
            Mode::Startup => STARTUP_GAIN,
            Mode::Drain => DRAIN_GAIN,
            Mode::ProbeBw => CYCLE.get(self.cycle).copied().unwrap_or(1.0),
            Mode::ProbeRtt => 1.0,
        }
    }

    /// `1 / (1 - 0.75 × random loss)` while no queue is seen: three
    /// quarters of the loss rate, since retransmissions over-count it (a
    /// fast resend whose original arrived but whose ACK was lost), and
    /// pacing above the bottleneck would build the standing queue this
    /// controller exists to avoid.
    fn compensation(&self) -> f64 {
        if self.queue {
            1.0
        } else {
            1.0 / (1.0 - self.loss_base.min(MAX_COMPENSATED_LOSS) * 0.75)
        }
    }

    fn rtt_or_default(&self) -> u32 {
        self.min_rtt.unwrap_or(INITIAL_RTT).max(1)
    }

    /// Bandwidth-delay product in segments (0 before a rate sample).
    fn bdp(&self) -> f64 {
        self.bw.get() * f64::from(self.rtt_or_default())
    }

    /// What is in flight fits the path: the queue startup built is gone.
    fn drained(&self) -> bool {
        f64::from(self.inflight) <= self.bdp() * self.compensation()
    }

    /// Pacing rate, segments per ms.
    fn pacing_rate(&self) -> f64 {
        let rtt = f64::from(self.rtt_or_default());
        let rate = self.pacing_gain() * self.bw.get() * self.compensation();
        if self.mode == Mode::Startup {
            // Rate samples average over a round trip of a flight that
            // doubles, so they lag it: startup paces its window out in
            // no more than half a round trip.
            return rate.max(2.0 * self.startup_cwnd / rtt);
        }
        // Never below the smallest in-flight cap per minimum RTT: tokens
        // are what every transmission waits for (new data, and paced
        // retransmissions), and deliveries are what the estimate grows
        // from. A rate of nothing would send nothing, so nothing would be
        // delivered to raise it: a deadlock, not a slow path.
        rate.max(MIN_CWND / rtt)
    }

    /// In-flight cap, segments.
    fn cwnd(&self) -> f64 {
        if self.bw.get() <= 0.0 {
            return self.startup_cwnd;
        }
        if self.mode == Mode::Startup {
            // Two BDPs of a bandwidth estimate that lags the flight by a
            // round trip grow it ~1.65-fold per round at 9% loss (the
            // delivery rate is the sending rate less the loss); startup's
            // own window doubles per round whatever the loss, and stops
            // growing once the RTT shows a queue.
            return self.steady_cwnd().max(self.startup_cwnd);
        }
        self.steady_cwnd()
    }

    fn steady_cwnd(&self) -> f64 {
        // Startup paces at 2.89 but keeps BBR's steady cap of two BDPs in
        // flight, so that it overfills a queue of one BDP by nothing.
        let mut c = CWND_GAIN * self.bdp() * self.compensation();
        if self.mode == Mode::ProbeRtt {
            c = self.bdp() / 2.0;
        }
        // Room for ACKs that come late or in batches (a kcp-go receiver
        // acknowledges once per flush, a busy host hands over a batch at
        // once): as much as deliveries were seen to run ahead of the rate
        // in the last 10 round trips, at most one interval at the rate.
        // A flat interval's worth (30 ms on kcptun's default) was 130
        // segments on the field's clean path, where the bottleneck's queue
        // holds 34: the cap never bound, and every overshoot of the pacer
        // (probing, an estimate a few % high) overflowed the queue.
        //
        // And, on a path shorter than the flush interval, at least a
        // packet of ACKs: a receiver with fewer than that to send waits
        // for its next flush, so a cap under a packet's worth delivers one
        // cap per interval, which the rate samples then confirm (the
        // field's clean path, 1 ms, ran at a third of its rate for 2.6 s
        // so: 45 segments per 30 ms). On a longer path the flush comes
        // within the round trip anyway, and the extra room only queues.
        c += self.ack_room();
        c.max(MIN_CWND)
    }

    /// In-flight room for ACKs that come in batches, segments.
    fn ack_room(&self) -> f64 {
        let packet = if self.rtt_or_default() < self.interval {
            f64::from(self.ack_batch)
        } else {
            0.0
        };
        self.extra_acked
            .get()
            .min(self.bw.get() * f64::from(self.interval))
            .max(packet)
    }

    /// Segments per pacing burst: about 2 ms at the pacing rate, 2 to 1024.
    /// Wake-ups come at most once per ms, so the upper bound is what caps
    /// a paced sender: at most 1024 segments per ms.
    fn quantum(&self) -> f64 {
        (self.pacing_rate() * 2.0).clamp(2.0, 1024.0)
    }

    /// Add the tokens earned since the last call: at most two bursts, or a
    /// sixteenth of a round trip at the rate after the pacer held data back.
    pub(crate) fn refill(&mut self, now: u32) {
        let Some(last) = self.last_refill else {
            self.last_refill = Some(now);
            return;
        };
        let dt = now.wrapping_sub(last) as i32;
        if dt <= 0 {
            return;
        }
        self.last_refill = Some(now);
        // Two bursts: wake-ups fall on whole ms, after the burst was due,
        // and what accrued meanwhile must not be lost. While the pacer alone
        // held data back, a wake-up that came late (a busy host: tens of ms)
        // is owed what it earned, up to a sixteenth of a round trip at the
        // rate (a burst the bottleneck queue absorbs); else those tokens are
        // lost and the sender runs below the rate it paces at (12.8% of them
        // on the field's lossy path). An idle or window-limited sender
        // banks no more than two bursts.
        let burst = 2.0 * self.quantum();
        let cap = if self.held {
            burst.max(self.pacing_rate() * f64::from(self.rtt_or_default()) / 16.0)
        } else {
            burst
        };
        if self.tokens < cap {
            self.tokens = (self.tokens + self.pacing_rate() * f64::from(dt as u32)).min(cap);
        }
    }

    /// The longest round trip what is in flight can take if it all queues
    /// at the bottleneck: the minimum RTT plus the time to drain it at the
    /// estimated bandwidth (ms; 0 before a rate sample). A timeout shorter
    /// than this resends segments still queued: the end of startup, with
    /// two BDPs in flight, doubles the RTT within one round trip, faster
    /// than the smoothed RTT follows.
    fn queued_rtt(&self) -> u32 {
        let bw = self.bw.get();
        if bw <= 0.0 {
            return 0;
        }
        let drain = (f64::from(self.inflight) / bw).min(60_000.0) as u32;
        self.rtt_or_default().saturating_add(drain)
    }

    /// What is in flight fills the in-flight cap.
    fn cwnd_full(&self) -> bool {
        f64::from(self.inflight) >= self.cwnd()
    }

    /// A new segment may be admitted now (in-flight cap and pacing).
    pub(crate) fn may_admit(&self) -> bool {
        self.tokens >= 1.0 && f64::from(self.inflight) < self.cwnd()
    }

    /// With data waiting: when the next burst may leave, if pacing (not the
    /// in-flight cap) is what holds it back.
    pub(crate) fn next_send(&self, now: u32) -> Option<u32> {
        if f64::from(self.inflight) >= self.cwnd() {
            return None;
        }
        if self.tokens >= 1.0 {
            return Some(now);
        }
        let rate = self.pacing_rate().max(1e-3);
        let need = self
            .quantum()
            .min(self.cwnd() - f64::from(self.inflight))
            .max(1.0)
            - self.tokens;
        let wait = (need / rate).ceil().clamp(1.0, 1000.0) as u32;
        Some(self.last_refill.unwrap_or(now).wrapping_add(wait))
    }

    /// A retransmission may leave now: tokens are at most one burst in
    /// debt. Retransmissions go ahead of new data (their debt holds new
    /// admissions back) but not as a storm: after a burst of losses every
    /// lost segment is due at once, and sent together they overflowed the
    /// short queue that had just dropped them (the field's clean path:
    /// 110-125 of them then timed out, at an RTO of 100 ms).
    pub(crate) fn may_retransmit(&self) -> bool {
        self.tokens > -self.quantum()
    }

    /// When a retransmission held back by [`may_retransmit`](Self::may_retransmit)
    /// may leave (ms).
    pub(crate) fn next_retransmit(&self, now: u32) -> u32 {
        if self.may_retransmit() {
            return now;
        }
        let rate = self.pacing_rate().max(1e-3);
        let need = -self.quantum() - self.tokens + 1e-6;
        let wait = (need / rate).ceil().clamp(1.0, 1000.0) as u32;
        self.last_refill.unwrap_or(now).wrapping_add(wait)
    }

    /// Admission is over for this flush: data is still `queued` or not, and
    /// the sequence-space windows have `room` or not. Nothing queued makes
    /// the next transmissions app-limited; data that only tokens held back
    /// (not a window, not the in-flight cap) is owed a late wake-up's tokens.
    pub(crate) fn after_admission(&mut self, queued: bool, room: bool) {
        self.app_limited = !queued;
        self.held = queued && room && !self.may_admit() && !self.cwnd_full();
    }

    /// The lowest RTO of a segment's first transmission (ms), given the
    /// smoothed RTT `srtt` (0 before a sample) and the flush `interval`.
    ///
    /// kcp-go's RTO (srtt + max(interval, 4 rttvar)) is tight: a paced
    /// sender that probes with a quarter of a BDP in the queue, or a
    /// receiver that acknowledges once per flush, sets it off spuriously,
    /// and every spurious resend costs link capacity the model is
    /// accounting for. Half an srtt plus two intervals of headroom; true
    /// losses are mostly found by fast retransmit before that. Before the
    /// first RTT sample, RFC 6298's initial 1 s: kcp-go's 200 ms times out
    /// the whole first flight on any path longer than that, and the
    /// duplicates spoil the first round's rate samples. Nor below the round
    /// trip what is in flight takes if it all queues
    /// ([`queued_rtt`](Self::queued_rtt): the end of startup doubles the RTT
    /// faster than srtt follows).
    pub(crate) fn rto_floor(&self, srtt: u32, interval: u32) -> u32 {
        if srtt == 0 {
            INITIAL_RTO
        } else {
            (srtt + srtt / 2).max(self.queued_rtt()) + 2 * interval
        }
    }

    /// A new segment enters the window at `now`: one pacing token, one more in flight.
    pub(crate) fn on_admit(&mut self, now: u32) {
        if self.inflight == 0 {
            // Nothing in flight: the rate clock restarts here.
            self.delivered_ms = now;
            self.first_sent_ms = now;
        }
        self.tokens -= 1.0;
        self.inflight = self.inflight.saturating_add(1);
    }

    /// Segment `stamp` goes on the wire; `first` for its first transmission
    /// (paid for at admission and stamped), else a retransmission (one
    /// token), which counts as a loss when `evidence` says a later segment
    /// arrived. A retransmission keeps the first stamp: KCP's timeouts are
    /// often spurious (the original arrives), and a fresh stamp would end
    /// round trips early.
    pub(crate) fn on_transmit(
        &mut self,
        stamp: &mut TxStamp,
        first: bool,
        evidence: bool,
        now: u32,
    ) {
        self.round_sent = self.round_sent.saturating_add(1);
        if first {
            *stamp = TxStamp {
                delivered: self.delivered,
                delivered_ms: self.delivered_ms,
                sent_ms: now,
                first_sent_ms: self.first_sent_ms,
                app_limited: self.app_limited,
            };
        } else {
            self.tokens -= 1.0;
        }
        if evidence {
            self.round_lost = self.round_lost.saturating_add(1);
            if self.startup_overflowed() {
                self.exit_startup_on_loss(now);
            }
            // A loss is a segment sent: startup's window doubles per round
            // on what it sent, not only on what arrived.
            self.grow_startup();
        }
    }

    /// A segment sent with `stamp` is known delivered at `now`. `rtt` is the
    /// echo of the transmission the ACK answers, when known; `fresh` when
    /// that is its latest transmission (a rate sample is exact only then).
    pub(crate) fn on_delivered(
        &mut self,
        stamp: &TxStamp,
        now: u32,
        rtt: Option<u32>,
        fresh: bool,
    ) {
        self.delivered = self.delivered.wrapping_add(1);
        self.delivered_ms = now;
        self.first_sent_ms = stamp.sent_ms;
        self.inflight = self.inflight.saturating_sub(1);
        self.ack_aggregation(now);
        if let Some(r) = rtt {
            self.rtt_sample(r, now);
        }
        self.grow_startup();
        // Round trips: a round ends when a segment sent after its start is delivered.
        if (stamp.delivered.wrapping_sub(self.next_round_delivered) as i32) >= 0 {
            self.next_round_delivered = self.delivered;
            self.round += 1;
            self.end_round(now);
        } else if self.mode == Mode::Drain && self.drained() {
            // Drained: waiting for the round to end would pace at a third
            // of the rate for up to another round trip (0.5 s on the field
            // path, where what is in flight falls to a fifth of the BDP).
            self.enter_probe_bw(now);
        }
        if !fresh {
            return;
        }
        // The longer of the ACK-side and the send-side spans, as BBR does: a
        // receiver or a host that wakes late hands over a batch of ACKs at
        // once, and the ACK span alone then shrinks and overstates the rate
        // (by up to 10% here for 20 ms late, and the maximum filter keeps
        // the worst), while the send span is what the pacer spread out.
        let acked = now.wrapping_sub(stamp.delivered_ms) as i32;
        let sent = stamp.sent_ms.wrapping_sub(stamp.first_sent_ms) as i32;
        let interval = acked.max(sent);
        let floor = self.min_rtt.unwrap_or(1).max(1) as i32;
        if interval < floor {
            return;
        }
        let count = self.delivered.wrapping_sub(stamp.delivered);
        let rate = f64::from(count) / f64::from(interval as u32);
        if !stamp.app_limited || rate > self.bw.get() {
            self.bw.update(self.round, rate);
        }
    }

    /// One segment delivered at `now`: the ACK-aggregation epoch (BBR's
    /// `extra_acked`). An epoch restarts when deliveries fall back to the
    /// bandwidth estimate; what they ran ahead of it is the burst of ACKs
    /// the in-flight cap must leave room for.
    fn ack_aggregation(&mut self, now: u32) {
        let bw = self.bw.get();
        let elapsed = (now.wrapping_sub(self.ack_epoch_ms) as i32).max(0);
        let mut expected = bw * f64::from(elapsed as u32);
        if f64::from(self.ack_epoch_acked) <= expected || self.ack_epoch_acked >= 1 << 20 {
            self.ack_epoch_acked = 0;
            self.ack_epoch_ms = now;
            expected = 0.0;
        }
        self.ack_epoch_acked += 1;
        let extra = (f64::from(self.ack_epoch_acked) - expected).max(0.0);
        self.extra_acked.update(self.round, extra);
    }

    /// Startup found more losses this round (at least `MIN_ROUND_SENT`)
    /// than a quarter of what this round or the last sent: far above any
    /// random loss the pacing compensates (at most `MAX_COMPENSATED_LOSS`).
    /// The losses found early in a round are the last round's, and a flush
    /// resends them before it sends anything new.
    ///
    /// Not before the first rate sample: the phases after startup pace at
    /// the estimate, and without one there is nothing to pace at (ACKs of
    /// a few segments of the first flight, on a path of under 8 ms, make
    /// every earlier one a loss at once).
    fn startup_overflowed(&self) -> bool {
        let sent = self.round_sent.max(self.last_round_sent);
        self.mode == Mode::Startup
            && self.bw.get() > 0.0
            && self.round_lost >= MIN_ROUND_SENT
            && f64::from(self.round_lost) > STARTUP_LOSS_EXIT * f64::from(sent)
    }

    /// Startup overflowed a queue too short for its delay to show (the
    /// field's clean path: 7.7 ms of queue under the 5 ms slack at a 1 ms
    /// RTT), with its window, paced out in half a round trip, grown to
    /// several times what the path holds. Checked at each loss found, not
    /// at the round's end: there (a round trip of batched ACKs later) the
    /// window had doubled twice more. The losses emptied the queue, so no
    /// drain phase: it would pace at a third of the rate until the lost
    /// segments, counted in flight, were repaired (400 ms there).
    fn exit_startup_on_loss(&mut self, now: u32) {
        self.stats.startup_loss_exits += 1;
        self.enter_probe_bw(now);
    }

    /// One more segment in startup's window, unless the RTT shows a queue:
    /// the pipe is full, and doubling again would overflow it before
    /// startup's exit tests see the queue a round later.
    fn grow_startup(&mut self) {
        if self.mode == Mode::Startup && self.no_queue {
            self.startup_cwnd += 1.0;
        }
    }

    /// How much later than a segment another must have been sent for its
    /// acknowledgement to count as evidence that the first was lost (ms):
    /// an eighth of the minimum RTT. On a long path that outlasts the lag of
    /// the receiver's second copy of an acknowledgement (one flush); on a
    /// path of a few ms it is nothing, as a floor of even a few ms would be
    /// many round trips there, with the losses it hides holding the
    /// in-flight cap.
    pub(crate) fn reorder_window(&self) -> u32 {
        self.rtt_or_default() / 8
    }

    fn rtt_sample(&mut self, rtt: u32, now: u32) {
        let rtt = rtt.max(1);
        let min = self.min_rtt.map_or(rtt, |m| m.min(rtt));
        self.no_queue = !self.shows_queue(rtt, min);
        self.round_min_rtt = Some(self.round_min_rtt.map_or(rtt, |m| m.min(rtt)));
        let expired = now.wrapping_sub(self.min_rtt_stamp) > MIN_RTT_WINDOW;
        if self.min_rtt.is_none_or(|m| rtt <= m) || (expired && self.mode != Mode::ProbeRtt) {
            if expired && self.min_rtt.is_some_and(|m| rtt > m) && self.mode == Mode::ProbeBw {
                // Not seen for the window: drain the queue to look again.
                self.mode = Mode::ProbeRtt;
                self.probe_rtt_until = None;
                self.min_rtt = Some(rtt);
                self.min_rtt_stamp = now;
                return;
            }
            self.min_rtt = Some(rtt);
            self.min_rtt_stamp = now;
        }
    }

    fn end_round(&mut self, now: u32) {
        let min_rtt = self.rtt_or_default();
        // Loss against the queue.
        if self.round_sent >= MIN_ROUND_SENT {
            let loss = f64::from(self.round_lost) / f64::from(self.round_sent);
            let queue = self
                .round_min_rtt
                .is_some_and(|r| self.shows_queue(r, min_rtt));
            if queue && self.mode == Mode::Startup {
                // A queue that stands for a whole round trip: the pipe is
                // full. Leave startup now rather than when the bandwidth
                // stops growing, which takes three more rounds at 2.89 and
                // fills the queue (a full BDP of queueing doubles the RTT
                // and sets off KCP's tight retransmission timers for
                // everything in flight).
                self.mode = Mode::Drain;
                self.stats.startup_queue_exits += 1;
            } else if queue && loss > self.loss_base + OVERFLOW_EXCESS {
                self.bw.scale(OVERFLOW_BETA);
                self.stats.overflow_rounds += 1;
                if self.mode == Mode::Startup {
                    self.mode = Mode::Drain;
                }
            } else if !queue {
                self.loss_base += (loss - self.loss_base) / 8.0;
            }
            self.queue = queue;
            self.queue_rounds = if queue { self.queue_rounds + 1 } else { 0 };
            if self.queue_rounds >= STANDING_ROUNDS && self.mode == Mode::ProbeBw {
                // A queue that outlived the drain phase: the estimate is
                // above the bottleneck (the path slowed, or another flow
                // takes a share). Cut it as an overflow would, gently; two
                // flows doing this converge on equal shares.
                self.bw.scale(STANDING_BETA);
                self.stats.standing_cuts += 1;
                self.queue_rounds = 0;
            }
            self.last_round_sent = self.round_sent;
            self.round_sent = 0;
            self.round_lost = 0;
            self.round_min_rtt = None;
        }
        match self.mode {
            Mode::Startup => {
                if !self.app_limited {
                    let bw = self.bw.get();
                    if bw >= self.full_bw * 1.25 {
                        self.full_bw = bw;
                        self.full_bw_rounds = 0;
                    } else {
                        self.full_bw_rounds += 1;
                        if self.full_bw_rounds >= 3 {
                            self.mode = Mode::Drain;
                        }
                    }
                }
            }
            Mode::Drain => {
                if self.drained() {
                    self.enter_probe_bw(now);
                }
            }
            Mode::ProbeBw => {
                // Each phase lasts about one minimum RTT.
                if now.wrapping_sub(self.cycle_stamp) >= min_rtt {
                    self.cycle = (self.cycle + 1) % CYCLE.len();
                    self.cycle_stamp = now;
                }
            }
            Mode::ProbeRtt => match self.probe_rtt_until {
                None => {
                    if f64::from(self.inflight) <= self.cwnd() {
                        self.probe_rtt_until = Some(now.wrapping_add(PROBE_RTT_TIME.max(min_rtt)));
                    }
                }
                Some(t) if (now.wrapping_sub(t) as i32) >= 0 => {
                    self.min_rtt_stamp = now;
                    self.enter_probe_bw(now);
                }
                Some(_) => {}
            },
        }
    }

    fn enter_probe_bw(&mut self, now: u32) {
        self.mode = Mode::ProbeBw;
        // Start after the up-probe and its drain, as BBR picks a random phase.
        self.cycle = 2;
        self.cycle_stamp = now;
        self.probe_rtt_until = None;
    }

    pub(crate) fn stats(&self) -> BbrStats {
        BbrStats {
            bandwidth: self.bw.get() * 1000.0,
            min_rtt: self.min_rtt.unwrap_or(0),
            pacing_rate: self.pacing_rate() * 1000.0,
            cwnd: self.cwnd() as u32,
            inflight: self.inflight,
            random_loss: self.loss_base,
            overflow_rounds: self.stats.overflow_rounds,
            standing_cuts: self.stats.standing_cuts,
            startup_queue_exits: self.stats.startup_queue_exits,
            startup_loss_exits: self.stats.startup_loss_exits,
            extra_acked: self.ack_room() as u32,
            rounds: self.round,
            filled: self.mode != Mode::Startup,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `n` segments at `now`, returning their stamps.
    fn send(m: &mut Bbr, now: u32, n: usize) -> Vec<TxStamp> {
        (0..n)
            .map(|_| {
                m.on_admit(now);
                let mut stamp = TxStamp::default();
                m.on_transmit(&mut stamp, true, false, now);
                stamp
            })
            .collect()
    }

    #[test]
    fn startup_doubles_its_window_per_round_through_loss_until_a_queue_shows() {
        let mut m = Bbr::new(10, 0);
        assert_eq!(m.cwnd(), INITIAL_CWND);
        // One round trip of 100 ms: 29 of the 32 delivered, 3 found lost
        // (9%) and resent. Every segment sent counts, so the window doubles.
        let stamps = send(&mut m, 0, 32);
        for s in &stamps[..29] {
            m.on_delivered(s, 100, Some(100), true);
        }
        for _ in 0..3 {
            let mut stamp = TxStamp::default();
            m.on_transmit(&mut stamp, false, true, 100);
        }
        assert_eq!(m.mode, Mode::Startup);
        assert_eq!(m.startup_cwnd, 2.0 * INITIAL_CWND);
        // The rate samples alone would allow 61: two BDPs of 29 per 100 ms.
        let from_samples = m.steady_cwnd();
        assert!(from_samples < 62.0, "{from_samples}");
        assert_eq!(m.cwnd(), 64.0);
        // Paced out in half a round trip.
        assert!((m.pacing_rate() - 1.28).abs() < 1e-9, "{}", m.pacing_rate());
        // An RTT sample 30 ms above the minimum: a queue. Neither deliveries
        // nor losses grow the window any more.
        let stamps = send(&mut m, 100, 2);
        m.on_delivered(&stamps[0], 230, Some(130), true);
        let mut stamp = TxStamp::default();
        m.on_transmit(&mut stamp, false, true, 230);
        assert_eq!(m.startup_cwnd, 64.0);
        // One without: it grows again.
        m.on_delivered(&stamps[1], 231, Some(101), true);
        assert_eq!(m.startup_cwnd, 65.0);
    }

    #[test]
    fn a_batch_of_late_acks_does_not_overstate_the_rate() {
        let mut m = Bbr::new(10, 0);
        // 100 ms round trip at 1 segment per ms.
        for s in send(&mut m, 0, 100) {
            m.on_delivered(&s, 100, Some(100), true);
        }
        let bw = m.bw.get();
        assert!((bw - 1.0).abs() < 1e-9, "{bw}");
        // 120 segments sent over 120 ms were delivered over 120 ms too, but
        // the host handled the ACK that opened the span 10 ms late: the ACK
        // side sees 110 ms. The send side still sees 120.
        let stamp = TxStamp {
            delivered: m.delivered,
            delivered_ms: 310,
            sent_ms: 420,
            first_sent_ms: 300,
            app_limited: false,
        };
        m.delivered = m.delivered.wrapping_add(119);
        m.inflight = 200;
        m.on_delivered(&stamp, 420, Some(100), true);
        assert!(m.bw.get() <= 1.0 + 1e-9, "{}", m.bw.get());
    }

    #[test]
    fn a_late_wake_up_is_owed_its_tokens_only_while_the_pacer_held_data() {
        let mut m = Bbr::new(10, 0);
        // One round trip of 320 ms at 1 segment per ms.
        for s in send(&mut m, 0, 320) {
            m.on_delivered(&s, 320, Some(320), true);
        }
        let rate = m.pacing_rate();
        let burst = 2.0 * m.quantum();
        let owed = rate * 320.0 / 16.0;
        assert!(owed > 2.0 * burst, "{rate} {burst} {owed}");
        for held in [false, true] {
            m.held = held;
            m.tokens = 0.0;
            m.last_refill = Some(1_000);
            // The wake-up due at 1,002 comes 38 ms late.
            m.refill(1_040);
            let want = if held { owed } else { burst };
            assert!(
                (m.tokens - want).abs() < 1e-9,
                "held {held}: {} vs {want}",
                m.tokens
            );
        }
        // Late by less than the cap: exactly what accrued.
        m.tokens = 0.0;
        m.last_refill = Some(2_000);
        m.refill(2_010);
        assert!((m.tokens - 10.0 * rate).abs() < 1e-9, "{}", m.tokens);
    }

    #[test]
    fn drain_ends_when_the_queue_is_gone_not_at_the_round_end() {
        let mut m = Bbr::new(10, 0);
        // One round trip of 100 ms at 1 segment per ms: bandwidth 1/ms,
        // BDP 100 segments.
        for s in send(&mut m, 0, 100) {
            m.on_delivered(&s, 100, Some(100), true);
        }
        assert!(m.bw.get() > 0.5, "{:?}", m.stats());
        // Startup ended with three BDPs in flight; the round that drains
        // them began with the first of these.
        let flight = send(&mut m, 100, 300);
        m.mode = Mode::Drain;
        // The round that drains them began after they were sent: their
        // deliveries do not end it, so only the mid-round check can end
        // the drain.
        m.next_round_delivered = m.delivered.wrapping_add(1_000);
        let bdp = m.bdp() * m.compensation();
        let mut exited_at = None;
        for (i, s) in flight.iter().enumerate().skip(1).take(250) {
            m.on_delivered(s, 150 + i as u32, Some(110), true);
            if m.mode == Mode::ProbeBw {
                exited_at = Some(m.inflight);
                break;
            }
        }
        let left = exited_at.expect("the drain never ended before the round did");
        assert!(
            f64::from(left) <= bdp && f64::from(left) > bdp - 2.0,
            "{left} vs {bdp}"
        );
    }

    /// One round trip of `rtt` ms at `per_ms` segments per ms, every ACK
    /// on time: the model knows the rate and the minimum RTT.
    fn settle(m: &mut Bbr, per_ms: u32, rtt: u32) -> u32 {
        let stamps = send(m, 0, (per_ms * rtt) as usize);
        for (i, s) in stamps.iter().enumerate() {
            m.on_delivered(s, rtt + i as u32 / per_ms, Some(rtt), true);
        }
        rtt + stamps.len() as u32 / per_ms
    }

    #[test]
    fn the_in_flight_cap_leaves_room_for_a_packet_of_acks_not_a_whole_interval() {
        // The field's clean path: 4.4 segments per ms, 1 ms, kcptun's
        // 30 ms interval, 56 ACKs per packet.
        let mut m = Bbr::new(30, 56);
        settle(&mut m, 4, 1);
        let bdp = m.bdp();
        // Deliveries as fast as the rate: the room is a packet of ACKs,
        // not the 30 ms of the rate (120 segments) the cap once added,
        // which a 34-packet queue could never hold.
        let room = m.cwnd() - 2.0 * bdp;
        assert!((room - 56.0).abs() < 1e-9, "{room} {:?}", m.stats());
        // A receiver that acknowledges in batches of 80: room for them.
        let now = 100;
        let flight = send(&mut m, now, 80);
        for s in &flight {
            m.on_delivered(s, now + 20, Some(20), true);
        }
        let room = m.cwnd() - 2.0 * m.bdp();
        assert!(room >= 79.0 && room <= 30.0 * m.bw.get(), "{room}");
        // And a slow estimate keeps the packet of ACKs: with less in
        // flight the receiver acknowledges only at its next flush, one
        // cap per interval, which the rate samples would then confirm.
        let mut slow = Bbr::new(30, 56);
        settle(&mut slow, 1, 1);
        assert!(slow.cwnd() >= 56.0 + 2.0 * slow.bdp(), "{:?}", slow.stats());
    }

    #[test]
    fn ack_delay_within_an_interval_is_not_a_queue() {
        // A 1 ms path whose receiver acknowledges at its 30 ms flush until
        // the flight fills a packet of ACKs: samples up to 31 ms.
        let mut m = Bbr::new(30, 56);
        let stamps = send(&mut m, 0, 32);
        m.on_delivered(&stamps[0], 1, Some(1), true);
        for (i, s) in stamps.iter().enumerate().skip(1) {
            m.on_delivered(s, 30, Some(30 - i as u32 % 8), true);
        }
        let stamps = send(&mut m, 30, 64);
        for s in &stamps {
            m.on_delivered(s, 61, Some(31), true);
        }
        assert_eq!(m.mode, Mode::Startup, "{:?}", m.stats());
        assert_eq!(m.stats.startup_queue_exits, 0);
        // 40 ms above the minimum for a whole round is a queue.
        for at in [61, 102] {
            let stamps = send(&mut m, at, 128);
            for s in &stamps {
                m.on_delivered(s, at + 41, Some(41), true);
            }
        }
        assert_ne!(m.mode, Mode::Startup, "{:?}", m.stats());
        assert_eq!(m.stats.startup_queue_exits, 1);
    }

    #[test]
    fn startup_ends_at_a_round_losing_a_quarter_not_at_random_loss() {
        // Random loss: 15% of each round lost and resent. Startup goes on.
        let mut m = Bbr::new(10, 0);
        let mut now = 0;
        for round in 0..4u32 {
            let n = 100 * (round + 1);
            let stamps = send(&mut m, now, n as usize);
            now += 100;
            for s in &stamps[..(n * 85 / 100) as usize] {
                m.on_delivered(s, now, Some(100), true);
            }
            for _ in 0..n * 15 / 100 {
                let mut stamp = TxStamp::default();
                m.on_transmit(&mut stamp, false, true, now);
            }
        }
        assert_eq!(m.mode, Mode::Startup, "{:?}", m.stats());
        // A burst of losses (a short queue overflowed): startup ends at
        // the loss that takes the round past a quarter, not at its end.
        let mut m = Bbr::new(10, 0);
        let stamps = send(&mut m, 0, 64);
        for s in &stamps[..30] {
            m.on_delivered(s, 10, Some(10), true);
        }
        let mut found = 0;
        while m.mode == Mode::Startup && found < 34 {
            let mut stamp = TxStamp::default();
            m.on_transmit(&mut stamp, false, true, 11);
            found += 1;
        }
        assert_eq!(m.mode, Mode::ProbeBw, "{:?}", m.stats());
        assert_eq!(m.stats.startup_loss_exits, 1);
        assert!(found <= 22, "{found}");
    }

    #[test]
    fn startup_does_not_end_on_losses_found_before_any_rate_sample() {
        // A flight of 32 sent at once on a path of under 8 ms (a reorder
        // window of 0): ACKs of two of its segments make every earlier one
        // a loss before anything gave a rate sample.
        let mut m = Bbr::new(10, 24);
        let _ = send(&mut m, 0, 32);
        for _ in 0..20 {
            let mut stamp = TxStamp::default();
            m.on_transmit(&mut stamp, false, true, 0);
        }
        assert_eq!(m.mode, Mode::Startup, "{:?}", m.stats());
        assert_eq!(m.stats.startup_loss_exits, 0);
        assert!(m.pacing_rate() > 0.0, "{:?}", m.stats());
    }

    #[test]
    fn every_phase_paces_at_least_the_smallest_cap_per_round_trip() {
        // Whatever the estimate (here none at all, in every phase after
        // startup), tokens keep coming: a held retransmission and then new
        // data get them within a bounded time.
        for mode in [Mode::Drain, Mode::ProbeBw, Mode::ProbeRtt] {
            let mut m = Bbr::new(10, 24);
            let _ = send(&mut m, 0, 8);
            m.on_delivered(&TxStamp::default(), 1, Some(1), false);
            m.mode = mode;
            m.refill(1);
            m.tokens = -10.0;
            assert!(!m.may_retransmit(), "{mode:?}");
            let at = m.next_retransmit(1);
            assert!(at <= 10, "{mode:?}: {at}");
            m.refill(at);
            assert!(m.may_retransmit(), "{mode:?} {:?}", m.stats());
            let mut now = at;
            while !m.may_admit() && now < 100 {
                now += 1;
                m.refill(now);
            }
            assert!(m.may_admit(), "{mode:?} at {now}: {:?}", m.stats());
        }
    }

    #[test]
    fn retransmissions_run_at_most_one_burst_ahead_of_the_tokens() {
        let mut m = Bbr::new(10, 0);
        let now = settle(&mut m, 4, 10);
        m.refill(now);
        m.refill(now + 1);
        let burst = m.quantum();
        // A burst of losses: every one due at once.
        let mut sent = 0;
        while m.may_retransmit() && sent < 1_000 {
            let mut stamp = TxStamp::default();
            m.on_transmit(&mut stamp, false, true, now + 1);
            sent += 1;
        }
        assert!(f64::from(sent) <= 3.0 * burst + 1.0, "{sent} {burst}");
        // The rest wait for the tokens, and the wake-up is when they come.
        let at = m.next_retransmit(now + 1);
        assert!(at > now + 1, "{at}");
        m.refill(at);
        assert!(m.may_retransmit());
        // New data waits behind the debt.
        assert!(!m.may_admit());
    }
}
