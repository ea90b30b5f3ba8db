//! The fake-TCP wire, sans-IO: TCP segments around datagrams, and the
//! sequence numbers of one flow as tcpraw (`kcptun --tcp`) learns them.
//!
//! No system calls, clock or randomness here: the transport passes in the
//! bytes it read, the milliseconds it wants in the timestamp option and the
//! seeds it drew. Nothing panics on a packet, whatever its bytes.
//!
//! # The wire (tcpraw's, as Debian's kcptun 20210922 speaks it)
//!
//! A real kernel handshake opens the flow. Then every datagram is the payload
//! of one segment flagged `PSH|ACK` whose sequence number is the acknowledgement
//! number of the peer's last segment (advanced by each payload sent since) and
//! whose acknowledgement number is the peer's next sequence number, advanced
//! only by a segment that starts exactly there. After a lost segment the
//! receiver's acknowledgement stays behind, so the sender rewinds to it: a
//! stateful firewall sees a retransmission, never a segment beyond the window.
//! tcpraw delivers a payload only from a segment with `PSH` set.
//!
//! Our segments carry the options `NOP NOP TS` (as tcpraw since 2024 does;
//! tcpraw 1.2.25 sends none and reads any), so a data segment has a 32-byte
//! TCP header: 24 bytes more than UDP's 8, which the KCP mtu gives up.

use std::net::{IpAddr, Ipv4Addr};

/// TCP header without options.
pub(crate) const TCP_BASE_HEADER: usize = 20;
/// The TCP header of our data segments: 20 bytes plus `NOP NOP TS`.
pub(crate) const DATA_HEADER_LEN: usize = 32;

/// TCP flag bits (the low byte of the flags field).
pub(crate) mod flags {
    pub(crate) const FIN: u8 = 0x01;
    pub(crate) const SYN: u8 = 0x02;
    pub(crate) const RST: u8 = 0x04;
    pub(crate) const PSH: u8 = 0x08;
    pub(crate) const ACK: u8 = 0x10;
}

const IPPROTO_TCP: u8 = 6;

/// Why a packet was not a well-formed TCP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// Shorter than its headers say.
    Truncated,
    /// Not IPv4/TCP, or a header field out of range.
    BadHeader,
    /// An IP fragment (never produced by a peer sending within the mtu).
    Fragment,
    /// The TCP checksum does not match.
    BadChecksum,
}

/// One parsed TCP segment; `payload` borrows the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment<'a> {
    pub(crate) src_port: u16,
    pub(crate) dst_port: u16,
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) flags: u8,
    pub(crate) window: u16,
    /// `(TSval, TSecr)` when the segment has a timestamp option.
    pub(crate) timestamp: Option<(u32, u32)>,
    pub(crate) payload: &'a [u8],
    /// Where `payload` starts in the buffer given to the parser.
    pub(crate) payload_offset: usize,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

/// Parses an IPv4 packet as a raw `AF_INET` socket returns it (IP header
/// included). Bytes past the IP total length are ignored; a packet longer
/// than `packet` (the read was cut short) is [`Malformed::Truncated`].
pub(crate) fn parse_ipv4(packet: &[u8]) -> Result<(Ipv4Addr, Ipv4Addr, Segment<'_>), Malformed> {
    let first = *packet.first().ok_or(Malformed::Truncated)?;
    if first >> 4 != 4 {
        return Err(Malformed::BadHeader);
    }
    let ihl = usize::from(first & 0x0f) * 4;
    if ihl < 20 {
        return Err(Malformed::BadHeader);
    }
    let total = usize::from(be16(packet, 2).ok_or(Malformed::Truncated)?);
    if total < ihl || packet.len() < ihl {
        return Err(if packet.len() < ihl {
            Malformed::Truncated
        } else {
            Malformed::BadHeader
        });
    }
    if total > packet.len() {
        return Err(Malformed::Truncated);
    }
    let frag = be16(packet, 6).ok_or(Malformed::Truncated)?;
    if frag & 0x3fff != 0 {
        return Err(Malformed::Fragment);
    }
    if packet.get(9) != Some(&IPPROTO_TCP) {
        return Err(Malformed::BadHeader);
    }
    let addr = |at: usize| -> Option<Ipv4Addr> {
        Some(Ipv4Addr::new(
            *packet.get(at)?,
            *packet.get(at + 1)?,
            *packet.get(at + 2)?,
            *packet.get(at + 3)?,
        ))
    };
    let src = addr(12).ok_or(Malformed::Truncated)?;
    let dst = addr(16).ok_or(Malformed::Truncated)?;
    let tcp = packet.get(ihl..total).ok_or(Malformed::Truncated)?;
    let mut seg = parse_tcp(tcp, IpAddr::V4(src), IpAddr::V4(dst))?;
    seg.payload_offset += ihl;
    Ok((src, dst, seg))
}

/// Parses a TCP segment (header and payload, no IP header) between `src`
/// and `dst`. The checksum is verified when the segment carries a payload:
/// segments a kernel builds (the handshake) may cross a veth with a partial
/// checksum that the hardware would have filled in, and carry nothing we use
/// beyond their sequence numbers.
pub(crate) fn parse_tcp(tcp: &[u8], src: IpAddr, dst: IpAddr) -> Result<Segment<'_>, Malformed> {
    if tcp.len() < TCP_BASE_HEADER {
        return Err(Malformed::Truncated);
    }
    let doff = usize::from(tcp.get(12).ok_or(Malformed::Truncated)? >> 4) * 4;
    if doff < TCP_BASE_HEADER {
        return Err(Malformed::BadHeader);
    }
    if doff > tcp.len() {
        return Err(Malformed::Truncated);
    }
    let payload = tcp.get(doff..).ok_or(Malformed::Truncated)?;
    if !payload.is_empty() && checksum(src, dst, tcp, &[]) != 0 {
        return Err(Malformed::BadChecksum);
    }
    let options = tcp.get(TCP_BASE_HEADER..doff).unwrap_or_default();
    Ok(Segment {
        src_port: be16(tcp, 0).ok_or(Malformed::Truncated)?,
        dst_port: be16(tcp, 2).ok_or(Malformed::Truncated)?,
        seq: be32(tcp, 4).ok_or(Malformed::Truncated)?,
        ack: be32(tcp, 8).ok_or(Malformed::Truncated)?,
        flags: *tcp.get(13).ok_or(Malformed::Truncated)?,
        window: be16(tcp, 14).ok_or(Malformed::Truncated)?,
        timestamp: find_timestamp(options),
        payload,
        payload_offset: doff,
    })
}

/// The timestamp option's `(TSval, TSecr)`, if `options` holds one.
fn find_timestamp(options: &[u8]) -> Option<(u32, u32)> {
    let mut at = 0;
    // Each step advances by at least one byte: bounded by the 40 option bytes.
    while let Some(&kind) = options.get(at) {
        match kind {
            0 => return None,
            1 => at += 1,
            _ => {
                let len = usize::from(*options.get(at + 1)?);
                if len < 2 {
                    return None;
                }
                if kind == 8 && len == 10 {
                    return Some((be32(options, at + 2)?, be32(options, at + 6)?));
                }
                at += len;
            }
        }
    }
    None
}

/// Folds a 64-bit ones'-complement accumulator to 16 bits.
fn fold(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Adds `bytes` (as big-endian 16-bit words, odd tail padded) to `sum`.
fn add_bytes(mut sum: u64, bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(4);
    for w in &mut words {
        sum += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    sum + u64::from(u32::from_be_bytes(tail))
}

/// The TCP checksum over the pseudo-header of `src`/`dst` and the segment
/// `header ++ payload` (lengths summed), as written into the header: 0 when
/// a received segment's own checksum field is right. `header` must have an
/// even length (TCP headers are multiples of 4).
pub(crate) fn checksum(src: IpAddr, dst: IpAddr, header: &[u8], payload: &[u8]) -> u16 {
    let len = (header.len() + payload.len()) as u64;
    let mut sum = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            add_bytes(add_bytes(0, &s.octets()), &d.octets()) + u64::from(IPPROTO_TCP) + len
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            add_bytes(add_bytes(0, &v6(s).octets()), &v6(d).octets()) + u64::from(IPPROTO_TCP) + len
        }
    };
    sum = add_bytes(sum, header);
    sum = add_bytes(sum, payload);
    !fold(sum)
}

/// The fields of one outgoing data segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) src_port: u16,
    pub(crate) dst_port: u16,
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) window: u16,
    pub(crate) tsval: u32,
    pub(crate) tsecr: u32,
}

/// Writes the 32-byte `PSH|ACK` header for `payload` between `src` and
/// `dst`, checksum included; the segment on the wire is `out ++ payload`.
pub(crate) fn write_header(
    out: &mut [u8; DATA_HEADER_LEN],
    h: &Header,
    src: IpAddr,
    dst: IpAddr,
    payload: &[u8],
) {
    out[0..2].copy_from_slice(&h.src_port.to_be_bytes());
    out[2..4].copy_from_slice(&h.dst_port.to_be_bytes());
    out[4..8].copy_from_slice(&h.seq.to_be_bytes());
    out[8..12].copy_from_slice(&h.ack.to_be_bytes());
    out[12] = ((DATA_HEADER_LEN / 4) as u8) << 4;
    out[13] = flags::PSH | flags::ACK;
    out[14..16].copy_from_slice(&h.window.to_be_bytes());
    out[16..20].fill(0); // checksum, urgent pointer
    out[20..24].copy_from_slice(&[1, 1, 8, 10]);
    out[24..28].copy_from_slice(&h.tsval.to_be_bytes());
    out[28..32].copy_from_slice(&h.tsecr.to_be_bytes());
    let sum = checksum(src, dst, out, payload);
    out[16..18].copy_from_slice(&sum.to_be_bytes());
}

/// Why a flow dropped a segment; each is counted by the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drop {
    /// A bare segment (no payload): its numbers were learned, nothing to deliver.
    NoPayload,
    /// RST: never ends a flow (a forged one must not); the kernel socket
    /// decides for itself.
    Reset,
    /// FIN: ignored likewise.
    Fin,
    /// SYN after the handshake: a forged or stale one; the numbers stay.
    LateSyn,
    /// Payload without PSH: tcpraw would not deliver it either.
    NoPush,
    /// The acknowledgement is for bytes we never sent: forged, dropped.
    ForeignAck,
    /// Payload longer than any datagram: segments merged on the way (GRO,
    /// a middlebox) or garbage. Never cut into a wrong datagram.
    Oversized,
    /// Data before the kernel finished the handshake for this flow.
    Orphan,
}

/// How far back an acknowledgement may point (bytes) and still rewind us:
/// far more than any window in flight, far less than half the sequence space.
const MAX_REWIND: u32 = 1 << 30;

/// Sequence numbers of one fake-TCP flow, learned from the peer's segments.
#[derive(Clone, Debug)]
pub(crate) struct Flow {
    /// Our next sequence number (the peer's last acknowledgement, advanced).
    seq: u32,
    /// One past the highest byte we ever numbered: after a rewind the peer
    /// may acknowledge up to here (it had received more than it said).
    snd_max: u32,
    /// The peer's next sequence number: our acknowledgement.
    ack: u32,
    seq_known: bool,
    ack_known: bool,
    /// The kernel completed the handshake (connect returned, accept gave it).
    established: bool,
    /// The peer's last TSval, echoed.
    ts_recent: u32,
    /// Added to the caller's milliseconds to make TSval.
    ts_base: u32,
    /// xorshift state for the advertised window.
    window_rng: u32,
    /// Largest payload delivered (a datagram's maximum).
    max_payload: usize,
}

impl Flow {
    /// A flow whose datagrams are at most `max_payload` bytes; `seed` (any
    /// value, drawn by the caller) picks the timestamp base and windows.
    pub(crate) fn new(max_payload: usize, seed: u64) -> Self {
        Self {
            seq: 0,
            snd_max: 0,
            ack: 0,
            seq_known: false,
            ack_known: false,
            established: false,
            ts_recent: 0,
            ts_base: (seed >> 32) as u32,
            window_rng: (seed as u32) | 1,
            max_payload,
        }
    }

    /// The kernel's handshake for this flow is complete: payloads may be
    /// delivered and SYNs are stale from now on.
    pub(crate) fn set_established(&mut self) {
        self.established = true;
    }

    /// Continues the kernel's timestamp clock: `kernel_tsval` is the TSval
    /// the kernel's socket of this flow would send at `now_ms` (its
    /// `TCP_TIMESTAMP`), so our segments carry the same monotonic
    /// millisecond clock the handshake showed, as the kernel's own would:
    /// no jump a middlebox or the peer's PAWS check could notice.
    pub(crate) fn continue_clock(&mut self, kernel_tsval: u32, now_ms: u32) {
        self.ts_base = kernel_tsval.wrapping_sub(now_ms);
    }

    /// Whether both sequence numbers are known, so [`Flow::next_header`]
    /// makes a segment the peer accepts.
    pub(crate) fn ready(&self) -> bool {
        self.seq_known && self.ack_known
    }

    /// Learns from one segment of the peer and says whether its payload is a
    /// datagram to deliver.
    pub(crate) fn receive(&mut self, seg: &Segment<'_>) -> Result<(), Drop> {
        let f = seg.flags;
        if f & flags::RST != 0 {
            return Err(Drop::Reset);
        }
        if f & flags::SYN != 0 {
            if self.established {
                return Err(Drop::LateSyn);
            }
            // SYN (server side) or SYN-ACK (client side): the peer's ISN.
            self.ack = seg.seq.wrapping_add(1);
            self.ack_known = true;
            if f & flags::ACK != 0 {
                self.seq = seg.ack;
                self.snd_max = seg.ack;
                self.seq_known = true;
            }
            return Err(Drop::NoPayload);
        }
        if f & flags::FIN != 0 {
            return Err(Drop::Fin);
        }
        if f & flags::ACK != 0 {
            if self.seq_known {
                // Honest peers acknowledge at most what we ever sent, and
                // never point back by more than a window. (After we rewound,
                // an acknowledgement may be ahead of `seq`: the peer had
                // received the bytes we numbered before the rewind.)
                let back = self.snd_max.wrapping_sub(seg.ack);
                if back > MAX_REWIND {
                    return Err(Drop::ForeignAck);
                }
            } else {
                self.snd_max = seg.ack;
            }
            self.seq = seg.ack;
            self.seq_known = true;
        }
        if let Some((tsval, _)) = seg.timestamp {
            self.ts_recent = tsval;
        }
        if seg.payload.is_empty() {
            return Err(Drop::NoPayload);
        }
        if f & flags::PSH == 0 {
            return Err(Drop::NoPush);
        }
        if seg.payload.len() > self.max_payload {
            return Err(Drop::Oversized);
        }
        if self.ack_known && self.ack == seg.seq {
            self.ack = seg.seq.wrapping_add(seg.payload.len() as u32);
        }
        if !self.established {
            return Err(Drop::Orphan);
        }
        Ok(())
    }

    /// Gives back the sequence space of the last `payload_len` bytes
    /// numbered by [`Flow::next_header`] (the segment was not sent).
    pub(crate) fn unsend(&mut self, payload_len: usize) {
        if self.snd_max == self.seq {
            self.snd_max = self.snd_max.wrapping_sub(payload_len as u32);
        }
        self.seq = self.seq.wrapping_sub(payload_len as u32);
    }

    /// The header of our next data segment of `payload_len` bytes at
    /// `now_ms` (any millisecond clock), and advances our sequence number.
    pub(crate) fn next_header(
        &mut self,
        src_port: u16,
        dst_port: u16,
        payload_len: usize,
        now_ms: u32,
    ) -> Header {
        let mut x = self.window_rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.window_rng = x;
        let h = Header {
            src_port,
            dst_port,
            seq: self.seq,
            ack: self.ack,
            window: (x as u16) | 0x8000,
            tsval: self.ts_base.wrapping_add(now_ms),
            tsecr: self.ts_recent,
        };
        self.seq = self.seq.wrapping_add(payload_len as u32);
        if (self.seq.wrapping_sub(self.snd_max) as i32) > 0 {
            self.snd_max = self.seq;
        }
        h
    }
}

/// The `faketcp_codec` fuzz target: the input is a selector byte (bit 0:
/// the kernel's handshake is done, bit 1: give back each answer's sequence
/// space, bit 2: IPv6, all of it: the timestamp base), then packets, each a
/// big-endian `u16` length and that many bytes of an IPv4 packet as the
/// raw socket reads it (with bit 2: a TCP segment as an IPv6 raw socket
/// reads it, between two fixed addresses). Each packet is parsed and fed to one [`Flow`]; whenever the
/// flow is ready it numbers an answer, which must parse back as built.
///
/// # Panics
///
/// Only when an invariant breaks (a bug): a payload is not where
/// `payload_offset` says, a delivered payload is empty or longer than a
/// datagram, or our own segment does not parse back with its numbers.
#[cfg(fuzzing)]
pub(crate) fn fuzz(data: &[u8]) {
    const MAX_PAYLOAD: usize = 1400;
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let mut flow = Flow::new(MAX_PAYLOAD, u64::from(sel) << 40 | 0x9e37);
    if sel & 1 != 0 {
        flow.set_established();
    }
    for _ in 0..256 {
        let Some((len, tail)) = rest.split_first_chunk::<2>() else {
            return;
        };
        let take = usize::from(u16::from_be_bytes(*len)).min(tail.len());
        let (packet, tail) = tail.split_at(take);
        rest = tail;
        let parsed = if sel & 4 != 0 {
            let src = IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1));
            let dst = IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2));
            parse_tcp(packet, src, dst).map(|seg| (src, dst, seg))
        } else {
            parse_ipv4(packet).map(|(src, dst, seg)| (IpAddr::V4(src), IpAddr::V4(dst), seg))
        };
        let Ok((src, dst, seg)) = parsed else {
            continue;
        };
        let end = seg.payload_offset + seg.payload.len();
        assert_eq!(packet.get(seg.payload_offset..end), Some(seg.payload));
        if flow.receive(&seg).is_ok() {
            assert!(!seg.payload.is_empty() && seg.payload.len() <= MAX_PAYLOAD);
        }
        if !flow.ready() {
            continue;
        }
        let payload = seg.payload.get(..64).unwrap_or(seg.payload);
        let (ours, theirs) = (dst, src);
        let h = flow.next_header(seg.dst_port, seg.src_port, payload.len(), u32::from(sel));
        let mut head = [0u8; DATA_HEADER_LEN];
        write_header(&mut head, &h, ours, theirs, payload);
        let mut wire = [0u8; DATA_HEADER_LEN + 64];
        wire[..DATA_HEADER_LEN].copy_from_slice(&head);
        wire[DATA_HEADER_LEN..][..payload.len()].copy_from_slice(payload);
        let back = parse_tcp(&wire[..DATA_HEADER_LEN + payload.len()], ours, theirs)
            .map(|b| (b.seq, b.ack, b.flags, b.payload));
        assert_eq!(back, Ok((h.seq, h.ack, flags::PSH | flags::ACK, payload)));
        if sel & 2 != 0 {
            flow.unsend(payload.len());
        }
    }
}

#[cfg(test)]
mod tests;
