//! The tokio surface of `kcpio::mux`: streams over `tokio::io::duplex` and
//! over loopback `KcpStream`s, half-close, v2 backpressure, keepalive,
//! protocol errors, and the snappy layer over a transport that moves one
//! byte per call.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use kcpio::mux::snappy::{Encoder, MAX_ENCODED_CHUNK};
use kcpio::mux::{Mux, MuxConfig, MuxStream, Snappy, Version};
use kcpio::{Config, KcpListener, KcpStream, Preset};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(60);

fn config(version: Version) -> MuxConfig {
    MuxConfig::builder().version(version).build().unwrap()
}

/// Echoes every accepted stream until its EOF, then half-closes it.
fn spawn_echo(mux: Mux) -> tokio::task::JoinHandle<Mux> {
    tokio::spawn(async move {
        loop {
            match mux.accept_stream().await {
                Ok(stream) => drop(tokio::spawn(echo(stream))),
                Err(e) => {
                    eprintln!("echo accept: {e}");
                    break;
                }
            }
        }
        mux
    })
}

async fn echo(stream: MuxStream) {
    let (mut r, mut w) = stream.into_split();
    let _ = tokio::io::copy(&mut r, &mut w).await;
    let _ = w.shutdown().await;
}

fn pair(version: Version) -> (Mux, Mux) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    (
        Mux::client(a, &config(version)),
        Mux::server(b, &config(version)),
    )
}

fn payload(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(7)) as u8)
        .collect()
}

/// Writes `data`, half-closes, reads everything back until EOF.
async fn round_trip(mut s: MuxStream, data: Vec<u8>) -> io::Result<()> {
    let (mut r, mut w) = tokio::io::split(&mut s);
    let send = async {
        w.write_all(&data).await?;
        w.shutdown().await
    };
    let mut back = Vec::new();
    let (a, b) = tokio::join!(send, r.read_to_end(&mut back));
    a?;
    b?;
    assert_eq!(back.len(), data.len());
    assert!(back == data, "echo differs");
    Ok(())
}

async fn many_streams(client: Arc<Mux>, n: usize, size: usize) {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let client = Arc::clone(&client);
        set.spawn(async move {
            let s = client.open_stream().await?;
            round_trip(s, payload(i, size + i % 97)).await
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap().unwrap();
    }
}

#[tokio::test]
async fn ids_follow_go_smux() {
    let (client, server) = pair(Version::V1);
    let a = client.open_stream().await.unwrap();
    let b = client.open_stream().await.unwrap();
    let c = server.open_stream().await.unwrap();
    assert_eq!((a.id(), b.id(), c.id()), (3, 5, 2));
    let accepted = timeout(LIMIT, server.accept_stream())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(accepted.id(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_streams_duplex_v1_and_v2() {
    for version in [Version::V1, Version::V2] {
        let (client, server) = pair(version);
        let echo = spawn_echo(server);
        timeout(LIMIT, many_streams(Arc::new(client), 1000, 3000))
            .await
            .unwrap();
        echo.abort();
    }
}

#[tokio::test]
async fn large_transfer_v2_crosses_many_windows() {
    let (a, b) = tokio::io::duplex(16 * 1024);
    let cfg = MuxConfig::builder()
        .version(Version::V2)
        .stream_window(64 * 1024)
        .max_frame_size(8192)
        .build()
        .unwrap();
    let client = Mux::client(a, &cfg);
    let _echo = spawn_echo(Mux::server(b, &cfg));
    let s = client.open_stream().await.unwrap();
    timeout(LIMIT, round_trip(s, payload(1, 3 << 20)))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn half_close_both_directions() {
    let (client, server) = pair(Version::V2);
    let mut c = client.open_stream().await.unwrap();
    // Client half-closes first; the server still writes, then closes.
    c.write_all(b"question").await.unwrap();
    c.shutdown().await.unwrap();
    let mut s = timeout(LIMIT, server.accept_stream())
        .await
        .unwrap()
        .unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"question");
    assert!(c.write_all(b"more").await.is_err(), "write after shutdown");
    s.write_all(b"answer").await.unwrap();
    s.shutdown().await.unwrap();
    let mut back = Vec::new();
    timeout(LIMIT, c.read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, b"answer");

    // Server half-closes first; the client keeps writing.
    let mut s2 = server.open_stream().await.unwrap();
    s2.write_all(b"hello").await.unwrap();
    s2.shutdown().await.unwrap();
    let mut c2 = timeout(LIMIT, client.accept_stream())
        .await
        .unwrap()
        .unwrap();
    let mut got = Vec::new();
    c2.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"hello");
    c2.write_all(b"still here").await.unwrap();
    drop(c2); // close: a FIN after the data
    let mut back = Vec::new();
    timeout(LIMIT, s2.read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, b"still here");
}

#[tokio::test]
async fn v2_stalled_reader_stalls_only_its_stream() {
    let cfg = MuxConfig::builder()
        .version(Version::V2)
        .stream_window(64 * 1024)
        .receive_buffer(1024 * 1024)
        .build()
        .unwrap();
    let (a, b) = tokio::io::duplex(64 * 1024);
    let client = Mux::client(a, &cfg);
    let server = Mux::server(b, &cfg);
    // A stream whose server side never reads.
    let mut stalled = client.open_stream().await.unwrap();
    let _idle = timeout(LIMIT, server.accept_stream())
        .await
        .unwrap()
        .unwrap();
    let big = vec![7u8; 4 << 20];
    let write = stalled.write_all(&big);
    // It stops after the initial window (256 KiB) plus its send buffer.
    assert!(
        timeout(Duration::from_millis(500), write).await.is_err(),
        "stalled writer finished"
    );
    // Others flow meanwhile.
    let echo = spawn_echo(server);
    timeout(LIMIT, many_streams(Arc::new(client), 20, 200_000))
        .await
        .unwrap();
    echo.abort();
}

#[tokio::test]
async fn v1_reader_backpressure_stays_within_the_budget() {
    let cfg = MuxConfig::builder()
        .receive_buffer(256 * 1024)
        .stream_window(64 * 1024)
        .build()
        .unwrap();
    let (a, b) = tokio::io::duplex(16 * 1024);
    let client = Mux::client(a, &cfg);
    let server = Mux::server(b, &cfg);
    let mut c = client.open_stream().await.unwrap();
    let mut s = timeout(LIMIT, server.accept_stream())
        .await
        .unwrap()
        .unwrap();
    let data = payload(3, 2 << 20);
    let expect = data.clone();
    let writer = tokio::spawn(async move {
        c.write_all(&data).await.unwrap();
        c.shutdown().await.unwrap();
        c
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !writer.is_finished(),
        "a v1 writer is held by the reader's budget"
    );
    let mut got = Vec::new();
    timeout(LIMIT, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(got == expect);
    writer.await.unwrap();
}

#[tokio::test]
async fn dropping_a_stream_sends_fin() {
    let (client, server) = pair(Version::V1);
    let mut c = client.open_stream().await.unwrap();
    c.write_all(b"bye").await.unwrap();
    drop(c);
    let mut s = timeout(LIMIT, server.accept_stream())
        .await
        .unwrap()
        .unwrap();
    let mut got = Vec::new();
    timeout(LIMIT, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, b"bye");
    // The client's entry is gone once its FIN is out.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(client.stream_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn keepalive_detects_a_silent_peer_between_one_and_two_timeouts() {
    let cfg = MuxConfig::builder()
        .keepalive_interval(Duration::from_secs(10))
        .keepalive_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let silent_cfg = MuxConfig::builder().disable_keepalive().build().unwrap();
    let (a, b) = tokio::io::duplex(64 * 1024);
    let watcher = Mux::server(a, &cfg);
    let silent = Mux::client(b, &silent_cfg);
    let start = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(15)).await;
    // The peer's last frame: a SYN at t = 15 s; then silence.
    let _s = silent.open_stream().await.unwrap();
    let last = tokio::time::Instant::now();
    let _accepted = watcher.accept_stream().await.unwrap();
    let err = watcher.accept_stream().await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    let silent_for = last.elapsed();
    assert!(
        silent_for >= Duration::from_secs(30) && silent_for <= Duration::from_secs(60),
        "detected after {silent_for:?} of silence ({:?} in all)",
        start.elapsed()
    );
    assert!(watcher.is_closed());
}

#[tokio::test(start_paused = true)]
async fn idle_but_alive_session_stays_up() {
    let (client, server) = pair(Version::V2);
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(!client.is_closed() && !server.is_closed());
    let _echo = spawn_echo(server);
    let s = client.open_stream().await.unwrap();
    round_trip(s, b"still alive".to_vec()).await.unwrap();
}

/// Writes raw bytes at a session and returns the error its accept reports.
async fn error_for(bytes: &[u8]) -> io::Error {
    let (a, mut b) = tokio::io::duplex(1024);
    let server = Mux::server(a, &config(Version::V1));
    b.write_all(bytes).await.unwrap();
    let err = timeout(LIMIT, async {
        loop {
            match server.accept_stream().await {
                Ok(_) => {}
                Err(e) => return e,
            }
        }
    })
    .await
    .unwrap();
    drop(b);
    err
}

#[tokio::test]
async fn version_mismatch_and_unknown_command_are_reported() {
    let e = error_for(&[2, 0, 0, 0, 3, 0, 0, 0]).await;
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    let msg = e.to_string();
    assert!(
        msg.contains("version mismatch") && msg.contains("02 00 00 00 03 00 00 00"),
        "{msg}"
    );

    let e = error_for(&[1, 0, 0, 0, 3, 0, 0, 0, 1, 9, 0, 0, 3, 0, 0, 0]).await;
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("unknown command 9"), "{e}");

    let e = error_for(&[1, 3, 1, 0, 0, 0, 0, 0, 0]).await;
    assert!(e.to_string().contains("invalid length 1"), "{e}");
}

#[tokio::test]
async fn transport_eof_ends_the_session() {
    let (a, b) = tokio::io::duplex(1024);
    let server = Mux::server(a, &config(Version::V1));
    drop(b);
    let e = timeout(LIMIT, server.accept_stream())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe
        ),
        "{e}"
    );
}

/// A transport that moves at most one byte per call and returns `Pending`
/// every other call (waking itself), to exercise every short read and write.
struct Trickle {
    inner: DuplexStream,
    /// Per direction: whether the next call returns `Pending`.
    flip: [bool; 2],
}

impl Trickle {
    fn tick(&mut self, dir: usize, cx: &mut Context<'_>) -> bool {
        self.flip[dir] = !self.flip[dir];
        if self.flip[dir] {
            cx.waker().wake_by_ref();
        }
        self.flip[dir]
    }
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.tick(0, cx) {
            return Poll::Pending;
        }
        let mut one = [0u8; 1];
        let mut rb = ReadBuf::new(&mut one);
        std::task::ready!(Pin::new(&mut self.inner).poll_read(cx, &mut rb))?;
        buf.put_slice(rb.filled());
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Trickle {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.tick(1, cx) {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_write(cx, &buf[..buf.len().min(1)])
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn trickle_pair() -> (Trickle, Trickle) {
    let (a, b) = tokio::io::duplex(4096);
    (
        Trickle {
            inner: a,
            flip: [false; 2],
        },
        Trickle {
            inner: b,
            flip: [false; 2],
        },
    )
}

#[tokio::test]
async fn snappy_over_one_byte_per_call_is_byte_identical_and_lossless() {
    // Writes of various sizes (compressible and not, across the 64 KiB block).
    let writes: Vec<Vec<u8>> = vec![
        b"hello".to_vec(),
        b"hello ".repeat(40),
        payload(5, 70_000),
        vec![0; 65_536],
        payload(9, 1),
    ];
    let mut expected = Vec::new();
    let mut enc = Encoder::new();
    let mut out = vec![0; MAX_ENCODED_CHUNK];
    for w in &writes {
        let mut rest = &w[..];
        while !rest.is_empty() {
            let (taken, n) = enc.encode(rest, &mut out);
            expected.extend_from_slice(&out[..n]);
            rest = &rest[taken..];
        }
    }
    let all: Vec<u8> = writes.concat();

    // The wire bytes, through a one-byte transport.
    let (tx, mut rx) = trickle_pair();
    let writer = tokio::spawn(async move {
        let mut s = Snappy::new(tx);
        for w in &writes {
            s.write_all(w).await.unwrap();
            s.flush().await.unwrap();
        }
        s.shutdown().await.unwrap();
    });
    let mut wire = Vec::new();
    timeout(LIMIT, rx.inner.read_to_end(&mut wire))
        .await
        .unwrap()
        .unwrap();
    writer.await.unwrap();
    assert!(
        wire == expected,
        "snappy output differs from the chunk encoder"
    );

    // And back through a one-byte reader.
    let (mut tx, rx) = trickle_pair();
    let feed = tokio::spawn(async move {
        tx.inner.write_all(&wire).await.unwrap();
        tx.inner.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    timeout(LIMIT, Snappy::new(rx).read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    feed.await.unwrap();
    assert!(back == all, "decoded data differs");
}

#[tokio::test]
async fn snappy_refuses_a_plain_peer() {
    let (mut a, b) = tokio::io::duplex(1024);
    a.write_all(&[1, 0, 0, 0, 3, 0, 0, 0]).await.unwrap();
    let mut s = Snappy::new(b);
    let mut buf = [0; 16];
    let e = s.read(&mut buf).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("stream identifier"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mux_over_snappy_over_a_trickle() {
    let (a, b) = trickle_pair();
    let client = Mux::client(Snappy::new(a), &config(Version::V2));
    let _echo = spawn_echo(Mux::server(Snappy::new(b), &config(Version::V2)));
    let client = Arc::new(client);
    timeout(LIMIT, many_streams(client, 10, 5000))
        .await
        .unwrap();
}

async fn kcp_pair(version: Version, snappy: bool) -> (Mux, Mux) {
    let kcp = Config::builder()
        .preset(Preset::Fast3)
        .window(1024, 1024)
        .build()
        .unwrap();
    let listener = KcpListener::bind("127.0.0.1:0", &kcp).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = KcpStream::connect(addr, &kcp).await.unwrap();
    // The server learns of the session from its first datagram: the SYN.
    let cfg = config(version);
    let client = if snappy {
        Mux::client(Snappy::new(client), &cfg)
    } else {
        Mux::client(client, &cfg)
    };
    let first = client.open_stream().await.unwrap();
    let (server, _) = timeout(LIMIT, listener.accept()).await.unwrap().unwrap();
    let server = if snappy {
        Mux::server(Snappy::new(server), &cfg)
    } else {
        Mux::server(server, &cfg)
    };
    drop(first);
    (client, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_streams_over_kcp() {
    for (version, snappy) in [(Version::V1, false), (Version::V2, true)] {
        let (client, server) = kcp_pair(version, snappy).await;
        let echo = spawn_echo(server);
        timeout(LIMIT, many_streams(Arc::new(client), 1000, 2000))
            .await
            .unwrap();
        echo.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_over_kcp() {
    let (client, server) = kcp_pair(Version::V2, false).await;
    let _echo = spawn_echo(server);
    let s = client.open_stream().await.unwrap();
    timeout(LIMIT, round_trip(s, payload(4, 1 << 20)))
        .await
        .unwrap()
        .unwrap();
}
