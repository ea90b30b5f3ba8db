//! The model controller always makes progress: once the link turns
//! perfect, everything written arrives, whatever state an impaired phase
//! left the controller in.

use super::util::*;
use crate::arq::{ArqConfig, Congestion, Kcp, Origin, Timing};

/// The `arq_pair` fuzz target's transcript for its input
/// `EP8ARBAAA0AnRMH2/z8RosgtYv4=` (base64), step by step: BBR with FAST3
/// timing, windows of 32 growing to 512, a 576-byte MTU, tail probe, ACK
/// repetition, a 120 ms minimum RTO. One end writes 20,551 bytes; its
/// first flight of 32 packets leaves at 0 ms, the peer receives two of
/// them (one twice), and then the link is perfect and takes no time.
///
/// The peer's first two ACKs named two segments of one flight sent at
/// once: on a path this short the segments before them are then losses
/// (a reordering window of 0 ms), more than a quarter of it. Startup once took that for an overflowed queue before it had
/// any rate sample, and the phase it moved to paced at the estimate, 0:
/// no token ever came, so neither new data nor the (paced) retransmissions
/// went out, and a resend's delivery gives no rate sample. 9,384 bytes
/// arrived in 20,000 steps.
#[test]
fn a_first_flight_mostly_lost_on_a_zero_delay_link_is_still_delivered() {
    let cfg = ArqConfig {
        stream: true,
        snd_wnd: 32,
        rcv_wnd: 32,
        mtu: 576,
        congestion: Some(Congestion::Bbr),
        ack_repeat: true,
        tail_probe: true,
        max_window: Some(512),
        min_rto: Some(120),
        backoff_percent: Some(150),
        max_rto: Some(2_000),
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut a = Kcp::new(0x1234_5678, &cfg).unwrap();
    let mut b = Kcp::new(0x1234_5678, &cfg).unwrap();
    let total = 4_164 + 16_387;
    assert_eq!(a.send(&vec![7u8; 4_164]), 4_164);
    assert_eq!(a.send(&vec![7u8; 16_387]), 16_387);
    // The fuzzed phase, all at 0 ms: what `a` sends waits in `inbox`.
    let mut inbox = drain(&mut a, 0);
    assert_eq!(inbox.len(), 32);
    let dup = inbox[0xf6 % inbox.len()].clone();
    b.handle_datagram(t(0), &dup, Origin::Regular).unwrap();
    inbox.extend(drain(&mut a, 0));
    let one = inbox.remove(0x2d % inbox.len());
    b.handle_datagram(t(0), &one, Origin::Regular).unwrap();
    a.handle_timeout(t(0));
    b.handle_timeout(t(0));
    // The perfect link: everything sent arrives at once; at least 1 ms
    // passes per step.
    let mut buf = vec![0u8; 8192];
    let (mut now, mut read) = (0u32, 0usize);
    for _ in 0..20_000 {
        let out = drain(&mut a, now);
        deliver(&mut b, now, &out);
        let out = drain(&mut b, now);
        deliver(&mut a, now, &out);
        for _ in 0..64 {
            let n = b.recv(&mut buf);
            if n == 0 {
                break;
            }
            read += n;
        }
        if read == total {
            break;
        }
        let next = [a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .map(|d| d.as_millis())
            .min()
            .unwrap_or(now + 10);
        now = next.max(now + 1);
        a.handle_timeout(t(now));
        b.handle_timeout(t(now));
    }
    assert_eq!(read, total, "at {now} ms: {:?}", a.congestion_state());
    // Not merely eventually: 38 segments on a link that takes no time
    // arrive within a few resend timeouts.
    assert!(now < 2_000, "{now} ms {:?}", a.congestion_state());
}
