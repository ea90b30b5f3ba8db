//! A client or accepted stream on a two-worker runtime, whoever runs its
//! driver (its own task or the application's: see
//! `lab/results/CLIENT-CPU-20261127.md`, sessions 22 and 24), and however the
//! listener's driver waits for the readers it woke: whatever the application does with the stream (stops
//! calling it, drops it mid-write, calls it from one task or two, drops the
//! runtime), nothing stalls and nothing is lost.

use std::time::Duration;

use kcpio::{Config, KcpListener, KcpStream, Preset};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(20);

fn config() -> Config {
    Config::builder()
        .preset(Preset::Fast3)
        .window(1024, 1024)
        .build()
        .unwrap()
}

/// Byte `i` of a test stream.
fn byte(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 11)) as u8
}

fn pattern(from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(byte).collect()
}

async fn pair(config: &Config) -> (KcpStream, KcpStream) {
    let listener = KcpListener::bind("127.0.0.1:0", config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(KcpStream::connect(addr, config), listener.accept());
    (client.unwrap(), accepted.unwrap().0)
}

/// Echoes what `server` reads until it ends.
fn spawn_echo(mut server: KcpStream) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        loop {
            match server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => server.write_all(&buf[..n]).await.unwrap(),
            }
        }
    })
}

/// `quiet`'s application polls a read once, drops it (a timeout) and then
/// leaves the stream alone while `talker` sends: `quiet`'s driver must
/// still acknowledge it (`talker`'s queue drains), and the data waits for
/// the next read.
async fn acknowledged_while_nobody_calls(quiet: &mut KcpStream, talker: &mut KcpStream, who: &str) {
    let mut buf = vec![0u8; 1 << 16];
    for round in 0..20 {
        // Registers the read, then the future is dropped.
        assert!(
            timeout(Duration::from_millis(1), quiet.read(&mut buf))
                .await
                .is_err()
        );
        let data = pattern(round << 16, 1 << 16);
        timeout(LIMIT, talker.write_all(&data))
            .await
            .unwrap()
            .unwrap();
        talker.flush().await.unwrap();
        // Nobody calls `quiet` now: only its driver task can answer.
        let acked = timeout(Duration::from_secs(5), async {
            while talker.stats().wait_snd > 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        assert!(
            acked.is_ok(),
            "round {round}: {} segments unacknowledged while the {who} did not call",
            talker.stats().wait_snd
        );
        let mut got = vec![0u8; 1 << 16];
        timeout(LIMIT, quiet.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert!(got == data, "round {round}: the data differs");
    }
}

/// The client stops calling: its driver acknowledges alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_calling_still_acknowledges() {
    let config = config();
    let (mut client, mut server) = pair(&config).await;
    acknowledged_while_nobody_calls(&mut client, &mut server, "client").await;
}

/// The accepted stream stops calling. The listener's driver leaves a
/// session whose reader it woke for that reader's next call (which wakes
/// it) before it flushes the session's ACKs: with no call coming it must
/// still acknowledge what the client sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_calling_still_acknowledges() {
    let config = config();
    let (mut client, mut server) = pair(&config).await;
    acknowledged_while_nobody_calls(&mut server, &mut client, "server").await;
}

/// An echo server on a two-worker runtime: the listener's driver flushes a
/// session's ACKs once the reader it woke has called, so the reply to each
/// message leaves in the datagram that acknowledges it (about one datagram
/// per message, not an ACK and then the reply).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_streams_reply_rides_with_its_acks() {
    const MESSAGES: u64 = 500;
    let config = config();
    let listener = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(KcpStream::connect(addr, &config), listener.accept());
    let (mut client, server) = (client.unwrap(), accepted.unwrap().0);
    let echo = spawn_echo(server);
    let mut back = [0u8; 64];
    // One round trip first, so the connect handshake is behind us.
    client.write_all(&pattern(0, 64)).await.unwrap();
    timeout(LIMIT, client.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    let before = listener.stats().datagrams_out;
    for i in 1..=MESSAGES as usize {
        let msg = pattern(i * 64, 64);
        client.write_all(&msg).await.unwrap();
        timeout(LIMIT, client.read_exact(&mut back))
            .await
            .unwrap_or_else(|_| panic!("echo {i} did not come back"))
            .unwrap();
        assert_eq!(back.as_slice(), msg.as_slice(), "echo {i}");
    }
    let sent = listener.stats().datagrams_out - before;
    echo.abort();
    assert!(
        sent <= MESSAGES * 13 / 10,
        "the listener sent {sent} datagrams for {MESSAGES} echoes"
    );
}

/// Bulk data written and the stream dropped at once: the session lingers
/// under the driver task alone and delivers every byte (KCP has no end of
/// stream: the reader reads the length it expects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_mid_write_delivers_everything() {
    let config = config();
    let (mut client, mut server) = pair(&config).await;
    const LEN: usize = 4 << 20;
    let writer = tokio::spawn(async move {
        for at in (0..LEN).step_by(32 << 10) {
            client.write_all(&pattern(at, 32 << 10)).await.unwrap();
        }
        // Dropped here with most of it unsent.
    });
    let mut got = vec![0u8; LEN];
    timeout(LIMIT, server.read_exact(&mut got))
        .await
        .expect("every byte written")
        .unwrap();
    writer.await.unwrap();
    assert!(got == pattern(0, LEN), "the data differs");
}

/// One task writes a message and reads the echo, 2,000 times: the task
/// that runs the driver is also the reader and the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_task_echoes_small_messages() {
    let config = config();
    let (mut client, server) = pair(&config).await;
    let echo = spawn_echo(server);
    let mut back = [0u8; 64];
    for i in 0..2000usize {
        let msg = pattern(i * 64, 64);
        timeout(LIMIT, client.write_all(&msg))
            .await
            .unwrap()
            .unwrap();
        timeout(LIMIT, client.read_exact(&mut back))
            .await
            .unwrap_or_else(|_| panic!("echo {i} did not come back"))
            .unwrap();
        assert_eq!(back.as_slice(), msg.as_slice(), "echo {i}");
    }
    echo.abort();
}

/// Each stream's halves in two tasks, 8 MiB each way at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_halves_move_bulk_both_ways() {
    const LEN: usize = 8 << 20;
    async fn send(mut w: kcpio::OwnedWriteHalf) {
        for at in (0..LEN).step_by(16 << 10) {
            w.write_all(&pattern(at, 16 << 10)).await.unwrap();
        }
        // Everything written is acknowledged.
        w.shutdown().await.unwrap();
    }
    async fn recv(mut r: kcpio::OwnedReadHalf) {
        let mut got = vec![0u8; LEN];
        r.read_exact(&mut got).await.unwrap();
        assert!(got == pattern(0, LEN), "the data differs");
    }
    let config = config();
    let (client, server) = pair(&config).await;
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let tasks = [
        tokio::spawn(send(cw)),
        tokio::spawn(recv(cr)),
        tokio::spawn(send(sw)),
        tokio::spawn(recv(sr)),
    ];
    for t in tasks {
        timeout(LIMIT, t).await.expect("8 MiB each way").unwrap();
    }
}

/// The runtime is dropped while a client writes and reads: the drop
/// returns (no task waits on the driver's lock), and the stream fails.
#[test]
fn dropping_the_runtime_mid_transfer_returns() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let config = config();
        rt.block_on(async {
            let (mut client, mut server) = pair(&config).await;
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(n) = server.read(&mut buf).await {
                    if n == 0 || server.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                let data = pattern(0, 1 << 16);
                let mut back = vec![0u8; 1 << 16];
                loop {
                    if client.write_all(&data).await.is_err()
                        || client.read_exact(&mut back).await.is_err()
                    {
                        return;
                    }
                }
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
        });
        drop(rt);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the runtime's drop returned");
}
