//! What an operator meets: the command line (`--version`, `--help`, usage
//! errors), the `-c` file, the shipped example configs and man page, the
//! log (`--quiet`, `--snmpperiod`, one line per lost session), a Unix
//! socket target, `-r` resolved per session, port ranges, wrong keys
//! counted, and every byte of a write-then-close target through loss.
//!
//! kcpio on both ends, in-process unless the binary itself is the subject;
//! loopback only; every test bounded by a timeout.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use kcpio_testkit::relay::{LinkConfig, Relay, RelayConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use kcpio_tunnel as tunnel;

const TEST_TIMEOUT: Duration = Duration::from_secs(120);
const BIN: &str = env!("CARGO_BIN_EXE_kcpio-tunnel");

/// The shared payload pattern, from an offset of its own per `seed`.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut v = vec![0u8; len];
    kcpio_testkit::pattern::fill(&mut v, u64::from(seed) * 1_000_003);
    v
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

/// A per-test scratch path.
fn scratch(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("kcpio-operator-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// Starts a tunnel end in-process, logging to `log` ("" for stderr).
async fn start(cmd: &str, log: &str) -> SocketAddr {
    let settings = tunnel::parse(words(cmd)).unwrap();
    let quiet = settings.quiet;
    let bound = tunnel::Bound::bind(settings).await.unwrap();
    let addr = bound.local_addr().unwrap();
    tokio::spawn(bound.run(tunnel::Log::open(log, quiet).unwrap()));
    addr
}

/// A TCP server that echoes each connection until EOF, then closes.
async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Sends `data` through `entry`, half-closes, returns what comes back.
async fn round_trip(entry: SocketAddr, data: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(entry).await.unwrap();
    c.write_all(data).await.unwrap();
    c.shutdown().await.unwrap();
    let mut back = Vec::new();
    c.read_to_end(&mut back).await.unwrap();
    back
}

/// Waits until the file at `path` contains `want`; returns its text.
async fn wait_for_log(path: &Path, want: &str, within: Duration) -> String {
    let end = tokio::time::Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(want) || tokio::time::Instant::now() > end {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `n` consecutive free UDP ports on loopback.
fn free_udp_range(n: u16) -> u16 {
    for _ in 0..200 {
        let base = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if base > 65_000 {
            continue;
        }
        if (0..n).all(|i| UdpSocket::bind(("127.0.0.1", base + i)).is_ok()) {
            return base;
        }
    }
    panic!("no {n} consecutive free UDP ports");
}

// ---------------------------------------------------------------- command line

#[test]
fn version_and_help_go_to_stdout_and_exit_0() {
    for args in [
        &["--version"][..],
        &["-v"],
        &["-V"],
        &["client", "-v"],
        &["server", "--version"],
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("kcpio-tunnel")
                && text.ends_with(
                    " 0.1.0\n"
                        .replace("0.1.0", env!("CARGO_PKG_VERSION"))
                        .as_str()
                ),
            "{args:?}: {text:?}"
        );
        assert!(out.stderr.is_empty(), "{args:?}");
    }
    for args in [&["--help"][..], &["client", "--help"], &["server", "-h"]] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: kcpio-tunnel"));
    }
}

/// Usage errors exit 2, name the flag (or key) at fault, end with a newline.
#[test]
fn usage_errors_name_the_flag_and_exit_2() {
    let json = scratch("bad.json");
    std::fs::write(&json, r#"{"mode": "fastest"}"#).unwrap();
    let json_arg = json.display().to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["client", "--mode", "fastest"], "--mode"),
        (&["client", "--crypt", "rot13"], "--crypt"),
        (&["client", "--smuxver", "3"], "--smuxver"),
        (&["client", "--conn", "0"], "--conn"),
        (&["client", "--keepalive", "0"], "--keepalive"),
        (&["client", "--framesize", "70000"], "--framesize"),
        (&["client", "--mtu", "20"], "--mtu"),
        (&["client", "-r", "127.0.0.1:9-1"], "--remoteaddr"),
        (&["client", "-r", "127.0.0.1"], "--remoteaddr"),
        (&["server", "-l", "127.0.0.1:x"], "--listen"),
        (&["client", "--congestion", "cubic"], "--congestion"),
        (&["client", "--bogus"], "--bogus"),
        (&["client", "-c", &json_arg], "mode"),
    ];
    for (args, flag) in cases {
        let out = Command::new(BIN)
            .args(*args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: no {flag} in {err:?}");
        assert!(err.ends_with('\n'), "{args:?}: {err:?}");
    }
    let out = Command::new(BIN)
        .args(["client", "-c", &json_arg])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("normal, fast, fast2, fast3 or manual"),
        "{err}"
    );
    std::fs::remove_file(&json).unwrap();
}

#[test]
fn congestion_bbr_with_model_as_alias() {
    for name in ["bbr", "model"] {
        let s = tunnel::parse(words(&format!("t client --congestion {name}"))).unwrap();
        assert!(s.summary.contains("congestion: bbr"), "{}", s.summary);
    }
    let s = tunnel::parse(words("t client --congestion none")).unwrap();
    assert!(s.summary.contains("congestion: none"));
}

#[test]
fn json_refuses_unknown_keys_by_name() {
    let path = scratch("qpp.json");
    std::fs::write(&path, r#"{"key": "k", "QPP": true}"#).unwrap();
    let e = tunnel::parse(words(&format!("t server -c {}", path.display()))).unwrap_err();
    assert!(e.contains("QPP"), "{e}");
    std::fs::remove_file(&path).unwrap();
}

/// The server's limits have `-c` keys named as their flags, which
/// override the flags as kcptun's keys do.
#[test]
fn json_sets_the_server_limits() {
    let path = scratch("limits.json");
    std::fs::write(
        &path,
        r#"{"maxstreams": 300, "sessionstreams": 100, "maxdials": 8, "dialtimeout": 3}"#,
    )
    .unwrap();
    let s = tunnel::parse(words(&format!(
        "t server --maxstreams 9 --maxdials 2 -c {}",
        path.display()
    )))
    .unwrap();
    let l = s.limits;
    assert_eq!(
        (
            l.max_streams,
            l.session_streams,
            l.max_dials,
            l.session_dials
        ),
        (300, 100, 8, 4)
    );
    assert_eq!(l.dial_timeout, Duration::from_secs(3));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn startup_summary_lists_what_is_used() {
    let s = tunnel::parse(words(
        "t client -l 127.0.0.1:5 -r 127.0.0.1:6 --mode fast2 --sockbuf 1000000 --dscp 46",
    ))
    .unwrap();
    for want in [
        "localaddr: 127.0.0.1:5",
        "remoteaddr: 127.0.0.1:6",
        "nodelay: 1, interval: 20, resend: 2, nc: 1",
        "sndwnd: 128, rcvwnd: 512",
        "mtu: 1350",
        "keepalive: 10",
        "sockbuf: 1000000",
        "dscp: 46",
        "encryption: aes",
        "datashard: 10, parityshard: 3",
        "smuxver: 1",
        "congestion: bbr",
    ] {
        assert!(s.summary.contains(want), "no {want:?} in {}", s.summary);
    }
    let s = tunnel::parse(words(
        "t server -t /run/app.sock --mode manual --nodelay 1 --interval 15 --resend 3 --nc 1",
    ))
    .unwrap();
    assert!(s.summary.contains("target: /run/app.sock"), "{}", s.summary);
    assert!(
        s.summary
            .contains("nodelay: 1, interval: 15, resend: 3, nc: 1")
    );
}

#[test]
fn snmpperiod_zero_turns_periodic_stats_off() {
    let s = tunnel::parse(words("t client --snmpperiod 0")).unwrap();
    assert_eq!(s.stats_period, Duration::ZERO);
}

/// The shipped example configs parse with the real loader (they cannot rot).
#[test]
fn shipped_configs_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist");
    let c = tunnel::parse(words(&format!(
        "kcpio-tunnel client -c {}",
        dir.join("client.json").display()
    )))
    .unwrap();
    assert_eq!(c.role, tunnel::Role::Client);
    let s = tunnel::parse(words(&format!(
        "kcpio-tunnel server -c {}",
        dir.join("server.json").display()
    )))
    .unwrap();
    assert_eq!(s.role, tunnel::Role::Server);
    for (role, file) in [("client", "client-udp.json"), ("server", "server-udp.json")] {
        let u = tunnel::parse(words(&format!(
            "kcpio-tunnel {role} -c {}",
            dir.join(file).display()
        )))
        .unwrap();
        assert!(u.udp.enabled, "{file}");
        assert_eq!((u.udp.flows, u.udp.idle.as_secs()), (1024, 180), "{file}");
        assert_eq!(u.udp.deadline, Duration::from_millis(15), "{file}");
    }
    for (role, file, addr) in [
        ("client", "client-tcp-udp.json", "127.0.0.1:51821"),
        ("server", "server-tcp-udp.json", "127.0.0.1:51820"),
    ] {
        let u = tunnel::parse(words(&format!(
            "kcpio-tunnel {role} -c {}",
            dir.join(file).display()
        )))
        .unwrap();
        assert!(!u.udp.enabled, "{file}: TCP as well");
        assert_eq!(u.udp_beside.as_deref(), Some(addr), "{file}");
        assert_eq!((u.udp.flows, u.udp.idle.as_secs()), (1024, 180), "{file}");
    }
    for unit in ["kcpio-tunnel-client.service", "kcpio-tunnel-server.service"] {
        let text = std::fs::read_to_string(dir.join(unit)).unwrap();
        assert!(text.contains("/etc/kcpio-tunnel/"), "{unit}");
        assert!(text.contains("DynamicUser=yes"), "{unit}");
    }
}

/// The checked-in man page is the one the clap definition generates
/// (`KCPIO_BLESS=1` rewrites it).
#[test]
fn man_page_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("kcpio-tunnel.1");
    let page = tunnel::man_page().unwrap();
    if std::env::var("KCPIO_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &page).unwrap();
    }
    let shipped = std::fs::read(&path).unwrap_or_default();
    assert!(
        shipped == page,
        "kcpio-tunnel.1 is stale: KCPIO_BLESS=1 cargo test -p kcpio-tunnel --test operator man_page"
    );
    let text = String::from_utf8_lossy(&page);
    for want in [
        "CLIENT OPTIONS",
        "SERVER OPTIONS",
        "remoteaddr",
        "snmpperiod",
    ] {
        assert!(text.contains(want), "{want}");
    }
    let out = Command::new(BIN).arg("man").output().unwrap();
    assert_eq!(out.stdout, page);
}

// ---------------------------------------------------------------- tunnels

/// A server target that is a Unix socket path (kcptun serves it).
#[cfg(unix)]
#[tokio::test]
async fn unix_socket_target() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sock = scratch("target.sock");
        let l = tokio::net::UnixListener::bind(&sock).unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = c.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let server = start(
            &format!("t server -l 127.0.0.1:0 -t {} --quiet", sock.display()),
            "",
        )
        .await;
        let entry = start(&format!("t client -l 127.0.0.1:0 -r {server} --quiet"), "").await;
        let data = pattern(100_000, 3);
        assert!(round_trip(entry, &data).await == data);
        let _ = std::fs::remove_file(&sock);
    })
    .await
    .expect("timed out");
}

/// `-r` is resolved per session, not once at startup: a name that does not
/// resolve neither stops the client from starting nor kills it; the
/// failure is logged and retried.
#[tokio::test]
async fn remote_name_resolved_per_session_and_retried() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let log = scratch("dns.log");
        let entry = start(
            "t client -l 127.0.0.1:0 -r no-such-host.invalid:29900 --quiet",
            log.to_str().unwrap(),
        )
        .await;
        let _c = TcpStream::connect(entry).await.unwrap();
        let text = wait_for_log(&log, "re-connecting", Duration::from_secs(20)).await;
        assert!(
            text.contains("re-connecting: --remoteaddr no-such-host.invalid:29900"),
            "{text}"
        );
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.matches("re-connecting").count() >= 2,
            "not retried:\n{text}"
        );
        // Still serving: a second connection is accepted.
        TcpStream::connect(entry).await.unwrap();
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// kcptun's multi-port form: the server listens on every port of
/// `-l IP:min-max`; the client dials a random port of `-r IP:min-max` per
/// session.
#[tokio::test]
async fn port_ranges() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let target = echo_server().await;
        let base = free_udp_range(3);
        let range = format!("127.0.0.1:{base}-{}", base + 2);
        start(&format!("t server -l {range} -t {target} --quiet"), "").await;
        for p in base..base + 3 {
            assert!(
                UdpSocket::bind(("127.0.0.1", p)).is_err(),
                "port {p} not listened on"
            );
        }
        let entry = start(
            &format!("t client -l 127.0.0.1:0 -r {range} --conn 8 --quiet"),
            "",
        )
        .await;
        let data = pattern(50_000, 4);
        for _ in 0..8 {
            assert!(round_trip(entry, &data).await == data);
        }
    })
    .await
    .expect("timed out");
}

/// An idle tunnel writes no stats line; activity does; `--snmpperiod 0`
/// writes none at all.
#[tokio::test]
async fn stats_only_when_something_changed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let target = echo_server().await;
        let log = scratch("stats.log");
        let log0 = scratch("stats0.log");
        let server = start(
            &format!("t server -l 127.0.0.1:0 -t {target} --quiet --snmpperiod 1"),
            log.to_str().unwrap(),
        )
        .await;
        let entry = start(
            &format!("t client -l 127.0.0.1:0 -r {server} --quiet --snmpperiod 0"),
            log0.to_str().unwrap(),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let idle = std::fs::read_to_string(&log).unwrap();
        assert!(
            !idle.contains("stats:"),
            "idle server logged stats:\n{idle}"
        );
        let data = pattern(10_000, 5);
        assert!(round_trip(entry, &data).await == data);
        let text = wait_for_log(&log, "stats:", Duration::from_secs(5)).await;
        assert!(text.contains("stats:"), "no stats after traffic:\n{text}");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = std::fs::read_to_string(&log)
            .unwrap()
            .matches("stats:")
            .count();
        tokio::time::sleep(Duration::from_millis(3000)).await;
        let after = std::fs::read_to_string(&log)
            .unwrap()
            .matches("stats:")
            .count();
        assert_eq!(before, after, "an idle tunnel kept logging stats");
        let off = std::fs::read_to_string(&log0).unwrap();
        assert!(!off.contains("stats:"), "--snmpperiod 0 logged:\n{off}");
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&log0);
    })
    .await
    .expect("timed out");
}

/// The server counts datagrams from clients with a wrong key in its stats
/// line.
#[tokio::test]
async fn server_counts_wrong_keys() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let target = echo_server().await;
        let log = scratch("badkey.log");
        let server = start(
            &format!("t server -l 127.0.0.1:0 -t {target} --key right --snmpperiod 1"),
            log.to_str().unwrap(),
        )
        .await;
        let entry = start(
            &format!("t client -l 127.0.0.1:0 -r {server} --key wrong --quiet"),
            "",
        )
        .await;
        let mut c = TcpStream::connect(entry).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        let text = wait_for_log(&log, "wrong --key/--crypt) ", Duration::from_secs(10)).await;
        let n: u64 = text
            .lines()
            .filter_map(|l| l.rsplit_once("wrong --key/--crypt) "))
            .filter_map(|(_, n)| n.trim().parse().ok())
            .max()
            .unwrap_or(0);
        assert!(n > 0, "no undecryptable datagrams counted:\n{text}");
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// When the server goes away, the client logs one line for the session,
/// not one per stream it carried (with `--quiet`: the streams' own close
/// lines are what `--quiet` drops).
#[tokio::test]
async fn server_gone_is_one_line_per_session() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let target = echo_server().await;
        let port = free_udp_range(1);
        let mut server = Command::new(BIN)
            .args(words(&format!(
                "server -l 127.0.0.1:{port} -t {target} --quiet --key k"
            )))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..100 {
            if UdpSocket::bind(("127.0.0.1", port)).is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = scratch("gone.log");
        let entry = start(
            &format!("t client -l 127.0.0.1:0 -r 127.0.0.1:{port} --key k --keepalive 1 --quiet"),
            log.to_str().unwrap(),
        )
        .await;
        let mut conns = Vec::new();
        for _ in 0..5 {
            let mut c = TcpStream::connect(entry).await.unwrap();
            c.write_all(b"ping").await.unwrap();
            let mut b = [0u8; 4];
            c.read_exact(&mut b).await.unwrap();
            conns.push(c);
        }
        server.kill().unwrap();
        server.wait().unwrap();
        let text = wait_for_log(&log, "ended", Duration::from_secs(90)).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let text = std::fs::read_to_string(&log).unwrap_or(text);
        let session_lines = text.lines().filter(|l| l.contains("ended")).count();
        let stream_lines = text.lines().filter(|l| l.contains("stream closed")).count();
        assert_eq!(session_lines, 1, "{text}");
        assert_eq!(stream_lines, 0, "a line per stream:\n{text}");
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// A target that writes 11,520 bytes and closes at once: every byte
/// arrives, 50 times over, through a lossy path.
#[tokio::test]
async fn write_then_close_target_delivers_every_byte_through_loss() {
    const BYTES: usize = 11_520;
    tokio::time::timeout(Duration::from_secs(300), async {
        let data = pattern(BYTES, 7);
        let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target_addr = target.local_addr().unwrap();
        let body = data.clone();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = target.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let _ = c.write_all(&body).await;
                    // Dropping closes at once, no read, no linger.
                });
            }
        });
        let server = start(
            &format!("t server -l 127.0.0.1:0 -t {target_addr} --quiet --mode fast3"),
            "",
        )
        .await;
        let relay = Relay::start(server, RelayConfig::symmetric(25, LinkConfig::lossy(0.05)))
            .await
            .unwrap();
        let entry = start(
            &format!(
                "t client -l 127.0.0.1:0 -r {} --quiet --mode fast3",
                relay.local_addr()
            ),
            "",
        )
        .await;
        for i in 0..50 {
            let mut c = TcpStream::connect(entry).await.unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).await.unwrap();
            assert_eq!(got.len(), BYTES, "iteration {i}");
            assert!(got == data, "iteration {i}: bytes differ");
        }
        assert!(relay.stats().to_server.lost + relay.stats().to_client.lost > 0);
    })
    .await
    .expect("timed out");
}

/// The stats line's count of forwarded TCP connections that were reset.
fn tcp_resets(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("connections reset)"))?;
    let (head, _) = line.split_once(" connections reset)")?;
    head.rsplit_once('(')?.1.parse().ok()
}

/// A target whose kernel resets the connection (a zero linger here; a host
/// out of TCP memory does the same to a connection closed with bytes
/// unsent) loses what it had not sent. smux has no reset, so the client
/// sees an end of stream; the server counts the reset in its stats line
/// and logs it, so a short download is never silent at both ends.
#[tokio::test]
async fn target_reset_is_counted_not_silent() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target_addr = target.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = target.accept().await {
                let _ = c.write_all(&pattern(100_000, 9)).await;
                // Once the dial is long done, a reset: SO_LINGER 0, close.
                tokio::time::sleep(Duration::from_millis(300)).await;
                c.set_zero_linger().unwrap();
            }
        });
        let log = scratch("reset.log");
        let server = start(
            &format!("t server -l 127.0.0.1:0 -t {target_addr} --snmpperiod 1"),
            log.to_str().unwrap(),
        )
        .await;
        let entry = start(
            &format!("t client -l 127.0.0.1:0 -r {server} --quiet --snmpperiod 0"),
            "",
        )
        .await;
        let mut c = TcpStream::connect(entry).await.unwrap();
        let mut got = Vec::new();
        let end = c.read_to_end(&mut got).await;
        assert!(got.len() <= 100_000, "{} B", got.len());
        assert!(got == pattern(100_000, 9)[..got.len()], "bytes differ");
        eprintln!("client read {} B, then {end:?}", got.len());
        let text = wait_for_log(&log, "(1 connections reset)", Duration::from_secs(10)).await;
        assert_eq!(tcp_resets(&text), Some(1), "{text}");
        assert!(
            text.contains("Connection reset by peer"),
            "the stream's close line does not say why:\n{text}"
        );
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// `--log FILE` appends; with `--snmpperiod 0` no periodic line is
/// written, and SIGUSR1 still writes one.
#[cfg(unix)]
#[tokio::test]
async fn sigusr1_dumps_stats_into_the_appended_log() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let log = scratch("usr1.log");
        std::fs::write(&log, "an earlier line\n").unwrap();
        let mut child = Command::new(BIN)
            .args(words(&format!(
                "server -l 127.0.0.1:0 -t 127.0.0.1:9 --snmpperiod 0 --log {}",
                log.display()
            )))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_log(&log, "listening on", Duration::from_secs(10)).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let quiet = std::fs::read_to_string(&log).unwrap();
        assert!(!quiet.contains("stats:"), "{quiet}");
        let killed = Command::new("kill")
            .args(["-USR1", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let text = wait_for_log(&log, "stats:", Duration::from_secs(10)).await;
        let _ = child.kill();
        let _ = child.wait();
        assert!(text.starts_with("an earlier line\n"), "{text}");
        assert!(text.contains("stats:"), "no stats after SIGUSR1:\n{text}");
        assert!(text.contains("undecryptable datagrams"), "{text}");
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// UDP beside TCP: `--udplisten` (client) and `--udptarget` (server), their
/// `-c` keys over the flags, and the combinations refused by name.
#[test]
fn udp_mode_takes_kcptuns_flags_or_names_the_unused() {
    let p = |s: &str| tunnel::parse(words(s)).unwrap();
    let udp = "kcpio-tunnel client --udp -l 127.0.0.1:1 -r 127.0.0.1:2";
    // kcptun's defaults: nothing to say.
    assert!(p(udp).warnings.is_empty(), "{:?}", p(udp).warnings);
    assert!(
        p("kcpio-tunnel server --udp -t 127.0.0.1:1")
            .warnings
            .is_empty()
    );
    // --keepalive has no smux to go to: it is the session's probe, and
    // the idle timeout stays three of them or 30 s.
    for (flag, keepalive, idle) in [
        ("", "Some(10s)", "Some(30s)"),
        ("--keepalive 5", "Some(5s)", "Some(30s)"),
        ("--keepalive 20", "Some(20s)", "Some(60s)"),
        ("--keepalive 0", "None", "Some(30s)"),
    ] {
        let kcp = format!("{:?}", p(&format!("{udp} {flag}")).kcp);
        assert!(
            kcp.contains(&format!("keepalive: {keepalive}")),
            "{flag}: {kcp}"
        );
        assert!(
            kcp.contains(&format!("idle_timeout: {idle}")),
            "{flag}: {kcp}"
        );
    }
    // Out of range: refused, naming the flag.
    let e = tunnel::parse(words(&format!("{udp} --keepalive 100000"))).unwrap_err();
    assert!(e.starts_with("--keepalive"), "{e}");
    // The flags that do nothing here are named, never silently dropped.
    for (flag, named) in [
        ("--scavengettl 30", "--scavengettl"),
        ("--conn 4", "--conn"),
        ("--autoexpire 60", "--autoexpire"),
        ("--nocomp", "--nocomp"),
        ("--smuxver 2", "--smuxver"),
        ("--smuxbuf 8388608", "--smuxbuf"),
        ("--streambuf 1048576", "--streambuf"),
        ("--framesize 16384", "--framesize"),
        ("--closewait 5", "--closewait"),
    ] {
        let w = p(&format!("{udp} {flag}")).warnings.join("; ");
        assert!(
            w.contains(named) && w.contains("not used with --udp"),
            "{flag}: {w}"
        );
    }
    // What applies, applies: the cipher, the key, the MTU, FEC framing.
    let s = p(&format!(
        "{udp} --crypt none --key k --mtu 1400 --datashard 0 --parityshard 0"
    ));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert_eq!(s.kcp.method(), kcpio::Method::None);
    assert!(s.summary.contains("mtu: 1400"), "{}", s.summary);
    assert!(!s.udp.stream_fec);
    // The same from a -c file.
    let file = scratch("udp-flags.json");
    std::fs::write(
        &file,
        r#"{"udp": true, "keepalive": 5, "nocomp": true, "crypt": "none"}"#,
    )
    .unwrap();
    let s = p(&format!(
        "kcpio-tunnel client -l 127.0.0.1:1 -r 127.0.0.1:2 -c {}",
        file.display()
    ));
    std::fs::remove_file(&file).unwrap();
    assert!(s.udp.enabled);
    assert!(format!("{:?}", s.kcp).contains("keepalive: Some(5s)"));
    assert!(
        s.warnings.join("; ").contains("--nocomp"),
        "{:?}",
        s.warnings
    );
}

#[test]
fn udp_beside_tcp_flags_and_keys() {
    let p = |s: &str| tunnel::parse(words(s));
    let c = p("kcpio-tunnel client -l 127.0.0.1:1 --udplisten :51821 -r 127.0.0.1:2").unwrap();
    assert_eq!(c.udp_beside.as_deref(), Some("0.0.0.0:51821"));
    assert!(!c.udp.enabled);
    assert!(
        c.summary.contains("udplisten: 0.0.0.0:51821"),
        "{}",
        c.summary
    );
    // Go's single-dash form, as every kcptun flag.
    let s = p("kcpio-tunnel server -udptarget 127.0.0.1:51820").unwrap();
    assert_eq!(s.udp_beside.as_deref(), Some("127.0.0.1:51820"));
    assert!(
        s.summary.contains("udptarget: 127.0.0.1:51820"),
        "{}",
        s.summary
    );
    // Neither end without it changes.
    assert_eq!(p("kcpio-tunnel client").unwrap().udp_beside, None);
    assert_eq!(p("kcpio-tunnel server").unwrap().udp_beside, None);

    let file =
        std::env::temp_dir().join(format!("kcpio-tunnel-beside-{}.json", std::process::id()));
    std::fs::write(
        &file,
        r#"{"udplisten": "127.0.0.1:7", "udptarget": "127.0.0.1:8"}"#,
    )
    .unwrap();
    let c = p(&format!(
        "kcpio-tunnel client --udplisten 127.0.0.1:9 -c {}",
        file.display()
    ));
    let s = p(&format!("kcpio-tunnel server -c {}", file.display()));
    std::fs::remove_file(&file).unwrap();
    // Each end takes its own key; the other end's is not its business, as
    // `localaddr` is not the server's.
    assert_eq!(c.unwrap().udp_beside.as_deref(), Some("127.0.0.1:7"));
    assert_eq!(s.unwrap().udp_beside.as_deref(), Some("127.0.0.1:8"));

    for (bad, says) in [
        (
            "kcpio-tunnel client --udp --udplisten 127.0.0.1:1",
            "--udplisten: not with --udp",
        ),
        (
            "kcpio-tunnel server --udp --udptarget 127.0.0.1:1",
            "--udptarget: not with --udp",
        ),
        ("kcpio-tunnel client --udplisten 127.0.0.1:1-3", "one port"),
        (
            "kcpio-tunnel server --udptarget nowhere",
            "--udptarget nowhere",
        ),
        (
            "kcpio-tunnel client --udplisten 127.0.0.1:1 --udpflows 0",
            "--udpflows",
        ),
        (
            "kcpio-tunnel client --udp --udpflows 1048577",
            "--udpflows 1048577: at most 1048576",
        ),
    ] {
        let e = p(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// Forged openers (sealed with the key, from an address that never answers)
/// open sessions that die at the 10 s proof timeout: the server's log does
/// not say a line for each (a flood would write thousands a minute), while
/// the stats line counts them.
#[test]
fn sessions_of_forged_openers_die_without_a_log_line_each() {
    let port = free_udp_range(1);
    let listen = format!("127.0.0.1:{port}");
    let mut server = Command::new(BIN)
        .args([
            "server",
            "-l",
            &listen,
            "-t",
            "127.0.0.1:9",
            "--snmpperiod",
            "1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let kcp = tunnel::parse(words(&format!("t server -l {listen} -t 127.0.0.1:9")))
        .unwrap()
        .kcp;
    std::thread::sleep(Duration::from_millis(500));
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    const FORGED: u32 = 20;
    for conv in 0..FORGED {
        let mut c = kcpio::Conn::new(0x5100_0000 + conv, &kcp).unwrap();
        c.write(b"forged").unwrap();
        c.handle_timeout(Duration::ZERO);
        let mut slot = vec![0u8; c.max_datagram()];
        let t = c.poll_transmit(Duration::ZERO, &mut slot).unwrap();
        let crypto = kcp.packet_crypto();
        let nonce = [conv as u8; 16];
        let n = crypto
            .seal(&mut slot, t.len, &nonce[..crypto.nonce_len()])
            .unwrap();
        sock.send_to(&slot[..n], &listen).unwrap();
    }
    // The proof timeout (10 s) and a stats period after it.
    std::thread::sleep(Duration::from_secs(12));
    let _ = server.kill();
    let out = server.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let failed = err.matches("kcp session failed").count();
    assert_eq!(failed, 0, "a line per forged session: {err}");
}

/// A `--udplisten` client whose session carries only UDP flows hears no
/// stream byte from the server: the server's datagrams are its answer. The
/// "no reply from the server in 15 s" warning (meant for a wrong key or a
/// server that is not running) is not written while the flow is echoed; it
/// was, 15 s after every such session started.
#[test]
fn a_session_that_carries_only_udp_flows_is_not_called_silent() {
    let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
    let echo_at = echo.local_addr().unwrap();
    echo.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = std::sync::Arc::clone(&stop);
    let echoing = std::thread::spawn(move || {
        let mut b = [0u8; 2048];
        let end = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < end && !stopped.load(std::sync::atomic::Ordering::Relaxed)
        {
            if let Ok((n, from)) = echo.recv_from(&mut b) {
                let _ = echo.send_to(&b[..n], from);
            }
        }
    });
    let port = free_udp_range(2);
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_at = tcp.local_addr().unwrap();
    drop(tcp);
    let mut server = Command::new(BIN)
        .args(words(&format!(
            "server -l 127.0.0.1:{port} -t 127.0.0.1:9 --udptarget {echo_at} --snmpperiod 0"
        )))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut client = Command::new(BIN)
        .args(words(&format!(
            "client -l {tcp_at} -r 127.0.0.1:{port} --udplisten 127.0.0.1:{} --snmpperiod 0",
            port + 1
        )))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let app = UdpSocket::bind("127.0.0.1:0").unwrap();
    app.connect(("127.0.0.1", port + 1)).unwrap();
    app.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // One datagram every 100 ms for 17 s, past the warning's 15 s.
    let mut echoed = 0;
    let mut b = [0u8; 64];
    for _ in 0..170 {
        app.send(b"flow only").unwrap();
        if app.recv(&mut b).is_ok_and(|n| &b[..n] == b"flow only") {
            echoed += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = client.kill();
    let out = client.wait_with_output().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    echoing.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(echoed > 150, "the flow was echoed: {echoed} of 170\n{err}");
    assert!(
        !err.contains("no reply from the server"),
        "a warning for a server that answers:\n{err}"
    );
}
