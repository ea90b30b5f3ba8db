//! No heap allocation per packet on the hot path.
//!
//! A counting global allocator (`stats_alloc`, installed without `unsafe`)
//! wraps the system allocator for this test binary. Each case moves data
//! through a real loopback session pair on a current-thread runtime, lets it
//! warm up (buffers, rings and tokio's internals reach their steady size),
//! then counts every allocation made while 64 MiB more cross the session.
//! That is tens of thousands of datagrams each way; the assertion allows a
//! small constant (ring growth past the warm-up, tokio bookkeeping), far
//! below one allocation per hundred packets, so a single allocation per
//! packet anywhere on the path (send, seal, GSO batching, receive, open,
//! FEC, ARQ, wakers) fails it.

use std::alloc::System;
use std::sync::Mutex;
use std::time::Duration;

use kcpio::{Config, Congestion, KcpListener, KcpStream, Key, Method, Preset};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The allocator counts every thread: cases run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const WARM_UP: usize = 16 << 20;
const MEASURED: usize = 64 << 20;
const CHUNK: usize = 64 << 10;
/// Allocations tolerated over the whole measured transfer (not per packet).
const BOUND: usize = 256;

/// What the measured phase saw.
struct Outcome {
    allocations: usize,
    reallocations: usize,
    datagrams: u64,
}

fn base() -> kcpio::ConfigBuilder {
    Config::builder()
        .preset(Preset::Fast3)
        .window(1024, 1024)
        .stream(true)
        .socket_buffers(4 << 20, 4 << 20)
        .linger(Duration::from_millis(200))
}

/// Client writes `WARM_UP + MEASURED` bytes, the server reads and checks the
/// running byte pattern; allocations are counted between the end of the
/// warm-up and the end of the transfer (both ends, every layer).
fn run(config: Config) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = KcpStream::connect(addr, &config).await.unwrap();
        let total = WARM_UP + MEASURED;
        let writer = tokio::spawn(async move {
            let mut client = client;
            let mut chunk = vec![0u8; CHUNK];
            let mut off = 0usize;
            while off < total {
                let n = CHUNK.min(total - off);
                for (i, b) in chunk.iter_mut().take(n).enumerate() {
                    *b = ((off + i) % 251) as u8;
                }
                client.write_all(&chunk[..n]).await.unwrap();
                off += n;
            }
            client.flush().await.unwrap();
            client
        });
        let (mut server, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; CHUNK];
        let mut got = 0usize;
        let mut region = None;
        while got < total {
            let n = server.read(&mut buf).await.unwrap();
            assert!(n > 0, "stream ended early at {got}");
            for (i, b) in buf[..n].iter().enumerate() {
                assert_eq!(*b, ((got + i) % 251) as u8, "byte {}", got + i);
            }
            got += n;
            if region.is_none() && got >= WARM_UP {
                let dg = server.stats().datagrams_in;
                region = Some((Region::new(GLOBAL), dg));
            }
        }
        let (region, dg_start) = region.unwrap();
        let change = region.change();
        let datagrams = server.stats().datagrams_in - dg_start;
        let client = writer.await.unwrap();
        drop(client);
        Outcome {
            allocations: change.allocations,
            reallocations: change.reallocations,
            datagrams,
        }
    })
}

fn check(name: &str, config: Config) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = run(config);
    eprintln!(
        "{name}: {} allocations, {} reallocations over {} datagrams received",
        out.allocations, out.reallocations, out.datagrams
    );
    // The transfer really went through many packets...
    assert!(
        out.datagrams as usize > MEASURED / 1500,
        "{name}: only {} datagrams",
        out.datagrams
    );
    // ...and allocated a constant amount, not something per packet.
    assert!(
        out.allocations + out.reallocations <= BOUND,
        "{name}: {} allocations + {} reallocations over {} datagrams",
        out.allocations,
        out.reallocations,
        out.datagrams
    );
}

#[test]
fn plain_transfer_does_not_allocate_per_packet() {
    check("plain", base().build().unwrap());
}

#[test]
fn aes_fec_transfer_does_not_allocate_per_packet() {
    let config = base()
        .crypto(Method::Aes128, Key::passphrase("alloc test"))
        .fec(10, 3)
        .build()
        .unwrap();
    check("aes-128 + fec 10/3", config);
}

#[test]
fn unbatched_transfer_does_not_allocate_per_packet() {
    check("batching off", base().batching(false).build().unwrap());
}

/// Unreliable datagrams in steady state: ping-pong of `send_datagram` /
/// `recv_datagram` both ways (queues, framing, sealing, routing, wakers).
#[test]
fn datagrams_do_not_allocate_per_packet() {
    let config = base()
        .crypto(Method::Aes128, Key::passphrase("alloc test"))
        .fec(10, 3)
        .build()
        .unwrap();
    datagram_ping_pong("datagrams", config, false);
}

/// The same with the FEC datagram extension negotiated: data shards,
/// groups and their parity, reports, the replay window, recovery's arenas.
#[test]
fn fec_datagrams_do_not_allocate_per_packet() {
    let config = base()
        .crypto(Method::Aes128Gcm, Key::passphrase("alloc test"))
        .datagram_fec(true)
        .build()
        .unwrap();
    datagram_ping_pong("FEC datagrams", config, true);
}

fn datagram_ping_pong(name: &str, config: Config, extension: bool) {
    const WARM_UP_ROUNDS: usize = 2_000;
    const MEASURED_ROUNDS: usize = 20_000;
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (change, rounds) = rt.block_on(async move {
        let listener = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = KcpStream::connect(addr, &config).await.unwrap();
        assert_eq!(client.stats().datagram_fec.negotiated, extension);
        // Stream data opens the server's session; datagrams never do.
        client.write_all(b"x").await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        server.read_exact(&mut [0u8; 1]).await.unwrap();
        let payload = [0x5au8; 200];
        let mut buf = [0u8; 1500];
        let mut region = None;
        let mut rounds = 0;
        for i in 0..WARM_UP_ROUNDS + MEASURED_ROUNDS {
            if i == WARM_UP_ROUNDS {
                region = Some(Region::new(GLOBAL));
            }
            client.send_datagram(&payload).await.unwrap();
            let wait = Duration::from_secs(1);
            let Ok(n) = tokio::time::timeout(wait, server.recv_datagram(&mut buf)).await else {
                continue; // lost: the next round goes on
            };
            server.send_datagram(&buf[..n.unwrap()]).await.unwrap();
            if let Ok(n) = tokio::time::timeout(wait, client.recv_datagram(&mut buf)).await {
                assert_eq!(&buf[..n.unwrap()], &payload[..]);
                rounds += usize::from(i >= WARM_UP_ROUNDS);
            }
        }
        (region.unwrap().change(), rounds)
    });
    eprintln!(
        "{name}: {} allocations, {} reallocations over {rounds} round trips",
        change.allocations, change.reallocations
    );
    assert!(rounds > MEASURED_ROUNDS * 9 / 10, "{rounds} round trips");
    assert!(
        change.allocations + change.reallocations <= BOUND,
        "{} allocations + {} reallocations over {rounds} round trips",
        change.allocations,
        change.reallocations
    );
}

#[test]
fn paced_transfer_does_not_allocate_per_packet() {
    // The model-based controller: pacing deadlines between the flush ticks
    // go through the driver's deadline heap, not a timer per packet.
    let config = base().congestion(Congestion::Bbr).build().unwrap();
    check("congestion model", config);
}
