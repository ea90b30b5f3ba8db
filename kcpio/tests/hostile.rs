//! Hostile peers on loopback: hand-made datagrams against a real listener,
//! one test per attack (reflection, replay, forged takeover, empty segment,
//! flood). The table's time-based rules (+62 s, +10 min) are tested on its
//! own clock in `kcpio/src/driver/table.rs`, the per-preset byte budget on
//! `Conn`'s in `kcpio/src/conn/tests.rs`.

use kcpio_testkit::spoof;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kcpio::arq::segment::{Command, Header, Segments};
use kcpio::{Config, Conn, KcpListener, KcpStream, Key, Method, Preset};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout};

const CONV: u32 = 0x1122_3344;

/// The two tests that load both cores (every preset's reflection budget,
/// and the opener flood) take turns: beside each other on a 2-core machine
/// the flood's real client can miss its connect timeout for want of CPU,
/// which says nothing about admission.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One KCP PUSH datagram of conversation `CONV` (crypto `null`, FEC off).
fn push(sn: u32, payload: &[u8]) -> Vec<u8> {
    push_conv(CONV, sn, payload)
}

/// One KCP PUSH datagram of `conv` (una 0).
fn push_conv(conv: u32, sn: u32, payload: &[u8]) -> Vec<u8> {
    let h = Header {
        conv,
        cmd: Command::Push as u8,
        frg: 0,
        wnd: 128,
        ts: sn * 10,
        sn,
        una: 0,
        len: payload.len() as u32,
    };
    let mut out = vec![0u8; 24 + payload.len()];
    h.encode_at(&mut out, 0, payload).expect("fits");
    out
}

/// Collects the PUSH payloads the server sends (each sn once, into `got`)
/// until `want` bytes arrived in all, within 5 s; returns them in order.
/// Answers the server's window probes as a KCP peer does: the listener's
/// session proves its peer receives, and reaches `accept`, that way.
async fn echoed(
    sock: &UdpSocket,
    got: &mut std::collections::BTreeMap<u32, Vec<u8>>,
    want: usize,
) -> Vec<u8> {
    let mut buf = vec![0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.values().map(Vec::len).sum::<usize>() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = timeout(left, sock.recv(&mut buf))
            .await
            .expect("the echo arrives within 5 s")
            .unwrap();
        for seg in Segments::new(&buf[..n]).flatten() {
            if seg.conv() == CONV && seg.command() == Some(Command::Wask) {
                sock.send(&spoof::raw_wins(CONV)).await.unwrap();
            }
            if seg.command() == Some(Command::Push) {
                got.insert(seg.sn(), seg.payload().to_vec());
                // Acknowledge (una included: kcp-go frees a segment only
                // when una passes it), or the server's congestion window
                // (1 at the start) holds the rest back.
                let una = (0u32..).take_while(|k| got.contains_key(k)).count() as u32;
                let ack = spoof::raw_ack(CONV, seg.ts(), seg.sn(), una);
                sock.send(&ack).await.unwrap();
            }
        }
    }
    got.values().flatten().copied().collect()
}

/// A zero-length PUSH (legal: C KCP's `ikcp_send(kcp, buf, 0)`) is skipped:
/// `poll_read` never returns `Ok(0)` for it, which `tokio::io::copy` would
/// take as end of stream (an echo server would close).
#[tokio::test]
async fn an_empty_push_does_not_end_the_stream() {
    let config = Config::builder().build().unwrap();
    let listener = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = Arc::new(listener);
    let l2 = listener.clone();
    let server = tokio::spawn(async move {
        let (stream, _) = l2.accept().await.unwrap();
        let (mut r, mut w) = stream.into_split();
        tokio::io::copy(&mut r, &mut w).await
    });

    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(addr).await.unwrap();
    // The conversation opens with an empty segment, then data; then another
    // empty one in the middle of the stream.
    let mut got = std::collections::BTreeMap::new();
    sock.send(&push(0, b"")).await.unwrap();
    // Long enough for the server to read (and, before the fix, see EOF)
    // before the data comes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    sock.send(&push(1, b"hello ")).await.unwrap();
    assert_eq!(echoed(&sock, &mut got, 6).await, b"hello ");
    sock.send(&push(2, b"")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    sock.send(&push(3, b"world")).await.unwrap();
    assert_eq!(echoed(&sock, &mut got, 11).await, b"hello world");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !server.is_finished(),
        "the server's copy ended: {:?}",
        server.await
    );
    server.abort();
}

/// A listener on loopback whose accepted streams echo, and its address.
async fn echo_listener(config: &Config) -> (Arc<KcpListener>, SocketAddr) {
    let (listener, addr, _) = counting_echo_listener(config).await;
    (listener, addr)
}

/// [`echo_listener`], and the count of sessions `accept` returned.
async fn counting_echo_listener(config: &Config) -> (Arc<KcpListener>, SocketAddr, Arc<AtomicU64>) {
    let listener = Arc::new(KcpListener::bind("127.0.0.1:0", config).await.unwrap());
    let addr = listener.local_addr().unwrap();
    let l2 = listener.clone();
    let accepted = Arc::new(AtomicU64::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = l2.accept().await {
            count.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let (mut r, mut w) = stream.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (listener, addr, accepted)
}

/// The first datagram a kcpio client sends with `config` after writing
/// `data`, sealed as on the wire (a fresh nonce).
fn first_datagram(config: &Config, conv: u32, data: &[u8], nonce: u8) -> Vec<u8> {
    let mut c = Conn::new(conv, config).unwrap();
    c.write(data).unwrap();
    c.handle_timeout(Duration::ZERO);
    let mut slot = vec![0u8; c.max_datagram()];
    let t = c.poll_transmit(Duration::ZERO, &mut slot).unwrap();
    let crypto = config.packet_crypto();
    let nonce = [nonce; 16];
    let n = crypto
        .seal(&mut slot, t.len, &nonce[..crypto.nonce_len()])
        .unwrap();
    slot.truncate(n);
    slot
}

/// Anti-amplification: an address that never answers gets at most 3x the bytes it
/// sent (one 1,400-byte request to an echo server), for every preset, FEC
/// parity and fillers included, and its session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_address_gets_at_most_three_times_its_bytes() {
    let _turn = HEAVY.lock().await;
    let presets = Preset::ALL;
    let mut runs = Vec::new();
    for preset in presets {
        for fec in [false, true] {
            runs.push(tokio::spawn(async move {
                let mut b = Config::builder().preset(preset);
                if fec {
                    b = b.fec(10, 3);
                }
                let config = b.build().unwrap();
                let (listener, addr) = echo_listener(&config).await;
                let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                let request = first_datagram(&config, CONV, &[0x5a; 1400], 0);
                sock.send_to(&request, addr).await.unwrap();
                // Everything the server sends within its proof timeout and
                // a second more; nothing is ever answered.
                let mut got = 0usize;
                let mut buf = [0u8; 2048];
                let end = Instant::now() + kcpio::conn::PROOF_TIMEOUT + Duration::from_secs(1);
                while let Ok(Ok(n)) = tokio::time::timeout_at(end, sock.recv(&mut buf)).await {
                    got += n;
                }
                let live = listener.stats().sessions_live;
                (preset, fec, request.len(), got, live)
            }));
        }
    }
    for run in runs {
        let (preset, fec, sent, got, live) = run.await.unwrap();
        eprintln!(
            "{preset:?} fec {fec}: {got} B back for {sent} B ({:.2}x)",
            got as f64 / sent as f64
        );
        assert!(got > 0, "{preset:?}: the ACK went out");
        assert!(
            got <= 3 * sent,
            "{preset:?} fec {fec}: {got} B sent to a silent address for {sent} B"
        );
        assert_eq!(live, 0, "{preset:?}: the unproven session ended");
    }
}

/// Replayed openers: under `aes-128`, one captured opening datagram replayed from
/// 20 fresh source addresses opens no session beyond the first.
#[tokio::test]
async fn a_replayed_opener_opens_nothing() {
    let config = Config::builder()
        .crypto(Method::Aes128, Key::passphrase("hostile"))
        .build()
        .unwrap();
    let (listener, addr) = echo_listener(&config).await;
    let captured = first_datagram(&config, CONV, b"hello", 1);
    let first = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    first.send_to(&captured, addr).await.unwrap();
    let mut replayers = Vec::new();
    for _ in 0..20 {
        let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        s.send_to(&captured, addr).await.unwrap();
        replayers.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let st = listener.stats();
    assert_eq!(st.sessions_opened, 1, "{st:?}");
    assert_eq!(st.replayed, 20, "{st:?}");
    // And nothing was sent to the replayers.
    let mut buf = [0u8; 2048];
    for s in &replayers {
        assert!(s.try_recv(&mut buf).is_err(), "a replayer got an answer");
    }
}

/// No takeover by forgery: datagrams from a live session's address (another
/// conv at sn 0 but no opener; the replayed opener of an earlier
/// conversation) do not reset it; the real client carries on.
#[tokio::test]
async fn forged_takeovers_leave_a_live_session_alone() {
    let config = Config::builder().build().unwrap();
    let (listener, addr) = echo_listener(&config).await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(addr).await.unwrap();
    // An earlier conversation from this address, finished.
    let earlier = push_conv(0x0bad_cafe, 0, b"old");
    sock.send(&earlier).await.unwrap();
    let mut got = std::collections::BTreeMap::new();
    let mut buf = [0u8; 2048];
    timeout(Duration::from_secs(2), sock.recv(&mut buf))
        .await
        .unwrap()
        .unwrap();
    // The live one takes over (a restarted client: an opener).
    sock.send(&push(0, b"live ")).await.unwrap();
    assert_eq!(echoed(&sock, &mut got, 5).await, b"live ");
    let opened = listener.stats().sessions_opened;
    // The forgeries: the 24-byte non-KCP datagram with another conv and sn
    // 0; a PUSH of another conv at sn 0 with una 3; the earlier opener.
    let mut junk = push_conv(0x7777, 0, b"");
    junk[4] = 0xee;
    sock.send(&junk).await.unwrap();
    let mut inner = push_conv(0x7777, 0, b"x");
    inner[16..20].copy_from_slice(&3u32.to_le_bytes());
    sock.send(&inner).await.unwrap();
    sock.send(&earlier).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    sock.send(&push(1, b"still here")).await.unwrap();
    assert_eq!(echoed(&sock, &mut got, 15).await, b"live still here");
    let st = listener.stats();
    assert_eq!(st.sessions_opened, opened, "{st:?}");
    // Two are no openers; the earlier conversation's opener is a replay.
    assert_eq!((st.conv_mismatch, st.replayed), (2, 1), "{st:?}");
}

/// A replayed opener of another conversation from a live session's address
/// (anyone who captured one datagram on its way to the server can send it
/// from there) does not end the live session: kcp-go's takeover, for a
/// client restarted at the same address, now waits until the newcomer's
/// peer proves it receives, which a replay's never does. (It reset the live
/// session at once, under every cipher.)
#[tokio::test]
async fn a_replayed_opener_of_another_conversation_does_not_end_a_live_session() {
    let config = Config::builder().build().unwrap();
    let (listener, addr) = echo_listener(&config).await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(addr).await.unwrap();
    let mut got = std::collections::BTreeMap::new();
    sock.send(&push(0, b"live ")).await.unwrap();
    assert_eq!(echoed(&sock, &mut got, 5).await, b"live ");
    let opened = listener.stats().sessions_opened;
    sock.send(&push_conv(0x5eed_0001, 0, b"someone else's"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    sock.send(&push(1, b"still here")).await.unwrap();
    assert_eq!(echoed(&sock, &mut got, 15).await, b"live still here");
    let st = listener.stats();
    // The newcomer was opened; it never proves, and goes at its timeout.
    assert_eq!(st.sessions_opened, opened + 1, "{st:?}");
}

/// Under a flood of forged openers from many source addresses at full
/// loopback speed, a real client with the default configuration connects
/// and gets its echo within 5 s: the flood holds at most the session cap
/// (its unproven sessions are evicted for newcomers, and a real client's
/// retransmitted opener evicts at once), and never the accept backlog,
/// which only sessions whose peers proved they receive join, so `accept`
/// returns the real client and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_forged_openers_does_not_lock_out_a_real_client() {
    let _turn = HEAVY.lock().await;
    let config = Config::builder().build().unwrap();
    let (listener, addr, accepted) = counting_echo_listener(&config).await;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    // The flooder: a plain thread sending, as fast as it can, openers of a
    // new conv from a new source address each time (4,096 source IPs in
    // 127.1.0.0/20, a fresh port for every datagram), never answering.
    let flooder = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            // Forged openers, each a new conversation.
            let opener = |i: u32| push_conv(0x4000_0000 | i, 0, b"flood");
            spoof::flood_from_many(addr, &stop, &sent, Duration::from_secs(30), opener)
        })
    };
    // Let the flood fill the table first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = listener.stats();
    let started = Instant::now();
    // The client's session survives until its proof is read (admission
    // does not evict it sooner), so one connect gets in.
    let client = timeout(Duration::from_secs(10), async {
        let mut s = KcpStream::connect(addr, &config).await?;
        s.write_all(b"real client").await?;
        let mut back = [0u8; 11];
        s.read_exact(&mut back).await?;
        Ok::<_, std::io::Error>(back)
    })
    .await;
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    flooder.join().unwrap();
    let st = listener.stats();
    let accepted = accepted.load(Ordering::Relaxed);
    eprintln!(
        "flood: {} openers sent; listener opened {} sessions ({} before the client), evicted {}, \
         refused {} at the cap and {} at the backlog, live {}, accepted {accepted}; \
         client: {client:?} in {took:?}",
        sent.load(Ordering::Relaxed),
        st.sessions_opened,
        before.sessions_opened,
        st.evicted_unproven,
        st.refused_cap_datagrams,
        st.refused_backlog_datagrams,
        st.sessions_live,
    );
    let peak = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_owned)
        });
    eprintln!("flood: peak memory of the test process (listener, flooder, client): {peak:?}");
    let echoed = client.expect("the real client got in within 10 s");
    assert_eq!(&echoed.expect("the real client's echo"), b"real client");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(accepted, 1, "only the real client reached accept");
    assert_eq!(
        st.refused_backlog_datagrams, 0,
        "forged openers never fill the backlog"
    );
}
