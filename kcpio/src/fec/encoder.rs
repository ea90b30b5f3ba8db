//! The send side: data headers, seqids and parity.

use super::codec::{ErasureCodec, VandermondeCodec};
use super::{
    CONTINUITY_MS, DATA_HEADER, FLAG_DATA, FLAG_PARITY, FecError, FecStats, MAX_PACKET, MAX_SHARDS,
    PARITY_HEADER, SHARD_OFFSET, SHARD_STRIDE, grow_arena, paws,
};
use crate::arq::Timestamp;

/// Payload bytes of a group-deadline filler: a data shard of 12 bytes, the
/// smallest FEC packet kcp-go's session accepts (it checks
/// `len >= min(24, 8 + 4)` before looking at the flag). kcp-go stores it in its
/// decoder, so the group completes, and its `Input` refuses 4 bytes quietly.
const FILLER_PAYLOAD: usize = 4;

/// Payload bytes of a guard shard (see [`FecEncoder::set_guard`]): the
/// conversation id with every bit flipped, then zeros. With its 8-byte header
/// the packet is 24 bytes, the least kcp-go v5.6.1 hands to its FEC decoder,
/// so the guard keeps that decoder's view of the seqids unbroken; it is too
/// short to be a KCP packet, so every receiver's `Input` refuses it.
const GUARD_PAYLOAD: usize = 16;

/// The FEC encoder of one session: frames each KCP packet as a data shard
/// and, once `data_shards` of them form a group, computes its parity.
///
/// # Call contract
///
/// 1. [`encode`](Self::encode) every outgoing KCP packet (ACK-only ones too).
/// 2. After each `encode` (and each [`handle_timeout`](Self::handle_timeout)),
///    call [`poll_parity`](Self::poll_parity) until it returns `None` and send
///    each packet right away. Undrained packets are dropped when the next
///    group completes (counted in [`FecStats::parity_undrained`]).
///
/// Shards are copied into one arena owned by the encoder and parity is
/// computed into another. Both grow with use (the data arena by the shards
/// stored, the parity arena at the first group that emits parity), so an
/// idle session holds a shard or two; once they reach their full size
/// (after the first groups) nothing allocates any more.
pub struct FecEncoder {
    data: usize,
    parity: usize,
    paws: u32,
    /// Next seqid to assign.
    next: u32,
    /// Data shards in the current group.
    filled: usize,
    /// Reed-Solomon length of each data shard of the current group.
    lens: Vec<u16>,
    /// Longest shard of the current group.
    max_len: usize,
    /// When the previous data shard was encoded (kcp-go's `tsLatestPacket`).
    last_data: Option<Timestamp>,
    /// When the current group's first data shard was encoded.
    group_start: Option<Timestamp>,
    /// kcpio-only: close a group this many ms after its first shard.
    deadline: Option<u32>,
    /// The conversation a guard shard protects; `None`: no guard shards.
    guard: Option<u32>,
    /// Up to `data` shards, `SHARD_STRIDE` apart (grown as they are stored).
    arena: Vec<u8>,
    /// `parity` shards, `SHARD_STRIDE` apart; empty until a group emits parity.
    parity_arena: Vec<u8>,
    /// Fillers then parity of the last closed group, waiting for `poll_parity`.
    out: Pending,
    codec: Box<dyn ErasureCodec>,
    stats: FecStats,
}

/// Packets of a closed group not yet handed out.
#[derive(Clone, Copy, Default)]
struct Pending {
    /// Seqid of the first filler (fillers are consecutive).
    filler_seqid: u32,
    fillers: usize,
    /// The guard shard's seqid and conv, if the group has one (sent after
    /// the fillers).
    guard: Option<(u32, u32)>,
    /// Seqid of the first parity shard.
    parity_seqid: u32,
    /// Parity shards computed for the group.
    parity: usize,
    /// Parity shards already handed out.
    parity_done: usize,
    /// Parity length (the group's longest shard).
    len: usize,
}

impl Pending {
    fn remaining(&self) -> usize {
        self.fillers + usize::from(self.guard.is_some()) + (self.parity - self.parity_done)
    }
}

impl FecEncoder {
    /// An encoder for groups of `data_shards` data and `parity_shards` parity
    /// shards, seqids starting at 0.
    ///
    /// # Errors
    /// [`FecError::InvalidShape`] unless both are positive and their sum is at
    /// most 256.
    pub fn new(data_shards: usize, parity_shards: usize) -> Result<Self, FecError> {
        let codec =
            VandermondeCodec::new(data_shards, parity_shards).ok_or(FecError::InvalidShape {
                data: data_shards,
                parity: parity_shards,
            })?;
        Ok(Self::with_codec(Box::new(codec)))
    }

    pub(crate) fn with_codec(codec: Box<dyn ErasureCodec>) -> Self {
        let (data, parity) = (codec.data_shards(), codec.parity_shards());
        debug_assert!(data > 0 && parity > 0 && data + parity <= MAX_SHARDS);
        Self {
            data,
            parity,
            paws: paws(data + parity),
            next: 0,
            filled: 0,
            lens: vec![0; data],
            max_len: 0,
            last_data: None,
            group_start: None,
            deadline: None,
            guard: None,
            arena: Vec::new(),
            parity_arena: Vec::new(),
            out: Pending::default(),
            codec,
            stats: FecStats::default(),
        }
    }

    /// Data shards per group.
    #[must_use]
    pub fn data_shards(&self) -> usize {
        self.data
    }

    /// Parity shards per group.
    #[must_use]
    pub fn parity_shards(&self) -> usize {
        self.parity
    }

    /// The seqid the next data shard will carry.
    #[must_use]
    pub fn next_seqid(&self) -> u32 {
        self.next
    }

    /// Counters: `data_out`, `parity_out`, `parity_skipped`, `deadline_*`,
    /// `parity_undrained`.
    #[must_use]
    pub fn stats(&self) -> &FecStats {
        &self.stats
    }

    /// **kcpio-only option** (off by default): close a group that has not
    /// filled `deadline_ms` milliseconds after its first data shard.
    ///
    /// At low packet rates a group can take long to fill, and until it does
    /// no parity exists to rebuild a lost packet. With a deadline,
    /// [`handle_timeout`](Self::handle_timeout) completes the group with
    /// *filler* data shards (12-byte packets: the header with `size = 6` and
    /// four zero bytes) and emits its parity regardless of the continuity
    /// rule. Fillers cost seqids like any data shard. A kcp-go receiver stores
    /// them in its decoder, so its groups complete and recover as usual, and
    /// its KCP `Input` refuses the 4-byte payload without effect (it only
    /// counts `KCPInErrors`). kcpio's [`data_payload`](super::data_payload)
    /// and decoder skip them.
    ///
    /// `None` turns the option off (kcp-go's behaviour).
    pub fn set_group_deadline(&mut self, deadline_ms: Option<u32>) {
        self.deadline = deadline_ms;
    }

    /// The group deadline set by [`set_group_deadline`](Self::set_group_deadline).
    #[must_use]
    pub fn group_deadline(&self) -> Option<u32> {
        self.deadline
    }

    /// **Guard shards**, for a receiver that may decode with a wrong shape
    /// (off by default; [`Conn`](crate::Conn) turns them on for its conv
    /// until the peer is seen sending this encoder's shape).
    ///
    /// A kcp-go v5.6.1 receiver whose own FEC is off (or set to another
    /// shape) guesses 1 data + 1 parity and, until it has learned the
    /// sender's shape from the seqids, decodes with that guess: each parity
    /// shard is "rebuilt" as a data shard equal to itself and handed to KCP.
    /// Every parity row of this Reed-Solomon code sums to 1, so wherever the
    /// group's data shards agree (the size field, conv, cmd, frg, wnd, una
    /// and len of a run of full-size pushes) the parity carries the same
    /// bytes: the parity reads as a valid push for a blend of the group's
    /// sequence numbers with garbage payload, and that KCP delivers in place
    /// of the real segment.
    ///
    /// With `Some(conv)`, the last data shard of every group is a 24-byte
    /// guard whose conv field is `!conv`. A parity row's coefficients are all
    /// nonzero, so its conv field then differs from `conv` and every such
    /// misreading is refused at the conv check. Any receiver refuses the
    /// guard itself as too short for a KCP packet (kcp-go counts it in
    /// `KCPInErrors`) and stores it as the group's data shard, so groups
    /// complete and recover as usual. As a last line, while guards are on, a
    /// group whose parity would still read as a packet of `conv` (possible
    /// only with deadline fillers in it) sends no parity
    /// ([`FecStats::parity_guarded`]). Costs one data slot and one 24-byte
    /// packet per group (data shards 2 and up; with one data shard the
    /// parity equals the data and nothing needs guarding). Takes effect from
    /// the next group.
    pub fn set_guard(&mut self, conv: Option<u32>) {
        self.guard = conv.filter(|_| self.data >= 2);
    }

    /// The conv that guard shards protect ([`set_guard`](Self::set_guard)).
    #[must_use]
    pub fn guard(&self) -> Option<u32> {
        self.guard
    }

    /// Frames one KCP packet as a data shard.
    ///
    /// `buf[..8]` is free headroom and `buf[8..8 + kcp_len]` the KCP packet:
    /// writes the data header in place, remembers the shard and returns the
    /// FEC packet length `8 + kcp_len`. When the packet completes a group, the
    /// group's parity becomes available from [`poll_parity`](Self::poll_parity)
    /// unless kcp-go's continuity rule skips it: this shard came
    /// [`CONTINUITY_MS`] or more after the previous one (seqids still advance
    /// by the parity count).
    ///
    /// Returns 0 and consumes no seqid if `buf` is shorter than `8 + kcp_len`
    /// or `8 + kcp_len` exceeds [`MAX_PACKET`] (a caller bug).
    pub fn encode(&mut self, now: Timestamp, buf: &mut [u8], kcp_len: usize) -> usize {
        let len = DATA_HEADER + kcp_len;
        if len > MAX_PACKET || buf.len() < len {
            debug_assert!(
                false,
                "FecEncoder::encode: kcp_len {kcp_len} does not fit buf ({})",
                buf.len()
            );
            return 0;
        }
        self.write_data_header(buf, kcp_len);
        let Some(packet) = buf.get(SHARD_OFFSET..len) else {
            return 0;
        };
        self.store_shard(packet);
        self.stats.data_out += 1;
        if self.filled == 1 {
            self.group_start = Some(now);
        }
        let guard = if self.filled + 1 == self.data {
            self.store_guard()
        } else {
            None
        };
        if self.filled == self.data {
            let continuous = self
                .last_data
                .is_some_and(|t| now.diff(t) < CONTINUITY_MS as i32);
            self.close_group(continuous, 0, 0, guard);
        }
        self.last_data = Some(now);
        len
    }

    /// Writes the next packet of the last closed group into `buf` and returns
    /// its length: first any deadline fillers, then the parity shards, each
    /// `seqid | 0x00F2 | L parity bytes` (6 + L bytes, L the group's longest
    /// shard). `None` when nothing is pending.
    ///
    /// If `buf` is too short for the next packet, that packet is dropped and
    /// counted in [`FecStats::parity_undrained`].
    pub fn poll_parity(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            if self.out.remaining() == 0 {
                return None;
            }
            if self.out.fillers > 0 {
                let seqid = self.out.filler_seqid;
                self.out.filler_seqid = seqid.wrapping_add(1);
                self.out.fillers -= 1;
                let Some(n) = put_data_shard(buf, seqid, &filler_shard()) else {
                    self.stats.parity_undrained += 1;
                    continue;
                };
                self.stats.deadline_fillers += 1;
                return Some(n);
            }
            if let Some((seqid, conv)) = self.out.guard.take() {
                let Some(n) = put_data_shard(buf, seqid, &guard_shard(conv)) else {
                    self.stats.parity_undrained += 1;
                    continue;
                };
                self.stats.guard_shards += 1;
                return Some(n);
            }
            let k = self.out.parity_done;
            self.out.parity_done += 1;
            let seqid = self.out.parity_seqid.wrapping_add(k as u32);
            let len = self.out.len;
            let n = PARITY_HEADER + len;
            let (Some(dst), Some(src)) = (
                buf.get_mut(..n),
                self.parity_arena
                    .get(k * SHARD_STRIDE..k * SHARD_STRIDE + len),
            ) else {
                self.stats.parity_undrained += 1;
                continue;
            };
            dst[..4].copy_from_slice(&seqid.to_le_bytes());
            dst[4..6].copy_from_slice(&FLAG_PARITY.to_le_bytes());
            dst[PARITY_HEADER..].copy_from_slice(src);
            self.stats.parity_out += 1;
            return Some(n);
        }
    }

    /// kcpio-only: when the current group must be closed by its deadline, if a
    /// deadline is set and a group is partly filled. `None` otherwise.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let deadline = self.deadline?;
        if self.filled == 0 {
            return None;
        }
        Some(self.group_start?.add_millis(deadline))
    }

    /// kcpio-only: closes the current group if its deadline has passed (see
    /// [`set_group_deadline`](Self::set_group_deadline)); its fillers and parity
    /// then come from [`poll_parity`](Self::poll_parity). Does nothing without
    /// a deadline or a partly filled group.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let Some(due) = self.poll_timeout() else {
            return;
        };
        if !now.is_at_or_after(due) {
            return;
        }
        // With guards on, the group's last missing shard is its guard.
        let fillers = self.data - self.filled - usize::from(self.guard.is_some());
        let filler_seqid = self.next;
        for _ in 0..fillers {
            self.next = (self.next + 1) % self.paws;
            self.store_shard(&filler_shard());
        }
        let guard = self.store_guard();
        self.stats.deadline_groups += 1;
        self.close_group(true, fillers, filler_seqid, guard);
        self.last_data = Some(now);
    }

    fn write_data_header(&mut self, buf: &mut [u8], kcp_len: usize) {
        let seqid = self.next;
        self.next = (self.next + 1) % self.paws;
        if let Some(h) = buf.get_mut(..DATA_HEADER) {
            h[..4].copy_from_slice(&seqid.to_le_bytes());
            h[4..6].copy_from_slice(&FLAG_DATA.to_le_bytes());
            h[6..8].copy_from_slice(&((2 + kcp_len) as u16).to_le_bytes());
        }
    }

    /// With guards on, stores the group's guard shard under the next seqid
    /// and returns that seqid and the conv it guards.
    fn store_guard(&mut self) -> Option<(u32, u32)> {
        let conv = self.guard?;
        let seqid = self.next;
        self.next = (self.next + 1) % self.paws;
        self.store_shard(&guard_shard(conv));
        Some((seqid, conv))
    }

    /// Copies one Reed-Solomon shard (size field onward) into the arena.
    fn store_shard(&mut self, shard: &[u8]) {
        let i = self.filled;
        grow_arena(
            &mut self.arena,
            (i + 1) * SHARD_STRIDE,
            self.data * SHARD_STRIDE,
        );
        if let Some(dst) = self
            .arena
            .get_mut(i * SHARD_STRIDE..i * SHARD_STRIDE + shard.len())
        {
            dst.copy_from_slice(shard);
        }
        if let Some(l) = self.lens.get_mut(i) {
            *l = shard.len() as u16;
        }
        self.max_len = self.max_len.max(shard.len());
        self.filled += 1;
    }

    /// Ends the current group: parity (if `emit`) becomes pending after
    /// `fillers` filler shards numbered from `filler_seqid` and the `guard`
    /// shard (both sent whether or not parity is); seqids advance by the
    /// parity count either way.
    fn close_group(
        &mut self,
        emit: bool,
        fillers: usize,
        filler_seqid: u32,
        guard: Option<(u32, u32)>,
    ) {
        let undrained = self.out.remaining();
        if undrained > 0 {
            self.stats.parity_undrained += undrained as u64;
        }
        self.out = Pending::default();
        let parity_seqid = self.next;
        self.next = ((u64::from(self.next) + self.parity as u64) % u64::from(self.paws)) as u32;
        let len = self.max_len;
        let mut ok = false;
        if emit {
            let full = self.parity * SHARD_STRIDE;
            grow_arena(&mut self.parity_arena, full, full);
            for (i, &l) in self.lens.iter().enumerate().take(self.filled) {
                if let Some(tail) = self
                    .arena
                    .get_mut(i * SHARD_STRIDE + usize::from(l)..i * SHARD_STRIDE + len)
                {
                    tail.fill(0);
                }
            }
            ok = self
                .codec
                .encode(&self.arena, SHARD_STRIDE, len, &mut self.parity_arena)
                .is_ok();
            if ok && guard.is_some_and(|(_, conv)| self.parity_reads_as(conv, len)) {
                ok = false;
                self.stats.parity_guarded += 1;
            }
        }
        self.out = Pending {
            filler_seqid,
            fillers,
            guard,
            parity_seqid,
            parity: if ok { self.parity } else { 0 },
            parity_done: 0,
            len,
        };
        if !ok {
            self.stats.parity_skipped += 1;
        }
        self.filled = 0;
        self.max_len = 0;
        self.group_start = None;
    }

    /// Whether a parity shard of the group just encoded carries `conv` where
    /// a data shard carries its KCP packet's conv (so it could pass for a
    /// packet of that conversation).
    fn parity_reads_as(&self, conv: u32, len: usize) -> bool {
        let at = 2..6;
        len >= at.end
            && (0..self.parity).any(|k| {
                self.parity_arena
                    .get(k * SHARD_STRIDE + at.start..k * SHARD_STRIDE + at.end)
                    == Some(&conv.to_le_bytes()[..])
            })
    }

    #[cfg(test)]
    pub(crate) fn set_next_seqid(&mut self, seqid: u32) {
        self.next = seqid % self.paws;
    }
}

/// Writes a data shard the encoder made itself (filler or guard) into `buf`:
/// seqid, flag, then `shard` (size field onward). `None` if `buf` is short.
fn put_data_shard(buf: &mut [u8], seqid: u32, shard: &[u8]) -> Option<usize> {
    let n = SHARD_OFFSET + shard.len();
    let dst = buf.get_mut(..n)?;
    dst[..4].copy_from_slice(&seqid.to_le_bytes());
    dst[4..6].copy_from_slice(&FLAG_DATA.to_le_bytes());
    dst[SHARD_OFFSET..].copy_from_slice(shard);
    Some(n)
}

/// A deadline filler from its size field on: `size = 2 + 4`, zeros.
fn filler_shard() -> [u8; 2 + FILLER_PAYLOAD] {
    let mut shard = [0u8; 2 + FILLER_PAYLOAD];
    shard[..2].copy_from_slice(&((2 + FILLER_PAYLOAD) as u16).to_le_bytes());
    shard
}

/// A guard shard from its size field on: `size = 2 + 16`, `!conv`, zeros.
fn guard_shard(conv: u32) -> [u8; 2 + GUARD_PAYLOAD] {
    let mut shard = [0u8; 2 + GUARD_PAYLOAD];
    shard[..2].copy_from_slice(&((2 + GUARD_PAYLOAD) as u16).to_le_bytes());
    shard[2..6].copy_from_slice(&(!conv).to_le_bytes());
    shard
}

impl core::fmt::Debug for FecEncoder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FecEncoder")
            .field("data", &self.data)
            .field("parity", &self.parity)
            .field("next", &self.next)
            .field("filled", &self.filled)
            .field("deadline", &self.deadline)
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}
