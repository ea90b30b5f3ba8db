//! Reed-Solomon forward error correction framed exactly as kcp-go v5 frames it.
//!
//! Sans-IO like the rest of the core: no clock, no sockets; [`FecEncoder::encode`]
//! takes `now`, and everything writes into caller-owned buffers.
//!
//! # Wire format (after the crypto layer)
//!
//! ```text
//! data shard:   | seqid u32 | 0x00F1 u16 | size u16 = 2 + n | KCP packet (n bytes) |
//! parity shard: | seqid u32 | 0x00F2 u16 | parity bytes (L)                        |
//! OOB packet:   | 0xFFFFFFFF | 0x00F3 u16 | size u16 | conv u32 | payload         |
//! ```
//!
//! All integers little-endian. Every data and parity shard consumes one seqid;
//! seqids wrap to 0 at `paws = floor(0xFFFFFFFF / S) * S` (`S` = data + parity
//! shards), so a group `seqid / S` never straddles the wrap. The Reed-Solomon
//! input of a data shard is its bytes from offset 6 (the `size` field and the
//! KCP packet), zero-padded to the group's longest; parity packets carry the
//! parity of those padded shards, as in kcp-go v5.6.72.
//!
//! # Using the encoder and decoder
//!
//! Send side: for every KCP packet, [`FecEncoder::encode`] writes the data
//! header in place; then call [`FecEncoder::poll_parity`] until `None` and send
//! what it yields (parity packets of a completed group).
//!
//! Receive side: [`classify`] each decrypted packet. For [`PacketKind::Data`],
//! feed [`data_payload`] to the ARQ as a regular packet, then give the whole
//! packet to [`FecDecoder::handle`]; for [`PacketKind::Parity`], only `handle`.
//! After each `handle`, call [`FecDecoder::poll_recovered`] until `None` and
//! feed those packets to the ARQ as FEC-recovered.
//!
//! ```
//! use kcpio::arq::Timestamp;
//! use kcpio::fec::{DATA_HEADER, FecDecoder, FecEncoder, data_payload};
//!
//! let mut enc = FecEncoder::new(2, 1)?;
//! let now = Timestamp::from_millis(0);
//! let mut wire = Vec::new();
//! for kcp in [[0x51u8; 40], [0x52u8; 40]] {
//!     let mut buf = [0u8; 1500];
//!     buf[DATA_HEADER..DATA_HEADER + kcp.len()].copy_from_slice(&kcp);
//!     let n = enc.encode(now, &mut buf, kcp.len());
//!     wire.push(buf[..n].to_vec());
//!     let mut parity = [0u8; 1500];
//!     while let Some(m) = enc.poll_parity(&mut parity) {
//!         wire.push(parity[..m].to_vec());
//!     }
//! }
//! assert_eq!(wire.len(), 3); // two data shards and one parity shard
//!
//! // The first data shard is lost; the decoder rebuilds it from the other two.
//! let mut dec = FecDecoder::new(2, 1);
//! let mut recovered = [0u8; 1500];
//! for packet in &wire[1..] {
//!     if let Some(kcp) = data_payload(packet) {
//!         assert_eq!(kcp, &[0x52u8; 40][..]); // to the ARQ as a regular packet
//!     }
//!     dec.handle(packet)?;
//! }
//! let n = dec.poll_recovered(&mut recovered).expect("rebuilt");
//! assert_eq!(&recovered[..n], &[0x51u8; 40][..]); // to the ARQ as FEC-recovered
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub(crate) mod codec;
mod decoder;
mod encoder;

pub use decoder::FecDecoder;
pub use encoder::FecEncoder;

use core::fmt;

/// Bytes in front of a KCP packet in a data shard: seqid, flag and size.
pub const DATA_HEADER: usize = 8;
/// Bytes in front of the parity bytes in a parity shard: seqid and flag.
pub const PARITY_HEADER: usize = 6;
/// The largest FEC packet handled, kcp-go's receive buffer (`mtuLimit`).
pub const MAX_PACKET: usize = 1500;
/// The most shards (data + parity) a group may have.
pub const MAX_SHARDS: usize = 256;
/// The most shards (data + parity) per group a [`FecDecoder`] adopts from
/// the stream unless told otherwise ([`FecDecoder::with_max_shards`]).
///
/// kcptun's default is 10 + 3 and the shapes its users run are a few dozen
/// shards at most; kcp-go itself follows anything below 256. A receiver
/// refuses larger learned shapes (the packets of such a sender are then not
/// FEC-decoded, but their KCP data is still delivered), which bounds what a
/// peer can make a session hold: see [`FecDecoder::memory_bound`].
pub const DEFAULT_MAX_SHARDS: usize = 128;
/// kcp-go's continuity rule: parity is skipped when a group's last data shard
/// came this many milliseconds or more after the one before it.
pub const CONTINUITY_MS: u32 = 500;

/// Flag value of a data shard.
pub(crate) const FLAG_DATA: u16 = 0xF1;
/// Flag value of a parity shard.
pub(crate) const FLAG_PARITY: u16 = 0xF2;
/// Flag value (u16 at offset 4) of kcpio's adaptive stream parity between
/// kcpio ends: byte 4 is kcp-go's parity flag, byte 5 the extension marker
/// (`conn/stream_fec.rs`).
pub(crate) const FLAG_STREAM_PARITY: u16 = 0x8AF2;
/// Flag value of an out-of-band packet.
pub(crate) const FLAG_OOB: u16 = 0xF3;
/// The offset where the Reed-Solomon shard starts in FEC packets (the size field).
pub(crate) const SHARD_OFFSET: usize = 6;
/// A KCP segment header; shorter payloads cannot be KCP packets.
pub(crate) const KCP_OVERHEAD: usize = 24;
/// Space for one Reed-Solomon shard in the encoder's and decoder's arenas:
/// `MAX_PACKET - 6` rounded up to a multiple of 32.
pub(crate) const SHARD_STRIDE: usize = (MAX_PACKET - SHARD_OFFSET).div_ceil(32) * 32;

/// What a decrypted packet is, from the u16 at offset 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// A bare KCP packet (the sender has FEC off), or too short to tell.
    Kcp,
    /// An FEC data shard (flag 0xF1): a KCP packet behind an 8-byte header.
    Data,
    /// An FEC parity shard (flag 0xF2; 0x8AF2 is kcpio's adaptive stream
    /// parity between kcpio ends).
    Parity,
    /// An out-of-band packet (flag 0xF3, kcp-go >= v5.6.60): unreliable,
    /// outside KCP and never FEC-protected. See [`oob_payload`].
    Oob,
}

/// Tells FEC shards and OOB packets from bare KCP packets.
///
/// In a KCP packet the bytes at offset 4 are `cmd` (81..=84) and `frg`, so
/// their u16 is never 0xF1..=0xF3. Packets shorter than 6 bytes are reported
/// as [`PacketKind::Kcp`] (the ARQ rejects them as truncated).
#[must_use]
pub fn classify(packet: &[u8]) -> PacketKind {
    match read_u16(packet, 4) {
        Some(FLAG_DATA) => PacketKind::Data,
        Some(FLAG_PARITY | FLAG_STREAM_PARITY) => PacketKind::Parity,
        Some(FLAG_OOB) => PacketKind::Oob,
        _ => PacketKind::Kcp,
    }
}

/// The KCP packet inside a data shard: bytes 8.. (the `size` field is not
/// consulted, as in kcp-go).
///
/// `None` unless `packet` is a data shard whose payload is at least one KCP
/// header (24 bytes) long. Shorter payloads cannot be KCP packets: kcp-go's
/// `Input` refuses them, and kcpio's group-deadline fillers
/// ([`FecEncoder::set_group_deadline`]) are such 4-byte payloads.
#[must_use]
pub fn data_payload(packet: &[u8]) -> Option<&[u8]> {
    if classify(packet) != PacketKind::Data {
        return None;
    }
    packet
        .get(DATA_HEADER..)
        .filter(|p| p.len() >= KCP_OVERHEAD)
}

/// The conversation id and payload of an OOB packet (`None` if `packet` is
/// not one or is shorter than its 12-byte header). Like kcp-go, the `size`
/// field is not checked.
#[must_use]
pub fn oob_payload(packet: &[u8]) -> Option<(u32, &[u8])> {
    if classify(packet) != PacketKind::Oob {
        return None;
    }
    let conv = read_u32(packet, DATA_HEADER)?;
    Some((conv, packet.get(DATA_HEADER + 4..)?))
}

/// Frames an OOB packet in place (kcp-go's `SendOOB`):
/// `buf[..8]` is free headroom and `buf[8..8 + body_len]` holds the conv (u32
/// LE) followed by the payload. Writes seqid 0xFFFFFFFF, flag 0xF3 and
/// `size = 2 + body_len`, and returns the packet length `8 + body_len`. OOB
/// packets take no seqid and are never FEC-protected; a kcp-go receiver needs
/// at least 12 bytes (`body_len >= 4`).
///
/// Returns 0 if `buf` is shorter than `8 + body_len` or the packet would
/// exceed [`MAX_PACKET`].
pub fn encode_oob(buf: &mut [u8], body_len: usize) -> usize {
    let len = DATA_HEADER + body_len;
    if len > MAX_PACKET || buf.len() < len {
        return 0;
    }
    let Some(h) = buf.get_mut(..DATA_HEADER) else {
        return 0;
    };
    h[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    h[4..6].copy_from_slice(&FLAG_OOB.to_le_bytes());
    h[6..8].copy_from_slice(&((2 + body_len) as u16).to_le_bytes());
    len
}

/// Makes `arena` at least `len` bytes long (new bytes zero), growing its
/// capacity by doubling but never past `full`: arenas are sized by the
/// shards really stored, so an idle session holds one or two shards' worth,
/// and a busy one reaches `full` after a few groups and never grows again.
pub(crate) fn grow_arena(arena: &mut Vec<u8>, len: usize, full: usize) {
    if arena.len() >= len {
        return;
    }
    if arena.capacity() < len {
        let want = (arena.capacity() * 2).max(len).min(full.max(len));
        arena.reserve_exact(want - arena.len());
    }
    arena.resize(len, 0);
}

pub(crate) fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

pub(crate) fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// kcp-go's seqid wrap point for groups of `total` shards: the largest multiple
/// of `total` not above 0xFFFFFFFF.
#[must_use]
pub fn paws(total: usize) -> u32 {
    let t = total.clamp(1, MAX_SHARDS) as u32;
    u32::MAX / t * t
}

/// Counters of one encoder or decoder. The encoder fills the `*_out`,
/// `parity_skipped`, `deadline_*`, `parity_undrained`, `guard_shards` and
/// `parity_guarded` fields, the decoder the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FecStats {
    /// Data shards written by the encoder (fillers not included).
    pub data_out: u64,
    /// Parity shards handed out by [`FecEncoder::poll_parity`].
    pub parity_out: u64,
    /// Groups whose parity the continuity rule (or the guard check, see
    /// `parity_guarded`) skipped; seqids still advanced.
    pub parity_skipped: u64,
    /// Groups closed by the kcpio-only group deadline.
    pub deadline_groups: u64,
    /// Filler data shards sent to close groups at their deadline.
    pub deadline_fillers: u64,
    /// Parity or filler packets lost because the caller did not drain
    /// `poll_parity` before the next group completed.
    pub parity_undrained: u64,
    /// Guard shards sent ([`FecEncoder::set_guard`]).
    pub guard_shards: u64,
    /// Groups whose parity was withheld because, guards notwithstanding, a
    /// parity shard would have read as a packet of the guarded conv (also
    /// counted in `parity_skipped`).
    pub parity_guarded: u64,

    /// Data shards given to the decoder.
    pub data_in: u64,
    /// Parity shards given to the decoder.
    pub parity_in: u64,
    /// KCP packets rebuilt from parity.
    pub recovered: u64,
    /// Groups given up while data shards were missing (too few shards arrived
    /// before the group fell out of the window, or the codec failed).
    pub unrecoverable: u64,
    /// Groups that received every data shard (nothing to rebuild).
    pub full_groups: u64,
    /// Times the decoder adopted a new shard ratio learned from the stream.
    pub retunes: u64,
    /// Times a learned shard ratio was refused for exceeding the decoder's
    /// limit ([`FecDecoder::max_shards`]).
    pub refused_shapes: u64,
    /// Dropped: a shard already stored.
    pub dropped_duplicate: u64,
    /// Dropped: a shard whose seqid its group already held with other bytes
    /// (a sender that numbers its shards from 0 again, as a kcp-go session
    /// its listener re-created does). The group then rebuilds nothing: a
    /// rebuild from two senders' shards is garbage.
    pub dropped_conflicting: u64,
    /// Dropped: the shard's group is more than 3 groups behind the newest, or
    /// was already decoded.
    pub dropped_stale: u64,
    /// Dropped: truncated, longer than [`MAX_PACKET`], or not a data/parity shard.
    pub dropped_malformed: u64,
    /// Dropped: seqid at or beyond the wrap point (`paws`).
    pub dropped_beyond_paws: u64,
    /// Dropped: the shard's kind does not fit the current shard ratio while
    /// the decoder is relearning it.
    pub dropped_mismatch: u64,
    /// Dropped: a rebuilt shard whose `size` field is out of range, or whose
    /// payload is shorter than a KCP header (e.g. a deadline filler).
    pub dropped_bad_recovered: u64,
    /// Dropped: recovered packets the caller did not drain before the next recovery.
    pub dropped_undrained: u64,
}

/// Why an encoder could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FecError {
    /// Both counts must be positive and their sum at most 256.
    InvalidShape {
        /// Data shards asked for.
        data: usize,
        /// Parity shards asked for.
        parity: usize,
    },
}

impl fmt::Display for FecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FecError::InvalidShape { data, parity } => write!(
                f,
                "invalid FEC shape {data}+{parity}: both must be positive and total at most {MAX_SHARDS}"
            ),
        }
    }
}

impl std::error::Error for FecError {}

/// Why [`FecDecoder::handle`] refused a packet (counted in [`FecStats`] too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FecDecodeError {
    /// Shorter than the 8 bytes kcp-go requires of an FEC packet.
    Truncated {
        /// The packet's length.
        len: usize,
    },
    /// Longer than [`MAX_PACKET`].
    TooLong {
        /// The packet's length.
        len: usize,
    },
    /// The flag at offset 4 is neither 0xF1 nor 0xF2.
    NotFec {
        /// The flag found.
        flag: u16,
    },
    /// The seqid is at or beyond the wrap point of the current shape.
    BeyondPaws {
        /// The seqid found.
        seqid: u32,
    },
}

impl fmt::Display for FecDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FecDecodeError::Truncated { len } => write!(f, "FEC packet truncated ({len} bytes)"),
            FecDecodeError::TooLong { len } => write!(f, "FEC packet too long ({len} bytes)"),
            FecDecodeError::NotFec { flag } => write!(f, "not an FEC shard (flag {flag:#06x})"),
            FecDecodeError::BeyondPaws { seqid } => {
                write!(f, "FEC seqid {seqid} beyond the wrap point")
            }
        }
    }
}

impl std::error::Error for FecDecodeError {}

/// Entry points for `benches/fec.rs` only: the raw codec, to compare the
/// GF(2^8) kernel with `reed-solomon-erasure`. Not part of the API.
#[doc(hidden)]
pub mod bench_support {
    use super::codec::{ErasureCodec, VandermondeCodec};

    /// kcpio's Reed-Solomon codec (the one [`FecEncoder`](super::FecEncoder) uses).
    pub struct Codec(VandermondeCodec);

    impl Codec {
        /// `None` for an invalid shape.
        pub fn new(data: usize, parity: usize) -> Option<Self> {
            VandermondeCodec::new(data, parity).map(Self)
        }

        /// Forces a kernel: `"gfni512"`, `"gfni"`, `"avx2"`, `"ssse3"` or `"portable"` (unknown names
        /// and kernels the CPU lacks run portably).
        pub fn set_kernel(&mut self, name: &str) {
            use crate::simd::gf256::Kernel;
            self.0.set_kernel(match name {
                "gfni512" => Kernel::Gfni512,
                "gfni" => Kernel::Gfni,
                "avx2" => Kernel::Avx2,
                "ssse3" => Kernel::Ssse3,
                _ => Kernel::Portable,
            });
        }

        /// Parity of `data` shards `stride` apart into `parity`; `false` on bad sizes.
        pub fn encode(
            &mut self,
            data: &[u8],
            stride: usize,
            len: usize,
            parity: &mut [u8],
        ) -> bool {
            self.0.encode(data, stride, len, parity).is_ok()
        }
    }

    /// The GF(2^8) kernel chosen on this CPU.
    pub fn kernel() -> &'static str {
        match crate::simd::gf256::Kernel::detect() {
            crate::simd::gf256::Kernel::Gfni512 => "gfni512",
            crate::simd::gf256::Kernel::Gfni => "gfni",
            crate::simd::gf256::Kernel::Avx2 => "avx2",
            crate::simd::gf256::Kernel::Ssse3 => "ssse3",
            crate::simd::gf256::Kernel::Portable => "portable",
        }
    }
}

#[cfg(test)]
mod tests;
