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

use std::fs::OpenOptions;
use std::future::Future;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand};
use kcpio::mux::{Mux, MuxConfig, MuxStream, Snappy, Version};
use kcpio::{Config, Congestion, KcpListener, KcpStream, Key, Method, Preset, StatsHandle};

mod pool;
use pool::MuxPool;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// The first bytes of a snappy framed stream (the stream identifier chunk).
const SNAPPY_MAGIC: [u8; 10] = [0xff, 0x06, 0x00, 0x00, 0x73, 0x4e, 0x61, 0x50, 0x70, 0x59];
/// How long a new server session may stay silent before it is dropped.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a client session may go without a byte from the server while a
/// stream is open before the client says why it probably stalls.
const SILENCE_WARNING: Duration = Duration::from_secs(15);
/// Copy buffer per direction of a forwarded connection.
const COPY_BUF: usize = 64 * 1024;

/// kcptun-compatible tunnel over kcpio.
#[derive(Parser, Debug)]
#[command(name = "tunnel", version, about)]
pub struct Cli {
    /// Which end of the tunnel to run.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// Which end of the tunnel.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Accept TCP, carry each connection as a stream to the server.
    Client(ClientArgs),
    /// Accept KCP sessions, dial the target for each stream.
    Server(ServerArgs),
}

/// `tunnel client` flags (kcptun-client's).
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// local listen address
    #[arg(short = 'l', long, default_value = ":12948")]
    localaddr: String,
    /// kcp server address
    #[arg(short = 'r', long, default_value = "vps:29900")]
    remoteaddr: String,
    /// set num of UDP connections to server
    #[arg(long, default_value_t = 1)]
    conn: usize,
    /// set auto expiration time(in seconds) for a single UDP connection, 0 to disable
    #[arg(long, default_value_t = 0)]
    autoexpire: u64,
    /// set how long an expired connection can live (in seconds)
    #[arg(long, default_value_t = 600)]
    scavengettl: u64,
    #[command(flatten)]
    common: Common,
}

/// `tunnel server` flags (kcptun-server's).
#[derive(Args, Debug)]
pub struct ServerArgs {
    /// kcp server listen address
    #[arg(short = 'l', long, default_value = ":29900")]
    listen: String,
    /// target server address (host:port, or a unix socket path)
    #[arg(short = 't', long, default_value = "127.0.0.1:12948")]
    target: String,
    /// start profiling server on :6060 (not supported, ignored)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pprof: Option<bool>,
    #[command(flatten)]
    common: Common,
}

/// Flags both ends take.
#[derive(Args, Debug)]
struct Common {
    /// pre-shared secret between client and server
    #[arg(long, env = "KCPTUN_KEY", default_value = "it's a secrect")]
    key: String,
    /// aes, aes-128, aes-192, salsa20, blowfish, twofish, cast5, 3des, tea, xtea, xor, sm4, none, null, aes-128-gcm
    #[arg(long, default_value = "aes")]
    crypt: String,
    /// profiles: fast3, fast2, fast, normal, manual
    #[arg(long, default_value = "fast")]
    mode: String,
    /// set maximum transmission unit for UDP packets
    #[arg(long, default_value_t = 1350)]
    mtu: usize,
    /// set send window size(num of packets) [client 128, server 1024]
    #[arg(long)]
    sndwnd: Option<u16>,
    /// set receive window size(num of packets) [client 512, server 1024]
    #[arg(long)]
    rcvwnd: Option<u16>,
    /// set reed-solomon erasure coding - datashard
    #[arg(long, visible_alias = "ds", default_value_t = 10)]
    datashard: usize,
    /// set reed-solomon erasure coding - parityshard
    #[arg(long, visible_alias = "ps", default_value_t = 3)]
    parityshard: usize,
    /// set DSCP(6bit)
    #[arg(long, default_value_t = 0)]
    dscp: u8,
    /// disable compression
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    nocomp: Option<bool>,
    /// flush ack immediately when a packet is received
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    acknodelay: Option<bool>,
    #[arg(long, hide = true, default_value_t = 0)]
    nodelay: u32,
    #[arg(long, hide = true, default_value_t = 50)]
    interval: u32,
    #[arg(long, hide = true, default_value_t = 0)]
    resend: u32,
    #[arg(long, hide = true, default_value_t = 0)]
    nc: u32,
    /// per-socket buffer in bytes
    #[arg(long, default_value_t = 4_194_304)]
    sockbuf: usize,
    /// specify smux version, available 1,2 (the server detects the client's)
    #[arg(long, default_value_t = 1)]
    smuxver: u8,
    /// the overall de-mux buffer in bytes
    #[arg(long, default_value_t = 4_194_304)]
    smuxbuf: usize,
    /// per stream receive buffer in bytes, smux v2+
    #[arg(long, default_value_t = 2_097_152)]
    streambuf: u32,
    /// smux max frame size
    #[arg(long, default_value_t = 32_768)]
    framesize: usize,
    /// seconds between heartbeats
    #[arg(long, default_value_t = 10)]
    keepalive: u64,
    /// seconds the second direction of a connection may outlive the first, 0 until it ends [client 0, server 30]
    #[arg(long)]
    closewait: Option<u64>,
    /// send rate limit per session in bytes/s, 0 to disable
    #[arg(long, default_value_t = 0)]
    ratelimit: u64,
    /// collect snmp to file (not supported, ignored)
    #[arg(long, default_value = "")]
    snmplog: String,
    /// seconds between stats lines in the log
    #[arg(long, default_value_t = 60)]
    snmpperiod: u64,
    /// specify a log file to output, default goes to stderr
    #[arg(long, default_value = "")]
    log: String,
    /// to suppress the 'stream open/close' messages
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    quiet: Option<bool>,
    /// to emulate a TCP connection(linux) (not supported)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    tcp: Option<bool>,
    /// config from json file, which will override the command from shell
    #[arg(short = 'c', default_value = "")]
    c: String,
    /// kcpio only: congestion controller: model (paces at the measured rate, ignores random loss), none (kcptun's: the window only, nc=1) or kcp (nc=0) [default: model; with --mode manual, --nc decides]
    #[arg(long)]
    congestion: Option<String>,
    /// kcpio only: windows grow from --sndwnd/--rcvwnd up to this many segments as the path needs, at most about 2 x maxwnd x mtu bytes each way per session; 0 keeps them fixed, as kcptun [default: 16384 with the model controller, else 0]
    #[arg(long)]
    maxwnd: Option<u16>,
}

/// `--maxwnd` with the model-based controller: windows that start at kcptun's
/// and grow to 16384 segments hold two bandwidth-delay products of a
/// 100 Mbit/s, 200 ms path plus what a lossy path keeps out of order: at 9%
/// loss each way a segment lost three or four times in a row holds the
/// window's left edge for most of a second, and on the simulator 8192
/// segments kept the model at 76% of that path, 16384 at 93%.
const DEFAULT_MAXWND: u16 = 16384;

/// The `-c` file: kcptun's keys, each overriding its flag.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct JsonConfig {
    localaddr: Option<String>,
    remoteaddr: Option<String>,
    listen: Option<String>,
    target: Option<String>,
    key: Option<String>,
    crypt: Option<String>,
    mode: Option<String>,
    conn: Option<usize>,
    autoexpire: Option<u64>,
    scavengettl: Option<u64>,
    mtu: Option<usize>,
    sndwnd: Option<u16>,
    rcvwnd: Option<u16>,
    datashard: Option<usize>,
    parityshard: Option<usize>,
    dscp: Option<u8>,
    nocomp: Option<bool>,
    acknodelay: Option<bool>,
    nodelay: Option<u32>,
    interval: Option<u32>,
    resend: Option<u32>,
    nc: Option<u32>,
    sockbuf: Option<usize>,
    smuxver: Option<u8>,
    smuxbuf: Option<usize>,
    streambuf: Option<u32>,
    framesize: Option<usize>,
    keepalive: Option<u64>,
    closewait: Option<u64>,
    ratelimit: Option<u64>,
    log: Option<String>,
    snmplog: Option<String>,
    snmpperiod: Option<u64>,
    quiet: Option<bool>,
    tcp: Option<bool>,
    pprof: Option<bool>,
}

/// Which end of the tunnel this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Accepts TCP, opens KCP sessions.
    Client,
    /// Accepts KCP sessions, dials TCP.
    Server,
}

/// Everything resolved: flags, then `-c` keys over them, then the mode.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Which end this is.
    pub role: Role,
    /// Client: TCP listen address. Server: UDP listen address.
    pub listen: String,
    /// Client: the KCP server. Server: the TCP target.
    pub peer: String,
    /// Client: sessions in the pool (`--conn`).
    pub conn: usize,
    /// Client: replace a session after this long (`--autoexpire`; zero never).
    pub autoexpire: Duration,
    /// Client: how long an expired session may finish its streams (`--scavengettl`).
    pub scavengettl: Duration,
    /// How long the second direction of a connection may run after the first ended (`--closewait`; zero: until it ends).
    pub closewait: Duration,
    /// Whether the session is snappy-framed (not `--nocomp`).
    pub compress: bool,
    /// The smux version (`--smuxver`).
    pub version: Version,
    /// Whether open/close lines are suppressed (`--quiet`).
    pub quiet: bool,
    /// The log file (`--log`; empty: stderr).
    pub log: String,
    /// How often the stats line is logged (`--snmpperiod`).
    pub stats_period: Duration,
    /// The KCP session configuration the flags resolve to.
    pub kcp: Config,
    /// The smux configuration the flags resolve to.
    pub mux: MuxConfig,
    /// The same with the other smux version (the server follows its client).
    pub mux_other: MuxConfig,
    /// What the startup line says.
    pub summary: String,
    /// Warnings about accepted but ignored flags.
    pub warnings: Vec<String>,
}

/// Go's flag package takes `-name` for `--name`; clap wants two dashes.
fn go_style(args: impl IntoIterator<Item = String>) -> Vec<String> {
    args.into_iter()
        .map(|a| {
            let b = a.as_bytes();
            if b.len() > 2 && b[0] == b'-' && b[1].is_ascii_alphabetic() && !a.starts_with("--") {
                let name = a[1..].split('=').next().unwrap_or("");
                if name.len() > 1 {
                    return format!("-{a}");
                }
            }
            a
        })
        .collect()
}

macro_rules! over {
    ($json:expr, $($field:ident => $target:expr),* $(,)?) => {
        {$(if let Some(v) = $json.$field.take() { $target = v; })*}
    };
}

/// Parses a command line (program name first) into [`Settings`].
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Settings, String> {
    let cli = Cli::try_parse_from(go_style(args)).map_err(|e| e.to_string())?;
    let mut pprof = false;
    let (role, mut listen, mut peer, mut conn, mut autoexpire, mut scavengettl, mut c) =
        match cli.cmd {
            Cmd::Client(a) => (
                Role::Client,
                a.localaddr,
                a.remoteaddr,
                a.conn,
                a.autoexpire,
                a.scavengettl,
                a.common,
            ),
            Cmd::Server(a) => {
                pprof = a.pprof.unwrap_or(false);
                (Role::Server, a.listen, a.target, 1, 0, 600, a.common)
            }
        };
    let (mut sndwnd, mut rcvwnd) = match role {
        Role::Client => (c.sndwnd.unwrap_or(128), c.rcvwnd.unwrap_or(512)),
        Role::Server => (c.sndwnd.unwrap_or(1024), c.rcvwnd.unwrap_or(1024)),
    };
    // A kcptun client's FIN closes its whole stream: a server must not feed
    // a download nobody reads for ever (newer kcptun's server default).
    let mut closewait = c.closewait.unwrap_or(match role {
        Role::Client => 0,
        Role::Server => 30,
    });
    let mut nocomp = c.nocomp.unwrap_or(false);
    let mut acknodelay = c.acknodelay.unwrap_or(false);
    let mut quiet = c.quiet.unwrap_or(false);
    let mut tcp = c.tcp.unwrap_or(false);
    if !c.c.is_empty() {
        let text = std::fs::read_to_string(&c.c).map_err(|e| format!("-c {}: {e}", c.c))?;
        let mut j: JsonConfig =
            serde_json::from_str(&text).map_err(|e| format!("-c {}: {e}", c.c))?;
        match role {
            Role::Client => {
                over!(j, localaddr => listen, remoteaddr => peer);
            }
            Role::Server => {
                over!(j, listen => listen, target => peer);
            }
        }
        over!(j,
            key => c.key, crypt => c.crypt, mode => c.mode, conn => conn,
            autoexpire => autoexpire, scavengettl => scavengettl, mtu => c.mtu,
            sndwnd => sndwnd, rcvwnd => rcvwnd, datashard => c.datashard,
            parityshard => c.parityshard, dscp => c.dscp, nocomp => nocomp,
            acknodelay => acknodelay, nodelay => c.nodelay, interval => c.interval,
            resend => c.resend, nc => c.nc, sockbuf => c.sockbuf, smuxver => c.smuxver,
            smuxbuf => c.smuxbuf, streambuf => c.streambuf, framesize => c.framesize,
            keepalive => c.keepalive, closewait => closewait, ratelimit => c.ratelimit,
            log => c.log, snmplog => c.snmplog, snmpperiod => c.snmpperiod,
            quiet => quiet, tcp => tcp, pprof => pprof,
        );
    }
    let mut warnings = Vec::new();
    if tcp {
        warnings.push("--tcp (tcpraw) is not supported: using UDP".to_owned());
    }
    if pprof {
        warnings.push("--pprof is not supported: ignored".to_owned());
    }
    if !c.snmplog.is_empty() {
        warnings.push("--snmplog is not supported: stats go to the log".to_owned());
    }
    // Debian's kcptun has no `null` cipher: its switch falls back to AES.
    let crypt_name = if c.crypt == "null" {
        "aes"
    } else {
        c.crypt.as_str()
    };
    let method = Method::from_name(crypt_name)
        .ok_or_else(|| format!("--crypt: unknown cipher '{}'", c.crypt))?;
    let version = match c.smuxver {
        1 => Version::V1,
        2 => Version::V2,
        v => return Err(format!("--smuxver: unsupported version {v} (1 or 2)")),
    };
    if conn == 0 {
        return Err("--conn: must be at least 1".to_owned());
    }
    let preset = match c.mode.as_str() {
        "normal" => Some(Preset::Normal),
        "fast" => Some(Preset::Fast),
        "fast2" => Some(Preset::Fast2),
        "fast3" => Some(Preset::Fast3),
        _ => None,
    };
    let mut b = Config::builder();
    b = match preset {
        Some(p) => b.preset(p),
        // kcptun's `manual` (and any other name): the hidden flags.
        None => b
            .preset(Preset::Default)
            .nodelay(c.nodelay != 0, c.interval, c.resend, c.nc != 0),
    };
    // The model-based controller by default: kcptun's modes (nc=1, fixed
    // windows) fill a short path's queue and leave a long lossy path mostly
    // idle (docs/FIELD.md). `--mode manual` keeps kcptun's `--nc`.
    let congestion = match (&c.congestion, preset) {
        (Some(name), _) => Some(
            Congestion::from_name(name)
                .ok_or_else(|| format!("--congestion: want model, none or kcp; got '{name}'"))?,
        ),
        (None, Some(_)) => Some(Congestion::Model),
        (None, None) => None,
    };
    if let Some(cc) = congestion {
        b = b.congestion(cc);
    }
    let model = congestion == Some(Congestion::Model);
    let maxwnd = c.maxwnd.unwrap_or(if model { DEFAULT_MAXWND } else { 0 });
    if maxwnd > 0 {
        b = b.max_window(maxwnd);
    }
    let kcp = b
        .crypto(method, Key::passphrase(c.key.as_str()))
        .fec(c.datashard, c.parityshard)
        .mtu(c.mtu)
        .window(sndwnd, rcvwnd)
        .stream(true)
        .write_delay(false)
        .ack_nodelay(acknodelay)
        .dscp(c.dscp)
        .rate_limit(c.ratelimit)
        .socket_buffers(c.sockbuf, c.sockbuf)
        .build()
        .map_err(|e| format!("KCP settings: {e}"))?;
    let mux_config = |version| {
        MuxConfig::builder()
            .version(version)
            .keepalive_interval(Duration::from_secs(c.keepalive))
            .max_frame_size(c.framesize)
            .receive_buffer(c.smuxbuf)
            .stream_window(c.streambuf)
            .build()
            .map_err(|e| format!("smux settings: {e}"))
    };
    let mux = mux_config(version)?;
    let mux_other = mux_config(match version {
        Version::V1 => Version::V2,
        Version::V2 => Version::V1,
    })?;
    let summary = format!(
        "encryption: {} ({}), mode: {}, mtu: {}, sndwnd: {sndwnd}, rcvwnd: {rcvwnd}, \
         datashard: {}, parityshard: {}, compression: {}, smuxver: {}, framesize: {}, conn: {conn}, \
         congestion: {}, maxwnd: {maxwnd}",
        c.crypt,
        method.name(),
        c.mode,
        c.mtu,
        c.datashard,
        c.parityshard,
        !nocomp,
        c.smuxver,
        c.framesize,
        c.congestion
            .as_deref()
            .unwrap_or(if model { "model" } else { "mode's nc" }),
    );
    Ok(Settings {
        role,
        listen: go_addr(&listen),
        peer,
        conn,
        autoexpire: Duration::from_secs(autoexpire),
        scavengettl: Duration::from_secs(scavengettl),
        closewait: Duration::from_secs(closewait),
        compress: !nocomp,
        version,
        quiet,
        log: c.log,
        stats_period: Duration::from_secs(c.snmpperiod.max(1)),
        kcp,
        mux,
        mux_other,
        summary,
        warnings,
    })
}

/// Go's `:port` means every address.
fn go_addr(addr: &str) -> String {
    if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_owned()
    }
}

// ---------------------------------------------------------------- logging

/// Where log lines go (stderr or `--log`), with kcptun's `--quiet`.
#[derive(Clone)]
pub struct Log {
    out: Arc<Mutex<Box<dyn io::Write + Send>>>,
    quiet: bool,
}

impl Log {
    /// Opens `path` for appending, or stderr when it is empty.
    pub fn open(path: &str, quiet: bool) -> io::Result<Self> {
        let out: Box<dyn io::Write + Send> = if path.is_empty() {
            Box::new(io::stderr())
        } else {
            Box::new(OpenOptions::new().create(true).append(true).open(path)?)
        };
        Ok(Self {
            out: Arc::new(Mutex::new(out)),
            quiet,
        })
    }

    /// One line, with Go's log timestamp (`2006/01/02 15:04:05`, UTC).
    pub fn line(&self, msg: impl std::fmt::Display) {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (y, m, d) = civil_from_days(secs / 86_400);
        let t = secs % 86_400;
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = writeln!(
            out,
            "{y:04}/{m:02}/{d:02} {:02}:{:02}:{:02} {msg}",
            t / 3600,
            t / 60 % 60,
            t % 60
        );
        let _ = out.flush();
    }

    /// A stream open/close line: dropped with `--quiet`.
    fn stream(&self, msg: impl std::fmt::Display) {
        if !self.quiet {
            self.line(msg);
        }
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
}

// ---------------------------------------------------------------- stats

/// Counters of one tunnel process, printed every `--snmpperiod` and on
/// SIGUSR1.
#[derive(Default)]
pub struct Stats {
    sessions_opened: AtomicU64,
    sessions_open: AtomicUsize,
    streams_opened: AtomicU64,
    streams_open: AtomicUsize,
    /// TCP bytes into the tunnel, and out of it.
    tcp_in: AtomicU64,
    tcp_out: AtomicU64,
    /// Bytes through the KCP byte streams (after compression).
    kcp_in: AtomicU64,
    kcp_out: AtomicU64,
    /// The live KCP sessions' stats, read when a line is printed.
    kcp: Mutex<Vec<StatsHandle>>,
}

impl Stats {
    fn line(&self) -> String {
        let kcp = self
            .kcp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut dgin, mut dgout, mut bin, mut bout, mut rexmit, mut fec_rec) = (0, 0, 0, 0, 0, 0);
        for s in kcp.iter().filter_map(StatsHandle::stats) {
            dgin += s.datagrams_in;
            dgout += s.datagrams_out;
            bin += s.bytes_in;
            bout += s.bytes_out;
            rexmit += s.arq.retransmit_rto + s.arq.retransmit_fast + s.arq.retransmit_early;
            fec_rec += s.fec_in.recovered;
        }
        format!(
            "stats: sessions {} open / {} total, streams {} open / {} total, \
             tcp in {} B out {} B, kcp stream in {} B out {} B, \
             udp in {dgin} pkts {bin} B out {dgout} pkts {bout} B, retransmits {rexmit}, fec recovered {fec_rec}",
            self.sessions_open.load(Ordering::Relaxed),
            self.sessions_opened.load(Ordering::Relaxed),
            self.streams_open.load(Ordering::Relaxed),
            self.streams_opened.load(Ordering::Relaxed),
            self.tcp_in.load(Ordering::Relaxed),
            self.tcp_out.load(Ordering::Relaxed),
            self.kcp_in.load(Ordering::Relaxed),
            self.kcp_out.load(Ordering::Relaxed),
        )
    }
}

/// Logs the stats every `period` and on SIGUSR1, forever.
async fn report_stats(stats: Arc<Stats>, log: Log, period: Duration) {
    #[cfg(unix)]
    let mut usr1 =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok();
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    loop {
        #[cfg(unix)]
        {
            let sig = async {
                match usr1.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tick.tick() => {}
                _ = sig => {}
            }
        }
        #[cfg(not(unix))]
        tick.tick().await;
        log.line(stats.line());
    }
}

/// The KCP session under a mux: counts bytes, registers the session's stats
/// handle for the log line, and remembers whether anything arrived.
struct Metered {
    kcp: KcpStream,
    stats: Arc<Stats>,
    heard: Arc<AtomicBool>,
}

impl Metered {
    fn new(kcp: KcpStream, stats: Arc<Stats>) -> Self {
        stats.sessions_opened.fetch_add(1, Ordering::Relaxed);
        stats.sessions_open.fetch_add(1, Ordering::Relaxed);
        stats
            .kcp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(kcp.stats_handle());
        Self {
            kcp,
            stats,
            heard: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.stats.sessions_open.fetch_sub(1, Ordering::Relaxed);
        let conv = self.kcp.conv();
        self.stats
            .kcp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|h| h.conv() != conv);
    }
}

impl AsyncRead for Metered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.kcp).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.heard.store(true, Ordering::Relaxed);
            self.stats.kcp_in.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl AsyncWrite for Metered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.kcp).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.stats.kcp_out.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.kcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.kcp).poll_shutdown(cx)
    }
}

// ---------------------------------------------------------------- transports

/// Any transport a mux can run over.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Looks at the first bytes a transport delivers.
type FirstBytesCheck = Box<dyn FnOnce(&[u8]) + Send>;

/// A transport whose first reads return bytes already taken from it (the
/// server's detection), and whose first bytes read go to a check once (the
/// client's mismatch diagnosis). Writes pass through.
struct Tap<T> {
    prefix: Vec<u8>,
    pos: usize,
    check: Option<FirstBytesCheck>,
    inner: T,
}

impl<T> Tap<T> {
    fn prefixed(prefix: Vec<u8>, inner: T) -> Self {
        Self {
            prefix,
            pos: 0,
            check: None,
            inner,
        }
    }

    fn watched(inner: T, check: impl FnOnce(&[u8]) + Send + 'static) -> Self {
        Self {
            prefix: Vec::new(),
            pos: 0,
            check: Some(Box::new(check)),
            inner,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tap<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let pos = self.pos;
            buf.put_slice(&self.prefix[pos..pos + n]);
            self.pos += n;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            if let Some(check) = self.check.take() {
                check(&buf.filled()[before..]);
            }
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tap<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a client's first bytes say about how it talks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detected {
    /// Whether the peer snappy-frames the session.
    pub compressed: bool,
    /// The smux version the peer speaks.
    pub version: Version,
}

/// Reads the first bytes of a server session: a snappy stream identifier
/// (compression on) or not, then the first smux frame's version byte.
/// Returns the transport with those bytes put back, ready for the mux.
async fn detect<T: Io + 'static>(mut io: T) -> io::Result<(Box<dyn Io>, Detected)> {
    let mut head = Vec::with_capacity(SNAPPY_MAGIC.len());
    let mut byte = [0u8; 64];
    loop {
        let n = io
            .read(&mut byte[..SNAPPY_MAGIC.len() - head.len().min(SNAPPY_MAGIC.len())])
            .await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before a first frame",
            ));
        }
        head.extend_from_slice(&byte[..n]);
        if head[0] != SNAPPY_MAGIC[0] || head.len() >= SNAPPY_MAGIC.len() {
            break;
        }
    }
    let compressed = head[0] == SNAPPY_MAGIC[0];
    if compressed && head[..] != SNAPPY_MAGIC {
        return Err(bad_start(&head));
    }
    let io = Tap::prefixed(head.clone(), io);
    let (mut io, first): (Box<dyn Io>, u8) = if compressed {
        let mut s = Snappy::new(io);
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        (Box::new(s), b[0])
    } else {
        (Box::new(io), head[0])
    };
    let version = match first {
        1 => Version::V1,
        2 => Version::V2,
        _ => return Err(bad_start(&[first])),
    };
    if compressed {
        io = Box::new(Tap::prefixed(vec![first], io));
    }
    Ok((
        io,
        Detected {
            compressed,
            version,
        },
    ))
}

fn bad_start(head: &[u8]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the client's first bytes {head:02x?} are neither a snappy stream nor an smux v1/v2 frame"
        ),
    )
}

// ---------------------------------------------------------------- forwarding

/// Copies both ways between a TCP connection and a stream. A direction
/// that ends cleanly is half-closed on the other side (TCP shutdown, or a
/// FIN); the other direction then runs until it ends, or for at most
/// `closewait` when that is set. An error in either ends both.
pub async fn forward(
    tcp: TcpStream,
    stream: MuxStream,
    closewait: Duration,
    stats: &Stats,
) -> io::Result<(u64, u64)> {
    let _ = tcp.set_nodelay(true);
    let (tr, tw) = tcp.into_split();
    let (sr, sw) = stream.into_split();
    let up = pipe(tr, sw, &stats.tcp_in);
    let down = pipe(sr, tw, &stats.tcp_out);
    tokio::pin!(up, down);
    let wait = |first: io::Result<u64>| async move {
        let n = first?;
        Ok::<_, io::Error>(n)
    };
    tokio::select! {
        r = &mut up => {
            let u = wait(r).await?;
            let d = second(down, closewait).await?;
            Ok((u, d))
        }
        r = &mut down => {
            let d = wait(r).await?;
            let u = second(up, closewait).await?;
            Ok((u, d))
        }
    }
}

async fn second(
    f: Pin<&mut impl Future<Output = io::Result<u64>>>,
    closewait: Duration,
) -> io::Result<u64> {
    if closewait.is_zero() {
        f.await
    } else {
        Ok(tokio::time::timeout(closewait, f).await.unwrap_or(Ok(0))?)
    }
}

/// Copies `from` into `to` until EOF, then shuts `to` down (a FIN or a TCP
/// half-close).
async fn pipe(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    counter: &AtomicU64,
) -> io::Result<u64> {
    let mut buf = vec![0u8; COPY_BUF];
    let mut total = 0u64;
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            to.shutdown().await?;
            return Ok(total);
        }
        to.write_all(&buf[..n]).await?;
        total += n as u64;
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------- client

/// The client's `--conn` sessions ([`MuxPool`]: created lazily, replaced
/// when closed or expired after `--autoexpire`, expired ones closed
/// `--scavengettl` later), and how to make one.
pub struct Pool {
    settings: Settings,
    remote: SocketAddr,
    pool: MuxPool,
    stats: Arc<Stats>,
    log: Log,
}

impl Pool {
    fn new(settings: Settings, remote: SocketAddr, stats: Arc<Stats>, log: Log) -> Arc<Self> {
        let pool = MuxPool::new(
            settings.conn,
            Some(settings.autoexpire),
            settings.scavengettl,
        );
        Arc::new(Self {
            settings,
            remote,
            pool,
            stats,
            log,
        })
    }

    /// The next slot's session. Retries every second until a session is
    /// up, as kcptun does.
    async fn session(&self) -> Arc<Mux> {
        loop {
            match self.pool.get(|| self.connect()).await {
                Ok(mux) => return mux,
                Err(e) => {
                    self.log.line(format!("re-connecting: {e}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// A new KCP session and its mux, with the mismatch watchers.
    async fn connect(&self) -> io::Result<Mux> {
        let kcp = KcpStream::connect(self.remote, &self.settings.kcp).await?;
        self.log.line(format!(
            "smux version: {}, on connection: {} -> {}",
            self.settings.version.as_u8(),
            kcp.local_addr()?,
            self.remote
        ));
        let metered = Metered::new(kcp, Arc::clone(&self.stats));
        let heard = Arc::clone(&metered.heard);
        let ours = self.settings.version.as_u8();
        let log = self.log.clone();
        let version_check = move |b: &[u8]| {
            if b[0] != ours && (b[0] == 1 || b[0] == 2) {
                log.line(format!(
                    "MISMATCH: the server speaks smux v{}, we v{ours}: run both ends with --smuxver {}",
                    b[0], b[0]
                ));
            }
        };
        let log = self.log.clone();
        let io: Box<dyn Io> = if self.settings.compress {
            let raw = Tap::watched(metered, move |b: &[u8]| {
                if b[0] != SNAPPY_MAGIC[0] {
                    log.line(
                        "MISMATCH: the server does not compress (it runs with --nocomp): add --nocomp here",
                    );
                }
            });
            Box::new(Tap::watched(Snappy::new(raw), version_check))
        } else {
            Box::new(Tap::watched(metered, move |b: &[u8]| {
                if b[0] == SNAPPY_MAGIC[0] {
                    log.line(
                        "MISMATCH: the server compresses (it runs without --nocomp): remove --nocomp here",
                    );
                } else {
                    version_check(b);
                }
            }))
        };
        let mux = Mux::client(io, &self.settings.mux);
        // Silence while a stream waits is a wrong key or cipher, a server
        // that is not running, or a kcptun server that dropped us over a
        // smux version it did not expect.
        let log = self.log.clone();
        tokio::spawn(async move {
            tokio::time::sleep(SILENCE_WARNING).await;
            if !heard.load(Ordering::Relaxed) {
                log.line(format!(
                    "no reply from the server in {} s: check that it runs and that --key, --crypt, \
                     --smuxver and --nocomp match on both ends",
                    SILENCE_WARNING.as_secs()
                ));
            }
        });
        Ok(mux)
    }

    /// Closes expired sessions whose time has come, once a second.
    async fn scavenge(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            for _ in 0..self.pool.scavenge() {
                self.log.line("scavenger: session closed due to ttl");
            }
        }
    }
}

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
                run_client(tcp, settings, remote, stats, log).await
            }
            Self::Server(kcp, settings) => run_server(kcp, settings, stats, log).await,
        }
    }
}

async fn run_client(
    tcp: TcpListener,
    settings: Settings,
    remote: SocketAddr,
    stats: Arc<Stats>,
    log: Log,
) -> io::Result<()> {
    let closewait = settings.closewait;
    let pool = Pool::new(settings, remote, Arc::clone(&stats), log.clone());
    tokio::spawn(Arc::clone(&pool).scavenge());
    loop {
        let (conn, from) = tcp.accept().await?;
        let pool = Arc::clone(&pool);
        let stats = Arc::clone(&stats);
        let log = log.clone();
        tokio::spawn(async move {
            // A session that died since it was handed out: one more try.
            let mut stream = None;
            for _ in 0..2 {
                match pool.session().await.open_stream().await {
                    Ok(s) => {
                        stream = Some(s);
                        break;
                    }
                    Err(e) => log.line(format!("open stream: {e}")),
                }
            }
            let Some(stream) = stream else { return };
            let sid = stream.id();
            stats.streams_opened.fetch_add(1, Ordering::Relaxed);
            stats.streams_open.fetch_add(1, Ordering::Relaxed);
            log.stream(format!("stream opened in: {from} out: {remote}({sid})"));
            let r = forward(conn, stream, closewait, &stats).await;
            stats.streams_open.fetch_sub(1, Ordering::Relaxed);
            log_close(&log, from, remote.to_string(), sid, r);
        });
    }
}

fn log_close(
    log: &Log,
    from: impl std::fmt::Display,
    to: String,
    sid: u32,
    r: io::Result<(u64, u64)>,
) {
    match r {
        Ok((up, down)) => log.stream(format!(
            "stream closed in: {from} out: {to}({sid}), {up} B up, {down} B down"
        )),
        Err(e) => log.line(format!("stream closed in: {from} out: {to}({sid}): {e}")),
    }
}

async fn run_server(
    kcp: KcpListener,
    settings: Settings,
    stats: Arc<Stats>,
    log: Log,
) -> io::Result<()> {
    let settings = Arc::new(settings);
    loop {
        let (session, from) = kcp.accept().await?;
        let settings = Arc::clone(&settings);
        let stats = Arc::clone(&stats);
        let log = log.clone();
        tokio::spawn(async move {
            let metered = Metered::new(session, Arc::clone(&stats));
            let detected = tokio::time::timeout(FIRST_BYTES_TIMEOUT, detect(metered)).await;
            let (io, d) = match detected {
                Ok(Ok(x)) => x,
                Ok(Err(e)) => return log.line(format!("{from}: {e}")),
                Err(_) => return log.line(format!("{from}: nothing received, session dropped")),
            };
            if d.compressed != settings.compress || d.version != settings.version {
                log.line(format!(
                    "{from}: client uses smux v{} with compression {}: serving it that way",
                    d.version.as_u8(),
                    if d.compressed { "on" } else { "off" }
                ));
            }
            let mux_config = if d.version == settings.version {
                &settings.mux
            } else {
                &settings.mux_other
            };
            let mux = Mux::server(io, mux_config);
            loop {
                let stream = match mux.accept_stream().await {
                    Ok(s) => s,
                    Err(e) => return log.line(format!("{from}: session ended: {e}")),
                };
                let settings = Arc::clone(&settings);
                let stats = Arc::clone(&stats);
                let log = log.clone();
                tokio::spawn(async move {
                    let sid = stream.id();
                    let target = match TcpStream::connect(&settings.peer).await {
                        Ok(t) => t,
                        Err(e) => {
                            // Dropping the stream sends its FIN, as kcptun does.
                            return log.line(format!("dial {}: {e}", settings.peer));
                        }
                    };
                    stats.streams_opened.fetch_add(1, Ordering::Relaxed);
                    stats.streams_open.fetch_add(1, Ordering::Relaxed);
                    log.stream(format!(
                        "stream opened in: {from}({sid}) out: {}",
                        settings.peer
                    ));
                    let r = forward(target, stream, settings.closewait, &stats).await;
                    stats.streams_open.fetch_sub(1, Ordering::Relaxed);
                    log_close(
                        &log,
                        format!("{from}({sid})"),
                        settings.peer.clone(),
                        sid,
                        r,
                    );
                });
            }
        });
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
