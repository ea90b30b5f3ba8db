//! A kcpio peer with the command line and output of the repository's Go peer
//! (`testkit/interop/kcpgo-peer`, built on kcp-go v5.6.72), so any pairing of the two
//! runs with the same arguments and scripts read either one's output.
//!
//! ```text
//! cargo run --release --example peer -- echo-server [flags]   accept sessions, echo every byte back
//! cargo run --release --example peer -- sink-server [flags]   accept sessions, verify and discard, report progress
//! cargo run --release --example peer -- client      [flags]   send N pattern bytes, verify echo (or sink reports)
//! ```
//!
//! The flags, the payload pattern, the sink reports, the message modes
//! (`--rate`, `--messages`, `--hold`) and the `--json` fields are described in
//! `testkit/interop/kcpgo-peer/README.md`. Exit status: 0 pass, 1 fail, 2 usage error.
//!
//! Beyond the Go peer: `--nodelay` also takes any other preset name kcpio's
//! `Preset::from_name` knows, and `--json` reports `"impl": "kcpio"`. Unlike
//! it, four custom `--nodelay` numbers must match one of the presets, since
//! kcpio's `Config` sets the ARQ timing by preset only.

use goduration::parse_duration;
use kcpio_testkit::goduration;
use kcpio_testkit::pattern;
use kcpio_testkit::stats;

use std::io;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kcpio::{
    Config, KcpListener, KcpStream, Key, Method, OwnedReadHalf, OwnedWriteHalf, Preset,
    SessionStats,
};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::Instant;

// ---------------------------------------------------------------------------
// command line (Go `flag` package conventions, by hand)
// ---------------------------------------------------------------------------

/// Everything the command line says, with the Go peer's defaults.
#[derive(Clone, Debug)]
struct Flags {
    mode: String,
    addr: String,
    crypt: String,
    key: String,
    key_hex: String,
    data_shard: i64,
    parity_shard: i64,
    mtu: i64,
    sndwnd: i64,
    rcvwnd: i64,
    nodelay: String,
    congestion: String,
    max_window: i64,
    conv: u64,
    nbytes: i64,
    chunk: i64,
    parallel: i64,
    stream: bool,
    write_delay: bool,
    ack_repeat: bool,
    ack_nodelay: bool,
    rate_limit: u64,
    dscp: i64,
    sockbuf: i64,
    timeout: Duration,
    idle: Duration,
    keepalive: Duration,
    max_sessions: i64,
    duration: Duration,
    sink: bool,
    json: bool,
    snmp: bool,
    quiet: bool,
    default_cap: bool,
    rate: f64,
    messages: i64,
    size: i64,
    drain: Duration,
    hold: Duration,
    tag: String,
}

impl Flags {
    fn new(mode: &str) -> Self {
        Self {
            mode: mode.to_owned(),
            addr: "127.0.0.1:29900".into(),
            crypt: "null".into(),
            key: "it's a secrect".into(),
            key_hex: String::new(),
            data_shard: 0,
            parity_shard: 0,
            mtu: 1400,
            sndwnd: 0,
            rcvwnd: 0,
            nodelay: "default".into(),
            congestion: String::new(),
            max_window: 0,
            conv: 0,
            nbytes: 1 << 20,
            chunk: 32 * 1024,
            parallel: 1,
            stream: false,
            write_delay: false,
            ack_repeat: false,
            ack_nodelay: false,
            rate_limit: 0,
            dscp: 0,
            sockbuf: 0,
            timeout: Duration::from_secs(60),
            idle: Duration::from_secs(15),
            keepalive: Duration::ZERO,
            max_sessions: 0,
            duration: Duration::ZERO,
            sink: false,
            json: false,
            snmp: false,
            quiet: false,
            default_cap: false,
            rate: 0.0,
            messages: 0,
            size: 64,
            drain: Duration::from_secs(2),
            hold: Duration::ZERO,
            tag: String::new(),
        }
    }
}

/// (name, takes a value, help): the flag table, for parsing and `-h`.
const FLAG_HELP: &[(&str, bool, &str)] = &[
    (
        "acknodelay",
        false,
        "SetACKNoDelay(true): acknowledge at once",
    ),
    (
        "ackrepeat",
        false,
        "kcpio only: send each ACK twice, in two flushes, so a lost ACK packet does not make the sender resend what arrived (default off here, as kcp-go)",
    ),
    (
        "addr",
        true,
        "servers: listen address (port 0 picks a free port); client: server address (default \"127.0.0.1:29900\")",
    ),
    (
        "bytes",
        true,
        "client: bytes to send per session (default 1048576)",
    ),
    (
        "chunk",
        true,
        "client: bytes per Write call (default 32768)",
    ),
    (
        "congestion",
        true,
        "kcpio only: the congestion controller, none (nc=1), kcp (nc=0) or bbr (alias: model); default: the profile's nc",
    ),
    (
        "conv",
        true,
        "client: conversation id (0 = random); session i of --parallel uses conv+i",
    ),
    (
        "crypt",
        true,
        "cipher (kcptun names): null, none, aes, aes-128, aes-192, aes-128-gcm, salsa20, blowfish, twofish, cast5, 3des, tea, xtea, xor, sm4 (default \"null\")",
    ),
    (
        "datashard",
        true,
        "Reed-Solomon data shards (0 disables FEC)",
    ),
    (
        "default-cap",
        false,
        "servers: keep kcpio's default session cap (4096) instead of lifting it as kcp-go has none",
    ),
    (
        "drain",
        true,
        "client latency mode: wait this long after the last send for outstanding echoes (default 2s)",
    ),
    ("dscp", true, "DSCP value (client session or listener)"),
    (
        "duration",
        true,
        "servers: exit after this long (0 = no limit); client latency mode: how long to send (0 = 10s)",
    ),
    (
        "hold",
        true,
        "client: keep every session open and idle this long after all have finished",
    ),
    (
        "idle",
        true,
        "servers: close a session after this long without input (default 15s)",
    ),
    ("json", false, "client: print the result as one JSON line"),
    (
        "keepalive",
        true,
        "kcpio only: the library's keepalive with an idle timeout of 3x it (default 0 = off, as kcp-go)",
    ),
    (
        "key",
        true,
        "passphrase; key = PBKDF2-HMAC-SHA1(passphrase, \"kcp-go\", 4096 iterations, 32 bytes) (default \"it's a secrect\")",
    ),
    (
        "key-hex",
        true,
        "raw key bytes in hex; replaces the PBKDF2 output (each cipher still takes its kcptun prefix of it)",
    ),
    (
        "max-sessions",
        true,
        "servers: exit after this many sessions have ended (0 = run until --duration or killed)",
    ),
    (
        "messages",
        true,
        "client: messages per session; with --rate 0 selects ping-pong mode",
    ),
    (
        "maxwnd",
        true,
        "kcpio only: windows grow from --sndwnd/--rcvwnd up to this many segments as the path needs (0 = fixed, the default)",
    ),
    (
        "mtu",
        true,
        "UDP payload size limit (default 1400, kcptun uses 1350)",
    ),
    (
        "nodelay",
        true,
        "profile: default (0,100,0,0), normal (0,40,2,1), fast (0,30,2,1), fast2 (1,20,2,1), fast3 (1,10,2,1), or nodelay,interval,resend,nc (default \"default\")",
    ),
    ("parallel", true, "client: concurrent sessions (default 1)"),
    (
        "parityshard",
        true,
        "Reed-Solomon parity shards (0 disables FEC)",
    ),
    ("quiet", false, "less logging"),
    (
        "rate",
        true,
        "client: messages per second per session; > 0 selects latency mode",
    ),
    (
        "ratelimit",
        true,
        "rate limit in bytes per second (0 = unlimited)",
    ),
    (
        "rcvwnd",
        true,
        "receive window in packets (0 keeps the default 32)",
    ),
    (
        "size",
        true,
        "client message modes: bytes per message (>= 16) (default 64)",
    ),
    (
        "sink",
        false,
        "client: the server is a sink-server (expect progress reports, not an echo)",
    ),
    (
        "sndwnd",
        true,
        "send window in packets (0 keeps the default 32)",
    ),
    ("snmp", false, "print the session counters on exit"),
    (
        "sockbuf",
        true,
        "socket read/write buffer in bytes (0 = OS default)",
    ),
    ("stream", false, "stream mode: merge small writes"),
    (
        "tag",
        true,
        "client: free text copied into the JSON field tag",
    ),
    (
        "timeout",
        true,
        "client: give up after this long (default 1m0s)",
    ),
    (
        "writedelay",
        false,
        "SetWriteDelay(true): let small writes wait for the next flush",
    ),
];

/// Why parsing stopped.
enum ParseOutcome {
    Help,
    Error(String),
}

fn usage() {
    eprintln!("usage: peer echo-server|sink-server|client [flags]   (peer client -h for flags)");
}

fn print_flags(mode: &str) {
    use std::fmt::Write as _;
    let mut text = format!("Usage of {mode}:\n");
    for (name, takes_value, help) in FLAG_HELP {
        let arg = if *takes_value { " value" } else { "" };
        let _ = writeln!(text, "  -{name}{arg}\n    \t{help}");
    }
    // A closed pipe (`peer client -h | head`) is not an error worth a panic.
    let _ = io::Write::write_all(&mut io::stderr(), text.as_bytes());
}

/// Go's `strconv.ParseInt(s, 0, 64)`: decimal, or `0x`/`0o`/`0b`/`0` prefixes, `_` separators.
fn parse_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = parse_uint(body)?;
    if neg {
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

/// Go's `strconv.ParseUint(s, 0, 64)`.
fn parse_uint(s: &str) -> Option<u64> {
    let lower = s.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d.to_owned())
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d.to_owned())
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d.to_owned())
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_owned())
    } else {
        (10, lower.clone())
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') {
        return None;
    }
    u64::from_str_radix(&digits.replace('_', ""), radix).ok()
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `time.Duration.String`: "0s", "1.5s", "1m30s", "2h0m0s", "300ms", "500µs".
fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    fn frac(v: u128, unit: u128) -> String {
        let whole = v / unit;
        let rem = v % unit;
        if rem == 0 {
            return whole.to_string();
        }
        let width = unit.ilog10() as usize;
        let digits = format!("{rem:0width$}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", frac(ns, 1_000));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", frac(ns, 1_000_000));
    }
    let h = ns / 3_600_000_000_000;
    let m = (ns / 60_000_000_000) % 60;
    let s = frac(ns % 60_000_000_000, 1_000_000_000);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Parses `args` (after the mode) the way Go's `flag` package does: `-name`,
/// `--name`, `-name=value`, `-name value`; booleans take no separate value;
/// parsing stops at the first non-flag argument or after `--`.
fn parse_flags(mode: &str, args: &[String]) -> Result<Flags, ParseOutcome> {
    let mut f = Flags::new(mode);
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            break;
        }
        let Some(stripped) = arg.strip_prefix('-') else {
            break;
        };
        let stripped = stripped.strip_prefix('-').unwrap_or(stripped);
        if stripped.is_empty() || stripped.starts_with('-') || stripped.starts_with('=') {
            return Err(ParseOutcome::Error(format!("bad flag syntax: {arg}")));
        }
        let (name, inline) = match stripped.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (stripped, None),
        };
        if name == "h" || name == "help" {
            return Err(ParseOutcome::Help);
        }
        let Some(&(_, takes_value, _)) = FLAG_HELP.iter().find(|(n, _, _)| *n == name) else {
            return Err(ParseOutcome::Error(format!(
                "flag provided but not defined: -{name}"
            )));
        };
        let value = if takes_value {
            match inline {
                Some(v) => v,
                None => {
                    let Some(v) = args.get(i) else {
                        return Err(ParseOutcome::Error(format!(
                            "flag needs an argument: -{name}"
                        )));
                    };
                    i += 1;
                    v.clone()
                }
            }
        } else {
            inline.unwrap_or_else(|| "true".into())
        };
        let bad = || {
            ParseOutcome::Error(format!(
                "invalid value {value:?} for flag -{name}: parse error"
            ))
        };
        let int = || parse_int(&value).ok_or_else(bad);
        let uint = || parse_uint(&value).ok_or_else(bad);
        let boolean = || parse_bool(&value).ok_or_else(bad);
        let dur = || parse_duration(&value).ok_or_else(bad);
        match name {
            "addr" => f.addr = value.clone(),
            "crypt" => f.crypt = value.clone(),
            "key" => f.key = value.clone(),
            "key-hex" => f.key_hex = value.clone(),
            "datashard" => f.data_shard = int()?,
            "parityshard" => f.parity_shard = int()?,
            "mtu" => f.mtu = int()?,
            "sndwnd" => f.sndwnd = int()?,
            "rcvwnd" => f.rcvwnd = int()?,
            "nodelay" => f.nodelay = value.clone(),
            "congestion" => f.congestion = value.clone(),
            "maxwnd" => f.max_window = int()?,
            "conv" => f.conv = uint()?,
            "bytes" => f.nbytes = int()?,
            "chunk" => f.chunk = int()?,
            "parallel" => f.parallel = int()?,
            "stream" => f.stream = boolean()?,
            "writedelay" => f.write_delay = boolean()?,
            "ackrepeat" => f.ack_repeat = boolean()?,
            "acknodelay" => f.ack_nodelay = boolean()?,
            "ratelimit" => f.rate_limit = uint()?,
            "dscp" => f.dscp = int()?,
            "sockbuf" => f.sockbuf = int()?,
            "timeout" => f.timeout = dur()?,
            "idle" => f.idle = dur()?,
            "keepalive" => f.keepalive = dur()?,
            "max-sessions" => f.max_sessions = int()?,
            "duration" => f.duration = dur()?,
            "sink" => f.sink = boolean()?,
            "json" => f.json = boolean()?,
            "snmp" => f.snmp = boolean()?,
            "quiet" => f.quiet = boolean()?,
            "default-cap" => f.default_cap = boolean()?,
            "rate" => f.rate = value.parse().map_err(|_| bad())?,
            "messages" => f.messages = int()?,
            "size" => f.size = int()?,
            "drain" => f.drain = dur()?,
            "hold" => f.hold = dur()?,
            "tag" => f.tag = value.clone(),
            _ => return Err(bad()),
        }
    }
    Ok(f)
}

// ---------------------------------------------------------------------------
// session settings
// ---------------------------------------------------------------------------

/// A `--nodelay` value: a named preset or four numbers.
#[derive(Clone, Copy, Debug)]
struct NoDelay {
    /// None: kcp-go's defaults (0,100,0,0).
    values: Option<(u32, u32, u32, u32)>,
    /// A preset only kcpio has (for example a low-latency one), by its
    /// `Preset::from_name` name.
    kcpio: Option<Preset>,
}

impl NoDelay {
    fn parse(s: &str) -> Result<Self, String> {
        let v = match s {
            "default" | "" => None,
            "normal" => Some((0, 40, 2, 1)),
            "fast" => Some((0, 30, 2, 1)),
            "fast2" => Some((1, 20, 2, 1)),
            "fast3" => Some((1, 10, 2, 1)),
            _ if !s.contains(',') => {
                // Beyond the Go peer: any other preset name kcpio knows.
                return Preset::from_name(s)
                    .map(|p| Self {
                        values: None,
                        kcpio: Some(p),
                    })
                    .ok_or_else(|| {
                        format!("want a profile name or nodelay,interval,resend,nc; got {s:?}")
                    });
            }
            _ => {
                let parts: Vec<&str> = s.split(',').collect();
                if parts.len() != 4 {
                    return Err(format!(
                        "want a profile name or nodelay,interval,resend,nc; got {s:?}"
                    ));
                }
                let mut n = [0u32; 4];
                for (slot, p) in n.iter_mut().zip(&parts) {
                    let t = p.trim();
                    *slot = t
                        .parse::<i64>()
                        .map_err(|e| format!("strconv.Atoi: parsing {t:?}: {e}"))?
                        .clamp(0, i64::from(u32::MAX)) as u32;
                }
                Some((n[0], n[1], n[2], n[3]))
            }
        };
        Ok(Self {
            values: v,
            kcpio: None,
        })
    }
}

impl std::fmt::Display for NoDelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self.kcpio {
            return write!(f, "{}", format!("{p:?}").to_lowercase());
        }
        match self.values {
            None => f.write_str("0,100,0,0(default)"),
            Some((a, b, c, d)) => write!(f, "{a},{b},{c},{d}"),
        }
    }
}

/// Builds the kcpio configuration the flags describe; `conv` fixes the
/// conversation id of a client session.
fn build_config(f: &Flags, nd: NoDelay, conv: Option<u32>) -> Result<Config, String> {
    let method = Method::from_name(&f.crypt)
        .or_else(|| (f.crypt.is_empty()).then_some(Method::Null))
        .ok_or_else(|| format!("unknown cipher {:?}", f.crypt))?;
    let key = if f.key_hex.is_empty() {
        Key::passphrase(&f.key)
    } else {
        Key::raw(hex::decode(&f.key_hex).map_err(|e| e.to_string())?)
    };
    // kcp-go's defaults, which the flags mirror (no connect probe, no
    // keepalive, no idle timeout) unless --keepalive asks for kcpio's.
    let mut b = Config::builder().kcp_go_defaults();
    if !f.keepalive.is_zero() {
        b = b
            .keepalive(f.keepalive)
            .idle_timeout(f.keepalive * 3)
            .connect_probe(true);
    }
    b = match nd.values {
        None => b.preset(nd.kcpio.unwrap_or(Preset::Default)),
        Some((1, 10, 2, 1)) => b.preset(Preset::Fast3),
        Some((1, 20, 2, 1)) => b.preset(Preset::Fast2),
        Some((0, 30, 2, 1)) => b.preset(Preset::Fast),
        Some((0, 40, 2, 1)) => b.preset(Preset::Normal),
        Some((nodelay, interval, resend, nc)) => b.nodelay(nodelay != 0, interval, resend, nc != 0),
    };
    let snd = if f.sndwnd > 0 { f.sndwnd } else { 32 };
    let rcv = if f.rcvwnd > 0 { f.rcvwnd } else { 32 };
    let wnd = |v: i64| u16::try_from(v).map_err(|_| format!("window {v} out of range"));
    b = b
        .mtu(usize::try_from(f.mtu).map_err(|_| format!("SetMtu({}) rejected", f.mtu))?)
        .window(wnd(snd)?, wnd(rcv)?)
        .stream(f.stream)
        .crypto(method, key)
        .write_delay(f.write_delay)
        .ack_repeat(f.ack_repeat)
        .rate_limit(f.rate_limit)
        .conv(conv);
    if f.max_window > 0 {
        b = b.max_window(wnd(f.max_window)?);
    }
    if !f.congestion.is_empty() {
        let c = kcpio::Congestion::from_name(&f.congestion).ok_or_else(|| {
            format!(
                "--congestion: want none, kcp or bbr (or model); got {:?}",
                f.congestion
            )
        })?;
        b = b.congestion(c);
    }
    // Only when asked: a preset (lowlat) may turn it on by itself.
    if f.ack_nodelay {
        b = b.ack_nodelay(true);
    }
    if f.data_shard > 0 && f.parity_shard > 0 {
        let ds = usize::try_from(f.data_shard).map_err(|e| e.to_string())?;
        let ps = usize::try_from(f.parity_shard).map_err(|e| e.to_string())?;
        b = b.fec(ds, ps);
    }
    if f.dscp > 0 {
        b = b.dscp(u8::try_from(f.dscp).map_err(|e| e.to_string())?);
    }
    if f.sockbuf > 0 {
        let n = usize::try_from(f.sockbuf).map_err(|e| e.to_string())?;
        b = b.socket_buffers(n, n);
    }
    // KCP has no FIN: this program ends sessions by its own --idle and
    // --timeout rules, so the library's idle timeout stays off (kcp-go's).
    // kcp-go's listener has no session cap: lift kcpio's default (4096) so a
    // server accepts as many sessions as the Go peer would (unless
    // --default-cap asks for the library's own).
    if !f.default_cap {
        b = b.max_sessions(MAX_SERVER_SESSIONS);
    }
    b.build().map_err(|e| e.to_string())
}

/// Sessions per listener: far beyond what any run here opens.
const MAX_SERVER_SESSIONS: usize = 1_000_000;

fn fatal(msg: &str) -> ExitCode {
    eprintln!("peer: {msg}");
    ExitCode::from(2)
}

// ---------------------------------------------------------------------------
// counters and process figures
// ---------------------------------------------------------------------------

/// Wire and protocol counters summed over sessions (kcp-go's SNMP names);
/// also the middle part of the JSON [`Report`], where they stand in this order.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Counters {
    out_pkts: u64,
    out_bytes: u64,
    in_pkts: u64,
    in_bytes: u64,
    out_segs: u64,
    in_segs: u64,
    retrans_segs: u64,
    fast_retrans_segs: u64,
    early_retrans_segs: u64,
    lost_segs: u64,
    repeat_segs: u64,
    fec_recovered: u64,
    fec_errs: u64,
    fec_parity_shards: u64,
    in_csum_errors: u64,
}

impl Counters {
    fn add(&mut self, st: &SessionStats) {
        let a = &st.arq;
        self.out_pkts += st.datagrams_out;
        self.out_bytes += st.bytes_out;
        self.in_pkts += st.datagrams_in;
        self.in_bytes += st.bytes_in;
        self.out_segs += a.segments_out;
        self.in_segs += a.segments_in;
        self.retrans_segs += a.retransmit_rto + a.retransmit_fast + a.retransmit_early;
        self.fast_retrans_segs += a.retransmit_fast;
        self.early_retrans_segs += a.retransmit_early;
        self.lost_segs += a.retransmit_rto;
        self.repeat_segs += a.repeat_segments;
        self.fec_recovered += st.fec_in.recovered;
        self.fec_errs += st.fec_in.unrecoverable;
        self.fec_parity_shards += st.fec_in.parity_in;
    }

    fn snmp_line(&self) -> String {
        format!(
            "snmp: OutPkts={} OutBytes={} InPkts={} InBytes={} OutSegs={} InSegs={} RetransSegs={} FastRetransSegs={} EarlyRetransSegs={} LostSegs={} RepeatSegs={} FECRecovered={} FECErrs={} FECParityShards={} InCsumErrors={}",
            self.out_pkts,
            self.out_bytes,
            self.in_pkts,
            self.in_bytes,
            self.out_segs,
            self.in_segs,
            self.retrans_segs,
            self.fast_retrans_segs,
            self.early_retrans_segs,
            self.lost_segs,
            self.repeat_segs,
            self.fec_recovered,
            self.fec_errs,
            self.fec_parity_shards,
            self.in_csum_errors
        )
    }
}

/// (user seconds, system seconds, peak RSS in KiB) of this process, from
/// /proc (Linux); zeros elsewhere.
fn process_usage() -> (f64, f64, i64) {
    let ticks = 100.0; // USER_HZ on Linux
    let (mut user, mut sys) = (0.0, 0.0);
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the parenthesised command name; utime and stime are
        // fields 14 and 15 of the whole line.
        if let Some(after) = stat.rsplit_once(") ").map(|(_, a)| a) {
            let fields: Vec<&str> = after.split_whitespace().collect();
            user = fields
                .get(11)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
                / ticks;
            sys = fields
                .get(12)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
                / ticks;
        }
    }
    let mut rss = 0;
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
    }
    (round3(user), round3(sys), rss)
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

// ---------------------------------------------------------------------------
// servers
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum ServerKind {
    Echo,
    Sink,
}

async fn serve(f: Flags, nd: NoDelay, kind: ServerKind) -> ExitCode {
    let config = match build_config(&f, nd, None) {
        Ok(c) => c,
        Err(e) => return fatal(&format!("config: {e}")),
    };
    let listener = match KcpListener::bind(f.addr.as_str(), &config).await {
        Ok(l) => Arc::new(l),
        Err(e) => return fatal(&format!("listen: {e}")),
    };
    let local = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => return fatal(&format!("listen: {e}")),
    };
    println!(
        "listening on {local} mode={} crypt={} fec={}/{} mtu={} nodelay={nd} wnd={}/{}",
        f.mode, f.crypt, f.data_shard, f.parity_shard, f.mtu, f.sndwnd, f.rcvwnd
    );

    let ended = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let counters = Arc::new(std::sync::Mutex::new(Counters::default()));
    let stop = Arc::new(Notify::new());
    let stopped = Arc::new(AtomicBool::new(false));
    let f = Arc::new(f);
    let accept_loop = {
        let listener = Arc::clone(&listener);
        let stop = Arc::clone(&stop);
        let stopped = Arc::clone(&stopped);
        let ended = Arc::clone(&ended);
        let failed = Arc::clone(&failed);
        let counters = Arc::clone(&counters);
        let f = Arc::clone(&f);
        async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(s) => s,
                    Err(e) => {
                        if !f.quiet {
                            eprintln!("accept: {e}");
                        }
                        stopped.store(true, Ordering::SeqCst);
                        stop.notify_one();
                        return;
                    }
                };
                let conv = stream.conv();
                if !f.quiet {
                    println!("session open conv={conv:#010x} remote={peer}");
                }
                let f = Arc::clone(&f);
                let stop = Arc::clone(&stop);
                let stopped = Arc::clone(&stopped);
                let ended = Arc::clone(&ended);
                let failed = Arc::clone(&failed);
                let counters = Arc::clone(&counters);
                tokio::spawn(async move {
                    let start = Instant::now();
                    let mut stream = stream;
                    let (inb, outb, ok) = match kind {
                        ServerKind::Echo => echo_session(&mut stream, f.idle).await,
                        ServerKind::Sink => sink_session(&mut stream, conv, f.idle).await,
                    };
                    if let Ok(mut c) = counters.lock() {
                        c.add(&stream.stats());
                    }
                    drop(stream);
                    if !ok {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                    if !f.quiet {
                        println!(
                            "session closed conv={conv:#010x} in={inb} out={outb} ok={ok} secs={:.3}",
                            start.elapsed().as_secs_f64()
                        );
                    }
                    let n = ended.fetch_add(1, Ordering::SeqCst) + 1;
                    if f.max_sessions > 0 && n >= f.max_sessions as u64 {
                        stopped.store(true, Ordering::SeqCst);
                        stop.notify_one();
                    }
                });
            }
        }
    };
    let accept_task = tokio::spawn(accept_loop);
    let limit = async {
        if f.duration.is_zero() {
            std::future::pending::<()>().await;
        } else {
            tokio::time::sleep(f.duration).await;
        }
    };
    tokio::select! {
        _ = stop.notified() => {}
        _ = limit => {}
    }
    accept_task.abort();
    if f.snmp {
        let mut c = counters.lock().map(|c| *c).unwrap_or_default();
        // The socket's own figures: garbage and failed decryption included.
        let ls = listener.stats();
        c.out_pkts = ls.datagrams_out;
        c.out_bytes = ls.bytes_out;
        c.in_pkts = ls.datagrams_in;
        c.in_bytes = ls.bytes_in;
        c.in_csum_errors = ls.bad_crypto;
        println!("{}", c.snmp_line());
    }
    if failed.load(Ordering::SeqCst) > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Echoes every byte back until no input came for `idle` (the normal end:
/// KCP has no FIN) or an error.
async fn echo_session<S>(s: &mut S, idle: Duration) -> (u64, u64, bool)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    let (mut inb, mut outb) = (0u64, 0u64);
    loop {
        match tokio::time::timeout(idle, s.read(&mut buf)).await {
            Err(_) => return (inb, outb, true),
            Ok(Ok(0)) => return (inb, outb, true),
            Ok(Ok(n)) => {
                inb += n as u64;
                match tokio::time::timeout(idle, s.write_all(&buf[..n])).await {
                    Ok(Ok(())) => outb += n as u64,
                    _ => return (inb, outb, false),
                }
            }
            Ok(Err(e)) => return (inb, outb, e.kind() == io::ErrorKind::TimedOut),
        }
    }
}

/// Verifies the pattern, discards, and reports progress: an 8-byte
/// little-endian count of bytes received, bit 63 set once a byte was wrong;
/// after every 64 KiB and whenever input pauses for 20 ms with unreported bytes.
async fn sink_session<S>(s: &mut S, conv: u32, idle: Duration) -> (u64, u64, bool)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    let mut verifier = pattern::Verifier::default();
    let mut reported = 0u64;
    let mut outb = 0u64;
    let mut last = Instant::now();
    let mut warned = false;
    loop {
        let read = tokio::time::timeout(Duration::from_millis(20), s.read(&mut buf)).await;
        let paused = match read {
            Ok(Ok(0)) => return (verifier.offset, outb, verifier.mismatch.is_none()),
            Ok(Ok(n)) => {
                if !verifier.push(&buf[..n]) && !warned {
                    warned = true;
                    eprintln!(
                        "sink conv={conv:#010x}: pattern mismatch at offset {}",
                        verifier.mismatch.unwrap_or(0)
                    );
                }
                last = Instant::now();
                if verifier.offset - reported >= 64 * 1024 {
                    if !report(s, &verifier, idle, &mut outb).await {
                        return (verifier.offset, outb, false);
                    }
                    reported = verifier.offset;
                }
                false
            }
            // The library gave up on the peer (dead link): the session is
            // over, like a Go read deadline; only a mismatch makes it a failure.
            Ok(Err(e)) if e.kind() == io::ErrorKind::TimedOut => {
                return (verifier.offset, outb, verifier.mismatch.is_none());
            }
            Ok(Err(_)) => return (verifier.offset, outb, false),
            Err(_) => true,
        };
        if paused {
            if verifier.offset != reported {
                if !report(s, &verifier, idle, &mut outb).await {
                    return (verifier.offset, outb, false);
                }
                reported = verifier.offset;
            }
            if last.elapsed() > idle {
                return (verifier.offset, outb, verifier.mismatch.is_none());
            }
        }
    }
}

async fn report<S>(s: &mut S, v: &pattern::Verifier, idle: Duration, outb: &mut u64) -> bool
where
    S: AsyncWrite + Unpin,
{
    let mut value = v.offset;
    if v.mismatch.is_some() {
        value |= 1 << 63;
    }
    match tokio::time::timeout(idle, s.write_all(&value.to_le_bytes())).await {
        Ok(Ok(())) => {
            *outb += 8;
            true
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// client
// ---------------------------------------------------------------------------

/// Go's JSON encoding of a float64: integral values without a fraction.
fn go_float<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// The client's result; field names and order are the Go peer's.
#[derive(Debug, Default, Serialize)]
struct Report {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    pass: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    error: String,
    tag: String,
    sessions: i64,
    bytes_per_session: i64,
    bytes_verified: i64,
    #[serde(serialize_with = "go_float")]
    elapsed_ms: f64,
    #[serde(serialize_with = "go_float")]
    hold_ms: f64,
    #[serde(serialize_with = "go_float")]
    mb_per_s: f64,
    /// kcpio only, sink mode with one session: MB/s from the first sink
    /// report after 5 s to the end (0 when the transfer ended sooner).
    #[serde(serialize_with = "go_float")]
    steady_mb_per_s: f64,

    size: i64,
    #[serde(serialize_with = "go_float")]
    rate_hz: f64,
    messages: i64,
    sent: i64,
    received: i64,
    lost: i64,
    payload_bytes: i64,
    #[serde(serialize_with = "go_float")]
    rtt_min_ms: f64,
    #[serde(serialize_with = "go_float")]
    rtt_mean_ms: f64,
    #[serde(serialize_with = "go_float")]
    rtt_p50_ms: f64,
    #[serde(serialize_with = "go_float")]
    rtt_p90_ms: f64,
    #[serde(serialize_with = "go_float")]
    rtt_p99_ms: f64,
    #[serde(serialize_with = "go_float")]
    rtt_p999_ms: f64,
    #[serde(serialize_with = "go_float")]
    rtt_max_ms: f64,

    #[serde(flatten)]
    counters: Counters,
    #[serde(serialize_with = "go_float")]
    overhead: f64,
    #[serde(serialize_with = "go_float")]
    cpu_user_s: f64,
    #[serde(serialize_with = "go_float")]
    cpu_sys_s: f64,
    max_rss_kb: i64,

    crypt: String,
    datashard: i64,
    parityshard: i64,
    mtu: i64,
    nodelay: String,
    conv: String,
    srtt_ms: i64,
    rto_ms: u64,
}

/// What one message-mode session measured.
#[derive(Debug, Default)]
struct MsgStats {
    sent: i64,
    received: i64,
    rtts: Vec<f64>,
}

/// A session kept open until the end of the run (and through `--hold`).
enum Held {
    Whole(KcpStream),
    /// The write half is only held, so the session stays open.
    Split(OwnedReadHalf, #[allow(dead_code)] OwnedWriteHalf),
    /// Only the read half is left (the writer failed or was stopped).
    Read(OwnedReadHalf),
}

impl Held {
    fn stats(&self) -> SessionStats {
        match self {
            Held::Whole(s) => s.stats(),
            Held::Split(r, _) | Held::Read(r) => r.stats(),
        }
    }
}

/// One client session's outcome.
struct Outcome {
    verified: i64,
    /// Sink mode: bytes verified from the first report at or after
    /// `STEADY_FROM` to the end, and the seconds that took.
    steady: Option<(u64, f64)>,
    msg: MsgStats,
    stream: Option<Held>,
    error: Option<String>,
}

async fn dial(f: &Flags, nd: NoDelay, conv: Option<u32>) -> Result<KcpStream, String> {
    // One Config (one key derivation) for every session without its own
    // conv: thousands of parallel dials must not each run PBKDF2.
    static SHARED: std::sync::OnceLock<Config> = std::sync::OnceLock::new();
    let config = match (conv, SHARED.get()) {
        (None, Some(c)) => c.clone(),
        (None, None) => {
            let c = build_config(f, nd, None)?;
            SHARED.get_or_init(|| c).clone()
        }
        (Some(_), _) => build_config(f, nd, conv)?,
    };
    KcpStream::connect(f.addr.as_str(), &config)
        .await
        .map_err(|e| format!("dial: {e}"))
}

/// Byte-stream modes (echo and sink): send `--bytes` of the pattern and
/// verify the echo or the sink's reports.
/// With `KCPIO_PEER_TRACE_MS=N` in the environment: a task printing the
/// session's counters and congestion state to stderr every N ms (for
/// diagnosing a transfer; ends with the session). `None` without it.
fn trace_stats(h: kcpio::StatsHandle) -> Option<tokio::task::JoinHandle<()>> {
    let ms: u64 = std::env::var("KCPIO_PEER_TRACE_MS").ok()?.parse().ok()?;
    let every = Duration::from_millis(ms.clamp(10, 60_000));
    Some(tokio::spawn(async move {
        let t0 = Instant::now();
        // Bounded: one line per period for at most a day.
        for _ in 0..(86_400_000 / every.as_millis() as u64) {
            tokio::time::sleep(every).await;
            let Some(s) = h.stats() else { return };
            let a = &s.arq;
            let mut line = format!(
                "trace t={:.3} out={} in={} rto_rx={} fast_rx={} early_rx={} stalls={}/{} wait_snd={} srtt={}",
                t0.elapsed().as_secs_f64(),
                s.datagrams_out,
                s.datagrams_in,
                a.retransmit_rto,
                a.retransmit_fast,
                a.retransmit_early,
                a.send_window_stalls,
                a.peer_window_stalls,
                s.wait_snd,
                s.srtt.as_millis()
            );
            if let Some(m) = s.congestion {
                line += &format!(
                    " bw={:.0} pace={:.0} cwnd={} inflight={} min_rtt={} loss={:.3} rounds={} filled={} overflow={} standing={}",
                    m.bandwidth,
                    m.pacing_rate,
                    m.cwnd,
                    m.inflight,
                    m.min_rtt,
                    m.random_loss,
                    m.rounds,
                    m.filled,
                    m.overflow_rounds,
                    m.standing_cuts
                );
            }
            eprintln!("{line}");
        }
    }))
}

async fn run_bytes(f: Arc<Flags>, nd: NoDelay, conv: Option<u32>) -> Outcome {
    let stream = match dial(&f, nd, conv).await {
        Ok(s) => s,
        Err(e) => {
            return Outcome {
                verified: 0,
                steady: None,
                msg: MsgStats::default(),
                stream: None,
                error: Some(e),
            };
        }
    };
    let deadline = Instant::now() + f.timeout;
    let _trace = trace_stats(stream.stats_handle());
    let (mut rd, mut wr) = stream.into_split();
    let total = f.nbytes.max(0) as u64;
    let chunk = f.chunk.max(1) as usize;
    let writer = tokio::spawn(async move {
        let mut buf = vec![0u8; chunk];
        let mut off = 0u64;
        while off < total {
            let n = (total - off).min(chunk as u64) as usize;
            pattern::fill(&mut buf[..n], off);
            if let Err(e) = by_deadline(deadline, "write", wr.write_all(&buf[..n])).await {
                return (wr, Err(e));
            }
            off += n as u64;
        }
        (wr, Ok(()))
    });

    let mut verified = 0u64;
    let started = Instant::now();
    let mut steady_from: Option<(Instant, u64)> = None;
    let read_result: Result<(), String> = async {
        if f.sink {
            let mut b = [0u8; 8];
            loop {
                by_deadline(deadline, "waiting for sink report", rd.read_exact(&mut b)).await?;
                let v = u64::from_le_bytes(b);
                if v & (1 << 63) != 0 {
                    verified = v & !(1 << 63);
                    return Err("sink reported a pattern mismatch".into());
                }
                verified = v;
                if steady_from.is_none() && started.elapsed() >= STEADY_FROM {
                    steady_from = Some((Instant::now(), verified));
                }
                if verified >= total {
                    return Ok(());
                }
            }
        } else {
            let mut buf = vec![0u8; 64 * 1024];
            while verified < total {
                let n = by_deadline(deadline, "read", rd.read(&mut buf)).await?;
                if n == 0 {
                    return Err("read: EOF".into());
                }
                if verified + n as u64 > total {
                    return Err(format!(
                        "echo returned {} bytes more than sent",
                        verified + n as u64 - total
                    ));
                }
                if let Some(k) = pattern::first_mismatch(&buf[..n], verified) {
                    verified += k as u64;
                    return Err(format!("echo mismatch at offset {verified}"));
                }
                verified += n as u64;
            }
            Ok(())
        }
    }
    .await;
    let mut error = read_result.err();
    let stream = if error.is_some() {
        // The reader failed first: stop the writer, keep the read half for
        // the counters.
        writer.abort();
        Some(Held::Read(rd))
    } else {
        match writer.await {
            Ok((wr, res)) => {
                if let Err(e) = res {
                    error = Some(e);
                }
                Some(Held::Split(rd, wr))
            }
            Err(e) => {
                error = Some(format!("write: {e}"));
                Some(Held::Read(rd))
            }
        }
    };
    let steady = steady_from.map(|(t, v)| (verified - v, t.elapsed().as_secs_f64()));
    Outcome {
        verified: verified as i64,
        steady,
        msg: MsgStats::default(),
        stream,
        error,
    }
}

/// Sink mode's "steady" goodput starts here, after a startup of a few round
/// trips on a long path.
const STEADY_FROM: Duration = Duration::from_secs(5);

/// Writes message `seq` into `buf`: sequence number, send time, pattern.
fn build_msg(buf: &mut [u8], seq: u64, epoch: Instant) {
    let size = buf.len() as u64;
    pattern::fill(&mut buf[16..], seq * size + 16);
    buf[0..8].copy_from_slice(&seq.to_le_bytes());
    let now = epoch.elapsed().as_nanos() as u64;
    buf[8..16].copy_from_slice(&now.to_le_bytes());
}

/// Checks an echoed message; returns its RTT in milliseconds.
fn check_msg(buf: &[u8], want: u64, epoch: Instant) -> Result<f64, String> {
    let now = epoch.elapsed().as_nanos() as i64;
    let mut b8 = [0u8; 8];
    b8.copy_from_slice(&buf[0..8]);
    let seq = u64::from_le_bytes(b8);
    if seq != want {
        return Err(format!("echo carried sequence {seq}, expected {want}"));
    }
    let size = buf.len() as u64;
    if let Some(k) = pattern::first_mismatch(&buf[16..], seq * size + 16) {
        return Err(format!("echo mismatch in message {seq} at byte {}", 16 + k));
    }
    b8.copy_from_slice(&buf[8..16]);
    let ts = u64::from_le_bytes(b8) as i64;
    Ok((now - ts) as f64 / 1e6)
}

/// Latency mode (`--rate > 0`, open loop) or ping-pong mode (closed loop).
async fn run_msg(f: Arc<Flags>, nd: NoDelay, conv: Option<u32>, epoch: Instant) -> Outcome {
    let mut st = MsgStats::default();
    let stream = match dial(&f, nd, conv).await {
        Ok(s) => s,
        Err(e) => {
            return Outcome {
                verified: 0,
                steady: None,
                msg: st,
                stream: None,
                error: Some(e),
            };
        }
    };
    let size = f.size as usize;
    if f.rate <= 0.0 {
        let mut stream = stream;
        let deadline = Instant::now() + f.timeout;
        let mut out = vec![0u8; size];
        let mut inb = vec![0u8; size];
        let mut error = None;
        for i in 0..f.messages.max(0) as u64 {
            build_msg(&mut out, i, epoch);
            if let Err(e) = by_deadline(deadline, "write", stream.write_all(&out)).await {
                error = Some(e);
                break;
            }
            st.sent += 1;
            if let Err(e) = by_deadline(deadline, "read", stream.read_exact(&mut inb)).await {
                error = Some(e);
                break;
            }
            match check_msg(&inb, i, epoch) {
                Ok(rtt) => {
                    st.received += 1;
                    st.rtts.push(rtt);
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        return Outcome {
            verified: st.received * f.size,
            steady: None,
            msg: st,
            stream: Some(Held::Whole(stream)),
            error,
        };
    }

    let dur = if f.duration.is_zero() {
        Duration::from_secs(10)
    } else {
        f.duration
    };
    let timeout = f.timeout.max(dur + f.drain + Duration::from_secs(10));
    let deadline = Instant::now() + timeout;
    let (mut rd, mut wr) = stream.into_split();
    let sent = Arc::new(AtomicU64::new(0));
    let done = Arc::new(Notify::new());
    let sender_done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let period = 1.0 / f.rate;
    let messages = f.messages.max(0) as u64;
    let sender = {
        let sent = Arc::clone(&sent);
        let done = Arc::clone(&done);
        let sender_done = Arc::clone(&sender_done);
        tokio::spawn(async move {
            let mut buf = vec![0u8; size];
            let mut result = Ok(());
            let mut i = 0u64;
            loop {
                if messages > 0 && i >= messages {
                    break;
                }
                let offset = Duration::from_secs_f64(i as f64 * period);
                if offset >= dur {
                    break;
                }
                tokio::time::sleep_until(start + offset).await;
                build_msg(&mut buf, i, epoch);
                if let Err(e) = by_deadline(deadline, "write", wr.write_all(&buf)).await {
                    result = Err(e);
                    break;
                }
                sent.fetch_add(1, Ordering::SeqCst);
                i += 1;
            }
            sender_done.store(true, Ordering::SeqCst);
            done.notify_one();
            (wr, result)
        })
    };
    // Frame the echo by --size with a cancel-safe read loop.
    let mut frame = vec![0u8; size];
    let mut filled = 0usize;
    let mut error = None;
    let mut drain_deadline: Option<Instant> = None;
    loop {
        let finished = sender_done.load(Ordering::SeqCst);
        if finished {
            if st.received as u64 == sent.load(Ordering::SeqCst) {
                break;
            }
            if drain_deadline.is_none() {
                drain_deadline = Some(Instant::now() + f.drain);
            }
        }
        let drain_at = drain_deadline.unwrap_or(deadline);
        tokio::select! {
            r = rd.read(&mut frame[filled..]) => match r {
                Ok(0) => { error = Some("read: EOF".to_owned()); break; }
                Ok(n) => {
                    filled += n;
                    if filled == size {
                        filled = 0;
                        match check_msg(&frame, st.received as u64, epoch) {
                            Ok(rtt) => { st.rtts.push(rtt); st.received += 1; }
                            Err(e) => { error = Some(e); break; }
                        }
                    }
                }
                Err(e) => { error = Some(format!("read: {e}")); break; }
            },
            _ = done.notified(), if !finished => {}
            _ = tokio::time::sleep_until(drain_at), if drain_deadline.is_some() => break,
            _ = tokio::time::sleep_until(deadline) => { error = Some("read: timeout".to_owned()); break; }
        }
    }
    if !sender_done.load(Ordering::SeqCst) {
        sender.abort();
    }
    let stream = match sender.await {
        Ok((wr, res)) => {
            if let (Err(e), None) = (res, &error) {
                error = Some(e);
            }
            Some(Held::Split(rd, wr))
        }
        Err(_) => Some(Held::Read(rd)),
    };
    st.sent = sent.load(Ordering::SeqCst) as i64;
    Outcome {
        verified: st.received * f.size,
        steady: None,
        msg: st,
        stream,
        error,
    }
}

/// `op` bounded by `deadline`; a failure reads `<what>: <error>` or
/// `<what>: timeout`.
async fn by_deadline<T>(
    deadline: Instant,
    what: &str,
    op: impl Future<Output = io::Result<T>>,
) -> Result<T, String> {
    match tokio::time::timeout_at(deadline, op).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: timeout")),
    }
}

/// Nearest-rank percentile of sorted `r`; 0 when it is empty (as the Go peer).
fn percentile(r: &[f64], p: f64) -> f64 {
    stats::percentile(r, p).unwrap_or(0.0)
}

async fn client(f: Flags, nd: NoDelay) -> ExitCode {
    let mut f = f;
    if f.parallel < 1 {
        f.parallel = 1;
    }
    // Fail on a bad configuration before dialing anything.
    if let Err(e) = build_config(&f, nd, None) {
        return fatal(&format!("config: {e}"));
    }
    let msg_mode = f.rate > 0.0 || f.messages > 0;
    let mut res = Report {
        implementation: "kcpio",
        mode: if f.sink { "sink" } else { "echo" },
        tag: f.tag.clone(),
        sessions: f.parallel,
        bytes_per_session: f.nbytes,
        crypt: f.crypt.clone(),
        datashard: f.data_shard,
        parityshard: f.parity_shard,
        mtu: f.mtu,
        nodelay: nd.to_string(),
        size: f.size,
        rate_hz: f.rate,
        messages: f.messages,
        hold_ms: f.hold.as_millis() as f64,
        ..Report::default()
    };
    if msg_mode {
        res.bytes_per_session = 0;
        res.mode = if f.rate > 0.0 { "latency" } else { "pingpong" };
    }
    let f = Arc::new(f);
    let epoch = Instant::now();
    let mut tasks = Vec::with_capacity(f.parallel as usize);
    for i in 0..f.parallel {
        let conv = (f.conv != 0).then(|| (f.conv as u32).wrapping_add(i as u32));
        let f = Arc::clone(&f);
        tasks.push(tokio::spawn(async move {
            if msg_mode {
                run_msg(f, nd, conv, epoch).await
            } else {
                run_bytes(f, nd, conv).await
            }
        }));
    }
    let mut outs = Vec::with_capacity(tasks.len());
    for t in tasks {
        outs.push(t.await.unwrap_or_else(|e| Outcome {
            verified: 0,
            steady: None,
            msg: MsgStats::default(),
            stream: None,
            error: Some(format!("session task: {e}")),
        }));
    }
    let elapsed = epoch.elapsed();
    if !f.hold.is_zero() {
        eprintln!(
            "holding {} sessions for {}",
            f.parallel,
            go_duration(f.hold)
        );
        if f.snmp {
            // The counters as the hold begins: what the idle sessions cost
            // is the difference with the final `snmp:` line.
            let mut at_hold = Counters::default();
            for s in outs.iter().filter_map(|o| o.stream.as_ref()) {
                at_hold.add(&s.stats());
            }
            println!("hold-start {}", at_hold.snmp_line());
        }
        tokio::time::sleep(f.hold).await;
    }
    res.pass = true;
    let mut convs = Vec::new();
    let mut rtts = Vec::new();
    let mut counters = Counters::default();
    for o in &mut outs {
        res.bytes_verified += o.verified;
        if let (1, Some((bytes, secs))) = (f.parallel, o.steady)
            && secs >= 1.0
        {
            res.steady_mb_per_s = bytes as f64 / secs / 1e6;
        }
        if let Some(e) = &o.error {
            if res.error.is_empty() {
                res.error = e.clone();
            }
            res.pass = false;
        }
        res.sent += o.msg.sent;
        res.received += o.msg.received;
        rtts.append(&mut o.msg.rtts);
        if let Some(s) = &o.stream {
            let st = s.stats();
            if convs.len() < 16 {
                convs.push(format!("{:#010x}", st.conv));
            }
            res.srtt_ms = i64::try_from(st.srtt.as_millis()).unwrap_or(i64::MAX);
            res.rto_ms = u64::try_from(st.rto.as_millis()).unwrap_or(u64::MAX);
            counters.add(&st);
        }
    }
    if outs.len() > convs.len() {
        convs.push("...".into());
    }
    res.conv = convs.join(",");
    res.elapsed_ms = elapsed.as_micros() as f64 / 1000.0;
    if !elapsed.is_zero() {
        res.mb_per_s = res.bytes_verified as f64 / elapsed.as_secs_f64() / 1e6;
    }
    res.counters = counters;
    let (user, sys, rss) = process_usage();
    res.cpu_user_s = user;
    res.cpu_sys_s = sys;
    res.max_rss_kb = rss;
    if msg_mode {
        res.lost = res.sent - res.received;
        if res.lost > 0 {
            res.pass = false;
        }
        res.payload_bytes = res.sent * f.size;
        if res.payload_bytes > 0 {
            res.overhead = round3(res.counters.out_bytes as f64 / res.payload_bytes as f64);
        }
        rtts.sort_by(f64::total_cmp);
        if let (Some(first), Some(last)) = (rtts.first(), rtts.last()) {
            let sum: f64 = rtts.iter().sum();
            res.rtt_min_ms = round3(*first);
            res.rtt_max_ms = round3(*last);
            res.rtt_mean_ms = round3(sum / rtts.len() as f64);
            res.rtt_p50_ms = round3(percentile(&rtts, 50.0));
            res.rtt_p90_ms = round3(percentile(&rtts, 90.0));
            res.rtt_p99_ms = round3(percentile(&rtts, 99.0));
            res.rtt_p999_ms = round3(percentile(&rtts, 99.9));
        }
    }
    drop(outs);
    if f.json {
        match serde_json::to_string(&res) {
            Ok(line) => println!("{line}"),
            Err(e) => return fatal(&format!("json: {e}")),
        }
    } else {
        let verdict = if res.pass {
            "PASS".to_owned()
        } else if res.error.is_empty() {
            format!("FAIL: {} messages lost", res.lost)
        } else {
            format!("FAIL: {}", res.error)
        };
        if msg_mode {
            println!(
                "{verdict} mode={} sessions={} size={} rate={} sent={} received={} lost={} elapsed={:.1}ms rtt_ms: mean={:.3} p50={:.3} p90={:.3} p99={:.3} p99.9={:.3} max={:.3} overhead={:.3} retrans={} fec_recovered={}",
                res.mode,
                res.sessions,
                res.size,
                res.rate_hz,
                res.sent,
                res.received,
                res.lost,
                res.elapsed_ms,
                res.rtt_mean_ms,
                res.rtt_p50_ms,
                res.rtt_p90_ms,
                res.rtt_p99_ms,
                res.rtt_p999_ms,
                res.rtt_max_ms,
                res.overhead,
                res.counters.retrans_segs,
                res.counters.fec_recovered
            );
        } else {
            println!(
                "{verdict} mode={} sessions={} bytes={} verified={} elapsed={:.1}ms throughput={:.2}MB/s crypt={} fec={}/{} mtu={} nodelay={} conv={} srtt={}ms rto={}ms",
                res.mode,
                res.sessions,
                res.bytes_per_session,
                res.bytes_verified,
                res.elapsed_ms,
                res.mb_per_s,
                res.crypt,
                res.datashard,
                res.parityshard,
                res.mtu,
                res.nodelay,
                res.conv,
                res.srtt_ms,
                res.rto_ms
            );
        }
    }
    if f.snmp {
        println!("{}", counters.snmp_line());
    }
    if res.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

// ---------------------------------------------------------------------------

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let Some(mode) = args.get(1).filter(|m| !m.starts_with('-')) else {
        usage();
        return ExitCode::from(2);
    };
    let f = match parse_flags(mode, args.get(2..).unwrap_or(&[])) {
        Ok(f) => f,
        Err(ParseOutcome::Help) => {
            print_flags(mode);
            return ExitCode::SUCCESS;
        }
        Err(ParseOutcome::Error(e)) => {
            eprintln!("{e}");
            print_flags(mode);
            return ExitCode::from(2);
        }
    };
    if (f.rate > 0.0 || f.messages > 0) && f.size < 16 {
        return fatal("--size must be at least 16 in message modes");
    }
    if f.rate < 0.0 || f.messages < 0 {
        return fatal("--rate and --messages must not be negative");
    }
    if Method::from_name(&f.crypt).is_none() && !f.crypt.is_empty() {
        return fatal(&format!("crypt: unknown cipher {:?}", f.crypt));
    }
    if !f.key_hex.is_empty()
        && let Err(e) = hex::decode(&f.key_hex)
    {
        return fatal(&format!("crypt: {e}"));
    }
    let nd = match NoDelay::parse(&f.nodelay) {
        Ok(nd) => nd,
        Err(e) => return fatal(&format!("nodelay: {e}")),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fatal(&format!("runtime: {e}")),
    };
    runtime.block_on(async move {
        match f.mode.as_str() {
            "echo-server" => serve(f, nd, ServerKind::Echo).await,
            "sink-server" => serve(f, nd, ServerKind::Sink).await,
            "client" => client(f, nd).await,
            _ => {
                usage();
                ExitCode::from(2)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print_like_go() {
        assert_eq!(parse_duration("60s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("s"), None);
        assert_eq!(go_duration(Duration::from_secs(30)), "30s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(7200)), "2h0m0s");
        assert_eq!(go_duration(Duration::from_micros(500)), "500µs");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let r: Vec<f64> = (1..=1000).map(f64::from).collect();
        for (p, want) in [
            (50.0, 500.0),
            (90.0, 900.0),
            (99.0, 990.0),
            (99.9, 999.0),
            (100.0, 1000.0),
            (0.0, 1.0),
        ] {
            assert_eq!(percentile(&r, p), want, "p{p}");
        }
        assert_eq!(percentile(&[7.0], 99.9), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn messages_round_trip() {
        let epoch = Instant::now();
        let mut buf = vec![0u8; 64];
        build_msg(&mut buf, 41, epoch);
        assert_eq!(&buf[0..8], &41u64.to_le_bytes());
        assert!(check_msg(&buf, 41, epoch).is_ok_and(|rtt| (0.0..1000.0).contains(&rtt)));
        assert!(check_msg(&buf, 42, epoch).is_err());
        let mut want = vec![0u8; 48];
        pattern::fill(&mut want, 41 * 64 + 16);
        assert_eq!(&buf[16..], &want[..]);
        buf[40] ^= 1;
        assert!(check_msg(&buf, 41, epoch).is_err());
    }

    #[test]
    fn flags_parse_like_go() {
        let args: Vec<String> = [
            "--addr=127.0.0.1:0",
            "-crypt",
            "aes",
            "--stream",
            "--conv",
            "0x10",
            "--json=false",
            "--timeout",
            "2s",
            "rest",
            "--quiet",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let Ok(f) = parse_flags("client", &args) else {
            panic!("parse failed")
        };
        assert_eq!(f.addr, "127.0.0.1:0");
        assert_eq!(f.crypt, "aes");
        assert!(f.stream && !f.json && !f.quiet);
        assert_eq!(f.conv, 16);
        assert_eq!(f.timeout, Duration::from_secs(2));
        assert!(parse_flags("client", &["--nope".to_string()]).is_err());
        assert!(parse_flags("client", &["--mtu".to_string()]).is_err());
    }
}
