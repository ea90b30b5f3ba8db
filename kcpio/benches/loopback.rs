//! Whole-stack throughput over loopback, shaped like kcp-go's own session
//! benchmarks (`sess_test.go`) so the figures compare side by side:
//!
//! - `EchoSpeed{4K,64K,512K,1M}`: salsa20 + FEC 10/3, stream mode, windows
//!   1024, `nodelay(1, 10, 2, 1)`, mtu 1400, rate limit 200 MiB/s; the client
//!   writes N messages of the size while reading the echo back; one
//!   iteration is one message echoed (kcp-go's `speedclient`/`echo_tester`);
//! - `SinkSpeed{4K,64K,256K,1M}`: no crypto, no FEC, same ARQ settings; the
//!   client writes N messages, the server reads and discards (kcp-go's
//!   `sinkclient`; its `SinkSpeed256K` actually writes 512 KiB messages, and
//!   so does ours). Our iteration ends when the server has *received*
//!   everything, kcp-go's when its writes returned (queued), so ours is the
//!   stricter figure.
//!
//! - `SinkGcmMigration{On,Off}1M`: the sink with `aes-128-gcm`, session
//!   migration on (its default with that cipher) and off: the cost of the
//!   migration rules on the listener's per-datagram receive path. Compare
//!   them interleaved (`--bench loopback SinkGcmMigrationOn`, then `Off`,
//!   repeated).
//!
//! Throughput is reported in bytes per message. Run kcp-go's side with
//! `go test -run xxx -bench 'EchoSpeed|SinkSpeed'` in a copy of its module.
//!
//! One session pair per benchmark, reused across iterations, on a two-worker
//! tokio runtime.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_main};
use kcpio::{Config, KcpListener, KcpStream, Key, Method};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use tokio::sync::Notify;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// kcp-go's `dialEcho`/`handleEcho` settings.
fn echo_config() -> Config {
    Config::builder()
        .crypto(Method::Salsa20, Key::raw([7u8; 32]))
        .fec(10, 3)
        .stream(true)
        .window(1024, 1024)
        .nodelay(true, 10, 2, true)
        .mtu(1400)
        .rate_limit(200 * 1024 * 1024)
        .socket_buffers(16 << 20, 16 << 20)
        .build()
        .expect("echo config")
}

/// kcp-go's `dialSink`/`handleSink` settings.
fn sink_config() -> Config {
    sink_builder().build().expect("sink config")
}

/// The sink's settings with `aes-128-gcm`, migration `on` or off.
fn sink_gcm_config(on: bool) -> Config {
    sink_builder()
        .crypto(Method::Aes128Gcm, Key::raw([7u8; 32]))
        .migration(on)
        .build()
        .expect("sink gcm config")
}

fn sink_builder() -> kcpio::ConfigBuilder {
    Config::builder()
        .stream(true)
        .window(1024, 1024)
        .nodelay(true, 10, 2, true)
        .mtu(1400)
        .socket_buffers(16 << 20, 16 << 20)
}

type Halves = (kcpio::OwnedReadHalf, kcpio::OwnedWriteHalf);

/// An echo server and a connected client.
fn echo_pair(rt: &Runtime) -> Halves {
    rt.block_on(async {
        let config = echo_config();
        let listener = KcpListener::bind("127.0.0.1:0", &config)
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.into_split();
                    let mut buf = vec![0u8; 512 * 1024];
                    loop {
                        match r.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if w.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        let client = KcpStream::connect(addr, &config).await.expect("connect");
        client.into_split()
    })
}

fn bench_echo(c: &mut Criterion, name: &str, size: usize) {
    let rt = runtime();
    let halves = RefCell::new(Some(echo_pair(&rt)));
    let mut group = c.benchmark_group("loopback");
    group.throughput(Throughput::Bytes(size as u64));
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let (mut r, mut w) = halves.borrow_mut().take().expect("session pair");
            let total = size * iters as usize;
            let start = Instant::now();
            let (r, w) = rt.block_on(async move {
                let writer = tokio::spawn(async move {
                    let msg = vec![0u8; size];
                    for _ in 0..iters {
                        w.write_all(&msg).await.expect("write");
                    }
                    w
                });
                let mut buf = vec![0u8; size];
                let mut got = 0;
                while got < total {
                    let n = r.read(&mut buf).await.expect("read");
                    assert!(n > 0, "echo ended early");
                    got += n;
                }
                (r, writer.await.expect("writer"))
            });
            let elapsed = start.elapsed();
            *halves.borrow_mut() = Some((r, w));
            elapsed
        });
    });
    group.finish();
}

/// A sink server counting what it received, and a connected client.
fn sink_pair(rt: &Runtime, config: Config) -> (Halves, Arc<(AtomicU64, Notify)>) {
    rt.block_on(async {
        let listener = KcpListener::bind("127.0.0.1:0", &config)
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new((AtomicU64::new(0), Notify::new()));
        let counter = received.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 << 20];
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                counter.0.fetch_add(n as u64, Ordering::Release);
                                counter.1.notify_one();
                            }
                        }
                    }
                });
            }
        });
        let client = KcpStream::connect(addr, &config).await.expect("connect");
        (client.into_split(), received)
    })
}

fn bench_sink(c: &mut Criterion, name: &str, size: usize, config: fn() -> Config) {
    let rt = runtime();
    let ((_read_half, w), received) = sink_pair(&rt, config());
    let writer = RefCell::new(Some(w));
    let mut group = c.benchmark_group("loopback");
    group.throughput(Throughput::Bytes(size as u64));
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut w = writer.borrow_mut().take().expect("writer");
            let target = received.0.load(Ordering::Acquire) + size as u64 * iters;
            let received = received.clone();
            let start = Instant::now();
            let w = rt.block_on(async move {
                let msg = vec![0u8; size];
                for _ in 0..iters {
                    w.write_all(&msg).await.expect("write");
                }
                while received.0.load(Ordering::Acquire) < target {
                    let notified = received.1.notified();
                    if received.0.load(Ordering::Acquire) >= target {
                        break;
                    }
                    let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
                }
                w
            });
            let elapsed = start.elapsed();
            *writer.borrow_mut() = Some(w);
            elapsed
        });
    });
    group.finish();
}

fn echo(c: &mut Criterion) {
    bench_echo(c, "EchoSpeed4K", 4096);
    bench_echo(c, "EchoSpeed64K", 65536);
    bench_echo(c, "EchoSpeed512K", 524_288);
    bench_echo(c, "EchoSpeed1M", 1_048_576);
}

fn sink(c: &mut Criterion) {
    bench_sink(c, "SinkSpeed4K", 4096, sink_config);
    bench_sink(c, "SinkSpeed64K", 65536, sink_config);
    bench_sink(c, "SinkSpeed256K", 524_288, sink_config);
    bench_sink(c, "SinkSpeed1M", 1_048_576, sink_config);
    bench_sink(c, "SinkGcmMigrationOn1M", 1_048_576, || {
        sink_gcm_config(true)
    });
    bench_sink(c, "SinkGcmMigrationOff1M", 1_048_576, || {
        sink_gcm_config(false)
    });
}

fn settings() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

// `criterion_group!` expands to an undocumented `pub fn`; a private module
// keeps it out of `missing_docs`.
mod entry {
    criterion::criterion_group! {
        name = benches;
        config = super::settings();
        targets = super::echo, super::sink
    }
}
criterion_main!(entry::benches);
