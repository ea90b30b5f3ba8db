//! The smux frame codec (Go smux `frame.go`).
//!
//! A frame is an 8-byte little-endian header, `ver | cmd | len u16 | sid u32`,
//! followed by `len` bytes: the payload of a PSH, the 8-byte body of a UPD,
//! nothing for SYN, FIN and NOP. Frames follow each other back to back in a
//! byte stream.
//!
//! Parsing follows smoltcp's `Packet`/`Repr` split: [`Frame::new_checked`]
//! performs the one length check, after which every accessor reads a fixed
//! offset and cannot panic; [`Header`] is the parsed, owned form used by the
//! streaming decoder in [`Session`](super::Session), and
//! [`Header::validate`] applies the rules Go smux v1.5.58 enforces.

use core::fmt;

/// Byte offsets of the header fields, all little-endian.
mod field {
    use core::ops::Range;

    /// Protocol version (`u8`): 1 or 2, the same on every frame of a session.
    pub(super) const VER: usize = 0;
    /// Command (`u8`): SYN 0, FIN 1, PSH 2, NOP 3, UPD 4.
    pub(super) const CMD: usize = 1;
    /// Length of what follows the header (`u16`).
    pub(super) const LEN: Range<usize> = 2..4;
    /// Stream id (`u32`); 0 for NOP.
    pub(super) const SID: Range<usize> = 4..8;
    /// Header length (`headerSize`).
    pub(super) const HEADER_LEN: usize = 8;
    /// UPD body: bytes the reader has consumed (`u32`), relative to the body.
    pub(super) const UPD_CONSUMED: Range<usize> = 0..4;
    /// UPD body: the reader's window (`u32`), relative to the body.
    pub(super) const UPD_WINDOW: Range<usize> = 4..8;
}

/// Length of a frame header in bytes.
pub const HEADER_LEN: usize = field::HEADER_LEN;
/// Length of a UPD body (`szCmdUPD`).
pub const UPD_LEN: usize = 8;
/// The largest payload a frame can carry (`len` is a `u16`).
pub const MAX_PAYLOAD: usize = u16::MAX as usize;
/// The window a v2 writer assumes before the peer's first UPD
/// (`initialPeerWindow`).
pub const INITIAL_PEER_WINDOW: u32 = 262_144;

/// The five smux commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Cmd {
    /// 0: open a stream.
    Syn = 0,
    /// 1: end of the sender's half of a stream.
    Fin = 1,
    /// 2: stream data.
    Psh = 2,
    /// 3: keepalive, on stream 0.
    Nop = 3,
    /// 4: v2 window update, `consumed u32 | window u32`.
    Upd = 4,
}

impl Cmd {
    /// The command for a wire byte, `None` for 5 and above.
    #[must_use]
    pub const fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(Self::Syn),
            1 => Some(Self::Fin),
            2 => Some(Self::Psh),
            3 => Some(Self::Nop),
            4 => Some(Self::Upd),
            _ => None,
        }
    }
}

/// A frame the session refuses, with the header bytes that arrived.
///
/// Any of these ends the session: smux has no way to resynchronise a byte
/// stream, and Go smux stops reading at the same frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// The version byte differs from the session's (smux's
    /// `ErrInvalidProtocol`; usually the peer runs the other `--smuxver`).
    VersionMismatch {
        /// The session's version.
        expected: u8,
        /// The header as received.
        header: [u8; HEADER_LEN],
    },
    /// A command byte of 5 or more.
    UnknownCommand {
        /// The header as received.
        header: [u8; HEADER_LEN],
    },
    /// SYN, FIN or NOP with a length other than 0, or UPD with a length
    /// other than 8 (v1.5.58 refuses these; v1.5.16 desynchronises on them).
    BadLength {
        /// The header as received.
        header: [u8; HEADER_LEN],
    },
}

impl ProtocolError {
    /// The header bytes that caused the error.
    #[must_use]
    pub const fn header(&self) -> [u8; HEADER_LEN] {
        match *self {
            Self::VersionMismatch { header, .. }
            | Self::UnknownCommand { header }
            | Self::BadLength { header } => header,
        }
    }
}

struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = Header::from_bytes(&self.header());
        match *self {
            Self::VersionMismatch { expected, header } => write!(
                f,
                "smux version mismatch: this session speaks version {expected}, \
                 the peer sent version {} (frame header {}); check --smuxver on both ends",
                h.version,
                Hex(&header)
            ),
            Self::UnknownCommand { header } => write!(
                f,
                "smux unknown command {} (frame header {})",
                h.cmd,
                Hex(&header)
            ),
            Self::BadLength { header } => write!(
                f,
                "smux command {} with invalid length {} (frame header {})",
                h.cmd,
                h.len,
                Hex(&header)
            ),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// A frame header, parsed from 8 bytes without any check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The version byte.
    pub version: u8,
    /// The command byte (see [`Cmd`]).
    pub cmd: u8,
    /// Bytes following the header.
    pub len: u16,
    /// Stream id.
    pub sid: u32,
}

impl Header {
    /// A header for `cmd` on stream `sid`.
    #[must_use]
    pub const fn new(version: u8, cmd: Cmd, len: u16, sid: u32) -> Self {
        Self {
            version,
            cmd: cmd as u8,
            len,
            sid,
        }
    }

    /// Reads the four fields of a header.
    #[must_use]
    pub const fn from_bytes(b: &[u8; HEADER_LEN]) -> Self {
        Self {
            version: b[field::VER],
            cmd: b[field::CMD],
            len: u16::from_le_bytes([b[field::LEN.start], b[field::LEN.start + 1]]),
            sid: u32::from_le_bytes([
                b[field::SID.start],
                b[field::SID.start + 1],
                b[field::SID.start + 2],
                b[field::SID.start + 3],
            ]),
        }
    }

    /// The header's wire form.
    #[must_use]
    pub const fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let l = self.len.to_le_bytes();
        let s = self.sid.to_le_bytes();
        [self.version, self.cmd, l[0], l[1], s[0], s[1], s[2], s[3]]
    }

    /// Writes the header into the first 8 bytes of `buf`.
    ///
    /// # Panics
    ///
    /// If `buf` is shorter than [`HEADER_LEN`].
    pub fn emit(&self, buf: &mut [u8]) {
        buf[..HEADER_LEN].copy_from_slice(&self.to_bytes());
    }

    /// Checks the header as Go smux v1.5.58 does for a session of `version`
    /// and returns its command.
    ///
    /// UPD is accepted in either version (a v1 session skips it, as v1.5.16
    /// processes it), but only with a length of 8.
    ///
    /// # Errors
    ///
    /// A [`ProtocolError`] for a version mismatch, an unknown command, or a
    /// length the command cannot have.
    pub const fn validate(&self, version: u8) -> Result<Cmd, ProtocolError> {
        let header = self.to_bytes();
        if self.version != version {
            return Err(ProtocolError::VersionMismatch {
                expected: version,
                header,
            });
        }
        let Some(cmd) = Cmd::from_u8(self.cmd) else {
            return Err(ProtocolError::UnknownCommand { header });
        };
        let ok = match cmd {
            Cmd::Syn | Cmd::Fin | Cmd::Nop => self.len == 0,
            Cmd::Upd => self.len as usize == UPD_LEN,
            Cmd::Psh => true,
        };
        if ok {
            Ok(cmd)
        } else {
            Err(ProtocolError::BadLength { header })
        }
    }
}

/// One frame over a byte buffer that holds at least its header and body.
#[derive(Clone, Copy, Debug)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

/// Why [`Frame::new_checked`] refused a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Truncated {
    /// Fewer than 8 bytes.
    Header,
    /// The header's `len` runs past the end of the buffer.
    Body {
        /// The length the header announces.
        len: u16,
    },
}

impl fmt::Display for Truncated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header => f.write_str("smux frame shorter than its 8-byte header"),
            Self::Body { len } => write!(f, "smux frame body of {len} bytes is truncated"),
        }
    }
}

impl std::error::Error for Truncated {}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps `buffer` after checking that it holds a header and the `len`
    /// bytes it announces (more bytes may follow; see [`Frame::total_len`]).
    ///
    /// # Errors
    ///
    /// [`Truncated`] if it does not.
    pub fn new_checked(buffer: T) -> Result<Self, Truncated> {
        let b = buffer.as_ref();
        let Some(h) = b.first_chunk::<HEADER_LEN>() else {
            return Err(Truncated::Header);
        };
        let len = Header::from_bytes(h).len;
        if b.len() - HEADER_LEN < len as usize {
            return Err(Truncated::Body { len });
        }
        Ok(Self { buffer })
    }

    fn header_bytes(&self) -> &[u8; HEADER_LEN] {
        // The check in `new_checked` guarantees HEADER_LEN bytes.
        self.buffer
            .as_ref()
            .first_chunk()
            .unwrap_or(&[0; HEADER_LEN])
    }

    /// The parsed header.
    #[must_use]
    pub fn header(&self) -> Header {
        Header::from_bytes(self.header_bytes())
    }

    /// Header plus body length.
    #[must_use]
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.header().len as usize
    }

    /// The `len` bytes after the header.
    #[must_use]
    pub fn body(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(HEADER_LEN..self.total_len())
            .unwrap_or(&[])
    }

    /// A UPD body's `(consumed, window)`, if the body is 8 bytes long.
    #[must_use]
    pub fn upd(&self) -> Option<Upd> {
        self.body().try_into().ok().map(Upd::from_bytes)
    }
}

/// The body of a v2 window update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Upd {
    /// Total bytes the reader has consumed on this stream (wrapping).
    pub consumed: u32,
    /// The reader's window (its `MaxStreamBuffer`).
    pub window: u32,
}

impl Upd {
    /// Reads a UPD body.
    #[must_use]
    pub const fn from_bytes(b: &[u8; UPD_LEN]) -> Self {
        Self {
            consumed: u32::from_le_bytes([
                b[field::UPD_CONSUMED.start],
                b[field::UPD_CONSUMED.start + 1],
                b[field::UPD_CONSUMED.start + 2],
                b[field::UPD_CONSUMED.start + 3],
            ]),
            window: u32::from_le_bytes([
                b[field::UPD_WINDOW.start],
                b[field::UPD_WINDOW.start + 1],
                b[field::UPD_WINDOW.start + 2],
                b[field::UPD_WINDOW.start + 3],
            ]),
        }
    }

    /// The body's wire form.
    #[must_use]
    pub const fn to_bytes(&self) -> [u8; UPD_LEN] {
        let c = self.consumed.to_le_bytes();
        let w = self.window.to_le_bytes();
        [c[0], c[1], c[2], c[3], w[0], w[1], w[2], w[3]]
    }
}

/// Splits a byte stream into frames; stops at the first truncated frame.
///
/// Yields `Err` once, for a trailing partial frame, then ends.
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    rest: &'a [u8],
}

impl<'a> Frames<'a> {
    /// Frames of `stream`, in order.
    #[must_use]
    pub const fn new(stream: &'a [u8]) -> Self {
        Self { rest: stream }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<&'a [u8]>, Truncated>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match Frame::new_checked(self.rest) {
            Ok(f) => {
                let (this, rest) = self.rest.split_at(f.total_len());
                self.rest = rest;
                Some(Ok(Frame { buffer: this }))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}
