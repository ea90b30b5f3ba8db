//! Window probing (WASK/WINS) on both sides.

use super::util::*;
use crate::arq::{ArqConfig, Kcp, Origin, Timing};

fn wins(wnd: u16) -> Vec<u8> {
    seg(WINS, 0, wnd, 0, 0, 0, &[])
}

#[test]
fn a_closed_peer_window_is_probed_at_500ms_then_x1_5_capped_at_120s() {
    let mut a = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    a.handle_datagram(t(0), &wins(0), Origin::Regular).unwrap();
    a.send(&[1; 10]);
    // Nothing may be admitted into a zero window.
    assert!(drain(&mut a, 0).is_empty());
    assert!(
        a.poll_timeout().is_some(),
        "a closed window keeps the timer running"
    );
    let out = run_until(&mut a, 0, 1_000_000);
    let wask: Vec<u32> = out
        .iter()
        .filter(|(_, p)| headers(p).iter().any(|h| h.cmd == WASK))
        .map(|(t, _)| *t)
        .collect();
    assert!(
        out.iter()
            .all(|(_, p)| headers(p).iter().all(|h| h.cmd == WASK)),
        "only probes"
    );
    // Armed at the first flush (t=0): 500, +750, +1125 (2375 falls between
    // 10 ms ticks, so 2380), then x1.5 from the actual tick.
    assert_eq!(&wask[..3], &[500, 1250, 2380]);
    let gaps: Vec<u32> = wask.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
    assert!(gaps.iter().all(|&g| g <= 120_000 + 10), "{gaps:?}");
    assert_eq!(*gaps.last().unwrap(), 120_000, "{gaps:?}");
    // The window opens: data flows at the next tick and probing stops.
    let now = 1_000_001;
    a.handle_datagram(t(now), &wins(8), Origin::Regular)
        .unwrap();
    let out = run_until(&mut a, now, now + 20);
    assert_eq!(push_times(&out, 0).len(), 1);
    assert_eq!(a.probe_wait, 0);
}

#[test]
fn a_recovered_packet_does_not_reopen_or_close_the_window() {
    let mut a = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    a.handle_datagram(t(0), &wins(0), Origin::Recovered)
        .unwrap();
    assert_eq!(a.rmt_wnd, 32);
    a.handle_datagram(t(0), &wins(0), Origin::Regular).unwrap();
    assert_eq!(a.rmt_wnd, 0);
    a.handle_datagram(t(0), &wins(9), Origin::Recovered)
        .unwrap();
    assert_eq!(a.rmt_wnd, 0);
}

#[test]
fn a_full_receiver_answers_wask_and_volunteers_wins_when_it_drains() {
    let cfg = ArqConfig {
        rcv_wnd: 2,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut r = Kcp::new(7, &cfg).unwrap();
    for sn in 0..3 {
        r.handle_datagram(t(0), &push(sn, 0, 0, &[sn as u8; 4]), Origin::Regular)
            .unwrap();
    }
    let out = run_until(&mut r, 0, 0);
    let h: Vec<_> = out.iter().flat_map(|(_, p)| headers(p)).collect();
    // sn 0 and 1 fill the queue, sn 2 waits: ACKs (sn 0, 1 filtered) say wnd 0.
    assert_eq!(
        h.iter()
            .map(|h| (h.cmd, h.sn, h.wnd, h.una))
            .collect::<Vec<_>>(),
        vec![(ACK, 2, 0, 2)]
    );
    r.handle_datagram(t(5), &seg(WASK, 0, 32, 0, 0, 0, &[]), Origin::Regular)
        .unwrap();
    let h: Vec<_> = run_until(&mut r, 5, 10)
        .iter()
        .flat_map(|(_, p)| headers(p))
        .collect();
    assert_eq!(
        h.iter().map(|h| (h.cmd, h.wnd)).collect::<Vec<_>>(),
        vec![(WINS, 0)]
    );
    let mut buf = [0u8; 8];
    // First read: the queue was full, sn 2 moves up: still full, no WINS.
    assert_eq!(r.recv_message(&mut buf), Ok(4));
    assert!(run_until(&mut r, 10, 20).is_empty());
    // Second read: was full, now has room: WINS with wnd 1 at the next tick.
    assert_eq!(r.recv_message(&mut buf), Ok(4));
    let h: Vec<_> = run_until(&mut r, 20, 30)
        .iter()
        .flat_map(|(_, p)| headers(p))
        .collect();
    assert_eq!(
        h.iter().map(|h| (h.cmd, h.wnd, h.una)).collect::<Vec<_>>(),
        vec![(WINS, 1, 3)]
    );
}

/// Receiver with `rcv_wnd` 16 holding 16 unread segments (wnd 0 told).
fn full_receiver(ack_clock: bool) -> Kcp {
    let cfg = ArqConfig {
        rcv_wnd: 16,
        ..ArqConfig::with_timing(Timing::FAST)
    };
    let mut r = Kcp::new(7, &cfg).unwrap();
    r.set_ack_clock(ack_clock);
    for sn in 0..16 {
        r.handle_datagram(t(0), &push(sn, 0, 0, &[sn as u8; 4]), Origin::Regular)
            .unwrap();
    }
    // The tick at 0 flushes the ACK (sn 15, una 16) with wnd 0.
    let out = run_until(&mut r, 0, 0);
    let h: Vec<_> = out.iter().flat_map(|(_, p)| headers(p)).collect();
    assert_eq!(
        h.iter().map(|h| (h.cmd, h.sn, h.wnd)).collect::<Vec<_>>(),
        vec![(ACK, 15, 0)]
    );
    r
}

#[test]
fn ack_clock_tells_the_window_when_reads_open_an_eighth_of_it() {
    let mut r = full_receiver(true);
    let mut buf = [0u8; 4];
    // One segment read: 1 < 16 / 8, nothing yet (the was-full WINS waits
    // for the tick, as in kcp-go).
    assert_eq!(r.recv(&mut buf), 4);
    r.probe = 0; // kcp-go's fast-recover WINS, cleared: what follows is the ACK clock's own
    assert!(drain(&mut r, 1).is_empty());
    // The second read opens 2 = 16 / 8 beyond wnd 0: a WINS at once.
    assert_eq!(r.recv(&mut buf), 4);
    let h: Vec<_> = drain(&mut r, 2).iter().flat_map(|p| headers(p)).collect();
    assert_eq!(
        h.iter().map(|h| (h.cmd, h.wnd, h.una)).collect::<Vec<_>>(),
        vec![(WINS, 2, 16)]
    );
    // Told: the next read alone is not worth a segment.
    assert_eq!(r.recv(&mut buf), 4);
    assert!(drain(&mut r, 3).is_empty());
}

#[test]
fn without_ack_clock_reads_wait_for_the_tick_as_in_kcp_go() {
    let mut r = full_receiver(false);
    let mut buf = [0u8; 4];
    for _ in 0..4 {
        assert_eq!(r.recv(&mut buf), 4);
    }
    assert!(drain(&mut r, 2).is_empty());
    // kcp-go's fast-recover WINS at the next 30 ms tick.
    let out = run_until(&mut r, 2, 30);
    let h: Vec<_> = out.iter().flat_map(|(_, p)| headers(p)).collect();
    assert_eq!(
        h.iter().map(|h| (h.cmd, h.wnd)).collect::<Vec<_>>(),
        vec![(WINS, 4)]
    );
    assert_eq!(out[0].0, 30);
}

#[test]
fn ack_clock_sends_queued_data_when_the_peer_window_opens() {
    for ack_clock in [false, true] {
        let mut a = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST)).unwrap();
        a.set_ack_clock(ack_clock);
        a.handle_datagram(t(0), &wins(1), Origin::Regular).unwrap();
        a.send(&[1; 3000]);
        // One segment fits the peer's window.
        assert_eq!(cmd_sn(&drain(&mut a, 0)), vec![(PUSH, 0)]);
        // The peer reads: a WINS (no una change) opens its window to 8.
        a.handle_datagram(t(5), &seg(WINS, 0, 8, 0, 0, 0, &[]), Origin::Regular)
            .unwrap();
        let sent = cmd_sn(&drain(&mut a, 5));
        if ack_clock {
            assert_eq!(sent, vec![(PUSH, 1), (PUSH, 2)]);
        } else {
            // kcp-go: at the next tick.
            assert!(sent.is_empty());
        }
    }
}

/// `poll_control`, for a caller holding data back (a listener's session
/// over its anti-amplification budget): the ACKs and window probes and
/// answers due now go out alone, as many as fit the buffer, the rest at
/// the next call; the data segments already queued stay queued, in order,
/// for `poll_transmit`.
#[test]
fn poll_control_sends_acks_and_probes_alone_and_leaves_data_queued() {
    let mut a = Kcp::new(7, &ArqConfig::with_timing(Timing::FAST3)).unwrap();
    a.send(&[1; 3_000]);
    let mut buf = vec![0u8; 1_400];
    // The first flush: sn 0 leaves, sn 1 and 2 wait behind it.
    let n = a.poll_transmit(t(0), &mut buf).unwrap();
    assert_eq!(cmd_sn(&[buf[..n].to_vec()]), [(PUSH, 0)]);
    // The peer's data and its window probe; our own probe too.
    a.handle_datagram(t(5), &push(0, 5, 0, b"x"), Origin::Regular)
        .unwrap();
    a.handle_datagram(t(5), &seg(WASK, 0, 32, 5, 0, 1, &[]), Origin::Regular)
        .unwrap();
    a.request_window_probe();
    // Room for two segments: the ACK and the answer (fast3's input flush
    // queued them behind the data), then our probe.
    let n = a.poll_control(t(5), &mut buf[..48]).unwrap();
    let cmds: Vec<u8> = headers(&buf[..n]).iter().map(|h| h.cmd).collect();
    assert_eq!(cmds, [ACK, WINS]);
    let n = a.poll_control(t(5), &mut buf).unwrap();
    let cmds: Vec<u8> = headers(&buf[..n]).iter().map(|h| h.cmd).collect();
    assert_eq!(cmds, [WASK]);
    assert_eq!(a.poll_control(t(6), &mut buf), None);
    let stats = a.stats();
    assert_eq!((stats.acks_out, stats.wask_out, stats.wins_out), (1, 1, 1));
    // The data waited: sn 1 and 2, as the first flush queued them.
    let mut sent = Vec::new();
    while let Some(n) = a.poll_transmit(t(6), &mut buf) {
        sent.push(buf[..n].to_vec());
        if sent.len() > 8 {
            break;
        }
    }
    assert_eq!(cmd_sn(&sent[..2]), [(PUSH, 1), (PUSH, 2)]);
}
