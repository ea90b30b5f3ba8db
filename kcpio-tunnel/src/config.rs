//! Resolution of the command line, the `-c` JSON file (kcptun's keys) and
//! the mode into [`Settings`].

use std::time::Duration;

use clap::Parser;
use kcpio::mux::{MuxConfig, Version};
use kcpio::{Config, Congestion, Key, Method, Preset};
use serde::Deserialize;

use crate::cli::{Cli, Cmd, go_style};

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
