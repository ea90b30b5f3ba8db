//! Unaligned vector loads and stores between registers and arrays of exactly
//! the vector's size, shared by the x86_64 kernels.

use core::arch::x86_64::*;

/// Loads 16 bytes.
#[inline]
#[target_feature(enable = "sse2")]
pub(crate) fn load128(b: &[u8; 16]) -> __m128i {
    // SAFETY: `b` is 16 readable bytes; unaligned loads are allowed.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// Stores 16 bytes.
#[inline]
#[target_feature(enable = "sse2")]
pub(crate) fn store128(b: &mut [u8; 16], v: __m128i) {
    // SAFETY: `b` is 16 writable bytes; unaligned stores are allowed.
    unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), v) }
}

/// Loads 64 bytes.
#[cfg(kcpio_vaes)]
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn load512(b: &[u8; 64]) -> __m512i {
    // SAFETY: `b` is 64 readable bytes; unaligned loads are allowed.
    unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
}

/// Loads sixteen 32-bit words.
#[cfg(kcpio_vaes)]
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn load512_words(w: &[u32; 16]) -> __m512i {
    // SAFETY: `w` is 64 readable bytes; unaligned loads are allowed.
    unsafe { _mm512_loadu_si512(w.as_ptr().cast()) }
}

/// Stores sixteen 32-bit words.
#[cfg(kcpio_vaes)]
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn store512_words(w: &mut [u32; 16], v: __m512i) {
    // SAFETY: `w` is 64 writable bytes; unaligned stores are allowed.
    unsafe { _mm512_storeu_si512(w.as_mut_ptr().cast(), v) }
}
