//! kcpio-only retransmission options (for tail latency): RTO floor, back-off step
//! and cap, tail-loss probe. Off by default; the kcp-go trace tests cover
//! the defaults.

use super::util::*;
use crate::arq::{ArqConfig, Kcp, Origin};

fn cfg() -> ArqConfig {
    ArqConfig {
        nodelay: true,
        interval: 10,
        fast_resend: 1,
        no_congestion: true,
        ..ArqConfig::default()
    }
}

/// One segment sent at 0 and acknowledged at 40: srtt 40, rttvar 20, RTO
/// 40 + 4 * 20 = 120. Then sn 1 leaves at 100 and is never acknowledged.
fn lone_tail(cfg: &ArqConfig) -> Vec<u32> {
    let mut a = Kcp::new(7, cfg).unwrap();
    a.send(&[1; 10]);
    drain(&mut a, 0);
    a.handle_datagram(t(40), &ack(0, 0, 1, 32), Origin::Regular)
        .unwrap();
    drain(&mut a, 40);
    assert_eq!((a.srtt(), a.rto()), (40, 120));
    a.send(&[2; 10]);
    drain(&mut a, 100);
    let out = run_until(&mut a, 100, 500);
    push_times(&out, 1)
}

#[test]
fn tail_probe_resends_the_last_segment_at_one_and_a_half_srtt() {
    // kcp-go: RTO at 100 + 120, then + 60 (nodelay back-off) each time.
    assert_eq!(lone_tail(&cfg()), vec![220, 400]);
    // The probe: at 100 + max(1.5 * 40, 40 + 10) = 160, the RTO not backed
    // off (next at 160 + 120), then kcp-go's back-off resumes.
    let probe = ArqConfig {
        tail_probe: true,
        ..cfg()
    };
    assert_eq!(lone_tail(&probe), vec![160, 280, 460]);
}

#[test]
fn rto_floor_back_off_step_and_cap() {
    let c = ArqConfig {
        min_rto: Some(20),
        backoff_percent: Some(25),
        max_rto: Some(40),
        ..cfg()
    };
    let mut a = Kcp::new(7, &c).unwrap();
    a.send(&[1; 10]);
    drain(&mut a, 0);
    // RTT 2: srtt 2 + max(10, 4) = 12, floored at 20 (kcp-go: 30).
    a.handle_datagram(t(2), &ack(0, 0, 1, 32), Origin::Regular)
        .unwrap();
    assert_eq!(a.rto(), 20);
    a.send(&[2; 10]);
    drain(&mut a, 10);
    let out = run_until(&mut a, 10, 300);
    // waits 20, then +5 each time (25% of 20), capped at 40:
    // 20, 25, 30, 35, 40, 40, ...
    assert_eq!(
        push_times(&out, 1),
        vec![30, 55, 85, 120, 160, 200, 240, 280]
    );
}
