//! Batched datagram I/O; knows nothing of KCP.
//!
//! [`UdpState`] wraps the system calls that move datagrams between a UDP
//! socket and caller-owned buffers, many per call where the platform allows:
//!
//! - Linux ([`linux`]): `recvmmsg` with UDP GRO (the kernel coalesces a run of
//!   equal-size datagrams from one sender into one buffer and reports the
//!   segment size), and `sendmmsg` with UDP GSO (one message carries a run of
//!   equal-size datagrams to one destination; the kernel cuts it up). Each
//!   received message carries the kernel's receive time (`SO_TIMESTAMPNS`,
//!   [`RecvMeta::rx_time`]), so a reader that woke late knows when its
//!   datagrams came in.
//! - Everywhere else, and on Linux when batching is turned off or the kernel
//!   lacks the calls ([`fallback`]): one datagram per system call through
//!   `socket2`.
//!
//! What the kernel supports is found out at run time, once in
//! [`UdpState::new`] and again whenever a call reports that a feature is
//! missing; a feature that fails is switched off for good and the call is
//! redone without it, so no datagram is lost to the detection.
//!
//! Every call is non-blocking and allocates nothing: the message headers live
//! on the stack, the payload buffers belong to the caller.
//!
//! Addresses: IPv4 and IPv6 sockets both work. On a dual-stack IPv6 socket an
//! IPv4 peer shows up as a v4-mapped address (`::ffff:a.b.c.d`); [`UdpState`]
//! reports it as the plain IPv4 address, and accepts plain IPv4 destinations on
//! IPv6 sockets (mapping them back), so one peer always has one address.

use std::io::{self, IoSliceMut};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

pub(crate) mod faketcp;
mod fallback;
mod udp_sock;

pub(crate) use udp_sock::UdpSock;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(test)]
mod tests;

/// Messages per `sendmmsg`/`recvmmsg` call: the length of the on-stack
/// message vectors.
pub(crate) const BATCH_SIZE: usize = 32;

/// Datagrams the kernel puts into one GSO send or one GRO receive at most
/// (`UDP_MAX_SEGMENTS` and `UDP_GRO_CNT_MAX` in Linux).
const MAX_SEGMENTS: usize = 64;

/// Largest UDP payload one message may carry (65535 minus the IPv4 and UDP
/// headers); a GSO run longer than this is sent as several messages.
const MAX_UDP_PAYLOAD: usize = 65_507;

/// One received message, describing the buffer of the same index.
///
/// `len` bytes were written at the start of the buffer. They are `len / stride`
/// datagrams of `stride` bytes each, followed by one shorter datagram when
/// `stride` does not divide `len`: several when the kernel coalesced a run
/// with GRO, else exactly one (`stride == len`). `stride` is never 0, so
/// [`RecvMeta::datagrams`] (or `buf[..len].chunks(stride)`) cannot panic; an
/// empty datagram, or one dropped because it did not fit its buffer, has
/// `len == 0` and yields no datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecvMeta {
    /// The sender. A v4-mapped IPv6 address is reported as plain IPv4.
    pub(crate) addr: SocketAddr,
    /// Bytes written into the buffer.
    pub(crate) len: usize,
    /// Size of each coalesced datagram (the last may be shorter); at least 1.
    pub(crate) stride: usize,
    /// Where the datagrams start in the buffer: 0 for UDP; behind the IP
    /// and TCP headers for fake TCP (the segment is read whole).
    pub(crate) offset: usize,
    /// The message did not fit its buffer (`len` then covers only the
    /// whole datagrams before the cut, 0 without GRO).
    pub(crate) truncated: bool,
    /// When the kernel received it (a GRO run: its first datagram), as
    /// `CLOCK_REALTIME` since the Unix epoch: Linux's `SO_TIMESTAMPNS`
    /// software stamp on the batched path. `None` where the platform, the
    /// portable path or the transport (fake TCP) gives none; the caller then
    /// takes its own processing time. Linux switches stamping on for the
    /// whole system shortly after the first socket asks (a deferred work
    /// item); a datagram that came in before is stamped when read, which is
    /// the processing time again.
    pub(crate) rx_time: Option<Duration>,
}

impl Default for RecvMeta {
    fn default() -> Self {
        Self {
            addr: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            len: 0,
            stride: 1,
            offset: 0,
            truncated: false,
            rx_time: None,
        }
    }
}

impl RecvMeta {
    /// The datagrams in `buf` (the buffer this entry describes), in arrival
    /// order. Tolerates a `buf` shorter than `len` (yields what is there).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the driver opens datagrams in place, by offsets")
    )]
    pub(crate) fn datagrams<'b>(&self, buf: &'b [u8]) -> std::slice::Chunks<'b, u8> {
        let end = self.offset.saturating_add(self.len).min(buf.len());
        buf.get(self.offset.min(end)..end)
            .unwrap_or_default()
            .chunks(self.stride.max(1))
    }
}

/// One outgoing message: a datagram, or with `segment_size` a run of them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Transmit<'a> {
    /// Where to send. A plain IPv4 address is fine on a dual-stack IPv6 socket.
    pub(crate) destination: SocketAddr,
    /// The payload. With `segment_size: Some(s)`, several datagrams of `s`
    /// bytes laid end to end, the last possibly shorter.
    pub(crate) contents: &'a [u8],
    /// `Some(s)`: cut `contents` into datagrams of `s` bytes (with GSO when the
    /// kernel has it, else one by one). `None`, `Some(0)` or `Some(s)` with
    /// `s >= contents.len()`: `contents` is one datagram.
    pub(crate) segment_size: Option<usize>,
}

impl<'a> Transmit<'a> {
    /// Size of each datagram in `contents` when it holds more than one.
    fn segment(&self) -> Option<usize> {
        match self.segment_size {
            Some(s) if s > 0 && s < self.contents.len() => Some(s),
            _ => None,
        }
    }

    /// The datagrams this transmit stands for, as sent without GSO. An empty
    /// `contents` is one empty datagram.
    fn datagrams(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        let contents: &'a [u8] = self.contents;
        let step = self.segment().unwrap_or(contents.len()).max(1);
        let empty: Option<&'a [u8]> = contents.is_empty().then_some(contents);
        contents.chunks(step).chain(empty)
    }
}

/// A snapshot of the counters kept by a [`UdpState`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SysStats {
    /// Send system calls made (`sendmmsg`, `sendmsg` or `sendto`), failed ones included.
    pub(crate) send_syscalls: u64,
    /// Receive system calls made, including those that found nothing.
    pub(crate) recv_syscalls: u64,
    /// Datagrams handed to the kernel (each GSO segment counts).
    pub(crate) datagrams_sent: u64,
    /// Datagrams delivered to the caller (each GRO segment counts).
    pub(crate) datagrams_received: u64,
    /// Send errors returned to the caller, other than `WouldBlock`.
    pub(crate) send_errors: u64,
    /// Receive errors returned to the caller (or held for the next call),
    /// other than `WouldBlock`, and senders that were not IP addresses.
    pub(crate) recv_errors: u64,
    /// Received messages cut short because the buffer was too small; the cut
    /// datagram was dropped (whole GRO segments before it were kept).
    pub(crate) truncated: u64,
    /// Fake TCP: segments refused (forged RST/FIN/SYN, foreign acks,
    /// payload without PSH, unknown flows, bad checksums, malformed).
    pub(crate) segments_refused: u64,
    /// Fake TCP: segments longer than a datagram (merged on the way), dropped.
    pub(crate) segments_merged: u64,
    /// GSO sends the kernel refused and that were redone one datagram at a
    /// time, switching GSO off for good.
    pub(crate) gso_fallbacks: u64,
}

/// Counters behind [`SysStats`]; relaxed atomics, bumped once per call.
#[derive(Debug, Default)]
struct Counters {
    send_syscalls: AtomicU64,
    recv_syscalls: AtomicU64,
    datagrams_sent: AtomicU64,
    datagrams_received: AtomicU64,
    send_errors: AtomicU64,
    recv_errors: AtomicU64,
    truncated: AtomicU64,
    segments_refused: AtomicU64,
    segments_merged: AtomicU64,
    gso_fallbacks: AtomicU64,
}

/// Adds `n` to a counter.
fn bump(counter: &AtomicU64, n: usize) {
    counter.fetch_add(n as u64, Ordering::Relaxed);
}

/// Whether an error is an ordinary "try again" rather than something to count.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// What one UDP socket can do, found at run time, and counters.
///
/// One per socket; `Send + Sync`, every method takes `&self`. Capabilities
/// only ever shrink after [`UdpState::new`]: GSO is switched off when the
/// kernel refuses a GSO send, the batched calls when the kernel lacks them.
#[derive(Debug)]
pub(crate) struct UdpState {
    /// The socket is IPv6: IPv4 destinations must be sent v4-mapped.
    ipv6: bool,
    /// `sendmmsg` is in use (Linux with batching on, until `ENOSYS`).
    send_mmsg: AtomicBool,
    /// `recvmmsg` is in use (Linux with batching on, until `ENOSYS`).
    recv_mmsg: AtomicBool,
    /// Datagrams per GSO send; 1 when GSO is off.
    gso_segments: AtomicUsize,
    /// Datagrams per GRO receive; 1 when GRO is off. Fixed at creation.
    gro_segments: usize,
    /// A receive error met after some datagrams were already returned by the
    /// portable path, reported by the next call (raw OS code; 0 = none).
    pending_recv_error: AtomicI32,
    counters: Counters,
}

impl UdpState {
    /// Prepares `sock` (a UDP socket) for batched I/O and records what the
    /// kernel supports.
    ///
    /// Makes the socket non-blocking. With `batching` on Linux: turns on
    /// `UDP_GRO` when the kernel has it (5.0+), checks for GSO by reading the
    /// `UDP_SEGMENT` option (4.18+; reading it changes nothing), and uses
    /// `sendmmsg`/`recvmmsg`. It does not set `IP_RECVERR`, so ICMP errors
    /// only reach connected sockets. With `batching == false`, or on other
    /// systems, every call moves one datagram per system call. Once GRO is on,
    /// read the socket only through [`recv`](Self::recv): a plain `recv_from`
    /// would get coalesced runs without their segment size.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `sock` is not a datagram socket; the OS error when
    /// the socket cannot be queried or made non-blocking.
    pub(crate) fn new(sock: socket2::SockRef<'_>, batching: bool) -> io::Result<Self> {
        let ipv6 = Self::prepare(&sock)?;
        let caps = if batching {
            platform_caps(&sock)
        } else {
            Caps::PORTABLE
        };
        Ok(Self::with_caps(ipv6, caps))
    }

    /// Prepares `sock` (a UDP socket, made non-blocking) for batched calls
    /// without offloads: `sendmmsg`/`recvmmsg` on Linux, one datagram per
    /// call elsewhere; no GSO, no GRO, so every received buffer holds one
    /// datagram and the socket may also be read and written plainly.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub(crate) fn without_offloads(sock: socket2::SockRef<'_>) -> io::Result<Self> {
        let ipv6 = Self::prepare(&sock)?;
        Ok(Self::with_caps(
            ipv6,
            Caps {
                mmsg: cfg!(target_os = "linux"),
                ..Caps::PORTABLE
            },
        ))
    }

    /// Checks that `sock` is a datagram socket and makes it non-blocking;
    /// returns whether it is IPv6.
    fn prepare(sock: &socket2::SockRef<'_>) -> io::Result<bool> {
        if sock.r#type()? != socket2::Type::DGRAM {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "batched datagram I/O needs a UDP socket",
            ));
        }
        sock.set_nonblocking(true)?;
        Ok(sock.local_addr()?.is_ipv6())
    }

    /// The state of a fake-TCP socket ([`faketcp::FakeTcp`]): no GSO or
    /// GRO (one datagram per segment), and the counters, which the
    /// fake-TCP transport bumps (its own calls are always batched).
    pub(crate) fn for_fake_tcp() -> Self {
        Self::with_caps(false, Caps::PORTABLE)
    }

    fn with_caps(ipv6: bool, caps: Caps) -> Self {
        Self {
            ipv6,
            send_mmsg: AtomicBool::new(caps.mmsg),
            recv_mmsg: AtomicBool::new(caps.mmsg),
            gso_segments: AtomicUsize::new(caps.gso_segments),
            gro_segments: caps.gro_segments,
            pending_recv_error: AtomicI32::new(0),
            counters: Counters::default(),
        }
    }

    /// Receives as many datagrams as are queued, up to `min(bufs.len(),
    /// meta.len(), batch_size())` messages; `meta[i]` describes `bufs[i]`.
    ///
    /// Returns how many leading entries of `meta` were filled (0 only when
    /// `bufs` or `meta` is empty). With GRO a buffer may hold up to
    /// [`gro_segments`](Self::gro_segments) datagrams; give it at least
    /// `gro_segments() * largest datagram` (or 64 KiB) bytes, or runs will
    /// be cut short (dropped datagrams are counted in
    /// [`SysStats::truncated`]).
    ///
    /// # Errors
    ///
    /// `WouldBlock` when nothing is queued. Any other error (for example
    /// `ConnectionRefused` on a connected socket after an ICMP port
    /// unreachable) is not fatal: count it and call again. No datagram is
    /// lost with it: an error met after some datagrams were received is
    /// reported by the next call.
    pub(crate) fn recv(
        &self,
        sock: socket2::SockRef<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        if bufs.is_empty() || meta.is_empty() {
            return Ok(0);
        }
        #[cfg(target_os = "linux")]
        if self.recv_mmsg.load(Ordering::Relaxed) {
            return linux::recv(self, &sock, bufs, meta);
        }
        fallback::recv(self, &sock, bufs, meta)
    }

    /// A receive error is held back for the next [`recv`](Self::recv) call
    /// (the portable path met it after returning some datagrams). While one
    /// is, a short batch does not mean the queue was empty.
    pub(crate) fn recv_error_pending(&self) -> bool {
        self.pending_recv_error.load(Ordering::Relaxed) != 0
    }

    /// Sends `transmits` in order, as many as the socket takes now.
    ///
    /// Returns `Ok(n)`: `transmits[..n]` were handed to the kernel in full
    /// (`1 <= n <= transmits.len()`, or 0 for an empty slice); `transmits[n..]`
    /// were not, and the caller calls again with them (the error that stopped
    /// the batch, if any, comes back from that call, or was an asynchronous
    /// one that the kernel swallowed).
    ///
    /// # Errors
    ///
    /// An error always concerns `transmits[0]`, which was **not** sent; nothing
    /// after it was tried:
    /// - `WouldBlock`: the send buffer is full; retry the same slice when the
    ///   socket is writable.
    /// - anything else is not fatal (the counters record it). It is either
    ///   about `transmits[0]` itself (`InvalidInput` for port 0,
    ///   `AddrNotAvailable`, an unreachable network, a datagram too large, an
    ///   IPv6 destination on an IPv4 socket) or an asynchronous report about
    ///   an earlier datagram on a connected socket (`ConnectionRefused`).
    ///   Either way the caller drops or retries `transmits[0]` and continues
    ///   with `transmits[1..]`; the other transmits are unaffected.
    ///
    /// A transmit is atomic when it goes out as one message. One that is cut
    /// into several (GSO off, or a run longer than one GSO send) may have had
    /// its first datagrams sent when it is reported unsent; retrying it sends
    /// them again: duplicates, never a loss. When the kernel refuses GSO the
    /// refused transmit is resent datagram by datagram and GSO stays off.
    pub(crate) fn send(
        &self,
        sock: socket2::SockRef<'_>,
        transmits: &[Transmit<'_>],
    ) -> io::Result<usize> {
        if transmits.is_empty() {
            return Ok(0);
        }
        #[cfg(target_os = "linux")]
        if self.send_mmsg.load(Ordering::Relaxed) {
            return linux::send(self, &sock, transmits);
        }
        fallback::send(self, &sock, transmits)
    }

    /// Datagrams one [`Transmit`] may carry with GSO; 1 when GSO is
    /// unavailable (then `send` still accepts runs and cuts them itself).
    /// Can drop to 1 at run time.
    pub(crate) fn max_gso_segments(&self) -> usize {
        self.gso_segments.load(Ordering::Relaxed)
    }

    /// Datagrams one receive buffer may hold (64 with GRO, else 1).
    pub(crate) fn gro_segments(&self) -> usize {
        self.gro_segments
    }

    /// Messages one `send`/`recv` call moves per system call at most: the
    /// natural number of transmits and receive buffers to pass. The portable
    /// path takes as many and loops, one datagram per system call.
    pub(crate) fn batch_size(&self) -> usize {
        BATCH_SIZE
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> SysStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SysStats {
            send_syscalls: get(&c.send_syscalls),
            recv_syscalls: get(&c.recv_syscalls),
            datagrams_sent: get(&c.datagrams_sent),
            datagrams_received: get(&c.datagrams_received),
            send_errors: get(&c.send_errors),
            recv_errors: get(&c.recv_errors),
            truncated: get(&c.truncated),
            segments_refused: get(&c.segments_refused),
            segments_merged: get(&c.segments_merged),
            gso_fallbacks: get(&c.gso_fallbacks),
        }
    }

    /// The address to pass to the kernel for `addr` on this socket.
    fn destination(&self, addr: SocketAddr) -> SocketAddr {
        match addr {
            SocketAddr::V4(v4) if self.ipv6 => {
                SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
            }
            other => other,
        }
    }

    /// Counts a send error unless it is an ordinary "try again".
    fn count_send_error(&self, e: &io::Error) {
        if !is_transient(e) {
            bump(&self.counters.send_errors, 1);
        }
    }

    /// Counts a receive error unless it is an ordinary "try again".
    fn count_recv_error(&self, e: &io::Error) {
        if !is_transient(e) {
            bump(&self.counters.recv_errors, 1);
        }
    }
}

/// The result of a batched send that stopped at `error` after `sent` whole
/// transmits: an error is only reported (and counted) when nothing was sent.
/// Otherwise the caller's next call starts at the transmit that failed and
/// meets the error again, unless it was an asynchronous one, now consumed.
fn partial_send(state: &UdpState, sent: usize, error: io::Error) -> io::Result<usize> {
    if sent == 0 {
        state.count_send_error(&error);
        Err(error)
    } else {
        Ok(sent)
    }
}

/// A source address as the caller should see it: v4-mapped IPv6 becomes IPv4.
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, v6.port())),
            None => SocketAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Fills a [`RecvMeta`] for `len` bytes received from `addr` with GRO
/// segment size `gro` (None without coalescing); `truncated` when the
/// message did not fit its buffer. Returns the number of datagrams delivered.
fn finish_meta(
    state: &UdpState,
    meta: &mut RecvMeta,
    addr: SocketAddr,
    len: usize,
    gro: Option<usize>,
    truncated: bool,
) -> usize {
    let mut len = len;
    let mut stride = gro.filter(|&s| s > 0).unwrap_or(len);
    if truncated {
        // The cut datagram is garbage; whole GRO segments before it are fine.
        bump(&state.counters.truncated, 1);
        len = match gro {
            Some(_) if stride <= len => len - len % stride,
            _ => 0,
        };
    }
    if stride == 0 || stride >= len {
        stride = len.max(1);
    }
    *meta = RecvMeta {
        addr: canonical(addr),
        len,
        stride,
        offset: 0,
        truncated,
        rx_time: None,
    };
    let datagrams = if len == 0 && truncated {
        0
    } else {
        len.div_ceil(stride).max(1)
    };
    bump(&state.counters.datagrams_received, datagrams);
    datagrams
}

/// Capabilities found by probing a socket.
#[derive(Clone, Copy, Debug)]
struct Caps {
    mmsg: bool,
    gso_segments: usize,
    gro_segments: usize,
}

impl Caps {
    /// One datagram per system call, no offloads.
    const PORTABLE: Self = Self {
        mmsg: false,
        gso_segments: 1,
        gro_segments: 1,
    };
}

/// Probes (and on Linux configures) `sock` for batching and offloads.
#[cfg(target_os = "linux")]
fn platform_caps(sock: &socket2::Socket) -> Caps {
    linux::probe(sock)
}

/// Probes (and on Linux configures) `sock` for batching and offloads.
#[cfg(not(target_os = "linux"))]
fn platform_caps(_sock: &socket2::Socket) -> Caps {
    Caps::PORTABLE
}

/// Sets `sock`'s receive buffer to `bytes` past the `net.core.rmem_max`
/// cap (`SO_RCVBUFFORCE`: Linux, with `CAP_NET_ADMIN`). Returns whether
/// the kernel took it (false elsewhere, or without the capability).
pub(crate) fn force_recv_buffer(sock: &socket2::Socket, bytes: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        linux::set_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, value).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (sock, bytes);
        false
    }
}

/// Gives the heap memory this process has freed back to the system, where
/// the allocator can (glibc's `malloc_trim`); reports whether any was
/// returned. Elsewhere (musl, other systems) it does nothing and returns
/// `false`.
pub(crate) fn trim_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a padding size and only walks glibc's
        // own arenas under their locks; it touches no memory of ours.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
