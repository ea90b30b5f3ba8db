//! No heap allocation per segment in steady state.
//!
//! The state machine allocates only when a container grows (ring slots, slot
//! payload buffers, the output queue, the ACK list); cleared buffers are
//! refilled within their capacity. So: after a warm-up transfer, a second
//! lossy transfer through the same pair must leave every capacity unchanged.
//! (A counting global allocator would say the same more directly, but needs
//! `unsafe`, which this crate allows only in `kcpio/src/sys` and `kcpio/src/simd`.)

use super::util::t;
use crate::arq::{ArqConfig, Kcp, Origin, Timing};

/// Move `data` from a to b, dropping every `drop_every`-th data packet.
fn transfer(a: &mut Kcp, b: &mut Kcp, data: &[u8], clock: &mut u32, drop_every: u32) -> usize {
    transfer_with(a, b, data, clock, drop_every, 4096, |k, d| k.send(d))
}

/// As [`transfer`], handing `a` up to `chunk` bytes a tick through `write`
/// (which returns what it took).
pub(super) fn transfer_with(
    a: &mut Kcp,
    b: &mut Kcp,
    data: &[u8],
    clock: &mut u32,
    drop_every: u32,
    chunk: usize,
    mut write: impl FnMut(&mut Kcp, &[u8]) -> usize,
) -> usize {
    let mut pkt = [0u8; 1500];
    let mut rbuf = [0u8; 16 * 1024];
    let (mut sent, mut got, mut count) = (0, 0, 0u32);
    for _ in 0..1_000_000 {
        if got == data.len() {
            break;
        }
        let now = t(*clock);
        if sent < data.len() {
            sent += write(a, &data[sent..(sent + chunk).min(data.len())]);
        }
        while let Some(n) = a.poll_transmit(now, &mut pkt) {
            count += 1;
            if count % drop_every != 0 {
                b.handle_datagram(now, &pkt[..n], Origin::Regular).unwrap();
            }
        }
        loop {
            let n = b.recv(&mut rbuf);
            if n == 0 {
                break;
            }
            assert_eq!(&rbuf[..n], &data[got..got + n]);
            got += n;
        }
        for k in [&mut *a, &mut *b] {
            if k.poll_timeout().is_some_and(|d| now.diff(d) >= 0) {
                k.handle_timeout(now);
            }
        }
        while let Some(n) = b.poll_transmit(now, &mut pkt) {
            a.handle_datagram(now, &pkt[..n], Origin::Regular).unwrap();
        }
        *clock += 1;
    }
    got
}

#[test]
fn a_second_lossy_transfer_grows_nothing() {
    let cfg = ArqConfig {
        snd_wnd: 256,
        rcv_wnd: 256,
        stream: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(1, &cfg).unwrap();
    let mut b = Kcp::new(1, &cfg).unwrap();
    let data: Vec<u8> = (0..2u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut clock = 0;
    assert_eq!(transfer(&mut a, &mut b, &data, &mut clock, 13), data.len());
    let before = (a.heap_fingerprint(), b.heap_fingerprint());
    let retransmits = a.stats().retransmits();
    assert_eq!(transfer(&mut a, &mut b, &data, &mut clock, 13), data.len());
    assert!(
        a.stats().retransmits() > retransmits,
        "the measured run retransmitted"
    );
    assert_eq!((a.heap_fingerprint(), b.heap_fingerprint()), before);
}

/// A burst that fills the send queue (2 × the window: 2,048 slots) leaves
/// it holding those slots only until the load falls: the next second's
/// trim gives them back, so a session keeps what it used lately, not the
/// fullest queue it ever had. A steady load keeps its slots (the test
/// above).
#[test]
fn a_burst_s_send_slots_are_given_back_when_the_load_falls() {
    let cfg = ArqConfig {
        snd_wnd: 1024,
        rcv_wnd: 1024,
        stream: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(1, &cfg).unwrap();
    let mut b = Kcp::new(1, &cfg).unwrap();
    let mut clock = 0;
    // Everything offered at once: the queue fills to its bound.
    let burst = vec![0x5a; 2048 * a.mss()];
    assert_eq!(a.send(&burst), burst.len(), "the queue took the burst");
    assert_eq!(a.footprint().snd_slots, 2048);
    let data: Vec<u8> = (0..64 * 1024u32).map(|i| i as u8).collect();
    let mut rbuf = vec![0u8; burst.len()];
    // Deliver the burst, then a trickle for a few seconds.
    let mut pkt = [0u8; 1500];
    let mut got = 0;
    for _ in 0..200_000 {
        let now = t(clock);
        while let Some(n) = a.poll_transmit(now, &mut pkt) {
            b.handle_datagram(now, &pkt[..n], Origin::Regular).unwrap();
        }
        got += b.recv(&mut rbuf);
        a.handle_timeout(now);
        b.handle_timeout(now);
        while let Some(n) = b.poll_transmit(now, &mut pkt) {
            a.handle_datagram(now, &pkt[..n], Origin::Regular).unwrap();
        }
        clock += 1;
        if got >= burst.len() {
            break;
        }
    }
    assert_eq!(got, burst.len());
    // A light load (64 KiB, well under one window) over the next 3 s.
    assert_eq!(
        transfer(&mut a, &mut b, &data, &mut clock, 1_000_000),
        data.len()
    );
    clock += 3000;
    a.handle_timeout(t(clock));
    clock += 1000;
    a.handle_timeout(t(clock));
    let slots = a.footprint().snd_slots;
    assert!(
        slots <= 128,
        "the burst's 2,048 send slots are still held: {slots}"
    );
}
