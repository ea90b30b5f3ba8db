//! The KCP segment codec.
//!
//! A KCP packet is a concatenation of segments, each a 24-byte little-endian
//! header followed by `len` payload bytes. Parsing follows the
//! parse-don't-validate style: [`Segments`] performs one length check per
//! segment and hands out [`SegmentView`]s whose accessors read fixed offsets of
//! a `&[u8; 24]`, so they cannot fail or panic on any input.

use core::fmt;

/// Byte offsets of the header fields, all little-endian.
pub mod field {
    use core::ops::Range;

    /// Conversation id (`u32`).
    pub const CONV: Range<usize> = 0..4;
    /// Command (`u8`): 81 PUSH, 82 ACK, 83 WASK, 84 WINS.
    pub const CMD: usize = 4;
    /// Fragments still following in the same message (`u8`).
    pub const FRG: usize = 5;
    /// Sender's free receive slots (`u16`).
    pub const WND: Range<usize> = 6..8;
    /// Timestamp (`u32`), echoed by ACKs.
    pub const TS: Range<usize> = 8..12;
    /// Sequence number (`u32`).
    pub const SN: Range<usize> = 12..16;
    /// Cumulative acknowledgement: every sn below it was received (`u32`).
    pub const UNA: Range<usize> = 16..20;
    /// Payload length (`u32`).
    pub const LEN: Range<usize> = 20..24;
    /// Header length (`IKCP_OVERHEAD`).
    pub const HEADER_LEN: usize = 24;
}

/// Length of a segment header in bytes.
pub const HEADER_LEN: usize = field::HEADER_LEN;

/// The four KCP commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Command {
    /// 81: data.
    Push = 81,
    /// 82: acknowledgement of one sn.
    Ack = 82,
    /// 83: window probe, "tell me your window".
    Wask = 83,
    /// 84: window size announcement.
    Wins = 84,
}

impl Command {
    /// The command for a wire byte, `None` for anything but 81..=84.
    #[must_use]
    pub const fn from_u8(b: u8) -> Option<Self> {
        match b {
            81 => Some(Self::Push),
            82 => Some(Self::Ack),
            83 => Some(Self::Wask),
            84 => Some(Self::Wins),
            _ => None,
        }
    }
}

/// Why a segment could not be parsed. Segments before it in the same packet
/// are valid (kcp-go applies them before it notices the bad one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Fewer than 24 bytes where a header was expected.
    Truncated,
    /// `len` exceeds the bytes remaining in the packet.
    BadLength {
        /// The segment's conversation id (kcp-go checks it before the length).
        conv: u32,
    },
}

/// Read a little-endian `u32` at a fixed in-bounds offset of a header.
#[inline]
fn le32(h: &[u8; HEADER_LEN], at: usize) -> u32 {
    // `at` is one of the constant offsets in `field`, all at most 20, so the
    // `get` never fails; the fallback keeps this path panic-free regardless.
    match h.get(at..at + 4) {
        Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// One parsed segment: a header of exactly 24 bytes and its payload.
#[derive(Clone, Copy)]
pub struct SegmentView<'a> {
    header: &'a [u8; HEADER_LEN],
    payload: &'a [u8],
}

impl<'a> SegmentView<'a> {
    /// Conversation id.
    #[must_use]
    pub fn conv(&self) -> u32 {
        le32(self.header, field::CONV.start)
    }
    /// Raw command byte (may be invalid; see [`SegmentView::command`]).
    #[must_use]
    pub fn cmd(&self) -> u8 {
        self.header[field::CMD]
    }
    /// The command, `None` if the byte is not 81..=84.
    #[must_use]
    pub fn command(&self) -> Option<Command> {
        Command::from_u8(self.cmd())
    }
    /// Fragments still following in this message.
    #[must_use]
    pub fn frg(&self) -> u8 {
        self.header[field::FRG]
    }
    /// Sender's free receive slots.
    #[must_use]
    pub fn wnd(&self) -> u16 {
        u16::from_le_bytes([
            self.header[field::WND.start],
            self.header[field::WND.start + 1],
        ])
    }
    /// Timestamp.
    #[must_use]
    pub fn ts(&self) -> u32 {
        le32(self.header, field::TS.start)
    }
    /// Sequence number.
    #[must_use]
    pub fn sn(&self) -> u32 {
        le32(self.header, field::SN.start)
    }
    /// Cumulative acknowledgement.
    #[must_use]
    pub fn una(&self) -> u32 {
        le32(self.header, field::UNA.start)
    }
    /// Payload length as carried in the header (equals `payload().len()`).
    #[must_use]
    pub fn len(&self) -> u32 {
        le32(self.header, field::LEN.start)
    }
    /// `true` when the segment carries no payload.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.payload.is_empty()
    }
    /// The payload bytes.
    #[must_use]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
    /// The header fields as plain data.
    #[must_use]
    pub fn header(&self) -> Header {
        Header {
            conv: self.conv(),
            cmd: self.cmd(),
            frg: self.frg(),
            wnd: self.wnd(),
            ts: self.ts(),
            sn: self.sn(),
            una: self.una(),
            len: self.len(),
        }
    }
}

impl fmt::Debug for SegmentView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.header().fmt(f)
    }
}

/// Iterator over the segments of one KCP packet.
///
/// Stops after the first error (which it yields once) and ignores trailing
/// bytes shorter than a header, as kcp-go does. A packet shorter than one
/// header yields [`ParseError::Truncated`].
#[derive(Clone, Debug)]
pub struct Segments<'a> {
    rest: &'a [u8],
    first: bool,
    failed: bool,
}

impl<'a> Segments<'a> {
    /// Walk `packet`.
    #[must_use]
    pub fn new(packet: &'a [u8]) -> Self {
        Self {
            rest: packet,
            first: true,
            failed: false,
        }
    }
}

impl<'a> Iterator for Segments<'a> {
    type Item = Result<SegmentView<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let first = core::mem::replace(&mut self.first, false);
        let Some((header, rest)) = self.rest.split_first_chunk::<HEADER_LEN>() else {
            if first {
                self.failed = true;
                return Some(Err(ParseError::Truncated));
            }
            return None;
        };
        let len = le32(header, field::LEN.start);
        let Some((payload, rest)) = usize::try_from(len)
            .ok()
            .and_then(|l| rest.split_at_checked(l))
        else {
            self.failed = true;
            return Some(Err(ParseError::BadLength {
                conv: le32(header, field::CONV.start),
            }));
        };
        self.rest = rest;
        Some(Ok(SegmentView { header, payload }))
    }
}

/// Segment header fields as plain data, for encoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Header {
    /// Conversation id.
    pub conv: u32,
    /// Command byte.
    pub cmd: u8,
    /// Fragments still following.
    pub frg: u8,
    /// Free receive slots.
    pub wnd: u16,
    /// Timestamp.
    pub ts: u32,
    /// Sequence number.
    pub sn: u32,
    /// Cumulative acknowledgement.
    pub una: u32,
    /// Payload length.
    pub len: u32,
}

impl Header {
    /// Write the 24 header bytes into `out`.
    pub fn encode(&self, out: &mut [u8; HEADER_LEN]) {
        out[field::CONV].copy_from_slice(&self.conv.to_le_bytes());
        out[field::CMD] = self.cmd;
        out[field::FRG] = self.frg;
        out[field::WND].copy_from_slice(&self.wnd.to_le_bytes());
        out[field::TS].copy_from_slice(&self.ts.to_le_bytes());
        out[field::SN].copy_from_slice(&self.sn.to_le_bytes());
        out[field::UNA].copy_from_slice(&self.una.to_le_bytes());
        out[field::LEN].copy_from_slice(&self.len.to_le_bytes());
    }

    /// Write header and `payload` at `buf[at..]`; returns the new end offset,
    /// or `None` (writing nothing) if they do not fit.
    pub fn encode_at(&self, buf: &mut [u8], at: usize, payload: &[u8]) -> Option<usize> {
        let end = at.checked_add(HEADER_LEN)?.checked_add(payload.len())?;
        let dst = buf.get_mut(at..end)?;
        let (head, body) = dst.split_first_chunk_mut::<HEADER_LEN>()?;
        self.encode(head);
        body.copy_from_slice(payload);
        Some(end)
    }
}
