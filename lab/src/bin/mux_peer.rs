//! A kcpio mux peer with the command line and JSON report of the
//! repository's Go smux peer (`testkit/interop/smux-peer`), so `lab/scripts/vs-smux.sh`
//! can run either one with the same arguments.
//!
//! ```text
//! cargo run --release --example mux_peer -- server --listen ADDR [flags]   prints "LISTENING <addr>" first
//! cargo run --release --example mux_peer -- client --connect ADDR [flags]
//! ```
//!
//! Both roles end with one JSON line (`ok`, `impl`, `streams`, `bytes`,
//! `seconds`, `mbps`, `cpu_s`, `max_rss_kb`, `errors`, ...). The flags, apps
//! and payload pattern are those of `testkit/interop/smux-peer/README.md`:
//! `--app echo|sink|source|halfclose|halfclose-rev|sizes|idle`, `--transport
//! tcp|kcp`, kcptun's KCP flags (`--crypt --key --datashard --parityshard
//! --mode --sndwnd --rcvwnd --mtu`), `--snappy`, the smux knobs (`--smuxver
//! --keepalive --keepalive-timeout --framesize --smuxbuf --streambuf`) and the
//! workload (`--streams --bytes --write-size --sizes --stall --hold --timeout
//! --max-streams --max-sessions --quiet`). Not implemented: `--app inject`
//! and `--silent-after` (test hooks of the Go peer), `--sockbuf` (accepted,
//! ignored). Exit status: 0 ok, 1 failed, 2 usage error.

use goduration::parse_duration;
use kcpio_testkit::goduration;
use kcpio_testkit::pattern;

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kcpio::mux::{Mux, MuxConfig, MuxStream, Snappy, Version};
use kcpio::{Config, KcpListener, KcpStream, Key, Method, Preset};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The command line, with the Go peer's defaults.
#[derive(Clone, Debug)]
struct Flags {
    server: bool,
    addr: String,
    app: String,
    kcp: bool,
    crypt: String,
    key: String,
    datashard: usize,
    parityshard: usize,
    mode: String,
    sndwnd: u16,
    rcvwnd: u16,
    mtu: usize,
    snappy: bool,
    smuxver: u8,
    keepalive: u64,
    keepalive_timeout: u64,
    framesize: usize,
    smuxbuf: usize,
    streambuf: u32,
    streams: usize,
    bytes: u64,
    write_size: usize,
    sizes: Vec<usize>,
    stall: Duration,
    hold: Duration,
    timeout: Duration,
    max_streams: u64,
    max_sessions: u64,
    quiet: bool,
}

fn usage() -> String {
    "usage: mux_peer server --listen ADDR | client --connect ADDR [flags] (see testkit/interop/smux-peer/README.md)".into()
}

fn default_sizes() -> Vec<usize> {
    let mut v: Vec<usize> = vec![1000, 1350, 1400, 65534, 65535];
    v.extend(1..=16);
    for k in 5..=16 {
        for n in [(1 << k) - 1, 1 << k, (1 << k) + 1] {
            if n <= 65535 {
                v.push(n);
            }
        }
    }
    v.sort_unstable();
    v.dedup();
    v
}

fn parse_args(args: &[String]) -> Result<Flags, String> {
    let role = args.first().ok_or_else(usage)?;
    if role != "server" && role != "client" {
        return Err(usage());
    }
    let mut f = Flags {
        server: role == "server",
        addr: String::new(),
        app: "echo".into(),
        kcp: false,
        crypt: "null".into(),
        key: "it's a secrect".into(),
        datashard: 0,
        parityshard: 0,
        mode: "fast3".into(),
        sndwnd: 1024,
        rcvwnd: 1024,
        mtu: 1350,
        snappy: false,
        smuxver: 1,
        keepalive: 10,
        keepalive_timeout: 30,
        framesize: 32768,
        smuxbuf: 4_194_304,
        streambuf: 65536,
        streams: 1,
        bytes: 1 << 20,
        write_size: 32768,
        sizes: default_sizes(),
        stall: Duration::ZERO,
        hold: Duration::ZERO,
        timeout: Duration::ZERO,
        max_streams: 0,
        max_sessions: 0,
        quiet: false,
    };
    let mut it = args[1..].iter();
    while let Some(arg) = it.next() {
        let name = arg.trim_start_matches('-');
        let (name, inline) = match name.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (name, None),
        };
        if matches!(name, "snappy" | "quiet") {
            let on = inline.as_deref().is_none_or(|v| v == "true" || v == "1");
            if name == "snappy" {
                f.snappy = on;
            } else {
                f.quiet = on;
            }
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .ok_or_else(|| format!("flag needs an argument: -{name}"))?
                .clone(),
        };
        let bad = || format!("invalid value {value:?} for flag -{name}");
        let num = |v: &str| v.parse::<u64>().map_err(|_| bad());
        match name {
            "listen" | "connect" => f.addr = value.clone(),
            "app" => f.app = value.clone(),
            "transport" => f.kcp = value == "kcp",
            "crypt" => f.crypt = value.clone(),
            "key" => f.key = value.clone(),
            "datashard" | "ds" => f.datashard = num(&value)? as usize,
            "parityshard" | "ps" => f.parityshard = num(&value)? as usize,
            "mode" => f.mode = value.clone(),
            "sndwnd" => f.sndwnd = num(&value)? as u16,
            "rcvwnd" => f.rcvwnd = num(&value)? as u16,
            "mtu" => f.mtu = num(&value)? as usize,
            "sockbuf" => {}
            "smuxver" => f.smuxver = num(&value)? as u8,
            "keepalive" => f.keepalive = num(&value)?,
            "keepalive-timeout" => f.keepalive_timeout = num(&value)?,
            "framesize" => f.framesize = num(&value)? as usize,
            "smuxbuf" => f.smuxbuf = num(&value)? as usize,
            "streambuf" => f.streambuf = num(&value)? as u32,
            "streams" => f.streams = num(&value)? as usize,
            "bytes" => f.bytes = num(&value)?,
            "write-size" => f.write_size = num(&value)? as usize,
            "sizes" => {
                f.sizes = value
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse::<usize>()
                            .ok()
                            .filter(|n| (1..=65535).contains(n))
                    })
                    .collect::<Option<_>>()
                    .ok_or_else(bad)?;
            }
            "stall" => f.stall = parse_duration(&value).ok_or_else(bad)?,
            "hold" => f.hold = parse_duration(&value).ok_or_else(bad)?,
            "timeout" => f.timeout = parse_duration(&value).ok_or_else(bad)?,
            "max-streams" => f.max_streams = num(&value)?,
            "max-sessions" => f.max_sessions = num(&value)?,
            "inject" | "silent-after" => {
                return Err(format!("-{name} is not implemented by the kcpio peer"));
            }
            _ => return Err(format!("flag provided but not defined: -{name}")),
        }
    }
    if f.addr.is_empty() {
        return Err(format!(
            "{role} needs --{}",
            if f.server { "listen" } else { "connect" }
        ));
    }
    if ![
        "echo",
        "sink",
        "source",
        "halfclose",
        "halfclose-rev",
        "sizes",
        "idle",
    ]
    .contains(&f.app.as_str())
    {
        return Err(format!("unknown or unsupported --app {:?}", f.app));
    }
    if f.timeout.is_zero() {
        f.timeout = Duration::from_secs(if f.server { 600 } else { 60 });
    }
    Ok(f)
}

impl Flags {
    fn mux_config(&self) -> Result<MuxConfig, String> {
        let version = match self.smuxver {
            1 => Version::V1,
            2 => Version::V2,
            v => return Err(format!("unsupported smux version {v}")),
        };
        MuxConfig::builder()
            .version(version)
            .keepalive_interval(Duration::from_secs(self.keepalive))
            .keepalive_timeout(Duration::from_secs(self.keepalive_timeout))
            .max_frame_size(self.framesize)
            .receive_buffer(self.smuxbuf)
            .stream_window(self.streambuf)
            .build()
            .map_err(|e| format!("smux config: {e}"))
    }

    fn kcp_config(&self) -> Result<Config, String> {
        let preset = Preset::from_name(&self.mode)
            .ok_or_else(|| format!("unknown --mode {:?}", self.mode))?;
        let method = Method::from_name(&self.crypt)
            .ok_or_else(|| format!("unknown cipher {:?}", self.crypt))?;
        let mut b = Config::builder()
            .preset(preset)
            .stream(true)
            .window(self.sndwnd, self.rcvwnd)
            .mtu(self.mtu)
            .crypto(method, Key::passphrase(&self.key));
        if self.datashard > 0 {
            b = b.fec(self.datashard, self.parityshard);
        }
        b.build().map_err(|e| format!("kcp config: {e}"))
    }

    fn log(&self, msg: &str) {
        if !self.quiet {
            eprintln!(
                "mux_peer {}: {msg}",
                if self.server { "server" } else { "client" }
            );
        }
    }
}

/// The JSON report, as the Go peer's.
#[derive(Default)]
struct Report {
    sessions: AtomicU64,
    streams: AtomicU64,
    bytes: AtomicU64,
    errors: Mutex<Vec<String>>,
    half_close: Mutex<bool>,
    times: Mutex<Vec<f64>>,
    session_closed_s: Mutex<Option<(f64, String)>>,
}

impl Report {
    fn error(&self, e: String) {
        let mut v = self.errors.lock().unwrap();
        v.push(e);
    }

    fn add(&self, bytes: u64, streams: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.streams.fetch_add(streams, Ordering::Relaxed);
    }

    fn print(&self, f: &Flags, seconds: f64) -> bool {
        let (user, sys, rss) = process_usage();
        let errors = self.errors.lock().unwrap().clone();
        let bytes = self.bytes.load(Ordering::Relaxed);
        let times = self.times.lock().unwrap().clone();
        let closed = self.session_closed_s.lock().unwrap().clone();
        let ok = errors.is_empty();
        let json = serde_json::json!({
            "ok": ok, "impl": "kcpio", "smux": "kcpio", "role": if f.server { "server" } else { "client" },
            "app": f.app, "transport": if f.kcp { "kcp" } else { "tcp" }, "smuxver": f.smuxver,
            "snappy": f.snappy, "sessions": self.sessions.load(Ordering::Relaxed), "streams": self.streams.load(Ordering::Relaxed),
            "bytes": bytes, "seconds": seconds,
            "mbps": if seconds > 0.0 { bytes as f64 / seconds / 1e6 } else { 0.0 },
            "cpu_s": user + sys, "cpu_user_s": user, "cpu_sys_s": sys, "max_rss_kb": rss,
            "error_count": errors.len(), "errors": errors.iter().take(20).collect::<Vec<_>>(),
            "half_close": *self.half_close.lock().unwrap(),
            "first_stream_s": times.first().copied().unwrap_or(0.0),
            "others_max_s": times.iter().skip(1).copied().fold(0.0, f64::max),
            "session_closed_s": closed.as_ref().map_or(-1.0, |c| c.0),
            "session_error": closed.map(|c| c.1).unwrap_or_default(),
            "peer_closed": false,
        });
        println!("{json}");
        ok
    }
}

/// (user seconds, system seconds, peak RSS KiB) from /proc; zeros elsewhere.
fn process_usage() -> (f64, f64, i64) {
    let ticks = 100.0; // USER_HZ
    let (mut user, mut sys) = (0.0, 0.0);
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some((_, after)) = stat.rsplit_once(") ")
    {
        let f: Vec<&str> = after.split_whitespace().collect();
        user = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / ticks;
        sys = f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / ticks;
    }
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    (user, sys, rss)
}

// ---- pattern I/O ----------------------------------------------------------

async fn write_pattern<W: AsyncWrite + Unpin>(
    w: &mut W,
    offset: u64,
    n: u64,
    ws: usize,
) -> io::Result<()> {
    let mut buf = vec![0; ws.min(n.max(1) as usize)];
    let (mut off, end) = (offset, offset + n);
    while off < end {
        let k = (end - off).min(buf.len() as u64) as usize;
        pattern::fill(&mut buf[..k], off);
        w.write_all(&buf[..k]).await?;
        off += k as u64;
    }
    Ok(())
}

async fn read_pattern<R: AsyncRead + Unpin>(
    r: &mut R,
    offset: u64,
    want: Option<u64>,
) -> io::Result<u64> {
    let mut buf = vec![0; 65536];
    let mut got = 0;
    while want.is_none_or(|w| got < w) {
        let cap = want.map_or(buf.len(), |w| (w - got).min(65536) as usize);
        let n = r.read(&mut buf[..cap]).await?;
        if n == 0 {
            if want.is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("EOF after {got} bytes"),
                ));
            }
            break;
        }
        if let Some(i) = pattern::first_mismatch(&buf[..n], offset + got) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("pattern mismatch at offset {}", offset + got + i as u64),
            ));
        }
        got += n as u64;
    }
    Ok(got)
}

/// The half-closing side: write `--bytes`, shut down, read the reply to EOF
/// and check it is as long.
async fn initiate(s: &mut MuxStream, f: &Flags) -> io::Result<u64> {
    write_pattern(s, 0, f.bytes, f.write_size).await?;
    s.shutdown().await?;
    let got = read_pattern(s, 0, None).await?;
    if got != f.bytes {
        let msg = format!("reply was {got} bytes, want {}", f.bytes);
        return Err(io::Error::other(msg));
    }
    Ok(f.bytes + got)
}

/// The answering side: read to EOF, write as many bytes back, shut down.
async fn respond(s: &mut MuxStream, f: &Flags) -> io::Result<u64> {
    let n = read_pattern(s, 0, None).await?;
    write_pattern(s, 0, n, f.write_size).await?;
    s.shutdown().await?;
    Ok(2 * n)
}

// ---- transports ------------------------------------------------------------

fn start<T>(io: T, f: &Flags, cfg: &MuxConfig) -> Mux
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    match (f.snappy, f.server) {
        (true, true) => Mux::server(Snappy::new(io), cfg),
        (true, false) => Mux::client(Snappy::new(io), cfg),
        (false, true) => Mux::server(io, cfg),
        (false, false) => Mux::client(io, cfg),
    }
}

// ---- server ------------------------------------------------------------------

async fn serve_stream(mut s: MuxStream, f: &Flags, first: bool) -> io::Result<u64> {
    match f.app.as_str() {
        "sink" => {
            if first && !f.stall.is_zero() {
                tokio::time::sleep(f.stall).await;
            }
            let mut buf = vec![0; 65536];
            let (mut got, mut reported) = (0u64, 0u64);
            let mut bad = false;
            loop {
                let r = tokio::time::timeout(Duration::from_millis(20), s.read(&mut buf)).await;
                match r {
                    Ok(Ok(0)) => {
                        return if bad {
                            Err(io::Error::other("pattern mismatch"))
                        } else {
                            Ok(got)
                        };
                    }
                    Ok(Ok(n)) => {
                        bad |= pattern::first_mismatch(&buf[..n], got).is_some();
                        got += n as u64;
                        if got - reported >= 65536 {
                            reported = got;
                            s.write_all(&(got | u64::from(bad) << 63).to_le_bytes())
                                .await?;
                        }
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_) if got != reported => {
                        reported = got;
                        s.write_all(&(got | u64::from(bad) << 63).to_le_bytes())
                            .await?;
                    }
                    Err(_) => {}
                }
            }
        }
        "source" => {
            let mut req = [0; 8];
            s.read_exact(&mut req).await?;
            let n = u64::from_le_bytes(req);
            write_pattern(&mut s, 0, n, f.write_size).await?;
            s.shutdown().await?;
            Ok(n)
        }
        "halfclose" => respond(&mut s, f).await,
        "halfclose-rev" => initiate(&mut s, f).await,
        _ => {
            // A buffer that starts at 1 KiB and grows on full reads, as the
            // Go peer's, so idle streams measure the mux, not the app.
            let mut buf = vec![0; 1024];
            let mut n = 0;
            loop {
                let k = match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(k) => k,
                };
                s.write_all(&buf[..k]).await?;
                n += k as u64;
                if k == buf.len() && buf.len() < 65536 {
                    buf.resize(buf.len() * 2, 0);
                }
            }
            let _ = s.shutdown().await;
            Ok(n)
        }
    }
}

async fn serve_session(
    mux: Mux,
    f: Arc<Flags>,
    rep: Arc<Report>,
    ended: Arc<tokio::sync::Notify>,
    streams_ended: Arc<AtomicU64>,
) {
    let start = Instant::now();
    let mut first = true;
    loop {
        match mux.accept_stream().await {
            Ok(s) => {
                let (f, rep, ended, streams_ended) = (
                    Arc::clone(&f),
                    Arc::clone(&rep),
                    Arc::clone(&ended),
                    Arc::clone(&streams_ended),
                );
                let is_first = std::mem::replace(&mut first, false);
                tokio::spawn(async move {
                    let id = s.id();
                    match serve_stream(s, &f, is_first).await {
                        Ok(n) => rep.add(n, 1),
                        Err(e) => {
                            rep.error(format!("stream {id}: {e}"));
                            rep.add(0, 1);
                        }
                    }
                    streams_ended.fetch_add(1, Ordering::Relaxed);
                    ended.notify_one();
                });
            }
            Err(e) => {
                let mut c = rep.session_closed_s.lock().unwrap();
                if c.is_none() {
                    *c = Some((start.elapsed().as_secs_f64(), e.to_string()));
                }
                return;
            }
        }
    }
}

async fn run_server(f: Flags) -> Result<bool, String> {
    let cfg = f.mux_config()?;
    let f = Arc::new(f);
    let rep = Arc::new(Report::default());
    let ended = Arc::new(tokio::sync::Notify::new());
    let streams_ended = Arc::new(AtomicU64::new(0));
    let sessions_ended = Arc::new(AtomicU64::new(0));
    enum L {
        Tcp(TcpListener),
        Kcp(KcpListener),
    }
    let listener = if f.kcp {
        L::Kcp(
            KcpListener::bind(f.addr.as_str(), &f.kcp_config()?)
                .await
                .map_err(|e| format!("listen: {e}"))?,
        )
    } else {
        L::Tcp(
            TcpListener::bind(f.addr.as_str())
                .await
                .map_err(|e| format!("listen: {e}"))?,
        )
    };
    let addr: SocketAddr = match &listener {
        L::Tcp(l) => l.local_addr(),
        L::Kcp(l) => l.local_addr(),
    }
    .map_err(|e| e.to_string())?;
    println!("LISTENING {addr}");
    let started = Instant::now();
    let accept = {
        let (f, rep, ended, streams_ended, sessions_ended, cfg) = (
            Arc::clone(&f),
            Arc::clone(&rep),
            Arc::clone(&ended),
            Arc::clone(&streams_ended),
            Arc::clone(&sessions_ended),
            cfg.clone(),
        );
        tokio::spawn(async move {
            loop {
                let mux = match &listener {
                    L::Tcp(l) => match l.accept().await {
                        Ok((io, _)) => {
                            let _ = io.set_nodelay(true);
                            start(io, &f, &cfg)
                        }
                        Err(_) => return,
                    },
                    L::Kcp(l) => match l.accept().await {
                        Ok((io, _)) => start(io, &f, &cfg),
                        Err(_) => return,
                    },
                };
                rep.sessions.fetch_add(1, Ordering::Relaxed);
                let (f, rep, ended, streams_ended, sessions_ended) = (
                    Arc::clone(&f),
                    Arc::clone(&rep),
                    Arc::clone(&ended),
                    Arc::clone(&streams_ended),
                    Arc::clone(&sessions_ended),
                );
                tokio::spawn(async move {
                    serve_session(mux, f, rep, Arc::clone(&ended), streams_ended).await;
                    sessions_ended.fetch_add(1, Ordering::Relaxed);
                    ended.notify_one();
                });
            }
        })
    };
    let deadline = tokio::time::Instant::now() + f.timeout;
    let mut timed_out = false;
    loop {
        let done = (f.max_streams > 0 && streams_ended.load(Ordering::Relaxed) >= f.max_streams)
            || (f.max_sessions > 0 && sessions_ended.load(Ordering::Relaxed) >= f.max_sessions);
        if done {
            break;
        }
        if tokio::time::timeout_at(deadline, ended.notified())
            .await
            .is_err()
        {
            timed_out = true;
            break;
        }
    }
    accept.abort();
    if timed_out && (f.max_streams > 0 || f.max_sessions > 0) {
        rep.error(format!(
            "timed out after {:?}: {} streams and {} sessions ended",
            f.timeout,
            streams_ended.load(Ordering::Relaxed),
            sessions_ended.load(Ordering::Relaxed)
        ));
    }
    Ok(rep.print(&f, started.elapsed().as_secs_f64()))
}

// ---- client --------------------------------------------------------------------

async fn client_stream(mux: &Mux, f: &Flags, rep: &Report, first: bool) -> io::Result<u64> {
    let mut s = mux.open_stream().await?;
    match f.app.as_str() {
        "sink" => {
            let (mut r, mut w) = tokio::io::split(&mut s);
            let write = write_pattern(&mut w, 0, f.bytes, f.write_size);
            let read = async {
                let mut b = [0; 8];
                if f.bytes == 0 {
                    return Ok(());
                }
                // Progress reports until one covers every byte sent.
                loop {
                    r.read_exact(&mut b).await?;
                    let v = u64::from_le_bytes(b);
                    if v >> 63 != 0 {
                        return Err(io::Error::other("the sink saw a pattern mismatch"));
                    }
                    if v >= f.bytes {
                        return Ok(());
                    }
                }
            };
            let (a, b) = tokio::join!(write, read);
            a?;
            b?;
            Ok(f.bytes)
        }
        "source" => {
            s.write_all(&f.bytes.to_le_bytes()).await?;
            if first && !f.stall.is_zero() {
                tokio::time::sleep(f.stall).await;
            }
            let got = read_pattern(&mut s, 0, None).await?;
            if got != f.bytes {
                return Err(io::Error::other(format!(
                    "got {got} bytes before EOF, want {}",
                    f.bytes
                )));
            }
            Ok(got)
        }
        "halfclose" => {
            *rep.half_close.lock().unwrap() = true;
            initiate(&mut s, f).await
        }
        "halfclose-rev" => respond(&mut s, f).await,
        "sizes" => {
            let mut buf = vec![0; 65535];
            let mut off = 0;
            for &n in &f.sizes {
                pattern::fill(&mut buf[..n], off);
                s.write_all(&buf[..n]).await?;
                read_pattern(&mut s, off, Some(n as u64)).await?;
                off += n as u64;
            }
            Ok(off)
        }
        _ => echo(&mut s, 0, f).await,
    }
}

async fn echo(s: &mut MuxStream, offset: u64, f: &Flags) -> io::Result<u64> {
    let (mut r, mut w) = tokio::io::split(s);
    let (a, b) = tokio::join!(
        write_pattern(&mut w, offset, f.bytes, f.write_size),
        read_pattern(&mut r, offset, Some(f.bytes))
    );
    a?;
    b
}

async fn run_client(f: Flags) -> Result<bool, String> {
    let cfg = f.mux_config()?;
    let mux = if f.kcp {
        let kcp = KcpStream::connect(f.addr.as_str(), &f.kcp_config()?)
            .await
            .map_err(|e| format!("dial: {e}"))?;
        start(kcp, &f, &cfg)
    } else {
        let tcp = TcpStream::connect(f.addr.as_str())
            .await
            .map_err(|e| format!("dial: {e}"))?;
        let _ = tcp.set_nodelay(true);
        start(tcp, &f, &cfg)
    };
    let rep = Report {
        sessions: AtomicU64::new(1),
        ..Report::default()
    };
    let (mux, rep, f) = (Arc::new(mux), Arc::new(rep), Arc::new(f));
    let started = Instant::now();
    let work = {
        let (mux, rep, f) = (Arc::clone(&mux), Arc::clone(&rep), Arc::clone(&f));
        async move {
            if f.app == "idle" {
                // Open and echo on every stream at once, hold them idle, echo again.
                let mut streams: Vec<Option<MuxStream>> = (0..f.streams).map(|_| None).collect();
                for round in 0..2u64 {
                    let mut set = tokio::task::JoinSet::new();
                    for (i, slot) in streams.iter_mut().enumerate() {
                        let (mux, f, taken) = (Arc::clone(&mux), Arc::clone(&f), slot.take());
                        set.spawn(async move {
                            let mut s = match taken {
                                Some(s) => s,
                                None => mux.open_stream().await?,
                            };
                            let n = echo(&mut s, round * f.bytes, &f).await?;
                            Ok::<_, io::Error>((i, s, n))
                        });
                    }
                    while let Some(r) = set.join_next().await {
                        match r {
                            Ok(Ok((i, s, n))) => {
                                streams[i] = Some(s);
                                rep.add(n, 0);
                            }
                            Ok(Err(e)) => rep.error(format!("idle stream: {e}")),
                            Err(e) => rep.error(format!("idle task: {e}")),
                        }
                    }
                    if round == 0 {
                        eprintln!("holding {} streams for {:?}", f.streams, f.hold);
                        tokio::time::sleep(f.hold).await;
                        if mux.is_closed() {
                            rep.error(format!("the session died during the {:?} hold", f.hold));
                            break;
                        }
                    }
                }
                rep.add(0, streams.iter().flatten().count() as u64);
                return;
            }
            let mut set = tokio::task::JoinSet::new();
            for i in 0..f.streams {
                let (mux, rep, f) = (Arc::clone(&mux), Arc::clone(&rep), Arc::clone(&f));
                set.spawn(async move {
                    let r = client_stream(&mux, &f, &rep, i == 0).await;
                    rep.times
                        .lock()
                        .unwrap()
                        .push(started.elapsed().as_secs_f64());
                    match r {
                        Ok(n) => rep.add(n, 1),
                        Err(e) => rep.error(format!("stream {i}: {e}")),
                    }
                    (i, started.elapsed().as_secs_f64())
                });
            }
            let mut times = vec![0.0; f.streams];
            while let Some(Ok((i, t))) = set.join_next().await {
                times[i] = t;
            }
            *rep.times.lock().unwrap() = times;
        }
    };
    if tokio::time::timeout(f.timeout, work).await.is_err() {
        rep.error(format!("timed out after {:?}", f.timeout));
    }
    let seconds = started.elapsed().as_secs_f64();
    if f.kcp {
        // KCP has no close handshake: let the last FINs and ACKs leave.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    f.log(&format!("done: {:?}", mux.stats()));
    Ok(rep.print(&f, seconds))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let f = match parse_args(&args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("mux_peer: {e}");
            return ExitCode::from(2);
        }
    };
    let result = if f.server {
        run_server(f).await
    } else {
        run_client(f).await
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("mux_peer: {e}");
            ExitCode::from(2)
        }
    }
}
