//! The one simulator: [`kcpio::Conn`]s over a seeded virtual link, on a
//! virtual clock that jumps from event to event.
//!
//! Every node is a `Conn` plus the datagram path the tokio driver gives it:
//! `poll_transmit` into a reused slot, `PacketCrypto::seal` with a nonce
//! from the node's seeded generator, the link, `PacketCrypto::open`, then
//! `handle_packet`. So a run exercises the shipped pipeline (ARQ, FEC
//! encoder and decoder, flush merging, crypto), not a copy of it.
//!
//! The link of each direction drops, duplicates, delays (fixed delay plus
//! jitter), holds back (reordering), blacks out in time windows, and checks
//! every sealed datagram against an MTU cap (a bigger one fails the test).
//! A link may first cross a [`Bottleneck`]: a rate and a drop-tail queue,
//! shared by every link that names it (as `tc tbf` is in the field bench);
//! its random loss then happens after the bottleneck, as there.
//!
//! One step ([`Sim::drive`]) is what one driver wake-up does, in the
//! driver's order:
//!
//! 1. the datagrams due now are opened and handed to their `Conn`s; a
//!    `Conn` whose timer is due and got no input runs it and sends at once
//!    (the driver's timer wheel);
//! 2. the application runs (the caller's closure: reads, replies, writes);
//! 3. every `Conn` runs its timers and drains `poll_transmit` onto the link.
//!
//! Step 3 after step 2 is the driver's deferred flush: a session fed input
//! that woke a reader is serviced after the reader ran, so a reply leaves
//! in the same datagram as the ACKs of what it answers (`Conn` merges the
//! flushes; the order of the calls is the driver's policy, modelled here).
//! Then the clock jumps to the earliest of: the next datagram arrival,
//! every `Conn`'s `poll_timeout`, and the application's own wake-up.
//!
//! Addresses (for address changes): a node may be [`placed`](Sim::place)
//! at an address and send to one; a [`listen`](Sim::listen)ing host at an
//! address demultiplexes what reaches it through the listener's session
//! table and migration rules (`kcpio::sim_support`: the driver's code), so
//! a new conversation creates its session node as the driver's accept does,
//! a datagram from another address of a live session goes through
//! `from_elsewhere` and the path probe, and the session sends to the
//! table's address for it. A datagram for an address nobody holds (a
//! client that [`moved`](Sim::move_node)) is lost. A [`Mirror`] copies a
//! node's datagrams from a third address, and [`Sim::replay`] sends every
//! captured one again from there.
//!
//! Deterministic: a run is fixed by its seed; nothing reads the wall clock.
//! Every loop is bounded by a step count.

// Each test binary uses a different subset.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use kcpio::sim_support::{self as listener, Listener, Route, Verdict};
use kcpio::{Config, Conn, SessionError};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A bursty link's loss chain steps once more per this much silence
/// before a datagram (closed form, one draw per datagram as before).
/// Flows denser than one datagram per 100 ms (data, acks, the datagram
/// receiver's reports) see the per-datagram chain unchanged; connect
/// probes 250 ms to 2 s apart see losses that are nearly independent, as
/// on a real path whose bad spells last milliseconds, not seconds (here a
/// sparse flow's spell lasts about `burst` x 50 ms: still pessimistic).
pub(crate) const BURST_SLOT_MS: u64 = 50;

/// IPv4 + UDP header bytes, for the wire-byte yardstick.
pub(crate) const IP_UDP: u64 = 28;

/// One direction of the path.
#[derive(Clone, Debug)]
pub(crate) struct Link {
    /// Probability a datagram is dropped.
    pub(crate) loss: f64,
    /// Mean length of a loss burst in datagrams (Gilbert-Elliott, the
    /// stationary loss staying `loss`); at most 1 means independent losses.
    /// The chain steps once per datagram, and once more per further
    /// [`BURST_SLOT_MS`] of silence before it: a bad spell lasts in time,
    /// not across a sparse flow's seconds.
    pub(crate) burst: f64,
    /// Probability a datagram arrives twice.
    pub(crate) dup: f64,
    /// Probability a datagram is held back an extra 3 × jitter.
    pub(crate) reorder: f64,
    /// One-way delay in ms.
    pub(crate) delay: u64,
    /// Extra delay in ms, uniform in `0..=jitter`, per datagram.
    pub(crate) jitter: u64,
    /// Largest datagram the path carries; a bigger one fails the test.
    pub(crate) mtu_cap: usize,
    /// Windows `[from, to)` (ms since the start) in which everything sent
    /// is dropped.
    pub(crate) blackouts: Vec<(u64, u64)>,
    /// The [`Bottleneck`] (an index from [`Sim::add_bottleneck`]) every
    /// datagram crosses before the rest of the link.
    pub(crate) bottleneck: Option<usize>,
}

/// A rate and a drop-tail queue: a datagram that finds more than `queue`
/// bytes waiting is dropped, others leave one after another at `rate`.
#[derive(Clone, Debug)]
pub(crate) struct Bottleneck {
    /// Bytes per second.
    pub(crate) rate: u64,
    /// Queue limit in bytes.
    pub(crate) queue: u64,
    /// When the last accepted datagram finishes leaving.
    busy_until: Duration,
    /// Datagrams dropped at the queue, and accepted.
    pub(crate) drops: u64,
    pub(crate) passed: u64,
    /// Every accepted datagram: when it arrived (ms on the `Conn` clock)
    /// and its queueing delay (µs).
    pub(crate) delays: Vec<(u64, u64)>,
}

impl Bottleneck {
    /// The `pct` percentile of the queueing delay (µs) of datagrams that
    /// arrived in `[from, to)` ms.
    pub(crate) fn delay_percentile(&self, from: u64, to: u64, pct: usize) -> u64 {
        let mut d: Vec<u64> = self
            .delays
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|&(_, us)| us)
            .collect();
        if d.is_empty() {
            return 0;
        }
        d.sort_unstable();
        d[(d.len() - 1) * pct / 100]
    }

    fn tx_time(&self, bytes: u64) -> Duration {
        Duration::from_nanos(bytes * 1_000_000_000 / self.rate.max(1))
    }

    /// When a datagram of `bytes` offered at `now` leaves, or `None` when
    /// the queue drops it.
    fn offer(&mut self, now: Duration, bytes: u64) -> Option<Duration> {
        let backlog = self.busy_until.saturating_sub(now);
        let queued = backlog.as_nanos() as u64 * self.rate / 1_000_000_000;
        if queued + bytes > self.queue {
            self.drops += 1;
            return None;
        }
        self.passed += 1;
        self.delays
            .push((now.as_millis() as u64, backlog.as_micros() as u64));
        self.busy_until = now.max(self.busy_until) + self.tx_time(bytes);
        Some(self.busy_until)
    }
}

impl Link {
    /// A link that keeps order and loses nothing: `delay` ms, no jitter.
    pub(crate) fn clean(delay: u64) -> Self {
        Self {
            loss: 0.0,
            burst: 0.0,
            dup: 0.0,
            reorder: 0.0,
            delay,
            jitter: 0,
            mtu_cap: 1500,
            blackouts: Vec::new(),
            bottleneck: None,
        }
    }

    /// Every datagram crosses bottleneck `id` first.
    pub(crate) fn through(mut self, id: usize) -> Self {
        self.bottleneck = Some(id);
        self
    }

    /// The grid's link: `loss`, 1% duplicates, 2% held back, 20 ms + 0-10
    /// ms of jitter, capped at `mtu_cap`.
    pub(crate) fn lossy(loss: f64, mtu_cap: usize) -> Self {
        Self {
            loss,
            burst: 0.0,
            dup: 0.01,
            reorder: 0.02,
            delay: 20,
            jitter: 10,
            mtu_cap,
            blackouts: Vec::new(),
            bottleneck: None,
        }
    }

    /// Everything sent in `[from, to)` ms is lost.
    pub(crate) fn blackout(mut self, from: u64, to: u64) -> Self {
        self.blackouts.push((from, to));
        self
    }

    fn dark(&self, at: u64) -> bool {
        self.blackouts.iter().any(|&(a, b)| at >= a && at < b)
    }
}

/// One `Conn` with its cipher, nonce source, outgoing link and counters.
pub(crate) struct Node {
    pub(crate) conn: Conn,
    /// Where its datagrams go.
    pub(crate) peer: usize,
    /// Its outgoing link.
    pub(crate) link: Link,
    config: Config,
    nonces: ChaCha8Rng,
    /// Datagrams sealed and sent (parity included), lost or not.
    pub(crate) sent: u64,
    /// Services (driver wake-ups) that sent at least one datagram: each is
    /// one batch handed to the socket, a `sendmmsg` in the driver.
    pub(crate) batches: u64,
    /// Bytes of those on the wire, plus [`IP_UDP`] each.
    pub(crate) wire_bytes: u64,
    /// Datagrams that failed to open.
    pub(crate) bad_open: u64,
    /// The last datagram sent was lost (for bursty links).
    lost_last: bool,
    /// When it was sent (for bursty links; `None`: nothing yet).
    sent_last: Option<Duration>,
    /// Lifecycle as last logged: failure reason, finished.
    seen: (Option<SessionError>, bool),
    /// Its address and where it sends (a [`placed`](Sim::place) client);
    /// `None`: it sends to node `peer`, addresses play no part.
    pub(crate) addr: Option<SocketAddr>,
    dest: Option<SocketAddr>,
    /// A session of the listening host (it sends to the table's address).
    session: Option<listener::Session>,
}

/// Where a datagram goes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Target {
    Node(usize),
    Addr(SocketAddr),
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Duration,
    seq: u64,
    to: Target,
    from: Option<SocketAddr>,
    bytes: Vec<u8>,
}

/// A listening host: one socket's session table at `addr`.
#[derive(Debug)]
pub(crate) struct Host {
    pub(crate) addr: SocketAddr,
    table: Listener,
    config: Config,
    /// The link its new sessions send on.
    link: Link,
    /// Session nodes, in the order they were accepted.
    pub(crate) sessions: Vec<usize>,
    /// Counted as the driver counts: `migrations` (when, old, new),
    /// `path_probes`, `migration_stale`, and the other drops by reason.
    pub(crate) migrations: Vec<(u64, SocketAddr, SocketAddr)>,
    pub(crate) path_probes: u64,
    pub(crate) stale: u64,
    pub(crate) dropped: HashMap<String, u64>,
    /// Sealed bytes received from and sent to each address.
    pub(crate) received_from: HashMap<SocketAddr, u64>,
    pub(crate) sent_to: HashMap<SocketAddr, u64>,
}

/// Copies of a node's datagrams sent from a third address: each leaves
/// with the original and arrives `delay` ms later, unimpaired; with
/// `capture`, every datagram of the node is kept for [`Sim::replay`].
#[derive(Clone, Debug)]
pub(crate) struct Mirror {
    pub(crate) node: usize,
    pub(crate) from: SocketAddr,
    pub(crate) delay: u64,
    /// Copies are sent (else only captured).
    pub(crate) on: bool,
}

/// What the application closure of [`Sim::drive`] asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Stop driving.
    Done,
    /// Run again at the next network or timer event.
    Continue,
    /// Run again no later than this instant (ms since the start).
    WakeAt(u64),
}

/// N `Conn`s, their links and the virtual clock.
pub(crate) struct Sim {
    pub(crate) nodes: Vec<Node>,
    rng: ChaCha8Rng,
    /// The clock `Conn`s see: `start` plus the virtual ms elapsed.
    start: Duration,
    now: Duration,
    wire: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    /// Steps taken so far (every [`drive`](Self::drive) loop iteration).
    pub(crate) steps: u64,
    slot: Vec<u8>,
    /// Nodes fed input in the current step.
    fed: Vec<bool>,
    /// Lifecycle changes and the application's notes, ms since the start.
    pub(crate) log: String,
    /// Rate-limited queues the links may cross.
    pub(crate) bottlenecks: Vec<Bottleneck>,
    /// A busy host: each step wakes late with probability `.0`, by 1 to
    /// `.1` ms (drawn from `.2`, so the path's draws stay as they were).
    late: Option<(f64, u64, ChaCha8Rng)>,
    /// Late wake-ups so far, and their total lateness (ms).
    pub(crate) late_wakeups: (u64, u64),
    /// The least a late wake-up is late by (ms).
    late_min: u64,
    /// Datagrams reach their `Conn` with the time they arrived, as the
    /// driver's do from the kernel's receive stamps; else (a transport
    /// without them) with the time the host woke to handle them.
    stamped: bool,
    /// The listening host, if any.
    pub(crate) host: Option<Host>,
    pub(crate) mirror: Option<Mirror>,
    /// The mirrored node's datagrams as sent (destination, sealed bytes).
    captured: Vec<(SocketAddr, Vec<u8>)>,
    /// Datagrams for an address nobody holds, and what the mirror's
    /// address received (sealed bytes).
    pub(crate) unroutable: u64,
    pub(crate) to_mirror: u64,
    /// A node whose datagrams are kept as sent, in plaintext
    /// ([`capture_plain`](Self::capture_plain)), and they.
    plain: Option<(usize, Vec<Vec<u8>>)>,
}

impl Sim {
    /// An empty simulation whose `Conn` clock starts at `start` ms (put it
    /// just below 2^32 to wrap the KCP timestamps mid-run).
    pub(crate) fn new(seed: u64, start: u64) -> Self {
        Self {
            nodes: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            start: Duration::from_millis(start),
            now: Duration::from_millis(start),
            wire: BinaryHeap::new(),
            seq: 0,
            steps: 0,
            slot: vec![0; 1500],
            fed: Vec::new(),
            log: String::new(),
            bottlenecks: Vec::new(),
            late: None,
            late_wakeups: (0, 0),
            late_min: 1,
            stamped: false,
            host: None,
            mirror: None,
            captured: Vec::new(),
            plain: None,
            unroutable: 0,
            to_mirror: 0,
        }
    }

    /// From now on the host is busy: each wake-up comes late with
    /// probability `p`, by a uniform 1 to `max_ms` ms (seeded by `seed`).
    /// Everything due meanwhile (datagrams, timers) is handled together
    /// when it wakes, as a driver task that was not scheduled in time.
    pub(crate) fn late_host(&mut self, p: f64, max_ms: u64, seed: u64) {
        self.late_host_between(p, 1, max_ms, seed);
    }

    /// As [`late_host`](Self::late_host), late by `min_ms` to `max_ms`:
    /// with `p` 1, a host so starved that no wake-up is ever on time.
    pub(crate) fn late_host_between(&mut self, p: f64, min_ms: u64, max_ms: u64, seed: u64) {
        self.late_min = min_ms.max(1);
        let max = max_ms.max(self.late_min);
        self.late = Some((p, max, ChaCha8Rng::seed_from_u64(seed)));
    }

    /// From now on each datagram reaches its `Conn` with the time it
    /// arrived (`Conn::handle_packet_at`), as the driver's do on Linux UDP
    /// (kernel receive stamps), not only with the late wake-up's.
    pub(crate) fn stamp_arrivals(&mut self) {
        self.stamped = true;
    }

    /// What a datagram that arrived at `at` is handed over as having
    /// arrived at.
    fn arrival(&self, at: Duration) -> Duration {
        if self.stamped {
            at.min(self.now)
        } else {
            self.now
        }
    }

    /// Two nodes of conversation `conv`, `config` on both, `link` both
    /// ways; both sequence spaces start at `initial_sn`.
    pub(crate) fn pair(
        config: &Config,
        link: Link,
        seed: u64,
        start: u64,
        initial_sn: u32,
    ) -> Self {
        let mut sim = Self::new(seed, start);
        let a = sim.add(0x1234_5678, config, link.clone());
        let b = sim.add(0x1234_5678, config, link);
        sim.connect(a, b);
        for n in &mut sim.nodes {
            assert!(n.conn.set_initial_sn(initial_sn));
        }
        sim
    }

    /// Adds a node (its peer is itself until [`connect`](Self::connect)).
    pub(crate) fn add(&mut self, conv: u32, config: &Config, link: Link) -> usize {
        let conn = Conn::new(conv, config).expect("a built Config is valid");
        self.add_conn(conn, config, link)
    }

    fn add_conn(&mut self, conn: Conn, config: &Config, link: Link) -> usize {
        let id = self.nodes.len();
        self.nodes.push(Node {
            conn,
            peer: id,
            link,
            config: config.clone(),
            nonces: ChaCha8Rng::seed_from_u64(self.rng.next_u64()),
            sent: 0,
            batches: 0,
            wire_bytes: 0,
            bad_open: 0,
            lost_last: false,
            sent_last: None,
            seen: (None, false),
            addr: None,
            dest: None,
            session: None,
        });
        id
    }

    /// A listening host at `addr` with `config` (its table, caps and
    /// migration switch); its sessions send on `link`.
    pub(crate) fn listen(&mut self, addr: SocketAddr, config: &Config, link: Link) {
        self.host = Some(Host {
            addr,
            table: Listener::new(config),
            config: config.clone(),
            link,
            sessions: Vec::new(),
            migrations: Vec::new(),
            path_probes: 0,
            stale: 0,
            dropped: HashMap::new(),
            received_from: HashMap::new(),
            sent_to: HashMap::new(),
        });
    }

    /// Node `i` is at `addr` and sends to `dest`.
    pub(crate) fn place(&mut self, i: usize, addr: SocketAddr, dest: SocketAddr) {
        self.nodes[i].addr = Some(addr);
        self.nodes[i].dest = Some(dest);
    }

    /// Node `i` now sends from `addr` (a NAT rebinding, a new network);
    /// what is in flight to its old address is lost.
    pub(crate) fn move_node(&mut self, i: usize, addr: SocketAddr) {
        let old = self.nodes[i].addr.replace(addr);
        self.note(format_args!("node {i} moves from {old:?} to {addr}"));
    }

    /// The address the host's table sends session node `i`'s datagrams to.
    pub(crate) fn session_peer(&self, i: usize) -> Option<SocketAddr> {
        let s = self.nodes.get(i)?.session?;
        self.host.as_ref()?.table.peer(s)
    }

    /// Sends every captured datagram of the mirrored node again, now, from
    /// the mirror's address, arriving `delay` ms later.
    pub(crate) fn replay(&mut self, delay: u64) {
        let Some(m) = self.mirror.clone() else {
            return;
        };
        let at = self.now + Duration::from_millis(delay);
        for (dest, bytes) in std::mem::take(&mut self.captured) {
            self.seq += 1;
            self.wire.push(Reverse(InFlight {
                at,
                seq: self.seq,
                to: Target::Addr(dest),
                from: Some(m.from),
                bytes,
            }));
        }
    }

    /// A bottleneck of `rate` bytes/s with a drop-tail queue of `queue`
    /// bytes; links cross it with [`Link::through`].
    pub(crate) fn add_bottleneck(&mut self, rate: u64, queue: u64) -> usize {
        self.bottlenecks.push(Bottleneck {
            rate,
            queue,
            busy_until: Duration::ZERO,
            drops: 0,
            passed: 0,
            delays: Vec::new(),
        });
        self.bottlenecks.len() - 1
    }

    /// Points `a` and `b` at each other.
    pub(crate) fn connect(&mut self, a: usize, b: usize) {
        self.nodes[a].peer = b;
        self.nodes[b].peer = a;
    }

    /// Node `i`'s `Conn`.
    pub(crate) fn conn(&mut self, i: usize) -> &mut Conn {
        &mut self.nodes[i].conn
    }

    /// The clock as the `Conn`s see it.
    pub(crate) fn now(&self) -> Duration {
        self.now
    }

    /// Virtual ms since the start.
    pub(crate) fn elapsed_ms(&self) -> u64 {
        (self.now - self.start).as_millis() as u64
    }

    /// Nothing in flight on any link.
    pub(crate) fn wire_is_empty(&self) -> bool {
        self.wire.is_empty()
    }

    /// Appends `what` to the log, stamped with the virtual time.
    pub(crate) fn note(&mut self, what: impl std::fmt::Display) {
        let t = self.elapsed_ms();
        let _ = writeln!(self.log, "{t:>6} ms  {what}");
    }

    /// Every node runs its timers and sends what it has; lifecycle changes
    /// go to the log.
    pub(crate) fn transmit(&mut self) {
        for i in 0..self.nodes.len() {
            self.service(i);
        }
    }

    /// Node `i` runs its timers and sends what it has (the driver's
    /// `service`); a lifecycle change goes to the log.
    fn service(&mut self, i: usize) {
        let now = self.now;
        self.nodes[i].conn.handle_timeout(now);
        let (from, to) = self.target(i);
        let sent = self.nodes[i].sent;
        loop {
            let node = &mut self.nodes[i];
            let Some(t) = node.conn.poll_transmit(now, &mut self.slot) else {
                break;
            };
            self.emit(i, t.len, from, to);
        }
        if self.nodes[i].sent != sent {
            self.nodes[i].batches += 1;
        }
        let node = &mut self.nodes[i];
        let state = (node.conn.error(), node.conn.is_finished());
        if state != node.seen {
            node.seen = state;
            match state {
                (Some(e), _) => self.note(format_args!("node {i} failed: {e:?}")),
                (None, true) => self.note(format_args!("node {i} finished")),
                (None, false) => {}
            }
        }
    }

    /// Where node `i` sends from and to now.
    fn target(&self, i: usize) -> (Option<SocketAddr>, Target) {
        let node = &self.nodes[i];
        if let (Some(s), Some(h)) = (node.session, &self.host) {
            // The driver sends to the table's address for the session.
            let to = h.table.peer(s).expect("a live session");
            return (Some(h.addr), Target::Addr(to));
        }
        match (node.addr, node.dest) {
            (Some(a), Some(d)) => (Some(a), Target::Addr(d)),
            _ => (None, Target::Node(node.peer)),
        }
    }

    /// Keeps node `i`'s datagrams from now on, in plaintext, as sent
    /// (lost or not): [`plain_sent`](Self::plain_sent).
    pub(crate) fn capture_plain(&mut self, i: usize) {
        self.plain = Some((i, Vec::new()));
    }

    /// The datagrams kept by [`capture_plain`](Self::capture_plain).
    pub(crate) fn plain_sent(&self, i: usize) -> &[Vec<u8>] {
        match &self.plain {
            Some((n, sent)) if *n == i => sent,
            _ => &[],
        }
    }

    /// Seals the `len` plaintext bytes node `i` wrote at `slot[header..]`
    /// and puts them on its link from `from` to `to`.
    fn emit(&mut self, i: usize, len: usize, from: Option<SocketAddr>, to: Target) {
        let now = self.now;
        let elapsed = self.elapsed_ms();
        let node = &mut self.nodes[i];
        if let Some((n, sent)) = self.plain.as_mut()
            && *n == i
        {
            let at = node.conn.header_len();
            sent.push(self.slot[at..at + len].to_vec());
        }
        let crypto = node.config.packet_crypto();
        let mut nonce = [0u8; 16];
        let nonce = &mut nonce[..crypto.nonce_len()];
        node.nonces.fill_bytes(nonce);
        let n = crypto.seal(&mut self.slot, len, nonce).expect("seal");
        assert!(
            n <= node.link.mtu_cap,
            "node {i}: a {n}-byte datagram exceeds the path MTU {}",
            node.link.mtu_cap
        );
        node.sent += 1;
        node.wire_bytes += n as u64 + IP_UDP;
        if let (Some(h), Target::Addr(a)) = (self.host.as_mut(), to)
            && node.session.is_some()
        {
            *h.sent_to.entry(a).or_default() += n as u64;
        }
        if let (Some(m), Target::Addr(dest)) = (&self.mirror, to)
            && m.node == i
        {
            self.captured.push((dest, self.slot[..n].to_vec()));
            if m.on {
                self.seq += 1;
                self.wire.push(Reverse(InFlight {
                    at: now + Duration::from_millis(m.delay),
                    seq: self.seq,
                    to,
                    from: Some(m.from),
                    bytes: self.slot[..n].to_vec(),
                }));
            }
        }
        let link = &node.link;
        // The bottleneck first, then the loss and delay behind it.
        let mut leave = now;
        if let Some(b) = link.bottleneck {
            match self.bottlenecks[b].offer(now, n as u64 + IP_UDP) {
                Some(t) => leave = t,
                None => return,
            }
        }
        let lost = if link.burst > 1.0 {
            // Two states, bad (lost) and good: bad stays bad with `r`,
            // good turns bad with `q`. After `k` steps the chain has
            // forgotten all but `(r - q)^k` of where it was.
            let r = 1.0 - 1.0 / link.burst;
            let q = link.loss * (1.0 - r) / (1.0 - link.loss);
            let gap = node
                .sent_last
                .map_or(0, |t| now.saturating_sub(t).as_millis());
            let k =
                i32::try_from(gap / u128::from(BURST_SLOT_MS)).map_or(1_000, |k| k.clamp(1, 1_000));
            let p = if k == 1 {
                if node.lost_last { r } else { q }
            } else {
                let fade = (r - q).powi(k);
                if node.lost_last {
                    link.loss + (1.0 - link.loss) * fade
                } else {
                    link.loss * (1.0 - fade)
                }
            };
            self.rng.random_bool(p.clamp(0.0, 1.0))
        } else {
            self.rng.random_bool(link.loss)
        };
        node.lost_last = lost;
        node.sent_last = Some(now);
        if link.dark(elapsed) || lost {
            return;
        }
        let copies = if chance(&mut self.rng, link.dup) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = link.delay + self.rng.random_range(0..=link.jitter);
            if chance(&mut self.rng, link.reorder) {
                delay += 3 * link.jitter;
            }
            self.seq += 1;
            self.wire.push(Reverse(InFlight {
                at: leave + Duration::from_millis(delay),
                seq: self.seq,
                to,
                from,
                bytes: self.slot[..n].to_vec(),
            }));
        }
    }

    /// A datagram arrived for `p.to`: opened and handed to its `Conn`, through
    /// the host's table when it is the host's.
    fn arrive(&mut self, mut p: InFlight) {
        let to = match p.to {
            Target::Node(i) => i,
            Target::Addr(a) if self.host.as_ref().is_some_and(|h| h.addr == a) => {
                return self.arrive_at_host(p);
            }
            Target::Addr(a) => {
                if self.mirror.as_ref().is_some_and(|m| m.from == a) {
                    self.to_mirror += p.bytes.len() as u64;
                }
                match self
                    .nodes
                    .iter()
                    .position(|n| n.session.is_none() && n.addr == Some(a))
                {
                    Some(i) => i,
                    None => {
                        self.unroutable += 1;
                        return;
                    }
                }
            }
        };
        let arrived = self.arrival(p.at);
        let node = &mut self.nodes[to];
        self.fed[to] = true;
        match node.config.packet_crypto().open(&mut p.bytes) {
            Ok(range) => {
                let _ = node
                    .conn
                    .handle_packet_at(self.now, arrived, &p.bytes[range]);
            }
            Err(_) => node.bad_open += 1,
        }
    }

    /// The driver's receive path for one datagram: open, route through the
    /// table; a new conversation gets its session node; another address
    /// of a live session goes through the migration rules (and may get a
    /// path probe) before the session's `Conn` sees it.
    fn arrive_at_host(&mut self, mut p: InFlight) {
        let now = self.now;
        let arrived = self.arrival(p.at);
        let from = p.from.expect("a datagram to an address has a source");
        let sealed = p.bytes.clone();
        let wire = sealed.len();
        let Some(h) = self.host.as_mut() else { return };
        *h.received_from.entry(from).or_default() += wire as u64;
        let Ok(range) = h.config.packet_crypto().open(&mut p.bytes) else {
            *h.dropped.entry("BadCrypto".into()).or_default() += 1;
            return;
        };
        let plain = &p.bytes[range];
        let backlog = 0;
        let (session, i) = match h.table.route(from, plain, &sealed, now, backlog) {
            Route::Deliver(s, i) => (s, i),
            Route::Accept(conv) => {
                let i = self.nodes.len();
                let (s, conn) = h.table.accept(from, conv, now, i).expect("a session");
                let (config, link) = (h.config.clone(), h.link.clone());
                h.sessions.push(i);
                let id = self.add_conn(conn, &config, link);
                self.nodes[id].session = Some(s);
                self.fed.push(false);
                self.note(format_args!("node {id} accepted from {from}"));
                (s, id)
            }
            Route::Migrate(s, i) => {
                let conn = &mut self.nodes[i].conn;
                let verdict = h.table.from_elsewhere(s, conn, from, plain, wire, now);
                match verdict {
                    Verdict::Stale => {
                        h.stale += 1;
                        return;
                    }
                    Verdict::Moved(old, new) => {
                        let t = (now - self.start).as_millis() as u64;
                        h.migrations.push((t, old, new));
                        self.note(format_args!("node {i} moved from {old} to {new}"));
                    }
                    // A weak candidate's probe: the datagram itself is stale.
                    Verdict::Candidate(_) | Verdict::Nudge => {
                        let again = verdict == Verdict::Candidate(true);
                        if let Some((len, to)) = h.table.probe(s, conn, now, again, &mut self.slot)
                        {
                            h.path_probes += 1;
                            let host = h.addr;
                            self.emit(i, len, Some(host), Target::Addr(to));
                        }
                        if verdict == Verdict::Nudge {
                            if let Some(h) = self.host.as_mut() {
                                h.stale += 1;
                            }
                            return;
                        }
                    }
                }
                (s, i)
            }
            Route::Drop(why) => {
                *h.dropped.entry(why).or_default() += 1;
                return;
            }
        };
        self.fed[i] = true;
        let conn = &mut self.nodes[i].conn;
        let _ = conn.handle_packet_at(now, arrived, plain);
        if let Some(h) = self.host.as_mut() {
            h.table.set_proven(session, &self.nodes[i].conn, now);
        }
    }

    /// Moves the clock to the next event, no later than `wake` (ms since
    /// the start), and hands every datagram due then to its `Conn`.
    /// Returns false when nothing at all is scheduled.
    pub(crate) fn advance(&mut self, wake: Option<u64>) -> bool {
        let mut next = self.wire.peek().map(|Reverse(p)| p.at);
        let deadlines = self.nodes.iter().filter_map(|n| n.conn.poll_timeout());
        let wake = wake.map(|w| self.start + Duration::from_millis(w));
        for d in deadlines.chain(wake) {
            next = Some(next.map_or(d, |n| n.min(d)));
        }
        let Some(mut next) = next else {
            return false;
        };
        if let Some((p, max, rng)) = &mut self.late
            && chance(rng, *p)
        {
            let by = rng.random_range(self.late_min..=*max);
            next += Duration::from_millis(by);
            self.late_wakeups.0 += 1;
            self.late_wakeups.1 += by;
        }
        self.now = self.now.max(next);
        self.fed.clear();
        self.fed.resize(self.nodes.len(), false);
        while self.wire.peek().is_some_and(|Reverse(p)| p.at <= self.now) {
            let Some(Reverse(p)) = self.wire.pop() else {
                break;
            };
            self.arrive(p);
        }
        // Timers due and no input: serviced before the application runs,
        // as the driver's fire_timers does (the application then sees what
        // the timers decided: a linger expired, a failure).
        for i in 0..self.nodes.len() {
            let due = self.nodes[i]
                .conn
                .poll_timeout()
                .is_some_and(|d| d <= self.now);
            if due && !self.fed[i] {
                self.service(i);
            }
        }
        true
    }

    /// Runs the simulation: `app` at every step, then [`transmit`], then
    /// [`advance`] to the next event. Returns true when `app` said
    /// [`Flow::Done`], false when nothing was left to happen. Panics after
    /// `max_steps` steps in all.
    ///
    /// [`transmit`]: Self::transmit
    /// [`advance`]: Self::advance
    pub(crate) fn drive(&mut self, max_steps: u64, mut app: impl FnMut(&mut Sim) -> Flow) -> bool {
        loop {
            let flow = app(self);
            self.transmit();
            if flow == Flow::Done {
                return true;
            }
            self.steps += 1;
            assert!(
                self.steps <= max_steps,
                "no end within {max_steps} steps at {} ms",
                self.elapsed_ms()
            );
            let wake = match flow {
                Flow::WakeAt(t) => Some(t),
                _ => None,
            };
            if !self.advance(wake) {
                return false;
            }
        }
    }

    /// Drives with no application until `until` ms, or until nothing is
    /// scheduled.
    pub(crate) fn run_until(&mut self, until: u64, max_steps: u64) {
        self.drive(max_steps, |sim| {
            if sim.elapsed_ms() >= until {
                Flow::Done
            } else {
                Flow::WakeAt(until)
            }
        });
    }
}

/// A draw with probability `p`; none at all (the stream is left as it
/// was) when `p` is 0, so turning an impairment off keeps the others'
/// draws.
fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    p > 0.0 && rng.random_bool(p)
}

/// Seeded random bytes.
pub(crate) fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    ChaCha8Rng::seed_from_u64(seed ^ 0x5eed).fill_bytes(&mut v);
    v
}

/// Compares `text` with the committed snapshot `kcpio/tests/snapshots/<name>`
/// (runs are deterministic, so a behaviour change shows up as a reviewable
/// diff); `UPDATE_SNAPSHOTS=1` rewrites it instead.
pub(crate) fn snapshot(name: &str, text: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write the snapshot");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_SNAPSHOTS=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        text, want,
        "simulation results changed; review, then UPDATE_SNAPSHOTS=1"
    );
}
