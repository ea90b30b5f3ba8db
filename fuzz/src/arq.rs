//! Helpers for the ARQ targets: configurations and per-endpoint checks.

use kcpio::arq::segment::Segments;
use kcpio::arq::{ArqConfig, Congestion, Kcp, Timing};

/// A configuration picked by two input bytes. The first chooses the ARQ
/// timing, stream mode, windows and MTU; the second the kcpio-only sender
/// options a hostile peer's ACKs and timestamps reach: the congestion
/// controller (the timing's, KCP's classic window or the model, which
/// turns echoed `ts` values into RTT and delivery-rate samples), ACK
/// repetition, the tail-loss probe, self-sizing windows and the RTO knobs.
#[must_use]
pub fn config(b: u8, c: u8) -> ArqConfig {
    let timing = [
        Timing::KCP_GO,
        Timing::NORMAL,
        Timing::FAST,
        Timing::FAST2,
        Timing::FAST3,
    ][usize::from(b % 5)];
    let wnd = [8u16, 32, 128][usize::from((b / 5) % 3)];
    let congestion = match c & 3 {
        0 => None,
        1 => Some(Congestion::None),
        2 => Some(Congestion::Kcp),
        _ => Some(Congestion::Bbr),
    };
    let rto_knobs = c & 32 != 0;
    ArqConfig {
        stream: b & 0x80 != 0,
        snd_wnd: wnd,
        rcv_wnd: wnd,
        mtu: if b & 0x40 != 0 { 1400 } else { 576 },
        congestion,
        ack_repeat: c & 4 != 0,
        tail_probe: c & 8 != 0,
        max_window: (c & 16 != 0).then_some(512),
        min_rto: rto_knobs.then_some(u32::from(c >> 6) * 40),
        backoff_percent: rto_knobs.then_some(u32::from(c >> 6) * 50),
        max_rto: rto_knobs.then_some(2_000),
        ..ArqConfig::with_timing(timing)
    }
}

/// The largest send and receive windows `cfg` lets the endpoint reach:
/// the configured ones, or `max_window` when windows size themselves.
#[must_use]
pub fn max_windows(cfg: &ArqConfig) -> (usize, usize) {
    let cap = |w: u16| usize::from(cfg.max_window.map_or(w, |m| m.max(w)));
    (cap(cfg.snd_wnd), cap(cfg.rcv_wnd))
}

/// Reads as a stream and checks that the ARQ never reports a readable queue
/// that yields nothing (a 0-byte read is end of stream to tokio readers).
pub fn read_stream(k: &mut Kcp, buf: &mut [u8]) -> usize {
    let readable = k.readable();
    let n = k.recv(buf);
    assert!(n <= buf.len());
    if readable && !buf.is_empty() {
        assert!(n > 0, "readable() but recv() returned 0");
    }
    n
}

/// Drains `poll_transmit`, checking every datagram fits the MTU and parses
/// as segments of `k`'s conversation; returns them.
pub fn drain(k: &mut Kcp, now: kcpio::arq::Timestamp, mtu: usize, out: &mut Vec<Vec<u8>>) {
    let mut buf = vec![0u8; mtu + 64];
    // Bounded: a flush emits at most the windows' worth of datagrams.
    for _ in 0..10_000 {
        let Some(n) = k.poll_transmit(now, &mut buf) else {
            return;
        };
        assert!(n <= mtu, "datagram of {n} bytes exceeds the MTU {mtu}");
        for seg in Segments::new(&buf[..n]) {
            let seg = seg.expect("the ARQ emits well-formed segments");
            assert_eq!(seg.conv(), k.conv());
        }
        out.push(buf[..n].to_vec());
    }
    panic!("poll_transmit did not run dry");
}
