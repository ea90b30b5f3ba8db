//! A tunnel client whose path to the server changes mid-transfer (the
//! testkit relay's upstream socket takes a new port, then a new IP, as a
//! NAT rebinding or a new network would) keeps its TCP stream: every byte
//! of an echo comes back in order once. With `--nomigrate` on the server
//! the same change strands the stream, so the flag reaches the library.
//!
//! kcpio on both ends, in-process; loopback only; every wait bounded.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use kcpio_testkit::pattern::{Verifier, fill};
use kcpio_testkit::relay::{Relay, RelayConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use kcpio_tunnel as tunnel;

const TOTAL: u64 = 4 << 20;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

async fn start(cmd: &str) -> SocketAddr {
    let settings = tunnel::parse(words(cmd)).unwrap();
    let bound = tunnel::Bound::bind(settings).await.unwrap();
    let addr = bound.local_addr().unwrap();
    tokio::spawn(bound.run(tunnel::Log::open("", true).unwrap()));
    addr
}

/// A tunnel server (`server_flags` added), the relay in front of it, a
/// tunnel client through the relay; returns the client's entry and the
/// relay.
async fn tunnel_through_relay(server_flags: &str) -> (SocketAddr, Relay) {
    let target = kcpio_testkit::tcp::echo_server().await;
    let common = "--crypt aes-128-gcm --key migration --mode fast3";
    let server = start(&format!(
        "t server -l 127.0.0.1:0 -t {target} {common} {server_flags}"
    ))
    .await;
    let relay = Relay::start(server, RelayConfig::default()).await.unwrap();
    let entry = start(&format!(
        "t client -l 127.0.0.1:0 -r {} {common} --conn 1",
        relay.local_addr()
    ))
    .await;
    (entry, relay)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_stream_survives_its_clients_new_port_and_new_ip() {
    let (entry, relay) = tunnel_through_relay("").await;
    let c = TcpStream::connect(entry).await.unwrap();
    let (mut r, mut w) = c.into_split();
    let writer = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut off = 0u64;
        while off < TOTAL {
            let n = (TOTAL - off).min(buf.len() as u64) as usize;
            fill(&mut buf[..n], off);
            w.write_all(&buf[..n]).await.unwrap();
            off += n as u64;
        }
        w
    });
    let new_ip: IpAddr = "127.0.0.2".parse().unwrap();
    let mut v = Verifier::default();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut last, mut stall, mut step) = (Instant::now(), Duration::ZERO, 0u64);
    while v.offset < TOTAL {
        let n = timeout(Duration::from_secs(20), r.read(&mut buf))
            .await
            .expect("the stream goes on")
            .unwrap();
        assert!(n > 0, "eof at {}", v.offset);
        stall = stall.max(last.elapsed());
        last = Instant::now();
        assert!(v.push(&buf[..n]), "a wrong byte at {:?}", v.mismatch);
        if step < 2 && v.offset >= TOTAL / 3 * (step + 1) {
            step += 1;
            relay.rebind(if step == 1 { None } else { Some(new_ip) });
        }
    }
    eprintln!("figure: tunnel stream across a new port and a new IP: longest read gap {stall:?}");
    assert_eq!(v.offset, TOTAL);
    // The tunnel may have carried the rest before the last change: one
    // more round trip crosses from the new IP.
    let mut w = writer.await.unwrap();
    w.write_all(b"done").await.unwrap();
    let mut tail = [0u8; 4];
    timeout(Duration::from_secs(20), r.read_exact(&mut tail))
        .await
        .expect("an echo after the last change")
        .unwrap();
    assert_eq!(&tail, b"done");
    let src = relay.upstream_sources();
    assert_eq!(src.first().map(SocketAddr::ip), Some(new_ip), "{src:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nomigrate_the_new_port_strands_the_stream() {
    let (entry, relay) = tunnel_through_relay("--nomigrate").await;
    let mut c = TcpStream::connect(entry).await.unwrap();
    let mut b = [0u8; 4];
    c.write_all(b"ping").await.unwrap();
    timeout(Duration::from_secs(10), c.read_exact(&mut b))
        .await
        .expect("the echo before the change")
        .unwrap();
    relay.rebind(None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.write_all(b"pong").await.unwrap();
    assert!(
        timeout(Duration::from_secs(3), c.read_exact(&mut b))
            .await
            .is_err(),
        "the server followed the client despite --nomigrate"
    );
}

#[test]
fn the_flags_and_json_keys_reach_the_config() {
    let s = tunnel::parse(words("t server -l :0 -t 127.0.0.1:1 --crypt aes-128-gcm")).unwrap();
    assert!(s.kcp.migration(), "on by default with aes-128-gcm");
    let s = tunnel::parse(words(
        "t server -l :0 -t 127.0.0.1:1 --crypt aes-128-gcm --nomigrate",
    ))
    .unwrap();
    assert!(!s.kcp.migration());
    let path = std::env::temp_dir().join(format!("kcpio-mig-{}.json", std::process::id()));
    std::fs::write(&path, r#"{"nomigrate": true, "noicmpreset": true}"#).unwrap();
    let s = tunnel::parse(words(&format!(
        "t client -l :0 -r 127.0.0.1:1 --crypt aes-128-gcm -c {}",
        path.display()
    )))
    .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(!s.kcp.migration());
    let dbg = format!("{:?}", s.kcp);
    assert!(dbg.contains("icmp_reset: false"), "{dbg}");
    // Another cipher: never on, and --nomigrate is harmless.
    let s = tunnel::parse(words(
        "t server -l :0 -t 127.0.0.1:1 --crypt aes --nomigrate",
    ))
    .unwrap();
    assert!(!s.kcp.migration());
}
