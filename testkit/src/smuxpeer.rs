//! The repository's Go smux peer (`interop/smux-peer`, real xtaci/smux over
//! TCP or kcp-go): built once per smux version and test run, spawned as a
//! server on `127.0.0.1:0` or run as a client, every child killed on drop and
//! every wait bounded. Skips (or fails under `KCPIO_REQUIRE_GO=1`) exactly as
//! [`super::gopeer`] does, whose build and spawn code it shares.
//!
//! Both roles end with one JSON report line (`ok`, `streams`, `bytes`,
//! `seconds`, `mbps`, `cpu_s`, `errors`, ...): see `interop/smux-peer/README.md`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use super::gopeer::{self, ClientRun, Log, PipedChild, locked};

/// The two pinned xtaci/smux releases the peer is built against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmuxVersion {
    /// What Debian's kcptun runs (no half-close: `Close` is the only FIN).
    V1_5_16,
    /// The newest on the module proxy (`CloseWrite` half-close).
    V1_5_58,
}

impl SmuxVersion {
    /// Both versions, oldest first.
    pub const ALL: [SmuxVersion; 2] = [SmuxVersion::V1_5_16, SmuxVersion::V1_5_58];

    /// The module version, as the peer reports it in `smux`.
    pub fn as_str(self) -> &'static str {
        match self {
            SmuxVersion::V1_5_16 => "v1.5.16",
            SmuxVersion::V1_5_58 => "v1.5.58",
        }
    }

    /// True when this smux can half-close a stream (`CloseWrite`).
    pub fn has_half_close(self) -> bool {
        self == SmuxVersion::V1_5_58
    }

    fn build(self) -> Result<PathBuf, String> {
        match self {
            SmuxVersion::V1_5_16 => gopeer::build_go(
                "interop/smux-peer",
                "smux-peer-v1.5.16",
                &["-modfile=go.v1516.mod"],
            ),
            SmuxVersion::V1_5_58 => gopeer::build_go("interop/smux-peer", "smux-peer-v1.5.58", &[]),
        }
    }
}

/// The peer binary for `version`, built on first use. `None` means the caller
/// must skip: the reason was printed loudly.
pub fn binary(version: SmuxVersion) -> Option<PathBuf> {
    static BINS: [OnceLock<Result<PathBuf, String>>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = &BINS[version as usize];
    gopeer::available(slot.get_or_init(|| version.build()), "Go smux")
}

/// A running `smux-peer server`; killed on drop.
pub struct SmuxServer {
    child: Child,
    addr: SocketAddr,
    log: Log,
    report: Option<oneshot::Receiver<serde_json::Value>>,
}

impl SmuxServer {
    /// Starts `smux-peer server --listen 127.0.0.1:0 <args>` and waits (10 s at
    /// most) for its `LISTENING <addr>` line.
    pub async fn spawn<S>(bin: &Path, args: &[S]) -> SmuxServer
    where
        S: AsRef<str> + std::fmt::Debug,
    {
        let mut child = Command::new(bin)
            .args(["server", "--listen", "127.0.0.1:0"])
            .args(args.iter().map(AsRef::as_ref))
            .piped_child()
            .expect("spawn smux-peer");
        let log: Log = Arc::default();
        if let Some(stderr) = child.stderr.take() {
            gopeer::drain(stderr, Arc::clone(&log), "stderr: ");
        }
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await;
        let addr = match first {
            Ok(Ok(Some(line))) => line
                .strip_prefix("LISTENING ")
                .and_then(|a| a.trim().parse().ok())
                .unwrap_or_else(|| panic!("smux-peer server {args:?}: first line {line:?}")),
            other => panic!(
                "smux-peer server {args:?} printed no LISTENING line ({other:?}); log: {:?}",
                locked(&log)
            ),
        };
        let (tx, rx) = oneshot::channel();
        let out_log = Arc::clone(&log);
        tokio::spawn(async move {
            let mut tx = Some(tx);
            while let Ok(Some(line)) = lines.next_line().await {
                let report = serde_json::from_str::<serde_json::Value>(line.trim())
                    .ok()
                    .filter(|v| v.get("ok").is_some());
                if let Some(v) = report
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(v);
                }
                locked(&out_log).push(line);
            }
        });
        SmuxServer {
            child,
            addr,
            log,
            report: Some(rx),
        }
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the server printed so far.
    pub fn log(&self) -> Vec<String> {
        locked(&self.log).clone()
    }

    /// Waits at most `timeout` for the server's JSON report (it prints one
    /// when `--max-streams`, `--max-sessions` or its `--timeout` ends it);
    /// kills the server and returns `None` if none came.
    pub async fn report(&mut self, timeout: Duration) -> Option<serde_json::Value> {
        let rx = self.report.take()?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(v)) => Some(v),
            _ => {
                let _ = self.child.start_kill();
                None
            }
        }
    }
}

impl Drop for SmuxServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Runs `smux-peer client --connect <addr> <args>`, killed after `timeout`.
pub async fn run_client<S>(bin: &Path, addr: SocketAddr, args: &[S], timeout: Duration) -> ClientRun
where
    S: AsRef<str>,
{
    let mut full = vec![
        "client".to_owned(),
        "--connect".to_owned(),
        addr.to_string(),
    ];
    full.extend(args.iter().map(|a| a.as_ref().to_owned()));
    gopeer::run_program(bin, &full, timeout).await
}

/// True when a report says `"ok": true`.
pub fn report_ok(report: Option<&serde_json::Value>) -> bool {
    report
        .and_then(|r| r.get("ok"))
        .and_then(serde_json::Value::as_bool)
        == Some(true)
}
