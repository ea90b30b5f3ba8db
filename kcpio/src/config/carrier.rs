//! What carries a socket's datagrams.

/// What carries the datagrams of a socket ([`ConfigBuilder::carrier`]).
///
/// [`ConfigBuilder::carrier`]: crate::ConfigBuilder::carrier
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Carrier {
    /// UDP datagrams (the default; kcp-go's and kcptun's carrier).
    #[default]
    Udp,
    /// Each datagram is the payload of one TCP `PSH|ACK` segment of a flow
    /// opened by a real kernel handshake (a client `connect()`s, a listener
    /// `listen()`s and accepts), as `kcptun --tcp` (xtaci/tcpraw) does:
    /// kcpio and kcptun ends understand each other. For networks that drop
    /// or police UDP but pass TCP, stateful firewalls and NAT included.
    ///
    /// Segments go out and come in through a raw IP socket, filtered in the
    /// kernel (BPF) to the socket's port. The kernel's own TCP socket gets
    /// TTL 1 and kcpio installs one nftables table (iptables when `nft` is
    /// missing) that drops its TTL-1 segments and RSTs, so the kernel stays
    /// silent on the wire; the table is named after the process and port,
    /// replaced at the next start if a crash left it, and removed when the
    /// socket closes.
    ///
    /// Linux only; IPv4 and IPv6 (a listener on `[::]` takes IPv6 peers
    /// only; the IPv6 header costs UDP and fake TCP the same 20 bytes, so
    /// the mtu means the same packet size on both). Needs `CAP_NET_RAW` (the raw socket) and
    /// `CAP_NET_ADMIN` (the firewall table): without them binding or
    /// connecting fails with `PermissionDenied`, naming the capability;
    /// elsewhere with `Unsupported`.
    FakeTcp,
}

impl Carrier {
    /// Bytes its header costs beyond UDP's 8: 24 for fake TCP (a 20-byte
    /// TCP header with the 12-byte timestamp option), 0 for UDP.
    #[must_use]
    pub const fn overhead(self) -> usize {
        match self {
            Self::Udp => 0,
            Self::FakeTcp => 24,
        }
    }
}
