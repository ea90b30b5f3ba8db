//! Resolution of the command line, the `-c` JSON file (kcptun's keys) and
//! the mode into [`Settings`].

use std::time::Duration;

use clap::{Parser, ValueEnum};
use kcpio::mux::{MuxConfig, Version};
use kcpio::{Carrier, Config, Congestion, Key, Method, Preset};
use serde::Deserialize;

use crate::cli::{Cli, Cmd, CongestionArg, Mode, go_style};

/// `--maxwnd` with the model-based controller: windows that start at kcptun's
/// and grow to 16384 segments hold two bandwidth-delay products of a
/// 100 Mbit/s, 200 ms path plus what a lossy path keeps out of order: at 9%
/// loss each way a segment lost three or four times in a row holds the
/// window's left edge for most of a second, and on the simulator 8192
/// segments kept the model at 76% of that path, 16384 at 93%.
const DEFAULT_MAXWND: u16 = 16384;

/// The `-c` file: kcptun's keys, each overriding its flag.
///
/// A key it does not know (a newer kcptun's `QPP`, a typo) is refused with
/// its name, as an unknown flag is: silently ignoring it would run a tunnel
/// the operator did not configure.
#[derive(Deserialize, Default, Debug)]
#[serde(default, deny_unknown_fields)]
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
    // kcpio's server limits, named as their flags.
    maxstreams: Option<usize>,
    sessionstreams: Option<usize>,
    maxdials: Option<usize>,
    dialtimeout: Option<u64>,
    udp: Option<bool>,
    udpflows: Option<usize>,
    udpidle: Option<u64>,
    maxbuffer: Option<usize>,
    udpdeadline: Option<u64>,
    udplisten: Option<String>,
    udptarget: Option<String>,
    nomigrate: Option<bool>,
    fixedfec: Option<bool>,
    noicmpreset: Option<bool>,
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
    /// How often the stats line is logged when something changed
    /// (`--snmpperiod`; zero: never, `SIGUSR1` still does).
    pub stats_period: Duration,
    /// The KCP session configuration the flags resolve to.
    pub kcp: Config,
    /// The smux configuration the flags resolve to.
    pub mux: MuxConfig,
    /// The same with the other smux version (the server follows its client).
    pub mux_other: MuxConfig,
    /// Server: the bounds on streams, dials and the dial timeout
    /// (`--maxstreams`, `--sessionstreams`, `--maxdials`, `--dialtimeout`,
    /// `--maxbuffer`).
    pub limits: crate::Limits,
    /// The UDP mode (`--udp`, `--udpflows`, `--udpidle`).
    pub udp: UdpSettings,
    /// UDP beside TCP: the client's `--udplisten` (a UDP address whose
    /// flows cross the first session beside its TCP streams) or the
    /// server's `--udptarget` (where those flows go). `None` without it,
    /// and always with `--udp`.
    pub udp_beside: Option<String>,
    /// What the startup line says.
    pub summary: String,
    /// Warnings about accepted but ignored flags.
    pub warnings: Vec<String>,
}

/// The UDP mode's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpSettings {
    /// Whether the tunnel carries UDP flows instead of TCP (`--udp`).
    /// UDP beside TCP (`--udplisten`, `--udptarget`) is
    /// [`Settings::udp_beside`].
    pub enabled: bool,
    /// The most flows at once (`--udpflows`): the client's source
    /// addresses, the server's flows per session.
    pub flows: usize,
    /// How long a flow may go without a datagram (`--udpidle`).
    pub idle: Duration,
    /// The datagram FEC group deadline (`--udpdeadline`): about the most
    /// delay a rebuilt datagram gets.
    pub deadline: Duration,
    /// The receive and send buffer asked for each of the UDP mode's own
    /// sockets, the client's listening socket and the server's flow
    /// sockets (`--sockbuf`; the kernel grants at most
    /// `net.core.rmem_max`/`wmem_max`). A burst that finds the tunnel busy
    /// waits there instead of being dropped by the kernel.
    pub sockbuf: usize,
    /// Whether the session's stream is FEC-framed (`--datashard` above 0):
    /// then datagrams cross even a peer that did not negotiate datagram
    /// FEC, as kcp-go's unprotected OOB packets.
    pub stream_fec: bool,
}

macro_rules! over {
    ($json:expr, $($field:ident => $target:expr),* $(,)?) => {
        {$(if let Some(v) = $json.$field.take() { $target = v; })*}
    };
}

/// Parses a command line (program name first) into [`Settings`].
///
/// # Errors
///
/// A usage error, naming the flag (or the `-c` file's key) at fault; also
/// `--help` and `--version`, whose text is the error's.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Settings, String> {
    let cli = Cli::try_parse_from(go_style(args)).map_err(|e| e.to_string())?;
    resolve(cli)
}

/// Resolves parsed flags, the `-c` file and the mode into [`Settings`].
pub(crate) fn resolve(cli: Cli) -> Result<Settings, String> {
    let mut pprof = false;
    let (
        role,
        mut listen,
        mut peer,
        mut conn,
        mut autoexpire,
        mut scavengettl,
        (mut c, mut udp_beside),
    ) = match cli.cmd {
        Cmd::Client(a) => (
            Role::Client,
            a.localaddr,
            a.remoteaddr,
            a.conn,
            a.autoexpire,
            a.scavengettl,
            (a.common, a.udplisten),
        ),
        Cmd::Server(a) => {
            pprof = a.pprof.unwrap_or(false);
            (
                Role::Server,
                a.listen,
                a.target,
                1,
                0,
                600,
                (a.common, a.udptarget),
            )
        }
        Cmd::Man => return Err("man: not a tunnel end".to_owned()),
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
    let mut udp = c.udp.unwrap_or(false);
    let mut nomigrate = c.nomigrate.unwrap_or(false);
    let mut fixedfec = c.fixedfec.unwrap_or(false);
    let mut noicmpreset = c.noicmpreset.unwrap_or(false);
    if !c.c.is_empty() {
        let text = std::fs::read_to_string(&c.c).map_err(|e| format!("-c {}: {e}", c.c))?;
        let mut j: JsonConfig =
            serde_json::from_str(&text).map_err(|e| format!("-c {}: {e}", c.c))?;
        if let Some(m) = j.mode.take() {
            c.mode = Mode::from_str(&m, false)
                .map_err(|_| format!("-c {}: \"mode\": {}", c.c, unknown_mode(&m)))?;
        }
        match role {
            Role::Client => {
                over!(j, localaddr => listen, remoteaddr => peer);
                if let Some(a) = j.udplisten.take() {
                    udp_beside = Some(a);
                }
            }
            Role::Server => {
                over!(j, listen => listen, target => peer);
                if let Some(a) = j.udptarget.take() {
                    udp_beside = Some(a);
                }
            }
        }
        over!(j,
            key => c.key, crypt => c.crypt, conn => conn,
            autoexpire => autoexpire, scavengettl => scavengettl, mtu => c.mtu,
            sndwnd => sndwnd, rcvwnd => rcvwnd, datashard => c.datashard,
            parityshard => c.parityshard, dscp => c.dscp, nocomp => nocomp,
            acknodelay => acknodelay, nodelay => c.nodelay, interval => c.interval,
            resend => c.resend, nc => c.nc, sockbuf => c.sockbuf, smuxver => c.smuxver,
            smuxbuf => c.smuxbuf, streambuf => c.streambuf, framesize => c.framesize,
            keepalive => c.keepalive, closewait => closewait, ratelimit => c.ratelimit,
            log => c.log, snmplog => c.snmplog, snmpperiod => c.snmpperiod,
            quiet => quiet, tcp => tcp, pprof => pprof,
            maxdials => c.maxdials, dialtimeout => c.dialtimeout,
            udp => udp, udpflows => c.udpflows, udpidle => c.udpidle,
            maxbuffer => c.maxbuffer,
            udpdeadline => c.udpdeadline,
            nomigrate => nomigrate, noicmpreset => noicmpreset, fixedfec => fixedfec,
        );
        if let Some(n) = j.maxstreams {
            c.maxstreams = Some(n);
        }
        if let Some(n) = j.sessionstreams {
            c.sessionstreams = Some(n);
        }
    }
    let mut warnings = Vec::new();
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
    match role {
        Role::Client => {
            let l = HostPorts::parse(&listen).map_err(|e| format!("--localaddr {listen}: {e}"))?;
            if l.min != l.max {
                return Err(format!("--localaddr {listen}: a listener takes one port"));
            }
            HostPorts::parse(&peer).map_err(|e| format!("--remoteaddr {peer}: {e}"))?;
        }
        Role::Server => {
            HostPorts::parse(&listen).map_err(|e| format!("--listen {listen}: {e}"))?;
        }
    }
    if udp {
        check_udp_bounds(c.udpflows, c.udpidle)?;
        if role == Role::Server {
            let t = HostPorts::parse(&peer).map_err(|e| format!("--target {peer}: {e}"))?;
            if t.min != t.max {
                return Err(format!("--target {peer}: --udp sends to one port"));
            }
        }
        if role == Role::Client && (conn != 1 || autoexpire != 0 || scavengettl != 600) {
            warnings.push(
                "--conn, --autoexpire and --scavengettl are not used with --udp: one session \
                 carries every flow (a session that fails or stops answering is replaced)"
                    .to_owned(),
            );
        }
        // The smux and compression flags: the session's stream carries no
        // smux and datagrams are not compressed. Said when one is given
        // other than its default, so a kcptun operator's config is not
        // silently half-applied.
        let unused: Vec<&str> = [
            ("--nocomp", c.nocomp.is_some() || nocomp),
            ("--smuxver", c.smuxver != 1),
            ("--smuxbuf", c.smuxbuf != 4_194_304),
            ("--streambuf", c.streambuf != 2_097_152),
            ("--framesize", c.framesize != 32_768),
            ("--closewait", c.closewait.is_some()),
        ]
        .into_iter()
        .filter_map(|(f, given)| given.then_some(f))
        .collect();
        if !unused.is_empty() {
            warnings.push(format!(
                "{} not used with --udp: no smux, and datagrams are not compressed (both ends \
                 may differ in them)",
                unused.join(", ")
            ));
        }
    }
    if let Some(a) = &udp_beside {
        let flag = match role {
            Role::Client => "--udplisten",
            Role::Server => "--udptarget",
        };
        if udp {
            return Err(format!(
                "{flag}: not with --udp (--udp carries UDP only, on -l/-t; {flag} adds UDP beside TCP)"
            ));
        }
        let hp = HostPorts::parse(a).map_err(|e| format!("{flag} {a}: {e}"))?;
        if hp.min != hp.max {
            return Err(format!("{flag} {a}: one port, not a range"));
        }
        check_udp_bounds(c.udpflows, c.udpidle)?;
    }
    let datagram_fec = udp || udp_beside.is_some();
    if conn == 0 {
        return Err("--conn: must be at least 1".to_owned());
    }
    let preset = match c.mode {
        Mode::Normal => Some(Preset::Normal),
        Mode::Fast => Some(Preset::Fast),
        Mode::Fast2 => Some(Preset::Fast2),
        Mode::Fast3 => Some(Preset::Fast3),
        Mode::Manual => None,
    };
    let (nodelay, interval, resend, nc) = c
        .mode
        .nodelay()
        .unwrap_or((c.nodelay, c.interval, c.resend, c.nc));
    let mut b = Config::builder();
    b = match preset {
        Some(p) => b.preset(p),
        // kcptun's `manual`: the hidden flags.
        None => b
            .preset(Preset::Default)
            .nodelay(nodelay != 0, interval, resend, nc != 0),
    };
    // The model-based controller by default: kcptun's modes (nc=1, fixed
    // windows) fill a short path's queue and leave a long lossy path mostly
    // idle (docs/FIELD.md). `--mode manual` keeps kcptun's `--nc`.
    let congestion = match (c.congestion, preset) {
        (Some(CongestionArg::Bbr), _) | (None, Some(_)) => Some(Congestion::Bbr),
        (Some(CongestionArg::None), _) => Some(Congestion::None),
        (Some(CongestionArg::Kcp), _) => Some(Congestion::Kcp),
        (None, None) => None,
    };
    if let Some(cc) = congestion {
        b = b.congestion(cc);
    }
    let model = congestion == Some(Congestion::Bbr);
    let maxwnd = c.maxwnd.unwrap_or(if model { DEFAULT_MAXWND } else { 0 });
    if maxwnd > 0 {
        b = b.max_window(maxwnd);
    }
    if nomigrate {
        // Else the library's default: on with aes-128-gcm only.
        b = b.migration(false);
    }
    if udp {
        // `--udp` runs on one thread: one listening socket, not one per
        // core. A `SO_REUSEPORT` group also steers a peer to another socket
        // when it grows after the peer's first datagram (a client retrying
        // while the server starts), and without migration that socket does
        // not know the session.
        b = b.reuse_port(1);
    }
    if udp {
        // No smux: kcptun's --keepalive (smux's heartbeat, which finds a
        // dead session) becomes the session's own keepalive probe, and the
        // idle timeout stays at least three of them.
        let every = Duration::from_secs(c.keepalive);
        b = b
            .idle_timeout(kcpio::DEFAULT_IDLE_TIMEOUT.max(every.saturating_mul(3)))
            .keepalive((c.keepalive > 0).then_some(every));
    }
    let kcp = b
        .icmp_reset(!noicmpreset)
        .crypto(method, Key::passphrase(c.key.as_str()))
        .fec(c.datashard, c.parityshard)
        // Between kcpio ends (negotiated) parity follows the path's loss;
        // kcptun peers, and --fixedfec, keep the shape given.
        .adaptive_fec(!fixedfec)
        .mtu(c.mtu)
        .window(sndwnd, rcvwnd)
        .stream(true)
        .write_delay(false)
        .ack_nodelay(acknodelay)
        .dscp(c.dscp)
        .rate_limit(c.ratelimit)
        .socket_buffers(c.sockbuf, c.sockbuf)
        .carrier(if tcp { Carrier::FakeTcp } else { Carrier::Udp })
        // --udp, --udplisten, --udptarget: datagrams carry their own
        // adaptive parity (negotiated, so only between kcpio ends); toward
        // kcptun the wire stays kcptun's.
        .datagram_fec(datagram_fec)
        .datagram_fec_deadline(Duration::from_millis(c.udpdeadline))
        .build()
        .map_err(|e| format!("{}: {e}", kcp_flag(&e.to_string())))?;
    // --udp has no smux: its --keepalive 0 (no probe) is no mux error.
    let mux_keepalive = if udp { c.keepalive.max(1) } else { c.keepalive };
    let mux_config = |version| {
        MuxConfig::builder()
            .version(version)
            .keepalive_interval(Duration::from_secs(mux_keepalive))
            .max_frame_size(c.framesize)
            .receive_buffer(c.smuxbuf)
            .stream_window(c.streambuf)
            .build()
            .map_err(|e| format!("{}: {e}", mux_flag(&e.to_string())))
    };
    let mux = mux_config(version)?;
    let mux_other = mux_config(match version {
        Version::V1 => Version::V2,
        Version::V2 => Version::V1,
    })?;
    let maxstreams = c
        .maxstreams
        .unwrap_or_else(crate::limits::default_max_streams);
    if maxstreams == 0 || c.maxdials == 0 || c.dialtimeout == 0 || c.maxbuffer == 0 {
        return Err(
            "--maxstreams, --maxdials, --dialtimeout and --maxbuffer must be positive".to_owned(),
        );
    }
    let max_buffer = c
        .maxbuffer
        .checked_mul(1 << 20)
        .ok_or("--maxbuffer is too large")?;
    // A server shares its limits between clients (half each); a client's
    // sessions are all its own, so one may take them all by default.
    let share = |n: usize| match role {
        Role::Server => n / 2,
        Role::Client => n,
    };
    let limits = crate::Limits {
        max_streams: maxstreams,
        session_streams: c
            .sessionstreams
            .unwrap_or(share(maxstreams))
            .clamp(1, maxstreams),
        max_dials: c.maxdials,
        session_dials: (c.maxdials / 2).max(1),
        dial_timeout: Duration::from_secs(c.dialtimeout),
        max_buffer,
        client_buffer: share(max_buffer),
    };
    let (local_name, peer_name) = match role {
        Role::Client => ("localaddr", "remoteaddr"),
        Role::Server => ("listen", "target"),
    };
    let congestion_name = match congestion {
        Some(Congestion::Bbr) => "bbr",
        Some(Congestion::None) => "none",
        Some(Congestion::Kcp) => "kcp",
        _ => "mode's nc",
    };
    let udp_summary = match (&udp_beside, role) {
        (None, _) if !udp => String::new(),
        (None, _) => format!(
            ", udp: true, udpflows: {}, udpidle: {}, udpdeadline: {}",
            c.udpflows, c.udpidle, c.udpdeadline
        ),
        (Some(a), r) => format!(
            ", {}: {}, udpflows: {}, udpidle: {}, udpdeadline: {}",
            if r == Role::Client {
                "udplisten"
            } else {
                "udptarget"
            },
            go_addr(a),
            c.udpflows,
            c.udpidle,
            c.udpdeadline
        ),
    };
    let summary = format!(
        "{local_name}: {}, {peer_name}: {peer}, encryption: {} ({}), mode: {}, \
         nodelay: {nodelay}, interval: {interval}, resend: {resend}, nc: {nc}, \
         mtu: {}, sndwnd: {sndwnd}, rcvwnd: {rcvwnd}, datashard: {}, parityshard: {}, \
         keepalive: {}, sockbuf: {}, dscp: {}, acknodelay: {acknodelay}, compression: {}, \
         smuxver: {}, smuxbuf: {}, streambuf: {}, framesize: {}, conn: {conn}, \
         congestion: {congestion_name}, maxwnd: {maxwnd}, migration: {}, \
         icmpreset: {}, adaptivefec: {}{udp_summary}",
        go_addr(&listen),
        c.crypt,
        method.name(),
        c.mode,
        c.mtu,
        c.datashard,
        c.parityshard,
        c.keepalive,
        c.sockbuf,
        c.dscp,
        !nocomp,
        c.smuxver,
        c.smuxbuf,
        c.streambuf,
        c.framesize,
        kcp.migration(),
        !noicmpreset,
        !fixedfec && c.datashard > 0 && c.parityshard > 0,
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
        stats_period: Duration::from_secs(c.snmpperiod),
        kcp,
        mux,
        mux_other,
        limits,
        udp: UdpSettings {
            enabled: udp,
            flows: c.udpflows,
            idle: Duration::from_secs(c.udpidle),
            deadline: Duration::from_millis(c.udpdeadline),
            sockbuf: c.sockbuf,
            stream_fec: c.datashard > 0,
        },
        udp_beside: udp_beside.as_deref().map(go_addr),
        summary,
        warnings,
    })
}

/// Go's `:port` means every address.
/// The most flows `--udpflows` may ask for: the flow ids are 24 bits, and
/// a client looking for a free one for a new source must find one soon.
pub(crate) const MAX_UDP_FLOWS: usize = 1 << 20;

/// `--udpflows` within 1..=[`MAX_UDP_FLOWS`], `--udpidle` positive.
fn check_udp_bounds(flows: usize, idle: u64) -> Result<(), String> {
    if flows == 0 || idle == 0 {
        return Err("--udpflows and --udpidle must be positive".to_owned());
    }
    if flows > MAX_UDP_FLOWS {
        return Err(format!("--udpflows {flows}: at most {MAX_UDP_FLOWS}"));
    }
    Ok(())
}

fn go_addr(addr: &str) -> String {
    if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_owned()
    }
}

/// The flag a KCP configuration error is about.
fn kcp_flag(e: &str) -> &'static str {
    let e = e.to_ascii_lowercase();
    [
        ("keepalive", "--keepalive"),
        ("idle_timeout", "--keepalive"),
        ("mtu", "--mtu"),
        ("datagram_fec_deadline", "--udpdeadline"),
        ("fec", "--datashard/--parityshard"),
        ("shard", "--datashard/--parityshard"),
        ("key", "--key"),
        ("window(send)", "--sndwnd"),
        ("window(recv)", "--rcvwnd"),
        ("max_window", "--maxwnd"),
        ("window", "--sndwnd/--rcvwnd/--maxwnd"),
        ("interval", "--interval"),
        ("resend", "--resend"),
        ("dscp", "--dscp"),
        ("rate", "--ratelimit"),
        ("buffer", "--sockbuf"),
    ]
    .iter()
    .find(|(k, _)| e.contains(k))
    .map_or("--mode/--nodelay/--interval/--resend/--nc", |(_, f)| f)
}

/// The flag an smux configuration error is about.
fn mux_flag(e: &str) -> &'static str {
    [
        ("keepalive", "--keepalive"),
        ("frame", "--framesize"),
        ("stream window", "--streambuf"),
        ("receive buffer", "--smuxbuf"),
    ]
    .iter()
    .find(|(k, _)| e.contains(k))
    .map_or("--smuxbuf/--streambuf/--framesize/--keepalive", |(_, f)| f)
}

/// The error for a `mode` that is none of kcptun's.
fn unknown_mode(m: &str) -> String {
    format!("unknown mode '{m}': want normal, fast, fast2, fast3 or manual")
}

/// A `host:port`, or kcptun's multi-port `host:min-max`: a server listens
/// on every port of the range, a client dials a random one per session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostPorts {
    /// The host (`0.0.0.0` for Go's empty host).
    pub(crate) host: String,
    /// The first port.
    pub(crate) min: u16,
    /// The last port (`min` for a single port).
    pub(crate) max: u16,
}

impl HostPorts {
    /// Parses `host:port` or `host:min-max` (`:port` means every address).
    pub(crate) fn parse(addr: &str) -> Result<Self, String> {
        let (host, ports) = addr
            .rsplit_once(':')
            .ok_or_else(|| "want host:port or host:min-max".to_owned())?;
        let port = |p: &str| {
            p.parse::<u16>()
                .map_err(|_| format!("'{p}' is not a port (0-65535)"))
        };
        let (min, max) = match ports.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(ports)?, port(ports)?),
        };
        if min > max {
            return Err(format!("port range {min}-{max} is empty"));
        }
        let host = if host.is_empty() { "0.0.0.0" } else { host };
        Ok(Self {
            host: host.to_owned(),
            min,
            max,
        })
    }

    /// Every `host:port` of the range.
    pub(crate) fn each(&self) -> impl Iterator<Item = String> + '_ {
        (self.min..=self.max).map(|p| format!("{}:{p}", self.host))
    }

    /// One `host:port` of the range, at random.
    pub(crate) fn pick(&self) -> String {
        let port = rand::random_range(self.min..=self.max);
        format!("{}:{port}", self.host)
    }
}
