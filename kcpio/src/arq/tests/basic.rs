//! Send, acknowledge, deliver: the happy path.

use super::util::*;
use crate::arq::{ArqConfig, Timing};

#[test]
fn stream_bytes_arrive_and_acks_release_the_sender() {
    let cfg = ArqConfig {
        stream: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let (mut a, mut b) = pair(&cfg);
    assert_eq!(a.poll_timeout(), None);
    assert_eq!(a.send(b"hello "), 6);
    assert_eq!(a.send(b"world"), 5);
    let p = drain(&mut a, 0);
    // The first send's flush went out before the second was merged? Both were
    // queued before the flush ran (it runs at the next call with `now`), so
    // they merged into one segment.
    assert_eq!(cmd_sn(&p), vec![(PUSH, 0)]);
    deliver(&mut b, 5, &p);
    let mut buf = [0u8; 64];
    assert_eq!(b.recv(&mut buf), 11);
    assert_eq!(&buf[..11], b"hello world");
    // b acknowledges at its next tick.
    let due = b.poll_timeout().unwrap();
    b.handle_timeout(due);
    let acks = drain(&mut b, due.as_millis());
    assert_eq!(cmd_sn(&acks), vec![(ACK, 0)]);
    deliver(&mut a, 10, &acks);
    assert!(a.is_flushed());
    assert_eq!(a.srtt(), 10);
}

#[test]
fn rings_start_small_and_stay_within_twice_the_window() {
    let cfg = ArqConfig {
        snd_wnd: 64,
        rcv_wnd: 64,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let (mut a, mut b) = pair(&cfg);
    assert!(a.footprint().snd_slots <= 16);
    let data = vec![7u8; 1 << 20];
    let accepted = a.send(&data);
    assert_eq!(accepted, 128 * a.mss());
    let f = a.footprint();
    assert_eq!(f.snd_slots, 128);
    let p = drain(&mut a, 0);
    deliver(&mut b, 1, &p);
    let f = b.footprint();
    assert!(
        f.rcv_slots <= 128 && f.rcv_queue + f.rcv_buffered <= 128,
        "{f:?}"
    );
    // rmt_wnd starts at 32, so 32 segments flew; their ACKs wait for the tick.
    assert_eq!(f.acklist, 32);
    assert_eq!(f.out_items, 0);
}

#[test]
fn kcp_can_move_between_threads_and_sit_behind_a_mutex() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<crate::arq::Kcp>();
    assert_send_sync::<crate::arq::ArqStats>();
}

/// An echo round: `a` sends, `b` answers; the answer's ACK releases `a`'s
/// segment, so `a`'s input queues kcp-go's `Input` flush (an ACK for the
/// answer). `a` then writes its next message before anything is drained.
fn echo_round_then_write(merge: bool) -> Vec<Vec<u8>> {
    let cfg = ArqConfig {
        stream: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let (mut a, mut b) = pair(&cfg);
    a.set_merge_flushes(merge);
    assert_eq!(a.send(b"ping"), 4);
    let p = drain(&mut a, 0);
    deliver(&mut b, 5, &p);
    let mut buf = [0u8; 64];
    assert_eq!(b.recv(&mut buf), 4);
    assert_eq!(b.send(b"pong"), 4);
    let reply = drain(&mut b, 5);
    assert_eq!(cmd_sn(&reply), vec![(ACK, 0), (PUSH, 0)]);
    deliver(&mut a, 10, &reply);
    assert_eq!(a.recv(&mut buf), 4);
    assert_eq!(a.send(b"ping again"), 10);
    drain(&mut a, 10)
}

#[test]
fn undrained_flushes_share_a_packet_only_when_merging_is_on() {
    // Default (kcp-go's packing): the Input flush's ACK closes its own packet.
    let apart = echo_round_then_write(false);
    assert_eq!(apart.len(), 2);
    assert_eq!(cmd_sn(&apart), vec![(ACK, 0), (PUSH, 1)]);
    // Merged: the same segments, in the same order, in one packet.
    let merged = echo_round_then_write(true);
    assert_eq!(merged.len(), 1);
    assert_eq!(cmd_sn(&merged), vec![(ACK, 0), (PUSH, 1)]);
    assert_eq!(
        headers(&merged[0]),
        [headers(&apart[0]), headers(&apart[1])].concat()
    );
}
