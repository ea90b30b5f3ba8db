//! Property tests: nothing reachable from a datagram panics, and no state
//! grows past what the configured windows allow, whatever the input.

use proptest::prelude::*;

use super::util::t;
use crate::arq::segment::Header;
use crate::arq::{ArqConfig, Kcp, Origin, control_cap};

/// `(cmd, frg, wnd, ts, sn, una, payload, len - payload.len())`.
type RawSeg = (u8, u8, u16, u32, u32, u32, Vec<u8>, i8);

#[derive(Debug, Clone)]
enum Op {
    /// Raw bytes, as an attacker would send them.
    Raw(Vec<u8>, bool),
    /// Segments with our conv and adversarial fields.
    Segs(Vec<RawSeg>, bool),
    Send(usize),
    SendMessage(usize),
    Recv(usize),
    RecvMessage(usize),
    /// Advance the clock (ms) and run the timer if due.
    Tick(u16),
}

fn near(max: u32) -> impl Strategy<Value = u32> {
    prop_oneof![3 => 0..max, 1 => any::<u32>(), 1 => (0..max).prop_map(|x| x.wrapping_neg())]
}

fn op() -> impl Strategy<Value = Op> {
    let seg = (
        prop_oneof![4 => 81u8..=84, 1 => any::<u8>()],
        any::<u8>(),
        prop_oneof![Just(0u16), any::<u16>()],
        near(3000),
        near(64),
        near(64),
        proptest::collection::vec(any::<u8>(), 0..80),
        prop_oneof![8 => Just(0i8), 1 => any::<i8>()],
    );
    prop_oneof![
        2 => (proptest::collection::vec(any::<u8>(), 0..200), any::<bool>()).prop_map(|(b, r)| Op::Raw(b, r)),
        6 => (proptest::collection::vec(seg, 1..6), any::<bool>()).prop_map(|(s, r)| Op::Segs(s, r)),
        2 => (0usize..2000).prop_map(Op::Send),
        1 => (0usize..2000).prop_map(Op::SendMessage),
        2 => (0usize..500).prop_map(Op::Recv),
        1 => (0usize..2000).prop_map(Op::RecvMessage),
        3 => (0u16..400).prop_map(Op::Tick),
    ]
}

fn config() -> impl Strategy<Value = ArqConfig> {
    (
        25usize..300,
        1u16..10,
        1u16..10,
        any::<bool>(),
        0u32..4,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        1u32..6,
    )
        .prop_map(
            |(mtu, snd_wnd, rcv_wnd, nodelay, fast_resend, nc, stream, ack_nodelay, dead_link)| {
                ArqConfig {
                    mtu,
                    snd_wnd,
                    rcv_wnd,
                    nodelay,
                    interval: 10,
                    fast_resend,
                    no_congestion: nc,
                    stream,
                    write_delay: false,
                    ack_nodelay,
                    dead_link,
                    ..ArqConfig::default()
                }
            },
        )
}

fn encode(segs: &[RawSeg]) -> Vec<u8> {
    let mut out = Vec::new();
    for (cmd, frg, wnd, ts, sn, una, data, len_delta) in segs {
        let len = (data.len() as i64 + i64::from(*len_delta)).max(0) as u32;
        let h = Header {
            conv: 7,
            cmd: *cmd,
            frg: *frg,
            wnd: *wnd,
            ts: *ts,
            sn: *sn,
            una: *una,
            len,
        };
        let mut head = [0u8; 24];
        h.encode(&mut head);
        out.extend_from_slice(&head);
        out.extend_from_slice(data);
    }
    out
}

fn check_bounds(k: &Kcp, cfg: &ArqConfig, max_packet: usize) {
    let f = k.footprint();
    let snd_bound = (2 * cfg.snd_wnd as usize).next_power_of_two();
    let rcv_bound = (2 * cfg.rcv_wnd as usize).next_power_of_two();
    assert!(f.snd_slots <= snd_bound, "{f:?}");
    assert!(k.wait_snd() <= 2 * cfg.snd_wnd as usize, "{f:?}");
    assert!(f.rcv_slots <= rcv_bound, "{f:?}");
    assert!(f.rcv_queue <= cfg.rcv_wnd as usize, "{f:?}");
    assert!(f.rcv_buffered <= cfg.rcv_wnd as usize, "{f:?}");
    // After any call: fewer than a packet's worth of ACKs, plus what one
    // input packet can add.
    assert!(f.acklist < cfg.mtu / 24 + max_packet / 24 + 1, "{f:?}");
    let cap = control_cap(cfg.mtu, u32::from(cfg.rcv_wnd));
    assert!(f.out_items <= 2 * cap + snd_bound + 1, "{f:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_input_never_panics_and_state_stays_bounded(
        cfg in config(),
        ops in proptest::collection::vec(op(), 1..80),
        drain_output in any::<bool>(),
    ) {
        let mut k = Kcp::new(7, &cfg).unwrap();
        let mut now = 0u32;
        let mut buf = vec![0u8; 4096];
        let data = vec![0xAB; 4096];
        for op in ops {
            let mut max_packet = 0;
            match op {
                Op::Raw(bytes, rec) => {
                    max_packet = bytes.len();
                    let _ = k.handle_datagram(t(now), &bytes, if rec { Origin::Recovered } else { Origin::Regular });
                }
                Op::Segs(segs, rec) => {
                    let p = encode(&segs);
                    max_packet = p.len();
                    let _ = k.handle_datagram(t(now), &p, if rec { Origin::Recovered } else { Origin::Regular });
                }
                Op::Send(n) => { k.send(&data[..n]); }
                Op::SendMessage(n) => { let _ = k.send_message(&data[..n]); }
                Op::Recv(n) => { k.recv(&mut buf[..n]); }
                Op::RecvMessage(n) => { let _ = k.recv_message(&mut buf[..n]); }
                Op::Tick(dt) => {
                    now = now.wrapping_add(u32::from(dt));
                    if k.poll_timeout().is_some_and(|d| t(now).diff(d) >= 0) {
                        k.handle_timeout(t(now));
                    }
                }
            }
            // A caller that keeps up drains; one that does not must still be bounded.
            if drain_output {
                while let Some(n) = k.poll_transmit(t(now), &mut buf) {
                    prop_assert!(n <= cfg.mtu);
                }
            }
            check_bounds(&k, &cfg, max_packet);
            let _ = (k.peek_size(), k.readable(), k.send_capacity(), k.srtt(), k.rto(), k.is_dead());
        }
    }
}
