//! Bulk throughput of the default configuration beside TCP, on loopback, in
//! one process: what a tokio user sees who swaps `TcpStream` for
//! `KcpStream` with `Config::builder().build()`.
//!
//! ```text
//! cargo run --release -p kcpio-lab --bin bulk -- [runs] [MiB]
//! ```
//!
//! Each run sends `MiB` (default 64) one way over a fresh KCP session and
//! then over a fresh TCP connection, both on 127.0.0.1, the receiver reading
//! into a 64 KiB buffer and counting; `runs` (default 10) runs interleave
//! the two so a noisy host weighs on both. Prints each run's MB/s (10^6
//! bytes per second, from the first write to the last byte read), then the
//! medians, the spread (min–max) and kcpio/TCP per run and of the medians.

use std::time::{Duration, Instant};

use kcpio::{Config, KcpListener, KcpStream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Write size: what `tokio::io::copy` uses.
const CHUNK: usize = 64 * 1024;
/// A run that takes longer than this has failed.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Writes `total` bytes into `w` while reading them from the reader `r`
/// resolves to; MB/s from the first write to the last byte read.
async fn pump<W, R, F>(mut w: W, r: F, total: usize) -> Result<f64, String>
where
    W: AsyncWrite + Unpin + Send + 'static,
    R: AsyncRead + Unpin,
    F: Future<Output = Result<R, String>>,
{
    let start = Instant::now();
    let writer = tokio::spawn(async move {
        let chunk = vec![0x5au8; CHUNK];
        let mut left = total;
        while left > 0 {
            let n = left.min(CHUNK);
            w.write_all(&chunk[..n]).await?;
            left -= n;
        }
        w.flush().await?;
        Ok::<W, std::io::Error>(w)
    });
    let mut r = r.await?;
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0usize;
    while got < total {
        let n = r.read(&mut buf).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!("eof after {got} bytes"));
        }
        got += n;
    }
    let secs = start.elapsed().as_secs_f64();
    // The writer's half stays open until the reader has everything.
    let _w = writer
        .await
        .map_err(|e| format!("writer: {e}"))?
        .map_err(|e| format!("write: {e}"))?;
    Ok(total as f64 / secs / 1e6)
}

async fn kcp_run(config: &Config, total: usize) -> Result<f64, String> {
    let listener = KcpListener::bind("127.0.0.1:0", config)
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("addr: {e}"))?;
    let client = KcpStream::connect(addr, config)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    // The server learns of the session from the first data.
    let accept = async move {
        listener
            .accept()
            .await
            .map(|(s, _)| s)
            .map_err(|e| format!("accept: {e}"))
    };
    let stats = std::env::var_os("BULK_STATS").is_some();
    let sender = stats.then(|| client.stats_handle());
    let r = pump(client, accept, total).await;
    if let Some(h) = sender {
        eprintln!("sender: {:?}", h.stats());
    }
    r
}

async fn tcp_run(total: usize) -> Result<f64, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("addr: {e}"))?;
    let client = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let accept = async move {
        listener
            .accept()
            .await
            .map(|(s, _)| s)
            .map_err(|e| format!("accept: {e}"))
    };
    pump(client, accept, total).await
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

fn spread(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let total = mib << 20;
    let config = match Config::builder().build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("config: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let (mut kcp, mut tcp) = (Vec::new(), Vec::new());
    println!("{mib} MiB one way on loopback, default Config vs TcpStream, {runs} runs");
    println!("run   kcpio MB/s   TCP MB/s   kcpio/TCP");
    for run in 1..=runs {
        let k = tokio::time::timeout(RUN_LIMIT, kcp_run(&config, total)).await;
        let t = tokio::time::timeout(RUN_LIMIT, tcp_run(total)).await;
        let (k, t) = match (k, t) {
            (Ok(Ok(k)), Ok(Ok(t))) => (k, t),
            (k, t) => {
                eprintln!("run {run} failed: kcpio {k:?}, tcp {t:?}");
                return std::process::ExitCode::FAILURE;
            }
        };
        println!("{run:>3}   {k:>10.1}   {t:>8.1}   {:>9.3}", k / t);
        kcp.push(k);
        tcp.push(t);
    }
    let ratios: Vec<f64> = kcp.iter().zip(&tcp).map(|(k, t)| k / t).collect();
    let (kl, kh) = spread(&kcp);
    let (tl, th) = spread(&tcp);
    let (rl, rh) = spread(&ratios);
    println!(
        "median kcpio {:.1} MB/s ({kl:.1}-{kh:.1}), TCP {:.1} MB/s ({tl:.1}-{th:.1})",
        median(&kcp),
        median(&tcp)
    );
    println!(
        "kcpio/TCP: median of medians {:.3}, per run median {:.3}, min {rl:.3}, max {rh:.3}",
        median(&kcp) / median(&tcp),
        median(&ratios)
    );
    std::process::ExitCode::SUCCESS
}
