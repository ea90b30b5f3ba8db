//! A session's datagram sink: received datagrams handed to the
//! application from the driver's own poll, with no task woken
//! ([`KcpStream::set_datagram_sink`](crate::KcpStream::set_datagram_sink)).
//!
//! Under the session's lock (the one the driver already holds to feed it)
//! the driver moves every queued datagram into its one [`SinkBatch`]; with
//! the session unlocked it calls the sink once with the batch. The batch
//! holds the largest receive queue a session keeps (with the FEC datagram
//! extension, [`DATAGRAM_FEC_RECV_QUEUE_LEN`] datagrams and
//! [`DATAGRAM_FEC_RECV_QUEUE_BYTES`] bytes; kcp-go OOB datagrams queue
//! fewer), so one take empties it whatever one packet rebuilt; its buffer
//! is allocated once per driver, at the first session with a sink.

use crate::conn::{
    Conn, DATAGRAM_FEC_RECV_QUEUE_BYTES, DATAGRAM_FEC_RECV_QUEUE_LEN, DATAGRAM_QUEUE_BYTES,
    DATAGRAM_QUEUE_LEN,
};

/// Datagrams one take holds at most: every receive queue's bound.
const BATCH_LEN: usize = max(DATAGRAM_FEC_RECV_QUEUE_LEN, DATAGRAM_QUEUE_LEN);
/// Payload bytes one take holds at most.
const BATCH_BYTES: usize = max(DATAGRAM_FEC_RECV_QUEUE_BYTES, DATAGRAM_QUEUE_BYTES);

/// Takes up to this many datagrams are handed over from a small array.
const SMALL: usize = 16;

const fn max(a: usize, b: usize) -> usize {
    if a > b { a } else { b }
}

/// What the application installs: called with the datagrams of one take,
/// in the order the session delivered them.
pub(crate) type Sink = Box<dyn FnMut(&[&[u8]]) + Send>;

/// The datagrams of one take, back to back in one buffer: datagram `i` is
/// `buf[ends[i - 1]..ends[i]]`.
pub(crate) struct SinkBatch {
    buf: Vec<u8>,
    ends: [usize; BATCH_LEN],
    len: usize,
}

impl SinkBatch {
    pub(crate) fn new() -> Self {
        Self {
            buf: Vec::new(),
            ends: [0; BATCH_LEN],
            len: 0,
        }
    }

    /// Moves the datagrams `conn` holds into the batch (emptied first):
    /// true when it took any. One that does not fit what is left stays
    /// queued (the queue's bounds make that never happen).
    pub(crate) fn take(&mut self, conn: &mut Conn) -> bool {
        if self.buf.is_empty() {
            self.buf = vec![0; BATCH_BYTES];
        }
        self.len = 0;
        let mut at = 0;
        while let Some(end) = self.ends.get_mut(self.len) {
            let Some(rest) = self.buf.get_mut(at..) else {
                break;
            };
            // `WouldBlock`: empty; `BufferTooSmall`: the rest waits; a
            // failed session's error is for its handles.
            let Ok(n) = conn.recv_datagram(rest) else {
                break;
            };
            at += n;
            *end = at;
            self.len += 1;
        }
        self.len > 0
    }

    /// Calls `sink` with the batch's datagrams. Most takes hold one or a
    /// few: their views are set up in a small array, not the largest
    /// take's (4 KiB of stores per call).
    pub(crate) fn hand(&self, sink: &mut Sink) {
        if self.len <= SMALL {
            self.hand_in::<SMALL>(sink);
        } else {
            self.hand_in::<BATCH_LEN>(sink);
        }
    }

    /// [`hand`](Self::hand) with views for up to `N` datagrams.
    fn hand_in<const N: usize>(&self, sink: &mut Sink) {
        let mut views: [&[u8]; N] = [&[]; N];
        let mut start = 0;
        for (v, &end) in views.iter_mut().zip(&self.ends).take(self.len) {
            *v = self.buf.get(start..end).unwrap_or_default();
            start = end;
        }
        sink(views.get(..self.len).unwrap_or_default());
    }
}
