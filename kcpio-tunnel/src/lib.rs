//! `kcpio-tunnel`: a kcptun-compatible TCP port forwarder over KCP.
//! `kcpio-tunnel client` and `kcpio-tunnel server` talk to Debian's
//! `kcptun-client` / `kcptun-server` (20210922) and to newer kcptun
//! releases, with kcptun's flag names, short forms, defaults and
//! `-c config.json` keys (see `README.md` and `kcpio-tunnel(1)`).
//!
//! ```text
//! cargo install --path kcpio-tunnel
//! # far side: KCP on :29900, each stream dials the SSH server
//! kcpio-tunnel server -l :29900 -t 127.0.0.1:22
//! # near side: TCP on :12948, every connection is a stream of one KCP session
//! kcpio-tunnel client -l 127.0.0.1:12948 -r vps:29900
//! ssh -p 12948 127.0.0.1
//! ```
//!
//! The library side is what the binary and its tests need: [`parse`] a
//! command line into [`Settings`], [`Bound::bind`] its listeners,
//! [`Bound::run`] them logging to a [`Log`]; [`run`] does all of it for
//! `main`; [`man_page`] renders the manual from the same clap definition.
//!
//! With `--udp` (kcpio only) the tunnel carries UDP flows instead of TCP:
//! every flow of a client crosses one session as datagrams behind an 8-byte
//! flow header (module `udp` documents the header and the bounds;
//! [`Bound::udp_stats`] reads its counters). With `--udplisten` (client)
//! and `--udptarget` (server) it carries them beside the TCP streams: the
//! flows ride the datagrams of the client's first pooled session, whose
//! byte stream carries smux as always.
//!
//! Modules, one per concern: `cli` (clap definitions), `config` (flags, the
//! `-c` file and the mode resolved into [`Settings`]), `client`, `server`,
//! `detect` (the peer's smux version and snappy framing), `forward`
//! (copying and half-close), `log`, `stats`, `pool` (the client's sessions).
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
//! - it sends with kcpio's model-based congestion controller (`--congestion
//!   bbr`, alias `model`) and windows that grow from `--sndwnd`/`--rcvwnd`
//!   to `--maxwnd` (16384) segments as the path asks, where kcptun keeps a
//!   fixed window in flight whatever the path carries; the peer sees no
//!   difference on the wire. `--congestion none` is kcptun's behaviour
//!   (fixed windows unless `--maxwnd` says otherwise), and `--mode manual`
//!   keeps kcptun's `--nc`.
//!
//! Differences worth knowing: `--crypt null` is AES-256-CFB, as in the
//! Debian release (that release has no unencrypted mode: vector E); use
//! `none` for a cipher-less peer of any release. `--closewait N` closes the
//! second direction of a connection N seconds after the first ended, 0 lets
//! it run until it ends. The client defaults to 0; the server to 30, as newer
//! kcptun: a kcptun client's FIN closes its whole stream, so a server that
//! waited for ever would feed a download nobody reads. `--tcp` is
//! kcptun's (fake TCP, [`kcpio::Carrier::FakeTcp`]: Linux, root); `--snmplog`
//! and `--pprof` are accepted and ignored with a warning; a `-c` key it does
//! not know is refused by name. Stats go to the log every `--snmpperiod`
//! seconds when something changed (0: never) and on `SIGUSR1`.

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory as _, Parser as _};
use kcpio::KcpListener;
use tokio::net::{TcpListener, UdpSocket};

mod cli;
mod client;
mod config;
mod detect;
mod forward;
mod limits;
mod log;
mod pool;
mod server;
mod stats;
mod udp;

use config::HostPorts;
pub use config::{Role, Settings, UdpSettings, parse};
pub use limits::Limits;
pub use log::Log;
use stats::{Stats, report_stats};
pub use udp::{
    DropReason as UdpDropReason, HEADER_LEN as UDP_HEADER_LEN, SILENT_TICKS as UDP_SILENT_TICKS,
    UdpStats, WINDOW as UDP_WINDOW, WIREGUARD_OVERHEAD, wireguard_mtu,
};

/// A bound tunnel end, ready to [`run`](Bound::run).
pub enum Bound {
    /// The client's TCP listener.
    Client(TcpListener, Settings),
    /// The server's KCP listeners: one per port of `-l`'s range.
    Server(Vec<KcpListener>, Settings),
    /// `--udp`: the client's UDP socket, and the counters of its flows.
    UdpClient(UdpSocket, Settings, Arc<UdpStats>),
    /// `--udp`: the server's KCP listeners, and the counters of its flows.
    UdpServer(Vec<KcpListener>, Settings, Arc<UdpStats>),
    /// `--udplisten`: the client's TCP listener and UDP socket, and the
    /// counters of its flows.
    ClientWithUdp(TcpListener, UdpSocket, Settings, Arc<UdpStats>),
    /// `--udptarget`: the server's KCP listeners, and the counters of the
    /// flows beside its streams.
    ServerWithUdp(Vec<KcpListener>, Settings, Arc<UdpStats>),
}

impl Bound {
    /// Binds the listener(s) `settings` names. The client does not resolve
    /// `-r` here: each session resolves it when it connects.
    ///
    /// # Errors
    ///
    /// The address is malformed or cannot be bound.
    pub async fn bind(settings: Settings) -> io::Result<Self> {
        match settings.role {
            Role::Client if settings.udp.enabled => {
                let udp = UdpSocket::bind(&settings.listen)
                    .await
                    .map_err(|e| flag_error("--localaddr", &settings.listen, e))?;
                udp::size_buffers(socket2::SockRef::from(&udp), settings.udp.sockbuf);
                Ok(Self::UdpClient(udp, settings, Arc::default()))
            }
            Role::Client => {
                let tcp = TcpListener::bind(&settings.listen)
                    .await
                    .map_err(|e| flag_error("--localaddr", &settings.listen, e))?;
                if let Some(addr) = &settings.udp_beside {
                    let udp = UdpSocket::bind(addr)
                        .await
                        .map_err(|e| flag_error("--udplisten", addr, e))?;
                    udp::size_buffers(socket2::SockRef::from(&udp), settings.udp.sockbuf);
                    return Ok(Self::ClientWithUdp(tcp, udp, settings, Arc::default()));
                }
                Ok(Self::Client(tcp, settings))
            }
            Role::Server => {
                let range = HostPorts::parse(&settings.listen).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("--listen {}: {e}", settings.listen),
                    )
                })?;
                let mut listeners = Vec::new();
                for addr in range.each() {
                    let l = KcpListener::bind(&addr, &settings.kcp)
                        .await
                        .map_err(|e| flag_error("--listen", &addr, e))?;
                    listeners.push(l);
                }
                if settings.udp.enabled {
                    return Ok(Self::UdpServer(listeners, settings, Arc::default()));
                }
                if settings.udp_beside.is_some() {
                    return Ok(Self::ServerWithUdp(listeners, settings, Arc::default()));
                }
                Ok(Self::Server(listeners, settings))
            }
        }
    }

    /// The TCP (client) or UDP (server; the range's first port) address it
    /// listens on.
    ///
    /// # Errors
    ///
    /// The socket's address cannot be read.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Self::Client(l, _) | Self::ClientWithUdp(l, ..) => l.local_addr(),
            Self::UdpClient(s, ..) => s.local_addr(),
            Self::Server(ls, _) | Self::UdpServer(ls, ..) | Self::ServerWithUdp(ls, ..) => ls
                .first()
                .ok_or_else(|| io::Error::other("no listener"))?
                .local_addr(),
        }
    }

    /// The client's UDP socket's address: `-l` with `--udp`,
    /// `--udplisten` beside TCP; `None` for a server or a TCP-only client.
    ///
    /// # Errors
    ///
    /// The socket's address cannot be read.
    pub fn udp_local_addr(&self) -> io::Result<Option<SocketAddr>> {
        match self {
            Self::UdpClient(s, ..) | Self::ClientWithUdp(_, s, ..) => s.local_addr().map(Some),
            Self::Client(..) | Self::Server(..) | Self::UdpServer(..) | Self::ServerWithUdp(..) => {
                Ok(None)
            }
        }
    }

    /// The UDP flows' counters (flows, datagrams, drops by reason); `None`
    /// for a TCP-only tunnel.
    #[must_use]
    pub fn udp_stats(&self) -> Option<Arc<UdpStats>> {
        match self {
            Self::UdpClient(.., u)
            | Self::UdpServer(.., u)
            | Self::ClientWithUdp(.., u)
            | Self::ServerWithUdp(.., u) => Some(Arc::clone(u)),
            Self::Client(..) | Self::Server(..) => None,
        }
    }

    /// Serves until accepting fails.
    ///
    /// # Errors
    ///
    /// Accepting a connection or session failed.
    pub async fn run(self, log: Log) -> io::Result<()> {
        let stats = Arc::new(Stats::default());
        let settings = match &self {
            Self::Client(_, s)
            | Self::Server(_, s)
            | Self::UdpClient(_, s, _)
            | Self::UdpServer(_, s, _)
            | Self::ClientWithUdp(_, _, s, _)
            | Self::ServerWithUdp(_, s, _) => s.clone(),
        };
        if let Some(u) = self.udp_stats() {
            stats.set_udp(u);
        }
        let listening = match &self {
            Self::Client(l, _) => l.local_addr()?.to_string(),
            Self::UdpClient(s, ..) => format!("{} (udp)", s.local_addr()?),
            Self::ClientWithUdp(l, s, ..) => {
                format!("{} (tcp) {} (udp)", l.local_addr()?, s.local_addr()?)
            }
            Self::Server(ls, _) | Self::UdpServer(ls, ..) | Self::ServerWithUdp(ls, ..) => ls
                .iter()
                .map(|l| l.local_addr().map(|a| a.to_string()))
                .collect::<io::Result<Vec<_>>>()?
                .join(" "),
        };
        for w in &settings.warnings {
            log.line(format!("warning: {w}"));
        }
        log.line(format!(
            "version: kcpio-tunnel {}",
            env!("CARGO_PKG_VERSION")
        ));
        log.line(format!("listening on: {listening}"));
        log.line(settings.summary.as_str());
        // Started once the server's listeners are watched.
        let report = |stats: &Arc<Stats>| {
            tokio::spawn(report_stats(
                Arc::clone(stats),
                log.clone(),
                settings.stats_period,
            ))
        };
        match self {
            Self::Client(tcp, settings) => {
                report(&stats);
                client::run_client(tcp, None, settings, stats, log).await
            }
            Self::ClientWithUdp(tcp, sock, settings, _) => {
                report(&stats);
                client::run_client(tcp, Some(sock), settings, stats, log).await
            }
            Self::UdpClient(sock, settings, _) => {
                report(&stats);
                let own = udp::client::Sessions::Own;
                // A task of its own: a datagram's wake-up polls the flow
                // loop alone, not `main`'s select and its signal futures.
                tokio::spawn(udp::client::run_udp_client(sock, own, settings, stats, log))
                    .await
                    .map_err(io::Error::other)?
            }
            Self::Server(listeners, s)
            | Self::UdpServer(listeners, s, _)
            | Self::ServerWithUdp(listeners, s, _) => {
                let listeners = Arc::new(listeners);
                stats.watch_listeners(Arc::clone(&listeners));
                report(&stats);
                if s.udp.enabled {
                    udp::server::run_udp_server(listeners, s, stats, log).await
                } else {
                    server::run_server(listeners, s, stats, log).await
                }
            }
        }
    }
}

/// An I/O error that names the flag and value it is about.
fn flag_error(flag: &str, value: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{flag} {value}: {e}"))
}

/// The manual page (roff), generated from the command-line definition:
/// the command, then the client's and the server's options.
///
/// # Errors
///
/// Writing the page failed (never, into memory).
pub fn man_page() -> io::Result<Vec<u8>> {
    let cmd = cli::Cli::command();
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let mut page = Vec::new();
        clap_mangen::Man::new(sub.clone()).render_options_section(&mut page)?;
        let page = String::from_utf8_lossy(&page).replacen(
            ".SH OPTIONS",
            &format!(".SH \"{} OPTIONS\"", sub.get_name().to_uppercase()),
            1,
        );
        out.extend_from_slice(page.as_bytes());
    }
    Ok(out)
}

/// A command line resolved into what runs: its settings and log.
/// Made by [`prepare`]; [`run`](Self::run) serves it.
pub struct Prepared {
    settings: Settings,
    log: Log,
}

impl Prepared {
    /// Whether this tunnel end should run on a single-threaded runtime:
    /// the UDP mode (`--udp`). A datagram crosses several tasks (the local
    /// socket's, the session's driver, the flow's), each handing it on
    /// with a wake; on one thread a wake is a queue push, where on a
    /// multi-threaded runtime it woke the other worker through a futex and
    /// a context switch (40% of the client's CPU and 29% of the server's in
    /// the bulk probe's profile). The tasks that were woken run after the
    /// one that woke them yields, so a burst leaves in one batch. One core
    /// carries the mode's work: every datagram of a session already passes
    /// through its one driver task. TCP forwarding (also beside UDP flows)
    /// keeps the multi-threaded runtime: its copies run in parallel.
    #[must_use]
    pub fn single_threaded(&self) -> bool {
        self.settings.udp.enabled
    }

    /// The runtime [`single_threaded`](Self::single_threaded) asks for,
    /// with I/O and timers on.
    ///
    /// # Errors
    ///
    /// The runtime could not be built (threads or the I/O driver).
    pub fn runtime(&self) -> io::Result<tokio::runtime::Runtime> {
        let mut b = if self.single_threaded() {
            tokio::runtime::Builder::new_current_thread()
        } else {
            tokio::runtime::Builder::new_multi_thread()
        };
        b.enable_all().build()
    }

    /// Binds and serves to the end: the process's exit code.
    pub async fn run(self) -> ExitCode {
        let Prepared { settings, log } = self;
        let r = async {
            let bound = Bound::bind(settings).await?;
            bound.run(log.clone()).await
        }
        .await;
        match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                log.line(format!("kcpio-tunnel: {e}"));
                ExitCode::FAILURE
            }
        }
    }
}

/// Resolves the command line in `args` (the program name first) and opens
/// its log, without a runtime: `Err` holds the exit code when there is
/// nothing to run (`--help`, `--version` and `man` printed, exit 0; a usage
/// error, 2, as kcptun's flag parser).
///
/// # Errors
///
/// The exit code, as above.
pub fn prepare(args: impl IntoIterator<Item = String>) -> Result<Prepared, ExitCode> {
    let parsed = match cli::Cli::try_parse_from(cli::go_style(args)) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version go to stdout and exit 0; usage errors
            // go to stderr and exit 2.
            let _ = e.print();
            return Err(ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2)));
        }
    };
    if matches!(parsed.cmd, cli::Cmd::Man) {
        return Err(
            match man_page().and_then(|p| io::Write::write_all(&mut io::stdout(), &p)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kcpio-tunnel: man: {e}");
                    ExitCode::FAILURE
                }
            },
        );
    }
    let settings = match config::resolve(parsed) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kcpio-tunnel: {}", e.trim_end());
            return Err(ExitCode::from(2));
        }
    };
    let log = match Log::open(&settings.log, settings.quiet) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("kcpio-tunnel: --log {}: {e}", settings.log);
            return Err(ExitCode::from(2));
        }
    };
    log.install();
    Ok(Prepared { settings, log })
}

/// Runs the command line in `args` (the program name first) to the end on
/// the current runtime: the process's exit code (2 for a usage error, as
/// kcptun's flag parser). `main` uses [`prepare`] instead, to pick the
/// runtime by mode.
pub async fn run(args: impl IntoIterator<Item = String>) -> ExitCode {
    match prepare(args) {
        Ok(p) => p.run().await,
        Err(code) => code,
    }
}
