//! Sequence-number-indexed rings for both directions, and the output queue.
//!
//! kcp-go keeps four containers (`snd_queue`, `snd_buf`, `rcv_buf` as a heap,
//! `rcv_queue`) and moves segments between them. Here each direction is one
//! ring indexed by `sn & mask`, so the moves become index bumps:
//!
//! * send: `[una, nxt)` is kcp-go's `snd_buf` (in flight), `[nxt, nxt + queued)`
//!   its `snd_queue` (accepted, no sn yet). Admitting a segment to the window is
//!   `nxt += 1`; `una` dropping acknowledged segments is `una += k`; looking up
//!   the segment an ACK names is one index. kcp-go walks `snd_buf` for that.
//! * receive: `[head, nxt)` is `rcv_queue` (in order, unread), slots flagged
//!   present in `[nxt, nxt + rcv_wnd)` are `rcv_buf` (out of order).
//!   Insertion and duplicate detection are one index; kcp-go uses a heap plus a
//!   map.
//!
//! The wire behaviour is unchanged: the same sets of segments, visited in the
//! same sn order. Rings start small and double up to their bound (twice the
//! window); each slot keeps its payload `Vec` once allocated, so a session in
//! steady state allocates nothing per segment. The send ring also shrinks:
//! [`SendRing::trim`], called about once a second, cuts it (dropping the
//! spare slots' payload buffers) to the power of two above the most
//! segments it held since the last call, so its memory follows what was in
//! flight lately, not the fullest queue it ever had.

use std::collections::VecDeque;

/// Per-segment send state (kcp-go `segment` minus the payload).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SendMeta {
    pub(crate) sn: u32,
    pub(crate) ts: u32,
    pub(crate) rto: u32,
    pub(crate) resendts: u32,
    pub(crate) xmit: u32,
    pub(crate) fastack: u32,
    pub(crate) una: u32,
    pub(crate) wnd: u16,
    pub(crate) frg: u8,
    pub(crate) acked: bool,
    /// A PUSH item for this segment waits in the output queue.
    pub(crate) queued_out: bool,
    /// Stream mode may still append to this (queued) segment.
    pub(crate) mergeable: bool,
    /// kcpio-only: `resendts` is a tail-loss probe deadline, not the RTO.
    pub(crate) probe: bool,
    /// Delivery state at the latest transmission (model controller only).
    pub(crate) stamp: super::cc::TxStamp,
}

/// The send ring: in-flight segments followed by queued ones.
#[derive(Debug)]
pub(crate) struct SendRing {
    metas: Vec<SendMeta>,
    datas: Vec<Vec<u8>>,
    mask: u32,
    /// kcp-go `snd_una`: sn of the oldest segment still in `snd_buf`.
    pub(crate) una: u32,
    /// kcp-go `snd_nxt`.
    pub(crate) nxt: u32,
    /// Segments queued behind `nxt` (kcp-go `snd_queue` length).
    pub(crate) queued: u32,
    /// Most segments held at once (in flight + queued).
    pub(crate) limit: u32,
    max_cap: usize,
    /// Most segments held at once since the last [`trim`](Self::trim).
    high: u32,
    /// Slots past the tail whose payload buffers are lent to a writer
    /// filling them outside the session's lock ([`lend`](Self::lend));
    /// while any are, nothing else is queued or merged.
    lent: u32,
}

const INITIAL_SLOTS: usize = 16;

impl SendRing {
    /// A ring holding `limit` segments now, whose limit may later be raised
    /// (self-sizing windows) up to `bound`; slots are still allocated on demand.
    pub(crate) fn with_bound(limit: u32, bound: u32) -> Self {
        let max_cap = (bound.max(limit) as usize).next_power_of_two();
        let cap = INITIAL_SLOTS.min(max_cap);
        Self {
            metas: vec![SendMeta::default(); cap],
            datas: (0..cap).map(|_| Vec::new()).collect(),
            mask: (cap - 1) as u32,
            una: 0,
            nxt: 0,
            queued: 0,
            limit,
            max_cap,
            high: 0,
            lent: 0,
        }
    }

    /// Segments in flight (`snd_buf` length).
    #[inline]
    pub(crate) fn in_flight(&self) -> u32 {
        self.nxt.wrapping_sub(self.una)
    }

    /// Segments in flight plus queued.
    #[inline]
    pub(crate) fn len(&self) -> u32 {
        self.in_flight().wrapping_add(self.queued)
    }

    /// Free segment slots before `limit` is reached.
    #[inline]
    pub(crate) fn free(&self) -> u32 {
        self.limit
            .saturating_sub(self.len().wrapping_add(self.lent))
    }

    #[inline]
    fn idx(&self, sn: u32) -> usize {
        (sn & self.mask) as usize
    }

    fn grow(&mut self) {
        let old_cap = self.metas.len();
        let cap = (old_cap * 2).min(self.max_cap);
        if cap <= old_cap {
            return;
        }
        self.resize(cap);
    }

    /// Shrinks the ring to what the most segments held since the last call
    /// need (rounded up to a power of two, at least [`INITIAL_SLOTS`]) when
    /// it is at least twice that: the spare slots' payload buffers are
    /// freed. A steady load keeps its slots (no allocation per segment); a
    /// burst's memory is given back once the load falls; a load that
    /// crosses a power of two back and forth resizes at most once a call.
    pub(crate) fn trim(&mut self) {
        let held = self.len().wrapping_add(self.lent);
        let need = (self.high.max(held) as usize)
            .next_power_of_two()
            .max(INITIAL_SLOTS);
        self.high = held;
        if self.metas.len() >= 2 * need {
            self.resize(need);
        }
    }

    /// Moves the ring into `cap` slots (a power of two, at least `len()`).
    fn resize(&mut self, cap: usize) {
        let old_cap = self.metas.len();
        let mut metas = vec![SendMeta::default(); cap];
        let mut datas: Vec<Vec<u8>> = (0..cap).map(|_| Vec::new()).collect();
        let new_mask = (cap - 1) as u32;
        // Walk the old slots in sn order from `una` (live ones first), so
        // spare payload buffers move along with the live ones while the new
        // ring has room for them; a smaller ring drops the rest.
        for k in 0..old_cap.min(cap) as u32 {
            let sn = self.una.wrapping_add(k);
            let from = (sn & self.mask) as usize;
            let to = (sn & new_mask) as usize;
            if let (Some(m), Some(d), Some(mt), Some(dt)) = (
                self.metas.get(from),
                self.datas.get_mut(from),
                metas.get_mut(to),
                datas.get_mut(to),
            ) {
                *mt = *m;
                *dt = core::mem::take(d);
            }
        }
        self.metas = metas;
        self.datas = datas;
        self.mask = new_mask;
    }

    /// Append a new queued segment holding `bytes` (caller checked `free() > 0`).
    /// Returns `false` if the ring is at its bound. A mergeable segment's
    /// buffer is given `mss` bytes at once, the most stream mode appends to
    /// it: growing by doubling would leave up to twice that in every slot.
    pub(crate) fn push_queued(
        &mut self,
        frg: u8,
        bytes: &[u8],
        mergeable: bool,
        mss: usize,
    ) -> bool {
        if self.free() == 0 || self.lent > 0 {
            return false;
        }
        if self.len() as usize >= self.metas.len() {
            self.grow();
            if self.len() as usize >= self.metas.len() {
                return false;
            }
        }
        let pos = self.una.wrapping_add(self.len());
        let i = self.idx(pos);
        if let (Some(m), Some(d)) = (self.metas.get_mut(i), self.datas.get_mut(i)) {
            *m = SendMeta {
                frg,
                mergeable,
                ..SendMeta::default()
            };
            d.clear();
            if mergeable && d.capacity() < mss {
                d.reserve_exact(mss);
            }
            d.extend_from_slice(bytes);
            self.queued += 1;
            self.high = self.high.max(self.len());
            true
        } else {
            false
        }
    }

    /// Payload of the last queued segment if stream mode may append to it.
    pub(crate) fn mergeable_tail(&mut self) -> Option<&mut Vec<u8>> {
        if self.queued == 0 || self.lent > 0 {
            return None;
        }
        let pos = self.una.wrapping_add(self.len()).wrapping_sub(1);
        let i = self.idx(pos);
        match (self.metas.get(i), self.datas.get_mut(i)) {
            (Some(m), Some(d)) if m.mergeable => Some(d),
            _ => None,
        }
    }

    /// A [`lend`](Self::lend) is out: nothing may be queued until it ends.
    pub(crate) fn lending(&self) -> bool {
        self.lent > 0
    }

    /// Lends the payload buffers of up to `bufs.len()` free slots past the
    /// tail (at most [`free`](Self::free)), swapped into `bufs` in order, so
    /// a writer can fill them without the session's lock. Returns how many;
    /// 0 when another lend is out or nothing is free. Until
    /// [`return_lent`](Self::return_lent) the slots count as held and
    /// nothing is queued or merged, so the tail stays where it is.
    pub(crate) fn lend(&mut self, bufs: &mut [Vec<u8>]) -> u32 {
        if self.lent > 0 {
            return 0;
        }
        let want = (self.free() as usize).min(bufs.len());
        let need = self.len() as usize + want;
        while self.metas.len() < need {
            let before = self.metas.len();
            self.grow();
            if self.metas.len() == before {
                break;
            }
        }
        let k = want.min(self.metas.len().saturating_sub(self.len() as usize));
        let tail = self.una.wrapping_add(self.len());
        for (j, b) in bufs.iter_mut().take(k).enumerate() {
            let i = self.idx(tail.wrapping_add(j as u32));
            if let Some(d) = self.datas.get_mut(i) {
                core::mem::swap(d, b);
            }
        }
        self.lent = k as u32;
        self.high = self.high.max(self.len().wrapping_add(self.lent));
        self.lent
    }

    /// Ends a [`lend`](Self::lend): the first `queue` of `bufs` (filled)
    /// become queued segments with `frg = 0`, the rest go back to their
    /// slots emptied. `bufs` holds what the slots held instead (the empty
    /// buffers the lend left there).
    pub(crate) fn return_lent(&mut self, bufs: &mut [Vec<u8>], queue: usize, mergeable: bool) {
        let lent = (self.lent as usize).min(bufs.len());
        let queue = queue.min(lent);
        let tail = self.una.wrapping_add(self.len());
        for (j, b) in bufs.iter_mut().take(lent).enumerate() {
            let i = self.idx(tail.wrapping_add(j as u32));
            if j >= queue {
                b.clear();
            }
            if let (Some(m), Some(d)) = (self.metas.get_mut(i), self.datas.get_mut(i)) {
                core::mem::swap(d, b);
                if j < queue {
                    *m = SendMeta {
                        mergeable,
                        ..SendMeta::default()
                    };
                }
            }
        }
        self.lent = 0;
        self.queued += queue as u32;
        self.high = self.high.max(self.len());
    }

    /// Bytes stream mode could still append to the tail segment.
    pub(crate) fn tail_room(&self, mss: usize) -> usize {
        if self.queued == 0 || self.lent > 0 {
            return 0;
        }
        let i = self.idx(self.una.wrapping_add(self.len()).wrapping_sub(1));
        match (self.metas.get(i), self.datas.get(i)) {
            (Some(m), Some(d)) if m.mergeable => mss.saturating_sub(d.len()),
            _ => 0,
        }
    }

    /// Give the head of the queue sequence number `nxt` (kcp-go phase 4).
    pub(crate) fn admit(&mut self) {
        if self.queued == 0 {
            return;
        }
        let sn = self.nxt;
        let i = self.idx(sn);
        if let Some(m) = self.metas.get_mut(i) {
            // kcp-go's queued segments carry ts = 0 until first sent.
            *m = SendMeta {
                sn,
                frg: m.frg,
                ..SendMeta::default()
            };
        }
        self.nxt = self.nxt.wrapping_add(1);
        self.queued -= 1;
    }

    /// Drop in-flight segments with `sn < una` (kcp-go `parse_una`); returns how many.
    pub(crate) fn remove_before(&mut self, una: u32) -> u32 {
        let mut n = 0;
        while self.una != self.nxt && (una.wrapping_sub(self.una) as i32) > 0 {
            self.una = self.una.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// [`remove_before`](Self::remove_before), calling `f` on each segment dropped.
    pub(crate) fn remove_before_with(&mut self, una: u32, mut f: impl FnMut(&SendMeta)) -> u32 {
        let mut n = 0;
        while self.una != self.nxt && (una.wrapping_sub(self.una) as i32) > 0 {
            if let Some(m) = self.metas.get(self.idx(self.una)) {
                f(m);
            }
            self.una = self.una.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// The in-flight segment `sn`, if any.
    #[inline]
    pub(crate) fn get_mut(&mut self, sn: u32) -> Option<&mut SendMeta> {
        if sn.wrapping_sub(self.una) >= self.in_flight() {
            return None;
        }
        let i = self.idx(sn);
        self.metas.get_mut(i)
    }

    /// Segment `sn` is in flight and not acknowledged yet.
    pub(crate) fn unacked(&self, sn: u32) -> bool {
        if sn.wrapping_sub(self.una) >= self.in_flight() {
            return false;
        }
        self.metas.get(self.idx(sn)).is_some_and(|m| !m.acked)
    }

    /// Metadata and payload of in-flight segment `sn`.
    pub(crate) fn get_with_data(&mut self, sn: u32) -> Option<(&mut SendMeta, &[u8])> {
        if sn.wrapping_sub(self.una) >= self.in_flight() {
            return None;
        }
        let i = self.idx(sn);
        match (self.metas.get_mut(i), self.datas.get(i)) {
            (Some(m), Some(d)) => Some((m, d.as_slice())),
            _ => None,
        }
    }

    /// Every in-flight segment in sn order (`snd_buf` order), as at most two
    /// contiguous slices of the ring, so the scan has no per-element index math.
    #[inline]
    pub(crate) fn in_flight_mut(&mut self) -> (&mut [SendMeta], &mut [SendMeta]) {
        let cap = self.metas.len();
        let start = self.idx(self.una);
        let len = (self.in_flight() as usize).min(cap);
        let first_len = len.min(cap - start);
        let (head, tail) = self.metas.split_at_mut(start);
        let first = tail.get_mut(..first_len).unwrap_or_default();
        let second = head.get_mut(..len - first_len).unwrap_or_default();
        (first, second)
    }

    /// Call `f` on in-flight segments with sn in `[una, end)`.
    #[inline]
    pub(crate) fn for_each_before(&mut self, end: u32, mut f: impl FnMut(&mut SendMeta)) {
        let mask = self.mask;
        let mut sn = self.una;
        while sn != end && sn != self.nxt {
            if let Some(m) = self.metas.get_mut((sn & mask) as usize) {
                f(m);
            }
            sn = sn.wrapping_add(1);
        }
    }

    /// Slots currently allocated (for bound checks in tests).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.metas.len()
    }

    /// Every heap capacity this ring holds, summed (changes iff it allocated).
    #[cfg(test)]
    pub(crate) fn heap_fingerprint(&self) -> usize {
        self.metas.capacity()
            + self.datas.capacity()
            + self.datas.iter().map(Vec::capacity).sum::<usize>()
    }
}

/// One slot of the receive ring.
#[derive(Debug, Default)]
struct RecvSlot {
    present: bool,
    frg: u8,
    data: Vec<u8>,
}

/// The receive ring: unread in-order segments followed by out-of-order ones.
#[derive(Debug)]
pub(crate) struct RecvRing {
    slots: Vec<RecvSlot>,
    mask: u32,
    /// sn of the oldest unread segment (head of kcp-go `rcv_queue`).
    pub(crate) head: u32,
    /// kcp-go `rcv_nxt`.
    pub(crate) nxt: u32,
    /// Bytes of the head segment already handed out by a partial read.
    pub(crate) head_off: usize,
    /// A message has been partly read; its remaining fragments are queued.
    pub(crate) in_message: bool,
    /// kcp-go `rcv_wnd`.
    pub(crate) wnd: u32,
    /// Out-of-order segments held (kcp-go `rcv_buf` length).
    pub(crate) buffered: u32,
    max_cap: usize,
}

impl RecvRing {
    /// A ring for window `wnd` now, which may grow up to `bound`; slots are
    /// still allocated on demand.
    pub(crate) fn with_bound(wnd: u32, bound: u32) -> Self {
        let max_cap = (2 * bound.max(wnd) as usize).next_power_of_two();
        let cap = INITIAL_SLOTS.min(max_cap);
        Self {
            slots: (0..cap).map(|_| RecvSlot::default()).collect(),
            mask: (cap - 1) as u32,
            head: 0,
            nxt: 0,
            head_off: 0,
            in_message: false,
            wnd,
            buffered: 0,
            max_cap,
        }
    }

    /// kcp-go `rcv_queue` length.
    #[inline]
    pub(crate) fn queue_len(&self) -> u32 {
        self.nxt.wrapping_sub(self.head)
    }

    fn grow_to(&mut self, span: usize) -> bool {
        while self.slots.len() < span {
            let cap = (self.slots.len() * 2).min(self.max_cap);
            if cap <= self.slots.len() {
                return false;
            }
            let mut slots: Vec<RecvSlot> = (0..cap).map(|_| RecvSlot::default()).collect();
            let new_mask = (cap - 1) as u32;
            for k in 0..self.slots.len() as u32 {
                let sn = self.head.wrapping_add(k);
                let from = (sn & self.mask) as usize;
                let to = (sn & new_mask) as usize;
                if let (Some(f), Some(t)) = (self.slots.get_mut(from), slots.get_mut(to)) {
                    core::mem::swap(f, t);
                }
            }
            self.slots = slots;
            self.mask = new_mask;
        }
        true
    }

    /// Store segment `sn` (caller checked `nxt <= sn < nxt + wnd`). Returns
    /// `true` if it was a duplicate (kcp-go `parse_data`'s "repeat").
    pub(crate) fn insert(&mut self, sn: u32, frg: u8, payload: &[u8]) -> bool {
        let span = sn.wrapping_sub(self.head) as usize + 1;
        if !self.grow_to(span) {
            return true;
        }
        let i = (sn & self.mask) as usize;
        match self.slots.get_mut(i) {
            Some(s) if s.present => true,
            Some(s) => {
                s.present = true;
                s.frg = frg;
                s.data.clear();
                s.data.extend_from_slice(payload);
                self.buffered += 1;
                false
            }
            None => true,
        }
    }

    /// Segment `sn` (at or after `nxt`) is already held out of order.
    pub(crate) fn holds(&self, sn: u32) -> bool {
        if sn.wrapping_sub(self.head) as usize >= self.slots.len() {
            return false;
        }
        self.slots
            .get((sn & self.mask) as usize)
            .is_some_and(|s| s.present)
    }

    /// Move in-order segments into the queue while it has room (kcp-go's
    /// `rcv_buf -> rcv_queue` loop).
    pub(crate) fn advance(&mut self) {
        while self.queue_len() < self.wnd {
            let i = (self.nxt & self.mask) as usize;
            match self.slots.get(i) {
                Some(s) if s.present && self.buffered > 0 => {
                    self.buffered -= 1;
                    self.nxt = self.nxt.wrapping_add(1);
                }
                _ => break,
            }
        }
    }

    /// While the queue is full and starts with an empty, unstarted
    /// single-segment message, drop that message and refill the queue.
    ///
    /// A byte-stream reader skips empty messages but is only woken by bytes
    /// ([`Kcp::readable`](super::Kcp::readable)), so a window filled with
    /// nothing but empty segments would otherwise stay closed for good.
    pub(crate) fn shed_empty_when_full(&mut self) {
        while self.queue_len() >= self.wnd && !self.in_message && self.head_off == 0 {
            match self.queued(0) {
                Some((0, [])) => {
                    self.pop_front();
                    self.advance();
                }
                _ => break,
            }
        }
    }

    /// `(frg, bytes)` of the k-th queued segment.
    #[inline]
    pub(crate) fn queued(&self, k: u32) -> Option<(u8, &[u8])> {
        if k >= self.queue_len() {
            return None;
        }
        let i = (self.head.wrapping_add(k) & self.mask) as usize;
        self.slots.get(i).map(|s| (s.frg, s.data.as_slice()))
    }

    /// Drop the head of the queue.
    pub(crate) fn pop_front(&mut self) {
        if self.queue_len() == 0 {
            return;
        }
        let i = (self.head & self.mask) as usize;
        if let Some(s) = self.slots.get_mut(i) {
            s.present = false;
        }
        self.head = self.head.wrapping_add(1);
        self.head_off = 0;
    }

    /// Slots currently allocated (for bound checks in tests).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Every heap capacity this ring holds, summed (changes iff it allocated).
    #[cfg(test)]
    pub(crate) fn heap_fingerprint(&self) -> usize {
        self.slots.capacity() + self.slots.iter().map(|s| s.data.capacity()).sum::<usize>()
    }
}

/// What the next datagrams will carry, decided by a flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutKind {
    Ack,
    Wask,
    Wins,
    /// The in-flight segment with this sn (header fields live in its meta).
    Push,
    /// The flush ended: close the current datagram.
    End,
}

/// One entry of the output queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OutItem {
    pub(crate) kind: OutKind,
    pub(crate) wnd: u16,
    pub(crate) ts: u32,
    pub(crate) sn: u32,
    pub(crate) una: u32,
}

/// Output decided by flushes and not yet written by `poll_transmit`.
///
/// PUSH items are at most one per in-flight segment (a flag on the segment
/// dedups them). Control items (ACK, WASK, WINS, End) are capped: if the
/// caller stops draining, further control items are dropped and counted,
/// which bounds memory under a flood.
#[derive(Debug)]
pub(crate) struct OutQueue {
    items: VecDeque<OutItem>,
    control: usize,
    control_cap: usize,
}

impl OutQueue {
    pub(crate) fn new(control_cap: usize) -> Self {
        Self {
            items: VecDeque::new(),
            control: 0,
            control_cap,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Items queued (segments, control items and End markers).
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Queue a control item; `false` if the cap dropped it.
    pub(crate) fn push_control(&mut self, item: OutItem) -> bool {
        if self.control >= self.control_cap {
            return false;
        }
        self.control += 1;
        self.items.push_back(item);
        true
    }

    /// Close the current datagram at the end of a flush (dropped when the
    /// previous item already is an End marker).
    pub(crate) fn push_end(&mut self) {
        match self.items.back() {
            None => {}
            Some(it) if it.kind == OutKind::End => {}
            Some(_) => {
                self.control += 1;
                self.items.push_back(OutItem {
                    kind: OutKind::End,
                    wnd: 0,
                    ts: 0,
                    sn: 0,
                    una: 0,
                });
            }
        }
    }

    pub(crate) fn push_segment(&mut self, sn: u32) {
        self.items.push_back(OutItem {
            kind: OutKind::Push,
            wnd: 0,
            ts: 0,
            sn,
            una: 0,
        });
    }

    pub(crate) fn front(&self) -> Option<&OutItem> {
        self.items.front()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&OutItem> {
        self.items.get(i)
    }

    /// Takes out the item at `i`, wherever it stands.
    pub(crate) fn remove(&mut self, i: usize) {
        if let Some(it) = self.items.remove(i)
            && it.kind != OutKind::Push
        {
            self.control = self.control.saturating_sub(1);
        }
    }

    pub(crate) fn pop(&mut self) {
        if let Some(it) = self.items.pop_front()
            && it.kind != OutKind::Push
        {
            self.control = self.control.saturating_sub(1);
        }
    }

    #[cfg(test)]
    pub(crate) fn heap_fingerprint(&self) -> usize {
        self.items.capacity()
    }
}
