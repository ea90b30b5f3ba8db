//! Connect that answers and liveness on real loopback sockets: the connect
//! probe against a port with nothing bound (ICMP refusal), a black hole, a
//! wrong key and a live listener; every resolved address tried; local
//! binding and caller-owned sockets; server-speaks-first; a vanished peer on
//! both ends; reaping of departed clients under a session cap.
//!
//! Every test is bounded by `tokio::time::timeout`. The elapsed times are
//! printed (`--nocapture`) for the figures; the assertions only bound them
//! loosely (a shared, loaded machine).

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kcpio::{Config, ConfigBuilder, KcpListener, KcpSocket, KcpStream, Key, Method, SessionError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

fn builder() -> ConfigBuilder {
    Config::builder()
        .stream(true)
        .crypto(Method::Aes128, Key::passphrase("connect tests"))
        .linger(Duration::from_millis(500))
}

fn why(e: &io::Error) -> Option<SessionError> {
    e.get_ref()?.downcast_ref::<SessionError>().copied()
}

/// A loopback port with nothing bound to it (bound once, then closed).
fn dead_port() -> SocketAddr {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

async fn listener(config: &Config) -> (KcpListener, SocketAddr) {
    let l = KcpListener::bind("127.0.0.1:0", config).await.unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// Echoes every accepted session until the listener is dropped.
fn serve_echo(l: std::sync::Arc<KcpListener>) {
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
}

async fn echo_once(stream: &mut KcpStream, msg: &[u8]) {
    stream.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    timeout(Duration::from_secs(5), stream.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, msg);
}

#[tokio::test]
async fn a_port_with_nothing_bound_is_refused_at_once() {
    let config = builder().build().unwrap();
    let t = Instant::now();
    let e = timeout(
        Duration::from_secs(10),
        KcpStream::connect(dead_port(), &config),
    )
    .await
    .unwrap()
    .unwrap_err();
    let took = t.elapsed();
    eprintln!("figure: refused after {took:?}");
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    assert_eq!(why(&e), Some(SessionError::Refused));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn a_black_hole_times_out_with_the_likely_causes() {
    // Reads and discards everything: no ICMP, no answer.
    let hole = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = hole.local_addr().unwrap();
    let sink = tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        let mut n = 0u32;
        while let Ok(Ok(_)) = timeout(Duration::from_secs(5), hole.recv(&mut buf)).await {
            n += 1;
        }
        n
    });
    let config = builder()
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let t = Instant::now();
    let e = timeout(Duration::from_secs(10), KcpStream::connect(addr, &config))
        .await
        .unwrap()
        .unwrap_err();
    let took = t.elapsed();
    eprintln!("figure: black hole timed out after {took:?}");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    assert_eq!(why(&e), Some(SessionError::ConnectTimeout));
    let msg = e.to_string();
    assert!(msg.contains("no server") && msg.contains("key"), "{msg}");
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(5));
    // Probes at 0, 250, 750 and 1750 ms.
    assert_eq!(sink.await.unwrap(), 4);
}

#[tokio::test]
async fn a_wrong_key_times_out_like_a_black_hole() {
    let server = builder().build().unwrap();
    let (l, addr) = listener(&server).await;
    let client = Config::builder()
        .crypto(Method::Aes128, Key::passphrase("another key"))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let t = Instant::now();
    let e = timeout(Duration::from_secs(10), KcpStream::connect(addr, &client))
        .await
        .unwrap()
        .unwrap_err();
    eprintln!("figure: wrong key timed out after {:?}", t.elapsed());
    assert_eq!(why(&e), Some(SessionError::ConnectTimeout), "{e}");
    let st = l.stats();
    assert!(st.bad_crypto >= 3, "the probes reached the server: {st:?}");
    assert_eq!(st.sessions_opened, 0);
}

#[tokio::test]
async fn connect_returns_once_a_kcpio_listener_answered_and_accept_returns_before_data() {
    let config = builder().build().unwrap();
    let (l, addr) = listener(&config).await;
    let t = Instant::now();
    let (client, accepted) = tokio::join!(
        timeout(Duration::from_secs(5), KcpStream::connect(addr, &config)),
        timeout(Duration::from_secs(5), l.accept()),
    );
    eprintln!("figure: connect + accept on loopback in {:?}", t.elapsed());
    let client = client.unwrap().unwrap();
    let (server, peer) = accepted.unwrap().unwrap();
    assert_eq!(peer, client.local_addr().unwrap());
    assert_eq!(server.conv(), client.conv());
    // The client's local address is the routed one, not 0.0.0.0.
    assert_eq!(
        client.local_addr().unwrap().ip(),
        std::net::Ipv4Addr::LOCALHOST
    );
    let st = client.stats();
    assert_eq!((st.arq.wask_out, st.arq.wins_in), (1, 1), "{st:?}");
    assert_eq!(st.arq.push_in, 0, "connect returned before any data");
}

#[tokio::test]
async fn the_server_can_speak_first() {
    let config = builder().build().unwrap();
    let (l, addr) = listener(&config).await;
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        s.write_all(b"220 hello, speak when ready\r\n")
            .await
            .unwrap();
        let mut cmd = [0u8; 6];
        s.read_exact(&mut cmd).await.unwrap();
        assert_eq!(&cmd, b"QUIT\r\n");
        (s, l)
    });
    timeout(Duration::from_secs(10), async {
        let mut c = KcpStream::connect(addr, &config).await.unwrap();
        let mut greeting = [0u8; 29];
        c.read_exact(&mut greeting).await.unwrap();
        assert_eq!(&greeting, b"220 hello, speak when ready\r\n");
        c.write_all(b"QUIT\r\n").await.unwrap();
        server.await.unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn every_resolved_address_is_tried_in_order() {
    let config = builder().build().unwrap();
    let (l, addr) = listener(&config).await;
    serve_echo(std::sync::Arc::new(l));
    // An IPv6 loopback with nothing on that port (refused, or unavailable
    // on this host), a dead IPv4 port, then the listener.
    let v6: SocketAddr = (std::net::Ipv6Addr::LOCALHOST, addr.port()).into();
    let addrs = [v6, dead_port(), addr];
    let mut c = timeout(
        Duration::from_secs(10),
        KcpStream::connect(&addrs[..], &config),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(c.peer_addr().unwrap(), addr);
    echo_once(&mut c, b"third time lucky").await;
    // All dead: the last address's error.
    let e = KcpStream::connect(&[dead_port(), dead_port()][..], &config)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    let none: [SocketAddr; 0] = [];
    let e = KcpStream::connect(&none[..], &config).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

#[tokio::test]
async fn a_client_binds_a_chosen_local_address() {
    let config = builder().build().unwrap();
    let (l, addr) = listener(&config).await;
    let l = std::sync::Arc::new(l);
    let l2 = l.clone();
    let accepted = tokio::spawn(async move { l2.accept().await.unwrap() });
    // 127.0.0.2 is loopback on Linux without configuration.
    let local: SocketAddr = "127.0.0.2:0".parse().unwrap();
    let socket = KcpSocket::bind(local, &config).unwrap();
    let bound = socket.local_addr().unwrap();
    assert_eq!(bound.ip(), local.ip());
    assert_ne!(bound.port(), 0);
    let c = timeout(Duration::from_secs(5), socket.connect(addr))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.local_addr().unwrap(), bound);
    let (_s, peer) = timeout(Duration::from_secs(5), accepted)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(peer, bound, "the server sees the chosen address");
}

#[tokio::test]
async fn caller_owned_sockets_stay_open_for_the_caller() {
    let config = builder().build().unwrap();
    let (l, addr) = listener(&config).await;
    serve_echo(std::sync::Arc::new(l));
    // std: the caller keeps the socket and hands a duplicate over.
    let mine = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let local = mine.local_addr().unwrap();
    let socket = KcpSocket::from_std(mine.try_clone().unwrap(), &config).unwrap();
    let mut c = socket.connect(addr).await.unwrap();
    assert_eq!(c.local_addr().unwrap(), local);
    echo_once(&mut c, b"over my own socket").await;
    drop(c);
    // The session lingers, then closes its duplicate: ours still works.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(mine.local_addr().unwrap(), local);
    let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    mine.send_to(b"still mine", probe.local_addr().unwrap())
        .unwrap();
    let mut buf = [0u8; 16];
    probe
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let (n, from) = probe.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"still mine"[..], local));
    // tokio: handed over by value, owned by the stream.
    let tsock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let tlocal = tsock.local_addr().unwrap();
    let mut c = KcpSocket::from_tokio(tsock, &config)
        .unwrap()
        .connect(addr)
        .await
        .unwrap();
    assert_eq!(c.local_addr().unwrap(), tlocal);
    echo_once(&mut c, b"over a tokio socket").await;
}

#[tokio::test]
async fn without_the_probe_connect_returns_at_once_and_sends_nothing() {
    let config = builder().connect_probe(false).build().unwrap();
    let c = timeout(
        Duration::from_secs(1),
        KcpStream::connect(dead_port(), &config),
    )
    .await
    .unwrap()
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(c.stats().datagrams_out, 0);
}

#[tokio::test]
async fn a_vanished_peer_fails_pending_reads_and_writes_on_both_ends() {
    let idle = Duration::from_secs(2);
    let config = builder().idle_timeout(idle).build().unwrap();
    let (l, addr) = listener(&config).await;
    let client = KcpStream::connect(addr, &config).await.unwrap();
    let (mut server, _) = l.accept().await.unwrap();
    // Quiet for longer than the idle timeout: the keepalive keeps both up.
    tokio::time::sleep(idle * 2).await;
    let mut c = client;
    echo_probe(&mut c, &mut server).await;
    // A second client vanishes without a word (its driver stops with its
    // runtime, as a killed process's would).
    let rt = vanish(addr, config.clone()).await.unwrap();
    let (mut gone, peer) = l.accept().await.unwrap();
    assert_eq!(peer, rt);
    let t = Instant::now();
    let mut buf = [0u8; 8];
    let e = timeout(idle * 3, gone.read(&mut buf))
        .await
        .unwrap()
        .unwrap_err();
    eprintln!(
        "figure: server noticed the vanished client after {:?}",
        t.elapsed()
    );
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert_eq!(why(&e), Some(SessionError::IdleTimeout));
    assert_eq!(
        why(&gone.write(b"x").await.unwrap_err()),
        Some(SessionError::IdleTimeout)
    );
    // The server goes away (listener and streams dropped, its socket
    // closed once the session's linger ends): the client's keepalive meets
    // the port unreachable, and its pending read fails well within the
    // idle timeout.
    drop(server);
    drop(l);
    let t = Instant::now();
    let e = timeout(idle * 4, c.read(&mut buf))
        .await
        .unwrap()
        .unwrap_err();
    eprintln!(
        "figure: client noticed the vanished server after {:?}",
        t.elapsed()
    );
    assert_eq!(why(&e), Some(SessionError::PortUnreachable), "{e}");
    assert_eq!(e.kind(), io::ErrorKind::ConnectionReset);
}

/// A server on its own runtime, on its own thread, that reads and discards
/// what each session sends until it is killed (its runtime dropped, so its
/// sockets close as a killed process's would).
struct Server {
    addr: SocketAddr,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(config: Config) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = KcpListener::bind("127.0.0.1:0", &config).await.unwrap();
                tx.send(l.local_addr().unwrap()).unwrap();
                let sink = async move {
                    while let Ok((mut s, _)) = l.accept().await {
                        tokio::spawn(async move {
                            let mut buf = vec![0u8; 65536];
                            while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                        });
                    }
                };
                tokio::select! {
                    _ = sink => {}
                    _ = killed => {}
                }
            });
            drop(rt);
        });
        let addr = rx.recv().unwrap();
        Self {
            addr,
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    fn kill(&mut self) {
        if let Some(k) = self.kill.take() {
            let _ = k.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes until the session fails; the error and how long after `from`.
async fn write_until_failure(c: &mut KcpStream, bound: Duration) -> (io::Error, Duration) {
    let chunk = vec![7u8; 16 * 1024];
    let t = Instant::now();
    let e = timeout(bound, async {
        loop {
            if let Err(e) = c.write_all(&chunk).await {
                return e;
            }
        }
    })
    .await
    .expect("the session failed within the bound");
    (e, t.elapsed())
}

#[tokio::test]
async fn a_killed_server_resets_the_client_mid_transfer() {
    let config = builder().build().unwrap();
    let mut server = Server::start(config.clone());
    let mut c = KcpStream::connect(server.addr, &config).await.unwrap();
    c.write_all(&vec![1u8; 256 * 1024]).await.unwrap();
    let killed = Instant::now();
    server.kill();
    let (e, _) = write_until_failure(&mut c, Duration::from_secs(10)).await;
    let took = killed.elapsed();
    eprintln!("figure: ConnectionReset {took:?} after the server was killed");
    assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
    assert_eq!(why(&e), Some(SessionError::PortUnreachable));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn with_icmp_reset_off_a_killed_server_is_left_to_the_idle_timeout() {
    let idle = Duration::from_secs(2);
    let config = builder()
        .idle_timeout(idle)
        .icmp_reset(false)
        .build()
        .unwrap();
    let mut server = Server::start(config.clone());
    let mut c = KcpStream::connect(server.addr, &config).await.unwrap();
    c.write_all(b"hello").await.unwrap();
    server.kill();
    let (e, took) = write_until_failure(&mut c, idle * 4).await;
    eprintln!("figure: icmp_reset off: failed after {took:?}");
    assert_eq!(why(&e), Some(SessionError::IdleTimeout), "{e}");
}

/// One byte each way.
async fn echo_probe(c: &mut KcpStream, s: &mut KcpStream) {
    c.write_all(b"?").await.unwrap();
    let mut b = [0u8; 1];
    timeout(Duration::from_secs(2), s.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    s.write_all(b"!").await.unwrap();
    timeout(Duration::from_secs(2), c.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
}

/// Opens a client on its own runtime (on a blocking thread, so the
/// caller's runtime keeps serving) and drops the runtime: a client that
/// vanished without a word.
async fn vanish(addr: SocketAddr, config: Config) -> io::Result<SocketAddr> {
    tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let s = KcpStream::connect(addr, &config).await?;
            // Long enough to answer the server's window probe: a client that
            // proved it receives, then left (an unproven one would be
            // evicted at the session cap instead).
            tokio::time::sleep(Duration::from_millis(300)).await;
            s.local_addr()
        })
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn departed_clients_are_reaped_so_the_cap_never_locks_out() {
    let config = builder()
        .idle_timeout(Duration::from_secs(1))
        .max_sessions(2)
        .build()
        .unwrap();
    let (l, addr) = listener(&config).await;
    let l = std::sync::Arc::new(l);
    serve_echo(l.clone());
    let client = builder()
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    for _ in 0..2 {
        vanish(addr, client.clone()).await.unwrap();
    }
    // The cap is full: a third client is refused (not answered) now...
    let e = KcpStream::connect(addr, &client).await.unwrap_err();
    assert_eq!(why(&e), Some(SessionError::ConnectTimeout), "{e}");
    // ... and admitted once the departed ones idled out.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut c = KcpStream::connect(addr, &client).await.unwrap();
    echo_once(&mut c, b"room again").await;
    let st = l.stats();
    assert!(st.sessions_closed >= 2, "{st:?}");
}

/// An ICMP port unreachable for the UDP flow `from -> to`, as the host of
/// `to` would send it (type 3 code 3, quoting the IP and UDP headers).
fn port_unreachable(from: SocketAddr, to: SocketAddr) -> Vec<u8> {
    let (SocketAddr::V4(f), SocketAddr::V4(t)) = (from, to) else {
        panic!("IPv4 only")
    };
    let mut m = vec![3u8, 3, 0, 0, 0, 0, 0, 0];
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&48u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&f.ip().octets());
    ip[16..20].copy_from_slice(&t.ip().octets());
    m.extend_from_slice(&ip);
    m.extend_from_slice(&f.port().to_be_bytes());
    m.extend_from_slice(&t.port().to_be_bytes());
    m.extend_from_slice(&28u16.to_be_bytes());
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&[0u8; 20]);
    let mut sum = 0u32;
    for pair in m.chunks(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    m[2..4].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    m
}

/// One forged or stray ICMP port unreachable (root: a raw socket) on a
/// live session changes nothing; the session carries on.
#[tokio::test]
async fn one_stray_port_unreachable_does_not_fail_a_session() {
    use socket2::{Domain, Protocol, Socket, Type};
    let raw = match Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED: a raw ICMP socket needs root ({e})");
            return;
        }
    };
    let config = builder().build().unwrap();
    let (l, addr) = listener(&config).await;
    let l = std::sync::Arc::new(l);
    serve_echo(l.clone());
    let mut c = KcpStream::connect(addr, &config).await.unwrap();
    echo_once(&mut c, b"before").await;
    let icmp = port_unreachable(c.local_addr().unwrap(), addr);
    let to: SocketAddr = "127.0.0.1:0".parse().unwrap();
    raw.send_to(&icmp, &to.into()).unwrap();
    // The report reaches the socket; the session probes, the peer answers.
    let until = Instant::now() + Duration::from_millis(1500);
    let mut n = 0u32;
    while Instant::now() < until {
        echo_once(&mut c, &n.to_le_bytes()).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Reports spread over time with the peer answering in between: none
    // ends the session either.
    for _ in 0..5 {
        raw.send_to(&icmp, &to.into()).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        echo_once(&mut c, b"still here").await;
    }
    assert!(c.stats().datagrams_in > 0);
}
