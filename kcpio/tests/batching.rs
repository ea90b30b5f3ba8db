//! Batches beat system calls: a bulk echo through a listener goes out in far
//! fewer send and receive calls than datagrams with batching on (sendmmsg,
//! GSO runs, recvmmsg, GRO), and in exactly one call per datagram with
//! `batching(false)`, the portable path, which must still deliver every byte.

use std::time::Duration;

use kcpio::{Config, KcpListener, KcpStream, ListenerStats, Preset};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const BYTES: usize = 4 << 20;

async fn echo_bulk(batching: bool) -> ListenerStats {
    let config = Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(512, 512)
        .batching(batching)
        .linger(Duration::from_millis(200))
        .build()
        .unwrap();
    let listener = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = KcpStream::connect(addr, &config).await.unwrap();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (mut r, mut w) = stream.into_split();
        let mut buf = vec![0u8; 64 << 10];
        let mut left = BYTES;
        while left > 0 {
            let n = r.read(&mut buf).await.unwrap();
            assert!(n > 0);
            w.write_all(&buf[..n]).await.unwrap();
            left -= n;
        }
        w.flush().await.unwrap();
        (listener, r, w)
    });
    let data: Vec<u8> = (0..BYTES).map(|i| (i % 253) as u8).collect();
    let (mut rd, mut wr) = client.into_split();
    let writer = async {
        for chunk in data.chunks(32 << 10) {
            wr.write_all(chunk).await.unwrap();
        }
    };
    let reader = async {
        let mut back = vec![0u8; BYTES];
        rd.read_exact(&mut back).await.unwrap();
        back
    };
    let (_, back) = timeout(Duration::from_secs(60), async {
        tokio::join!(writer, reader)
    })
    .await
    .expect("echo within 60 s");
    assert!(back == data, "echo differs");
    let (listener, _r, _w) = server.await.unwrap();
    listener.stats()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_path_sends_and_receives_many_datagrams_per_call() {
    let s = echo_bulk(true).await;
    eprintln!("batched: {s:?}");
    assert!(s.datagrams_out > 2_000, "{s:?}");
    // sendmmsg of up to 32 transmits, GSO runs of full-size datagrams: even
    // on a kernel without GSO, far fewer calls than datagrams.
    assert!(
        s.send_syscalls * 4 < s.datagrams_out,
        "{} send calls for {} datagrams",
        s.send_syscalls,
        s.datagrams_out
    );
    assert!(
        s.recv_syscalls * 2 < s.datagrams_in,
        "{} receive calls for {} datagrams",
        s.recv_syscalls,
        s.datagrams_in
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbatched_path_uses_one_call_per_datagram() {
    let s = echo_bulk(false).await;
    eprintln!("unbatched: {s:?}");
    assert!(s.datagrams_out > 2_000, "{s:?}");
    // One call per datagram (more only when a full socket buffer said
    // EAGAIN): never fewer, which would mean a batch.
    assert!(s.send_syscalls >= s.datagrams_out, "{s:?}");
    // Every datagram took one receive call (plus the calls that found the
    // socket empty).
    assert!(s.recv_syscalls >= s.datagrams_in, "{s:?}");
}
