//! An in-process, seeded, lossy UDP relay for tests and examples.
//!
//! The relay binds one "front" socket on loopback. Every new client address
//! that sends to it gets its own upstream socket towards the server, so the
//! server sees one distinct peer per client, as through a NAT. Datagrams in
//! each direction pass through an impairment stage (loss, duplication,
//! reordering, delay with jitter) and a bounded delay queue: when the queue is
//! full the datagram is dropped and counted, as a router would.
//!
//! Everything runs in one tokio task that stops when the [`Relay`] is dropped.
//! Decisions come from a ChaCha RNG per direction seeded from
//! [`RelayConfig::seed`], so a given sequence of datagrams meets the same fate
//! in every run (timing may still change which datagrams arrive when).

// Each test binary and example uses a different part of this module.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::poll_fn;
use std::io;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};

/// Largest datagram the relay carries (bigger ones are truncated by the OS read).
const MAX_DATAGRAM: usize = 65_536;
/// Datagrams read from one socket before the relay looks at the others.
const READ_BURST: usize = 64;
/// Socket buffer size asked for (the kernel caps it at its `rmem_max`/`wmem_max`):
/// a whole KCP window can arrive in one burst, and an overflowing socket
/// buffer would add loss the counters cannot see.
const SOCKET_BUFFER: usize = 4 << 20;

/// A nonblocking UDP socket bound to `addr` with large buffers.
fn bind_udp(addr: SocketAddr) -> io::Result<StdUdpSocket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    // Best effort: a smaller buffer only means more (uncounted) drops.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// The impairments of one direction.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// Probability in [0, 1] that a datagram is dropped.
    pub loss: f64,
    /// Probability in [0, 1] that a (not dropped) datagram is sent twice.
    pub duplicate: f64,
    /// Probability in [0, 1] that a datagram is held back by `reorder_delay`
    /// extra, so later datagrams overtake it.
    pub reorder: f64,
    /// Extra hold time of a reordered datagram.
    pub reorder_delay: Duration,
    /// Base one-way delay.
    pub delay: Duration,
    /// Uniform random extra delay in [0, jitter] (also reorders when it
    /// exceeds the spacing of datagrams).
    pub jitter: Duration,
    /// Most datagrams waiting in this direction's delay queue; beyond it,
    /// arrivals are dropped and counted in `queue_dropped`.
    pub queue: usize,
    /// While true every datagram is dropped (counted as loss): a cut cable.
    pub blackhole: bool,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(5),
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            queue: 4096,
            blackhole: false,
        }
    }
}

impl LinkConfig {
    /// A perfect link.
    pub fn clean() -> Self {
        Self::default()
    }

    /// A link that drops `loss` of the datagrams and changes nothing else.
    pub fn lossy(loss: f64) -> Self {
        Self {
            loss,
            ..Self::default()
        }
    }
}

/// The whole relay's configuration.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// Seed of the impairment RNGs.
    pub seed: u64,
    /// Client → server impairments.
    pub to_server: LinkConfig,
    /// Server → client impairments.
    pub to_client: LinkConfig,
    /// Most distinct client addresses (each costs one upstream socket);
    /// datagrams from further clients are dropped and counted.
    pub max_clients: usize,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            to_server: LinkConfig::default(),
            to_client: LinkConfig::default(),
            max_clients: 1024,
        }
    }
}

impl RelayConfig {
    /// The same impairments both ways.
    pub fn symmetric(seed: u64, link: LinkConfig) -> Self {
        Self {
            seed,
            to_server: link.clone(),
            to_client: link,
            ..Self::default()
        }
    }
}

/// Counters of one direction, updated live.
#[derive(Debug, Default)]
struct DirCounters {
    received: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    queue_dropped: AtomicU64,
    sent: AtomicU64,
    send_errors: AtomicU64,
    bytes_sent: AtomicU64,
}

impl DirCounters {
    fn snapshot(&self) -> DirStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DirStats {
            received: get(&self.received),
            lost: get(&self.lost),
            duplicated: get(&self.duplicated),
            reordered: get(&self.reordered),
            queue_dropped: get(&self.queue_dropped),
            sent: get(&self.sent),
            send_errors: get(&self.send_errors),
            bytes_sent: get(&self.bytes_sent),
        }
    }
}

/// A snapshot of one direction's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Datagrams read from the sender.
    pub received: u64,
    /// Dropped by the loss draw (or the blackhole).
    pub lost: u64,
    /// Extra copies queued by the duplication draw.
    pub duplicated: u64,
    /// Held back by the reordering draw.
    pub reordered: u64,
    /// Dropped because the delay queue was full.
    pub queue_dropped: u64,
    /// Datagrams handed to the kernel for the receiver.
    pub sent: u64,
    /// Sends the kernel refused (full socket buffer, ICMP error...).
    pub send_errors: u64,
    /// Payload bytes of `sent`.
    pub bytes_sent: u64,
}

/// A snapshot of the relay's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Client → server.
    pub to_server: DirStats,
    /// Server → client.
    pub to_client: DirStats,
    /// Distinct client addresses seen.
    pub clients: u64,
    /// Datagrams dropped because `max_clients` was reached.
    pub refused_clients: u64,
}

#[derive(Debug, Default)]
struct Shared {
    to_server: DirCounters,
    to_client: DirCounters,
    clients: AtomicU64,
    refused_clients: AtomicU64,
    /// Live-adjustable impairments: (to_server, to_client).
    links: Mutex<(LinkConfig, LinkConfig)>,
    /// Rebinding requests (a NAT giving every client a new mapping): how
    /// many, and the source IP the latest asks for (`None`: the same).
    rebinds: AtomicU64,
    rebind_ip: Mutex<Option<std::net::IpAddr>>,
    /// A socket the latest rebinding hands the first client (the caller
    /// bound it: a chosen source address).
    rebind_socket: Mutex<Option<StdUdpSocket>>,
    /// Each client's upstream source address.
    sources: Mutex<Vec<SocketAddr>>,
}

/// A running relay; dropping it stops the task and closes its sockets.
pub struct Relay {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Relay {
    /// Binds `127.0.0.1:0` (or `[::1]:0` for an IPv6 upstream) and relays to `upstream`.
    pub async fn start(upstream: SocketAddr, config: RelayConfig) -> io::Result<Relay> {
        let bind: SocketAddr = if upstream.is_ipv6() {
            "[::1]:0".parse().map_err(io::Error::other)?
        } else {
            "127.0.0.1:0".parse().map_err(io::Error::other)?
        };
        let front_std = bind_udp(bind)?;
        let front_tx = front_std.try_clone()?;
        let front = UdpSocket::from_std(front_std)?;
        let addr = front.local_addr()?;
        let shared = Arc::new(Shared {
            links: Mutex::new((config.to_server.clone(), config.to_client.clone())),
            ..Shared::default()
        });
        let state = RelayTask {
            front,
            front_tx,
            bind,
            upstream,
            clients: Vec::new(),
            by_addr: HashMap::new(),
            max_clients: config.max_clients,
            to_server: Direction::new(config.seed),
            to_client: Direction::new(config.seed ^ 0x9e37_79b9_7f4a_7c15),
            shared: Arc::clone(&shared),
            seq: 0,
            rebinds: 0,
        };
        let task = tokio::spawn(state.run());
        Ok(Relay {
            addr,
            upstream,
            shared,
            task,
        })
    }

    /// The address clients send to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server the relay forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The counters so far.
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            to_server: self.shared.to_server.snapshot(),
            to_client: self.shared.to_client.snapshot(),
            clients: self.shared.clients.load(Ordering::Relaxed),
            refused_clients: self.shared.refused_clients.load(Ordering::Relaxed),
        }
    }

    /// Changes the impairments of both directions from now on (datagrams
    /// already queued keep their fate).
    pub fn set_links(&self, to_server: LinkConfig, to_client: LinkConfig) {
        let mut links = self
            .shared
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *links = (to_server, to_client);
    }

    /// Cuts (true) or restores (false) both directions.
    pub fn set_blackhole(&self, on: bool) {
        let mut links = self
            .shared
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        links.0.blackhole = on;
        links.1.blackhole = on;
    }

    /// Every client gets a new upstream socket, as a NAT rebinding gives a
    /// flow a new mapping: a new source port, on `ip` when given (another
    /// loopback address such as 127.0.0.2: a client that changed networks),
    /// else on the same IP. The old sockets close, so what the server sends
    /// to the old address is lost. Takes effect within about 20 ms.
    pub fn rebind(&self, ip: Option<std::net::IpAddr>) {
        *self
            .shared
            .rebind_ip
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = ip;
        self.shared.rebinds.fetch_add(1, Ordering::Relaxed);
    }

    /// [`rebind`](Self::rebind) with the first client's new upstream socket
    /// given: `socket`, bound by the caller (a source address chosen for
    /// where the server's kernel steers it, such as one socket of a
    /// `SO_REUSEPORT` group). Later clients get sockets on its IP. Takes
    /// effect within about 20 ms.
    pub fn rebind_to(&self, socket: StdUdpSocket) -> io::Result<()> {
        socket.set_nonblocking(true)?;
        let ip = socket.local_addr()?.ip();
        *self
            .shared
            .rebind_socket
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(socket);
        self.rebind(Some(ip));
        Ok(())
    }

    /// The source addresses the relay sends to the server from now.
    pub fn upstream_sources(&self) -> Vec<SocketAddr> {
        self.shared
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// True while the relay task runs (it only ends on a socket error or drop).
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A datagram waiting for its release time.
struct Queued {
    data: Vec<u8>,
    /// Index into `RelayTask::clients`.
    client: usize,
}

/// One direction's RNG and delay queue.
struct Direction {
    rng: ChaCha8Rng,
    /// Min-heap on (release time, arrival sequence); the sequence keeps
    /// equal-time datagrams in arrival order.
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    /// Datagram buffers referenced by the heap, reused through `free`.
    slots: Vec<Queued>,
    free: Vec<usize>,
}

impl Direction {
    fn new(seed: u64) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn next_release(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Applies the link to one arriving datagram.
    fn admit(
        &mut self,
        link: &LinkConfig,
        counters: &DirCounters,
        now: Instant,
        seq: &mut u64,
        data: &[u8],
        client: usize,
    ) {
        counters.received.fetch_add(1, Ordering::Relaxed);
        // Draw every random number for every datagram, whatever the outcome,
        // so one datagram's fate does not shift the draws of the next.
        let lost = self.rng.random_bool(link.loss.clamp(0.0, 1.0));
        let dup = self.rng.random_bool(link.duplicate.clamp(0.0, 1.0));
        let reorder = self.rng.random_bool(link.reorder.clamp(0.0, 1.0));
        let jitter1 = self.rng.random::<f64>();
        let jitter2 = self.rng.random::<f64>();
        if lost || link.blackhole {
            counters.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut release = now + link.delay + link.jitter.mul_f64(jitter1);
        if reorder {
            counters.reordered.fetch_add(1, Ordering::Relaxed);
            release += link.reorder_delay;
        }
        self.enqueue(link, counters, seq, release, data, client);
        if dup {
            counters.duplicated.fetch_add(1, Ordering::Relaxed);
            let release = now + link.delay + link.jitter.mul_f64(jitter2);
            self.enqueue(link, counters, seq, release, data, client);
        }
    }

    fn enqueue(
        &mut self,
        link: &LinkConfig,
        counters: &DirCounters,
        seq: &mut u64,
        release: Instant,
        data: &[u8],
        client: usize,
    ) {
        if self.heap.len() >= link.queue {
            counters.queue_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Queued {
                    data: Vec::with_capacity(data.len()),
                    client,
                });
                self.slots.len() - 1
            }
        };
        let Some(q) = self.slots.get_mut(slot) else {
            return;
        };
        q.data.clear();
        q.data.extend_from_slice(data);
        q.client = client;
        *seq += 1;
        self.heap.push(Reverse((release, *seq, slot)));
    }

    /// Pops the slot of the next datagram due at `now`; the slot stays
    /// readable until the next `enqueue`.
    fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let Reverse((t, _, _)) = self.heap.peek()?;
        if *t > now {
            return None;
        }
        let Reverse((_, _, slot)) = self.heap.pop()?;
        self.free.push(slot);
        Some(slot)
    }
}

struct Client {
    addr: SocketAddr,
    upstream: UdpSocket,
    /// The same socket for sending: a std handle sends at once, where tokio's
    /// `try_send` on a freshly registered socket reports `WouldBlock` until the
    /// reactor has seen it writable.
    upstream_tx: StdUdpSocket,
}

struct RelayTask {
    front: UdpSocket,
    /// `front` again, for sending (see `Client::upstream_tx`).
    front_tx: StdUdpSocket,
    bind: SocketAddr,
    upstream: SocketAddr,
    clients: Vec<Client>,
    by_addr: HashMap<SocketAddr, usize>,
    max_clients: usize,
    to_server: Direction,
    to_client: Direction,
    shared: Arc<Shared>,
    seq: u64,
    /// Rebinding requests handled.
    rebinds: u64,
}

impl RelayTask {
    /// A new upstream socket towards the server, bound on `ip`'s port 0.
    fn upstream_socket(&self, ip: std::net::IpAddr) -> io::Result<(StdUdpSocket, UdpSocket)> {
        let s = bind_udp(SocketAddr::new(ip, 0))?;
        s.connect(self.upstream)?;
        Ok((s.try_clone()?, UdpSocket::from_std(s)?))
    }

    /// A caller's socket ([`Relay::rebind_to`]) as an upstream socket.
    fn adopt_socket(&self, s: StdUdpSocket) -> io::Result<(StdUdpSocket, UdpSocket)> {
        s.connect(self.upstream)?;
        Ok((s.try_clone()?, UdpSocket::from_std(s)?))
    }

    /// Handles a pending [`Relay::rebind`].
    fn rebind(&mut self) {
        let wanted = self.shared.rebinds.load(Ordering::Relaxed);
        if wanted == self.rebinds {
            return;
        }
        self.rebinds = wanted;
        let ip = self
            .shared
            .rebind_ip
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or(self.bind.ip());
        self.bind = SocketAddr::new(ip, 0);
        let mut given = self
            .shared
            .rebind_socket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        for i in 0..self.clients.len() {
            let socket = match given.take() {
                Some(s) => self.adopt_socket(s),
                None => self.upstream_socket(ip),
            };
            if let Ok((tx, rx)) = socket
                && let Some(c) = self.clients.get_mut(i)
            {
                c.upstream = rx;
                c.upstream_tx = tx;
            }
        }
        self.publish_sources();
    }

    fn publish_sources(&self) {
        let list = self
            .clients
            .iter()
            .filter_map(|c| c.upstream_tx.local_addr().ok())
            .collect();
        *self
            .shared
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = list;
    }

    async fn run(mut self) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut sleep: Pin<Box<Sleep>> = Box::pin(tokio::time::sleep(Duration::from_secs(3600)));
        loop {
            self.rebind();
            let now = Instant::now();
            self.release_due(now);
            let links = {
                let l = self
                    .shared
                    .links
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                l.clone()
            };
            let mut busy = false;
            // Client → server.
            for _ in 0..READ_BURST {
                match self.front.try_recv_from(&mut buf) {
                    Ok((n, from)) => {
                        busy = true;
                        let Some(client) = self.client_index(from) else {
                            continue;
                        };
                        let data = buf.get(..n).unwrap_or(&[]);
                        self.to_server.admit(
                            &links.0,
                            &self.shared.to_server,
                            now,
                            &mut self.seq,
                            data,
                            client,
                        );
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // ICMP errors from earlier sends and the like: keep going.
                    Err(_) => {}
                }
            }
            // Server → clients.
            for client in 0..self.clients.len() {
                for _ in 0..READ_BURST {
                    let Some(c) = self.clients.get(client) else {
                        break;
                    };
                    match c.upstream.try_recv(&mut buf) {
                        Ok(n) => {
                            busy = true;
                            let data = buf.get(..n).unwrap_or(&[]);
                            self.to_client.admit(
                                &links.1,
                                &self.shared.to_client,
                                now,
                                &mut self.seq,
                                data,
                                client,
                            );
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {}
                    }
                }
            }
            // Zero-delay datagrams go out before the next read.
            self.release_due(Instant::now());
            if busy {
                tokio::task::yield_now().await;
                continue;
            }
            let next = match (self.to_server.next_release(), self.to_client.next_release()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // At most 20 ms idle, so a rebinding request is seen soon.
            let cap = Instant::now() + Duration::from_millis(20);
            let deadline = next.map_or(cap, |n| n.min(cap));
            if sleep.deadline() != deadline {
                sleep.as_mut().reset(deadline);
            }
            let front = &self.front;
            let clients = &self.clients;
            poll_fn(|cx| {
                let mut ready = false;
                if front.poll_recv_ready(cx).is_ready() {
                    ready = true;
                }
                for c in clients {
                    if c.upstream.poll_recv_ready(cx).is_ready() {
                        ready = true;
                    }
                }
                if sleep.as_mut().poll(cx).is_ready() {
                    ready = true;
                }
                if ready {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
    }

    /// The index of `from`'s upstream socket, creating it on first contact.
    fn client_index(&mut self, from: SocketAddr) -> Option<usize> {
        if let Some(&i) = self.by_addr.get(&from) {
            return Some(i);
        }
        if self.clients.len() >= self.max_clients {
            self.shared.refused_clients.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let socket = self.upstream_socket(self.bind.ip());
        let Ok((upstream_tx, upstream)) = socket else {
            self.shared.refused_clients.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        self.clients.push(Client {
            addr: from,
            upstream,
            upstream_tx,
        });
        let i = self.clients.len() - 1;
        self.by_addr.insert(from, i);
        self.publish_sources();
        self.shared.clients.fetch_add(1, Ordering::Relaxed);
        Some(i)
    }

    /// Sends every queued datagram whose time has come.
    fn release_due(&mut self, now: Instant) {
        while let Some(slot) = self.to_server.pop_due(now) {
            let res = match self.to_server.slots.get(slot) {
                Some(q) => match self.clients.get(q.client) {
                    Some(c) => c.upstream_tx.send(&q.data),
                    None => Err(io::ErrorKind::NotFound.into()),
                },
                None => Err(io::ErrorKind::NotFound.into()),
            };
            count_send(&self.shared.to_server, res);
        }
        while let Some(slot) = self.to_client.pop_due(now) {
            let res = match self.to_client.slots.get(slot) {
                Some(q) => match self.clients.get(q.client) {
                    Some(c) => self.front_tx.send_to(&q.data, c.addr),
                    None => Err(io::ErrorKind::NotFound.into()),
                },
                None => Err(io::ErrorKind::NotFound.into()),
            };
            count_send(&self.shared.to_client, res);
        }
    }
}

fn count_send(counters: &DirCounters, res: io::Result<usize>) {
    match res {
        Ok(n) => {
            counters.sent.fetch_add(1, Ordering::Relaxed);
            counters.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        Err(_) => {
            counters.send_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}
