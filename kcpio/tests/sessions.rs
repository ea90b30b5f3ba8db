//! KcpStream and KcpListener on real loopback sockets.
//!
//! Every test is bounded by `tokio::time::timeout`; data is checked byte for
//! byte; random sizes come from seeded generators.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use kcpio::{Config, KcpListener, KcpStream, Key, Method, Preset};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::time::timeout;

/// A fast configuration for tests: fast3, big windows, short lingers.
fn fast() -> kcpio::ConfigBuilder {
    Config::builder()
        .preset(Preset::Fast3)
        .window(256, 256)
        .stream(true)
        .linger(Duration::from_secs(2))
}

/// Spawns an echo server; returns its address and the listener (keep it).
async fn echo_server(config: &Config) -> (SocketAddr, std::sync::Arc<KcpListener>) {
    let (listener, addr) = bind_loopback(config).await;
    let listener = std::sync::Arc::new(listener);
    let l = listener.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, listener)
}

/// Writes `data` in random-length pieces while reading the echo back, and
/// checks it byte for byte.
async fn echo_roundtrip(stream: KcpStream, data: Vec<u8>, seed: u64, max_piece: usize) {
    let (mut r, mut w) = stream.into_split();
    let expect = data.clone();
    let writer = tokio::spawn(async move {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut off = 0;
        while off < data.len() {
            let n = rng.random_range(1..=max_piece).min(data.len() - off);
            w.write_all(&data[off..off + n]).await.unwrap();
            off += n;
        }
        w
    });
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xFFFF);
    let mut got = Vec::with_capacity(expect.len());
    let mut buf = vec![0u8; max_piece];
    while got.len() < expect.len() {
        let want = rng.random_range(1..=max_piece);
        let n = r.read(&mut buf[..want]).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got.len(), expect.len());
    assert!(got == expect, "echoed bytes differ");
    writer.await.unwrap();
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Connects to `addr` and echoes `data` through it (see `echo_roundtrip`),
/// all within `secs` seconds.
async fn connect_and_echo(
    secs: u64,
    addr: SocketAddr,
    config: &Config,
    data: Vec<u8>,
    seed: u64,
    max_piece: usize,
) {
    timeout(Duration::from_secs(secs), async {
        let stream = KcpStream::connect(addr, config).await.unwrap();
        echo_roundtrip(stream, data, seed, max_piece).await;
    })
    .await
    .unwrap();
}

/// Binds a listener on an IPv4 loopback port; returns it and its address.
async fn bind_loopback(config: &Config) -> (KcpListener, SocketAddr) {
    let listener = KcpListener::bind("127.0.0.1:0", config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// Accepts one session, failing the test after `secs` seconds.
async fn accept_within(listener: &KcpListener, secs: u64) -> (KcpStream, SocketAddr) {
    timeout(Duration::from_secs(secs), listener.accept())
        .await
        .unwrap()
        .unwrap()
}

/// Sleeps `step_ms` at a time while `busy` holds (callers bound it with a timeout).
async fn wait_while(step_ms: u64, mut busy: impl FnMut() -> bool) {
    while busy() {
        tokio::time::sleep(Duration::from_millis(step_ms)).await;
    }
}

#[tokio::test]
async fn echo_random_lengths_up_to_1mib() {
    let config = fast().build().unwrap();
    let (addr, _l) = echo_server(&config).await;
    connect_and_echo(60, addr, &config, random_bytes(4 << 20, 1), 7, 1 << 20).await;
}

#[tokio::test]
async fn echo_small_pieces_message_mode_config() {
    // stream(false): every write is its own segment; the byte stream still works.
    let config = fast().stream(false).build().unwrap();
    let (addr, _l) = echo_server(&config).await;
    connect_and_echo(30, addr, &config, random_bytes(200_000, 2), 8, 3000).await;
}

#[tokio::test]
async fn echo_with_aes128_and_fec() {
    let config = fast()
        .crypto(Method::Aes128, Key::passphrase("it's a secret"))
        .fec(10, 3)
        .build()
        .unwrap();
    let (addr, l) = echo_server(&config).await;
    connect_and_echo(60, addr, &config, random_bytes(2 << 20, 3), 9, 100_000).await;
    let stats = l.stats();
    assert_eq!(stats.bad_crypto, 0);
    assert!(stats.datagrams_in > 0);
}

#[tokio::test]
async fn echo_with_every_cipher_and_portable_path() {
    for (i, m) in [
        Method::Aes128Gcm,
        Method::Salsa20,
        Method::None,
        Method::Xor,
    ]
    .into_iter()
    .enumerate()
    {
        let config = fast()
            .crypto(m, Key::passphrase("k"))
            .fec(4, 2)
            .batching(i % 2 == 0)
            .build()
            .unwrap();
        let (addr, _l) = echo_server(&config).await;
        connect_and_echo(
            30,
            addr,
            &config,
            random_bytes(300_000, 4 + i as u64),
            10,
            20_000,
        )
        .await;
    }
}

#[tokio::test]
async fn reader_with_two_byte_buffer() {
    let config = fast().build().unwrap();
    let (addr, _l) = echo_server(&config).await;
    timeout(Duration::from_secs(30), async {
        let mut stream = KcpStream::connect(addr, &config).await.unwrap();
        let data = random_bytes(50_000, 5);
        stream.write_all(&data).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2];
        while got.len() < data.len() {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0 && n <= 2);
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got == data);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_sessions() {
    const SESSIONS: usize = 1024;
    const MESSAGES: usize = 64;
    let config = fast()
        .window(64, 64)
        .accept_backlog(SESSIONS)
        .max_sessions(2 * SESSIONS)
        .build()
        .unwrap();
    let (addr, l) = echo_server(&config).await;
    timeout(Duration::from_secs(120), async {
        let mut tasks = Vec::new();
        for s in 0..SESSIONS {
            let config = config.clone();
            tasks.push(tokio::spawn(async move {
                let mut stream = KcpStream::connect(addr, &config).await.unwrap();
                let mut msg = [0u8; 64];
                let mut back = [0u8; 64];
                for m in 0..MESSAGES {
                    msg.fill((s + m) as u8);
                    msg[..8].copy_from_slice(&(s as u64).to_le_bytes());
                    stream.write_all(&msg).await.unwrap();
                    stream.read_exact(&mut back).await.unwrap();
                    assert_eq!(msg, back);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .unwrap();
    let stats = l.stats();
    assert_eq!(stats.sessions_opened, SESSIONS as u64);
    assert_eq!(stats.refused_backlog + stats.refused_cap, 0);
}

#[tokio::test]
async fn split_halves_read_and_write_concurrently() {
    let config = fast().build().unwrap();
    let (addr, _l) = echo_server(&config).await;
    timeout(Duration::from_secs(30), async {
        let stream = KcpStream::connect(addr, &config).await.unwrap();
        let (mut r, mut w) = stream.into_split();
        let data = random_bytes(1 << 20, 6);
        let expect = data.clone();
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; expect.len()];
            r.read_exact(&mut got).await.unwrap();
            assert!(got == expect);
        });
        let writer = tokio::spawn(async move {
            for chunk in data.chunks(10_000) {
                w.write_all(chunk).await.unwrap();
            }
            w
        });
        reader.await.unwrap();
        writer.await.unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn copy_bidirectional_between_two_streams() {
    let config = fast().build().unwrap();
    let (echo_addr, _l) = echo_server(&config).await;
    // A proxy: accepts on one listener, connects to the echo server, and
    // joins the two streams with copy_bidirectional.
    let (proxy, proxy_addr) = bind_loopback(&config).await;
    let pc = config.clone();
    let proxy_task = tokio::spawn(async move {
        let (mut inbound, _) = proxy.accept().await.unwrap();
        let mut outbound = KcpStream::connect(echo_addr, &pc).await.unwrap();
        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
    });
    connect_and_echo(
        30,
        proxy_addr,
        &config,
        random_bytes(500_000, 7),
        11,
        30_000,
    )
    .await;
    proxy_task.abort();
}

#[tokio::test]
async fn shutdown_delivers_everything_and_reads_still_work() {
    let config = fast().build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    let data = random_bytes(1 << 20, 8);
    let expect = data.clone();
    timeout(Duration::from_secs(30), async move {
        let mut client = KcpStream::connect(addr, &config).await.unwrap();
        client.write_all(&data).await.unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = vec![0u8; expect.len()];
            s.read_exact(&mut got).await.unwrap();
            assert!(got == expect);
            s.write_all(b"done").await.unwrap();
            s.shutdown().await.unwrap();
            (s, listener)
        });
        // Shutdown returns once the peer acknowledged everything.
        client.shutdown().await.unwrap();
        assert_eq!(client.stats().wait_snd, 0);
        // Writing after shutdown fails; reading still works.
        let e = client.write_all(b"x").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        let mut done = [0u8; 4];
        client.read_exact(&mut done).await.unwrap();
        assert_eq!(&done, b"done");
        drop(server.await.unwrap());
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn dropped_stream_still_delivers_its_data() {
    let config = fast().build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    let data = random_bytes(300_000, 9);
    timeout(Duration::from_secs(30), async {
        let mut client = KcpStream::connect(addr, &config).await.unwrap();
        client.write_all(&data).await.unwrap();
        drop(client); // lingers in the background until acknowledged
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = vec![0u8; data.len()];
        s.read_exact(&mut got).await.unwrap();
        assert!(got == data);
    })
    .await
    .unwrap();
}

/// A UDP socket that receives and never answers: a dead peer.
async fn black_hole() -> (SocketAddr, UdpSocket) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    (sock.local_addr().unwrap(), sock)
}

#[tokio::test]
async fn dead_peer_fails_pending_read_and_later_writes() {
    // The data path against a dead peer: without the connect probe, which
    // would fail first (kcpio/tests/connect.rs).
    let config = fast().dead_link(5).connect_probe(false).build().unwrap();
    let (addr, _hole) = black_hole().await;
    let mut stream = KcpStream::connect(addr, &config).await.unwrap();
    stream.write_all(b"hello?").await.unwrap();
    let mut buf = [0u8; 16];
    let e = timeout(Duration::from_secs(20), stream.read(&mut buf))
        .await
        .expect("dead link must surface within the timeout")
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    let e = stream.write_all(b"more").await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
}

#[tokio::test]
async fn full_window_write_to_dead_peer_does_not_block_forever() {
    let config = fast()
        .window(8, 8)
        .dead_link(5)
        .connect_probe(false)
        .build()
        .unwrap();
    let (addr, _hole) = black_hole().await;
    let mut stream = KcpStream::connect(addr, &config).await.unwrap();
    let data = vec![7u8; 1 << 20];
    let e = timeout(Duration::from_secs(20), stream.write_all(&data))
        .await
        .expect("a write to a dead peer must fail, not hang")
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
}

#[tokio::test]
async fn peer_task_killed_is_detected() {
    let config = fast()
        .dead_link(5)
        .linger(Duration::from_millis(100))
        .build()
        .unwrap();
    let server_config = config.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    // The "peer process": a listener and its session in their own runtime,
    // shut down abruptly.
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = KcpListener::bind("127.0.0.1:0", &server_config)
                .await
                .unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).await.unwrap();
            s.write_all(&b).await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        });
        drop(rt); // kills the driver mid-session
    });
    let addr = rx.await.unwrap();
    let mut stream = KcpStream::connect(addr, &config).await.unwrap();
    stream.write_all(b"hello").await.unwrap();
    let mut b = [0u8; 5];
    timeout(Duration::from_secs(10), stream.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    server.join().unwrap();
    let r = timeout(Duration::from_secs(20), async {
        loop {
            stream.write_all(b"anyone?").await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        #[allow(unreachable_code)]
        Ok::<(), io::Error>(())
    })
    .await
    .expect("a gone peer must be detected within the timeout");
    let kind = r.unwrap_err().kind();
    assert!(
        matches!(
            kind,
            io::ErrorKind::TimedOut | io::ErrorKind::ConnectionReset
        ),
        "{kind:?}"
    );
}

#[tokio::test]
async fn idle_timeout_fails_a_quiet_session() {
    let config = fast()
        .idle_timeout(Duration::from_millis(300))
        .connect_probe(false)
        .build()
        .unwrap();
    let (addr, _hole) = black_hole().await;
    let mut stream = KcpStream::connect(addr, &config).await.unwrap();
    let mut buf = [0u8; 4];
    let e = timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("idle timeout must fire")
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
}

#[tokio::test]
async fn message_mode_roundtrip() {
    let config = fast().stream(false).window(512, 512).build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    timeout(Duration::from_secs(30), async {
        let client = KcpStream::connect(addr, &config).await.unwrap();
        let sizes = [1usize, 2, 100, 1375, 1376, 1377, 5000, 64_000, 200_000];
        for (i, &n) in sizes.iter().enumerate() {
            client
                .send_message(&random_bytes(n, i as u64))
                .await
                .unwrap();
        }
        let (server, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 256 * 1400];
        for (i, &n) in sizes.iter().enumerate() {
            let got = server.recv_message(&mut buf).await.unwrap();
            assert_eq!(got, n);
            assert!(buf[..got] == random_bytes(n, i as u64)[..]);
        }
        // Too small a buffer is an error and keeps the message.
        client.send_message(&[9u8; 100]).await.unwrap();
        let mut small = [0u8; 10];
        let e = server.recv_message(&mut small).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(server.recv_message(&mut buf).await.unwrap(), 100);
        // Empty messages are refused.
        let e = client.send_message(&[]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    })
    .await
    .unwrap();
    let stream_mode = fast().build().unwrap();
    let (_l2, addr2) = bind_loopback(&stream_mode).await;
    let c = KcpStream::connect(addr2, &stream_mode).await.unwrap();
    assert_eq!(
        c.send_message(b"x").await.unwrap_err().kind(),
        io::ErrorKind::Unsupported
    );
}

/// Sends `count` random datagrams of random sizes from a few sockets.
async fn flood(addr: SocketAddr, count: usize, seed: u64, min_len: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut socks = Vec::new();
    for _ in 0..8 {
        socks.push(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    }
    let mut buf = vec![0u8; 1500];
    for i in 0..count {
        let n = rng.random_range(min_len..1500);
        rng.fill_bytes(&mut buf[..n]);
        let _ = socks[i % socks.len()].send_to(&buf[..n], addr).await;
        if i % 256 == 0 {
            tokio::task::yield_now().await;
        }
    }
}

#[tokio::test]
async fn encrypted_listener_survives_a_flood_and_still_serves() {
    let config = fast()
        .crypto(Method::Aes128, Key::passphrase("flood"))
        .build()
        .unwrap();
    let (addr, l) = echo_server(&config).await;
    timeout(Duration::from_secs(30), async {
        flood(addr, 20_000, 12, 0).await;
        let stream = KcpStream::connect(addr, &config).await.unwrap();
        echo_roundtrip(stream, random_bytes(200_000, 13), 14, 10_000).await;
    })
    .await
    .unwrap();
    let stats = l.stats();
    // Garbage never creates a session: only the real client did.
    assert_eq!(stats.sessions_opened, 1, "{stats:?}");
    // The kernel drops part of the flood when the socket buffer fills; every
    // datagram that reached the driver and was not the client's failed to open.
    assert!(stats.bad_crypto > 1_000, "{stats:?}");
    assert_eq!(stats.bad_kcp + stats.unknown_session, 0, "{stats:?}");
}

#[tokio::test]
async fn plain_listener_flood_is_bounded_by_backlog_and_cap() {
    let config = fast().accept_backlog(8).max_sessions(16).build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    timeout(Duration::from_secs(30), flood(addr, 20_000, 15, 24))
        .await
        .unwrap();
    // Crafted valid openers from many sources that never answer: sessions
    // up to the cap, none of them in the backlog or handed to `accept`.
    let mut socks = Vec::new();
    for i in 0..32u32 {
        let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        s.send_to(&push_segment(1000 + i, 0, b"hi"), addr)
            .await
            .unwrap();
        socks.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = listener.stats();
    assert_eq!(stats.backlog, 0, "{stats:?}");
    assert!(stats.sessions_live <= 16, "{stats:?}");
    assert!(stats.refused_cap > 0, "{stats:?}");
    assert!(
        timeout(Duration::from_millis(300), listener.accept())
            .await
            .is_err(),
        "accept returned a session whose peer never answered"
    );
    // It still serves a peer that answers: admitted at the cap (its
    // retransmitted opener evicts an unproven session), accepted once it
    // proves; nobody accepts the next ones, so proven sessions fill the
    // backlog and a newcomer is then refused there.
    let real = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    timeout(
        Duration::from_secs(10),
        open_and_prove(&real, addr, 2000, b"hi"),
    )
    .await
    .unwrap();
    let (mut s, peer) = accept_within(&listener, 5).await;
    assert_eq!(peer, real.local_addr().unwrap());
    let mut b = [0u8; 2];
    timeout(Duration::from_secs(5), s.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("session from {peer}: {e}"));
    for conv in 2001..2009 {
        let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        timeout(
            Duration::from_secs(10),
            open_and_prove(&s, addr, conv, b"hi"),
        )
        .await
        .unwrap();
        socks.push(s);
    }
    wait_while(10, || listener.stats().backlog < 8).await;
    let late = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let before = listener.stats().refused_backlog;
    for _ in 0..2 {
        send_push(&late, addr, 2100, 0, b"hi").await;
    }
    wait_while(10, || listener.stats().refused_backlog == before).await;
    let stats = listener.stats();
    assert_eq!(stats.backlog, 8, "{stats:?}");
    assert!(stats.sessions_live <= 16, "{stats:?}");
}

/// Admission refusals count peers, once per refusal episode (until the
/// listener admits a session again), and their datagrams separately.
#[tokio::test]
async fn refusals_count_peers_once_per_episode() {
    // One socket: which two peers fill the backlog must be the first two
    // to send (with shards, sockets race to admit).
    let config = fast().accept_backlog(2).reuse_port(1).build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    let mut socks = Vec::new();
    for _ in 0..6 {
        socks.push(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    }
    let conv = |i: usize| 7000 + i as u32;
    let received = |n: u64| {
        let l = &listener;
        timeout(
            Duration::from_secs(10),
            wait_while(2, move || l.stats().datagrams_in < n),
        )
    };
    // Two peers open and prove they receive (an opener and the answer to
    // the session's probe each): they fill the backlog. The four others
    // send their opener five times each.
    for (i, s) in socks.iter().enumerate().take(2) {
        open_and_prove(s, addr, conv(i), b"hi").await;
    }
    wait_while(2, || listener.stats().backlog < 2).await;
    for _ in 0..5 {
        for (i, s) in socks.iter().enumerate().skip(2) {
            send_push(s, addr, conv(i), 0, b"hi").await;
        }
    }
    received(24).await.unwrap();
    let st = listener.stats();
    assert_eq!(st.sessions_opened, 2, "{st:?}");
    assert_eq!(st.refused_backlog, 4, "peers, not datagrams: {st:?}");
    assert_eq!(st.refused_backlog_datagrams, 20, "{st:?}");
    assert_eq!(st.refused_cap + st.refused_cap_datagrams, 0, "{st:?}");
    // One accepted: the next peer gets in, which ends the episode; the
    // three still refused count again.
    let _first = accept_within(&listener, 5).await;
    open_and_prove(&socks[2], addr, conv(2), b"hi").await;
    wait_while(2, || listener.stats().backlog < 2).await;
    received(26).await.unwrap();
    for (i, s) in socks.iter().enumerate().skip(3) {
        send_push(s, addr, conv(i), 0, b"hi").await;
        send_push(s, addr, conv(i), 0, b"hi").await;
    }
    received(32).await.unwrap();
    let st = listener.stats();
    assert_eq!(st.sessions_opened, 3, "{st:?}");
    assert_eq!(st.refused_backlog, 7, "{st:?}");
    assert_eq!(st.refused_backlog_datagrams, 26, "{st:?}");
}

/// A raw KCP PUSH segment (null crypto, no FEC).
fn push_segment(conv: u32, sn: u32, data: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&conv.to_le_bytes());
    p.push(81); // IKCP_CMD_PUSH
    p.push(0); // frg
    p.extend_from_slice(&32u16.to_le_bytes()); // wnd
    p.extend_from_slice(&0u32.to_le_bytes()); // ts
    p.extend_from_slice(&sn.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes()); // una
    p.extend_from_slice(&(data.len() as u32).to_le_bytes());
    p.extend_from_slice(data);
    p
}

/// Sends one `push_segment` from `raw` to `addr`.
async fn send_push(raw: &UdpSocket, addr: SocketAddr, conv: u32, sn: u32, data: &[u8]) {
    raw.send_to(&push_segment(conv, sn, data), addr)
        .await
        .unwrap();
}

/// Opens conversation `conv` from `raw` with a PUSH at sn 0 of `data` and
/// answers the session's window probe (WASK) as every KCP peer does, so
/// the session proves its peer receives and reaches `accept`. The opener
/// is sent again every 300 ms without an answer (at most 5 times: a peer
/// refused at the session cap retransmits).
async fn open_and_prove(raw: &UdpSocket, addr: SocketAddr, conv: u32, data: &[u8]) {
    use kcpio::arq::segment::{Command, Segments};
    let mut buf = [0u8; 2048];
    for _ in 0..5 {
        send_push(raw, addr, conv, 0, data).await;
        let until = tokio::time::Instant::now() + Duration::from_millis(300);
        while let Ok(Ok(n)) = tokio::time::timeout_at(until, raw.recv(&mut buf)).await {
            let probed = Segments::new(&buf[..n])
                .flatten()
                .any(|s| s.conv() == conv && s.command() == Some(Command::Wask));
            if probed {
                let wins = kcpio_testkit::spoof::raw_wins(conv);
                raw.send_to(&wins, addr).await.unwrap();
                return;
            }
        }
    }
    panic!("conv {conv}: no window probe came back");
}

#[tokio::test]
async fn late_packets_of_a_closed_session_never_create_a_new_one() {
    let config = fast().linger(Duration::from_millis(100)).build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    let raw = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    timeout(Duration::from_secs(10), async {
        open_and_prove(&raw, addr, 7, b"abc").await;
        let (mut s, _) = listener.accept().await.unwrap();
        let mut b = [0u8; 3];
        s.read_exact(&mut b).await.unwrap();
        drop(s);
        // Wait for the session to be freed.
        wait_while(20, || listener.stats().sessions_live > 0).await;
        // A retransmission of the old conversation arrives late.
        send_push(&raw, addr, 7, 0, b"abc").await;
        send_push(&raw, addr, 7, 1, b"def").await;
        assert!(
            timeout(Duration::from_millis(300), listener.accept())
                .await
                .is_err(),
            "a late packet resurrected a closed session"
        );
        // Refused as a replay of the opener, or as no opener at all.
        let st = listener.stats();
        assert!(st.tombstoned + st.replayed + st.not_opener >= 2, "{st:?}");
        // A new conversation from the same address is a new session.
        open_and_prove(&raw, addr, 8, b"new").await;
        let (s2, _) = listener.accept().await.unwrap();
        assert_eq!(s2.conv(), 8);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn new_conversation_at_sn_zero_takes_over_the_address() {
    let config = fast().build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    let raw = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    timeout(Duration::from_secs(10), async {
        open_and_prove(&raw, addr, 1, b"one").await;
        let (mut old, _) = listener.accept().await.unwrap();
        let mut b = [0u8; 3];
        old.read_exact(&mut b).await.unwrap();
        // Another conv, not at sn 0: dropped.
        send_push(&raw, addr, 2, 5, b"two").await;
        // Another conv at sn 0: the client restarted.
        open_and_prove(&raw, addr, 3, b"three").await;
        let (new, _) = listener.accept().await.unwrap();
        assert_eq!(new.conv(), 3);
        let e = old.read(&mut b).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset);
        assert!(listener.stats().conv_mismatch >= 1);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn stats_and_addresses() {
    let config = fast().build().unwrap();
    let (addr, _l) = echo_server(&config).await;
    let mut s = KcpStream::connect(addr, &config).await.unwrap();
    assert_eq!(s.peer_addr().unwrap(), addr);
    assert!(s.local_addr().unwrap().port() != 0);
    s.write_all(b"ping").await.unwrap();
    let mut b = [0u8; 4];
    timeout(Duration::from_secs(5), s.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    let st = s.stats();
    assert_eq!(st.conv, s.conv());
    assert!(st.datagrams_out > 0 && st.datagrams_in > 0);
    assert!(st.rto > Duration::ZERO);
}

#[tokio::test]
async fn fixed_conv_is_used() {
    let config = fast().conv(Some(0xDEAD_BEEF)).build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    let mut c = KcpStream::connect(addr, &config).await.unwrap();
    assert_eq!(c.conv(), 0xDEAD_BEEF);
    c.write_all(b"x").await.unwrap();
    let (s, _) = accept_within(&listener, 5).await;
    assert_eq!(s.conv(), 0xDEAD_BEEF);
}

#[tokio::test]
async fn dropped_streams_free_sessions_and_sockets() {
    let config = fast()
        .idle_timeout(Duration::from_millis(500))
        .linger(Duration::from_millis(200))
        .build()
        .unwrap();
    let (addr, l) = echo_server(&config).await;
    let local = timeout(Duration::from_secs(10), async {
        let mut s = KcpStream::connect(addr, &config).await.unwrap();
        s.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await.unwrap();
        s.local_addr().unwrap()
    })
    .await
    .unwrap();
    // The client stream is gone (dropped above): its driver delivers what is
    // left, then closes the socket, so its port can be bound again.
    timeout(Duration::from_secs(5), async {
        loop {
            if std::net::UdpSocket::bind(local).is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the client socket must close once its stream is dropped");
    // The server side hears nothing more: its idle timeout ends the echo
    // task, which drops the stream and frees the session.
    timeout(Duration::from_secs(5), async {
        wait_while(20, || l.stats().sessions_live > 0).await;
    })
    .await
    .expect("the server session must be freed");
    let stats = l.stats();
    assert_eq!(stats.sessions_opened, 1);
    assert_eq!(stats.sessions_closed, 1);
}

#[tokio::test]
async fn blocked_write_is_woken_when_the_peer_reads() {
    let config = fast().window(4, 4).build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    let mut client = KcpStream::connect(addr, &config).await.unwrap();
    client.write_all(b"first").await.unwrap();
    let (mut server, _) = accept_within(&listener, 5).await;
    // Nobody reads on the server: its receive window fills, then our send
    // buffer; a write must then be pending, not an error.
    let chunk = vec![5u8; 1 << 16];
    let mut written = 0usize;
    let pending = timeout(Duration::from_secs(10), async {
        loop {
            let mut task = tokio_test::task::spawn(client.write(&chunk));
            match task.poll() {
                std::task::Poll::Ready(n) => written += n.unwrap(),
                std::task::Poll::Pending => break,
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(pending.is_ok(), "the send window never filled");
    let mut task = tokio_test::task::spawn(client.write(&chunk));
    assert!(task.poll().is_pending());
    // The server reads everything: acknowledgements open the window and the
    // driver wakes the blocked writer.
    let total = 5 + written;
    let mut got = vec![0u8; total];
    timeout(Duration::from_secs(10), server.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    timeout(Duration::from_secs(5), async {
        wait_while(5, || !task.is_woken()).await;
    })
    .await
    .expect("the writer's waker must fire when acks free the window");
    assert!(matches!(task.poll(), std::task::Poll::Ready(Ok(n)) if n > 0));
}

#[tokio::test]
async fn ipv6_loopback() {
    let config = fast().build().unwrap();
    let Ok(listener) = KcpListener::bind("[::1]:0", &config).await else {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    };
    let addr = listener.local_addr().unwrap();
    timeout(Duration::from_secs(10), async {
        let mut c = KcpStream::connect(addr, &config).await.unwrap();
        assert!(c.local_addr().unwrap().is_ipv6());
        c.write_all(b"v6").await.unwrap();
        let (mut s, peer) = listener.accept().await.unwrap();
        assert_eq!(peer.port(), c.local_addr().unwrap().port());
        let mut b = [0u8; 2];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"v6");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn accepted_streams_outlive_the_listener() {
    let config = fast().build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    timeout(Duration::from_secs(10), async {
        let mut c = KcpStream::connect(addr, &config).await.unwrap();
        c.write_all(b"a").await.unwrap();
        let (mut s, _) = listener.accept().await.unwrap();
        drop(listener);
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
        c.write_all(b"b").await.unwrap();
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"b");
        s.write_all(b"c").await.unwrap();
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"c");
        // A new peer is not accepted any more (nobody could take it): its
        // connect probe goes unanswered.
        let short = fast()
            .connect_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let e = KcpStream::connect(addr, &short).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    })
    .await
    .unwrap();
}

/// Dropping the listener frees the sessions still waiting for their
/// peer's proof along with the backlog they would have joined: its socket
/// closes at once, not at their proof timeout (10 s).
#[tokio::test]
async fn dropping_the_listener_frees_sessions_waiting_for_proof() {
    let config = fast().build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    let raw = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    send_push(&raw, addr, 9, 0, b"hi").await;
    timeout(
        Duration::from_secs(5),
        wait_while(10, || listener.stats().sessions_live < 1),
    )
    .await
    .unwrap();
    assert_eq!(listener.stats().backlog, 0, "unproven: not in the backlog");
    drop(listener);
    let closed = timeout(Duration::from_secs(3), async {
        while std::net::UdpSocket::bind(addr).is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "the unproven session kept the socket open");
}

#[tokio::test]
async fn rate_limit_paces_the_sender() {
    // 300 kB at 200 kB/s: the 96 kB burst plus at most one batch (32 x 1400 B)
    // sent on credit leave > 159 kB to pace, which takes > 0.79 s.
    let config = fast().rate_limit(200_000).build().unwrap();
    let (addr, _l) = echo_server(&fast().build().unwrap()).await;
    let data = random_bytes(300_000, 20);
    let start = tokio::time::Instant::now();
    connect_and_echo(20, addr, &config, data, 21, 50_000).await;
    let el = start.elapsed();
    assert!(el >= Duration::from_millis(750), "{el:?}");
}

#[tokio::test]
async fn socket_options_apply() {
    let config = fast()
        .socket_buffers(1 << 20, 1 << 20)
        .dscp(46)
        .batching(false)
        .build()
        .unwrap();
    let (addr, _l) = echo_server(&config).await;
    connect_and_echo(20, addr, &config, random_bytes(200_000, 22), 23, 20_000).await;
}

#[tokio::test]
async fn accept_skips_sessions_that_failed_in_the_backlog() {
    let config = fast().build().unwrap();
    let (listener, addr) = bind_loopback(&config).await;
    let raw = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    timeout(Duration::from_secs(10), async {
        open_and_prove(&raw, addr, 1, b"one").await;
        wait_while(10, || listener.stats().backlog < 1).await;
        // The peer restarts before anyone accepted its first session.
        open_and_prove(&raw, addr, 2, b"two").await;
        wait_while(10, || listener.stats().backlog < 2).await;
        let (s, _) = listener.accept().await.unwrap();
        assert_eq!(s.conv(), 2);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn quiet_sessions_cost_no_timer_wakeups() {
    let config = fast().build().unwrap();
    let (addr, l) = echo_server(&config).await;
    let mut streams = Vec::new();
    timeout(Duration::from_secs(10), async {
        for _ in 0..16 {
            let mut s = KcpStream::connect(addr, &config).await.unwrap();
            s.write_all(b"hi").await.unwrap();
            let mut b = [0u8; 2];
            s.read_exact(&mut b).await.unwrap();
            streams.push(s);
        }
    })
    .await
    .unwrap();
    // Let the last ACKs go out, then watch a quiet period: fast3 ticks every
    // 10 ms, so 16 sessions ticking would fire ~800 times in 500 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = l.stats().timer_fires;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = l.stats().timer_fires;
    assert!(after - before <= 2, "{before} -> {after}");
}

#[tokio::test]
async fn write_delay_and_ack_nodelay_echo() {
    let config = fast().write_delay(true).ack_nodelay(true).build().unwrap();
    let (addr, _l) = echo_server(&config).await;
    connect_and_echo(20, addr, &config, random_bytes(300_000, 30), 31, 10_000).await;
}

#[tokio::test]
async fn fec_group_deadline_closes_groups_at_low_rates() {
    let config = fast()
        .fec(10, 3)
        .fec_group_deadline(Duration::from_millis(20))
        .build()
        .unwrap();
    let (addr, l) = echo_server(&config).await;
    timeout(Duration::from_secs(10), async {
        let mut s = KcpStream::connect(addr, &config).await.unwrap();
        // One message per 50 ms: no group of 10 would ever fill on its own.
        for i in 0..5u8 {
            s.write_all(&[i; 64]).await.unwrap();
            let mut b = [0u8; 64];
            s.read_exact(&mut b).await.unwrap();
            assert_eq!(b, [i; 64]);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let st = s.stats();
        assert!(st.fec_out.deadline_groups >= 3, "{:?}", st.fec_out);
        assert!(st.fec_out.parity_out >= 9, "{:?}", st.fec_out);
        assert_eq!(st.fec_out.parity_undrained, 0);
    })
    .await
    .unwrap();
    assert_eq!(l.stats().bad_fec, 0);
}

#[test]
fn public_types_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<KcpStream>();
    check::<kcpio::OwnedReadHalf>();
    check::<kcpio::OwnedWriteHalf>();
    check::<KcpListener>();
    check::<Config>();
    check::<kcpio::ConfigError>();
    check::<kcpio::SessionStats>();
    check::<kcpio::ListenerStats>();
}
