//! Hostile peers on loopback: hand-made datagrams against a real listener.
//! (Issue 13; the session-table findings get their tests with that work.)

use std::time::Duration;

use kcpio::arq::segment::{Command, Header, Segments};
use kcpio::{Config, KcpListener};
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout};

const CONV: u32 = 0x1122_3344;

/// One KCP PUSH datagram of conversation `CONV` (crypto `null`, FEC off).
fn push(sn: u32, payload: &[u8]) -> Vec<u8> {
    let h = Header {
        conv: CONV,
        cmd: Command::Push as u8,
        frg: 0,
        wnd: 128,
        ts: sn * 10,
        sn,
        una: 0,
        len: payload.len() as u32,
    };
    let mut out = vec![0u8; 24 + payload.len()];
    h.encode_at(&mut out, 0, payload).expect("fits");
    out
}

/// Collects the PUSH payloads the server sends (each sn once, into `got`)
/// until `want` bytes arrived in all, within 5 s; returns them in order.
async fn echoed(
    sock: &UdpSocket,
    got: &mut std::collections::BTreeMap<u32, Vec<u8>>,
    want: usize,
) -> Vec<u8> {
    let mut buf = vec![0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.values().map(Vec::len).sum::<usize>() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = timeout(left, sock.recv(&mut buf))
            .await
            .expect("the echo arrives within 5 s")
            .unwrap();
        for seg in Segments::new(&buf[..n]).flatten() {
            if seg.command() == Some(Command::Push) {
                got.insert(seg.sn(), seg.payload().to_vec());
                // Acknowledge (una included: kcp-go frees a segment only
                // when una passes it), or the server's congestion window
                // (1 at the start) holds the rest back.
                let una = (0u32..).take_while(|k| got.contains_key(k)).count() as u32;
                let ack = Header {
                    conv: CONV,
                    cmd: Command::Ack as u8,
                    wnd: 128,
                    ts: seg.ts(),
                    sn: seg.sn(),
                    una,
                    ..Header::default()
                };
                let mut out = [0u8; 24];
                ack.encode(&mut out);
                sock.send(&out).await.unwrap();
            }
        }
    }
    got.values().flatten().copied().collect()
}

/// Finding 6: a zero-length PUSH (legal: C KCP's `ikcp_send(kcp, buf, 0)`)
/// used to make `poll_read` return `Ok(0)`, which `tokio::io::copy` takes as
/// end of stream, so an echo server closed. It is now skipped.
#[tokio::test]
async fn an_empty_push_does_not_end_the_stream() {
    let config = Config::builder().build().unwrap();
    let listener = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = std::sync::Arc::new(listener);
    let l2 = listener.clone();
    let server = tokio::spawn(async move {
        let (stream, _) = l2.accept().await.unwrap();
        let (mut r, mut w) = stream.into_split();
        tokio::io::copy(&mut r, &mut w).await
    });

    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(addr).await.unwrap();
    // The conversation opens with an empty segment, then data; then another
    // empty one in the middle of the stream.
    let mut got = std::collections::BTreeMap::new();
    sock.send(&push(0, b"")).await.unwrap();
    // Long enough for the server to read (and, before the fix, see EOF)
    // before the data comes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    sock.send(&push(1, b"hello ")).await.unwrap();
    assert_eq!(echoed(&sock, &mut got, 6).await, b"hello ");
    sock.send(&push(2, b"")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    sock.send(&push(3, b"world")).await.unwrap();
    assert_eq!(echoed(&sock, &mut got, 11).await, b"hello world");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !server.is_finished(),
        "the server's copy ended: {:?}",
        server.await
    );
    server.abort();
}
