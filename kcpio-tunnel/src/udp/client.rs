//! The UDP mode's client: one task reads the local socket into the
//! session; the session's driver hands what comes back to the local socket
//! itself ([`KcpStream::set_datagram_sink`]), so no task is woken for a
//! datagram from the server. The flow table is shared by the two (locked
//! once per batch each way); nothing is allocated per datagram. A lost
//! session is replaced (retried after 0.25 s, 0.5 s, then every second)
//! and the flows carry on over the new one; so is a session whose server
//! stopped answering pings while the flows send (see [`Liveness`] and the
//! module `udp`'s "Ping and pong").
//!
//! With `--udp` the session is the task's own; with `--udplisten` it is
//! the TCP client's first pooled session ([`Sessions::Beside`]), whose
//! byte stream carries the smux streams while its datagrams carry the
//! flows, and the flows follow that slot when its session is replaced.
//! They also trigger that replacement: a pooled session silent to their
//! pings is replaced in the pool by the one dialled beside it
//! ([`Pool::replace_first`]), and closed unless it answers soon after,
//! with the other slots' sessions to the same server ([`Retiring`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kcpio::mux::Mux;
use kcpio::{DatagramFecStats, KcpStream, RelaySocket};
use tokio::net::UdpSocket;

use super::{
    Control, DropReason, FlowCounters, HEADER_LEN, MAX_FLOW_ID, MAX_UDP, RECV_BATCH, SILENT_TICKS,
    Seen, UdpStats, WIREGUARD_OVERHEAD, Window, control, lock, parse_control, parse_header,
    put_header, send_each, wireguard_mtu,
};
use crate::client::Pool;
use crate::config::{HostPorts, Settings};
use crate::log::{Log, Repeats};
use crate::stats::Stats;

/// Which session carries the flows.
pub(crate) enum Sessions {
    /// `--udp`: a session of the UDP client's own to `-r`; a server that
    /// does not negotiate FEC datagrams gets kcp-go OOB packets when the
    /// stream is FEC-framed.
    Own,
    /// `--udplisten`: the TCP client's first pooled session. Only FEC
    /// datagrams: a server that did not negotiate them (kcptun, or kcpio
    /// without `--udptarget`) is sent nothing of the flows (they are
    /// dropped as `no session`), so its wire is what it was.
    Beside(Arc<Pool>),
}

/// The session the flows ride now.
struct Attached {
    kcp: Arc<KcpStream>,
    /// `Sessions::Beside`: the mux of the same session, which the pool
    /// closes when it retires the session.
    mux: Option<Weak<Mux>>,
}

/// One local source address's flow.
struct Flow {
    addr: SocketAddr,
    /// The next sequence number toward the server.
    seq: u32,
    /// Sequence numbers received from the server.
    window: Window,
    /// A datagram passed since the last tick.
    active: bool,
    /// Ticks (seconds) without a datagram.
    idle: u64,
    counters: FlowCounters,
}

/// The client's flows: by source address, and by id for the way back.
struct Flows {
    by_addr: HashMap<SocketAddr, u32>,
    by_id: HashMap<u32, Flow>,
    next_id: u32,
    max: usize,
}

impl Flows {
    fn new(max: usize) -> Self {
        Self {
            by_addr: HashMap::new(),
            by_id: HashMap::new(),
            next_id: 0,
            max,
        }
    }

    /// The flow of `addr`, opened when new; `None` when the table is full.
    fn flow_of(
        &mut self,
        addr: SocketAddr,
        stats: &UdpStats,
        log: &Log,
    ) -> Option<(u32, &mut Flow)> {
        let id = match self.by_addr.entry(addr) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(v) => {
                if self.by_id.len() >= self.max {
                    return None;
                }
                // Ids are not reused while live; the table (at most
                // `MAX_UDP_FLOWS`, 2^20) is far smaller than the id space
                // (2^24), so this ends within `max` steps.
                let mut id = self.next_id;
                while self.by_id.contains_key(&id) {
                    id = (id + 1) & MAX_FLOW_ID;
                }
                self.next_id = (id + 1) & MAX_FLOW_ID;
                v.insert(id);
                self.by_id.insert(
                    id,
                    Flow {
                        addr,
                        seq: 0,
                        window: Window::default(),
                        active: true,
                        idle: 0,
                        counters: FlowCounters::default(),
                    },
                );
                stats.flows_opened.fetch_add(1, Ordering::Relaxed);
                stats.flows_open.fetch_add(1, Ordering::Relaxed);
                log.stream(format!("udp flow {id} opened: {addr}"));
                id
            }
        };
        self.by_id.get_mut(&id).map(|f| (id, f))
    }

    /// Forgets what each flow received: for a new session, whose server
    /// end numbers every flow from 0 again. Their gaps so far count as lost.
    fn restart(&mut self, stats: &UdpStats) {
        for f in self.by_id.values_mut() {
            stats.lost.fetch_add(f.window.missing(), Ordering::Relaxed);
            f.window = Window::default();
        }
    }

    /// Ages every flow by one tick and closes those idle for `idle` ticks.
    fn expire(&mut self, idle: u64, stats: &UdpStats, log: &Log) {
        let by_addr = &mut self.by_addr;
        self.by_id.retain(|id, f| {
            if std::mem::take(&mut f.active) {
                f.idle = 0;
            } else {
                f.idle += 1;
            }
            if f.idle < idle {
                return true;
            }
            by_addr.remove(&f.addr);
            stats.flows_open.fetch_sub(1, Ordering::Relaxed);
            stats.flows_expired.fetch_add(1, Ordering::Relaxed);
            let lost = f.window.missing();
            stats.lost.fetch_add(lost, Ordering::Relaxed);
            log.stream(format!(
                "udp flow {id} expired: {}, {}",
                f.addr,
                f.counters.summary(lost)
            ));
            false
        });
    }
}

/// Pings sent once a session is used, to learn whether its server answers.
const START_PINGS: u32 = 3;
/// Ticks of silence while sending between pings to a server that has not
/// answered one yet (an older kcpio counts each as a `bad header`).
const UNANSWERED_EVERY: u32 = 10;

/// Whether the session's server still answers, judged once a second (a
/// tick) from its pongs and the flows' datagrams; until it has answered a
/// ping, also from the loss reports its FEC datagram receiver sends back
/// (within 50 ms of any datagram it receives, whatever its version).
#[derive(Debug, Default)]
struct Liveness {
    /// The server answered a ping on this session.
    answers: bool,
    /// The session negotiated FEC datagrams: a live server reports what it
    /// receives.
    reporting: bool,
    /// The session's count of reports received, at the last tick.
    reports: u64,
    /// A pong or a flow's datagram came since the last tick (or, from a
    /// server that has not answered a ping, a report).
    heard: bool,
    /// A flow's datagram was handed to the session since the last tick.
    sent: bool,
    /// One was since the session started.
    used: bool,
    /// Ticks without hearing anything, counted from the first one after
    /// sending (an idle client counts none).
    silent: u32,
    /// Pings sent on this session.
    pings: u32,
}

impl Liveness {
    /// One tick: whether to ping now.
    fn tick(&mut self) -> bool {
        self.used |= self.sent;
        if std::mem::take(&mut self.heard) {
            self.silent = 0;
        } else if self.sent || self.silent > 0 {
            self.silent += 1;
        }
        self.sent = false;
        if self.answers {
            self.silent > 0
        } else {
            // Unanswered so far: three pings, then one every
            // UNANSWERED_EVERY ticks of silence while sending (the first
            // three may have met a path that dropped everything).
            (self.used && self.pings < START_PINGS)
                || (self.silent > 0 && self.silent.is_multiple_of(UNANSWERED_EVERY))
        }
    }

    /// The server said nothing for [`SILENT_TICKS`] ticks while the flows
    /// sent (neither a pong nor a flow's datagram from a server that
    /// answers pings; nor a report from one that has not answered yet, an
    /// older kcpio's or one whose first pings met a dead path): time to
    /// dial a replacement. A session without FEC datagrams (no reports),
    /// whose server never answered, is never judged.
    fn silent(&self) -> bool {
        (self.answers || self.reporting) && self.silent >= SILENT_TICKS
    }

    /// Takes the session's FEC datagram state: whether it negotiated, and
    /// its count of reports received. A report is heard only from a
    /// server that has not answered a ping: one that answers is judged by
    /// its pongs, which a server restarted under the old conversation
    /// (numbering its datagrams afresh) cannot fake, while its reports
    /// could still come.
    fn absorb_reports(&mut self, negotiated: bool, reports_in: u64) {
        self.reporting |= negotiated;
        if reports_in != self.reports {
            self.reports = reports_in;
            self.heard |= !self.answers;
        }
    }

    fn pong(&mut self) {
        self.answers = true;
        self.heard = true;
    }

    /// Takes what came from the server since the last look: what the
    /// session's sink saw, and the session's reports.
    fn look(&mut self, heard: &Heard, kcp: &KcpStream) {
        self.absorb(heard);
        let fec = kcp.stats().datagram_fec;
        self.absorb_reports(fec.negotiated, fec.reports_in);
    }

    /// Takes what the session's sink saw since the last look.
    fn absorb(&mut self, heard: &Heard) {
        if heard.pong.swap(false, Ordering::Relaxed) {
            self.pong();
        }
        if heard.any.swap(false, Ordering::Relaxed) {
            self.heard = true;
        }
    }
}

/// What the session's datagram sink (on the driver's task) tells the
/// client's task about the way back, read at its ticks.
#[derive(Debug, Default)]
struct Heard {
    /// A pong came.
    pong: AtomicBool,
    /// A pong or a flow's datagram came.
    any: AtomicBool,
}

impl Heard {
    /// Whether `d` (not a flow's datagram) is a pong: noted and counted;
    /// anything else is the caller's to count.
    fn note_pong(&self, d: &[u8], udp: &UdpStats) -> bool {
        let pong = matches!(parse_control(d), Some(Control::Pong(_)));
        if pong {
            udp.count_control_in();
            self.pong.store(true, Ordering::Relaxed);
            self.any.store(true, Ordering::Relaxed);
        }
        pong
    }
}

/// The client's local datagrams, read in batches: buffer `i` holds a
/// flow header's room, then the payload of datagram `i`.
struct Batch {
    bufs: Vec<u8>,
    from: [(usize, SocketAddr); RECV_BATCH],
}

impl Batch {
    const STRIDE: usize = HEADER_LEN + MAX_UDP;

    fn new() -> Self {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        Self {
            bufs: vec![0; RECV_BATCH * Self::STRIDE],
            from: [(0, unspecified); RECV_BATCH],
        }
    }

    /// Waits for the local socket's next datagrams: how many.
    async fn recv(&mut self, local: &RelaySocket) -> io::Result<usize> {
        let mut chunks = self.bufs.chunks_mut(Self::STRIDE);
        let mut slices: [IoSliceMut<'_>; RECV_BATCH] = std::array::from_fn(|_| {
            IoSliceMut::new(
                chunks
                    .next()
                    .and_then(|c| c.get_mut(HEADER_LEN..))
                    .unwrap_or_default(),
            )
        });
        local.recv_from_many(&mut slices, &mut self.from).await
    }

    /// Datagram `i`: its buffer (header room first), payload length and
    /// source.
    fn get(&mut self, i: usize) -> Option<(&mut [u8], usize, SocketAddr)> {
        let (n, from) = *self.from.get(i)?;
        let buf = self.bufs.chunks_mut(Self::STRIDE).nth(i)?;
        Some((buf, n, from))
    }
}

/// Runs the client: reads the local socket, carries each source's flow to
/// the server over one session, and writes what comes back to the source.
pub(crate) async fn run_udp_client(
    local: UdpSocket,
    sessions: Sessions,
    settings: Settings,
    stats: Arc<Stats>,
    log: Log,
) -> io::Result<()> {
    let remote = HostPorts::parse(&settings.peer)
        .map_err(|e| io::Error::other(format!("--remoteaddr {}: {e}", settings.peer)))?;
    let local = Arc::new(RelaySocket::from_std(local.into_std()?)?);
    let udp = Arc::clone(stats.udp());
    let flows = Arc::new(Mutex::new(Flows::new(settings.udp.flows)));
    let idle_ticks = settings.udp.idle.as_secs().max(1);
    // The buffers live as long as the client: no allocation per datagram.
    let mut up = Batch::new();
    // With the session's sink installed no datagram is queued for this
    // buffer: the wait below ends on the session's failure (or a datagram
    // queued before the sink was, taken here first).
    let mut down = vec![0u8; HEADER_LEN + MAX_UDP];
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut ended: Option<Arc<KcpStream>> = None;
    // A session dialled beside a silent one, which the flows move to.
    let mut next: Option<Attached> = None;
    // A pooled session the flows left for its silence, until it answers
    // or is closed.
    let mut retiring: Option<Retiring> = None;
    loop {
        let Attached { kcp, mux } = match next.take() {
            // The silent session the flows left goes now (held to the end
            // of this session, it kept its socket and sent keepalive probes
            // that kept the server's side of it open).
            Some(a) => {
                drop(ended.take());
                a
            }
            None => {
                let target = Target {
                    sessions: &sessions,
                    remote: &remote,
                    settings: &settings,
                    ended: ended.take(),
                };
                connect(&local, target, &udp, &log, &mut up).await
            }
        };
        let mut max = kcp.max_datagram_payload();
        let mut negotiated = report_mtu(&log, &kcp);
        // The server numbers each flow afresh on a new session.
        lock(&flows).restart(&udp);
        let heard = Arc::new(Heard::default());
        {
            let (flows, local, udp, heard) = (
                Arc::clone(&flows),
                Arc::clone(&local),
                Arc::clone(&udp),
                Arc::clone(&heard),
            );
            kcp.set_datagram_sink(move |batch| {
                udp.tunnel_in
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                let mut flows = lock(&flows);
                for chunk in batch.chunks(RECV_BATCH) {
                    deliver(&local, chunk, (&mut flows, &heard), &udp);
                }
            });
        }
        udp.sessions_opened.fetch_add(1, Ordering::Relaxed);
        // A pooled session is counted by its mux already.
        let own = mux.is_none();
        if own {
            stats.watch_session(&kcp);
        }
        udp.watch_session(&kcp);
        let mut live = Liveness::default();
        let mut dialling: Option<Dial<'_>> = None;
        let mut lost: Option<io::Error> = None;
        // The flows left this session for its silence (`--udplisten`).
        let mut left_silent = false;
        // Replacements that failed while this session stays silent.
        let mut failed = Repeats::default();
        while lost.is_none() {
            tokio::select! {
                r = up.recv(&local) => {
                    let Ok(got) = r else { continue };
                    udp.local_in.fetch_add(got as u64, Ordering::Relaxed);
                    let mut flows = lock(&flows);
                    for i in 0..got {
                        let Some((buf, n, from)) = up.get(i) else { break };
                        if lost.is_some() {
                            udp.count_drop(DropReason::NoSession);
                            continue;
                        }
                        lost = send_up(&kcp, max, (buf, n, from), &mut flows, (&udp, &log)).err();
                        live.sent = true;
                    }
                }
                r = kcp.recv_datagram(&mut down) => {
                    match r {
                        Ok(n) => {
                            udp.tunnel_in.fetch_add(1, Ordering::Relaxed);
                            let d = down.get(..n).unwrap_or_default();
                            deliver(&local, &[d], (&mut lock(&flows), &heard), &udp);
                        }
                        Err(e) => lost = Some(e),
                    }
                }
                r = async {
                    match dialling.as_mut() {
                        Some(d) => d.as_mut().await,
                        None => std::future::pending().await,
                    }
                }, if dialling.is_some() => {
                    dialling = None;
                    live.look(&heard, &kcp);
                    if live.heard {
                        // The old session answered meanwhile: keep it.
                        log.line("udp: the server answered again; dropping the replacement session");
                        continue;
                    }
                    match r {
                        Ok(Dialled::Own(a)) if carries(&a, &settings) => {
                            udp.replacements_taken.fetch_add(1, Ordering::Relaxed);
                            log.line(format!(
                                "udp: the server answered nothing for {} s while the flows sent; \
                                 a new session answered: moving the flows to it",
                                live.silent
                            ));
                            next = Some(a);
                            break;
                        }
                        Ok(Dialled::Pooled(pool, fresh))
                            if fresh.kcp().stats().datagram_fec.negotiated =>
                        {
                            udp.replacements_taken.fetch_add(1, Ordering::Relaxed);
                            log.line(format!(
                                "udp: the server answered nothing for {} s while the flows sent; \
                                 a new session answered: moving the flows and new TCP \
                                 connections to it (the old session's streams end unless it \
                                 answers within {SILENT_TICKS} s)",
                                live.silent
                            ));
                            let (mux, kcp) = pool.replace_first(&kcp, fresh).await;
                            next = Some(Attached {
                                kcp,
                                mux: Some(Arc::downgrade(&mux)),
                            });
                            left_silent = true;
                            break;
                        }
                        Ok(_) => log.line("udp: the replacement session carries no datagrams; keeping the old one"),
                        Err(e) => failed.line(&log, format!("udp: a replacement session failed: {e}")),
                    }
                }
                _ = tick.tick() => {
                    live.look(&heard, &kcp);
                    if live.heard {
                        // The old session answers: no replacement.
                        dialling = None;
                        failed.clear();
                    }
                    if live.tick() {
                        live.pings += 1;
                        if kcp.try_send_datagram(&control(false, live.pings)).is_ok() {
                            udp.control_out.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if live.silent() && dialling.is_none() {
                        udp.replacements_dialled.fetch_add(1, Ordering::Relaxed);
                        dialling = Some(match &sessions {
                            Sessions::Own => Box::pin(async {
                                dial(&remote, &settings, &log).await.map(Dialled::Own)
                            }),
                            Sessions::Beside(pool) => Box::pin(async move {
                                let fresh = pool.dial_beside().await?;
                                Ok(Dialled::Pooled(pool, fresh))
                            }),
                        });
                    }
                    if let Some(r) = retiring.as_mut()
                        && r.tick(&udp, &log)
                    {
                        retiring = None;
                    }
                    lock(&flows).expire(idle_ticks, &udp, &log);
                    // Answered late: FEC-protected datagrams, fragmented
                    // beyond one packet.
                    if negotiated_since(&log, &kcp, &mut negotiated) {
                        max = kcp.max_datagram_payload();
                    }
                    // The pool retired the session (expired, or its mux
                    // failed): the flows move to the slot's next one.
                    if mux.as_ref().is_some_and(|m| m.upgrade().is_none_or(|m| m.is_closed())) {
                        log.line("udp: the session's mux ended; moving the flows to the next session");
                        break;
                    }
                }
            }
        }
        kcp.clear_datagram_sink();
        if let Some(e) = lost {
            log.line(format!("udp session lost: {e}; reconnecting"));
        }
        if left_silent
            && let Some(mux) = mux
            && let Sessions::Beside(pool) = &sessions
        {
            let others = pool.others();
            retiring = Some(Retiring::watch((Arc::clone(&kcp), mux), others, &udp));
        }
        if own {
            stats.unwatch_session(&kcp);
        }
        udp.unwatch_session(&kcp);
        ended = Some(kcp);
    }
}

/// Hands a local datagram (`buf[HEADER_LEN..][..n]` from `from`) to the
/// session (which takes up to `max` bytes) behind its flow's header; `Err`
/// when the session failed.
fn send_up(
    kcp: &KcpStream,
    max: usize,
    (buf, n, from): (&mut [u8], usize, SocketAddr),
    flows: &mut Flows,
    (udp, log): (&UdpStats, &Log),
) -> io::Result<()> {
    let Some((id, flow)) = flows.flow_of(from, udp, log) else {
        udp.count_drop(DropReason::TableFull);
        return Ok(());
    };
    flow.active = true;
    // Saturates: `RelaySocket::TRUNCATED` is longer than any session carries.
    if HEADER_LEN.saturating_add(n) > max {
        flow.counters.drop_one(udp, DropReason::TooLarge);
        return Ok(());
    }
    put_header(buf, id, flow.seq);
    flow.seq = flow.seq.wrapping_add(1);
    match kcp.try_send_datagram(buf.get(..HEADER_LEN + n).unwrap_or_default()) {
        Ok(()) => {
            flow.counters.up.fetch_add(1, Ordering::Relaxed);
            udp.tunnel_out.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            flow.counters.drop_one(udp, DropReason::QueueFull);
            Ok(())
        }
        Err(e) => {
            flow.counters.drop_one(udp, DropReason::NoSession);
            Err(e)
        }
    }
}

/// Where [`connect`] finds a session: its own to `remote`, or the pool's
/// first; `ended` is the session the flows just left (the pool may still
/// hand it out until its mux notices).
struct Target<'a> {
    sessions: &'a Sessions,
    remote: &'a HostPorts,
    settings: &'a Settings,
    ended: Option<Arc<KcpStream>>,
}

/// Hands `batch` (at most [`RECV_BATCH`] datagrams from the server) to
/// their flows' sources, in one system call (`sendmmsg`) for the batch; a
/// full socket drops and counts (`send_failed`). Pongs and delivered
/// datagrams are noted in `heard` for the client's [`Liveness`].
fn deliver(
    local: &RelaySocket,
    batch: &[&[u8]],
    (flows, heard): (&mut Flows, &Heard),
    udp: &UdpStats,
) {
    let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
    let mut out: [(&[u8], SocketAddr); RECV_BATCH] = [(&[], unspecified); RECV_BATCH];
    let mut ids = [0u32; RECV_BATCH];
    let mut n = 0;
    for &d in batch.iter().take(RECV_BATCH) {
        let Some((id, seq)) = parse_header(d) else {
            if !heard.note_pong(d, udp) {
                udp.count_drop(DropReason::BadHeader);
            }
            continue;
        };
        let Some(flow) = flows.by_id.get_mut(&id) else {
            udp.count_drop(DropReason::UnknownFlow);
            continue;
        };
        flow.active = true;
        match flow.window.accept(seq) {
            Seen::New => {}
            Seen::Duplicate => {
                flow.counters.drop_one(udp, DropReason::Duplicate);
                continue;
            }
            Seen::TooOld => {
                flow.counters.drop_one(udp, DropReason::TooOld);
                continue;
            }
        }
        heard.any.store(true, Ordering::Relaxed);
        out[n] = (d.get(HEADER_LEN..).unwrap_or_default(), flow.addr);
        ids[n] = id;
        n += 1;
    }
    send_each(local, out.get(..n).unwrap_or_default(), |i, sent| {
        let flow = ids.get(i).and_then(|id| flows.by_id.get(id));
        match (sent, flow) {
            (true, f) => {
                udp.local_out.fetch_add(1, Ordering::Relaxed);
                if let Some(f) = f {
                    f.counters.down.fetch_add(1, Ordering::Relaxed);
                }
            }
            (false, Some(f)) => f.counters.drop_one(udp, DropReason::SendFailed),
            (false, None) => udp.count_drop(DropReason::SendFailed),
        }
    });
}

/// A session to the server, retried every second; meanwhile the local
/// socket is drained and its datagrams counted as dropped (`no session`).
async fn connect(
    local: &RelaySocket,
    target: Target<'_>,
    udp: &UdpStats,
    log: &Log,
    batch: &mut Batch,
) -> Attached {
    let Target {
        sessions,
        remote,
        settings,
        ended,
    } = target;
    // The pooled session last said not to negotiate (said once).
    let mut told = None;
    let mut failed = Repeats::default();
    let mut wait = Duration::from_millis(250);
    loop {
        let attempt = async {
            if let Sessions::Beside(pool) = sessions {
                let (mux, kcp) = pool.first_session().await?;
                return io::Result::Ok(Attached {
                    kcp,
                    mux: Some(Arc::downgrade(&mux)),
                });
            }
            dial(remote, settings, log).await
        };
        tokio::pin!(attempt);
        let r = loop {
            tokio::select! {
                r = &mut attempt => break r,
                r = batch.recv(local) => drop_all(r, udp),
            }
        };
        match r {
            // The pool still hands out the session that just failed.
            Ok(a) if ended.as_ref().is_some_and(|e| Arc::ptr_eq(e, &a.kcp)) => {}
            // Beside TCP: FEC datagrams only, or nothing.
            Ok(a) if a.mux.is_some() => {
                if a.kcp.stats().datagram_fec.negotiated {
                    return a;
                }
                let conv = a.kcp.conv();
                if told != Some(conv) {
                    told = Some(conv);
                    log.line(
                        "udp: the server did not negotiate FEC datagrams (kcptun, or kcpio \
                         without --udptarget): the TCP streams go on, the UDP flows are \
                         dropped (no session) until a session negotiates them",
                    );
                }
            }
            Ok(a) if carries(&a, settings) => return a,
            Ok(_) => log.line(
                "udp: the server did not negotiate FEC datagrams (not a kcpio server with \
                 --udp?) and --datashard is 0: this session carries no datagrams; retrying",
            ),
            Err(e) => failed.line(log, format!("re-connecting: {e}")),
        }
        // Keep draining while waiting: 0.25 s, 0.5 s, then every second, so
        // a restarted server is found soon after it is back.
        let pause = tokio::time::sleep(wait);
        wait = (wait * 2).min(Duration::from_secs(1));
        tokio::pin!(pause);
        loop {
            tokio::select! {
                () = &mut pause => break,
                r = batch.recv(local) => drop_all(r, udp),
            }
        }
    }
}

/// A session being dialled beside one that went silent.
type Dial<'a> = std::pin::Pin<Box<dyn Future<Output = io::Result<Dialled<'a>>> + Send + 'a>>;

/// A session dialled beside one that went silent.
enum Dialled<'a> {
    /// `--udp`: the flows' own.
    Own(Attached),
    /// `--udplisten`: a session for the pool's first slot, not in the
    /// pool until the flows take it ([`Pool::replace_first`]).
    Pooled(&'a Arc<Pool>, crate::client::Session),
}

/// The pooled sessions the flows left because their server answered
/// nothing for [`SILENT_TICKS`] s while a new session answered
/// (`--udplisten`): the old first-slot session (retired by the pool) and
/// the other slots' sessions to the same server address (`--conn` above
/// 1), whose TCP streams would wait for the session's idle timeout (30
/// s) to fail. Each is pinged once a tick for [`SILENT_TICKS`] more
/// ticks: one that answers is left to the pool (a path outage that
/// ended, or a session made since: its streams carry on); the silent
/// ones are closed and their streams end (a restarted server knows
/// nothing of them), and the pool replaces a closed slot's at its next
/// use.
struct Retiring {
    watched: Vec<Watched>,
    ticks: u32,
}

/// One session [`Retiring`] watches, its datagrams taken by a sink that
/// only notes pongs (the flows are on the new session; anything else is
/// dropped as `no session`).
struct Watched {
    kcp: Arc<KcpStream>,
    mux: Weak<Mux>,
    heard: Arc<Heard>,
}

impl Watched {
    fn new(kcp: Arc<KcpStream>, mux: Weak<Mux>, udp: &Arc<UdpStats>) -> Self {
        let heard = Arc::new(Heard::default());
        {
            let (heard, udp) = (Arc::clone(&heard), Arc::clone(udp));
            kcp.set_datagram_sink(move |batch| {
                udp.tunnel_in
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                for d in batch {
                    if !heard.note_pong(d, &udp) {
                        udp.count_drop(DropReason::NoSession);
                    }
                }
            });
        }
        Self { kcp, mux, heard }
    }
}

/// The session's datagrams go back to the driver's queue (and end with
/// the session).
impl Drop for Watched {
    fn drop(&mut self) {
        self.kcp.clear_datagram_sink();
    }
}

impl Retiring {
    /// Watches `old` (the session the flows left, its mux `mux`) and
    /// those of `others` that went to the same server address and
    /// negotiated FEC datagrams (no ping goes elsewhere).
    fn watch(
        (old, mux): (Arc<KcpStream>, Weak<Mux>),
        others: Vec<(Arc<Mux>, Arc<KcpStream>)>,
        udp: &Arc<UdpStats>,
    ) -> Self {
        let peer = old.peer_addr().ok();
        let mut watched = vec![Watched::new(old, mux, udp)];
        for (mux, kcp) in others {
            let same = peer.is_some() && kcp.peer_addr().ok() == peer;
            if same && !mux.is_closed() && kcp.stats().datagram_fec.negotiated {
                watched.push(Watched::new(kcp, Arc::downgrade(&mux), udp));
            }
        }
        Self { watched, ticks: 0 }
    }

    /// One tick: a ping to each still in question, or the verdict; `true`
    /// when done watching.
    fn tick(&mut self, udp: &UdpStats, log: &Log) -> bool {
        let mut answered = 0;
        self.watched.retain(|w| {
            // One that ended meanwhile is the pool's already.
            if w.mux.upgrade().is_none_or(|m| m.is_closed()) {
                return false;
            }
            let pong = w.heard.pong.swap(false, Ordering::Relaxed);
            answered += usize::from(pong);
            !pong
        });
        if answered > 0 {
            log.line(format!(
                "udp: {answered} session(s) to the server answer again: their TCP streams \
                 carry on"
            ));
        }
        if self.watched.is_empty() {
            return true;
        }
        if self.ticks >= SILENT_TICKS {
            log.line(format!(
                "udp: {} session(s) to the server answered nothing for {} more s: closing \
                 them, their TCP streams end (the server restarted?)",
                self.watched.len(),
                self.ticks
            ));
            for w in &self.watched {
                if let Some(m) = w.mux.upgrade() {
                    m.close();
                }
            }
            return true;
        }
        self.ticks += 1;
        for w in &self.watched {
            if w.kcp.try_send_datagram(&control(false, self.ticks)).is_ok() {
                udp.control_out.fetch_add(1, Ordering::Relaxed);
            }
        }
        false
    }
}

/// A session of our own to `remote` (`--udp`).
async fn dial(remote: &HostPorts, settings: &Settings, log: &Log) -> io::Result<Attached> {
    let name = remote.pick();
    let addr = tokio::net::lookup_host(&name)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("--remoteaddr {name}: {e}")))?
        .next()
        .ok_or_else(|| io::Error::other(format!("--remoteaddr {name}: no address")))?;
    let kcp = KcpStream::connect(addr, &settings.kcp).await?;
    log.line(format!(
        "udp session: {} -> {addr}",
        kcp.local_addr()
            .map_or_else(|e| e.to_string(), |a| a.to_string())
    ));
    Ok(Attached {
        kcp: Arc::new(kcp),
        mux: None,
    })
}

/// Whether a session of our own carries datagrams: FEC datagrams
/// negotiated (the extension's own parity), or else kcp-go's plain OOB,
/// which only a session with stream FEC carries (a server without `--udp`,
/// or not kcpio).
fn carries(a: &Attached, settings: &Settings) -> bool {
    a.kcp.stats().datagram_fec.negotiated
        || (settings.udp.stream_fec && a.kcp.max_datagram_payload() > HEADER_LEN)
}

/// Counts the local datagrams read while no session carries them: in,
/// and dropped (`no session`).
fn drop_all(got: io::Result<usize>, udp: &UdpStats) {
    if let Ok(n) = got {
        udp.local_in.fetch_add(n as u64, Ordering::Relaxed);
        for _ in 0..n {
            udp.count_drop(DropReason::NoSession);
        }
    }
}

/// The start line of a session: what it carries and the WireGuard MTU;
/// `true` when the FEC datagram extension is negotiated.
///
/// The MTU is what one packet carries unfragmented (the extension's
/// `single_packet_payload`), less the 8-byte flow header and WireGuard's
/// 32 bytes: larger datagrams cross too, cut into fragments, but a lost
/// fragment then costs the whole datagram. A session that offered the
/// extension and has not heard the answer yet (its first probe or the
/// answer was lost: 2 session starts in about 50 on the field's 9% path) carries
/// kcp-go OOB datagrams until it does, which take a few bytes more; the
/// MTU given is then the extension's, which fits one packet either way
/// (the OOB one would be cut in two once the extension is on). The
/// caller calls again when it is negotiated later.
pub(crate) fn report_mtu(log: &Log, kcp: &KcpStream) -> bool {
    let fec = kcp.stats().datagram_fec;
    let (line, negotiated) = session_line(&fec, kcp.max_datagram_payload());
    log.line(line);
    negotiated
}

/// [`report_mtu`]'s line for a session whose datagram FEC stands at `fec`
/// and which takes datagrams of up to `max_payload` bytes now.
fn session_line(fec: &DatagramFecStats, max_payload: usize) -> (String, bool) {
    let max = max_payload.saturating_sub(HEADER_LEN);
    if !fec.negotiated {
        let oob = wireguard_mtu(max_payload);
        if fec.single_packet_payload == 0 {
            let line = format!(
                "udp: the peer did not negotiate FEC datagrams: datagrams of up to {max} B \
                 cross this session unprotected (kcp-go OOB); for WireGuard through it set \
                 MTU = {oob}{}",
                below_ipv6_minimum(oob)
            );
            return (line, false);
        }
        let wg = wireguard_mtu(fec.single_packet_payload).min(oob);
        let line = format!(
            "udp: FEC datagrams offered, no answer yet: until the peer answers, datagrams of \
             up to {max} B cross this session unprotected (kcp-go OOB); for WireGuard through \
             it set MTU = {wg} (one packet with or without the extension){}",
            below_ipv6_minimum(wg)
        );
        return (line, false);
    }
    let one = fec.single_packet_payload;
    let wg = wireguard_mtu(one);
    let line = format!(
        "udp: FEC datagrams of up to {max} B cross this session, {} B in one packet; \
         for WireGuard through it set MTU = {wg} ({one} B of one packet less the \
         {HEADER_LEN}-byte flow header and WireGuard's {WIREGUARD_OVERHEAD} bytes){}",
        one.saturating_sub(HEADER_LEN),
        below_ipv6_minimum(wg)
    );
    (line, true)
}

/// Once a second while the FEC datagram offer is unanswered: `true` (and
/// the session's line again) when it was answered since.
pub(crate) fn negotiated_since(log: &Log, kcp: &KcpStream, negotiated: &mut bool) -> bool {
    if *negotiated || !kcp.stats().datagram_fec.negotiated {
        return false;
    }
    *negotiated = report_mtu(log, kcp);
    *negotiated
}

fn below_ipv6_minimum(wg: usize) -> &'static str {
    if wg < 1280 {
        " (below 1280, WireGuard's IPv6 minimum: raise --mtu)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MTU in a session's line, as `field.sh` and an operator read it.
    fn mtu_of(line: &str) -> usize {
        let at = line.find("set MTU = ").expect("an MTU") + "set MTU = ".len();
        let digits: String = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().expect("a number")
    }

    /// Ticks `live` once, pinging when it says so; whether it pinged.
    fn tick(live: &mut Liveness) -> bool {
        let ping = live.tick();
        if ping {
            live.pings += 1;
        }
        ping
    }

    #[test]
    fn pings_go_only_where_an_answer_is_wanted_and_silence_while_sending_is_noticed() {
        // An idle session: no pings, never silent.
        let mut live = Liveness::default();
        for _ in 0..100 {
            assert!(!tick(&mut live));
        }
        assert!(!live.silent());
        // Used once, toward a server that never answers (an older kcpio):
        // three pings, then one per 10 ticks of silence, and never taken
        // for silent.
        live.sent = true;
        let pinged = (0..100).filter(|_| tick(&mut live)).count();
        assert_eq!(
            pinged,
            START_PINGS as usize + 100 / UNANSWERED_EVERY as usize
        );
        assert!(!live.silent());
        // An answer at last: from then on, silence is noticed.
        live.pong();
        assert!(!tick(&mut live));
        // An idle session that stays idle after its first pings: none.
        let mut live = Liveness {
            sent: true,
            heard: true,
            ..Liveness::default()
        };
        let pinged = (0..100).filter(|_| tick(&mut live)).count();
        assert_eq!(pinged, START_PINGS as usize);
        // A server that answers: no pings while datagrams come back.
        let mut live = Liveness {
            sent: true,
            ..Liveness::default()
        };
        assert!(tick(&mut live), "the first ping of a used session");
        live.pong();
        for _ in 0..10 {
            live.sent = true;
            live.heard = true;
            assert!(!tick(&mut live));
        }
        // Sending and hearing nothing: a ping every tick, silent after
        // SILENT_TICKS of them, even once the sending stopped.
        live.sent = true;
        for t in 1..=SILENT_TICKS {
            assert!(!live.silent(), "tick {t}");
            assert!(tick(&mut live), "tick {t}");
        }
        assert!(live.silent());
        assert!(tick(&mut live));
        assert!(live.silent());
        // Anything heard ends it.
        live.heard = true;
        assert!(!tick(&mut live));
        assert!(!live.silent());
        // Silence while idle is no silence.
        for _ in 0..10 {
            assert!(!tick(&mut live));
        }
        assert!(!live.silent());
    }

    /// A server that never answered a ping is judged by its FEC datagram
    /// receiver's reports: reports while sending keep it; none for
    /// SILENT_TICKS ticks while sending make it silent (before, such a
    /// session was never judged, and a client whose first pings met a dead
    /// path waited for its 30 s idle timeout). A server that answers is
    /// judged by its pongs alone; a session without FEC datagrams (no
    /// reports) never by silence.
    #[test]
    fn a_server_that_never_answered_a_ping_is_judged_by_its_reports() {
        let mut live = Liveness::default();
        live.absorb_reports(true, 0);
        let mut reports = 0;
        for _ in 0..20 {
            live.sent = true;
            reports += 3;
            live.absorb_reports(true, reports);
            tick(&mut live);
            assert!(!live.silent());
        }
        assert!(!live.answers);
        for t in 1..=SILENT_TICKS {
            assert!(!live.silent(), "tick {t}");
            live.sent = true;
            live.absorb_reports(true, reports);
            tick(&mut live);
        }
        assert!(live.silent());
        // A report ends it.
        live.absorb_reports(true, reports + 1);
        tick(&mut live);
        assert!(!live.silent());
        // Without FEC datagrams there are no reports to judge by.
        let mut live = Liveness::default();
        for _ in 0..20 {
            live.sent = true;
            live.absorb_reports(false, 0);
            tick(&mut live);
            assert!(!live.silent());
        }
        // Once a server answers, its reports are not heard: only pongs and
        // the flows' datagrams are (a restarted server could report under
        // the old conversation while the client refuses its datagrams).
        let mut live = Liveness {
            sent: true,
            ..Liveness::default()
        };
        live.absorb_reports(true, 0);
        tick(&mut live);
        live.pong();
        tick(&mut live);
        for t in 1..=SILENT_TICKS {
            assert!(!live.silent(), "tick {t}");
            live.sent = true;
            reports += 1;
            live.absorb_reports(true, reports);
            tick(&mut live);
        }
        assert!(live.silent());
    }

    #[test]
    fn a_session_whose_offer_is_unanswered_gives_the_mtu_that_fits_either_way() {
        // The default --mtu 1400 under a CFB cipher: 1,368 B of kcp-go OOB
        // payload, 1,361 B in one extension packet.
        let (oob, one) = (1_368, 1_361);
        let mut fec = DatagramFecStats::default();
        fec.single_packet_payload = one;
        let (line, negotiated) = session_line(&fec, oob);
        assert!(!negotiated);
        // Not 1,328 (the OOB packet's): once the offer is answered, a
        // WireGuard packet of that size would be cut in two, doubling the
        // packets and losing the datagram with either fragment (seen in
        // the field when the first probe was lost on a 9% path).
        assert_eq!(mtu_of(&line), wireguard_mtu(one), "{line}");
        assert!(line.contains("no answer yet"), "{line}");
        // Answered: the same MTU.
        fec.negotiated = true;
        let (line, negotiated) = session_line(&fec, 21_768);
        assert!(negotiated);
        assert_eq!(mtu_of(&line), wireguard_mtu(one), "{line}");
        // A peer that never will (no offer made: kcp-go shaped settings):
        // the OOB packet's MTU.
        let (line, negotiated) = session_line(&DatagramFecStats::default(), oob);
        assert!(!negotiated);
        assert_eq!(mtu_of(&line), wireguard_mtu(oob), "{line}");
    }
}
