//! The receive side: groups shards, rebuilds missing data shards, learns the
//! sender's shard ratio.

use super::codec::{ErasureCodec, VandermondeCodec};
use super::{
    DEFAULT_MAX_SHARDS, FLAG_DATA, FLAG_PARITY, FecDecodeError, FecStats, KCP_OVERHEAD, MAX_PACKET,
    MAX_SHARDS, SHARD_OFFSET, SHARD_STRIDE, grow_arena, paws, read_u16, read_u32,
};
use crate::simd::gf256::NibbleTable;

/// Groups kept: the newest and the 3 before it, as kcp-go keeps them
/// (`maxShardSets`). Older shards are stale.
const WINDOW: usize = 4;

/// Shards are stored this many bytes apart, at least (the stride of a
/// group is its longest shard rounded up to a multiple of this).
const STRIDE_STEP: usize = 32;

/// The FEC decoder of one session.
///
/// Keeps at most four groups (the newest seen and the three before it). A
/// group's shards are stored in arrival order, each taking its group's
/// longest shard so far rounded up to 32 bytes, in one arena taken from a
/// small pool and given back as soon as the group is decoded or dropped. So
/// memory follows the shards that actually arrived, never their positions: a
/// tiny shard at position 255 costs 32 bytes, not a group's worth.
/// As soon as a group holds `data` shards, its missing data shards are
/// rebuilt and queued for [`poll_recovered`](Self::poll_recovered); the group
/// then drops any late shard. A shard whose seqid the group already holds
/// with other bytes (a sender that restarted its numbering, as a kcp-go
/// session re-created by its listener does) makes the group rebuild nothing:
/// Reed-Solomon over a mix of two senders' shards yields garbage that would
/// parse wherever their shards agree (conv, cmd, sn, len), and no checksum
/// covers a rebuilt packet.
///
/// The sender's shard ratio is not on the wire: the decoder starts from the
/// ratio it is given and, when a shard's kind contradicts it, relearns the
/// ratio from the recent seqids (a run of data shards framed by parity), as a
/// kcp-go receiver does. It adopts a learned shape only up to its shard limit
/// ([`DEFAULT_MAX_SHARDS`] unless set with
/// [`with_max_shards`](Self::with_max_shards)); larger ones are refused and
/// counted in [`FecStats::refused_shapes`].
///
/// # Memory
///
/// [`memory_usage`](Self::memory_usage) reports what a decoder holds. With a
/// limit of `S` shards per group, `D <= S - 1` data shards and `P` parity
/// shards, it never exceeds [`memory_bound`](Self::memory_bound)`(S)`:
/// four arenas of at most `D` shards of 1,504 bytes (reached only when that
/// many shards of up to 1,500 bytes arrived: the cost per received shard is
/// at most a kcp-go receiver's 1,500-byte buffer), `min(D, P)` recovered
/// packets, the codec's matrix (`S * D` bytes), inversion scratch
/// (`3 * D * D`) and decode plans (64 KiB, or one plan of `min(D, P) * D *
/// 32` bytes if larger), and a few bytes per shard position.
///
/// # Call contract
///
/// After every [`handle`](Self::handle), call `poll_recovered` until `None`:
/// a later recovery replaces undrained packets (counted in
/// [`FecStats::dropped_undrained`]).
pub struct FecDecoder {
    data: usize,
    parity: usize,
    total: usize,
    /// The largest `data + parity` a learned shape may have.
    max_shards: usize,
    paws: u32,
    /// Groups per seqid cycle: `paws / total`.
    groups: u32,
    /// Newest group id seen.
    newest: Option<u32>,
    slots: Vec<Slot>,
    /// Arenas not held by a slot.
    spare: Vec<Vec<u8>>,
    codec: Box<dyn ErasureCodec>,
    /// Rebuilt shards of the last recovery, `recovered_stride` apart.
    recovered: Vec<u8>,
    /// `(offset, len)` of the KCP packets in `recovered` not yet handed out.
    queue: Vec<(usize, usize)>,
    /// Next entry of `queue` to hand out.
    queue_next: usize,
    tuner: Tuner,
    retuning: bool,
    /// Shards handled since the shape was last installed: a different shape
    /// is adopted only after at least its own size of them (see `retune`).
    since_install: usize,
    /// The shape last seen in the stream itself (a framed group).
    learned: Option<(usize, usize)>,
    /// For confirming the initial shape: the previous shard, and which
    /// edges were seen where it puts them (bit 0 parity-to-data, bit 1
    /// data-to-parity).
    last_shard: Option<(u32, bool)>,
    edges: u8,
    stats: FecStats,
}

struct Slot {
    group: u32,
    used: bool,
    /// Rebuilt (or complete): late shards are dropped.
    decoded: bool,
    count: usize,
    data_count: usize,
    present: Vec<bool>,
    lens: Vec<u16>,
    /// Where each present shard starts in `arena`.
    at: Vec<usize>,
    /// Bytes between stored shards: the longest so far, rounded up to
    /// `STRIDE_STEP` (0 while empty).
    stride: usize,
    /// `count` shards in arrival order, `stride` apart; empty until first used.
    arena: Vec<u8>,
}

impl Slot {
    fn new(total: usize) -> Self {
        Self {
            group: 0,
            used: false,
            decoded: false,
            count: 0,
            data_count: 0,
            present: vec![false; total],
            lens: vec![0; total],
            at: vec![0; total],
            stride: 0,
            arena: Vec::new(),
        }
    }

    fn reset(&mut self, group: u32) {
        self.group = group;
        self.used = true;
        self.decoded = false;
        self.count = 0;
        self.data_count = 0;
        self.stride = 0;
        self.present.fill(false);
    }

    fn heap_bytes(&self) -> usize {
        self.arena.capacity()
            + self.present.capacity()
            + self.lens.capacity() * size_of::<u16>()
            + self.at.capacity() * size_of::<usize>()
    }

    /// Stores `shard` at position `pos` as the next arrival, widening the
    /// stride (and moving the shards stored so far) if it is the longest yet.
    /// The arena grows by doubling up to `full`.
    fn push(&mut self, pos: usize, shard: &[u8], full: usize) {
        let need = shard.len().max(1).div_ceil(STRIDE_STEP) * STRIDE_STEP;
        if need > self.stride {
            let old = self.stride;
            grow_arena(&mut self.arena, self.count * need, full);
            // Back to front, so no shard is overwritten before it moved.
            for k in (0..self.count).rev() {
                self.arena.copy_within(k * old..(k + 1) * old, k * need);
            }
            for (p, at) in self.present.iter().zip(self.at.iter_mut()) {
                if *p {
                    *at = *at / old.max(1) * need;
                }
            }
            self.stride = need;
        }
        let at = self.count * self.stride;
        grow_arena(&mut self.arena, at + self.stride, full);
        if let Some(dst) = self.arena.get_mut(at..at + shard.len()) {
            dst.copy_from_slice(shard);
        }
        self.present[pos] = true;
        self.lens[pos] = shard.len() as u16;
        self.at[pos] = at;
        self.count += 1;
    }
}

impl FecDecoder {
    /// A decoder expecting `initial_data` + `initial_parity` shards per group
    /// (it relearns the ratio if the sender's differs), following learned
    /// shapes of up to [`DEFAULT_MAX_SHARDS`] shards. An invalid shape (a
    /// zero, or more than 256 in total) starts from kcp-go's 1 + 1 guess.
    #[must_use]
    pub fn new(initial_data: usize, initial_parity: usize) -> Self {
        Self::with_max_shards(initial_data, initial_parity, DEFAULT_MAX_SHARDS)
    }

    /// As [`new`](Self::new), adopting learned shapes of at most
    /// `max_shards` shards (data + parity) per group: what this receiver is
    /// willing to hold for a peer. The initial shape is always accepted, so
    /// the limit is at least its size; it is at most 256 (kcp-go's own) and
    /// at least 2.
    #[must_use]
    pub fn with_max_shards(initial_data: usize, initial_parity: usize, max_shards: usize) -> Self {
        let (d, p) = if initial_data == 0
            || initial_parity == 0
            || initial_data + initial_parity > MAX_SHARDS
        {
            (1, 1)
        } else {
            (initial_data, initial_parity)
        };
        // A valid shape always builds; 1 + 1 is the last resort.
        let codec =
            VandermondeCodec::for_decoding(d, p).or_else(|| VandermondeCodec::for_decoding(1, 1));
        // Placeholder shape until `install`; nonzero so no arithmetic can divide by 0.
        let mut dec = Self {
            data: 1,
            parity: 1,
            total: 2,
            max_shards: max_shards.clamp(d + p, MAX_SHARDS),
            paws: paws(2),
            groups: paws(2) / 2,
            newest: None,
            slots: Vec::new(),
            spare: Vec::new(),
            codec: Box::new(NoCodec),
            recovered: Vec::new(),
            queue: Vec::new(),
            queue_next: 0,
            tuner: Tuner::new(),
            retuning: false,
            since_install: 0,
            learned: None,
            last_shard: None,
            edges: 0,
            stats: FecStats::default(),
        };
        if let Some(c) = codec {
            dec.install(Box::new(c));
        }
        dec
    }

    #[cfg(test)]
    pub(crate) fn with_codec(codec: Box<dyn ErasureCodec>) -> Self {
        let mut dec = Self::new(1, 1);
        dec.install(codec);
        dec
    }

    /// The largest `data + parity` this decoder adopts from the stream.
    #[must_use]
    pub fn max_shards(&self) -> usize {
        self.max_shards
    }

    /// Heap bytes this decoder holds now: stored shards, recovered packets,
    /// the ratio learner and its codec (the codec's matrix counted whole even
    /// when other sessions share it). At most
    /// [`memory_bound`](Self::memory_bound)`(self.max_shards())`.
    #[must_use]
    pub fn memory_usage(&self) -> usize {
        let slots: usize = self.slots.iter().map(Slot::heap_bytes).sum();
        let spare: usize = self.spare.iter().map(Vec::capacity).sum();
        slots
            + spare
            + self.spare.capacity() * size_of::<Vec<u8>>()
            + self.slots.capacity() * size_of::<Slot>()
            + self.recovered.capacity()
            + self.queue.capacity() * size_of::<(usize, usize)>()
            + (self.tuner.ring.capacity() + self.tuner.scratch.capacity())
                * size_of::<(u32, bool)>()
            + self.codec.heap_bytes()
    }

    /// The most [`memory_usage`](Self::memory_usage) can reach for a decoder
    /// limited to `max_shards` shards per group, whatever arrives (see
    /// [Memory](Self#memory)): 934,067 bytes for the default limit of 128
    /// (reached only by a peer sending about as many full-size shards),
    /// 154,192 for 13 (kcptun's 10 + 3), 2,486,192 for 256.
    #[must_use]
    pub fn memory_bound(max_shards: usize) -> usize {
        let s = max_shards.clamp(2, MAX_SHARDS);
        // The worst shape for each term: `d` data shards of `s`.
        (1..s)
            .map(|d| {
                let p = s - d;
                let m = d.min(p);
                let arenas = WINDOW * d * SHARD_STRIDE;
                let positions = WINDOW * s * (1 + size_of::<u16>() + size_of::<usize>())
                    + WINDOW * size_of::<Slot>()
                    + WINDOW * size_of::<Vec<u8>>();
                let recovered = m * SHARD_STRIDE + d * size_of::<(usize, usize)>();
                let plan = size_of::<usize>() * d + m * d * size_of::<NibbleTable>();
                let codec = s * d
                    + 3 * d * d
                    + s * size_of::<usize>()
                    + super::codec::PLAN_BUDGET.max(plan)
                    + plan
                    + 32 * 128;
                let tuner = 2 * SAMPLES * size_of::<(u32, bool)>();
                arenas + positions + recovered + codec + tuner
            })
            .max()
            .unwrap_or(0)
    }

    /// Switches to `codec`'s shape, dropping every stored group.
    fn install(&mut self, codec: Box<dyn ErasureCodec>) {
        let (d, p) = (codec.data_shards(), codec.parity_shards());
        self.data = d;
        self.parity = p;
        self.total = d + p;
        self.paws = paws(self.total);
        self.groups = self.paws / self.total as u32;
        self.newest = None;
        self.slots = (0..WINDOW).map(|_| Slot::new(d + p)).collect();
        self.spare = Vec::with_capacity(WINDOW);
        self.codec = codec;
        // Allocated at the first recovery.
        self.recovered = Vec::new();
        self.queue = Vec::with_capacity(d.min(p));
        self.queue_next = 0;
        self.since_install = 0;
    }

    /// The shard ratio currently assumed: `(data, parity)`.
    #[must_use]
    pub fn shape(&self) -> (usize, usize) {
        (self.data, self.parity)
    }

    /// The sender's shape as seen in the stream: `None` until a whole group
    /// framed by its neighbours has arrived, whether it confirmed the initial
    /// shape or replaced it. (The initial shape is only an assumption.)
    #[must_use]
    pub fn learned_shape(&self) -> Option<(usize, usize)> {
        self.learned
    }

    /// Counters: shards in, recovered, unrecoverable, drops by reason.
    #[must_use]
    pub fn stats(&self) -> &FecStats {
        &self.stats
    }

    /// Takes one FEC packet (data or parity shard, after decryption).
    ///
    /// For a data shard, the caller has already given its KCP bytes to the ARQ
    /// ([`data_payload`](super::data_payload)). Duplicate and stale shards are
    /// dropped and counted, not errors.
    ///
    /// # Errors
    /// A packet shorter than 8 bytes or longer than [`MAX_PACKET`], one that is
    /// not a data or parity shard, or one with a seqid beyond the wrap point.
    /// Each is counted in [`FecStats`] and otherwise ignored.
    pub fn handle(&mut self, packet: &[u8]) -> Result<(), FecDecodeError> {
        let len = packet.len();
        if len < super::DATA_HEADER {
            self.stats.dropped_malformed += 1;
            return Err(FecDecodeError::Truncated { len });
        }
        if len > MAX_PACKET {
            self.stats.dropped_malformed += 1;
            return Err(FecDecodeError::TooLong { len });
        }
        let (Some(seqid), Some(flag)) = (read_u32(packet, 0), read_u16(packet, 4)) else {
            self.stats.dropped_malformed += 1;
            return Err(FecDecodeError::Truncated { len });
        };
        let is_data = match flag {
            FLAG_DATA => true,
            FLAG_PARITY => false,
            _ => {
                self.stats.dropped_malformed += 1;
                return Err(FecDecodeError::NotFec { flag });
            }
        };
        if is_data {
            self.stats.data_in += 1;
        } else {
            self.stats.parity_in += 1;
        }
        self.tuner.sample(seqid, is_data);
        self.since_install = self.since_install.saturating_add(1);

        if seqid >= self.paws {
            self.stats.dropped_beyond_paws += 1;
            return Err(FecDecodeError::BeyondPaws { seqid });
        }
        let pos = (seqid % self.total as u32) as usize;
        if (pos < self.data) != is_data {
            self.retuning = true;
        }
        if self.retuning {
            self.stats.dropped_mismatch += 1;
            self.retune();
            return Ok(());
        }
        let group = seqid / self.total as u32;
        let Some(slot) = self.slot_for(group) else {
            self.stats.dropped_stale += 1;
            return Ok(());
        };
        self.store(slot, pos, is_data, packet);
        if self.learned.is_none() {
            self.confirm(seqid, pos, is_data);
        }
        Ok(())
    }

    /// Writes the next recovered KCP packet into `buf` and returns its length;
    /// `None` when none is waiting. Packets longer than `buf` are dropped and
    /// counted in [`FecStats::dropped_undrained`].
    pub fn poll_recovered(&mut self, buf: &mut [u8]) -> Option<usize> {
        while let Some(&(off, len)) = self.queue.get(self.queue_next) {
            self.queue_next += 1;
            let (Some(dst), Some(src)) = (buf.get_mut(..len), self.recovered.get(off..off + len))
            else {
                self.stats.dropped_undrained += 1;
                continue;
            };
            dst.copy_from_slice(src);
            return Some(len);
        }
        None
    }

    /// The slot holding `group`, claiming one if needed; `None` if the group
    /// is stale.
    fn slot_for(&mut self, group: u32) -> Option<usize> {
        let groups = u64::from(self.groups);
        let newest = match self.newest {
            None => {
                self.newest = Some(group);
                group
            }
            Some(n) => n,
        };
        let ahead = (u64::from(group) + groups - u64::from(newest)) % groups;
        if ahead != 0 && ahead < groups / 2 {
            self.newest = Some(group);
            self.evict_older_than(group);
        } else {
            let behind = (u64::from(newest) + groups - u64::from(group)) % groups;
            if behind >= WINDOW as u64 {
                return None;
            }
        }
        if let Some(i) = self.slots.iter().position(|s| s.used && s.group == group) {
            return Some(i);
        }
        let i = self.slots.iter().position(|s| !s.used)?;
        let slot = &mut self.slots[i];
        if slot.arena.capacity() == 0 {
            // Grown by `store` as shards arrive.
            slot.arena = self.spare.pop().unwrap_or_default();
        }
        slot.reset(group);
        Some(i)
    }

    /// Frees the slots of groups that fell out of the window behind `newest`.
    fn evict_older_than(&mut self, newest: u32) {
        let groups = u64::from(self.groups);
        for s in self.slots.iter_mut().filter(|s| s.used) {
            let behind = (u64::from(newest) + groups - u64::from(s.group)) % groups;
            if behind >= WINDOW as u64 {
                if !s.decoded && s.data_count < self.data {
                    self.stats.unrecoverable += 1;
                }
                s.used = false;
                if s.arena.capacity() != 0 {
                    self.spare.push(core::mem::take(&mut s.arena));
                }
            }
        }
    }

    fn store(&mut self, slot: usize, pos: usize, is_data: bool, packet: &[u8]) {
        let Some(s) = self.slots.get_mut(slot) else {
            return;
        };
        if s.decoded {
            self.stats.dropped_stale += 1;
            return;
        }
        let shard = packet.get(SHARD_OFFSET..).unwrap_or(&[]);
        if s.present.get(pos).copied().unwrap_or(true) {
            let held =
                s.at.get(pos)
                    .zip(s.lens.get(pos))
                    .and_then(|(&at, &l)| s.arena.get(at..at + usize::from(l)));
            if held.is_none_or(|h| h == shard) {
                self.stats.dropped_duplicate += 1;
                return;
            }
            // The same seqid with other bytes: a sender numbering its shards
            // from 0 again (a kcp-go listener's re-created session) or a
            // forgery. Parity rebuilds garbage from such a mix, and nothing
            // checks a rebuilt packet, so this group rebuilds nothing.
            self.stats.dropped_conflicting += 1;
            s.decoded = true;
            self.spare.push(core::mem::take(&mut s.arena));
            return;
        }
        // A group is decoded when its `data`-th shard arrives, so it never
        // stores more than `data` shards.
        s.push(pos, shard, self.data * SHARD_STRIDE);
        if is_data {
            s.data_count += 1;
        }
        if s.count < self.data {
            return;
        }
        s.decoded = true;
        if s.data_count == self.data {
            self.stats.full_groups += 1;
        } else {
            self.recover(slot);
        }
        // A decoded group only needs to remember that it was: its arena goes back.
        if let Some(s) = self.slots.get_mut(slot) {
            self.spare.push(core::mem::take(&mut s.arena));
        }
    }

    /// Rebuilds the missing data shards of a slot holding `data` shards.
    fn recover(&mut self, slot: usize) {
        let Some(s) = self.slots.get_mut(slot) else {
            return;
        };
        let len = s
            .lens
            .iter()
            .zip(&s.present)
            .filter(|(_, p)| **p)
            .map(|(l, _)| usize::from(*l))
            .max()
            .unwrap_or(0);
        // Zero-pad every stored shard to the longest (the stride covers it).
        for ((&l, &at), _) in s
            .lens
            .iter()
            .zip(&s.at)
            .zip(&s.present)
            .filter(|(_, p)| **p)
        {
            if let Some(tail) = s.arena.get_mut(at + usize::from(l)..at + len) {
                tail.fill(0);
            }
        }
        let missing = s.present.iter().take(self.data).filter(|p| !**p).count();
        // Rebuilt shards are `len` apart; at most `min(data, parity)` of them.
        let stride = len.max(1);
        let full = self.data.min(self.parity) * SHARD_STRIDE;
        grow_arena(&mut self.recovered, missing * stride, full);
        let undrained = self.queue.len() - self.queue_next;
        self.stats.dropped_undrained += undrained as u64;
        self.queue.clear();
        self.queue_next = 0;
        if self
            .codec
            .reconstruct_data(
                &s.arena,
                &s.at,
                len,
                &s.present,
                &mut self.recovered,
                stride,
            )
            .is_err()
        {
            self.stats.unrecoverable += 1;
            return;
        }
        for n in 0..missing {
            let off = n * stride;
            let size = read_u16(&self.recovered, off).map_or(0, usize::from);
            // kcp-go accepts `2 <= size <= len` and feeds `r[2..size]` to Input;
            // anything shorter than a KCP header (a deadline filler) cannot be a
            // KCP packet, so it is not handed out.
            if size < 2 + KCP_OVERHEAD || size > len {
                self.stats.dropped_bad_recovered += 1;
                continue;
            }
            self.queue.push((off + 2, size - 2));
            self.stats.recovered += 1;
        }
    }

    /// Confirms the assumed shape from the stream: once two consecutive
    /// seqids have shown the data-to-parity edge where this shape puts it
    /// (position `data`) and two others the parity-to-data edge (position
    /// 0), with no shard ever contradicting the shape, the sender's shape is
    /// this one (learned without the tuner's search).
    fn confirm(&mut self, seqid: u32, pos: usize, is_data: bool) {
        if let Some((prev, prev_data)) = self.last_shard
            && prev.wrapping_add(1) == seqid
            && prev_data != is_data
        {
            if is_data && pos == 0 {
                self.edges |= 1;
            } else if !is_data && pos == self.data {
                self.edges |= 2;
            }
        }
        self.last_shard = Some((seqid, is_data));
        if self.edges == 3 && self.stats.dropped_mismatch == 0 {
            self.learned = Some((self.data, self.parity));
        }
    }

    /// Tries to learn the sender's ratio from recent samples; adopts it (and
    /// leaves relearning mode) once one is found. A shape above the limit is
    /// refused: the decoder keeps its shape and goes on looking.
    ///
    /// A different shape is adopted only once at least `d + p` shards arrived
    /// since the last change. A sender that changed its shape has sent that
    /// many anyway (the framed group that shows it is longer), but a peer
    /// alternating between shapes otherwise makes the decoder build a codec
    /// (`O(total * data)` work and memory) every few tiny datagrams.
    fn retune(&mut self) {
        let Some((d, p)) = self.tuner.find_shape() else {
            return;
        };
        if d + p > self.max_shards {
            self.stats.refused_shapes += 1;
            return;
        }
        if (d, p) != (self.data, self.parity) && self.since_install < d + p {
            return;
        }
        self.retuning = false;
        self.learned = Some((d, p));
        if (d, p) == (self.data, self.parity) {
            return;
        }
        if let Some(c) = VandermondeCodec::for_decoding(d, p) {
            self.install(Box::new(c));
            self.stats.retunes += 1;
        }
    }
}

impl core::fmt::Debug for FecDecoder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FecDecoder")
            .field("data", &self.data)
            .field("parity", &self.parity)
            .field("max_shards", &self.max_shards)
            .field("newest", &self.newest)
            .field("retuning", &self.retuning)
            .finish_non_exhaustive()
    }
}

/// Placeholder codec for the instant before `install` (never used to code).
struct NoCodec;

impl ErasureCodec for NoCodec {
    fn data_shards(&self) -> usize {
        1
    }
    fn parity_shards(&self) -> usize {
        1
    }
    fn encode(
        &mut self,
        _: &[u8],
        _: usize,
        _: usize,
        _: &mut [u8],
    ) -> Result<(), super::codec::CodecError> {
        Err(super::codec::CodecError::BadArguments)
    }
    fn reconstruct_data(
        &mut self,
        _: &[u8],
        _: &[usize],
        _: usize,
        _: &[bool],
        _: &mut [u8],
        _: usize,
    ) -> Result<(), super::codec::CodecError> {
        Err(super::codec::CodecError::BadArguments)
    }
}

/// Samples kept for learning the ratio: two of the largest groups plus edges.
const SAMPLES: usize = 2 * MAX_SHARDS + 2;
/// While relearning, look for a shape every this many samples.
const TUNE_EVERY: u32 = 4;

/// Learns the sender's shard ratio from recent `(seqid, is_data)` samples.
///
/// The ring grows with the samples (to `SAMPLES`) and the sorting scratch is
/// made by the first search, so a decoder that saw a few shards holds a few
/// samples, not 8 KiB.
struct Tuner {
    ring: Vec<(u32, bool)>,
    scratch: Vec<(u32, bool)>,
    len: usize,
    head: usize,
    since_try: u32,
}

impl Tuner {
    fn new() -> Self {
        Self {
            ring: Vec::new(),
            scratch: Vec::new(),
            len: 0,
            head: 0,
            since_try: TUNE_EVERY,
        }
    }

    fn sample(&mut self, seqid: u32, is_data: bool) {
        if let Some(slot) = self.ring.get_mut(self.head) {
            *slot = (seqid, is_data);
        } else {
            if self.ring.len() == self.ring.capacity() {
                let want = (self.ring.capacity() * 2).clamp(16, SAMPLES);
                self.ring.reserve_exact(want - self.ring.len());
            }
            // Not full yet: `head == ring.len()`.
            self.ring.push((seqid, is_data));
        }
        self.head = (self.head + 1) % SAMPLES;
        self.len = (self.len + 1).min(SAMPLES);
        self.since_try = self.since_try.saturating_add(1);
    }

    /// Finds a complete group framed by its neighbours in consecutive seqids:
    /// `parity | data x d | parity x p | data` (or a group starting at seqid 0),
    /// whose start is a multiple of `d + p`.
    fn find_shape(&mut self) -> Option<(usize, usize)> {
        if self.since_try < TUNE_EVERY {
            return None;
        }
        self.since_try = 0;
        let n = self.len.min(self.ring.len());
        let &(last, _) = self.ring.get((self.head + SAMPLES - 1) % SAMPLES)?;
        if self.scratch.capacity() < SAMPLES {
            self.scratch.reserve_exact(SAMPLES);
        }
        self.scratch.clear();
        self.scratch
            .extend_from_slice(self.ring.get(..n).unwrap_or_default());
        let s = &mut self.scratch[..];
        // Order by signed distance from the last sample, so seqids within 2^31
        // either side of it (late arrivals included) sort right across the wrap.
        s.sort_unstable_by_key(|&(seq, _)| seq.wrapping_sub(last) as i32);
        // Drop duplicate seqids (kept: the first of each).
        let mut w = 0;
        for r in 0..n {
            if w == 0 || s[w - 1].0 != s[r].0 {
                s[w] = s[r];
                w += 1;
            }
        }
        let n = w;
        let s = &s[..n];
        let mut i = 0;
        while i < n {
            let (start, is_data) = s[i];
            let framed = i > 0 && s[i - 1] == (start.wrapping_sub(1), false);
            if !(is_data && (framed || start == 0)) {
                i += 1;
                continue;
            }
            // Data run.
            let mut j = i;
            while j + 1 < n && s[j + 1] == (s[j].0.wrapping_add(1), true) {
                j += 1;
            }
            let d = s[j].0.wrapping_sub(start) as usize + 1;
            // Parity run right after it.
            let mut k = j + 1;
            if k >= n || s[k] != (s[j].0.wrapping_add(1), false) {
                i = j + 1;
                continue;
            }
            while k + 1 < n && s[k + 1] == (s[k].0.wrapping_add(1), false) {
                k += 1;
            }
            let p = s[k].0.wrapping_sub(s[j].0) as usize;
            let closed = k + 1 < n && s[k + 1] == (s[k].0.wrapping_add(1), true);
            let total = d + p;
            if closed && total <= MAX_SHARDS && start % total as u32 == 0 {
                return Some((d, p));
            }
            i = k + 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a sender's `(seqid, is_data)` stream for `d + p` shards per group,
    /// starting at `first`, skipping `lost`, and returns the first shape found.
    fn learn(
        d: usize,
        p: usize,
        first: u32,
        count: usize,
        lost: &[u32],
        late: Option<u32>,
    ) -> Option<(usize, usize)> {
        let total = d + p;
        let wrap = paws(total);
        let mut t = Tuner::new();
        let mut seq = first;
        let mut found = None;
        for _ in 0..count {
            if !lost.contains(&seq) && Some(seq) != late {
                t.sample(seq, (seq % total as u32) < d as u32);
                found = found.or_else(|| t.find_shape());
            }
            seq = (seq + 1) % wrap;
        }
        if let Some(l) = late {
            t.sample(l, (l % total as u32) < d as u32);
            t.since_try = TUNE_EVERY;
            found = found.or_else(|| t.find_shape());
        }
        found
    }

    #[test]
    fn learns_the_ratio_from_a_framed_group() {
        assert_eq!(learn(10, 3, 0, 40, &[], None), Some((10, 3)));
        assert_eq!(learn(1, 1, 0, 10, &[], None), Some((1, 1)));
        assert_eq!(learn(200, 56, 0, 600, &[], None), Some((200, 56)));
        // Losses break runs; a later intact group still gives the answer.
        assert_eq!(learn(10, 3, 0, 60, &[5, 18, 31], None), Some((10, 3)));
        // Not enough to see a whole framed group.
        assert_eq!(learn(10, 3, 1, 12, &[], None), None);
    }

    #[test]
    fn learns_across_the_seqid_wrap_and_with_a_late_arrival() {
        let total = 13u32;
        let start = paws(13) - 2 * total + 4;
        assert_eq!(learn(10, 3, start, 40, &[], None), Some((10, 3)));
        // Only the late packet completes the framing; it sorts into place.
        let gap = 13 * 3 + 5;
        let found = learn(10, 3, 13 * 3 - 1, 18, &[], Some(gap));
        assert_eq!(found, Some((10, 3)));
    }
}
