//! Datagrams carried as TCP segments (fake TCP), wire-compatible with
//! `kcptun --tcp` (xtaci/tcpraw); see [`crate::Carrier::FakeTcp`].
//!
//! - [`codec`]: the wire, sans-IO: segment build and parse, checksums, and
//!   the per-flow sequence numbers.
//! - [`firewall`]: the nftables table (iptables chain) that silences the
//!   kernel's own TCP socket.
//! - `linux`: the transport (raw socket, kernel handshake, flow table).
//!   Elsewhere binding and connecting fail with `Unsupported`.

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) mod codec;
#[cfg(target_os = "linux")]
mod firewall;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(not(target_os = "linux"))]
mod unsupported;

#[cfg(target_os = "linux")]
pub(crate) use linux::{FakeTcp, FakeTcpSocket};
#[cfg(not(target_os = "linux"))]
pub(crate) use unsupported::{FakeTcp, FakeTcpSocket};

/// Segments received and not delivered, by reason; all counted, none fatal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FakeTcpStats {
    /// Bare segments (handshake, pure ACKs): numbers learned, nothing delivered.
    pub(crate) bare: u64,
    /// RST segments (never end a flow).
    pub(crate) rst: u64,
    /// FIN segments (ignored likewise).
    pub(crate) fin: u64,
    /// SYNs after the handshake.
    pub(crate) late_syn: u64,
    /// Payload without PSH.
    pub(crate) no_push: u64,
    /// Acknowledgements of bytes never sent (forged).
    pub(crate) foreign_ack: u64,
    /// Segments longer than a datagram (merged by GRO or a middlebox, or
    /// cut by the receive buffer): dropped whole, never cut into a datagram.
    pub(crate) oversized: u64,
    /// Data of a flow whose kernel handshake is not complete.
    pub(crate) orphan: u64,
    /// Segments of flows we do not know (not a SYN to a listener).
    pub(crate) unknown_flow: u64,
    /// SYNs refused because the flow table was full.
    pub(crate) table_full: u64,
    /// TCP checksum mismatches.
    pub(crate) bad_checksum: u64,
    /// Not parseable as IPv4/TCP.
    pub(crate) malformed: u64,
    /// For another port or address (before the kernel filter was attached).
    pub(crate) foreign: u64,
    /// Datagrams not sent: the flow was unknown or its numbers not learned.
    pub(crate) unready: u64,
}

/// Counters behind [`FakeTcpStats`].
#[derive(Debug, Default)]
pub(crate) struct FakeTcpCounters {
    pub(crate) bare: AtomicU64,
    pub(crate) rst: AtomicU64,
    pub(crate) fin: AtomicU64,
    pub(crate) late_syn: AtomicU64,
    pub(crate) no_push: AtomicU64,
    pub(crate) foreign_ack: AtomicU64,
    pub(crate) oversized: AtomicU64,
    pub(crate) orphan: AtomicU64,
    pub(crate) unknown_flow: AtomicU64,
    pub(crate) table_full: AtomicU64,
    pub(crate) bad_checksum: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) foreign: AtomicU64,
    pub(crate) unready: AtomicU64,
}

impl FakeTcpCounters {
    /// A snapshot.
    pub(crate) fn snapshot(&self) -> FakeTcpStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FakeTcpStats {
            bare: g(&self.bare),
            rst: g(&self.rst),
            fin: g(&self.fin),
            late_syn: g(&self.late_syn),
            no_push: g(&self.no_push),
            foreign_ack: g(&self.foreign_ack),
            oversized: g(&self.oversized),
            orphan: g(&self.orphan),
            unknown_flow: g(&self.unknown_flow),
            table_full: g(&self.table_full),
            bad_checksum: g(&self.bad_checksum),
            malformed: g(&self.malformed),
            foreign: g(&self.foreign),
            unready: g(&self.unready),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn carrier_overhead_is_the_codec_header_less_udp() {
        assert_eq!(
            crate::Carrier::FakeTcp.overhead(),
            super::codec::DATA_HEADER_LEN - 8
        );
        assert_eq!(crate::Carrier::Udp.overhead(), 0);
    }
}
