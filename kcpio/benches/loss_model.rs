//! The datagram FEC sender's loss-model table rebuild (one per folded
//! report, at most every 10 ms): `LossModel::update` at steady state,
//! the table built with the data shards' chain kept from one group size
//! to the next (`kept`) beside each residual computed alone (`direct`,
//! the build before it), in the same run. Paths: 9% random (lossy9's
//! rate) and 5% in runs of 3, each with the narrow table (groups of 32
//! data, 16 parity) and the wide one (64, 32); reports of 250 shards
//! (a 50 ms report at 5,000 datagrams/s). The two builds' tables are
//! checked equal before timing.
//!
//! With `KCPIO_BENCH_CPU_MS=M` set, criterion is skipped: five rounds
//! (`KCPIO_BENCH_ROUNDS`), each running every case for `M` ms of this
//! thread's CPU time (kept and direct alternating), print the CPU time per
//! rebuild, then each case's median and the direct/kept ratio of the
//! medians: a loaded machine disturbs CPU time far less than wall time.

use std::time::Duration;

use criterion::{Criterion, black_box};
use kcpio::conn::loss_model_bench::Model;
use kcpio_testkit::cpu::ns_per_call;

const TARGET: f64 = 1e-4;
const SEEN: u64 = 250;

/// (name, a settled model, lost and runs per report, direct).
fn cases() -> Vec<(String, Model, u64, u64, bool)> {
    let mut out = Vec::new();
    for (path, lost, runs) in [("random9", 22, 21), ("runs3_5", 12, 4)] {
        for wide in [false, true] {
            // Settle the estimate (the decayed counts' memory is a few
            // thousand shards), so the timed updates are the steady state.
            let mut m = Model::new(TARGET, wide);
            for _ in 0..200 {
                m.update(SEEN, lost, runs, TARGET, false);
            }
            let (mut a, mut b) = (m.clone(), m);
            a.update(SEEN, lost, runs, TARGET, false);
            b.update(SEEN, lost, runs, TARGET, true);
            assert_eq!(a.table(), b.table(), "{path} wide {wide}");
            let width = if wide { "wide" } else { "narrow" };
            for (name, direct) in [("kept", false), ("direct", true)] {
                out.push((
                    format!("{path}/{width}/{name}"),
                    a.clone(),
                    lost,
                    runs,
                    direct,
                ));
            }
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("loss_model_rebuild");
    for (name, mut m, lost, runs, direct) in cases() {
        g.bench_function(name, |bch| {
            bch.iter(|| {
                m.update(SEEN, lost, runs, TARGET, direct);
                black_box(m.table()[64])
            })
        });
    }
    g.finish();
}

fn cpu_time_mode(millis: u64, rounds: usize) {
    let budget = Duration::from_millis(millis);
    let mut cases = cases();
    let mut per = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for (i, (name, m, lost, runs, direct)) in cases.iter_mut().enumerate() {
            let ns = ns_per_call(budget, || {
                m.update(SEEN, *lost, *runs, TARGET, *direct);
                black_box(m.table()[64]);
            });
            println!("round {round} {name} {:.1} us cpu", ns / 1e3);
            per[i].push(ns);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (i, pair) in cases.chunks(2).enumerate() {
        let (kept, direct) = (median(&mut per[2 * i]), median(&mut per[2 * i + 1]));
        println!(
            "median {} kept {:.1} us, direct {:.1} us: {:.2}x",
            pair[0].0.trim_end_matches("/kept"),
            kept / 1e3,
            direct / 1e3,
            direct / kept
        );
    }
}

fn main() {
    if let Ok(ms) = std::env::var("KCPIO_BENCH_CPU_MS") {
        let rounds = std::env::var("KCPIO_BENCH_ROUNDS").map_or(5, |r| r.parse().expect("rounds"));
        cpu_time_mode(ms.parse().expect("KCPIO_BENCH_CPU_MS: a number"), rounds);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
