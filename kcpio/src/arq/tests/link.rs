//! Dead link, input validation, immediate ACKs and the idle timer.

use super::util::*;
use crate::arq::{ArqConfig, InputError, Kcp, Origin, Timing};

#[test]
fn a_silent_peer_trips_dead_link_after_that_many_transmissions() {
    let cfg = ArqConfig {
        dead_link: 3,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(7, &cfg).unwrap();
    a.send(b"anyone?");
    drain(&mut a, 0);
    // Transmissions at 0 (first), 200 and 500 (nodelay back-off).
    let out = run_until(&mut a, 0, 499);
    assert_eq!(push_times(&out, 0), vec![200]);
    assert!(!a.is_dead());
    let out = run_until(&mut a, 499, 500);
    assert_eq!(push_times(&out, 0), vec![500]);
    assert!(a.is_dead());
}

#[test]
fn malformed_input_is_typed_counted_and_cut_at_the_bad_segment() {
    let mut r = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    let ok = push(0, 0, 0, b"kept");
    assert_eq!(
        r.handle_datagram(t(0), &ok[..10], Origin::Regular),
        Err(InputError::Truncated)
    );
    let mut other = ok.clone();
    other[0] = 8;
    assert_eq!(
        r.handle_datagram(t(0), &other, Origin::Regular),
        Err(InputError::ConvMismatch)
    );
    let mut long = ok.clone();
    long[20] = 200;
    assert_eq!(
        r.handle_datagram(t(0), &long, Origin::Regular),
        Err(InputError::BadLength)
    );
    // kcp-go checks conv before the length.
    other[20] = 200;
    assert_eq!(
        r.handle_datagram(t(0), &other, Origin::Regular),
        Err(InputError::ConvMismatch)
    );
    let bad_cmd = seg(99, 0, 32, 0, 1, 0, &[]);
    // The good segment before the bad one is applied, as in kcp-go.
    assert_eq!(
        r.handle_datagram(t(0), &[ok, bad_cmd].concat(), Origin::Regular),
        Err(InputError::BadCommand)
    );
    let mut buf = [0u8; 8];
    assert_eq!(r.recv(&mut buf), 4);
    let s = r.stats();
    assert_eq!(
        (
            s.input_truncated,
            s.input_conv_mismatch,
            s.input_bad_length,
            s.input_bad_command
        ),
        (1, 2, 1, 1)
    );
    // Trailing bytes shorter than a header are ignored.
    let mut tail = push(1, 0, 0, b"x");
    tail.extend_from_slice(&[0; 23]);
    assert_eq!(r.handle_datagram(t(0), &tail, Origin::Regular), Ok(()));
}

#[test]
fn acks_wait_for_the_tick_unless_ack_nodelay_or_a_packet_of_them_is_pending() {
    let base = ArqConfig {
        mtu: 100,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut r = Kcp::new(7, &base).unwrap();
    r.handle_timeout(t(0));
    r.handle_datagram(t(1), &push(0, 1, 0, b"a"), Origin::Regular)
        .unwrap();
    assert!(drain(&mut r, 1).is_empty());
    // mtu 100 / 24 = 4 pending ACKs make a packet: flushed at once.
    let three: Vec<u8> = (1..4).flat_map(|sn| push(sn, 1, 0, b"a")).collect();
    r.handle_datagram(t(2), &three, Origin::Regular).unwrap();
    let out = drain(&mut r, 2);
    // ACKs below rcv_nxt are filtered except the last.
    assert_eq!(cmd_sn(&out), vec![(ACK, 3)]);

    let mut fast = Kcp::new(
        7,
        &ArqConfig {
            ack_nodelay: true,
            ..base
        },
    )
    .unwrap();
    fast.handle_datagram(t(1), &push(0, 1, 0, b"a"), Origin::Regular)
        .unwrap();
    assert_eq!(cmd_sn(&drain(&mut fast, 1)), vec![(ACK, 0)]);
}

#[test]
fn poll_timeout_is_none_when_idle_and_keeps_kcp_go_tick_phase() {
    let mut a = Kcp::new(7, &ArqConfig::default()).unwrap();
    assert_eq!(a.poll_timeout(), None);
    // The creation tick at t=0.
    a.handle_timeout(t(0));
    assert_eq!(a.poll_timeout(), None);
    // A PUSH at 1234: its ACK waits for the tick kcp-go would run, 1300.
    a.handle_datagram(t(1234), &push(0, 1234, 0, b"hi"), Origin::Regular)
        .unwrap();
    assert_eq!(a.poll_timeout(), Some(t(1300)));
    a.handle_timeout(t(1300));
    assert_eq!(cmd_sn(&drain(&mut a, 1300)), vec![(ACK, 0)]);
    assert_eq!(a.poll_timeout(), None);
    // Sending: the flush is due at once, then ticks every interval while in flight.
    a.send(b"x");
    assert_eq!(cmd_sn(&drain(&mut a, 1350)), vec![(PUSH, 0)]);
    assert_eq!(a.poll_timeout(), Some(t(1400)));
    a.handle_datagram(t(1360), &ack(0, 1350, 1, 32), Origin::Regular)
        .unwrap();
    assert!(a.is_flushed());
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn ts_and_timers_work_across_the_clock_wrap() {
    let mut a = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    let start = u32::MAX - 100;
    a.send(b"wrap");
    drain(&mut a, start);
    // No ACK: the RTO (200 ms) fires after the clock wrapped.
    let out = run_until(&mut a, start, start.wrapping_add(250));
    assert_eq!(push_times(&out, 0), vec![start.wrapping_add(200)]);
    a.handle_datagram(
        t(start.wrapping_add(210)),
        &ack(0, start.wrapping_add(200), 1, 32),
        Origin::Regular,
    )
    .unwrap();
    assert_eq!(a.srtt(), 10);
    assert!(a.is_flushed());
}
