//! The snappy framing format as kcptun uses it (golang/snappy
//! `encode.go`, `decode.go`): the codec, sans-IO. [`Snappy`](super::Snappy)
//! wraps it around a transport.
//!
//! A framed stream starts with the stream identifier chunk
//! `ff 06 00 00 "sNaPpY"`; each data chunk is `type u8 | len u24 LE |
//! masked CRC-32C u32 LE | body` over at most 65,536 bytes of data: type
//! 0x00 with a snappy block when that saves at least 12.5%, else type 0x01
//! with the bytes as they are. The block codec is `snap::raw`, whose output
//! is byte-identical to Go's.

use core::fmt;

/// The stream identifier chunk, first in each direction.
pub const STREAM_IDENTIFIER: [u8; 10] = *b"\xff\x06\x00\x00sNaPpY";
/// Most data bytes in one chunk (`maxBlockSize`).
pub const MAX_BLOCK: usize = 65_536;
/// `snap::raw::max_compress_len(MAX_BLOCK)` (`maxEncodedLenOfMaxBlockSize`).
pub const MAX_ENCODED_BLOCK: usize = 76_490;
/// The longest chunk body a reader accepts (Go's reader buffer).
pub const MAX_CHUNK_BODY: usize = MAX_ENCODED_BLOCK + 4;
/// Room [`Encoder::encode`] needs in its output: identifier, chunk header,
/// checksum and the largest block.
pub const MAX_ENCODED_CHUNK: usize = STREAM_IDENTIFIER.len() + 8 + MAX_ENCODED_BLOCK;

const CHUNK_COMPRESSED: u8 = 0x00;
const CHUNK_UNCOMPRESSED: u8 = 0x01;
const CHUNK_IDENTIFIER: u8 = 0xff;

/// CRC-32C (Castagnoli), slicing by 8.
const CRC_TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        s += 1;
    }
    t
};

/// CRC-32C of `data`.
#[must_use]
pub fn crc32c(data: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let mut crc = !0u32;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ crc;
        let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        crc = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ t[0][((crc ^ u32::from(b)) & 0xff) as usize];
    }
    !crc
}

/// The framing format's masked checksum of `data`.
#[must_use]
pub fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c(data);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Writes chunks: Go's `snappy.NewBufferedWriter` with a `Flush` after every
/// `Write` of at most [`MAX_BLOCK`] bytes.
pub struct Encoder {
    raw: snap::raw::Encoder,
    wrote_identifier: bool,
}

impl fmt::Debug for Encoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Encoder")
            .field("wrote_identifier", &self.wrote_identifier)
            .finish()
    }
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// A new stream (the identifier goes before the first chunk).
    #[must_use]
    pub fn new() -> Self {
        Self {
            raw: snap::raw::Encoder::new(),
            wrote_identifier: false,
        }
    }

    /// Encodes the first `min(data.len(), MAX_BLOCK)` bytes of `data` as one
    /// chunk (preceded by the stream identifier the first time) into `out`,
    /// which needs [`MAX_ENCODED_CHUNK`] bytes. Returns `(taken, written)`;
    /// nothing for empty `data`.
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`MAX_ENCODED_CHUNK`].
    pub fn encode(&mut self, data: &[u8], out: &mut [u8]) -> (usize, usize) {
        let data = &data[..data.len().min(MAX_BLOCK)];
        if data.is_empty() {
            return (0, 0);
        }
        assert!(
            out.len() >= MAX_ENCODED_CHUNK,
            "snappy output buffer too small"
        );
        let mut n = 0;
        if !self.wrote_identifier {
            out[..STREAM_IDENTIFIER.len()].copy_from_slice(&STREAM_IDENTIFIER);
            n = STREAM_IDENTIFIER.len();
            self.wrote_identifier = true;
        }
        let (head, body) = out[n..].split_at_mut(8);
        // The 12.5% rule: compressed only if it saves at least an eighth.
        let compressed = match self.raw.compress(data, body) {
            Ok(c) if c < data.len() - data.len() / 8 => Some(c),
            _ => None,
        };
        let (kind, body_len) = match compressed {
            Some(c) => (CHUNK_COMPRESSED, c),
            None => {
                body[..data.len()].copy_from_slice(data);
                (CHUNK_UNCOMPRESSED, data.len())
            }
        };
        let len = (body_len + 4) as u32;
        head[0] = kind;
        head[1..4].copy_from_slice(&len.to_le_bytes()[..3]);
        head[4..8].copy_from_slice(&masked_crc(data).to_le_bytes());
        (data.len(), n + 8 + body_len)
    }
}

/// A framed stream the reader refuses (Go's `ErrCorrupt`/`ErrUnsupported`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The first chunk is not the stream identifier (typically: the peer
    /// does not compress, kcptun `--nocomp`).
    NoStreamIdentifier {
        /// The first byte that arrived.
        first: u8,
    },
    /// A stream identifier chunk with the wrong length or body.
    BadIdentifier,
    /// A chunk longer than any writer produces.
    ChunkTooLong(usize),
    /// A data chunk too short for its checksum, or decoding to more than
    /// 65,536 bytes.
    BadLength(usize),
    /// Chunk types 0x02 to 0x7f are reserved and unskippable.
    Unsupported(u8),
    /// The data does not match its checksum.
    Checksum,
    /// A compressed block the snappy decoder rejects.
    Corrupt,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoStreamIdentifier { first } => write!(
                f,
                "snappy: stream starts with byte {first:#04x}, not the stream identifier \
                 (does the peer compress?)"
            ),
            Self::BadIdentifier => f.write_str("snappy: corrupt stream identifier"),
            Self::ChunkTooLong(n) => write!(f, "snappy: chunk of {n} bytes is too long"),
            Self::BadLength(n) => write!(f, "snappy: chunk length {n} is invalid"),
            Self::Unsupported(t) => write!(f, "snappy: unsupported chunk type {t:#04x}"),
            Self::Checksum => f.write_str("snappy: checksum mismatch"),
            Self::Corrupt => f.write_str("snappy: corrupt compressed block"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Reads chunks from a byte stream, as Go's `snappy.Reader` does.
///
/// Feed bytes to [`push`](Self::push); take the data of each decoded chunk
/// with [`decoded`](Self::decoded) and [`consume`](Self::consume). It holds
/// at most one chunk ([`MAX_CHUNK_BODY`] + 4 bytes) and one decoded block.
pub struct Decoder {
    raw: snap::raw::Decoder,
    seen_identifier: bool,
    head: [u8; 4],
    head_len: usize,
    /// The body of the current chunk, `body_len` bytes expected.
    body: Vec<u8>,
    body_len: usize,
    out: Vec<u8>,
    out_pos: usize,
    error: Option<DecodeError>,
}

impl fmt::Debug for Decoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoder")
            .field("pending", &(self.out.len() - self.out_pos))
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder at the start of a stream.
    #[must_use]
    pub fn new() -> Self {
        Self {
            raw: snap::raw::Decoder::new(),
            seen_identifier: false,
            head: [0; 4],
            head_len: 0,
            body: Vec::new(),
            body_len: 0,
            out: Vec::new(),
            out_pos: 0,
            error: None,
        }
    }

    /// Decoded bytes not yet consumed.
    #[must_use]
    pub fn decoded(&self) -> &[u8] {
        &self.out[self.out_pos..]
    }

    /// Marks `n` decoded bytes as taken.
    pub fn consume(&mut self, n: usize) {
        self.out_pos = (self.out_pos + n).min(self.out.len());
    }

    /// Whether the input stopped mid-chunk (an EOF now is unexpected).
    #[must_use]
    pub fn mid_chunk(&self) -> bool {
        self.head_len > 0
    }

    /// Parses `input` and returns how much it consumed. It stops after a
    /// chunk that decodes to data, and consumes nothing while decoded data
    /// is waiting.
    ///
    /// # Errors
    ///
    /// The stream's [`DecodeError`]; it is final.
    pub fn push(&mut self, input: &[u8]) -> Result<usize, DecodeError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut pos = 0;
        while self.out_pos == self.out.len() && pos < input.len() {
            if self.head_len < 4 {
                let take = (4 - self.head_len).min(input.len() - pos);
                self.head[self.head_len..self.head_len + take]
                    .copy_from_slice(&input[pos..pos + take]);
                self.head_len += take;
                pos += take;
                if self.head_len < 4 {
                    break;
                }
                let kind = self.head[0];
                if !self.seen_identifier && kind != CHUNK_IDENTIFIER {
                    return Err(self.fail(DecodeError::NoStreamIdentifier { first: kind }));
                }
                self.seen_identifier = true;
                let len = u32::from_le_bytes([self.head[1], self.head[2], self.head[3], 0]);
                self.body_len = len as usize;
                if self.body_len > MAX_CHUNK_BODY {
                    return Err(self.fail(DecodeError::ChunkTooLong(self.body_len)));
                }
                if (0x02..=0x7f).contains(&kind) {
                    return Err(self.fail(DecodeError::Unsupported(kind)));
                }
                self.body.clear();
            }
            let take = (self.body_len - self.body.len()).min(input.len() - pos);
            self.body.extend_from_slice(&input[pos..pos + take]);
            pos += take;
            if self.body.len() == self.body_len {
                self.head_len = 0;
                if let Err(e) = self.chunk() {
                    return Err(self.fail(e));
                }
            }
        }
        Ok(pos)
    }

    fn fail(&mut self, e: DecodeError) -> DecodeError {
        self.error = Some(e);
        e
    }

    /// Acts on the complete chunk in `head` and `body`.
    fn chunk(&mut self) -> Result<(), DecodeError> {
        let body = &self.body[..];
        match self.head[0] {
            CHUNK_IDENTIFIER if body != &STREAM_IDENTIFIER[4..] => {
                return Err(DecodeError::BadIdentifier);
            }
            CHUNK_IDENTIFIER => {}
            kind @ (CHUNK_COMPRESSED | CHUNK_UNCOMPRESSED) => {
                let Some((sum, data)) = body.split_first_chunk::<4>() else {
                    return Err(DecodeError::BadLength(body.len()));
                };
                let sum = u32::from_le_bytes(*sum);
                self.out.clear();
                self.out_pos = 0;
                if kind == CHUNK_COMPRESSED {
                    let n = snap::raw::decompress_len(data).map_err(|_| DecodeError::Corrupt)?;
                    if n > MAX_BLOCK {
                        return Err(DecodeError::BadLength(n));
                    }
                    self.out.resize(n, 0);
                    self.raw
                        .decompress(data, &mut self.out)
                        .map_err(|_| DecodeError::Corrupt)?;
                } else {
                    if data.len() > MAX_BLOCK {
                        return Err(DecodeError::BadLength(data.len()));
                    }
                    self.out.extend_from_slice(data);
                }
                if masked_crc(&self.out) != sum {
                    self.out.clear();
                    return Err(DecodeError::Checksum);
                }
            }
            _ => {} // 0x80..=0xfe: skippable
        }
        Ok(())
    }
}
