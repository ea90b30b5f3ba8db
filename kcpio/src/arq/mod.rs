//! The KCP ARQ state machine, sans-IO, as kcp-go v5.6.72 runs it.
//!
//! [`Kcp`] is one conversation: bytes and `now` go in, KCP packets and a
//! deadline come out. It reads no clock, owns no socket and spawns nothing
//! (clippy's `disallowed_methods`/`disallowed_types` are denied here).
//! The wire format and the behaviour follow kcp-go v5.6.72; where kcp-go
//! and skywind3000's C KCP differ, kcp-go's behaviour is implemented and the
//! difference is noted where it lives.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod buffers;
mod cc;
pub mod config;
mod error;
mod rtt;
pub mod segment;
mod stats;
pub mod time;

#[cfg(test)]
mod tests;

pub use cc::{BbrStats, Congestion};
pub use config::{ArqConfig, ArqConfigError, Timing};
pub use error::{InputError, RecvError, SendError};
pub use stats::ArqStats;
pub use time::Timestamp;

use buffers::{OutItem, OutKind, OutQueue, RecvRing, SendMeta, SendRing};
use cc::Controller;
use rtt::Rtt;
use segment::{Command, HEADER_LEN, Header, ParseError, Segments};

/// Where a KCP packet handed to [`Kcp::handle_datagram`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// Received from the network as is.
    Regular,
    /// Rebuilt by the FEC decoder. As in kcp-go, such packets neither update
    /// the peer's window (it may be stale) nor give an RTT sample, and their
    /// duplicates are not counted as repeats.
    Recovered,
}

/// `IKCP_PROBE_INIT`: first window-probe wait in kcp-go (C: 7000 ms).
const PROBE_INIT: u32 = 500;
/// `IKCP_PROBE_LIMIT`.
const PROBE_LIMIT: u32 = 120_000;
/// Probe flag: send WASK at the next flush.
const ASK_SEND: u8 = 1;
/// `frg` of a window probe (WASK) whose `ts` is the sender's clock, as a
/// PUSH's is (a probe from a flush carries an echoed `ts`): a kcpio
/// client's quiet probe. A listener takes one stamped later than every one
/// it received as fresh, so it may make a migration candidate. kcp-go reads
/// `frg` of PUSH segments only and answers it as any WASK.
pub(crate) const CLOCKED_PROBE: u8 = 0xD2;
/// Probe flag: send WINS at the next flush.
const ASK_TELL: u8 = 2;
/// kcp-go's "fast retransmit disabled until the next RTO" marker.
const FASTACK_OFF: u32 = u32::MAX;

/// Bound on ACK/WASK/WINS/End items waiting for `poll_transmit`: generous for
/// a caller that drains after every call (one flush queues at most a packet's
/// worth of ACKs plus two probes), tight enough to bound memory if it does not.
pub(crate) fn control_cap(mtu: usize, rcv_wnd: u32) -> usize {
    4 * (mtu / HEADER_LEN) + 2 * rcv_wnd as usize + 64
}

/// The two flush kinds of kcp-go (`IKCP_FLUSH_ACKONLY`, `IKCP_FLUSH_FULL`),
/// and kcpio's `Control` ([`Kcp::poll_control`]): the ACKs and window
/// probes alone, no segment admitted or (re)transmitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Flush {
    Control,
    AckOnly,
    Full,
}

/// One phase-5 walk over the in-flight segments (kcp-go `flush`'s loop).
struct Scan<'a> {
    current: u32,
    wnd: u16,
    una: u32,
    none_admitted: bool,
    resent: u32,
    dead_link: u32,
    rtt: &'a Rtt,
    out: &'a mut OutQueue,
    /// The congestion controller: sees every transmission.
    cc: &'a mut Controller,
    /// Lowest first RTO ([`Controller::rto_floor`]; 0 but with BBR).
    rto_floor: u32,
    lost: u64,
    fast: u64,
    early: u64,
    probes: u64,
    /// kcpio-only tail-loss probe timeout, when on and srtt is known.
    pto: Option<u32>,
    /// sn of the newest in-flight segment.
    last_sn: u32,
    dead: bool,
    /// Smallest positive `resendts - current` (kcp-go's next-update candidate).
    min_pos: i32,
    /// Smallest `resendts - current` over unacknowledged segments.
    min_any: i32,
    /// A segment kept a pending skip count without being resent.
    still_dirty: bool,
    /// A retransmission was due but the controller's pacing held it back.
    held: bool,
}

impl Scan<'_> {
    #[inline]
    fn run(&mut self, metas: &mut [SendMeta]) {
        for m in metas {
            if m.acked {
                continue;
            }
            let wait = m.resendts.wrapping_sub(self.current) as i32;
            // The common case in a large window: sent before, no skip count,
            // not due. Nothing to do but note its deadline.
            if m.xmit != 0 && (m.fastack == 0 || m.fastack == FASTACK_OFF) && wait > 0 {
                self.min_pos = self.min_pos.min(wait);
                self.min_any = self.min_any.min(wait);
                continue;
            }
            self.visit(m);
        }
    }

    /// kcp-go's rules, in its order: first send, fast, early, RTO.
    fn visit(&mut self, m: &mut SendMeta) {
        let current = self.current;
        let evidence_before = self.fast + self.early;
        let rx_rto = self.rtt.initial().max(self.rto_floor);
        let send = if m.xmit != 0 && !self.cc.may_retransmit() {
            // Pacing holds retransmissions back (BBR only): the segment
            // keeps its skip count and deadline, and goes when tokens allow.
            self.held |= (m.fastack > 0 && m.fastack != FASTACK_OFF)
                || (current.wrapping_sub(m.resendts) as i32) >= 0;
            false
        } else if m.xmit == 0 {
            m.rto = rx_rto;
            m.resendts = current.wrapping_add(m.rto);
            // kcpio-only tail-loss probe: nothing behind this segment can
            // make it skipped, so probe before the RTO.
            m.probe = false;
            if let Some(pto) = self.pto
                && m.sn == self.last_sn
                && pto < rx_rto
            {
                m.resendts = current.wrapping_add(pto);
                m.probe = true;
            }
            true
        } else if m.fastack >= self.resent && m.fastack != FASTACK_OFF {
            // Fast retransmit; kcp-go disables it until this segment's next
            // RTO (C resets fastack to 0 instead and only allows it while
            // xmit <= fastlimit, 5). kcpio-only, with BBR: armed
            // again at once, and `parse_fastack` counts only ACKs of
            // segments sent a reorder window after this resend, so a lost
            // resend is found a round trip later, not after a timeout
            // (on a path losing 9% that is one resend in eleven, and its
            // timeout holds up delivery of everything after it).
            m.fastack = if self.cc.rearms_fast_resend() {
                0
            } else {
                FASTACK_OFF
            };
            m.rto = rx_rto;
            m.resendts = current.wrapping_add(m.rto);
            m.probe = false;
            self.fast += 1;
            true
        } else if m.fastack > 0 && m.fastack != FASTACK_OFF && self.none_admitted {
            // kcp-go's early retransmit (absent from C): one skipping ACK
            // is enough when this flush admitted no new data.
            m.fastack = FASTACK_OFF;
            m.rto = rx_rto;
            m.resendts = current.wrapping_add(m.rto);
            m.probe = false;
            self.early += 1;
            true
        } else if m.probe && (current.wrapping_sub(m.resendts) as i32) >= 0 {
            // The probe fired: resend once, keep the RTO as it was (the
            // segment's RTO deadline counts from this transmission).
            m.probe = false;
            m.fastack = 0;
            m.resendts = current.wrapping_add(m.rto);
            self.probes += 1;
            true
        } else if (current.wrapping_sub(m.resendts) as i32) >= 0 {
            m.rto = self.rtt.backoff(m.rto);
            m.fastack = 0;
            m.resendts = current.wrapping_add(m.rto);
            self.lost += 1;
            true
        } else {
            false
        };
        if send {
            // Fast and early retransmits answer ACKs of later segments:
            // evidence of a loss.
            let evidence = self.fast + self.early != evidence_before;
            self.cc.on_transmit(&mut m.stamp, m.xmit, evidence, current);
            m.xmit = m.xmit.wrapping_add(1);
            m.ts = current;
            m.wnd = self.wnd;
            m.una = self.una;
            if !m.queued_out {
                m.queued_out = true;
                self.out.push_segment(m.sn);
            }
            if m.xmit >= self.dead_link {
                // kcp-go sets state = -1 and never reads it; we expose it.
                self.dead = true;
            }
        }
        let wait = m.resendts.wrapping_sub(current) as i32;
        if wait > 0 {
            self.min_pos = self.min_pos.min(wait);
        }
        self.min_any = self.min_any.min(wait);
        // Not sent but still eligible for an early retransmit next time.
        self.still_dirty |= m.fastack > 0 && m.fastack != FASTACK_OFF;
    }
}

/// Parameters of a [`Kcp`]: fixed for its life, but for the windows when
/// [`ArqConfig::max_window`] lets them grow.
#[derive(Clone, Debug)]
struct Params {
    interval: u32,
    /// Send and receive windows: they only change when `max_window` lets
    /// them grow (up to `snd_wnd_max` / `rcv_wnd_max`).
    snd_wnd: u32,
    rcv_wnd: u32,
    snd_wnd_max: u32,
    rcv_wnd_max: u32,
    /// `fastresend` as kcp-go compares it in `parse_fastack` (0 = always).
    fastack_threshold: u32,
    /// kcp-go's `resent` in flush: the threshold, or "never" when off.
    resent: u32,
    stream: bool,
    write_delay: bool,
    ack_nodelay: bool,
    dead_link: u32,
    /// kcpio-only tail-loss probe (`ArqConfig::tail_probe`).
    tail_probe: bool,
    /// kcpio-only ACK repetition (`ArqConfig::ack_repeat`).
    ack_repeat: bool,
}

/// How often (ms) the send ring gives back slots and payload buffers that
/// the load of the last period did not need: memory follows what was in
/// flight lately, and a steady load keeps what it uses.
const TRIM_PERIOD_MS: u32 = 1000;

/// A write begun by [`Kcp::begin_lend`]: the payload buffers of `lent`
/// free send slots are the caller's until [`Kcp::end_lend`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lent {
    /// Bytes already appended to the mergeable tail segment.
    pub(crate) merged: usize,
    /// Buffers lent.
    pub(crate) lent: usize,
    mss: usize,
    mergeable: bool,
}

impl Lent {
    /// Copies the bytes after the merged head of `data` (the slice given to
    /// `begin_lend`) into the lent buffers, one segment's worth (`mss`)
    /// each, as [`Kcp::send`] cuts them. The caller holds no lock.
    pub(crate) fn fill(&self, data: &[u8], bufs: &mut [Vec<u8>]) {
        let rest = data.get(self.merged..).unwrap_or_default();
        for (b, piece) in bufs.iter_mut().take(self.lent).zip(rest.chunks(self.mss)) {
            b.clear();
            if self.mergeable && b.capacity() < self.mss {
                // As `push_queued`: the most stream mode appends to it.
                b.reserve_exact(self.mss);
            }
            b.extend_from_slice(piece);
        }
    }
}

/// One KCP conversation as a sans-IO state machine.
///
/// # Call contract
///
/// Methods fall into four groups, in the manner of quinn-proto's `Connection`:
///
/// * **getters** ([`conv`](Self::conv), [`mss`](Self::mss),
///   [`send_capacity`](Self::send_capacity), [`peek_size`](Self::peek_size),
///   [`readable`](Self::readable), [`is_dead`](Self::is_dead),
///   [`wait_snd`](Self::wait_snd), [`is_flushed`](Self::is_flushed),
///   [`stats`](Self::stats), [`srtt`](Self::srtt), [`rto`](Self::rto)) change
///   nothing.
/// * **`handle_*`** feed events with the caller's clock:
///   [`handle_datagram`](Self::handle_datagram) for every KCP packet
///   received, [`handle_timeout`](Self::handle_timeout) when the deadline from
///   [`poll_timeout`](Self::poll_timeout) has passed.
/// * **application calls** [`send`](Self::send),
///   [`send_message`](Self::send_message), [`recv`](Self::recv),
///   [`recv_message`](Self::recv_message) take no clock.
/// * **`poll_*`** drain output: [`poll_transmit`](Self::poll_transmit)
///   writes one KCP packet per call, [`poll_timeout`](Self::poll_timeout)
///   says when to call `handle_timeout` next.
///
/// After **every** `handle_*`, `send*` or `recv*` call the driver must call
/// `poll_transmit(now, buf)` until it returns `None`, sending each packet as
/// it comes, and then re-arm its timer from `poll_timeout()`. This is how the
/// flushes kcp-go performs inside `Input`, `Write` and its timer come out:
///
/// * kcp-go's session timer flushes every `interval` ms (sooner when a
///   retransmission is due): `poll_timeout` returns exactly that tick, and
///   `handle_timeout` runs it. While the connection is idle (nothing queued or
///   in flight, no ACK or probe pending, peer window open) `poll_timeout`
///   returns `None`; kcp-go's ticks in that state send nothing, and the tick
///   phase is kept so the first tick after idleness falls where kcp-go's would.
/// * kcp-go's `Input` flushes at once when `una` released segments or a fast
///   retransmit is due, and flushes ACKs at once when a packet's worth is
///   pending or `ack_nodelay` is on: `handle_datagram` queues that output.
/// * kcp-go's `Write` flushes at once unless write-delay is on: `send` and
///   `send_message` request that flush, which runs at the next call that
///   carries `now` (normally the `poll_transmit` right after).
///
/// `now` must not go backwards by more than a few seconds between calls and
/// must stay within 2^31 ms of the previous call (wrapping arithmetic).
///
/// # Example
///
/// Two endpoints wired back to back, the driver's loop in miniature:
///
/// ```
/// use kcpio::arq::{ArqConfig, Kcp, Origin, Timestamp, Timing};
///
/// let cfg = ArqConfig { stream: true, ..ArqConfig::with_timing(Timing::FAST3) };
/// let (mut a, mut b) = (Kcp::new(1, &cfg)?, Kcp::new(1, &cfg)?);
/// let mut packet = [0u8; 1500];
/// let mut got = Vec::new();
/// let mut now = Timestamp::from_millis(0);
///
/// assert_eq!(a.send(b"hello over KCP"), 14);
/// while !a.is_flushed() {
///     // Deliver everything each side has to send (a perfect link).
///     while let Some(n) = a.poll_transmit(now, &mut packet) {
///         b.handle_datagram(now, &packet[..n], Origin::Regular)?;
///     }
///     let mut buf = [0u8; 64];
///     let n = b.recv(&mut buf);
///     got.extend_from_slice(&buf[..n]);
///     while let Some(n) = b.poll_transmit(now, &mut packet) {
///         a.handle_datagram(now, &packet[..n], Origin::Regular)?;
///     }
///     // Sleep until the earliest deadline, then run the timers.
///     let next = [a.poll_timeout(), b.poll_timeout()].into_iter().flatten().min_by_key(|t| t.diff(now));
///     if let Some(t) = next {
///         now = t;
///         a.handle_timeout(now);
///         b.handle_timeout(now);
///     }
/// }
/// assert_eq!(got, b"hello over KCP");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Memory
///
/// The send side holds at most `2 * snd_wnd` segments (in flight plus queued),
/// the receive side at most `2 * rcv_wnd` (unread plus out of order), with
/// the windows at most [`ArqConfig::max_window`] when that is set; both
/// rings start small and grow on demand, and each slot reuses its payload
/// buffer, so steady state allocates nothing per segment. Pending control
/// output is capped as well (see [`ArqStats::output_dropped`]).
#[derive(Debug)]
pub struct Kcp {
    conv: u32,
    mtu: usize,
    mss: usize,
    p: Params,

    snd: SendRing,
    rcv: RecvRing,
    /// Pending `(sn, ts)` acknowledgements (kcp-go `acklist`).
    acklist: Vec<(u32, u32)>,
    /// With `ArqConfig::ack_repeat`: the ACKs the last flush wrote, sent
    /// again ahead of the next flush's. At most what one flush wrote.
    ack_prev: Vec<(u32, u32)>,
    out: OutQueue,

    pub(crate) rtt: Rtt,
    pub(crate) rmt_wnd: u32,

    probe: u8,
    ts_probe: u32,
    pub(crate) probe_wait: u32,

    dead: bool,
    /// The peer acknowledged a segment this side sent (an ACK for one in
    /// flight, or `una` moving past one): it receives what we send.
    peer_acked: bool,
    /// `una` moved past a segment this side sent: `snd.una - 1` is one the
    /// peer holds (the sn a path nudge names).
    una_moved: bool,

    /// The congestion controller ([`Congestion`]): phase 4's window and
    /// admission, pacing, the response to retransmissions.
    cc: Controller,

    /// Scan skipping (kcp-go always walks all of `snd_buf` in a full flush).
    /// A flush can only send a segment that is new (admitted since the last
    /// scan), has a pending skip count, or whose `resendts` has come. `dirty`
    /// records the first two; `resend_floor` is a lower bound of `resendts`
    /// over unacknowledged segments (exact at the last scan; removals only
    /// raise the true minimum). When neither can fire and the floor is more
    /// than an interval away, the scan would send nothing and return
    /// `interval`, so it is skipped: same wire behaviour, O(1).
    scan_dirty: bool,
    /// The last flush held a due retransmission back for pacing (BBR only):
    /// `poll_timeout` wakes when tokens allow it.
    rtx_held: bool,
    /// `None` when no unacknowledged segment existed at the last scan.
    resend_floor: Option<u32>,

    /// A flush requested by `send*`, run at the next call that has `now`.
    pending: Option<Flush>,
    /// Output of several flushes not yet drained may share a datagram
    /// (see [`set_merge_flushes`](Self::set_merge_flushes)).
    merge_flushes: bool,
    /// kcpio-only ACK clocking (see [`set_ack_clock`](Self::set_ack_clock)).
    ack_clock: bool,
    /// The window the last flush that sent anything advertised.
    wnd_told: u16,
    /// kcp-go's session timer: when the next periodic flush is due.
    next_timer: Timestamp,
    /// When the send ring next gives back slots it no longer needs
    /// ([`SendRing::trim`], every [`TRIM_PERIOD_MS`]).
    next_trim: Timestamp,
    /// The connection was idle at the end of the last call: timer ticks are
    /// virtual (they would send nothing) until the next call with `now`.
    parked: bool,
    /// A call with `now` has happened.
    started: bool,
    /// The latest `now` seen.
    last_now: Timestamp,
    /// The newest `ts` of a PUSH received: the peer stamps every
    /// transmission, retransmissions included, with its clock, so a PUSH
    /// stamped later was sent later (migration's freshness).
    push_ts_max: Option<u32>,
    /// The newest `ts` of a clocked window probe ([`CLOCKED_PROBE`])
    /// received: stamped with the peer's clock, as a PUSH is.
    clocked_ts_max: Option<u32>,
    /// `sn` of the last WASK received (a kcpio client's answer echoes it).
    wask_sn_in: u32,
    /// Where the receive window's left edge stood when the current round
    /// trip of arrivals began: `rcv_nxt` then, and when (the self-sizing
    /// receive window measures what the peer holds in flight against it).
    wnd_mark: Option<(Timestamp, u32)>,

    stats: ArqStats,
}

impl Kcp {
    /// A conversation `conv` with `config` (validated; `interval` clamped).
    ///
    /// # Errors
    /// [`ArqConfigError`] if [`ArqConfig::validate`] fails.
    pub fn new(conv: u32, config: &ArqConfig) -> Result<Self, ArqConfigError> {
        config.validate()?;
        let interval = config.clamped_interval();
        let snd_wnd = u32::from(config.snd_wnd);
        let rcv_wnd = u32::from(config.rcv_wnd);
        let cap = |w: u32| config.max_window.map_or(w, |m| u32::from(m).max(w));
        let (snd_wnd_max, rcv_wnd_max) = (cap(snd_wnd), cap(rcv_wnd));
        let mss = config.mtu - HEADER_LEN;
        let controller = config.controller();
        // kcp-go keeps `fastresend` as int32: values above i32::MAX would be
        // negative there, which disables fast retransmit in flush.
        let fast = config.fast_resend;
        let resent = if fast == 0 || fast > i32::MAX as u32 {
            u32::MAX
        } else {
            fast
        };
        Ok(Self {
            conv,
            mtu: config.mtu,
            mss,
            p: Params {
                interval,
                snd_wnd,
                rcv_wnd,
                snd_wnd_max,
                rcv_wnd_max,
                fastack_threshold: fast,
                resent,
                stream: config.stream,
                write_delay: config.write_delay,
                ack_nodelay: config.ack_nodelay,
                dead_link: config.dead_link,
                tail_probe: config.tail_probe,
                ack_repeat: config.ack_repeat,
            },
            snd: SendRing::with_bound(2 * snd_wnd, 2 * snd_wnd_max),
            rcv: RecvRing::with_bound(rcv_wnd, rcv_wnd_max),
            acklist: Vec::new(),
            ack_prev: Vec::new(),
            out: OutQueue::new(control_cap(config.mtu, rcv_wnd)),
            rtt: Rtt::new(config.nodelay, interval).with_options(
                config.min_rto,
                config.backoff_percent,
                config.max_rto,
            ),
            // kcp-go guesses the peer's window as its own default (C: 128).
            rmt_wnd: 32,
            probe: 0,
            ts_probe: 0,
            probe_wait: 0,
            dead: false,
            cc: Controller::new(controller, mss as u32, interval),
            peer_acked: false,
            una_moved: false,
            scan_dirty: false,
            rtx_held: false,
            resend_floor: None,
            pending: None,
            merge_flushes: false,
            ack_clock: false,
            wnd_told: config.rcv_wnd,
            next_timer: Timestamp::from_millis(0),
            next_trim: Timestamp::from_millis(0),
            parked: true,
            started: false,
            last_now: Timestamp::from_millis(0),
            push_ts_max: None,
            clocked_ts_max: None,
            wask_sn_in: 0,
            wnd_mark: None,
            stats: ArqStats::default(),
        })
    }

    /// The conversation id.
    #[must_use]
    pub fn conv(&self) -> u32 {
        self.conv
    }

    /// Largest payload of one segment: `mtu - 24`.
    #[must_use]
    pub fn mss(&self) -> usize {
        self.mss
    }

    // ---------------------------------------------------------------- clock

    /// Bring the timer up to `now` and run a flush `send*` requested.
    fn enter(&mut self, now: Timestamp, tick_at_now_ran: bool) {
        if !self.started {
            // kcp-go sessions run their first timer flush on creation.
            self.started = true;
            self.next_timer = now;
            self.parked = false;
        } else if self.parked {
            // Ticks at next_timer, +interval, ... before now happened while
            // idle and sent nothing; each also cleared the probe timer
            // because the peer's window was open. A tick falling exactly on
            // `now` is left to run for input and timer calls (kcp-go's
            // Input may precede its timer in the same millisecond), and
            // counted as run for `poll_transmit`: the caller skipped it
            // because we were idle, before `send*`/`recv*` woke us.
            let late = now
                .diff(self.next_timer)
                .wrapping_add(i32::from(tick_at_now_ran));
            if late > 0 {
                let k = (late as u32 - 1) / self.p.interval + 1;
                self.next_timer = self.next_timer.add_millis(k * self.p.interval);
                self.ts_probe = 0;
                self.probe_wait = 0;
            } else if late < -(self.p.interval as i32) {
                // The timer can never be more than one interval ahead; the
                // clock jumped. Restart the phase.
                self.next_timer = now;
            }
            self.parked = false;
        }
        self.last_now = now;
        // Due, or further ahead than one period: the clock jumped (or this
        // is the first call).
        let trim_in = self.next_trim.diff(now);
        if trim_in <= 0 || trim_in > TRIM_PERIOD_MS as i32 {
            // Storage only: the segments, their order and the wire are the
            // same either way.
            self.snd.trim();
            self.next_trim = now.add_millis(TRIM_PERIOD_MS);
        }
        self.cc.on_clock(now.as_millis());
        if let Some(kind) = self.pending.take() {
            self.flush(now, kind);
        }
    }

    /// Whether the peer ever acknowledged a segment this side sent (an ACK
    /// of a segment in flight, or its `una` passing one): proof that it
    /// receives what we send.
    #[must_use]
    pub fn peer_acked(&self) -> bool {
        self.peer_acked
    }

    /// Sends a window probe (WASK) at the next flush, as kcp-go does when
    /// the peer's window is closed. kcp-go and C KCP answer it with a WINS
    /// at their next flush, which proves they receive what we send.
    pub fn request_window_probe(&mut self) {
        self.probe |= ASK_SEND;
        self.leave();
    }

    /// Park the timer if the connection went idle.
    fn leave(&mut self) {
        self.parked = self.is_idle();
    }

    /// kcp-go's ticks would send nothing: no ACK or probe pending, nothing
    /// queued or in flight, and the peer's window open (else the probe timer runs).
    fn is_idle(&self) -> bool {
        self.acklist.is_empty()
            && self.probe == 0
            && self.snd.len() == 0
            && self.rmt_wnd != 0
            && self.pending.is_none()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must run next; `None` when idle.
    ///
    /// Idle means nothing queued or in flight, no ACK or window probe
    /// pending, and the peer's window open: skipping those ticks is
    /// wire-identical to kcp-go because its flush then sends nothing.
    /// If output is pending (a `send*` not followed by `poll_transmit`) the
    /// latest `now` seen is returned, i.e. "immediately".
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.pending.is_some() || !self.out.is_empty() {
            return Some(self.last_now);
        }
        if self.is_idle() {
            None
        } else {
            let timer = self.next_timer;
            match self.pacing_next() {
                Some(p) if p.diff(timer) < 0 => Some(p),
                _ => Some(timer),
            }
        }
    }

    /// A pacing controller: the window has room for queued data, so the
    /// pacer decides when the next burst leaves (`None`: nothing paced waits).
    fn pacing_next(&self) -> Option<Timestamp> {
        let now = self.last_now.as_millis();
        let data = if self.snd.queued == 0 || !self.window_has_room() {
            None
        } else {
            self.cc.next_send(now)
        };
        // Retransmissions the pacer held back in the last flush.
        let resend = if self.rtx_held {
            self.cc.next_retransmit(now)
        } else {
            None
        };
        let (data, resend) = (
            data.map(Timestamp::from_millis),
            resend.map(Timestamp::from_millis),
        );
        match (data, resend) {
            (Some(a), Some(b)) => Some(a.earliest(b)),
            (a, b) => a.or(b),
        }
    }

    /// Phase 4 could admit one more segment (sequence-space windows only).
    fn window_has_room(&self) -> bool {
        let win = self.p.snd_wnd.min(self.rmt_wnd);
        (self.snd.nxt.wrapping_sub(self.snd.una.wrapping_add(win)) as i32) < 0
    }

    /// Run kcp-go's periodic flush if its tick is due at `now`; otherwise only
    /// bookkeeping. Call `poll_transmit` afterwards.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.enter(now, false);
        if now.is_at_or_after(self.next_timer) {
            if self.is_idle() {
                // kcp-go's flush would send nothing; its only effects are
                // re-arming the timer a full interval later (nothing is in
                // flight) and clearing the probe timer (the window is open).
                self.next_timer = now.add_millis(self.p.interval);
                self.ts_probe = 0;
                self.probe_wait = 0;
            } else {
                let next = self.flush(now, Flush::Full);
                self.next_timer = now.add_millis(next);
            }
        } else if self.pacing_next().is_some_and(|p| now.is_at_or_after(p)) {
            // A paced burst between ticks: the tick keeps its phase.
            self.flush(now, Flush::Full);
        }
        self.leave();
    }

    // ---------------------------------------------------------------- input

    /// Feed one KCP packet (several segments) received at `now`.
    ///
    /// # Errors
    /// [`InputError`] for the first bad segment; segments before it were
    /// applied (as in kcp-go), the rest of the packet is dropped.
    pub fn handle_datagram(
        &mut self,
        now: Timestamp,
        packet: &[u8],
        origin: Origin,
    ) -> Result<(), InputError> {
        self.enter(now, false);
        self.stats.datagrams_in += 1;
        let r = self.input(now, packet, origin);
        if r.is_err() && self.acklist.len() >= self.mtu / HEADER_LEN {
            // kcp-go skips its input flush when a packet is cut short, leaving
            // the ACKs for the next tick. Flushing a packet's worth here keeps
            // the list bounded per call even when an attacker cuts every
            // packet; it only sends ACKs earlier.
            self.flush(now, Flush::AckOnly);
        }
        if let Err(e) = r {
            match e {
                InputError::Truncated => self.stats.input_truncated += 1,
                InputError::ConvMismatch => self.stats.input_conv_mismatch += 1,
                InputError::BadLength => self.stats.input_bad_length += 1,
                InputError::BadCommand => self.stats.input_bad_command += 1,
            }
        }
        self.leave();
        r
    }

    fn input(&mut self, now: Timestamp, packet: &[u8], origin: Origin) -> Result<(), InputError> {
        let regular = origin == Origin::Regular;
        let una_before = self.snd.una;
        let room_before = self.window_has_room();
        let mut latest_ack_ts = 0u32;
        let mut saw_ack = false;
        let mut flush_full = false;

        for seg in Segments::new(packet) {
            let seg = match seg {
                Ok(s) => s,
                Err(ParseError::Truncated) => return Err(InputError::Truncated),
                Err(ParseError::BadLength { conv }) => {
                    // kcp-go checks conv before the length.
                    return Err(if conv != self.conv {
                        InputError::ConvMismatch
                    } else {
                        InputError::BadLength
                    });
                }
            };
            if seg.conv() != self.conv {
                return Err(InputError::ConvMismatch);
            }
            let Some(cmd) = seg.command() else {
                return Err(InputError::BadCommand);
            };
            // kcp-go trusts window updates only from regular packets; C
            // updates rmt_wnd from every segment.
            if regular {
                self.rmt_wnd = u32::from(seg.wnd());
            }
            let (sn, ts) = (seg.sn(), seg.ts());
            if self.cc.samples_deliveries() {
                let cc = &mut self.cc;
                if cmd == Command::Ack {
                    // Before `una` releases it: the ACK names the
                    // transmission it answers (its echoed ts), one RTT sample.
                    if let Some(m) = self.snd.get_mut(sn)
                        && !m.acked
                    {
                        m.acked = true;
                        let rtt = now.diff(Timestamp::from_millis(ts));
                        let rtt = (rtt >= 0 && regular).then_some(rtt as u32);
                        cc.on_delivered(&m.stamp, now.as_millis(), rtt, m.xmit == 1 && m.ts == ts);
                    }
                }
                let at = now.as_millis();
                if self.snd.remove_before_with(seg.una(), |m| {
                    if !m.acked {
                        cc.on_delivered(&m.stamp, at, None, m.xmit == 1);
                    }
                }) > 0
                {
                    flush_full = true;
                    self.peer_acked = true;
                    self.una_moved = true;
                }
            } else if self.snd.remove_before(seg.una()) > 0 {
                flush_full = true;
                self.peer_acked = true;
                self.una_moved = true;
            }
            match cmd {
                Command::Ack => {
                    self.stats.acks_in += 1;
                    self.parse_ack(sn);
                    if self.parse_fastack(sn, ts) {
                        flush_full = true;
                    }
                    saw_ack = true;
                    latest_ack_ts = ts;
                }
                Command::Push => {
                    self.stats.push_in += 1;
                    if self
                        .push_ts_max
                        .is_none_or(|m| (ts.wrapping_sub(m) as i32) > 0)
                    {
                        self.push_ts_max = Some(ts);
                    }
                    let mut repeat = true;
                    let rcv_nxt = self.rcv.nxt;
                    if (sn.wrapping_sub(rcv_nxt.wrapping_add(self.p.rcv_wnd)) as i32) < 0 {
                        self.acklist.push((sn, ts));
                        if (sn.wrapping_sub(rcv_nxt) as i32) >= 0 {
                            self.maybe_grow_rcv_wnd(now, sn, rcv_nxt);
                            repeat = self.rcv.insert(sn, seg.frg(), seg.payload());
                            self.rcv.advance();
                            self.rcv.shed_empty_when_full();
                        }
                    }
                    if regular && repeat {
                        self.stats.repeat_segments += 1;
                    }
                }
                Command::Wask | Command::Wins => {
                    if cmd == Command::Wask {
                        self.stats.wask_in += 1;
                        self.probe |= ASK_TELL;
                        self.wask_sn_in = sn;
                    } else {
                        self.stats.wins_in += 1;
                    }
                    if seg.frg() == CLOCKED_PROBE
                        && self
                            .clocked_ts_max
                            .is_none_or(|m| (ts.wrapping_sub(m) as i32) > 0)
                    {
                        self.clocked_ts_max = Some(ts);
                    }
                }
            }
            self.stats.segments_in += 1;
        }

        // kcp-go samples once per packet, with the last ACK's ts and the
        // current clock; C samples every ACK against the last update time.
        // Recovered (FEC) packets give no sample.
        if saw_ack && regular {
            let rtt = now.diff(Timestamp::from_millis(latest_ack_ts));
            if rtt >= 0 {
                self.rtt.sample(rtt);
            }
        }

        if (self.snd.una.wrapping_sub(una_before) as i32) > 0 {
            self.cc.on_una_advanced(self.rmt_wnd);
        }

        // kcpio-only (`set_ack_clock`): the peer opened its window for
        // data that waits.
        if self.ack_clock && !room_before && self.snd.queued > 0 && self.window_has_room() {
            flush_full = true;
        }

        // kcp-go flushes from Input; C leaves that to the next update.
        if flush_full {
            self.flush(now, Flush::Full);
        } else if self.acklist.len() >= self.mtu / HEADER_LEN
            || (self.p.ack_nodelay && !self.acklist.is_empty())
        {
            self.flush(now, Flush::AckOnly);
        }
        Ok(())
    }

    /// Self-sizing receive window: double it once the peer holds three
    /// quarters of it in flight. Either behind a hole (`sn` that far beyond
    /// `rcv_nxt`), or, with a round-trip sample, over one round trip of
    /// arrivals: what arrived within a smoothed RTT of the mark was sent
    /// before our acknowledgements from after the mark reached the peer, so
    /// `sn` beyond the mark's `rcv_nxt` is what the peer had in flight
    /// against our window. Without the second test a window that losses
    /// rarely hold back (FEC rebuilds them) never grows, however long the
    /// path: on the field's 200 ms path the adaptive FEC's stream stayed at
    /// kcptun's 512 segments, about 3.4 MB/s.
    fn maybe_grow_rcv_wnd(&mut self, now: Timestamp, sn: u32, rcv_nxt: u32) {
        if self.p.rcv_wnd >= self.p.rcv_wnd_max {
            return;
        }
        let mut ahead = sn.wrapping_sub(rcv_nxt);
        let srtt = self.rtt.srtt();
        if srtt > 0 {
            match self.wnd_mark {
                Some((at, nxt)) if now.diff(at) <= srtt => {
                    let since = sn.wrapping_sub(nxt);
                    if (since as i32) > 0 {
                        ahead = ahead.max(since);
                    }
                }
                _ => self.wnd_mark = Some((now, rcv_nxt)),
            }
        }
        if ahead >= self.p.rcv_wnd / 4 * 3 {
            self.p.rcv_wnd = (self.p.rcv_wnd * 2).min(self.p.rcv_wnd_max);
            self.rcv.wnd = self.p.rcv_wnd;
            self.rcv.advance();
            // The next round trip measures against the larger window.
            self.wnd_mark = None;
        }
    }

    /// Mark in-flight segment `sn` acknowledged. kcp-go leaves it in
    /// `snd_buf` until `una` passes it; C removes it at once.
    fn parse_ack(&mut self, sn: u32) {
        if let Some(m) = self.snd.get_mut(sn) {
            m.acked = true;
            self.peer_acked = true;
        }
    }

    /// Count one skipping ACK on every earlier segment not sent after it.
    /// kcp-go counts per ACK segment; C once per packet with the largest sn.
    fn parse_fastack(&mut self, sn: u32, ts: u32) -> bool {
        if self.snd.get_mut(sn).is_none() {
            return false;
        }
        let threshold = self.p.fastack_threshold;
        // With BBR, RACK's reordering window: an ACK counts as evidence
        // that a segment was lost only if it names one sent at least
        // `reorder_window` later. Without it, every segment named in a lost
        // ACK datagram is resent when a later datagram of the same flush
        // arrives, before the receiver's copy of the lost ACKs can (2.5% of
        // the wire on the field path), and a resend is found lost by the
        // ACKs of what was sent with it. kcp-go: sent no later (0).
        let window = self.cc.reorder_window().map(|w| w as i32);
        let mut hit = false;
        let mut bumped = false;
        self.snd.for_each_before(sn, |m| {
            // A resend: at least a ms later, not the ACKs of what left with it.
            let need = match window {
                Some(w) if m.xmit >= 2 => w.max(1),
                Some(w) => w,
                None => 0,
            };
            let counts = (ts.wrapping_sub(m.ts) as i32) >= need;
            if counts && m.fastack != FASTACK_OFF {
                m.fastack += 1;
                bumped = true;
                if m.fastack >= threshold {
                    hit = true;
                }
            }
        });
        self.scan_dirty |= bumped;
        hit
    }

    // ---------------------------------------------------------------- flush

    /// kcp-go `wnd_unused`.
    fn wnd_unused(&self) -> u16 {
        let q = self.rcv.queue_len();
        if q < self.p.rcv_wnd {
            (self.p.rcv_wnd - q) as u16
        } else {
            0
        }
    }

    fn push_control(&mut self, kind: OutKind, wnd: u16, ts: u32, sn: u32, una: u32) {
        if !self.out.push_control(OutItem {
            kind,
            wnd,
            ts,
            sn,
            una,
        }) {
            self.stats.output_dropped += 1;
        }
    }

    /// kcp-go `flush`: decide what to send at `now` and queue it for
    /// `poll_transmit`. Returns kcp-go's suggested delay to the next flush.
    /// kcp-go's flush has no gate; C's `ikcp_flush` does nothing until
    /// `ikcp_update` has run once.
    fn flush(&mut self, now: Timestamp, kind: Flush) -> u32 {
        // All segments of one flush share these (WIRE.md 2.4).
        let wnd = self.wnd_unused();
        let una = self.rcv.nxt;
        // WASK/WINS reuse the ACK scratch header: sn/ts of the last ACK written.
        let (mut last_sn, mut last_ts) = (0u32, 0u32);
        let out_before = self.out.len();

        // Phase 1: ACKs. kcp-go skips those below rcv_nxt (covered by una)
        // except the last entry; C writes them all.
        let n = self.acklist.len();
        if self.p.ack_repeat {
            // Copies first: a sender that read the new ACKs before the
            // copies (in an earlier packet) would count the segments the
            // copies name as skipped and resend them.
            if n > 0 {
                for i in 0..self.ack_prev.len() {
                    let Some(&(sn, ts)) = self.ack_prev.get(i) else {
                        break;
                    };
                    if (sn.wrapping_sub(una) as i32) >= 0 {
                        self.push_control(OutKind::Ack, wnd, ts, sn, una);
                    }
                }
            }
            self.ack_prev.clear();
        }
        for i in 0..n {
            let Some(&(sn, ts)) = self.acklist.get(i) else {
                break;
            };
            if (sn.wrapping_sub(una) as i32) >= 0 || i + 1 == n {
                self.push_control(OutKind::Ack, wnd, ts, sn, una);
                (last_sn, last_ts) = (sn, ts);
                if self.p.ack_repeat && (sn.wrapping_sub(una) as i32) >= 0 {
                    self.ack_prev.push((sn, ts));
                }
            }
        }
        self.acklist.clear();

        // Phase 2: probe timer while the peer's window is closed.
        // kcp-go starts at 500 ms (C: 7000 ms), x1.5 up to 120 s.
        let current = now.as_millis();
        if self.rmt_wnd == 0 {
            if self.probe_wait == 0 {
                self.probe_wait = PROBE_INIT;
                self.ts_probe = current.wrapping_add(self.probe_wait);
            } else if (current.wrapping_sub(self.ts_probe) as i32) >= 0 {
                self.probe_wait = self.probe_wait.max(PROBE_INIT);
                self.probe_wait += self.probe_wait / 2;
                self.probe_wait = self.probe_wait.min(PROBE_LIMIT);
                self.ts_probe = current.wrapping_add(self.probe_wait);
                self.probe |= ASK_SEND;
            }
        } else {
            self.ts_probe = 0;
            self.probe_wait = 0;
        }

        // Phase 3: probes.
        if self.probe & ASK_SEND != 0 {
            self.push_control(OutKind::Wask, wnd, last_ts, last_sn, una);
        }
        if self.probe & ASK_TELL != 0 {
            self.push_control(OutKind::Wins, wnd, last_ts, last_sn, una);
        }
        self.probe = 0;

        if kind == Flush::Control {
            if self.out.len() > out_before {
                self.wnd_told = wnd;
            }
            self.out.push_end();
            return self.p.interval;
        }

        // Phase 4: admit queued segments into the window.
        let win = self.cc.window(self.p.snd_wnd.min(self.rmt_wnd));
        let mut admitted = 0u32;
        while (self.snd.nxt.wrapping_sub(self.snd.una.wrapping_add(win)) as i32) < 0
            && self.snd.queued > 0
        {
            if !self.cc.may_admit() {
                break;
            }
            self.cc.on_admit(current);
            self.snd.admit();
            admitted += 1;
        }
        // `room` is the sequence-space window's, which `pacing_next` asks
        // about (a pacing controller keeps no window of KCP's).
        let room = self.window_has_room();
        self.cc.after_admission(self.snd.queued > 0, room);
        if self.snd.queued > 0
            && win == self.p.snd_wnd.min(self.rmt_wnd)
            && (self.snd.nxt.wrapping_sub(self.snd.una.wrapping_add(win)) as i32) >= 0
        {
            if self.p.snd_wnd <= self.rmt_wnd {
                self.stats.send_window_stalls += 1;
            } else {
                self.stats.peer_window_stalls += 1;
            }
        }
        // Self-sizing send window: our own window is what holds data back.
        if self.snd.queued > 0
            && self.p.snd_wnd < self.p.snd_wnd_max
            && win == self.p.snd_wnd
            && self.snd.in_flight() >= win
        {
            self.p.snd_wnd = (self.p.snd_wnd * 2).min(self.p.snd_wnd_max);
            self.snd.limit = 2 * self.p.snd_wnd;
        }
        if admitted > 0 {
            self.scan_dirty = true;
        }

        // Phase 5: (re)transmit.
        let mut next_update = self.p.interval;
        if kind == Flush::Full && !self.scan_can_skip(current) {
            self.transmit(current, wnd, una, win, admitted == 0, &mut next_update);
        }
        if self.out.len() > out_before {
            self.wnd_told = wnd;
        }
        self.out.push_end();
        next_update
    }

    /// Phase 5 would send nothing and suggest `interval` (see `scan_dirty`).
    /// Phase 6 then changes nothing either.
    fn scan_can_skip(&self, current: u32) -> bool {
        if self.scan_dirty {
            return false;
        }
        match self.resend_floor {
            None => true,
            Some(floor) => (floor.wrapping_sub(current) as i32) > self.p.interval as i32,
        }
    }

    /// Flush phases 5 and 6.
    fn transmit(
        &mut self,
        current: u32,
        wnd: u16,
        una: u32,
        win: u32,
        none_admitted: bool,
        next: &mut u32,
    ) {
        let mut scan = Scan {
            current,
            wnd,
            una,
            none_admitted,
            resent: self.p.resent,
            dead_link: self.p.dead_link,
            rtt: &self.rtt,
            out: &mut self.out,
            rto_floor: self
                .cc
                .rto_floor(self.rtt.srtt().max(0) as u32, self.p.interval),
            cc: &mut self.cc,
            lost: 0,
            fast: 0,
            early: 0,
            probes: 0,
            pto: if self.p.tail_probe {
                self.rtt.probe_timeout()
            } else {
                None
            },
            last_sn: self.snd.nxt.wrapping_sub(1),
            dead: false,
            min_pos: i32::MAX,
            min_any: i32::MAX,
            still_dirty: false,
            held: false,
        };
        let (first_part, second_part) = self.snd.in_flight_mut();
        scan.run(first_part);
        scan.run(second_part);
        let Scan {
            lost,
            fast,
            early,
            probes,
            dead,
            min_pos,
            min_any,
            still_dirty,
            held,
            ..
        } = scan;
        self.rtx_held = held;
        // The flush suggests the nearest positive resend wait, at most `interval`.
        if min_pos != i32::MAX && (min_pos as u32) < *next {
            *next = min_pos as u32;
        }
        self.resend_floor = if min_any == i32::MAX {
            None
        } else {
            Some(current.wrapping_add(min_any as u32))
        };
        self.scan_dirty = still_dirty;
        if dead {
            self.dead = true;
        }
        self.stats.retransmit_rto += lost;
        self.stats.retransmit_fast += fast;
        self.stats.retransmit_early += early;
        self.stats.retransmit_probe += probes;

        // Phase 6: congestion response.
        self.cc
            .on_flush(fast + early, lost, self.snd.in_flight(), win, self.p.resent);
    }
}

/// Output, application side and state.
impl Kcp {
    /// Write the next KCP packet (at most `mtu` bytes) into `buf[..n]` and
    /// return `n`; `None` when nothing is due.
    ///
    /// Call until `None` after every `handle_*`, `send*` or `recv*` call.
    /// Segments are packed exactly as kcp-go packs one flush: a packet is
    /// closed when the next segment would push it past `mtu`, and at the end
    /// of each flush. `buf` should hold at least `mtu` bytes; a shorter buffer
    /// gets what fits, and a segment that fits no empty `buf` stays queued.
    pub fn poll_transmit(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<usize> {
        self.enter(now, true);
        let n = self.assemble(buf);
        self.packet_out(n)
    }

    /// Ends an output call that wrote `n` bytes: counts the packet, `None`
    /// when it wrote nothing.
    fn packet_out(&mut self, n: usize) -> Option<usize> {
        self.leave();
        if n > 0 {
            self.stats.datagrams_out += 1;
            Some(n)
        } else {
            None
        }
    }

    /// The ACKs and window probes and answers (WASK, WINS) due now, alone
    /// in one packet of at most `buf.len()` bytes (and `mtu`), for a caller
    /// that holds data back: a listener's session over its
    /// anti-amplification budget, which must still answer the peer's probe
    /// and send the probe whose answer proves the peer receives. The
    /// control items pending are flushed at once (ACKs first, as a flush
    /// orders them), then those queued are written in order, wherever they
    /// stand behind data segments; the data segments stay queued, and no
    /// segment is admitted or (re)transmitted. Items that do not fit stay
    /// queued for the next call. `None` when there is nothing to write.
    pub fn poll_control(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<usize> {
        if !self.acklist.is_empty() || self.probe != 0 {
            self.flush(now, Flush::Control);
        }
        let limit = self.mtu.min(buf.len());
        let mut used = 0usize;
        let mut i = 0usize;
        while let Some(&item) = self.out.get(i) {
            if matches!(item.kind, OutKind::Push | OutKind::End) {
                i += 1;
                continue;
            }
            match self.write_control_item(item, buf, used, limit) {
                Some(end) => used = end,
                None => break,
            }
            self.out.remove(i);
        }
        self.packet_out(used)
    }

    fn assemble(&mut self, buf: &mut [u8]) -> usize {
        let limit = self.mtu.min(buf.len());
        let mut used = 0usize;
        while let Some(&item) = self.out.front() {
            let hdr = Self::header_of(self.conv, item, Command::Push);
            match item.kind {
                OutKind::End => {
                    self.out.pop();
                    if used > 0 && !self.merge_flushes {
                        break;
                    }
                    continue;
                }
                OutKind::Push => {
                    let Some((m, data)) = self.snd.get_with_data(item.sn) else {
                        // Acknowledged and released before it was written
                        // (the caller did not drain in time): nothing to send.
                        self.out.pop();
                        continue;
                    };
                    if m.sn != item.sn || !m.queued_out {
                        self.out.pop();
                        continue;
                    }
                    if used + HEADER_LEN + data.len() > limit {
                        break;
                    }
                    let hdr = Header {
                        cmd: Command::Push as u8,
                        frg: m.frg,
                        wnd: m.wnd,
                        ts: m.ts,
                        sn: m.sn,
                        una: m.una,
                        len: data.len() as u32,
                        ..hdr
                    };
                    match hdr.encode_at(buf, used, data) {
                        Some(end) => used = end,
                        None => break,
                    }
                    m.queued_out = false;
                    self.out.pop();
                    self.stats.segments_out += 1;
                    self.stats.push_out += 1;
                    continue;
                }
                OutKind::Ack | OutKind::Wask | OutKind::Wins => {}
            };
            match self.write_control_item(item, buf, used, limit) {
                Some(end) => used = end,
                None => break,
            }
            self.out.pop();
        }
        used
    }

    /// Writes the control segment `item` (an ACK, WASK or WINS) at
    /// `buf[used..]` and counts it: the end of what is written, or `None`
    /// when it does not fit within `limit`.
    fn write_control_item(
        &mut self,
        item: OutItem,
        buf: &mut [u8],
        used: usize,
        limit: usize,
    ) -> Option<usize> {
        let (cmd, counter) = match item.kind {
            OutKind::Ack => (Command::Ack, &mut self.stats.acks_out),
            OutKind::Wask => (Command::Wask, &mut self.stats.wask_out),
            OutKind::Wins => (Command::Wins, &mut self.stats.wins_out),
            OutKind::Push | OutKind::End => return None,
        };
        if used + HEADER_LEN > limit {
            return None;
        }
        let end = Self::header_of(self.conv, item, cmd).encode_at(buf, used, &[])?;
        *counter += 1;
        self.stats.segments_out += 1;
        Some(end)
    }

    /// The header `item` goes out under in conversation `conv`, as a `cmd`
    /// segment with no data (a data segment's fields are filled from its
    /// send slot).
    fn header_of(conv: u32, item: OutItem, cmd: Command) -> Header {
        Header {
            conv,
            cmd: cmd as u8,
            frg: 0,
            wnd: item.wnd,
            ts: item.ts,
            sn: item.sn,
            una: item.una,
            len: 0,
        }
    }

    /// Let [`poll_transmit`](Self::poll_transmit) pack the output of
    /// several flushes into one packet (up to `mtu`) when the caller did not
    /// drain between them. Off by default: each flush's last packet is then
    /// closed at its end, as kcp-go sends it. On, a caller that delays
    /// draining after input (say until the application answered) sends
    /// the ACKs of kcp-go's `Input` flush and the reply's data together;
    /// kcp-go accepts any packing of segments in a datagram.
    pub(crate) fn set_merge_flushes(&mut self, on: bool) {
        self.merge_flushes = on;
    }

    /// kcpio-only ACK clocking, off by default (kcp-go's timing, which the
    /// differential trace checks); the session (`Conn`) turns it on. Two
    /// changes of *when* output leaves, none of what it says:
    ///
    /// * receiver: when the application's reads have opened the receive
    ///   window by an eighth of it beyond what the peer was last told, the
    ///   next call with a clock flushes the pending ACKs, or a WINS when
    ///   there are none, carrying the new window (kcp-go waits for its next
    ///   tick, and a sender stalled on a full window sends nothing the
    ///   receiver could ACK meanwhile);
    /// * sender: a packet that opens the peer's window while data is queued
    ///   behind it flushes at once, as one that advances `una` does (kcp-go
    ///   waits for its next tick).
    ///
    /// A kcp-go peer sees ordinary ACKs and WINS segments, earlier: the
    /// data of an ACK-clocked sender, as from a faster host.
    pub(crate) fn set_ack_clock(&mut self, on: bool) {
        self.ack_clock = on;
    }

    /// Request the flush kcp-go's `Write` performs after queueing data.
    fn after_send(&mut self) {
        if !self.p.write_delay || self.snd.len() >= self.p.snd_wnd {
            self.pending = Some(Flush::Full);
        }
    }

    /// Queue bytes as a stream; returns how many were accepted (0 when the
    /// send buffer is full).
    ///
    /// Like a kcp-go session's `Write`: the bytes are cut into pieces of at
    /// most `mss`, each its own segment with `frg = 0`; in stream mode the
    /// first piece is appended to the last segment still waiting for a
    /// sequence number when it has room (kcp-go `Send` in stream mode).
    /// Accepts up to [`send_capacity`](Self::send_capacity) bytes. kcp-go
    /// takes a whole write whenever fewer than `snd_wnd` segments wait; here
    /// the buffer is bounded at `2 * snd_wnd` segments instead.
    pub fn send(&mut self, data: &[u8]) -> usize {
        if self.snd.lending() {
            // A write being copied outside the lock keeps the tail.
            return 0;
        }
        let mut rest = data;
        if self.p.stream && !rest.is_empty() {
            let mss = self.mss;
            if let Some(tail) = self.snd.mergeable_tail() {
                let take = mss.saturating_sub(tail.len()).min(rest.len());
                let (head, tail_rest) = rest.split_at(take);
                tail.extend_from_slice(head);
                rest = tail_rest;
            }
        }
        while !rest.is_empty() {
            let take = self.mss.min(rest.len());
            let (piece, more) = rest.split_at(take);
            if !self.snd.push_queued(0, piece, self.p.stream, self.mss) {
                break;
            }
            rest = more;
        }
        let accepted = data.len() - rest.len();
        if accepted > 0 {
            self.after_send();
        }
        accepted
    }

    /// The first half of a [`send`](Self::send) whose copy is made by the
    /// caller, outside whatever lock guards this `Kcp`: in stream mode the
    /// head of `data` is appended to the mergeable tail segment now (as
    /// `send` does), then the payload buffers of up to `bufs.len()` free
    /// slots are lent into `bufs`. The caller copies the rest with
    /// [`Lent::fill`] and ends with [`end_lend`](Self::end_lend). Returns
    /// `None` when nothing was taken (the buffer is full, or another lend
    /// is out); a lend of no buffers has already done all the work.
    pub(crate) fn begin_lend(&mut self, data: &[u8], bufs: &mut [Vec<u8>]) -> Option<Lent> {
        if data.is_empty() {
            return None;
        }
        let mut merged = 0;
        if self.p.stream {
            let mss = self.mss;
            if let Some(tail) = self.snd.mergeable_tail() {
                merged = mss.saturating_sub(tail.len()).min(data.len());
                tail.extend_from_slice(data.get(..merged).unwrap_or_default());
            }
        }
        let rest = data.len() - merged;
        let want = rest.div_ceil(self.mss).min(bufs.len());
        let lent = match bufs.get_mut(..want) {
            Some(b) if want > 0 => self.snd.lend(b) as usize,
            _ => 0,
        };
        if merged == 0 && lent == 0 {
            return None;
        }
        if lent == 0 {
            self.after_send();
        }
        Some(Lent {
            merged,
            lent,
            mss: self.mss,
            mergeable: self.p.stream,
        })
    }

    /// Ends a lend: with `queue`, the filled buffers become queued segments
    /// (the same segments `send` would have made); without it (the session
    /// failed or was shut meanwhile) they go back unused. Returns the bytes
    /// accepted by the whole write, the merged head included.
    pub(crate) fn end_lend(&mut self, lent: &Lent, bufs: &mut [Vec<u8>], queue: bool) -> usize {
        let filled = bufs.iter().take(lent.lent).take_while(|b| !b.is_empty());
        let (count, bytes) = filled.fold((0, 0), |(c, n), b| (c + 1, n + b.len()));
        let count = if queue { count } else { 0 };
        self.snd.return_lent(bufs, count, lent.mergeable);
        if count > 0 {
            self.after_send();
            lent.merged + bytes
        } else {
            lent.merged
        }
    }

    /// Queue one message, cut into `ceil(len / mss)` segments with `frg`
    /// counting down to 0 (C KCP's message mode; kcp-go sessions never
    /// fragment). The message is never merged with other data.
    ///
    /// # Errors
    /// [`SendError::Empty`] for an empty message (kcp-go rejects it, C sends
    /// an empty segment); [`SendError::TooLarge`] when it needs more
    /// fragments than `min(rcv_wnd, 255, 2 * snd_wnd)` (a receiver with our
    /// window could never reassemble it; kcp-go's limit is 255, C's 127);
    /// [`SendError::WouldBlock`] when the send buffer lacks room now.
    pub fn send_message(&mut self, msg: &[u8]) -> Result<(), SendError> {
        if msg.is_empty() {
            return Err(SendError::Empty);
        }
        let count = msg.len().div_ceil(self.mss).max(1);
        if count > self.max_fragments() {
            return Err(SendError::TooLarge);
        }
        if count > self.snd.free() as usize || self.snd.lending() {
            return Err(SendError::WouldBlock);
        }
        for (i, piece) in msg.chunks(self.mss).enumerate() {
            let frg = (count - 1 - i) as u8;
            if !self.snd.push_queued(frg, piece, false, self.mss) {
                // Unreachable given the free-slot check; never leave half a message.
                return Err(SendError::WouldBlock);
            }
        }
        self.after_send();
        Ok(())
    }

    fn max_fragments(&self) -> usize {
        (self.p.rcv_wnd as usize)
            .min(255)
            .min(self.snd.limit as usize)
    }

    /// Bytes [`send`](Self::send) would accept now.
    #[must_use]
    pub fn send_capacity(&self) -> usize {
        let room = if self.p.stream {
            self.snd.tail_room(self.mss)
        } else {
            0
        };
        self.snd.free() as usize * self.mss + room
    }

    /// kcp-go `PeekSize`, or what remains of a message `recv` started.
    #[must_use]
    pub fn peek_size(&self) -> Option<usize> {
        let (frg0, first) = self.rcv.queued(0)?;
        if self.rcv.in_message || self.rcv.head_off > 0 {
            let mut total = first.len().saturating_sub(self.rcv.head_off);
            if frg0 == 0 {
                return Some(total);
            }
            let mut k = 1;
            while let Some((frg, data)) = self.rcv.queued(k) {
                total += data.len();
                if frg == 0 {
                    break;
                }
                k += 1;
            }
            return Some(total);
        }
        if frg0 == 0 {
            return Some(first.len());
        }
        if self.rcv.queue_len() < u32::from(frg0) + 1 {
            return None;
        }
        let mut total = 0;
        let mut k = 0;
        while let Some((frg, data)) = self.rcv.queued(k) {
            total += data.len();
            if frg == 0 {
                break;
            }
            k += 1;
        }
        Some(total)
    }

    /// [`recv`](Self::recv) would return at least one byte: a complete
    /// message (or the rest of a started one) holding bytes is queued, past
    /// any empty messages before it.
    ///
    /// Empty messages (a zero-length PUSH, which C KCP's `ikcp_send(kcp, buf,
    /// 0)` sends and anyone able to inject a segment can forge) do not make
    /// the queue readable, so a byte-stream reader never sees a read of
    /// 0 bytes, which async readers take as end of stream.
    /// [`recv_message`](Self::recv_message) still returns them, once called.
    #[must_use]
    pub fn readable(&self) -> bool {
        let queued = self.rcv.queue_len();
        let mut k = 0;
        let mut off = self.rcv.head_off;
        let mut started = self.rcv.in_message || off > 0;
        // Each step moves past one whole message, so this ends within the queue.
        while k < queued {
            let Some((frg0, _)) = self.rcv.queued(k) else {
                return false;
            };
            // A message is handed out once complete (as `peek_size` counts it).
            if !started && queued - k < u32::from(frg0) + 1 {
                return false;
            }
            // Its fragments run to the first with `frg == 0` (as `recv` reads).
            while let Some((frg, data)) = self.rcv.queued(k) {
                if data.len() > off {
                    return true;
                }
                off = 0;
                k += 1;
                if frg == 0 {
                    break;
                }
            }
            started = false;
        }
        false
    }

    /// After a read: refill the queue from out-of-order segments and, if the
    /// queue was full before and is not now, announce the window (kcp-go's
    /// "fast recover" WINS).
    fn after_recv(&mut self, was_full: bool) {
        self.rcv.advance();
        if was_full && self.rcv.queue_len() < self.p.rcv_wnd {
            self.probe |= ASK_TELL;
        }
        if self.ack_clock {
            let step = (self.p.rcv_wnd / 8).max(1);
            let opened = self.wnd_unused().saturating_sub(self.wnd_told);
            if u32::from(opened) >= step {
                // Pending ACKs carry the window; with none, a WINS does.
                if self.acklist.is_empty() {
                    self.probe |= ASK_TELL;
                }
                self.pending = Some(
                    self.pending
                        .map_or(Flush::AckOnly, |k| k.max(Flush::AckOnly)),
                );
            }
        }
    }

    /// Read bytes as a stream into `buf`; returns how many (0 when nothing
    /// is readable).
    ///
    /// Whole messages only become readable once complete (kcp-go
    /// `PeekSize`), but a message may be handed out over several calls, as a
    /// kcp-go session's `Read` does with its internal buffer; consecutive
    /// messages are concatenated. Empty segments carry no bytes and are
    /// skipped (consumed): when [`readable`](Self::readable) is true and `buf`
    /// is not empty, the result is at least 1.
    pub fn recv(&mut self, buf: &mut [u8]) -> usize {
        let was_full = self.rcv.queue_len() >= self.p.rcv_wnd;
        let mut n = 0;
        let mut consumed = false;
        while n < buf.len() {
            if !self.rcv.in_message && self.rcv.head_off == 0 && self.peek_size().is_none() {
                break;
            }
            let Some((frg, data)) = self.rcv.queued(0) else {
                break;
            };
            let src = data.get(self.rcv.head_off..).unwrap_or_default();
            let dst = buf.get_mut(n..).unwrap_or_default();
            let take = src.len().min(dst.len());
            if let (Some(d), Some(s)) = (dst.get_mut(..take), src.get(..take)) {
                d.copy_from_slice(s);
            }
            n += take;
            if take == src.len() {
                self.rcv.in_message = frg != 0;
                self.rcv.pop_front();
                consumed = true;
            } else {
                self.rcv.head_off += take;
            }
        }
        if consumed || n > 0 {
            self.after_recv(was_full);
        }
        n
    }

    /// Read one whole message into `buf` and return its length (kcp-go `Recv`).
    ///
    /// If [`recv`](Self::recv) already handed out part of a message, the rest
    /// of that message is returned.
    ///
    /// # Errors
    /// [`RecvError::NotReady`] when no complete message is queued;
    /// [`RecvError::BufferTooSmall`] when `buf` is shorter than the message
    /// (nothing is consumed).
    pub fn recv_message(&mut self, buf: &mut [u8]) -> Result<usize, RecvError> {
        let size = self.peek_size().ok_or(RecvError::NotReady)?;
        if size > buf.len() {
            return Err(RecvError::BufferTooSmall { needed: size });
        }
        let was_full = self.rcv.queue_len() >= self.p.rcv_wnd;
        let mut n = 0;
        while let Some((frg, data)) = self.rcv.queued(0) {
            let src = data.get(self.rcv.head_off..).unwrap_or_default();
            if let Some(d) = buf.get_mut(n..n + src.len()) {
                d.copy_from_slice(src);
                n += src.len();
            }
            self.rcv.pop_front();
            if frg == 0 {
                break;
            }
        }
        self.rcv.in_message = false;
        self.after_recv(was_full);
        Ok(n)
    }

    /// Asks the peer for its window: a WASK goes out at the next call that
    /// brings `now` (normally the `poll_transmit` right after), carrying
    /// `una` and our window like every segment. kcp-go and C KCP answer with
    /// a WINS at their next flush, so any WASK proves, within a round trip
    /// and a flush interval, that the peer is there; the connection's
    /// connect probe and keepalive use it (kcp-go sends WASK only while the
    /// peer's window is closed).
    pub fn probe_window(&mut self) {
        self.probe |= ASK_SEND;
        self.pending = Some(
            self.pending
                .map_or(Flush::AckOnly, |k| k.max(Flush::AckOnly)),
        );
    }

    /// Whether `packet` (KCP segments of this conversation, as
    /// [`handle_datagram`](Self::handle_datagram) takes them) tells this
    /// side something it never received: a PUSH inside the receive window
    /// that is neither delivered nor held, a PUSH (a retransmission) stamped
    /// later than every PUSH received, an ACK of a segment still
    /// unacknowledged, or a `una` past the oldest unacknowledged segment
    /// (and not beyond what was sent). A replay of any packet received
    /// before does none of these, since its effect is already here. Reads
    /// only; a malformed packet or another conv is not fresh.
    #[must_use]
    pub fn is_fresh(&self, packet: &[u8]) -> bool {
        let mut fresh = false;
        for seg in Segments::new(packet) {
            let Ok(seg) = seg else { return false };
            if seg.conv() != self.conv {
                return false;
            }
            let (sn, una) = (seg.sn(), seg.una());
            let ahead = una.wrapping_sub(self.snd.una) as i32;
            // The peer acknowledged up to `snd.una`; its `una` never goes
            // back by more than the datagrams a window reorders: far
            // behind, it is not this peer (a client restarted with the
            // same conv, whose una starts at 0) or a replay.
            let slack = self.p.snd_wnd.max(self.p.rcv_wnd).saturating_mul(2);
            if ahead < 0 && ahead.unsigned_abs() > slack {
                return false;
            }
            if ahead > 0 && (una.wrapping_sub(self.snd.nxt) as i32) <= 0 {
                fresh = true;
            }
            match seg.command() {
                Some(Command::Push) => {
                    let off = sn.wrapping_sub(self.rcv.nxt);
                    if off < self.p.rcv_wnd && !self.rcv.holds(sn) {
                        fresh = true;
                    }
                    // A retransmission sent after everything received.
                    let ts = seg.ts();
                    if self
                        .push_ts_max
                        .is_none_or(|m| (ts.wrapping_sub(m) as i32) > 0)
                    {
                        fresh = true;
                    }
                }
                Some(Command::Ack) => fresh |= self.snd.unacked(sn),
                // A clocked probe or answer sent after every one received
                // (see `CLOCKED_PROBE`).
                Some(Command::Wask | Command::Wins) if seg.frg() == CLOCKED_PROBE => {
                    fresh |= self
                        .clocked_ts_max
                        .is_none_or(|m| (seg.ts().wrapping_sub(m) as i32) > 0);
                }
                Some(_) => {}
                None => return false,
            }
        }
        fresh
    }

    /// A window probe (WASK) alone, written at `buf[..HEADER_LEN]` as a
    /// flush would write it now (our window and `una`), without touching
    /// the ARQ's state: the driver's path probe toward an address the peer
    /// may have moved to. Returns its length, or `None` when `buf` is short.
    /// `frg` is 0, [`CLOCKED_PROBE`] for a client's quiet probe, or the
    /// extension offer's tag for a client's resent offer; `sn`
    /// the path probe's tag (a kcpio client's answer echoes it).
    pub(crate) fn write_window_probe(
        &self,
        now: Timestamp,
        frg: u8,
        sn: u32,
        buf: &mut [u8],
    ) -> Option<usize> {
        self.write_bare(Command::Wask, frg, now, sn, buf)
    }

    /// One segment without data at `buf`, carrying our window and `una`.
    fn write_bare(
        &self,
        cmd: Command,
        frg: u8,
        now: Timestamp,
        sn: u32,
        buf: &mut [u8],
    ) -> Option<usize> {
        let out: &mut [u8; HEADER_LEN] = buf.get_mut(..HEADER_LEN)?.try_into().ok()?;
        Header {
            conv: self.conv,
            cmd: cmd as u8,
            frg,
            wnd: self.wnd_unused(),
            ts: now.as_millis(),
            sn,
            una: self.rcv.nxt,
            ..Default::default()
        }
        .encode(out);
        Some(HEADER_LEN)
    }

    /// A path nudge at `buf`: a PUSH without data, stamped `now`, for
    /// `snd.una - 1`, a segment the peer acknowledged (it holds it). kcp-go
    /// and C KCP acknowledge every PUSH inside their receive window, one
    /// they delivered already too, echoing its `sn` and `ts`, and store
    /// nothing for it; so the ACK that comes back is bound to this nudge
    /// ([`is_nudge_answer`](Self::is_nudge_answer)) and to nothing a
    /// replay could carry. Returns its length and `(sn, ts)`; `None` until
    /// `una` moved past a segment this side sent.
    pub(crate) fn write_path_nudge(
        &self,
        now: Timestamp,
        buf: &mut [u8],
    ) -> Option<(usize, (u32, u32))> {
        if !self.una_moved {
            return None;
        }
        let sn = self.snd.una.wrapping_sub(1);
        let n = self.write_bare(Command::Push, 0, now, sn, buf)?;
        Some((n, (sn, now.as_millis())))
    }

    /// The packet acknowledges the path nudge `(sn, ts)`
    /// ([`write_path_nudge`](Self::write_path_nudge)).
    pub(crate) fn is_nudge_answer(&self, packet: &[u8], (sn, ts): (u32, u32)) -> bool {
        Segments::new(packet).any(|s| {
            s.is_ok_and(|s| {
                s.conv() == self.conv
                    && s.command() == Some(Command::Ack)
                    && s.sn() == sn
                    && s.ts() == ts
            })
        })
    }

    /// `sn` of the last WASK received.
    pub(crate) fn wask_sn_in(&self) -> u32 {
        self.wask_sn_in
    }

    /// The peer stamps its probes and answers with its clock (a kcpio
    /// client): it sent a [`CLOCKED_PROBE`] segment.
    pub(crate) fn peer_clocks(&self) -> bool {
        self.clocked_ts_max.is_some()
    }

    /// A path probe's tag: half the sequence space away from what we
    /// receive, so no echo of the peer's own `sn` (a kcp-go WINS carries
    /// the last ACK's) equals it; `k` tells candidates apart.
    pub(crate) fn probe_tag(&self, k: u32) -> u32 {
        self.rcv.nxt.wrapping_add(0x8000_0000).wrapping_add(k)
    }

    /// The packet carries this peer's answer to the path probe tagged
    /// `tag`: a clocked WINS echoing it in `sn`, stamped later than every
    /// clocked segment received (so not a replay).
    pub(crate) fn is_bound_answer(&self, packet: &[u8], tag: u32) -> bool {
        Segments::new(packet).any(|s| {
            s.is_ok_and(|s| {
                s.conv() == self.conv
                    && s.command() == Some(Command::Wins)
                    && s.frg() == CLOCKED_PROBE
                    && s.sn() == tag
                    && self
                        .clocked_ts_max
                        .is_none_or(|m| (s.ts().wrapping_sub(m) as i32) > 0)
            })
        })
    }

    /// The path to the peer changed (a new IP address): the RTT estimate
    /// and the congestion controller start over; what is in flight stays
    /// and is retransmitted on the new path at the initial RTO.
    pub(crate) fn reset_path(&mut self) {
        self.rtt.reset();
        self.cc = self.cc.restarted(self.mss as u32, self.p.interval);
    }

    /// The peer asked for our window (a WASK arrived) and the WINS answer
    /// has not gone out yet.
    #[must_use]
    pub fn answers_probe(&self) -> bool {
        self.probe & ASK_TELL != 0
    }

    /// A segment reached `dead_link` transmissions. kcp-go records this and
    /// never acts on it (its sessions retransmit forever); the driver decides.
    #[must_use]
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// Segments queued plus in flight (kcp-go `WaitSnd`).
    #[must_use]
    pub fn wait_snd(&self) -> usize {
        self.snd.len() as usize
    }

    /// Nothing queued, nothing unacknowledged.
    #[must_use]
    pub fn is_flushed(&self) -> bool {
        self.snd.len() == 0
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> &ArqStats {
        &self.stats
    }

    /// Smoothed RTT in ms (kcp-go `rx_srtt`, 0 before the first sample).
    #[must_use]
    pub fn srtt(&self) -> u32 {
        self.rtt.srtt().max(0) as u32
    }

    /// What the BBR-style controller ([`Congestion::Bbr`]) currently
    /// estimates; `None` with the other controllers.
    #[must_use]
    pub fn congestion_state(&self) -> Option<BbrStats> {
        self.cc.bbr_stats()
    }

    /// Current retransmission timeout in ms (kcp-go `rx_rto`).
    #[must_use]
    pub fn rto(&self) -> u32 {
        self.rtt.rto()
    }

    /// Start both sequence spaces at `sn` instead of 0, so tests can cross the
    /// 2^32 wrap without sending 4 billion segments. Both ends must use the
    /// same value. Only allowed before any traffic; returns `false` (and
    /// changes nothing) afterwards. Not part of the stable API.
    #[doc(hidden)]
    pub fn set_initial_sn(&mut self, sn: u32) -> bool {
        if self.snd.len() != 0
            || self.rcv.queue_len() != 0
            || self.rcv.buffered != 0
            || self.snd.nxt != 0
            || self.rcv.nxt != 0
        {
            return false;
        }
        self.snd.una = sn;
        self.snd.nxt = sn;
        self.rcv.head = sn;
        self.rcv.nxt = sn;
        true
    }

    /// Run one full flush at `now` regardless of the timer, as kcp-go's
    /// `BenchmarkFlush` calls its internal `flush`; returns kcp-go's suggested
    /// delay to the next flush. For benchmarks; not part of the stable API.
    #[doc(hidden)]
    pub fn flush_for_bench(&mut self, now: Timestamp) -> u32 {
        self.enter(now, true);
        let next = self.flush(now, Flush::Full);
        self.leave();
        next
    }

    /// KCP's `(cwnd, ssthresh)` with [`Congestion::Kcp`], for tests.
    #[cfg(test)]
    pub(crate) fn kcp_cwnd(&self) -> Option<(u32, u32)> {
        self.cc.kcp_state()
    }

    /// Sizes of every growable structure, for bound checks in tests.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> Footprint {
        Footprint {
            snd_slots: self.snd.capacity(),
            rcv_slots: self.rcv.capacity(),
            rcv_buffered: self.rcv.buffered as usize,
            rcv_queue: self.rcv.queue_len() as usize,
            acklist: self.acklist.len() + self.ack_prev.len(),
            out_items: self.out.len(),
        }
    }

    /// Heap capacities of every container, as a tuple; equal values before
    /// and after some work mean nothing grew, i.e. nothing was allocated
    /// (slot buffers are cleared and refilled within their capacity).
    #[cfg(test)]
    pub(crate) fn heap_fingerprint(&self) -> [usize; 4] {
        [
            self.snd.heap_fingerprint(),
            self.rcv.heap_fingerprint(),
            self.out.heap_fingerprint(),
            self.acklist.capacity() + self.ack_prev.capacity(),
        ]
    }
}

/// See [`Kcp::footprint`].
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Footprint {
    pub(crate) snd_slots: usize,
    pub(crate) rcv_slots: usize,
    pub(crate) rcv_buffered: usize,
    pub(crate) rcv_queue: usize,
    pub(crate) acklist: usize,
    pub(crate) out_items: usize,
}
