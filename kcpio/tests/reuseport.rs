//! `reuse_port`: several sockets bound to one port with `SO_REUSEPORT`, one
//! driver each, one accept backlog; checked on loopback with real sessions.
#![cfg(unix)]

use std::time::Duration;

use kcpio::{Config, KcpListener, KcpStream, Preset};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const SOCKETS: usize = 4;
const CLIENTS: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_port_spreads_sessions_over_sockets_and_accepts_all() {
    let config = Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(128, 128)
        .linger(Duration::from_millis(500))
        .reuse_port(SOCKETS)
        .build()
        .unwrap();
    let listener = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    assert_ne!(addr.port(), 0);
    assert_eq!(listener.stats().sockets, SOCKETS);
    assert_eq!(listener.stats_per_socket().len(), SOCKETS);

    // The group owns the port: a plain socket cannot take it.
    assert!(std::net::UdpSocket::bind(addr).is_err());

    let listener = std::sync::Arc::new(listener);
    let server = {
        let listener = listener.clone();
        tokio::spawn(async move {
            for _ in 0..CLIENTS {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        })
    };

    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let config = config.clone();
        clients.push(tokio::spawn(async move {
            let mut s = KcpStream::connect(addr, &config).await.unwrap();
            let msg: Vec<u8> = (0..20_000u32).map(|b| (b as usize * 7 + i) as u8).collect();
            s.write_all(&msg).await.unwrap();
            let mut back = vec![0u8; msg.len()];
            s.read_exact(&mut back).await.unwrap();
            assert_eq!(back, msg, "client {i}");
        }));
    }
    timeout(Duration::from_secs(30), async {
        for c in clients {
            c.await.unwrap();
        }
        server.await.unwrap();
    })
    .await
    .expect("echoes within 30 s");

    let per = listener.stats_per_socket();
    let opened: Vec<u64> = per.iter().map(|s| s.sessions_opened).collect();
    assert_eq!(opened.iter().sum::<u64>(), CLIENTS as u64, "{opened:?}");
    assert_eq!(listener.stats().sessions_opened, CLIENTS as u64);
    // 32 clients on random source ports over 4 sockets: the kernel's hash
    // puts them on more than one (all on one would mean no spreading).
    let used = opened.iter().filter(|&&n| n > 0).count();
    assert!(used >= 2, "sessions per socket: {opened:?}");
}

#[test]
fn reuse_port_zero_is_refused() {
    assert!(Config::builder().reuse_port(0).build().is_err());
}
