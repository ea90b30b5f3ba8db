//! The loss model both FEC extensions between kcpio ends share (the
//! datagram one, `dgram_fec`, and the adaptive stream FEC, `stream_fec`):
//! a Gilbert-Elliott channel fitted to the receiver's reported loss rate
//! and mean loss run, and from it the fewest parity shards each group
//! size needs to meet a residual-loss target. Also the small cache of
//! Reed-Solomon codecs by shape both use.

use crate::fec::codec::VandermondeCodec;

/// Data shards per group at most.
pub(crate) const MAX_K: usize = 32;
/// Parity shards per group at most.
pub(crate) const MAX_M: usize = 16;

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

/// A few Reed-Solomon codecs by shape, reused (a shape's matrix is built
/// once; a new shape evicts round robin). Made for decoding: a shape's
/// parity tables are built by its first encode, never for a shape only a
/// peer chose.
#[derive(Default)]
pub(crate) struct Codecs {
    list: Vec<(usize, usize, VandermondeCodec)>,
    victim: usize,
}

impl Codecs {
    const CAP: usize = 16;

    pub(crate) fn get(&mut self, k: usize, m: usize) -> Option<&mut VandermondeCodec> {
        let i = match self.list.iter().position(|(a, b, _)| *a == k && *b == m) {
            Some(i) => i,
            None => {
                let c = VandermondeCodec::for_decoding(k, m)?;
                if self.list.len() < Self::CAP {
                    self.list.push((k, m, c));
                    self.list.len() - 1
                } else {
                    let v = self.victim;
                    self.victim = (v + 1) % Self::CAP;
                    *self.list.get_mut(v)? = (k, m, c);
                    v
                }
            }
        };
        self.list.get_mut(i).map(|(_, _, c)| c)
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
        };
        m.rebuild(target, true);
        m
    }

    pub(crate) fn update(&mut self, seen: u64, lost: u64, runs: u64, target: f64) {
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
        self.rebuild(target, false);
    }

    /// Parity per group size for the target; with hysteresis against the
    /// estimate's noise: a size's parity rises only when its residual
    /// exceeds the target by more than `2 / (k + m)` of it (a step that
    /// costs a third more bytes, as for single datagrams, needs a clear
    /// case; one that costs a sixteenth, little), and falls as soon as one
    /// fewer meets the target.
    fn rebuild(&mut self, target: f64, fresh: bool) {
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
        let p_hi = (self.p
            + LOSS_MARGIN * (self.p * (1.0 - self.p) / (self.seen + PRIOR_WEIGHT)).sqrt())
        .min(0.5);
        let r = (1.0 - 1.0 / self.burst).clamp(0.0, 0.95);
        let q_of = |p: f64| (p * (1.0 - r) / (1.0 - p).max(1e-9)).clamp(0.0, 1.0);
        let mut m = 0usize;
        for k in 1..=MAX_K {
            let p = if k >= MARGIN_K { p_hi } else { p };
            let q = q_of(p);
            // The fewest parity shards meeting the target (never fewer
            // than the last size's: a larger group needs at least as many).
            while m < MAX_M && residual(k, m, p, r, q) > target {
                m += 1;
            }
            let old = usize::from(self.table[k]);
            let new = if fresh || m > old {
                let slack = 1.0 + 2.0 / (k + old) as f64;
                if !fresh && m > old && residual(k, old, p, r, q) <= slack * target {
                    old
                } else {
                    m
                }
            } else {
                m
            };
            self.table[k] = new as u8;
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
    let n = k + m;
    let cap = m + 1;
    // prob[losses][last lost], and the expected lost-data mass.
    let mut prob = [[0.0f64; 2]; MAX_M + 2];
    let mut mass = [[0.0f64; 2]; MAX_M + 2];
    prob[0][0] = 1.0 - p;
    prob[1.min(cap)][1] = p;
    mass[1.min(cap)][1] = p;
    for pos in 1..n {
        let data = pos < k;
        let mut np = [[0.0f64; 2]; MAX_M + 2];
        let mut nm = [[0.0f64; 2]; MAX_M + 2];
        for l in 0..=cap {
            for s in 0..2 {
                let (pr, ms) = (prob[l][s], mass[l][s]);
                if pr == 0.0 && ms == 0.0 {
                    continue;
                }
                let pl = if s == 1 { r } else { q };
                let l2 = (l + 1).min(cap);
                np[l][0] += pr * (1.0 - pl);
                nm[l][0] += ms * (1.0 - pl);
                np[l2][1] += pr * pl;
                nm[l2][1] += ms * pl + if data { pr * pl } else { 0.0 };
            }
        }
        prob = np;
        mass = nm;
    }
    (mass[cap][0] + mass[cap][1]) / k as f64
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
}
