//! A kcptun-compatible TCP port forwarder: `tunnel client` and `tunnel
//! server` talk to Debian's `kcptun-client` / `kcptun-server` (20210922) and
//! to newer kcptun releases, with kcptun's flag names, short forms, defaults
//! and `-c config.json` keys.
//!
//! ```text
//! cargo install --path . --example tunnel
//! # far side: KCP on :29900, each stream dials the SSH server
//! tunnel server -l :29900 -t 127.0.0.1:22
//! # near side: TCP on :12948, every connection is a stream of one KCP session
//! tunnel client -l 127.0.0.1:12948 -r vps:29900
//! ssh -p 12948 127.0.0.1
//! ```
//!
//! The wire is kcptun's: one KCP session (kcp-go framing, FEC, cipher) per
//! pool slot, optionally snappy-framed (`--nocomp` turns it off), carrying
//! smux v1 or v2 with one stream per TCP connection. Where the wire allows,
//! this tunnel does better than kcptun:
//!
//! - the server reads the client's smux version and whether it compresses
//!   from its first bytes and answers in kind, so clients of both kcptun
//!   generations work without matching `--smuxver` / `--nocomp`;
//! - the client names a mismatch (`--nocomp`, `--smuxver`, or silence that
//!   points at `--key`/`--crypt`) instead of stalling without a word;
//! - a TCP half-close crosses the tunnel (a FIN on the stream, then the
//!   other direction keeps flowing). Against a kcptun peer this degrades to
//!   kcptun's own behaviour: it closes both directions at the first FIN;
//! - it sends with kcpio's model-based congestion controller and windows
//!   that grow from `--sndwnd`/`--rcvwnd` to `--maxwnd` (16384) segments as
//!   the path asks, where kcptun keeps a fixed window in flight whatever the
//!   path carries; the peer sees no difference on the wire.
//!   `--congestion none` is kcptun's behaviour (fixed windows unless
//!   `--maxwnd` says otherwise), and `--mode manual` keeps kcptun's `--nc`.
//!
//! Differences worth knowing: `--crypt null` is AES-256-CFB, as in the
//! Debian release (that release has no unencrypted mode: vector E); use
//! `none` for a cipher-less peer of any release. `--closewait N` closes the
//! second direction of a connection N seconds after the first ended, 0 lets
//! it run until it ends. The client defaults to 0; the server to 30, as newer
//! kcptun: a kcptun client's FIN closes its whole stream, so a server that
//! waited for ever would feed a download nobody reads. `--tcp`, `--snmplog` and `--pprof` are
//! accepted and ignored with a warning. Stats go to the log every
//! `--snmpperiod` seconds and on `SIGUSR1`.

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use kcpio::KcpListener;
use tokio::net::TcpListener;

mod cli;
mod client;
mod config;
mod detect;
mod forward;
mod log;
mod pool;
mod server;
mod stats;

pub use config::{Role, Settings, parse};
pub use log::Log;
use stats::{Stats, report_stats};

/// A bound tunnel end, ready to [`run`](Bound::run).
pub enum Bound {
    /// The client's TCP listener.
    Client(TcpListener, Settings, SocketAddr),
    /// The server's KCP listener.
    Server(KcpListener, Settings),
}

impl Bound {
    /// Binds the listener `settings` names.
    pub async fn bind(settings: Settings) -> io::Result<Self> {
        match settings.role {
            Role::Client => {
                let remote = tokio::net::lookup_host(&settings.peer)
                    .await?
                    .next()
                    .ok_or_else(|| io::Error::other("--remoteaddr resolves to no address"))?;
                let tcp = TcpListener::bind(&settings.listen).await?;
                Ok(Self::Client(tcp, settings, remote))
            }
            Role::Server => {
                let kcp = KcpListener::bind(&settings.listen, &settings.kcp).await?;
                Ok(Self::Server(kcp, settings))
            }
        }
    }

    /// The TCP (client) or UDP (server) address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Self::Client(l, ..) => l.local_addr(),
            Self::Server(l, _) => l.local_addr(),
        }
    }

    /// Serves until accepting fails.
    pub async fn run(self, log: Log) -> io::Result<()> {
        let stats = Arc::new(Stats::default());
        let (settings, listen) = match &self {
            Self::Client(_, s, _) | Self::Server(_, s) => (s.clone(), self.local_addr()?),
        };
        for w in &settings.warnings {
            log.line(format!("warning: {w}"));
        }
        log.line(format!("version: kcpio {}", env!("CARGO_PKG_VERSION")));
        log.line(format!("listening on: {listen}"));
        log.line(settings.summary.as_str());
        tokio::spawn(report_stats(
            Arc::clone(&stats),
            log.clone(),
            settings.stats_period,
        ));
        match self {
            Self::Client(tcp, settings, remote) => {
                client::run_client(tcp, settings, remote, stats, log).await
            }
            Self::Server(kcp, settings) => server::run_server(kcp, settings, stats, log).await,
        }
    }
}

/// Runs the command line in `args` (the program name first) to the end.
pub async fn run(args: impl IntoIterator<Item = String>) -> ExitCode {
    let settings = match parse(args) {
        Ok(s) => s,
        Err(e) => {
            eprint!("{e}");
            return ExitCode::from(2);
        }
    };
    let log = match Log::open(&settings.log, settings.quiet) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tunnel: --log {}: {e}", settings.log);
            return ExitCode::FAILURE;
        }
    };
    let r = async {
        let bound = Bound::bind(settings).await?;
        bound.run(log.clone()).await
    }
    .await;
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log.line(format!("tunnel: {e}"));
            ExitCode::FAILURE
        }
    }
}
