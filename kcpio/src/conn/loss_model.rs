//! The loss model both FEC extensions between kcpio ends share (the
//! datagram one, `dgram_fec`, and the adaptive stream FEC, `stream_fec`):
//! a Gilbert-Elliott channel fitted to the receiver's reported loss rate
//! and mean loss run, and from it the fewest parity shards each group
//! size needs to meet a residual-loss target. Also the small cache of
//! Reed-Solomon codecs by shape both use, and how both receivers measure
//! the path's queueing delay ([`OwdBase`], [`WindowedMax`]).

use std::time::Duration;

use crate::fec::codec::VandermondeCodec;

/// Data shards per group at most: the datagram extension's groups toward
/// a peer that takes wide groups (`dgram_fec`'s `TAKES_WIDE`). At 9% loss
/// a 10^-4 residual takes 11 parity shards per 32 data, 17-18 per 64: at
/// lossy9's rate (about 5,000 datagrams/s) the 15 ms deadline fills 64.
pub(crate) const MAX_K: usize = 64;
/// Parity shards per group at most (groups of 64 at up to about 15% loss).
pub(crate) const MAX_M: usize = 32;
/// The group every kcpio receiver takes (a kcpio before wide groups
/// refuses more data or parity shards): the datagram sender's limit toward
/// a peer that has not said it takes more, and the stream FEC's (its
/// parity word has 5 and 4 bits for them).
pub(crate) const NARROW_K: usize = 32;
pub(crate) const NARROW_M: usize = 16;

/// The loss rate assumed before the first report, and its weight in shards.
pub(crate) const PRIOR_LOSS: f64 = 0.03;
const PRIOR_WEIGHT: f64 = 20.0;
/// Standard errors of the loss estimate above it that the parity table
/// is built for.
const LOSS_MARGIN: f64 = 1.0;
/// The smallest group built for the estimate plus [`LOSS_MARGIN`].
const MARGIN_K: usize = 16;
/// Shards over which the loss estimate halves its memory.
const LOSS_HALF_LIFE: f64 = 2000.0;
/// Standard errors below the estimate (of the loss rate, and of the loss
/// after a loss) at which a small group must still miss the target before
/// its parity rises, and above it at which one fewer must still meet it
/// before its parity falls, per share of the group's shards the step
/// adds or removes: a step of a third (from two copies of a datagram to
/// three) needs two standard errors, one of a sixth one. Smaller steps
/// (larger groups) keep the plain hysteresis: there a wrong step costs
/// little either way, and a bound of a fraction of an error only moved
/// the bulk load's parity up (1.648x to 1.651x at 9%).
const STEP_EVIDENCE: f64 = 6.0;

/// The bursty alternative a new model weighs against its estimate: loss
/// after a loss at least this (runs of three on average). For its first
/// few hundred shards a model has seen a handful of loss runs or none,
/// and read the mean run as 1: on a path losing 5% in runs of 3, groups
/// of 12 got 2-4 parity shards where 16 are due, and the first second
/// lost 1% of the datagrams. Groups of [`BURSTY_MIN_K`] or more are sized
/// for the residual averaged over the estimate and this alternative, by
/// the alternative's likelihood given the runs seen ([`LossModel::bursty_weight`]):
/// a few runs of one loss, or a few hundred shards with no run at all,
/// make it negligible, and a run of several keeps it.
const BURSTY_R: f64 = 2.0 / 3.0;
/// Its probability before the runs are counted.
const BURSTY_PRIOR: f64 = 0.5;
/// The smallest group it sizes: a sparse flow's copies keep their own
/// evidence rule ([`STEP_EVIDENCE`]), where a wrong step costs a third of
/// the bytes.
const BURSTY_MIN_K: usize = 4;
/// Updates before it applies. The first rests on one report's few
/// dozen shards, on a path where the sender has no rate measure yet:
/// weighed in there, on the field's lossy path (random 9%) it raised a
/// group of 12's parity to 14 from the estimate's 11, which took the
/// start-up cut's queue p99 over its bound (178 ms), and the overload
/// row's seed 30 to 90 of 16,000 lost (its bound 80).
const BURSTY_FROM_UPDATE: u64 = 2;

/// How long a window of the base one-way delay lasts.
pub(crate) const OWD_WINDOW: Duration = Duration::from_secs(10);

/// A path's base one-way delay: the least sample over the current
/// [`OWD_WINDOW`] and the last, so the base follows a path whose delay
/// rose (a route change) within two windows. A sample's excess over it
/// is the time it waited in queues. Each extension compares its own
/// stamps (`lower(a, b)`: the lesser of two delays).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OwdBase<T> {
    base: Option<T>,
    win: Option<T>,
    start: Duration,
}

impl<T: Copy> OwdBase<T> {
    /// Takes the sample `owd` at `now`; returns the base.
    pub(crate) fn sample(&mut self, now: Duration, owd: T, lower: impl Fn(T, T) -> T) -> T {
        if now.saturating_sub(self.start) > OWD_WINDOW {
            self.base = self.win.or(self.base);
            self.win = None;
            self.start = now;
        }
        let least = |m: Option<T>| m.map_or(owd, |m| lower(m, owd));
        self.win = Some(least(self.win));
        let base = least(self.base);
        self.base = Some(base);
        base
    }

    /// The base, once there was a sample.
    pub(crate) fn get(&self) -> Option<T> {
        self.base
    }
}

/// The most of a signal (a queueing delay) over the current window and
/// the last.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WindowedMax<T> {
    cur: T,
    last: T,
    start: Duration,
}

impl<T: Copy + Ord> WindowedMax<T> {
    /// Takes the sample `x` at `now`, windows `window` long; true when
    /// it began a new window.
    pub(crate) fn sample(&mut self, now: Duration, x: T, window: Duration) -> bool {
        let new = now.saturating_sub(self.start) > window;
        if new {
            self.last = self.cur;
            self.cur = x;
            self.start = now;
        } else {
            self.cur = self.cur.max(x);
        }
        new
    }

    /// The most over this window and the last.
    pub(crate) fn get(&self) -> T {
        self.cur.max(self.last)
    }
}

/// Reed-Solomon codecs by shape, reused: a shape's matrix and tables are
/// built once, and kept while the shape is in use.
///
/// The encoder and the decoder keep separate lists, each replacing its
/// least recently used shape when full. The sender's shapes follow the
/// traffic (a group holds whatever arrived before its deadline, and the
/// parity for each size comes from the loss model), so it may use one
/// shape per group size: [`ENCODERS`](Self::ENCODERS) holds every size's
/// shape at once, and a burst of unusual sizes cannot push out the shape
/// the steady traffic uses (a round-robin list of 16 did, and every group
/// after a stall rebuilt a matrix). Encoders build no decode plans, so
/// their list costs little. Decoders are made only for the shapes a peer
/// chose, and each may hold up to `fec::codec`'s plan budget (64 KiB) of
/// decode plans, so their list stays at [`DECODERS`](Self::DECODERS): at
/// most 1 MiB of plans per session, whatever shapes a peer names.
#[derive(Default)]
pub(crate) struct Codecs {
    encoders: Lru,
    decoders: Lru,
}

impl Codecs {
    /// Encoding shapes kept: one per group size.
    pub(crate) const ENCODERS: usize = MAX_K;
    /// Decoding shapes kept.
    pub(crate) const DECODERS: usize = 16;

    /// The codec that encodes `k` data shards into `m` parity shards.
    pub(crate) fn encoder(&mut self, k: usize, m: usize) -> Option<&mut VandermondeCodec> {
        self.encoders.get(k, m, Self::ENCODERS)
    }

    /// The codec that rebuilds groups of `k` data and `m` parity shards.
    pub(crate) fn decoder(&mut self, k: usize, m: usize) -> Option<&mut VandermondeCodec> {
        self.decoders.get(k, m, Self::DECODERS)
    }

    /// Codecs made so far (each a matrix, unless another codec of its
    /// shape was alive).
    #[cfg(test)]
    pub(crate) fn made(&self) -> u64 {
        self.encoders.made + self.decoders.made
    }
}

/// Codecs by shape, the least recently used replaced when full.
#[derive(Default)]
struct Lru {
    /// (k, m, the tick of its last use, the codec).
    list: Vec<(usize, usize, u64, VandermondeCodec)>,
    tick: u64,
    made: u64,
}

impl Lru {
    fn get(&mut self, k: usize, m: usize, cap: usize) -> Option<&mut VandermondeCodec> {
        self.tick += 1;
        let i = match self.list.iter().position(|e| e.0 == k && e.1 == m) {
            Some(i) => i,
            None => {
                let c = VandermondeCodec::for_decoding(k, m)?;
                self.made += 1;
                if self.list.len() < cap {
                    self.list.push((k, m, 0, c));
                    self.list.len() - 1
                } else {
                    let (v, _) = self.list.iter().enumerate().min_by_key(|(_, e)| e.2)?;
                    *self.list.get_mut(v)? = (k, m, 0, c);
                    v
                }
            }
        };
        let e = self.list.get_mut(i)?;
        e.2 = self.tick;
        Some(&mut e.3)
    }
}

/// The sender's loss model: Gilbert-Elliott from the reported loss rate
/// and mean loss run, and the parity each group size needs.
#[derive(Clone, Debug)]
pub(crate) struct LossModel {
    lost: f64,
    seen: f64,
    runs: f64,
    /// The loss rate estimate.
    pub(crate) p: f64,
    /// The mean loss run (shards).
    pub(crate) burst: f64,
    /// Parity for a group of `k` data shards, index `k`.
    pub(crate) table: [u8; MAX_K + 1],
    /// Updates folded in.
    pub(crate) updates: u64,
    /// The loss rate assumed before the first report (weight
    /// `PRIOR_WEIGHT` shards).
    prior: f64,
    /// The largest group the table is built for, and the most parity any
    /// entry gets: [`NARROW_K`] and [`NARROW_M`] unless widened.
    max_k: usize,
    max_m: usize,
}

impl LossModel {
    pub(crate) fn new(target: f64) -> Self {
        Self::with_prior(target, PRIOR_LOSS)
    }

    /// A model assuming `prior` loss until reports come.
    pub(crate) fn with_prior(target: f64, prior: f64) -> Self {
        let mut m = Self {
            lost: 0.0,
            seen: 0.0,
            runs: 0.0,
            p: prior,
            burst: 1.0 / (1.0 - prior),
            table: [0; MAX_K + 1],
            updates: 0,
            prior,
            max_k: NARROW_K,
            max_m: NARROW_M,
        };
        m.rebuild(target, true);
        m
    }

    /// Builds the table for groups of up to `max_k` data shards with at
    /// most `max_m` parity each (at most [`MAX_K`], [`MAX_M`]); entries
    /// beyond `max_k` are 0.
    pub(crate) fn set_limits(&mut self, max_k: usize, max_m: usize, target: f64) {
        self.set_limits_with::<false>(max_k, max_m, target);
    }

    fn set_limits_with<const DIRECT: bool>(&mut self, max_k: usize, max_m: usize, target: f64) {
        let (max_k, max_m) = (max_k.clamp(1, MAX_K), max_m.clamp(1, MAX_M));
        if (max_k, max_m) == (self.max_k, self.max_m) {
            return;
        }
        self.max_k = max_k;
        self.max_m = max_m;
        self.table[max_k + 1..].fill(0);
        for m in &mut self.table {
            *m = (*m).min(max_m as u8);
        }
        self.rebuild_with::<DIRECT>(target, false);
    }

    /// The largest group the table is built for.
    pub(crate) fn max_k(&self) -> usize {
        self.max_k
    }

    /// The most parity a group gets.
    pub(crate) fn max_m(&self) -> usize {
        self.max_m
    }

    /// The most parity a group of `k` gets: [`NARROW_M`], or half the
    /// data of a larger group, within the limit. A group of 32 or fewer
    /// gets what it got before wide groups, whatever the limit: the
    /// higher limit is for the larger groups (18 for 64 at 9%), not more
    /// parity for bursts no group of 16 rebuilt (the bursty path's mean
    /// runs of 3 bought 2.42-2.51x the bytes against 2.30-2.36x, and lost
    /// the same).
    fn m_cap(&self, k: usize) -> usize {
        self.max_m.min(NARROW_M.max(k / 2))
    }

    pub(crate) fn update(&mut self, seen: u64, lost: u64, runs: u64, target: f64) {
        self.update_with::<false>(seen, lost, runs, target);
    }

    fn update_with<const DIRECT: bool>(&mut self, seen: u64, lost: u64, runs: u64, target: f64) {
        self.updates += 1;
        let (seen, lost, runs) = (seen as f64, lost as f64, runs as f64);
        let decay = 0.5f64.powf(seen / LOSS_HALF_LIFE);
        self.lost = self.lost * decay + lost;
        self.seen = self.seen * decay + seen;
        self.runs = self.runs * decay + runs;
        self.p =
            ((self.lost + self.prior * PRIOR_WEIGHT) / (self.seen + PRIOR_WEIGHT)).clamp(0.0, 0.5);
        self.burst = if self.runs >= 1.0 {
            (self.lost / self.runs).max(1.0)
        } else {
            1.0 / (1.0 - self.p)
        };
        self.rebuild_with::<DIRECT>(target, false);
    }

    /// Parity per group size for the target; with hysteresis against the
    /// estimate's noise: a size's parity rises only when its residual
    /// exceeds the target by more than `2 / (k + m)` of it (a step that
    /// costs a third more bytes, as for single datagrams, needs a clear
    /// case; one that costs a sixteenth, little), and falls as soon as one
    /// fewer meets the target. A step of a sixth of a group or more also
    /// needs the evidence the estimate rests on: a rise only when the target is
    /// still missed [`STEP_EVIDENCE`] standard errors below the estimate
    /// (of the loss rate and of the loss after a loss), a fall only when
    /// one fewer still meets it as far above. A sparse flow's estimate
    /// rests on few shards: at 100 datagrams/s and 4.6%, two copies of
    /// each meet the target (0.046^3) and three cost a third more bytes,
    /// and the noise of a few hundred shards alone crossed 4.64%, or put
    /// the loss after a loss above the loss rate, half the time.
    fn rebuild(&mut self, target: f64, fresh: bool) {
        self.rebuild_with::<false>(target, fresh);
    }

    /// [`rebuild`](Self::rebuild); with `DIRECT`, each residual of the
    /// fewest-parity search computed alone, as before [`ResidualRun`]
    /// (the tests' and the bench's reference).
    fn rebuild_with<const DIRECT: bool>(&mut self, target: f64, fresh: bool) {
        // Groups of [`MARGIN_K`] or more get parity for the loss rate one
        // standard error above the estimate: the true rate is above the
        // estimate half the time and the residual grows faster than
        // linearly with it, so parity for the estimate itself missed the
        // target on average (at 5% over groups of 30, the estimate's noise
        // alone about doubled it). A failed large group loses many shards
        // at once (7 of 30 at 5%), which a short run or a sparse flow sees
        // as a burst of loss; and there one more parity shard costs at
        // most a sixteenth of the data.
        let p = self.p;
        let se = |p: f64, n: f64| (p * (1.0 - p) / n.max(1.0)).sqrt();
        let n = self.seen + PRIOR_WEIGHT;
        let p_hi = (p + LOSS_MARGIN * se(p, n)).min(0.5);
        // Loss after a loss, as measured, and the losses it rests on.
        let r_est = (1.0 - 1.0 / self.burst).clamp(0.0, 0.95);
        let losses = self.lost + self.prior * PRIOR_WEIGHT;
        // The channel at bounds `p` and `r` of the estimate, loss after a
        // loss never below the loss rate: measured, it is 0 until two
        // losses in a row were seen, and random loss read as anti-bursty
        // made one copy of a datagram look lossless. (The point estimate
        // keeps what was measured: floored, its noise only went up, and
        // the parity of every group with it.)
        let q_of = |p: f64, r: f64| (p * (1.0 - r) / (1.0 - p).max(1e-9)).clamp(0.0, 1.0);
        let at = |k: usize, m: usize, p: f64, r: f64| {
            let r = r.max(p).clamp(0.0, 0.95);
            residual(k, m, p, r, q_of(p, r))
        };
        // Large enough groups weigh the bursty alternative in, by its
        // likelihood (0 once the runs seen rule it out).
        let w = self.bursty_weight(r_est.max(p));
        let r_alt = BURSTY_R.max(r_est.max(p)).min(0.95);
        let point = |k: usize, m: usize, p: f64| {
            let est = residual(k, m, p, r_est, q_of(p, r_est));
            if k < BURSTY_MIN_K || w <= 1e-9 {
                est
            } else {
                (1.0 - w) * est + w * residual(k, m, p, r_alt, q_of(p, r_alt))
            }
        };
        // The search below asks `point` for growing groups at the same
        // `m` (one channel below [`MARGIN_K`], one from it): each channel's
        // chain over the data shards is kept from one size to the next.
        let (mut run_est, mut run_alt) = (ResidualRun::new(), ResidualRun::new());
        let mut search = |k: usize, m: usize, p: f64| {
            if DIRECT {
                return point(k, m, p);
            }
            let est = run_est.residual(k, m, p, r_est, q_of(p, r_est));
            if k < BURSTY_MIN_K || w <= 1e-9 {
                est
            } else {
                (1.0 - w) * est + w * run_alt.residual(k, m, p, r_alt, q_of(p, r_alt))
            }
        };
        let mut m = 0usize;
        for k in 1..=self.max_k {
            let p = if k >= MARGIN_K { p_hi } else { p };
            // The fewest parity shards meeting the target (never fewer
            // than the last size's: a larger group needs at least as many).
            let cap = self.m_cap(k);
            while m < cap && search(k, m, p) > target {
                m += 1;
            }
            let old = usize::from(self.table[k]);
            // Standard errors a step from `old` needs (one or more: a step
            // of a sixth of the group or more).
            let z = STEP_EVIDENCE / (k + old) as f64;
            let new = if fresh {
                m
            } else if m > old {
                let slack = 1.0 + 2.0 / (k + old) as f64;
                let doubtful = z >= 1.0 && {
                    let p_lo = (p - z * se(p, n)).max(0.0);
                    let r_lo = r_est - z * se(r_est, losses);
                    at(k, old, p_lo, r_lo) <= target
                };
                if doubtful || point(k, old, p) <= slack * target {
                    old
                } else {
                    m
                }
            } else if m < old && m > 0 && z >= 1.0 {
                // One fewer than before meets the target: also at the
                // estimate's upper bound? (Not asked when the estimate
                // needs no parity at all: that is a clean path, whose
                // bound, a few thousand shards without a loss, never
                // certifies 1e-4, and one copy of every small group
                // would double a sparse flow's packets for good.)
                let p_up = (p + z * se(p, n)).min(0.5);
                let r_up = r_est + z * se(r_est, losses);
                let mut fall = old;
                while fall > m && at(k, fall - 1, p_up, r_up) <= target {
                    fall -= 1;
                }
                fall
            } else {
                m
            };
            self.table[k] = new as u8;
        }
    }
}

impl LossModel {
    /// The probability of the bursty alternative ([`BURSTY_R`]) against
    /// the estimate (loss after a loss `r0`, the loss rate at least), from
    /// the model's decayed counts: the transitions after a loss (a run
    /// continued or stopped) under either, and the number of runs seen in
    /// the shards seen against the alternative's run rate while loss runs
    /// are rare ([`PRIOR_LOSS`] in runs of three: 1% of shards start one).
    /// On a random 5% path (reports of 40 shards, two runs of one loss
    /// each) it is 6e-4 at the second update and nothing after; on a
    /// clean one 0.31 after 80 shards, 0.06 after 280 and 0.02 after 400;
    /// one run of four keeps it (at 0.28, and once the decayed run count
    /// falls under one and the estimate reads random again, at 1). 0
    /// before the second update ([`BURSTY_FROM_UPDATE`]).
    fn bursty_weight(&self, r0: f64) -> f64 {
        if self.updates < BURSTY_FROM_UPDATE {
            return 0.0;
        }
        let r0 = r0.clamp(1e-6, 0.95);
        let r1 = BURSTY_R.max(r0);
        let stops = self.runs.max(0.0);
        let cont = (self.lost - self.runs).max(0.0);
        let n = self.seen.max(1.0);
        let (rate1, rate0) = (PRIOR_LOSS * (1.0 - BURSTY_R), stops / n);
        let runs = if stops > 0.0 {
            stops * (rate1 / rate0).ln()
        } else {
            0.0
        } - (rate1 - rate0) * n;
        let ll = cont * (r1 / r0).ln() + stops * ((1.0 - r1) / (1.0 - r0)).ln() + runs;
        let odds = BURSTY_PRIOR / (1.0 - BURSTY_PRIOR) * ll.min(50.0).exp();
        odds / (1.0 + odds)
    }
}

/// The loss model for `benches/loss_model.rs`. Not part of the API.
#[doc(hidden)]
pub mod bench_support {
    /// A sender's loss model toward a peer taking wide groups (or not).
    #[derive(Clone)]
    pub struct Model(super::LossModel);

    impl Model {
        /// A model for residual `target`, its table built to 64 data and
        /// 32 parity shards when `wide` (else 32 and 16).
        pub fn new(target: f64, wide: bool) -> Self {
            let mut m = super::LossModel::new(target);
            if wide {
                m.set_limits(super::MAX_K, super::MAX_M, target);
            }
            Self(m)
        }

        /// Folds a report in and rebuilds the table; with `direct`, each
        /// residual of the search computed alone (as before the kept chains).
        pub fn update(&mut self, seen: u64, lost: u64, runs: u64, target: f64, direct: bool) {
            if direct {
                self.0.update_with::<true>(seen, lost, runs, target);
            } else {
                self.0.update(seen, lost, runs, target);
            }
        }

        /// Parity per group size (index `k`).
        pub fn table(&self) -> &[u8] {
            &self.0.table
        }
    }
}

/// The share of data shards a `k + m` group loses after decoding on a
/// Gilbert-Elliott channel: loss after a loss with probability `r`, after
/// a delivery with `q` (stationary loss `p`). Data shards go first.
pub(crate) fn residual(k: usize, m: usize, p: f64, r: f64, q: f64) -> f64 {
    if p <= 0.0 {
        return 0.0;
    }
    let m = m.min(MAX_M);
    let cap = m + 1;
    let mut cur = chain_start(p, cap);
    // The other half of the ping-pong (only `..=cap` is ever read or
    // written, so the cost follows `m`, not [`MAX_M`]).
    let mut other = [[0.0f64; MAX_M + 2]; 4];
    // Shards 2 to `k` are data, the `m` after them parity (all `k + m - 1`
    // after the first are parity for `k` = 0).
    let data = k.saturating_sub(1);
    chain_steps(&mut cur, &mut other, data, cap, r, q, true);
    let parity = (k + m).saturating_sub(1) - data;
    chain_steps(&mut cur, &mut other, parity, cap, r, q, false);
    (cur[M0][cap] + cur[M1][cap]) / k as f64
}

/// [`residual`]'s chain: per count of losses (`cap` for `cap` or more),
/// the probability and the expected lost-data mass with the last shard
/// delivered ([`P0`], [`M0`]) and lost ([`P1`], [`M1`]), each an array
/// over the count, so one shard's step runs over contiguous counts (and
/// vectorises) with every entry computed as one entry at a time was.
type State = [[f64; MAX_M + 2]; 4];
const P0: usize = 0;
const P1: usize = 1;
const M0: usize = 2;
const M1: usize = 3;

/// The chain after a group's first shard (a data shard).
fn chain_start(p: f64, cap: usize) -> State {
    let mut s = [[0.0f64; MAX_M + 2]; 4];
    s[P0][0] = 1.0 - p;
    s[P1][1.min(cap)] = p;
    s[M1][1.min(cap)] = p;
    s
}

/// One more shard (a data shard when `DATA`) from `from` into `to`
/// (`..=cap` of it written, only `..=cap` of `from` read).
#[inline(always)]
fn chain_step<const DATA: bool>(from: &State, to: &mut State, cap: usize, r: f64, q: f64) {
    let n = cap + 1;
    let (r1, q1) = (1.0 - r, 1.0 - q);
    let [p0, p1, m0, m1] = from;
    let (p0, p1, m0, m1) = (&p0[..n], &p1[..n], &m0[..n], &m1[..n]);
    let [np0, np1, nm0, nm1] = to;
    let (np0, np1, nm0, nm1) = (&mut np0[..n], &mut np1[..n], &mut nm0[..n], &mut nm1[..n]);
    // What a shard lost after `(mass, prob)` adds to the lost-data mass.
    let add = |mass: f64, prob: f64, pl: f64| mass * pl + if DATA { prob * pl } else { 0.0 };
    // Delivered: the count stays.
    for (o, (a, b)) in np0.iter_mut().zip(p0.iter().zip(p1)) {
        *o = a * q1 + b * r1;
    }
    for (o, (a, b)) in nm0.iter_mut().zip(m0.iter().zip(m1)) {
        *o = a * q1 + b * r1;
    }
    // Lost: the count grows by one.
    np1[0] = 0.0;
    nm1[0] = 0.0;
    for (o, (a, b)) in np1[1..].iter_mut().zip(p0.iter().zip(p1)) {
        *o = a * q + b * r;
    }
    let lost = m0.iter().zip(m1).zip(p0.iter().zip(p1));
    for (o, ((ma, mb), (pa, pb))) in nm1[1..].iter_mut().zip(lost) {
        *o = add(*ma, *pa, q) + add(*mb, *pb, r);
    }
    // `cap` stands for `cap` or more: a loss there stays.
    np1[cap] += p0[cap] * q;
    np1[cap] += p1[cap] * r;
    nm1[cap] += add(m0[cap], p0[cap], q);
    nm1[cap] += add(m1[cap], p1[cap], r);
}

/// `steps` shards (data shards when `data`) through the chain in `cur`,
/// back and forth with `other` rather than swapping whole arrays per
/// shard (which moved 2 KiB per step whatever `cap`); the result is in
/// `cur` (`..=cap`). The same arithmetic in the same order as one step
/// at a time: the same result to the bit.
#[inline(always)]
fn chain_steps(
    cur: &mut State,
    other: &mut State,
    steps: usize,
    cap: usize,
    r: f64,
    q: f64,
    data: bool,
) {
    if data {
        chain_steps_of::<true>(cur, other, steps, cap, r, q);
    } else {
        chain_steps_of::<false>(cur, other, steps, cap, r, q);
    }
}

#[inline(always)]
fn chain_steps_of<const DATA: bool>(
    cur: &mut State,
    other: &mut State,
    steps: usize,
    cap: usize,
    r: f64,
    q: f64,
) {
    let mut i = 0;
    while i + 1 < steps {
        chain_step::<DATA>(cur, other, cap, r, q);
        chain_step::<DATA>(other, cur, cap, r, q);
        i += 2;
    }
    if i < steps {
        chain_step::<DATA>(cur, other, cap, r, q);
        for (c, o) in cur.iter_mut().zip(other.iter()) {
            c[..=cap].copy_from_slice(&o[..=cap]);
        }
    }
}

/// [`residual`] for a table's rebuild, which asks it for growing groups
/// (`k`, then `k + 1`, ...) at the same `m` on the same channel: the
/// chain over the data shards is the same for all of them (`k` only
/// says where the parity starts), so it is kept and extended by one data
/// shard per size, and each call runs only its `m` parity shards. The
/// same steps in the same order as [`residual`]: the same result to the
/// bit. A call for another channel, `m`, or a smaller group starts the
/// chain again.
struct ResidualRun {
    /// The channel (`p`, `r`, `q` as bits) and the `m` the chain is for.
    key: [u64; 3],
    m: usize,
    /// Data shards in the chain (0: none yet).
    k: usize,
    chain: State,
    /// The parity tail's copy of the chain, and the other half of the
    /// ping-pong (kept, so no call zeroes 2 KiB of stack).
    tail: State,
    other: State,
}

impl ResidualRun {
    fn new() -> Self {
        let zero = [[0.0; MAX_M + 2]; 4];
        Self {
            key: [0; 3],
            m: 0,
            k: 0,
            chain: zero,
            tail: zero,
            other: zero,
        }
    }

    /// `residual(k, m, p, r, q)`.
    fn residual(&mut self, k: usize, m: usize, p: f64, r: f64, q: f64) -> f64 {
        if p <= 0.0 || k == 0 {
            return residual(k, m, p, r, q);
        }
        let m = m.min(MAX_M);
        let cap = m + 1;
        let key = [p.to_bits(), r.to_bits(), q.to_bits()];
        if self.k == 0 || self.k > k || self.m != m || self.key != key {
            self.chain = chain_start(p, cap);
            (self.key, self.m, self.k) = (key, m, 1);
        }
        let Self {
            chain, tail, other, ..
        } = self;
        chain_steps(chain, other, k - self.k, cap, r, q, true);
        self.k = k;
        for (t, c) in tail.iter_mut().zip(chain.iter()) {
            t[..=cap].copy_from_slice(&c[..=cap]);
        }
        chain_steps(tail, other, m, cap, r, q, false);
        (tail[M0][cap] + tail[M1][cap]) / k as f64
    }
}

/// As [`residual`], each data shard followed at once by `c` copies of
/// itself (a datagram that must not wait for its group: it is lost to
/// the group only when all `c + 1` are), then the group's `m` parity
/// shards. A data shard is an erasure when all its copies are lost;
/// the group decodes when erasures plus lost parity are at most `m`
/// (at most [`MAX_M`]: more is counted as `MAX_M`).
pub(crate) fn residual_copied(k: usize, c: usize, m: usize, p: f64, r: f64, q: f64) -> f64 {
    if p <= 0.0 || k == 0 {
        return 0.0;
    }
    let m = m.min(MAX_M);
    let cap = m + 1;
    // prob[erasures][last sent lost]; the start is the stationary state
    // of the packet before the group.
    let mut prob = [[0.0f64; 2]; MAX_M + 2];
    let mut mass = [[0.0f64; 2]; MAX_M + 2];
    prob[0][0] = 1.0 - p;
    prob[0][1] = p;
    for _ in 0..k {
        // Within a data shard: [erasures][last lost][all of it lost so far].
        let mut ip = [[[0.0f64; 2]; 2]; MAX_M + 2];
        let mut im = [[[0.0f64; 2]; 2]; MAX_M + 2];
        for l in 0..=cap {
            for s in 0..2 {
                ip[l][s][1] = prob[l][s];
                im[l][s][1] = mass[l][s];
            }
        }
        for _ in 0..=c {
            let mut np = [[[0.0f64; 2]; 2]; MAX_M + 2];
            let mut nm = [[[0.0f64; 2]; 2]; MAX_M + 2];
            for l in 0..=cap {
                for s in 0..2 {
                    let pl = if s == 1 { r } else { q };
                    for a in 0..2 {
                        let (pr, ms) = (ip[l][s][a], im[l][s][a]);
                        np[l][0][0] += pr * (1.0 - pl);
                        nm[l][0][0] += ms * (1.0 - pl);
                        np[l][1][a] += pr * pl;
                        nm[l][1][a] += ms * pl;
                    }
                }
            }
            ip = np;
            im = nm;
        }
        let mut np = [[0.0f64; 2]; MAX_M + 2];
        let mut nm = [[0.0f64; 2]; MAX_M + 2];
        for l in 0..=cap {
            for s in 0..2 {
                np[l][s] += ip[l][s][0];
                nm[l][s] += im[l][s][0];
                let l2 = (l + 1).min(cap);
                np[l2][s] += ip[l][s][1];
                nm[l2][s] += im[l][s][1] + ip[l][s][1];
            }
        }
        prob = np;
        mass = nm;
    }
    for _ in 0..m {
        let mut np = [[0.0f64; 2]; MAX_M + 2];
        let mut nm = [[0.0f64; 2]; MAX_M + 2];
        for l in 0..=cap {
            for s in 0..2 {
                let pl = if s == 1 { r } else { q };
                let l2 = (l + 1).min(cap);
                np[l][0] += prob[l][s] * (1.0 - pl);
                nm[l][0] += mass[l][s] * (1.0 - pl);
                np[l2][1] += prob[l][s] * pl;
                nm[l2][1] += mass[l][s] * pl;
            }
        }
        prob = np;
        mass = nm;
    }
    (mass[cap][0] + mass[cap][1]) / k as f64
}

/// The share of a sparse flow's datagrams that may wait for their
/// group's parity (all their immediate copies lost): under 1%, so the
/// 99th percentile of the added delay stays that of a direct send.
pub(crate) const COPIED_LATE_SHARE: f64 = 0.005;

impl LossModel {
    /// A sparse flow's groups of `g` datagrams (consecutive one-datagram
    /// groups, merged): each datagram leaves with `c` copies at once (the
    /// fewest keeping the share that waits for the group under
    /// [`COPIED_LATE_SHARE`]), and the group closes with `g * rest` parity
    /// rows, `c + rest` the fewest packets per datagram beyond it meeting
    /// `target`. `Some((c, rest))` when that takes no more packets than
    /// the table's copies of a group of one (`table[1]`) and loses less
    /// than as many copies would, else `None` (copies alone, as before).
    /// Whole packets
    /// per datagram, as the copies: at 4.6% one copy at once and one
    /// parity row per datagram lose 4.9e-6 at the cost of two copies
    /// (9.7e-5); half a row per datagram would save a sixth of the bytes
    /// and lose as much as two copies.
    pub(crate) fn copied_plan(&self, g: usize, target: f64) -> Option<(usize, usize)> {
        let alone = usize::from(self.table[1]);
        if g < 2 || alone < 2 {
            return None;
        }
        let p = self.p;
        let r = (1.0 - 1.0 / self.burst).clamp(0.0, 0.95).max(p).min(0.95);
        let q = (p * (1.0 - r) / (1.0 - p).max(1e-9)).clamp(0.0, 1.0);
        let c = (1..alone).find(|&c| residual_copied(1, c, 0, p, r, q) <= COPIED_LATE_SHARE)?;
        let rest = (1..=alone - c)
            .take_while(|&rest| g * rest <= self.max_m)
            .find(|&rest| residual_copied(g, c, g * rest, p, r, q) <= target)?;
        let copied = residual_copied(g, c, g * rest, p, r, q);
        (copied < residual(1, c + rest, p, r, q)).then_some((c, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residual_matches_the_binomial_bound_without_bursts() {
        // k = 1, m = 2, i.i.d.: a shard is lost only with both copies.
        let p = 0.046;
        let r = residual(1, 2, p, p, p);
        assert!((r - p * p * p).abs() < 1e-9, "{r}");
        // More parity never hurts; bursts hurt.
        assert!(residual(12, 4, p, p, p) < residual(12, 3, p, p, p));
        let burst = residual(12, 4, p, 0.5, p * 0.5 / (1.0 - p));
        assert!(burst > residual(12, 4, p, p, p));
    }

    #[test]
    fn the_model_picks_the_fewest_parity_meeting_the_target() {
        let mut m = LossModel::new(1e-4);
        m.update(100_000, 4_600, 4_390, 1e-4);
        assert_eq!(m.table[1], 2, "{:?}", m.table);
        let k12 = usize::from(m.table[12]);
        assert!((3..=5).contains(&k12), "{:?}", m.table);
        assert!(residual(12, k12, m.p, m.p, m.p) <= 2e-4);
    }

    #[test]
    fn wide_limits_build_the_table_to_64_with_the_fewest_parity() {
        // 9% i.i.d.: the narrow table stops at 32 data and 16 parity
        // shards; widened, groups of 33-64 get theirs (17-18 for 64: 1.28x
        // the data against 1.36x for 32), and groups of 32 or fewer keep
        // theirs.
        let mut m = LossModel::new(1e-4);
        m.update(100_000, 9_000, 8_190, 1e-4);
        assert_eq!((m.max_k(), m.max_m()), (NARROW_K, NARROW_M));
        assert!(
            m.table[NARROW_K + 1..].iter().all(|&x| x == 0),
            "{:?}",
            m.table
        );
        assert!(m.table.iter().all(|&x| usize::from(x) <= NARROW_M));
        let narrow = m.table;
        assert!((11..=12).contains(&narrow[32]), "{narrow:?}");
        m.set_limits(MAX_K, MAX_M, 1e-4);
        assert_eq!(m.table[..=NARROW_K], narrow[..=NARROW_K]);
        assert!((17..=18).contains(&m.table[64]), "{:?}", m.table);
        assert!(m.table.windows(2).all(|w| w[0] <= w[1]), "{:?}", m.table);
        let (p, k, g) = (m.p, 64, usize::from(m.table[64]));
        assert!(residual(k, g, p, p, p) <= 1e-4);
        // At most one over the fewest for the point estimate (the margin).
        assert!(residual(k, g - 2, p, p, p) > 1e-4);
        // Updates keep the wide table; at 30% loss the parity stops at the
        // limit rather than beyond it.
        m.update(100_000, 30_000, 21_000, 1e-4);
        assert_eq!(m.table[64], MAX_M as u8, "{:?}", m.table);
        // Groups of 32 or fewer stop where they did before wide groups.
        assert_eq!(usize::from(m.table[32]), NARROW_M, "{:?}", m.table);
        assert!(m.table.iter().all(|&x| usize::from(x) <= MAX_M));
    }

    #[test]
    fn a_clean_path_s_small_groups_lose_their_parity() {
        // The stream's prior (0.1%, whose weight fades below 1e-4 with the
        // estimate's memory), then 10,000 shards without a loss: no group
        // keeps parity. (The estimate's memory is a few thousand shards,
        // whose upper bound alone would keep a copy of small groups
        // forever.)
        let mut m = LossModel::with_prior(1e-4, 1e-3);
        assert!(m.table[1] >= 1, "{:?}", m.table);
        for _ in 0..10 {
            m.update(1000, 0, 0, 1e-4);
        }
        assert!(m.table.iter().all(|&x| x == 0), "{:?} p {}", m.table, m.p);
    }

    #[test]
    fn one_datagram_groups_keep_two_copies_on_a_noisy_estimate() {
        // 4.6% i.i.d.: two copies meet 1e-4 (0.046^3), one does not.
        let mut m = LossModel::new(1e-4);
        assert_eq!(m.table[1], 2, "{:?}", m.table);
        // Early, no two losses in a row yet: the run estimate says loss
        // never follows loss, which is no reason to drop to one copy.
        m.update(60, 2, 2, 1e-4);
        assert_eq!(m.table[1], 2, "r = 0 early: {:?}", m.table);
        // 800 shards at 5.5% with a few runs of two: within two standard
        // errors of 4.6%, so no third copy (a third more bytes).
        m.update(740, 42, 38, 1e-4);
        assert!(m.p > 0.0464, "{}", m.p);
        assert_eq!(
            m.table[1], 2,
            "noise: {:?} p {} burst {}",
            m.table, m.p, m.burst
        );
        // 3,000 shards at 8%: clear evidence.
        for _ in 0..3 {
            m.update(1000, 80, 74, 1e-4);
        }
        assert_eq!(m.table[1], 3, "{:?} p {}", m.table, m.p);
        // And back once the loss clearly fell.
        for _ in 0..6 {
            m.update(1000, 30, 30, 1e-4);
        }
        assert_eq!(m.table[1], 2, "{:?} p {}", m.table, m.p);
    }

    #[test]
    fn a_new_model_sizes_large_groups_for_bursts_until_the_runs_rule_them_out() {
        // The bursty path's start (5% in runs of 3): reports of 40 shards
        // with no loss yet. The estimate alone gives a group of 12 two
        // parity shards, which a run of three and one more loss break.
        let mut m = LossModel::new(1e-4);
        m.update(40, 0, 0, 1e-4);
        assert_eq!(m.table[12], 2, "the first update is the estimate's");
        m.update(40, 0, 0, 1e-4);
        assert!(m.table[12] >= 9, "{:?}", m.table);
        // A sparse flow's copies are the estimate's.
        assert_eq!(m.table[1], 2, "{:?}", m.table);
        // The first run of four: the estimate is bursty itself, and stays
        // so when that run's decayed count falls under one.
        m.update(40, 4, 1, 1e-4);
        assert_eq!(m.table[12], 16, "{:?}", m.table);
        m.update(40, 0, 0, 1e-4);
        assert!(m.table[12] >= 15, "{:?} burst {}", m.table, m.burst);
        // A clean path: a few hundred shards without a run take it back.
        let mut m = LossModel::new(1e-4);
        let mut most = 0;
        for _ in 0..7 {
            m.update(40, 0, 0, 1e-4);
            most = most.max(m.table[12]);
        }
        assert!(most >= 9, "{most}");
        assert!(m.table[12] <= 2, "{:?}", m.table);
        // A random 5% path: its runs of one loss rule the alternative out
        // by the second update.
        let mut m = LossModel::new(1e-4);
        for _ in 0..2 {
            m.update(40, 2, 2, 1e-4);
            assert!(m.table[12] <= 4, "{:?}", m.table);
        }
        assert!(m.bursty_weight(m.p) < 1e-3);
    }

    #[test]
    fn copies_then_parity_lose_what_counting_says() {
        let p = 0.046;
        // Without copies it is the plain group's residual, bursts or not.
        for (r, q) in [(p, p), (0.5, p * 0.5 / (1.0 - p))] {
            for (k, m) in [(1, 2), (2, 2), (12, 4)] {
                let (a, b) = (residual_copied(k, 0, m, p, r, q), residual(k, m, p, r, q));
                assert!((a - b).abs() <= 1e-12 * b.max(1e-9), "{k} {m}: {a} {b}");
            }
        }
        // A datagram alone with `c` copies: all of them lost.
        assert!((residual_copied(1, 2, 0, p, p, p) - p.powi(3)).abs() < 1e-12);
        // i.i.d., two datagrams with a copy each and two parity shards:
        // one is lost with both its copies and two of the other three
        // (the other datagram, known unless both its copies are lost, and
        // the parity) lost: both parity shards, or the other datagram and
        // one of them.
        let e = p * p;
        let want = e * (p * p + e * 2.0 * p * (1.0 - p));
        let got = residual_copied(2, 1, 2, p, p, p);
        assert!((got - want).abs() < 1e-12, "{got} {want}");
        // Against two copies of each alone (0.046^3 = 9.7e-5): 20x less.
        assert!(got * 19.0 < p.powi(3), "{got}");
    }

    #[test]
    fn a_sparse_flow_merges_its_copies_into_groups_only_where_they_lose_less() {
        // 4.6%: two copies each alone; one at once and one parity row per
        // datagram over a group.
        let mut m = LossModel::new(1e-4);
        m.update(100_000, 4_600, 4_390, 1e-4);
        assert_eq!(m.table[1], 2, "{:?}", m.table);
        assert_eq!(m.copied_plan(2, 1e-4), Some((1, 1)));
        assert_eq!(m.copied_plan(3, 1e-4), Some((1, 1)));
        assert_eq!(m.copied_plan(1, 1e-4), None);
        // The estimate's noise at 6% may ask a third copy of a datagram
        // alone; the group still meets the target with two.
        let mut m = LossModel::new(1e-4);
        m.update(100_000, 6_000, 5_640, 1e-4);
        assert_eq!(m.table[1], 3, "{:?}", m.table);
        assert_eq!(m.copied_plan(2, 1e-4), Some((1, 1)));
        // 12%: one copy at once would leave 1.4% of the datagrams waiting
        // for their group; two at once, and a row each for the rest: one
        // packet a datagram fewer than copies alone.
        let mut m = LossModel::new(1e-4);
        m.update(100_000, 12_000, 10_560, 1e-4);
        assert_eq!(m.table[1], 4, "{:?}", m.table);
        assert_eq!(m.copied_plan(2, 1e-4), Some((2, 1)));
        // 0.5%: one copy of each is the table's; nothing left for a group.
        let mut m = LossModel::new(1e-4);
        m.update(100_000, 500, 498, 1e-4);
        assert_eq!(m.table[1], 1, "{:?}", m.table);
        assert_eq!(m.copied_plan(2, 1e-4), None);
    }

    /// [`residual`] as it was before the chain's ping-pong: every step
    /// into fresh arrays, swapped in whole.
    fn residual_swapping(k: usize, m: usize, p: f64, r: f64, q: f64) -> f64 {
        if p <= 0.0 {
            return 0.0;
        }
        let m = m.min(MAX_M);
        let (n, cap) = (k + m, m + 1);
        let mut prob = [[0.0f64; 2]; MAX_M + 2];
        let mut mass = [[0.0f64; 2]; MAX_M + 2];
        prob[0][0] = 1.0 - p;
        prob[1.min(cap)][1] = p;
        mass[1.min(cap)][1] = p;
        for pos in 1..n {
            let (mut np, mut nm) = ([[0.0f64; 2]; MAX_M + 2], [[0.0f64; 2]; MAX_M + 2]);
            let (r1, q1) = (1.0 - r, 1.0 - q);
            let data = pos < k;
            let add = |l: usize, s: usize, pl: f64| {
                mass[l][s] * pl + if data { prob[l][s] * pl } else { 0.0 }
            };
            np[0] = [prob[0][0] * q1 + prob[0][1] * r1, 0.0];
            nm[0] = [mass[0][0] * q1 + mass[0][1] * r1, 0.0];
            for l in 1..=cap {
                np[l] = [
                    prob[l][0] * q1 + prob[l][1] * r1,
                    prob[l - 1][0] * q + prob[l - 1][1] * r,
                ];
                nm[l] = [
                    mass[l][0] * q1 + mass[l][1] * r1,
                    add(l - 1, 0, q) + add(l - 1, 1, r),
                ];
            }
            np[cap][1] += prob[cap][0] * q;
            np[cap][1] += prob[cap][1] * r;
            nm[cap][1] += add(cap, 0, q);
            nm[cap][1] += add(cap, 1, r);
            prob = np;
            mass = nm;
        }
        (mass[cap][0] + mass[cap][1]) / k as f64
    }

    /// Loss channels (loss rate, mean burst) the chain tests sweep: from
    /// nearly clean to long bursts.
    const CHANNELS: [(f64, f64); 5] = [
        (0.005, 1.0),
        (0.046, 1.05),
        (0.09, 1.1),
        (0.05, 3.0),
        (0.3, 6.0),
    ];

    #[test]
    fn the_ping_pong_chain_computes_what_the_swapping_one_did_to_the_bit() {
        for (p, burst) in CHANNELS {
            let r = (1.0 - 1.0f64 / burst).max(p);
            let q = p * (1.0 - r) / (1.0 - p);
            for k in 0..=MAX_K {
                for m in 0..=MAX_M + 2 {
                    let (a, b) = (residual(k, m, p, r, q), residual_swapping(k, m, p, r, q));
                    assert_eq!(a.to_bits(), b.to_bits(), "{p} {burst} {k} {m}: {a} {b}");
                }
            }
        }
    }

    #[test]
    fn a_kept_chain_s_residuals_are_the_direct_ones_to_the_bit() {
        // A rebuild's order (growing groups at a rising `m`), the channel
        // changing at `MARGIN_K`, and calls that restart the chain (a
        // smaller group, a smaller `m`).
        for (p, burst) in CHANNELS {
            let r = (1.0 - 1.0f64 / burst).max(p);
            let q = p * (1.0 - r) / (1.0 - p);
            let mut run = ResidualRun::new();
            let mut m = 0;
            let mut calls = (1..=MAX_K).map(|k| (k, k / 3)).collect::<Vec<_>>();
            calls.extend([(5, 2), (64, 32), (64, 40), (10, 0), (1, 1), (40, 3)]);
            for (k, want_m) in calls {
                let p = if k >= MARGIN_K { p * 1.1 } else { p };
                m = if want_m < m { want_m } else { m };
                while m <= want_m.min(MAX_M + 2) {
                    let (a, b) = (run.residual(k, m, p, r, q), residual(k, m, p, r, q));
                    assert_eq!(a.to_bits(), b.to_bits(), "{p} {burst} {k} {m}: {a} {b}");
                    m += 1;
                }
                m = want_m;
            }
        }
    }

    #[test]
    fn the_kept_chains_build_the_tables_the_direct_residuals_did() {
        // Two models fed the same reports, one building its tables with
        // each residual alone (as before `ResidualRun`): every table of a
        // grid of loss rates, mean runs, targets, priors and both limits
        // (widened after the third report, as a sender learns its peer
        // takes wide groups) is the same, the first one too, through
        // rises and falls (the rate steps after the sixth report).
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut noise = move || {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            0.5 + (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        let (mut tables, mut changed, mut wide) = (0, 0, 0);
        for prior in [PRIOR_LOSS, 1e-3] {
            for target in [1e-3, 1e-4, 1e-5] {
                for widen in [false, true] {
                    for rate in [0.0, 0.005, 0.02, 0.05, 0.09, 0.15, 0.3] {
                        for burst in [1.0, 1.5, 3.0, 6.0] {
                            let mut a = LossModel::with_prior(target, prior);
                            let mut b = a.clone();
                            b.rebuild_with::<true>(target, true);
                            assert_eq!(a.table, b.table, "fresh {prior} {target}");
                            for i in 0..10u64 {
                                if widen && i == 3 {
                                    a.set_limits(MAX_K, MAX_M, target);
                                    b.set_limits_with::<true>(MAX_K, MAX_M, target);
                                }
                                let rate = if i < 6 { rate } else { rate * 2.5 % 0.4 };
                                let seen = if i % 2 == 0 { 40 } else { 1000 };
                                let lost = (seen as f64 * rate * noise()).round() as u64;
                                let runs =
                                    ((lost as f64 / burst).round() as u64).clamp(lost.min(1), lost);
                                let before = a.table;
                                a.update(seen, lost, runs, target);
                                b.update_with::<true>(seen, lost, runs, target);
                                assert_eq!(
                                    a.table, b.table,
                                    "{prior} {target} {widen} {rate} {burst} report {i}"
                                );
                                tables += 1;
                                changed += usize::from(a.table != before);
                                wide += usize::from(a.table[MAX_K] > NARROW_M as u8);
                            }
                        }
                    }
                }
            }
        }
        // The grid moves the tables, and reaches the wide groups' parity.
        assert_eq!(tables, 3360);
        assert!(changed > tables / 4, "{changed}");
        assert!(wide > 100, "{wide}");
    }

    #[test]
    fn the_sender_keeps_a_shape_for_every_group_size() {
        // Groups of every size, each with its parity from a table: after
        // the first round no matrix is built again (a round-robin list of
        // 16 rebuilt every one of them, every round).
        let mut c = Codecs::default();
        for round in 0..5 {
            for k in 1..=MAX_K {
                assert!(c.encoder(k, k.div_ceil(3)).is_some());
            }
            assert_eq!(c.made(), MAX_K as u64, "round {round}");
        }
    }

    #[test]
    fn a_burst_of_new_shapes_does_not_evict_the_one_in_use() {
        let mut c = Codecs::default();
        let mut made = 0;
        for (i, k) in (1..=MAX_K).cycle().take(200).enumerate() {
            // The steady shape between every new one, in both lists.
            assert!(c.encoder(4, 2).is_some());
            assert!(c.decoder(4, 2).is_some());
            assert!(c.decoder(k, 1 + i % MAX_M).is_some());
            made += 1;
        }
        // Each peer-chosen shape was new (200 of them), the steady one
        // was made once per list.
        assert_eq!(c.made(), made + 2);
        // A peer naming many shapes holds at most `DECODERS` codecs.
        assert_eq!(c.decoders.list.len(), Codecs::DECODERS);
        assert!(c.encoders.list.len() <= Codecs::ENCODERS);
    }
}
