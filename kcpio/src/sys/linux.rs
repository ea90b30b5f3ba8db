//! Linux: `recvmmsg` with UDP GRO and receive timestamps, `sendmmsg` with
//! UDP GSO.
//!
//! Each call builds its message vector on the stack (at most
//! [`BATCH_SIZE`] entries), points it at the caller's buffers, makes one
//! system call (or a few, when a send batch is longer than one vector), and
//! reads the results back. Nothing is allocated.

use std::io::{self, IoSliceMut};
use std::mem::{self, MaybeUninit, size_of};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use socket2::{SockAddr, Socket};

use super::{
    BATCH_SIZE, Caps, MAX_SEGMENTS, MAX_UDP_PAYLOAD, RecvMeta, Transmit, UdpState, bump, fallback,
    finish_meta, partial_send,
};

/// `CMSG_SPACE(n)` as a `usize`.
const fn cmsg_space(n: usize) -> usize {
    // SAFETY: `CMSG_SPACE` is pure arithmetic on its argument (alignment
    // rounding); it touches no memory.
    unsafe { libc::CMSG_SPACE(n as libc::c_uint) as usize }
}

/// `CMSG_LEN(n)` as a `usize`.
const fn cmsg_len(n: usize) -> usize {
    // SAFETY: `CMSG_LEN` is pure arithmetic on its argument; it touches no memory.
    unsafe { libc::CMSG_LEN(n as libc::c_uint) as usize }
}

/// Room for the one control message a sent message carries: the GSO
/// segment size (a `u16`).
const CMSG_CAP: usize = cmsg_space(size_of::<u16>());

/// A sent message's control buffer, aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_CAP]);

impl CmsgBuf {
    const ZERO: Self = Self([0; CMSG_CAP]);
}

/// Room for the control messages a received message carries: the GRO
/// segment size (a C `int`) and the kernel's receive time
/// (`SCM_TIMESTAMPNS`, a `timespec`).
const RX_CMSG_CAP: usize =
    cmsg_space(size_of::<libc::c_int>()) + cmsg_space(size_of::<libc::timespec>());

/// A received message's control buffer, aligned for `cmsghdr`; one per
/// message of the batch, on the stack like the message headers, left
/// uninitialised for the kernel to write.
#[repr(C, align(8))]
struct RxCmsgBuf([u8; RX_CMSG_CAP]);

/// Storage for a destination address, IPv4 or IPv6.
#[derive(Clone, Copy)]
#[repr(C)]
union SockAddrBuf {
    v4: libc::sockaddr_in,
    v6: libc::sockaddr_in6,
}

impl SockAddrBuf {
    const ZERO: Self = Self {
        v6: libc::sockaddr_in6 {
            sin6_family: 0,
            sin6_port: 0,
            sin6_flowinfo: 0,
            sin6_addr: libc::in6_addr { s6_addr: [0; 16] },
            sin6_scope_id: 0,
        },
    };

    /// Stores `addr` and returns the length to pass as `msg_namelen`.
    fn set(&mut self, addr: SocketAddr) -> libc::socklen_t {
        match addr {
            SocketAddr::V4(a) => {
                self.v4 = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                size_of::<libc::sockaddr_in>() as libc::socklen_t
            }
            SocketAddr::V6(a) => {
                self.v6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                size_of::<libc::sockaddr_in6>() as libc::socklen_t
            }
        }
    }
}

/// Sets an integer socket option.
pub(super) fn set_int(
    sock: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live `c_int` and the length passed is its size;
    // the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            ptr::from_ref(&value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads an integer socket option.
fn get_int(sock: &Socket, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals; `len` holds the size of
    // `value`, so the kernel writes at most that many bytes into it.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            name,
            ptr::from_mut(&mut value).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Turns on GRO where the kernel has it and receive timestamps, and
/// checks for GSO.
pub(super) fn probe(sock: &Socket) -> Caps {
    // UDP_GRO: Linux 5.0. Fails with ENOPROTOOPT before that.
    let gro = set_int(sock, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
    // SO_TIMESTAMPNS (Linux 2.6.22): every received message carries the
    // kernel's software receive time, taken when the packet entered the
    // stack, so a reader that wakes late still learns when it arrived. The
    // stamp is optional: where this fails, messages simply carry none.
    let _ = set_int(sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
    // UDP_SEGMENT: Linux 4.18. Reading it (the socket's default segment size,
    // 0) proves the kernel knows GSO without changing anything; setting it
    // would make every later send a GSO send.
    let gso = get_int(sock, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok();
    Caps {
        mmsg: true,
        gso_segments: if gso { MAX_SEGMENTS } else { 1 },
        gro_segments: if gro { MAX_SEGMENTS } else { 1 },
    }
}

/// Receives with one `recvmmsg`. Contract as [`UdpState::recv`].
pub(super) fn recv(
    state: &UdpState,
    sock: &Socket,
    bufs: &mut [IoSliceMut<'_>],
    meta: &mut [RecvMeta],
) -> io::Result<usize> {
    let n = bufs.len().min(meta.len()).min(BATCH_SIZE);
    // Only the `n` slots the call uses are written: the batch's full
    // vector zeroed is 7.5 KiB of stores per call (its sockaddr_storage
    // names alone 4 KiB), most of a receive's user-space work when one
    // datagram waits. The control buffers are left for the kernel to write
    // (it sets `msg_controllen` to what it wrote, and `control` reads no
    // further); the names are zeroed, so that every byte `decode_addr`
    // reads is initialised whatever the kernel wrote.
    let mut names = [const { MaybeUninit::<SockAddrBuf>::uninit() }; BATCH_SIZE];
    let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH_SIZE];
    let mut ctrl = [const { MaybeUninit::<RxCmsgBuf>::uninit() }; BATCH_SIZE];
    let slots = hdrs
        .iter_mut()
        .zip(bufs.iter_mut())
        .zip(names.iter_mut().zip(ctrl.iter_mut()));
    for ((hdr, buf), (name, cmsg)) in slots.take(n) {
        let name = name.write(SockAddrBuf::ZERO);
        // SAFETY: `mmsghdr` is a plain C struct of integers and raw
        // pointers; all-zero bytes are a valid value (null pointers, zero
        // lengths).
        let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
        let h = &mut m.msg_hdr;
        h.msg_name = ptr::from_mut(name).cast();
        h.msg_namelen = size_of::<SockAddrBuf>() as libc::socklen_t;
        // `IoSliceMut` is guaranteed ABI-compatible with `iovec` on Unix.
        h.msg_iov = ptr::from_mut(buf).cast::<libc::iovec>();
        h.msg_iovlen = 1;
        h.msg_control = cmsg.as_mut_ptr().cast();
        h.msg_controllen = RX_CMSG_CAP as _;
        hdr.write(m);
    }
    // SAFETY: the first `n` headers were written just above, and
    // `MaybeUninit<T>` has `T`'s layout.
    let hdrs =
        unsafe { std::slice::from_raw_parts_mut(hdrs.as_mut_ptr().cast::<libc::mmsghdr>(), n) };
    // SAFETY: the `n` headers point at memory that stays valid and
    // unaliased for the call: one iovec each (a caller `IoSliceMut`,
    // exclusively borrowed through `bufs`), and name and control buffers
    // on this stack frame whose sizes are the lengths given.
    let got = match unsafe { recvmmsg(state, sock.as_raw_fd(), hdrs) } {
        Ok(got) => got,
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            // Before Linux 2.6.33; such kernels have no GRO either.
            state.recv_mmsg.store(false, Ordering::Relaxed);
            return fallback::recv(state, sock, bufs, meta);
        }
        Err(e) => {
            state.count_recv_error(&e);
            return Err(e);
        }
    };
    let results = hdrs.iter().zip(names.iter()).zip(meta.iter_mut());
    for ((hdr, name), slot) in results.take(got) {
        let h = &hdr.msg_hdr;
        // SAFETY: the first `n` names were written (zeroed) above, and the
        // kernel writes only bytes into them; `got` ≤ `n`.
        let name = unsafe { name.assume_init_ref() };
        let Some(addr) = decode_addr(name, h.msg_namelen) else {
            bump(&state.counters.recv_errors, 1);
            *slot = RecvMeta::default();
            continue;
        };
        let truncated = h.msg_flags & libc::MSG_TRUNC != 0;
        let (gro, rx_time) = control(h);
        finish_meta(state, slot, addr, hdr.msg_len as usize, gro, truncated);
        slot.rx_time = rx_time;
    }
    Ok(got)
}

/// One non-blocking `recvmmsg` on `fd` into `hdrs`, retried when a signal
/// interrupts it; counts each system call in `state`. Returns how many
/// messages arrived, or the error (`WouldBlock` when none was queued);
/// errors are not counted here.
///
/// # Safety
///
/// Every header in `hdrs` must point only at memory (iovecs and the buffers
/// they name, name and control buffers) valid for writes of the lengths
/// given and not otherwise accessed for the duration of the call.
pub(super) unsafe fn recvmmsg(
    state: &UdpState,
    fd: std::os::fd::RawFd,
    hdrs: &mut [libc::mmsghdr],
) -> io::Result<usize> {
    let n = hdrs.len().min(libc::c_uint::MAX as usize);
    loop {
        bump(&state.counters.recv_syscalls, 1);
        // SAFETY: the caller guarantees what the headers point at; `hdrs`
        // itself is an exclusive borrow of `n` headers. A null timeout
        // means none.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT as _,
                ptr::null_mut(),
            )
        };
        if let Ok(got) = usize::try_from(r) {
            return Ok(got.min(n));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// The sender address the kernel wrote into `name` (`len`: the length it
/// reported; a UDP socket's peer is an IPv4 or IPv6 address, both of which
/// fit).
fn decode_addr(name: &SockAddrBuf, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    // SAFETY: every byte of `name` is initialised (zeroed, then written by
    // the kernel) and any bytes are a valid integer; the family sits at the
    // same offset in both variants.
    match libc::c_int::from(unsafe { name.v4.sin_family }) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: as above; the family says the kernel wrote a `sockaddr_in`.
            let sin = unsafe { name.v4 };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for a `sockaddr_in6`.
            let sin6 = unsafe { name.v6 };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The GRO segment size and the kernel's receive time (`CLOCK_REALTIME`
/// since the Unix epoch) from a received message's control data, each if
/// present. A stamp before the epoch (a clock set back that far) is none.
fn control(hdr: &libc::msghdr) -> (Option<usize>, Option<Duration>) {
    let (mut gro, mut stamp) = (None, None);
    // SAFETY: `msg_control`/`msg_controllen` describe this message's
    // `RxCmsgBuf`, still alive in the caller, with the length the kernel set
    // to the bytes of control data it wrote. `CMSG_FIRSTHDR` and
    // `CMSG_NXTHDR` only return headers that lie entirely inside that range,
    // or null.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(hdr) };
    while !cmsg.is_null() {
        // SAFETY: non-null results of `CMSG_FIRSTHDR`/`CMSG_NXTHDR` point at a
        // whole, aligned `cmsghdr` inside the buffer.
        let c = unsafe { &*cmsg };
        let len = c.cmsg_len as usize;
        if c.cmsg_level == libc::SOL_UDP
            && c.cmsg_type == libc::UDP_GRO
            && len >= cmsg_len(size_of::<libc::c_int>())
        {
            // SAFETY: `cmsg_len` says a `c_int` follows the header inside the
            // buffer; `read_unaligned` needs no alignment.
            let size = unsafe { ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>()) };
            gro = usize::try_from(size).ok();
        } else if c.cmsg_level == libc::SOL_SOCKET
            && c.cmsg_type == libc::SCM_TIMESTAMPNS
            && len >= cmsg_len(size_of::<libc::timespec>())
        {
            // SAFETY: `cmsg_len` says a `timespec` follows the header inside
            // the buffer; `read_unaligned` needs no alignment.
            let ts = unsafe { ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>()) };
            stamp = timespec_since_epoch(&ts);
        }
        // SAFETY: `cmsg` is a valid header of `hdr`'s control buffer (above).
        cmsg = unsafe { libc::CMSG_NXTHDR(hdr, cmsg) };
    }
    (gro, stamp)
}

/// A kernel `timespec` as time since the epoch; `None` before it or when
/// the nanoseconds are out of range.
fn timespec_since_epoch(ts: &libc::timespec) -> Option<Duration> {
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec)
        .ok()
        .filter(|&n| n < 1_000_000_000)?;
    Some(Duration::new(secs, nanos))
}

/// How a transmit is cut into messages: bytes per message, and the GSO
/// segment size when a message may carry several datagrams.
fn message_shape(transmit: &Transmit<'_>, gso_segments: usize) -> (usize, Option<usize>) {
    match transmit.segment() {
        None => (transmit.contents.len(), None),
        Some(seg) => {
            let per_message = gso_segments.min(MAX_UDP_PAYLOAD / seg).max(1);
            if per_message > 1 && u16::try_from(seg).is_ok() {
                (seg * per_message, Some(seg))
            } else {
                (seg, None)
            }
        }
    }
}

/// One message of a `sendmmsg` vector, for reading the result back.
#[derive(Clone, Copy, Debug, Default)]
struct Planned {
    /// Index of its transmit.
    transmit: usize,
    /// Byte range of the transmit's contents it carries.
    start: usize,
    end: usize,
    /// Datagrams it stands for.
    datagrams: usize,
    /// GSO segment size, when it carries more than one datagram.
    gso: Option<usize>,
}

/// Sends with `sendmmsg`, as many vectors as it takes. Contract as
/// [`UdpState::send`].
pub(super) fn send(
    state: &UdpState,
    sock: &Socket,
    transmits: &[Transmit<'_>],
) -> io::Result<usize> {
    // Progress: `transmits[..done]` are sent, and the first `offset` bytes of
    // `transmits[done]`.
    let mut done: usize = 0;
    let mut offset: usize = 0;
    while done < transmits.len() {
        let gso_segments = state.gso_segments.load(Ordering::Relaxed);
        // Only the slots this call fills are written (as on receive: the
        // whole vector zeroed was 5.7 KiB of stores per call).
        let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH_SIZE];
        let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH_SIZE];
        let mut names = [const { MaybeUninit::<SockAddrBuf>::uninit() }; BATCH_SIZE];
        let mut ctrl = [const { MaybeUninit::<CmsgBuf>::uninit() }; BATCH_SIZE];
        let mut plan = [Planned::default(); BATCH_SIZE];

        // Fill the vector with messages, continuing from (done, offset).
        let (mut next, mut at) = (done, offset);
        let mut count = 0;
        let slots = hdrs
            .iter_mut()
            .zip(iovs.iter_mut())
            .zip(names.iter_mut().zip(ctrl.iter_mut()))
            .zip(plan.iter_mut());
        for (((hdr, iov), (name, cmsg)), planned) in slots {
            let Some(transmit) = transmits.get(next) else {
                break;
            };
            let (size, seg) = message_shape(transmit, gso_segments);
            let total = transmit.contents.len();
            let end = at.saturating_add(size).min(total);
            let bytes = transmit.contents.get(at..end).unwrap_or_default();
            let datagrams = seg.map_or(1, |s| bytes.len().div_ceil(s).max(1));
            let gso = seg.filter(|_| datagrams > 1);
            *planned = Planned {
                transmit: next,
                start: at,
                end,
                datagrams,
                gso,
            };
            let iov = iov.write(libc::iovec {
                iov_base: bytes.as_ptr().cast_mut().cast(),
                iov_len: bytes.len(),
            });
            let name = name.write(SockAddrBuf::ZERO);
            // SAFETY: `mmsghdr` is a plain C struct of integers and raw
            // pointers; all-zero bytes are a valid value (null pointers,
            // zero lengths).
            let hdr = hdr.write(unsafe { mem::zeroed() });
            let h = &mut hdr.msg_hdr;
            h.msg_namelen = name.set(state.destination(transmit.destination));
            h.msg_name = ptr::from_mut(name).cast();
            h.msg_iov = ptr::from_mut(iov);
            h.msg_iovlen = 1;
            if let Some(seg) = gso.and_then(|s| u16::try_from(s).ok()) {
                let cmsg = cmsg.write(CmsgBuf::ZERO);
                h.msg_control = cmsg.0.as_mut_ptr().cast();
                h.msg_controllen = cmsg_space(size_of::<u16>()) as _;
                // SAFETY: `msg_control` points at this message's `CmsgBuf`
                // (aligned for `cmsghdr`, `CMSG_CAP` bytes) and
                // `msg_controllen` is no larger, so `CMSG_FIRSTHDR` returns a
                // header inside it with room for a `u16` after it.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(h);
                    if !c.is_null() {
                        (*c).cmsg_level = libc::SOL_UDP;
                        (*c).cmsg_type = libc::UDP_SEGMENT;
                        (*c).cmsg_len = cmsg_len(size_of::<u16>()) as _;
                        ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
                    }
                }
            }
            count += 1;
            if end >= total {
                next += 1;
                at = 0;
            } else {
                at = end;
            }
        }

        let result = loop {
            bump(&state.counters.send_syscalls, 1);
            // SAFETY: the first `count` headers were written above
            // (`MaybeUninit<T>` has `T`'s layout) and point at memory that stays
            // valid and unchanged for the call: payload slices borrowed from
            // `transmits`, and iovecs, addresses and control buffers on this
            // stack frame with the lengths given. The kernel only reads them
            // (and writes `msg_len` into the headers).
            let r = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
                    count as libc::c_uint,
                    libc::MSG_DONTWAIT as _,
                )
            };
            match usize::try_from(r) {
                Ok(sent) => break Ok(sent.min(count)),
                Err(_) => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        break Err(e);
                    }
                }
            }
        };

        match result {
            Ok(0) => return partial_send(state, done, io::ErrorKind::WouldBlock.into()),
            Ok(sent) => {
                for p in plan.iter().take(sent) {
                    bump(&state.counters.datagrams_sent, p.datagrams);
                    let total = transmits.get(p.transmit).map_or(0, |t| t.contents.len());
                    if p.end >= total {
                        done = p.transmit + 1;
                        offset = 0;
                    } else {
                        done = p.transmit;
                        offset = p.end;
                    }
                }
                if sent < count && done > 0 {
                    // The kernel stopped at a message it could not send (full
                    // buffer or an error it does not report after progress):
                    // let the caller's next call start there and see why.
                    return Ok(done);
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                // Before Linux 3.0: one datagram per call from now on.
                state.send_mmsg.store(false, Ordering::Relaxed);
                let rest = transmits.get(done..).unwrap_or_default();
                return match fallback::send(state, sock, rest) {
                    Ok(sent) => Ok(done + sent),
                    Err(e) => partial_send(state, done, e),
                };
            }
            Err(e) => {
                let first = plan.first().copied().unwrap_or_default();
                let gso_refused = matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EIO));
                match first.gso {
                    Some(seg) if gso_refused => {
                        // Is GSO at fault, or the destination? Send the first
                        // datagram alone: if that works, GSO is what failed.
                        let transmit = transmits.get(first.transmit).copied();
                        let sent = transmit
                            .map_or(Ok(()), |t| send_one(state, sock, &t, first.start, seg));
                        if let Err(e) = sent {
                            return partial_send(state, done, e);
                        }
                        state.gso_segments.store(1, Ordering::Relaxed);
                        bump(&state.counters.gso_fallbacks, 1);
                        offset = first.start + seg;
                        let total = transmits.get(done).map_or(0, |t| t.contents.len());
                        if offset >= total {
                            done += 1;
                            offset = 0;
                        }
                    }
                    _ => return partial_send(state, done, e),
                }
            }
        }
    }
    Ok(done)
}

/// Sends the datagram of `seg` bytes (or fewer, at the end) at `start` in
/// `transmit.contents` on its own, without GSO.
fn send_one(
    state: &UdpState,
    sock: &Socket,
    transmit: &Transmit<'_>,
    start: usize,
    seg: usize,
) -> io::Result<()> {
    let end = start.saturating_add(seg).min(transmit.contents.len());
    let datagram = transmit.contents.get(start..end).unwrap_or_default();
    let addr = SockAddr::from(state.destination(transmit.destination));
    loop {
        bump(&state.counters.send_syscalls, 1);
        match sock.send_to_with_flags(datagram, &addr, libc::MSG_DONTWAIT) {
            Ok(_) => {
                bump(&state.counters.datagrams_sent, 1);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
