//! CRC-32/IEEE (kcp-go's datagram checksum) by 512-bit carry-less folding.
//!
//! `crc32fast` folds datagram-sized inputs (under 2 KiB) with 256-bit
//! registers and then reduces its eight 128-bit lanes one after another,
//! each step waiting on the previous multiply: about as long as the folding
//! itself. Here four 512-bit accumulators fold 256 bytes a step, and the
//! reduction runs in parallel: the four accumulators meet in one level, then
//! the four lanes of the result in another, each multiplied by the constant
//! for its own distance. The last 128 bits are reduced with Barrett's method
//! as in Intel's white paper "Fast CRC Computation for Generic Polynomials
//! Using PCLMULQDQ" (bit-reflected variant); the constants are computed
//! below from the polynomial.
//!
//! [`hash`] is `crc32fast::hash` (which stays the fallback for short inputs,
//! CPUs without AVX-512F and VPCLMULQDQ, and the last 0..15 bytes), checked
//! against it in the tests.

/// The CRC-32/IEEE generator polynomial (normal bit order, x^32 implied).
#[cfg_attr(not(all(target_arch = "x86_64", kcpio_vaes)), allow(dead_code))]
const POLY: u64 = 0x1_04c1_1db7;

/// `x^n mod P(x)`, normal bit order.
#[cfg_attr(not(all(target_arch = "x86_64", kcpio_vaes)), allow(dead_code))]
const fn x_pow_mod(n: u32) -> u32 {
    let mut r: u64 = 1;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= POLY;
        }
        i += 1;
    }
    r as u32
}

/// The folding multiplier for `x^n` in the bit-reflected domain: the
/// remainder reversed, shifted left by one for the carry-less product's
/// off-by-one in that domain.
#[cfg_attr(not(all(target_arch = "x86_64", kcpio_vaes)), allow(dead_code))]
const fn k(n: u32) -> u64 {
    (x_pow_mod(n).reverse_bits() as u64) << 1
}

/// The constants that move a 128-bit lane `bits` further: for its low
/// 64 bits (which hold the higher powers in the reflected domain) and its
/// high 64 bits.
#[cfg_attr(not(all(target_arch = "x86_64", kcpio_vaes)), allow(dead_code))]
const fn fold(bits: u32) -> (u64, u64) {
    (k(bits + 32), k(bits - 32))
}

/// Barrett's constants, 33 bits reversed: the polynomial and
/// `floor(x^64 / P(x))`.
#[cfg_attr(not(all(target_arch = "x86_64", kcpio_vaes)), allow(dead_code))]
const fn barrett() -> (u64, u64) {
    let mut rem: u128 = 1 << 64;
    let mut quot: u64 = 0;
    let mut shift = 32;
    loop {
        if rem & (1u128 << (32 + shift)) != 0 {
            rem ^= (POLY as u128) << shift;
            quot |= 1 << shift;
        }
        if shift == 0 {
            break;
        }
        shift -= 1;
    }
    (POLY.reverse_bits() >> 31, quot.reverse_bits() >> 31)
}

/// CRC-32/IEEE of `data`, the same value as `crc32fast::hash`.
pub(crate) fn hash(data: &[u8]) -> u32 {
    #[cfg(all(target_arch = "x86_64", kcpio_vaes))]
    {
        if data.len() >= x86::MIN_LEN && x86::supported() {
            let (head, tail) = data.split_at(data.len() & !15);
            // SAFETY: the required CPU features were detected just above.
            let crc = unsafe { x86::fold_all(head) };
            if tail.is_empty() {
                return crc;
            }
            let mut rest = crc32fast::Hasher::new_with_initial(crc);
            rest.update(tail);
            return rest.finalize();
        }
    }
    crc32fast::hash(data)
}

#[cfg(all(target_arch = "x86_64", kcpio_vaes))]
mod x86 {
    use super::{barrett, fold, k};
    use crate::simd::mem::{load128, load512};
    use core::arch::x86_64::*;

    // Evaluated at compile time (the const fns loop over up to 2080 bits).
    const F2048: (u64, u64) = fold(2048);
    const F1536: (u64, u64) = fold(1536);
    const F1024: (u64, u64) = fold(1024);
    const F512: (u64, u64) = fold(512);
    const F384: (u64, u64) = fold(384);
    const F256: (u64, u64) = fold(256);
    const F128: (u64, u64) = fold(128);
    const K96: u64 = k(96);
    const K64: u64 = k(64);
    const BARRETT: (u64, u64) = barrett();

    /// Four 64-byte accumulators' worth.
    pub(super) const MIN_LEN: usize = 256;

    pub(super) fn supported() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.1")
    }

    /// A pair of fold constants in every 128-bit lane.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn keys512((lo, hi): (u64, u64)) -> __m512i {
        let (lo, hi) = (lo as i64, hi as i64);
        _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo)
    }

    /// `x` moved forward by the distance of `keys`, XORed with `next`.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn step512(x: __m512i, keys: __m512i, next: __m512i) -> __m512i {
        let lo = _mm512_clmulepi64_epi128::<0x00>(x, keys);
        let hi = _mm512_clmulepi64_epi128::<0x11>(x, keys);
        // 0x96: the XOR of all three inputs.
        _mm512_ternarylogic_epi64::<0x96>(lo, hi, next)
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn step128(x: __m128i, keys: __m128i, next: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128::<0x00>(x, keys);
        let hi = _mm_clmulepi64_si128::<0x11>(x, keys);
        _mm_xor_si128(_mm_xor_si128(lo, hi), next)
    }

    /// CRC-32/IEEE (initial value and final XOR included) of `data`, whose
    /// length is a multiple of 16 and at least [`MIN_LEN`] (else 0).
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1")]
    pub(super) fn fold_all(data: &[u8]) -> u32 {
        let (chunks, rest) = data.as_chunks::<64>();
        let Some((first, chunks)) = chunks.split_first_chunk::<4>() else {
            return 0;
        };
        let mut v = [
            load512(&first[0]),
            load512(&first[1]),
            load512(&first[2]),
            load512(&first[3]),
        ];
        // The initial value !0 enters as an XOR into the first 32 bits.
        v[0] = _mm512_xor_si512(v[0], _mm512_castsi128_si512(_mm_cvtsi32_si128(-1)));
        let (groups, chunks) = chunks.as_chunks::<4>();
        let k2048 = keys512(F2048);
        for group in groups {
            for (acc, chunk) in v.iter_mut().zip(group) {
                *acc = step512(*acc, k2048, load512(chunk));
            }
        }
        // The four accumulators meet in one level, each moved by its own
        // distance to the last one's place.
        let a = step512(v[0], keys512(F1536), v[3]);
        let b = step512(v[1], keys512(F1024), _mm512_setzero_si512());
        let c = step512(v[2], keys512(F512), _mm512_setzero_si512());
        let mut acc = _mm512_ternarylogic_epi64::<0x96>(a, b, c);
        let k512 = keys512(F512);
        for chunk in chunks {
            acc = step512(acc, k512, load512(chunk));
        }
        // The four lanes likewise: lane i by 384 - 128 i bits, lane 3 stays.
        let ((l384, h384), (l256, h256), (l128, h128)) = (F384, F256, F128);
        let lane_keys = _mm512_set_epi64(
            0,
            0,
            h128 as i64,
            l128 as i64,
            h256 as i64,
            l256 as i64,
            h384 as i64,
            l384 as i64,
        );
        let moved = step512(acc, lane_keys, _mm512_setzero_si512());
        let mut x = _mm_xor_si128(
            _mm_xor_si128(
                _mm512_castsi512_si128(moved),
                _mm512_extracti32x4_epi32::<1>(moved),
            ),
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<2>(moved),
                _mm512_extracti32x4_epi32::<3>(acc),
            ),
        );
        let k128 = _mm_set_epi64x(h128 as i64, l128 as i64);
        for block in rest.as_chunks::<16>().0 {
            x = step128(x, k128, load128(block));
        }
        reduce(x)
    }

    /// The 128-bit remainder down to the 32-bit CRC (final XOR included).
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn reduce(x: __m128i) -> u32 {
        let low32 = _mm_set_epi32(0, 0, 0, -1);
        // 128 -> 96 bits: the low half moved 64 bits on.
        let k96 = _mm_set_epi64x(K96 as i64, 0);
        let x = _mm_xor_si128(_mm_clmulepi64_si128::<0x10>(x, k96), _mm_srli_si128::<8>(x));
        // 96 -> 64 bits: the low word moved 32 bits on.
        let k64 = _mm_set_epi64x(0, K64 as i64);
        let x = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x00>(_mm_and_si128(x, low32), k64),
            _mm_srli_si128::<4>(x),
        );
        // Barrett: T1 = (R mod x^32) * u, T2 = (T1 mod x^32) * P, C = (R ^ T2) / x^32.
        let (p, u) = BARRETT;
        let pu = _mm_set_epi64x(u as i64, p as i64);
        let t1 = _mm_clmulepi64_si128::<0x10>(_mm_and_si128(x, low32), pu);
        let t2 = _mm_clmulepi64_si128::<0x00>(_mm_and_si128(t1, low32), pu);
        !(_mm_extract_epi32::<1>(_mm_xor_si128(x, t2)) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn constants_match_the_published_ones() {
        // Intel's white paper and crc32fast list these for CRC-32/IEEE.
        assert_eq!(fold(512), (0x1_5444_2bd4, 0x1_c6e4_1596));
        assert_eq!(fold(128), (0x1_7519_97d0, 0x0_ccaa_009e));
        assert_eq!(k(64), 0x1_63cd_6124);
        assert_eq!(barrett(), (0x1_db71_0641, 0x1_f701_1641));
    }

    #[test]
    fn every_length_up_to_1500_matches_crc32fast() {
        let data: Vec<u8> = (0..1600u32).map(|i| (i * 31 + 7) as u8).collect();
        for len in 0..=1500 {
            for offset in [0, 1, 7] {
                let d = &data[offset..offset + len];
                assert_eq!(hash(d), crc32fast::hash(d), "len {len} offset {offset}");
            }
        }
    }

    proptest! {
        #[test]
        fn matches_crc32fast(data in proptest::collection::vec(any::<u8>(), 0..4096), offset in 0usize..64) {
            let d = data.get(offset.min(data.len())..).unwrap_or(&[]);
            prop_assert_eq!(hash(d), crc32fast::hash(d));
        }
    }
}
