//! The UDP mode (`--udp`): UDP flows carried as datagrams of one KCP
//! session, each behind an 8-byte flow header.
//!
//! The client listens on a UDP port and gives each local source address its
//! own flow; the server opens one UDP socket per flow toward its target.
//! Every flow of a client crosses one session as kcpio datagrams
//! ([`KcpStream::send_datagram`](kcpio::KcpStream::send_datagram)); the
//! session's byte stream is not used (TCP forwarding is another tunnel
//! process beside this one: see the README).
//!
//! # Flow header, version 1 (8 bytes, big endian, before every payload)
//!
//! ```text
//! 0      1              4                              8
//! +------+--------------+------------------------------+---------
//! | 0x10 | flow id (24) | sequence (32)                | payload
//! +------+--------------+------------------------------+---------
//! ```
//!
//! - byte 0: version in the high nibble (1), kind in the low one: 0 data,
//!   1 ping, 2 pong (below). Anything else is dropped and counted
//!   (`bad header`), so a later version can be told apart.
//! - flow id: chosen by the client for a local source address, never reused
//!   by one client process (it wraps after 2^24 flows, skipping live ones);
//!   the server creates a flow the first time an id arrives on a session.
//! - sequence: per flow and direction, from 0, wrapping (a flow the server
//!   reopens under an id it expired numbers its replies on from where the
//!   old one stopped, as the client may still hold that flow). The receiver keeps
//!   a window of the last [`WINDOW`] sequence numbers: a duplicate (a
//!   replayed or twice-delivered datagram) or one older than the window is
//!   dropped and counted; gaps that never fill are the flow's loss after
//!   the session's recovery ("lost").
//!
//! # Ping and pong: noticing a server that stopped answering
//!
//! The client asks whether the server still answers with a ping (byte 0
//! `0x11`, flow id 0, the ping's number as the sequence, no payload); the
//! server answers each with a pong (`0x12`, the same number). Both cross
//! the session as datagrams (with FEC parity where negotiated). The client
//! pings three times at a session's start (to learn whether the server
//! answers: an older kcpio server counts a ping as `bad header` and never
//! answers, and is then pinged only once per 10 s of silence while the
//! flows send), and, with a server that answers, once a second while it
//! hears nothing back (neither a pong nor a flow's datagram) after
//! sending. A server that has not answered a ping yet (an older kcpio, or
//! one whose first pings met a dead path) is judged instead by the loss
//! reports its FEC datagram receiver sends within 50 ms of any datagram it
//! receives. After [`SILENT_TICKS`] seconds of such silence while the flows
//! send, the client dials a new session beside the old one and moves the
//! flows to it once it connects; anything heard from the old one first
//! cancels the dial. This is how the client finds a restarted
//! server, which knows nothing of the old session (kcp-go's wire has no
//! reset: the new process drops the old session's packets, or re-creates
//! it from a keepalive probe and numbers its datagrams afresh, which the
//! client's session then takes as replays), where no ICMP "port
//! unreachable" tells it sooner. An idle client sends no pings; the
//! session's keepalive probes keep it open. A `--udplisten` client pings
//! its pooled session too (always one that negotiated FEC datagrams: no
//! other carries its flows), and its replacement goes into the TCP pool
//! (see the module `client`).
//!
//! # Bounds
//!
//! - Client: at most `--udpflows` local source addresses hold a flow; a new
//!   source beyond that is dropped (`table full`) until a flow expires.
//! - Server: at most `--udpflows` flows per session, and at most
//!   `--maxstreams` flows over all sessions (each holds a descriptor); a new
//!   flow id beyond either is dropped (`table full`).
//! - A flow with no datagram either way for `--udpidle` seconds expires (its
//!   server socket is closed); a later datagram from the same source opens a
//!   new flow.
//! - Memory: a flow holds its addresses, counters and a 128-byte window; the
//!   server remembers where each of a session's last `--udpflows` expired
//!   flows stopped (about 50 bytes each), and adds a socket and a 64 KiB
//!   receive buffer per flow (cut into
//!   slots for batched reads, see below), and one 64 KiB buffer per session
//!   for the session's datagrams; the client reads its local socket
//!   into 8 buffers of 64 KiB and takes the session's datagrams into 8 more
//!   (1 MiB per client process). No buffer is allocated per datagram.
//!
//! # Cost per datagram
//!
//! The mode runs on one thread (see `Prepared::single_threaded`). Its own
//! sockets are [`kcpio::RelaySocket`]s, and no socket wakes the runtime
//! when a datagram it sent leaves (a send that finds the buffer full is
//! dropped, `send failed`). System calls are batched where datagrams meet:
//!
//! - the client reads up to [`RECV_BATCH`] local datagrams per call, and
//!   hands what the session delivered at one wake-up (up to [`RECV_BATCH`],
//!   across flows) to the applications in one `sendmmsg`;
//! - the server reads each flow's socket up to 8 datagrams per call, in
//!   slots of the longest datagram the session carries cut from the flow's
//!   64 KiB buffer (3 with FEC datagrams at the default mtu; a longer
//!   datagram is cut by the kernel and dropped as `too large`, as it would
//!   be whole);
//! - the server takes what a session delivered at one wake-up (up to 32
//!   datagrams, packed back to back into the session's 64 KiB buffer; one
//!   that does not fit waits for the next pass) and sends each flow's share
//!   to the target in one `sendmmsg`, in the flow's order.
//!
//! Datagrams paced one by one (a steady stream) still cost one wake-up of
//! each end per datagram: nothing is held back to make batches.

pub(crate) mod client;
pub(crate) mod server;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Bytes of the flow header.
pub const HEADER_LEN: usize = 8;
/// Byte 0 of a version 1 data datagram.
const V1_DATA: u8 = 0x10;
/// Byte 0 of a ping (version 1, kind 1).
const V1_PING: u8 = 0x11;
/// Byte 0 of a pong (version 1, kind 2).
const V1_PONG: u8 = 0x12;
/// Seconds of silence after sending (each with a ping unanswered) after
/// which the client dials a replacement session.
pub const SILENT_TICKS: u32 = 3;
/// The largest flow id (24 bits).
pub(crate) const MAX_FLOW_ID: u32 = 0x00ff_ffff;
/// Sequence numbers a receiver remembers, for duplicates and late arrivals.
pub const WINDOW: u32 = 1024;
/// WireGuard's bytes around an inner packet inside its UDP payload: the
/// 16-byte data message header and the 16-byte Poly1305 tag.
pub const WIREGUARD_OVERHEAD: usize = 32;
/// The largest UDP payload (and receive buffer) a flow handles.
pub(crate) const MAX_UDP: usize = 65_535;
/// Datagrams the client takes from its local socket per system call, and
/// from its session per wake-up (each with a buffer of [`HEADER_LEN`] +
/// [`MAX_UDP`] bytes).
pub(crate) const RECV_BATCH: usize = 8;

/// Writes a version 1 data header for `flow`, `seq` into `buf[..8]`.
/// Asks for `bytes` of receive and send buffer on one of the UDP mode's
/// own sockets ([`UdpSettings::sockbuf`](crate::UdpSettings::sockbuf)); the
/// kernel caps it, and a refusal leaves its default (the socket works
/// either way).
pub(crate) fn size_buffers(s: socket2::SockRef<'_>, bytes: usize) {
    let _ = s.set_recv_buffer_size(bytes);
    let _ = s.set_send_buffer_size(bytes);
}

/// Locks a table the UDP mode's tasks and sinks share (flows, sessions),
/// ignoring poisoning: every critical section leaves it consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn put_header(buf: &mut [u8], flow: u32, seq: u32) {
    let id = (flow & MAX_FLOW_ID).to_be_bytes();
    buf[0] = V1_DATA;
    buf[1..4].copy_from_slice(&id[1..4]);
    buf[4..8].copy_from_slice(&seq.to_be_bytes());
}

/// A ping (`pong` false) or a pong numbered `seq`: a header alone.
pub(crate) fn control(pong: bool, seq: u32) -> [u8; HEADER_LEN] {
    let mut b = [0; HEADER_LEN];
    put_header(&mut b, 0, seq);
    b[0] = if pong { V1_PONG } else { V1_PING };
    b
}

/// What a control datagram is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    /// A ping numbered so: answer it.
    Ping(u32),
    /// A pong answering that ping.
    Pong(u32),
}

/// Reads a ping or a pong; `None` for anything else (data among it). The
/// caller counts one it takes in `control_in` and out of `tunnel_in`.
pub(crate) fn parse_control(buf: &[u8]) -> Option<Control> {
    let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
    let seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    match h[0] {
        V1_PING => Some(Control::Ping(seq)),
        V1_PONG => Some(Control::Pong(seq)),
        _ => None,
    }
}

impl UdpStats {
    /// A ping or pong taken from the session: counted as such, not as one
    /// of the flows' datagrams (the caller counted every datagram it took
    /// in `tunnel_in` first).
    pub(crate) fn count_control_in(&self) {
        self.tunnel_in.fetch_sub(1, Ordering::Relaxed);
        self.control_in.fetch_add(1, Ordering::Relaxed);
    }
}

/// Reads a header: `(flow id, sequence)`, or `None` when `buf` is shorter
/// than a header or is not a version 1 data datagram.
pub(crate) fn parse_header(buf: &[u8]) -> Option<(u32, u32)> {
    let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
    if h[0] != V1_DATA {
        return None;
    }
    let flow = u32::from_be_bytes([0, h[1], h[2], h[3]]);
    let seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    Some((flow, seq))
}

/// Sends `msgs` on `sock` in as few system calls as it takes (`sendmmsg`),
/// never waiting, and tells `settle(i, sent)` what became of `msgs[i]`, in
/// order. A datagram socket's send does not wait for room: each datagram
/// is sent, or dropped when the send buffer is full (or the kernel refuses
/// it), and the rest of the batch goes on. Every round settles at least
/// one datagram.
pub(crate) fn send_each(
    sock: &kcpio::RelaySocket,
    msgs: &[(&[u8], std::net::SocketAddr)],
    mut settle: impl FnMut(usize, bool),
) {
    let mut at = 0;
    while at < msgs.len() {
        let rest = msgs.get(at..).unwrap_or_default();
        let (sent, failed) = match sock.try_send_to_many(rest) {
            Ok(k) if k > 0 => (k, false),
            _ => (0, true),
        };
        for i in at..at + sent {
            settle(i, true);
        }
        at += sent;
        if failed {
            settle(at, false);
            at += 1;
        }
    }
}

/// The MTU to give WireGuard's interface when its UDP goes through a tunnel
/// whose session carries datagrams of up to `max_datagram` bytes.
pub fn wireguard_mtu(max_datagram: usize) -> usize {
    max_datagram.saturating_sub(HEADER_LEN + WIREGUARD_OVERHEAD)
}

/// What a window says of a sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Not seen before: deliver it.
    New,
    /// Seen already (a duplicate or a replay).
    Duplicate,
    /// Older than the window: cannot tell, dropped.
    TooOld,
}

/// The receive side of one direction of a flow: which of the last
/// [`WINDOW`] sequence numbers arrived, and how many are missing.
#[derive(Clone, Debug, Default)]
pub(crate) struct Window {
    bits: [u64; (WINDOW / 64) as usize],
    top: u32,
    started: bool,
    /// Sequence numbers from the first to `top`.
    span: u64,
    /// Distinct ones received.
    unique: u64,
}

impl Window {
    fn bit(&mut self, seq: u32) -> (&mut u64, u64) {
        let i = (seq % WINDOW) as usize;
        (&mut self.bits[i / 64], 1 << (i % 64))
    }

    /// Records `seq`.
    pub(crate) fn accept(&mut self, seq: u32) -> Seen {
        if !self.started {
            self.started = true;
            self.top = seq;
            self.span = 1;
            self.unique = 1;
            let (w, m) = self.bit(seq);
            *w |= m;
            return Seen::New;
        }
        let ahead = seq.wrapping_sub(self.top);
        if ahead != 0 && ahead < u32::MAX / 2 {
            if ahead >= WINDOW {
                self.bits = [0; (WINDOW / 64) as usize];
            } else {
                for s in 1..=ahead {
                    let (w, m) = self.bit(self.top.wrapping_add(s));
                    *w &= !m;
                }
            }
            self.top = seq;
            self.span += u64::from(ahead);
        } else {
            let back = self.top.wrapping_sub(seq);
            if back >= WINDOW {
                return Seen::TooOld;
            }
            let (w, m) = self.bit(seq);
            if *w & m != 0 {
                return Seen::Duplicate;
            }
        }
        let (w, m) = self.bit(seq);
        *w |= m;
        self.unique += 1;
        Seen::New
    }

    /// Sequence numbers below the newest that never arrived.
    pub(crate) fn missing(&self) -> u64 {
        self.span.saturating_sub(self.unique)
    }
}

/// Why a datagram was dropped. Each has a counter in [`UdpStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum DropReason {
    /// A new flow beyond `--udpflows` (or the server's `--maxstreams`).
    TableFull,
    /// The session's datagram send queue was full (the path is slower than
    /// the offered load).
    QueueFull,
    /// Longer than the session carries (see the `udp:` start line).
    TooLarge,
    /// The client had no session (connecting or reconnecting).
    NoSession,
    /// Not a version 1 flow header.
    BadHeader,
    /// Client: a flow id it does not hold (expired, or forged by the peer).
    UnknownFlow,
    /// A sequence number seen already: a duplicate or a replay.
    Duplicate,
    /// A sequence number older than the window.
    TooOld,
    /// The local application or the target's socket refused it.
    SendFailed,
    /// Server: its flow could not be opened (the target's name did not
    /// resolve, or the flow's socket could not be made: the log says
    /// which, a few times and then once a minute).
    FlowFailed,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 10] = [
        DropReason::TableFull,
        DropReason::QueueFull,
        DropReason::TooLarge,
        DropReason::NoSession,
        DropReason::BadHeader,
        DropReason::UnknownFlow,
        DropReason::Duplicate,
        DropReason::TooOld,
        DropReason::SendFailed,
        DropReason::FlowFailed,
    ];

    /// The reason's name in the stats line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            DropReason::TableFull => "table full",
            DropReason::QueueFull => "send queue full",
            DropReason::TooLarge => "too large",
            DropReason::NoSession => "no session",
            DropReason::BadHeader => "bad header",
            DropReason::UnknownFlow => "unknown flow",
            DropReason::Duplicate => "duplicate",
            DropReason::TooOld => "too old",
            DropReason::SendFailed => "send failed",
            DropReason::FlowFailed => "flow failed",
        }
    }
}

/// One tunnel end's UDP counters (all flows, all sessions). "Up" is toward
/// the server's target, "down" toward the client's applications; `_in` is
/// what entered this end, `_out` what it passed on.
#[derive(Debug, Default)]
pub struct UdpStats {
    /// Sessions that carried flows (client: connects, the first and each
    /// replacement; server: sessions accepted).
    pub sessions_opened: AtomicU64,
    /// Flows opened since start, open now, and expired for idleness.
    pub flows_opened: AtomicU64,
    /// Flows open now.
    pub flows_open: AtomicUsize,
    /// Flows closed after `--udpidle` seconds without a datagram.
    pub flows_expired: AtomicU64,
    /// Datagrams read from the local side (client: applications; server:
    /// the target's sockets).
    pub local_in: AtomicU64,
    /// Datagrams handed to the session.
    pub tunnel_out: AtomicU64,
    /// Datagrams taken from the session.
    pub tunnel_in: AtomicU64,
    /// Datagrams written to the local side.
    pub local_out: AtomicU64,
    /// Pings and pongs sent (client: pings; server: pongs).
    pub control_out: AtomicU64,
    /// Pings and pongs taken from the session (client: pongs; server:
    /// pings); not in `tunnel_in`, which counts the flows' datagrams.
    pub control_in: AtomicU64,
    /// Client: sessions dialled beside one that stopped answering pings
    /// while flows sent, and of those, the ones the flows moved to.
    pub replacements_dialled: AtomicU64,
    /// See [`replacements_dialled`](Self::replacements_dialled).
    pub replacements_taken: AtomicU64,
    /// Sequence numbers missing at flows that ended, or (client) whose
    /// session was replaced: their "lost".
    pub lost: AtomicU64,
    dropped: [AtomicU64; DropReason::ALL.len()],
    /// The live sessions carrying flows (one on a client).
    sessions: Mutex<Vec<kcpio::StatsHandle>>,
}

impl UdpStats {
    /// The library's counters of the live sessions carrying flows, their
    /// FEC datagrams' among them (`SessionStats::datagram_fec`).
    #[must_use]
    pub fn sessions(&self) -> Vec<kcpio::SessionStats> {
        self.lock_sessions()
            .iter()
            .filter_map(kcpio::StatsHandle::stats)
            .collect()
    }

    /// A session now carries flows.
    pub(crate) fn watch_session(&self, kcp: &kcpio::KcpStream) {
        self.lock_sessions().push(kcp.stats_handle());
    }

    /// A session [`watch_session`](Self::watch_session) named ended.
    pub(crate) fn unwatch_session(&self, kcp: &kcpio::KcpStream) {
        let conv = kcp.conv();
        self.lock_sessions().retain(|h| h.conv() != conv);
    }

    fn lock_sessions(&self) -> MutexGuard<'_, Vec<kcpio::StatsHandle>> {
        lock(&self.sessions)
    }

    /// Counts one datagram dropped for `why`.
    pub(crate) fn count_drop(&self, why: DropReason) {
        self.dropped[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Datagrams dropped for `why` so far.
    #[must_use]
    pub fn dropped(&self, why: DropReason) -> u64 {
        self.dropped[why as usize].load(Ordering::Relaxed)
    }

    /// Datagrams dropped for any reason so far.
    #[must_use]
    pub fn dropped_total(&self) -> u64 {
        DropReason::ALL.iter().map(|&d| self.dropped(d)).sum()
    }

    /// Changes an operator would see, for the "log only when something
    /// changed" rule.
    pub(crate) fn activity(&self) -> [u64; 5] {
        [
            self.flows_opened.load(Ordering::Relaxed),
            // Flows expire after their datagrams stopped: the line that
            // says they are gone would not be written otherwise.
            self.flows_expired.load(Ordering::Relaxed),
            self.local_in.load(Ordering::Relaxed),
            self.tunnel_in.load(Ordering::Relaxed),
            self.dropped_total(),
        ]
    }

    /// The `udp:` part of the stats line.
    pub(crate) fn line(&self) -> String {
        let mut s = format!(
            "udp sessions {}, flows {} open / {} total / {} expired, datagrams local in {} tunnel out {}, \
             tunnel in {} local out {}, pings/pongs out {} in {}, silent sessions replaced {} of {} \
             dialled, lost (ended flows) {}, dropped {}",
            self.sessions_opened.load(Ordering::Relaxed),
            self.flows_open.load(Ordering::Relaxed),
            self.flows_opened.load(Ordering::Relaxed),
            self.flows_expired.load(Ordering::Relaxed),
            self.local_in.load(Ordering::Relaxed),
            self.tunnel_out.load(Ordering::Relaxed),
            self.tunnel_in.load(Ordering::Relaxed),
            self.local_out.load(Ordering::Relaxed),
            self.control_out.load(Ordering::Relaxed),
            self.control_in.load(Ordering::Relaxed),
            self.replacements_taken.load(Ordering::Relaxed),
            self.replacements_dialled.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed),
            self.dropped_total(),
        );
        let mut sep = " (";
        for d in DropReason::ALL {
            let n = self.dropped(d);
            if n > 0 {
                let _ = write!(s, "{sep}{} {n}", d.name());
                sep = ", ";
            }
        }
        if sep == ", " {
            s.push(')');
        }
        s
    }
}

/// One flow's counters, for its closing line. Atomics: on the server the
/// flow's task and its session's task both count.
#[derive(Debug, Default)]
pub(crate) struct FlowCounters {
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
    dropped: [AtomicU64; DropReason::ALL.len()],
}

impl FlowCounters {
    /// Counts a datagram of this flow dropped for `why`, here and in the
    /// end's totals.
    pub(crate) fn drop_one(&self, udp: &UdpStats, why: DropReason) {
        self.dropped[why as usize].fetch_add(1, Ordering::Relaxed);
        udp.count_drop(why);
    }

    /// `N up, M down, D dropped (reasons), L lost` for a flow's closing line.
    pub(crate) fn summary(&self, lost: u64) -> String {
        let mut s = format!(
            "{} up, {} down, ",
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        );
        let total: u64 = self.dropped.iter().map(|d| d.load(Ordering::Relaxed)).sum();
        let _ = write!(s, "{total} dropped");
        let mut sep = " (";
        for d in DropReason::ALL {
            let n = self.dropped[d as usize].load(Ordering::Relaxed);
            if n > 0 {
                let _ = write!(s, "{sep}{} {n}", d.name());
                sep = ", ";
            }
        }
        if sep == ", " {
            s.push(')');
        }
        let _ = write!(s, ", {lost} lost");
        s
    }
}

/// The datagram part of the stats line, summed over the live sessions
/// from the library's counters: datagrams the sessions sent and received,
/// and with FEC datagrams (`SessionStats::datagram_fec`) the data shards
/// rebuilt from parity, those lost even after it, the parity per data
/// shard in use (the largest over the sessions) and the delay rebuilding
/// added (mean and largest over the rebuilt ones).
pub(crate) fn session_datagram_line(sessions: impl Iterator<Item = kcpio::SessionStats>) -> String {
    let (mut sent, mut received, mut dropped) = (0, 0, 0);
    let (mut fec_sessions, mut recovered, mut lost, mut overload) = (0u64, 0, 0, 0);
    let (mut stale, mut queue_full, mut parity_cut, mut replays) = (0, 0, 0, 0);
    let (mut redundancy, mut delay_sum, mut delay_max) = (0f64, Duration::ZERO, Duration::ZERO);
    for s in sessions {
        let f = &s.datagram_fec;
        if f.negotiated {
            fec_sessions += 1;
            sent += f.datagrams_out;
            received += f.datagrams_in;
            recovered += f.recovered;
            lost += f.lost_after_fec;
            overload += f.dropped_overload;
            stale += f.dropped_stale;
            queue_full += f.dropped_queue_full;
            parity_cut += f.redundancy_limited;
            replays += f.replays;
            redundancy = redundancy.max(f.redundancy);
            delay_sum += f.added_delay_sum;
            delay_max = delay_max.max(f.added_delay_max);
        }
        sent += s.oob_sent;
        received += s.oob_received;
        dropped += s.oob_dropped;
    }
    let mut line = format!(
        "session datagrams sent {sent} received {received} dropped by the session {dropped}"
    );
    if fec_sessions > 0 {
        let mean = u32::try_from(recovered)
            .ok()
            .filter(|&n| n > 0)
            .map_or(Duration::ZERO, |n| delay_sum / n);
        let _ = write!(
            line,
            ", fec: recovered {recovered}, lost after fec {lost}, refused as replays {replays}, \
             dropped for the rate {overload} (stale {stale}, queue full {queue_full}), groups \
             with parity cut {parity_cut}, \
             redundancy {redundancy:.2}, added delay mean {:.1} ms max {:.1} ms",
            mean.as_secs_f64() * 1e3,
            delay_max.as_secs_f64() * 1e3,
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flows that expire after their traffic stopped are news for the
    /// stats line ("written only when something changed"): the line that
    /// says they are gone is written.
    #[test]
    fn expired_flows_are_activity_for_the_stats_line() {
        let u = UdpStats::default();
        let before = u.activity();
        u.flows_expired.fetch_add(1, Ordering::Relaxed);
        assert_ne!(u.activity(), before);
    }

    /// The session line names the datagrams the FEC receiver refused as
    /// replays: a restarted server's datagrams under the old conversation
    /// end there (`a_restarted_server_is_found_and_the_flow_carries_on`).
    #[test]
    fn the_session_line_counts_refused_replays() {
        let mut s = kcpio::SessionStats::default();
        s.datagram_fec.negotiated = true;
        s.datagram_fec.replays = 2_423;
        let line = session_datagram_line(std::iter::once(s));
        assert!(line.contains("refused as replays 2423,"), "{line}");
    }

    /// The UDP mode's sockets get the buffer `--sockbuf` asks for, as far
    /// as the kernel allows (it reports twice what it grants).
    #[tokio::test]
    async fn the_udp_modes_sockets_get_the_asked_buffer() {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let asked = 1 << 20;
        size_buffers(socket2::SockRef::from(&sock), asked);
        let cap = |name: &str| -> usize {
            std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0)
        };
        let s = socket2::SockRef::from(&sock);
        let (rcv, snd) = (s.recv_buffer_size().unwrap(), s.send_buffer_size().unwrap());
        assert!(
            rcv >= 2 * asked.min(cap("rmem_max")),
            "receive buffer {rcv}"
        );
        assert!(snd >= 2 * asked.min(cap("wmem_max")), "send buffer {snd}");
    }

    #[test]
    fn header_round_trip_and_rejects() {
        let mut b = [0u8; 12];
        put_header(&mut b, 0x00ab_cdef, 0xdead_beef);
        assert_eq!(b[..8], [0x10, 0xab, 0xcd, 0xef, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(parse_header(&b), Some((0x00ab_cdef, 0xdead_beef)));
        assert_eq!(parse_header(&b[..7]), None, "short");
        b[0] = 0x20;
        assert_eq!(parse_header(&b), None, "version 2");
        b[0] = 0x13;
        assert_eq!(parse_header(&b), None, "unknown kind");
        assert_eq!(parse_control(&b), None, "unknown kind");
        // Pings and pongs are not data, and data is neither.
        assert_eq!(parse_control(&control(false, 7)), Some(Control::Ping(7)));
        assert_eq!(parse_control(&control(true, 7)), Some(Control::Pong(7)));
        assert_eq!(parse_header(&control(false, 7)), None);
        put_header(&mut b, 0, 7);
        assert_eq!(parse_control(&b), None, "data");
        assert_eq!(parse_control(&control(true, 7)[..7]), None, "short");
    }

    #[test]
    fn window_counts_duplicates_old_and_missing() {
        let mut w = Window::default();
        assert_eq!(w.accept(u32::MAX - 1), Seen::New);
        assert_eq!(w.accept(u32::MAX - 1), Seen::Duplicate);
        // Wraps, skips 0 and 1.
        assert_eq!(w.accept(2), Seen::New);
        assert_eq!(w.missing(), 3);
        assert_eq!(w.accept(0), Seen::New, "late, inside the window");
        assert_eq!(w.accept(0), Seen::Duplicate);
        assert_eq!(w.missing(), 2);
        assert_eq!(w.accept(2 + WINDOW + 5), Seen::New);
        assert_eq!(w.accept(2), Seen::TooOld);
        assert_eq!(w.accept(2 + WINDOW + 5 - (WINDOW - 1)), Seen::New);
        assert_eq!(w.accept(2 + WINDOW + 5 - WINDOW), Seen::TooOld);
        // In order from here: nothing more missing.
        let before = w.missing();
        for s in 0..5000u32 {
            assert_eq!(w.accept(2 + WINDOW + 6 + s), Seen::New);
        }
        assert_eq!(w.missing(), before);
    }

    #[test]
    fn a_flows_drops_are_counted_by_reason_in_its_line_and_the_totals() {
        let (flow, udp) = (FlowCounters::default(), UdpStats::default());
        flow.up.fetch_add(5, Ordering::Relaxed);
        flow.drop_one(&udp, DropReason::Duplicate);
        flow.drop_one(&udp, DropReason::Duplicate);
        flow.drop_one(&udp, DropReason::QueueFull);
        assert_eq!(
            flow.summary(3),
            "5 up, 0 down, 3 dropped (send queue full 1, duplicate 2), 3 lost"
        );
        assert_eq!(udp.dropped(DropReason::Duplicate), 2);
        assert_eq!(udp.dropped_total(), 3);
        assert!(
            udp.line()
                .ends_with("dropped 3 (send queue full 1, duplicate 2)")
        );
    }

    #[test]
    fn wireguard_mtu_leaves_room_for_both_headers() {
        assert_eq!(wireguard_mtu(1368), 1368 - 8 - 32);
        assert_eq!(wireguard_mtu(10), 0);
    }
}
