//! Fragments, una and the receive window.

use super::util::*;
use crate::arq::{ArqConfig, Kcp, Origin, RecvError, Timing};

fn frag(sn: u32, frg: u8, data: &[u8]) -> Vec<u8> {
    seg(PUSH, frg, 32, 0, sn, 0, data)
}

#[test]
fn fragments_arriving_out_of_order_form_one_message() {
    let mut r = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    let parts: [&[u8]; 4] = [b"abc", b"defg", b"hi", b"j"];
    for (i, sn) in [2u32, 0, 3].into_iter().enumerate() {
        r.handle_datagram(
            t(i as u32),
            &frag(sn, 3 - sn as u8, parts[sn as usize]),
            Origin::Regular,
        )
        .unwrap();
        assert_eq!(r.peek_size(), None, "incomplete after sn {sn}");
        assert!(!r.readable());
    }
    r.handle_datagram(t(3), &frag(1, 2, parts[1]), Origin::Regular)
        .unwrap();
    assert_eq!(r.peek_size(), Some(10));
    let mut small = [0u8; 9];
    assert_eq!(
        r.recv_message(&mut small),
        Err(RecvError::BufferTooSmall { needed: 10 })
    );
    let mut buf = [0u8; 32];
    assert_eq!(r.recv_message(&mut buf), Ok(10));
    assert_eq!(&buf[..10], b"abcdefghij");
    assert_eq!(r.recv_message(&mut buf), Err(RecvError::NotReady));
}

#[test]
fn a_message_can_be_read_as_a_stream_in_small_pieces() {
    let mut r = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    r.handle_datagram(
        t(0),
        &[
            frag(0, 1, b"hello "),
            frag(1, 0, b"world"),
            frag(2, 0, b"!"),
        ]
        .concat(),
        Origin::Regular,
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4];
    assert_eq!(r.peek_size(), Some(11));
    loop {
        let n = r.recv(&mut buf);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if got.len() == 4 {
            assert_eq!(r.peek_size(), Some(7), "the rest of the started message");
        }
    }
    assert_eq!(got, b"hello world!");
}

#[test]
fn an_incomplete_message_is_not_handed_out_by_the_stream_reader() {
    let mut r = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    r.handle_datagram(t(0), &frag(0, 1, b"half"), Origin::Regular)
        .unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(r.recv(&mut buf), 0);
    r.handle_datagram(t(1), &frag(1, 0, b"+half"), Origin::Regular)
        .unwrap();
    assert_eq!(r.recv(&mut buf), 9);
}

#[test]
fn pushes_beyond_the_window_are_neither_stored_nor_acknowledged() {
    let cfg = ArqConfig {
        rcv_wnd: 4,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut r = Kcp::new(7, &cfg).unwrap();
    r.handle_datagram(t(0), &push(4, 0, 0, b"x"), Origin::Regular)
        .unwrap();
    assert_eq!(r.stats().repeat_segments, 1);
    r.handle_datagram(t(0), &push(3, 0, 0, b"x"), Origin::Regular)
        .unwrap();
    r.handle_datagram(t(0), &push(3, 0, 0, b"x"), Origin::Regular)
        .unwrap();
    assert_eq!(
        r.stats().repeat_segments,
        2,
        "the duplicate counts, the first copy does not"
    );
    let h: Vec<_> = run_until(&mut r, 0, 0)
        .iter()
        .flat_map(|(_, p)| headers(p))
        .collect();
    // Two ACKs for sn 3 (kcp-go acknowledges duplicates too); none for sn 4.
    assert_eq!(
        h.iter().map(|h| (h.cmd, h.sn)).collect::<Vec<_>>(),
        vec![(ACK, 3), (ACK, 3)]
    );
}

#[test]
fn una_releases_segments_and_acked_ones_wait_for_it() {
    let cfg = ArqConfig {
        no_congestion: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(7, &cfg).unwrap();
    for _ in 0..5 {
        a.send(b"seg");
    }
    drain(&mut a, 0);
    assert_eq!(a.wait_snd(), 5);
    // ACK sn 3 with una 3: sn 0..2 leave, sn 3 stays flagged until una passes it.
    a.handle_datagram(t(1), &ack(3, 0, 3, 32), Origin::Regular)
        .unwrap();
    assert_eq!(a.wait_snd(), 2);
    drain(&mut a, 1);
    // A bogus una far beyond snd_nxt releases what exists and nothing more.
    a.handle_datagram(
        t(2),
        &seg(WINS, 0, 32, 0, 0, 1_000_000, &[]),
        Origin::Regular,
    )
    .unwrap();
    assert!(a.is_flushed());
    // New data continues the sequence.
    a.send(b"next");
    let out = drain(&mut a, 3);
    assert_eq!(cmd_sn(&out), vec![(PUSH, 5)]);
}

/// A zero-length PUSH (C KCP's `ikcp_send(kcp, buf, 0)`, or one forged by an
/// attacker) carries no bytes: the stream reader skips it and is never told
/// "readable" for it, so an async reader cannot see end of stream.
#[test]
fn empty_segments_are_skipped_by_the_stream_reader() {
    let mut r = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    let mut buf = [0u8; 32];
    r.handle_datagram(t(0), &frag(0, 0, b"ab"), Origin::Regular)
        .unwrap();
    r.handle_datagram(t(1), &frag(1, 0, b""), Origin::Regular)
        .unwrap();
    r.handle_datagram(t(2), &frag(2, 0, b"cd"), Origin::Regular)
        .unwrap();
    assert!(r.readable());
    assert_eq!(r.recv(&mut buf), 4);
    assert_eq!(&buf[..4], b"abcd");

    // An empty PUSH alone: nothing to read as a stream.
    r.handle_datagram(t(3), &frag(3, 0, b""), Origin::Regular)
        .unwrap();
    assert!(!r.readable());
    // Two empties (one a forged "fragment") then bytes: readable again.
    r.handle_datagram(t(4), &frag(4, 1, b""), Origin::Regular)
        .unwrap();
    r.handle_datagram(t(4), &frag(5, 0, b""), Origin::Regular)
        .unwrap();
    assert!(!r.readable());
    r.handle_datagram(t(5), &frag(6, 0, b"e"), Origin::Regular)
        .unwrap();
    assert!(r.readable());
    assert_eq!(r.recv(&mut buf), 1);
    assert_eq!(&buf[..1], b"e");
    assert!(!r.readable());
    assert_eq!(r.recv(&mut buf), 0);
}

#[test]
fn a_partly_read_message_ending_in_an_empty_fragment_is_not_readable() {
    let mut r = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    r.handle_datagram(t(0), &frag(0, 1, b"xy"), Origin::Regular)
        .unwrap();
    r.handle_datagram(t(0), &frag(1, 0, b""), Origin::Regular)
        .unwrap();
    let mut one = [0u8; 1];
    assert!(r.readable());
    assert_eq!(r.recv(&mut one), 1);
    assert!(r.readable());
    assert_eq!(r.recv(&mut one), 1);
    assert_eq!(&one, b"y");
    assert!(!r.readable());
}

#[test]
fn the_message_reader_still_gets_empty_messages() {
    let mut r = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    r.handle_datagram(t(0), &frag(0, 0, b""), Origin::Regular)
        .unwrap();
    r.handle_datagram(t(0), &frag(1, 0, b"z"), Origin::Regular)
        .unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(r.recv_message(&mut buf), Ok(0));
    assert_eq!(r.recv_message(&mut buf), Ok(1));
    assert_eq!(r.recv_message(&mut buf), Err(RecvError::NotReady));
}

/// A window's worth of empty segments cannot hold the receive window shut:
/// with the queue full of them, the oldest give way to what follows.
#[test]
fn a_window_full_of_empty_segments_does_not_stall_the_stream() {
    let cfg = ArqConfig {
        rcv_wnd: 16,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut r = Kcp::new(7, &cfg).unwrap();
    for sn in 0..40 {
        r.handle_datagram(t(sn), &frag(sn, 0, b""), Origin::Regular)
            .unwrap();
    }
    assert!(!r.readable());
    r.handle_datagram(t(40), &frag(40, 0, b"late"), Origin::Regular)
        .unwrap();
    assert!(r.readable());
    let mut buf = [0u8; 8];
    assert_eq!(r.recv(&mut buf), 4);
    assert_eq!(&buf[..4], b"late");
}
