//! The `tokio::net` shapes of `KcpListener` and `KcpStream` on real loopback
//! sockets: `poll_accept` and its waker rule, borrowed `split`, `reunite`,
//! the halves' accessors, `Config::default`.
//!
//! Every wait is bounded by `tokio::time::timeout`.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use kcpio::{Config, KcpListener, KcpStream, Preset};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{sleep, timeout};

const LIMIT: Duration = Duration::from_secs(10);

fn config() -> Config {
    Config::builder()
        .preset(Preset::Fast3)
        .window(128, 128)
        .stream(true)
        .build()
        .unwrap()
}

async fn listener(config: &Config) -> (KcpListener, SocketAddr) {
    let l = KcpListener::bind("127.0.0.1:0", config).await.unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// A client whose first byte makes the listener create its session.
async fn client(addr: SocketAddr, config: &Config) -> KcpStream {
    let mut s = KcpStream::connect(addr, config).await.unwrap();
    s.write_all(b"!").await.unwrap();
    s
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Counting {
    fn woken(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn poll_accept_schedules_only_the_most_recent_waker() {
    let config = config();
    let (listener, addr) = listener(&config).await;
    let (first, second) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
    let (w1, w2) = (Waker::from(first.clone()), Waker::from(second.clone()));
    assert!(
        listener
            .poll_accept(&mut Context::from_waker(&w1))
            .is_pending()
    );
    assert!(
        listener
            .poll_accept(&mut Context::from_waker(&w2))
            .is_pending()
    );
    let c = client(addr, &config).await;
    timeout(LIMIT, async {
        while second.woken() == 0 {
            sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the most recent waker is woken when a session arrives");
    assert_eq!(first.woken(), 0, "an earlier call's waker must not be kept");
    let Poll::Ready(Ok((mut s, peer))) = listener.poll_accept(&mut Context::from_waker(&w2)) else {
        panic!("the session is ready after the wake-up");
    };
    assert_eq!(peer.port(), c.local_addr().unwrap().port());
    assert_eq!(s.conv(), c.conv());
    let mut b = [0; 1];
    timeout(LIMIT, s.read_exact(&mut b)).await.unwrap().unwrap();
    assert_eq!(&b, b"!");
    // Nothing more waiting: pending again, and still only the latest waker.
    assert!(
        listener
            .poll_accept(&mut Context::from_waker(&w2))
            .is_pending()
    );
}

/// Two tasks poll `poll_accept`: the one that polled last gets the session,
/// the other is never woken (its waker was replaced).
#[tokio::test]
async fn poll_accept_from_two_tasks_wakes_the_last_one() {
    let config = config();
    let (listener, addr) = listener(&config).await;
    let listener = Arc::new(listener);
    let spawn_poller = |polled: Arc<AtomicBool>| {
        let l = listener.clone();
        tokio::spawn(async move {
            poll_fn(|cx| {
                polled.store(true, Ordering::SeqCst);
                l.poll_accept(cx)
            })
            .await
            .map(|(s, _)| s.conv())
        })
    };
    let wait_polled = |flag: Arc<AtomicBool>| async move {
        timeout(LIMIT, async {
            while !flag.load(Ordering::SeqCst) {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
    };
    let (p1, p2) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let t1 = spawn_poller(p1.clone());
    wait_polled(p1.clone()).await;
    let t2 = spawn_poller(p2.clone());
    wait_polled(p2).await;
    p1.store(false, Ordering::SeqCst);
    let c = client(addr, &config).await;
    let conv = timeout(LIMIT, t2).await.unwrap().unwrap().unwrap();
    assert_eq!(conv, c.conv());
    // Give the first task every chance to be (wrongly) woken.
    sleep(Duration::from_millis(200)).await;
    assert!(
        !p1.load(Ordering::SeqCst),
        "the first task was polled again"
    );
    assert!(!t1.is_finished());
    t1.abort();
}

/// `accept` futures (several at once) and `poll_accept` take from one
/// backlog: every session goes to exactly one of them.
#[tokio::test]
async fn accept_and_poll_accept_share_one_backlog() {
    let config = config();
    let (listener, addr) = listener(&config).await;
    let listener = Arc::new(listener);
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let l = listener.clone();
        waiters.push(tokio::spawn(async move {
            l.accept().await.map(|(s, _)| s.conv())
        }));
    }
    let l = listener.clone();
    waiters.push(tokio::spawn(async move {
        poll_fn(|cx| l.poll_accept(cx)).await.map(|(s, _)| s.conv())
    }));
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client(addr, &config).await);
    }
    let mut got = Vec::new();
    for w in waiters {
        got.push(timeout(LIMIT, w).await.unwrap().unwrap().unwrap());
    }
    let mut want: Vec<u32> = clients.iter().map(KcpStream::conv).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    assert_eq!(listener.stats().backlog, 0);
}

/// A cancelled `accept` loses nothing: the session waits for the next call.
#[tokio::test]
async fn cancelled_accept_loses_no_session() {
    let config = config();
    let (listener, addr) = listener(&config).await;
    assert!(
        timeout(Duration::from_millis(50), listener.accept())
            .await
            .is_err()
    );
    let c = client(addr, &config).await;
    let (s, _) = timeout(LIMIT, listener.accept()).await.unwrap().unwrap();
    assert_eq!(s.conv(), c.conv());
}

/// Echoes with the borrowed halves of one stream, both ways in one task.
#[tokio::test]
async fn borrowed_split_echoes_in_one_task() {
    let config = config();
    let (listener, addr) = listener(&config).await;
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let (mut r, mut w) = s.split();
        assert_eq!(r.conv(), w.conv());
        assert_eq!(r.as_ref().peer_addr().unwrap(), w.peer_addr().unwrap());
        let mut buf = vec![0; 1 + 100_000];
        r.read_exact(&mut buf).await.unwrap();
        w.write_all(&buf[1..]).await.unwrap();
        s
    });
    let mut c = client(addr, &config).await;
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let (mut r, mut w) = c.split();
    let mut back = vec![0; data.len()];
    let (wrote, read) = timeout(LIMIT, async {
        tokio::join!(w.write_all(&data), r.read_exact(&mut back))
    })
    .await
    .unwrap();
    wrote.unwrap();
    read.unwrap();
    assert!(back == data, "echoed bytes differ");
    let s = timeout(LIMIT, server).await.unwrap().unwrap();
    assert_eq!(s.conv(), c.conv());
}

#[tokio::test]
async fn every_half_answers_for_its_session() {
    let config = config();
    let (listener, addr) = listener(&config).await;
    let mut c = client(addr, &config).await;
    let (_s, _) = timeout(LIMIT, listener.accept()).await.unwrap().unwrap();
    let (peer, local, conv) = (c.peer_addr().unwrap(), c.local_addr().unwrap(), c.conv());
    assert_eq!(peer, addr);
    macro_rules! answers_for_the_session {
        ($half:expr) => {
            let h = &$half;
            let st = h.stats();
            let got = (h.peer_addr().unwrap(), h.local_addr().unwrap(), h.conv());
            assert_eq!((got, st.conv), ((peer, local, conv), conv));
        };
    }
    {
        let (r, w) = c.split();
        answers_for_the_session!(r);
        answers_for_the_session!(w);
        assert!(format!("{r:?}").contains("ReadHalf"));
        assert!(format!("{w:?}").contains("WriteHalf"));
    }
    let (r, w) = c.into_split();
    answers_for_the_session!(r);
    answers_for_the_session!(w);
    assert!(r.stats().datagrams_out > 0, "the first byte went out");
    assert!(format!("{r:?}").contains(&format!("{conv}")));
}

#[tokio::test]
async fn reunite_gives_the_stream_back_and_refuses_strangers() {
    let config = config();
    let (listener, addr) = listener(&config).await;
    let listener = Arc::new(listener);
    let l = listener.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let a = client(addr, &config).await;
    let b = client(addr, &config).await;
    let (a_conv, b_conv) = (a.conv(), b.conv());
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    // Mismatched halves come back unchanged, with a readable error.
    let err = ar.reunite(bw).unwrap_err();
    assert!(err.to_string().contains("not from the same"), "{err}");
    let kcpio::ReuniteError(ar, bw) = err;
    assert_eq!((ar.conv(), bw.conv()), (a_conv, b_conv));
    let err = aw.reunite(br).unwrap_err();
    let (br, aw) = (err.0, err.1);
    // Matching halves, from either side, make a working stream again.
    let mut a = ar.reunite(aw).unwrap();
    let mut b = bw.reunite(br).unwrap();
    assert_eq!((a.conv(), b.conv()), (a_conv, b_conv));
    for (s, tag) in [(&mut a, b"a-again"), (&mut b, b"b-again")] {
        s.write_all(tag).await.unwrap();
        let mut buf = [0; 8];
        timeout(LIMIT, s.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[0..1], b"!");
        assert_eq!(&buf[1..], &tag[..]);
    }
}

#[tokio::test]
async fn default_config_connects() {
    let config = Config::default();
    let (listener, addr) = listener(&config).await;
    let c = client(addr, &config).await;
    let (s, _) = timeout(LIMIT, listener.accept()).await.unwrap().unwrap();
    assert_eq!(s.conv(), c.conv());
}

/// The capacity the docs state: a writer whose peer never reads can queue
/// `2 × its send window + the peer's receive window` segments of up to mss
/// bytes, then `write` waits. (The client's first byte left alone in a
/// segment, so one segment carries 1 byte here.)
#[tokio::test]
async fn bytes_writable_before_the_peer_reads() {
    for (snd, rcv) in [(32u16, 32u16), (16, 64)] {
        let config = Config::builder()
            .preset(Preset::Fast3)
            .window(snd, rcv)
            .stream(true)
            .build()
            .unwrap();
        let mss = config.kcp_mtu() - 24;
        let (listener, addr) = listener(&config).await;
        // The connect probe opens the server's session: no first byte.
        let mut c = KcpStream::connect(addr, &config).await.unwrap();
        let (_unread, _) = timeout(LIMIT, listener.accept()).await.unwrap().unwrap();
        let chunk = vec![7u8; 4096];
        let mut written = 0;
        loop {
            match timeout(Duration::from_millis(500), c.write(&chunk)).await {
                Ok(n) => written += n.unwrap(),
                Err(_) => break,
            }
            assert!(written < 10 << 20, "writes never stopped");
        }
        let segments = 2 * usize::from(snd) + usize::from(rcv);
        let expect = segments * mss;
        assert_eq!(written, expect, "windows {snd}/{rcv}, mss {mss}");
    }
}

/// The new types move between tasks as tokio's do.
#[test]
fn handles_are_send_sync_unpin() {
    fn check<T: Send + Sync + Unpin>() {}
    check::<KcpStream>();
    check::<KcpListener>();
    check::<kcpio::OwnedReadHalf>();
    check::<kcpio::OwnedWriteHalf>();
    check::<kcpio::ReadHalf<'static>>();
    check::<kcpio::WriteHalf<'static>>();
    check::<kcpio::ReuniteError>();
    check::<Config>();
}

/// The borrowed halves carry the unreliable datagrams as the owned ones do.
#[tokio::test]
async fn borrowed_halves_send_and_receive_datagrams() {
    let config = Config::builder()
        .preset(Preset::Fast3)
        .stream(true)
        .fec(10, 3)
        .build()
        .unwrap();
    let (listener, addr) = listener(&config).await;
    let mut c = client(addr, &config).await;
    let (mut s, _) = timeout(LIMIT, listener.accept()).await.unwrap().unwrap();
    let (sr, sw) = s.split();
    let (cr, cw) = c.split();
    assert!(cw.max_datagram_payload() > 1000);
    assert_eq!(cw.max_datagram_payload(), sw.max_datagram_payload());
    // Unreliable: resend until one arrives (loopback loses none in practice).
    let mut buf = vec![0; cw.max_datagram_payload()];
    let got = timeout(LIMIT, async {
        loop {
            cw.try_send_datagram(b"ping").unwrap();
            if let Ok(r) = timeout(Duration::from_millis(100), sr.recv_datagram(&mut buf)).await {
                break r.unwrap();
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(&buf[..got], b"ping");
    let got = timeout(LIMIT, async {
        loop {
            sw.send_datagram(b"pong").await.unwrap();
            let recv = poll_fn(|cx| {
                let mut rb = tokio::io::ReadBuf::new(&mut buf);
                cr.poll_recv_datagram(cx, &mut rb)
                    .map_ok(|()| rb.filled().len())
            });
            if let Ok(r) = timeout(Duration::from_millis(100), recv).await {
                break r.unwrap();
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(&buf[..got], b"pong");
}

/// A stats handle follows the session after the stream moved away (here
/// into a task), and reads `None` once the session is gone.
#[tokio::test]
async fn stats_handle_reads_a_moved_stream_until_it_is_gone() {
    let config = Config::builder()
        .preset(Preset::Fast3)
        .linger(Duration::from_millis(100))
        .build()
        .unwrap();
    let (listener, addr) = listener(&config).await;
    let mut c = KcpStream::connect(addr, &config).await.unwrap();
    let (mut s, _) = timeout(LIMIT, listener.accept()).await.unwrap().unwrap();
    let handle = c.stats_handle();
    assert_eq!(handle.conv(), c.conv());
    let before = handle.stats().unwrap().bytes_out;
    let task = tokio::spawn(async move {
        c.write_all(&[5u8; 10_000]).await.unwrap();
        c
    });
    let mut buf = vec![0u8; 10_000];
    timeout(LIMIT, s.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let c = task.await.unwrap();
    let now = handle.stats().unwrap();
    assert!(now.bytes_out >= before + 10_000, "{now:?}");
    assert_eq!(now.conv, c.conv());
    drop(c);
    drop(s);
    drop(listener);
    let gone = timeout(LIMIT, async {
        while handle.stats().is_some() {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the session outlived its stream");
}
