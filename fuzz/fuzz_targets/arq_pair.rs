//! Two ARQ endpoints over a fuzz-driven link that drops, duplicates and
//! reorders datagrams, on a virtual clock.
//!
//! Checks: each side reads exactly a prefix of what the other wrote, in
//! order, with nothing invented; and once the link turns perfect, everything
//! written is delivered within a bounded number of ticks (nothing is lost).
#![no_main]

use kcpio::arq::{Kcp, Origin, Timestamp};
use kcpio_fuzz::Reader;
use kcpio_fuzz::arq::{config, drain, read_stream};
use libfuzzer_sys::fuzz_target;

/// Byte `i` of the stream each side writes (distinct per side).
fn pattern(side: u8, i: u64) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add((i >> 8) as u8) ^ side
}

struct End {
    kcp: Kcp,
    side: u8,
    written: u64,
    read: u64,
    /// Datagrams in flight towards this end.
    inbox: Vec<Vec<u8>>,
}

impl End {
    fn write(&mut self, n: usize) {
        let data: Vec<u8> = (0..n as u64)
            .map(|k| pattern(self.side, self.written + k))
            .collect();
        let accepted = self.kcp.send(&data);
        assert!(accepted <= n);
        self.written += accepted as u64;
    }

    /// Reads and checks against what the peer wrote.
    fn read(&mut self, peer_side: u8, peer_written: u64, buf: &mut [u8]) {
        let n = read_stream(&mut self.kcp, buf);
        for (k, &b) in buf[..n].iter().enumerate() {
            assert_eq!(
                b,
                pattern(peer_side, self.read + k as u64),
                "corrupt stream"
            );
        }
        self.read += n as u64;
        assert!(self.read <= peer_written, "read more than was written");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let cfg = config(r.u8() | 0x80, r.u8());
    let mtu = cfg.mtu;
    let mk = |side| End {
        kcp: Kcp::new(0x1234_5678, &cfg).unwrap(),
        side,
        written: 0,
        read: 0,
        inbox: Vec::new(),
    };
    let mut ends = [mk(0x00), mk(0x5A)];
    let mut now = 0u32;
    let mut buf = vec![0u8; 8192];
    let mut out = Vec::new();
    for _ in 0..2048 {
        if r.is_empty() {
            break;
        }
        let op = r.u8();
        let s = usize::from(op >> 7);
        let t = Timestamp::from_millis(now);
        match op & 0x7F {
            0..=15 => ends[s].write(usize::from(r.u16()) % 20_000),
            16..=31 => {
                let n = usize::from(r.u8()) * 32 + 1;
                let (ps, pw) = (ends[1 - s].side, ends[1 - s].written);
                ends[s].read(ps, pw, &mut buf[..n]);
            }
            32..=63 => {
                out.clear();
                drain(&mut ends[s].kcp, t, mtu, &mut out);
                ends[1 - s].inbox.append(&mut out);
            }
            64..=95 => {
                // Deliver (or drop, or duplicate) the datagram at some index.
                let inbox = &mut ends[s].inbox;
                if inbox.is_empty() {
                    continue;
                }
                let i = usize::from(r.u8()) % inbox.len();
                let how = r.u8() % 4;
                let d = if how == 3 {
                    inbox[i].clone()
                } else {
                    inbox.remove(i)
                };
                if how != 0 {
                    ends[s]
                        .kcp
                        .handle_datagram(t, &d, Origin::Regular)
                        .expect("the peer's datagrams are well-formed");
                }
            }
            _ => {
                now = now.wrapping_add(u32::from(r.u8()) * 4);
                for e in &mut ends {
                    e.kcp.handle_timeout(Timestamp::from_millis(now));
                }
            }
        }
    }
    // A perfect link from here on: everything written arrives.
    for e in &mut ends {
        e.inbox.clear();
    }
    for _ in 0..20_000 {
        let t = Timestamp::from_millis(now);
        for s in 0..2 {
            out.clear();
            drain(&mut ends[s].kcp, t, mtu, &mut out);
            for d in out.drain(..) {
                ends[1 - s]
                    .kcp
                    .handle_datagram(t, &d, Origin::Regular)
                    .unwrap();
            }
            let (ps, pw) = (ends[1 - s].side, ends[1 - s].written);
            let peer = ps;
            for _ in 0..64 {
                let before = ends[s].read;
                ends[s].read(peer, pw, &mut buf);
                if ends[s].read == before {
                    break;
                }
            }
        }
        if ends[0].read == ends[1].written && ends[1].read == ends[0].written {
            return;
        }
        let next = ends
            .iter()
            .filter_map(|e| e.kcp.poll_timeout())
            .map(|d| d.as_millis())
            .min()
            .unwrap_or(now + 10);
        now = next.max(now + 1);
        for e in &mut ends {
            e.kcp.handle_timeout(Timestamp::from_millis(now));
        }
    }
    panic!(
        "not delivered on a perfect link: {}/{} and {}/{}",
        ends[0].read, ends[1].written, ends[1].read, ends[0].written
    );
});
