//! CPU time per call, for the benches' CPU-time modes (criterion measures
//! wall time, which a shared machine's neighbours inflate).

use std::time::Duration;

/// CPU time this thread has run, in nanoseconds (Linux's schedstat).
///
/// # Panics
///
/// Without Linux's `/proc/thread-self/schedstat`.
#[must_use]
pub fn thread_ns() -> u128 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("the CPU-time mode needs Linux's /proc/thread-self/schedstat");
    stat.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("schedstat: a number first")
}

/// Runs `run` in doubling batches until this thread has used `budget` of
/// CPU time (schedstat advances at scheduler ticks, so budgets should be
/// long): the CPU nanoseconds per call.
pub fn ns_per_call(budget: Duration, mut run: impl FnMut()) -> f64 {
    let budget = budget.as_nanos();
    let start = thread_ns();
    let (mut calls, mut batch) = (0u64, 16u64);
    loop {
        (0..batch).for_each(|_| run());
        calls += batch;
        let used = thread_ns() - start;
        if used >= budget {
            return used as f64 / calls as f64;
        }
        batch = (batch * 2).min(1 << 20);
    }
}
