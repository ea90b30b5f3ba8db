//! Connect and liveness against kcp-go v5.6.72 (the repository's Go peer,
//! `testkit/interop/kcpgo-peer`): kcp-go answers the connect probe (a WASK with
//! `sn` and `una` 0) with a WINS, its listener creates the session on it (so
//! its `Accept` returns before any data), and it answers every keepalive
//! probe while it sends none of its own; a kcp-go peer that is killed is
//! noticed at its host's first ICMP port unreachable (within about a second
//! of the next keepalive).
//!
//! Without Go these tests print `SKIPPED: ...` and pass; `KCPIO_REQUIRE_GO=1`
//! (set by `.ci/run`) makes a missing Go a failure.

use kcpio_testkit as support;

use std::io;
use std::time::{Duration, Instant};

use kcpio::{Config, ConfigBuilder, KcpStream, Key, Method, SessionError};
use support::gopeer::{self, GoServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// aes-128 with kcptun's passphrase handling on both sides; the Go side
/// keeps kcp-go's default timing and windows.
fn builder() -> ConfigBuilder {
    Config::builder()
        .stream(true)
        .crypto(Method::Aes128, Key::passphrase("it's a secrect"))
}

const GO_FLAGS: &[&str] = &["--crypt", "aes-128", "--stream", "--idle", "60s"];

fn why(e: &io::Error) -> Option<SessionError> {
    e.get_ref()?.downcast_ref::<SessionError>().copied()
}

/// Waits (bounded) until the server printed a line containing `what`.
async fn logged(server: &GoServer, what: &str, within: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < within {
        if server.log().iter().any(|l| l.contains(what)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcpgo_answers_the_probe_and_accepts_before_any_data() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let server = GoServer::spawn(&bin, "echo-server", GO_FLAGS).await;
    let config = builder().build().unwrap();
    let t = Instant::now();
    let mut c = timeout(
        Duration::from_secs(10),
        KcpStream::connect(server.addr(), &config),
    )
    .await
    .unwrap()
    .unwrap();
    eprintln!("figure: connect to kcp-go in {:?}", t.elapsed());
    let st = c.stats();
    // Ok only because kcp-go answered: one probe out, its WINS in.
    assert!(st.arq.wins_in >= 1, "{st:?}");
    assert_eq!(st.arq.push_out, 0, "no data was sent");
    let conv = format!("conv={:#010x}", c.conv());
    assert!(
        logged(&server, &conv, Duration::from_secs(2)).await,
        "kcp-go's Accept returned before any data: {:?}",
        server.log()
    );
    c.write_all(b"hello kcp-go").await.unwrap();
    let mut back = [0u8; 12];
    timeout(Duration::from_secs(5), c.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"hello kcp-go");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcpgo_server_with_another_key_times_out() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let server = GoServer::spawn(&bin, "echo-server", GO_FLAGS).await;
    let config = Config::builder()
        .crypto(Method::Aes128, Key::passphrase("not kcp-go's key"))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let e = timeout(
        Duration::from_secs(10),
        KcpStream::connect(server.addr(), &config),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert_eq!(why(&e), Some(SessionError::ConnectTimeout));
    assert!(!server.log().iter().any(|l| l.contains("session open")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcpgo_answers_keepalives_and_its_death_is_noticed_within_the_idle_timeout() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let server = GoServer::spawn(&bin, "echo-server", GO_FLAGS).await;
    let idle = Duration::from_secs(3);
    let config = builder()
        .idle_timeout(idle)
        .keepalive(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut c = KcpStream::connect(server.addr(), &config).await.unwrap();
    c.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    c.read_exact(&mut back).await.unwrap();
    // Quiet for twice the idle timeout: kcp-go sends nothing of its own but
    // answers every probe, so the session stays up.
    let before = c.stats().arq.wins_in;
    tokio::time::sleep(idle * 2).await;
    let st = c.stats();
    assert!(st.arq.wins_in - before >= 4, "answers: {st:?}");
    assert_eq!(st.arq.wask_in, 0, "kcp-go sends no probes of its own");
    c.write_all(b"pong").await.unwrap();
    c.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"pong");
    // kcp-go is killed: its port answers the next probe with ICMP
    // unreachable, and a pending read fails with ConnectionReset well
    // within the idle timeout.
    drop(server);
    let t = Instant::now();
    let e = timeout(idle * 3, c.read(&mut back))
        .await
        .unwrap()
        .unwrap_err();
    let took = t.elapsed();
    eprintln!("figure: kcp-go killed, noticed after {took:?}");
    assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
    assert_eq!(why(&e), Some(SessionError::PortUnreachable));
    assert!(took <= idle + Duration::from_secs(1), "{took:?}");
}
