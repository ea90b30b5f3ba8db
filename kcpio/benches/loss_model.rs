//! The datagram FEC sender's loss-model table rebuild (one per folded
//! report, at most every 10 ms): `LossModel::update` at steady state,
//! the table built with the data shards' chain kept from one group size
//! to the next (`kept`) beside each residual computed alone (`direct`,
//! the build before it), in the same run. Paths: 9% random (lossy9's
//! rate) and 5% in runs of 3, each with the narrow table (groups of 32
//! data, 16 parity) and the wide one (64, 32); reports of 250 shards
//! (a 50 ms report at 5,000 datagrams/s). The two builds' tables are
//! checked equal before timing.

use criterion::{Criterion, black_box};
use kcpio::conn::loss_model_bench::Model;

const TARGET: f64 = 1e-4;
const SEEN: u64 = 250;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("loss_model_rebuild");
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
                let mut m = a.clone();
                g.bench_function(format!("{path}/{width}/{name}"), |bch| {
                    bch.iter(|| {
                        m.update(SEEN, lost, runs, TARGET, direct);
                        black_box(m.table()[64])
                    })
                });
            }
        }
    }
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
