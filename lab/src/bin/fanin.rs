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
//! and each shard count's median against the first's. `FANIN_RCVBUF=bytes`
//! sets the sockets' receive buffer (default: kcpio's).

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
    Config::builder()
        .crypto(Method::Aes128, Key::passphrase("fanin"))
        .reuse_port(shards)
        .socket_buffers(rcvbuf, 0)
        .build()
        .map_err(|e| format!("config: {e}"))
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
                    let repeats = s.stats().arq.repeat_segments;
                    Ok::<_, String>((Instant::now(), repeats))
                }));
            }
            let mut last = None;
            let mut repeats = 0;
            for r in readers {
                let (t, n) = r.await.map_err(|e| format!("reader: {e}"))??;
                last = Some(last.map_or(t, |l: Instant| l.max(t)));
                repeats += n;
            }
            last.map(|l| (l, repeats))
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
    let (last, repeats) = server_rt
        .block_on(async { tokio::time::timeout(RUN_LIMIT, server).await })
        .map_err(|_| format!("no end within {RUN_LIMIT:?}"))?
        .map_err(|e| format!("server: {e}"))??;
    let secs = last.saturating_duration_since(start).as_secs_f64();
    let retransmitted = handles.iter().map(retransmitted).sum();
    let rto = handles
        .iter()
        .map(|h| h.stats().unwrap_or_default().arq.retransmit_rto)
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

fn runtime() -> Result<Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
    let (server_rt, client_rt) = match (runtime(), runtime()) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!(
        "{sessions} sessions x {mib} MiB into one listener, aes-128, loopback; shards {shard_counts:?}; {runs} runs"
    );
    println!(
        "run  shards  aggregate MB/s  retransmitted (RTO)  received twice  listener drops  client drops"
    );
    let mut results: Vec<Vec<Outcome>> = vec![Vec::new(); shard_counts.len()];
    for run in 1..=runs {
        for (i, &shards) in shard_counts.iter().enumerate() {
            match one_run(&server_rt, &client_rt, shards, sessions, mib << 20) {
                Ok(o) => {
                    println!(
                        "{run:>3}  {shards:>6}  {:>14.1}  {:>13} ({:>5})  {:>14}  {:>14}  {:>12}",
                        o.mbps, o.retransmitted, o.rto, o.repeats, o.drops, o.client_drops
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
        "shards  median MB/s  (min-max)        x first  retransmitted (median, max)  drops (median, max)"
    );
    for (i, &shards) in shard_counts.iter().enumerate() {
        let mbps: Vec<f64> = results[i].iter().map(|o| o.mbps).collect();
        let re: Vec<f64> = results[i].iter().map(|o| o.retransmitted as f64).collect();
        let dr: Vec<f64> = results[i].iter().map(|o| o.drops as f64).collect();
        let lo = mbps.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = mbps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let m = median(&mbps);
        println!(
            "{shards:>6}  {m:>11.1}  ({lo:.1}-{hi:.1})  {:>7.2}  {:>.0}, {:>.0}  {:>.0}, {:>.0}",
            m / base,
            median(&re),
            max(&re),
            median(&dr),
            max(&dr)
        );
    }
    std::process::ExitCode::SUCCESS
}
