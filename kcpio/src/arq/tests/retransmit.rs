//! Fast retransmit, early retransmit and RTO back-off.

use super::util::*;
use crate::arq::{ArqConfig, Congestion, Kcp, Origin, Timing};

fn nc_config(fast_resend: u32) -> ArqConfig {
    ArqConfig {
        nodelay: true,
        interval: 10,
        fast_resend,
        no_congestion: true,
        ..ArqConfig::default()
    }
}

/// Five 100-byte segments, sn 0..4, sent at t=0 in one datagram.
fn five_in_flight(cfg: &ArqConfig) -> Kcp {
    let mut a = Kcp::new(7, cfg).unwrap();
    for _ in 0..5 {
        assert_eq!(a.send(&[1; 100]), 100);
    }
    let out = drain(&mut a, 0);
    assert_eq!(
        cmd_sn(&out),
        (0..5).map(|sn| (PUSH, sn)).collect::<Vec<_>>()
    );
    a
}

#[test]
fn fast_retransmit_fires_at_the_threshold_once_per_rto_cycle() {
    let mut a = five_in_flight(&nc_config(2));
    // t=5: ACK sn 1 skips sn 0 once: below the threshold, and nothing flushes.
    a.handle_datagram(t(5), &ack(1, 0, 0, 32), Origin::Regular)
        .unwrap();
    assert!(drain(&mut a, 5).is_empty());
    // t=6: ACK sn 2 skips sn 0 a second time: immediate flush, sn 0 only.
    a.handle_datagram(t(6), &ack(2, 0, 0, 32), Origin::Regular)
        .unwrap();
    let out = drain(&mut a, 6);
    assert_eq!(cmd_sn(&out), vec![(PUSH, 0)]);
    assert_eq!(
        headers(&out[0])[0].ts,
        6,
        "a retransmission carries the new ts"
    );
    assert_eq!(a.stats().retransmit_fast, 1);
    // t=7: more skipping ACKs: sn 0's fast retransmit is spent until its RTO.
    a.handle_datagram(t(7), &ack(3, 0, 0, 32), Origin::Regular)
        .unwrap();
    assert!(drain(&mut a, 7).is_empty());
    assert_eq!(a.stats().retransmit_fast, 1);
    // rx_rto is 30 (nodelay floor); sn 0 was re-armed at t=6: RTO at 36, then
    // the nodelay back-off adds rx_rto/2 each time: 36, 81, 141.
    let out = run_until(&mut a, 7, 150);
    assert_eq!(push_times(&out, 0), vec![36, 81, 141]);
    assert_eq!(a.rto(), 30);
}

#[test]
fn with_the_model_acks_count_after_a_reorder_window_and_a_lost_resend_goes_again() {
    let cfg = ArqConfig {
        congestion: Some(Congestion::Bbr),
        ..nc_config(2)
    };
    // sn 0..4 at t=0, sn 5 and 6 at t=20. The reorder window is an eighth
    // of the 50 ms RTT: 6 ms.
    let mut a = five_in_flight(&cfg);
    for _ in 0..2 {
        a.send(&[2; 100]);
    }
    assert_eq!(cmd_sn(&drain(&mut a, 20)), vec![(PUSH, 5), (PUSH, 6)]);
    // ACKs of segments sent with sn 0 are no evidence that it was lost
    // (its own ACK may be in a datagram that was lost, with a copy to come);
    // kcp-go would fast-resend it here.
    for sn in 1..5 {
        a.handle_datagram(t(50), &ack(sn, 0, 0, 32), Origin::Regular)
            .unwrap();
    }
    assert!(drain(&mut a, 50).is_empty());
    // ACKs of two segments sent 20 ms after it are: fast resend, ts 60.
    let both = [ack(5, 20, 0, 32), ack(6, 20, 0, 32)].concat();
    a.handle_datagram(t(60), &both, Origin::Regular).unwrap();
    assert_eq!(cmd_sn(&drain(&mut a, 60)), vec![(PUSH, 0)]);
    // New data right after the resend (ts 62), and later (ts 100).
    for (now, sns) in [(62, [7, 8]), (100, [9, 10])] {
        for _ in 0..2 {
            a.send(&[3; 100]);
        }
        let want: Vec<_> = sns.iter().map(|&sn| (PUSH, sn)).collect();
        assert_eq!(cmd_sn(&drain(&mut a, now)), want);
    }
    // The ACKs of what left with the resend say nothing of it either.
    for sn in [7, 8] {
        a.handle_datagram(t(112), &ack(sn, 62, 0, 32), Origin::Regular)
            .unwrap();
    }
    assert!(drain(&mut a, 112).is_empty());
    // Two sent 40 ms after it: the resend was lost too, and sn 0 goes again
    // at once, where kcp-go would wait for its timeout.
    let both = [ack(9, 100, 0, 32), ack(10, 100, 0, 32)].concat();
    a.handle_datagram(t(125), &both, Origin::Regular).unwrap();
    assert_eq!(cmd_sn(&drain(&mut a, 125)), vec![(PUSH, 0)]);
    assert_eq!(a.stats().retransmit_fast, 2);
    assert_eq!(a.stats().retransmit_rto, 0);
}

#[test]
fn early_retransmit_needs_only_one_skip_when_nothing_new_is_admitted() {
    // fast_resend 0: fast retransmit is off, early retransmit is not.
    let mut a = Kcp::new(7, &nc_config(0)).unwrap();
    for _ in 0..3 {
        a.send(&[2; 50]);
    }
    drain(&mut a, 0);
    // One ACK for sn 2 skips sn 0 and 1 once each; with fast_resend 0 every
    // skip "reaches the threshold", so kcp-go flushes at once and, as the
    // flush admits nothing new, resends both early.
    a.handle_datagram(t(5), &ack(2, 0, 0, 32), Origin::Regular)
        .unwrap();
    let out = drain(&mut a, 5);
    assert_eq!(cmd_sn(&out), vec![(PUSH, 0), (PUSH, 1)]);
    assert_eq!(a.stats().retransmit_early, 2);
    assert_eq!(a.stats().retransmit_fast, 0);
}

#[test]
fn early_retransmit_waits_while_new_data_is_admitted() {
    let cfg = ArqConfig {
        write_delay: true,
        ..nc_config(0)
    };
    let mut a = Kcp::new(7, &cfg).unwrap();
    for _ in 0..3 {
        a.send(&[2; 50]);
    }
    // write_delay: nothing leaves before the tick.
    assert!(drain(&mut a, 0).is_empty());
    a.handle_timeout(t(0));
    assert_eq!(cmd_sn(&drain(&mut a, 0)).len(), 3);
    a.send(&[3; 50]);
    a.handle_datagram(t(5), &ack(2, 0, 0, 32), Origin::Regular)
        .unwrap();
    // The input flush admits sn 3, so no early retransmission yet.
    assert_eq!(cmd_sn(&drain(&mut a, 5)), vec![(PUSH, 3)]);
    // The next tick admits nothing: now sn 0 and 1 go early.
    let out = run_until(&mut a, 5, 10);
    assert_eq!(
        cmd_sn(&out.into_iter().map(|(_, p)| p).collect::<Vec<_>>()),
        vec![(PUSH, 0), (PUSH, 1)]
    );
    assert_eq!(a.stats().retransmit_early, 2);
}

#[test]
fn a_skipping_ack_older_than_the_segments_last_copy_does_not_count() {
    let mut a = Kcp::new(7, &nc_config(1)).unwrap();
    a.send(&[1; 10]);
    drain(&mut a, 0);
    a.handle_timeout(t(0));
    // sn 1 leaves at t=20.
    run_until(&mut a, 0, 20);
    a.send(&[1; 10]);
    drain(&mut a, 20);
    // sn 0 times out at 200 (first RTO is 200 before any sample): ts 200.
    let out = run_until(&mut a, 20, 200);
    assert_eq!(push_times(&out, 0), vec![200]);
    // A late ACK for sn 1 echoing ts 20 says nothing about sn 0's ts-200 copy.
    a.handle_datagram(t(210), &ack(1, 20, 0, 32), Origin::Regular)
        .unwrap();
    assert!(drain(&mut a, 210).is_empty());
    let out = run_until(&mut a, 210, 250);
    assert!(
        push_times(&out, 0).is_empty(),
        "no fast or early retransmission"
    );
}

#[test]
fn rto_backoff_is_additive_full_rto_without_nodelay() {
    // kcp-go default: waits R, 2R, 3R, ... (C would double).
    let mut a = Kcp::new(7, &ArqConfig::default()).unwrap();
    a.send(&[9; 10]);
    drain(&mut a, 0);
    let out = run_until(&mut a, 0, 3000);
    assert_eq!(push_times(&out, 0), vec![200, 600, 1200, 2000, 3000]);
    assert_eq!(a.stats().retransmit_rto, 5);
    // Loss collapses the window.
    assert_eq!(a.kcp_cwnd(), Some((1, 2)));
}

#[test]
fn rto_backoff_adds_half_an_rto_with_nodelay() {
    let mut a = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST2)).unwrap();
    a.send(&[9; 10]);
    drain(&mut a, 0);
    let out = run_until(&mut a, 0, 2000);
    assert_eq!(push_times(&out, 0), vec![200, 500, 900, 1400, 2000]);
}

#[test]
fn rtt_samples_set_srtt_and_respect_the_minimum_rto() {
    for (timing, floor) in [(Timing::KCP_GO, 100), (Timing::FAST3, 30)] {
        let mut a = Kcp::new(7, &ArqConfig::with_timing(timing)).unwrap();
        a.send(&[1; 10]);
        drain(&mut a, 1000);
        a.handle_datagram(t(1004), &ack(0, 1000, 1, 32), Origin::Regular)
            .unwrap();
        assert_eq!(a.srtt(), 4);
        let interval = ArqConfig::with_timing(timing).interval;
        assert_eq!(a.rto(), (4 + interval.max(8)).max(floor));
    }
}
