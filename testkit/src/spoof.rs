//! Spoofed-source floods for the hostile tests and `examples/attack.rs`:
//! datagrams from many loopback source addresses (127.1.0.0/20), each from a
//! fresh socket, so a listener sees that many distinct peers.

use std::net::SocketAddr;

use kcpio::arq::segment::{Command, Header};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Sends `packet(i)` to `addr`, each from a new source address and port,
/// until `stop` is set or `limit` has passed; counts what left in `sent`.
pub fn flood_from_many(
    addr: SocketAddr,
    stop: &AtomicBool,
    sent: &AtomicU64,
    limit: Duration,
    packet: impl Fn(u32) -> Vec<u8>,
) {
    let mut i = 0u32;
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < limit {
        // A batch of sockets, each sending one datagram, then closed.
        let socks: Vec<_> = (0..64)
            .filter_map(|_| {
                i = i.wrapping_add(1);
                let ip = std::net::Ipv4Addr::new(127, 1, (i >> 8 & 15) as u8, i as u8);
                std::net::UdpSocket::bind((ip, 0)).ok()
            })
            .collect();
        for s in &socks {
            i = i.wrapping_add(1);
            if s.send_to(&packet(i), addr).is_ok() {
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The 24-byte KCP window answer (WINS) of `conv` that every KCP peer
/// sends for a window probe (WASK): a listener's session proves its peer
/// receives this way, and only then reaches `accept`.
pub fn raw_wins(conv: u32) -> [u8; 24] {
    let wins = Header {
        conv,
        cmd: Command::Wins as u8,
        wnd: 128,
        ..Header::default()
    };
    let mut out = [0u8; 24];
    wins.encode(&mut out);
    out
}

/// The 24-byte KCP ACK a raw client sends for a received PUSH (`ts` and
/// `sn` echoed, `una` its next expected sn): with `una` included, since
/// kcp-go frees a segment only when una passes it.
pub fn raw_ack(conv: u32, ts: u32, sn: u32, una: u32) -> [u8; 24] {
    let ack = Header {
        conv,
        cmd: Command::Ack as u8,
        wnd: 128,
        ts,
        sn,
        una,
        ..Header::default()
    };
    let mut out = [0u8; 24];
    ack.encode(&mut out);
    out
}
