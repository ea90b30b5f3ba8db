//! The server's bounds on what its clients' streams cost: forwarded streams
//! (each a descriptor), dials in flight, a dial timeout, a back-off when
//! the target refuses or stalls, and a budget of bytes the sessions hold
//! toward their clients, each shared fairly between clients (a client is a
//! source address: its sessions share one share).

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::forward::{Conn, dial};
use crate::log::Log;
use crate::stats::Stats;

/// The first back-off after a failed dial; it doubles with each further
/// consecutive failure, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest back-off.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// `--maxstreams`'s ceiling, and its value where the descriptor limit
/// cannot be read.
const MAX_STREAMS_DEFAULT: usize = 8192;
/// Descriptors left to the process itself (sockets, log, the tunnel's own)
/// below the descriptor limit.
const RESERVED_FDS: usize = 128;

/// `--maxbuffer`'s default, MiB: about 23 sessions sending flat out at
/// once (each holds at most its smux session send buffer, 8 MiB by default,
/// plus its KCP send queue, `2 ×` the send window in segments: 2.8 MB at
/// kcptun's server window of 1024, 44 MB at a window grown to 16384), so a
/// normal kcptun workload never meets it.
pub(crate) const MAX_BUFFER_DEFAULT_MIB: usize = 256;
/// How often a session whose forwarders hold budget checks how much of it
/// its smux send buffer and KCP send queue still hold, and gives back the
/// rest.
const SETTLE_PERIOD: Duration = Duration::from_millis(20);
/// At most one "budget reached" log line per this long.
const FULL_LOG_PERIOD: Duration = Duration::from_secs(10);
/// How often the server looks whether a load has drained
/// ([`Gate::trim_when_drained`]).
pub(crate) const DRAIN_CHECK_PERIOD: Duration = Duration::from_secs(1);
/// What one forwarded stream costs besides its charged bytes (mux and KCP
/// state, the forwarder's task; 36-42 KiB measured for an idle one).
const STREAM_COST: usize = 40 << 10;
/// The smallest peak load worth handing back to the system after it drains.
const TRIM_MIN_PEAK: usize = 16 << 20;

/// `--maxstreams`'s default: the soft descriptor limit (`ulimit -n`, read
/// from `/proc/self/limits`) less [`RESERVED_FDS`], at least 1, at most
/// [`MAX_STREAMS_DEFAULT`] (also the value where the limit is unknown or
/// unlimited).
pub(crate) fn default_max_streams() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| soft_nofile(&t))
        .map_or(MAX_STREAMS_DEFAULT, |soft| {
            soft.saturating_sub(RESERVED_FDS)
                .clamp(1, MAX_STREAMS_DEFAULT)
        })
}

/// The soft limit of open files in the text of `/proc/self/limits`
/// (`None` for "unlimited" or a line it cannot read).
fn soft_nofile(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The limits as configured (see `--maxstreams`, `--sessionstreams`,
/// `--maxdials`, `--dialtimeout`, `--maxbuffer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Streams forwarded at once, all sessions together (each holds one
    /// descriptor to the target).
    pub max_streams: usize,
    /// Of those, the most one client (a source address, all its sessions
    /// together) may hold.
    pub session_streams: usize,
    /// Dials to the target in flight at once, all sessions together.
    pub max_dials: usize,
    /// Of those, the most one client may have (half, at least one).
    pub session_dials: usize,
    /// How long a stream may wait for a dial slot and its dial together.
    pub dial_timeout: Duration,
    /// Bytes read from the target that the sessions may hold toward their
    /// clients at once (smux send buffers and KCP send queues), all
    /// sessions together: a forwarder stops reading its target while it is
    /// spent.
    pub max_buffer: usize,
    /// Of those, the most one client may hold (half).
    pub client_buffer: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_streams: MAX_STREAMS_DEFAULT,
            session_streams: MAX_STREAMS_DEFAULT / 2,
            max_dials: 128,
            session_dials: 64,
            dial_timeout: Duration::from_secs(10),
            max_buffer: MAX_BUFFER_DEFAULT_MIB << 20,
            client_buffer: MAX_BUFFER_DEFAULT_MIB << 19,
        }
    }
}

/// The process's share of slots, and the back-off state.
pub(crate) struct Gate {
    limits: Limits,
    streams: Arc<Semaphore>,
    dials: Arc<Semaphore>,
    /// The buffer budget, one permit a byte.
    buffer: Arc<Semaphore>,
    /// Reservations that had to wait for budget (the client's or the
    /// process's).
    buffer_waits: AtomicU64,
    /// When "budget reached" was last logged.
    full_logged: Mutex<Option<Instant>>,
    /// The KCP sessions' segment payload (mtu less the 24-byte header): a
    /// queued segment counts as this many bytes held.
    mss: usize,
    backoff: Mutex<Backoff>,
    /// Each client address's share, while one of its sessions lives.
    clients: Mutex<Clients>,
}

/// The live clients' shares; entries of clients whose sessions all ended
/// are pruned once the map doubles, so it holds at most twice the live
/// clients plus 64.
#[derive(Default)]
struct Clients {
    shares: HashMap<IpAddr, Weak<SessionGate>>,
    prune_at: usize,
}

#[derive(Default)]
struct Backoff {
    failures: u32,
    until: Option<Instant>,
}

/// One client's shares (all its sessions together).
pub(crate) struct SessionGate {
    streams: Arc<Semaphore>,
    dials: Arc<Semaphore>,
    buffer: Arc<Semaphore>,
}

/// The slots a forwarded stream holds until it ends.
pub(crate) struct StreamSlot {
    _global: OwnedSemaphorePermit,
    _session: OwnedSemaphorePermit,
}

/// Why a stream was not forwarded.
#[derive(Debug)]
pub(crate) enum Refused {
    /// No stream slot (the session's share or the process's).
    Streams,
    /// The target failed recently: back-off.
    Backoff,
}

impl Gate {
    /// The gate for `limits`, with KCP segments of `mss` payload bytes.
    pub(crate) fn new(limits: Limits, mss: usize) -> Self {
        Self {
            streams: Arc::new(Semaphore::new(limits.max_streams)),
            dials: Arc::new(Semaphore::new(limits.max_dials)),
            buffer: Arc::new(Semaphore::new(limits.max_buffer)),
            buffer_waits: AtomicU64::new(0),
            full_logged: Mutex::new(None),
            mss,
            limits,
            backoff: Mutex::new(Backoff::default()),
            clients: Mutex::new(Clients::default()),
        }
    }

    /// The share of the client at `ip`, which every session from that
    /// address holds while it lives: several sessions from one address
    /// take no more than one does.
    pub(crate) fn client(&self, ip: IpAddr) -> Arc<SessionGate> {
        let mut c = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(share) = c.shares.get(&ip).and_then(Weak::upgrade) {
            return share;
        }
        let share = Arc::new(SessionGate {
            streams: Arc::new(Semaphore::new(self.limits.session_streams)),
            dials: Arc::new(Semaphore::new(self.limits.session_dials)),
            buffer: Arc::new(Semaphore::new(self.limits.client_buffer)),
        });
        c.shares.insert(ip, Arc::downgrade(&share));
        if c.shares.len() > c.prune_at {
            c.shares.retain(|_, w| w.strong_count() > 0);
            c.prune_at = 2 * c.shares.len() + 64;
        }
        share
    }

    /// A share of its own, unkeyed: the client's, one per pooled session
    /// (`--sessionstreams` streams, a client's part of the buffer budget).
    pub(crate) fn session_share(&self) -> Arc<SessionGate> {
        Arc::new(SessionGate {
            streams: Arc::new(Semaphore::new(self.limits.session_streams)),
            dials: Arc::new(Semaphore::new(self.limits.session_dials)),
            buffer: Arc::new(Semaphore::new(self.limits.client_buffer)),
        })
    }

    /// Stream slots in use, all sessions together.
    pub(crate) fn streams_in_use(&self) -> usize {
        self.limits.max_streams - self.streams.available_permits()
    }

    /// Dials in flight.
    pub(crate) fn dials_in_flight(&self) -> usize {
        self.limits.max_dials - self.dials.available_permits()
    }

    /// Bytes of the buffer budget charged now (reserved by forwarders, or
    /// read and still held by a session), all sessions together.
    pub(crate) fn buffer_charged(&self) -> usize {
        self.limits.max_buffer - self.buffer.available_permits()
    }

    /// The buffer budget, bytes.
    pub(crate) const fn max_buffer(&self) -> usize {
        self.limits.max_buffer
    }

    /// Reservations that waited for budget.
    pub(crate) fn buffer_waits(&self) -> u64 {
        self.buffer_waits.load(Ordering::Relaxed)
    }

    /// The KCP segment payload a queued segment counts for.
    pub(crate) const fn mss(&self) -> usize {
        self.mss
    }

    /// Counts a reservation that must wait, and logs it (at most once per
    /// [`FULL_LOG_PERIOD`]).
    fn note_full(&self, log: &Log, client: bool) {
        self.buffer_waits.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut last = self
            .full_logged
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|t| now.duration_since(t) >= FULL_LOG_PERIOD) {
            *last = Some(now);
            drop(last);
            log.line(format!(
                "buffer budget reached ({} of {} B{}): forwarders wait before reading their targets",
                self.buffer_charged(),
                self.limits.max_buffer,
                if client {
                    format!(", one client's share of {} B", self.limits.client_buffer)
                } else {
                    String::new()
                }
            ));
        }
    }

    /// Takes a stream slot for a new stream of `session` at once, or says
    /// why not (the caller drops the stream: a FIN to the client).
    pub(crate) fn admit(&self, session: &SessionGate) -> Result<StreamSlot, Refused> {
        if self
            .backoff
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .until
            .is_some_and(|t| Instant::now() < t)
        {
            return Err(Refused::Backoff);
        }
        let g = self.global_slot().ok_or(Refused::Streams)?;
        Self::session_slot(g, session).ok_or(Refused::Streams)
    }

    /// One of the process's stream slots alone, at once: the client takes
    /// it when it accepts a local connection, before it knows the session.
    pub(crate) fn global_slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.streams).try_acquire_owned().ok()
    }

    /// `global` completed with one of `session`'s stream slots, at once.
    pub(crate) fn session_slot(
        global: OwnedSemaphorePermit,
        session: &SessionGate,
    ) -> Option<StreamSlot> {
        let s = Arc::clone(&session.streams).try_acquire_owned().ok()?;
        Some(StreamSlot {
            _global: global,
            _session: s,
        })
    }

    /// Dials `target` within the dial timeout (waiting for a dial slot
    /// counts), holding one of the session's and one of the process's dial
    /// slots meanwhile; a failure or timeout extends the back-off.
    pub(crate) async fn dial(
        &self,
        session: &SessionGate,
        target: &str,
        stats: &Stats,
    ) -> io::Result<Conn> {
        let attempt = async {
            let _s = session
                .dials
                .acquire()
                .await
                .map_err(|_| io::Error::other("closed"))?;
            let _g = self
                .dials
                .acquire()
                .await
                .map_err(|_| io::Error::other("closed"))?;
            dial(target).await
        };
        let r = match tokio::time::timeout(self.limits.dial_timeout, attempt).await {
            Ok(r) => r,
            Err(_) => {
                stats.dials_timed_out.fetch_add(1, Ordering::Relaxed);
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", self.limits.dial_timeout),
                ))
            }
        };
        let mut b = self.backoff.lock().unwrap_or_else(PoisonError::into_inner);
        match &r {
            Ok(_) => *b = Backoff::default(),
            Err(_) => {
                stats.dials_failed.fetch_add(1, Ordering::Relaxed);
                b.failures = b.failures.saturating_add(1);
                let wait = FIRST_BACKOFF
                    .saturating_mul(1 << (b.failures - 1).min(16))
                    .min(MAX_BACKOFF);
                b.until = Some(Instant::now() + wait);
            }
        }
        r
    }
}

/// One session's account with the buffer budget: what its forwarders read
/// from the target and wrote into the session, charged to the client's
/// share and the process's budget until the session no longer holds it
/// (neither in its smux send buffer nor in its KCP send queue).
pub(crate) struct Charge {
    gate: Arc<Gate>,
    share: Arc<SessionGate>,
    log: Log,
    /// Bytes written into the session and not yet given back.
    charged: AtomicUsize,
    /// Something was charged, or the session ended.
    news: Notify,
    ended: AtomicBool,
}

/// Budget reserved for one read; given back on drop unless
/// [`commit`](Self::commit)ted.
pub(crate) struct Reserved<'a> {
    charge: &'a Charge,
    bytes: usize,
}

/// Ends a [`Charge`]'s settling task when the session's task ends.
pub(crate) struct ChargeGuard(Arc<Charge>);

impl Charge {
    /// The account of a new session of the client `share`, with a task
    /// that gives budget back as `held()` (what the session holds toward
    /// its client now) falls; the task ends when the guard is dropped.
    pub(crate) fn start(
        gate: Arc<Gate>,
        share: Arc<SessionGate>,
        log: Log,
        held: impl Fn() -> usize + Send + 'static,
    ) -> ChargeGuard {
        let c = Arc::new(Self {
            gate,
            share,
            log,
            charged: AtomicUsize::new(0),
            news: Notify::new(),
            ended: AtomicBool::new(false),
        });
        tokio::spawn(Arc::clone(&c).settle(held));
        ChargeGuard(c)
    }

    /// The most one reservation may ask for (a client's share, at most).
    pub(crate) fn max_reserve(&self) -> usize {
        self.gate
            .limits
            .client_buffer
            .min(self.gate.limits.max_buffer)
    }

    /// Waits until `want` bytes (at most [`max_reserve`](Self::max_reserve))
    /// of the client's share and of the process's budget are free, and
    /// takes them.
    ///
    /// # Errors
    ///
    /// Never in practice: the semaphores are never closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: what was taken is given back.
    pub(crate) async fn reserve(&self, want: usize) -> io::Result<Reserved<'_>> {
        let want = want.min(self.max_reserve());
        let n = u32::try_from(want).map_err(io::Error::other)?;
        let closed = |_| io::Error::other("closed");
        let s = match Arc::clone(&self.share.buffer).try_acquire_many_owned(n) {
            Ok(p) => p,
            Err(_) => {
                self.gate.note_full(&self.log, true);
                Arc::clone(&self.share.buffer)
                    .acquire_many_owned(n)
                    .await
                    .map_err(closed)?
            }
        };
        let g = match Arc::clone(&self.gate.buffer).try_acquire_many_owned(n) {
            Ok(p) => p,
            Err(_) => {
                self.gate.note_full(&self.log, false);
                Arc::clone(&self.gate.buffer)
                    .acquire_many_owned(n)
                    .await
                    .map_err(closed)?
            }
        };
        s.forget();
        g.forget();
        Ok(Reserved {
            charge: self,
            bytes: want,
        })
    }

    fn give_back(&self, n: usize) {
        if n > 0 {
            self.share.buffer.add_permits(n);
            self.gate.buffer.add_permits(n);
        }
    }

    /// Gives back, every [`SETTLE_PERIOD`] while something is charged,
    /// what the session no longer holds; ends with the session.
    async fn settle(self: Arc<Self>, held: impl Fn() -> usize) {
        while !self.ended.load(Ordering::Acquire) {
            if self.charged.load(Ordering::Acquire) == 0 {
                self.news.notified().await;
                continue;
            }
            tokio::time::sleep(SETTLE_PERIOD).await;
            let held = held();
            let charged = self.charged.load(Ordering::Acquire);
            if charged > held {
                // Only commits add meanwhile: no underflow.
                self.charged.fetch_sub(charged - held, Ordering::AcqRel);
                self.give_back(charged - held);
            }
        }
    }
}

impl Reserved<'_> {
    /// The bytes reserved.
    pub(crate) const fn bytes(&self) -> usize {
        self.bytes
    }

    /// `used` of the reserved bytes were written into the session: they
    /// stay charged until the session no longer holds them; the rest is
    /// given back now.
    pub(crate) fn commit(mut self, used: usize) {
        let used = used.min(self.bytes);
        let c = self.charge;
        c.charged.fetch_add(used, Ordering::AcqRel);
        c.give_back(self.bytes - used);
        self.bytes = 0;
        c.news.notify_one();
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.charge.give_back(self.bytes);
    }
}

/// Decides when a load has drained far enough to give the freed heap back
/// to the system: once the load (charged bytes plus a per-stream cost) has
/// fallen to a quarter of its peak since the last trim, and that peak was
/// at least [`TRIM_MIN_PEAK`]. A trim starts a new peak at the load of the
/// moment, so a drain trims once per fourfold fall while its load is still
/// above the minimum: a few times at most, never once a second.
#[derive(Debug, Default)]
pub(crate) struct DrainWatch {
    peak: usize,
}

impl DrainWatch {
    /// Notes the load now; true when the heap should be trimmed.
    pub(crate) fn observe(&mut self, load: usize) -> bool {
        self.peak = self.peak.max(load);
        if self.peak >= TRIM_MIN_PEAK && load <= self.peak / 4 {
            self.peak = load;
            return true;
        }
        false
    }
}

impl Gate {
    /// The load the drain watch follows: bytes charged plus each stream's
    /// fixed cost.
    pub(crate) fn load(&self) -> usize {
        self.buffer_charged() + self.streams_in_use() * STREAM_COST
    }

    /// Runs for as long as the server: every [`DRAIN_CHECK_PERIOD`], when
    /// the load has drained ([`DrainWatch`]), hands the freed heap back to
    /// the system (`kcpio::release_free_memory`) and logs it. Without it a
    /// server keeps the resident size of its worst attack for good.
    pub(crate) async fn trim_when_drained(self: Arc<Self>, log: Log) {
        let mut watch = DrainWatch::default();
        let mut tick = tokio::time::interval(DRAIN_CHECK_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let load = self.load();
            if watch.observe(load) && kcpio::release_free_memory() {
                log.line(format!(
                    "load drained to {} KiB: freed memory returned to the system",
                    load >> 10
                ));
            }
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let left = *self.charged.get_mut();
        self.give_back(left);
    }
}

impl ChargeGuard {
    /// The account, for the session's forwarders.
    pub(crate) fn charge(&self) -> Arc<Charge> {
        Arc::clone(&self.0)
    }
}

impl Drop for ChargeGuard {
    fn drop(&mut self) {
        self.0.ended.store(true, Ordering::Release);
        self.0.news.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes stay charged while the session holds them, a reservation waits
    /// while the client's share is spent, and what the session no longer
    /// holds is given back.
    #[tokio::test(start_paused = true)]
    async fn the_budget_is_charged_until_the_session_lets_go() {
        let limits = Limits {
            max_buffer: 1 << 20,
            client_buffer: 256 << 10,
            ..Limits::default()
        };
        let gate = Arc::new(Gate::new(limits, 1000));
        let share = gate.client("127.0.0.2".parse().unwrap());
        let held = Arc::new(AtomicUsize::new(0));
        let h = Arc::clone(&held);
        let account = Charge::start(
            Arc::clone(&gate),
            share,
            Log::open("", true).unwrap(),
            move || h.load(Ordering::Relaxed),
        );
        let charge = account.charge();
        for _ in 0..4 {
            let r = charge.reserve(64 << 10).await.unwrap();
            held.fetch_add(60 << 10, Ordering::Relaxed);
            r.commit(60 << 10);
        }
        tokio::time::sleep(SETTLE_PERIOD * 3).await;
        assert_eq!(gate.buffer_charged(), 240 << 10);
        // 16 KiB of the share left: a 64 KiB reservation waits.
        let waited = tokio::time::timeout(SETTLE_PERIOD * 5, charge.reserve(64 << 10))
            .await
            .is_err();
        assert!(waited, "reserved past the client's share");
        assert_eq!(gate.buffer_waits(), 1);
        // The session sends most of it: the budget comes back.
        held.store(40 << 10, Ordering::Relaxed);
        let r = tokio::time::timeout(SETTLE_PERIOD * 5, charge.reserve(64 << 10))
            .await
            .expect("the budget was not given back")
            .unwrap();
        drop(r);
        assert_eq!(gate.buffer_charged(), 40 << 10);
        // The session ends: everything is given back.
        drop(account);
        drop(charge);
        tokio::time::sleep(SETTLE_PERIOD * 2).await;
        assert_eq!(gate.buffer_charged(), 0);
    }

    /// Not while the load is small or still high; once when it falls to a
    /// quarter of its peak; again only after another fourfold fall from a
    /// load above the minimum, or after a new peak drains.
    #[test]
    fn a_drained_load_is_trimmed_once() {
        let mut w = DrainWatch::default();
        assert!(!w.observe(TRIM_MIN_PEAK - 1));
        assert!(!w.observe(0), "a peak below the minimum is never trimmed");
        assert!(!w.observe(100 << 20));
        assert!(!w.observe(30 << 20), "still above a quarter of the peak");
        assert!(w.observe(25 << 20));
        assert!(
            !w.observe(10 << 20),
            "the same drain trims once per fourfold fall"
        );
        assert!(w.observe(6 << 20));
        assert!(!w.observe(0), "below the minimum");
        assert!(!w.observe(64 << 20));
        assert!(w.observe(1 << 20), "a new peak that drains trims again");
    }

    #[test]
    fn the_descriptor_limit_sets_the_default_stream_limit() {
        let t = "Limit                     Soft Limit           Hard Limit           Units     \n\
                 Max processes             95651                95651                processes \n\
                 Max open files            1024                 524288               files     \n";
        assert_eq!(soft_nofile(t), Some(1024));
        let unlimited = t.replace("1024 ", "unlimited ");
        assert_eq!(soft_nofile(&unlimited), None);
        assert_eq!(soft_nofile("garbage"), None);
        let d = default_max_streams();
        assert!((1..=MAX_STREAMS_DEFAULT).contains(&d), "{d}");
    }
}
