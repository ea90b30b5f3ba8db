//! The bounded queues of unreliable datagrams (kcp-go's out-of-band
//! packets) of one session: one each way, sized in datagrams and bytes,
//! storage grown on first use up to the bound and then reused.

use std::collections::VecDeque;
use std::time::Duration;

/// Datagrams a session queues at most in each direction: sent ones waiting
/// for [`Conn::poll_transmit`](super::Conn::poll_transmit), received ones
/// waiting for [`Conn::recv_datagram`](super::Conn::recv_datagram).
pub const DATAGRAM_QUEUE_LEN: usize = 64;

/// Payload bytes a session queues at most in each direction (the other
/// bound beside [`DATAGRAM_QUEUE_LEN`]). Both queues together hold at most
/// twice this, allocated only once datagrams are used.
pub const DATAGRAM_QUEUE_BYTES: usize = 32 * 1024;

/// Datagrams and payload bytes the send queue holds at most once the FEC
/// datagram extension is negotiated, while the path shows a standing
/// queue (the congested hold, paced at the path's rate). Its bound is then
/// time first: a datagram waits at most twice the group deadline (30 ms
/// at the default 15 ms), then it is dropped (`dropped_stale`); the count
/// and bytes only have to hold what a tunnelled TCP hands over within that
/// time (its slow start sends twice what the path carries). 1 MiB is 30
/// ms of pacing at 280 Mbit/s (at 100 Mbit/s the time bound binds at about
/// 375 kB); the 256 KiB before (21 ms at 100 Mbit/s) dropped a burst's
/// oldest datagrams for its newest (a full queue drops its oldest) with
/// a third of their time bound left. Storage is
/// allocated only as far as bursts fill it (doubling, then kept): at most
/// this many bytes plus 18 bytes per datagram of the count, about 1.02
/// MiB, per session.
pub const DATAGRAM_FEC_SEND_QUEUE_LEN: usize = 1024;
/// See [`DATAGRAM_FEC_SEND_QUEUE_LEN`].
pub const DATAGRAM_FEC_SEND_QUEUE_BYTES: usize = 1024 * 1024;

/// Datagrams and payload bytes the send queue holds at most once the FEC
/// datagram extension is negotiated, without a standing queue: a datagram
/// that waited half the group deadline then leaves whatever the pacing
/// bucket says, so a deeper queue would only release a larger burst into
/// the bottleneck at once (the field's WireGuard download on lossy9: with
/// [`DATAGRAM_FEC_SEND_QUEUE_BYTES`] here too, 2 calls of 5 overflowed the
/// bottleneck by over 5%; with this bound none of 11 by more than 1.9%).
pub const DATAGRAM_FEC_OPEN_QUEUE_LEN: usize = 256;
/// See [`DATAGRAM_FEC_OPEN_QUEUE_LEN`].
pub const DATAGRAM_FEC_OPEN_QUEUE_BYTES: usize = 256 * 1024;

/// Datagrams and payload bytes the receive queue holds at most once the
/// FEC datagram extension is negotiated: received datagrams wait for a
/// reader on a busy core rather than overflow 32 KiB within one receive
/// batch of the driver.
pub const DATAGRAM_FEC_RECV_QUEUE_LEN: usize = 256;
/// See [`DATAGRAM_FEC_RECV_QUEUE_LEN`].
pub const DATAGRAM_FEC_RECV_QUEUE_BYTES: usize = 256 * 1024;

/// One direction's queue: the payloads back to back in `bytes`, their
/// lengths in `lens`.
#[derive(Debug)]
pub(super) struct DatagramQueue {
    lens: VecDeque<u16>,
    bytes: VecDeque<u8>,
    /// When each was queued (the caller's clock).
    times: VecDeque<Duration>,
    /// The bounds: datagrams and payload bytes.
    max_len: usize,
    max_bytes: usize,
}

impl Default for DatagramQueue {
    fn default() -> Self {
        Self {
            lens: VecDeque::new(),
            bytes: VecDeque::new(),
            times: VecDeque::new(),
            max_len: DATAGRAM_QUEUE_LEN,
            max_bytes: DATAGRAM_QUEUE_BYTES,
        }
    }
}

impl DatagramQueue {
    /// Raises the bounds to `len` datagrams and `bytes` payload bytes
    /// (never lowers them: what is queued stays within).
    pub(super) fn raise_bounds(&mut self, len: usize, bytes: usize) {
        self.max_len = self.max_len.max(len);
        self.max_bytes = self.max_bytes.max(bytes);
    }

    /// Sets the bounds to `len` datagrams and `bytes` payload bytes; what
    /// is queued beyond lowered bounds stays until it leaves (a push then
    /// finds no room).
    pub(super) fn set_bounds(&mut self, len: usize, bytes: usize) {
        self.max_len = len;
        self.max_bytes = bytes;
    }

    /// Whether a payload of `len` bytes fits now.
    pub(super) fn has_room(&self, len: usize) -> bool {
        self.lens.len() < self.max_len && self.bytes.len().saturating_add(len) <= self.max_bytes
    }

    /// Appends `payload`; false (nothing taken) when it does not fit.
    #[cfg(test)]
    pub(super) fn push(&mut self, payload: &[u8]) -> bool {
        self.push_at(payload, Duration::ZERO)
    }

    /// Appends `payload` queued at `now`; false (nothing taken) when it
    /// does not fit.
    pub(super) fn push_at(&mut self, payload: &[u8], now: Duration) -> bool {
        if !self.has_room(payload.len()) {
            return false;
        }
        let Ok(len) = u16::try_from(payload.len()) else {
            return false;
        };
        let need = self.bytes.len() + payload.len();
        if self.bytes.capacity() < need {
            // Grow by doubling, never past the bound: no reallocation once
            // the queue has been full once.
            let want = (self.bytes.capacity() * 2).clamp(need, self.max_bytes);
            self.bytes.reserve_exact(want - self.bytes.len());
        }
        if self.lens.capacity() == self.lens.len() {
            let want = (self.lens.capacity() * 2).clamp(self.lens.len() + 1, self.max_len);
            self.lens.reserve_exact(want - self.lens.len());
        }
        if self.times.capacity() == self.times.len() {
            let want = (self.times.capacity() * 2).clamp(self.times.len() + 1, self.max_len);
            self.times.reserve_exact(want - self.times.len());
        }
        self.bytes.extend(payload);
        self.lens.push_back(len);
        self.times.push_back(now);
        true
    }

    /// The length of the oldest payload.
    pub(super) fn front_len(&self) -> Option<usize> {
        self.lens.front().map(|&l| usize::from(l))
    }

    /// Moves the oldest payload into the front of `buf`; `None` when the
    /// queue is empty or `buf` is too short (nothing taken then).
    pub(super) fn pop_into(&mut self, buf: &mut [u8]) -> Option<usize> {
        let len = self.front_len()?;
        let dst = buf.get_mut(..len)?;
        let (a, b) = self.bytes.as_slices();
        let from_a = a.len().min(len);
        let (dst_a, dst_b) = dst.split_at_mut(from_a);
        dst_a.copy_from_slice(a.get(..from_a)?);
        dst_b.copy_from_slice(b.get(..len - from_a)?);
        self.bytes.drain(..len);
        self.lens.pop_front();
        self.times.pop_front();
        Some(len)
    }

    /// When the oldest payload was queued.
    pub(super) fn front_time(&self) -> Option<Duration> {
        self.times.front().copied()
    }

    /// Drops the oldest payload.
    pub(super) fn drop_front(&mut self) {
        if let Some(len) = self.lens.pop_front() {
            self.bytes.drain(..usize::from(len));
            self.times.pop_front();
        }
    }

    /// Datagrams queued.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lens.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// Bytes of storage held (the memory bound's check).
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.bytes.capacity() + 2 * self.lens.capacity() + 16 * self.times.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_across_the_ring_wrap() {
        let mut q = DatagramQueue::default();
        let mut out = [0u8; 1500];
        for round in 0..200u32 {
            let len = (round as usize * 37) % 1400;
            let payload: Vec<u8> = (0..len).map(|i| (i as u32 ^ round) as u8).collect();
            assert!(q.push(&payload));
            if round % 3 != 0 {
                continue;
            }
            while let Some(n) = q.front_len() {
                assert_eq!(q.pop_into(&mut out[..n]), Some(n));
            }
        }
        assert!(q.capacity() <= DATAGRAM_QUEUE_BYTES + 18 * DATAGRAM_QUEUE_LEN);
    }

    #[test]
    fn bounded_in_datagrams_and_bytes() {
        let mut q = DatagramQueue::default();
        for _ in 0..DATAGRAM_QUEUE_LEN {
            assert!(q.push(&[]));
        }
        assert!(!q.push(&[]), "the count bound");
        let mut q = DatagramQueue::default();
        let big = [7u8; 1000];
        let fit = DATAGRAM_QUEUE_BYTES / big.len();
        for _ in 0..fit {
            assert!(q.push(&big));
        }
        assert!(!q.push(&big), "the byte bound");
        assert!(q.push(&big[..DATAGRAM_QUEUE_BYTES - fit * big.len()]));
        assert_eq!(q.len(), fit + 1);
        assert!(q.capacity() <= DATAGRAM_QUEUE_BYTES + 18 * DATAGRAM_QUEUE_LEN);
        // A short buffer takes nothing.
        let mut small = [0u8; 999];
        assert_eq!(q.pop_into(&mut small), None);
        assert_eq!(q.len(), fit + 1);
        let mut buf = [0u8; 1000];
        assert_eq!(q.pop_into(&mut buf), Some(1000));
        assert_eq!(buf, big);
    }
}
