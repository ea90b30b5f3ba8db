//! The UDP mode (`--udp`): many flows through a lossy relay with every
//! datagram accounted for, hostile peers (forged flow ids, bad headers,
//! replays, a flood of new flows) bounded and counted, idle flows expiring,
//! and flows that carry on over a new session after the old one was lost.
//!
//! kcpio on both ends, in-process; loopback only; every test bounded by a
//! timeout.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kcpio::{KcpListener, KcpStream};
use kcpio_testkit::pattern;
use kcpio_testkit::relay::{LinkConfig, Relay, RelayConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use kcpio_tunnel::{self as tunnel, UDP_HEADER_LEN, UdpDropReason, UdpStats};

const TEST_TIMEOUT: Duration = Duration::from_secs(150);

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

/// Starts a tunnel end in-process; its address and UDP counters. A client
/// is returned once its session is up (datagrams before are dropped as
/// `no session`).
async fn start(cmd: &str) -> (SocketAddr, Arc<UdpStats>) {
    start_with(cmd, true).await
}

/// [`start`], with the session's datagram FEC turned off when `!fec`
/// (the same KCP settings otherwise; stream FEC 10/3 carries the plain
/// datagrams).
async fn start_with(cmd: &str, fec: bool) -> (SocketAddr, Arc<UdpStats>) {
    let mut settings = tunnel::parse(words(cmd)).unwrap();
    if !fec {
        settings.kcp = without_datagram_fec();
    }
    let client = settings.role == tunnel::Role::Client;
    let bound = tunnel::Bound::bind(settings).await.unwrap();
    let addr = bound.local_addr().unwrap();
    let udp = bound.udp_stats().expect("a --udp tunnel");
    tokio::spawn(bound.run(tunnel::Log::open("", true).unwrap()));
    if client {
        assert!(
            until(Duration::from_secs(20), || get(&udp.sessions_opened) > 0).await,
            "the client's session did not come up"
        );
    }
    (addr, udp)
}

/// A loopback UDP socket asking for a 4 MiB receive buffer (capped at
/// `rmem_max`): it is the test's, and on a busy machine the default one
/// overflowed while its task waited for a core.
fn roomy_socket() -> UdpSocket {
    let sock = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .unwrap();
    // Best effort: what still overflows is counted (`kernel_drops`).
    let _ = sock.set_recv_buffer_size(4 << 20);
    sock.set_nonblocking(true).unwrap();
    sock.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    UdpSocket::from_std(sock.into()).unwrap()
}

/// A UDP echo server counting what it received (and so sent back), on a
/// [`roomy_socket`].
async fn echo_server() -> (
    SocketAddr,
    Arc<AtomicU64>,
    Arc<std::sync::Mutex<HashSet<SocketAddr>>>,
) {
    let s = roomy_socket();
    let addr = s.local_addr().unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let peers = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let (c, p) = (Arc::clone(&count), Arc::clone(&peers));
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            c.fetch_add(1, Ordering::Relaxed);
            p.lock().unwrap().insert(from);
            let _ = s.send_to(&buf[..n], from).await;
        }
    });
    (addr, count, peers)
}

/// Waits until `f` holds, or `within` passed; whether it holds.
async fn until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Every datagram one end took in left it, or was dropped with a reason.
fn assert_balanced(name: &str, u: &UdpStats) {
    let taken = get(&u.local_in) + get(&u.tunnel_in);
    let passed = get(&u.tunnel_out) + get(&u.local_out) + u.dropped_total();
    assert_eq!(taken, passed, "{name}: in = out + dropped: {u:?}");
}

/// `flows` local sources, each sending `each` datagrams of 100..300 bytes
/// (its number and a sequence number first) at ~100/s through `entry` and
/// checking every echo; the distinct echoes they got back.
async fn echo_flows(entry: SocketAddr, flows: usize, each: u32) -> u64 {
    let mut tasks = Vec::new();
    for f in 0..flows {
        tasks.push(tokio::spawn(async move {
            let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            s.connect(entry).await.unwrap();
            // The flows' 10 ms ticks are spread over the tick, as
            // independent sources are: 50 datagrams at once every 10 ms
            // overflow the session's pacing burst (10 ms of its budget)
            // and are dropped as an overload (counted in
            // `dropped_overload`; not what this test is about).
            tokio::time::sleep(Duration::from_micros(200 * f as u64)).await;
            let mut back = HashSet::new();
            let mut buf = [0u8; 2048];
            for i in 0..each {
                let mut msg = [0u8; 300];
                msg[..4].copy_from_slice(&(f as u32).to_be_bytes());
                msg[4..8].copy_from_slice(&i.to_be_bytes());
                s.send(&msg[..100 + (i as usize * 7) % 200]).await.unwrap();
                // Paced at ~100 datagrams/s a flow.
                let pause = tokio::time::sleep(Duration::from_millis(10));
                tokio::pin!(pause);
                loop {
                    tokio::select! {
                        () = &mut pause => break,
                        r = s.recv(&mut buf) => {
                            let n = r.unwrap();
                            assert_eq!(&buf[..4], &(f as u32).to_be_bytes(), "echo of another flow");
                            let seq = u32::from_be_bytes(buf[4..8].try_into().unwrap());
                            assert_eq!(n, 100 + (seq as usize * 7) % 200, "echo of {seq}");
                            back.insert(seq);
                        }
                    }
                }
            }
            // Late echoes.
            while let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_millis(1500), s.recv(&mut buf)).await
            {
                back.insert(u32::from_be_bytes(buf[4..8].try_into().unwrap()));
            }
            back.len() as u64
        }));
    }
    let mut received = 0;
    for t in tasks {
        received += t.await.unwrap();
    }
    received
}

/// What a run of [`echo_flows`] did: flows, datagrams the applications
/// sent and distinct echoes they got, datagrams the echo server got, and
/// the server-side sockets it saw.
struct Run {
    flows: usize,
    sent: u64,
    received: u64,
    echoed: u64,
    sockets: usize,
    /// The tunnel client's local address and the echo server's: the
    /// kernel drops what their sockets' buffers cannot take (a busy
    /// machine), before either program sees it.
    entry: SocketAddr,
    target: SocketAddr,
}

/// Datagrams the kernel dropped at the IPv4 UDP socket bound to `addr`
/// (its receive buffer was full): the last column of `/proc/net/udp`.
fn kernel_drops(addr: SocketAddr) -> u64 {
    let want = format!(":{:04X}", addr.port());
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let local = cols.get(1)?;
            local
                .ends_with(&want)
                .then(|| cols.last()?.parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

/// Every datagram of a run accounted for at both ends (`[client, server]`),
/// one flow and one server socket per source, and what the session lost
/// within what the relay dropped and the sender's pacing shed; both ends'
/// datagram FEC counters.
fn assert_accounted(
    r: &kcpio_testkit::relay::RelayStats,
    [c_udp, s_udp]: [&UdpStats; 2],
    run: Run,
) -> (kcpio::DatagramFecStats, kcpio::DatagramFecStats) {
    assert_balanced("client", c_udp);
    assert_balanced("server", s_udp);
    let (entry_drops, target_drops) = (kernel_drops(run.entry), kernel_drops(run.target));
    assert_eq!(
        get(&c_udp.local_in) + entry_drops,
        run.sent,
        "the client read every datagram the kernel did not drop"
    );
    assert_eq!(
        get(&c_udp.local_out),
        run.received,
        "what the client wrote arrived"
    );
    assert_eq!(
        get(&s_udp.local_out),
        run.echoed + target_drops,
        "what the server wrote arrived or the kernel dropped it"
    );
    assert_eq!(get(&s_udp.local_in), run.echoed, "every echo was read");
    let (c, s) = (c_udp.sessions(), s_udp.sessions());
    assert_eq!((c.len(), s.len()), (1, 1), "one session each end");
    // What the session sent and the other end did not take was lost on
    // the path, dropped by the sender's session as an overload, or found
    // the receiving session's queue full (`oob_dropped`, with or without
    // FEC: the tunnel's reader fell behind).
    let lost_up = get(&c_udp.tunnel_out) - get(&s_udp.tunnel_in);
    let lost_down = get(&s_udp.tunnel_out) - get(&c_udp.tunnel_in);
    let (c_oob, s_oob) = (c[0].oob_dropped, s[0].oob_dropped);
    let (c, s) = (c[0].datagram_fec.clone(), s[0].datagram_fec.clone());
    eprintln!(
        "relay {:?} / {:?}\nclient oob_dropped {c_oob} {c:?}\nserver oob_dropped {s_oob} {s:?}\n\
         kernel drops at the tunnel client's socket {entry_drops}, at the echo server's {target_drops}",
        r.to_server, r.to_client
    );
    let (path_up, path_down) = (
        r.to_server.lost + c.dropped_overload + s_oob,
        r.to_client.lost + s.dropped_overload + c_oob,
    );
    assert!(lost_up <= path_up, "{lost_up} > {:?} {c:?}", r.to_server);
    assert!(
        lost_down <= path_down,
        "{lost_down} > {:?} {s:?}",
        r.to_client
    );
    assert_eq!(
        get(&c_udp.flows_opened),
        run.flows as u64,
        "one flow per source"
    );
    assert_eq!(get(&s_udp.flows_opened), run.flows as u64);
    assert_eq!(run.sockets, run.flows, "one server socket per flow");
    assert_eq!(c_udp.dropped(UdpDropReason::UnknownFlow), 0);
    assert_eq!(s_udp.dropped(UdpDropReason::BadHeader), 0);
    (c, s)
}

/// What [`fifty_flows_through_a_lossy_relay`] saw.
struct Outcome {
    /// Datagrams the applications sent, and distinct echoes they got back.
    sent: u64,
    received: u64,
    /// Datagrams the tunnel delivered that the kernel dropped at the echo
    /// server's full socket (the test's server, not the product's loss).
    echo_dropped: u64,
    /// Data shards rebuilt from parity, both ends' sessions together.
    recovered: u64,
    /// Both ends' sessions negotiated FEC datagrams.
    negotiated: bool,
    /// Both ends' datagram FEC counters, for failure messages.
    fec: [kcpio::DatagramFecStats; 2],
}

/// 50 flows of echoed datagrams through a relay losing 5% each way, every
/// datagram accounted for at both ends. `fec: false` runs the same tunnel
/// with the session's datagram FEC turned off on both ends (plain kcp-go
/// OOB datagrams, as before the extension).
async fn fifty_flows_through_a_lossy_relay(fec: bool) -> Outcome {
    {
        const FLOWS: usize = 50;
        // 30,000 round trips: a failed FEC group loses ~7 datagrams at
        // once, so over the 6,000 of a shorter run a 0.1% bound was one
        // failed group (1 run in 7 at the 1e-4 target), not the residual.
        const EACH: u32 = 600;
        let (target, echoed, peers) = echo_server().await;
        let opts = "--mode fast3 --crypt aes-128-gcm --mtu 1400";
        let (server, s_udp) = start_with(
            &format!("t server --udp -l 127.0.0.1:0 -t {target} {opts}"),
            fec,
        )
        .await;
        let relay = Relay::start(server, RelayConfig::symmetric(27, LinkConfig::lossy(0.05)))
            .await
            .unwrap();
        let (entry, c_udp) = start_with(
            &format!(
                "t client --udp -l 127.0.0.1:0 -r {} {opts}",
                relay.local_addr()
            ),
            fec,
        )
        .await;

        let received = echo_flows(entry, FLOWS, EACH).await;
        let sent = FLOWS as u64 * u64::from(EACH);
        // Quiet now: every counter has settled.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (c, s) = assert_accounted(
            &relay.stats(),
            [&c_udp, &s_udp],
            Run {
                flows: FLOWS,
                sent,
                received,
                echoed: get(&echoed),
                sockets: peers.lock().unwrap().len(),
                entry,
                target,
            },
        );
        // 5% each way: at least most of it arrives, with or without FEC.
        assert!(received * 10 >= sent * 8, "{received} of {sent} echoed");
        Outcome {
            // What entered the tunnel (the kernel may drop a few at the
            // client's socket on a busy machine).
            sent: get(&c_udp.local_in),
            received,
            echo_dropped: kernel_drops(target),
            recovered: c.recovered + s.recovered,
            negotiated: c.negotiated && s.negotiated,
            fec: [c, s],
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_flows_through_a_lossy_relay_lose_almost_nothing_with_datagram_fec() {
    let o = tokio::time::timeout(TEST_TIMEOUT, fifty_flows_through_a_lossy_relay(true))
        .await
        .expect("test timed out");
    assert!(o.negotiated, "both ends negotiated FEC datagrams");
    assert!(o.recovered > 0, "parity rebuilt some of the relay's losses");
    // About 9.75% of round trips cross a loss; FEC leaves at most 0.1%
    // (30 of 30,000) missing: at the 1e-4 residual target about 6, in
    // bursts of a failed group. (The per-datagram target over many runs
    // is asserted in the simulator, `kcpio/tests/dgram_fec.rs`. Without
    // FEC, >= 3% is lost.) What the kernel dropped at the test's own echo
    // server is not the tunnel's loss.
    let lost = (o.sent - o.received).saturating_sub(o.echo_dropped);
    let [c, s] = &o.fec;
    assert!(
        lost * 1000 <= o.sent,
        "{lost} of {} round trips lost after FEC ({} recovered; besides, {} dropped \
         by the kernel at the echo server): sender's overload drops {} (stale {}), \
         lost after FEC {}: {:#?}",
        o.sent,
        o.recovered,
        o.echo_dropped,
        c.dropped_overload + s.dropped_overload,
        c.dropped_stale + s.dropped_stale,
        c.lost_after_fec + s.lost_after_fec,
        o.fec
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_flows_through_a_lossy_relay_lose_the_relays_share_without_datagram_fec() {
    let o = tokio::time::timeout(TEST_TIMEOUT, fifty_flows_through_a_lossy_relay(false))
        .await
        .expect("test timed out");
    // The FEC test's bounds fail here: nothing rebuilt, and the relay's
    // loss (about 9.75% of round trips) shows.
    assert!(!o.negotiated);
    assert_eq!(o.recovered, 0);
    assert!(
        (o.sent - o.received) * 100 >= o.sent * 3,
        "{} of {} round trips lost without FEC",
        o.sent - o.received,
        o.sent
    );
}

/// `--mode fast3 --crypt aes-128-gcm --mtu 1400` and kcptun's default key
/// and FEC shape, without FEC datagrams.
fn without_datagram_fec() -> kcpio::Config {
    kcpio::Config::builder()
        .preset(kcpio::Preset::Fast3)
        .congestion(kcpio::Congestion::Bbr)
        .crypto(
            kcpio::Method::Aes128Gcm,
            kcpio::Key::passphrase("it's a secrect"),
        )
        .fec(10, 3)
        .mtu(1400)
        .stream(true)
        .write_delay(false)
        .datagram_fec(false)
        .build()
        .unwrap()
}

/// The tunnel's KCP configuration for `cmd`, for a hand-made peer.
fn kcp_config(cmd: &str) -> kcpio::Config {
    tunnel::parse(words(cmd)).unwrap().kcp
}

fn datagram(flow: u32, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut d = vec![0x10, (flow >> 16) as u8, (flow >> 8) as u8, flow as u8];
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(payload);
    assert_eq!(UDP_HEADER_LEN, 8);
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_flows_bad_headers_and_replays_at_the_server_are_bounded_and_counted() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (target, echoed, peers) = echo_server().await;
        let cmd = format!("t server --udp -l 127.0.0.1:0 -t {target} --udpflows 40");
        let (server, s_udp) = start(&cmd).await;
        let kcp = KcpStream::connect(server, &kcp_config(&cmd)).await.unwrap();
        // 500 new flows: 40 are opened, the rest dropped as "table full".
        for id in 0..500u32 {
            kcp.send_datagram(&datagram(id, 0, b"hello")).await.unwrap();
            if id % 50 == 49 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // A replay of an accepted one, garbage, and a version 2 header.
        kcp.send_datagram(&datagram(0, 0, b"hello")).await.unwrap();
        kcp.send_datagram(b"\x10\x00").await.unwrap();
        let mut v2 = datagram(1, 1, b"v2");
        v2[0] = 0x20;
        kcp.send_datagram(&v2).await.unwrap();
        assert!(
            until(Duration::from_secs(10), || get(&s_udp.tunnel_in) == 503).await,
            "{s_udp:?}"
        );
        assert_eq!(get(&s_udp.flows_opened), 40);
        assert_eq!(s_udp.flows_open.load(Ordering::Relaxed), 40);
        assert_eq!(s_udp.dropped(UdpDropReason::TableFull), 460);
        assert_eq!(s_udp.dropped(UdpDropReason::Duplicate), 1);
        assert_eq!(s_udp.dropped(UdpDropReason::BadHeader), 2);
        assert!(until(Duration::from_secs(5), || get(&echoed) == 40).await);
        assert_eq!(
            peers.lock().unwrap().len(),
            40,
            "one socket per admitted flow"
        );
        // The echoes come back on the admitted flows only.
        let mut buf = [0u8; 256];
        let mut flows = HashSet::new();
        for _ in 0..40 {
            let n = tokio::time::timeout(Duration::from_secs(5), kcp.recv_datagram(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&buf[8..n], b"hello");
            flows.insert(u32::from_be_bytes([0, buf[1], buf[2], buf[3]]));
        }
        assert_eq!(flows.len(), 40);
        assert_balanced("server", &s_udp);
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_flow_ids_bad_headers_and_replays_at_the_client_are_dropped_and_counted() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // The test is the (hostile) server.
        let cmd = "t server --udp -l 127.0.0.1:0 -t 127.0.0.1:9";
        let listener = KcpListener::bind("127.0.0.1:0", &kcp_config(cmd))
            .await
            .unwrap();
        let (entry, c_udp) = start(&format!(
            "t client --udp -l 127.0.0.1:0 -r {}",
            listener.local_addr().unwrap()
        ))
        .await;
        let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        app.connect(entry).await.unwrap();
        app.send(b"open").await.unwrap();
        let (kcp, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .unwrap()
            .unwrap();
        let mut buf = [0u8; 256];
        let n = kcp.recv_datagram(&mut buf).await.unwrap();
        let flow = u32::from_be_bytes([0, buf[1], buf[2], buf[3]]);
        assert_eq!(&buf[8..n], b"open");
        // Forged ids, a bad header, then one real datagram sent three times.
        // Paced: with FEC datagrams a send never waits, and a session that
        // cannot send in time drops its oldest (counted as an overload).
        for id in 1..=100u32 {
            kcp.send_datagram(&datagram(flow + id, 0, b"forged"))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        kcp.send_datagram(b"\x11\x00\x00\x00\x00\x00\x00\x00kind")
            .await
            .unwrap();
        for _ in 0..3 {
            kcp.send_datagram(&datagram(flow, 7, b"real"))
                .await
                .unwrap();
        }
        let n = tokio::time::timeout(Duration::from_secs(5), app.recv(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"real");
        assert!(
            until(Duration::from_secs(5), || get(&c_udp.tunnel_in) == 104).await,
            "{c_udp:?} {:#?} {:#?}",
            c_udp.sessions(),
            kcp.stats().datagram_fec
        );
        assert_eq!(c_udp.dropped(UdpDropReason::UnknownFlow), 100);
        assert_eq!(c_udp.dropped(UdpDropReason::BadHeader), 1);
        assert_eq!(c_udp.dropped(UdpDropReason::Duplicate), 2);
        assert_eq!(get(&c_udp.local_out), 1);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), app.recv(&mut buf))
                .await
                .is_err(),
            "nothing else reached the application"
        );
        assert_balanced("client", &c_udp);
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_flows_expire_on_both_ends_and_a_source_that_speaks_again_gets_a_new_flow() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (target, echoed, peers) = echo_server().await;
        let (server, s_udp) = start(&format!(
            "t server --udp -l 127.0.0.1:0 -t {target} --udpidle 1"
        ))
        .await;
        let (entry, c_udp) = start(&format!(
            "t client --udp -l 127.0.0.1:0 -r {server} --udpidle 2"
        ))
        .await;
        let apps: Vec<UdpSocket> = {
            let mut v = Vec::new();
            for _ in 0..5 {
                let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                s.connect(entry).await.unwrap();
                v.push(s);
            }
            v
        };
        let mut buf = [0u8; 64];
        for a in &apps {
            a.send(b"ping").await.unwrap();
            tokio::time::timeout(Duration::from_secs(5), a.recv(&mut buf))
                .await
                .unwrap()
                .unwrap();
        }
        assert_eq!(s_udp.flows_open.load(Ordering::Relaxed), 5);
        assert_eq!(c_udp.flows_open.load(Ordering::Relaxed), 5);
        assert!(
            until(Duration::from_secs(8), || {
                get(&s_udp.flows_expired) == 5 && get(&c_udp.flows_expired) == 5
            })
            .await,
            "{s_udp:?} {c_udp:?}"
        );
        assert_eq!(s_udp.flows_open.load(Ordering::Relaxed), 0);
        assert_eq!(c_udp.flows_open.load(Ordering::Relaxed), 0);
        // Speaking again opens new flows, with new server sockets.
        for a in &apps {
            a.send(b"again").await.unwrap();
            let n = tokio::time::timeout(Duration::from_secs(5), a.recv(&mut buf))
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{c_udp:?} {s_udp:?} {:#?} {:#?}",
                        c_udp.sessions(),
                        s_udp.sessions()
                    )
                })
                .unwrap();
            assert_eq!(&buf[..n], b"again");
        }
        assert_eq!(get(&c_udp.flows_opened), 10);
        assert_eq!(get(&s_udp.flows_opened), 10);
        assert_eq!(get(&echoed), 10);
        assert_eq!(peers.lock().unwrap().len(), 10);
    })
    .await
    .expect("test timed out");
}

/// A `--udp` server toward `target`, a clean relay (seeded `seed`) in
/// front of it, a `--udp` client through the relay, and an application's
/// socket connected to the client.
struct Relayed {
    relay: Relay,
    c_udp: Arc<UdpStats>,
    s_udp: Arc<UdpStats>,
    app: UdpSocket,
}

/// A flow the server expired while the client still holds it (the
/// server's `--udpidle` is the shorter) gets the target's replies again as
/// soon as its source speaks: the server's new flow numbers them on from
/// where the old one stopped, so the client's window does not take them
/// for old ones (numbered from 0 again, the first 20 replies here were
/// dropped as `duplicate`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_the_server_expired_first_gets_its_replies_when_its_source_speaks_again() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (target, echoed, _) = echo_server().await;
        let (server, s_udp) = start(&format!(
            "t server --udp -l 127.0.0.1:0 -t {target} --udpidle 1"
        ))
        .await;
        let (entry, c_udp) = start(&format!(
            "t client --udp -l 127.0.0.1:0 -r {server} --udpidle 60"
        ))
        .await;
        let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        app.connect(entry).await.unwrap();
        let mut buf = [0u8; 64];
        for i in 0..20u32 {
            let msg = i.to_be_bytes();
            app.send(&msg).await.unwrap();
            let n = tokio::time::timeout(Duration::from_secs(5), app.recv(&mut buf))
                .await
                .expect("an echo")
                .unwrap();
            assert_eq!(&buf[..n], &msg);
        }
        assert!(
            until(Duration::from_secs(8), || get(&s_udp.flows_expired) == 1).await,
            "{s_udp:?}"
        );
        for i in 20..25u32 {
            let msg = i.to_be_bytes();
            app.send(&msg).await.unwrap();
            let n = tokio::time::timeout(Duration::from_secs(3), app.recv(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("no echo of {i}: {c_udp:?} {s_udp:?}"))
                .unwrap();
            assert_eq!(&buf[..n], &msg);
        }
        assert_eq!(get(&echoed), 25);
        // The client kept its flow; the server opened a second one.
        assert_eq!(get(&c_udp.flows_opened), 1);
        assert_eq!(get(&s_udp.flows_opened), 2);
        assert_eq!(c_udp.dropped_total(), 0, "{c_udp:?}");
    })
    .await
    .expect("test timed out");
}

async fn through_relay(target: SocketAddr, seed: u64) -> Relayed {
    through_relay_with(target, seed, "").await
}

/// [`through_relay`], with `opts` on both ends' command lines.
async fn through_relay_with(target: SocketAddr, seed: u64, opts: &str) -> Relayed {
    let (server, s_udp) = start(&format!("t server --udp -l 127.0.0.1:0 -t {target} {opts}")).await;
    let relay = Relay::start(server, RelayConfig::symmetric(seed, LinkConfig::clean()))
        .await
        .unwrap();
    let (entry, c_udp) = start(&format!(
        "t client --udp -l 127.0.0.1:0 -r {} {opts}",
        relay.local_addr()
    ))
    .await;
    let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    app.connect(entry).await.unwrap();
    Relayed {
        relay,
        c_udp,
        s_udp,
        app,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_carry_on_over_a_new_session_after_the_path_was_cut() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (target, _echoed, _) = echo_server().await;
        let Relayed {
            relay,
            c_udp,
            s_udp,
            app,
        } = through_relay(target, 3).await;
        let echo = |msg: &'static [u8]| {
            let app = &app;
            async move {
                for _ in 0..200 {
                    app.send(msg).await.unwrap();
                    let mut b = [0u8; 64];
                    let r =
                        tokio::time::timeout(Duration::from_millis(250), app.recv(&mut b)).await;
                    if matches!(r, Ok(Ok(n)) if &b[..n] == msg) {
                        return true;
                    }
                }
                false
            }
        };
        // Enough datagrams each way that a receiver which kept the old
        // session's numbering would refuse the new one's as too old.
        for i in 0..1100 {
            app.send(b"numbering").await.unwrap();
            if i % 20 == 19 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        assert!(
            until(Duration::from_secs(20), || get(&c_udp.local_out) >= 1030).await,
            "{c_udp:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut b = [0u8; 64];
        while app.try_recv(&mut b).is_ok() {}
        assert!(echo(b"before").await);
        // Cut the path until the session times out (kcpio's idle timeout,
        // 30 s), then mend it: the client opens a new session by itself.
        relay.set_blackhole(true);
        let lost_session = until(Duration::from_secs(60), || {
            // The client says so by counting a datagram it could not send.
            let _ = app.try_send(b"while cut");
            c_udp.dropped(UdpDropReason::NoSession) > 0
        })
        .await;
        assert!(lost_session, "{c_udp:?}");
        relay.set_blackhole(false);
        assert!(echo(b"after").await, "the flow carries on: {c_udp:?}");
        assert_eq!(
            get(&c_udp.flows_opened),
            1,
            "the same flow, over the new session"
        );
        assert_eq!(
            get(&s_udp.flows_opened),
            2,
            "a new socket toward the target"
        );
        assert_eq!(get(&c_udp.sessions_opened), 2, "one replacement session");
        assert_eq!(
            c_udp.dropped(UdpDropReason::Duplicate) + c_udp.dropped(UdpDropReason::TooOld),
            0,
            "the new session's numbering is accepted: {c_udp:?}"
        );
    })
    .await
    .expect("test timed out");
}

/// Writes `len` pattern bytes (from `offset`) through `entry` and checks
/// every byte of the echo.
async fn tcp_echo_checked(entry: SocketAddr, len: usize, offset: u64) {
    let mut data = vec![0u8; len];
    pattern::fill(&mut data, offset);
    let (mut rd, mut wr) = TcpStream::connect(entry).await.unwrap().into_split();
    let writer = tokio::spawn(async move {
        wr.write_all(&data).await.unwrap();
        wr.shutdown().await.unwrap();
    });
    let mut back = Vec::with_capacity(len);
    rd.read_to_end(&mut back).await.unwrap();
    writer.await.unwrap();
    assert_eq!(back.len(), len, "the whole echo came back");
    assert_eq!(
        pattern::first_mismatch(&back, offset),
        None,
        "the echo's bytes are the ones written"
    );
}

/// Starts a tunnel end with UDP beside TCP; its TCP address (client) or
/// KCP address (server), the client's UDP address, and the flows'
/// counters. A client is returned once its flows have a session.
async fn start_beside(cmd: &str) -> (SocketAddr, Option<SocketAddr>, Arc<UdpStats>) {
    let settings = tunnel::parse(words(cmd)).unwrap();
    let client = settings.role == tunnel::Role::Client;
    let bound = tunnel::Bound::bind(settings).await.unwrap();
    let addr = bound.local_addr().unwrap();
    let udp_addr = bound.udp_local_addr().unwrap();
    let udp = bound.udp_stats().expect("UDP beside TCP");
    tokio::spawn(bound.run(tunnel::Log::open("", true).unwrap()));
    if client {
        assert!(
            until(Duration::from_secs(20), || get(&udp.sessions_opened) > 0).await,
            "the client's flows got no session"
        );
    }
    (addr, udp_addr, udp)
}

/// A `--udptarget` whose name does not resolve costs the flows' datagrams
/// (dropped and counted as `flow failed`; the server looks the name up again
/// once a second), not the session: its TCP streams carry on. (The server
/// used to give up on the session's datagrams for good after one failed
/// lookup, counting nothing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udptarget_that_does_not_resolve_costs_the_datagrams_not_the_session() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let tcp_target = kcpio_testkit::tcp::echo_server().await;
        let (server, _, s_udp) = start_beside(&format!(
            "t server -l 127.0.0.1:0 -t {tcp_target} --udptarget nowhere.invalid:9"
        ))
        .await;
        let (tcp_entry, udp_entry, _) = start_beside(&format!(
            "t client -l 127.0.0.1:0 --udplisten 127.0.0.1:0 -r {server}"
        ))
        .await;
        let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        app.connect(udp_entry.expect("the client's UDP socket"))
            .await
            .unwrap();
        let failed = || s_udp.dropped(UdpDropReason::FlowFailed);
        let counted = until(Duration::from_secs(10), || {
            let _ = app.try_send(b"to nowhere");
            failed() >= 10
        })
        .await;
        assert!(counted, "{s_udp:?}");
        assert_balanced("server", &s_udp);
        tcp_echo_checked(tcp_entry, 64 << 10, 3).await;
    })
    .await
    .expect("test timed out");
}

// One client process with `--udplisten` and one server with `--udptarget`:
// two TCP connections of 1 MiB each way and 20 UDP flows, at once, cross
// one KCP session (the relay sees one client socket) through 5% loss each
// way. Every TCP byte is checked; every datagram is accounted for at both
// ends, what the flows lost is within what the path and the sender's
// pacing dropped, and FEC left at most 2% of what crossed lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_streams_and_udp_flows_share_one_session_through_a_lossy_relay() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const FLOWS: usize = 20;
        const EACH: u32 = 150;
        const TCP_LEN: usize = 1 << 20;
        let tcp_target = kcpio_testkit::tcp::echo_server().await;
        let (udp_target, echoed, peers) = echo_server().await;
        let opts = "--mode fast3 --crypt aes-128-gcm --mtu 1400";
        let (server, _, s_udp) = start_beside(&format!(
            "t server -l 127.0.0.1:0 -t {tcp_target} --udptarget {udp_target} {opts}"
        ))
        .await;
        let relay = Relay::start(server, RelayConfig::symmetric(41, LinkConfig::lossy(0.05)))
            .await
            .unwrap();
        let (tcp_entry, udp_entry, c_udp) = start_beside(&format!(
            "t client -l 127.0.0.1:0 --udplisten 127.0.0.1:0 -r {} {opts}",
            relay.local_addr()
        ))
        .await;
        let udp_entry = udp_entry.expect("the client's UDP socket");

        let tcp = tokio::spawn(async move {
            tokio::join!(
                tcp_echo_checked(tcp_entry, TCP_LEN, 7),
                tcp_echo_checked(tcp_entry, TCP_LEN, 1 << 30),
            )
        });
        let received = echo_flows(udp_entry, FLOWS, EACH).await;
        tcp.await.unwrap();
        let sent = FLOWS as u64 * u64::from(EACH);
        tokio::time::sleep(Duration::from_millis(500)).await;

        let r = relay.stats();
        assert_eq!(r.clients, 1, "one client socket: one session for all");
        assert_eq!(get(&c_udp.sessions_opened), 1);
        assert_eq!(get(&s_udp.sessions_opened), 1);
        let (c, s) = assert_accounted(
            &r,
            [&c_udp, &s_udp],
            Run {
                flows: FLOWS,
                sent,
                received,
                echoed: get(&echoed),
                sockets: peers.lock().unwrap().len(),
                entry: udp_entry,
                target: udp_target,
            },
        );
        assert!(
            c.negotiated && s.negotiated,
            "FEC datagrams on the shared session"
        );
        eprintln!(
            "beside TCP: {received} of {sent} echoed, {} recovered, {} lost after FEC, {} shed for the rate",
            c.recovered + s.recovered,
            c.lost_after_fec + s.lost_after_fec,
            c.dropped_overload + s.dropped_overload
        );
        assert!(c.recovered + s.recovered > 0, "parity rebuilt some losses");
        // What crossed the path lost at most 2% after FEC, against about 5%
        // of each direction's shards lost on the wire (0.1-0.5% when the
        // pacer keeps all its parity; it cuts parity first when it reads
        // an overload). Datagrams the pacing shed are counted apart
        // (`dropped_overload`, within `assert_accounted`'s bound): with a
        // TCP bulk in the same session on a loaded machine it has shed
        // over half of them.
        let (arrived, after_fec) = (
            s.datagrams_in + c.datagrams_in,
            c.lost_after_fec + s.lost_after_fec,
        );
        assert!(
            after_fec * 50 <= arrived,
            "{after_fec} lost after FEC of {arrived}: {c:?} {s:?}"
        );
        assert!(received > 0, "flows crossed beside the streams");
    })
    .await
    .expect("test timed out");
}

/// A target answers each request with a burst: the server's flow reads it
/// several datagrams per system call and the client hands it to the
/// application in one `sendmmsg`; a reply longer than the session carries
/// (cut by the kernel in the flow's slot) is dropped and counted as too
/// large, and the datagrams around it arrive intact and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_from_the_target_arrives_whole_and_an_oversized_reply_is_counted() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // Per request: 5 replies, the third longer than any session carries.
        const BURST: usize = 5;
        const REQUESTS: u8 = 20;
        let oversized = 40_000;
        let target = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let taddr = target.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            while let Ok((_, from)) = target.recv_from(&mut buf).await {
                let r = buf[0];
                for k in 0..BURST {
                    let len = if k == 2 { oversized } else { 100 + k };
                    let _ = target.send_to(&vec![r ^ k as u8; len], from).await;
                }
            }
        });
        let opts = "--crypt aes-128-gcm --mtu 1400";
        let (server, s_udp) =
            start(&format!("t server --udp -l 127.0.0.1:0 -t {taddr} {opts}")).await;
        let (entry, c_udp) =
            start(&format!("t client --udp -l 127.0.0.1:0 -r {server} {opts}")).await;
        let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        app.connect(entry).await.unwrap();
        let mut buf = vec![0u8; 65_536];
        for r in 0..REQUESTS {
            app.send(&[r; 16]).await.unwrap();
            for k in [0usize, 1, 3, 4] {
                let n = tokio::time::timeout(Duration::from_secs(5), app.recv(&mut buf))
                    .await
                    .unwrap_or_else(|_| panic!("reply {k} to request {r}: {c_udp:?} {s_udp:?}"))
                    .unwrap();
                assert_eq!(n, 100 + k, "reply {k} to request {r}");
                assert!(
                    buf[..n].iter().all(|&b| b == r ^ k as u8),
                    "reply {k} to {r}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let replies = u64::from(REQUESTS) * BURST as u64;
        assert_eq!(get(&s_udp.local_in), replies, "{s_udp:?}");
        assert_eq!(
            s_udp.dropped(UdpDropReason::TooLarge),
            u64::from(REQUESTS),
            "{s_udp:?}"
        );
        assert_eq!(
            get(&c_udp.local_out),
            replies - u64::from(REQUESTS),
            "{c_udp:?}"
        );
        assert_balanced("server", &s_udp);
        assert_balanced("client", &c_udp);
    })
    .await
    .expect("test timed out");
}

/// The server takes what a session delivered at one wake-up as a batch
/// (packed into one buffer; a datagram that does not fit what is left
/// waits for the next) and sends each flow's share in one system call:
/// every datagram reaches the target once, on its flow's socket, in its
/// flow's order, and everything is accounted for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_of_interleaved_flows_reach_the_target_once_each_in_flow_order() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const FLOWS: u32 = 3;
        const EACH: u32 = 120;
        // 12 of each flow's datagrams, interleaved: more than the server's
        // batch of 32.
        const BURST: u32 = 36;
        let target = roomy_socket();
        let taddr = target.local_addr().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::<(SocketAddr, u32, u32)>::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, from)) = target.recv_from(&mut buf).await {
                let flow = u32::from_be_bytes(buf[..4].try_into().unwrap());
                let i = u32::from_be_bytes(buf[4..8].try_into().unwrap());
                assert_eq!(n, size_of(i), "datagram {i} of flow {flow}");
                log.lock().unwrap().push((from, flow, i));
            }
        });
        let cmd = format!("t server --udp -l 127.0.0.1:0 -t {taddr}");
        let (server, s_udp) = start(&cmd).await;
        let kcp = KcpStream::connect(server, &kcp_config(&cmd)).await.unwrap();
        // Mostly small datagrams, the sixth of each flow's 12 of 20,000
        // bytes: a burst holds more than the server's one 64 KiB batch
        // buffer.
        fn size_of(i: u32) -> usize {
            if i % 12 == 5 {
                20_000
            } else {
                8 + (i as usize * 37) % 1200
            }
        }
        let mut sent = 0u64;
        for i in 0..EACH {
            for flow in 0..FLOWS {
                let mut payload = vec![0u8; size_of(i)];
                payload[..4].copy_from_slice(&flow.to_be_bytes());
                payload[4..8].copy_from_slice(&i.to_be_bytes());
                kcp.send_datagram(&datagram(flow, i, &payload))
                    .await
                    .unwrap();
                sent += 1;
            }
            if i % (BURST / FLOWS) == BURST / FLOWS - 1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let dropped = || {
            let s = kcp.stats().datagram_fec;
            s.dropped_overload + s.dropped_stale + s.dropped_queue_full + s.lost_after_fec
        };
        assert!(
            until(Duration::from_secs(10), || {
                seen.lock().unwrap().len() as u64 + dropped() == sent
            })
            .await,
            "sent {sent}, the target got {}, the sender dropped {}: {s_udp:?}",
            seen.lock().unwrap().len(),
            dropped()
        );
        let seen = seen.lock().unwrap().clone();
        assert!(
            seen.len() as u64 >= sent * 9 / 10,
            "too few arrived to say anything: {} of {sent}",
            seen.len()
        );
        // One socket per flow, each flow's datagrams in order, none twice.
        let mut last: std::collections::HashMap<SocketAddr, (u32, u32)> =
            std::collections::HashMap::new();
        for &(from, flow, i) in &seen {
            match last.insert(from, (flow, i)) {
                None => {}
                Some((f, prev)) => {
                    assert_eq!(f, flow, "two flows on the socket {from}");
                    assert!(prev < i, "flow {flow}: {i} after {prev}");
                }
            }
        }
        assert_eq!(last.len(), FLOWS as usize, "one socket per flow");
        assert_eq!(get(&s_udp.local_out), seen.len() as u64, "{s_udp:?}");
        assert_eq!(s_udp.dropped_total(), 0, "{s_udp:?}");
        assert_balanced("server", &s_udp);
    })
    .await
    .expect("test timed out");
}

/// `--udp` runs on one thread, so its server listens on one socket: no
/// `SO_REUSEPORT` group that could steer a client's later packets away
/// from the socket that holds its session. A TCP server keeps one socket
/// per core.
#[tokio::test]
async fn a_udp_server_listens_on_one_socket() {
    let udp = tunnel::Bound::bind(
        tunnel::parse(words("t server --udp -l 127.0.0.1:0 -t 127.0.0.1:9")).unwrap(),
    )
    .await
    .unwrap();
    let tunnel::Bound::UdpServer(listeners, ..) = &udp else {
        panic!("not a UDP server");
    };
    assert_eq!(listeners.len(), 1);
    assert_eq!(listeners[0].stats_per_socket().len(), 1);
    let tcp = tunnel::Bound::bind(
        tunnel::parse(words("t server -l 127.0.0.1:0 -t 127.0.0.1:9")).unwrap(),
    )
    .await
    .unwrap();
    let tunnel::Bound::Server(listeners, ..) = &tcp else {
        panic!("not a TCP server");
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(listeners[0].stats_per_socket().len(), cores.clamp(1, 256));
}

/// A `--udp` server as a process of its own, so that it can be killed and
/// started again on the same port.
fn server_process(listen: SocketAddr, target: SocketAddr) -> std::process::Child {
    tunnel_process(&format!(
        "server --udp -l {listen} -t {target} --snmpperiod 0"
    ))
}

/// The tunnel binary run with `args`, its output discarded.
fn tunnel_process(args: &str) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_kcpio-tunnel"))
        .args(words(args))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// A loopback UDP address nothing is bound to now (the kernel's pick,
/// released).
fn unused_udp_addr() -> SocketAddr {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

/// How a server restart meets the flow: the server is down for `down`;
/// the flow keeps sending one datagram every 50 ms meanwhile, or is idle
/// (sending nothing while down and for `idle` after the restart, as
/// WireGuard without a persistent keepalive).
#[derive(Clone, Copy, Debug)]
struct Restart {
    down: Duration,
    sending: bool,
    idle: Duration,
}

impl Restart {
    /// Down 0.3 s while the flow idles, idle 3 s more after the restart.
    const IDLE: Restart = Restart {
        down: Duration::from_millis(300),
        sending: false,
        idle: Duration::from_secs(3),
    };
    /// Down 2 s while the flow sends, and sending on.
    const SENDING: Restart = Restart {
        down: Duration::from_secs(2),
        sending: true,
        idle: Duration::ZERO,
    };
}

/// 3,000 datagrams each way on the flow `app` sends on (enough that a
/// server numbering them afresh stays below what the client's session and
/// flow last saw for minutes at 20/s), then one echo.
async fn number_the_flow(app: &UdpSocket, c_udp: &UdpStats) {
    for i in 0..3000 {
        app.send(b"numbering").await.unwrap();
        if i % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert!(
        until(Duration::from_secs(20), || get(&c_udp.local_out) >= 2900).await,
        "{c_udp:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut b = [0u8; 64];
    while app.try_recv(&mut b).is_ok() {}
    assert!(
        echo_back_within(app, b"before", Duration::from_secs(5))
            .await
            .is_some()
    );
}

/// While the server is down for `r.down`: the flow sends every 50 ms, or
/// idles.
async fn while_down(app: &UdpSocket, r: Restart) {
    if r.sending {
        let _ = echo_back_within(app, b"down", r.down).await;
    } else {
        tokio::time::sleep(r.down).await;
    }
}

/// How long after a `--udp` server was killed and started again on its
/// port a flow's echoes came back, sending one datagram every 50 ms;
/// `client_flags` are added to the client's command line. Before the kill
/// the flow carried 3,000 datagrams each way.
async fn echoes_after_a_server_restart(r: Restart, client_flags: &str) -> Duration {
    let (target, _echoed, _) = echo_server().await;
    let listen = unused_udp_addr();
    let mut server = server_process(listen, target);
    let (entry, c_udp) = start(&format!(
        "t client --udp -l 127.0.0.1:0 -r {listen} {client_flags}"
    ))
    .await;
    let app = roomy_socket();
    app.connect(entry).await.unwrap();
    number_the_flow(&app, &c_udp).await;
    server.kill().unwrap();
    server.wait().unwrap();
    while_down(&app, r).await;
    let mut server = server_process(listen, target);
    tokio::time::sleep(r.idle).await;
    let back = echo_back_within(&app, b"after", Duration::from_secs(40)).await;
    server.kill().unwrap();
    server.wait().unwrap();
    let back = back.unwrap_or_else(|| panic!("the flow never came back: {c_udp:?}"));
    eprintln!("{r:?} ({client_flags}): echoes back {back:?} after the restart: {c_udp:?}");
    assert_eq!(get(&c_udp.flows_opened), 1, "the same flow carries on");
    back
}

/// A server killed and started again on its port: the client finds it
/// and the flow carries on, within [`tunnel::UDP_SILENT_TICKS`] seconds of
/// silence and a dial, on the same local port and flow.
///
/// Before pings: a server restarted while the flow was idle got the
/// client's next keepalive probe (sn 0, una 0: an opener, as every probe
/// of a `--udp` session, whose stream carries nothing) and re-created the
/// old conversation, and the client's session then took the new server's
/// datagrams for replays until their count passed the old one's (3,000
/// here: never, within the 40 s); one restarted while the flow sent, with
/// no ICMP reaching the client (`--noicmpreset` stands for a firewall),
/// cost the session's 30 s idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_found_and_the_flow_carries_on() {
    tokio::time::timeout(Duration::from_secs(200), async {
        // The session's keepalive probe every second (the --udp meaning of
        // kcptun's --keepalive), so it re-creates the conversation soon.
        let idle = echoes_after_a_server_restart(Restart::IDLE, "--keepalive 1").await;
        assert!(idle < Duration::from_secs(8), "{idle:?}");
        let no_icmp = echoes_after_a_server_restart(Restart::SENDING, "--noicmpreset").await;
        assert!(no_icmp < Duration::from_secs(8), "{no_icmp:?}");
    })
    .await
    .expect("test timed out");
}

/// Sends `msg` through `app` every 50 ms until it comes back: how long that
/// took, or `None` after `within`.
async fn echo_back_within(app: &UdpSocket, msg: &[u8], within: Duration) -> Option<Duration> {
    let start = tokio::time::Instant::now();
    let mut b = [0u8; 64];
    while start.elapsed() < within {
        app.send(msg).await.unwrap();
        let r = tokio::time::timeout(Duration::from_millis(50), app.recv(&mut b)).await;
        if matches!(r, Ok(Ok(n)) if &b[..n] == msg) {
            return Some(start.elapsed());
        }
    }
    None
}

/// All packets dropped both ways for 12 s while the flow keeps sending
/// (shorter than the sessions' 30 s idle timeout, longer than the
/// client's silence before it dials a replacement): once the path is back
/// the flow carries on within a few seconds, on the old session or its
/// replacement, by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_carries_on_after_a_path_outage_shorter_than_the_idle_timeout() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (target, _echoed, _) = echo_server().await;
        let Relayed {
            relay, c_udp, app, ..
        } = through_relay(target, 5).await;
        assert!(
            echo_back_within(&app, b"before", Duration::from_secs(5))
                .await
                .is_some()
        );
        // Past the session's first round trips: cut within them (a few
        // ms after the start), the client's answer to the server's window
        // probe, its proof of receiving, was lost, and the server dropped
        // the session at its 10 s proof timeout (1 run in 3, on base
        // too), leaving the client to its 30 s idle timeout. A pong
        // means the server heard the client since.
        assert!(
            until(Duration::from_secs(5), || get(&c_udp.control_in) > 0).await,
            "{c_udp:?}"
        );
        relay.set_blackhole(true);
        assert!(
            echo_back_within(&app, b"cut", Duration::from_secs(12))
                .await
                .is_none()
        );
        relay.set_blackhole(false);
        let back = echo_back_within(&app, b"after", Duration::from_secs(20)).await;
        eprintln!("after a 12 s outage, echoes back in {back:?}: {c_udp:?}");
        let back = back.unwrap_or_else(|| panic!("the flow never came back: {c_udp:?}"));
        assert!(back < Duration::from_secs(8), "{back:?}");
        assert_eq!(get(&c_udp.flows_opened), 1, "the same flow");
        assert!(get(&c_udp.sessions_opened) <= 2, "{c_udp:?}");
    })
    .await
    .expect("test timed out");
}

/// The way back cut as the flow starts, so that none of the client's first
/// pings is answered, and the server restarted behind the cut: the client
/// judges a server that never answered a ping by the loss reports of its
/// FEC datagram receiver, and their silence while the flow sends makes it
/// dial a new session, which carries the flow once the path is back. (A
/// session whose pings were never answered was never judged: the restarted
/// server re-created the conversation from the client's keepalive probes,
/// which kept it open, and the flow never came back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_lost_before_it_answered_a_ping_is_found_by_its_silent_reports() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (target, _echoed, _) = echo_server().await;
        let listen = unused_udp_addr();
        let serve = || {
            tunnel_process(&format!(
                "server --udp -l {listen} -t {target} --snmpperiod 0"
            ))
        };
        let mut server = serve();
        let relay = Relay::start(listen, RelayConfig::symmetric(7, LinkConfig::clean()))
            .await
            .unwrap();
        let (entry, c_udp) = start(&format!(
            "t client --udp -l 127.0.0.1:0 -r {}",
            relay.local_addr()
        ))
        .await;
        let cut = LinkConfig {
            blackhole: true,
            ..LinkConfig::clean()
        };
        relay.set_links(LinkConfig::clean(), cut);
        let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        app.connect(entry).await.unwrap();
        assert!(
            echo_back_within(&app, b"cut", Duration::from_secs(2))
                .await
                .is_none()
        );
        assert!(get(&c_udp.control_out) > 0, "pinged: {c_udp:?}");
        assert_eq!(get(&c_udp.control_in), 0, "no pong came: {c_udp:?}");
        server.kill().unwrap();
        server.wait().unwrap();
        let mut server = serve();
        tokio::time::sleep(Duration::from_millis(300)).await;
        relay.set_links(LinkConfig::clean(), LinkConfig::clean());
        let back = echo_back_within(&app, b"after", Duration::from_secs(20)).await;
        server.kill().unwrap();
        server.wait().unwrap();
        eprintln!("restarted behind a cut way back, echoes in {back:?}: {c_udp:?}");
        let back = back.unwrap_or_else(|| panic!("the flow never came back: {c_udp:?}"));
        assert!(back < Duration::from_secs(8), "{back:?}");
        assert!(get(&c_udp.replacements_taken) >= 1, "{c_udp:?}");
        assert_eq!(get(&c_udp.flows_opened), 1, "the same flow");
    })
    .await
    .expect("test timed out");
}

/// How long after its client's NAT mapping changed (the relay's upstream
/// socket takes a new port) a flow through a `--udp` tunnel with `opts` on
/// both ends is echoed again, and the client's UDP stats then.
async fn echo_after_a_rebinding(opts: &str) -> (Duration, Arc<UdpStats>) {
    let (target, _echoed, _) = echo_server().await;
    let Relayed {
        relay, c_udp, app, ..
    } = through_relay_with(target, 9, opts).await;
    assert!(
        echo_back_within(&app, b"before", Duration::from_secs(5))
            .await
            .is_some()
    );
    assert!(
        until(Duration::from_secs(5), || get(&c_udp.control_in) > 0).await,
        "{c_udp:?}"
    );
    relay.rebind(None);
    let back = echo_back_within(&app, b"after", Duration::from_secs(20)).await;
    let back = back.unwrap_or_else(|| panic!("the flow never came back ({opts}): {c_udp:?}"));
    eprintln!("{opts}: echoed {back:?} after the rebinding: {c_udp:?}");
    (back, c_udp)
}

/// A WireGuard user's NAT changes the client's public port mid-flow. With
/// `aes-128-gcm` the server's session follows the new address (kcpio's
/// migration): the flow carries on at once on the same session. Under
/// kcptun's default `aes` (no migration: a CFB cipher cannot prove the new
/// address is the peer's) the server drops the new address's datagrams,
/// the client's pings go unanswered, and after 3 silent seconds it dials a
/// session from the new address that takes the flow: a few seconds, never
/// the 30 s idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_follows_its_client_across_a_nat_rebinding() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (migrated, c_udp) = echo_after_a_rebinding("--crypt aes-128-gcm").await;
        assert!(migrated < Duration::from_secs(1), "{migrated:?}");
        assert_eq!(
            get(&c_udp.sessions_opened),
            1,
            "the same session: {c_udp:?}"
        );
        let (replaced, c_udp) = echo_after_a_rebinding("").await;
        assert!(replaced < Duration::from_secs(8), "{replaced:?}");
        assert_eq!(get(&c_udp.replacements_taken), 1, "{c_udp:?}");
        assert_eq!(get(&c_udp.flows_opened), 1, "the same flow");
    })
    .await
    .expect("test timed out");
}

/// A client process killed and started again on its port: the server's
/// old session lingers, the new client's flow works at once, and the old
/// session and its flow are gone after the server's idle timeout (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_client_is_served_at_once_and_its_old_session_expires() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (target, _echoed, _) = echo_server().await;
        let (server, s_udp) = start(&format!("t server --udp -l 127.0.0.1:0 -t {target}")).await;
        let entry = unused_udp_addr();
        let client = || {
            tunnel_process(&format!(
                "client --udp -l {entry} -r {server} --snmpperiod 0"
            ))
        };
        let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        app.connect(entry).await.unwrap();
        let mut first = client();
        assert!(
            echo_back_within(&app, b"first", Duration::from_secs(10))
                .await
                .is_some()
        );
        first.kill().unwrap();
        first.wait().unwrap();
        let mut second = client();
        let back = echo_back_within(&app, b"second", Duration::from_secs(10)).await;
        let sessions_then = s_udp.sessions().len();
        let old_gone = until(Duration::from_secs(45), || {
            s_udp.sessions().len() == 1 && s_udp.flows_open.load(Ordering::Relaxed) == 1
        })
        .await;
        second.kill().unwrap();
        second.wait().unwrap();
        eprintln!("restarted client: echo back in {back:?}: {s_udp:?}");
        let back = back.expect("the new client's flow works");
        // The new process's start (a second) and its session's connect.
        assert!(back < Duration::from_secs(5), "{back:?}");
        assert_eq!(sessions_then, 2, "the old session lingers");
        assert!(old_gone, "the old session and its flow expire: {s_udp:?}");
        assert_eq!(get(&s_udp.flows_opened), 2);
    })
    .await
    .expect("test timed out");
}

/// Nothing listening on the server's `-t` port: the kernel's ICMP "port
/// unreachable" reaches the flow's connected socket as `ECONNREFUSED` on
/// its next call. That costs the datagrams sent meanwhile (counted, `send
/// failed`), never the session, another flow or the server; the flow
/// carries on once the target listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_target_costs_its_datagrams_not_the_session_and_the_flow_recovers() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let target = unused_udp_addr();
        let (server, s_udp) = start(&format!("t server --udp -l 127.0.0.1:0 -t {target}")).await;
        let (entry, c_udp) = start(&format!("t client --udp -l 127.0.0.1:0 -r {server}")).await;
        let apps: Vec<UdpSocket> = {
            let mut v = Vec::new();
            for _ in 0..3 {
                let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                s.connect(entry).await.unwrap();
                v.push(s);
            }
            v
        };
        // Two seconds of every flow sending into the refusing port.
        for _ in 0..40 {
            for a in &apps {
                a.send(b"anyone?").await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            until(Duration::from_secs(5), || s_udp
                .dropped(UdpDropReason::SendFailed)
                > 0)
            .await,
            "refusals counted: {s_udp:?}"
        );
        assert_eq!(get(&s_udp.flows_opened), 3, "{s_udp:?}");
        assert_eq!(s_udp.flows_open.load(Ordering::Relaxed), 3);
        assert_eq!(get(&c_udp.sessions_opened), 1, "the session lives on");
        // The target comes up on that port: every flow carries on.
        let sock = UdpSocket::bind(target).await.unwrap();
        tokio::spawn(async move {
            let mut b = [0u8; 2048];
            while let Ok((n, from)) = sock.recv_from(&mut b).await {
                let _ = sock.send_to(&b[..n], from).await;
            }
        });
        for a in &apps {
            let mut back = false;
            let mut b = [0u8; 64];
            for _ in 0..40 {
                a.send(b"now").await.unwrap();
                if let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_millis(100), a.recv(&mut b)).await
                    && &b[..n] == b"now"
                {
                    back = true;
                    break;
                }
            }
            assert!(back, "{s_udp:?}");
        }
        assert_eq!(get(&s_udp.flows_opened), 3, "the same flows: {s_udp:?}");
        assert_eq!(get(&c_udp.sessions_opened), 1);
        assert_eq!(get(&s_udp.sessions_opened), 1);
        assert_balanced("server", &s_udp);
    })
    .await
    .expect("test timed out");
}

/// The client's flow table at `--udpflows`: a new source is refused and
/// counted while the old flows carry on, and gets a slot once one of them
/// expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_client_flow_table_refuses_a_new_source_until_a_flow_expires() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let (target, _echoed, _) = echo_server().await;
        let (server, _s_udp) = start(&format!("t server --udp -l 127.0.0.1:0 -t {target}")).await;
        let (entry, c_udp) = start(&format!(
            "t client --udp -l 127.0.0.1:0 -r {server} --udpflows 2 --udpidle 2"
        ))
        .await;
        let mut apps = Vec::new();
        for _ in 0..3 {
            let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            s.connect(entry).await.unwrap();
            apps.push(s);
        }
        let (busy, idle, late) = (&apps[0], &apps[1], &apps[2]);
        assert!(
            echo_back_within(busy, b"busy", Duration::from_secs(5))
                .await
                .is_some()
        );
        assert!(
            echo_back_within(idle, b"idle", Duration::from_secs(5))
                .await
                .is_some()
        );
        // Full: the third source's datagrams are dropped and counted.
        assert!(
            echo_back_within(late, b"late", Duration::from_millis(500))
                .await
                .is_none()
        );
        assert!(c_udp.dropped(UdpDropReason::TableFull) > 0, "{c_udp:?}");
        assert_eq!(c_udp.flows_open.load(Ordering::Relaxed), 2);
        // The busy flow keeps talking; the idle one expires (2 s), and the
        // late source gets its slot.
        let got_in = tokio::time::Instant::now();
        let mut b = [0u8; 64];
        let mut late_back = None;
        while got_in.elapsed() < Duration::from_secs(10) && late_back.is_none() {
            assert!(
                echo_back_within(busy, b"busy", Duration::from_secs(2))
                    .await
                    .is_some()
            );
            late.send(b"late").await.unwrap();
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(200), late.recv(&mut b)).await
                && &b[..n] == b"late"
            {
                late_back = Some(got_in.elapsed());
            }
        }
        assert!(late_back.is_some(), "{c_udp:?}");
        assert_eq!(
            get(&c_udp.flows_expired),
            1,
            "only the idle flow: {c_udp:?}"
        );
        assert_eq!(get(&c_udp.flows_opened), 3);
        assert_eq!(c_udp.flows_open.load(Ordering::Relaxed), 2);
        assert_balanced("client", &c_udp);
    })
    .await
    .expect("test timed out");
}

/// A TCP server with `--udptarget` as a process of its own (`-t` for the
/// streams, `--udptarget` for the flows), killed and started again on
/// its port.
fn beside_server_process(
    listen: SocketAddr,
    tcp_target: SocketAddr,
    udp_target: SocketAddr,
) -> std::process::Child {
    tunnel_process(&format!(
        "server -l {listen} -t {tcp_target} --udptarget {udp_target} --snmpperiod 0"
    ))
}

/// What a `--udplisten` client met after its server came back (or its
/// path did), each timed from that moment.
#[derive(Debug)]
struct Beside {
    /// The flow's first echo.
    udp: Option<Duration>,
    /// A new TCP connection's first echo.
    tcp_new: Option<Duration>,
    /// The two TCP connections opened before (on the first two pooled
    /// sessions with `--conn 2`): how each ended, and when.
    tcp_old: [(Duration, &'static str); 2],
}

/// A new TCP connection through `entry` every 2 s until one echoes:
/// how long that took, or `None` after `within`.
async fn tcp_echo_within(entry: SocketAddr, within: Duration) -> Option<Duration> {
    let start = tokio::time::Instant::now();
    while start.elapsed() < within {
        let attempt = async {
            let mut c = TcpStream::connect(entry).await.ok()?;
            c.write_all(b"new").await.ok()?;
            let mut b = [0u8; 3];
            c.read_exact(&mut b).await.ok()?;
            (&b == b"new").then_some(())
        };
        if let Ok(Some(())) = tokio::time::timeout(Duration::from_secs(2), attempt).await {
            return Some(start.elapsed());
        }
    }
    None
}

/// The TCP connection `old` (which echoed before) asked to echo once
/// more: `echoed` when it did, `ended` when it got an end or an error,
/// `hung` when nothing came within `within`; and when.
async fn tcp_old_fate(old: &mut TcpStream, within: Duration) -> (Duration, &'static str) {
    let start = tokio::time::Instant::now();
    let fate = async {
        if old.write_all(b"old").await.is_err() {
            return "ended";
        }
        let mut b = [0u8; 3];
        match old.read_exact(&mut b).await {
            Ok(_) if &b == b"old" => "echoed",
            _ => "ended",
        }
    };
    let fate = tokio::time::timeout(within, fate).await.unwrap_or("hung");
    (start.elapsed(), fate)
}

/// A `--udplisten` client (`client_flags` added) beside TCP, its server a
/// process with `-t` and `--udptarget`: one flow carries 3,000 datagrams
/// each way and two TCP connections echo; the server is killed and
/// started again on its port as `r` says; then the flow, a new TCP
/// connection and the old ones are timed from the restart.
async fn beside_after_a_server_restart(r: Restart, client_flags: &str) -> Beside {
    let tcp_target = kcpio_testkit::tcp::echo_server().await;
    let (udp_target, _echoed, _) = echo_server().await;
    let listen = unused_udp_addr();
    let mut server = beside_server_process(listen, tcp_target, udp_target);
    let (tcp_entry, udp_entry, c_udp) = start_beside(&format!(
        "t client -l 127.0.0.1:0 --udplisten 127.0.0.1:0 -r {listen} {client_flags}"
    ))
    .await;
    let app = roomy_socket();
    app.connect(udp_entry.unwrap()).await.unwrap();
    number_the_flow(&app, &c_udp).await;
    let mut olds = Vec::new();
    for _ in 0..2 {
        let mut old = TcpStream::connect(tcp_entry).await.unwrap();
        let (_, fate) = tcp_old_fate(&mut old, Duration::from_secs(5)).await;
        assert_eq!(fate, "echoed");
        olds.push(old);
    }
    let [mut old0, mut old1]: [TcpStream; 2] = olds.try_into().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    while_down(&app, r).await;
    let mut server = beside_server_process(listen, tcp_target, udp_target);
    tokio::time::sleep(r.idle).await;
    let (udp, tcp_new, old0, old1) = tokio::join!(
        echo_back_within(&app, b"after", Duration::from_secs(40)),
        tcp_echo_within(tcp_entry, Duration::from_secs(40)),
        tcp_old_fate(&mut old0, Duration::from_secs(45)),
        tcp_old_fate(&mut old1, Duration::from_secs(45)),
    );
    server.kill().unwrap();
    server.wait().unwrap();
    let met = Beside {
        udp,
        tcp_new,
        tcp_old: [old0, old1],
    };
    eprintln!("--udplisten, {r:?} ({client_flags}): {met:?}: {c_udp:?}");
    assert_eq!(get(&c_udp.flows_opened), 1, "the same flow carries on");
    met
}

/// A `--udptarget` server killed and started again on its port, seen by
/// a `--udplisten` client: the flow is found again as a `--udp` client's
/// is, by pings (the silent session is replaced through the TCP pool, so
/// new TCP connections take the replacement too); the TCP connections
/// opened before end within seconds (with `--conn 2` also the one on the
/// second session), they do not wait for the 30 s idle timeout.
///
/// Base (no pings beside TCP): idle restart 27.0 s to the flow's echo,
/// 26.7 s to a new TCP connection's, the old one ended at 26.7 s; no
/// ICMP, 28.0-28.3 s, 28.0 s, 28.0 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_udptarget_server_is_found_by_the_flows_and_the_tcp_streams() {
    tokio::time::timeout(Duration::from_secs(300), async {
        let sending = Restart::SENDING;
        let idle = beside_after_a_server_restart(Restart::IDLE, "").await;
        let no_icmp = beside_after_a_server_restart(sending, "--noicmpreset").await;
        let icmp = beside_after_a_server_restart(sending, "").await;
        // The second TCP connection on the second pooled session, which
        // the flows do not ride: closed with the first one's.
        let two = beside_after_a_server_restart(sending, "--noicmpreset --conn 2").await;
        for met in [&idle, &no_icmp, &icmp, &two] {
            let udp = met.udp.expect("the flow came back");
            assert!(udp < Duration::from_secs(8), "{met:?}");
            let tcp = met.tcp_new.expect("a new TCP connection echoed");
            assert!(tcp < Duration::from_secs(8), "{met:?}");
            for (at, fate) in met.tcp_old {
                assert_eq!(fate, "ended", "{met:?}");
                assert!(at < Duration::from_secs(12), "{met:?}");
            }
        }
    })
    .await
    .expect("test timed out");
}

/// A `--udplisten` client's path dropped both ways for 12 s while its
/// flow sends (shorter than the sessions' 30 s idle timeout and the mux's
/// keepalive timeout, longer than the flows' 3 s of silence before they
/// dial a replacement): once the path is back the flow, a new TCP
/// connection and the TCP connections opened before (one on each of
/// `--conn 2` sessions) all carry on; the old sessions answer again, so
/// neither is closed under its stream, whichever of the old session and
/// the replacement answered first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udplisten_flows_and_tcp_streams_carry_on_after_a_path_outage() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let tcp_target = kcpio_testkit::tcp::echo_server().await;
        let (udp_target, _echoed, _) = echo_server().await;
        let (server, _, s_udp) = start_beside(&format!(
            "t server -l 127.0.0.1:0 -t {tcp_target} --udptarget {udp_target}"
        ))
        .await;
        let relay = Relay::start(server, RelayConfig::symmetric(9, LinkConfig::clean()))
            .await
            .unwrap();
        let (tcp_entry, udp_entry, c_udp) = start_beside(&format!(
            "t client -l 127.0.0.1:0 --udplisten 127.0.0.1:0 -r {} --conn 2",
            relay.local_addr()
        ))
        .await;
        let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        app.connect(udp_entry.unwrap()).await.unwrap();
        assert!(
            echo_back_within(&app, b"before", Duration::from_secs(5))
                .await
                .is_some()
        );
        let mut old0 = TcpStream::connect(tcp_entry).await.unwrap();
        let mut old1 = TcpStream::connect(tcp_entry).await.unwrap();
        for old in [&mut old0, &mut old1] {
            let (_, fate) = tcp_old_fate(old, Duration::from_secs(5)).await;
            assert_eq!(fate, "echoed");
        }
        // The client knows that the server answers pings (as after any
        // first seconds of use), so silence is noticed.
        assert!(
            until(Duration::from_secs(5), || get(&c_udp.control_in) > 0).await,
            "{c_udp:?}"
        );
        relay.set_blackhole(true);
        assert!(
            echo_back_within(&app, b"cut", Duration::from_secs(12))
                .await
                .is_none()
        );
        relay.set_blackhole(false);
        let (udp, tcp_new, old0, old1) = tokio::join!(
            echo_back_within(&app, b"after", Duration::from_secs(20)),
            tcp_echo_within(tcp_entry, Duration::from_secs(20)),
            tcp_old_fate(&mut old0, Duration::from_secs(30)),
            tcp_old_fate(&mut old1, Duration::from_secs(30)),
        );
        let met = Beside {
            udp,
            tcp_new,
            tcp_old: [old0, old1],
        };
        eprintln!("--udplisten after a 12 s outage: {met:?}: {c_udp:?} {s_udp:?}");
        let udp = met.udp.expect("the flow came back");
        assert!(udp < Duration::from_secs(8), "{met:?}");
        let tcp = met.tcp_new.expect("a new TCP connection echoed");
        assert!(tcp < Duration::from_secs(8), "{met:?}");
        for (_, fate) in met.tcp_old {
            assert_eq!(fate, "echoed", "{met:?}");
        }
        assert_eq!(get(&c_udp.flows_opened), 1, "the same flow");
        assert!(get(&c_udp.sessions_opened) <= 2, "{c_udp:?}");
    })
    .await
    .expect("test timed out");
}
