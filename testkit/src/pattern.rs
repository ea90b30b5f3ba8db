//! The payload pattern shared with `interop/kcpgo-peer`: the byte at stream
//! offset `i` is the top byte of `(i mod 2^32) * 2654435761 mod 2^32`.

// Each test binary and example uses a different part of this module.
#![allow(dead_code)]

/// The pattern byte at stream offset `offset`.
pub fn byte_at(offset: u64) -> u8 {
    ((offset as u32).wrapping_mul(2_654_435_761) >> 24) as u8
}

/// Fills `dst` with the pattern starting at stream offset `offset`.
pub fn fill(dst: &mut [u8], offset: u64) {
    for (k, b) in dst.iter_mut().enumerate() {
        *b = byte_at(offset.wrapping_add(k as u64));
    }
}

/// The index in `data` of the first byte that differs from the pattern
/// starting at `offset`, if any.
pub fn first_mismatch(data: &[u8], offset: u64) -> Option<usize> {
    data.iter()
        .enumerate()
        .find(|&(k, &b)| b != byte_at(offset.wrapping_add(k as u64)))
        .map(|(k, _)| k)
}

/// Checks a received stream chunk by chunk.
#[derive(Debug, Default)]
pub struct Verifier {
    /// Bytes checked so far (the offset of the next byte).
    pub offset: u64,
    /// Offset of the first wrong byte, once one was seen.
    pub mismatch: Option<u64>,
}

impl Verifier {
    /// Checks the next `data` bytes of the stream; false once any byte was wrong.
    pub fn push(&mut self, data: &[u8]) -> bool {
        if self.mismatch.is_none()
            && let Some(k) = first_mismatch(data, self.offset)
        {
            self.mismatch = Some(self.offset + k as u64);
        }
        self.offset += data.len() as u64;
        self.mismatch.is_none()
    }
}
