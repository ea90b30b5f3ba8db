//! Interop with kcp-go v5.6.72 through the repository's Go peer
//! (`interop/kcpgo-peer`).
//!
//! Without Go these tests print `SKIPPED: ...` and pass; `KCPIO_REQUIRE_GO=1`
//! (set by `.ci/run`) makes a missing Go a failure.

mod support;

use std::time::Duration;

use support::gopeer::{self, GoServer, args};
use support::relay::{LinkConfig, Relay, RelayConfig};

const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The harness itself: a Go client against a Go echo server, directly and
/// through the lossy relay. If these fail, the Rust cases below mean nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_go_client_go_echo_server() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let flags = [
        "--crypt",
        "aes-128",
        "--datashard",
        "10",
        "--parityshard",
        "3",
        "--nodelay",
        "fast3",
        "--stream",
        "--sndwnd",
        "256",
        "--rcvwnd",
        "256",
    ];
    let server = GoServer::spawn(&bin, "echo-server", &flags).await;

    let mut direct = args(&flags);
    direct.extend(args(&[
        "--addr",
        &server.addr().to_string(),
        "--bytes",
        "300000",
    ]));
    let run = gopeer::run_client(&bin, &direct, CLIENT_TIMEOUT).await;
    assert!(run.passed(), "direct: {run:?}\nserver: {:?}", server.log());
    assert_eq!(run.number("bytes_verified"), Some(300_000.0));

    let relay = Relay::start(
        server.addr(),
        RelayConfig::symmetric(5, LinkConfig::lossy(0.05)),
    )
    .await
    .unwrap();
    let mut relayed = args(&flags);
    relayed.extend(args(&[
        "--addr",
        &relay.local_addr().to_string(),
        "--bytes",
        "300000",
    ]));
    let run = gopeer::run_client(&bin, &relayed, CLIENT_TIMEOUT).await;
    let stats = relay.stats();
    assert!(
        run.passed(),
        "relayed: {run:?}\nrelay: {stats:?}\nserver: {:?}",
        server.log()
    );
    assert!(
        stats.to_server.lost > 0 && stats.to_client.lost > 0,
        "{stats:?}"
    );
}

/// The harness's sink path: a Go client against a Go sink-server that exits
/// after one session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_go_client_go_sink_server() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let flags = ["--crypt", "salsa20", "--nodelay", "fast3"];
    let mut server_flags = flags.to_vec();
    server_flags.extend(["--max-sessions", "1", "--idle", "1s"]);
    let server = GoServer::spawn(&bin, "sink-server", &server_flags).await;
    let mut client = args(&flags);
    client.extend(args(&[
        "--addr",
        &server.addr().to_string(),
        "--sink",
        "--bytes",
        "300000",
        "--sndwnd",
        "256",
        "--rcvwnd",
        "256",
    ]));
    let run = gopeer::run_client(&bin, &client, CLIENT_TIMEOUT).await;
    assert!(run.passed(), "{run:?}\nserver: {:?}", server.log());
    let log = server.log();
    let status = server.wait(Duration::from_secs(20)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "sink-server did not end cleanly: {status:?} {log:?}"
    );
}
