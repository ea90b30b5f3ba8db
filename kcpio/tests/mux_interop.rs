//! kcpio's mux against the real Go smux (`testkit/interop/smux-peer`, built on
//! xtaci/smux v1.5.16 and v1.5.58): kcpio client against Go server and Go
//! client against kcpio server, smux v1 and v2, over TCP and over kcp-go,
//! with and without kcptun's snappy framing.
//!
//! Without Go these tests print `SKIPPED` and pass (`KCPIO_REQUIRE_GO=1`
//! makes that a failure), as `kcpio/tests/interop.rs` does.

use kcpio_testkit as support;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kcpio::mux::{Mux, MuxConfig, MuxStream, Snappy, Version};
use kcpio::{Config, KcpListener, KcpStream, Preset};
use support::pattern;
use support::smuxpeer::{self, SmuxServer, SmuxVersion};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Tcp,
    Kcp,
}

/// One cell of the matrix.
#[derive(Clone, Copy, Debug)]
struct Case {
    smux: SmuxVersion,
    version: Version,
    transport: Transport,
    snappy: bool,
}

impl Case {
    fn all() -> Vec<Case> {
        let mut v = Vec::new();
        for smux in SmuxVersion::ALL {
            for version in [Version::V1, Version::V2] {
                for transport in [Transport::Tcp, Transport::Kcp] {
                    for snappy in [false, true] {
                        v.push(Case {
                            smux,
                            version,
                            transport,
                            snappy,
                        });
                    }
                }
            }
        }
        v
    }

    /// The Go peer's flags for this case, then `rest`.
    fn go_args(&self, rest: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--transport".into(),
            match self.transport {
                Transport::Tcp => "tcp",
                Transport::Kcp => "kcp",
            }
            .into(),
            "--smuxver".into(),
            self.version.as_u8().to_string(),
            "--crypt".into(),
            "null".into(),
            "--quiet".into(),
        ];
        if self.snappy {
            a.push("--snappy".into());
        }
        a.extend(rest.iter().map(|s| (*s).to_owned()));
        a
    }

    fn mux_config(&self) -> MuxConfig {
        MuxConfig::builder().version(self.version).build().unwrap()
    }
}

/// The KCP settings of the Go peer (kcptun's fast3, windows 1024, mtu 1350).
fn kcp_config() -> Config {
    Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(1024, 1024)
        .mtu(1350)
        .build()
        .unwrap()
}

fn start<T>(io: T, case: &Case, cfg: &MuxConfig, client: bool) -> Mux
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    match (case.snappy, client) {
        (true, true) => Mux::client(Snappy::new(io), cfg),
        (true, false) => Mux::server(Snappy::new(io), cfg),
        (false, true) => Mux::client(io, cfg),
        (false, false) => Mux::server(io, cfg),
    }
}

async fn rust_client(addr: SocketAddr, case: &Case, cfg: &MuxConfig) -> Mux {
    match case.transport {
        Transport::Tcp => start(TcpStream::connect(addr).await.unwrap(), case, cfg, true),
        Transport::Kcp => start(
            KcpStream::connect(addr, &kcp_config()).await.unwrap(),
            case,
            cfg,
            true,
        ),
    }
}

/// Listens on loopback and hands the first accepted transport's server
/// `Mux` to `serve`.
async fn rust_server<F, Fut>(
    case: Case,
    cfg: MuxConfig,
    serve: F,
) -> (SocketAddr, tokio::task::JoinHandle<()>)
where
    F: FnOnce(Mux) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    match case.transport {
        Transport::Tcp => {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let task = tokio::spawn(async move {
                let (io, _) = l.accept().await.unwrap();
                serve(start(io, &case, &cfg, false)).await;
            });
            (addr, task)
        }
        Transport::Kcp => {
            let l = KcpListener::bind("127.0.0.1:0", &kcp_config())
                .await
                .unwrap();
            let addr = l.local_addr().unwrap();
            let task = tokio::spawn(async move {
                let (io, _) = l.accept().await.unwrap();
                serve(start(io, &case, &cfg, false)).await;
                drop(l);
            });
            (addr, task)
        }
    }
}

fn bin(smux: SmuxVersion) -> Option<PathBuf> {
    smuxpeer::binary(smux)
}

// ---- the Rust side of the apps --------------------------------------------

/// Writes `n` pattern bytes and reads the `n`-byte echo, verifying it.
async fn echo_client(mut s: MuxStream, n: u64) -> io::Result<()> {
    let (mut r, mut w) = tokio::io::split(&mut s);
    let write = async {
        let mut buf = vec![0; 32 * 1024];
        let mut off = 0;
        while off < n {
            let k = (n - off).min(buf.len() as u64) as usize;
            pattern::fill(&mut buf[..k], off);
            w.write_all(&buf[..k]).await?;
            off += k as u64;
        }
        Ok::<_, io::Error>(())
    };
    let read = read_pattern(&mut r, Some(n));
    let (a, b) = tokio::join!(write, read);
    a?;
    assert_eq!(b?, n);
    Ok(())
}

/// Reads and verifies the pattern until `want` bytes or (for `None`) EOF.
async fn read_pattern<R: AsyncRead + Unpin>(r: &mut R, want: Option<u64>) -> io::Result<u64> {
    let mut buf = vec![0; 64 * 1024];
    let mut got = 0u64;
    while want.is_none_or(|w| got < w) {
        let cap = want.map_or(buf.len(), |w| (w - got).min(buf.len() as u64) as usize);
        let n = r.read(&mut buf[..cap]).await?;
        if n == 0 {
            if want.is_some() {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            break;
        }
        assert_eq!(
            pattern::first_mismatch(&buf[..n], got),
            None,
            "pattern at {got}"
        );
        got += n as u64;
    }
    Ok(got)
}

async fn write_pattern<W: AsyncWrite + Unpin>(w: &mut W, n: u64) -> io::Result<()> {
    let mut buf = vec![0; 32 * 1024];
    let mut off = 0;
    while off < n {
        let k = (n - off).min(buf.len() as u64) as usize;
        pattern::fill(&mut buf[..k], off);
        w.write_all(&buf[..k]).await?;
        off += k as u64;
    }
    Ok(())
}

/// Echoes every stream of a session until its EOF, then half-closes it.
async fn echo_server(mux: Mux) {
    while let Ok(s) = mux.accept_stream().await {
        tokio::spawn(async move {
            let (mut r, mut w) = s.into_split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
            let _ = w.shutdown().await;
        });
    }
}

/// Opens `streams` streams and echoes `bytes` on each.
async fn many_echo(mux: Arc<Mux>, streams: usize, bytes: u64) {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let mux = Arc::clone(&mux);
        set.spawn(async move { echo_client(mux.open_stream().await?, bytes).await });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap().unwrap();
    }
}

fn assert_go_ok(what: &str, report: Option<&serde_json::Value>, log: &dyn std::fmt::Debug) {
    assert!(
        smuxpeer::report_ok(report),
        "{what}: Go report {report:?}; log {log:?}"
    );
}

async fn go_server(bin: &Path, case: &Case, rest: &[&str]) -> SmuxServer {
    SmuxServer::spawn(bin, &case.go_args(rest)).await
}

async fn go_client(
    bin: &Path,
    addr: SocketAddr,
    case: &Case,
    rest: &[&str],
) -> support::gopeer::ClientRun {
    smuxpeer::run_client(bin, addr, &case.go_args(rest), LIMIT).await
}

fn check_client(what: &str, run: &support::gopeer::ClientRun) {
    assert!(
        run.code == Some(0) && smuxpeer::report_ok(run.json.as_ref()),
        "{what}: Go client failed: code {:?}, json {:?}, stderr {}",
        run.code,
        run.json,
        run.stderr
    );
}

/// A kcpio echo server (`config`) with a Go client running `rest` against it;
/// the client must report success.
async fn go_client_against_echo(
    bin: &Path,
    case: Case,
    config: MuxConfig,
    rest: &[&str],
    what: &str,
) {
    let (addr, task) = rust_server(case, config, echo_server).await;
    let run = go_client(bin, addr, &case, rest).await;
    check_client(what, &run);
    task.abort();
}

// ---- the matrix ---------------------------------------------------------

/// kcpio client against a Go echo server, then Go client against a kcpio
/// echo server: `streams` concurrent streams of `bytes` each.
async fn echo_both_ways(bin: &Path, case: Case, streams: usize, bytes: u64) {
    let what = format!("{case:?}, {streams} streams");
    let (n, b) = (streams.to_string(), bytes.to_string());
    let mut server = go_server(bin, &case, &["--app", "echo", "--max-streams", &n]).await;
    let mux = Arc::new(rust_client(server.addr(), &case, &case.mux_config()).await);
    timeout(LIMIT, many_echo(Arc::clone(&mux), streams, bytes))
        .await
        .expect(&what);
    assert_go_ok(&what, server.report(LIMIT).await.as_ref(), &server.log());
    drop(mux);
    let args = ["--app", "echo", "--streams", &n, "--bytes", &b];
    go_client_against_echo(bin, case, case.mux_config(), &args, &what).await;
}

/// Echo with 8 streams both ways in every cell of the matrix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_matrix() {
    for case in Case::all() {
        let Some(bin) = bin(case.smux) else { return };
        echo_both_ways(&bin, case, 8, 300_000).await;
    }
}

/// 1,000 concurrent streams each way, v1 and v2, over KCP with snappy and
/// over TCP without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_streams() {
    for smux in SmuxVersion::ALL {
        for (version, transport, snappy) in [
            (Version::V1, Transport::Tcp, false),
            (Version::V2, Transport::Kcp, true),
        ] {
            let Some(bin) = bin(smux) else { return };
            let case = Case {
                smux,
                version,
                transport,
                snappy,
            };
            echo_both_ways(&bin, case, 1000, 4000).await;
        }
    }
}

/// Half-close in both directions: the side that shuts down first still
/// reads the whole reply. (v1.5.16 has no half-close of its own: there the
/// Go side closes fully, and only kcpio's half-close is checked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_both_directions() {
    for smux in SmuxVersion::ALL {
        for version in [Version::V1, Version::V2] {
            let case = Case {
                smux,
                version,
                transport: Transport::Kcp,
                snappy: false,
            };
            let Some(bin) = bin(smux) else { return };
            let what = format!("{case:?}");
            let n = 200_000;

            // kcpio half-closes first; Go (`halfclose` server) reads to EOF
            // and replies with as many bytes.
            let mut server =
                go_server(&bin, &case, &["--app", "halfclose", "--max-streams", "1"]).await;
            let mux = rust_client(server.addr(), &case, &case.mux_config()).await;
            let mut s = mux.open_stream().await.unwrap();
            write_pattern(&mut s, n).await.unwrap();
            s.shutdown().await.unwrap();
            let got = timeout(LIMIT, read_pattern(&mut s, None))
                .await
                .expect(&what)
                .unwrap();
            assert_eq!(got, n, "{what}: reply after our FIN");
            drop(s);
            assert_go_ok(&what, server.report(LIMIT).await.as_ref(), &server.log());
            drop(mux);

            // Go half-closes first (`halfclose-rev` server initiates on the
            // stream kcpio opens); kcpio reads to EOF, then replies.
            let mut server = go_server(
                &bin,
                &case,
                &[
                    "--app",
                    "halfclose-rev",
                    "--bytes",
                    "200000",
                    "--max-streams",
                    "1",
                ],
            )
            .await;
            let mux = rust_client(server.addr(), &case, &case.mux_config()).await;
            let mut s = mux.open_stream().await.unwrap();
            let got = timeout(LIMIT, read_pattern(&mut s, None))
                .await
                .expect(&what)
                .unwrap();
            assert_eq!(got, n, "{what}: Go's data before its FIN");
            // Writing after the peer's FIN works; with v1.5.58 Go reads it.
            write_pattern(&mut s, n).await.unwrap();
            s.shutdown().await.unwrap();
            drop(s);
            assert_go_ok(&what, server.report(LIMIT).await.as_ref(), &server.log());
            drop(mux);

            // The same two with Go as the client and kcpio serving.
            let args = ["--app", "halfclose", "--bytes", "200000"];
            go_client_against_echo(&bin, case, case.mux_config(), &args, &what).await;
            // v1.5.16 sends its SYN before it registers the stream, and drops
            // frames for it that arrive in between (KCPTUN.md 3.2): a server
            // that writes at once can lose everything, FIN included, when the
            // Go client is slow to be scheduled. Give it a moment.
            let settle = match smux {
                SmuxVersion::V1_5_16 => Duration::from_millis(300),
                SmuxVersion::V1_5_58 => Duration::ZERO,
            };
            let (addr, task) = rust_server(case, case.mux_config(), move |mux: Mux| async move {
                while let Ok(mut s) = mux.accept_stream().await {
                    tokio::spawn(async move {
                        tokio::time::sleep(settle).await;
                        write_pattern(&mut s, 200_000).await.unwrap();
                        s.shutdown().await.unwrap();
                        let got = read_pattern(&mut s, None).await.unwrap();
                        assert_eq!(got, 200_000);
                    });
                }
            })
            .await;
            let run = go_client(&bin, addr, &case, &["--app", "halfclose-rev"]).await;
            check_client(&what, &run);
            task.abort();
        }
    }
}

/// Go writes 1 to 65,535 bytes per `Write` with `--framesize 65535`, so
/// kcpio receives frames of every size up to the largest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_of_every_size_from_go() {
    for smux in SmuxVersion::ALL {
        for (version, snappy) in [(Version::V1, false), (Version::V2, true)] {
            let case = Case {
                smux,
                version,
                transport: Transport::Tcp,
                snappy,
            };
            let Some(bin) = bin(smux) else { return };
            let args = ["--app", "sizes", "--framesize", "65535"];
            go_client_against_echo(&bin, case, case.mux_config(), &args, &format!("{case:?}"))
                .await;
        }
    }
}

/// v2: a Go stream that does not read for 3 s stalls only itself; the other
/// streams the kcpio server sources finish first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_stalled_go_reader_stalls_only_its_stream() {
    let case = Case {
        smux: SmuxVersion::V1_5_58,
        version: Version::V2,
        transport: Transport::Kcp,
        snappy: false,
    };
    let Some(bin) = bin(case.smux) else { return };
    let (addr, task) = rust_server(case, case.mux_config(), |mux: Mux| async move {
        while let Ok(mut s) = mux.accept_stream().await {
            tokio::spawn(async move {
                let mut req = [0; 8];
                s.read_exact(&mut req).await.unwrap();
                write_pattern(&mut s, u64::from_le_bytes(req))
                    .await
                    .unwrap();
                s.shutdown().await.unwrap();
            });
        }
    })
    .await;
    let run = go_client(
        &bin,
        addr,
        &case,
        &[
            "--app",
            "source",
            "--streams",
            "5",
            "--bytes",
            "2000000",
            "--stall",
            "3s",
        ],
    )
    .await;
    check_client("source with a stalled first stream", &run);
    let json = run.json.unwrap();
    let first = json["first_stream_s"].as_f64().unwrap();
    let others = json["others_max_s"].as_f64().unwrap();
    assert!(
        first >= 3.0 && others < 2.5,
        "first {first} s, others {others} s"
    );
    task.abort();
}

/// The session's error names what arrived: a SYN with the other version
/// byte, or command 7, injected by Go as server and as client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_mismatch_and_unknown_command_are_reported() {
    for (inject, text) in [
        ("badver", "version mismatch"),
        ("badcmd", "unknown command 7"),
    ] {
        for transport in [Transport::Tcp, Transport::Kcp] {
            let case = Case {
                smux: SmuxVersion::V1_5_58,
                version: Version::V1,
                transport,
                snappy: false,
            };
            let Some(bin) = bin(case.smux) else { return };
            // Go server injects into the kcpio client's session.
            let _server = go_server(&bin, &case, &["--app", "inject", "--inject", inject]).await;
            let mux = rust_client(_server.addr(), &case, &case.mux_config()).await;
            // A KCP server learns of the session from its first datagram:
            // open a stream (over TCP the error may have arrived already).
            let _s = mux.open_stream().await;
            let err = loop {
                match timeout(LIMIT, mux.accept_stream()).await.expect(inject) {
                    Ok(_) => {}
                    Err(e) => break e,
                }
            };
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
            assert!(err.to_string().contains(text), "{inject}: {err}");

            // Go client injects into the kcpio server's session.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let (addr, task) = rust_server(case, case.mux_config(), |mux: Mux| async move {
                let e = loop {
                    match mux.accept_stream().await {
                        Ok(_) => {}
                        Err(e) => break e,
                    }
                };
                let _ = tx.send(e);
            })
            .await;
            let _run = go_client(
                &bin,
                addr,
                &case,
                &["--app", "inject", "--inject", inject, "--hold", "1s"],
            )
            .await;
            let err = timeout(LIMIT, rx).await.expect(inject).unwrap();
            assert!(err.to_string().contains(text), "{inject}: {err}");
            task.abort();
        }
    }
}

/// Keepalive against Go: a Go peer that goes silent is detected between one
/// and two timeouts; an idle Go client with a short keepalive timeout keeps a kcpio
/// session (which must send NOPs for it) alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_against_go() {
    let case = Case {
        smux: SmuxVersion::V1_5_58,
        version: Version::V2,
        transport: Transport::Kcp,
        snappy: false,
    };
    let Some(bin) = bin(case.smux) else { return };
    let cfg = MuxConfig::builder()
        .version(Version::V2)
        .keepalive_interval(Duration::from_millis(500))
        .keepalive_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let server = go_server(&bin, &case, &["--app", "echo", "--silent-after", "1s"]).await;
    let mux = rust_client(server.addr(), &case, &cfg).await;
    echo_client(mux.open_stream().await.unwrap(), 1000)
        .await
        .unwrap();
    let start = Instant::now();
    let err = timeout(LIMIT, mux.accept_stream())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    // Silent from ~1 s after the session started; detected 1 to 2 timeouts later.
    let after = start.elapsed();
    assert!(after <= Duration::from_secs(4), "detected after {after:?}");
    drop(server);

    // Go (keepalive 1 s, timeout 3 s) holds idle streams for 5 s; so do we
    // (NOP every 0.5 s, timeout 3 s): both ends must keep the other alive.
    let cfg = MuxConfig::builder()
        .version(Version::V2)
        .keepalive_interval(Duration::from_millis(500))
        .keepalive_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let args = [
        "--app",
        "idle",
        "--streams",
        "3",
        "--bytes",
        "1000",
        "--hold",
        "5s",
        "--keepalive",
        "1",
        "--keepalive-timeout",
        "3",
    ];
    go_client_against_echo(&bin, case, cfg, &args, "idle Go client").await;
}
