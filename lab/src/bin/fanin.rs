//! Many sessions sinking into one listener, on loopback, in one process:
//! the listener with one `SO_REUSEPORT` socket against the same listener
//! with several, in the same run.
//!
//! ```text
//! cargo run --release -p kcpio-lab --bin fanin -- [runs] [MiB] [sessions] [shards,...]
//! ```
//!
//! Defaults: 5 runs, 64 MiB per session, 16 sessions, shard counts `1,2`.
//! Each run does every shard count in turn (so a noisy host weighs on all)
//! with the default `Config` plus `aes-128`: the server (its own tokio
//! runtime, 2 worker threads) accepts the sessions and reads each into a
//! 64 KiB buffer; the clients (another runtime, 2 worker threads) connect,
//! then each writes its share. Printed per run and shard count: the
//! aggregate MB/s (10^6 bytes per second, from the first write to the last
//! byte read), the segments the clients retransmitted (RTO, fast, early and
//! tail probes), and the datagrams the kernel dropped at the listener's
//! sockets (their `drops` in `/proc/net/udp`, `/proc/net/udp6`: receive
//! buffer overflows), and the segments the server received twice
//! (retransmissions of segments that had arrived); then medians, spreads
//! and each shard count's median against the first's. Also per run: the
//! data segments the clients sent that the server never received (the
//! kernel counts a dropped GRO run as one drop, however many datagrams it
//! held), and the CPU seconds per GB of the server's runtime threads and
//! of the clients' (`/proc/self/task`), which say whether the server or
//! the clients are the bottleneck. `FANIN_RCVBUF=bytes` sets the sockets'
//! receive buffer (default: kcpio's); `FANIN_WINDOW=segments` the
//! receive window (the send window stays 1,024); `FANIN_CIPHER=none` runs
//! without a cipher (default `aes-128`), so the server's per-GB cost can be
//! set against a cheap load generator's (`lab/results/shards-*.md`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kcpio::{Config, KcpListener, KcpStream, Key, Method, StatsHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

const CHUNK: usize = 64 * 1024;
/// A run that takes longer than this has failed.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// One run of one shard count.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    mbps: f64,
    retransmitted: u64,
    /// Of which after an RTO.
    rto: u64,
    /// Segments the server received twice (a retransmission of a segment
    /// that had arrived: spurious).
    repeats: u64,
    drops: u64,
    /// Drops at the clients' sockets (ACKs and window updates lost).
    client_drops: u64,
    /// Data segments the clients sent that no server session received
    /// (lost between the sockets: a GRO batch the kernel drops counts
    /// once in `drops` but may hold up to 64 of these).
    lost: u64,
    /// CPU seconds per GB moved of the server's runtime threads (drivers
    /// and readers) and of the clients' (drivers and writers).
    server_cpu: f64,
    client_cpu: f64,
}

/// The server's and the clients' runtime threads, by name.
const SERVER_THREADS: &str = "fanin-server";
const CLIENT_THREADS: &str = "fanin-client";

/// CPU seconds (user + system) the threads of this process named `name`
/// have used (`/proc/self/task/*/stat`).
fn threads_cpu(name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // Fields after the command's closing parenthesis: state is the
        // first, utime and stime the 12th and 13th.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|v| v.parse().ok())
            .collect();
        ticks += f.iter().sum::<u64>();
    }
    ticks as f64 / rustix::param::clock_ticks_per_second() as f64
}

/// The kernel's drop counts of the UDP sockets bound to local `port`
/// (`local`), or connected to it (the last column of `/proc/net/udp{,6}`).
fn socket_drops(port: u16, local: bool) -> u64 {
    let mut sum = 0;
    for file in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let at = if local { 1 } else { 2 };
            let sock_port = cols
                .get(at)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if sock_port == Some(port) {
                sum += cols.last().and_then(|d| d.parse::<u64>().ok()).unwrap_or(0);
            }
        }
    }
    sum
}

/// `FANIN_RCVBUF` (bytes): the listener sockets' receive buffer instead of
/// the default.
fn config(shards: usize) -> Result<Config, String> {
    let rcvbuf = std::env::var("FANIN_RCVBUF")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut b = Config::builder();
    if let Some(w) = std::env::var("FANIN_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        b = b.window(1024, w);
    }
    if !plain() {
        b = b.crypto(Method::Aes128, Key::passphrase("fanin"));
    }
    b.reuse_port(shards)
        .socket_buffers(rcvbuf, 0)
        .build()
        .map_err(|e| format!("config: {e}"))
}

/// `FANIN_CIPHER=none`: the sessions run without a cipher.
fn plain() -> bool {
    std::env::var("FANIN_CIPHER").as_deref() == Ok("none")
}

fn retransmitted(h: &StatsHandle) -> u64 {
    let a = h.stats().unwrap_or_default().arq;
    a.retransmit_rto + a.retransmit_fast + a.retransmit_early + a.retransmit_probe
}

fn one_run(
    server_rt: &Runtime,
    client_rt: &Runtime,
    shards: usize,
    sessions: usize,
    each: usize,
) -> Result<Outcome, String> {
    let config = config(shards)?;
    let listener = server_rt
        .block_on(KcpListener::bind("127.0.0.1:0", &config))
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("addr: {e}"))?;
    let listener = Arc::new(listener);
    let drops_before = socket_drops(addr.port(), true);
    // The server: accept every session, read each to its end.
    let server = server_rt.spawn({
        let listener = listener.clone();
        async move {
            let mut readers = Vec::new();
            for _ in 0..sessions {
                let (mut s, _) = listener
                    .accept()
                    .await
                    .map_err(|e| format!("accept: {e}"))?;
                readers.push(tokio::spawn(async move {
                    let mut buf = vec![0u8; CHUNK];
                    let mut got = 0;
                    while got < each {
                        match s.read(&mut buf).await {
                            Ok(0) => return Err(format!("eof after {got}")),
                            Ok(n) => got += n,
                            Err(e) => return Err(format!("read: {e}")),
                        }
                    }
                    let arq = s.stats().arq;
                    Ok::<_, String>((Instant::now(), arq.repeat_segments, arq.push_in))
                }));
            }
            let mut last = None;
            let (mut repeats, mut pushed) = (0, 0);
            for r in readers {
                let (t, n, p) = r.await.map_err(|e| format!("reader: {e}"))??;
                last = Some(last.map_or(t, |l: Instant| l.max(t)));
                repeats += n;
                pushed += p;
            }
            last.map(|l| (l, repeats, pushed))
                .ok_or_else(|| "no sessions".to_string())
        }
    });
    let clients = client_rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..sessions {
            v.push(
                KcpStream::connect(addr, &config)
                    .await
                    .map_err(|e| format!("connect: {e}"))?,
            );
        }
        Ok::<_, String>(v)
    })?;
    let handles: Vec<StatsHandle> = clients.iter().map(|c| c.stats_handle()).collect();
    let cpu_before = (threads_cpu(SERVER_THREADS), threads_cpu(CLIENT_THREADS));
    let start = Instant::now();
    let writers: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            client_rt.spawn(async move {
                let chunk = vec![0x5au8; CHUNK];
                let mut left = each;
                while left > 0 {
                    let n = left.min(CHUNK);
                    c.write_all(&chunk[..n]).await?;
                    left -= n;
                }
                c.flush().await?;
                Ok::<_, std::io::Error>(c)
            })
        })
        .collect();
    let (last, repeats, received) = server_rt
        .block_on(async { tokio::time::timeout(RUN_LIMIT, server).await })
        .map_err(|_| format!("no end within {RUN_LIMIT:?}"))?
        .map_err(|e| format!("server: {e}"))??;
    let secs = last.saturating_duration_since(start).as_secs_f64();
    let gb = (sessions * each) as f64 / 1e9;
    let server_cpu = (threads_cpu(SERVER_THREADS) - cpu_before.0) / gb;
    let client_cpu = (threads_cpu(CLIENT_THREADS) - cpu_before.1) / gb;
    let retransmitted = handles.iter().map(retransmitted).sum();
    let rto = handles
        .iter()
        .map(|h| h.stats().unwrap_or_default().arq.retransmit_rto)
        .sum();
    let sent: u64 = handles
        .iter()
        .map(|h| h.stats().unwrap_or_default().arq.push_out)
        .sum();
    let drops = socket_drops(addr.port(), true).saturating_sub(drops_before);
    // The clients' sockets are new: all their drops are this run's.
    let client_drops = socket_drops(addr.port(), false);
    client_rt.block_on(async {
        for w in writers {
            let _ = w.await;
        }
    });
    drop(listener);
    Ok(Outcome {
        mbps: (sessions * each) as f64 / secs / 1e6,
        retransmitted,
        rto,
        repeats,
        drops,
        client_drops,
        lost: sent.saturating_sub(received),
        server_cpu,
        client_cpu,
    })
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn runtime(name: &str) -> Result<Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let sessions: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let shard_counts: Vec<usize> = args
        .next()
        .map(|a| a.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2]);
    let (server_rt, client_rt) = match (runtime(SERVER_THREADS), runtime(CLIENT_THREADS)) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!(
        "{sessions} sessions x {mib} MiB into one listener, {}, loopback; shards {shard_counts:?}; {runs} runs",
        if plain() { "no cipher" } else { "aes-128" }
    );
    println!(
        "run  shards  aggregate MB/s  retransmitted (RTO)  received twice  listener drops  client drops  segments lost  CPU-s/GB server client"
    );
    let mut results: Vec<Vec<Outcome>> = vec![Vec::new(); shard_counts.len()];
    for run in 1..=runs {
        for (i, &shards) in shard_counts.iter().enumerate() {
            match one_run(&server_rt, &client_rt, shards, sessions, mib << 20) {
                Ok(o) => {
                    println!(
                        "{run:>3}  {shards:>6}  {:>14.1}  {:>13} ({:>5})  {:>14}  {:>14}  {:>12}  {:>13}  {:>13.3} {:>6.3}",
                        o.mbps,
                        o.retransmitted,
                        o.rto,
                        o.repeats,
                        o.drops,
                        o.client_drops,
                        o.lost,
                        o.server_cpu,
                        o.client_cpu
                    );
                    results[i].push(o);
                }
                Err(e) => {
                    eprintln!("run {run}, {shards} shards: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
    }
    let base = median(&results[0].iter().map(|o| o.mbps).collect::<Vec<_>>());
    println!(
        "shards  median MB/s  (min-max)        x first  retransmitted (median, max)  drops (median, max)  CPU-s/GB server, client (medians)"
    );
    for (i, &shards) in shard_counts.iter().enumerate() {
        let mbps: Vec<f64> = results[i].iter().map(|o| o.mbps).collect();
        let re: Vec<f64> = results[i].iter().map(|o| o.retransmitted as f64).collect();
        let dr: Vec<f64> = results[i].iter().map(|o| o.drops as f64).collect();
        let lo = mbps.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = mbps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let m = median(&mbps);
        let cpu = |f: fn(&Outcome) -> f64| median(&results[i].iter().map(f).collect::<Vec<_>>());
        println!(
            "{shards:>6}  {m:>11.1}  ({lo:.1}-{hi:.1})  {:>7.2}  {:>.0}, {:>.0}  {:>.0}, {:>.0}  {:.3}, {:.3}",
            m / base,
            median(&re),
            max(&re),
            median(&dr),
            max(&dr),
            cpu(|o| o.server_cpu),
            cpu(|o| o.client_cpu)
        );
    }
    std::process::ExitCode::SUCCESS
}
