//! The mux's own cost: the frame codec, the sans-IO session moving data
//! between two ends in memory, the snappy chunk codec, and a whole `Mux`
//! pair over `tokio::io::duplex` (one stream and 100 streams).
//!
//! The side-by-side against Go smux over kcp-go is `lab/scripts/vs-smux.sh`.

use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_main};
use kcpio::mux::frame::{Cmd, Frames, Header};
use kcpio::mux::snappy::{Decoder, Encoder, MAX_ENCODED_CHUNK};
use kcpio::mux::{Mux, MuxConfig, Role, Session, Version};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

const MIB: usize = 1 << 20;

fn frame_codec(c: &mut Criterion) {
    let mut stream = Vec::new();
    let body = vec![0x42; 8192];
    for sid in 0..128u32 {
        stream.extend_from_slice(&Header::new(2, Cmd::Psh, 8192, sid * 2 + 3).to_bytes());
        stream.extend_from_slice(&body);
    }
    let mut g = c.benchmark_group("mux_frame");
    g.throughput(Throughput::Elements(128));
    g.bench_function("parse_128_frames", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for f in Frames::new(std::hint::black_box(&stream)) {
                let f = f.unwrap();
                sum += u64::from(f.header().sid) + f.body().len() as u64;
            }
            sum
        });
    });
    g.bench_function("emit_128_headers", |b| {
        let mut out = [0u8; 8 * 128];
        b.iter(|| {
            for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
                Header::new(1, Cmd::Psh, 8192, i as u32).emit(chunk);
            }
            std::hint::black_box(&out);
        });
    });
    g.finish();
}

/// 1 MiB from a client session to a server session, all in memory.
fn session_memory(c: &mut Criterion) {
    let mut g = c.benchmark_group("mux_session");
    g.throughput(Throughput::Bytes(MIB as u64));
    for version in [Version::V1, Version::V2] {
        let cfg = MuxConfig::builder().version(version).build().unwrap();
        g.bench_function(format!("{version:?}_1MiB_in_memory"), |b| {
            let data = vec![7u8; 64 * 1024];
            let mut wire = vec![0u8; 256 * 1024];
            let mut read = vec![0u8; 64 * 1024];
            b.iter_batched(
                || {
                    let mut c = Session::new(Role::Client, &cfg, Duration::ZERO);
                    let mut s = Session::new(Role::Server, &cfg, Duration::ZERO);
                    let sid = c.open_stream().unwrap();
                    let mut setup = [0u8; 64];
                    let n = c.poll_transmit(&mut setup);
                    s.handle_input(&setup[..n]).unwrap();
                    let rsid = s.accept_stream().unwrap();
                    (c, s, sid, rsid)
                },
                |(mut c, mut s, sid, rsid)| {
                    let mut sent = 0;
                    let mut got = 0;
                    while got < MIB {
                        if sent < MIB {
                            sent += c.write(sid, &data[..data.len().min(MIB - sent)]).unwrap();
                        }
                        let n = c.poll_transmit(&mut wire);
                        s.handle_input(&wire[..n]).unwrap();
                        while let Ok(Some(k)) = s.read(rsid, &mut read) {
                            if k == 0 {
                                break;
                            }
                            got += k;
                        }
                        let n = s.poll_transmit(&mut wire);
                        c.handle_input(&wire[..n]).unwrap();
                    }
                    got
                },
                BatchSize::LargeInput,
            );
        });
    }
    g.finish();
}

fn snappy(c: &mut Criterion) {
    let mut g = c.benchmark_group("mux_snappy");
    let text: Vec<u8> = b"GET /index.html HTTP/1.1\r\nHost: example\r\n\r\n".repeat(800);
    let random: Vec<u8> = (0..32_768u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    for (name, data) in [("text_32k", &text[..32_768]), ("random_32k", &random[..])] {
        g.throughput(Throughput::Bytes(data.len() as u64));
        let mut enc = Encoder::new();
        let mut out = vec![0u8; MAX_ENCODED_CHUNK];
        g.bench_function(format!("encode_{name}"), |b| {
            b.iter(|| enc.encode(data, &mut out))
        });
        let mut e = Encoder::new();
        let (_, n) = e.encode(data, &mut out);
        let wire = out[..n].to_vec();
        g.bench_function(format!("decode_{name}"), |b| {
            b.iter(|| {
                let mut d = Decoder::new();
                d.push(&wire).unwrap();
                d.decoded().len()
            });
        });
    }
    g.finish();
}

/// `streams` streams each send `per_stream` bytes one way over a `Mux` pair
/// on a duplex pipe; one iteration is the whole transfer.
async fn duplex_transfer(client: &Arc<Mux>, server: &Arc<Mux>, streams: usize, per_stream: usize) {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let client = Arc::clone(client);
        set.spawn(async move {
            let mut s = client.open_stream().await.unwrap();
            let buf = vec![1u8; 64 * 1024];
            let mut left = per_stream;
            while left > 0 {
                let k = left.min(buf.len());
                s.write_all(&buf[..k]).await.unwrap();
                left -= k;
            }
            s.shutdown().await.unwrap();
            let mut end = [0u8; 1];
            let _ = s.read(&mut end).await;
        });
        let server = Arc::clone(server);
        set.spawn(async move {
            let mut s = server.accept_stream().await.unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let mut total = 0;
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                total += n;
            }
            assert_eq!(total, per_stream);
            s.shutdown().await.unwrap();
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

fn mux_duplex(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("mux_duplex");
    g.sample_size(20);
    for version in [Version::V1, Version::V2] {
        let cfg = MuxConfig::builder().version(version).build().unwrap();
        let (client, server) = pair(&rt, &cfg);
        for (streams, per) in [(1, 16 * MIB), (100, 160 * 1024)] {
            g.throughput(Throughput::Bytes((streams * per) as u64));
            g.bench_function(format!("{version:?}_{streams}_streams"), |b| {
                b.iter(|| rt.block_on(duplex_transfer(&client, &server, streams, per)));
            });
        }
    }
    g.finish();
}

fn pair(rt: &Runtime, cfg: &MuxConfig) -> (Arc<Mux>, Arc<Mux>) {
    rt.block_on(async {
        let (a, b) = tokio::io::duplex(256 * 1024);
        (Arc::new(Mux::client(a, cfg)), Arc::new(Mux::server(b, cfg)))
    })
}

// `criterion_group!` expands to an undocumented `pub fn`; a private module
// keeps it out of the missing-docs lint.
mod group {
    criterion::criterion_group!(
        benches,
        super::frame_codec,
        super::session_memory,
        super::snappy,
        super::mux_duplex
    );
}
criterion_main!(group::benches);
