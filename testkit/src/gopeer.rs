//! The repository's Go peer (`interop/kcpgo-peer`, kcp-go v5.6.72): built once
//! per test run, spawned as a server on `127.0.0.1:0` or run as a client, with
//! every child killed on drop and every wait bounded.
//!
//! Where Go is missing (or the peer cannot be built) the tests print a loud
//! `SKIPPED:` line and pass, so a plain `cargo test` works anywhere; with
//! `KCPIO_REQUIRE_GO=1` (set by `.ci/run`) the same condition fails the test.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The environment variable that turns a missing Go into a test failure.
pub const REQUIRE_GO: &str = "KCPIO_REQUIRE_GO";

/// Longest a `go build` may take (the first one may download modules).
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);

/// Where a Go program's sources live (`dir` relative to the repository).
fn source_dir(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)
}

/// Cargo's target directory, found from the running test binary
/// (`<target>/<profile>/deps/<test>-<hash>`).
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .find(|p| p.file_name().is_some_and(|n| n == "deps"))
                .and_then(|deps| deps.parent())
                .and_then(|profile| profile.parent())
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// True when `bin` is older than any source file of the peer.
fn is_stale(bin: &Path, src: &Path) -> bool {
    let Some(built) = mtime(bin) else {
        return true;
    };
    let Ok(entries) = std::fs::read_dir(src) else {
        return true;
    };
    entries.flatten().any(|e| {
        let p = e.path();
        let relevant = p
            .extension()
            .is_some_and(|x| x == "go" || x == "mod" || x == "sum");
        relevant && mtime(&p).is_none_or(|t| t > built)
    })
}

/// Builds the kcp-go peer (if stale) into `<target>/kcpgo-peer`.
fn build() -> Result<PathBuf, String> {
    build_go("interop/kcpgo-peer", "kcpgo-peer", &[])
}

/// Builds the Go program in `dir` (if stale) into `<target>/<name>`, passing
/// `go_args` to `go build` (e.g. `-modfile=...`). Parallel test binaries may
/// race here: each builds into its own temporary file and renames it into
/// place, which is atomic, so a reader never sees half a binary and a running
/// peer keeps its inode.
pub fn build_go(dir: &str, name: &str, go_args: &[&str]) -> Result<PathBuf, String> {
    let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
    match std::process::Command::new(&go)
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => return Err(format!("Go not found: `go version` exited with {s}")),
        Err(e) => return Err(format!("Go not found: cannot run `go` ({e})")),
    }
    let src = source_dir(dir);
    let target = target_dir();
    std::fs::create_dir_all(&target).map_err(|e| format!("create {}: {e}", target.display()))?;
    let bin = target.join(name);
    if !is_stale(&bin, &src) {
        return Ok(bin);
    }
    let tmp = target.join(format!("{name}.{}.tmp", std::process::id()));
    let mut child = std::process::Command::new(&go)
        .arg("build")
        // No VCS stamping: it needs a working `git` on the checkout (and
        // fails on some worktrees or foreign-owned clones), and buys nothing here.
        .arg("-buildvcs=false")
        .args(go_args)
        .arg("-o")
        .arg(&tmp)
        .arg(".")
        .current_dir(&src)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `go build`: {e}"))?;
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if started.elapsed() > BUILD_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("`go build` took longer than {BUILD_TIMEOUT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for `go build`: {e}")),
        }
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    if !status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "`go build` of {} failed ({status}):\n{stderr}",
            src.display()
        ));
    }
    std::fs::rename(&tmp, &bin).map_err(|e| format!("rename to {}: {e}", bin.display()))?;
    Ok(bin)
}

/// The Go peer binary, built on first use. `None` means the caller must skip:
/// the reason was printed loudly. Panics instead when `KCPIO_REQUIRE_GO=1`.
pub fn binary() -> Option<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    available(BIN.get_or_init(build), "kcp-go")
}

/// The built binary, or `None` after printing a loud `SKIPPED:` line (a
/// failure instead when `KCPIO_REQUIRE_GO=1`). `what` names the tests.
pub fn available(built: &Result<PathBuf, String>, what: &str) -> Option<PathBuf> {
    match built {
        Ok(p) => Some(p.clone()),
        Err(reason) => {
            let required = std::env::var(REQUIRE_GO).is_ok_and(|v| v == "1");
            assert!(
                !required,
                "{REQUIRE_GO}=1 but the {what} peer is unavailable: {reason}"
            );
            // Straight to the process's stderr: libtest captures `eprintln!`
            // of passing tests, and a skip must be seen.
            use std::io::Write;
            let msg = format!(
                "\n==================================================================\n\
                 SKIPPED: {reason}\n\
                 The {what} interop tests did not run. Install Go >= 1.24 (and allow\n\
                 the module proxy) to run them; set {REQUIRE_GO}=1 to make this a failure.\n\
                 ==================================================================\n"
            );
            // One write, so parallel tests do not interleave their lines.
            let _ = std::io::stderr().lock().write_all(msg.as_bytes());
            None
        }
    }
}

/// Spawning a peer: no stdin, stdout and stderr piped, killed on drop.
pub trait PipedChild {
    /// Spawns with no stdin, stdout and stderr piped, killed on drop.
    fn piped_child(&mut self) -> std::io::Result<Child>;
}

impl PipedChild for Command {
    fn piped_child(&mut self) -> std::io::Result<Child> {
        self.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
    }
}

/// Lines a child printed, kept for failure messages.
pub type Log = Arc<Mutex<Vec<String>>>;

/// The log's lines, also after a panic elsewhere poisoned the lock.
pub fn locked(log: &Log) -> MutexGuard<'_, Vec<String>> {
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Copies `reader`'s lines into `log`, each behind `prefix`, until it ends.
pub fn drain<R>(reader: R, log: Log, prefix: &'static str)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut l = locked(&log);
            if l.len() < 10_000 {
                l.push(format!("{prefix}{line}"));
            }
        }
    });
}

/// A running `kcpgo-peer echo-server` or `sink-server`; killed on drop.
pub struct GoServer {
    child: Child,
    addr: SocketAddr,
    log: Log,
}

impl GoServer {
    /// Starts `kcpgo-peer <mode> --addr 127.0.0.1:0 <args>` and waits (10 s at
    /// most) for its `listening on IP:PORT` line.
    pub async fn spawn<S>(bin: &Path, mode: &str, args: &[S]) -> GoServer
    where
        S: AsRef<str> + std::fmt::Debug,
    {
        let mut child = Command::new(bin)
            .arg(mode)
            .args(["--addr", "127.0.0.1:0"])
            .args(args.iter().map(AsRef::as_ref))
            .piped_child()
            .expect("spawn kcpgo-peer");
        let log: Log = Arc::default();
        let stdout = child.stdout.take().expect("stdout");
        if let Some(stderr) = child.stderr.take() {
            drain(stderr, Arc::clone(&log), "stderr: ");
        }
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) if line.starts_with("listening on ") => return Some(line),
                    Ok(Some(line)) => locked(&log).push(line),
                    _ => return None,
                }
            }
        })
        .await;
        let line = match first {
            Ok(Some(line)) => line,
            _ => panic!(
                "kcpgo-peer {mode} {args:?} printed no `listening on` line; log: {:?}",
                locked(&log)
            ),
        };
        let addr = parse_listening(&line)
            .unwrap_or_else(|| panic!("cannot parse the address in {line:?}"));
        locked(&log).push(line);
        drain(lines.into_inner(), Arc::clone(&log), "");
        GoServer { child, addr, log }
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the server printed so far.
    pub fn log(&self) -> Vec<String> {
        locked(&self.log).clone()
    }

    /// Waits at most `timeout` for the server to exit by itself (after
    /// `--max-sessions` or `--duration`); kills it and returns `None` otherwise.
    pub async fn wait(mut self, timeout: Duration) -> Option<ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(Ok(s)) => Some(s),
            _ => {
                let _ = self.child.start_kill();
                None
            }
        }
    }
}

impl Drop for GoServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// The address in a `listening on IP:PORT ...` line (Rust or Go peer).
pub fn parse_listening(line: &str) -> Option<SocketAddr> {
    line.strip_prefix("listening on ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What a client run produced.
#[derive(Debug)]
pub struct ClientRun {
    /// The exit code (`None`: killed by a signal or by the timeout).
    pub code: Option<i32>,
    /// The `--json` result object, if the client printed one.
    pub json: Option<serde_json::Value>,
    /// Everything on stdout.
    pub stdout: String,
    /// Everything on stderr.
    pub stderr: String,
    /// True when the client was killed for running past the timeout.
    pub timed_out: bool,
}

impl ClientRun {
    /// True when the client exited 0 and its JSON says `"pass": true`.
    pub fn passed(&self) -> bool {
        self.code == Some(0)
            && self
                .json
                .as_ref()
                .and_then(|j| j.get("pass"))
                .and_then(serde_json::Value::as_bool)
                == Some(true)
    }

    /// A numeric field of the JSON result.
    pub fn number(&self, field: &str) -> Option<f64> {
        self.json.as_ref()?.get(field)?.as_f64()
    }
}

/// Runs `<program> client --json <args>` (the Go peer or the Rust peer
/// example) and kills it after `timeout`.
pub async fn run_client(program: &Path, args: &[String], timeout: Duration) -> ClientRun {
    let mut full = vec!["client".to_owned(), "--json".to_owned()];
    full.extend_from_slice(args);
    run_program(program, &full, timeout).await
}

/// Runs `<program> <args>`, keeps what it printed and its last JSON line on
/// stdout, and kills it after `timeout`.
pub async fn run_program(program: &Path, args: &[String], timeout: Duration) -> ClientRun {
    let child = Command::new(program)
        .args(args)
        .piped_child()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let json = stdout
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok());
            ClientRun {
                code: out.status.code(),
                json,
                stdout,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                timed_out: false,
            }
        }
        Ok(Err(e)) => panic!("waiting for {}: {e}", program.display()),
        // The future owned the child: dropping it killed the process.
        Err(_) => ClientRun {
            code: None,
            json: None,
            stdout: String::new(),
            stderr: String::new(),
            timed_out: true,
        },
    }
}

/// `args` as owned strings, for [`run_client`].
pub fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The Go peer's flags for fast3 in stream mode with `cipher` (its default
/// passphrase) and FEC `fec` (`(0, 0)` is off).
pub fn fast3_stream_flags(cipher: &str, fec: (usize, usize)) -> Vec<String> {
    args(&[
        "--crypt",
        cipher,
        "--datashard",
        &fec.0.to_string(),
        "--parityshard",
        &fec.1.to_string(),
        "--nodelay",
        "fast3",
        "--stream",
    ])
}
