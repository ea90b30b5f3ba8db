//! The UDP mode's server: per session, one task reads the session's
//! datagrams and writes each to its flow's socket (opening the flow's
//! socket toward the target on its first datagram); per flow, one task
//! reads the target's replies and sends them into the session.
//!
//! With `--udp` every session is served so; with `--udptarget` the TCP
//! server hands each session that negotiated FEC datagrams here too
//! ([`serve_session`]), beside its smux streams.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kcpio::{KcpListener, KcpStream, RelaySocket};
use tokio::task::JoinHandle;

use super::client::{negotiated_since, report_mtu};
use super::{
    Control, DropReason, FlowCounters, HEADER_LEN, MAX_UDP, Seen, UdpStats, Window, control, lock,
    parse_control, parse_header, put_header, send_each,
};
use crate::config::Settings;
use crate::log::{Log, Repeats};
use crate::stats::Stats;

/// What every session's flows share: the settings, the counters and the
/// descriptor budget (`--maxstreams` flows over all sessions).
pub(crate) struct Shared {
    settings: Settings,
    /// Where the flows go: `-t` with `--udp`, `--udptarget` beside TCP.
    target: String,
    /// Whether a session here is counted in the stats line as a session
    /// (not when its mux counts it already).
    own_sessions: bool,
    stats: Arc<Stats>,
    udp: Arc<UdpStats>,
    log: Log,
    /// Flows open over all sessions.
    open: AtomicUsize,
    /// Failures to resolve the target or open a flow's socket: logged a few
    /// times, then once a minute (they come once per datagram).
    failures: Mutex<Repeats>,
}

/// A flow's share of the descriptor budget, returned when it is dropped.
struct Slot(Arc<Shared>);

impl Slot {
    fn take(shared: &Arc<Shared>) -> Option<Self> {
        let max = shared.settings.limits.max_streams;
        shared
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(Arc::clone(shared)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One flow of a session: its socket toward the target and the task that
/// reads it.
struct Flow {
    sock: Arc<RelaySocket>,
    reader: JoinHandle<()>,
    /// Sequence numbers received from the client.
    window: Window,
    /// Set by either direction on every datagram; cleared each tick.
    active: Arc<AtomicBool>,
    idle: u64,
    /// The sequence number of the next datagram from the target (its
    /// reader's, stored after each batch).
    next_seq: Arc<AtomicU32>,
    counters: Arc<FlowCounters>,
    _slot: Slot,
}

/// One session's flows, and where the target's datagrams of its recently
/// expired flows left off.
#[derive(Default)]
struct Flows {
    open: HashMap<u32, Flow>,
    ended: Ended,
}

/// `(flow id, next sequence number)` of a session's expired flows, oldest
/// first, at most `--udpflows`.
///
/// The client may hold a flow longer than this end (a longer `--udpidle`,
/// or ticks out of phase). When its id comes back, the new flow numbers
/// the target's datagrams on from where the old one stopped: numbered from
/// 0 again, they would be taken by the client's window as old (`duplicate`,
/// `too old`) until they passed the old flow's count. The client holds at
/// most `--udpflows` flows, and every flow this end expired after one the
/// client still holds is held by the client too (it expires them no
/// sooner), so such an id is not forgotten.
///
/// Looked up in O(1) per flow opened (the ids are the client's: SipHash);
/// the order queue holds at most twice the entries, plus 16, before it is
/// compacted.
#[derive(Default)]
struct Ended {
    /// Flow id: (next sequence number, when it was remembered).
    by_id: HashMap<u32, (u32, u64)>,
    /// (flow id, when), oldest first; an entry whose id was taken or
    /// remembered again since is stale and skipped.
    order: VecDeque<(u32, u64)>,
    count: u64,
}

impl Ended {
    /// Remembers where expired flow `id` left off, forgetting the oldest
    /// beyond `max`.
    fn push(&mut self, id: u32, next_seq: u32, max: usize) {
        let when = self.count;
        self.count += 1;
        self.by_id.insert(id, (next_seq, when));
        self.order.push_back((id, when));
        while self.by_id.len() > max {
            let Some((old, at)) = self.order.pop_front() else {
                break;
            };
            if self.by_id.get(&old).is_some_and(|&(_, w)| w == at) {
                self.by_id.remove(&old);
            }
        }
        if self.order.len() > 2 * max + 16 {
            let by_id = &self.by_id;
            self.order
                .retain(|(i, at)| by_id.get(i).is_some_and(|&(_, w)| w == *at));
        }
    }

    /// Where a flow opening as `id` numbers from: on from an expired flow
    /// of that id, else 0.
    fn take(&mut self, id: u32) -> u32 {
        self.by_id.remove(&id).map_or(0, |(seq, _)| seq)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

/// Serves the sessions of every listener until one fails to accept.
pub(crate) async fn run_udp_server(
    listeners: Arc<Vec<KcpListener>>,
    settings: Settings,
    stats: Arc<Stats>,
    log: Log,
) -> io::Result<()> {
    let shared = Arc::new(Shared {
        udp: Arc::clone(stats.udp()),
        target: settings.peer.clone(),
        own_sessions: true,
        settings,
        stats,
        log,
        open: AtomicUsize::new(0),
        failures: Mutex::default(),
    });
    let mut set = tokio::task::JoinSet::new();
    for i in 0..listeners.len() {
        let listeners = Arc::clone(&listeners);
        let shared = Arc::clone(&shared);
        set.spawn(async move {
            loop {
                let (kcp, from) = listeners[i].accept().await?;
                tokio::spawn(serve_session(Arc::new(kcp), from, Arc::clone(&shared)));
            }
        });
    }
    match set.join_next().await {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(io::Error::other(e)),
        None => Ok(()),
    }
}

/// What the flows of a TCP server's sessions share (`--udptarget`): the
/// counters in `stats`, flows sent to `target`.
pub(crate) fn beside(
    settings: Settings,
    target: String,
    stats: Arc<Stats>,
    log: Log,
) -> Arc<Shared> {
    Arc::new(Shared {
        udp: Arc::clone(stats.udp()),
        target,
        own_sessions: false,
        settings,
        stats,
        log,
        open: AtomicUsize::new(0),
        failures: Mutex::default(),
    })
}

/// Carries one session's flows until the session fails.
///
/// The session's datagrams reach the flows' sockets from its driver's task
/// ([`KcpStream::set_datagram_sink`]): no task of this session is woken per
/// datagram. This task waits for the session's failure and ages the flows
/// once a second; the flow table is locked by the sink once per batch of
/// datagrams and by the task once per tick.
pub(crate) async fn serve_session(kcp: Arc<KcpStream>, from: SocketAddr, shared: Arc<Shared>) {
    let log = &shared.log;
    let udp = &shared.udp;
    let flag = if shared.own_sessions {
        "--target"
    } else {
        "--udptarget"
    };
    // The session's datagrams reach this buffer only while no sink is
    // installed: while the target is looked up (dropped), and between the
    // sink's removal and now (passed on below). With the sink, the wait
    // below ends on the session's failure.
    let mut buf = vec![0u8; HEADER_LEN + MAX_UDP];
    let Some(target) = resolve(&kcp, &from, flag, &shared, &mut buf).await else {
        return;
    };
    log.line(format!("{from}: udp session opened, flows go to {target}"));
    let mut negotiated = report_mtu(log, &kcp);
    if shared.own_sessions {
        shared.stats.watch_session(&kcp);
    }
    udp.watch_session(&kcp);
    udp.sessions_opened.fetch_add(1, Ordering::Relaxed);
    let flows: Arc<Mutex<Flows>> = Arc::default();
    {
        let flows = Arc::clone(&flows);
        let shared = Arc::clone(&shared);
        // Weak: the sink lives in the session, and a strong handle there
        // would keep the session alive after this task ends.
        let session = Arc::downgrade(&kcp);
        kcp.set_datagram_sink(move |batch| {
            pass_on(batch, &mut lock(&flows), &session, (target, &from), &shared);
        });
    }
    let idle_ticks = shared.settings.udp.idle.as_secs().max(1);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let why = loop {
        tokio::select! {
            r = kcp.recv_datagram(&mut buf) => {
                match r {
                    Ok(n) => {
                        let d = buf.get(..n).unwrap_or_default();
                        let session = Arc::downgrade(&kcp);
                        pass_on(&[d], &mut lock(&flows), &session, (target, &from), &shared);
                    }
                    Err(e) => break e,
                }
            }
            _ = tick.tick() => {
                negotiated_since(log, &kcp, &mut negotiated);
                let mut flows = lock(&flows);
                let Flows { open, ended } = &mut *flows;
                open.retain(|id, f| {
                    if f.active.swap(false, Ordering::Relaxed) {
                        f.idle = 0;
                    } else {
                        f.idle += 1;
                    }
                    if f.idle < idle_ticks {
                        return true;
                    }
                    udp.flows_expired.fetch_add(1, Ordering::Relaxed);
                    close_flow(*id, f, &from, "expired", &shared);
                    let next_seq = f.next_seq.load(Ordering::Relaxed);
                    ended.push(*id, next_seq, shared.settings.udp.flows);
                    false
                });
            }
        }
    };
    kcp.clear_datagram_sink();
    log.line(format!("{from}: udp session ended: {why}"));
    for (id, f) in &lock(&flows).open {
        close_flow(*id, f, &from, "closed with its session", &shared);
    }
    if shared.own_sessions {
        shared.stats.unwatch_session(&kcp);
    }
    udp.unwatch_session(&kcp);
}

/// The target's address, looked up once a second until it resolves (a name
/// may fail for a while): its session's datagrams meanwhile are dropped and
/// counted (`flow failed`). `None` when the session failed first.
async fn resolve(
    kcp: &KcpStream,
    from: &SocketAddr,
    flag: &str,
    shared: &Shared,
    buf: &mut [u8],
) -> Option<SocketAddr> {
    let udp = &shared.udp;
    loop {
        let found = match tokio::net::lookup_host(&shared.target).await {
            Ok(mut a) => a.next().ok_or_else(|| "no address".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        match found {
            Ok(target) => return Some(target),
            Err(e) => lock(&shared.failures).line(
                &shared.log,
                format!(
                    "{from}: {flag} {}: {e}; the session's datagrams are dropped (flow failed) \
                     until it resolves",
                    shared.target
                ),
            ),
        }
        let retry = tokio::time::sleep(Duration::from_secs(1));
        tokio::pin!(retry);
        loop {
            tokio::select! {
                r = kcp.recv_datagram(buf) => match r {
                    Ok(_) => {
                        udp.tunnel_in.fetch_add(1, Ordering::Relaxed);
                        udp.count_drop(DropReason::FlowFailed);
                    }
                    Err(e) => {
                        shared.log.line(format!("{from}: udp session ended: {e}"));
                        return None;
                    }
                },
                () = &mut retry => break,
            }
        }
    }
}

/// Datagrams the server sends to the target per system call at most.
const SESSION_BATCH: usize = 32;

/// Takes `batch`, a session's datagrams, into their flows and sends what
/// is admitted to the target ([`admit`], [`forward`]).
fn pass_on(
    batch: &[&[u8]],
    flows: &mut Flows,
    session: &Weak<KcpStream>,
    (target, from): (SocketAddr, &SocketAddr),
    shared: &Arc<Shared>,
) {
    shared
        .udp
        .tunnel_in
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    for chunk in batch.chunks(SESSION_BATCH) {
        let mut pass = [(0u32, &[][..]); SESSION_BATCH];
        let mut passed = 0;
        for &d in chunk {
            let Some(id) = admit(d, session, (target, from), flows, shared) else {
                continue;
            };
            if let Some(p) = pass.get_mut(passed) {
                *p = (id, d);
                passed += 1;
            }
        }
        forward(
            &flows.open,
            pass.get(..passed).unwrap_or_default(),
            target,
            &shared.udp,
        );
    }
}

/// Takes datagram `d` from the session into its flow (opening the flow on
/// its first datagram): its flow id when it is to be sent to the target;
/// `None` when it was dropped (and counted).
fn admit(
    d: &[u8],
    kcp: &Weak<KcpStream>,
    (target, from): (SocketAddr, &SocketAddr),
    flows: &mut Flows,
    shared: &Arc<Shared>,
) -> Option<u32> {
    let udp = &shared.udp;
    let Some((id, seq)) = parse_header(d) else {
        match parse_control(d) {
            // The client asks whether this session still answers.
            Some(Control::Ping(n)) => {
                udp.count_control_in();
                let sent = kcp
                    .upgrade()
                    .is_some_and(|kcp| kcp.try_send_datagram(&control(true, n)).is_ok());
                if sent {
                    udp.control_out.fetch_add(1, Ordering::Relaxed);
                }
            }
            // A pong is the client's to take: counted as a bad header here.
            Some(Control::Pong(_)) | None => udp.count_drop(DropReason::BadHeader),
        }
        return None;
    };
    // One lookup for a known flow (the map hashes with SipHash: the ids
    // are the client's to choose).
    let in_session = flows.open.len();
    let flow = match flows.open.entry(id) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => {
            let opened = match kcp.upgrade() {
                Some(kcp) => open_flow(&kcp, (id, &mut flows.ended), target, shared, in_session),
                None => Err(DropReason::NoSession),
            };
            let f = match opened {
                Ok(f) => f,
                Err(why) => {
                    udp.count_drop(why);
                    return None;
                }
            };
            shared.log.stream(format!("{from}: udp flow {id} opened"));
            e.insert(f)
        }
    };
    flow.active.store(true, Ordering::Relaxed);
    let why = match flow.window.accept(seq) {
        Seen::New => return Some(id),
        Seen::Duplicate => DropReason::Duplicate,
        Seen::TooOld => DropReason::TooOld,
    };
    flow.counters.drop_one(udp, why);
    None
}

/// Sends the admitted datagrams `pass` (flow id, datagram with its flow
/// header) to the target: each flow's in their order, in one system call
/// per flow. A full socket drops and counts (`send_failed`).
fn forward(flows: &HashMap<u32, Flow>, pass: &[(u32, &[u8])], target: SocketAddr, udp: &UdpStats) {
    let mut done = [false; SESSION_BATCH];
    for (at, &(id, _)) in pass.iter().enumerate() {
        if done.get(at).copied().unwrap_or(true) {
            continue;
        }
        let mut msgs: [(&[u8], SocketAddr); SESSION_BATCH] = [(&[], target); SESSION_BATCH];
        let mut n = 0;
        for (j, &(other, d)) in pass.iter().enumerate().skip(at) {
            if other == id
                && let Some(done) = done.get_mut(j)
                && let Some(m) = msgs.get_mut(n)
            {
                *done = true;
                *m = (d.get(HEADER_LEN..).unwrap_or_default(), target);
                n += 1;
            }
        }
        let Some(flow) = flows.get(&id) else { continue };
        // The flow's socket is connected to `target`: naming it again
        // changes nothing.
        send_each(&flow.sock, msgs.get(..n).unwrap_or_default(), |_, sent| {
            if sent {
                flow.counters.up.fetch_add(1, Ordering::Relaxed);
                udp.local_out.fetch_add(1, Ordering::Relaxed);
            } else {
                flow.counters.drop_one(udp, DropReason::SendFailed);
            }
        });
    }
}

/// Opens flow `id`'s socket toward `target` and its reader; `TableFull`
/// when the session holds `--udpflows` flows or all sessions
/// `--maxstreams`, `FlowFailed` when the socket cannot be made (logged).
fn open_flow(
    kcp: &Arc<KcpStream>,
    (id, ended): (u32, &mut Ended),
    target: SocketAddr,
    shared: &Arc<Shared>,
    in_session: usize,
) -> Result<Flow, DropReason> {
    if in_session >= shared.settings.udp.flows {
        return Err(DropReason::TableFull);
    }
    let slot = Slot::take(shared).ok_or(DropReason::TableFull)?;
    let failed = |e: String| {
        lock(&shared.failures).line(&shared.log, format!("udp flow {id}: {e}"));
        DropReason::FlowFailed
    };
    let any: SocketAddr = if target.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = std::net::UdpSocket::bind(any).map_err(|e| failed(format!("bind: {e}")))?;
    super::size_buffers(socket2::SockRef::from(&sock), shared.settings.udp.sockbuf);
    // Connecting a UDP socket only records the address: it does not wait.
    sock.connect(target)
        .map_err(|e| failed(format!("connect {target}: {e}")))?;
    let sock = RelaySocket::from_std(sock).map_err(|e| failed(e.to_string()))?;
    let sock = Arc::new(sock);
    let active = Arc::new(AtomicBool::new(true));
    let counters = Arc::new(FlowCounters::default());
    let next_seq = Arc::new(AtomicU32::new(ended.take(id)));
    shared.udp.flows_opened.fetch_add(1, Ordering::Relaxed);
    shared.udp.flows_open.fetch_add(1, Ordering::Relaxed);
    let reader = tokio::spawn(read_target(
        Arc::clone(&sock),
        Arc::clone(kcp),
        (id, Arc::clone(&next_seq)),
        Arc::clone(&active),
        Arc::clone(&counters),
        Arc::clone(&shared.udp),
    ));
    Ok(Flow {
        sock,
        reader,
        window: Window::default(),
        active,
        idle: 0,
        next_seq,
        counters,
        _slot: slot,
    })
}

/// Stops a flow's reader and logs its counters (the caller drops it).
fn close_flow(id: u32, f: &Flow, from: &SocketAddr, how: &str, shared: &Shared) {
    f.reader.abort();
    let lost = f.window.missing();
    shared.udp.lost.fetch_add(lost, Ordering::Relaxed);
    shared.udp.flows_open.fetch_sub(1, Ordering::Relaxed);
    shared.log.stream(format!(
        "{from}: udp flow {id} {how}: {}",
        f.counters.summary(lost)
    ));
}

/// Reads the target's datagrams for flow `id` and sends them into the
/// session, until the flow is closed or the session fails.
///
/// The flow's one buffer of [`HEADER_LEN`] + [`MAX_UDP`] bytes is cut into
/// as many slots (up to [`FLOW_BATCH`]) as hold the longest datagram the
/// session carries behind a header, so one system call takes that many
/// datagrams: 3 with FEC datagrams at the default mtu (21,648 B each), 8 with
/// kcp-go OOB (1,368 B). A longer datagram, cut by the kernel, is dropped
/// as too large, as it would be whole.
async fn read_target(
    sock: Arc<RelaySocket>,
    kcp: Arc<KcpStream>,
    (id, next_seq): (u32, Arc<AtomicU32>),
    active: Arc<AtomicBool>,
    counters: Arc<FlowCounters>,
    udp: Arc<UdpStats>,
) {
    let max = kcp.max_datagram_payload();
    let (slots, stride) = flow_slots(max);
    // One buffer per flow, for its life.
    let mut buf = vec![0u8; slots * stride];
    let mut seq = next_seq.load(Ordering::Relaxed);
    let mut from = [(0, SocketAddr::from(([0, 0, 0, 0], 0))); FLOW_BATCH];
    loop {
        let got = {
            let mut chunks = buf.chunks_mut(stride);
            let mut slices: [io::IoSliceMut<'_>; FLOW_BATCH] = std::array::from_fn(|_| {
                io::IoSliceMut::new(
                    chunks
                        .next()
                        .and_then(|c| c.get_mut(HEADER_LEN..))
                        .unwrap_or_default(),
                )
            });
            let slices = slices.get_mut(..slots).unwrap_or_default();
            // An ICMP error from the target (nothing listening yet) is not
            // the end of the flow.
            match sock.recv_from_many(slices, &mut from).await {
                Ok(k) => k,
                Err(_) => continue,
            }
        };
        udp.local_in.fetch_add(got as u64, Ordering::Relaxed);
        active.store(true, Ordering::Relaxed);
        for (chunk, &(n, _)) in buf.chunks_mut(stride).zip(&from).take(got) {
            // Saturates: `RelaySocket::TRUNCATED` is longer than any session carries.
            let len = HEADER_LEN.saturating_add(n);
            let Some(d) = chunk.get_mut(..len).filter(|_| len <= max) else {
                counters.drop_one(&udp, DropReason::TooLarge);
                continue;
            };
            put_header(d, id, seq);
            seq = seq.wrapping_add(1);
            match kcp.try_send_datagram(d) {
                Ok(()) => {
                    counters.down.fetch_add(1, Ordering::Relaxed);
                    udp.tunnel_out.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    counters.drop_one(&udp, DropReason::QueueFull);
                }
                Err(_) => {
                    counters.drop_one(&udp, DropReason::NoSession);
                    return;
                }
            }
        }
        // Once a batch: the tick that expires this flow reads it (and this
        // task is stopped only where it waits, above).
        next_seq.store(seq, Ordering::Relaxed);
    }
}

/// Datagrams a flow's reader takes from the target's socket per system
/// call at most.
pub(crate) const FLOW_BATCH: usize = 8;

/// A flow's receive slots for a session whose datagrams carry up to `max`
/// bytes: `(how many, bytes each)`, together at most [`HEADER_LEN`] +
/// [`MAX_UDP`] bytes (one slot of that size when two of the longest
/// datagram do not fit).
fn flow_slots(max: usize) -> (usize, usize) {
    let whole = HEADER_LEN + MAX_UDP;
    let stride = max.clamp(HEADER_LEN, whole);
    match whole / stride {
        0 | 1 => (1, whole),
        n => (n.min(FLOW_BATCH), stride),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where expired flows left off: at most `--udpflows` remembered,
    /// oldest forgotten first, each taken once by the flow that reopens.
    #[test]
    fn an_expired_flow_s_count_is_remembered_within_the_table_s_bound() {
        let mut ended = Ended::default();
        for id in 1..=5 {
            ended.push(id, id * 100, 3);
        }
        assert_eq!(ended.len(), 3);
        assert_eq!(ended.take(1), 0, "the oldest is forgotten");
        assert_eq!(ended.take(2), 0);
        assert_eq!(ended.take(4), 400);
        assert_eq!(ended.take(4), 0, "taken once");
        assert_eq!(ended.take(7), 0, "never seen: from 0");
        ended.push(4, 401, 3);
        assert_eq!(ended.take(5), 500);
        assert_eq!(ended.take(3), 300);
        assert_eq!(ended.take(4), 401);
        assert_eq!(ended.len(), 0);
        // Taken and remembered again many times: the order queue stays
        // within its bound.
        for round in 0..100 {
            ended.push(9, round, 3);
            assert_eq!(ended.take(9), round);
        }
        ended.push(9, 7, 3);
        assert!(ended.order.len() <= 2 * 3 + 16);
        assert_eq!(ended.take(9), 7);
    }

    /// The slots hold the longest datagram a session carries, all of them
    /// within the flow's one buffer of 64 KiB; one slot of that size when
    /// two do not fit.
    #[test]
    fn a_flows_slots_fit_the_session_within_its_buffer() {
        let whole = HEADER_LEN + MAX_UDP;
        for max in [
            0,
            1,
            HEADER_LEN,
            1368,
            1400,
            21_648,
            32_771,
            32_772,
            40_000,
            whole,
            usize::MAX,
        ] {
            let (n, stride) = flow_slots(max);
            assert!((1..=FLOW_BATCH).contains(&n), "{max}: {n} slots");
            assert!(n * stride <= whole, "{max}: {n} x {stride}");
            assert!(
                stride >= max.min(whole),
                "{max}: a slot of {stride} cuts the longest"
            );
        }
        assert_eq!(flow_slots(1368), (FLOW_BATCH, 1368));
        assert_eq!(flow_slots(21_648), (3, 21_648));
        assert_eq!(flow_slots(40_000), (1, whole));
    }
}
