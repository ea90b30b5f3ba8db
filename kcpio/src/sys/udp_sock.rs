//! A driver's UDP socket: registered with tokio's reactor for reading, and
//! for writing only while a send waits for room.

use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};

#[cfg(unix)]
use tokio::io::Interest;
#[cfg(unix)]
use tokio::io::unix::AsyncFd;

/// A driver's UDP socket, watched by the reactor for reading only.
///
/// tokio's `UdpSocket` asks epoll for writability too, edge-triggered, and
/// the kernel signals it every time a datagram we sent leaves the send
/// buffer: one more `epoll_wait` per datagram sent, and a wake-up of a
/// sleeping thread when the datagram left later (queued on a virtual link).
/// A UDP send almost never finds its buffer full, so writability is watched
/// only while a send waits for room: through a second descriptor of the
/// same socket, registered when a send said `WouldBlock` and dropped once
/// the socket is writable again. Registering a socket that is writable
/// already reports it at once, so the room freed between the failed send
/// and the registration is not missed.
#[cfg(unix)]
pub(crate) struct UdpSock {
    read: AsyncFd<std::net::UdpSocket>,
    /// Watches for writability after a send said `WouldBlock`.
    write: Option<AsyncFd<std::net::UdpSocket>>,
    /// A send said `WouldBlock` and the socket has not been writable since.
    blocked: bool,
}

#[cfg(unix)]
impl UdpSock {
    /// Registers `socket` (made non-blocking) with the reactor, for
    /// reading. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// The runtime's registration error.
    pub(crate) fn new(socket: std::net::UdpSocket) -> io::Result<Self> {
        socket.set_nonblocking(true)?;
        let read = register(socket, Interest::READABLE)?;
        Ok(Self {
            read,
            write: None,
            blocked: false,
        })
    }

    pub(crate) fn get(&self) -> &std::net::UdpSocket {
        self.read.get_ref()
    }

    /// The local address.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.get().local_addr()
    }

    /// Runs `recv` once the socket is readable; `recv` says how many it
    /// took and whether it found the queue empty (then the readiness is
    /// cleared without another call). `Pending` until readable.
    pub(crate) fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        mut recv: impl FnMut(&std::net::UdpSocket) -> io::Result<(usize, bool)>,
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = match self.read.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(g)) => g,
            };
            match guard.try_io(|s| recv(s.get_ref())) {
                Ok(Ok((n, drained))) => {
                    if drained {
                        // Clears only the readiness this guard saw: an
                        // event that arrived meanwhile stays.
                        guard.clear_ready();
                    }
                    return Poll::Ready(Ok(n));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // `WouldBlock`: readiness cleared; wait again.
                Err(_) => {}
            }
        }
    }

    /// `Ready` when a send may be tried: always, unless the last one said
    /// `WouldBlock` and the socket has not been writable since.
    pub(crate) fn poll_send_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.blocked {
            return Poll::Ready(Ok(()));
        }
        if self.write.is_none() {
            let dup = self.get().try_clone()?;
            self.write = Some(register(dup, Interest::WRITABLE)?);
        }
        let Some(write) = &self.write else {
            return Poll::Ready(Ok(()));
        };
        let r = match write.poll_write_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(r) => r.map(drop),
        };
        self.write = None;
        self.blocked = false;
        Poll::Ready(r)
    }

    /// Runs one send; a `WouldBlock` makes [`poll_send_ready`](Self::poll_send_ready)
    /// wait for room.
    pub(crate) fn try_send<T>(
        &mut self,
        send: impl FnOnce(&std::net::UdpSocket) -> io::Result<T>,
    ) -> io::Result<T> {
        let r = send(self.get());
        if matches!(&r, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            self.blocked = true;
        }
        r
    }
}

/// Elsewhere: tokio's socket, watched for both directions.
#[cfg(not(unix))]
pub(crate) struct UdpSock(tokio::net::UdpSocket);

#[cfg(not(unix))]
impl UdpSock {
    pub(crate) fn new(socket: std::net::UdpSocket) -> io::Result<Self> {
        socket.set_nonblocking(true)?;
        Ok(Self(tokio::net::UdpSocket::from_std(socket)?))
    }

    pub(crate) fn get(&self) -> &tokio::net::UdpSocket {
        &self.0
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    pub(crate) fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        mut recv: impl FnMut(&tokio::net::UdpSocket) -> io::Result<(usize, bool)>,
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.0.poll_recv_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            let mut drained = None;
            let r = self.0.try_io(tokio::io::Interest::READABLE, || {
                let (n, empty) = recv(&self.0)?;
                if empty {
                    drained = Some(n);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            });
            match (r, drained) {
                (Ok(n), _) => return Poll::Ready(Ok(n)),
                (Err(_), Some(n)) => return Poll::Ready(Ok(n)),
                (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => {}
                (Err(e), None) => return Poll::Ready(Err(e)),
            }
        }
    }

    pub(crate) fn poll_send_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.poll_send_ready(cx)
    }

    pub(crate) fn try_send<T>(
        &mut self,
        send: impl FnOnce(&tokio::net::UdpSocket) -> io::Result<T>,
    ) -> io::Result<T> {
        self.0
            .try_io(tokio::io::Interest::WRITABLE, || send(&self.0))
    }
}

/// Registers `socket` with the reactor for `interest`.
#[cfg(unix)]
fn register(
    socket: std::net::UdpSocket,
    interest: Interest,
) -> io::Result<AsyncFd<std::net::UdpSocket>> {
    // SAFETY: the descriptor is the one `socket` owns; it stays open and the
    // same for as long as `socket` lives, which is as long as the `AsyncFd`
    // (it owns `socket`), and `as_raw_fd` always returns it.
    unsafe { AsyncFd::register_with_interest(socket, interest) }.map_err(io::Error::from)
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use super::*;

    /// A send that found the buffer full makes the socket watch for room
    /// (a second registration), and once the socket is writable it is
    /// ready again with that registration gone.
    #[tokio::test]
    async fn a_send_that_found_the_buffer_full_waits_for_room_then_goes_on() {
        let std_sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sock = UdpSock::new(std_sock).unwrap();
        poll_fn(|cx| sock.poll_send_ready(cx)).await.unwrap();
        assert!(
            sock.write.is_none(),
            "no write registration until a send blocks"
        );
        let r: io::Result<()> = sock.try_send(|_| Err(io::ErrorKind::WouldBlock.into()));
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert!(sock.blocked);
        // The socket has room: its registration reports it at once.
        tokio::time::timeout(
            Duration::from_secs(5),
            poll_fn(|cx| sock.poll_send_ready(cx)),
        )
        .await
        .expect("a writable socket is reported ready")
        .unwrap();
        assert!(!sock.blocked && sock.write.is_none());
        let to = sock.local_addr().unwrap();
        assert_eq!(sock.try_send(|s| s.send_to(b"x", to)).unwrap(), 1);
    }

    /// A short batch clears the readiness without another call, and a
    /// datagram that arrives afterwards still wakes the reader.
    #[tokio::test]
    async fn a_drained_queue_still_wakes_the_reader_for_the_next_datagram() {
        let std_sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = std_sock.local_addr().unwrap();
        let sock = UdpSock::new(std_sock).unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let recv_all = |s: &std::net::UdpSocket| {
            let mut buf = [0u8; 64];
            let mut n = 0;
            loop {
                match s.recv_from(&mut buf) {
                    Ok(_) => n += 1,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => {
                        return Ok((n, true));
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        for round in 1..=3 {
            for _ in 0..round {
                peer.send_to(b"datagram", to).unwrap();
            }
            let got = tokio::time::timeout(
                Duration::from_secs(5),
                poll_fn(|cx| sock.poll_recv(cx, recv_all)),
            )
            .await
            .expect("the reader is woken for every round")
            .unwrap();
            assert_eq!(got, round);
        }
    }
}
