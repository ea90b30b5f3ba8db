//! Nearest-rank percentiles, shared by the tests and the examples that
//! report round-trip times.

/// The `p`-th percentile (`0.0..=100.0`) of the ascending `sorted` by nearest
/// rank (the Go peer's and `tools/tcpecho`'s rule); `None` when it is empty.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    // The 1e-9 keeps p99.9 of 1,000 samples at rank 999 despite rounding.
    let rank = (p * sorted.len() as f64 / 100.0 - 1e-9).ceil() as usize;
    let last = sorted.len().checked_sub(1)?;
    sorted.get(rank.saturating_sub(1).min(last)).copied()
}
