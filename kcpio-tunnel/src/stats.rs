//! The process's counters, the periodic and SIGUSR1 stats line, and the
//! metered KCP session that feeds them.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use kcpio::mux::Mux;
use kcpio::{KcpListener, KcpStream, StatsHandle};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::limits::Gate;
use crate::log::Log;
use crate::udp::{UdpStats, session_datagram_line};

/// Counters of one tunnel process, printed every `--snmpperiod` and on
/// SIGUSR1.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) sessions_opened: AtomicU64,
    pub(crate) sessions_open: AtomicUsize,
    pub(crate) streams_opened: AtomicU64,
    pub(crate) streams_open: AtomicUsize,
    /// TCP bytes into the tunnel, and out of it.
    pub(crate) tcp_in: AtomicU64,
    pub(crate) tcp_out: AtomicU64,
    /// Forwarded TCP connections that failed (reset) while their stream
    /// was open: each stream still ended with a FIN (smux has no reset).
    pub(crate) tcp_errors: AtomicU64,
    /// Bytes through the KCP byte streams (after compression).
    pub(crate) kcp_in: AtomicU64,
    pub(crate) kcp_out: AtomicU64,
    /// The live KCP sessions' stats, read when a line is printed.
    kcp: Mutex<Vec<StatsHandle>>,
    /// The server's listeners (one per port), for their drop counters.
    listeners: OnceLock<Arc<Vec<KcpListener>>>,
    /// Streams refused for want of a stream slot (the server), local
    /// connections refused for want of one (the client); or during the
    /// dial back-off (the server).
    pub(crate) streams_refused: AtomicU64,
    /// Bytes read from streams and not yet taken by their TCP connections:
    /// what the copy buffers hold for slow readers.
    pub(crate) copy_held: AtomicU64,
    pub(crate) streams_backed_off: AtomicU64,
    /// Streams ended because their peer sent its FIN and then took nothing
    /// for `PEER_GONE_STALL` (with `--closewait` set).
    pub(crate) streams_peer_gone: AtomicU64,
    /// Server: dials that failed (timeouts included), and timed out.
    pub(crate) dials_failed: AtomicU64,
    pub(crate) dials_timed_out: AtomicU64,
    /// Server: the slots in use, read when a line is printed.
    gate: OnceLock<Arc<Gate>>,
    /// The live muxes, for their buffered bytes and refusal counters.
    muxes: Mutex<Vec<Weak<Mux>>>,
    /// The UDP mode's counters (set in UDP mode only).
    udp: OnceLock<Arc<UdpStats>>,
}

/// What the stats line reports of the limits (see [`Stats::limits`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LimitStats {
    /// Bytes the live sessions' muxes hold: received and unread, and
    /// written and not yet sent.
    pub(crate) mux_buffered: usize,
    pub(crate) mux_send_buffered: usize,
    /// SYNs the muxes refused (over the stream limit, backlog or rate).
    pub(crate) mux_refused: u64,
    pub(crate) streams_in_use: usize,
    pub(crate) dials_in_flight: usize,
    /// The buffer budget: bytes charged (all sessions), what the sessions
    /// hold toward their clients (smux out plus KCP send queues, whole
    /// segments), the budget, and how often a forwarder waited for it.
    pub(crate) budget_charged: usize,
    pub(crate) budget_held: usize,
    pub(crate) budget: usize,
    pub(crate) budget_waits: u64,
}

impl Stats {
    /// What an operator would call activity: sessions, streams, TCP bytes
    /// and rejected datagrams (keepalives alone do not count).
    fn activity(&self) -> [u64; 21] {
        let l = self.limits();
        let udp = self.udp.get().map_or([0; 5], |u| u.activity());
        [
            udp[0],
            udp[1],
            udp[2],
            udp[3],
            udp[4],
            l.budget_charged as u64,
            l.mux_buffered as u64,
            l.mux_send_buffered as u64,
            l.streams_in_use as u64,
            self.streams_refused.load(Ordering::Relaxed),
            self.streams_backed_off.load(Ordering::Relaxed),
            self.streams_peer_gone.load(Ordering::Relaxed),
            self.dials_failed.load(Ordering::Relaxed),
            self.sessions_opened.load(Ordering::Relaxed),
            self.sessions_open.load(Ordering::Relaxed) as u64,
            self.streams_opened.load(Ordering::Relaxed),
            self.streams_open.load(Ordering::Relaxed) as u64,
            self.tcp_in.load(Ordering::Relaxed),
            self.tcp_out.load(Ordering::Relaxed),
            self.tcp_errors.load(Ordering::Relaxed),
            self.bad_crypto(),
        ]
    }

    /// Datagrams the server's listeners could not decrypt or verify: clients
    /// knocking with a wrong `--key` or `--crypt` (or noise).
    fn bad_crypto(&self) -> u64 {
        self.listeners
            .get()
            .map_or(0, |ls| ls.iter().map(|l| l.stats().bad_crypto).sum())
    }

    /// Fake-TCP segments the server's listeners refused (forged, stray) and
    /// dropped as merged (`--tcp`; both 0 over UDP).
    fn segments(&self) -> (u64, u64) {
        self.listeners.get().map_or((0, 0), |ls| {
            ls.iter().map(KcpListener::stats).fold((0, 0), |(r, m), s| {
                (r + s.segments_refused, m + s.segments_merged)
            })
        })
    }

    /// Lets the stats line report the server's listeners.
    pub(crate) fn watch_listeners(&self, listeners: Arc<Vec<KcpListener>>) {
        let _ = self.listeners.set(listeners);
    }

    /// Puts the UDP mode's counters in the stats line.
    pub(crate) fn set_udp(&self, udp: Arc<UdpStats>) {
        let _ = self.udp.set(udp);
    }

    /// The UDP mode's counters (a fresh set if none was given).
    pub(crate) fn udp(&self) -> &Arc<UdpStats> {
        self.udp.get_or_init(Arc::default)
    }

    /// Counts a session that is not under a mux (the UDP mode's) and lets
    /// the stats line report it.
    pub(crate) fn watch_session(&self, kcp: &KcpStream) {
        self.sessions_opened.fetch_add(1, Ordering::Relaxed);
        self.sessions_open.fetch_add(1, Ordering::Relaxed);
        self.lock_kcp().push(kcp.stats_handle());
    }

    /// The end of a session [`watch_session`](Self::watch_session) counted.
    pub(crate) fn unwatch_session(&self, kcp: &KcpStream) {
        self.sessions_open.fetch_sub(1, Ordering::Relaxed);
        let conv = kcp.conv();
        self.lock_kcp().retain(|h| h.conv() != conv);
    }

    fn lock_kcp(&self) -> std::sync::MutexGuard<'_, Vec<StatsHandle>> {
        self.kcp.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets the stats line report the server's slots.
    pub(crate) fn watch_gate(&self, gate: Arc<Gate>) {
        let _ = self.gate.set(gate);
    }

    /// Lets the stats line report a session's mux.
    pub(crate) fn watch_mux(&self, mux: &Arc<Mux>) {
        let mut m = self.muxes.lock().unwrap_or_else(PoisonError::into_inner);
        m.retain(|w| w.strong_count() > 0);
        m.push(Arc::downgrade(mux));
    }

    /// The limits' gauges now.
    pub(crate) fn limits(&self) -> LimitStats {
        let mut l = LimitStats::default();
        let muxes = self.muxes.lock().unwrap_or_else(PoisonError::into_inner);
        for m in muxes.iter().filter_map(Weak::upgrade) {
            l.mux_buffered += m.buffered();
            l.mux_send_buffered += m.send_buffered();
            l.mux_refused += m.stats().refused_streams;
        }
        drop(muxes);
        if let Some(g) = self.gate.get() {
            l.streams_in_use = g.streams_in_use();
            l.dials_in_flight = g.dials_in_flight();
            l.budget_charged = g.buffer_charged();
            l.budget = g.max_buffer();
            l.budget_waits = g.buffer_waits();
            let kcp = self.kcp.lock().unwrap_or_else(PoisonError::into_inner);
            let segments: usize = kcp
                .iter()
                .filter_map(StatsHandle::stats)
                .map(|s| s.wait_snd)
                .sum();
            l.budget_held = l.mux_send_buffered + segments * g.mss();
        }
        l
    }

    fn line(&self) -> String {
        let kcp = self.lock_kcp();
        let (mut dgin, mut dgout, mut bin, mut bout, mut rexmit, mut fec_rec) = (0, 0, 0, 0, 0, 0);
        let mut sfec = kcpio::StreamFecStats::default();
        let mut loss_max = 0.0f64;
        for s in kcp.iter().filter_map(StatsHandle::stats) {
            let f = &s.stream_fec;
            if f.negotiated {
                sfec.negotiated = true;
                sfec.data_out += f.data_out;
                sfec.parity_out += f.parity_out;
                sfec.recovered += f.recovered;
                sfec.lost_on_wire += f.lost_on_wire;
                sfec.lost_congested += f.lost_congested;
                loss_max = loss_max.max(f.loss_estimate);
            }
            dgin += s.datagrams_in;
            dgout += s.datagrams_out;
            bin += s.bytes_in;
            bout += s.bytes_out;
            rexmit += s.arq.retransmit_rto + s.arq.retransmit_fast + s.arq.retransmit_early;
            fec_rec += s.fec_in.recovered;
        }
        // Between kcpio ends: the adaptive stream FEC's shards, what it
        // rebuilt, the loss it counted (and left to congestion control)
        // and the highest loss estimate of a session.
        let adaptive = if sfec.negotiated {
            format!(
                ", adaptive fec data {} parity {} recovered {} lost {} congested {} loss {:.4}",
                sfec.data_out,
                sfec.parity_out,
                sfec.recovered,
                sfec.lost_on_wire,
                sfec.lost_congested,
                loss_max
            )
        } else {
            String::new()
        };
        let udp = match self.udp.get() {
            Some(u) => format!(
                ", {}, {}",
                u.line(),
                session_datagram_line(kcp.iter().filter_map(StatsHandle::stats))
            ),
            None => String::new(),
        };
        // `limits_line` reads the sessions' queues too.
        drop(kcp);
        format!(
            "stats: sessions {} open / {} total, streams {} open / {} total, \
             tcp in {} B out {} B ({} connections reset), kcp stream in {} B out {} B, \
             udp in {dgin} pkts {bin} B out {dgout} pkts {bout} B, retransmits {rexmit}, fec recovered {fec_rec}{adaptive}{udp}{}{}",
            self.sessions_open.load(Ordering::Relaxed),
            self.sessions_opened.load(Ordering::Relaxed),
            self.streams_open.load(Ordering::Relaxed),
            self.streams_opened.load(Ordering::Relaxed),
            self.tcp_in.load(Ordering::Relaxed),
            self.tcp_out.load(Ordering::Relaxed),
            self.tcp_errors.load(Ordering::Relaxed),
            self.kcp_in.load(Ordering::Relaxed),
            self.kcp_out.load(Ordering::Relaxed),
            self.limits_line(),
            if self.listeners.get().is_some() {
                let (refused, merged) = self.segments();
                format!(
                    ", tcp segments refused {refused} merged {merged}, \
                     undecryptable datagrams (wrong --key/--crypt) {}",
                    self.bad_crypto()
                )
            } else {
                String::new()
            },
        )
    }

    /// The server's part of the line: slots, refusals, buffered bytes.
    fn limits_line(&self) -> String {
        if self.gate.get().is_none() {
            return String::new();
        }
        let l = self.limits();
        format!(
            ", limits: streams {} forwarded, {} refused (slots), {} refused (dial back-off), \
             {} refused by smux; dials {} in flight, {} failed ({} timed out); \
             smux buffered {} B in, {} B out; \
             buffer budget {} B charged of {} B, {} B held (smux out and KCP send queues), \
             reached {} times; copy buffers hold {} B toward slow readers; \
             {} streams ended after their peer's FIN as it read nothing",
            l.streams_in_use,
            self.streams_refused.load(Ordering::Relaxed),
            self.streams_backed_off.load(Ordering::Relaxed),
            l.mux_refused,
            l.dials_in_flight,
            self.dials_failed.load(Ordering::Relaxed),
            self.dials_timed_out.load(Ordering::Relaxed),
            l.mux_buffered,
            l.mux_send_buffered,
            l.budget_charged,
            l.budget,
            l.budget_held,
            l.budget_waits,
            self.copy_held.load(Ordering::Relaxed),
            self.streams_peer_gone.load(Ordering::Relaxed),
        )
    }
}

/// Logs the stats on SIGUSR1, and every `period` when something changed
/// since the last line (an idle tunnel writes nothing); a zero `period`
/// turns the periodic line off (kcptun's `--snmpperiod 0`).
pub(crate) async fn report_stats(stats: Arc<Stats>, log: Log, period: Duration) {
    #[cfg(unix)]
    let mut usr1 =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok();
    let mut tick =
        (!period.is_zero()).then(|| tokio::time::interval_at(Instant::now() + period, period));
    let mut last = stats.activity();
    loop {
        let periodic = async {
            match tick.as_mut() {
                Some(t) => {
                    t.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(unix)]
        let signalled = {
            let sig = async {
                match usr1.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = periodic => false,
                _ = sig => true,
            }
        };
        #[cfg(not(unix))]
        let signalled = {
            periodic.await;
            false
        };
        let now = stats.activity();
        if signalled || now != last {
            last = now;
            log.line(stats.line());
        }
    }
}

/// The KCP session under a mux: counts bytes, registers the session's stats
/// handle for the log line, and remembers whether anything arrived.
pub(crate) struct Metered {
    /// Shared with the UDP flows that ride the session's datagrams
    /// (`--udplisten`, `--udptarget`).
    kcp: Arc<KcpStream>,
    stats: Arc<Stats>,
    pub(crate) heard: Arc<AtomicBool>,
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl Metered {
    pub(crate) fn new(kcp: Arc<KcpStream>, stats: Arc<Stats>) -> Self {
        stats.sessions_opened.fetch_add(1, Ordering::Relaxed);
        stats.sessions_open.fetch_add(1, Ordering::Relaxed);
        stats.lock_kcp().push(kcp.stats_handle());
        Self {
            kcp,
            stats,
            heard: Arc::new(AtomicBool::new(false)),
            on_drop: None,
        }
    }

    /// Runs `f` when the session is dropped (its mux ended).
    pub(crate) fn on_drop(&mut self, f: impl FnOnce() + Send + 'static) {
        self.on_drop = Some(Box::new(f));
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        if let Some(f) = self.on_drop.take() {
            f();
        }
        self.stats.sessions_open.fetch_sub(1, Ordering::Relaxed);
        let conv = self.kcp.conv();
        self.stats.lock_kcp().retain(|h| h.conv() != conv);
    }
}

impl AsyncRead for Metered {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let mut kcp: &KcpStream = &self.kcp;
        let r = Pin::new(&mut kcp).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.heard.store(true, Ordering::Relaxed);
            self.stats.kcp_in.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl AsyncWrite for Metered {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut kcp: &KcpStream = &self.kcp;
        let r = Pin::new(&mut kcp).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.stats.kcp_out.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut kcp: &KcpStream = &self.kcp;
        Pin::new(&mut kcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut kcp: &KcpStream = &self.kcp;
        Pin::new(&mut kcp).poll_shutdown(cx)
    }
}
