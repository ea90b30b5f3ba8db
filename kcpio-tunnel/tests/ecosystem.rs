//! A `KcpStream` stands in for a `TcpStream` in the tokio ecosystem:
//!
//! - hyper's HTTP/1.1 server serves over sessions from a `KcpListener` and
//!   hyper's client fetches over a `KcpStream` (small, ~1 MB and echoed bodies,
//!   several requests on one kept-alive connection);
//! - `tokio_util::codec::Framed` with `LengthDelimitedCodec` round-trips many
//!   frames through a lossy link;
//! - the tunnel example (kcptun's wire: TCP ← smux stream ← KCP ← TCP)
//!   carries several connections over one session with half-close both ways
//!   through a lossy link.
//!
//! Loopback only, every test bounded by a timeout.

use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1 as server_http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kcpio::{Config, KcpListener, KcpStream, Key, Method, Preset};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use kcpio_testkit::relay;

// The tunnel example itself, compiled in: the test runs its real forwarding code.
use kcpio_tunnel as tunnel;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Deterministic bytes that reveal a shifted, dropped or repeated chunk.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn config() -> Config {
    Config::builder()
        .preset(Preset::Fast3)
        .window(512, 512)
        .stream(true)
        .crypto(Method::Aes128, Key::passphrase("ecosystem"))
        .idle_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn lossy_relay(upstream: SocketAddr, loss: f64, seed: u64) -> relay::Relay {
    let link = relay::LinkConfig {
        loss,
        delay: Duration::from_millis(2),
        jitter: Duration::from_millis(2),
        ..relay::LinkConfig::default()
    };
    relay::Relay::start(upstream, relay::RelayConfig::symmetric(seed, link))
        .await
        .unwrap()
}

const BIG: usize = 1 << 20;

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let resp = match (req.method().as_str(), req.uri().path()) {
        ("GET", "/hello") => Response::new(Full::new(Bytes::from_static(b"hello over KCP"))),
        ("GET", "/big") => Response::new(Full::new(Bytes::from(pattern(BIG, 7)))),
        ("POST", "/echo") => {
            let body = req.into_body().collect().await?.to_bytes();
            Response::new(Full::new(body))
        }
        _ => {
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    };
    Ok(resp)
}

async fn serve_http(listener: KcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let _ = server_http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(handle))
                .await;
        });
    }
}

async fn fetch(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    method: &str,
    path: &str,
    body: Bytes,
) -> (StatusCode, Bytes) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, "kcpio.test")
        .body(Full::new(body))
        .unwrap();
    sender.ready().await.unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

async fn http_roundtrips(addr: SocketAddr) {
    let stream = KcpStream::connect(addr, &config()).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);

    let (status, body) = fetch(&mut sender, "GET", "/hello", Bytes::new()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"hello over KCP");

    let (status, body) = fetch(&mut sender, "GET", "/big", Bytes::new()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.len(), BIG);
    assert!(body[..] == pattern(BIG, 7)[..], "1 MiB body differs");

    let upload = Bytes::from(pattern(300_000, 11));
    let (status, body) = fetch(&mut sender, "POST", "/echo", upload.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body == upload, "echoed body differs");

    let (status, _) = fetch(&mut sender, "GET", "/nowhere", Bytes::new()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    drop(sender);
    conn.abort();
}

/// hyper's HTTP/1.1 server over `KcpListener`, hyper's client over `KcpStream`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyper_http1_over_kcp() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let listener = KcpListener::bind("127.0.0.1:0", &config()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_http(listener));
        http_roundtrips(addr).await;
        server.abort();
    })
    .await
    .expect("HTTP over KCP timed out");
}

/// The same through a link that drops 5% of the datagrams each way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyper_http1_over_kcp_through_loss() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let listener = KcpListener::bind("127.0.0.1:0", &config()).await.unwrap();
        let relay = lossy_relay(listener.local_addr().unwrap(), 0.05, 3).await;
        let server = tokio::spawn(serve_http(listener));
        http_roundtrips(relay.local_addr()).await;
        let stats = relay.stats();
        assert!(
            stats.to_server.lost + stats.to_client.lost > 0,
            "the relay dropped nothing: the test proved nothing about loss"
        );
        server.abort();
    })
    .await
    .expect("HTTP over lossy KCP timed out");
}

/// `Framed<KcpStream, LengthDelimitedCodec>`: many frames of varied sizes,
/// echoed back by the server, through 5% loss each way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framed_length_delimited_roundtrip() {
    const FRAMES: usize = 3000;
    let frame = |i: usize| pattern(i * 37 % 3001, i as u32);
    tokio::time::timeout(TEST_TIMEOUT, async {
        let listener = KcpListener::bind("127.0.0.1:0", &config()).await.unwrap();
        let relay = lossy_relay(listener.local_addr().unwrap(), 0.05, 9).await;
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut framed = Framed::new(stream, LengthDelimitedCodec::new());
            for _ in 0..FRAMES {
                let f = framed.next().await.unwrap().unwrap();
                framed.send(f.freeze()).await.unwrap();
            }
            framed
        });

        let stream = KcpStream::connect(relay.local_addr(), &config())
            .await
            .unwrap();
        let (mut sink, mut source) = Framed::new(stream, LengthDelimitedCodec::new()).split();
        let send = async move {
            for i in 0..FRAMES {
                sink.feed(Bytes::from(frame(i))).await.unwrap();
            }
            sink.flush().await.unwrap();
        };
        let recv = async move {
            for i in 0..FRAMES {
                let got = source.next().await.unwrap().unwrap();
                assert!(got[..] == frame(i)[..], "frame {i} differs");
            }
        };
        tokio::join!(send, recv);
        let _server_side = server.await.unwrap();
        assert!(relay.stats().to_server.lost > 0);
    })
    .await
    .expect("Framed over KCP timed out");
}

/// A TCP server that reads until EOF, then writes everything back and closes:
/// it only answers once the client's half-close arrived.
async fn tcp_echo_after_eof(listener: TcpListener) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let mut all = Vec::new();
            conn.read_to_end(&mut all).await.unwrap();
            conn.write_all(&all).await.unwrap();
            conn.shutdown().await.unwrap();
        });
    }
}

/// The tunnel example: TCP client → tunnel client (TCP to KCP) → lossy link →
/// tunnel server (KCP to TCP) → TCP echo server. Several connections at once,
/// all streams of one KCP session; each write side is half-closed and the answer
/// must still come back, ending in EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_forwards_tcp_with_half_close() {
    const CONNS: usize = 4;
    const BYTES: usize = 200_000;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target_addr = target.local_addr().unwrap();
        tokio::spawn(tcp_echo_after_eof(target));

        let args = |s: String| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let flags = "--quiet --mode fast3 --key tunnel-test";
        let server = tunnel::parse(args(format!(
            "tunnel server -l 127.0.0.1:0 -t {target_addr} {flags}"
        )))
        .unwrap();
        let server = tunnel::Bound::bind(server).await.unwrap();
        let relay = lossy_relay(server.local_addr().unwrap(), 0.03, 21).await;
        let log = tunnel::Log::open("", true).unwrap();
        tokio::spawn(server.run(log.clone()));
        let client = tunnel::parse(args(format!(
            "tunnel client -l 127.0.0.1:0 -r {} {flags}",
            relay.local_addr()
        )))
        .unwrap();
        let client = tunnel::Bound::bind(client).await.unwrap();
        let front_addr = client.local_addr().unwrap();
        tokio::spawn(client.run(log));

        let clients = (0..CONNS).map(|i| {
            tokio::spawn(async move {
                let data = pattern(BYTES, 100 + i as u32);
                let conn = TcpStream::connect(front_addr).await.unwrap();
                let (mut rd, mut wr) = conn.into_split();
                let sent = data.clone();
                let writer = tokio::spawn(async move {
                    wr.write_all(&sent).await.unwrap();
                    wr.shutdown().await.unwrap();
                });
                let mut back = Vec::new();
                rd.read_to_end(&mut back).await.unwrap();
                writer.await.unwrap();
                assert_eq!(back.len(), BYTES, "connection {i}: wrong length");
                assert!(back == data, "connection {i}: bytes differ");
            })
        });
        for c in clients.collect::<Vec<_>>() {
            c.await.unwrap();
        }
        let stats = relay.stats();
        assert!(stats.to_server.lost + stats.to_client.lost > 0);
        assert_eq!(stats.clients, 1, "one KCP session carries every connection");
    })
    .await
    .expect("tunnel timed out");
}
