//! Hostile clients that hold the key: a stream-open flood and
//! streams that never read on one session while a legitimate client on
//! another session downloads, and a target that never accepts. The
//! assertions are on the server's bounds, read from its stats line (slots
//! in use, refusals, bytes its muxes hold), not on timings or RSS.
//!
//! kcpio on both ends, in-process; loopback only; every test bounded by a
//! timeout and a stream count.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kcpio::KcpSocket;
use kcpio::mux::{Mux, MuxStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use kcpio_tunnel as tunnel;

const TEST_TIMEOUT: Duration = Duration::from_secs(120);

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

fn scratch(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("kcpio-hostile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

async fn start(cmd: &str, log: &str) -> SocketAddr {
    let settings = tunnel::parse(words(cmd)).unwrap();
    let bound = tunnel::Bound::bind(settings).await.unwrap();
    let addr = bound.local_addr().unwrap();
    tokio::spawn(bound.run(tunnel::Log::open(log, true).unwrap()));
    addr
}

/// A target that sends `len` bytes on every connection, then closes. Its
/// connections' send buffers are pinned at 64 KiB (accepted sockets inherit
/// the listener's): hundreds of stalled connections with autotuned buffers
/// run the host out of `tcp_mem`, and the kernel then resets connections
/// that close with bytes unsent, the legitimate download's included.
async fn download_server(len: usize) -> SocketAddr {
    let s = TcpSocket::new_v4().unwrap();
    s.set_send_buffer_size(64 * 1024).unwrap();
    s.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let l = s.listen(1024).unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let chunk = vec![0x5a; 64 * 1024];
                let mut left = len;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if c.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    addr
}

/// Downloads through the tunnel entry `entry` to the end, checking every
/// byte is the download server's; returns how many arrived.
async fn download(entry: SocketAddr) -> usize {
    let mut c = TcpStream::connect(entry).await.unwrap();
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = c.read(&mut buf).await.unwrap();
        if n == 0 {
            return got;
        }
        assert!(buf[..n].iter().all(|&b| b == 0x5a));
        got += n;
    }
}

/// An attacker's session from 127.0.0.2 (the legitimate clients use
/// 127.0.0.1, another client to the server): the key and mode of a
/// default client, its own KCP session and smux client, streams it opens
/// and never reads.
async fn attacker(server: SocketAddr) -> Mux {
    let s = tunnel::parse(words(&format!(
        "t client -l 127.0.0.1:0 -r {server} --nocomp"
    )))
    .unwrap();
    let sock = KcpSocket::bind("127.0.0.2:0".parse().unwrap(), &s.kcp).unwrap();
    let kcp = sock.connect(server).await.unwrap();
    Mux::client(kcp, &s.mux)
}

/// The figures of the last `limits:` part of the server's stats line:
/// (streams forwarded, refused for slots, refused by smux, dials in flight,
/// dials timed out, smux bytes held out).
fn last_limits(text: &str) -> Option<[u64; 6]> {
    let line = text.lines().rev().find(|l| l.contains("limits: streams"))?;
    let num = |after: &str| -> Option<u64> {
        let rest = &line[line.find(after)? + after.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .find(|w| !w.is_empty())?
            .parse()
            .ok()
    };
    Some([
        num("limits: streams ")?,
        num("forwarded, ")?,
        num("(dial back-off), ")?,
        num("; dials ")?,
        num("failed (")?,
        num(" B in, ")?,
    ])
}

/// Waits (bounded) until the last stats line satisfies `ok`.
async fn wait_stats(log: &Path, within: Duration, ok: impl Fn(&[u64; 6]) -> bool) -> [u64; 6] {
    let end = tokio::time::Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let last = last_limits(&text);
        if let Some(l) = last {
            if ok(&l) || tokio::time::Instant::now() > end {
                return l;
            }
        } else if tokio::time::Instant::now() > end {
            panic!("no stats line:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the last stats line satisfies `ok`, for as long as the
/// figure `moving` picks keeps changing: it gives up once that figure has
/// stood still for `stall`, or after `most` in all. A loaded machine slows
/// the server down without stopping it; a server that stopped is caught by
/// the stall, not by a wall-clock guess.
async fn wait_progress(
    log: &Path,
    stall: Duration,
    most: Duration,
    moving: impl Fn(&[u64; 6]) -> u64,
    ok: impl Fn(&[u64; 6]) -> bool,
) -> [u64; 6] {
    let end = tokio::time::Instant::now() + most;
    let mut seen: Option<(u64, tokio::time::Instant)> = None;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let now = tokio::time::Instant::now();
        if let Some(l) = last_limits(&text) {
            let v = moving(&l);
            if seen.is_none_or(|(old, _)| old != v) {
                seen = Some((v, now));
            }
            let stalled = seen.is_some_and(|(_, since)| now.duration_since(since) > stall);
            if ok(&l) || stalled || now > end {
                return l;
            }
        } else if now > end {
            panic!("no stats line:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One session floods SYNs (10,000 streams opened at once) and never reads
/// what the target sends them; a legitimate client on another session
/// still downloads 8 MiB. The server forwards at most its per-session share
/// of streams for the attacker, smux refuses the flood past its open rate,
/// and what the server's muxes hold stays within the session send budget
/// (8 MiB) plus the legitimate download's share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_flood_and_slow_readers_leave_a_legitimate_download_alone() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const DOWNLOAD: usize = 8 * 1024 * 1024;
        let target = download_server(DOWNLOAD).await;
        let log = scratch("flood.log");
        let server = start(
            &format!(
                "t server -l 127.0.0.1:0 -t {target} --quiet --snmpperiod 1 --maxstreams 1024"
            ),
            log.to_str().unwrap(),
        )
        .await;
        let entry = start(
            &format!("t client -l 127.0.0.1:0 -r {server} --quiet --snmpperiod 0"),
            "",
        )
        .await;

        let flood = attacker(server).await;
        let mut held: Vec<MuxStream> = Vec::new();
        for _ in 0..10_000 {
            held.push(flood.open_stream().await.unwrap());
        }
        // Let the flood land and the target fill what it may.
        let during = wait_stats(&log, Duration::from_secs(20), |l| l[0] >= 400).await;
        assert!(
            during[0] <= 512,
            "one session took more than its share: {during:?}"
        );

        // The legitimate client, on its own session, downloads everything.
        assert_eq!(download(entry).await, DOWNLOAD);

        let after = wait_stats(&log, Duration::from_secs(5), |_| false).await;
        let refused = flood.stats();
        eprintln!("server limits: {after:?}; attacker's mux: {refused:?}");
        assert!(after[0] <= 513, "streams forwarded: {after:?}");
        assert!(after[2] > 0, "smux refused nothing of the flood: {after:?}");
        // 8 MiB session budget for the attacker, plus the legitimate
        // session's (its download is done): far below 512 x 128 KiB.
        assert!(
            after[5] <= 8 * 1024 * 1024 + 2 * 128 * 1024,
            "smux holds {} B",
            after[5]
        );
        drop(held);
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// Two sessions from one source address share one client's slots: the
/// second session adds none, and a client at another address still gets
/// its download.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_from_one_address_share_one_clients_slots() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const DOWNLOAD: usize = 1024 * 1024;
        let target = download_server(DOWNLOAD).await;
        let log = scratch("share.log");
        let server = start(
            &format!("t server -l 127.0.0.1:0 -t {target} --quiet --snmpperiod 1 --maxstreams 64"),
            log.to_str().unwrap(),
        )
        .await;
        let entry = start(
            &format!("t client -l 127.0.0.1:0 -r {server} --quiet --snmpperiod 0"),
            "",
        )
        .await;
        let (a, b) = (attacker(server).await, attacker(server).await);
        let mut held = Vec::new();
        for _ in 0..50 {
            held.push(a.open_stream().await.unwrap());
            held.push(b.open_stream().await.unwrap());
        }
        let l = wait_stats(&log, Duration::from_secs(20), |l| l[0] >= 32 && l[1] >= 68).await;
        assert_eq!(l[0], 32, "two sessions of one address hold {l:?}");
        assert_eq!(download(entry).await, DOWNLOAD);
        drop(held);
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// 2,000 streams that request a download and never read: the server's
/// muxes hold at most the session send budget, not 2,000 stream buffers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_slow_readers_hold_one_session_budget() {
    // Four waits on progress of up to 90 s each under load: a wider bound.
    tokio::time::timeout(TEST_TIMEOUT * 3, async {
        let target = download_server(4 * 1024 * 1024).await;
        let log = scratch("slow.log");
        let server = start(
            &format!(
                "t server -l 127.0.0.1:0 -t {target} --quiet --snmpperiod 1 --maxstreams 8192"
            ),
            log.to_str().unwrap(),
        )
        .await;
        let slow = attacker(server).await;
        let mut held = Vec::new();
        // Paced under the open rate (1,024/s): every stream is forwarded.
        // The next 500 go out once the server has forwarded the last ones
        // (and at least 0.6 s later), so a loaded machine that delays the
        // SYNs cannot bunch them above the rate either.
        let mut l = [0; 6];
        for batch in 1..=4u64 {
            for _ in 0..500 {
                held.push(slow.open_stream().await.unwrap());
            }
            let paced = tokio::time::sleep(Duration::from_millis(600));
            l = wait_progress(
                &log,
                Duration::from_secs(15),
                Duration::from_secs(90),
                |l| l[0],
                |l| l[0] >= 500 * batch,
            )
            .await;
            assert_eq!(l[0], 500 * batch, "not every stream was forwarded: {l:?}");
            paced.await;
        }
        assert_eq!(l[0], 2000, "not every stream was forwarded: {l:?}");
        // Give the target time to push: the bound must hold at rest.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let l = wait_stats(&log, Duration::from_secs(2), |_| false).await;
        eprintln!("2,000 slow readers: server smux holds {} B out", l[5]);
        assert!(
            l[5] <= 8 * 1024 * 1024,
            "smux holds {} B for 2,000 stalled streams",
            l[5]
        );
        drop(held);
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// Slow readers that send their FIN and go on reading nothing (an attacker
/// that leaves, or kcptun clients, which close the whole stream on FIN):
/// with the server's default `--closewait 30`, each stream ends once it has
/// held its target back for 5 s without moving a byte, so the slots and
/// descriptors come back within seconds, not after the whole close-wait.
/// The buffer budget (1 MiB here) is spent by the attack itself: a FIN
/// must not wait behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_that_leave_free_their_slots_within_seconds() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let target = download_server(64 * 1024 * 1024).await;
        let log = scratch("leave.log");
        let server = start(
            &format!("t server -l 127.0.0.1:0 -t {target} --quiet --snmpperiod 1 --maxbuffer 1"),
            log.to_str().unwrap(),
        )
        .await;
        let slow = attacker(server).await;
        let mut held = Vec::new();
        for _ in 0..200 {
            held.push(slow.open_stream().await.unwrap());
        }
        let l = wait_progress(
            &log,
            Duration::from_secs(15),
            Duration::from_secs(60),
            |l| l[0],
            |l| l[0] >= 200,
        )
        .await;
        assert_eq!(l[0], 200, "not every stream was forwarded: {l:?}");
        // Let the targets fill what the session can hold.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for s in &mut held {
            s.shutdown().await.unwrap();
        }
        let left = tokio::time::Instant::now();
        // The mux session lives on and still reads nothing.
        let l = wait_stats(&log, Duration::from_secs(20), |l| l[0] == 0).await;
        let took = left.elapsed();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let gone = figures_after(&text, "B toward slow readers; ", 1).map(|v| v[0]);
        eprintln!(
            "200 slow readers that left: streams {} after {took:?}, {gone:?} ended as gone",
            l[0]
        );
        assert_eq!(l[0], 0, "streams still forwarded {took:?} after the FINs");
        assert!(
            took < Duration::from_secs(20),
            "the slots came back only after {took:?}"
        );
        assert_eq!(gone, Some(200), "not counted as peers gone");
        drop(held);
        drop(slow);
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// A target whose accept queue is full: dials time out (`--dialtimeout 1`),
/// new streams are refused during the back-off, and once the attacker is
/// gone every slot is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_that_never_accepts_times_out_and_frees_the_slots() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let sock = TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let stuck = sock.listen(0).unwrap();
        let target = stuck.local_addr().unwrap();
        // Fill the accept queue so further SYNs are dropped.
        let mut fillers = Vec::new();
        for _ in 0..4 {
            if let Ok(Ok(c)) =
                tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(target)).await
            {
                fillers.push(c);
            }
        }
        let log = scratch("stuck.log");
        let server = start(
            &format!(
                "t server -l 127.0.0.1:0 -t {target} --quiet --snmpperiod 1 \
                 --dialtimeout 1 --maxdials 8"
            ),
            log.to_str().unwrap(),
        )
        .await;
        let mux = attacker(server).await;
        let mut held = Vec::new();
        for _ in 0..200 {
            held.push(mux.open_stream().await.unwrap());
        }
        let l = wait_stats(&log, Duration::from_secs(10), |l| l[4] > 0).await;
        assert!(l[4] > 0, "no dial timed out: {l:?}");
        assert!(l[3] <= 8, "more dials in flight than --maxdials: {l:?}");
        // Every stream ends (its dial timed out, or it was refused).
        for mut s in held.drain(..) {
            let mut b = [0u8; 1];
            let r = tokio::time::timeout(Duration::from_secs(30), s.read(&mut b)).await;
            assert!(matches!(r, Ok(Ok(0) | Err(_))), "stream not ended: {r:?}");
        }
        drop(mux);
        let l = wait_stats(&log, Duration::from_secs(20), |l| l[0] == 0 && l[3] == 0).await;
        assert_eq!((l[0], l[3]), (0, 0), "slots still taken: {l:?}");
        drop(fillers);
        drop(stuck);
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// The buffer budget part of the last stats line: (bytes charged, the
/// budget, bytes the sessions hold toward their clients, times reached).
fn last_budget(text: &str) -> Option<[u64; 4]> {
    figures_after(text, "buffer budget ", 4)?.try_into().ok()
}

/// The first `n` numbers after `key` on the last line holding it.
fn figures_after(text: &str, key: &str, n: usize) -> Option<Vec<u64>> {
    let line = text.lines().rev().find(|l| l.contains(key))?;
    let part = &line[line.find(key)?..];
    part.split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .take(n)
        .map(|w| w.parse().ok())
        .collect()
}

/// Many sessions from one address, each with streams that never read what
/// the target sends: every session stays under its own bounds, so only the
/// process-wide buffer budget (`--maxbuffer 16`: 16 MiB, 8 MiB a client)
/// keeps what they hold together in check. What the server's sessions hold
/// (smux send buffers and KCP send queues) stays within the budget, and a
/// client at another address still gets its download.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_of_slow_readers_stay_within_the_buffer_budget() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        const BUDGET: u64 = 16 << 20;
        const DOWNLOAD: usize = 8 * 1024 * 1024;
        let target = download_server(DOWNLOAD).await;
        let log = scratch("budget.log");
        let server = start(
            &format!(
                "t server -l 127.0.0.1:0 -t {target} --quiet --snmpperiod 1 --maxstreams 4096 \
                 --maxbuffer 16"
            ),
            log.to_str().unwrap(),
        )
        .await;
        let entry = start(
            &format!("t client -l 127.0.0.1:0 -r {server} --quiet --snmpperiod 0"),
            "",
        )
        .await;
        let mut sessions = Vec::new();
        let mut held = Vec::new();
        for _ in 0..40 {
            let s = attacker(server).await;
            for _ in 0..20 {
                held.push(s.open_stream().await.unwrap());
            }
            sessions.push(s);
        }
        let l = wait_stats(&log, Duration::from_secs(30), |l| l[0] >= 800).await;
        assert_eq!(l[0], 800, "not every stream was forwarded: {l:?}");
        // Give the target time to push: the bound must hold at rest.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let text = std::fs::read_to_string(&log).unwrap();
        let [charged, budget, at_rest, reached] = last_budget(&text).expect("no budget figures");
        eprintln!(
            "800 slow readers on 40 sessions: {at_rest} B held, {charged} B charged of {budget} B, \
             reached {reached} times"
        );
        // Whole KCP segments and smux frame headers on top of the bytes
        // charged: a little over the attacker's half.
        assert!(
            at_rest <= BUDGET / 2 + BUDGET / 8,
            "the sessions hold {at_rest} B, the budget is {BUDGET} B"
        );
        assert_eq!(budget, BUDGET);
        assert!(charged <= BUDGET, "{charged} B charged");
        assert!(reached > 0, "the budget was never reached");

        assert_eq!(download(entry).await, DOWNLOAD);
        drop(held);
        drop(sessions);
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}

/// What the copy buffers hold toward slow readers, from the last stats line.
fn last_copy_held(text: &str) -> Option<u64> {
    figures_after(text, "copy buffers hold ", 1)?
        .first()
        .copied()
}

/// The client's own bounds: local connections beyond `--maxstreams` are
/// closed at once and counted, and local applications that never read what
/// they asked for hold at most the client's buffer budget (`--maxbuffer
/// 1`: 1 MiB) in its copy buffers. Once they are gone, every slot is free
/// and a download completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_bounds_local_connections_and_slow_local_readers() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        // More than the client's kernel send buffer can take for a reader
        // that does not read (tcp_wmem's usual maximum: 4 MiB), so the rest
        // reaches the copy buffers.
        const DOWNLOAD: usize = 6 * 1024 * 1024;
        let target = download_server(DOWNLOAD).await;
        let server = start(
            &format!("t server -l 127.0.0.1:0 -t {target} --quiet --snmpperiod 0"),
            "",
        )
        .await;
        let log = scratch("client.log");
        let entry = start(
            &format!(
                "t client -l 127.0.0.1:0 -r {server} --quiet --snmpperiod 1 --maxstreams 32 \
                 --maxbuffer 1"
            ),
            log.to_str().unwrap(),
        )
        .await;
        let mut held = Vec::new();
        for _ in 0..48 {
            let s = TcpSocket::new_v4().unwrap();
            s.set_recv_buffer_size(4096).unwrap();
            held.push(s.connect(entry).await.unwrap());
        }
        let l = wait_progress(
            &log,
            Duration::from_secs(15),
            Duration::from_secs(60),
            |l| l[0] + l[1],
            |l| l[0] >= 32 && l[1] >= 16,
        )
        .await;
        assert_eq!(
            (l[0], l[1]),
            (32, 16),
            "streams forwarded and refused: {l:?}"
        );
        // The refused ones were closed at once.
        let mut ended = 0;
        for c in &mut held {
            let mut b = [0u8; 1];
            if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(50), c.peek(&mut b)).await
            {
                ended += 1;
            }
        }
        assert_eq!(ended, 16, "refused connections not closed");
        // The server pushes until every reader's kernel buffers are full;
        // the most the copy buffers held meanwhile, sampled for 10 s.
        let mut most = 0;
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            most = most.max(last_copy_held(&text).unwrap_or(0));
        }
        eprintln!("32 slow local readers: the client's copy buffers held at most {most} B");
        assert!(
            most <= 1 << 20,
            "copy buffers hold {most} B, the budget is 1 MiB"
        );
        assert!(most > 0, "nothing reached the copy buffers");

        drop(held);
        let l = wait_stats(&log, Duration::from_secs(20), |l| l[0] == 0).await;
        assert_eq!(l[0], 0, "slots still taken: {l:?}");
        assert_eq!(download(entry).await, DOWNLOAD);
        let _ = std::fs::remove_file(&log);
    })
    .await
    .expect("timed out");
}
