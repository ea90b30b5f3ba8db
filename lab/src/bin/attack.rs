//! The hostile-peer attacks of the Security section, as a tool to run
//! against any KCP server on loopback (a kcpio or a kcp-go echo server,
//! `lab/src/bin/peer.rs` or `testkit/interop/kcpgo-peer`), so both are measured the
//! same way (`lab/scripts/hostile-vs-kcpgo.sh` runs them side by side).
//!
//! ```text
//! attack reflect  ADDR CRYPT PRESET SECS   one 1,400-byte request from a silent address
//! attack replay   ADDR CRYPT N             one captured opener replayed from N addresses
//! attack takeover ADDR                     forged datagrams from a live session's address (null crypto)
//! attack flood    ADDR CRYPT SECS          forged openers from fresh addresses; a real client connects meanwhile
//! attack late     ADDR CRYPT IDLE AT,.. [LOG]  a conversation, silence, then its late datagrams
//! attack streams  ADDR CRYPT N PACE HOLD [nocomp] [v2] [sessions=S] [from=IP]  smux streams on S sessions (flood, slow readers)
//! attack migrate  ADDR CRYPT SECS          a live session's captured datagrams replayed from a third address
//! ```
//!
//! `migrate`: a real client echoes through a local forwarder that keeps a
//! copy of every datagram it sends; after a second of traffic, each copy is
//! replayed twice from another loopback address (127.0.0.3) while the
//! client goes on echoing for SECS seconds. It prints the datagrams and
//! bytes replayed, the bytes the server sent to the replaying address (a
//! migrating server must send it nothing: the replays are not fresh; at
//! most 3x if it probed) and whether the client's echo still worked at the
//! end (a session moved to the replayer would stall it).
//!
//! `streams` is for a tunnel server (kcpio-tunnel or kcptun, mode fast,
//! FEC 10/3, default key) whose target sends a download on each
//! connection: one session opens N streams, PACE per 0.6 s (0: all at
//! once, a stream-open flood), and never reads them (slow readers); after
//! HOLD seconds a second session's stream downloads what the target sends
//! for at most 20 s (from 127.0.0.2: another client, where a server
//! shares its slots per source address). Then the attacker leaves (a FIN
//! on every stream, its sessions dropped a second later; `left_at_ms` is
//! when, in Unix milliseconds) and, 3 s later, a third session downloads the same way
//! (`after_bytes`). It prints the streams the server ended (FIN) while
//! held and the other sessions' bytes; the server's memory and
//! descriptors are read beside it (`lab/scripts/hostile-streams.sh`), and
//! a server pointed at a target that never accepts shows whether its dials
//! time out and its slots come back. `nocomp` for a server run with
//! `--nocomp`, `v2` for `--smuxver 2`; `sessions=S` spreads the N streams
//! over S attacking sessions (many sessions x streams); `from=IP` binds
//! them there (default 127.0.0.1), so a tunnel client on 127.0.0.1 can be
//! another client of the server.
//!
//! `late`: a client echoes once, then falls silent while the server's
//! application ends the session (after IDLE seconds without input, as both
//! echo servers do). At the first `AT` seconds after that end, the client
//! writes again, as one whose path went dark would, and runs for 2 s
//! (retransmitting, answering what comes back); at each later `AT` the
//! datagrams it sent then arrive again (captured). For each point: the
//! datagrams sent, the bytes that came back, and, with the server's log
//! file `LOG`, the sessions it opened (its `session open` lines).
//!
//! Each prints one JSON line. The key is the peers' default passphrase.
//! Loopback only.

use kcpio_testkit::spoof;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kcpio::arq::segment::{Command, Header, Segments};
use kcpio::crypto::PacketCrypto;
use kcpio::mux::{Mux, MuxConfig, MuxStream, Snappy, Version};
use kcpio::{Config, ConfigBuilder, Conn, KcpSocket, KcpStream, Key, Method, Preset};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout, timeout_at};

const KEY: &str = "it's a secrect";

fn builder(crypt: &str, preset: Preset) -> ConfigBuilder {
    let method = Method::from_name(crypt).expect("a kcptun cipher name");
    Config::builder()
        .crypto(method, Key::passphrase(KEY))
        .preset(preset)
}

fn config(crypt: &str, preset: Preset) -> Config {
    builder(crypt, preset)
        .build()
        .expect("a valid configuration")
}

/// The first datagram a client with `config` sends after writing `data`,
/// sealed with a fresh nonce.
fn opener(config: &Config, conv: u32, data: &[u8], nonce: u64) -> Vec<u8> {
    let mut c = Conn::new(conv, config).expect("a session");
    c.write(data).expect("room for the request");
    c.handle_timeout(Duration::ZERO);
    let mut slot = vec![0u8; c.max_datagram()];
    let t = c
        .poll_transmit(Duration::ZERO, &mut slot)
        .expect("a datagram");
    seal(config.packet_crypto(), &mut slot, t.len, nonce)
}

/// The datagram `Conn::poll_transmit` left in `slot` (`len` plaintext
/// bytes), sealed with a nonce derived from `nonce`.
fn seal(crypto: &PacketCrypto, slot: &mut [u8], len: usize, nonce: u64) -> Vec<u8> {
    let mut n16 = [0u8; 16];
    n16[..8].copy_from_slice(&nonce.to_le_bytes());
    n16[8..].copy_from_slice(&(!nonce).to_le_bytes());
    let n = crypto
        .seal(slot, len, &n16[..crypto.nonce_len()])
        .expect("sealed");
    slot[..n].to_vec()
}

/// Bytes received on `sock` until `end`.
async fn drain(sock: &UdpSocket, end: Instant) -> usize {
    let mut buf = [0u8; 2048];
    let mut got = 0;
    while let Ok(Ok(n)) = timeout_at(end, sock.recv(&mut buf)).await {
        got += n;
    }
    got
}

async fn reflect(addr: SocketAddr, crypt: &str, preset: &str, secs: u64) {
    let p = Preset::from_name(preset).expect("a preset name");
    let request = opener(&config(crypt, p), 0x5eed_0001, &[0x5a; 1400], 1);
    let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    sock.send_to(&request, addr).await.expect("send");
    let got = drain(&sock, Instant::now() + Duration::from_secs(secs)).await;
    println!(
        "{{\"attack\":\"reflect\",\"preset\":\"{preset}\",\"crypt\":\"{crypt}\",\"sent\":{},\"received\":{got},\"ratio\":{:.2}}}",
        request.len(),
        got as f64 / request.len() as f64
    );
}

async fn replay(addr: SocketAddr, crypt: &str, n: usize) {
    let captured = opener(&config(crypt, Preset::Default), 0x5eed_0002, b"hello", 2);
    let first = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    first.send_to(&captured, addr).await.expect("send");
    let mut socks = Vec::new();
    for _ in 0..n {
        let s = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        s.send_to(&captured, addr).await.expect("send");
        socks.push(s);
    }
    let end = Instant::now() + Duration::from_secs(1);
    let (mut answered, mut bytes) = (0, 0);
    for s in &socks {
        let got = drain(s, end).await;
        if got > 0 {
            answered += 1;
            bytes += got;
        }
    }
    println!(
        "{{\"attack\":\"replay\",\"crypt\":\"{crypt}\",\"replays\":{n},\"answered\":{answered},\"bytes_to_replayers\":{bytes}}}"
    );
}

fn push(conv: u32, sn: u32, una: u32, payload: &[u8]) -> Vec<u8> {
    let h = Header {
        conv,
        cmd: Command::Push as u8,
        wnd: 128,
        sn,
        una,
        len: payload.len() as u32,
        ..Header::default()
    };
    let mut out = vec![0u8; 24 + payload.len()];
    h.encode_at(&mut out, 0, payload).expect("fits");
    out
}

/// Echoed payload bytes of `conv` within `wait`, each segment acknowledged.
async fn echoed(sock: &UdpSocket, conv: u32, wait: Duration) -> Vec<u8> {
    let mut buf = [0u8; 2048];
    let mut got = std::collections::BTreeMap::new();
    let end = Instant::now() + wait;
    while let Ok(Ok(n)) = timeout_at(end, sock.recv(&mut buf)).await {
        for seg in Segments::new(&buf[..n]).flatten() {
            if seg.conv() != conv || seg.command() != Some(Command::Push) {
                continue;
            }
            got.insert(seg.sn(), seg.payload().to_vec());
            let una = (0u32..).take_while(|k| got.contains_key(k)).count() as u32;
            let ack = spoof::raw_ack(conv, seg.ts(), seg.sn(), una);
            let _ = sock.send(&ack).await;
        }
    }
    got.values().flatten().copied().collect()
}

async fn takeover(addr: SocketAddr) {
    const CONV: u32 = 0x5eed_0003;
    let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    sock.connect(addr).await.expect("connect");
    sock.send(&push(CONV, 0, 0, b"live")).await.expect("send");
    let before = echoed(&sock, CONV, Duration::from_millis(500)).await;
    // The forgeries: a 24-byte non-KCP datagram of another conv at sn 0,
    // and a PUSH of another conv at sn 0 from inside a conversation.
    let mut junk = push(0x7777, 0, 0, b"");
    junk[4] = 0xee;
    sock.send(&junk).await.expect("send");
    sock.send(&push(0x7778, 0, 3, b"x")).await.expect("send");
    tokio::time::sleep(Duration::from_millis(100)).await;
    sock.send(&push(CONV, 1, 0, b" still here"))
        .await
        .expect("send");
    let after = echoed(&sock, CONV, Duration::from_millis(1000)).await;
    println!(
        "{{\"attack\":\"takeover\",\"echo_before\":{},\"survived\":{}}}",
        before == b"live",
        after.ends_with(b" still here")
    );
}

async fn flood(addr: SocketAddr, crypt: &str, secs: u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let cfg = config(crypt, Preset::Default);
    let thread = {
        let (stop, sent, cfg) = (stop.clone(), sent.clone(), cfg.clone());
        std::thread::spawn(move || {
            spoof::flood_from_many(addr, &stop, &sent, Duration::from_secs(120), |i| {
                opener(&cfg, 0x4000_0000 | i, b"flood", u64::from(i))
            })
        })
    };
    tokio::time::sleep(Duration::from_secs(secs)).await;
    // The real client waits as long as the measurement does (20 s), not
    // the default connect timeout (5 s), so a slow admission is timed.
    let client_cfg = builder(crypt, Preset::Default)
        .connect_timeout(Duration::from_secs(20))
        .build()
        .expect("a valid configuration");
    let started = Instant::now();
    let client = timeout(Duration::from_secs(20), async {
        let mut s = KcpStream::connect(addr, &client_cfg).await?;
        s.write_all(b"real client").await?;
        let mut back = [0u8; 11];
        s.read_exact(&mut back).await?;
        Ok::<_, std::io::Error>(back == *b"real client")
    })
    .await;
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = thread.join();
    let ok = matches!(client, Ok(Ok(true)));
    println!(
        "{{\"attack\":\"flood\",\"crypt\":\"{crypt}\",\"openers\":{},\"client_ok\":{ok},\"client_ms\":{:.1}}}",
        sent.load(Ordering::Relaxed),
        took.as_secs_f64() * 1000.0
    );
}

/// A client `Conn` on a connected socket, run by wall time.
struct Client {
    conn: Conn,
    config: Config,
    sock: UdpSocket,
    epoch: Instant,
    nonce: u64,
}

impl Client {
    /// Runs until `end` or until `done` says so; returns the bytes that
    /// arrived, and keeps every datagram sent in `sent`.
    async fn run(
        &mut self,
        end: Instant,
        sent: &mut Vec<Vec<u8>>,
        mut done: impl FnMut(&mut Conn) -> bool,
    ) -> usize {
        let mut slot = vec![0u8; self.conn.max_datagram()];
        let mut buf = [0u8; 2048];
        let mut got = 0;
        // Bounded by `end` and by a count (each round waits or receives).
        for _ in 0..100_000 {
            let now = self.epoch.elapsed();
            self.conn.handle_timeout(now);
            while let Some(t) = self.conn.poll_transmit(now, &mut slot) {
                self.nonce += 1;
                let d = seal(self.config.packet_crypto(), &mut slot, t.len, self.nonce);
                let _ = self.sock.send(&d).await;
                sent.push(d);
            }
            if done(&mut self.conn) || Instant::now() >= end {
                break;
            }
            let wake = self
                .conn
                .poll_timeout()
                .map_or(end, |t| (self.epoch + t).min(end))
                .max(Instant::now() + Duration::from_millis(1));
            if let Ok(Ok(n)) = timeout_at(wake, self.sock.recv(&mut buf)).await {
                got += n;
                if let Ok(r) = self.config.packet_crypto().open(&mut buf[..n]) {
                    let _ = self.conn.handle_packet(self.epoch.elapsed(), &buf[r]);
                }
            }
        }
        got
    }
}

/// `session open` lines in the server's log so far.
fn sessions_opened(log: Option<&str>) -> Option<usize> {
    let text = std::fs::read_to_string(log?).ok()?;
    Some(text.lines().filter(|l| l.contains("session open")).count())
}

async fn late(addr: SocketAddr, crypt: &str, idle: u64, at: &[u64], log: Option<&str>) {
    let cfg = config(crypt, Preset::Default);
    let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    sock.connect(addr).await.expect("connect");
    let mut c = Client {
        conn: Conn::new(0x5eed_0004, &cfg).expect("a session"),
        config: cfg.clone(),
        sock,
        epoch: Instant::now(),
        nonce: 4 << 32,
    };
    // The conversation: one echo, acknowledged (the run goes on for a
    // second so the client's acknowledgement is flushed).
    c.conn.write(b"hello").expect("room");
    let mut back = Vec::new();
    let mut sent = Vec::new();
    c.run(Instant::now() + Duration::from_secs(1), &mut sent, |conn| {
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = conn.read(&mut buf) {
            back.extend_from_slice(&buf[..n]);
        }
        false
    })
    .await;
    let echo_ok = back == b"hello";
    // Silence: the server ends the session `idle` after its last input.
    let ended = Instant::now() + Duration::from_secs(idle);
    let mut captured = Vec::new();
    let mut points = Vec::new();
    for (i, &secs) in at.iter().enumerate() {
        tokio::time::sleep_until(ended + Duration::from_secs(secs)).await;
        let before = sessions_opened(log);
        let end = Instant::now() + Duration::from_secs(2);
        let (datagrams, bytes_back) = if i == 0 {
            c.conn.write(b"late").expect("room");
            let got = c.run(end, &mut captured, |_| false).await;
            (captured.len(), got)
        } else {
            for d in &captured {
                let _ = c.sock.send(d).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (captured.len(), drain(&c.sock, end).await)
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let opened = match (before, sessions_opened(log)) {
            (Some(a), Some(b)) => (b - a).to_string(),
            _ => "null".into(),
        };
        points.push(format!(
            "{{\"at_s\":{secs},\"datagrams\":{datagrams},\"bytes_back\":{bytes_back},\"sessions_opened\":{opened}}}"
        ));
    }
    println!(
        "{{\"attack\":\"late\",\"crypt\":\"{crypt}\",\"idle_s\":{idle},\"echo_ok\":{echo_ok},\"points\":[{}]}}",
        points.join(",")
    );
}

/// A kcptun client's session with the tunnel defaults (mode fast, FEC 10/3),
/// from `from` (a server may share its slots per source address).
async fn tunnel_session(addr: SocketAddr, from: &str, crypt: &str, nocomp: bool, v2: bool) -> Mux {
    let cfg = builder(crypt, Preset::from_name("fast").expect("the fast preset"))
        .fec(10, 3)
        .build()
        .expect("a valid configuration");
    let mux_cfg = MuxConfig::builder()
        .version(if v2 { Version::V2 } else { Version::V1 })
        .build()
        .expect("a valid mux configuration");
    let from = from.parse().expect("a loopback address");
    let kcp = KcpSocket::bind(from, &cfg)
        .expect("a socket")
        .connect(addr)
        .await
        .expect("a KCP session");
    if nocomp {
        Mux::client(kcp, &mux_cfg)
    } else {
        Mux::client(Snappy::new(kcp), &mux_cfg)
    }
}

/// Whether `s` has ended (EOF or error): a read that answers at once.
async fn ended(s: &mut MuxStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        timeout(Duration::ZERO, s.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[allow(clippy::too_many_arguments)]
async fn streams(
    addr: SocketAddr,
    crypt: &str,
    n: usize,
    pace: usize,
    hold: u64,
    nocomp: bool,
    v2: bool,
    sessions: usize,
    from: &str,
) {
    let mut attackers = Vec::with_capacity(sessions);
    let bind = format!("{from}:0");
    for _ in 0..sessions.max(1) {
        attackers.push(tunnel_session(addr, &bind, crypt, nocomp, v2).await);
    }
    let started = Instant::now();
    let mut held = Vec::with_capacity(n);
    let mut open_errors = 0usize;
    while held.len() + open_errors < n {
        let batch = if pace == 0 { n } else { pace };
        for _ in 0..batch.min(n - held.len() - open_errors) {
            let attacker = &attackers[(held.len() + open_errors) % attackers.len()];
            match attacker.open_stream().await {
                Ok(s) => held.push(s),
                Err(_) => open_errors += 1,
            }
        }
        if pace > 0 {
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(hold)).await;
    // The probe takes at most one byte of a live stream.
    let mut fin = 0usize;
    for s in &mut held {
        if ended(s).await {
            fin += 1;
        }
    }
    // Another client: its own source address, while the attack holds.
    let before_legit = started.elapsed().as_secs_f64();
    let (bytes, legit_end, legit_s, legit_mux) = legit_download(addr, crypt, nocomp, v2).await;
    let opening_s = before_legit + legit_s.0 - hold as f64;
    let sessions = attackers.len();
    // The attacker leaves: a FIN on every stream, its sessions dropped.
    let left_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let attacker_mux = format!("{:?}", attackers[0].stats());
    for s in &mut held {
        let _ = timeout(Duration::from_millis(50), s.shutdown()).await;
    }
    // A KCP session dropped at once would take its queued FINs with it:
    // the sessions live one more second, then go.
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(held);
    drop(attackers);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (after_bytes, after_end, after_s, _) = legit_download(addr, crypt, nocomp, v2).await;
    println!(
        "{{\"attack\":\"streams\",\"crypt\":\"{crypt}\",\"n\":{n},\"pace\":{pace},\"hold_s\":{hold},\
         \"sessions\":{sessions},\"open_errors\":{open_errors},\"ended_while_held\":{fin},\"opening_s\":{opening_s:.1},\
         \"attacker_mux\":\"{attacker_mux}\",\"legit_bytes\":{bytes},\"legit_end\":\"{legit_end}\",\"legit_mux\":\"{legit_mux}\",\
         \"legit_s\":{:.1},\"left_at_ms\":{left_at_ms},\"after_bytes\":{after_bytes},\"after_end\":\"{after_end}\",\
         \"after_s\":{:.1}}}",
        legit_s.1, after_s.1,
    );
}

/// Another client's download through its own session from 127.0.0.2: the
/// bytes read (at most 20 s), how it ended, (seconds from `started` to the
/// session being up, seconds the download took) and the mux's stats.
async fn legit_download(
    addr: SocketAddr,
    crypt: &str,
    nocomp: bool,
    v2: bool,
) -> (u64, String, (f64, f64), String) {
    let asked = Instant::now();
    let legit = tunnel_session(addr, "127.0.0.2:0", crypt, nocomp, v2).await;
    let legit_started = Instant::now();
    let mut bytes = 0u64;
    let mut legit_end = String::from("open failed");
    if let Ok(mut s) = legit.open_stream().await {
        let mut buf = vec![0u8; 64 * 1024];
        let end = Instant::now() + Duration::from_secs(20);
        legit_end = loop {
            match timeout_at(end, s.read(&mut buf)).await {
                Ok(Ok(0)) => break "eof".into(),
                Ok(Ok(k)) => bytes += k as u64,
                Ok(Err(e)) => break format!("error: {e}"),
                Err(_) => break "timeout".into(),
            }
        };
    }
    (
        bytes,
        legit_end,
        (
            (legit_started - asked).as_secs_f64(),
            legit_started.elapsed().as_secs_f64(),
        ),
        format!("{:?}", legit.stats()),
    )
}

/// One echo of `n` bytes on `c`, within 5 s.
async fn echo_once(c: &mut KcpStream, n: usize) -> bool {
    let data = vec![0x6d; n];
    if c.write_all(&data).await.is_err() {
        return false;
    }
    let mut back = vec![0u8; n];
    matches!(
        timeout(Duration::from_secs(5), c.read_exact(&mut back)).await,
        Ok(Ok(_))
    ) && back == data
}

async fn migrate(addr: SocketAddr, crypt: &str, secs: u64) {
    let front = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let up = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    up.connect(addr).await.expect("connect");
    let front_addr = front.local_addr().expect("addr");
    let captured = Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
    let cap = captured.clone();
    // The forwarder: client <-> server, a copy of each client datagram kept.
    let forward = tokio::spawn(async move {
        let (mut a, mut b) = (vec![0u8; 2048], vec![0u8; 2048]);
        let mut client = None;
        loop {
            tokio::select! {
                Ok((n, from)) = front.recv_from(&mut a) => {
                    client = Some(from);
                    cap.lock().unwrap_or_else(|p| p.into_inner()).push(a[..n].to_vec());
                    let _ = up.send(&a[..n]).await;
                }
                Ok(n) = up.recv(&mut b) => {
                    if let Some(to) = client {
                        let _ = front.send_to(&b[..n], to).await;
                    }
                }
            }
        }
    });
    let config = builder(crypt, Preset::Fast)
        .stream(true)
        .build()
        .expect("config");
    let Ok(Ok(mut c)) = timeout(
        Duration::from_secs(5),
        KcpStream::connect(front_addr, &config),
    )
    .await
    else {
        println!("{{\"attack\":\"migrate\",\"crypt\":\"{crypt}\",\"error\":\"no session\"}}");
        forward.abort();
        return;
    };
    let warm = Instant::now() + Duration::from_secs(1);
    while Instant::now() < warm {
        echo_once(&mut c, 4096).await;
    }
    let replays = captured.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let third = UdpSocket::bind("127.0.0.3:0")
        .await
        .expect("bind 127.0.0.3");
    third.connect(addr).await.expect("connect");
    let (mut sent, mut bytes) = (0usize, 0usize);
    for d in replays.iter().chain(replays.iter()) {
        if third.send(d).await.is_ok() {
            sent += 1;
            bytes += d.len();
        }
    }
    let end = Instant::now() + Duration::from_secs(secs);
    let drained = tokio::spawn(async move { drain(&third, end).await });
    let mut ok = true;
    while Instant::now() < end {
        ok = echo_once(&mut c, 4096).await;
    }
    let got = drained.await.unwrap_or(0);
    forward.abort();
    println!(
        "{{\"attack\":\"migrate\",\"crypt\":\"{crypt}\",\"replayed\":{sent},\"replayed_bytes\":{bytes},\"bytes_to_replayer\":{got},\"ratio\":{:.4},\"client_echo_ok\":{ok}}}",
        got as f64 / bytes.max(1) as f64
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let addr: SocketAddr = arg(1).parse().expect("ADDR as IP:PORT");
    assert!(addr.ip().is_loopback(), "loopback only");
    match arg(0) {
        "reflect" => reflect(addr, arg(2), arg(3), arg(4).parse().unwrap_or(11)).await,
        "replay" => replay(addr, arg(2), arg(3).parse().unwrap_or(20)).await,
        "takeover" => takeover(addr).await,
        "flood" => flood(addr, arg(2), arg(3).parse().unwrap_or(3)).await,
        "late" => {
            let at: Vec<u64> = arg(4).split(',').filter_map(|s| s.parse().ok()).collect();
            let log = args.get(5).map(String::as_str);
            late(addr, arg(2), arg(3).parse().unwrap_or(2), &at, log).await;
        }
        "streams" => {
            let flag = |f: &str| args.iter().skip(6).any(|a| a == f);
            let sessions = args
                .iter()
                .skip(6)
                .find_map(|a| a.strip_prefix("sessions=")?.parse().ok())
                .unwrap_or(1);
            let from = args
                .iter()
                .skip(6)
                .find_map(|a| a.strip_prefix("from="))
                .unwrap_or("127.0.0.1");
            streams(
                addr,
                arg(2),
                arg(3).parse().unwrap_or(2000),
                arg(4).parse().unwrap_or(500),
                arg(5).parse().unwrap_or(10),
                flag("nocomp"),
                flag("v2"),
                sessions,
                from,
            )
            .await;
        }
        "migrate" => migrate(addr, arg(2), arg(3).parse().unwrap_or(3)).await,
        _ => eprintln!("usage: see the header of lab/src/bin/attack.rs"),
    }
}
