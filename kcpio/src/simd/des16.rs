//! The 48 Feistel rounds of DES-EDE3 for 16 blocks at once with AVX-512.
//!
//! Opening a CFB datagram encrypts ciphertext blocks that are all known, so
//! its keystream blocks are independent. The scalar rounds
//! (`crypto::des3`) are bound by instruction count there: about 40
//! operations a round for eight table lookups. Here each of the 16 lanes of
//! a 512-bit register holds one block's half, and a 64-entry S-box/P table
//! lookup is two `vpermt2d` (each picks from 32 entries held in two
//! registers by the index's low five bits) and one blend on its sixth bit.
//!
//! The caller (`crypto::des3`) owns the tables, the subkeys and the layout
//! (halves rotated right by one, initial and final permutations); this file
//! only runs the rounds. [`rounds16`] returns `false`, touching nothing, on
//! CPUs without AVX-512F: the caller then runs its scalar rounds, which are
//! the reference in the tests.

/// One round's subkey words in `crypto::des3`'s layout: `(even, odd)`.
pub(crate) type SubkeyWords = (u32, u32);

/// Runs `crypto::des3`'s 48 rounds on 16 blocks' halves (`l`, `r`, kept
/// rotated right by one), with its S-box/P tables `sp` and subkeys `keys`,
/// swapping the halves after each 16-round pass. `false` without AVX-512F.
pub(crate) fn rounds16(
    sp: &[[u32; 64]; 8],
    keys: &[SubkeyWords; 48],
    l: &mut [u32; 16],
    r: &mut [u32; 16],
) -> bool {
    #[cfg(all(target_arch = "x86_64", kcpio_vaes))]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected just above.
            unsafe { x86::rounds16(sp, keys, l, r) };
            return true;
        }
    }
    let _ = (sp, keys, l, r);
    false
}

#[cfg(all(target_arch = "x86_64", kcpio_vaes))]
mod x86 {
    use super::SubkeyWords;
    use crate::simd::mem::{load512_words as load, store512_words as store};
    use core::arch::x86_64::*;

    /// One 64-entry table as four registers of 16 entries.
    #[derive(Clone, Copy)]
    struct Table([__m512i; 4]);

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn table(t: &[u32; 64]) -> Table {
        let (quarters, _) = t.as_chunks::<16>();
        let mut out = [_mm512_setzero_si512(); 4];
        for (o, q) in out.iter_mut().zip(quarters) {
            *o = load(q);
        }
        Table(out)
    }

    /// `t[x & 63]` in every lane (bits above the sixth are ignored).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn lookup(t: &Table, x: __m512i, bit5: __m512i) -> __m512i {
        let [a, b, c, d] = t.0;
        let low = _mm512_permutex2var_epi32(a, x, b);
        let high = _mm512_permutex2var_epi32(c, x, d);
        _mm512_mask_blend_epi32(_mm512_test_epi32_mask(x, bit5), low, high)
    }

    /// `l ^ f(r)`: `crypto::des3::round` on 16 lanes (same index layout:
    /// `even` groups at bits 26, 18, 10, 2; `odd` at 30 wrapping, 22, 14, 6).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn round(sp: &[Table; 8], k: SubkeyWords, l: __m512i, r: __m512i) -> __m512i {
        let bit5 = _mm512_set1_epi32(32);
        let t = _mm512_xor_si512(r, _mm512_set1_epi32(k.0 as i32));
        let u = _mm512_xor_si512(r, _mm512_set1_epi32(k.1 as i32));
        let s0 = lookup(&sp[0], _mm512_srli_epi32::<26>(t), bit5);
        let s2 = lookup(&sp[2], _mm512_srli_epi32::<18>(t), bit5);
        let s4 = lookup(&sp[4], _mm512_srli_epi32::<10>(t), bit5);
        let s6 = lookup(&sp[6], _mm512_srli_epi32::<2>(t), bit5);
        let s7 = lookup(&sp[7], _mm512_rol_epi32::<2>(u), bit5);
        let s1 = lookup(&sp[1], _mm512_srli_epi32::<22>(u), bit5);
        let s3 = lookup(&sp[3], _mm512_srli_epi32::<14>(u), bit5);
        let s5 = lookup(&sp[5], _mm512_srli_epi32::<6>(u), bit5);
        // 0x96: the XOR of all three inputs.
        let a = _mm512_ternarylogic_epi32::<0x96>(l, s0, s2);
        let b = _mm512_ternarylogic_epi32::<0x96>(s4, s6, s7);
        let c = _mm512_ternarylogic_epi32::<0x96>(s1, s3, s5);
        _mm512_ternarylogic_epi32::<0x96>(a, b, c)
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn rounds16(
        sp: &[[u32; 64]; 8],
        keys: &[SubkeyWords; 48],
        l: &mut [u32; 16],
        r: &mut [u32; 16],
    ) {
        let mut tables = [Table([_mm512_setzero_si512(); 4]); 8];
        for (t, s) in tables.iter_mut().zip(sp) {
            *t = table(s);
        }
        let (mut vl, mut vr) = (load(l), load(r));
        let (passes, _) = keys.as_chunks::<16>();
        for pass in passes {
            let (pairs, _) = pass.as_chunks::<2>();
            for [k0, k1] in pairs {
                vl = round(&tables, *k0, vl, vr);
                vr = round(&tables, *k1, vr, vl);
            }
            core::mem::swap(&mut vl, &mut vr);
        }
        store(l, vl);
        store(r, vr);
    }
}
