//! Adaptive FEC for the KCP stream between kcpio ends, sans-IO.
//!
//! kcp-go's FEC sends a fixed `data/parity` shape whatever the path. Between
//! two kcpio ends that both offered it, this replaces the fixed shape: data
//! shards stay kcp-go's data packets, groups are any `k <= 32` consecutive
//! data shards (closed when the expected packets within the group deadline
//! have come, or at the deadline), and each group's parity count `m` comes
//! from the loss model shared with the datagram extension
//! ([`super::loss_model::LossModel`]) for a residual loss of
//! 10^-4 (the ARQ repairs the rest), so a path that shows no loss gets no
//! parity at all, nor does a path whose round trip is within twice the
//! group deadline (the ARQ's own repair is as quick there).
//!
//! # Wire (version 2 of the kcpio extension)
//!
//! ```text
//! data:   | seqid u32 | F1 00 | size u16 | KCP packet |            (kcp-go's)
//! parity: | word u32  | F2 | 0x8A | RS row over the bodies (L) |
//! report: | 0 u32 | F3 00 | 0 u8 | 0x8B | conv u32 | received u32 | lost u32 | runs u32 |
//! word:   first & 0xFFFF | (k - 1) << 16 | (m - 1) << 21 | idx << 25   (bits 29..31 zero)
//! ```
//!
//! `seqid` counts data shards only (wrapping at 2^32, continuing from the
//! fixed encoder's). A body is `size | KCP packet` (bytes 6.. of the data
//! shard, as in kcp-go) zero-padded to `L`, the group's longest; parity
//! rows are kcp-go's systematic Reed-Solomon code for `(k, m)`. The parity
//! packet is exactly as long as a kcp-go parity packet of the same group,
//! so it fits every slot a data shard fits. A kcp-go parity packet has
//! byte 5 zero; `0x8A` there (`0x80 | version << 2 | type`) marks this one
//! (a KCP packet has `cmd` 81..=84 at byte 4, so none reads as either).
//! The report is an extension packet of kcp-go's OOB framing (routed by
//! its conv like the datagram extension's), the receiver's cumulative
//! counts of data shards received, lost on the wire and loss runs.
//!
//! # Negotiation
//!
//! Bit 2 of the window-probe tag (`frg` `0xD4`, `0xD5` with the datagram
//! extension too, see `conn::probe_offers`): a client offers on its
//! connect and keepalive probes; a listener's session answers in kind
//! only after it heard the offer. Each side switches its sender once it
//! heard the offer (or a valid stream-extension packet); its receiver
//! feeds data shards to kcp-go's fixed decoder as well until the peer's
//! first stream-extension packet shows the peer switched.

use std::time::Duration;

use super::fec_rx::{Gathered, Parity, RING, RxShards, STRIDE, seq_diff};
use super::loss_model::{Codecs, LossModel, NARROW_K, NARROW_M, OwdBase, WindowedMax};
use crate::fec::codec::ErasureCodec;
use crate::fec::{DATA_HEADER, FLAG_DATA, FLAG_OOB, FLAG_PARITY, grow_arena, read_u16, read_u32};

/// The bit of the window-probe tag (`0xD0 | bits`) that offers this
/// extension.
pub(crate) const OFFER_BIT: u8 = 0x04;
/// Data and parity shards per group at most: the parity word's 5 and 4
/// bits (the datagram extension's wide groups are not for the stream).
const MAX_K: usize = NARROW_K;
const MAX_M: usize = NARROW_M;
/// This extension's version in the kcpio extension marker.
const VERSION: u8 = 2;
const TYPE_PARITY: u8 = 2;
const TYPE_REPORT: u8 = 3;
/// Byte 5 of a stream parity packet.
pub(crate) const PARITY_MARK: u8 = 0x80 | (VERSION << 2) | TYPE_PARITY;
/// Byte 7 of a stream report packet.
const REPORT_MARK: u8 = 0x80 | (VERSION << 2) | TYPE_REPORT;
/// Where a shard's body starts (the size field), in data and parity alike.
const BODY_AT: usize = 6;
/// The report's length.
const REPORT_LEN: usize = 24;
/// The arrival window, in data shards.
const WINDOW: u32 = 1024;
/// Shards behind the newest before a missing one is counted lost: at
/// 50 Mbit/s about 60 ms of reordering.
const ACCOUNT_LAG: u32 = 256;
/// How often a receiver reports while shards arrive.
const REPORT_EVERY: Duration = Duration::from_millis(50);
/// Reports fold into the loss model at most this often.
const MODEL_EVERY: Duration = Duration::from_millis(10);
/// The group deadline when the configuration sets none.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_millis(10);
/// The residual loss each group is built for (the ARQ repairs the rest).
/// Not 10^-2: on the field's 200 ms path at 4.6% a stream built for 10^-2
/// retransmitted 11 times as often as the fixed 10/3 (whose residual is
/// about 10^-3) and ran at 0.8 of its rate: every repair the ARQ makes
/// there stalls the stream's order for a round trip. Parity for 10^-4
/// costs about 22% at that loss, the fixed shape 30%.
pub(crate) const RESIDUAL_TARGET: f64 = 1e-4;
/// The span over which the data-shard rate is measured, ms.
const RATE_WINDOW_MS: f64 = 20.0;
/// The loss assumed before the first report (weight 20 shards): a little
/// parity for the first groups, and once reports show no loss an estimate
/// low enough (with its margin) for no parity at all.
const PRIOR_LOSS: f64 = 1e-3;
/// KCP's PUSH command.
const PUSH: u8 = 81;
/// The largest queueing delay is kept over windows this long.
const QUEUE_MAX_WINDOW: Duration = Duration::from_secs(1);
/// The least queueing delay (ms) that makes a gap the sender's overflow.
const QUEUED_MIN_MS: i32 = 2;
/// The smallest KCP packet (one segment header).
const KCP_MIN: usize = 24;

/// Counters and estimates of the adaptive stream FEC, in
/// [`SessionStats::stream_fec`](super::SessionStats::stream_fec).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct StreamFecStats {
    /// Both ends offered it: the stream's parity adapts to the path.
    pub negotiated: bool,
    /// Data shards sent under it.
    pub data_out: u64,
    /// Parity shards sent.
    pub parity_out: u64,
    /// Groups closed, and those closed at the deadline before filling.
    pub groups: u64,
    /// Groups closed at the deadline.
    pub deadline_groups: u64,
    /// Groups whose parity the half-the-data bound cut below the table's.
    pub parity_capped: u64,
    /// Parity per data shard of the last group closed (`m / k`).
    pub redundancy: f64,
    /// The peer's loss rate this side estimates from its reports.
    pub loss_estimate: f64,
    /// The mean loss burst (shards) this side estimates.
    pub burst_estimate: f64,
    /// Data shards received.
    pub data_in: u64,
    /// Parity shards received.
    pub parity_in: u64,
    /// Data shards rebuilt from parity.
    pub recovered: u64,
    /// Data shards never received (counted 256 behind the newest).
    pub lost_on_wire: u64,
    /// Data shards received twice or older than the window.
    pub duplicates: u64,
    /// Data shards lost while the path queued (the first shard after the
    /// gap waited at least three quarters of the recent largest queueing
    /// delay (a drop-tail queue drops when full), and at
    /// least 2 ms), or in a run longer than 16 (more than any group's
    /// parity): the sender overflowing the bottleneck, which its congestion
    /// controller answers and parity would only worsen, or an outage. Not
    /// reported as loss.
    pub lost_congested: u64,
    /// Data shards received while the path queued as it does when a gap
    /// counts toward [`lost_congested`](Self::lost_congested): not
    /// reported either, so the loss the model learns is the channel's
    /// over the shards it could have seen (counting them as received,
    /// with the gaps among them left out, read 4.6% of random loss as
    /// under 1% while the bottleneck queued, and the ARQ repaired the
    /// difference a round trip late).
    pub received_congested: u64,
    /// Parity shards outside the recovery ring: their group left it (128
    /// data shards behind the newest) or lies beyond it (none of its
    /// shards came).
    pub parity_unusable: u64,
    /// Stream-extension packets refused: impossible shapes, groups beyond
    /// the 1,024-shard window ahead of the newest shard, conflicting shapes for a group,
    /// rebuilt shards that cannot be KCP packets, reports claiming more
    /// than was sent.
    pub malformed: u64,
    /// Reports sent and received.
    pub reports_out: u64,
    /// Reports received.
    pub reports_in: u64,
}

/// Whether `packet` (a plaintext classified as parity) is a stream parity
/// packet rather than kcp-go's.
pub(crate) fn is_stream_parity(packet: &[u8]) -> bool {
    packet.get(4) == Some(&(FLAG_PARITY as u8)) && packet.get(5) == Some(&PARITY_MARK)
}

/// Whether `packet` (an OOB-flagged plaintext) is a stream report.
pub(crate) fn is_stream_report(packet: &[u8]) -> bool {
    packet.get(7) == Some(&REPORT_MARK)
}

/// Bit `s` of a window bitmap.
fn get(bits: &[u64; WINDOW as usize / 64], s: u32) -> bool {
    let i = (s % WINDOW) as usize;
    bits[i / 64] & (1 << (i % 64)) != 0
}

fn set(bits: &mut [u64; WINDOW as usize / 64], s: u32, v: bool) {
    let i = (s % WINDOW) as usize;
    if v {
        bits[i / 64] |= 1 << (i % 64);
    } else {
        bits[i / 64] &= !(1 << (i % 64));
    }
}

/// The adaptive stream FEC of one session: sender and receiver.
pub(crate) struct StreamFec {
    deadline: Duration,
    codecs: Codecs,
    model: LossModel,
    stats: StreamFecStats,
    // ---- sender
    next_seq: u32,
    first: u32,
    count: usize,
    opened: Duration,
    target_k: usize,
    max_len: usize,
    lens: [u16; MAX_K],
    /// `first, k, m, next index, len` of parity waiting to leave.
    pending: Option<(u32, usize, usize, usize, usize)>,
    /// `MAX_K` data bodies then `MAX_M` parity rows, `STRIDE` apart.
    tx_arena: Vec<u8>,
    /// The ARQ's smoothed round trip (ms; 0 before a sample).
    srtt_ms: u32,
    /// Data shards counted since `rate_from`, and the smoothed rate in
    /// shards per ms: a group is what the rate sends within the deadline.
    rate_count: u32,
    rate_from: Option<Duration>,
    per_ms: f64,
    /// Reported counters last seen: received, lost, runs.
    last_report: Option<[u32; 3]>,
    claimed: u64,
    pending_loss: (u64, u64, u64),
    model_at: Option<Duration>,
    // ---- receiver
    highest: Option<u32>,
    on_wire: [u64; WINDOW as usize / 64],
    /// Shards skipped while the path queued (see `lost_congested`).
    congested: [u64; WINDOW as usize / 64],
    /// One-way delay (ms, this side's clock minus the PUSH's `ts`): its
    /// base, and the queueing delay of the newest sample.
    owd: OwdBase<i32>,
    queue_ms: i32,
    /// The largest queueing delay of this 1 s window and the last.
    queue_max: WindowedMax<i32>,
    accounted: u32,
    last_lost: bool,
    loss_runs: u32,
    /// Data bodies (`size | KCP packet`, at most 1,494 bytes) and parity
    /// rows kept for recovery.
    rx: RxShards,
    /// Rebuilt bodies, `STRIDE` apart, and `(index, len)` of those not yet
    /// handed out.
    scratch: Vec<u8>,
    ready: [(u8, u16); MAX_M],
    ready_len: usize,
    ready_next: usize,
    report_due: Option<Duration>,
}

impl std::fmt::Debug for StreamFec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamFec")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl StreamFec {
    /// Groups close at most `deadline` after their first shard; seqids
    /// continue from `next_seq`.
    pub(crate) fn new(deadline: Duration, next_seq: u32) -> Self {
        Self {
            deadline,
            codecs: Codecs::default(),
            model: LossModel::with_prior(RESIDUAL_TARGET, PRIOR_LOSS),
            stats: StreamFecStats::default(),
            next_seq,
            first: next_seq,
            count: 0,
            opened: Duration::ZERO,
            target_k: 1,
            max_len: 0,
            lens: [0; MAX_K],
            pending: None,
            tx_arena: Vec::new(),
            srtt_ms: 0,
            rate_count: 0,
            rate_from: None,
            per_ms: 0.0,
            last_report: None,
            claimed: 0,
            pending_loss: (0, 0, 0),
            model_at: None,
            highest: None,
            on_wire: [0; WINDOW as usize / 64],
            congested: [0; WINDOW as usize / 64],
            owd: OwdBase::default(),
            queue_ms: 0,
            queue_max: WindowedMax::default(),
            accounted: 0,
            last_lost: false,
            loss_runs: 0,
            rx: RxShards::new(),
            scratch: Vec::new(),
            ready: [(0, 0); MAX_M],
            ready_len: 0,
            ready_next: 0,
            report_due: None,
        }
    }

    pub(crate) fn stats(&self) -> StreamFecStats {
        let mut s = self.stats.clone();
        s.negotiated = true;
        s.loss_estimate = self.model.p;
        s.burst_estimate = self.model.burst;
        s
    }

    // ================================================================ send

    /// When the open group's deadline passes or a report is due.
    pub(crate) fn poll_timeout(&self) -> Option<Duration> {
        let group = (self.count > 0).then(|| self.opened + self.deadline);
        match (group, self.report_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Closes the open group when its deadline passed.
    pub(crate) fn handle_timeout(&mut self, now: Duration) {
        if self.count > 0 && now >= self.opened + self.deadline {
            self.stats.deadline_groups += 1;
            self.close_group();
        }
    }

    /// Frames the KCP packet at `buf[8..8 + kcp_len]` as a data shard in
    /// place (`buf[..8]` is headroom) and keeps its body for the group's
    /// parity; returns the packet length (0 if it does not fit).
    pub(crate) fn encode(&mut self, now: Duration, buf: &mut [u8], kcp_len: usize) -> usize {
        let len = DATA_HEADER + kcp_len;
        let body_len = len - BODY_AT;
        if body_len > STRIDE || buf.len() < len {
            return 0;
        }
        let seq = self.next_seq;
        buf[..4].copy_from_slice(&seq.to_le_bytes());
        buf[4..6].copy_from_slice(&FLAG_DATA.to_le_bytes());
        buf[6..8].copy_from_slice(&((2 + kcp_len) as u16).to_le_bytes());
        self.rate_count += 1;
        let from = *self.rate_from.get_or_insert(now);
        let ms = now.saturating_sub(from).as_secs_f64() * 1e3;
        if ms >= RATE_WINDOW_MS {
            let r = f64::from(self.rate_count) / ms;
            self.per_ms = if self.per_ms > 0.0 {
                0.5 * self.per_ms + 0.5 * r
            } else {
                r
            };
            self.rate_count = 0;
            self.rate_from = Some(now);
        }
        if self.count == 0 {
            self.first = seq;
            self.opened = now;
            self.target_k = self.k_target();
        }
        let i = self.count;
        let full = (MAX_K + MAX_M) * STRIDE;
        grow_arena(&mut self.tx_arena, (i + 1) * STRIDE, full);
        if let (Some(dst), Some(src)) = (
            self.tx_arena.get_mut(i * STRIDE..i * STRIDE + body_len),
            buf.get(BODY_AT..len),
        ) {
            dst.copy_from_slice(src);
        }
        self.lens[i] = body_len as u16;
        self.max_len = self.max_len.max(body_len);
        self.count += 1;
        self.next_seq = seq.wrapping_add(1);
        self.stats.data_out += 1;
        if self.count >= self.target_k {
            self.close_group();
        }
        len
    }

    /// The ARQ's smoothed round trip, for the next groups' parity.
    pub(crate) fn set_srtt(&mut self, ms: u32) {
        self.srtt_ms = ms;
    }

    /// Data shards expected within the group deadline (1 for a sparse
    /// stream: its lone packet gets its parity at once). From the rate,
    /// not the gaps: the ARQ sends in bursts, and a group opened after a
    /// burst's gap would be sized by the gap.
    fn k_target(&self) -> usize {
        let d = self.deadline.as_secs_f64() * 1e3;
        ((self.per_ms * d + 0.5).floor() as usize).clamp(1, MAX_K)
    }

    fn close_group(&mut self) {
        let k = std::mem::take(&mut self.count);
        let len = std::mem::take(&mut self.max_len);
        if k == 0 {
            return;
        }
        self.stats.groups += 1;
        // Parity leaves up to a deadline after its data; on a path whose
        // round trip is within twice that, the ARQ's own repair (a fast
        // retransmission a round trip later) is as quick, and parity only
        // adds load (on the field's clean path, 1 ms, it overflowed the
        // short queue further).
        let worth = self.srtt_ms == 0
            || Duration::from_millis(u64::from(self.srtt_ms)) >= 2 * self.deadline;
        let want = if worth {
            usize::from(self.model.table.get(k).copied().unwrap_or(0))
        } else {
            0
        };
        // Never more parity than half the group's data (one shard for a
        // lone packet): on top of the ARQ's window, parity never storms.
        let cap = (k / 2).max(1);
        let m = want.min(cap).min(MAX_M);
        if m < want {
            self.stats.parity_capped += 1;
        }
        self.stats.redundancy = m as f64 / k as f64;
        if m == 0 {
            return;
        }
        for (i, &l) in self.lens.iter().enumerate().take(k) {
            if let Some(tail) = self
                .tx_arena
                .get_mut(i * STRIDE + usize::from(l)..i * STRIDE + len)
            {
                tail.fill(0);
            }
        }
        let full = (MAX_K + MAX_M) * STRIDE;
        grow_arena(&mut self.tx_arena, full, full);
        let Some(codec) = self.codecs.encoder(k, m) else {
            return;
        };
        let (data, parity) = self.tx_arena.split_at_mut(MAX_K * STRIDE);
        if codec.encode(data, STRIDE, len, parity).is_ok() {
            // Conn drains parity before the next data shard, so nothing
            // pending is ever replaced.
            self.pending = Some((self.first, k, m, 0, len));
        }
    }

    /// The next parity packet of the last closed group into `buf`.
    pub(crate) fn poll_parity(&mut self, buf: &mut [u8]) -> Option<usize> {
        let (first, k, m, idx, len) = self.pending?;
        let out = buf.get_mut(..BODY_AT + len)?;
        let row = self
            .tx_arena
            .get((MAX_K + idx) * STRIDE..(MAX_K + idx) * STRIDE + len)?;
        let word = (first & 0xFFFF)
            | ((k as u32 - 1) << 16)
            | ((m as u32 - 1) << 21)
            | ((idx as u32) << 25);
        out[..4].copy_from_slice(&word.to_le_bytes());
        out[4] = FLAG_PARITY as u8;
        out[5] = PARITY_MARK;
        out[BODY_AT..].copy_from_slice(row);
        self.pending = (idx + 1 < m).then_some((first, k, m, idx + 1, len));
        self.stats.parity_out += 1;
        Some(BODY_AT + len)
    }

    /// The receiver's report when due, into `buf`.
    pub(crate) fn poll_report(
        &mut self,
        now: Duration,
        buf: &mut [u8],
        conv: u32,
    ) -> Option<usize> {
        if self.report_due.is_none_or(|d| now < d) {
            return None;
        }
        self.account(false);
        let out = buf.get_mut(..REPORT_LEN)?;
        out[..4].fill(0);
        out[4..6].copy_from_slice(&FLAG_OOB.to_le_bytes());
        out[6] = 0;
        out[7] = REPORT_MARK;
        out[8..12].copy_from_slice(&conv.to_le_bytes());
        let fields = [
            (self.stats.data_in - self.stats.received_congested) as u32,
            self.stats.lost_on_wire as u32,
            self.loss_runs,
        ];
        for (i, f) in fields.iter().enumerate() {
            out[12 + 4 * i..16 + 4 * i].copy_from_slice(&f.to_le_bytes());
        }
        self.report_due = None;
        self.stats.reports_out += 1;
        Some(REPORT_LEN)
    }

    /// A report from the peer (conv already checked); false when refused
    /// (counted).
    pub(crate) fn handle_report(&mut self, now: Duration, p: &[u8]) -> bool {
        let ok = self.take_report(now, p);
        if !ok {
            self.stats.malformed += 1;
        }
        ok
    }

    fn take_report(&mut self, now: Duration, p: &[u8]) -> bool {
        if p.len() != REPORT_LEN || read_u32(p, 0) != Some(0) || p.get(6) != Some(&0) {
            return false;
        }
        let f = |i: usize| read_u32(p, 12 + 4 * i).unwrap_or(0);
        let cur = [f(0), f(1), f(2)];
        self.stats.reports_in += 1;
        let Some(last) = self.last_report.replace(cur) else {
            return true;
        };
        let d = |i: usize| cur[i].wrapping_sub(last[i]);
        let (recv, lost, runs) = (d(0), d(1), d(2));
        let shards = u64::from(recv) + u64::from(lost);
        // The peer cannot have received or missed more shards than this
        // side sent (a reordered older report looks like a huge one too).
        if shards > self.stats.data_out.saturating_sub(self.claimed) || runs > lost {
            self.last_report = Some(last);
            return false;
        }
        self.claimed += shards;
        let (s, l, r) = &mut self.pending_loss;
        *s += shards;
        *l += u64::from(lost);
        *r += u64::from(runs);
        if *s > 0 && self.model_at.is_none_or(|t| now >= t + MODEL_EVERY) {
            let (s, l, r) = std::mem::take(&mut self.pending_loss);
            self.model.update(s, l, r, RESIDUAL_TARGET);
            self.model_at = Some(now);
        }
        true
    }

    // ============================================================= receive

    /// A data shard of the peer (its KCP bytes already went to the ARQ),
    /// handled at `now`, arrived at `arrived` (what its queueing delay is
    /// measured at).
    pub(crate) fn handle_data(&mut self, now: Duration, arrived: Duration, packet: &[u8]) {
        let (Some(seq), Some(body)) = (read_u32(packet, 0), packet.get(BODY_AT..)) else {
            return;
        };
        self.sample_queue(arrived, packet);
        if body.len() > STRIDE || !self.admit(seq) || self.bit(seq) {
            self.stats.duplicates += 1;
            return;
        }
        self.set_bit(seq, true);
        self.stats.data_in += 1;
        if self.queued() {
            self.stats.received_congested += 1;
        }
        if self.report_due.is_none() {
            self.report_due = Some(now + REPORT_EVERY);
        }
        self.rx.store(seq, body);
        // Only the slots holding a row (a snapshot: a group rebuilt
        // meanwhile empties its slots, which then hold no group).
        for i in self.rx.occupied() {
            if let Some(first) = self.rx.group_holding(i, seq) {
                self.try_group(first);
            }
        }
    }

    /// The queueing delay from the `ts` of the packet's first PUSH (every
    /// transmission is stamped; ACK segments echo the peer's stamps).
    fn sample_queue(&mut self, now: Duration, packet: &[u8]) {
        let mut at = DATA_HEADER;
        let ts = loop {
            let (Some(&cmd), Some(len)) = (packet.get(at + 4), read_u32(packet, at + 20)) else {
                return;
            };
            if cmd == PUSH {
                match read_u32(packet, at + 8) {
                    Some(ts) => break ts,
                    None => return,
                }
            }
            at = at.saturating_add(KCP_MIN).saturating_add(len as usize);
        };
        let owd = (now.as_millis() as u32).wrapping_sub(ts) as i32;
        let base = self.owd.sample(now, owd, i32::min);
        // `ts` is the peer's: the delay saturates, never overflows.
        self.queue_ms = owd.saturating_sub(base);
        self.queue_max.sample(now, self.queue_ms, QUEUE_MAX_WINDOW);
    }

    /// The path queues now: the newest shard waited at least three
    /// quarters of the recent largest queueing delay, and at least 2 ms
    /// (half of it, tried first, held for most of a transfer under a
    /// standing queue: random loss then read as overflow).
    fn queued(&self) -> bool {
        let max = self.queue_max.get();
        self.queue_ms >= QUEUED_MIN_MS && self.queue_ms.saturating_mul(4) >= max.saturating_mul(3)
    }

    /// A stream parity packet; false when refused (counted).
    pub(crate) fn handle_parity(&mut self, packet: &[u8]) -> bool {
        let ok = self.take_parity(packet);
        if !ok {
            self.stats.malformed += 1;
        }
        ok
    }

    fn take_parity(&mut self, p: &[u8]) -> bool {
        let Some(word) = read_u32(p, 0) else {
            return false;
        };
        let len = p.len().saturating_sub(BODY_AT);
        let k = ((word >> 16) & 0x1F) as u8 + 1;
        let m = ((word >> 21) & 0xF) as u8 + 1;
        let idx = ((word >> 25) & 0xF) as u8;
        if word >> 29 != 0 || idx >= m || !(2 + KCP_MIN..=STRIDE).contains(&len) {
            return false;
        }
        self.stats.parity_in += 1;
        let Some(h) = self.highest else {
            return true;
        };
        // The full seqid nearest the newest with these low 16 bits; the
        // group must lie in the recovery ring around the newest shard.
        let first = h.wrapping_add(i32::from((word as u16).wrapping_sub(h as u16) as i16) as u32);
        let last = first.wrapping_add(u32::from(k) - 1);
        if seq_diff(last, h) > WINDOW as i32 {
            return false;
        }
        if seq_diff(h, first) >= RING as i32 || seq_diff(last, h) > RING as i32 {
            // Its group's shards have left the ring (parity reordered
            // behind newer data), or none of them came (a long outage or
            // overflow): nothing to rebuild with it.
            self.stats.parity_unusable += 1;
            return true;
        }
        let body = p.get(BODY_AT..).unwrap_or_default();
        match self.rx.take_parity((first, k, m, idx), body, h) {
            Parity::Conflict => false,
            Parity::Duplicate => true,
            Parity::Stored => {
                self.try_group(first);
                true
            }
        }
    }

    /// Whether a rebuilt KCP packet waits for [`poll_recovered`](Self::poll_recovered).
    pub(crate) fn has_recovered(&self) -> bool {
        self.ready_next < self.ready_len
    }

    /// The next rebuilt KCP packet into `buf`.
    pub(crate) fn poll_recovered(&mut self, buf: &mut [u8]) -> Option<usize> {
        while self.ready_next < self.ready_len {
            let (i, len) = self.ready[self.ready_next];
            self.ready_next += 1;
            let at = usize::from(i) * STRIDE + 2;
            let src = self.scratch.get(at..at + usize::from(len));
            if let (Some(src), Some(dst)) = (src, buf.get_mut(..usize::from(len))) {
                dst.copy_from_slice(src);
                return Some(usize::from(len));
            }
        }
        self.ready_len = 0;
        self.ready_next = 0;
        None
    }

    /// Moves the window to take `seq`; false when `seq` is too old.
    fn admit(&mut self, seq: u32) -> bool {
        let Some(h) = self.highest else {
            self.highest = Some(seq);
            self.accounted = seq;
            return true;
        };
        let ahead = seq_diff(seq, h);
        if ahead <= 0 {
            // `ahead` may be `i32::MIN`: half the sequence space away.
            return ahead.unsigned_abs() < WINDOW - ACCOUNT_LAG;
        }
        if ahead as u32 >= WINDOW - ACCOUNT_LAG {
            // A jump past the window (a long outage, or a forgery under a
            // cipher without authentication): restart it uncounted.
            self.on_wire = [0; WINDOW as usize / 64];
            self.accounted = seq;
        } else {
            // A run longer than any group's parity is an outage or an
            // overflow (the queue drained since), beyond what FEC repairs.
            let queued = self.queued() || ahead as usize > MAX_M + 1;
            let mut s = h.wrapping_add(1);
            while seq_diff(seq, s) >= 0 {
                self.set_bit(s, false);
                set(&mut self.congested, s, queued && s != seq);
                s = s.wrapping_add(1);
            }
        }
        self.highest = Some(seq);
        self.account(false);
        true
    }

    /// Counts shards `ACCOUNT_LAG` behind the newest as received or lost.
    fn account(&mut self, all: bool) {
        let Some(h) = self.highest else { return };
        let upto = if all { h } else { h.wrapping_sub(ACCOUNT_LAG) };
        while seq_diff(upto, self.accounted) >= 0 {
            let s = self.accounted;
            let lost = !self.bit(s);
            if lost && get(&self.congested, s) {
                // The sender's own overflow: neither loss nor delivery.
                self.stats.lost_congested += 1;
                self.accounted = s.wrapping_add(1);
                continue;
            }
            if lost {
                self.stats.lost_on_wire += 1;
                if !self.last_lost {
                    self.loss_runs = self.loss_runs.wrapping_add(1);
                }
            }
            self.last_lost = lost;
            self.accounted = s.wrapping_add(1);
        }
    }

    /// Whether shard `s` arrived; shards beyond the newest have no bit yet.
    fn bit(&self, s: u32) -> bool {
        if self.highest.is_none_or(|h| seq_diff(s, h) > 0) {
            return false;
        }
        get(&self.on_wire, s)
    }

    fn set_bit(&mut self, s: u32, v: bool) {
        set(&mut self.on_wire, s, v);
    }

    /// Rebuilds what group `first` is missing once it holds enough shards.
    fn try_group(&mut self, first: u32) {
        if self.ready_next < self.ready_len {
            // The last rebuild is not handed out yet: the next shard retries.
            return;
        }
        // A shard received but no longer stored leaves nothing to rebuild
        // from.
        let g = match self.rx.gather(first, |s| self.bit(s)) {
            Gathered::Wait => return,
            Gathered::Clear => return self.rx.clear(first),
            Gathered::Ready(g) => g,
        };
        let len = g.parity_len;
        // A data shard longer than the group's parity is not this group's
        // (or the parity is forged).
        if g.data_len > len {
            self.rx.clear(first);
            self.stats.malformed += 1;
            return;
        }
        let scratch = (&mut self.scratch, MAX_M);
        if !self.rx.rebuild(
            &mut self.codecs,
            &g,
            len,
            scratch,
            &mut self.stats.malformed,
        ) {
            return;
        }
        self.ready_len = 0;
        self.ready_next = 0;
        for (row, s) in g.missing() {
            let body = self
                .scratch
                .get(row * STRIDE..row * STRIDE + len)
                .unwrap_or_default();
            let size = read_u16(body, 0).map_or(0, usize::from);
            // `size` counts itself: a KCP packet of at least one header
            // that fits the rebuilt length.
            if size < 2 + KCP_MIN || size > len || row >= MAX_M {
                self.stats.malformed += 1;
                continue;
            }
            if !self.admit(s) || self.bit(s) {
                continue;
            }
            self.stats.recovered += 1;
            self.ready[self.ready_len] = (row as u8, (size - 2) as u16);
            self.ready_len += 1;
            if let Some(src) = self.scratch.get(row * STRIDE..row * STRIDE + size) {
                self.rx.store(s, src);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A KCP-looking packet of `len` bytes for shard `i`.
    fn kcp(i: u32, len: usize) -> Vec<u8> {
        (0..len)
            .map(|j| (i as usize * 31 + j * 7) as u8 ^ (j >> 8) as u8)
            .collect()
    }

    /// Shards (data and parity) of `n` packets of varying length, sent at
    /// `per_ms` packets a millisecond, with the loss model's table forced
    /// to `m` parity per group.
    fn sent(n: u32, per_ms: u32, m: u8) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let mut tx = StreamFec::new(DEFAULT_DEADLINE, 7);
        tx.model.table.fill(m);
        let mut packets = Vec::new();
        let mut payloads = Vec::new();
        let mut buf = vec![0u8; 1500];
        for i in 0..n {
            let now = Duration::from_micros(u64::from(i) * 1000 / u64::from(per_ms));
            tx.handle_timeout(now);
            while let Some(p) = tx.poll_parity(&mut buf) {
                packets.push(buf[..p].to_vec());
            }
            let len = 24 + (i as usize * 97) % 1300;
            let k = kcp(i, len);
            buf[8..8 + len].copy_from_slice(&k);
            let l = tx.encode(now, &mut buf, len);
            assert_eq!(l, 8 + len);
            packets.push(buf[..l].to_vec());
            payloads.push(k);
            while let Some(p) = tx.poll_parity(&mut buf) {
                packets.push(buf[..p].to_vec());
            }
        }
        tx.handle_timeout(Duration::from_secs(10));
        while let Some(p) = tx.poll_parity(&mut buf) {
            packets.push(buf[..p].to_vec());
        }
        (packets, payloads)
    }

    /// Feeds `packets` to a receiver; returns the KCP packets it got
    /// (received or rebuilt), by content.
    fn receive(rx: &mut StreamFec, packets: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1500];
        for p in packets {
            if p[4] == 0xF1 {
                got.push(p[8..].to_vec());
                rx.handle_data(Duration::ZERO, Duration::ZERO, p);
            } else {
                assert!(is_stream_parity(p));
                rx.handle_parity(p);
            }
            while let Some(n) = rx.poll_recovered(&mut buf) {
                got.push(buf[..n].to_vec());
            }
        }
        got
    }

    #[test]
    fn lost_shards_are_rebuilt_byte_for_byte_in_any_order() {
        let (packets, payloads) = sent(2_000, 5, 4);
        // Lose every 9th data shard (at most 4 per group of 32).
        let mut kept: Vec<Vec<u8>> = Vec::new();
        let mut data = 0;
        for p in packets {
            if p[4] == 0xF1 {
                data += 1;
                if data % 9 == 0 {
                    continue;
                }
            }
            kept.push(p);
        }
        // And swap neighbours: reordering within the window.
        for i in (0..kept.len() - 1).step_by(5) {
            kept.swap(i, i + 1);
        }
        let mut rx = StreamFec::new(DEFAULT_DEADLINE, 0);
        let mut got = receive(&mut rx, &kept);
        got.sort();
        // A shard rebuilt before its late original arrived comes twice
        // (the ARQ drops the second).
        got.dedup();
        let mut want = payloads;
        want.sort();
        assert_eq!(got.len(), want.len(), "{:?}", rx.stats);
        assert!(got == want, "{:?}", rx.stats);
        assert_eq!(rx.stats.malformed, 0);
        assert!(rx.stats.recovered >= 2_000 / 9, "{:?}", rx.stats);
    }

    #[test]
    fn forged_parity_is_refused_and_counted() {
        let (packets, _) = sent(64, 5, 2);
        let mut rx = StreamFec::new(DEFAULT_DEADLINE, 0);
        let data: Vec<_> = packets.iter().filter(|p| p[4] == 0xF1).cloned().collect();
        receive(&mut rx, &data[..40]);
        let parity = packets
            .iter()
            .find(|p| is_stream_parity(p))
            .unwrap()
            .clone();
        let forge = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut p = parity.clone();
            f(&mut p);
            p
        };
        let bad = [
            // Reserved bits, an index beyond m, too short, too long.
            forge(&|p| p[3] |= 0x80),
            forge(&|p| p[3] = (p[3] & 0xE1) | (15 << 1)),
            forge(&|p| p.truncate(BODY_AT + 10)),
            forge(&|p| p.resize(BODY_AT + STRIDE + 1, 0)),
            // A group far ahead of the newest shard.
            forge(&|p| {
                let f = u16::from_le_bytes([p[0], p[1]]).wrapping_add(2000);
                p[..2].copy_from_slice(&f.to_le_bytes());
            }),
        ];
        for p in &bad {
            assert!(!rx.handle_parity(p), "{p:x?}");
        }
        assert_eq!(rx.stats.malformed, bad.len() as u64);
        // A second shape for a stored group (one still missing shards) is
        // refused too.
        let (packets, _) = sent(400, 5, 2);
        let word = |p: &[u8]| u32::from_le_bytes(p[..4].try_into().unwrap());
        let parity = packets
            .iter()
            .find(|p| is_stream_parity(p) && (word(p) >> 16) & 0x1F >= 3)
            .unwrap();
        let first = word(parity) & 0xFFFF;
        let before: Vec<_> = packets
            .iter()
            .filter(|p| p[4] == 0xF1 && word(p) < first)
            .cloned()
            .collect();
        let mut rx = StreamFec::new(DEFAULT_DEADLINE, 0);
        receive(&mut rx, &before);
        let mut other = parity.clone();
        assert!(rx.handle_parity(parity));
        other[2] ^= 1; // k - 1 flips
        assert!(!rx.handle_parity(&other));
        assert_eq!(rx.stats.malformed, 1);
    }

    #[test]
    fn a_shard_half_the_sequence_space_behind_is_refused() {
        let mut rx = StreamFec::new(DEFAULT_DEADLINE, 0);
        assert!(rx.admit(5));
        assert!(rx.admit(4));
        assert!(!rx.admit(5u32.wrapping_add(1 << 31)));
    }

    #[test]
    fn a_report_claiming_more_than_was_sent_moves_nothing() {
        let mut tx = StreamFec::new(DEFAULT_DEADLINE, 0);
        let mut buf = vec![0u8; 1500];
        for i in 0..100u64 {
            tx.encode(Duration::from_millis(i), &mut buf, 100);
            while tx.poll_parity(&mut buf).is_some() {}
        }
        let report = |recv: u32, lost: u32, runs: u32| {
            let mut p = vec![0u8; REPORT_LEN];
            p[4..6].copy_from_slice(&FLAG_OOB.to_le_bytes());
            p[7] = REPORT_MARK;
            for (i, f) in [recv, lost, runs].iter().enumerate() {
                p[12 + 4 * i..16 + 4 * i].copy_from_slice(&f.to_le_bytes());
            }
            p
        };
        let t = Duration::from_secs(1);
        assert!(tx.handle_report(t, &report(0, 0, 0)));
        let before = tx.model.p;
        assert!(!tx.handle_report(t, &report(50, 60, 1)));
        assert!(!tx.handle_report(t, &report(50, 5, 6)));
        assert_eq!(tx.model.p, before);
        assert_eq!(tx.stats.malformed, 2);
        assert!(tx.handle_report(t, &report(90, 10, 10)));
        assert!(tx.model.p > before);
    }
}
