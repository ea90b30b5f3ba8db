//! Interop with kcp-go v5.6.72 through the repository's Go peer
//! (`testkit/interop/kcpgo-peer`).
//!
//! Without Go these tests print `SKIPPED: ...` and pass; `KCPIO_REQUIRE_GO=1`
//! (set by `.ci/run`) makes a missing Go a failure.

use kcpio_testkit as support;

use std::net::SocketAddr;
use std::time::Duration;

use kcpio::{Config, ConfigBuilder, Key, Method, Preset};
use support::gopeer::{self, GoServer, args};
use support::kcp;
use support::relay::{LinkConfig, Relay, RelayConfig, RelayStats};

const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The harness itself: a Go client against a Go echo server, directly and
/// through the lossy relay. If these fail, the Rust cases below mean nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_go_client_go_echo_server() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    // aes-128, 10/3, fast3, stream mode, 256/256 windows.
    let flags = go_flags("aes-128", (10, 3));
    let server = GoServer::spawn(&bin, "echo-server", &flags).await;

    let mut direct = flags.clone();
    direct.extend(to_addr(server.addr(), &["--bytes", "300000"]));
    let run = gopeer::run_client(&bin, &direct, CLIENT_TIMEOUT).await;
    assert!(run.passed(), "direct: {run:?}\nserver: {:?}", server.log());
    assert_eq!(run.number("bytes_verified"), Some(300_000.0));

    let relay = Relay::start(
        server.addr(),
        RelayConfig::symmetric(5, LinkConfig::lossy(0.05)),
    )
    .await
    .unwrap();
    let mut relayed = flags.clone();
    relayed.extend(to_addr(relay.local_addr(), &["--bytes", "300000"]));
    let run = gopeer::run_client(&bin, &relayed, CLIENT_TIMEOUT).await;
    let stats = relay.stats();
    assert!(
        run.passed(),
        "relayed: {run:?}\nrelay: {stats:?}\nserver: {:?}",
        server.log()
    );
    assert_lost_both_ways(&stats);
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
    client.extend(to_addr(
        server.addr(),
        &[
            "--sink", "--bytes", "300000", "--sndwnd", "256", "--rcvwnd", "256",
        ],
    ));
    let run = gopeer::run_client(&bin, &client, CLIENT_TIMEOUT).await;
    assert!(run.passed(), "{run:?}\nserver: {:?}", server.log());
    let log = server.log();
    let status = server.wait(Duration::from_secs(20)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "sink-server did not end cleanly: {status:?} {log:?}"
    );
}

// ---------------------------------------------------------------------------
// kcpio against kcp-go
// ---------------------------------------------------------------------------

/// The ciphers of the matrix `cargo test` runs (the release-mode matrix over
/// every kcp-go cipher is run by hand with the peer example).
const CIPHERS: &[&str] = &[
    "null",
    "none",
    "aes-128",
    "salsa20",
    "3des",
    "sm4",
    "aes-128-gcm",
];
/// FEC off and 10/3.
const FEC: &[(usize, usize)] = &[(0, 0), (10, 3)];
/// Bytes per case: a few hundred KB.
const CASE_BYTES: u64 = 300_000;
/// Windows of the matrix runs (kcp-go's default 32 is slow for nothing).
const WND: u16 = 256;
/// The kcptun default passphrase, which the Go peer also defaults to.
const PASSPHRASE: &str = "it's a secrect";

/// The kcpio side of a case: fast3, stream mode, the cipher and FEC shape.
fn rust_config(cipher: &str, fec: (usize, usize)) -> Config {
    rust_builder(cipher, fec, true)
        .build()
        .expect("valid config")
}

/// fast3, `WND` windows, the cipher with `PASSPHRASE`, stream or message
/// mode, and FEC unless `fec.0` is 0.
fn rust_builder(cipher: &str, fec: (usize, usize), stream: bool) -> ConfigBuilder {
    let method = Method::from_name(cipher).unwrap_or_else(|| panic!("unknown cipher {cipher}"));
    let mut b = Config::builder()
        .preset(Preset::Fast3)
        .stream(stream)
        .window(WND, WND)
        .crypto(method, Key::passphrase(PASSPHRASE));
    if fec.0 > 0 {
        b = b.fec(fec.0, fec.1);
    }
    b
}

/// `--addr <addr>` followed by `rest`, for a Go client's flags.
fn to_addr(addr: SocketAddr, rest: &[&str]) -> Vec<String> {
    let mut v = args(&["--addr", &addr.to_string()]);
    v.extend(args(rest));
    v
}

/// Fails unless the relay dropped datagrams in both directions (so the run
/// really went through loss).
fn assert_lost_both_ways(stats: &RelayStats) {
    assert!(
        stats.to_server.lost > 0 && stats.to_client.lost > 0,
        "{stats:?}"
    );
}

/// Fails with every line of `failures`, if any.
fn assert_no_failures(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The Go side of a case, as flags.
fn go_flags(cipher: &str, fec: (usize, usize)) -> Vec<String> {
    let mut v = gopeer::fast3_stream_flags(cipher, fec);
    v.extend(args(&[
        "--sndwnd",
        &WND.to_string(),
        "--rcvwnd",
        &WND.to_string(),
    ]));
    v
}

fn cases() -> Vec<(&'static str, (usize, usize))> {
    CIPHERS
        .iter()
        .flat_map(|c| FEC.iter().map(move |f| (*c, *f)))
        .collect()
}

/// Rust client → Go echo server, every cipher × FEC case at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_client_go_echo_server() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let mut runs = Vec::new();
    for (cipher, fec) in cases() {
        let bin = bin.clone();
        runs.push(tokio::spawn(async move {
            let server = GoServer::spawn(&bin, "echo-server", &go_flags(cipher, fec)).await;
            let config = rust_config(cipher, fec);
            let res = kcp::echo_client(
                server.addr(),
                &config,
                CASE_BYTES,
                32 * 1024,
                CLIENT_TIMEOUT,
            )
            .await;
            (cipher, fec, res.map(|_| ()), server.log())
        }));
    }
    let mut failures = Vec::new();
    for run in runs {
        let (cipher, fec, res, log) = run.await.unwrap();
        if let Err(e) = res {
            failures.push(format!("{cipher} fec {fec:?}: {e}; server log {log:?}"));
        }
    }
    assert_no_failures(&failures);
}

/// Go client → Rust echo server, every cipher × FEC case at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_client_rust_echo_server() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let mut runs = Vec::new();
    for (cipher, fec) in cases() {
        let bin = bin.clone();
        runs.push(tokio::spawn(async move {
            let server = kcp::EchoServer::start(&rust_config(cipher, fec)).await;
            let mut flags = go_flags(cipher, fec);
            flags.extend(to_addr(
                server.addr(),
                &["--bytes", &CASE_BYTES.to_string()],
            ));
            let run = gopeer::run_client(&bin, &flags, CLIENT_TIMEOUT).await;
            drop(server);
            (cipher, fec, run)
        }));
    }
    let mut failures = Vec::new();
    for run in runs {
        let (cipher, fec, run) = run.await.unwrap();
        if !run.passed() || run.number("bytes_verified") != Some(CASE_BYTES as f64) {
            failures.push(format!("{cipher} fec {fec:?}: {run:?}"));
        }
    }
    assert_no_failures(&failures);
}

/// Rust client → Go sink-server: the Go side verifies the pattern and reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_client_go_sink_server() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let cipher = "aes-128";
    let mut flags = go_flags(cipher, (10, 3));
    flags.extend(args(&["--max-sessions", "1", "--idle", "1s"]));
    let server = GoServer::spawn(&bin, "sink-server", &flags).await;
    let bytes = 1_000_000;
    let res = kcp::sink_client(
        server.addr(),
        &rust_config(cipher, (10, 3)),
        bytes,
        CLIENT_TIMEOUT,
    )
    .await;
    res.unwrap_or_else(|e| panic!("{e}; server log {:?}", server.log()));
    // The sink ends its session after 1 s of silence and exits 0 only if the
    // whole pattern verified.
    let log = server.log();
    let status = server.wait(Duration::from_secs(20)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?} {log:?}");
}

/// Both directions through the relay at 5% loss each way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_through_lossy_relay() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let cipher = "salsa20";
    let fec = (10, 3);
    let link = LinkConfig {
        loss: 0.05,
        ..LinkConfig::default()
    };

    // Rust client → relay → Go echo server.
    let go_server = GoServer::spawn(&bin, "echo-server", &go_flags(cipher, fec)).await;
    let relay = Relay::start(go_server.addr(), RelayConfig::symmetric(11, link.clone()))
        .await
        .unwrap();
    let res = kcp::echo_client(
        relay.local_addr(),
        &rust_config(cipher, fec),
        CASE_BYTES,
        32 * 1024,
        CLIENT_TIMEOUT,
    )
    .await
    .map(|_| ());
    let stats = relay.stats();
    assert!(res.is_ok(), "{res:?} relay {stats:?}");
    assert_lost_both_ways(&stats);

    // Go client → relay → Rust echo server.
    let rust_server = kcp::EchoServer::start(&rust_config(cipher, fec)).await;
    let relay = Relay::start(rust_server.addr(), RelayConfig::symmetric(12, link))
        .await
        .unwrap();
    let mut flags = go_flags(cipher, fec);
    flags.extend(to_addr(
        relay.local_addr(),
        &["--bytes", &CASE_BYTES.to_string()],
    ));
    let run = gopeer::run_client(&bin, &flags, CLIENT_TIMEOUT).await;
    let stats = relay.stats();
    assert!(run.passed(), "{run:?} relay {stats:?}");
    assert_lost_both_ways(&stats);
}

/// Settings the two ends need not share: FEC on one side only (kcp-go's
/// decoder adapts, and so must ours), message mode instead of stream mode,
/// a kcptun-style 1350 MTU, a fixed conv, and the write-delay/ack-nodelay
/// switches. Both directions, all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_mixed_settings() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    struct Mixed {
        name: &'static str,
        rust_fec: (usize, usize),
        go_fec: (usize, usize),
        stream: bool,
        extra: &'static [&'static str],
    }
    let cases = [
        Mixed {
            name: "fec only on kcpio",
            rust_fec: (10, 3),
            go_fec: (0, 0),
            stream: true,
            extra: &[],
        },
        Mixed {
            name: "fec only on kcp-go",
            rust_fec: (0, 0),
            go_fec: (10, 3),
            stream: true,
            extra: &[],
        },
        Mixed {
            name: "different fec shapes",
            rust_fec: (3, 2),
            go_fec: (10, 3),
            stream: true,
            extra: &[],
        },
        Mixed {
            name: "message mode, mtu 1350, conv, writedelay, acknodelay",
            rust_fec: (0, 0),
            go_fec: (0, 0),
            stream: false,
            extra: &[
                "--mtu",
                "1350",
                "--conv",
                "305419896",
                "--writedelay",
                "--acknodelay",
                "--chunk",
                "1000",
            ],
        },
    ];
    let cipher = "aes-128-gcm";
    let mut runs = Vec::new();
    for case in cases {
        let bin = bin.clone();
        runs.push(tokio::spawn(async move {
            let mut b = rust_builder(cipher, case.rust_fec, case.stream);
            if !case.extra.is_empty() {
                b = b.mtu(1350).write_delay(true).ack_nodelay(true);
            }
            let config = b.build().unwrap();
            let mut flags = go_flags(cipher, case.go_fec);
            if !case.stream {
                flags.retain(|f| f != "--stream");
            }
            flags.extend(args(case.extra));
            let mut failures = Vec::new();

            // kcpio client → kcp-go server.
            let server = GoServer::spawn(&bin, "echo-server", &flags).await;
            let res =
                kcp::echo_client(server.addr(), &config, CASE_BYTES, 1000, CLIENT_TIMEOUT).await;
            if let Err(e) = res {
                failures.push(format!(
                    "{} (kcpio client): {e}; log {:?}",
                    case.name,
                    server.log()
                ));
            }
            drop(server);

            // kcp-go client → kcpio server.
            let server = kcp::EchoServer::start(&config).await;
            flags.extend(to_addr(
                server.addr(),
                &["--bytes", &CASE_BYTES.to_string()],
            ));
            let run = gopeer::run_client(&bin, &flags, CLIENT_TIMEOUT).await;
            if !run.passed() {
                failures.push(format!("{} (kcp-go client): {run:?}", case.name));
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for run in runs {
        failures.extend(run.await.unwrap());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The negative control: with different keys nothing gets through, and both
/// harness directions report the failure (so a pass above means something).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_wrong_key_fails_both_ways() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let cipher = "aes-128";
    let wrong = Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .crypto(Method::Aes128, Key::passphrase("not the secret"))
        .build()
        .unwrap();
    let flags = go_flags(cipher, (0, 0));
    let short = Duration::from_secs(2);

    let go_server = GoServer::spawn(&bin, "echo-server", &flags).await;
    let rust_side = kcp::echo_client(go_server.addr(), &wrong, 10_000, 1000, short);

    let rust_server = kcp::EchoServer::start(&wrong).await;
    let mut client = flags.clone();
    client.extend(to_addr(
        rust_server.addr(),
        &["--bytes", "10000", "--timeout", "2s"],
    ));
    let go_side = gopeer::run_client(&bin, &client, CLIENT_TIMEOUT);

    let (rust_res, go_run) = tokio::join!(rust_side, go_side);
    assert!(
        rust_res.is_err(),
        "a kcpio client with the wrong key passed"
    );
    assert!(
        !go_run.passed(),
        "a kcp-go client with the wrong key passed: {go_run:?}"
    );
    assert_eq!(go_run.code, Some(1), "{go_run:?}");
}

/// kcp-go client → kcpio sink server (the in-process sink speaks the Go
/// sink-server's report protocol, which the Go client checks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_client_rust_sink_server() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let cipher = "sm4";
    let server = kcp::SinkServer::start(&rust_config(cipher, (10, 3))).await;
    let mut flags = go_flags(cipher, (10, 3));
    flags.extend(to_addr(server.addr(), &["--sink", "--bytes", "1000000"]));
    let run = gopeer::run_client(&bin, &flags, CLIENT_TIMEOUT).await;
    assert!(run.passed(), "{run:?}");
    assert_eq!(run.number("bytes_verified"), Some(1_000_000.0), "{run:?}");
}

/// Many kcp-go sessions at once on one kcpio listener, each a closed-loop
/// ping-pong of framed messages (the Go peer's `--messages` mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_pingpong_sessions_on_one_rust_listener() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let server = kcp::EchoServer::start(&rust_config("aes-128", (0, 0))).await;
    let mut flags = go_flags("aes-128", (0, 0));
    flags.extend(to_addr(
        server.addr(),
        &["--parallel", "50", "--messages", "32", "--size", "100"],
    ));
    let run = gopeer::run_client(&bin, &flags, CLIENT_TIMEOUT).await;
    assert!(run.passed(), "{run:?}");
    assert_eq!(run.number("received"), Some(50.0 * 32.0), "{run:?}");
    assert_eq!(run.number("lost"), Some(0.0), "{run:?}");
}

/// What [`offer_resent_to`] saw.
#[derive(Debug)]
struct Resent {
    stats: kcpio::SessionStats,
    /// Its lone probes sent (tagged WASKs alone, without the FEC header).
    resends: u64,
    /// Stream bytes echoed back.
    echoed: usize,
}

/// A sans-IO client with the adaptive stream FEC on (so it offers, 0xD4)
/// and FEC 10/3, over a real socket to `addr`: its connect probe is lost,
/// and so is its first FEC group's parity (so the probe cannot be
/// rebuilt); it writes 1,000 bytes every 50 ms from 20 ms on, 20 times,
/// and reads the echo for 1.5 s.
fn offer_resent_to(addr: SocketAddr) -> Resent {
    offer_sent_to(addr, true, 0)
}

/// As [`offer_resent_to`]; `probe` off: no connect probe (its first write
/// is the client's first datagram, as with `connect_probe(false)`), and
/// nothing lost but its first `lose_lone` lone probes.
fn offer_sent_to(addr: SocketAddr, probe: bool, lose_lone: u64) -> Resent {
    use std::time::Instant;
    let config = rust_builder("aes-128", (10, 3), true)
        .adaptive_fec(true)
        .build()
        .unwrap();
    let crypto = config.packet_crypto();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(2)))
        .unwrap();
    let mut conn = kcpio::Conn::new(0x0ffe_12ed, &config).unwrap();
    let start = Instant::now();
    if probe {
        conn.connect(start.elapsed());
    }
    let (mut slot, mut rx, mut buf) = (vec![0u8; 1500], vec![0u8; 2048], vec![0u8; 4096]);
    let (mut sent, mut parity_lost, mut nonce) = (0u64, 0, 0u64);
    let (mut resends, mut echoed, mut wrote) = (0, 0, 0u64);
    while start.elapsed() < Duration::from_millis(1_500) {
        let t = start.elapsed();
        if wrote < 20 && t >= Duration::from_millis(20 + 50 * wrote) {
            conn.write(&[0x5a; 1_000]).expect("room");
            wrote += 1;
        }
        conn.handle_timeout(t);
        while let Some(tx) = conn.poll_transmit(t, &mut slot) {
            sent += 1;
            let h = conn.header_len();
            let plain = &slot[h..h + tx.len];
            let lone = plain.len() == 24 && plain[4] == 83;
            if probe && (sent == 1 || (tx.parity && parity_lost < 3)) {
                parity_lost += u64::from(tx.parity);
                continue;
            }
            if lone {
                assert_eq!(plain[5], 0xD4, "an untagged lone probe");
                assert!(probe || sent > 1, "the offer before the first datagram");
                resends += 1;
                if resends <= lose_lone {
                    continue;
                }
            }
            nonce += 1;
            let mut iv = [0u8; 16];
            iv[..8].copy_from_slice(&nonce.to_le_bytes());
            let n = crypto
                .seal(&mut slot, tx.len, &iv[..crypto.nonce_len()])
                .unwrap();
            sock.send(&slot[..n]).unwrap();
        }
        if let Ok(n) = sock.recv(&mut rx)
            && let Ok(r) = crypto.open(&mut rx[..n])
        {
            let _ = conn.handle_packet(start.elapsed(), &rx[r]);
        }
        while let Ok(k) = conn.read(&mut buf)
            && k > 0
        {
            echoed += k;
        }
    }
    Resent {
        stats: conn.stats(),
        resends,
        echoed,
    }
}

/// The offer's resend, a tagged WASK alone and without the FEC header
/// (outside kcp-go's FEC stream), reaches the real kcp-go with FEC on:
/// its `kcpInput` hands it to KCP, which answers with a WINS (untagged:
/// it does not speak the offer), and that ends the resends; the stream is
/// echoed whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcpgo_answers_the_offer_resent_outside_its_fec_stream() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    let mut flags = go_flags("aes-128", (10, 3));
    flags.extend(args(&["--max-sessions", "1", "--idle", "4s"]));
    let server = GoServer::spawn(&bin, "echo-server", &flags).await;
    let addr = server.addr();
    let r = tokio::task::spawn_blocking(move || offer_resent_to(addr))
        .await
        .unwrap();
    println!(
        "resends {}, WINS in {}, echoed {}",
        r.resends, r.stats.arq.wins_in, r.echoed
    );
    assert_eq!(r.resends, 1, "{r:?}\nserver: {:?}", server.log());
    assert_eq!(r.stats.arq.wins_in, 1, "{r:?}");
    // The connect probe's; the resend touches no ARQ state.
    assert_eq!(r.stats.arq.wask_out, 1, "{r:?}");
    assert_eq!(r.echoed, 20_000, "{r:?}\nserver: {:?}", server.log());
    assert_eq!(r.stats.input_errors, 0, "{r:?}");
}

/// A client without the connect probe sends its offer alone, right after
/// its first datagram, outside kcp-go's FEC stream: the real kcp-go takes
/// it as any KCP packet and answers with one WINS (untagged), which ends
/// it; when that first one is lost, the resend 250 ms later is answered.
/// The stream is echoed whole either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcpgo_answers_the_offer_of_a_client_without_the_connect_probe() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    for lose_lone in [0, 1] {
        let mut flags = go_flags("aes-128", (10, 3));
        flags.extend(args(&["--max-sessions", "1", "--idle", "4s"]));
        let server = GoServer::spawn(&bin, "echo-server", &flags).await;
        let addr = server.addr();
        let r = tokio::task::spawn_blocking(move || offer_sent_to(addr, false, lose_lone))
            .await
            .unwrap();
        println!(
            "first lost {lose_lone}: lone probes {}, WINS in {}, echoed {}",
            r.resends, r.stats.arq.wins_in, r.echoed
        );
        assert_eq!(
            r.resends,
            1 + lose_lone,
            "{r:?}\nserver: {:?}",
            server.log()
        );
        assert_eq!(r.stats.arq.wins_in, 1, "{r:?}");
        // The lone probes touch no ARQ state: no WASK of the ARQ's own.
        assert_eq!(r.stats.arq.wask_out, 0, "{r:?}");
        assert_eq!(r.echoed, 20_000, "{r:?}\nserver: {:?}", server.log());
        assert_eq!(r.stats.input_errors, 0, "{r:?}");
    }
}
