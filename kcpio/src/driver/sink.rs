//! A session's datagram sink: received datagrams handed to the
//! application from the driver's own poll, with no task woken
//! ([`KcpStream::set_datagram_sink`](crate::KcpStream::set_datagram_sink)).
//!
//! Under the session's lock (the one the driver already holds to feed it)
//! the driver moves every queued datagram into its one [`SinkBatch`]; with
//! the session unlocked it calls the sink once with the batch. The batch
//! holds the whole receive queue ([`DATAGRAM_QUEUE_LEN`] datagrams,
//! [`DATAGRAM_QUEUE_BYTES`] bytes), so one take empties it; its buffer is
//! allocated once per driver, at the first session with a sink.

use crate::conn::{Conn, DATAGRAM_QUEUE_BYTES, DATAGRAM_QUEUE_LEN};

/// What the application installs: called with the datagrams of one take,
/// in the order the session delivered them.
pub(crate) type Sink = Box<dyn FnMut(&[&[u8]]) + Send>;

/// The datagrams of one take, back to back in one buffer: datagram `i` is
/// `buf[ends[i - 1]..ends[i]]`.
pub(crate) struct SinkBatch {
    buf: Vec<u8>,
    ends: [usize; DATAGRAM_QUEUE_LEN],
    len: usize,
}

impl SinkBatch {
    pub(crate) fn new() -> Self {
        Self {
            buf: Vec::new(),
            ends: [0; DATAGRAM_QUEUE_LEN],
            len: 0,
        }
    }

    /// Moves the datagrams `conn` holds into the batch (emptied first):
    /// true when it took any. One that does not fit what is left stays
    /// queued (the queue's bounds make that never happen).
    pub(crate) fn take(&mut self, conn: &mut Conn) -> bool {
        if self.buf.is_empty() {
            self.buf = vec![0; DATAGRAM_QUEUE_BYTES];
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

    /// Calls `sink` with the batch's datagrams.
    pub(crate) fn hand(&self, sink: &mut Sink) {
        let mut views: [&[u8]; DATAGRAM_QUEUE_LEN] = [&[]; DATAGRAM_QUEUE_LEN];
        let mut start = 0;
        for (v, &end) in views.iter_mut().zip(&self.ends).take(self.len) {
            *v = self.buf.get(start..end).unwrap_or_default();
            start = end;
        }
        sink(views.get(..self.len).unwrap_or_default());
    }
}
