//! Congestion control on the simulator: bulk transfers through a
//! bottleneck (a rate and a drop-tail queue, random loss behind it) on the
//! shipped `Conn` pipeline and a virtual clock.
//!
//! The bounds are on what the model-based controller must achieve on the
//! path (goodput as a fraction of the rate, queueing delay, drops at the
//! queue, fairness), never on the machine's timing. Each test also runs a
//! contender where that shows the bound can fail: kcp-go's `nc = 1`
//! (`Congestion::None`) floods the queue, its `nc = 0` window
//! (`Congestion::Kcp`) collapses under random loss. That `None` and `Kcp`
//! are unchanged is proven elsewhere: the kcp-go differential trace
//! (`kcpio/src/arq/tests/kcpgo_trace.rs`) and the `arq_sim` snapshots.

mod sim;

use kcpio::{Config, Congestion, Preset};
use sim::{Flow, Link, Sim};

/// 10 Mbit/s of IP bytes.
const RATE: u64 = 1_250_000;
/// One-way delay of each direction, ms (RTT 100 ms).
const DELAY: u64 = 50;
const RTT: u64 = 2 * DELAY;
/// One bandwidth-delay product, bytes.
const BDP: u64 = RATE * RTT / 1000;
/// IP + UDP + KCP header bytes around each full segment.
const MTU: usize = 1400;

fn config(c: Congestion) -> Config {
    Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(1024, 1024)
        .mtu(MTU)
        .congestion(c)
        .build()
        .expect("config")
}

/// The field runs' model peer (`--nodelay fast3 --mtu 1350 --congestion
/// model --stream`) with `wnd`-segment windows.
fn field_config(wnd: u16) -> Config {
    Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(wnd, wnd)
        .mtu(1350)
        .congestion(Congestion::Bbr)
        .build()
        .expect("config")
}

/// Payload bytes per byte through the bottleneck for full segments.
fn efficiency(cfg: &Config) -> f64 {
    let mss = cfg.kcp_mtu() - 24;
    mss as f64 / (cfg.kcp_mtu() as f64 + 28.0)
}

/// One bulk flow: `from` writes without end from `start` ms, `to` reads.
struct Bulk {
    from: usize,
    to: usize,
    start: u64,
    /// Bytes read by `to`, per 100 ms bucket.
    buckets: Vec<u64>,
}

impl Bulk {
    fn new(from: usize, to: usize, start: u64) -> Self {
        Self {
            from,
            to,
            start,
            buckets: Vec::new(),
        }
    }

    /// Payload bytes per second read over `[from, to)` ms.
    fn goodput(&self, from: u64, to: u64) -> f64 {
        let (a, b) = ((from / 100) as usize, (to / 100) as usize);
        let sum: u64 = self.buckets.iter().take(b).skip(a).sum();
        sum as f64 * 1000.0 / (to - from) as f64
    }

    /// First time (ms) a 1 s window reached `rate` bytes/s.
    fn reached(&self, rate: f64) -> Option<u64> {
        (10..=self.buckets.len()).find_map(|end| {
            let sum: u64 = self.buckets[end - 10..end].iter().sum();
            (sum as f64 >= rate).then_some(end as u64 * 100)
        })
    }
}

/// A change to the path at a given instant (ms).
type Event = (u64, Box<dyn FnMut(&mut Sim)>);

/// Runs `flows` until `until` ms; `at` is called once when the clock
/// passes each of its instants (to change the path mid-run).
fn run(sim: &mut Sim, flows: &mut [Bulk], until: u64, mut at: Vec<Event>) {
    let chunk = vec![0x5a_u8; 16 * 1024];
    let mut rbuf = vec![0u8; 64 * 1024];
    let steps = until * 200;
    sim.drive(steps, |sim| {
        let now = sim.elapsed_ms();
        for (t, f) in &mut at {
            if *t != u64::MAX && now >= *t {
                f(sim);
                *t = u64::MAX;
            }
        }
        for flow in flows.iter_mut() {
            if now >= flow.start {
                while sim.conn(flow.from).write(&chunk).is_ok_and(|n| n > 0) {}
            }
            while let Ok(n) = sim.conn(flow.to).read(&mut rbuf) {
                if n == 0 {
                    break;
                }
                let b = (now / 100) as usize;
                if flow.buckets.len() <= b {
                    flow.buckets.resize(b + 1, 0);
                }
                flow.buckets[b] += n as u64;
            }
            assert!(
                sim.conn(flow.from).error().is_none(),
                "sender failed at {now} ms"
            );
            if std::env::var_os("CC_TRACE").is_some()
                && now
                    % std::env::var("CC_TRACE")
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(500)
                    == 0
            {
                let st = sim.conn(flow.from).stats();
                println!(
                    "{now} {:?} wait_snd {} stalls snd {} peer {} rx rto {} fast {}",
                    sim.conn(flow.from).congestion_state(),
                    st.wait_snd,
                    st.arq.send_window_stalls,
                    st.arq.peer_window_stalls,
                    st.arq.retransmit_rto,
                    st.arq.retransmit_fast
                );
            }
        }
        if now >= until {
            Flow::Done
        } else {
            let next_start = flows.iter().map(|f| f.start).filter(|&s| s > now).min();
            Flow::WakeAt(next_start.unwrap_or(until).min(until))
        }
    });
}

/// A pair through one bottleneck of `rate` and `queue` bytes downstream,
/// `loss` random loss each way behind it (the return path has no queue).
fn pair(c: Congestion, rate: u64, queue: u64, loss: f64, seed: u64) -> (Sim, Config) {
    let cfg = config(c);
    (path(&cfg, rate, DELAY, queue, loss, seed), cfg)
}

/// Nodes 0 (sender) and 1 with `cfg`, `delay` ms each way, a bottleneck of
/// `rate` and `queue` bytes downstream, `loss` each way behind it.
fn path(cfg: &Config, rate: u64, delay: u64, queue: u64, loss: f64, seed: u64) -> Sim {
    let mut sim = Sim::new(seed, 0);
    let b = sim.add_bottleneck(rate, queue);
    let down = Link {
        loss,
        ..Link::clean(delay)
    }
    .through(b);
    let up = Link {
        loss,
        ..Link::clean(delay)
    };
    let s = sim.add(7, cfg, down);
    let r = sim.add(7, cfg, up);
    sim.connect(s, r);
    sim
}

struct Figures {
    /// Goodput over the measured span as a fraction of rate × efficiency × (1 − loss).
    fraction: f64,
    /// Queueing delay p50 and p99 over the span, as a fraction of the RTT.
    delay_p50: f64,
    delay_p99: f64,
    /// Drops at the queue over datagrams offered to it, whole run.
    drops: f64,
    /// When a 1 s window first carried 80% of the achievable goodput (ms).
    converged: Option<u64>,
}

fn measure(c: Congestion, loss: f64, seed: u64, until: u64, from: u64) -> Figures {
    let (mut sim, cfg) = pair(c, RATE, BDP, loss, seed);
    let mut flows = [Bulk::new(0, 1, 0)];
    run(&mut sim, &mut flows, until, Vec::new());
    let ideal = RATE as f64 * efficiency(&cfg) * (1.0 - loss);
    let b = &sim.bottlenecks[0];
    Figures {
        fraction: flows[0].goodput(from, until) / ideal,
        delay_p50: b.delay_percentile(from, until, 50) as f64 / 1000.0 / RTT as f64,
        delay_p99: b.delay_percentile(from, until, 99) as f64 / 1000.0 / RTT as f64,
        drops: b.drops as f64 / (b.drops + b.passed).max(1) as f64,
        converged: flows[0].reached(0.8 * ideal),
    }
}

fn show(what: &str, f: &Figures) -> String {
    format!(
        "{what}: goodput {:.1}% of rate x (1 - loss), queueing delay p50 {:.1}% p99 {:.1}% of RTT, drops {:.2}%, 80% reached at {:?} ms",
        f.fraction * 100.0,
        f.delay_p50 * 100.0,
        f.delay_p99 * 100.0,
        f.drops * 100.0,
        f.converged
    )
}

#[test]
fn model_converges_fast_and_keeps_the_queue_short() {
    let f = measure(Congestion::Bbr, 0.0, 1, 20_000, 5_000);
    let text = show("model, clean", &f);
    println!("{text}");
    assert!(f.fraction >= 0.9, "{text}");
    // Startup doubles per round trip: 80% within 25 round trips.
    assert!(f.converged.is_some_and(|t| t <= 25 * RTT), "{text}");
    assert!(f.delay_p50 <= 0.25, "{text}");
    assert!(f.drops <= 0.01, "{text}");

    // The contender the bound is there for: nc = 1 with a 1024-segment
    // window (~11 BDP) fills the queue and overflows it.
    let none = measure(Congestion::None, 0.0, 1, 20_000, 5_000);
    let text = show("none, clean", &none);
    println!("{text}");
    assert!(none.drops > 0.05, "{text}");
}

#[test]
fn random_loss_does_not_lower_the_rate() {
    for (loss, want) in [
        (0.0, 0.9),
        (0.01, 0.88),
        (0.05, 0.85),
        (0.09, 0.85),
        (0.15, 0.75),
    ] {
        let f = measure(Congestion::Bbr, loss, 2, 20_000, 5_000);
        let text = show(&format!("model, {}% loss each way", loss * 100.0), &f);
        println!("{text}");
        assert!(f.fraction >= want, "{text}");
        assert!(f.delay_p50 <= 0.25, "{text}");
        assert!(f.drops <= 0.01, "{text}");
    }
    // KCP's classic window reads every loss as congestion.
    let kcp = measure(Congestion::Kcp, 0.05, 2, 20_000, 5_000);
    let text = show("kcp, 5% loss", &kcp);
    println!("{text}");
    assert!(kcp.fraction < 0.5, "{text}");
}

#[test]
fn a_bottleneck_that_halves_is_followed() {
    let (mut sim, cfg) = pair(Congestion::Bbr, RATE, BDP, 0.01, 3);
    let mut flows = [Bulk::new(0, 1, 0)];
    let halve: Box<dyn FnMut(&mut Sim)> = Box::new(|sim: &mut Sim| {
        sim.bottlenecks[0].rate = RATE / 2;
    });
    run(&mut sim, &mut flows, 40_000, vec![(10_000, halve)]);
    let eff = efficiency(&cfg) * 0.99;
    let before = flows[0].goodput(5_000, 10_000) / (RATE as f64 * eff);
    let after = flows[0].goodput(15_000, 40_000) / (RATE as f64 / 2.0 * eff);
    let b = &sim.bottlenecks[0];
    // Queueing delay once adapted, against the halved rate's own RTT.
    let p50 = b.delay_percentile(15_000, 40_000, 50) as f64 / 1000.0 / RTT as f64;
    let text = format!(
        "before {:.1}%, after {:.1}% of the rate, delay p50 after {:.1}% of RTT, drops {} of {}",
        before * 100.0,
        after * 100.0,
        p50 * 100.0,
        b.drops,
        b.passed
    );
    println!("{text}");
    assert!(before >= 0.88, "{text}");
    assert!(after >= 0.85, "{text}");
    // Measured: p50 28%, drops 1.6% (the queue of the old rate overflows
    // while the estimate comes down). Bounds with a margin.
    assert!(p50 <= 0.4, "{text}");
    assert!((b.drops as f64) <= 0.03 * b.passed as f64, "{text}");
}

#[test]
fn two_flows_share_a_bottleneck() {
    let cfg = config(Congestion::Bbr);
    let mut sim = Sim::new(4, 0);
    let b = sim.add_bottleneck(RATE, BDP);
    let mut ids = Vec::new();
    for conv in [11, 12] {
        let s = sim.add(conv, &cfg, Link::clean(DELAY).through(b));
        let r = sim.add(conv, &cfg, Link::clean(DELAY));
        sim.connect(s, r);
        ids.push((s, r));
    }
    // The second flow arrives once the first holds the whole link.
    let mut flows = [
        Bulk::new(ids[0].0, ids[0].1, 0),
        Bulk::new(ids[1].0, ids[1].1, 5_000),
    ];
    run(&mut sim, &mut flows, 40_000, Vec::new());
    let (x, y) = (
        flows[0].goodput(20_000, 40_000),
        flows[1].goodput(20_000, 40_000),
    );
    let jain = (x + y).powi(2) / (2.0 * (x * x + y * y));
    let total = (x + y) / (RATE as f64 * efficiency(&cfg));
    let bn = &sim.bottlenecks[0];
    let p50 = bn.delay_percentile(20_000, 40_000, 50) as f64 / 1000.0 / RTT as f64;
    let text = format!(
        "flows {:.0} and {:.0} B/s, Jain {jain:.3}, together {:.1}% of the rate, delay p50 {:.1}% of RTT, drops {} of {}",
        x,
        y,
        total * 100.0,
        p50 * 100.0,
        bn.drops,
        bn.passed
    );
    println!("{text}");
    assert!(jain >= 0.8, "{text}");
    assert!(total >= 0.85, "{text}");
    // Two model flows keep a standing queue (measured p50 90% of the RTT)
    // and share unevenly (2.7 : 1, which Jain still scores 0.83):
    // each cuts its estimate on it, which is what evens the shares, but
    // the queue itself stays. Left as a known limit; the drops stay low.
    assert!(bn.drops as f64 <= 0.03 * bn.passed as f64, "{text}");
}

#[test]
fn windows_size_themselves() {
    // Windows of 64 segments are ~0.7 of this path's BDP (93 full segments):
    // fixed, they cap the flow; with `max_window` they grow to what it needs.
    let run_with = |max: Option<u16>| {
        let mut b = Config::builder()
            .preset(Preset::Fast3)
            .stream(true)
            .window(64, 64)
            .mtu(MTU)
            .congestion(Congestion::Bbr);
        if let Some(m) = max {
            b = b.max_window(m);
        }
        let cfg = b.build().expect("config");
        let mut sim = path(&cfg, RATE, DELAY, BDP, 0.05, 5);
        let mut flows = [Bulk::new(0, 1, 0)];
        run(&mut sim, &mut flows, 20_000, Vec::new());
        flows[0].goodput(5_000, 20_000) / (RATE as f64 * efficiency(&cfg) * 0.95)
    };
    let fixed = run_with(None);
    let grown = run_with(Some(4096));
    let text = format!(
        "5% loss: windows fixed at 64: {:.1}%, growing up to 4096: {:.1}% of rate x (1 - loss)",
        fixed * 100.0,
        grown * 100.0
    );
    println!("{text}");
    assert!(fixed < 0.75, "{text}");
    assert!(grown >= 0.85, "{text}");
}

/// The field bench's target point on the simulator (100 Mbit/s, 200 ms,
/// 9% loss each way, 1 BDP queue), for diagnosis: prints, asserts nothing
/// beyond progress. Five seeds, 8192-segment windows; per seed the time a
/// 300 MiB transfer takes from the start (the field bench's figure: no
/// allowance for headers) and the goodput from 5 s to 30 s.
/// `cargo test --release --test cc field_point -- --ignored --nocapture`
/// (`CC_NO_ACK_REPEAT=1`: the receiver sends each ACK once; `CC_WND=N`:
/// windows of N segments; `CC_SECS=1`: megabytes delivered in each of the
/// first 36 seconds, to see what startup costs).
/// A busy host wakes late now and then (this 2-core box: 40 wake-ups a
/// second more than 4 ms late, the worst 62 ms). The pacer must not lose
/// the time it was not woken for: a bucket that keeps two bursts (4 ms)
/// sent 61% of the rate here, against 99% with exact wake-ups.
#[test]
fn a_late_host_still_sends_at_the_rate() {
    // The field's rate and round trip (100 Mbit/s, 200 ms, a queue of one
    // BDP), no loss.
    let rate = 12_500_000u64;
    let cfg = field_config(8192);
    let ideal = rate as f64 * efficiency(&cfg);
    let (from, until) = (4_000, 12_000);
    let mut sim = path(&cfg, rate, 100, rate / 5, 0.0, 1);
    // One step in 200 wakes 1-30 ms late: ~25 a second here, a third of
    // the time spent late (harsher than the box, so that it shows).
    sim.late_host(0.005, 30, 7);
    let mut flows = [Bulk::new(0, 1, 0)];
    run(&mut sim, &mut flows, until, Vec::new());
    let state = sim.conn(0).congestion_state();
    let b = &sim.bottlenecks[0];
    let (late, late_ms) = sim.late_wakeups;
    let goodput = flows[0].goodput(from, until) / ideal;
    let p50 = b.delay_percentile(from, until, 50) as f64 / 1000.0 / 200.0;
    let text = format!(
        "{late} late wake-ups in {} s ({late_ms} ms late in all): goodput {:.1}% of the rate, queueing delay p50 {:.1}% of RTT, drops {} of {}; {:?}",
        until / 1000,
        goodput * 100.0,
        p50 * 100.0,
        b.drops,
        b.passed,
        state
    );
    println!("{text}");
    assert!(late > 100, "{text}");
    assert!(goodput >= 0.85, "{text}");
    assert!(p50 <= 0.25, "{text}");
}

#[test]
fn startup_fills_a_long_lossy_path_fast_and_resends_without_timeouts() {
    // The field's lossy path: 100 Mbit/s, 200 ms, a queue of one BDP, 9%
    // random loss each way, windows of 16384.
    let rate = 12_500_000u64;
    let loss = 0.09;
    let cfg = field_config(16384);
    let ideal = rate as f64 * efficiency(&cfg) * (1.0 - loss);
    let until = 12_000;
    let mut sim = path(&cfg, rate, 100, rate / 5, loss, 5);
    let mut flows = [Bulk::new(0, 1, 0)];
    run(&mut sim, &mut flows, until, Vec::new());
    let sent = sim.conn(0).stats().arq;
    let repeats = sim.conn(1).stats().arq.repeat_segments;
    let b = &sim.bottlenecks[0];
    let reached = flows[0].reached(0.8 * ideal);
    let first3 = flows[0].goodput(0, 3_000) / ideal;
    let text = format!(
        "80% reached at {reached:?} ms, first 3 s {:.1}% of rate x (1 - loss); resent by timeout {}, fast {}, early {}; receiver got {repeats} repeats of {} segments sent; drops {} of {}",
        first3 * 100.0,
        sent.retransmit_rto,
        sent.retransmit_fast,
        sent.retransmit_early,
        sent.segments_out,
        b.drops,
        b.passed
    );
    println!("{text}");
    // Startup's own window doubles per round trip through the loss, and a
    // lost resend does not hold up delivery for a timeout: before, 6% of
    // the rate reached the reader in the first 3 s (80% at 3.4 s); now 36%
    // (3.0 s).
    assert!(first3 >= 0.25, "{text}");
    // A lost fast resend is found by the ACKs of what was sent after it
    // (kcp-go waits for its timeout: 7% as many timeouts as fast resends
    // here before, 0.2% now).
    assert!(sent.retransmit_rto * 100 <= sent.retransmit_fast, "{text}");
    // ACKs count as evidence of a loss only for segments sent a reorder
    // window earlier, so a lost ACK datagram's copy still comes in time:
    // 3.2% of what was sent arrived twice before (2.5% with the window on
    // resends only), 0.9% now.
    assert!(repeats * 50 <= sent.segments_out, "{text}");
    assert!(b.drops * 100 <= b.passed, "{text}");
}

#[test]
#[ignore = "diagnostic, ~1.5M packets"]
fn field_point() {
    let rate = 12_500_000u64;
    let ideal = rate as f64 * 0.91;
    let (mut whole, mut steady) = (Vec::new(), Vec::new());
    let wnd: u16 = std::env::var("CC_WND")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8192);
    for seed in 1..=5 {
        let cfg = Config::builder()
            .preset(Preset::Fast3)
            .stream(true)
            .window(wnd, wnd)
            .mtu(1350)
            .congestion(Congestion::Bbr)
            .ack_repeat(std::env::var_os("CC_NO_ACK_REPEAT").is_none())
            .build()
            .expect("config");
        let mut sim = path(&cfg, rate, 100, rate / 5, 0.09, seed);
        let (s, r) = (0, 1);
        let mut flows = [Bulk::new(s, r, 0)];
        run(&mut sim, &mut flows, 40_000, Vec::new());
        let size = 300u64 << 20;
        let mut sum = 0;
        let done = flows[0].buckets.iter().position(|b| {
            sum += b;
            sum >= size
        });
        let w = done.map_or(0.0, |i| size as f64 / ((i + 1) as f64 / 10.0));
        let g = flows[0].goodput(5_000, 30_000);
        println!(
            "seed {seed}: 300 MiB at {:.2} MB/s = {:.1}%, 5-30 s {:.2} MB/s = {:.1}% of rate x (1 - loss); {:?}",
            w / 1e6,
            w / ideal * 100.0,
            g / 1e6,
            g / ideal * 100.0,
            sim.conn(s).congestion_state(),
        );
        println!("  sender {:?}", sim.conn(s).stats().arq);
        println!(
            "  receiver repeats {}",
            sim.conn(r).stats().arq.repeat_segments
        );
        if std::env::var_os("CC_SECS").is_some() {
            let per_s: Vec<String> = flows[0]
                .buckets
                .chunks(10)
                .take(36)
                .map(|c| format!("{:.1}", c.iter().sum::<u64>() as f64 / 1e6))
                .collect();
            println!("  MB per second: {}", per_s.join(" "));
        }
        whole.push(w / ideal);
        steady.push(g / ideal);
    }
    whole.sort_by(f64::total_cmp);
    steady.sort_by(f64::total_cmp);
    println!(
        "median of 5: 300 MiB {:.1}%, 5-30 s {:.1}% of rate x (1 - loss)",
        whole[2] * 100.0,
        steady[2] * 100.0
    );
}

/// Issue 28: with the default `Config`, bulk data must move at the path's
/// pace, not one window per flush interval. A path of 2 ms RTT and no rate
/// limit (loopback-like): what one flush sends arrives within one wake-up
/// of the receiver, whose ACKs (one flush per packet's worth,
/// during input) advertise the window as it was before its reader ran. The
/// reader then empties the queue; the sender must hear of the room at once,
/// not at the receiver's next 30 ms tick. One 1024-segment window per round
/// trip is ~700 MB/s, one per interval ~47 MB/s.
#[test]
fn default_config_is_ack_clocked() {
    let cfg = Config::builder().build().expect("config");
    let mut sim = Sim::new(28, 0);
    let s = sim.add(7, &cfg, Link::clean(1));
    let r = sim.add(7, &cfg, Link::clean(1));
    sim.connect(s, r);
    let mut flows = [Bulk::new(0, 1, 0)];
    run(&mut sim, &mut flows, 2_000, Vec::new());
    let goodput = flows[0].goodput(500, 2_000);
    let mss = (cfg.kcp_mtu() - 24) as f64;
    let per_rtt = 1024.0 * mss / 0.002;
    let per_interval = 1024.0 * mss / 0.030;
    let st = sim.conn(0).stats();
    let text = format!(
        "default Config, 2 ms RTT, no rate limit: {:.1} MB/s; one window per RTT {:.1} MB/s, \
         per interval {:.1} MB/s; sender stalls: peer window {}, own window {}; \
         datagrams to the sender {}",
        goodput / 1e6,
        per_rtt / 1e6,
        per_interval / 1e6,
        st.arq.peer_window_stalls,
        st.arq.send_window_stalls,
        st.datagrams_in,
    );
    println!("{text}");
    assert!(goodput >= 0.5 * per_rtt, "{text}");
}
