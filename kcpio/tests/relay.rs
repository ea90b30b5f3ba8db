//! The in-process lossy relay (`testkit/src/relay.rs`), first on its own with
//! plain UDP, then carrying kcpio sessions over heavy loss.

use kcpio_testkit as support;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use kcpio::{Config, KcpStream, Key, Method, Preset, SessionStats};
use support::kcp;
use support::relay::{LinkConfig, Relay, RelayConfig, RelayStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

/// A UDP echo server on loopback; returns its address and the task.
async fn udp_echo() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                return;
            };
            let _ = sock.send_to(&buf[..n], from).await;
        }
    });
    (addr, task)
}

/// A loopback UDP socket connected to `to`.
async fn udp_client(to: SocketAddr) -> UdpSocket {
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(to).await.unwrap();
    client
}

/// One datagram from a connected socket, failing the test after 5 s.
async fn recv_within_5s(sock: &UdpSocket, buf: &mut [u8]) -> usize {
    tokio::time::timeout(Duration::from_secs(5), sock.recv(buf))
        .await
        .unwrap()
        .unwrap()
}

/// Sends `count` numbered datagrams through `relay` in paced bursts and
/// collects the sequence numbers echoed back until the line is quiet.
async fn ping_pong(relay: &Relay, count: u32) -> Vec<u32> {
    let client = udp_client(relay.local_addr()).await;
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    let mut payload = [0u8; 32];
    for burst in 0..count.div_ceil(50) {
        for i in burst * 50..((burst + 1) * 50).min(count) {
            payload[..4].copy_from_slice(&i.to_le_bytes());
            client.send(&payload).await.unwrap();
        }
        // Read what is back already so no socket buffer overflows.
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(2), client.recv(&mut buf)).await
        {
            assert_eq!(n, payload.len());
            got.push(u32::from_le_bytes(buf[..4].try_into().unwrap()));
        }
    }
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(300), client.recv(&mut buf)).await
    {
        assert_eq!(n, payload.len());
        got.push(u32::from_le_bytes(buf[..4].try_into().unwrap()));
    }
    got
}

/// Binomial bounds: `x` within 6 standard deviations of `n * p`.
fn assert_binomial(x: u64, n: u64, p: f64, what: &str) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (x as f64 - mean).abs() <= 6.0 * sd + 1.0,
        "{what}: {x} of {n}, expected about {mean:.0} (sd {sd:.1})"
    );
}

#[tokio::test]
async fn relay_clean_link_delivers_everything_in_order() {
    let (server, _echo) = udp_echo().await;
    let relay = Relay::start(server, RelayConfig::default()).await.unwrap();
    let got = ping_pong(&relay, 2000).await;
    let stats = relay.stats();
    assert_eq!(stats.to_server.lost + stats.to_client.lost, 0);
    assert_eq!(stats.to_server.send_errors + stats.to_client.send_errors, 0);
    assert_eq!(got.len(), 2000, "stats: {stats:?}");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "clean link reordered");
    assert_eq!(stats.clients, 1);
}

#[tokio::test]
async fn relay_loss_matches_the_configuration() {
    let (server, _echo) = udp_echo().await;
    let config = RelayConfig {
        seed: 42,
        to_server: LinkConfig::lossy(0.10),
        to_client: LinkConfig::lossy(0.20),
        ..RelayConfig::default()
    };
    let relay = Relay::start(server, config).await.unwrap();
    let n = 4000;
    let got = ping_pong(&relay, n).await;
    let s = relay.stats();
    assert_eq!(s.to_server.received, u64::from(n), "{s:?}");
    assert_eq!(s.to_server.queue_dropped + s.to_client.queue_dropped, 0);
    assert_eq!(s.to_server.send_errors + s.to_client.send_errors, 0);
    assert_binomial(
        s.to_server.lost,
        s.to_server.received,
        0.10,
        "to_server loss",
    );
    // Everything not lost reached the echo server and came back.
    assert_eq!(s.to_server.sent, s.to_server.received - s.to_server.lost);
    assert_eq!(s.to_client.received, s.to_server.sent);
    assert_binomial(
        s.to_client.lost,
        s.to_client.received,
        0.20,
        "to_client loss",
    );
    assert_eq!(got.len() as u64, s.to_client.sent);
    // Each echoed number is unique (no duplication configured).
    assert_eq!(got.iter().collect::<HashSet<_>>().len(), got.len());
}

#[tokio::test]
async fn relay_is_deterministic_for_a_seed() {
    let (server, _echo) = udp_echo().await;
    let config = RelayConfig {
        seed: 7,
        to_server: LinkConfig::lossy(0.3),
        ..RelayConfig::default()
    };
    let mut runs = Vec::new();
    for _ in 0..2 {
        let relay = Relay::start(server, config.clone()).await.unwrap();
        let mut got = ping_pong(&relay, 500).await;
        got.sort_unstable();
        runs.push(got);
    }
    // The same datagram sequence meets the same fate.
    assert_eq!(runs[0], runs[1]);
    assert!(runs[0].len() < 450, "no loss happened");
}

#[tokio::test]
async fn relay_duplicates_and_reorders() {
    let (server, _echo) = udp_echo().await;
    let link = LinkConfig {
        duplicate: 0.1,
        reorder: 0.2,
        reorder_delay: Duration::from_millis(10),
        delay: Duration::from_millis(1),
        jitter: Duration::from_millis(1),
        ..LinkConfig::default()
    };
    let relay = Relay::start(
        server,
        RelayConfig {
            seed: 3,
            to_server: link,
            to_client: LinkConfig::clean(),
            ..RelayConfig::default()
        },
    )
    .await
    .unwrap();
    let n = 3000;
    let got = ping_pong(&relay, n).await;
    let s = relay.stats();
    assert_binomial(s.to_server.duplicated, u64::from(n), 0.1, "duplicates");
    assert_binomial(s.to_server.reordered, u64::from(n), 0.2, "reordered");
    assert_eq!(
        got.len() as u64,
        u64::from(n) + s.to_server.duplicated,
        "{s:?}"
    );
    let distinct = got.iter().collect::<HashSet<_>>().len();
    assert_eq!(distinct as u32, n);
    let inversions = got.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions > 100, "only {inversions} reorderings seen");
}

#[tokio::test]
async fn relay_delay_is_applied_each_way() {
    let (server, _echo) = udp_echo().await;
    let link = LinkConfig {
        delay: Duration::from_millis(40),
        ..LinkConfig::default()
    };
    let relay = Relay::start(server, RelayConfig::symmetric(1, link))
        .await
        .unwrap();
    let client = udp_client(relay.local_addr()).await;
    let mut buf = [0u8; 16];
    for _ in 0..3 {
        let start = tokio::time::Instant::now();
        client.send(b"ping").await.unwrap();
        let n = recv_within_5s(&client, &mut buf).await;
        assert_eq!(&buf[..n], b"ping");
        // A lower bound only: the relay must never deliver early.
        assert!(start.elapsed() >= Duration::from_millis(80));
    }
}

#[tokio::test]
async fn relay_full_queue_drops_and_counts() {
    let (server, _echo) = udp_echo().await;
    let link = LinkConfig {
        delay: Duration::from_secs(2),
        queue: 10,
        ..LinkConfig::default()
    };
    let relay = Relay::start(
        server,
        RelayConfig {
            to_server: link,
            ..RelayConfig::default()
        },
    )
    .await
    .unwrap();
    let client = udp_client(relay.local_addr()).await;
    for i in 0u32..100 {
        client.send(&i.to_le_bytes()).await.unwrap();
    }
    let mut buf = [0u8; 16];
    let mut got = Vec::new();
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(3000), client.recv(&mut buf)).await
    {
        got.push(u32::from_le_bytes(buf[..n].try_into().unwrap()));
        if got.len() == 10 {
            break;
        }
    }
    let s = relay.stats();
    assert_eq!(s.to_server.received, 100);
    assert_eq!(s.to_server.queue_dropped, 90, "{s:?}");
    // The first ten were queued; the rest found the queue full.
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

#[tokio::test]
async fn relay_gives_each_client_its_own_upstream() {
    let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let relay = Relay::start(server.local_addr().unwrap(), RelayConfig::default())
        .await
        .unwrap();
    let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    a.send_to(b"a", relay.local_addr()).await.unwrap();
    b.send_to(b"b", relay.local_addr()).await.unwrap();
    let mut buf = [0u8; 8];
    let mut from = Vec::new();
    for _ in 0..2 {
        let (n, addr) = tokio::time::timeout(Duration::from_secs(5), server.recv_from(&mut buf))
            .await
            .unwrap()
            .unwrap();
        from.push((buf[..n].to_vec(), addr));
    }
    assert_ne!(from[0].1, from[1].1);
    // Answers go back to the right client.
    for (payload, addr) in &from {
        server.send_to(payload, addr).await.unwrap();
    }
    let n = recv_within_5s(&a, &mut buf).await;
    assert_eq!(&buf[..n], b"a");
    let n = recv_within_5s(&b, &mut buf).await;
    assert_eq!(&buf[..n], b"b");
    assert_eq!(relay.stats().clients, 2);
}

#[tokio::test]
async fn relay_blackhole_cuts_and_restores() {
    let (server, _echo) = udp_echo().await;
    let relay = Relay::start(server, RelayConfig::default()).await.unwrap();
    let client = udp_client(relay.local_addr()).await;
    let mut buf = [0u8; 8];
    relay.set_blackhole(true);
    client.send(b"x").await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), client.recv(&mut buf))
            .await
            .is_err()
    );
    relay.set_blackhole(false);
    client.send(b"y").await.unwrap();
    let n = recv_within_5s(&client, &mut buf).await;
    assert_eq!(&buf[..n], b"y");
    assert_eq!(relay.stats().to_server.lost, 1);
}

#[tokio::test]
async fn relay_stops_when_dropped() {
    let (server, _echo) = udp_echo().await;
    let relay = Relay::start(server, RelayConfig::default()).await.unwrap();
    let addr = relay.local_addr();
    let client = udp_client(addr).await;
    let mut buf = [0u8; 8];
    client.send(b"1").await.unwrap();
    recv_within_5s(&client, &mut buf).await;
    assert!(relay.is_running());
    drop(relay);
    // Let the aborted task unwind and close its sockets.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = client.send(b"2").await;
    let answer = tokio::time::timeout(Duration::from_millis(300), client.recv(&mut buf)).await;
    assert!(
        !matches!(answer, Ok(Ok(_))),
        "a dropped relay still forwarded"
    );
}

// ---------------------------------------------------------------------------
// kcpio sessions through heavy loss
// ---------------------------------------------------------------------------

/// 16 MiB, verified byte for byte by the receiver.
const BIG: u64 = 16 << 20;
/// Generous: these runs take seconds to tens of seconds on a loaded 2-core box.
const BIG_TIMEOUT: Duration = Duration::from_secs(180);

/// A small delay with some jitter (which also reorders) and a little
/// duplication, plus `loss` each way.
fn lossy_link(loss: f64) -> LinkConfig {
    LinkConfig {
        loss,
        duplicate: 0.01,
        reorder: 0.01,
        reorder_delay: Duration::from_millis(3),
        delay: Duration::from_millis(1),
        jitter: Duration::from_millis(1),
        queue: 8192,
        ..LinkConfig::default()
    }
}

/// Sends `bytes` to a sink server through a relay with `link` each way;
/// returns the client's stats and the relay's.
async fn sink_through(
    config: &Config,
    seed: u64,
    link: LinkConfig,
    bytes: u64,
) -> (SessionStats, RelayStats) {
    let server = kcp::SinkServer::start(config).await;
    let relay = Relay::start(server.addr(), RelayConfig::symmetric(seed, link))
        .await
        .unwrap();
    let res = kcp::sink_client(relay.local_addr(), config, bytes, BIG_TIMEOUT).await;
    let s = relay.stats();
    let stats = res.unwrap_or_else(|e| panic!("{e}; relay {s:?}"));
    (stats, s)
}

/// fast3, stream mode, 1024-segment windows.
fn big_windows() -> kcpio::ConfigBuilder {
    Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(1024, 1024)
}

async fn sixteen_mib_through(config: Config, loss: f64, seed: u64, fec: bool) {
    let (stats, s) = sink_through(&config, seed, lossy_link(loss), BIG).await;
    // The loss really happened, at about the configured rate.
    let observed = s.to_server.lost as f64 / s.to_server.received as f64;
    assert!(
        (observed - loss).abs() < 0.02,
        "to_server loss {observed:.3}, configured {loss}: {s:?}"
    );
    assert!(s.to_client.lost > 0, "{s:?}");
    let a = &stats.arq;
    assert!(
        a.retransmit_rto + a.retransmit_fast + a.retransmit_early > 0,
        "no retransmission at {loss} loss: {stats:?}"
    );
    if fec {
        // Parity went out, and the server's parity came back.
        assert!(stats.fec_out.parity_out > 0, "{stats:?}");
        assert!(stats.fec_in.parity_in > 0, "{stats:?}");
    } else {
        assert_eq!(stats.fec_out.parity_out + stats.fec_in.parity_in, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_mib_at_10_percent_loss_aes128_fec() {
    let config = big_windows()
        .crypto(Method::Aes128, Key::passphrase("relay test"))
        .fec(10, 3)
        .build()
        .unwrap();
    sixteen_mib_through(config, 0.10, 10, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_mib_at_20_percent_loss_without_fec() {
    let config = big_windows().build().unwrap();
    sixteen_mib_through(config, 0.20, 20, false).await;
}

// ---------------------------------------------------------------------------
// a link that goes dead
// ---------------------------------------------------------------------------

/// Connects through a clean relay and proves the path with one echo.
async fn connected_through(relay: &Relay, config: &Config) -> KcpStream {
    let mut stream = KcpStream::connect(relay.local_addr(), config)
        .await
        .unwrap();
    stream.write_all(b"hello").await.unwrap();
    let mut buf = [0u8; 5];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut buf))
        .await
        .expect("echo through the relay")
        .unwrap();
    assert_eq!(&buf, b"hello");
    stream
}

/// An echo server behind a clean relay, a stream that proved the path, and
/// then the relay cut (blackholed). Keep the server alive.
async fn cut_after_echo(config: &Config) -> (kcp::EchoServer, Relay, KcpStream) {
    let server = kcp::EchoServer::start(config).await;
    let relay = Relay::start(server.addr(), RelayConfig::default())
        .await
        .unwrap();
    let stream = connected_through(&relay, config).await;
    relay.set_blackhole(true);
    (server, relay, stream)
}

/// The pending read must end within `secs` with a dead-peer error.
async fn assert_read_dies(stream: &mut KcpStream, secs: u64, hang: &str, what: &str) {
    let mut buf = [0u8; 64];
    let res = tokio::time::timeout(Duration::from_secs(secs), stream.read(&mut buf))
        .await
        .expect(hang);
    match res {
        Err(e) => assert!(is_dead_peer_error(&e), "unexpected error kind: {e:?}"),
        Ok(n) => panic!("read {n} bytes {what}"),
    }
}

fn is_dead_peer_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::ConnectionReset
    )
}

/// Data in flight when the cable is cut: the retransmission limit must
/// surface as an error on the pending read, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_link_with_data_in_flight_fails_reads() {
    let config = Config::builder()
        .preset(Preset::Fast3)
        .dead_link(8)
        .build()
        .unwrap();
    let (_server, relay, mut stream) = cut_after_echo(&config).await;
    stream.write_all(&[7u8; 4000]).await.unwrap();
    assert_read_dies(
        &mut stream,
        30,
        "a read on a dead link must fail, not hang",
        "through a cut link",
    )
    .await;
    // Later writes fail too instead of queueing forever.
    let later = tokio::time::timeout(Duration::from_secs(10), stream.write_all(&[1u8; 100])).await;
    assert!(
        matches!(later, Ok(Err(ref e)) if is_dead_peer_error(e)),
        "{later:?}"
    );
    assert!(relay.stats().to_server.lost > 0);
}

/// Nothing in flight, the peer simply goes silent: the idle timeout ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_peer_hits_the_idle_timeout() {
    let config = Config::builder()
        .preset(Preset::Fast3)
        .idle_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let (_server, _relay, mut stream) = cut_after_echo(&config).await;
    assert_read_dies(
        &mut stream,
        20,
        "a read on a silent link must end with the idle timeout",
        "from a silent peer",
    )
    .await;
}

/// Heavy reordering and duplication with some loss and jitter, in message
/// mode (32 KiB writes are fragmented and reassembled) with FEC: every byte
/// still arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reordering_and_duplication_in_message_mode() {
    let config = Config::builder()
        .preset(Preset::Fast3)
        .stream(false)
        .window(512, 512)
        .crypto(Method::Salsa20, Key::passphrase("reorder"))
        .fec(10, 3)
        .build()
        .unwrap();
    let link = LinkConfig {
        loss: 0.02,
        duplicate: 0.10,
        reorder: 0.30,
        reorder_delay: Duration::from_millis(4),
        delay: Duration::from_millis(1),
        jitter: Duration::from_millis(3),
        queue: 8192,
        ..LinkConfig::default()
    };
    let (_, s) = sink_through(&config, 77, link, 4 << 20).await;
    assert!(
        s.to_server.duplicated > 0 && s.to_server.reordered > 0,
        "{s:?}"
    );
}
