//! The server's bounds on what its clients' streams cost: forwarded streams
//! (each a descriptor), dials in flight, a dial timeout, and a back-off when
//! the target refuses or stalls, each shared fairly between clients (a
//! client is a source address: its sessions share one share).

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::forward::{Conn, dial};
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
/// `--maxdials`, `--dialtimeout`).
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
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_streams: MAX_STREAMS_DEFAULT,
            session_streams: MAX_STREAMS_DEFAULT / 2,
            max_dials: 128,
            session_dials: 64,
            dial_timeout: Duration::from_secs(10),
        }
    }
}

/// The process's share of slots, and the back-off state.
pub(crate) struct Gate {
    limits: Limits,
    streams: Arc<Semaphore>,
    dials: Arc<Semaphore>,
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
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            streams: Arc::new(Semaphore::new(limits.max_streams)),
            dials: Arc::new(Semaphore::new(limits.max_dials)),
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
        });
        c.shares.insert(ip, Arc::downgrade(&share));
        if c.shares.len() > c.prune_at {
            c.shares.retain(|_, w| w.strong_count() > 0);
            c.prune_at = 2 * c.shares.len() + 64;
        }
        share
    }

    /// Stream slots in use, all sessions together.
    pub(crate) fn streams_in_use(&self) -> usize {
        self.limits.max_streams - self.streams.available_permits()
    }

    /// Dials in flight.
    pub(crate) fn dials_in_flight(&self) -> usize {
        self.limits.max_dials - self.dials.available_permits()
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
        let s = Arc::clone(&session.streams)
            .try_acquire_owned()
            .map_err(|_| Refused::Streams)?;
        let g = Arc::clone(&self.streams)
            .try_acquire_owned()
            .map_err(|_| Refused::Streams)?;
        Ok(StreamSlot {
            _global: g,
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

#[cfg(test)]
mod tests {
    use super::*;

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
