//! The lossy-link demo: `cargo run --release --example demo`.
//!
//! One process, loopback only. A seeded lossy UDP link (the relay the tests
//! use) sits between a kcpio server and client; the same two workloads run
//! through several configurations, then a table compares them:
//!
//! - **echo**: 64-byte messages at 60 Hz (a game or a remote shell); the
//!   client measures each message's round trip from its scheduled send time to
//!   the echo's arrival, so time spent waiting for the window counts too.
//! - **bulk**: the client writes as fast as the window allows; the server
//!   counts the bytes it reads (goodput).
//!
//! Retransmissions and FEC recoveries come from both ends' `stats()`.
//!
//! ```text
//! cargo run --release --example demo -- --loss 10 --rtt 100 --jitter 10 --duration 10 \
//!     --cipher aes-128 --seed 7 --plot latency.svg
//! ```

use std::error::Error;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kcpio::{Config, KcpListener, KcpStream, Key, Method, Preset, SessionStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, MissedTickBehavior};

use kcpio_testkit::relay;
use kcpio_testkit::stats;
use stats::percentile;

/// Size of one echo message.
const MSG: usize = 64;
/// Echo messages per second.
const HZ: f64 = 60.0;
/// How long the client waits for the last echoes after it stops sending.
const GRACE: Duration = Duration::from_secs(5);
/// Bytes per write in the bulk workload.
const CHUNK: usize = 64 * 1024;

const USAGE: &str = "\
kcpio lossy-link demo: runs a 60 Hz echo and a bulk transfer through a seeded
lossy UDP link on loopback, once per configuration, and prints a table.

usage: cargo run --release --example demo -- [options]

  --loss PCT        datagrams dropped in each direction, percent   [5]
  --rtt MS          base round-trip time of the link, ms           [40]
  --jitter MS       extra random delay 0..MS in each direction     [5]
  --duration SECS   length of the echo run; the bulk run is half   [8]
  --cipher NAME     kcptun cipher name (aes-128, salsa20, none...) [aes-128]
  --seed N          seed of the link's loss and jitter draws       [1]
  --plot FILE.svg   also write a latency CDF chart to FILE.svg
  -h, --help        this text";

#[derive(Clone, Debug)]
struct Args {
    /// Loss probability in [0, 1].
    loss: f64,
    rtt: Duration,
    jitter: Duration,
    duration: Duration,
    cipher: Method,
    seed: u64,
    plot: Option<PathBuf>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            loss: 0.05,
            rtt: Duration::from_millis(40),
            jitter: Duration::from_millis(5),
            duration: Duration::from_secs(8),
            cipher: Method::Aes128,
            seed: 1,
            plot: None,
        }
    }
}

/// `Ok(None)` means `--help` was asked for.
fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    fn num(flag: &str, v: Option<String>) -> Result<f64, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        let n: f64 = v
            .trim_end_matches('%')
            .parse()
            .map_err(|_| format!("{flag}: '{v}' is not a number"))?;
        if n.is_finite() && n >= 0.0 {
            Ok(n)
        } else {
            Err(format!("{flag}: '{v}' must be a non-negative number"))
        }
    }
    let ms = |n: f64| Duration::from_secs_f64(n / 1000.0);
    let mut a = Args::default();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--loss" => {
                let pct = num(&flag, it.next())?;
                if pct > 100.0 {
                    return Err("--loss is a percentage, at most 100".into());
                }
                a.loss = pct / 100.0;
            }
            "--rtt" => a.rtt = ms(num(&flag, it.next())?),
            "--jitter" => a.jitter = ms(num(&flag, it.next())?),
            "--duration" => {
                let s = num(&flag, it.next())?;
                if !(0.5..=3600.0).contains(&s) {
                    return Err("--duration must be between 0.5 and 3600 seconds".into());
                }
                a.duration = Duration::from_secs_f64(s);
            }
            "--cipher" => {
                let name = it.next().ok_or("--cipher needs a value")?;
                a.cipher = Method::from_name(&name)
                    .ok_or_else(|| format!("--cipher: unknown cipher '{name}'"))?;
            }
            "--seed" => {
                let v = it.next().ok_or("--seed needs a value")?;
                a.seed = v
                    .parse()
                    .map_err(|_| format!("--seed: '{v}' is not an unsigned integer"))?;
            }
            "--plot" => a.plot = Some(it.next().ok_or("--plot needs a file name")?.into()),
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    Ok(Some(a))
}

// ---------------------------------------------------------------------------
// The lossy link: the tests' relay, the same impairments both ways.

fn start_link(
    server: SocketAddr,
    args: &Args,
) -> impl Future<Output = std::io::Result<relay::Relay>> {
    let link = relay::LinkConfig {
        loss: args.loss,
        delay: args.rtt / 2,
        jitter: args.jitter,
        ..relay::LinkConfig::default()
    };
    relay::Relay::start(server, relay::RelayConfig::symmetric(args.seed, link))
}

// ---------------------------------------------------------------------------
// The configurations compared.

struct Scenario {
    name: &'static str,
    detail: String,
    client: Config,
    server: Config,
}

fn scenarios(args: &Args) -> Result<Vec<Scenario>, kcpio::ConfigError> {
    let key = || Key::passphrase("kcpio demo");
    // A dropped session would otherwise keep sending for seconds after its
    // run, on the next run's CPU time.
    let linger = Duration::from_millis(200);
    let base = || Config::builder().crypto(args.cipher, key()).linger(linger);
    // kcptun's windows: the client sends with 128 and receives with 512, the
    // server 1024 both ways.
    let kcptun = |fec: bool| -> Result<(Config, Config), kcpio::ConfigError> {
        let (d, p) = if fec { (10, 3) } else { (0, 0) };
        Ok((
            base()
                .preset(Preset::Fast3)
                .window(128, 512)
                .fec(d, p)
                .build()?,
            base()
                .preset(Preset::Fast3)
                .window(1024, 1024)
                .fec(d, p)
                .build()?,
        ))
    };
    let (c3, s3) = kcptun(false)?;
    let (c3f, s3f) = kcptun(true)?;
    let mut list = vec![
        Scenario {
            name: "kcp-go defaults",
            detail: "interval 100 ms, no fast resend, congestion window on, windows 32/32".into(),
            client: base().kcp_go_defaults().build()?,
            server: base().kcp_go_defaults().build()?,
        },
        Scenario {
            name: "kcpio defaults",
            detail: "Config::builder() as is: kcptun's fast (interval 30 ms, resend 2, no cwnd), windows 1024/1024".into(),
            client: base().build()?,
            server: base().build()?,
        },
        Scenario {
            name: "kcpio defaults, fast3",
            detail: "Config::builder().preset(Preset::Fast3): nodelay, interval 10 ms, windows 1024/1024".into(),
            client: base().preset(Preset::Fast3).build()?,
            server: base().preset(Preset::Fast3).build()?,
        },
        Scenario {
            name: "fast3",
            detail: "nodelay, interval 10 ms, resend 2, no cwnd; kcptun windows 128/512 client, 1024/1024 server".into(),
            client: c3,
            server: s3,
        },
        Scenario {
            name: "fast3 + FEC 10/3",
            detail: "as fast3, plus 3 Reed-Solomon parity shards per 10 data shards".into(),
            client: c3f,
            server: s3f,
        },
    ];
    // kcpio's own low-latency preset, when this build has one (the scripts
    // ask for it by the same name).
    if let Some(lowlat) = Preset::from_name("lowlat") {
        let with = |b: kcpio::ConfigBuilder, wnd: (u16, u16)| {
            b.preset(lowlat).window(wnd.0, wnd.1).build()
        };
        list.push(Scenario {
            name: "kcpio lowlat",
            detail: format!("Preset::{lowlat:?}; kcptun windows as fast3"),
            client: with(base(), (128, 512))?,
            server: with(base(), (1024, 1024))?,
        });
    }
    Ok(list)
}

// ---------------------------------------------------------------------------
// Workloads.

#[derive(Default)]
struct Outcome {
    /// Echo round trips, milliseconds, sorted.
    rtts: Vec<f64>,
    /// Echo messages sent but not echoed within the grace period.
    missing: usize,
    /// Bulk goodput, bytes per second.
    goodput: f64,
    retransmits: u64,
    fec_recovered: u64,
    /// Datagrams the link dropped (both directions, both workloads).
    link_lost: u64,
}

fn retransmits(s: &SessionStats) -> u64 {
    s.arq.retransmit_rto + s.arq.retransmit_fast + s.arq.retransmit_early
}

fn fec_recovered(s: &SessionStats) -> u64 {
    s.fec_in.recovered
}

fn add_stats(out: &mut Outcome, stats: &[SessionStats]) {
    for s in stats {
        out.retransmits += retransmits(s);
        out.fec_recovered += fec_recovered(s);
    }
}

type DynResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// 60 Hz echo of 64-byte messages for `dur`; returns the sorted round trips
/// in ms, the number never echoed, and both ends' stats.
async fn echo_run(
    listener: Arc<KcpListener>,
    link: SocketAddr,
    config: &Config,
    dur: Duration,
) -> DynResult<(Vec<f64>, usize, [SessionStats; 2])> {
    let stop = Arc::new(tokio::sync::Notify::new());
    let server = tokio::spawn({
        let stop = Arc::clone(&stop);
        async move {
            let (mut s, _) = listener.accept().await?;
            let mut buf = [0u8; MSG];
            loop {
                tokio::select! {
                    r = s.read_exact(&mut buf) => {
                        r?;
                        s.write_all(&buf).await?;
                    }
                    () = stop.notified() => break,
                }
            }
            Ok::<_, std::io::Error>(s.stats())
        }
    });

    let stream = KcpStream::connect(link, config).await?;
    let (mut rd, mut wr) = stream.into_split();
    let count = (dur.as_secs_f64() * HZ).round().max(1.0) as u64;
    let base = Instant::now();
    let writer = async move {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / HZ));
        // Late ticks fire at once: exactly `count` messages, each stamped
        // with the time it was due.
        tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
        let mut msg = [0u8; MSG];
        for seq in 0..count {
            let due = tick.tick().await;
            msg[..8].copy_from_slice(&seq.to_be_bytes());
            let at = u64::try_from(due.duration_since(base).as_nanos()).unwrap_or(u64::MAX);
            msg[8..16].copy_from_slice(&at.to_be_bytes());
            wr.write_all(&msg).await?;
        }
        Ok::<_, std::io::Error>(wr)
    };
    let reader = async {
        let deadline = base + dur + GRACE;
        let mut rtts = Vec::with_capacity(count as usize);
        let mut buf = [0u8; MSG];
        while (rtts.len() as u64) < count {
            match tokio::time::timeout_at(deadline, rd.read_exact(&mut buf)).await {
                Ok(r) => {
                    r?;
                }
                Err(_) => break,
            }
            let now = base.elapsed().as_nanos() as f64;
            let mut at = [0u8; 8];
            at.copy_from_slice(&buf[8..16]);
            let sent = u64::from_be_bytes(at) as f64;
            rtts.push((now - sent) / 1e6);
        }
        Ok::<_, std::io::Error>(rtts)
    };
    let (wr, rtts) = tokio::join!(writer, reader);
    let (_wr, mut rtts) = (wr?, rtts?);
    stop.notify_one();
    let server_stats = server.await??;
    rtts.sort_by(f64::total_cmp);
    let missing = count as usize - rtts.len();
    Ok((rtts, missing, [rd.stats(), server_stats]))
}

/// The client writes as fast as it can for `dur`; the server counts what it
/// reads. Returns goodput in bytes per second and both ends' stats.
async fn bulk_run(
    listener: Arc<KcpListener>,
    link: SocketAddr,
    config: &Config,
    dur: Duration,
) -> DynResult<(f64, [SessionStats; 2])> {
    let end = Instant::now() + dur;
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        let first = Instant::now();
        let mut bytes = 0u64;
        let mut buf = vec![0u8; CHUNK];
        loop {
            tokio::select! {
                r = s.read(&mut buf) => {
                    let n = r?;
                    if n == 0 {
                        break;
                    }
                    bytes += n as u64;
                }
                () = tokio::time::sleep_until(end) => break,
            }
        }
        let secs = end.saturating_duration_since(first).as_secs_f64();
        let goodput = if secs > 0.0 { bytes as f64 / secs } else { 0.0 };
        Ok::<_, std::io::Error>((goodput, s.stats()))
    });

    let mut stream = KcpStream::connect(link, config).await?;
    let chunk = vec![0x5a_u8; CHUNK];
    loop {
        tokio::select! {
            r = stream.write_all(&chunk) => r?,
            () = tokio::time::sleep_until(end) => break,
        }
    }
    let (goodput, server_stats) = server.await??;
    Ok((goodput, [stream.stats(), server_stats]))
}

async fn run_scenario(s: &Scenario, args: &Args, progress: &Progress) -> DynResult<Outcome> {
    let listener = Arc::new(KcpListener::bind("127.0.0.1:0", &s.server).await?);
    let link = start_link(listener.local_addr()?, args).await?;
    let mut out = Outcome::default();

    let echo_dur = args.duration;
    let (rtts, missing, stats) = progress
        .phase(
            &format!("{}: 60 Hz echo", s.name),
            echo_dur,
            echo_run(
                Arc::clone(&listener),
                link.local_addr(),
                &s.client,
                echo_dur,
            ),
        )
        .await?;
    out.rtts = rtts;
    out.missing = missing;
    add_stats(&mut out, &stats);

    let bulk_dur = args.duration / 2;
    let (goodput, stats) = progress
        .phase(
            &format!("{}: bulk", s.name),
            bulk_dur,
            bulk_run(
                Arc::clone(&listener),
                link.local_addr(),
                &s.client,
                bulk_dur,
            ),
        )
        .await?;
    out.goodput = goodput;
    add_stats(&mut out, &stats);

    let l = link.stats();
    // Loss draws plus delay-queue overflow; drops in the kernel's socket
    // buffers (only at very high rates) are not seen here.
    out.link_lost =
        l.to_server.lost + l.to_client.lost + l.to_server.queue_dropped + l.to_client.queue_dropped;
    Ok(out)
}

// ---------------------------------------------------------------------------
// Progress bar (stderr, only on a terminal).

struct Progress {
    bar: ProgressBar,
    done: std::sync::atomic::AtomicU64,
}

impl Progress {
    fn new(total: Duration) -> Self {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::with_draw_target(
                Some(total.as_millis() as u64),
                ProgressDrawTarget::stderr(),
            )
        } else {
            ProgressBar::hidden()
        };
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {msg}")
        {
            bar.set_style(style);
        }
        Self {
            bar,
            done: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Runs `fut`, moving the bar through `planned` of the total meanwhile.
    async fn phase<T>(&self, name: &str, planned: Duration, fut: impl Future<Output = T>) -> T {
        use std::sync::atomic::Ordering::Relaxed;
        self.bar.set_message(name.to_owned());
        let base = self.done.load(Relaxed);
        let planned_ms = planned.as_millis() as u64;
        let start = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tokio::pin!(fut);
        let out = loop {
            tokio::select! {
                out = &mut fut => break out,
                _ = tick.tick() => {
                    let ms = (start.elapsed().as_millis() as u64).min(planned_ms);
                    self.bar.set_position(base + ms);
                }
            }
        };
        self.done.store(base + planned_ms, Relaxed);
        self.bar.set_position(base + planned_ms);
        out
    }
}

// ---------------------------------------------------------------------------
// Reporting.

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ms"))
}

fn fmt_rate(bytes_per_sec: f64) -> String {
    if bytes_per_sec >= 1e6 {
        format!("{:.2} MB/s", bytes_per_sec / 1e6)
    } else {
        format!("{:.0} kB/s", bytes_per_sec / 1e3)
    }
}

fn table(results: &[(&Scenario, Outcome)]) -> String {
    let header = [
        "configuration",
        "echo p50",
        "echo p99",
        "echo max",
        "bulk goodput",
        "retransmits",
        "FEC recovered",
        "link drops",
    ];
    let rows: Vec<[String; 8]> = results
        .iter()
        .map(|(s, o)| {
            let mut max = fmt_ms(o.rtts.last().copied());
            if o.missing > 0 {
                let _ = write!(max, " ({} lost)", o.missing);
            }
            [
                s.name.to_owned(),
                fmt_ms(percentile(&o.rtts, 50.0)),
                fmt_ms(percentile(&o.rtts, 99.0)),
                max,
                fmt_rate(o.goodput),
                o.retransmits.to_string(),
                o.fec_recovered.to_string(),
                o.link_lost.to_string(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            let _ = if i == 0 {
                write!(out, "{c:<w$}")
            } else {
                write!(out, " | {c:>w$}")
            };
        }
        out.push('\n');
    };
    line(&mut out, &header);
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
    line(&mut out, &rule);
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    out
}

/// Round values between `lo` and `hi` for a log axis: denser when the range
/// spans less than a factor of 4.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let steps: &[f64] = if hi / lo < 4.0 {
        &[1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    } else {
        &[1.0, 2.0, 3.0, 4.0, 5.0, 7.0]
    };
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for &m in steps {
            let t = m * decade;
            if (lo..=hi).contains(&t) {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

fn write_plot(
    path: &std::path::Path,
    title: &str,
    results: &[(&Scenario, Outcome)],
) -> DynResult<()> {
    use plotters::prelude::*;

    let all = results.iter().flat_map(|(_, o)| o.rtts.iter().copied());
    let (lo, hi) = all.fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi <= 0.0 {
        return Err("no echo round trips to plot".into());
    }
    let lo = (lo * 0.9).max(0.1);
    let hi = hi * 1.1;

    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
            0f64..1f64,
        )?;
    chart
        .configure_mesh()
        .x_desc("echo round trip, ms (log scale)")
        .y_desc("fraction of messages at or below")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.2}"))
        .draw()?;
    let colors = [
        RGBColor(220, 50, 47),
        RGBColor(38, 139, 210),
        RGBColor(133, 153, 0),
        RGBColor(108, 113, 196),
    ];
    for (i, (s, o)) in results.iter().enumerate() {
        let color = colors[i % colors.len()];
        let n = o.rtts.len() as f64;
        let points = o
            .rtts
            .iter()
            .enumerate()
            .flat_map(|(k, &v)| [(v, k as f64 / n), (v, (k + 1) as f64 / n)]);
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], color.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()?;
    Ok(())
}

// ---------------------------------------------------------------------------

async fn run(args: Args) -> DynResult<()> {
    let scenarios = scenarios(&args)?;
    let link_desc = format!(
        "{:.1}% loss each way, RTT {} ms + 0..{} ms jitter each way, seed {}",
        args.loss * 100.0,
        args.rtt.as_millis(),
        args.jitter.as_millis(),
        args.seed
    );
    println!("kcpio demo: loopback through a seeded lossy UDP link");
    println!("  link:      {link_desc}");
    println!("  cipher:    {} on every configuration", args.cipher.name());
    println!(
        "  workloads: 60 Hz x {MSG}-byte echo for {:.1} s, then a bulk transfer for {:.1} s",
        args.duration.as_secs_f64(),
        (args.duration / 2).as_secs_f64()
    );
    for s in &scenarios {
        println!("  {:<17} {}", format!("{}:", s.name), s.detail);
    }
    println!();

    let per = args.duration + args.duration / 2;
    let progress = Progress::new(per * scenarios.len() as u32);
    let mut results = Vec::new();
    for s in &scenarios {
        let out = run_scenario(s, &args, &progress)
            .await
            .map_err(|e| format!("{}: {e}", s.name))?;
        results.push((s, out));
    }
    progress.bar.finish_and_clear();

    print!("{}", table(&results));
    println!();
    println!("echo:          round trip of each 64-byte message, from its scheduled send time");
    println!("               to the echo's arrival (so waiting for the window counts)");
    println!("bulk goodput:  bytes the server application read per second");
    println!("retransmits:   segments resent, both ends' stats(), both workloads; spurious");
    println!("               resends count too (jitter reorders datagrams, ACKs get lost)");
    println!("FEC recovered: data shards rebuilt from parity instead of resent");
    println!("link drops:    datagrams the link dropped, both directions, both workloads");
    println!(
        "TCP on an impaired link: lab/scripts/latency.sh (kernel packet impairer, needs root)"
    );

    if let Some(path) = &args.plot {
        let title = format!(
            "kcpio echo round trip CDF: {link_desc}, {}",
            args.cipher.name()
        );
        write_plot(path, &title, &results)?;
        println!("latency CDF written to {}", path.display());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("demo: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}
