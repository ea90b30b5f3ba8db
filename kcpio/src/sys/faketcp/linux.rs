//! The Linux fake-TCP transport: a raw IP socket for the segments, the
//! kernel's TCP socket(s) for the handshake, the firewall table.
//!
//! IPv4 and IPv6 differ only at the raw socket. An `AF_INET` raw socket
//! reads and (`IP_HDRINCL`) writes whole IP packets. An `AF_INET6` raw
//! socket never does either: it reads the TCP segment alone, the source in
//! the message name and the destination in an `IPV6_PKTINFO` message
//! (`IPV6_RECVPKTINFO`), and sends a segment whose source address is given
//! the same way; the hop limit (64) and traffic class are socket options.
//! The kernel neither computes nor checks the TCP checksum on an IPv6 raw
//! socket unless `IPV6_CHECKSUM` is set (it is not): ours covers the IPv6
//! pseudo-header, both ways, as for IPv4.

use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::codec::{self, DATA_HEADER_LEN, Drop as Why, Flow};
use super::firewall::{Family, Firewall};
use super::{FakeTcpCounters, FakeTcpStats};
use crate::sys::linux::set_int;
use crate::sys::{BATCH_SIZE, RecvMeta, Transmit, UdpState, bump};

/// Kernel connects tried when an ephemeral port collides (`EADDRINUSE`),
/// each from a new port (the sockets that collided stay bound until the
/// last try, so the kernel cannot hand their ports out again).
const CONNECT_TRIES: usize = 8;

/// IPv4 header we write (no options).
const IP_HEADER: usize = 20;
/// A flow nobody sent on for this long is forgotten, its kernel socket closed.
const FLOW_IDLE: Duration = Duration::from_secs(300);
/// A flow whose handshake the kernel has not completed in this long is forgotten.
const HANDSHAKE_IDLE: Duration = Duration::from_secs(10);
/// Flows one listener keeps at most (handshakes included).
pub(crate) const MAX_FLOWS: usize = 4096;
/// How often expiry and the kernel-socket drain run.
const MAINTENANCE: Duration = Duration::from_millis(500);
/// Receive buffer of a kernel TCP socket: what fake segments it may hold
/// between drains (the kernel doubles it).
const KERNEL_RCVBUF: usize = 64 * 1024;
/// Receive buffer asked for the raw socket.
const RAW_RCVBUF: usize = 4 << 20;

/// One flow: the sequence numbers, the kernel socket that holds the
/// handshake, our address as the peer sees it.
struct Entry {
    flow: Flow,
    kernel: Option<Socket>,
    local_ip: IpAddr,
    last_rx: Instant,
}

/// The flows and the kernel sockets behind them.
struct Table {
    flows: HashMap<SocketAddr, Entry>,
    /// A handshake segment arrived: try `accept` after this batch.
    accept_due: bool,
    last_maintenance: Instant,
    /// Seeds the next flow's timestamp base and windows.
    seed: u64,
}

/// What the kernel socket is.
enum Kernel {
    Client,
    Listener(Arc<Group>),
}

/// The listener's kernel socket, shared by the shards of one port: each
/// shard's raw socket sees only its share of the peers ([`shard_of`], in
/// the kernel's filter), while the kernel's completed handshakes come out
/// of this one socket in any order; a shard that accepts one for another
/// shard's peer leaves it in that shard's inbox.
struct Group {
    listener: Socket,
    /// Accepted kernel sockets waiting for their shard, at most
    /// [`MAX_FLOWS`] each.
    inbox: Vec<Mutex<Vec<(SocketAddr, Socket)>>>,
}

impl Group {
    fn shards(&self) -> u32 {
        self.inbox.len() as u32
    }
}

/// The shard (of `shards`) that owns `peer`: a multiplicative hash of its
/// address (an IPv6 address folded to 32 bits by XOR of its four words)
/// and port, reduced to the range without division. The kernel filter of
/// each shard's raw socket computes the same in classic BPF
/// ([`attach_port_filter`]).
pub(crate) fn shard_of(peer: SocketAddr, shards: u32) -> u32 {
    let word = match peer.ip() {
        IpAddr::V4(ip) => u32::from(ip),
        IpAddr::V6(ip) => {
            let b = ip.octets();
            b.chunks_exact(4)
                .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
                .fold(0, |a, w| a ^ w)
        }
    };
    let h = (word ^ u32::from(peer.port())).wrapping_mul(SHARD_HASH) >> 16;
    (h * shards.clamp(1, MAX_SHARDS)) >> 16
}

/// The hash's multiplier (2^32 / golden ratio, odd).
const SHARD_HASH: u32 = 0x9E37_79B1;
/// Most shards of one port (the range reduction multiplies a 16-bit hash
/// by the count in 32 bits).
pub(crate) const MAX_SHARDS: u32 = 1 << 15;

/// A fake-TCP endpoint (one port): see [`crate::Carrier::FakeTcp`].
pub(crate) struct FakeTcp {
    raw: Socket,
    local: SocketAddr,
    family: Family,
    kernel: Kernel,
    /// Which shard of the listener's group this is (0 for a client).
    shard: u32,
    table: Mutex<Table>,
    max_payload: usize,
    /// The IPv4 TOS byte of our segments (DSCP << 2); on IPv6 the raw
    /// socket's traffic class says it.
    tos: u8,
    epoch: Instant,
    pub(crate) counters: FakeTcpCounters,
    // Dropped last (by the last shard): the rules outlive the sockets they
    // silence.
    _firewall: Arc<Firewall>,
}

impl AsRawFd for FakeTcp {
    fn as_raw_fd(&self) -> RawFd {
        self.raw.as_raw_fd()
    }
}

/// `addr` as a flow key: an IPv4-mapped IPv6 address as IPv4, an IPv6
/// one without flow label, and with its scope only when link-local (where
/// the interface matters), so the names the kernel gives (accept, the raw
/// socket) and the addresses the caller gives meet.
fn normalize(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => addr,
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(ip) => SocketAddr::V4(SocketAddrV4::new(ip, a.port())),
            None => {
                let scope = if a.ip().is_unicast_link_local() {
                    a.scope_id()
                } else {
                    0
                };
                SocketAddr::V6(SocketAddrV6::new(*a.ip(), a.port(), 0, scope))
            }
        },
    }
}

fn family_of(addr: SocketAddr) -> Family {
    if addr.is_ipv4() {
        Family::V4
    } else {
        Family::V6
    }
}

/// `e` naming the step of a fake-TCP set-up that returned it (its kind
/// kept, so callers still match on it).
fn context(e: io::Error, step: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{step}: {e}"))
}

/// `bind` in the family of `peer` (both normalized): an unspecified
/// address of the other family becomes this family's, port kept.
fn bind_for(bind: SocketAddr, peer: SocketAddr) -> io::Result<SocketAddr> {
    let bind = normalize(bind);
    match (bind, peer) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => Ok(bind),
        (b, p) if b.ip().is_unspecified() => Ok(SocketAddr::new(
            match p {
                SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            },
            b.port(),
        )),
        (b, p) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fake TCP: cannot reach {p} from {b} (another IP version)"),
        )),
    }
}

/// The addresses of a segment read from an IPv6 raw socket: the source
/// from the message name, our destination from `IPV6_PKTINFO`.
#[derive(Clone, Copy, Debug)]
struct V6Addrs {
    src: SocketAddrV6,
    dst: Ipv6Addr,
}

/// One `IPV6_PKTINFO` control message, laid out as `CMSG_SPACE` lays it
/// out (the data right after the 16-byte header on Linux): the
/// destination a segment came to, or the source we send one from.
#[repr(C)]
#[derive(Clone, Copy)]
struct PktinfoCmsg {
    hdr: libc::cmsghdr,
    info: libc::in6_pktinfo,
}

impl PktinfoCmsg {
    fn zeroed() -> Self {
        // SAFETY: plain C structs of integers; all-zero bytes are valid.
        unsafe { mem::zeroed() }
    }

    /// The control message that sends from `src` (interface `ifindex`, 0
    /// for any).
    fn source(src: Ipv6Addr, ifindex: u32) -> Self {
        let mut c = Self::zeroed();
        c.hdr.cmsg_len = mem::offset_of!(Self, info) + size_of::<libc::in6_pktinfo>();
        c.hdr.cmsg_level = libc::IPPROTO_IPV6;
        c.hdr.cmsg_type = libc::IPV6_PKTINFO;
        c.info.ipi6_addr.s6_addr = src.octets();
        c.info.ipi6_ifindex = ifindex;
        c
    }
}

/// The addresses of a message the kernel filled in: `None` when the name
/// is not IPv6 or the control message is missing or cut.
fn v6_addrs(
    hdr: &libc::msghdr,
    name: &libc::sockaddr_in6,
    control: &PktinfoCmsg,
) -> Option<V6Addrs> {
    let whole = mem::offset_of!(PktinfoCmsg, info) + size_of::<libc::in6_pktinfo>();
    if name.sin6_family != libc::AF_INET6 as libc::sa_family_t
        || hdr.msg_flags & libc::MSG_CTRUNC != 0
        || hdr.msg_controllen < whole
        || control.hdr.cmsg_level != libc::IPPROTO_IPV6
        || control.hdr.cmsg_type != libc::IPV6_PKTINFO
        || control.hdr.cmsg_len < whole
    {
        return None;
    }
    Some(V6Addrs {
        src: SocketAddrV6::new(
            Ipv6Addr::from(name.sin6_addr.s6_addr),
            u16::from_be(name.sin6_port),
            0,
            name.sin6_scope_id,
        ),
        dst: Ipv6Addr::from(control.info.ipi6_addr.s6_addr),
    })
}

/// A seed from the OS (the table's flows derive theirs from it).
fn os_seed() -> u64 {
    use rand::{RngCore, SeedableRng};
    rand_chacha::ChaCha8Rng::from_os_rng().next_u64()
}

/// Opens the raw socket of `bind`'s family (bound to its address unless
/// unspecified), filtered in the kernel to TCP segments for `port`. With
/// `shard = (index, count)`, only the peers [`shard_of`] gives to `index`
/// pass the filter. `tos` is the IPv6 traffic class (IPv4 writes it into
/// each header).
fn raw_socket(bind: SocketAddr, port: u16, shard: (u32, u32), tos: u8) -> io::Result<Socket> {
    let family = family_of(bind);
    let raw =
        Socket::new(Domain::for_address(bind), Type::RAW, Some(Protocol::TCP)).map_err(|e| {
            if e.kind() == io::ErrorKind::PermissionDenied {
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "fake TCP needs CAP_NET_RAW to open a raw socket",
                )
            } else {
                e
            }
        })?;
    attach_port_filter(&raw, family, port, shard)?;
    match family {
        Family::V4 => {
            #[allow(
                deprecated,
                reason = "socket2 0.5 names it so; 0.6 renames it set_header_included_v4"
            )]
            raw.set_header_included(true)?;
        }
        Family::V6 => {
            // The destination of each segment (the checksum covers it, and
            // a listener on `::` answers from it).
            set_int(&raw, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
            raw.set_unicast_hops_v6(64)?;
            set_int(
                &raw,
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                libc::c_int::from(tos),
            )?;
        }
    }
    raw.set_nonblocking(true)?;
    if raw.set_recv_buffer_size(RAW_RCVBUF).is_err() {
        let _ = raw.set_recv_buffer_size(RAW_RCVBUF / 4);
    }
    if !bind.ip().is_unspecified() {
        raw.bind(&SockAddr::from(SocketAddr::new(bind.ip(), 0)))?;
    }
    // Segments queued before the filter was attached: drop them (they
    // would be parsed and checked anyway, this only saves the work).
    let mut buf = [0u8; 64];
    for _ in 0..1024 {
        // SAFETY: `buf` is a live local of the length given.
        let r = unsafe {
            libc::recv(
                raw.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if r < 0 {
            break;
        }
    }
    Ok(raw)
}

/// Where a load at `k` finds the network header (`SKF_NET_OFF`): on an
/// IPv6 raw socket the filter's packet starts at the TCP header.
const NET: u32 = libc::SKF_NET_OFF as u32;

/// The program of [`attach_port_filter`].
fn port_filter(family: Family, port: u16, (index, count): (u32, u32)) -> Vec<libc::sock_filter> {
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let accept = op(libc::BPF_RET | libc::BPF_K, 0, 0, 0x0004_0000);
    let drop = op(libc::BPF_RET | libc::BPF_K, 0, 0, 0);
    let port_eq = op(
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        0,
        0,
        u32::from(port),
    );
    let xor_x = op(libc::BPF_ALU | libc::BPF_XOR | libc::BPF_X, 0, 0, 0);
    let tax = op(libc::BPF_MISC | libc::BPF_TAX, 0, 0, 0);
    let mut prog = match family {
        Family::V4 => vec![
            // A = fragment offset field; a fragment carries no port: drop.
            op(libc::BPF_LD | libc::BPF_H | libc::BPF_ABS, 0, 0, 6),
            // (jump targets are patched below, to the final `drop`)
            op(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K, 0, 0, 0x1fff),
            // X = IP header length; A = the destination port behind it.
            op(libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH, 0, 0, 0),
            op(libc::BPF_LD | libc::BPF_H | libc::BPF_IND, 0, 0, 2),
            port_eq,
        ],
        // The packet starts at the TCP header (fragments arrive
        // reassembled); the addresses are behind SKF_NET_OFF.
        Family::V6 => vec![
            op(libc::BPF_LD | libc::BPF_H | libc::BPF_ABS, 0, 0, 2),
            port_eq,
        ],
    };
    if count > 1 {
        let count = count.min(MAX_SHARDS);
        match family {
            Family::V4 => prog.extend([
                // X = source port; A = source address ^ X.
                op(libc::BPF_LD | libc::BPF_H | libc::BPF_IND, 0, 0, 0),
                tax,
                op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 12),
                xor_x,
            ]),
            Family::V6 => {
                // X = source port; then A = X ^ each word of the source
                // address (bytes 8..24 of the IPv6 header).
                prog.extend([op(libc::BPF_LD | libc::BPF_H | libc::BPF_ABS, 0, 0, 0), tax]);
                for (i, word) in (8u32..24).step_by(4).enumerate() {
                    if i > 0 {
                        prog.push(tax);
                    }
                    prog.extend([
                        op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, NET + word),
                        xor_x,
                    ]);
                }
            }
        }
        prog.extend([
            // shard_of: (((A * SHARD_HASH) >> 16) * count) >> 16.
            op(
                libc::BPF_ALU | libc::BPF_MUL | libc::BPF_K,
                0,
                0,
                SHARD_HASH,
            ),
            op(libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K, 0, 0, 16),
            op(libc::BPF_ALU | libc::BPF_MUL | libc::BPF_K, 0, 0, count),
            op(libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K, 0, 0, 16),
            op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 0, index),
        ]);
    }
    prog.extend([accept, drop]);
    // Every conditional jump: true falls through, false goes to `drop`
    // (JSET is the other way round: a set fragment bit drops).
    let last = prog.len() - 1;
    for (i, ins) in prog.iter_mut().enumerate() {
        if u32::from(ins.code) & 0x07 == libc::BPF_JMP {
            let to_drop = (last - i - 1) as u8;
            if u32::from(ins.code) & 0xf0 == libc::BPF_JSET {
                ins.jt = to_drop;
            } else {
                ins.jf = to_drop;
            }
        }
    }
    prog
}

/// A classic BPF program on `raw`: accept unfragmented IPv4 packets (IPv6
/// segments) whose TCP destination port is `port` and, with `shard =
/// (index, count)` and `count > 1`, whose source [`shard_of`] is `index`;
/// drop the rest in the kernel.
fn attach_port_filter(
    raw: &Socket,
    family: Family,
    port: u16,
    shard: (u32, u32),
) -> io::Result<()> {
    let prog = port_filter(family, port, shard);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `prog`, both live locals for the call; the
    // kernel copies the program and only reads them.
    let r = unsafe {
        libc::setsockopt(
            raw.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            ptr::from_ref(&fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the kernel's socket of a flow quiet and bounded: TTL (IPv6 hop
/// limit) 1 (the firewall drops its segments), a small receive buffer, and
/// an abortive close (its RST is dropped by the firewall too, so closing
/// sends nothing a strict firewall could call invalid, and leaves no FIN to
/// retransmit after the rules are gone).
fn silence(sock: &Socket, family: Family) -> io::Result<()> {
    match family {
        Family::V4 => sock.set_ttl(1)?,
        Family::V6 => sock.set_unicast_hops_v6(1)?,
    }
    sock.set_linger(Some(Duration::ZERO))?;
    sock.set_nonblocking(true)?;
    sock.set_recv_buffer_size(KERNEL_RCVBUF)?;
    Ok(())
}

/// The TSval the kernel's socket `sock` would send now (`TCP_TIMESTAMP`);
/// `None` where the kernel does not say (timestamps off, old kernels).
fn kernel_tsval(sock: &Socket) -> Option<u32> {
    let mut val: u32 = 0;
    let mut len = size_of::<u32>() as libc::socklen_t;
    // SAFETY: `val` and `len` are live locals; the kernel writes at most
    // `len` bytes into `val` and the written length into `len`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_TIMESTAMP,
            ptr::from_mut(&mut val).cast(),
            &mut len,
        )
    };
    (r == 0 && len as usize == size_of::<u32>()).then_some(val)
}

/// Discards what the kernel socket queued (our peer's segments that it
/// accepted), without copying: `MSG_TRUNC` on TCP throws the bytes away.
fn drain(sock: &Socket) {
    for _ in 0..64 {
        // SAFETY: a null buffer is allowed with MSG_TRUNC on TCP sockets
        // (the kernel discards instead of copying).
        let r = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                ptr::null_mut(),
                1 << 20,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if r <= 0 {
            break;
        }
    }
}

impl FakeTcp {
    fn new(
        raw: Socket,
        local: SocketAddr,
        (kernel, shard): (Kernel, u32),
        firewall: Arc<Firewall>,
        max_payload: usize,
        dscp: u8,
    ) -> Self {
        Self {
            raw,
            local,
            family: family_of(local),
            kernel,
            shard,
            table: Mutex::new(Table {
                flows: HashMap::new(),
                accept_due: false,
                last_maintenance: Instant::now(),
                seed: os_seed(),
            }),
            max_payload,
            tos: dscp << 2,
            epoch: Instant::now(),
            counters: FakeTcpCounters::default(),
            _firewall: firewall,
        }
    }

    /// Listens on `addr` with `shards` endpoints (at least one): the
    /// firewall table, one raw socket per shard, each filtered in the
    /// kernel to its share of the peers ([`shard_of`]), then the kernel's
    /// one listening socket, shared. Each shard is driven on its own; a
    /// peer's segments all reach the same one. Datagrams are at most
    /// `max_payload` bytes.
    ///
    /// # Errors
    ///
    /// `PermissionDenied` naming `CAP_NET_RAW` or `CAP_NET_ADMIN`; the bind
    /// error.
    pub(crate) fn listen(
        addr: SocketAddr,
        max_payload: usize,
        dscp: u8,
        shards: usize,
    ) -> io::Result<Vec<Self>> {
        let count = u32::try_from(shards)
            .unwrap_or(MAX_SHARDS)
            .clamp(1, MAX_SHARDS);
        let addr = normalize(addr);
        let family = family_of(addr);
        let listener = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        if family == Family::V6 {
            // The raw socket sees IPv6 only: an IPv4 client of `[::]` gets
            // the kernel's refusal, not a flow nobody carries.
            listener.set_only_v6(true)?;
        }
        listener.set_reuse_address(true)?;
        listener.bind(&SockAddr::from(addr))?;
        let local = normalize(
            listener
                .local_addr()?
                .as_socket()
                .ok_or(io::ErrorKind::InvalidInput)?,
        );
        let firewall = Arc::new(Firewall::install(family, local.port())?);
        let tos = dscp << 2;
        let raws = (0..count)
            .map(|i| raw_socket(addr, local.port(), (i, count), tos))
            .collect::<io::Result<Vec<_>>>()?;
        // Not TTL 1 yet: the SYN-ACK must reach the peer. Each accepted
        // socket gets TTL 1 at once.
        listener.set_nonblocking(true)?;
        listener.listen(1024)?;
        tracing::debug!(%local, table = firewall.name(), shards = count, "fake TCP listening");
        let group = Arc::new(Group {
            listener,
            inbox: (0..count).map(|_| Mutex::new(Vec::new())).collect(),
        });
        Ok(raws
            .into_iter()
            .zip(0..)
            .map(|(raw, i)| {
                Self::new(
                    raw,
                    local,
                    (Kernel::Listener(group.clone()), i),
                    firewall.clone(),
                    max_payload,
                    dscp,
                )
            })
            .collect())
    }

    /// Connects to `peer` with a real kernel handshake from `bind` (port 0:
    /// any), then learns the flow's numbers from the handshake.
    ///
    /// # Errors
    ///
    /// As [`listen`](Self::listen), and the connect error.
    pub(crate) async fn connect(
        bind: SocketAddr,
        peer: SocketAddr,
        max_payload: usize,
        dscp: u8,
    ) -> io::Result<Self> {
        let peer = normalize(peer);
        let bind = bind_for(bind, peer)?;
        let family = family_of(peer);
        // An ephemeral port can collide at connect with another flow's
        // (EADDRINUSE when many clients start at once): a fresh socket, a
        // new port, at most CONNECT_TRIES times. The collided sockets stay
        // bound until the loop ends: closed, their port could come back.
        // Each error names its step (which one failed is otherwise a guess).
        let step = |what: &'static str| move |e: io::Error| context(e, what);
        let mut collided: Vec<std::net::TcpStream> = Vec::new();
        let (stream, firewall, raw) = loop {
            let sock = Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))
                .map_err(step("fake TCP: kernel socket"))?;
            sock.bind(&SockAddr::from(bind))
                .map_err(step("fake TCP: bind of the kernel socket"))?;
            let port = sock
                .local_addr()?
                .as_socket()
                .ok_or(io::ErrorKind::InvalidInput)?
                .port();
            let firewall = Arc::new(
                Firewall::install(family, port).map_err(step("fake TCP: firewall rules"))?,
            );
            let raw =
                raw_socket(bind, port, (0, 1), dscp << 2).map_err(step("fake TCP: raw socket"))?;
            sock.set_nonblocking(true)?;
            let std_stream: std::net::TcpStream = sock.into();
            let held = std_stream.try_clone()?;
            match tokio::net::TcpSocket::from_std_stream(std_stream)
                .connect(peer)
                .await
            {
                Ok(stream) => break (stream, firewall, raw),
                Err(e)
                    if e.kind() == io::ErrorKind::AddrInUse
                        && bind.port() == 0
                        && collided.len() + 1 < CONNECT_TRIES =>
                {
                    collided.push(held);
                }
                Err(e) => {
                    let tries = collided.len() + 1;
                    let what = format!("fake TCP: kernel connect (try {tries} of {CONNECT_TRIES})");
                    return Err(context(e, &what));
                }
            }
        };
        drop(collided);
        let sock = Socket::from(stream.into_std()?);
        silence(&sock, family)?;
        let local = normalize(
            sock.local_addr()?
                .as_socket()
                .ok_or(io::ErrorKind::InvalidInput)?,
        );
        let me = Self::new(raw, local, (Kernel::Client, 0), firewall, max_payload, dscp);
        {
            let mut table = me.lock();
            // Established once the handshake's numbers are learned below
            // (an established flow takes no SYN-ACK).
            let flow = Flow::new(max_payload, table.seed);
            table.flows.insert(
                peer,
                Entry {
                    flow,
                    kernel: Some(sock),
                    local_ip: local.ip(),
                    last_rx: Instant::now(),
                },
            );
        }
        // The SYN-ACK is already in the raw socket's queue (it was copied
        // there before the kernel completed the connect): learn from it now,
        // so the first datagram goes out with the right numbers.
        let mut buf = [0u8; 128];
        for _ in 0..64 {
            let Some((n, v6)) = me.recv_one(&mut buf) else {
                break;
            };
            let mut table = me.lock();
            if let Some(packet) = buf.get(..n) {
                me.learn(&mut table, packet, v6);
            }
            if table.flows.get(&peer).is_some_and(|e| e.flow.ready()) {
                break;
            }
        }
        let now_ms = me.now_ms();
        if let Some(e) = me.lock().flows.get_mut(&peer) {
            e.flow.set_established();
            if let Some(ts) = e.kernel.as_ref().and_then(kernel_tsval) {
                e.flow.continue_clock(ts, now_ms);
            }
        }
        tracing::debug!(%local, %peer, "fake TCP connected");
        Ok(me)
    }

    /// Our millisecond clock (TSval less each flow's base).
    fn now_ms(&self) -> u32 {
        self.epoch.elapsed().as_millis() as u32
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The local address (the listening address, or the client's).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A snapshot of the drop counters.
    pub(crate) fn stats(&self) -> FakeTcpStats {
        self.counters.snapshot()
    }

    /// Reads one packet into `buf` (cut to its length) without waiting:
    /// its length and, on IPv6, its addresses ([`V6Addrs`]).
    fn recv_one(&self, buf: &mut [u8]) -> Option<(usize, Option<V6Addrs>)> {
        let mut iov = [IoSliceMut::new(buf)];
        // SAFETY: plain C structs; all-zero bytes are valid values.
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut name: libc::sockaddr_in6 = unsafe { mem::zeroed() };
        let mut control = PktinfoCmsg::zeroed();
        // `IoSliceMut` is ABI-compatible with `iovec` on Unix.
        hdr.msg_iov = iov.as_mut_ptr().cast::<libc::iovec>();
        hdr.msg_iovlen = 1;
        if self.family == Family::V6 {
            hdr.msg_name = ptr::from_mut(&mut name).cast();
            hdr.msg_namelen = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            hdr.msg_control = ptr::from_mut(&mut control).cast();
            hdr.msg_controllen = size_of::<PktinfoCmsg>();
        }
        // SAFETY: the header points at one iovec over `buf`, and (IPv6) at
        // `name` and `control`, live locals of the lengths given, not
        // otherwise touched during the call.
        let r = unsafe { libc::recvmsg(self.raw.as_raw_fd(), &mut hdr, libc::MSG_DONTWAIT) };
        let n = usize::try_from(r).ok()?;
        let v6 = (self.family == Family::V6).then(|| v6_addrs(&hdr, &name, &control));
        Some((n, v6.flatten()))
    }

    /// Parses one packet as the raw socket read it: the IPv4 packet, or
    /// the IPv6 segment with its addresses. Returns the peer (flow key), our
    /// address the segment was sent to, and the segment.
    fn parse<'a>(
        &self,
        packet: &'a [u8],
        v6: Option<V6Addrs>,
    ) -> Result<(SocketAddr, IpAddr, codec::Segment<'a>), codec::Malformed> {
        match (self.family, v6) {
            (Family::V4, _) => codec::parse_ipv4(packet).map(|(src, dst, seg)| {
                (
                    SocketAddr::V4(SocketAddrV4::new(src, seg.src_port)),
                    IpAddr::V4(dst),
                    seg,
                )
            }),
            (Family::V6, Some(a)) => {
                codec::parse_tcp(packet, IpAddr::V6(*a.src.ip()), IpAddr::V6(a.dst)).map(|seg| {
                    let peer = SocketAddrV6::new(*a.src.ip(), seg.src_port, 0, a.src.scope_id());
                    (normalize(SocketAddr::V6(peer)), IpAddr::V6(a.dst), seg)
                })
            }
            (Family::V6, None) => Err(codec::Malformed::BadHeader),
        }
    }

    /// Learns from a (possibly short: 128-byte) handshake packet, delivers nothing.
    fn learn(&self, table: &mut Table, packet: &[u8], v6: Option<V6Addrs>) {
        // The handshake packets are header-only: cut reads are fine.
        let total = packet
            .get(2..4)
            .map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])));
        if self.family == Family::V4 && total > packet.len() {
            return;
        }
        if let Ok((peer, _, seg)) = self.parse(packet, v6)
            && seg.dst_port == self.local.port()
            && let Some(e) = table.flows.get_mut(&peer)
        {
            let _ = e.flow.receive(&seg);
        }
    }

    /// Receives segments into `bufs`: for each, `meta` says the peer, and
    /// where in the buffer its datagram is (`offset`, `len`); a dropped
    /// segment has `len == 0`. Returns how many buffers were filled.
    ///
    /// # Errors
    ///
    /// `WouldBlock` when nothing is queued; other errors are counted and
    /// not fatal.
    pub(crate) fn recv(
        &self,
        state: &UdpState,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let n = bufs.len().min(meta.len()).min(BATCH_SIZE);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: `mmsghdr` is a plain C struct of integers and raw pointers;
        // all-zero bytes are a valid value.
        let mut hdrs: [libc::mmsghdr; BATCH_SIZE] = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut names: [libc::sockaddr_in6; BATCH_SIZE] = unsafe { mem::zeroed() };
        let mut controls = [PktinfoCmsg::zeroed(); BATCH_SIZE];
        let v6 = self.family == Family::V6;
        for (((hdr, buf), name), control) in hdrs
            .iter_mut()
            .zip(bufs.iter_mut())
            .zip(names.iter_mut())
            .zip(controls.iter_mut())
            .take(n)
        {
            // `IoSliceMut` is ABI-compatible with `iovec` on Unix.
            hdr.msg_hdr.msg_iov = ptr::from_mut(buf).cast::<libc::iovec>();
            hdr.msg_hdr.msg_iovlen = 1;
            if v6 {
                hdr.msg_hdr.msg_name = ptr::from_mut(name).cast();
                hdr.msg_hdr.msg_namelen = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
                hdr.msg_hdr.msg_control = ptr::from_mut(control).cast();
                hdr.msg_hdr.msg_controllen = size_of::<PktinfoCmsg>();
            }
        }
        let batch = hdrs.get_mut(..n).unwrap_or_default();
        // SAFETY: the first `n` headers each point at one iovec, a caller
        // buffer exclusively borrowed through `bufs`, and (IPv6) at a name
        // and a control buffer in `names` and `controls`, locals of the
        // lengths given, untouched during the call.
        let got = match unsafe { crate::sys::linux::recvmmsg(state, self.raw.as_raw_fd(), batch) } {
            Ok(got) => got,
            Err(e) => {
                state.count_recv_error(&e);
                return Err(e);
            }
        };
        let now = Instant::now();
        let mut table = self.lock();
        let mut delivered = 0;
        let addrs = names.iter().zip(controls.iter());
        for (((hdr, buf), slot), (name, control)) in hdrs
            .iter()
            .zip(bufs.iter())
            .zip(meta.iter_mut())
            .zip(addrs)
            .take(got)
        {
            *slot = RecvMeta::default();
            let len = (hdr.msg_len as usize).min(buf.len());
            let truncated = hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            let Some(packet) = buf.get(..len) else {
                continue;
            };
            if truncated {
                // Longer than any buffer: merged segments or garbage.
                bump(&self.counters.oversized, 1);
                bump(&state.counters.segments_merged, 1);
                continue;
            }
            let v6 = v6.then(|| v6_addrs(&hdr.msg_hdr, name, control)).flatten();
            if let Some((peer, offset, size)) = self.segment(state, &mut table, packet, v6, now) {
                *slot = RecvMeta {
                    addr: peer,
                    len: size,
                    stride: size.max(1),
                    offset,
                    truncated: false,
                    rx_time: None,
                };
                delivered += 1;
            }
        }
        bump(&state.counters.datagrams_received, delivered);
        if table.accept_due {
            self.accept(&mut table);
        }
        if now.duration_since(table.last_maintenance) >= MAINTENANCE {
            table.last_maintenance = now;
            self.maintain(&mut table, now);
        }
        Ok(got)
    }

    /// One received packet: `Some((peer, payload offset, payload length))`
    /// when it carries a datagram to deliver; else counted.
    fn segment(
        &self,
        state: &UdpState,
        table: &mut Table,
        packet: &[u8],
        v6: Option<V6Addrs>,
        now: Instant,
    ) -> Option<(SocketAddr, usize, usize)> {
        let c = &self.counters;
        let refused = || bump(&state.counters.segments_refused, 1);
        let (peer, dst, seg) = match self.parse(packet, v6) {
            Ok(p) => p,
            Err(codec::Malformed::BadChecksum) => {
                bump(&c.bad_checksum, 1);
                refused();
                return None;
            }
            Err(codec::Malformed::Truncated) => {
                bump(&c.oversized, 1);
                bump(&state.counters.segments_merged, 1);
                return None;
            }
            Err(_) => {
                bump(&c.malformed, 1);
                refused();
                return None;
            }
        };
        if seg.dst_port != self.local.port()
            || (!self.local.ip().is_unspecified() && dst != self.local.ip())
        {
            bump(&c.foreign, 1);
            refused();
            return None;
        }
        let syn_only = seg.flags & (codec::flags::SYN | codec::flags::ACK) == codec::flags::SYN;
        if !table.flows.contains_key(&peer) {
            // Only a listener learns new peers, and only from a SYN.
            if !syn_only || !matches!(self.kernel, Kernel::Listener(_)) {
                bump(&c.unknown_flow, 1);
                refused();
                return None;
            }
            if table.flows.len() >= MAX_FLOWS {
                bump(&c.table_full, 1);
                refused();
                return None;
            }
            table.seed = table
                .seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            table.flows.insert(
                peer,
                Entry {
                    flow: Flow::new(self.max_payload, table.seed),
                    kernel: None,
                    local_ip: dst,
                    last_rx: now,
                },
            );
        }
        let entry = table.flows.get_mut(&peer)?;
        if syn_only && entry.kernel.is_none() {
            entry.local_ip = dst;
        }
        let verdict = entry.flow.receive(&seg);
        if verdict != Err(Why::ForeignAck) {
            entry.last_rx = now;
        }
        match verdict {
            Ok(()) => Some((peer, seg.payload_offset, seg.payload.len())),
            Err(why) => {
                if entry.kernel.is_none() {
                    // A handshake segment (or an early one): the kernel may
                    // have a connection for us.
                    table.accept_due = matches!(self.kernel, Kernel::Listener(_));
                }
                let counter = match why {
                    Why::NoPayload => &c.bare,
                    Why::Reset => &c.rst,
                    Why::Fin => &c.fin,
                    Why::LateSyn => &c.late_syn,
                    Why::NoPush => &c.no_push,
                    Why::ForeignAck => &c.foreign_ack,
                    Why::Oversized => &c.oversized,
                    Why::Orphan => &c.orphan,
                };
                bump(counter, 1);
                match why {
                    Why::NoPayload => {}
                    Why::Oversized => bump(&state.counters.segments_merged, 1),
                    _ => refused(),
                }
                None
            }
        }
    }

    /// Takes the kernel's completed handshakes: each becomes its flow's
    /// kernel socket (silenced), which makes the flow deliver. One of
    /// another shard's peers goes to that shard's inbox; this shard's
    /// inbox is emptied into its flows.
    fn accept(&self, table: &mut Table) {
        let Kernel::Listener(group) = &self.kernel else {
            return;
        };
        table.accept_due = false;
        for _ in 0..MAX_FLOWS {
            let Ok((sock, addr)) = group.listener.accept() else {
                break;
            };
            let Some(peer) = addr.as_socket().map(normalize) else {
                continue;
            };
            if silence(&sock, self.family).is_err() {
                continue;
            }
            let owner = shard_of(peer, group.shards());
            if owner == self.shard {
                self.attach(table, peer, sock);
            } else if let Some(inbox) = group.inbox.get(owner as usize) {
                let mut inbox = inbox.lock().unwrap_or_else(|p| p.into_inner());
                if inbox.len() < MAX_FLOWS {
                    inbox.push((peer, sock));
                } else {
                    // That shard is not taking its handshakes: closing
                    // lets the peer retry.
                    bump(&self.counters.table_full, 1);
                }
            }
        }
        let mine = group
            .inbox
            .get(self.shard as usize)
            .map(|inbox| mem::take(&mut *inbox.lock().unwrap_or_else(|p| p.into_inner())));
        for (peer, sock) in mine.unwrap_or_default() {
            self.attach(table, peer, sock);
        }
    }

    /// Gives `peer`'s flow its accepted kernel socket.
    fn attach(&self, table: &mut Table, peer: SocketAddr, sock: Socket) {
        match table.flows.get_mut(&peer) {
            Some(e) => {
                e.flow.set_established();
                if let Some(ts) = kernel_tsval(&sock) {
                    e.flow.continue_clock(ts, self.now_ms());
                }
                e.kernel = Some(sock);
            }
            None => {
                // The raw socket never saw its SYN (queue overflow, or
                // the table was full): without its numbers the flow is
                // useless; closing it lets the peer retry.
                bump(&self.counters.unknown_flow, 1);
            }
        }
    }

    /// Drains the kernel sockets, forgets idle flows.
    fn maintain(&self, table: &mut Table, now: Instant) {
        let client = matches!(self.kernel, Kernel::Client);
        table.flows.retain(|_, e| {
            let idle = now.duration_since(e.last_rx);
            match &e.kernel {
                Some(sock) => {
                    drain(sock);
                    // A client's one flow lives as long as the socket.
                    client || idle < FLOW_IDLE
                }
                None => idle < HANDSHAKE_IDLE,
            }
        });
        if matches!(self.kernel, Kernel::Listener(_)) {
            self.accept(table);
        }
    }

    /// Sends `transmits` (each one datagram: this carrier has no GSO) as
    /// `PSH|ACK` segments; returns how many went out (all of them count
    /// as sent when the flow is unknown or not ready: dropped, like a lost
    /// packet, and counted).
    ///
    /// # Errors
    ///
    /// As [`UdpState::send`]: `WouldBlock` with nothing sent, or an error
    /// about `transmits[0]`.
    pub(crate) fn send(&self, state: &UdpState, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        let n = transmits.len().min(BATCH_SIZE);
        if n == 0 {
            return Ok(0);
        }
        let mut headers = [[0u8; IP_HEADER + DATA_HEADER_LEN]; BATCH_SIZE];
        // SAFETY: plain C structs; all-zero bytes are valid values.
        let mut hdrs: [libc::mmsghdr; BATCH_SIZE] = unsafe { mem::zeroed() };
        let mut iovs = [[libc::iovec {
            iov_base: ptr::null_mut(),
            iov_len: 0,
        }; 2]; BATCH_SIZE];
        // SAFETY: as above.
        let mut names: [libc::sockaddr_in; BATCH_SIZE] = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut names6: [libc::sockaddr_in6; BATCH_SIZE] = unsafe { mem::zeroed() };
        let mut controls = [PktinfoCmsg::zeroed(); BATCH_SIZE];
        // Which transmit each message is, and its flow, to undo on a short send.
        let unspecified = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
        let mut which = [(0usize, unspecified); BATCH_SIZE];
        let now_ms = self.now_ms();
        let mut count = 0;
        {
            let mut table = self.lock();
            for (i, t) in transmits.iter().enumerate().take(n) {
                let dest = normalize(t.destination);
                let Some(e) = table.flows.get_mut(&dest).filter(|e| e.flow.ready()) else {
                    bump(&self.counters.unready, 1);
                    continue;
                };
                let (
                    Some(hdr),
                    Some(iov),
                    Some(name),
                    Some(name6),
                    Some(control),
                    Some(msg),
                    Some(w),
                ) = (
                    headers.get_mut(count),
                    iovs.get_mut(count),
                    names.get_mut(count),
                    names6.get_mut(count),
                    controls.get_mut(count),
                    hdrs.get_mut(count),
                    which.get_mut(count),
                )
                else {
                    break;
                };
                let payload = t.contents;
                let h = e
                    .flow
                    .next_header(self.local.port(), dest.port(), payload.len(), now_ms);
                let (ip, tcp) = hdr.split_at_mut(IP_HEADER);
                if let Ok(tcp) = <&mut [u8; DATA_HEADER_LEN]>::try_from(tcp) {
                    codec::write_header(tcp, &h, e.local_ip, dest.ip(), payload);
                }
                // IPv4: the IP header we write, then the TCP header; IPv6:
                // the TCP header alone, addresses in the name and pktinfo.
                let head = match (dest, e.local_ip) {
                    (SocketAddr::V4(d), IpAddr::V4(src)) => {
                        if let Ok(ip) = <&mut [u8; IP_HEADER]>::try_from(ip) {
                            write_ip_header(ip, self.tos, src, *d.ip(), payload.len());
                        }
                        *name = libc::sockaddr_in {
                            sin_family: libc::AF_INET as libc::sa_family_t,
                            sin_port: 0,
                            sin_addr: libc::in_addr {
                                s_addr: u32::from_ne_bytes(d.ip().octets()),
                            },
                            sin_zero: [0; 8],
                        };
                        msg.msg_hdr.msg_name = ptr::from_mut(name).cast();
                        msg.msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
                        &mut hdr[..]
                    }
                    (SocketAddr::V6(d), IpAddr::V6(src)) => {
                        name6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                        name6.sin6_addr.s6_addr = d.ip().octets();
                        name6.sin6_scope_id = d.scope_id();
                        *control = PktinfoCmsg::source(src, d.scope_id());
                        msg.msg_hdr.msg_name = ptr::from_mut(name6).cast();
                        msg.msg_hdr.msg_namelen =
                            size_of::<libc::sockaddr_in6>() as libc::socklen_t;
                        msg.msg_hdr.msg_control = ptr::from_mut(control).cast();
                        msg.msg_hdr.msg_controllen = size_of::<PktinfoCmsg>();
                        hdr.get_mut(IP_HEADER..).unwrap_or_default()
                    }
                    _ => {
                        // A flow's address and ours are one family.
                        e.flow.unsend(payload.len());
                        bump(&self.counters.unready, 1);
                        continue;
                    }
                };
                *iov = [
                    libc::iovec {
                        iov_base: head.as_mut_ptr().cast(),
                        iov_len: head.len(),
                    },
                    libc::iovec {
                        iov_base: payload.as_ptr().cast_mut().cast(),
                        iov_len: payload.len(),
                    },
                ];
                msg.msg_hdr.msg_iov = iov.as_mut_ptr();
                msg.msg_hdr.msg_iovlen = 2;
                *w = (i, dest);
                count += 1;
            }
        }
        if count == 0 {
            return Ok(n);
        }
        let sent = loop {
            bump(&state.counters.send_syscalls, 1);
            // SAFETY: the first `count` headers point at a name, two iovecs,
            // (IPv6) a control message, and a header array on this stack frame and at payloads
            // borrowed from `transmits`, all live and unchanged for the call;
            // the kernel only reads them.
            let r = unsafe {
                libc::sendmmsg(
                    self.raw.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    count as libc::c_uint,
                    libc::MSG_DONTWAIT as _,
                )
            };
            if let Ok(s) = usize::try_from(r) {
                break Ok(s.min(count));
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                break Err(e);
            }
        };
        // Messages not sent give their sequence space back (in reverse,
        // so a flow's numbers return exactly to the first unsent one).
        let sent_msgs = *sent.as_ref().unwrap_or(&0);
        if sent_msgs < count {
            let mut table = self.lock();
            for &(i, dest) in which.get(sent_msgs..count).unwrap_or_default().iter().rev() {
                if let (Some(e), Some(t)) = (table.flows.get_mut(&dest), transmits.get(i)) {
                    e.flow.unsend(t.contents.len());
                }
            }
        }
        match sent {
            Ok(s) => {
                bump(&state.counters.datagrams_sent, s);
                // Transmits before the first unsent message are done,
                // including unready ones skipped in between.
                let sent_idx = which.get(..count).unwrap_or_default();
                Ok(transmits_done(sent_idx, s, n))
            }
            Err(e) => {
                let first = which.first().map_or(0, |&(i, _)| i);
                if first > 0 {
                    // Unready transmits before the failed one are done.
                    return Ok(first);
                }
                state.count_send_error(&e);
                Err(e)
            }
        }
    }
}

/// How many leading transmits (of `n`) a batch handled, when `sent` of its
/// messages went out and `which[k]` is the transmit of message `k` (the
/// transmits without a message were dropped as unready): all of them up to
/// the first message not sent; at least one.
fn transmits_done(which: &[(usize, SocketAddr)], sent: usize, n: usize) -> usize {
    which.get(sent).map_or(n, |&(i, _)| i).clamp(1, n.max(1))
}

/// The IPv4 header of one segment: DF, TTL 64; the kernel fills in the
/// identification and the checksum (`IP_HDRINCL`).
fn write_ip_header(
    hdr: &mut [u8; IP_HEADER],
    tos: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    payload: usize,
) {
    let total = (IP_HEADER + DATA_HEADER_LEN + payload).min(usize::from(u16::MAX)) as u16;
    hdr[0] = 0x45;
    hdr[1] = tos;
    hdr[2..4].copy_from_slice(&total.to_be_bytes());
    hdr[4..6].fill(0);
    hdr[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    hdr[8] = 64;
    hdr[9] = 6;
    hdr[10..12].fill(0);
    hdr[12..16].copy_from_slice(&src.octets());
    hdr[16..20].copy_from_slice(&dst.octets());
}

/// A [`FakeTcp`] registered with tokio: what the driver holds.
pub(crate) struct FakeTcpSocket {
    fd: tokio::io::unix::AsyncFd<FakeTcp>,
}

impl FakeTcpSocket {
    /// Registers `inner`'s raw socket with the runtime.
    ///
    /// # Errors
    ///
    /// The runtime's registration error.
    pub(crate) fn new(inner: FakeTcp) -> io::Result<Self> {
        // SAFETY: the descriptor is the raw socket `inner` owns; it stays
        // open and the same for as long as `inner` lives, which is as long
        // as the `AsyncFd` (it owns `inner`), and `as_raw_fd` always
        // returns it.
        let fd = unsafe { tokio::io::unix::AsyncFd::register(inner) }.map_err(io::Error::from)?;
        Ok(Self { fd })
    }

    /// The transport.
    pub(crate) fn get(&self) -> &FakeTcp {
        self.fd.get_ref()
    }

    /// Receives a batch ([`FakeTcp::recv`]) once the raw socket is readable.
    /// A short batch clears the readiness (the queue was empty).
    pub(crate) fn poll_recv(
        &self,
        cx: &mut std::task::Context<'_>,
        state: &UdpState,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> std::task::Poll<io::Result<usize>> {
        let want = bufs.len().min(meta.len()).min(BATCH_SIZE);
        loop {
            let mut guard = std::task::ready!(self.fd.poll_read_ready(cx))?;
            match guard.try_io(|fd| fd.get_ref().recv(state, bufs, meta)) {
                Ok(Ok(got)) => {
                    if got < want {
                        guard.clear_ready();
                    }
                    return std::task::Poll::Ready(Ok(got));
                }
                Ok(Err(e)) => return std::task::Poll::Ready(Err(e)),
                Err(_would_block) => {}
            }
        }
    }

    /// Sends a batch ([`FakeTcp::send`]) once the raw socket is writable.
    pub(crate) fn poll_send(
        &self,
        cx: &mut std::task::Context<'_>,
        state: &UdpState,
        transmits: &[Transmit<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        loop {
            let mut guard = std::task::ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| fd.get_ref().send(state, transmits)) {
                Ok(r) => return std::task::Poll::Ready(r),
                Err(_would_block) => {}
            }
        }
    }
}

impl Drop for FakeTcp {
    fn drop(&mut self) {
        tracing::debug!(local = %self.local, stats = ?self.stats(), "fake TCP closed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the classic BPF instructions `port_filter` uses over `packet`
    /// (what the raw socket's filter sees: an IPv4 packet, or an IPv6
    /// socket's TCP segment) whose network header is `net` (loads at
    /// `SKF_NET_OFF + k`): what the kernel returns.
    fn run_filter(prog: &[libc::sock_filter], packet: &[u8], net: &[u8]) -> u32 {
        let load = |at: usize, size: usize| -> Option<u32> {
            let (bytes, at) = match at.checked_sub(NET as usize) {
                Some(off) => (net, off),
                None => (packet, at),
            };
            let b = bytes.get(at..at + size)?;
            Some(b.iter().fold(0u32, |a, &x| (a << 8) | u32::from(x)))
        };
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        for _ in 0..prog.len() {
            let ins = prog[pc];
            let code = u32::from(ins.code);
            let k = ins.k;
            pc += 1;
            let size = match code & 0x18 {
                libc::BPF_W => 4,
                libc::BPF_H => 2,
                _ => 1,
            };
            match code & 0x07 {
                libc::BPF_LD => {
                    let at = if code & 0xe0 == libc::BPF_IND {
                        x as usize + k as usize
                    } else {
                        k as usize
                    };
                    let Some(v) = load(at, size) else { return 0 };
                    a = v;
                }
                libc::BPF_LDX => {
                    let Some(v) = load(k as usize, 1) else {
                        return 0;
                    };
                    x = (v & 0x0f) * 4;
                }
                libc::BPF_MISC => x = a,
                libc::BPF_ALU => {
                    let operand = if code & 0x08 == libc::BPF_X { x } else { k };
                    a = match code & 0xf0 {
                        libc::BPF_XOR => a ^ operand,
                        libc::BPF_MUL => a.wrapping_mul(operand),
                        libc::BPF_RSH => a >> operand,
                        op => panic!("ALU op {op:#x} not interpreted"),
                    };
                }
                libc::BPF_JMP => {
                    let taken = match code & 0xf0 {
                        libc::BPF_JEQ => a == k,
                        libc::BPF_JSET => a & k != 0,
                        op => panic!("jump {op:#x} not interpreted"),
                    };
                    pc += usize::from(if taken { ins.jt } else { ins.jf });
                }
                libc::BPF_RET => return k,
                class => panic!("class {class:#x} not interpreted"),
            }
        }
        panic!("the program ran off its end")
    }

    /// An IPv4/TCP packet from `src` to port `dport`, `frag` in the
    /// fragment field.
    fn packet(src: SocketAddrV4, dport: u16, frag: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[6..8].copy_from_slice(&frag.to_be_bytes());
        p[9] = 6;
        p[12..16].copy_from_slice(&src.ip().octets());
        p[16..20].copy_from_slice(&[10, 0, 0, 1]);
        p[20..22].copy_from_slice(&src.port().to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    /// An IPv6 header from `src` (as `SKF_NET_OFF` sees it) and the TCP
    /// segment to port `dport` behind it (the packet an IPv6 raw socket's
    /// filter runs on).
    fn packet6(src: SocketAddrV6, dport: u16) -> (Vec<u8>, Vec<u8>) {
        let mut ip = vec![0u8; 40];
        ip[0] = 0x60;
        ip[6] = 6;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&src.ip().octets());
        ip[24..40].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&src.port().to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[12] = 5 << 4;
        (ip, tcp)
    }

    #[test]
    fn the_kernel_filter_computes_the_same_shard_as_the_dispatch() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        for count in [1u32, 2, 3, 4, 7, 16] {
            let progs: Vec<_> = (0..count)
                .map(|i| port_filter(Family::V4, 29900, (i, count)))
                .collect();
            let progs6: Vec<_> = (0..count)
                .map(|i| port_filter(Family::V6, 29900, (i, count)))
                .collect();
            let mut seen = vec![0u32; count as usize];
            let mut seen6 = vec![0u32; count as usize];
            for _ in 0..2000 {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let ip = Ipv4Addr::from((seed >> 32) as u32);
                let peer = SocketAddrV4::new(ip, (seed >> 16) as u16);
                let p = packet(peer, 29900, 0x4000);
                let passing: Vec<u32> = (0..count)
                    .filter(|&i| run_filter(&progs[i as usize], &p, &p) != 0)
                    .collect();
                // Exactly one shard takes the peer: the one `shard_of` names.
                let want = shard_of(SocketAddr::V4(peer), count);
                assert_eq!(passing, vec![want], "{peer} of {count}");
                seen[passing[0] as usize] += 1;
                // Another port, or a fragment: no shard takes it.
                for prog in &progs {
                    let other = packet(peer, 29901, 0x4000);
                    assert_eq!(run_filter(prog, &other, &other), 0);
                    let frag = packet(peer, 29900, 0x2001);
                    assert_eq!(run_filter(prog, &frag, &frag), 0);
                }
                // IPv6 (a ULA address, random below the prefix): the
                // filter reads the address behind SKF_NET_OFF.
                let mut octets = [0u8; 16];
                octets[0] = 0xfd;
                octets[4..12].copy_from_slice(&seed.to_be_bytes());
                octets[12..].copy_from_slice(&ip.octets());
                let peer6 = SocketAddrV6::new(Ipv6Addr::from(octets), (seed >> 16) as u16, 0, 0);
                let (net, tcp) = packet6(peer6, 29900);
                let passing: Vec<u32> = (0..count)
                    .filter(|&i| run_filter(&progs6[i as usize], &tcp, &net) != 0)
                    .collect();
                let want = shard_of(SocketAddr::V6(peer6), count);
                assert_eq!(passing, vec![want], "{peer6} of {count}");
                seen6[passing[0] as usize] += 1;
                let (net, other) = packet6(peer6, 29901);
                for prog in &progs6 {
                    assert_eq!(run_filter(prog, &other, &net), 0);
                }
            }
            let fair = 2000 / count;
            assert!(
                seen6.iter().all(|&n| n >= fair / 2),
                "v6 {count}: {seen6:?}"
            );
            // The hash spreads peers: every shard gets at least half its share.
            let fair = 2000 / count;
            assert!(seen.iter().all(|&n| n >= fair / 2), "{count}: {seen:?}");
        }
        // One address, consecutive ports (many clients behind one host):
        // spread too.
        let mut seen = [0u32; 4];
        for port in 40000..40400u16 {
            seen[shard_of(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n >= 50), "{seen:?}");
        let mut seen = [0u32; 4];
        for port in 40000..40400u16 {
            let ula = "fd00:77:1::2".parse::<Ipv6Addr>().unwrap();
            seen[shard_of(SocketAddr::from((ula, port)), 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n >= 50), "v6 {seen:?}");
    }

    #[test]
    fn a_batch_reports_the_transmits_up_to_the_first_unsent_message() {
        let at = |i| (i, SocketAddr::from((Ipv4Addr::LOCALHOST, 1)));
        // Transmits 0..5; 1 and 3 unready (no message); messages for 0, 2, 4.
        let which = [at(0), at(2), at(4)];
        assert_eq!(transmits_done(&which, 3, 5), 5);
        assert_eq!(transmits_done(&which, 2, 5), 4);
        assert_eq!(transmits_done(&which, 1, 5), 2);
        // Nothing sent: still one (the caller only gets here after a send).
        assert_eq!(transmits_done(&which, 0, 5), 1);
        assert_eq!(transmits_done(&[at(0)], 1, 1), 1);
    }
}
