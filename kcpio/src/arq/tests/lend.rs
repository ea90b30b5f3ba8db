//! Lent payloads (`Kcp::poll_transmit_lend`): what a lending caller sends,
//! its head and then the lent payload, is byte for byte the packet
//! `poll_transmit` writes, under loss and retransmission, and a payload
//! still held keeps its bytes while the ring reuses its slot.

use super::util::t;
use crate::arq::{ArqConfig, Kcp, Lent, Origin, Timing};

#[test]
fn a_lent_packet_is_the_packet_poll_transmit_writes() {
    let cfg = ArqConfig {
        snd_wnd: 64,
        rcv_wnd: 64,
        stream: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    // `a` lends, `copy` is its twin fed the same inputs and writing whole
    // packets; `b` receives `a`'s packets.
    let (mut a, mut copy, mut b) = (
        Kcp::new(7, &cfg).unwrap(),
        Kcp::new(7, &cfg).unwrap(),
        Kcp::new(7, &cfg).unwrap(),
    );
    let data: Vec<u8> = (0..600_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let (mut pkt, mut whole) = ([0u8; 1500], [0u8; 1500]);
    let mut rbuf = vec![0u8; 64 * 1024];
    // Lent payloads held a while (a socket that blocked), with their bytes
    // as sent: they must not change while the ring reuses their slots.
    let mut held: Vec<(Lent, Vec<u8>)> = Vec::new();
    let (mut sent, mut got, mut count, mut lent) = (0, 0, 0u32, 0u32);
    for clock in 0..200_000u32 {
        if got == data.len() {
            break;
        }
        let now = t(clock);
        if sent < data.len() {
            // Odd write sizes: full segments and short tails mixed.
            let chunk = &data[sent..(sent + 5_001).min(data.len())];
            let n = a.send(chunk);
            assert_eq!(copy.send(chunk), n);
            sent += n;
        }
        while let Some((n, tail)) = a.poll_transmit_lend(now, &mut pkt, true) {
            let m = copy
                .poll_transmit(now, &mut whole)
                .expect("the twin sends too");
            let mut out = pkt[..n].to_vec();
            if let Some(tail) = &tail {
                out.extend_from_slice(tail);
                lent += 1;
            }
            assert_eq!(out, &whole[..m], "packet {count}");
            if let Some(tail) = tail {
                held.push((tail, out[n..].to_vec()));
            }
            count += 1;
            if count % 11 != 0 {
                b.handle_datagram(now, &out, Origin::Regular).unwrap();
            }
        }
        assert_eq!(copy.poll_transmit(now, &mut whole), None);
        if clock % 3 == 0 {
            for (tail, bytes) in held.drain(..) {
                assert_eq!(tail.as_slice(), bytes.as_slice(), "a held payload changed");
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
        for k in [&mut a, &mut copy, &mut b] {
            if k.poll_timeout().is_some_and(|d| now.diff(d) >= 0) {
                k.handle_timeout(now);
            }
        }
        while let Some(n) = b.poll_transmit(now, &mut pkt) {
            a.handle_datagram(now, &pkt[..n], Origin::Regular).unwrap();
            copy.handle_datagram(now, &pkt[..n], Origin::Regular)
                .unwrap();
        }
    }
    assert_eq!(got, data.len());
    assert!(lent > 300, "full segments were lent ({lent})");
    assert!(a.stats().retransmits() > 0, "the run retransmitted");
}
