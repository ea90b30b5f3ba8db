//! Stream and message modes, and the send-side limits.

use super::util::*;
use crate::arq::{ArqConfig, Kcp, SendError, Timing};

#[test]
fn stream_mode_merges_writes_into_the_unsent_tail() {
    let cfg = ArqConfig {
        stream: true,
        write_delay: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(7, &cfg).unwrap();
    let full = a.send_capacity();
    for w in [b"ab", b"cd", b"ef"] {
        assert_eq!(a.send(w), 2);
    }
    assert_eq!(a.wait_snd(), 1);
    assert_eq!(a.send_capacity(), full - 6);
    a.handle_timeout(t(0));
    let out = drain(&mut a, 0);
    let h = headers(&out[0]);
    assert_eq!((h.len(), h[0].len, h[0].frg), (1, 6, 0));
    // The segment is in flight now: the next write starts sn 1.
    a.send(b"gh");
    a.handle_timeout(t(10));
    assert_eq!(cmd_sn(&drain(&mut a, 10)), vec![(PUSH, 1)]);
}

#[test]
fn stream_mode_cuts_large_writes_at_mss_after_topping_up_the_tail() {
    let cfg = ArqConfig {
        stream: true,
        write_delay: true,
        mtu: 124,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(7, &cfg).unwrap();
    assert_eq!(a.mss(), 100);
    a.send(&[1; 30]);
    a.send(&[2; 250]);
    a.handle_timeout(t(0));
    let lens: Vec<u32> = drain(&mut a, 0)
        .iter()
        .flat_map(|p| headers(p))
        .map(|h| h.len)
        .collect();
    assert_eq!(lens, vec![100, 100, 80]);
}

#[test]
fn message_mode_send_keeps_each_write_in_its_own_segments() {
    let cfg = ArqConfig {
        write_delay: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(7, &cfg).unwrap();
    for w in [b"ab", b"cd"] {
        a.send(w);
    }
    assert_eq!(a.wait_snd(), 2);
    a.send_message(b"msg").unwrap();
    a.handle_timeout(t(0));
    let h: Vec<_> = drain(&mut a, 0).iter().flat_map(|p| headers(p)).collect();
    assert_eq!(
        h.iter().map(|h| (h.sn, h.len, h.frg)).collect::<Vec<_>>(),
        vec![(0, 2, 0), (1, 2, 0), (2, 3, 0)]
    );
}

#[test]
fn send_message_limits() {
    let cfg = ArqConfig {
        mtu: 124,
        rcv_wnd: 4,
        snd_wnd: 3,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(7, &cfg).unwrap();
    assert_eq!(a.send_message(&[]), Err(SendError::Empty));
    assert_eq!(
        a.send_message(&[0; 401]),
        Err(SendError::TooLarge),
        "5 fragments > rcv_wnd 4"
    );
    assert_eq!(a.send_message(&[0; 400]), Ok(()));
    // 2 * snd_wnd = 6 slots, 4 used.
    assert_eq!(a.send_message(&[0; 300]), Err(SendError::WouldBlock));
    assert_eq!(a.send_message(&[0; 200]), Ok(()));
    assert_eq!(a.send_capacity(), 0);
    assert_eq!(a.send(b"more"), 0);
    let frg: Vec<u8> = drain(&mut a, 0)
        .iter()
        .flat_map(|p| headers(p))
        .map(|h| h.frg)
        .collect();
    // Only snd_wnd = 3 segments may fly; frg counts down within each message.
    assert_eq!(frg, vec![3, 2, 1]);
}

#[test]
fn write_delay_still_flushes_once_the_send_window_is_full() {
    let cfg = ArqConfig {
        write_delay: true,
        snd_wnd: 4,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(7, &cfg).unwrap();
    for _ in 0..3 {
        a.send(b"x");
    }
    assert!(drain(&mut a, 0).is_empty());
    a.send(b"x");
    assert_eq!(cmd_sn(&drain(&mut a, 0)).len(), 4);
}
