//! Send, acknowledge, deliver: the happy path.

use super::util::*;
use crate::arq::{ArqConfig, Preset};

#[test]
fn stream_bytes_arrive_and_acks_release_the_sender() {
    let cfg = ArqConfig {
        stream: true,
        ..ArqConfig::preset(Preset::Fast3)
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
        ..ArqConfig::preset(Preset::Fast3)
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
