//! A write whose copy is made outside the session's lock (`begin_lend`,
//! `Lent::fill`, `end_lend`, as `KcpStream`'s long writes make it) queues
//! exactly the segments `send` queues, holds the tail while it is out, and
//! allocates nothing in steady state.

use super::alloc::transfer_with;
use super::util::*;
use crate::arq::{ArqConfig, Kcp, SendError, Timing};

const BUFS: usize = 64;

/// One write through a lend: the bytes accepted (0 when nothing was taken).
fn lent_write(k: &mut Kcp, data: &[u8]) -> usize {
    let mut bufs: [Vec<u8>; BUFS] = [const { Vec::new() }; BUFS];
    let Some(lent) = k.begin_lend(data, &mut bufs) else {
        return 0;
    };
    lent.fill(data, &mut bufs);
    let n = k.end_lend(&lent, &mut bufs, true);
    // What the slots held goes back to the caller: the empty buffers the
    // lend left there, nothing to free.
    assert!(bufs.iter().all(|b| b.capacity() == 0));
    n
}

/// Writes `data` as `write_all` would until the buffer is full; returns
/// the bytes accepted.
fn write_until_full(k: &mut Kcp, data: &[u8], lend: bool) -> usize {
    let mut off = 0;
    while off < data.len() {
        let rest = data.get(off..).unwrap_or_default();
        let n = if lend {
            lent_write(k, rest)
        } else {
            k.send(rest)
        };
        if n == 0 {
            break;
        }
        off += n;
    }
    off
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + seed * 13) % 251) as u8)
        .collect()
}

#[test]
fn a_lent_write_queues_the_segments_send_queues() {
    for stream in [true, false] {
        let cfg = ArqConfig {
            snd_wnd: 128,
            rcv_wnd: 128,
            stream,
            ..ArqConfig::with_timing(Timing::FAST3)
        };
        let mut by_send = Kcp::new(7, &cfg).unwrap();
        let mut by_lend = Kcp::new(7, &cfg).unwrap();
        let mut rx = Kcp::new(7, &cfg).unwrap();
        let mut want = Vec::new();
        // Small writes merge into the tail, long ones take more than one
        // lend (64 segments each), the last fills the buffer.
        let sizes = [100, 5_000, 3, 70_000, 1_376, 200_000, 10, 400_000];
        for (step, &len) in sizes.iter().enumerate() {
            let data = pattern(len, step);
            let a = write_until_full(&mut by_send, &data, false);
            let b = write_until_full(&mut by_lend, &data, true);
            assert_eq!(a, b, "stream {stream}, write {step} of {len} bytes");
            want.extend_from_slice(&data[..b]);
            assert_eq!(by_send.send_capacity(), by_lend.send_capacity());
            let now = step as u32;
            if step % 2 == 1 {
                let p = drain(&mut by_send, now);
                let q = drain(&mut by_lend, now);
                assert_eq!(p, q, "stream {stream}, packets after write {step}");
                deliver(&mut rx, now, &q);
            }
        }
        assert_eq!(
            by_send.send_capacity(),
            0,
            "the last write filled the buffer"
        );
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = rx.recv(&mut buf);
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert!(!got.is_empty());
        assert_eq!(got, want[..got.len()], "stream {stream}: bytes in order");
    }
}

#[test]
fn a_lend_holds_the_tail_until_it_ends() {
    let cfg = ArqConfig {
        stream: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let mut k = Kcp::new(7, &cfg).unwrap();
    assert_eq!(k.send(b"head"), 4);
    let data = pattern(10_000, 1);
    let mut bufs: [Vec<u8>; BUFS] = [const { Vec::new() }; BUFS];
    let lent = k.begin_lend(&data, &mut bufs).unwrap();
    assert_eq!(lent.merged, k.mss() - 4);
    assert_eq!(lent.lent, (10_000 - lent.merged).div_ceil(k.mss()));
    // Nothing else is queued or merged while the buffers are out.
    assert_eq!(k.send(b"x"), 0);
    assert_eq!(k.send_message(b"x"), Err(SendError::WouldBlock));
    let mut other: [Vec<u8>; BUFS] = [const { Vec::new() }; BUFS];
    assert!(k.begin_lend(b"y", &mut other).is_none());
    // Given back unused (the session failed meanwhile): only the merged
    // head was taken, the slots are free again.
    lent.fill(&data, &mut bufs);
    assert_eq!(k.end_lend(&lent, &mut bufs, false), k.mss() - 4);
    let p = drain(&mut k, 0);
    assert_eq!(cmd_sn(&p), vec![(PUSH, 0)]);
    assert_eq!(headers(&p[0])[0].len as usize, k.mss());
    assert_eq!(k.send(b"z"), 1);
    assert_eq!(write_until_full(&mut k, &data, true), data.len());
    // "z" and the write share segments as `send` would cut them: the
    // first is "z" and the write's head.
    let q = drain(&mut k, 1);
    let sns: Vec<u32> = cmd_sn(&q).iter().map(|&(_, sn)| sn).collect();
    let want: Vec<u32> = (1..=(1 + data.len()).div_ceil(k.mss()) as u32).collect();
    assert_eq!(sns, want);
}

#[test]
fn lent_writes_grow_nothing_once_warm() {
    let cfg = ArqConfig {
        snd_wnd: 256,
        rcv_wnd: 256,
        stream: true,
        ..ArqConfig::with_timing(Timing::FAST3)
    };
    let (mut a, mut b) = pair(&cfg);
    let data = pattern(4 << 20, 3);
    let mut clock = 0;
    // No drops (`u32::MAX`), 32 KiB handed over a tick.
    let run = |a: &mut Kcp, b: &mut Kcp, clock: &mut u32| {
        transfer_with(a, b, &data, clock, u32::MAX, 32 * 1024, lent_write)
    };
    assert_eq!(run(&mut a, &mut b, &mut clock), data.len());
    let before = (a.heap_fingerprint(), b.heap_fingerprint());
    assert_eq!(run(&mut a, &mut b, &mut clock), data.len());
    assert_eq!((a.heap_fingerprint(), b.heap_fingerprint()), before);
}
