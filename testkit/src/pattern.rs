//! The payload pattern shared with `interop/kcpgo-peer`: the byte at stream
//! offset `i` is the top byte of `(i mod 2^32) * 2654435761 mod 2^32`.

// Each test binary and example uses a different part of this module.
#![allow(dead_code)]

/// The multiplier: byte `i` is the top byte of `i * MUL` (mod 2^32).
const MUL: u32 = 2_654_435_761;
/// Lanes computed side by side: `fill` and `first_mismatch` work on this
/// many bytes at a time so the compiler vectorises them (the lab's peers
/// run the pattern at several GB/s, far from the transport's own cost).
const LANES: usize = 32;

/// The pattern byte at stream offset `offset`.
pub fn byte_at(offset: u64) -> u8 {
    ((offset as u32).wrapping_mul(MUL) >> 24) as u8
}

/// The products `(offset + j) * MUL` for the lanes `j` of the first block.
fn lanes(offset: u64) -> [u32; LANES] {
    let start = (offset as u32).wrapping_mul(MUL);
    let mut x = [0u32; LANES];
    for (j, v) in x.iter_mut().enumerate() {
        *v = start.wrapping_add((j as u32).wrapping_mul(MUL));
    }
    x
}

/// What a block adds to each lane's product.
const STEP: u32 = MUL.wrapping_mul(LANES as u32);

/// Fills `dst` with the pattern starting at stream offset `offset`.
pub fn fill(dst: &mut [u8], offset: u64) {
    let mut x = lanes(offset);
    let mut blocks = dst.chunks_exact_mut(LANES);
    for block in &mut blocks {
        for (b, v) in block.iter_mut().zip(x.iter_mut()) {
            *b = (*v >> 24) as u8;
            *v = v.wrapping_add(STEP);
        }
    }
    for (b, v) in blocks.into_remainder().iter_mut().zip(x) {
        *b = (v >> 24) as u8;
    }
}

/// The index in `data` of the first byte that differs from the pattern
/// starting at `offset`, if any.
pub fn first_mismatch(data: &[u8], offset: u64) -> Option<usize> {
    let mut x = lanes(offset);
    let mut blocks = data.chunks_exact(LANES);
    let mut at = 0;
    for block in &mut blocks {
        let mut diff = 0u8;
        for (&b, v) in block.iter().zip(x.iter_mut()) {
            diff |= b ^ (*v >> 24) as u8;
            *v = v.wrapping_add(STEP);
        }
        if diff != 0 {
            break;
        }
        at += LANES;
    }
    // The block that differs (found byte by byte), or the remainder.
    let rest = data.get(at..).unwrap_or_default();
    rest.iter()
        .enumerate()
        .find(|&(k, &b)| b != byte_at(offset.wrapping_add((at + k) as u64)))
        .map(|(k, _)| at + k)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_agree_with_the_byte_formula() {
        for offset in [0u64, 1, 31, 4_294_967_290, u64::MAX - 40] {
            for len in [0usize, 1, 31, 32, 33, 100, 1000] {
                let mut v = vec![0u8; len];
                fill(&mut v, offset);
                for (k, &b) in v.iter().enumerate() {
                    assert_eq!(
                        b,
                        byte_at(offset.wrapping_add(k as u64)),
                        "offset {offset} len {len} k {k}"
                    );
                }
                assert_eq!(first_mismatch(&v, offset), None);
                for bad in [0, len / 2, len.saturating_sub(1)] {
                    if len == 0 {
                        continue;
                    }
                    let mut w = v.clone();
                    w[bad] ^= 0x40;
                    assert_eq!(
                        first_mismatch(&w, offset),
                        Some(bad),
                        "offset {offset} len {len}"
                    );
                }
            }
        }
    }
}
