//! The receive side both FEC extensions between kcpio ends share (the
//! datagram one, `dgram_fec`, and the adaptive stream FEC, `stream_fec`):
//! one arena holding a ring of received data bodies and the parity rows
//! waiting for their group, the parity slots (first seen shape wins, one
//! row per index, a full set evicts round robin), and gathering a group's
//! shards for a Reed-Solomon rebuild. What each extension does with a
//! rebuilt body, and what makes a group pointless to rebuild, stays with
//! the extension.

use super::loss_model::{Codecs, MAX_K, MAX_M};
use crate::fec::codec::ErasureCodec;
use crate::fec::grow_arena;

/// How far shard number `a` is ahead of `b` (negative: behind), across the
/// wrap of the 32-bit numbers.
pub(super) fn seq_diff(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

/// Arena stride of one shard body.
pub(super) const STRIDE: usize = 1504;
/// Received data shards kept for recovery.
pub(super) const RING: usize = 128;
/// Parity shards kept waiting for their group.
pub(super) const PSLOTS: usize = 32;
/// The arena's whole length: `RING` data bodies then `PSLOTS` parity rows.
const ARENA: usize = (RING + PSLOTS) * STRIDE;

/// A stored parity shard: its group's first data shard, `k`, `m`, its
/// index and length.
type ParitySlot = Option<(u32, u8, u8, u8, u16)>;

/// What became of a parity shard offered to [`RxShards::take_parity`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Parity {
    /// Its group is stored with another `(k, m)`: refused.
    Conflict,
    /// Its group already holds this index: ignored.
    Duplicate,
    /// Stored: the group may now be rebuilt.
    Stored,
}

/// A group's shards as stored: which are present, where in the arena,
/// how long.
pub(super) struct Group {
    pub(super) first: u32,
    pub(super) k: usize,
    pub(super) m: usize,
    pub(super) present: [bool; MAX_K + MAX_M],
    pub(super) at: [usize; MAX_K + MAX_M],
    pub(super) lens: [usize; MAX_K + MAX_M],
    /// The longest stored data body and parity row.
    pub(super) data_len: usize,
    pub(super) parity_len: usize,
}

impl Group {
    /// The missing data shards, in order: `(row of the rebuilt output,
    /// seqid)`.
    pub(super) fn missing(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.present[..self.k]
            .iter()
            .enumerate()
            .filter(|(_, p)| !**p)
            .enumerate()
            .map(|(row, (i, _))| (row, self.first.wrapping_add(i as u32)))
    }
}

/// What [`RxShards::gather`] found for a group.
#[expect(
    clippy::large_enum_variant,
    reason = "lives on the stack for one rebuild; boxing would allocate per group"
)]
pub(super) enum Gathered {
    /// No parity stored for it, or too few shards yet.
    Wait,
    /// Nothing to rebuild (none missing, or a missing one can no longer
    /// be): the caller clears its parity.
    Clear,
    Ready(Group),
}

/// The received shards kept for recovery.
pub(super) struct RxShards {
    /// `RING` data bodies then `PSLOTS` parity rows, `STRIDE` apart.
    pub(super) arena: Vec<u8>,
    pub(super) ring_seq: [Option<u32>; RING],
    pub(super) ring_len: [u16; RING],
    slots: [ParitySlot; PSLOTS],
    /// Bit `i` set while `slots[i]` holds a row: each data shard asks
    /// which stored groups hold it, and mostly none is stored.
    occupied: u32,
    victim: usize,
}

const _: () = assert!(
    PSLOTS <= 32,
    "`RxShards::occupied` has a bit per parity slot"
);

/// The parity slots a mask names, lowest first.
pub(super) struct Slots(u32);

impl Iterator for Slots {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(i)
    }
}

impl RxShards {
    pub(super) fn new() -> Self {
        Self {
            arena: Vec::new(),
            ring_seq: [None; RING],
            ring_len: [0; RING],
            slots: [None; PSLOTS],
            occupied: 0,
            victim: 0,
        }
    }

    /// Keeps data body `seq` in its ring slot (`body.len() <= STRIDE`),
    /// unpadded: [`rebuild`](Self::rebuild) zero-pads what it reads.
    pub(super) fn store(&mut self, seq: u32, body: &[u8]) {
        if body.len() > STRIDE {
            return;
        }
        grow_arena(&mut self.arena, ARENA, ARENA);
        let i = seq as usize % RING;
        if let Some(slot) = self.arena.get_mut(i * STRIDE..i * STRIDE + body.len()) {
            slot.copy_from_slice(body);
            self.ring_seq[i] = Some(seq);
            self.ring_len[i] = body.len() as u16;
        }
    }

    /// Keeps parity row `idx` (`body`, at most `STRIDE` bytes, unpadded)
    /// of group `first` shaped `(k, m)`, a group the caller found in the
    /// ring around `newest`, the newest data shard.
    pub(super) fn take_parity(
        &mut self,
        (first, k, m, idx): (u32, u8, u8, u8),
        body: &[u8],
        newest: u32,
    ) -> Parity {
        if body.len() > STRIDE {
            // Callers refuse these first; refused here too, never sliced.
            return Parity::Conflict;
        }
        self.expire(newest);
        let mine = self.slots.iter().flatten().filter(|s| s.0 == first);
        // Conflicting shapes for one group: keep the first seen.
        if mine.clone().any(|s| (s.1, s.2) != (k, m)) {
            return Parity::Conflict;
        }
        if mine.clone().any(|s| s.3 == idx) {
            return Parity::Duplicate;
        }
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                let v = self.victim;
                self.victim = (v + 1) % PSLOTS;
                v
            }
        };
        grow_arena(&mut self.arena, ARENA, ARENA);
        let at = (RING + slot) * STRIDE;
        if let Some(dst) = self.arena.get_mut(at..at + body.len()) {
            dst.copy_from_slice(body);
        }
        self.slots[slot] = Some((first, k, m, idx, body.len() as u16));
        self.occupied |= 1 << slot;
        Parity::Stored
    }

    /// The parity slots holding a row now, lowest first (a snapshot: a
    /// slot emptied meanwhile says so to [`group_holding`](Self::group_holding)).
    pub(super) fn occupied(&self) -> Slots {
        Slots(self.occupied)
    }

    /// The first shard of the group parity slot `i` waits for, when that
    /// group holds shard `seq`.
    pub(super) fn group_holding(&self, i: usize, seq: u32) -> Option<u32> {
        let (first, k, ..) = (*self.slots.get(i)?)?;
        let off = seq_diff(seq, first);
        (0..i32::from(k)).contains(&off).then_some(first)
    }

    /// Group `first`'s stored shards; `gone(s)` says a data shard no
    /// longer stored arrived once (so it cannot be rebuilt from).
    pub(super) fn gather(&self, first: u32, gone: impl Fn(u32) -> bool) -> Gathered {
        let Some((_, k, m, _, _)) = self.slots.iter().flatten().find(|s| s.0 == first).copied()
        else {
            return Gathered::Wait;
        };
        let mut g = Group {
            first,
            k: usize::from(k),
            m: usize::from(m),
            present: [false; MAX_K + MAX_M],
            at: [0; MAX_K + MAX_M],
            lens: [0; MAX_K + MAX_M],
            data_len: 0,
            parity_len: 0,
        };
        let mut missing = 0;
        for i in 0..g.k {
            let s = first.wrapping_add(i as u32);
            let r = s as usize % RING;
            if self.ring_seq[r] == Some(s) {
                g.present[i] = true;
                g.at[i] = r * STRIDE;
                g.lens[i] = usize::from(self.ring_len[r]);
                g.data_len = g.data_len.max(g.lens[i]);
            } else if gone(s) {
                return Gathered::Clear;
            } else {
                missing += 1;
            }
        }
        if missing == 0 {
            return Gathered::Clear;
        }
        let mut have = g.k - missing;
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some((f, _, _, idx, l)) = *slot
                && f == first
            {
                let j = g.k + usize::from(idx);
                g.present[j] = true;
                g.at[j] = (RING + i) * STRIDE;
                g.lens[j] = usize::from(l);
                g.parity_len = g.parity_len.max(usize::from(l));
                have += 1;
            }
        }
        if have < g.k {
            return Gathered::Wait;
        }
        Gathered::Ready(g)
    }

    /// Rebuilds `g`'s missing data shards, each read as `len` bytes, into
    /// `scratch` (`STRIDE` apart, grown to `rows` rows), and clears its
    /// parity; false when nothing was rebuilt: without a codec for its
    /// shape (the parity kept), or when the codec refused the shards
    /// (counted in `malformed`).
    pub(super) fn rebuild(
        &mut self,
        codecs: &mut Codecs,
        g: &Group,
        len: usize,
        (scratch, rows): (&mut Vec<u8>, usize),
        malformed: &mut u64,
    ) -> bool {
        grow_arena(scratch, rows * STRIDE, rows * STRIDE);
        let Some(codec) = codecs.decoder(g.k, g.m) else {
            return false;
        };
        // Stored unpadded: every shard read is zero-padded to `len` here,
        // once per rebuild rather than per shard stored.
        let n = g.k + g.m;
        for i in 0..n {
            let (at, l) = (g.at[i], g.lens[i]);
            if g.present[i]
                && l < len
                && let Some(t) = self.arena.get_mut(at + l..at + len)
            {
                t.fill(0);
            }
        }
        let ok = codec
            .reconstruct_data(
                &self.arena,
                &g.at[..n],
                len,
                &g.present[..n],
                scratch,
                STRIDE,
            )
            .is_ok();
        self.clear(g.first);
        if !ok {
            *malformed += 1;
        }
        ok
    }

    /// Drops the parity of groups out of the ring around `newest` (their
    /// first shard `RING` or more behind it, or more than `RING` ahead):
    /// a group that never completed held its slots until round-robin
    /// eviction, and once the numbers wrapped a new group with its
    /// `first` was refused (another shape) or fed its rows.
    fn expire(&mut self, newest: u32) {
        for i in self.occupied() {
            if let Some((first, ..)) = self.slots[i] {
                let behind = seq_diff(newest, first);
                if behind >= RING as i32 || behind < -(RING as i32) {
                    self.slots[i] = None;
                    self.occupied &= !(1 << i);
                }
            }
        }
    }

    /// Drops group `first`'s parity.
    pub(super) fn clear(&mut self, first: u32) {
        for i in self.occupied() {
            if self.slots[i].is_some_and(|s| s.0 == first) {
                self.slots[i] = None;
                self.occupied &= !(1 << i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_occupied_mask_names_exactly_the_stored_rows() {
        let mut rx = RxShards::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let first = (rng % 48) as u32 * 8;
            if rng >> 40 & 3 == 0 {
                rx.clear(first);
            } else {
                let idx = (rng >> 20) as u8 % 4;
                let _ = rx.take_parity((first, 8, 4, idx), &[1, 2, 3], first);
            }
            let stored: Vec<usize> = (0..PSLOTS).filter(|&i| rx.slots[i].is_some()).collect();
            assert_eq!(rx.occupied().collect::<Vec<_>>(), stored);
            for seq in [first, first + 7, first + 8] {
                let holding: Vec<_> = (0..PSLOTS)
                    .filter_map(|i| rx.group_holding(i, seq))
                    .collect();
                let masked: Vec<_> = rx
                    .occupied()
                    .filter_map(|i| rx.group_holding(i, seq))
                    .collect();
                assert_eq!(holding, masked);
            }
        }
    }

    #[test]
    fn parity_of_groups_out_of_the_ring_is_dropped_before_a_row_is_taken() {
        let mut rx = RxShards::new();
        assert_eq!(rx.take_parity((0, 4, 1, 0), &[1; 8], 3), Parity::Stored);
        assert_eq!(rx.take_parity((100, 4, 1, 0), &[1; 8], 103), Parity::Stored);
        assert_eq!(rx.occupied().count(), 2);
        // Group 0 is a ring behind 128: gone; 100 stays.
        assert_eq!(rx.take_parity((130, 4, 1, 0), &[1; 8], 130), Parity::Stored);
        assert_eq!(rx.occupied().count(), 2);
        assert!(rx.slots.iter().flatten().all(|s| s.0 != 0));
        // Once around: group 0 again, another shape, taken (130 is more
        // than a ring ahead of 1: gone; 100 could be a group ahead).
        assert_eq!(rx.take_parity((0, 2, 1, 0), &[1; 8], 1), Parity::Stored);
        let firsts: Vec<u32> = rx.slots.iter().flatten().map(|s| s.0).collect();
        assert_eq!(firsts.len(), 2, "{firsts:?}");
        assert!(firsts.contains(&0) && firsts.contains(&100), "{firsts:?}");
    }
}
