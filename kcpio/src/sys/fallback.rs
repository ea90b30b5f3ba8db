//! The portable path: one datagram per system call through `socket2`.
//!
//! Used on systems without `sendmmsg`/`recvmmsg`, on Linux when batching is
//! turned off, and when the kernel turns out to lack the batched calls. No
//! offloads: a GSO run is sent datagram by datagram, and GRO is never on for a
//! socket this path reads (GRO needs Linux 5.0, `recvmmsg` 2.6.33).

use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

use socket2::{MaybeUninitSlice, SockAddr, Socket};

use super::{RecvMeta, Transmit, UdpState, bump, finish_meta, partial_send};

/// Receives up to `min(bufs.len(), meta.len())` datagrams, one `recvmsg` each.
/// Contract as [`UdpState::recv`].
pub(super) fn recv(
    state: &UdpState,
    sock: &Socket,
    bufs: &mut [IoSliceMut<'_>],
    meta: &mut [RecvMeta],
) -> io::Result<usize> {
    let pending = state.pending_recv_error.swap(0, Ordering::Relaxed);
    if pending != 0 {
        return Err(io::Error::from_raw_os_error(pending));
    }
    let mut filled = 0;
    for (buf, slot) in bufs.iter_mut().zip(meta.iter_mut()) {
        let bytes: &mut [u8] = buf;
        let result = loop {
            // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, so the cast
            // keeps length and alignment. The slice is only handed to
            // `recvmsg`, which writes initialised bytes and never
            // de-initialises any, so `bytes` stays fully initialised.
            let uninit = unsafe { &mut *(std::ptr::from_mut(bytes) as *mut [MaybeUninit<u8>]) };
            let mut iov = [MaybeUninitSlice::new(uninit)];
            bump(&state.counters.recv_syscalls, 1);
            match sock.recv_from_vectored(&mut iov) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        match result {
            Ok((len, flags, addr)) => {
                let Some(addr) = addr.as_socket() else {
                    // Not an IP sender: impossible on a UDP socket; drop it.
                    bump(&state.counters.recv_errors, 1);
                    *slot = RecvMeta::default();
                    filled += 1;
                    continue;
                };
                finish_meta(state, slot, addr, len, None, flags.is_truncated());
                filled += 1;
            }
            Err(e) => {
                state.count_recv_error(&e);
                if filled == 0 {
                    return Err(e);
                }
                // Report it with the next call rather than lose it.
                if e.kind() != io::ErrorKind::WouldBlock
                    && let Some(code) = e.raw_os_error()
                {
                    state.pending_recv_error.store(code, Ordering::Relaxed);
                }
                break;
            }
        }
    }
    Ok(filled)
}

/// Sends `transmits` one datagram per `sendto`. Contract as [`UdpState::send`].
pub(super) fn send(
    state: &UdpState,
    sock: &Socket,
    transmits: &[Transmit<'_>],
) -> io::Result<usize> {
    for (sent, transmit) in transmits.iter().enumerate() {
        let addr = SockAddr::from(state.destination(transmit.destination));
        for datagram in transmit.datagrams() {
            let result = loop {
                bump(&state.counters.send_syscalls, 1);
                match sock.send_to(datagram, &addr) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    other => break other,
                }
            };
            if let Err(e) = result {
                return partial_send(state, sent, e);
            }
            bump(&state.counters.datagrams_sent, 1);
        }
    }
    Ok(transmits.len())
}
