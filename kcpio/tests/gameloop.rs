//! `kcpio/examples/gameloop.rs` (a `Conn` driven by a plain loop over a
//! `std::net::UdpSocket`, no tokio) against the kcp-go echo server of
//! `testkit/interop/kcpgo-peer`: aes-128 with FEC 10/3, and plain.
//!
//! Without Go the test prints `SKIPPED: ...` and passes;
//! `KCPIO_REQUIRE_GO=1` makes that a failure.

#[path = "../examples/gameloop.rs"]
mod gameloop;
use kcpio_testkit as support;

use std::time::Duration;

use support::gopeer::{self, GoServer};

/// The game loop talks to a kcp-go echo server with `crypt` and `fec`;
/// every message comes back, in order.
async fn against_kcpgo(crypt: &str, fec: (usize, usize)) {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let flags = gopeer::fast3_stream_flags(crypt, fec);
    let server = GoServer::spawn(&bin, "echo-server", &flags).await;
    let opts = gameloop::Options {
        addr: server.addr().to_string(),
        crypt: crypt.into(),
        fec,
        messages: 50,
        // Bigger than one segment, so the echo crosses the ARQ in pieces.
        size: 3000,
        tick: Duration::from_millis(5),
        timeout: Duration::from_secs(20),
        quiet: true,
        ..gameloop::Options::default()
    };
    let run = tokio::task::spawn_blocking(move || gameloop::run(&opts).map_err(|e| e.to_string()))
        .await
        .expect("the game loop panicked");
    let summary = run.unwrap_or_else(|e| panic!("{crypt} fec {fec:?}: {e}; {:?}", server.log()));
    assert_eq!(summary.rtts.len(), 50);
    assert!(summary.datagrams_in > 0 && summary.datagrams_out > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gameloop_aes128_fec_against_kcpgo() {
    against_kcpgo("aes-128", (10, 3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gameloop_plain_against_kcpgo() {
    against_kcpgo("null", (0, 0)).await;
}
