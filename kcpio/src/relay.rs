//! [`RelaySocket`]: a UDP socket for programs that relay datagrams between
//! local applications and KCP sessions (the tunnel's UDP mode).

use std::future::poll_fn;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::task::{Context, Poll};

use crate::sys::{BATCH_SIZE, RecvMeta, Transmit, UdpSock, UdpState};

/// A UDP socket for relaying datagrams, cheaper per datagram than
/// `tokio::net::UdpSocket`:
///
/// - it receives many datagrams per system call (`recvmmsg` on Linux), and
///   a batch that found the queue empty ends the wait for readability
///   without one more call that would fail with `EAGAIN`;
/// - the runtime watches it for readability only. tokio's socket asks
///   epoll for writability too, which the kernel signals each time a sent
///   datagram leaves the send buffer: one more wake-up of the runtime per
///   datagram sent. A relay does not wait for room to send: a datagram
///   that finds the send buffer full is dropped, as the network would
///   ([`try_send_to`](Self::try_send_to) says `WouldBlock`).
///
/// No offloads (GRO, GSO): each received datagram is its own buffer, and
/// [`try_send_to_many`](Self::try_send_to_many) sends many datagrams, to
/// any destinations, per system call (`sendmmsg` on Linux).
pub struct RelaySocket {
    sock: UdpSock,
    state: UdpState,
}

impl std::fmt::Debug for RelaySocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelaySocket")
            .field("local", &self.local_addr().ok())
            .finish_non_exhaustive()
    }
}

impl RelaySocket {
    /// The length [`recv_from_many`](Self::recv_from_many) reports for a
    /// datagram longer than its buffer: its bytes were cut, drop it.
    pub const TRUNCATED: usize = usize::MAX;

    /// Takes a bound (and perhaps connected) socket, making it
    /// non-blocking. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a socket that is not UDP; the OS error when it
    /// cannot be made non-blocking or registered with the runtime.
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<Self> {
        let state = UdpState::without_offloads(socket2::SockRef::from(&socket))?;
        Ok(Self {
            sock: UdpSock::new(socket)?,
            state,
        })
    }

    /// The local address.
    ///
    /// # Errors
    ///
    /// The OS error.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Receives what is queued, up to `bufs.len()`, `from.len()` and 32
    /// datagrams, waiting until at least one is: datagram `i` is
    /// `bufs[i][..from[i].0]`, sent by `from[i].1`. Returns how many.
    /// A datagram longer than its buffer comes back with length 0, as an
    /// empty one does (buffers of 65,535 bytes fit any UDP datagram).
    ///
    /// # Errors
    ///
    /// An OS error (on a connected socket, `ConnectionRefused` after the
    /// peer's port was unreachable); the socket still works.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: datagrams are taken only when they are returned.
    pub async fn recv_from_many(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        from: &mut [(usize, SocketAddr)],
    ) -> io::Result<usize> {
        poll_fn(|cx| self.poll_recv_from_many(cx, bufs, from)).await
    }

    /// [`recv_from_many`](Self::recv_from_many) as a poll: `Pending` keeps
    /// `cx`'s waker (one reader at a time).
    ///
    /// # Errors
    ///
    /// As [`recv_from_many`](Self::recv_from_many).
    pub fn poll_recv_from_many(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        from: &mut [(usize, SocketAddr)],
    ) -> Poll<io::Result<usize>> {
        let n = bufs.len().min(from.len()).min(BATCH_SIZE);
        if n == 0 {
            return Poll::Ready(Ok(0));
        }
        let state = &self.state;
        let mut meta = [RecvMeta::default(); BATCH_SIZE];
        loop {
            let r = self.sock.poll_recv(cx, |s| {
                let k = state.recv(
                    socket2::SockRef::from(s),
                    bufs.get_mut(..n).unwrap_or_default(),
                    &mut meta[..n],
                )?;
                // A short batch found the queue empty.
                Ok((
                    k,
                    k < n.min(state.batch_size()) && !state.recv_error_pending(),
                ))
            });
            match r {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(k)) => {
                    for (m, slot) in meta.iter().take(k).zip(from.iter_mut()) {
                        let len = if m.truncated { Self::TRUNCATED } else { m.len };
                        *slot = (len, m.addr);
                    }
                    if k > 0 {
                        return Poll::Ready(Ok(k));
                    }
                }
            }
        }
    }

    /// Sends `buf` to `target` now, or says `WouldBlock` when the send
    /// buffer is full (never waits).
    ///
    /// # Errors
    ///
    /// `WouldBlock` as above; any OS error.
    pub fn try_send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        self.sock.get().send_to(buf, target)
    }

    /// Sends the datagrams `msgs[i].0` to `msgs[i].1`, in order, as many as
    /// the socket takes now, in one system call per 32 (never waits).
    /// Returns `Ok(n)`: `msgs[..n]` were sent (`n >= 1` for a non-empty
    /// `msgs`), and `msgs[n..]` were not: call again with them, and the
    /// error that stopped the batch, if any, comes back about `msgs[n]`.
    ///
    /// # Errors
    ///
    /// An error is always about `msgs[0]`, which was **not** sent, and
    /// nothing after it was tried: `WouldBlock` when the send buffer is
    /// full, or the OS error for that datagram (or an earlier one's
    /// asynchronous report on a connected socket). The socket still works:
    /// drop `msgs[0]` (or retry it) and go on with `msgs[1..]`.
    pub fn try_send_to_many(&self, msgs: &[(&[u8], SocketAddr)]) -> io::Result<usize> {
        let mut sent = 0;
        for chunk in msgs.chunks(BATCH_SIZE) {
            let mut transmits = [Transmit {
                destination: SocketAddr::from(([0, 0, 0, 0], 0)),
                contents: &[],
                segment_size: None,
            }; BATCH_SIZE];
            for (t, &(contents, destination)) in transmits.iter_mut().zip(chunk) {
                *t = Transmit {
                    destination,
                    contents,
                    segment_size: None,
                };
            }
            let batch = transmits.get(..chunk.len()).unwrap_or_default();
            let r = self
                .state
                .send(socket2::SockRef::from(self.sock.get()), batch);
            match r {
                Ok(n) => {
                    sent += n;
                    if n < chunk.len() {
                        return Ok(sent);
                    }
                }
                Err(e) if sent == 0 => return Err(e),
                // Reported by the next call, about its first datagram.
                Err(_) => return Ok(sent),
            }
        }
        Ok(sent)
    }

    /// Sends `buf` to the connected peer now, or says `WouldBlock`.
    ///
    /// # Errors
    ///
    /// As [`try_send_to`](Self::try_send_to); `NotConnected` when the
    /// socket is not connected.
    pub fn try_send(&self, buf: &[u8]) -> io::Result<usize> {
        self.sock.get().send(buf)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// One call takes every queued datagram (up to the batch), each with
    /// its length and sender, in order; later datagrams wake the next call.
    #[tokio::test]
    async fn a_batch_takes_the_queued_datagrams_in_order_with_their_senders() {
        let sock =
            RelaySocket::from_std(std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).unwrap();
        let to = sock.local_addr().unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        let mut store = vec![[0u8; 64]; 40];
        let mut from = [(0, unspecified); 40];
        for i in 0..40u8 {
            peer.send_to(&vec![i; usize::from(i)], to).unwrap();
        }
        let mut seen = 0usize;
        while seen < 40 {
            let mut bufs: Vec<IoSliceMut<'_>> =
                store.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            let got = tokio::time::timeout(
                Duration::from_secs(5),
                sock.recv_from_many(&mut bufs, &mut from),
            )
            .await
            .expect("queued datagrams are returned")
            .unwrap();
            drop(bufs);
            assert!((1..=32).contains(&got), "{got} in one call");
            for k in 0..got {
                let want = u8::try_from(seen + k).unwrap();
                assert_eq!(from[k], (usize::from(want), peer.local_addr().unwrap()));
                assert!(store[k][..from[k].0].iter().all(|&b| b == want));
            }
            seen += got;
        }
        assert_eq!(seen, 40);
        // Sent without waiting, to the peer.
        assert_eq!(
            sock.try_send_to(b"back", peer.local_addr().unwrap())
                .unwrap(),
            4
        );
        let mut b = [0u8; 8];
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(peer.recv(&mut b).unwrap(), 4);
    }

    /// A datagram longer than its buffer is reported as `TRUNCATED`, not
    /// as an empty one (which keeps its length 0), and the datagrams
    /// around it are intact.
    #[tokio::test]
    async fn a_datagram_longer_than_its_buffer_is_reported_truncated() {
        let sock =
            RelaySocket::from_std(std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).unwrap();
        let to = sock.local_addr().unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for d in [&[1u8; 8][..], &[2; 9], &[], &[4; 3]] {
            peer.send_to(d, to).unwrap();
        }
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        let mut store = [[0u8; 8]; 4];
        let mut from = [(0, unspecified); 4];
        let mut lens = Vec::new();
        while lens.len() < 4 {
            let mut bufs: Vec<IoSliceMut<'_>> =
                store.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            let got = tokio::time::timeout(
                Duration::from_secs(5),
                sock.recv_from_many(&mut bufs[..4 - lens.len()], &mut from),
            )
            .await
            .expect("queued datagrams are returned")
            .unwrap();
            lens.extend(from.iter().take(got).map(|f| f.0));
        }
        assert_eq!(lens, [8, RelaySocket::TRUNCATED, 0, 3]);
    }

    /// One call sends a batch to several destinations, in order; an empty
    /// batch sends nothing.
    #[tokio::test]
    async fn a_batch_goes_to_each_destination_in_order() {
        let sock =
            RelaySocket::from_std(std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).unwrap();
        let peers: Vec<_> = (0..2)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs: Vec<_> = peers.iter().map(|p| p.local_addr().unwrap()).collect();
        assert_eq!(sock.try_send_to_many(&[]).unwrap(), 0);
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; usize::from(i) + 1]).collect();
        let msgs: Vec<(&[u8], SocketAddr)> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_slice(), addrs[i % 2]))
            .collect();
        let mut at = 0;
        while at < msgs.len() {
            let n = sock.try_send_to_many(&msgs[at..]).unwrap();
            assert!(n >= 1);
            at += n;
        }
        for (k, peer) in peers.iter().enumerate() {
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 64];
            for i in (k..40).step_by(2) {
                let n = peer.recv(&mut b).unwrap();
                assert_eq!(&b[..n], payloads[i].as_slice(), "datagram {i} at peer {k}");
            }
        }
    }
}
