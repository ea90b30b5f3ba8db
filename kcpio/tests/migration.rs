//! Sessions that follow their peer to a new address (NAT rebinding, a new
//! IP) on real loopback sockets, through the testkit relay whose upstream
//! socket changes mid-transfer; and the hostile side: captured datagrams
//! replayed from a third address move nothing, and a copy of the client's
//! fresh datagrams sent from a third address gets at most 3 times its bytes
//! back and moves nothing either. A client that only reads recovers from a
//! rebinding through its quiet probe alone.
//!
//! kcp-go v5.6.72 as the client (`testkit/interop/kcpgo-peer`, which has
//! `aes-128-gcm`) migrates too: it answers the listener's window probe with
//! a WINS and needs nothing new. Without Go that test prints `SKIPPED` and
//! passes (`KCPIO_REQUIRE_GO=1` makes it fail).
//!
//! A client whose local address is deleted mid-transfer (root: a network
//! namespace of the test's own, its loopback carrying two addresses)
//! rebinds and keeps its session; without root it prints `SKIPPED`.
//!
//! Every wait is bounded by `tokio::time::timeout`; the stall figures are
//! printed (`--nocapture`) and only loosely bounded (a shared machine).

use kcpio_testkit as support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kcpio::{Config, KcpListener, KcpStream, Key, Method, Preset};
use support::gopeer;
use support::pattern::{Verifier, fill};
use support::relay::{Relay, RelayConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::time::timeout;

const TOTAL: u64 = 6 << 20;

fn config() -> Config {
    builder().build().unwrap()
}

/// [`config`]'s settings, to build on.
fn builder() -> kcpio::ConfigBuilder {
    Config::builder()
        .stream(true)
        .crypto(Method::Aes128Gcm, Key::passphrase("migration tests"))
}

/// The client uploads `TOTAL` pattern bytes; the server echoes them; the
/// client checks every byte back, in order, once. `change` runs when a
/// third and again when two thirds have come back. Returns the longest gap
/// between two reads at the client.
async fn echo_through(relay: &Relay, config: &Config, change: impl Fn(u32)) -> Duration {
    echo_changing(relay, config, 2, change).await
}

/// [`echo_through`] with `changes` calls of `change`, evenly spread.
async fn echo_changing(
    relay: &Relay,
    config: &Config,
    changes: u64,
    change: impl Fn(u32),
) -> Duration {
    let c = KcpStream::connect(relay.local_addr(), config)
        .await
        .unwrap();
    let (mut r, mut w) = c.into_split();
    let writer = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut off = 0u64;
        while off < TOTAL {
            let n = (TOTAL - off).min(buf.len() as u64) as usize;
            fill(&mut buf[..n], off);
            w.write_all(&buf[..n]).await.unwrap();
            off += n as u64;
        }
        w
    });
    let mut v = Verifier::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut last = Instant::now();
    let mut stall = Duration::ZERO;
    let mut step = 0;
    while v.offset < TOTAL {
        let n = timeout(Duration::from_secs(20), r.read(&mut buf))
            .await
            .expect("the echo goes on")
            .unwrap();
        assert!(n > 0, "eof at {}", v.offset);
        stall = stall.max(last.elapsed());
        last = Instant::now();
        assert!(v.push(&buf[..n]), "a wrong byte at {:?}", v.mismatch);
        if step < changes && v.offset >= TOTAL / (changes + 1) * (step + 1) {
            step += 1;
            change(step as u32);
        }
    }
    assert_eq!(v.offset, TOTAL, "every byte once");
    let w = writer.await.unwrap();
    drop((r, w));
    stall
}

/// Echoes every accepted session.
fn serve_echo(l: Arc<KcpListener>) {
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_follows_nat_rebinding_and_a_new_ip_mid_transfer() {
    let config = config();
    let l = Arc::new(KcpListener::bind("127.0.0.1:0", &config).await.unwrap());
    serve_echo(l.clone());
    let relay = Relay::start(l.local_addr().unwrap(), RelayConfig::default())
        .await
        .unwrap();
    let new_ip: IpAddr = "127.0.0.2".parse().unwrap();
    let stall = echo_through(&relay, &config, |step| match step {
        1 => relay.rebind(None),
        _ => relay.rebind(Some(new_ip)),
    })
    .await;
    let s = l.stats();
    eprintln!(
        "figure: longest stall {stall:?}; migrations {}, path probes {}, stale {}",
        s.migrations, s.path_probes, s.migration_stale
    );
    assert_eq!(s.migrations, 2, "{s:?}");
    assert_eq!(s.sessions_opened, 1, "the same session");
    let src = relay.upstream_sources();
    assert_eq!(src.first().map(SocketAddr::ip), Some(new_ip));
    assert!(stall < Duration::from_secs(3), "{stall:?}");
}

/// A listener of 4 `SO_REUSEPORT` shards: the kernel steers each of the
/// client's 8 new ports to a shard by its hash, so some land on a shard
/// that does not hold the session (every move to the session's own shard:
/// one chance in 4^k for k moves; 5 to 8 moves complete here). That shard forwards the new address's datagrams to the session's
/// shard, which validates the move as usual and then hands the session
/// over; every byte still arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_follows_its_peer_across_reuse_port_shards() {
    let config = builder().reuse_port(4).build().unwrap();
    let l = Arc::new(KcpListener::bind("127.0.0.1:0", &config).await.unwrap());
    assert_eq!(l.stats().sockets, 4);
    serve_echo(l.clone());
    let relay = Relay::start(l.local_addr().unwrap(), RelayConfig::default())
        .await
        .unwrap();
    let stall = echo_changing(&relay, &config, 8, |_| relay.rebind(None)).await;
    let s = l.stats();
    let per = shard_figures(&l.stats_per_socket());
    eprintln!(
        "figure: longest stall {stall:?}; migrations {}, forwarded {}, handed off {}, forwarded on {}, dropped {}, stale {}; per shard {SHARD_FIGURES} {per:?}",
        s.migrations,
        s.forwarded,
        s.handed_off,
        s.reforwarded,
        s.forwarded_dropped,
        s.migration_stale
    );
    assert_eq!(s.sessions_opened, 1, "the same session: {s:?}");
    // A change that comes before the last one's move completed replaces
    // its candidate: at most one move per change.
    assert!((1..=8).contains(&s.migrations), "{s:?}");
    assert!(
        s.handed_off >= 1,
        "some new port reached another shard: {per:?}"
    );
    assert!(s.forwarded >= 2 * s.handed_off, "{per:?}");
    assert!(stall < Duration::from_secs(5), "{stall:?}");
}

/// A UDP socket on `ip` whose datagrams the kernel steers to socket
/// `want` of `l`, a listener of several `SO_REUSEPORT` sockets with no
/// traffic yet: each try sends one junk datagram (refused as undecryptable)
/// and sees which socket counted it. Tries that reach another socket stay
/// bound while it searches, so the kernel does not hand their ports out
/// again.
async fn socket_to_shard(l: &KcpListener, ip: IpAddr, want: usize) -> std::net::UdpSocket {
    let server = l.local_addr().unwrap();
    let counts = || -> Vec<u64> {
        l.stats_per_socket()
            .iter()
            .map(|s| s.datagrams_in)
            .collect()
    };
    let mut others = Vec::new();
    for _ in 0..64 {
        let s = std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
        let before = counts();
        s.send_to(b"which socket?", server).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let reached = loop {
            let now = counts();
            if let Some(i) = (0..now.len()).find(|&i| now[i] > before[i]) {
                break i;
            }
            assert!(
                Instant::now() < deadline,
                "the junk datagram reached no socket"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        if reached == want {
            return s;
        }
        others.push(s);
    }
    panic!("64 sockets on {ip}, none reaching socket {want}");
}

/// Move, hand off, move again, with every address pinned to a socket of a
/// listener of 2 `SO_REUSEPORT` sockets (shards) and `client` (kcpio or
/// kcp-go) uploading through the relay: the session opens on shard `a`;
/// the client's new port reaches shard `b`, which forwards its datagrams to
/// `a`, which validates the move and hands the session to `b`; then the
/// client's new IP (127.0.0.2) reaches `a` again (`back_to_first`: `a`
/// no longer holds the session, and forwards to `b`) or `b` (the shard
/// that adopted it). Returns the listener's and per-shard stats after the
/// client verified every byte of the echo, and `a`.
async fn move_hand_off_move_again<F, Fut>(
    config: &Config,
    back_to_first: bool,
    client: F,
) -> Option<(kcpio::ListenerStats, Vec<kcpio::ListenerStats>, usize)>
where
    F: FnOnce(Arc<Relay>, Box<dyn Fn(u32) + Send + Sync>) -> Fut,
    Fut: Future<Output = bool>,
{
    let l = Arc::new(KcpListener::bind("127.0.0.1:0", config).await.unwrap());
    assert_eq!(l.stats().sockets, 2);
    let (ip1, ip2): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
    // [ip][shard], found before any session exists (the counts are quiet).
    let mut pinned = Vec::new();
    for ip in [ip1, ip2] {
        let mut row = Vec::new();
        for shard in 0..2 {
            row.push(Some(socket_to_shard(&l, ip, shard).await));
        }
        pinned.push(row);
    }
    let pinned = std::sync::Mutex::new(pinned);
    serve_echo(l.clone());
    let relay = Arc::new(
        Relay::start(l.local_addr().unwrap(), RelayConfig::default())
            .await
            .unwrap(),
    );
    let first = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let change = {
        let (l, relay, first) = (l.clone(), relay.clone(), first.clone());
        move |step: u32| {
            let per = l.stats_per_socket();
            let a = match first.load(Ordering::Relaxed) {
                usize::MAX => {
                    let a = per.iter().position(|s| s.sessions_opened == 1).unwrap();
                    first.store(a, Ordering::Relaxed);
                    a
                }
                a => a,
            };
            let (ip, shard) = match step {
                1 => (0, 1 - a),
                _ if back_to_first => (1, a),
                _ => (1, 1 - a),
            };
            let socket = pinned.lock().unwrap()[ip][shard].take().unwrap();
            relay.rebind_to(socket).unwrap();
        }
    };
    let passed = client(relay.clone(), Box::new(change)).await;
    let (s, per) = (l.stats(), l.stats_per_socket());
    if !passed {
        eprintln!(
            "listener {s:?}; per socket {per:?}; relay {:?}, sources {:?}",
            relay.stats(),
            relay.upstream_sources()
        );
        return None;
    }
    Some((s, per, first.load(Ordering::Relaxed)))
}

/// What [`shard_figures`] lists for each shard, in order.
const SHARD_FIGURES: &str =
    "(opened, migrations, probes, forwarded, handed off, forwarded on, dropped, stale)";

/// Each shard's migration figures, as [`SHARD_FIGURES`] names them.
fn shard_figures(per: &[kcpio::ListenerStats]) -> Vec<[u64; 8]> {
    per.iter()
        .map(|s| {
            [
                s.sessions_opened,
                s.migrations,
                s.path_probes,
                s.forwarded,
                s.handed_off,
                s.reforwarded,
                s.forwarded_dropped,
                s.migration_stale,
            ]
        })
        .collect()
}

/// What [`move_hand_off_move_again`] must show: exactly two moves of the
/// one session, the first forwarded by the new port's shard and handed to
/// it, the second forwarded back and handed back when it reached the first
/// shard again; and the datagrams still queued for a shard when it hands
/// the session off (forwarded while it validated the move, up to 256) are
/// forwarded on to the session's new shard, none dropped.
fn check_two_moves_across_shards(
    got: Option<(kcpio::ListenerStats, Vec<kcpio::ListenerStats>, usize)>,
    back_to_first: bool,
) {
    let (s, per, a) = got.expect("the client verified every byte");
    let b = 1 - a;
    let brief = shard_figures(&per);
    eprintln!(
        "figure: back to the first shard {back_to_first}: per shard {SHARD_FIGURES} {brief:?}, first {a}"
    );
    assert_eq!(s.sessions_opened, 1, "the same session: {s:?}");
    assert_eq!(s.migrations, 2, "{brief:?}");
    assert!(
        per[b].forwarded > 0,
        "the new port's shard forwarded: {brief:?}"
    );
    assert_eq!(per[a].handed_off, 1, "{brief:?}");
    if back_to_first {
        assert!(
            per[a].forwarded > 0,
            "the first shard forwarded back: {brief:?}"
        );
        assert_eq!(per[b].handed_off, 1, "handed back: {brief:?}");
    } else {
        assert_eq!(per[b].handed_off, 0, "it stayed: {brief:?}");
    }
    // Dropped (as stale), they were 0 to 255 per hand-off (retransmitted).
    assert_eq!(
        s.forwarded_dropped, 0,
        "datagrams queued at a hand-off are forwarded on: {brief:?}"
    );
}

/// A kcpio client: [`move_hand_off_move_again`] in both shard orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moves_again_after_a_hand_off_between_shards() {
    let config = builder().reuse_port(2).build().unwrap();
    for back_to_first in [true, false] {
        let c = config.clone();
        let got = move_hand_off_move_again(&config, back_to_first, |relay, change| async move {
            echo_changing(&relay, &c, 2, change).await;
            true
        })
        .await;
        check_two_moves_across_shards(got, back_to_first);
    }
}

/// The same with kcp-go as the client (its answer cannot be bound to the
/// probe: it counts once the old address fell silent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcpgo_session_moves_again_after_a_hand_off_between_shards() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    const BYTES: u64 = 8 << 20;
    let config = kcpgo_listener_config().reuse_port(2).build().unwrap();
    for back_to_first in [true, false] {
        let bin = bin.clone();
        let got = move_hand_off_move_again(&config, back_to_first, |relay, change| async move {
            let run = kcpgo_upload(&bin, &relay, (0, 0), BYTES, change).await;
            if !run.passed() {
                eprintln!("{run:?}");
            }
            run.passed() && run.number("bytes_verified") == Some(BYTES as f64)
        })
        .await;
        check_two_moves_across_shards(got, back_to_first);
    }
}

/// A client that only reads: the server streams `TOTAL` bytes to it, and
/// at a third the relay's upstream socket changes while the link is cut
/// (the client's last ACKs are lost, then everything the server sends goes
/// to the old, closed address). The client has nothing to send, so only
/// its quiet probe (400 ms after data stopped) tells the listener where it
/// went: every byte arrives in order, the longest gap under 1 s plus the
/// session's round trip. With the quiet probe off it stalls past the 10 s
/// read timeout, no probe and no move (checked by hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_only_client_recovers_without_writing() {
    let config = config();
    let l = Arc::new(KcpListener::bind("127.0.0.1:0", &config).await.unwrap());
    let server = {
        let l = l.clone();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut buf = vec![0u8; 16 * 1024];
            let mut off = 0u64;
            while off < TOTAL {
                let n = (TOTAL - off).min(buf.len() as u64) as usize;
                fill(&mut buf[..n], off);
                w.write_all(&buf[..n]).await.unwrap();
                off += n as u64;
            }
            // The caller holds the session until the client has read all.
            (r, w)
        })
    };
    let relay = Arc::new(
        Relay::start(l.local_addr().unwrap(), RelayConfig::default())
            .await
            .unwrap(),
    );
    let c = KcpStream::connect(relay.local_addr(), &config)
        .await
        .unwrap();
    let (mut r, w) = c.into_split();
    let mut v = Verifier::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut last = Instant::now();
    let mut stall = Duration::ZERO;
    let mut moved = false;
    while v.offset < TOTAL {
        let n = timeout(Duration::from_secs(10), r.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("the download stalls at {}: {:?}", v.offset, l.stats()))
            .unwrap();
        assert!(n > 0, "eof at {}", v.offset);
        stall = stall.max(last.elapsed());
        last = Instant::now();
        assert!(v.push(&buf[..n]), "a wrong byte at {:?}", v.mismatch);
        if !moved && v.offset >= TOTAL / 3 {
            moved = true;
            // The reader goes on meanwhile: what it drains reopens its
            // window, and that window update must be lost too.
            let relay = relay.clone();
            tokio::spawn(async move {
                relay.set_blackhole(true);
                tokio::time::sleep(Duration::from_millis(100)).await;
                relay.rebind(None);
                tokio::time::sleep(Duration::from_millis(50)).await;
                relay.set_blackhole(false);
            });
        }
    }
    let s = l.stats();
    eprintln!(
        "figure: download-only longest stall {stall:?}; migrations {}, path probes {}; relay {:?}",
        s.migrations,
        s.path_probes,
        relay.stats()
    );
    assert_eq!(v.offset, TOTAL, "every byte once");
    assert_eq!(s.migrations, 1, "{s:?}");
    assert_eq!(s.sessions_opened, 1, "the same session");
    let held = timeout(Duration::from_secs(10), server)
        .await
        .expect("the server wrote all")
        .unwrap();
    // The target: 1 s plus a round trip (the server's smoothed RTT: a
    // loopback one, stretched when the machine is loaded); the cut itself
    // is 150 ms of it.
    let rtt = held.1.stats().srtt;
    assert!(
        stall < Duration::from_secs(1) + rtt,
        "{stall:?} (rtt {rtt:?})"
    );
    drop((r, w, held));
}

/// Without migration (another cipher), a rebinding strands the session
/// as before: the listener refuses the new address's datagrams.
#[tokio::test]
async fn without_migration_a_rebinding_is_refused() {
    let config = Config::builder()
        .stream(true)
        .crypto(Method::Aes128, Key::passphrase("migration tests"))
        .build()
        .unwrap();
    assert!(
        Config::builder()
            .crypto(Method::Aes128, Key::passphrase("x"))
            .migration(true)
            .build()
            .is_err(),
        "migration needs an AEAD"
    );
    let l = Arc::new(KcpListener::bind("127.0.0.1:0", &config).await.unwrap());
    serve_echo(l.clone());
    let relay = Relay::start(l.local_addr().unwrap(), RelayConfig::default())
        .await
        .unwrap();
    let mut c = KcpStream::connect(relay.local_addr(), &config)
        .await
        .unwrap();
    c.write_all(b"ping").await.unwrap();
    let mut b = [0u8; 4];
    timeout(Duration::from_secs(5), c.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    relay.rebind(None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.write_all(b"pong").await.unwrap();
    assert!(
        timeout(Duration::from_secs(2), c.read_exact(&mut b))
            .await
            .is_err()
    );
    assert_eq!(l.stats().migrations, 0);
    assert!(l.stats().not_opener > 0);
}

/// A tap between client and server: forwards both ways, keeps a copy of
/// every client datagram, and (once `mirror` is set) first sends each one to the
/// server from a third socket too, as an on-path attacker pointing the
/// session elsewhere would. Counts the third socket's bytes each way.
struct Tap {
    addr: SocketAddr,
    third: SocketAddr,
    captured: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    mirror: Arc<std::sync::atomic::AtomicBool>,
    third_sent: Arc<AtomicU64>,
    third_got: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Tap {
    async fn start(server: SocketAddr) -> Tap {
        let front = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let up = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        up.connect(server).await.unwrap();
        let third = UdpSocket::bind("127.0.0.3:0").await.unwrap();
        third.connect(server).await.unwrap();
        let addr = front.local_addr().unwrap();
        let third_addr = third.local_addr().unwrap();
        let captured = Arc::new(std::sync::Mutex::new(Vec::new()));
        let third_sent = Arc::new(AtomicU64::new(0));
        let third_got = Arc::new(AtomicU64::new(0));
        let mirror = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (cap, sent, got) = (captured.clone(), third_sent.clone(), third_got.clone());
        let on = mirror.clone();
        let task = tokio::spawn(async move {
            let mut client = None;
            let mut a = vec![0u8; 2048];
            let mut b = vec![0u8; 2048];
            let mut c = vec![0u8; 2048];
            loop {
                tokio::select! {
                    Ok((n, from)) = front.recv_from(&mut a) => {
                        client = Some(from);
                        let d = &a[..n];
                        cap.lock().unwrap().push(d.to_vec());
                        if on.load(Ordering::Relaxed) {
                            let _ = third.send(d).await;
                            sent.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        let _ = up.send(d).await;
                    }
                    Ok(n) = up.recv(&mut b) => {
                        if let Some(to) = client {
                            let _ = front.send_to(&b[..n], to).await;
                        }
                    }
                    Ok(n) = third.recv(&mut c) => {
                        got.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
            }
        });
        Tap {
            addr,
            third: third_addr,
            captured,
            mirror,
            third_sent,
            third_got,
            task,
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Writes `n` bytes and reads them back.
async fn echo(c: &mut KcpStream, n: usize) {
    let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    c.write_all(&data).await.unwrap();
    let mut back = vec![0u8; n];
    timeout(Duration::from_secs(10), c.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert!(back == data);
}

#[tokio::test]
async fn replays_from_a_third_address_move_nothing() {
    let config = config();
    let l = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
    let tap = Tap::start(l.local_addr().unwrap()).await;
    let mut c = KcpStream::connect(tap.addr, &config).await.unwrap();
    let (mut s, peer) = l.accept().await.unwrap();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        loop {
            tokio::select! {
                r = s.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return s,
                    Ok(n) => s.write_all(&buf[..n]).await.unwrap(),
                },
                _ = &mut stopped => return s,
            }
        }
    });
    echo(&mut c, 300_000).await;
    // Every captured datagram, replayed from a third address, twice.
    let attacker = UdpSocket::bind("127.0.0.3:0").await.unwrap();
    attacker.connect(l.local_addr().unwrap()).await.unwrap();
    let captured = tap.captured.lock().unwrap().clone();
    let mut sent = 0;
    for d in captured.iter().chain(captured.iter()) {
        attacker.send(d).await.unwrap();
        sent += d.len();
    }
    // The session goes on, at its address.
    echo(&mut c, 100_000).await;
    let mut got = 0;
    let mut buf = [0u8; 2048];
    while let Ok(Ok(n)) = timeout(Duration::from_millis(300), attacker.recv(&mut buf)).await {
        got += n;
    }
    let st = l.stats();
    eprintln!(
        "figure: {} datagrams ({sent} bytes) replayed; {got} bytes back; stale {}, migrations {}",
        2 * captured.len(),
        st.migration_stale,
        st.migrations
    );
    assert_eq!(st.migrations, 0);
    assert_eq!(st.sessions_opened, 1, "no session for a replayed opener");
    assert_eq!(got, 0, "nothing to the unproven address");
    assert!(st.migration_stale > 0);
    stop.send(()).unwrap();
    let s = timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.peer_addr().unwrap(), peer);
}

#[tokio::test]
async fn a_mirror_of_fresh_datagrams_gets_at_most_3x_and_moves_nothing() {
    let config = config();
    let l = Arc::new(KcpListener::bind("127.0.0.1:0", &config).await.unwrap());
    serve_echo(l.clone());
    let tap = Tap::start(l.local_addr().unwrap()).await;
    let mut c = KcpStream::connect(tap.addr, &config).await.unwrap();
    echo(&mut c, 1000).await;
    // From now on every client datagram also comes from the third address,
    // just before the original.
    tap.mirror.store(true, Ordering::Relaxed);
    for _ in 0..5 {
        echo(&mut c, 200_000).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (sent, got) = (
        tap.third_sent.load(Ordering::Relaxed),
        tap.third_got.load(Ordering::Relaxed),
    );
    let st = l.stats();
    eprintln!(
        "figure: third address {} sent {sent} bytes, got {got} back ({:.4}x); probes {}, migrations {}",
        tap.third,
        got as f64 / sent.max(1) as f64,
        st.path_probes,
        st.migrations
    );
    assert_eq!(st.migrations, 0);
    assert!(got <= 3 * sent);
    assert!(st.path_probes > 0, "the mirror was a candidate");
}

/// kcp-go as the client through the relay, rebinding mid-transfer (a new
/// port, then a new IP), FEC off: its echo verifies every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcpgo_client_follows_its_nat_rebinding() {
    kcpgo_rebinding(&[(0, 0)]).await;
}

/// The same with FEC 10/3. Both used to stall now and then when the whole
/// file ran in parallel (0 probes, 0 moves; or, with 2 shards, 8 stale
/// datagrams after a first move): the client's address changed while
/// everything it sent was acknowledged and the listener's window was
/// closed (the echo's replies stalled), so kcp-go sent only zero-window
/// probes, which are stale. The listener now nudges such a client
/// (`a_kcpgo_client_on_a_closed_window_is_found_at_its_new_port`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcpgo_client_with_fec_follows_its_nat_rebinding() {
    kcpgo_rebinding(&[(10, 3)]).await;
}

async fn kcpgo_rebinding(shapes: &[(usize, usize)]) {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    const BYTES: u64 = 8 << 20;
    for &fec in shapes {
        let mut b = kcpgo_listener_config();
        if fec.0 > 0 {
            b = b.fec(fec.0, fec.1);
        }
        let config = b.build().unwrap();
        let l = Arc::new(KcpListener::bind("127.0.0.1:0", &config).await.unwrap());
        serve_echo(l.clone());
        let relay = Relay::start(l.local_addr().unwrap(), RelayConfig::default())
            .await
            .unwrap();
        // A new port at a third of the upload, a new IP at two thirds.
        let new_ip: IpAddr = "127.0.0.2".parse().unwrap();
        let run = kcpgo_upload(&bin, &relay, fec, BYTES, |k| {
            relay.rebind((k > 1).then_some(new_ip));
        })
        .await;
        let s = l.stats();
        eprintln!(
            "figure: kcp-go fec {fec:?}: {} bytes echoed in {:?} ms across two rebindings; migrations {}, probes {}",
            BYTES,
            run.number("elapsed_ms"),
            s.migrations,
            s.path_probes
        );
        if !run.passed() {
            eprintln!(
                "listener {s:?}; per socket {:?}; relay {:?}, sources {:?}",
                l.stats_per_socket(),
                relay.stats(),
                relay.upstream_sources()
            );
        }
        assert!(run.passed(), "{run:?}");
        assert_eq!(run.number("bytes_verified"), Some(BYTES as f64));
        assert_eq!(s.migrations, 2, "{s:?}");
        assert_eq!(s.sessions_opened, 1);
    }
}

/// The listener's side of the kcp-go peer's fast3 stream flags.
fn kcpgo_listener_config() -> kcpio::ConfigBuilder {
    Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(256, 256)
        .crypto(Method::Aes128Gcm, Key::passphrase("it's a secrect"))
}

/// kcp-go (`bin`) uploads `bytes` through `relay` (FEC `fec`) and
/// verifies the echo; `change(k)` runs once the relay carried `k` thirds
/// of the upload to the server (k = 1, 2).
async fn kcpgo_upload(
    bin: &std::path::Path,
    relay: &Relay,
    fec: (usize, usize),
    bytes: u64,
    change: impl Fn(u32),
) -> gopeer::ClientRun {
    let run = spawn_kcpgo_client(bin, relay, fec, bytes, 60);
    let deadline = Instant::now() + Duration::from_secs(60);
    for k in 1..=2u64 {
        while relay.stats().to_server.bytes_sent < bytes * k / 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        change(k as u32);
    }
    run.await.unwrap()
}

/// kcp-go's client (`bin`) echoing `bytes` through `relay`, giving up after
/// `secs`.
fn spawn_kcpgo_client(
    bin: &std::path::Path,
    relay: &Relay,
    fec: (usize, usize),
    bytes: u64,
    secs: u64,
) -> tokio::task::JoinHandle<gopeer::ClientRun> {
    let mut flags = gopeer::fast3_stream_flags("aes-128-gcm", fec);
    flags.extend(gopeer::args(&[
        "--sndwnd",
        "256",
        "--rcvwnd",
        "256",
        "--addr",
        &relay.local_addr().to_string(),
        "--bytes",
        &bytes.to_string(),
        "--timeout",
        &format!("{secs}s"),
    ]));
    let go = bin.to_path_buf();
    let limit = Duration::from_secs(secs + 30);
    tokio::spawn(async move { gopeer::run_client(&go, &flags, limit).await })
}

/// A kcp-go client whose address changes while it sends nothing fresh:
/// the server has not read for a while, so its window closed and
/// everything the client sent is acknowledged; kcp-go then only probes
/// the window now and then, and a probe carries nothing new (a replay
/// could carry the same). Its first probe from the new port makes a weak
/// candidate; the listener's nudge there (a PUSH without data for a
/// segment the client holds) comes back acknowledged, bound to the nudge,
/// and the session moves: the echo completes. Without the nudge the
/// probes stay stale and the client gives up (checked by hand: 0 moves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcpgo_client_on_a_closed_window_is_found_at_its_new_port() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    const BYTES: u64 = 2 << 20;
    let config = kcpgo_listener_config().reuse_port(1).build().unwrap();
    let l = Arc::new(KcpListener::bind("127.0.0.1:0", &config).await.unwrap());
    let relay = Relay::start(l.local_addr().unwrap(), RelayConfig::default())
        .await
        .unwrap();
    let (go_on, wait) = tokio::sync::oneshot::channel::<()>();
    let server = {
        let l = l.clone();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (mut r, mut w) = s.into_split();
            // An echo of the first 256 KiB (the client acknowledges data
            // of the server's), then not a byte read until told: the
            // window closes.
            let mut buf = vec![0u8; 16 * 1024];
            let mut echoed = 0;
            while echoed < 256 * 1024 {
                let Ok(n @ 1..) = r.read(&mut buf).await else {
                    return;
                };
                w.write_all(&buf[..n]).await.unwrap();
                echoed += n;
            }
            let _ = wait.await;
            let _ = tokio::io::copy(&mut r, &mut w).await;
        })
    };
    let run = spawn_kcpgo_client(&bin, &relay, (0, 0), BYTES, 30);
    // The client stops once the window is full: nothing more for 500 ms.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut last, mut since) = (0, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let sent = relay.stats().to_server.bytes_sent;
        if sent != last {
            (last, since) = (sent, Instant::now());
        } else if sent > 0 && since.elapsed() >= Duration::from_millis(500) {
            break;
        }
        assert!(Instant::now() < deadline, "the window never closed");
    }
    assert!(last < BYTES, "stopped by the closed window, not done");
    relay.rebind(None);
    tokio::time::sleep(Duration::from_millis(50)).await;
    go_on.send(()).unwrap();
    let started = Instant::now();
    let run = run.await.unwrap();
    let s = l.stats();
    eprintln!(
        "figure: kcp-go on a closed window moved: echo done {:?} after the server read again; migrations {}, probes {}, stale {}",
        started.elapsed(),
        s.migrations,
        s.path_probes,
        s.migration_stale
    );
    assert!(run.passed(), "{run:?}; {s:?}; relay {:?}", relay.stats());
    assert_eq!(run.number("bytes_verified"), Some(BYTES as f64));
    assert_eq!(s.migrations, 1, "{s:?}");
    assert_eq!(s.sessions_opened, 1);
    assert!(s.migration_stale > 0, "its window probes were stale: {s:?}");
    assert!(s.path_probes >= 2, "a nudge, then a probe: {s:?}");
    server.abort();
}

/// Runs `ip` with `args` (in the current namespace); true on success.
fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// Deletes the namespace, also when the test fails.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        ip(&["netns", "del", &self.0]);
    }
}

const IN_NETNS: &str = "KCPIO_MIGRATION_IN_NETNS";

/// The client's address is deleted mid-upload: its sends fail with
/// `ENETUNREACH`, it rebinds (the route picks the remaining address), the
/// listener follows it to the new IP, and every byte arrives once.
#[test]
fn a_client_whose_address_goes_away_rebinds_and_keeps_its_session() {
    if std::env::var_os(IN_NETNS).is_some() {
        return tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                timeout(Duration::from_secs(60), address_goes_away())
                    .await
                    .expect("the upload ends within 60 s")
            });
    }
    let name = format!("kcpio-mig-{}", std::process::id());
    if !ip(&["netns", "add", &name]) {
        eprintln!("SKIPPED: needs root (ip netns add)");
        return;
    }
    let ns = Netns(name);
    for cmd in [
        &["link", "set", "lo", "up"][..],
        &["addr", "add", "10.99.0.1/32", "dev", "lo"],
        &["addr", "add", "10.99.0.2/32", "dev", "lo"],
    ] {
        let mut full = vec!["-n", &ns.0];
        full.extend_from_slice(cmd);
        assert!(ip(&full), "ip {full:?}");
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("timeout")
        .args(["90", "ip", "netns", "exec", &ns.0])
        .arg(exe)
        .args([
            "--exact",
            "a_client_whose_address_goes_away_rebinds_and_keeps_its_session",
            "--nocapture",
        ])
        .env(IN_NETNS, "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("{text}");
    assert!(out.status.success(), "in the namespace: {text}");
    assert!(text.contains("figure: rebound"), "{text}");
}

async fn address_goes_away() {
    let config = config();
    let l = KcpListener::bind("10.99.0.1:0", &config).await.unwrap();
    let server = l.local_addr().unwrap();
    let sock = kcpio::KcpSocket::bind("10.99.0.2:0".parse().unwrap(), &config).unwrap();
    let mut c = timeout(Duration::from_secs(5), sock.connect(server))
        .await
        .unwrap()
        .unwrap();
    let (mut s, first) = l.accept().await.unwrap();
    assert_eq!(first.ip(), "10.99.0.2".parse::<IpAddr>().unwrap());
    assert_eq!(c.local_addr().unwrap(), first);
    const N: u64 = 4 << 20;
    let read = Arc::new(AtomicU64::new(0));
    let reader = {
        let read = read.clone();
        tokio::spawn(async move {
            let mut v = Verifier::default();
            let mut buf = vec![0u8; 65536];
            let mut last = Instant::now();
            let mut stall = Duration::ZERO;
            while v.offset < N {
                let n = match timeout(Duration::from_secs(20), s.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => n,
                    r => return Err(format!("the upload ends at {}: {r:?}", v.offset)),
                };
                stall = stall.max(last.elapsed());
                last = Instant::now();
                assert!(v.push(&buf[..n]), "a wrong byte at {:?}", v.mismatch);
                read.store(v.offset, Ordering::Relaxed);
            }
            Ok((stall, s.peer_addr().unwrap()))
        })
    };
    // The address goes once a third is written and the server has read a
    // quarter: the session is under way and its peer proved it receives
    // (a listener moves only such a session: deleted within the first
    // round trip, the client's answer to the proof probe never reaches
    // the listener, which refuses the new address and fails the session
    // unproven after 10 s). The rest is written after, so the client
    // sends from its new address.
    let mut buf = vec![0u8; 16 * 1024];
    let mut off = 0u64;
    let mut deleted = false;
    while off < N {
        if !deleted && off >= N / 3 {
            deleted = true;
            let deadline = Instant::now() + Duration::from_secs(20);
            while read.load(Ordering::Relaxed) < N / 4 {
                assert!(
                    Instant::now() < deadline,
                    "the server reads: {:?}",
                    l.stats()
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            assert!(ip(&["addr", "del", "10.99.0.2/32", "dev", "lo"]));
        }
        let n = (N - off).min(buf.len() as u64) as usize;
        fill(&mut buf[..n], off);
        let wrote = timeout(Duration::from_secs(20), c.write_all(&buf[..n])).await;
        assert!(
            matches!(wrote, Ok(Ok(()))),
            "the write at {off} ({wrote:?}); server read {}; {:?}",
            read.load(Ordering::Relaxed),
            l.stats()
        );
        off += n as u64;
    }
    let (stall, now_at) = match timeout(Duration::from_secs(30), reader).await {
        Ok(Ok(Ok(done))) => done,
        r => panic!("{r:?}; {:?}", l.stats()),
    };
    // tokio's convention: the address the socket is bound to now.
    let local = c.local_addr().unwrap();
    assert_eq!(
        local.ip(),
        "10.99.0.1".parse::<IpAddr>().unwrap(),
        "{local}"
    );
    let st = l.stats();
    println!(
        "figure: rebound; longest stall {stall:?}; server sees {now_at} (was {first}); migrations {}",
        st.migrations
    );
    assert_eq!(st.migrations, 1, "{st:?}");
    assert_eq!(now_at.ip(), "10.99.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(
        now_at, local,
        "the session moved to the client's new socket"
    );
}
