//! XTEA's 64 Feistel rounds for 16 blocks at once with AVX-512.
//!
//! Opening a CFB datagram encrypts ciphertext blocks that are all known
//! (see `crypto::cfb::decrypt_many`); each of the 16 lanes of a 512-bit
//! register holds one block's word. The caller (`crypto::tea`) owns the
//! round table (sum plus key word, per half round). [`rounds16`] returns
//! `false`, touching nothing, without AVX-512F; the caller then runs its
//! four-lane rounds, which are the reference in the tests.

/// `crypto::tea::XteaBe`'s rounds on 16 blocks (`v0`, `v1`: their big-endian
/// words), or `false` without AVX-512F.
pub(crate) fn rounds16(table: &[u32; 64], v0: &mut [u32; 16], v1: &mut [u32; 16]) -> bool {
    #[cfg(all(target_arch = "x86_64", kcpio_vaes))]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected just above.
            unsafe { x86::rounds16(table, v0, v1) };
            return true;
        }
    }
    let _ = (table, v0, v1);
    false
}

#[cfg(all(target_arch = "x86_64", kcpio_vaes))]
mod x86 {
    use crate::simd::mem::{load512_words as load, store512_words as store};
    use core::arch::x86_64::*;

    /// `v + ((((w << 4) ^ (w >> 5)) + w) ^ t)` in every lane.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn half(v: __m512i, w: __m512i, t: u32) -> __m512i {
        let mixed = _mm512_xor_si512(_mm512_slli_epi32::<4>(w), _mm512_srli_epi32::<5>(w));
        let f = _mm512_xor_si512(_mm512_add_epi32(mixed, w), _mm512_set1_epi32(t as i32));
        _mm512_add_epi32(v, f)
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn rounds16(table: &[u32; 64], v0: &mut [u32; 16], v1: &mut [u32; 16]) {
        let (mut a, mut b) = (load(v0), load(v1));
        let (pairs, _) = table.as_chunks::<2>();
        for [t0, t1] in pairs {
            a = half(a, b, *t0);
            b = half(b, a, *t1);
        }
        store(v0, a);
        store(v1, b);
    }
}
