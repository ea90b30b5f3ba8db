//! The client: a TCP listener whose connections become streams of the
//! `--conn` pooled sessions.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kcpio::KcpStream;
use kcpio::mux::{Mux, Snappy};
use tokio::net::{TcpListener, UdpSocket};

use crate::config::{HostPorts, Settings};
use crate::detect::{Io, SNAPPY_MAGIC, Tap, UnframedStart, unframed_start};
use crate::forward::{Conn, forward};
use crate::limits::{Charge, ChargeGuard, Gate, SessionGate};
use crate::log::{Log, Repeats, log_close};
use crate::pool::{MuxPool, Pooled};
use crate::stats::{Metered, Stats};

/// How long a client session may go without a byte from the server while a
/// stream is open before the client says why it probably stalls.
const SILENCE_WARNING: Duration = Duration::from_secs(15);

/// The client's `--conn` sessions ([`MuxPool`]: created lazily, replaced
/// when closed or expired after `--autoexpire`, expired ones closed
/// `--scavengettl` later), and how to make one.
pub(crate) struct Pool {
    settings: Settings,
    remote: HostPorts,
    pool: MuxPool<Session>,
    gate: Arc<Gate>,
    stats: Arc<Stats>,
    log: Log,
    /// Failed connects since the last that worked, over all callers.
    failed: std::sync::Mutex<Repeats>,
}

/// One pooled session with its share of the client's limits: at most
/// `--sessionstreams` streams, and its account with the buffer budget
/// (what its forwarders read from local connections and it still holds
/// toward the server).
pub(crate) struct Session {
    mux: Arc<Mux>,
    /// The KCP stream under the mux: the UDP flows of `--udplisten` ride
    /// the first session's datagrams.
    kcp: Arc<KcpStream>,
    share: Arc<SessionGate>,
    account: ChargeGuard,
}

impl Session {
    /// The KCP stream under the mux.
    pub(crate) fn kcp(&self) -> &Arc<KcpStream> {
        &self.kcp
    }
}

impl Pooled for Session {
    fn is_closed(&self) -> bool {
        self.mux.is_closed()
    }
    fn close(&self) {
        self.mux.close();
    }
}

impl Pool {
    fn new(
        settings: Settings,
        remote: HostPorts,
        gate: Arc<Gate>,
        stats: Arc<Stats>,
        log: Log,
    ) -> Arc<Self> {
        let pool = MuxPool::new(
            settings.conn,
            Some(settings.autoexpire),
            settings.scavengettl,
        );
        Arc::new(Self {
            settings,
            remote,
            pool,
            gate,
            stats,
            log,
            failed: std::sync::Mutex::default(),
        })
    }

    /// The next slot's session. Retries every second until a session is
    /// up, as kcptun does (its line said 3 times, then once a minute
    /// however many connections wait: [`Repeats`]).
    async fn session(&self) -> Arc<Session> {
        loop {
            match self.pool.get(|| self.connect()).await {
                Ok(mux) => return mux,
                Err(e) => {
                    crate::udp::lock(&self.failed).line(&self.log, format!("re-connecting: {e}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// The first slot's session (made when there is none, replaced when
    /// it ended or expired) with its KCP stream, for the UDP flows that
    /// ride its datagrams (`--udplisten`).
    ///
    /// # Errors
    ///
    /// The connect failed (the caller retries).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe ([`MuxPool::get_first`]).
    pub(crate) async fn first_session(&self) -> io::Result<(Arc<Mux>, Arc<KcpStream>)> {
        let s = self.pool.get_first(|| self.connect()).await?;
        Ok((Arc::clone(&s.mux), Arc::clone(&s.kcp)))
    }

    /// A session dialled beside the first slot's, for the UDP flows to
    /// try when the slot's has gone silent ([`replace_first`](Self::replace_first)
    /// puts it in the pool).
    ///
    /// # Errors
    ///
    /// The connect failed.
    pub(crate) async fn dial_beside(&self) -> io::Result<Session> {
        self.connect().await
    }

    /// Puts `fresh` into the first slot in place of the session whose KCP
    /// stream is `old` (retired: its streams go on until it ends or
    /// `--scavengettl` passes), so that new TCP connections take it too;
    /// the slot's session and its KCP stream after that (not `fresh` when
    /// the slot had moved on already).
    pub(crate) async fn replace_first(
        &self,
        old: &Arc<KcpStream>,
        fresh: Session,
    ) -> (Arc<Mux>, Arc<KcpStream>) {
        let s = self
            .pool
            .replace_first(|s| Arc::ptr_eq(&s.kcp, old), fresh)
            .await;
        (Arc::clone(&s.mux), Arc::clone(&s.kcp))
    }

    /// The sessions of the slots after the first, with their KCP streams
    /// (those of slots busy connecting are left out).
    pub(crate) fn others(&self) -> Vec<(Arc<Mux>, Arc<KcpStream>)> {
        self.pool
            .others()
            .iter()
            .map(|s| (Arc::clone(&s.mux), Arc::clone(&s.kcp)))
            .collect()
    }

    /// A new KCP session and its mux, with the mismatch watchers. The
    /// remote name is resolved on every connect (a changed DNS record is
    /// followed; a failure is retried by [`session`](Self::session)), and
    /// a port range gives a random port per session.
    async fn connect(&self) -> io::Result<Session> {
        let name = self.remote.pick();
        let remote = tokio::net::lookup_host(&name)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("--remoteaddr {name}: {e}")))?
            .next()
            .ok_or_else(|| io::Error::other(format!("--remoteaddr {name}: no address")))?;
        let kcp = Arc::new(KcpStream::connect(remote, &self.settings.kcp).await?);
        crate::udp::lock(&self.failed).clear();
        let local = kcp.local_addr()?;
        let kcp_stats = kcp.stats_handle();
        self.log.line(format!(
            "smux version: {}, on connection: {local} -> {remote}",
            self.settings.version.as_u8(),
        ));
        let mut metered = Metered::new(Arc::clone(&kcp), Arc::clone(&self.stats));
        // One line when the session ends (the server went away, expiry),
        // not one per stream it carried.
        let log = self.log.clone();
        metered.on_drop(move || log.line(format!("session {local} -> {remote} ended")));
        let heard = Arc::clone(&metered.heard);
        let ours = self.settings.version.as_u8();
        let log = self.log.clone();
        let version_check = move |b: &[u8]| {
            if b[0] != ours && (b[0] == 1 || b[0] == 2) {
                log.line(format!(
                    "MISMATCH: the server speaks smux v{}, we v{ours}: run both ends with --smuxver {}",
                    b[0], b[0]
                ));
            }
        };
        let log = self.log.clone();
        let io: Box<dyn Io> = if self.settings.compress {
            // KCP delivers from the first byte, so a compressing server's
            // stream starts with the snappy identifier; what comes instead
            // is named for what it is.
            let check = version_check.clone();
            let raw = Tap::watched(metered, move |b: &[u8]| {
                if b[0] == SNAPPY_MAGIC[0] {
                    return;
                }
                let head = &b[..b.len().min(8)];
                match unframed_start(b) {
                    UnframedStart::Smux(_) => {
                        log.line(
                            "MISMATCH: the server does not compress (it runs with --nocomp): add --nocomp here",
                        );
                        check(b);
                    }
                    UnframedStart::SnappyChunk(version) => {
                        log.line(format!(
                            "the server's compressed stream reached us without its start (snappy \
                             chunk {head:02x?} with no stream identifier before it): not a --nocomp \
                             mismatch"
                        ));
                        if let Some(v) = version {
                            check(&[v]);
                        }
                    }
                    UnframedStart::Unclear => log.line(format!(
                        "MISMATCH: the server's first bytes {head:02x?} are no snappy stream: it \
                         may run with --nocomp (then add --nocomp here)"
                    )),
                }
            });
            Box::new(Tap::watched(Snappy::new(raw), version_check))
        } else {
            Box::new(Tap::watched(metered, move |b: &[u8]| {
                if b[0] == SNAPPY_MAGIC[0] {
                    log.line(
                        "MISMATCH: the server compresses (it runs without --nocomp): remove --nocomp here",
                    );
                } else {
                    version_check(b);
                }
            }))
        };
        let mux = Arc::new(Mux::client(io, &self.settings.mux));
        self.stats.watch_mux(&mux);
        // What this session holds toward the server: its smux send buffer
        // and its KCP send queue (whole segments).
        let held = {
            let mux = Arc::downgrade(&mux);
            let mss = self.gate.mss();
            move || {
                mux.upgrade().map_or(0, |m| m.send_buffered())
                    + kcp_stats.stats().map_or(0, |s| s.wait_snd * mss)
            }
        };
        let share = self.gate.session_share();
        let account = Charge::start(
            Arc::clone(&self.gate),
            Arc::clone(&share),
            self.log.clone(),
            held,
        );
        // Silence while a stream waits is a wrong key or cipher, a server
        // that is not running, or a kcptun server that dropped us over a
        // smux version it did not expect. A session that carries only the
        // UDP flows (`--udplisten`) may hear no stream byte at all: the
        // server's datagrams (or the reports of its FEC datagram receiver)
        // are its answer then.
        let log = self.log.clone();
        let datagrams = kcp.stats_handle();
        tokio::spawn(async move {
            tokio::time::sleep(SILENCE_WARNING).await;
            let answered = datagrams.stats().is_some_and(|s| {
                s.oob_received + s.datagram_fec.datagrams_in + s.datagram_fec.reports_in > 0
            });
            if !heard.load(Ordering::Relaxed) && !answered {
                log.line(format!(
                    "no reply from the server in {} s: check that it runs and that --key, --crypt, \
                     --smuxver and --nocomp match on both ends",
                    SILENCE_WARNING.as_secs()
                ));
            }
        });
        Ok(Session {
            mux,
            kcp,
            share,
            account,
        })
    }

    /// Closes expired sessions whose time has come, once a second.
    async fn scavenge(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            for _ in 0..self.pool.scavenge() {
                self.log.line("scavenger: session closed due to ttl");
            }
        }
    }
}

/// Accepts TCP connections, each carried as a stream of a pooled session;
/// with `udp` (`--udplisten`), carries that socket's flows over the first
/// pooled session's datagrams beside them. A connection beyond
/// `--maxstreams` at once, or beyond its session's `--sessionstreams`, is
/// closed at once and counted (`refused (slots)`).
pub(crate) async fn run_client(
    tcp: TcpListener,
    udp: Option<UdpSocket>,
    settings: Settings,
    stats: Arc<Stats>,
    log: Log,
) -> io::Result<()> {
    let closewait = settings.closewait;
    let remote = HostPorts::parse(&settings.peer)
        .map_err(|e| io::Error::other(format!("--remoteaddr {}: {e}", settings.peer)))?;
    let peer = settings.peer.clone();
    let udp_settings = settings.clone();
    let mss = settings
        .kcp
        .kcp_mtu()
        .saturating_sub(crate::server::KCP_HEADER);
    let gate = Arc::new(Gate::new(settings.limits, mss));
    stats.watch_gate(Arc::clone(&gate));
    let pool = Pool::new(
        settings,
        remote,
        Arc::clone(&gate),
        Arc::clone(&stats),
        log.clone(),
    );
    tokio::spawn(Arc::clone(&pool).scavenge());
    if let Some(sock) = udp {
        let sessions = crate::udp::client::Sessions::Beside(Arc::clone(&pool));
        let (stats, log) = (Arc::clone(&stats), log.clone());
        tokio::spawn(async move {
            crate::udp::client::run_udp_client(sock, sessions, udp_settings, stats, log).await
        });
    }
    loop {
        let (conn, from) = tcp.accept().await?;
        // The process's slot first, so connections waiting for a session
        // (the server is down) are bounded too.
        let Some(global) = gate.global_slot() else {
            refuse(&stats, &log, &gate, from);
            continue;
        };
        let pool = Arc::clone(&pool);
        let stats = Arc::clone(&stats);
        let log = log.clone();
        let remote = peer.clone();
        let gate = Arc::clone(&gate);
        tokio::spawn(async move {
            // A session that died since it was handed out: one more try.
            let mut stream = None;
            for _ in 0..2 {
                let session = pool.session().await;
                match session.mux.open_stream().await {
                    Ok(s) => {
                        stream = Some((s, session));
                        break;
                    }
                    Err(e) => log.stream(format!("open stream: {e}")),
                }
            }
            let Some((stream, session)) = stream else {
                return;
            };
            let Some(_slot) = Gate::session_slot(global, &session.share) else {
                // Dropping the stream sends its FIN.
                return refuse(&stats, &log, &gate, from);
            };
            let sid = stream.id();
            stats.streams_opened.fetch_add(1, Ordering::Relaxed);
            stats.streams_open.fetch_add(1, Ordering::Relaxed);
            log.stream(format!("stream opened in: {from} out: {remote}({sid})"));
            let charge = session.account.charge();
            drop(session);
            let r = forward(Conn::Tcp(conn), stream, closewait, &stats, Some(&charge)).await;
            stats.streams_open.fetch_sub(1, Ordering::Relaxed);
            log_close(&log, from, remote, sid, r);
        });
    }
}

/// A local connection over a stream limit: counted, and closed (dropped).
fn refuse(stats: &Stats, log: &Log, gate: &Gate, from: std::net::SocketAddr) {
    stats.streams_refused.fetch_add(1, Ordering::Relaxed);
    log.stream(format!(
        "connection from {from} refused: {} streams at once (--maxstreams or --sessionstreams)",
        gate.streams_in_use()
    ));
}
