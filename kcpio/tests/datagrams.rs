//! Unreliable datagrams beside the stream (kcp-go's out-of-band packets):
//! kcpio ↔ kcpio on loopback sockets, and against kcp-go v5.6.72 both ways
//! through the repository's Go peer (`testkit/interop/kcpgo-peer`, `--oob-echo` and
//! `--oob N`).
//!
//! Without Go the interop tests print `SKIPPED: ...` and pass;
//! `KCPIO_REQUIRE_GO=1` (set by `.ci/run`) makes a missing Go a failure.

mod sim;
use kcpio_testkit as support;

use std::future::poll_fn;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use kcpio::conn::{DATAGRAM_FEC_RECV_QUEUE_LEN, DATAGRAM_QUEUE_LEN};
use kcpio::{
    Config, ConnError, KcpListener, KcpStream, Key, Method, OwnedReadHalf, OwnedWriteHalf, Preset,
};
use sim::{Flow, Link, Sim, payload};
use support::gopeer::{self, GoServer, args};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::task::JoinHandle;

const TIMEOUT: Duration = Duration::from_secs(30);
/// Datagrams per interop run, sent 1 ms apart.
const COUNT: u32 = 200;
/// Bytes per datagram: sequence, time, pattern (the Go peer's message
/// format, at least 16).
const SIZE: usize = 100;

fn config(cipher: &str, fec: Option<(usize, usize)>) -> Config {
    let method = Method::from_name(cipher).expect("a kcptun cipher name");
    let mut b = Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(256, 256)
        .crypto(method, Key::passphrase("it's a secrect"));
    if let Some((d, p)) = fec {
        b = b.fec(d, p);
    }
    b.build().expect("valid config")
}

/// [`config`] with FEC 10/3 and kcpio's FEC datagram extension on.
fn config_ext(cipher: &str) -> Config {
    let method = Method::from_name(cipher).expect("a kcptun cipher name");
    Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(256, 256)
        .crypto(method, Key::passphrase("it's a secrect"))
        .fec(10, 3)
        .datagram_fec(true)
        .build()
        .expect("valid config")
}

/// The Go peer's payload pattern: byte `i` of the stream.
fn pattern(i: u64) -> u8 {
    ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8
}

/// Datagram `seq` in the Go peer's message format (sequence, 8 bytes of
/// time left zero here, the pattern at `seq * SIZE + 16`).
fn datagram(seq: u64) -> Vec<u8> {
    let mut d = vec![0u8; SIZE];
    d[..8].copy_from_slice(&seq.to_le_bytes());
    for (k, b) in d[16..].iter_mut().enumerate() {
        *b = pattern(seq * SIZE as u64 + 16 + k as u64);
    }
    d
}

/// The sequence number of an intact datagram, `None` for a damaged one.
fn check(d: &[u8]) -> Option<u64> {
    let seq = u64::from_le_bytes(d.get(..8)?.try_into().ok()?);
    (d.len() == SIZE && d[16..] == datagram(seq)[16..]).then_some(seq)
}

/// What a kcpio session's echo loop returned: stream bytes and datagrams.
enum Event {
    Stream(usize),
    Datagram(usize),
}

/// Echoes the stream and every datagram back on one session (one task,
/// polling both through `poll_read` and `poll_recv_datagram`).
async fn echo_session(mut stream: KcpStream) {
    let mut sbuf = vec![0u8; 64 * 1024];
    let mut dbuf = vec![0u8; 1500];
    loop {
        let event = poll_fn(|cx| {
            let mut d = ReadBuf::new(&mut dbuf);
            if let Poll::Ready(r) = stream.poll_recv_datagram(cx, &mut d) {
                return Poll::Ready(r.map(|()| Event::Datagram(d.filled().len())));
            }
            let mut s = ReadBuf::new(&mut sbuf);
            Pin::new(&mut stream)
                .poll_read(cx, &mut s)
                .map_ok(|()| Event::Stream(s.filled().len()))
        })
        .await;
        let ok = match event {
            Ok(Event::Stream(n)) => stream.write_all(&sbuf[..n]).await.is_ok(),
            Ok(Event::Datagram(n)) => stream.send_datagram(&dbuf[..n]).await.is_ok(),
            Err(_) => false,
        };
        if !ok {
            return;
        }
    }
}

/// A kcpio listener on `127.0.0.1:0` echoing streams and datagrams.
async fn echo_server(config: &Config) -> (SocketAddr, KcpListenerTask) {
    let listener = KcpListener::bind("127.0.0.1:0", config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut sessions = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            sessions.spawn(echo_session(stream));
        }
    });
    (addr, KcpListenerTask(task))
}

/// Aborts the accept loop (and so its sessions) on drop.
struct KcpListenerTask(JoinHandle<()>);

impl Drop for KcpListenerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Connects, proves the stream with a round trip (the server learns of the
/// session from stream data: a datagram never opens one), then sends `COUNT`
/// datagrams 1 ms apart and collects the echoes until 2 s after the last.
/// Returns the stream's halves and the distinct intact echoes.
async fn datagram_round(addr: SocketAddr, config: &Config) -> (OwnedReadHalf, OwnedWriteHalf, u32) {
    let (r, w) = connected(addr, config).await.into_split();
    let sender = tokio::spawn(async move {
        for seq in 0..u64::from(COUNT) {
            w.send_datagram(&datagram(seq)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        w
    });
    let mut seen = vec![false; COUNT as usize];
    let mut buf = vec![0u8; 1500];
    let mut got = 0;
    let mut deadline = None;
    loop {
        if deadline.is_none() && sender.is_finished() {
            deadline = Some(tokio::time::Instant::now() + Duration::from_secs(2));
        }
        let wait = deadline.map_or(Duration::from_millis(50), |d| {
            d.saturating_duration_since(tokio::time::Instant::now())
        });
        match tokio::time::timeout(wait, r.recv_datagram(&mut buf)).await {
            Ok(n) => {
                let n = n.unwrap();
                let seq = check(&buf[..n]).expect("an intact echo");
                if !std::mem::replace(&mut seen[seq as usize], true) {
                    got += 1;
                }
                if got == COUNT {
                    break;
                }
            }
            Err(_) if deadline.is_some() => break,
            Err(_) => {}
        }
    }
    let w = sender.await.unwrap();
    (r, w, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_datagrams_beside_the_stream() {
    let config = config("aes-128", Some((10, 3)));
    let (addr, _server) = echo_server(&config).await;
    let (mut r, mut w, got) = datagram_round(addr, &config).await;
    assert!(got >= COUNT * 9 / 10, "{got} of {COUNT} echoed on loopback");
    println!("kcpio -> kcpio -> kcpio: {got} of {COUNT} back");
    let st = r.stats();
    assert_eq!(st.oob_sent, u64::from(COUNT));
    assert!(st.oob_received >= u64::from(got));
    // The stream still works, exactly, with datagrams in between.
    let data: Vec<u8> = (0..200_000u64).map(pattern).collect();
    let writer = tokio::spawn(async move {
        for chunk in data.chunks(10_000) {
            w.send_datagram(b"between").await.unwrap();
            w.write_all(chunk).await.unwrap();
        }
        w
    });
    let mut back = vec![0u8; 200_000];
    tokio::time::timeout(TIMEOUT, r.read_exact(&mut back))
        .await
        .expect("stream echo in time")
        .unwrap();
    let _w = writer.await.unwrap();
    assert!(
        back.iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(i as u64)),
        "the stream is exact"
    );
    assert_eq!(r.stats().input_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagram_errors_at_the_tokio_surface() {
    // FEC off: Unsupported, with the ConnError inside.
    let plain = config("aes-128", None);
    let (addr, _server) = echo_server(&plain).await;
    let stream = KcpStream::connect(addr, &plain).await.unwrap();
    assert_eq!(stream.max_datagram_payload(), 0);
    let e = stream.send_datagram(b"x").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    let inner = e.get_ref().and_then(|e| e.downcast_ref::<ConnError>());
    assert_eq!(inner, Some(&ConnError::DatagramsUnsupported));
    let e = stream.recv_datagram(&mut [0; 64]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);

    // FEC on: the documented maximum, then InvalidInput.
    let fec = config("aes-128", Some((10, 3)));
    let stream = KcpStream::connect(addr, &fec).await.unwrap();
    let max = stream.max_datagram_payload();
    assert_eq!(max, 1400 - 20 - 8 - 4);
    stream.send_datagram(&vec![1; max]).await.unwrap();
    let e = stream.send_datagram(&vec![1; max + 1]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    // try_send never waits: a burst beyond the queue meets WouldBlock or
    // fits because the driver drained in between; never anything else.
    for _ in 0..4 * DATAGRAM_QUEUE_LEN {
        match stream.try_send_datagram(&[7; 16]) {
            Ok(()) => {}
            Err(e) => assert_eq!(e.kind(), ErrorKind::WouldBlock),
        }
    }
    let (r, w) = stream.into_split();
    assert_eq!(w.max_datagram_payload(), max);
    // Nothing comes from a server that learned of no session (datagrams
    // never open one): recv_datagram waits.
    let mut buf = [0u8; 16];
    assert!(
        tokio::time::timeout(Duration::from_millis(200), r.recv_datagram(&mut buf))
            .await
            .is_err()
    );
}

/// `send_datagram` waits while the send queue is full and is woken when the
/// driver drained it: on a current-thread runtime a tight loop fills the
/// queue (64) before the driver runs at all.
#[tokio::test]
async fn send_datagram_waits_for_room() {
    let config = config("null", Some((3, 1)));
    let (addr, _server) = echo_server(&config).await;
    let stream = KcpStream::connect(addr, &config).await.unwrap();
    let burst = 16 * DATAGRAM_QUEUE_LEN as u64;
    tokio::time::timeout(TIMEOUT, async {
        for i in 0..burst {
            stream.send_datagram(&i.to_le_bytes()).await.unwrap();
        }
    })
    .await
    .expect("every send completes");
    // The driver has not run since the last send: the queue is (nearly)
    // full, and try_send_datagram says so instead of waiting.
    let mut queued = 0;
    let e = loop {
        match stream.try_send_datagram(b"full?") {
            Ok(()) => queued += 1,
            Err(e) => break e,
        }
        assert!(queued <= DATAGRAM_QUEUE_LEN as u64, "the queue is bounded");
    };
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let st = stream.stats();
    assert_eq!(st.oob_sent, burst + queued, "all went out");
}

/// On the simulator (the shipped `Conn` pipeline, 10% loss, duplication,
/// reordering, jitter): both nodes send a datagram every 5 ms while node 0
/// streams 300 KB. The stream arrives exact and in order; datagrams arrive
/// intact, about 90% of them, none retransmitted (at most the link's
/// duplicates twice), and none ever reaches the ARQ.
#[test]
fn simulated_datagrams_never_disturb_the_stream() {
    let config = Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .window(256, 256)
        .crypto(Method::Aes128, Key::passphrase("datagrams"))
        .fec(10, 3)
        .build()
        .unwrap();
    let mut sim = Sim::pair(&config, Link::lossy(0.10, 1500), 7, 0, 0);
    let data = payload(7, 300_000);
    let (mut written, mut read) = (0, Vec::with_capacity(data.len()));
    let mut next_dgram = 0u64;
    let mut sent = [0u32; 2];
    let mut got: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    let mut buf = vec![0u8; 64 * 1024];
    const DATAGRAMS_UNTIL: u64 = 20_000;
    sim.drive(2_000_000, |sim| {
        if written < data.len()
            && let Ok(n) = sim.conn(0).write(&data[written..])
        {
            written += n;
        }
        while let Ok(n) = sim.conn(1).read(&mut buf) {
            read.extend_from_slice(&buf[..n]);
        }
        let now = sim.elapsed_ms();
        if now >= next_dgram && now < DATAGRAMS_UNTIL {
            next_dgram = now + 5;
            for (side, count) in sent.iter_mut().enumerate() {
                let seq = *count;
                let d = [seq.to_le_bytes(), (!seq).to_le_bytes(), [side as u8; 4]].concat();
                sim.conn(side).send_datagram(&d).unwrap();
                *count += 1;
            }
        }
        for (side, got) in got.iter_mut().enumerate() {
            while let Ok(n) = sim.conn(side).recv_datagram(&mut buf) {
                assert_eq!(n, 12, "whole");
                let seq = u32::from_le_bytes(buf[..4].try_into().unwrap());
                assert_eq!(!seq, u32::from_le_bytes(buf[4..8].try_into().unwrap()));
                assert_eq!(buf[8..12], [1 - side as u8; 4], "from the peer");
                got.push(seq);
            }
        }
        if now >= DATAGRAMS_UNTIL + 1_000 && read.len() == data.len() {
            Flow::Done
        } else if now < DATAGRAMS_UNTIL {
            Flow::WakeAt(next_dgram)
        } else {
            Flow::WakeAt(DATAGRAMS_UNTIL + 1_000)
        }
    });
    assert!(read == data, "the stream is exact and in order");
    for side in 0..2 {
        let from = 1 - side;
        let mut seqs = got[side].clone();
        seqs.sort_unstable();
        let total = seqs.len();
        seqs.dedup();
        let (n, dups) = (seqs.len() as u32, total - seqs.len());
        assert!(n < sent[from], "lost ones stay lost: {n} of {}", sent[from]);
        assert!(n * 10 > sent[from] * 8, "{n} of {}", sent[from]);
        assert!(
            dups * 20 < total,
            "{dups} duplicates: the link's, not resends"
        );
        let st = sim.nodes[side].conn.stats();
        assert_eq!(st.input_errors, 0, "no datagram reached the ARQ");
        assert_eq!(st.oob_sent, u64::from(sent[side]));
        assert_eq!(st.oob_dropped, 0, "read as they came");
    }
}

// ---------------------------------------------------------------------------
// kcp-go
// ---------------------------------------------------------------------------

/// The Go side: fast3, stream mode, 256 windows, the cipher, FEC.
fn go_flags(cipher: &str, fec: (usize, usize)) -> Vec<String> {
    let mut v = gopeer::fast3_stream_flags(cipher, fec);
    v.extend(args(&["--sndwnd", "256", "--rcvwnd", "256"]));
    v
}

/// kcpio sends, kcp-go's `SetOOBHandler` receives and echoes with
/// `SendOOB`, kcpio's `recv_datagram` receives: under a CFB cipher and
/// under AES-GCM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_datagrams_to_kcpgo_oob_handler_and_back() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    // The last: kcpio's FEC datagram extension on, which kcp-go never
    // answers, so its datagrams stay kcp-go's OOB packets.
    for (cipher, ext) in [
        ("aes-128", false),
        ("aes-128-gcm", false),
        ("aes-128-gcm", true),
    ] {
        let mut flags = go_flags(cipher, (10, 3));
        flags.extend(args(&["--oob-echo", "--idle", "4s", "--max-sessions", "1"]));
        let server = GoServer::spawn(&bin, "echo-server", &flags).await;
        let config = if ext {
            config_ext(cipher)
        } else {
            config(cipher, Some((10, 3)))
        };
        let (r, w, got) = datagram_round(server.addr(), &config).await;
        let st = r.stats();
        drop((r, w));
        assert!(
            got >= COUNT * 9 / 10,
            "{cipher}: {got} of {COUNT} came back from kcp-go; stats {st:?}; log {:?}",
            server.log()
        );
        assert_eq!(st.oob_sent, u64::from(COUNT));
        assert_eq!(st.input_errors, 0, "{cipher}: {st:?}");
        assert!(!st.datagram_fec.negotiated, "kcp-go never offers it");
        assert_eq!(st.datagram_fec.data_shards_out, 0, "{st:?}");
        // kcp-go's handler counted them: its session-closed line (after
        // its 4 s idle time) says how many it received and echoed.
        let mut closed = None;
        for _ in 0..200 {
            closed = server
                .log()
                .into_iter()
                .find(|l| l.starts_with("session closed"));
            if closed.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let line = closed.unwrap_or_else(|| panic!("{cipher}: no session closed line"));
        let oob_in = field(&line, "oob_in=").expect("oob_in in the closed line");
        let oob_out = field(&line, "oob_out=").expect("oob_out in the closed line");
        assert!(
            oob_in >= u64::from(got) && oob_in <= u64::from(COUNT),
            "{cipher}: {line}"
        );
        assert!(oob_out >= u64::from(got), "{cipher}: {line}");
        println!("{cipher}: kcpio -> kcp-go -> kcpio: {got} of {COUNT} back; kcp-go: {line}");
        assert!(server.wait(Duration::from_secs(20)).await.is_some());
    }
}

/// kcp-go's `SendOOB` → kcpio's `recv_datagram`, echoed by kcpio's
/// `send_datagram` → kcp-go's `SetOOBHandler`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcpgo_oob_to_rust_recv_datagram_and_back() {
    let Some(bin) = gopeer::binary() else {
        return;
    };
    // The last: a kcpio listener with the FEC datagram extension on
    // answers a kcp-go client as kcp-go would (plain OOB).
    for (cipher, ext) in [("salsa20", false), ("null", false), ("null", true)] {
        let server_config = if ext {
            config_ext(cipher)
        } else {
            config(cipher, Some((10, 3)))
        };
        let (addr, _server) = echo_server(&server_config).await;
        let mut client = go_flags(cipher, (10, 3));
        client.extend(args(&[
            "--addr",
            &addr.to_string(),
            "--bytes",
            "100000",
            "--oob",
            &COUNT.to_string(),
            "--size",
            &SIZE.to_string(),
        ]));
        let run = gopeer::run_client(&bin, &client, TIMEOUT * 2).await;
        assert!(run.passed(), "{cipher}: {run:?}");
        assert_eq!(run.number("oob_sent"), Some(f64::from(COUNT)), "{run:?}");
        let got = run.number("oob_received").unwrap_or(0.0);
        assert!(
            got >= f64::from(COUNT * 9 / 10),
            "{cipher}: {got} of {COUNT} came back from kcpio: {run:?}"
        );
        assert_eq!(run.number("oob_bad"), Some(0.0));
        println!("{cipher}: kcp-go -> kcpio -> kcp-go: {got} of {COUNT} back");
        let max = if cipher == "null" { 1388.0 } else { 1368.0 };
        assert_eq!(run.number("oob_max"), Some(max), "kcp-go's GetOOBMaxSize");
    }
}

/// The number after `key` in a `key=value` log line.
fn field(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// `try_recv_datagram` takes what already arrived without waiting and
/// says `WouldBlock` once the queue is empty: a burst echoed back is
/// collected by one awaited receive and then drained by `try_recv`s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_recv_datagram_drains_what_arrived_then_says_would_block() {
    let config = config_ext("aes-128-gcm");
    let (addr, _server) = echo_server(&config).await;
    let stream = connected(addr, &config).await;
    let mut buf = vec![0u8; stream.max_datagram_payload()];
    let e = stream.try_recv_datagram(&mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock, "nothing queued yet");
    const BURST: u8 = 16;
    for i in 0..BURST {
        stream.send_datagram(&[i; 32]).await.unwrap();
    }
    let mut seen = [false; BURST as usize];
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let (mut awaited, mut drained) = (0, 0);
    while seen.iter().any(|s| !s) && tokio::time::Instant::now() < deadline {
        let Ok(first) = tokio::time::timeout_at(deadline, stream.recv_datagram(&mut buf)).await
        else {
            break;
        };
        let mut n = first.unwrap();
        awaited += 1;
        // Bounded: the queue holds at most the burst.
        for _ in 0..=BURST {
            assert_eq!(n, 32);
            seen[usize::from(buf[0])] = true;
            match stream.try_recv_datagram(&mut buf) {
                Ok(m) => {
                    n = m;
                    drained += 1;
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::WouldBlock);
                    break;
                }
            }
        }
    }
    assert!(
        seen.iter().all(|&s| s),
        "every datagram of the burst echoed: {seen:?}"
    );
    assert!(
        awaited + drained >= u32::from(BURST),
        "{awaited} awaited, {drained} drained"
    );
}

/// Connects to `addr` and proves the stream with a round trip (the server
/// learns of a session from stream data).
async fn connected(addr: SocketAddr, config: &Config) -> KcpStream {
    let mut stream = KcpStream::connect(addr, config).await.unwrap();
    stream.write_all(b"hello").await.unwrap();
    let mut hello = [0u8; 5];
    tokio::time::timeout(TIMEOUT, stream.read_exact(&mut hello))
        .await
        .expect("the stream's echo")
        .unwrap();
    assert_eq!(&hello, b"hello");
    stream
}

/// What a test sink saw: each call's datagrams, and the thread it ran on.
#[derive(Default)]
struct Sunk {
    calls: Vec<Vec<Vec<u8>>>,
    threads: Vec<std::thread::ThreadId>,
}

impl Sunk {
    fn datagrams(&self) -> Vec<Vec<u8>> {
        self.calls.iter().flatten().cloned().collect()
    }
}

/// Installs a sink on `stream` that records into the returned table.
fn record_sink(stream: &KcpStream) -> std::sync::Arc<std::sync::Mutex<Sunk>> {
    let sunk = std::sync::Arc::new(std::sync::Mutex::new(Sunk::default()));
    let into = sunk.clone();
    stream.set_datagram_sink(move |batch| {
        assert!(!batch.is_empty(), "the sink is called with datagrams only");
        assert!(batch.len() <= DATAGRAM_FEC_RECV_QUEUE_LEN.max(DATAGRAM_QUEUE_LEN));
        let mut s = into.lock().unwrap();
        s.calls.push(batch.iter().map(|d| d.to_vec()).collect());
        s.threads.push(std::thread::current().id());
    });
    sunk
}

/// Waits up to [`TIMEOUT`] for `sunk` to hold `n` datagrams.
async fn sunk_at_least(sunk: &std::sync::Mutex<Sunk>, n: usize) -> Vec<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let got = sunk.lock().unwrap().datagrams();
        if got.len() >= n || tokio::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A datagram sink gets every echoed datagram, in order, called from the
/// driver's task (on a current-thread runtime: the one thread), while
/// `recv_datagram` gets none; cleared, the datagrams go to `recv_datagram`
/// again. Both wire forms: kcp-go OOB packets and FEC datagrams.
#[tokio::test]
async fn a_datagram_sink_takes_every_datagram_in_order_instead_of_recv() {
    for config in [config("aes-128", Some((10, 3))), config_ext("aes-128-gcm")] {
        let (addr, _server) = echo_server(&config).await;
        let stream = connected(addr, &config).await;
        let sunk = record_sink(&stream);
        const N: u64 = 300;
        for seq in 0..N {
            stream.send_datagram(&datagram(seq)).await.unwrap();
            if seq % 16 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let got = sunk_at_least(&sunk, N as usize).await;
        let seqs: Vec<u64> = got.iter().map(|d| check(d).expect("intact")).collect();
        assert_eq!(seqs, (0..N).collect::<Vec<_>>(), "all of them, in order");
        let me = std::thread::current().id();
        assert!(sunk.lock().unwrap().threads.iter().all(|&t| t == me));
        // Nothing reached recv_datagram meanwhile.
        let mut buf = vec![0u8; 1500];
        let e = stream.try_recv_datagram(&mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WouldBlock);

        stream.clear_datagram_sink();
        stream.send_datagram(&datagram(N)).await.unwrap();
        let n = tokio::time::timeout(TIMEOUT, stream.recv_datagram(&mut buf))
            .await
            .expect("recv_datagram again once the sink is gone")
            .unwrap();
        assert_eq!(check(&buf[..n]), Some(N));
        assert_eq!(sunk.lock().unwrap().datagrams().len(), N as usize);
    }
}

/// Datagrams that were queued for `recv_datagram` before the sink was
/// installed go to the sink, in order, at the driver's next look at the
/// session (no new input needed).
#[tokio::test]
async fn a_datagram_sink_takes_what_was_queued_before_it() {
    let config = config_ext("aes-128-gcm");
    let (addr, _server) = echo_server(&config).await;
    let stream = connected(addr, &config).await;
    for seq in 0..8 {
        stream.send_datagram(&datagram(seq)).await.unwrap();
    }
    // The first echo is awaited; the other seven queue meanwhile.
    let mut buf = vec![0u8; 1500];
    let n = tokio::time::timeout(TIMEOUT, stream.recv_datagram(&mut buf))
        .await
        .expect("the first echo")
        .unwrap();
    assert_eq!(check(&buf[..n]), Some(0));
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Nothing arrives after this: the seven queued echoes reach the sink
    // only through the driver's look at the session that installing it
    // asks for.
    let sunk = record_sink(&stream);
    let got = sunk_at_least(&sunk, 7).await;
    let seqs: Vec<u64> = got.iter().map(|d| check(d).expect("intact")).collect();
    assert_eq!(seqs, (1..8).collect::<Vec<_>>());
}

/// More datagrams than a kcp-go OOB queue holds (the FEC datagram
/// extension queues up to `DATAGRAM_FEC_RECV_QUEUE_LEN`) go to a sink
/// installed after they queued in one call: one take empties the queue,
/// so none waits for input that may never come.
#[tokio::test]
async fn a_datagram_sink_takes_a_queue_longer_than_kcp_go_s_in_one_call() {
    let config = config_ext("aes-128-gcm");
    let (addr, _server) = echo_server(&config).await;
    let stream = connected(addr, &config).await;
    const N: u64 = 3 * DATAGRAM_QUEUE_LEN as u64 / 2;
    const _: () = assert!(N as usize <= DATAGRAM_FEC_RECV_QUEUE_LEN);
    for seq in 0..N {
        stream.send_datagram(&datagram(seq)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sunk = record_sink(&stream);
    let got = sunk_at_least(&sunk, N as usize).await;
    let seqs: Vec<u64> = got.iter().map(|d| check(d).expect("intact")).collect();
    assert_eq!(seqs, (0..N).collect::<Vec<_>>());
    let calls: Vec<usize> = sunk.lock().unwrap().calls.iter().map(Vec::len).collect();
    assert_eq!(calls, [N as usize], "one call with the whole queue");
}

/// A sink may call its own session: a server whose sink echoes each
/// datagram with `try_send_datagram` (the relay's shape, with a weak
/// handle) answers every datagram, and its task is woken for none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datagram_sink_may_send_on_its_own_session() {
    let config = config_ext("aes-128-gcm");
    let listener = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let stream = std::sync::Arc::new({
            let mut hello = [0u8; 5];
            stream.read_exact(&mut hello).await.unwrap();
            stream.write_all(&hello).await.unwrap();
            stream
        });
        let me = std::sync::Arc::downgrade(&stream);
        stream.set_datagram_sink(move |batch| {
            let Some(me) = me.upgrade() else { return };
            for d in batch {
                // A full queue drops, as a relay's full socket does.
                let _ = me.try_send_datagram(d);
            }
        });
        // The task waits only for the end: recv_datagram gets nothing.
        let mut buf = [0u8; 64];
        let r = tokio::time::timeout(Duration::from_secs(3), stream.recv_datagram(&mut buf)).await;
        assert!(
            r.is_err(),
            "recv_datagram got {r:?} while the sink was installed"
        );
        stream.clear_datagram_sink();
    });
    let stream = connected(addr, &config).await;
    let sunk = record_sink(&stream);
    const N: u64 = 50;
    for seq in 0..N {
        stream.send_datagram(&datagram(seq)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let got = sunk_at_least(&sunk, N as usize).await;
    let seqs: Vec<u64> = got.iter().map(|d| check(d).expect("intact")).collect();
    assert_eq!(seqs, (0..N).collect::<Vec<_>>());
    server.await.unwrap();
}
