//! Many small sessions in one process: kcpio beside tokio_kcp 0.9.8.
//!
//! ```text
//! cargo run --release -p kcpio-lab --bin echo_inproc -- --impl kcpio|tokio_kcp
//!     [--sessions 1000] [--messages 64] [--size 64] [--threads 2] [--json]
//! ```
//!
//! One tokio runtime of `--threads` workers holds a listener on 127.0.0.1
//! that echoes every session, and `--sessions` clients (each with its own
//! socket, as `KcpStream::connect` gives) that each send `--messages`
//! messages of `--size` bytes ping-pong: write one, read its echo, check it,
//! then the next. Both ends use fast3 (nodelay, 10 ms interval, fast resend
//! 2, no congestion window) with stream mode, the library's default MTU and
//! windows otherwise. The figure is the wall time from the first connect to
//! the last echo and the process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`)
//! over the same span. One run per process, so the CPU of one implementation
//! never counts against the other: `lab/scripts/vs-kcpgo.sh --only echo-inproc`
//! interleaves them.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rustix::time::{ClockId, clock_gettime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;

/// A run that takes longer has failed.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Which library runs both ends.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum Impl {
    Kcpio,
    #[value(name = "tokio_kcp")]
    TokioKcp,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Self::Kcpio => "kcpio",
            Self::TokioKcp => "tokio_kcp",
        }
    }
}

/// Many small ping-pong sessions in one process.
#[derive(clap::Parser)]
struct Args {
    /// The library under test.
    #[arg(long = "impl", value_enum)]
    imp: Impl,
    /// Concurrent sessions.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=20000))]
    sessions: u64,
    /// Messages per session.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1000000))]
    messages: u64,
    /// Bytes per message.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1048576))]
    size: u64,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    threads: u64,
    /// One JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
}

fn process_cpu() -> Duration {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Echoes what `s` sends until it closes or fails.
async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) {
    let mut buf = vec![0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(buf.get(..n).unwrap_or_default()).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// One client's ping-pong: `messages` messages of `size` bytes, each echo
/// read whole and checked before the next is written.
async fn ping_pong<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    id: usize,
    messages: usize,
    size: usize,
) -> Result<(), String> {
    let mut msg = vec![0u8; size];
    let mut back = vec![0u8; size];
    for i in 0..messages {
        for (j, b) in msg.iter_mut().enumerate() {
            *b = (id ^ i ^ j) as u8;
        }
        s.write_all(&msg)
            .await
            .map_err(|e| format!("session {id}: write: {e}"))?;
        s.read_exact(&mut back)
            .await
            .map_err(|e| format!("session {id}: read: {e}"))?;
        if back != msg {
            return Err(format!("session {id}: echo {i} differs"));
        }
    }
    Ok(())
}

async fn run_kcpio(a: &Args) -> Result<(), String> {
    let config = kcpio::Config::builder()
        .nodelay(true, 10, 2, true)
        .build()
        .map_err(|e| format!("config: {e}"))?;
    let listener = kcpio::KcpListener::bind("127.0.0.1:0", &config)
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(echo(s));
        }
    });
    let mut clients = JoinSet::new();
    for id in 0..a.sessions as usize {
        let (config, messages, size) = (config.clone(), a.messages as usize, a.size as usize);
        clients.spawn(async move {
            let s = kcpio::KcpStream::connect(addr, &config)
                .await
                .map_err(|e| format!("session {id}: connect: {e}"))?;
            ping_pong(s, id, messages, size).await
        });
    }
    let r = join_all(clients).await;
    server.abort();
    r
}

async fn run_tokio_kcp(a: &Args) -> Result<(), String> {
    let config = tokio_kcp::KcpConfig {
        nodelay: tokio_kcp::KcpNoDelayConfig::fastest(),
        stream: true,
        ..tokio_kcp::KcpConfig::default()
    };
    let mut listener = tokio_kcp::KcpListener::bind(config, "127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let addr: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(echo(s));
        }
    });
    let mut clients = JoinSet::new();
    for id in 0..a.sessions as usize {
        let (messages, size) = (a.messages as usize, a.size as usize);
        clients.spawn(async move {
            let s = tokio_kcp::KcpStream::connect(&config, addr)
                .await
                .map_err(|e| format!("session {id}: connect: {e}"))?;
            ping_pong(s, id, messages, size).await
        });
    }
    let r = join_all(clients).await;
    server.abort();
    r
}

async fn join_all(mut clients: JoinSet<Result<(), String>>) -> Result<(), String> {
    let mut first_err = None;
    while let Some(r) = clients.join_next().await {
        let r = r.map_err(|e| format!("task: {e}")).and_then(|r| r);
        if let (Err(e), None) = (r, &first_err) {
            first_err = Some(e);
            clients.abort_all();
        }
    }
    first_err.map_or(Ok(()), Err)
}

fn main() {
    let a = <Args as clap::Parser>::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads as usize)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("echo_inproc: runtime: {e}");
            std::process::exit(1);
        }
    };
    let (cpu0, t0) = (process_cpu(), Instant::now());
    let res = rt.block_on(async {
        let run = async {
            if a.imp == Impl::Kcpio {
                run_kcpio(&a).await
            } else {
                run_tokio_kcp(&a).await
            }
        };
        tokio::time::timeout(RUN_LIMIT, run)
            .await
            .unwrap_or_else(|_| Err(format!("not done after {RUN_LIMIT:?}")))
    });
    let (secs, cpu) = (
        t0.elapsed().as_secs_f64(),
        process_cpu().saturating_sub(cpu0).as_secs_f64(),
    );
    if let Err(e) = res {
        eprintln!("echo_inproc: {}: {e}", a.imp.name());
        std::process::exit(1);
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({"impl": a.imp.name(), "sessions": a.sessions, "messages": a.messages,
                "size": a.size, "threads": a.threads, "total_s": secs, "cpu_s": cpu})
        );
    } else {
        println!(
            "{}: {} sessions x {} x {} B: {secs:.3} s, {cpu:.3} CPU-s",
            a.imp.name(),
            a.sessions,
            a.messages,
            a.size
        );
    }
    // Sessions still closing are not waited for.
    rt.shutdown_timeout(Duration::from_millis(100));
}
