//! A UDP probe: a paced sender stamping each datagram with its sequence
//! number and `CLOCK_MONOTONIC`, and a receiver reporting loss, duplicates,
//! reordering and the one-way delay (p50 / p99 / max). Network namespaces
//! share `CLOCK_MONOTONIC`, so between two namespaces of one machine the
//! one-way delay is exact.
//!
//! ```text
//! udpprobe recv --listen 10.0.0.2:9000 --json            # prints one JSON line at the end
//! udpprobe send --to 10.0.0.2:9000 --preset bulk --secs 20 --json
//! ```
//!
//! Presets: `bulk` is 800 datagrams/s of 1200 B (7.7 Mbit/s), `game` 100/s of
//! 200 B; `--rate`/`--size` set them by hand. The receiver stops when every
//! datagram of the run arrived, after `--idle` seconds (2) without one once
//! the first arrived, or after `--secs` (a bound for when nothing arrives).
//!
//! A datagram: `b"KPRB"`, u32 run id, u64 sequence number, u64 datagrams in
//! the run, u64 send time in ns of `CLOCK_MONOTONIC` (all big endian), then
//! padding to `--size`. The receiver counts only the first run id it sees.

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;
use tokio::net::UdpSocket;
use tokio::time::Instant;

const MAGIC: &[u8; 4] = b"KPRB";
const HEADER: usize = 32;
/// The most datagrams one run may have (the receiver keeps a bit each and
/// a delay sample per datagram received).
const MAX_RUN: u64 = 10_000_000;

#[derive(Parser, Debug)]
#[command(
    name = "udpprobe",
    about = "paced UDP probe: loss, duplicates, reordering and one-way delay"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Preset {
    /// 800 datagrams/s x 1200 B
    Bulk,
    /// 100 datagrams/s x 200 B
    Game,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Send a paced run.
    Send {
        /// where to send
        #[arg(long)]
        to: SocketAddr,
        /// local address to bind
        #[arg(long, default_value = "0.0.0.0:0")]
        bind: SocketAddr,
        /// rate and size together
        #[arg(long, value_enum)]
        preset: Option<Preset>,
        /// datagrams per second [bulk 800, game 100]
        #[arg(long)]
        rate: Option<u32>,
        /// datagram payload bytes (at least 32) [bulk 1200, game 200]
        #[arg(long)]
        size: Option<usize>,
        /// seconds of sending
        #[arg(long, default_value_t = 20.0)]
        secs: f64,
        /// print one JSON line at the end instead of text
        #[arg(long)]
        json: bool,
    },
    /// Receive a run and report it.
    Recv {
        /// address to listen on
        #[arg(long)]
        listen: SocketAddr,
        /// give up after this many seconds in all
        #[arg(long, default_value_t = 120.0)]
        secs: f64,
        /// stop after this many seconds without a datagram, once one arrived
        #[arg(long, default_value_t = 2.0)]
        idle: f64,
        /// print one JSON line at the end instead of text
        #[arg(long)]
        json: bool,
    },
}

/// `CLOCK_MONOTONIC` in ns: the same clock in every network namespace.
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

#[derive(Serialize, Debug)]
struct SendReport {
    role: &'static str,
    rate: u32,
    size: usize,
    sent: u64,
    bytes: u64,
    send_errors: u64,
    secs: f64,
}

async fn send(
    to: SocketAddr,
    bind: SocketAddr,
    rate: u32,
    size: usize,
    secs: f64,
) -> io::Result<SendReport> {
    if size < HEADER || rate == 0 || secs.is_nan() || secs <= 0.0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "want --size of at least 32, a positive --rate and --secs",
        ));
    }
    let total = ((f64::from(rate) * secs) as u64).clamp(1, MAX_RUN);
    let sock = UdpSocket::bind(bind).await?;
    sock.connect(to).await?;
    let run: u32 = rand_run_id();
    let mut buf = vec![0u8; size];
    buf[..4].copy_from_slice(MAGIC);
    buf[4..8].copy_from_slice(&run.to_be_bytes());
    buf[16..24].copy_from_slice(&total.to_be_bytes());
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let start = Instant::now();
    let (mut sent, mut errors) = (0u64, 0u64);
    for seq in 0..total {
        tokio::time::sleep_until(start + period.mul_f64(seq as f64)).await;
        buf[8..16].copy_from_slice(&seq.to_be_bytes());
        buf[24..32].copy_from_slice(&monotonic_ns().to_be_bytes());
        match sock.send(&buf).await {
            Ok(_) => sent += 1,
            // An ICMP error from an earlier datagram, or a full buffer.
            Err(_) => errors += 1,
        }
    }
    Ok(SendReport {
        role: "send",
        rate,
        size,
        sent,
        bytes: sent * size as u64,
        send_errors: errors,
        secs: start.elapsed().as_secs_f64(),
    })
}

/// A run id that differs between runs: the low bits of the clock.
fn rand_run_id() -> u32 {
    (monotonic_ns() ^ u64::from(std::process::id()).rotate_left(17)) as u32
}

#[derive(Serialize, Debug, Default)]
struct RecvReport {
    role: &'static str,
    /// Datagrams of the run (from the sender's stamp).
    expected: u64,
    /// Distinct ones received.
    received: u64,
    lost: u64,
    loss: f64,
    duplicates: u64,
    /// Arrivals with a sequence number below one seen before.
    reordered: u64,
    /// Datagrams of other runs or not probe datagrams.
    foreign: u64,
    bytes: u64,
    delay_ms_p50: f64,
    delay_ms_p99: f64,
    delay_ms_max: f64,
    delay_ms_min: f64,
    secs: f64,
}

async fn recv(listen: SocketAddr, secs: f64, idle: f64) -> io::Result<RecvReport> {
    let sock = UdpSocket::bind(listen).await?;
    let deadline = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
    let idle = Duration::from_secs_f64(idle.max(0.01));
    let mut buf = vec![0u8; 65_536];
    let mut r = RecvReport {
        role: "recv",
        ..RecvReport::default()
    };
    let mut run: Option<u32> = None;
    let mut seen: Vec<u64> = Vec::new();
    let mut delays_us: Vec<u32> = Vec::new();
    let mut top: Option<u64> = None;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    loop {
        let until = match first {
            Some(_) => deadline.min(last + idle),
            None => deadline,
        };
        let got = tokio::time::timeout_at(until, sock.recv_from(&mut buf)).await;
        let Ok(got) = got else { break };
        let Ok((n, _)) = got else { continue };
        let now_ns = monotonic_ns();
        let d = &buf[..n];
        if n < HEADER || &d[..4] != MAGIC {
            r.foreign += 1;
            continue;
        }
        let field = |i: usize| u64::from_be_bytes(d[i..i + 8].try_into().unwrap_or([0; 8]));
        let id = u32::from_be_bytes(d[4..8].try_into().unwrap_or([0; 4]));
        let (seq, total, sent_ns) = (field(8), field(16), field(24));
        if total == 0 || total > MAX_RUN || seq >= total || *run.get_or_insert(id) != id {
            r.foreign += 1;
            continue;
        }
        if r.expected == 0 {
            r.expected = total;
            seen = vec![0; total.div_ceil(64) as usize];
            delays_us.reserve(total as usize);
            first = Some(Instant::now());
        }
        last = Instant::now();
        let (w, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if seen[w] & bit != 0 {
            r.duplicates += 1;
            continue;
        }
        seen[w] |= bit;
        r.received += 1;
        r.bytes += n as u64;
        if top.is_some_and(|t| seq < t) {
            r.reordered += 1;
        }
        top = Some(top.map_or(seq, |t| t.max(seq)));
        let us = now_ns.saturating_sub(sent_ns) / 1000;
        delays_us.push(u32::try_from(us).unwrap_or(u32::MAX));
        if r.received == r.expected {
            break;
        }
    }
    r.secs = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    r.lost = r.expected - r.received;
    r.loss = if r.expected > 0 {
        r.lost as f64 / r.expected as f64
    } else {
        0.0
    };
    delays_us.sort_unstable();
    let pick = |q: f64| -> f64 {
        if delays_us.is_empty() {
            return 0.0;
        }
        let i = ((delays_us.len() - 1) as f64 * q).round() as usize;
        f64::from(delays_us[i]) / 1000.0
    };
    r.delay_ms_p50 = pick(0.5);
    r.delay_ms_p99 = pick(0.99);
    r.delay_ms_max = pick(1.0);
    r.delay_ms_min = pick(0.0);
    Ok(r)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Send {
            to,
            bind,
            preset,
            rate,
            size,
            secs,
            json,
        } => {
            let (r0, s0) = match preset {
                Some(Preset::Game) => (100, 200),
                Some(Preset::Bulk) | None => (800, 1200),
            };
            send(to, bind, rate.unwrap_or(r0), size.unwrap_or(s0), secs)
                .await
                .map(|r| {
                    if json {
                        serde_json::to_string(&r).unwrap_or_default()
                    } else {
                        format!(
                            "sent {} datagrams of {} B at {}/s in {:.2} s, {} send errors",
                            r.sent, r.size, r.rate, r.secs, r.send_errors
                        )
                    }
                })
        }
        Cmd::Recv {
            listen,
            secs,
            idle,
            json,
        } => recv(listen, secs, idle).await.map(|r| {
            if json {
                serde_json::to_string(&r).unwrap_or_default()
            } else {
                format!(
                    "received {} of {} (loss {:.4}%), {} duplicates, {} reordered, \
                     one-way delay p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
                    r.received,
                    r.expected,
                    r.loss * 100.0,
                    r.duplicates,
                    r.reordered,
                    r.delay_ms_p50,
                    r.delay_ms_p99,
                    r.delay_ms_max
                )
            }
        }),
    };
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("udpprobe: {e}");
            ExitCode::FAILURE
        }
    }
}
