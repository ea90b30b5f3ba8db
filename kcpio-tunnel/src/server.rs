//! The server: KCP sessions whose streams each dial the target.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kcpio::KcpListener;
use kcpio::mux::Mux;

use crate::config::Settings;
use crate::detect::detect;
use crate::forward::forward;
use crate::limits::{Charge, Gate, Refused};
use crate::log::{Log, log_close};
use crate::stats::{Metered, Stats};

/// How long a new server session may stay silent before it is dropped.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(60);
/// A KCP segment's header: what the mtu holds besides the payload.
pub(crate) const KCP_HEADER: usize = 24;

/// Serves the sessions of every listener (one per port of `-l`'s range)
/// until one fails to accept.
pub(crate) async fn run_server(
    listeners: Arc<Vec<KcpListener>>,
    settings: Settings,
    stats: Arc<Stats>,
    log: Log,
) -> io::Result<()> {
    let mss = settings.kcp.kcp_mtu().saturating_sub(KCP_HEADER);
    let gate = Arc::new(Gate::new(settings.limits, mss));
    stats.watch_gate(Arc::clone(&gate));
    tokio::spawn(Arc::clone(&gate).trim_when_drained(log.clone()));
    let udp = settings.udp_beside.clone().map(|target| {
        crate::udp::server::beside(settings.clone(), target, Arc::clone(&stats), log.clone())
    });
    let settings = Arc::new(settings);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..listeners.len() {
        set.spawn(accept_loop(
            Arc::clone(&listeners),
            i,
            Arc::clone(&settings),
            Arc::clone(&stats),
            (Arc::clone(&gate), udp.clone()),
            log.clone(),
        ));
    }
    match set.join_next().await {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(io::Error::other(e)),
        None => Ok(()),
    }
}

/// Accepts the sessions of listener `i`, serving each in a task; with
/// `udp` (`--udptarget`), the datagrams of a session that negotiated FEC
/// datagrams carry UDP flows beside its streams.
async fn accept_loop(
    listeners: Arc<Vec<KcpListener>>,
    i: usize,
    settings: Arc<Settings>,
    stats: Arc<Stats>,
    (gate, udp): (Arc<Gate>, Option<Arc<crate::udp::server::Shared>>),
    log: Log,
) -> io::Result<()> {
    loop {
        let (session, from) = listeners[i].accept().await?;
        let settings = Arc::clone(&settings);
        let stats = Arc::clone(&stats);
        let log = log.clone();
        let gate = Arc::clone(&gate);
        let session = Arc::new(session);
        // Negotiated by the time accept returns; never with kcptun, nor
        // with a kcpio client that carries no UDP.
        let flows = match &udp {
            Some(shared) if session.stats().datagram_fec.negotiated => {
                tokio::spawn(crate::udp::server::serve_session(
                    Arc::clone(&session),
                    from,
                    Arc::clone(shared),
                ));
                true
            }
            _ => false,
        };
        tokio::spawn(async move {
            let kcp_stats = session.stats_handle();
            let metered = Metered::new(session, Arc::clone(&stats));
            let detected = tokio::time::timeout(FIRST_BYTES_TIMEOUT, detect(metered)).await;
            let (io, d) = match detected {
                Ok(Ok(x)) => x,
                Ok(Err(e)) => return log.line(format!("{from}: {e}")),
                // A `--udp` client's session carries flows only: it lives
                // on for them.
                Err(_) if flows => {
                    return log.line(format!(
                        "{from}: no stream bytes in {} s: the session carries UDP flows only",
                        FIRST_BYTES_TIMEOUT.as_secs()
                    ));
                }
                Err(_) => return log.line(format!("{from}: nothing received, session dropped")),
            };
            if d.compressed != settings.compress || d.version != settings.version {
                log.line(format!(
                    "{from}: client uses smux v{} with compression {}: serving it that way",
                    d.version.as_u8(),
                    if d.compressed { "on" } else { "off" }
                ));
            }
            let mux_config = if d.version == settings.version {
                &settings.mux
            } else {
                &settings.mux_other
            };
            let mux = Arc::new(Mux::server(io, mux_config));
            stats.watch_mux(&mux);
            let share = gate.client(from.ip());
            // What this session holds toward its client: its smux send
            // buffer and its KCP send queue (whole segments).
            let held = {
                let mux = Arc::downgrade(&mux);
                let mss = gate.mss();
                move || {
                    mux.upgrade().map_or(0, |m| m.send_buffered())
                        + kcp_stats.stats().map_or(0, |s| s.wait_snd * mss)
                }
            };
            let account = Charge::start(Arc::clone(&gate), Arc::clone(&share), log.clone(), held);
            loop {
                let stream = match mux.accept_stream().await {
                    Ok(s) => s,
                    Err(e) => return log.line(format!("{from}: session ended: {e}")),
                };
                // Refused streams are dropped here: a FIN to the client,
                // and the session goes on.
                let slot = match gate.admit(&share) {
                    Ok(slot) => slot,
                    Err(Refused::Streams) => {
                        stats.streams_refused.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(Refused::Backoff) => {
                        stats.streams_backed_off.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                let settings = Arc::clone(&settings);
                let stats = Arc::clone(&stats);
                let log = log.clone();
                let gate = Arc::clone(&gate);
                let share = Arc::clone(&share);
                let charge = account.charge();
                tokio::spawn(async move {
                    let _slot = slot;
                    let sid = stream.id();
                    let target = match gate.dial(&share, &settings.peer, &stats).await {
                        Ok(t) => t,
                        Err(e) => {
                            // Dropping the stream sends its FIN, as kcptun does.
                            return log.line(format!("dial {}: {e}", settings.peer));
                        }
                    };
                    stats.streams_opened.fetch_add(1, Ordering::Relaxed);
                    stats.streams_open.fetch_add(1, Ordering::Relaxed);
                    log.stream(format!(
                        "stream opened in: {from}({sid}) out: {}",
                        settings.peer
                    ));
                    let r =
                        forward(target, stream, settings.closewait, &stats, Some(&charge)).await;
                    stats.streams_open.fetch_sub(1, Ordering::Relaxed);
                    log_close(
                        &log,
                        format!("{from}({sid})"),
                        settings.peer.clone(),
                        sid,
                        r,
                    );
                });
            }
        });
    }
}
