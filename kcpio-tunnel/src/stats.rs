//! The process's counters, the periodic and SIGUSR1 stats line, and the
//! metered KCP session that feeds them.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use kcpio::{KcpStream, StatsHandle};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::log::Log;

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
    /// Bytes through the KCP byte streams (after compression).
    pub(crate) kcp_in: AtomicU64,
    pub(crate) kcp_out: AtomicU64,
    /// The live KCP sessions' stats, read when a line is printed.
    kcp: Mutex<Vec<StatsHandle>>,
}

impl Stats {
    fn line(&self) -> String {
        let kcp = self
            .kcp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut dgin, mut dgout, mut bin, mut bout, mut rexmit, mut fec_rec) = (0, 0, 0, 0, 0, 0);
        for s in kcp.iter().filter_map(StatsHandle::stats) {
            dgin += s.datagrams_in;
            dgout += s.datagrams_out;
            bin += s.bytes_in;
            bout += s.bytes_out;
            rexmit += s.arq.retransmit_rto + s.arq.retransmit_fast + s.arq.retransmit_early;
            fec_rec += s.fec_in.recovered;
        }
        format!(
            "stats: sessions {} open / {} total, streams {} open / {} total, \
             tcp in {} B out {} B, kcp stream in {} B out {} B, \
             udp in {dgin} pkts {bin} B out {dgout} pkts {bout} B, retransmits {rexmit}, fec recovered {fec_rec}",
            self.sessions_open.load(Ordering::Relaxed),
            self.sessions_opened.load(Ordering::Relaxed),
            self.streams_open.load(Ordering::Relaxed),
            self.streams_opened.load(Ordering::Relaxed),
            self.tcp_in.load(Ordering::Relaxed),
            self.tcp_out.load(Ordering::Relaxed),
            self.kcp_in.load(Ordering::Relaxed),
            self.kcp_out.load(Ordering::Relaxed),
        )
    }
}

/// Logs the stats every `period` and on SIGUSR1, forever.
pub(crate) async fn report_stats(stats: Arc<Stats>, log: Log, period: Duration) {
    #[cfg(unix)]
    let mut usr1 =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok();
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    loop {
        #[cfg(unix)]
        {
            let sig = async {
                match usr1.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tick.tick() => {}
                _ = sig => {}
            }
        }
        #[cfg(not(unix))]
        tick.tick().await;
        log.line(stats.line());
    }
}

/// The KCP session under a mux: counts bytes, registers the session's stats
/// handle for the log line, and remembers whether anything arrived.
pub(crate) struct Metered {
    kcp: KcpStream,
    stats: Arc<Stats>,
    pub(crate) heard: Arc<AtomicBool>,
}

impl Metered {
    pub(crate) fn new(kcp: KcpStream, stats: Arc<Stats>) -> Self {
        stats.sessions_opened.fetch_add(1, Ordering::Relaxed);
        stats.sessions_open.fetch_add(1, Ordering::Relaxed);
        stats
            .kcp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(kcp.stats_handle());
        Self {
            kcp,
            stats,
            heard: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.stats.sessions_open.fetch_sub(1, Ordering::Relaxed);
        let conv = self.kcp.conv();
        self.stats
            .kcp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|h| h.conv() != conv);
    }
}

impl AsyncRead for Metered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.kcp).poll_read(cx, buf);
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
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.kcp).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.stats.kcp_out.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.kcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.kcp).poll_shutdown(cx)
    }
}
