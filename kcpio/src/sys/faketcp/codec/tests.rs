//! The codec against packets captured from a real `kcptun --tcp` exchange.

use super::*;

/// `(label, packet)` from the capture file.
fn capture() -> Vec<(&'static str, Vec<u8>)> {
    include_str!("../kcptun_tcp_capture.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (label, hex) = l.split_once('\t').expect("label<TAB>hex");
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            (label, bytes)
        })
        .collect()
}

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 231, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 231, 0, 1);

#[test]
fn captured_segments_parse_with_tcpraw_fields() {
    let packets = capture();
    assert_eq!(packets.len(), 9);
    for (label, p) in &packets {
        let (src, dst, seg) = parse_ipv4(p).unwrap_or_else(|e| panic!("{label}: {e:?}"));
        assert!(src == CLIENT || src == SERVER, "{label}");
        assert!(dst == CLIENT || dst == SERVER, "{label}");
        assert!(seg.src_port == 29900 || seg.dst_port == 29900, "{label}");
        if !seg.payload.is_empty() {
            // tcpraw's data segments: PSH|ACK, no options, window >= 32768.
            assert_eq!(seg.flags, flags::PSH | flags::ACK, "{label}");
            assert_eq!(seg.payload_offset, 40, "{label}");
            assert!(seg.window >= 0x8000, "{label}");
            assert_eq!(seg.timestamp, None, "{label}");
        }
    }
    // The kernel's SYN carries MSS, SACK-OK, TS, wscale: TS is found.
    let (_, _, syn) = parse_ipv4(&packets[0].1).expect("syn");
    assert_eq!(syn.flags, flags::SYN);
    assert_eq!(syn.timestamp, Some((4_262_440_070, 0)));
    let (_, _, full) = parse_ipv4(&packets[7].1).expect("full size");
    assert_eq!(full.payload.len(), 1350);
}

#[test]
fn server_flow_learns_numbers_as_tcpraw_and_answers_like_it() {
    let packets = capture();
    let seg = |i: usize| parse_ipv4(&packets[i].1).expect("vector").2;
    let mut flow = Flow::new(1400, 7);
    // SYN: the client's ISN; SYN-ACK is ours (sent by the kernel); ACK: ours.
    assert_eq!(flow.receive(&seg(0)), Err(Drop::NoPayload));
    assert!(!flow.ready());
    assert_eq!(flow.receive(&seg(2)), Err(Drop::NoPayload));
    assert!(flow.ready());
    // Data before the kernel's accept is an orphan's, as in tcpraw.
    let mut early = flow.clone();
    assert_eq!(early.receive(&seg(3)), Err(Drop::Orphan));
    flow.set_established();
    assert_eq!(flow.receive(&seg(3)), Ok(()));
    // Our reply has the numbers kcptun's server put on its reply.
    let reply = seg(4);
    let h = flow.next_header(29900, seg(3).src_port, reply.payload.len(), 0);
    assert_eq!((h.seq, h.ack), (reply.seq, reply.ack));
    // And so on through the exchange.
    assert_eq!(flow.receive(&seg(5)), Ok(()));
    let reply = seg(6);
    let h = flow.next_header(29900, reply.dst_port, reply.payload.len(), 0);
    assert_eq!((h.seq, h.ack), (reply.seq, reply.ack));
}

#[test]
fn client_flow_learns_from_syn_ack() {
    let packets = capture();
    let seg = |i: usize| parse_ipv4(&packets[i].1).expect("vector").2;
    let mut flow = Flow::new(1400, 1);
    assert_eq!(flow.receive(&seg(1)), Err(Drop::NoPayload));
    assert!(flow.ready());
    flow.set_established();
    let first = seg(3);
    let h = flow.next_header(first.src_port, 29900, first.payload.len(), 0);
    assert_eq!((h.seq, h.ack), (first.seq, first.ack));
    // The server's reply is delivered and its ack becomes our seq.
    assert_eq!(flow.receive(&seg(4)), Ok(()));
    let next = seg(5);
    let h = flow.next_header(next.src_port, 29900, next.payload.len(), 0);
    assert_eq!((h.seq, h.ack), (next.seq, next.ack));
}

#[test]
fn built_segment_has_a_valid_checksum_and_reparses() {
    let packets = capture();
    let (_, _, data) = parse_ipv4(&packets[3].1).expect("vector");
    let src = IpAddr::V4(CLIENT);
    let dst = IpAddr::V4(SERVER);
    let h = Header {
        src_port: data.src_port,
        dst_port: data.dst_port,
        seq: data.seq,
        ack: data.ack,
        window: data.window,
        tsval: 0x0102_0304,
        tsecr: 0xa0b0_c0d0,
    };
    let mut hdr = [0u8; DATA_HEADER_LEN];
    write_header(&mut hdr, &h, src, dst, data.payload);
    let mut seg = hdr.to_vec();
    seg.extend_from_slice(data.payload);
    let back = parse_tcp(&seg, src, dst).expect("own segment");
    assert_eq!(back.payload, data.payload);
    assert_eq!(back.flags, flags::PSH | flags::ACK);
    assert_eq!(back.timestamp, Some((0x0102_0304, 0xa0b0_c0d0)));
    assert_eq!((back.seq, back.ack, back.window), (h.seq, h.ack, h.window));
    // The same checksum as computed over the captured packet's own header
    // with our options: checksum(header, payload) is split-invariant.
    let whole = checksum(src, dst, &seg, &[]);
    assert_eq!(whole, 0);
    // IPv6 pseudo-header as well.
    let s6: IpAddr = "fd00::1".parse().expect("v6");
    let d6: IpAddr = "fd00::2".parse().expect("v6");
    write_header(&mut hdr, &h, s6, d6, data.payload);
    let mut seg6 = hdr.to_vec();
    seg6.extend_from_slice(data.payload);
    assert!(parse_tcp(&seg6, s6, d6).is_ok());
    assert_eq!(parse_tcp(&seg6, s6, s6), Err(Malformed::BadChecksum));
}

#[test]
fn corrupted_payload_fails_the_checksum() {
    let packets = capture();
    let mut p = packets[7].1.clone();
    let last = p.len() - 1;
    p[last] ^= 0x40;
    assert_eq!(parse_ipv4(&p).map(|_| ()), Err(Malformed::BadChecksum));
}

#[test]
fn every_prefix_and_byte_flip_is_an_error_or_a_segment_never_a_panic() {
    for (_, p) in capture() {
        for cut in 0..p.len() {
            assert!(parse_ipv4(&p[..cut]).is_err());
        }
        for i in 0..p.len().min(60) {
            for bit in 0..8 {
                let mut q = p.clone();
                q[i] ^= 1 << bit;
                if let Ok((_, _, seg)) = parse_ipv4(&q) {
                    assert!(seg.payload_offset + seg.payload.len() <= q.len());
                }
            }
        }
    }
    assert_eq!(parse_ipv4(&[]).map(|_| ()), Err(Malformed::Truncated));
}

#[test]
fn fragments_and_other_protocols_are_refused() {
    let mut p = capture()[3].1.clone();
    p[6] |= 0x20; // more fragments
    assert_eq!(parse_ipv4(&p).map(|_| ()), Err(Malformed::Fragment));
    let mut p = capture()[3].1.clone();
    p[9] = 17;
    assert_eq!(parse_ipv4(&p).map(|_| ()), Err(Malformed::BadHeader));
}

/// A PSH|ACK segment from the peer carrying `payload`.
fn peer_segment(seq: u32, ack: u32, fl: u8, payload: &[u8]) -> Segment<'_> {
    Segment {
        src_port: 40000,
        dst_port: 29900,
        seq,
        ack,
        flags: fl,
        window: 0x9000,
        timestamp: None,
        payload,
        payload_offset: 32,
    }
}

/// A flow with seq 1000 (ours) and ack 5000 (the peer's next).
fn established() -> Flow {
    let mut flow = Flow::new(100, 3);
    let syn = peer_segment(4999, 1000, flags::SYN | flags::ACK, &[]);
    assert_eq!(flow.receive(&syn), Err(Drop::NoPayload));
    flow.set_established();
    flow
}

#[test]
fn forged_rst_fin_syn_and_foreign_acks_change_nothing() {
    let mut flow = established();
    let data = [7u8; 10];
    for (fl, why) in [
        (flags::RST | flags::ACK, Drop::Reset),
        (flags::RST, Drop::Reset),
        (flags::FIN | flags::ACK, Drop::Fin),
        (flags::SYN, Drop::LateSyn),
        (flags::SYN | flags::ACK, Drop::LateSyn),
    ] {
        assert_eq!(
            flow.receive(&peer_segment(123, 99_999, fl | flags::PSH, &data)),
            Err(why)
        );
    }
    // An ack beyond what we sent, or absurdly far back.
    let far = 1000u32.wrapping_sub(MAX_REWIND + 1);
    for ack in [1001, 2_000_000_000, far] {
        let seg = peer_segment(5000, ack, flags::PSH | flags::ACK, &data);
        assert_eq!(flow.receive(&seg), Err(Drop::ForeignAck));
    }
    let h = flow.next_header(29900, 40000, 0, 0);
    assert_eq!((h.seq, h.ack), (1000, 5000));
}

#[test]
fn merged_or_oversized_segments_are_dropped_not_cut() {
    let mut flow = established();
    let big = [1u8; 101];
    let seg = peer_segment(5000, 1000, flags::PSH | flags::ACK, &big);
    assert_eq!(flow.receive(&seg), Err(Drop::Oversized));
    // Its sequence space is not acknowledged: the sender rewinds to it.
    assert_eq!(flow.next_header(1, 2, 0, 0).ack, 5000);
    let fits = [1u8; 100];
    let seg = peer_segment(5000, 1000, flags::PSH | flags::ACK, &fits);
    assert_eq!(flow.receive(&seg), Ok(()));
    assert_eq!(flow.next_header(1, 2, 0, 0).ack, 5100);
}

#[test]
fn payload_without_push_is_not_delivered() {
    let mut flow = established();
    let seg = peer_segment(5000, 1000, flags::ACK, &[1, 2, 3]);
    assert_eq!(flow.receive(&seg), Err(Drop::NoPush));
}

#[test]
fn after_a_loss_ack_holds_and_sender_rewinds_to_it() {
    let mut rx = established();
    // Segment 5000..5010 lost; 5010..5020 arrives: delivered, ack stays.
    let d = [0u8; 10];
    assert_eq!(
        rx.receive(&peer_segment(5010, 1000, flags::PSH | flags::ACK, &d)),
        Ok(())
    );
    assert_eq!(rx.next_header(1, 2, 10, 0).ack, 5000);
    // The sender hears ack 5000 after sending up to 5020: it rewinds.
    let mut tx = Flow::new(100, 9);
    assert_eq!(
        tx.receive(&peer_segment(999, 5000, flags::SYN | flags::ACK, &[])),
        Err(Drop::NoPayload)
    );
    tx.set_established();
    assert_eq!(tx.next_header(2, 1, 10, 0).seq, 5000);
    assert_eq!(tx.next_header(2, 1, 10, 0).seq, 5010);
    assert_eq!(
        tx.receive(&peer_segment(1000, 5000, flags::PSH | flags::ACK, &d)),
        Ok(())
    );
    assert_eq!(tx.next_header(2, 1, 10, 0).seq, 5000);
    // The resent-at-5000 segment now advances the receiver past the hole.
    assert_eq!(
        rx.receive(&peer_segment(5000, 1010, flags::PSH | flags::ACK, &d)),
        Ok(())
    );
    assert_eq!(rx.next_header(1, 2, 0, 0).ack, 5010);
}

#[test]
fn an_ack_ahead_of_a_rewound_seq_is_taken() {
    // We sent 1000..1300, heard ack 1000 (the peer had not read them yet),
    // rewound and sent 1000..1100; then the peer acknowledges 1300.
    let mut flow = established();
    for _ in 0..3 {
        flow.next_header(1, 2, 100, 0);
    }
    let d = [0u8; 4];
    let seg = |ack| peer_segment(5000, ack, flags::PSH | flags::ACK, &d);
    assert_eq!(flow.receive(&seg(1000)), Ok(()));
    assert_eq!(flow.next_header(1, 2, 100, 0).seq, 1000);
    assert_eq!(flow.receive(&seg(1300)), Ok(()));
    assert_eq!(flow.next_header(1, 2, 100, 0).seq, 1300);
    // Beyond the highest byte ever sent (1400 now) is still foreign.
    assert_eq!(flow.receive(&seg(1401)), Err(Drop::ForeignAck));
    // A send given back lowers the tip again.
    flow.unsend(100);
    assert_eq!(flow.receive(&seg(1301)), Err(Drop::ForeignAck));
}

#[test]
fn timestamps_echo_the_peer_and_follow_our_clock() {
    let mut flow = established();
    let mut seg = peer_segment(5000, 1000, flags::PSH | flags::ACK, &[1]);
    seg.timestamp = Some((777, 1));
    assert_eq!(flow.receive(&seg), Ok(()));
    let a = flow.next_header(1, 2, 1, 100);
    let b = flow.next_header(1, 2, 1, 350);
    assert_eq!(a.tsecr, 777);
    assert_eq!(b.tsval.wrapping_sub(a.tsval), 250);
    assert!(a.window >= 0x8000 && b.window >= 0x8000);
}

#[test]
fn timestamps_continue_the_kernels_clock() {
    let mut flow = established();
    // The kernel's socket would send TSval 4_000_000_000 at our 1_000 ms.
    flow.continue_clock(4_000_000_000, 1_000);
    assert_eq!(flow.next_header(1, 2, 1, 1_000).tsval, 4_000_000_000);
    // Same millisecond clock from there on, wrapping as TCP's does.
    assert_eq!(flow.next_header(1, 2, 1, 1_500).tsval, 4_000_000_500);
    assert_eq!(
        flow.next_header(1, 2, 1, 300_000_000).tsval,
        4_000_000_000u32.wrapping_add(299_999_000)
    );
}
