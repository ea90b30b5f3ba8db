//! kcpio-only ACK repetition (`ArqConfig::ack_repeat`): every ACK goes out
//! in two flushes, so one lost ACK packet costs the sender no resends.

use super::util::*;
use crate::arq::{ArqConfig, Kcp};

fn config(ack_repeat: bool) -> ArqConfig {
    ArqConfig {
        nodelay: true,
        interval: 10,
        fast_resend: 2,
        no_congestion: true,
        ack_repeat,
        ..ArqConfig::default()
    }
}

/// The sender with sn 0..=6 in flight (ts 0), the receiver given sn 1..=3
/// (sn 0 lost) and then sn 4..=6; returns both and the receiver's two ACK
/// flushes.
fn lose_sn0(ack_repeat: bool) -> (Kcp, Kcp, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let cfg = config(ack_repeat);
    let (mut a, mut b) = pair(&cfg);
    for _ in 0..7 {
        assert_eq!(a.send(&[1; 100]), 100);
    }
    assert_eq!(cmd_sn(&drain(&mut a, 0)).len(), 7);
    for sn in 1..=3 {
        deliver(&mut b, 1, &[push(sn, 0, 0, &[1; 100])]);
    }
    b.handle_timeout(t(10));
    let first = drain(&mut b, 10);
    for sn in 4..=6 {
        deliver(&mut b, 11, &[push(sn, 0, 0, &[1; 100])]);
    }
    b.handle_timeout(t(20));
    let second = drain(&mut b, 20);
    (a, b, first, second)
}

#[test]
fn the_next_flush_repeats_the_acks_ahead_of_the_new_ones() {
    let (_, _, first, second) = lose_sn0(true);
    assert_eq!(cmd_sn(&first), vec![(ACK, 1), (ACK, 2), (ACK, 3)]);
    assert_eq!(
        cmd_sn(&second),
        vec![(ACK, 1), (ACK, 2), (ACK, 3), (ACK, 4), (ACK, 5), (ACK, 6)],
        "copies first, then the new ACKs"
    );
    let (_, _, first, second) = lose_sn0(false);
    assert_eq!(cmd_sn(&first), vec![(ACK, 1), (ACK, 2), (ACK, 3)]);
    assert_eq!(cmd_sn(&second), vec![(ACK, 4), (ACK, 5), (ACK, 6)]);
}

#[test]
fn a_lost_ack_packet_makes_no_needless_resends() {
    for repeat in [false, true] {
        let (mut a, _, _lost, second) = lose_sn0(repeat);
        // The first ACK packet is lost; the second arrives.
        deliver(&mut a, 120, &second);
        let resent: Vec<u32> = cmd_sn(&drain(&mut a, 120))
            .into_iter()
            .filter(|&(cmd, _)| cmd == PUSH)
            .map(|(_, sn)| sn)
            .collect();
        if repeat {
            assert_eq!(resent, vec![0], "only the segment really lost");
        } else {
            assert_eq!(
                resent,
                vec![0, 1, 2, 3],
                "kcp-go's receiver: 1..=3 resent though they arrived"
            );
        }
    }
}

#[test]
fn copies_stop_at_una_and_never_make_a_flush_of_their_own() {
    let (_, mut b, _, _) = lose_sn0(true);
    // Nothing new: the tick sends nothing, copies included.
    b.handle_timeout(t(30));
    assert!(drain(&mut b, 30).is_empty());
    // sn 0 arrives: una moves to 7 and covers every earlier ACK, so the
    // flush carries the new ACK (kcp-go writes the last entry even below
    // una) and no copies.
    deliver(&mut b, 31, &[push(0, 0, 0, &[1; 100])]);
    b.handle_timeout(t(40));
    let out = drain(&mut b, 40);
    assert_eq!(cmd_sn(&out), vec![(ACK, 0)]);
    assert_eq!(headers(&out[0])[0].una, 7);
}

#[test]
fn a_copy_is_sent_once() {
    let cfg = config(true);
    let (_, mut b) = pair(&cfg);
    deliver(&mut b, 1, &[push(1, 0, 0, &[1; 100])]);
    b.handle_timeout(t(10));
    assert_eq!(cmd_sn(&drain(&mut b, 10)), vec![(ACK, 1)]);
    deliver(&mut b, 11, &[push(2, 0, 0, &[1; 100])]);
    b.handle_timeout(t(20));
    assert_eq!(cmd_sn(&drain(&mut b, 20)), vec![(ACK, 1), (ACK, 2)]);
    deliver(&mut b, 21, &[push(3, 0, 0, &[1; 100])]);
    b.handle_timeout(t(30));
    assert_eq!(
        cmd_sn(&drain(&mut b, 30)),
        vec![(ACK, 2), (ACK, 3)],
        "sn 1 was repeated once already"
    );
}
