//! AES-128-GCM in one pass with AES-NI and PCLMULQDQ.
//!
//! The `aes-gcm` crate runs CTR over the whole buffer, then GHASH over it
//! again (its own "TODO: interleave"), about 0.7x kcp-go's stitched Go
//! assembly. Here each group of eight blocks is counter-encrypted and
//! hashed in the same loop body, so the AES and carry-less-multiply units
//! work side by side, and the eight GHASH products share one reduction
//! (powers H^1..H^8 precomputed). With VAES/VPCLMULQDQ the groups are of
//! sixteen blocks in eight 256-bit registers (powers up to H^16), so eight
//! independent AES chains keep the AES units busy and half as many
//! reductions wait on one another.
//!
//! GHASH runs in the byte-reflected domain of Intel's GCM white paper
//! (Gueron and Kounavis): blocks are byte-reversed with `pshufb`, multiplied
//! 128x128 -> 256 bits with four `pclmulqdq`, shifted left by one bit and
//! reduced modulo x^128 + x^7 + x^2 + x + 1.
//!
//! [`Aes128GcmNi::new`] returns `None` without AES-NI, PCLMULQDQ, SSSE3,
//! SSE4.1 and AVX; the caller then keeps the `aes-gcm` crate, which is also the
//! reference in the tests.

/// Expanded key material for the kernel (plain bytes, loaded per call).
#[derive(Clone)]
pub(crate) struct Aes128GcmNi {
    /// AES-128 round keys.
    rk: [[u8; 16]; 11],
    /// H^1..H^16 in the byte-reflected domain; `h[i]` is H^(i+1).
    h: [[u8; 16]; 16],
    /// The CPU also has AVX2, VAES and VPCLMULQDQ: two blocks per instruction.
    wide: bool,
}

impl Aes128GcmNi {
    /// Expands `key`, or `None` when the CPU lacks one of the instructions.
    pub(crate) fn new(key: &[u8; 16]) -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            if x86::supported() {
                // SAFETY: the required CPU features were detected just above.
                return Some(unsafe { x86::new(key) });
            }
        }
        let _ = key;
        None
    }

    /// Encrypts `data` in place and returns the tag (no associated data).
    pub(crate) fn seal(&self, nonce: &[u8; 12], data: &mut [u8]) -> [u8; 16] {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `self` exists only if `new` found the CPU features, and
            // `wide` only if it also found the wide ones.
            unsafe {
                if self.wide {
                    x86::crypt_wide(self, nonce, data, x86::Dir::Seal)
                } else {
                    x86::crypt(self, nonce, data, x86::Dir::Seal)
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (nonce, data);
            [0; 16]
        }
    }

    /// Decrypts `data` in place if `tag` verifies; on a mismatch `data` is
    /// zeroed (no unauthenticated plaintext is left behind) and `false` returned.
    pub(crate) fn open(&self, nonce: &[u8; 12], data: &mut [u8], tag: &[u8; 16]) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `self` exists only if `new` found the CPU features, and
            // `wide` only if it also found the wide ones.
            let expected = unsafe {
                if self.wide {
                    x86::crypt_wide(self, nonce, data, x86::Dir::Open)
                } else {
                    x86::crypt(self, nonce, data, x86::Dir::Open)
                }
            };
            let diff = expected
                .iter()
                .zip(tag.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff != 0 {
                data.fill(0);
                return false;
            }
            true
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (nonce, data, tag);
            false
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Aes128GcmNi;
    use core::arch::x86_64::*;

    pub(super) fn supported() -> bool {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("ssse3")
            && std::arch::is_x86_feature_detected!("sse4.1")
            && std::arch::is_x86_feature_detected!("avx")
    }

    /// AVX2, VAES and VPCLMULQDQ, and a compiler that has their intrinsics
    /// (`kcpio_vaes`, set by build.rs for Rust >= 1.89).
    pub(super) fn wide_supported() -> bool {
        cfg!(kcpio_vaes)
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("vaes")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    pub(super) enum Dir {
        Seal,
        Open,
    }

    use crate::simd::mem::{load128 as load, store128};

    #[inline]
    #[target_feature(enable = "sse2")]
    fn store(v: __m128i) -> [u8; 16] {
        let mut out = [0u8; 16];
        store128(&mut out, v);
        out
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    fn reflect(v: __m128i) -> __m128i {
        _mm_shuffle_epi8(
            v,
            _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        )
    }

    macro_rules! expand_round {
        ($prev:expr, $rcon:literal) => {{
            let prev = $prev;
            let t = _mm_shuffle_epi32::<0xff>(_mm_aeskeygenassist_si128::<$rcon>(prev));
            let mut k = prev;
            k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
            k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
            k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
            _mm_xor_si128(k, t)
        }};
    }

    #[inline]
    #[target_feature(enable = "aes")]
    fn encrypt1(rk: &[__m128i; 11], block: __m128i) -> __m128i {
        let mut x = _mm_xor_si128(block, rk[0]);
        for k in &rk[1..10] {
            x = _mm_aesenc_si128(x, *k);
        }
        _mm_aesenclast_si128(x, rk[10])
    }

    /// The 256-bit carry-less product of two 128-bit values, as (low, high).
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn clmul(a: __m128i, b: __m128i) -> (__m128i, __m128i) {
        let lo = _mm_clmulepi64_si128::<0x00>(a, b);
        let hi = _mm_clmulepi64_si128::<0x11>(a, b);
        let mid = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x10>(a, b),
            _mm_clmulepi64_si128::<0x01>(a, b),
        );
        (
            _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
            _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
        )
    }

    /// Shifts the reflected 256-bit product left by one bit and reduces it
    /// modulo the GCM polynomial.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn reduce(lo: __m128i, hi: __m128i) -> __m128i {
        // 256-bit shift left by one.
        let c_lo = _mm_srli_epi32::<31>(lo);
        let c_hi = _mm_srli_epi32::<31>(hi);
        let mut lo = _mm_slli_epi32::<1>(lo);
        let mut hi = _mm_slli_epi32::<1>(hi);
        let cross = _mm_srli_si128::<12>(c_lo);
        lo = _mm_or_si128(lo, _mm_slli_si128::<4>(c_lo));
        hi = _mm_or_si128(hi, _mm_slli_si128::<4>(c_hi));
        hi = _mm_or_si128(hi, cross);
        // Reduction, first phase.
        let a = _mm_slli_epi32::<31>(lo);
        let b = _mm_slli_epi32::<30>(lo);
        let c = _mm_slli_epi32::<25>(lo);
        let t = _mm_xor_si128(_mm_xor_si128(a, b), c);
        let carry = _mm_srli_si128::<4>(t);
        lo = _mm_xor_si128(lo, _mm_slli_si128::<12>(t));
        // Second phase.
        let d = _mm_srli_epi32::<1>(lo);
        let e = _mm_srli_epi32::<2>(lo);
        let f = _mm_srli_epi32::<7>(lo);
        let u = _mm_xor_si128(_mm_xor_si128(_mm_xor_si128(d, e), f), carry);
        lo = _mm_xor_si128(lo, u);
        _mm_xor_si128(hi, lo)
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn gf_mul(a: __m128i, b: __m128i) -> __m128i {
        let (lo, hi) = clmul(a, b);
        reduce(lo, hi)
    }

    /// # Safety
    /// The CPU must support AES-NI, PCLMULQDQ, SSSE3, SSE4.1 and AVX.
    #[target_feature(enable = "aes,pclmulqdq,ssse3,sse4.1,avx")]
    pub(super) unsafe fn new(key: &[u8; 16]) -> Aes128GcmNi {
        let mut rk = [_mm_setzero_si128(); 11];
        rk[0] = load(key);
        rk[1] = expand_round!(rk[0], 0x01);
        rk[2] = expand_round!(rk[1], 0x02);
        rk[3] = expand_round!(rk[2], 0x04);
        rk[4] = expand_round!(rk[3], 0x08);
        rk[5] = expand_round!(rk[4], 0x10);
        rk[6] = expand_round!(rk[5], 0x20);
        rk[7] = expand_round!(rk[6], 0x40);
        rk[8] = expand_round!(rk[7], 0x80);
        rk[9] = expand_round!(rk[8], 0x1b);
        rk[10] = expand_round!(rk[9], 0x36);
        let h1 = reflect(encrypt1(&rk, _mm_setzero_si128()));
        let mut h = [[0u8; 16]; 16];
        let mut p = h1;
        for slot in h.iter_mut() {
            *slot = store(p);
            p = gf_mul(p, h1);
        }
        Aes128GcmNi {
            rk: rk.map(|k| store(k)),
            h,
            wide: wide_supported(),
        }
    }

    /// Up to eight blocks: CTR-crypts `buf[..valid]` in place (counter
    /// blocks `ctr0..`) and folds the ciphertext blocks into the GHASH state
    /// `y` with one reduction. Bytes of `buf` past `valid` must be zero on
    /// entry and are unspecified on return.
    #[inline(always)]
    #[expect(
        clippy::too_many_arguments,
        reason = "inlined kernel body, all hot values"
    )]
    unsafe fn group(
        rk: &[__m128i; 11],
        h: &[__m128i; 8],
        y: __m128i,
        base: __m128i,
        ctr0: u32,
        buf: &mut [u8; 128],
        valid: usize,
        dir: Dir,
    ) -> __m128i {
        // SAFETY: (whole body) the caller guarantees AES-NI, PCLMULQDQ and
        // SSSE3/SSE4.1/AVX; every load and store below stays inside `buf`.
        unsafe {
            let m = valid.div_ceil(16).min(8);
            let mut ks = [_mm_setzero_si128(); 8];
            for (j, k) in ks.iter_mut().enumerate() {
                let n = ctr0.wrapping_add(j as u32).swap_bytes() as i32;
                *k = _mm_xor_si128(_mm_insert_epi32::<3>(base, n), rk[0]);
            }
            for r in &rk[1..10] {
                for k in ks.iter_mut() {
                    *k = _mm_aesenc_si128(*k, *r);
                }
            }
            let p = buf.as_mut_ptr().cast::<__m128i>();
            let mut hashed = [_mm_setzero_si128(); 8];
            for (j, (k, c)) in ks.iter().zip(hashed.iter_mut()).enumerate().take(m) {
                let input = _mm_loadu_si128(p.add(j));
                let output = _mm_xor_si128(input, _mm_aesenclast_si128(*k, rk[10]));
                _mm_storeu_si128(p.add(j), output);
                *c = if dir == Dir::Seal { output } else { input };
            }
            if dir == Dir::Seal && !valid.is_multiple_of(16) {
                // The partial block is hashed zero-padded.
                if let Some(rest) = buf.get_mut(valid..) {
                    rest.fill(0);
                }
                if let Some(c) = hashed.get_mut(m - 1) {
                    *c = _mm_loadu_si128(p.add(m - 1));
                }
            }
            let mut lo = _mm_setzero_si128();
            let mut hi = _mm_setzero_si128();
            for (j, c) in hashed.iter().enumerate().take(m) {
                let mut x = reflect(*c);
                if j == 0 {
                    x = _mm_xor_si128(x, y);
                }
                let (l, hh) = clmul(x, h[m - 1 - j]);
                lo = _mm_xor_si128(lo, l);
                hi = _mm_xor_si128(hi, hh);
            }
            reduce(lo, hi)
        }
    }

    /// The VAES/VPCLMULQDQ kernel: its intrinsics are stable since Rust 1.89,
    /// so build.rs compiles it only for such compilers (`kcpio_vaes`).
    #[cfg(kcpio_vaes)]
    #[clippy::msrv = "1.89"]
    mod wide {
        use super::{Dir, reduce};
        use core::arch::x86_64::*;

        /// `group` for a whole group of `2 * N` blocks, two per VAES/VPCLMULQDQ
        /// instruction. `hp[i]` holds the powers for blocks 2i (low lane) and
        /// 2i + 1 (high lane): H^(2N-2i) and H^(2N-1-2i).
        #[inline(always)]
        pub(super) unsafe fn group_wide<const N: usize>(
            rk: &[__m256i; 11],
            hp: &[__m256i; N],
            y: __m128i,
            base: __m128i,
            ctr0: u32,
            buf: &mut [[u8; 32]; N],
            dir: Dir,
        ) -> __m128i {
            // SAFETY: (whole body) the caller guarantees AVX2, VAES, VPCLMULQDQ
            // and the 128-bit features; the 32-byte loads and stores cover
            // exactly `buf`.
            unsafe {
                let mut ks = [_mm256_setzero_si256(); N];
                for (i, k) in (0u32..).zip(ks.iter_mut()) {
                    let c0 = ctr0.wrapping_add(2 * i).swap_bytes() as i32;
                    let c1 = ctr0.wrapping_add(2 * i + 1).swap_bytes() as i32;
                    let pair = _mm256_set_m128i(
                        _mm_insert_epi32::<3>(base, c1),
                        _mm_insert_epi32::<3>(base, c0),
                    );
                    *k = _mm256_xor_si256(pair, rk[0]);
                }
                for r in &rk[1..10] {
                    for k in ks.iter_mut() {
                        *k = _mm256_aesenc_epi128(*k, *r);
                    }
                }
                let reverse = _mm256_broadcastsi128_si256(_mm_set_epi8(
                    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                ));
                let mut lo = _mm256_setzero_si256();
                let mut hi = _mm256_setzero_si256();
                for (i, ((k, hk), b)) in ks.iter().zip(hp.iter()).zip(buf.iter_mut()).enumerate() {
                    let p = b.as_mut_ptr().cast::<__m256i>();
                    let input = _mm256_loadu_si256(p);
                    let output = _mm256_xor_si256(input, _mm256_aesenclast_epi128(*k, rk[10]));
                    _mm256_storeu_si256(p, output);
                    let cblk = if dir == Dir::Seal { output } else { input };
                    let mut x = _mm256_shuffle_epi8(cblk, reverse);
                    if i == 0 {
                        x = _mm256_xor_si256(x, _mm256_zextsi128_si256(y));
                    }
                    let mid = _mm256_xor_si256(
                        _mm256_clmulepi64_epi128::<0x10>(x, *hk),
                        _mm256_clmulepi64_epi128::<0x01>(x, *hk),
                    );
                    lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128::<0x00>(x, *hk));
                    lo = _mm256_xor_si256(lo, _mm256_bslli_epi128::<8>(mid));
                    hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128::<0x11>(x, *hk));
                    hi = _mm256_xor_si256(hi, _mm256_bsrli_epi128::<8>(mid));
                }
                let lo = _mm_xor_si128(
                    _mm256_castsi256_si128(lo),
                    _mm256_extracti128_si256::<1>(lo),
                );
                let hi = _mm_xor_si128(
                    _mm256_castsi256_si128(hi),
                    _mm256_extracti128_si256::<1>(hi),
                );
                reduce(lo, hi)
            }
        }
    }
    #[cfg(kcpio_vaes)]
    use wide::group_wide;

    /// CTR-crypts `data` in place and returns the GCM tag over the
    /// ciphertext (which is the output when sealing, the input when opening).
    /// `WIDE` selects the VAES/VPCLMULQDQ group kernel for whole groups.
    #[inline(always)]
    unsafe fn crypt_body<const WIDE: bool>(
        key: &Aes128GcmNi,
        nonce: &[u8; 12],
        data: &mut [u8],
        dir: Dir,
    ) -> [u8; 16] {
        // SAFETY: (whole body) the calling wrapper enables the features of
        // every kernel reachable with its `WIDE`.
        unsafe {
            // Plain loops, not `map`/`from_fn`: a closure does not inherit
            // the target features, so each element became a call.
            let mut rk = [_mm_setzero_si128(); 11];
            for (k, bytes) in rk.iter_mut().zip(&key.rk) {
                *k = load(bytes);
            }
            let mut h = [_mm_setzero_si128(); 16];
            for (k, bytes) in h.iter_mut().zip(&key.h) {
                *k = load(bytes);
            }
            let mut h8 = [_mm_setzero_si128(); 8];
            h8.copy_from_slice(&h[..8]);
            // Only the wide wrapper may execute AVX2 instructions.
            #[cfg(kcpio_vaes)]
            let wide_keys: Option<([__m256i; 11], [__m256i; 8])> = if WIDE {
                let mut rk_wide = [_mm256_setzero_si256(); 11];
                for (w, k) in rk_wide.iter_mut().zip(&rk) {
                    *w = _mm256_broadcastsi128_si256(*k);
                }
                let mut hp = [_mm256_setzero_si256(); 8];
                for (i, p) in hp.iter_mut().enumerate() {
                    *p = _mm256_set_m128i(h[14 - 2 * i], h[15 - 2 * i]);
                }
                Some((rk_wide, hp))
            } else {
                None
            };
            let mut j0 = [0u8; 16];
            j0[..12].copy_from_slice(nonce);
            j0[15] = 1;
            let base = load(&j0);
            let tag_mask = encrypt1(&rk, base);
            let mut y = _mm_setzero_si128();
            let mut counter = 2u32;

            let total_bits = (data.len() as u64) * 8;
            let mut rest: &mut [u8] = data;
            #[cfg(kcpio_vaes)]
            if let Some((rk_wide, hp)) = &wide_keys {
                // Sixteen blocks at a time, then one group of eight if left.
                let (pairs, tail) = core::mem::take(&mut rest).as_chunks_mut::<256>();
                for pair in pairs {
                    let (buf, _) = pair.as_chunks_mut::<32>();
                    if let Ok(buf) = <&mut [[u8; 32]; 8]>::try_from(buf) {
                        y = group_wide(rk_wide, hp, y, base, counter, buf, dir);
                    }
                    counter = counter.wrapping_add(16);
                }
                rest = tail;
                if rest.len() >= 128 {
                    let (group, tail) = core::mem::take(&mut rest).split_at_mut(128);
                    let (buf, _) = group.as_chunks_mut::<32>();
                    let (_, hp4) = hp.split_at(4);
                    if let (Ok(buf), Ok(hp4)) = (
                        <&mut [[u8; 32]; 4]>::try_from(buf),
                        <&[__m256i; 4]>::try_from(hp4),
                    ) {
                        y = group_wide(rk_wide, hp4, y, base, counter, buf, dir);
                    }
                    counter = counter.wrapping_add(8);
                    rest = tail;
                }
            }
            let mut groups = rest.chunks_exact_mut(128);
            for chunk in &mut groups {
                if let Ok(buf) = <&mut [u8; 128]>::try_from(chunk) {
                    y = group(&rk, &h8, y, base, counter, buf, 128, dir);
                }
                counter = counter.wrapping_add(8);
            }
            let rest = groups.into_remainder();
            if !rest.is_empty() {
                let n = rest.len();
                let mut buf = [0u8; 128];
                buf[..n].copy_from_slice(rest);
                y = group(&rk, &h8, y, base, counter, &mut buf, n, dir);
                rest.copy_from_slice(&buf[..n]);
            }

            let mut lengths = [0u8; 16];
            lengths[8..].copy_from_slice(&total_bits.to_be_bytes());
            y = gf_mul(_mm_xor_si128(y, reflect(load(&lengths))), h[0]);
            store(_mm_xor_si128(reflect(y), tag_mask))
        }
    }

    /// [`crypt_body`] with 128-bit kernels.
    ///
    /// # Safety
    /// The CPU must support AES-NI, PCLMULQDQ, SSSE3, SSE4.1 and AVX.
    #[target_feature(enable = "aes,pclmulqdq,ssse3,sse4.1,avx")]
    pub(super) unsafe fn crypt(
        key: &Aes128GcmNi,
        nonce: &[u8; 12],
        data: &mut [u8],
        dir: Dir,
    ) -> [u8; 16] {
        // SAFETY: this function's target features are the 128-bit kernels'.
        unsafe { crypt_body::<false>(key, nonce, data, dir) }
    }

    /// [`crypt_body`] with the 256-bit group kernel (without `kcpio_vaes`
    /// the same as [`crypt`]: `wide` is then never set).
    ///
    /// # Safety
    /// As [`crypt`], plus AVX2, VAES and VPCLMULQDQ.
    #[cfg_attr(
        kcpio_vaes,
        target_feature(enable = "aes,pclmulqdq,ssse3,sse4.1,avx,avx2,vaes,vpclmulqdq")
    )]
    #[cfg_attr(
        not(kcpio_vaes),
        target_feature(enable = "aes,pclmulqdq,ssse3,sse4.1,avx")
    )]
    pub(super) unsafe fn crypt_wide(
        key: &Aes128GcmNi,
        nonce: &[u8; 12],
        data: &mut [u8],
        dir: Dir,
    ) -> [u8; 16] {
        // SAFETY: this function's target features cover both group kernels.
        unsafe { crypt_body::<true>(key, nonce, data, dir) }
    }

    #[cfg(test)]
    mod tests {
        use super::super::Aes128GcmNi;
        use aes_gcm::aead::AeadInOut;
        use cipher::KeyInit;
        use proptest::prelude::*;

        fn reference(key: &[u8; 16], nonce: &[u8; 12], data: &mut [u8]) -> [u8; 16] {
            let c = aes_gcm::Aes128Gcm::new(&(*key).into());
            let tag = c
                .encrypt_inout_detached(&(*nonce).into(), &[], data.into())
                .unwrap();
            tag.into()
        }

        #[test]
        fn every_length_up_to_700_matches_the_crate() {
            let k = Aes128GcmNi::new(&[3; 16]);
            assert_eq!(k.is_some(), super::supported());
            let Some(k) = k else {
                return; // no AES-NI/PCLMULQDQ here; the crate is used instead
            };
            // Covers every split between 16-block and 8-block groups and the tail.
            for len in 0..700 {
                let data: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
                let nonce = [len as u8; 12];
                let mut want = data.clone();
                let want_tag = reference(&[3; 16], &nonce, &mut want);
                let mut got = data.clone();
                let tag = k.seal(&nonce, &mut got);
                assert_eq!(got, want, "ciphertext, len {len}");
                assert_eq!(tag, want_tag, "tag, len {len}");
                let narrow = Aes128GcmNi {
                    wide: false,
                    ..k.clone()
                };
                let mut n = data.clone();
                assert_eq!(
                    narrow.seal(&nonce, &mut n),
                    want_tag,
                    "narrow tag, len {len}"
                );
                assert_eq!(n, want, "narrow ciphertext, len {len}");
                assert!(k.open(&nonce, &mut got, &tag));
                assert_eq!(got, data);
            }
        }

        proptest! {
            #[test]
            fn matches_the_crate(
                key in any::<[u8; 16]>(),
                nonce in any::<[u8; 12]>(),
                data in proptest::collection::vec(any::<u8>(), 0..1600),
                flip in any::<prop::sample::Index>(),
            ) {
                let Some(k) = Aes128GcmNi::new(&key) else {
                    return Ok(());
                };
                let mut want = data.clone();
                let want_tag = reference(&key, &nonce, &mut want);
                let mut got = data.clone();
                let tag = k.seal(&nonce, &mut got);
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(tag, want_tag);

                let mut opened = got.clone();
                prop_assert!(k.open(&nonce, &mut opened, &tag));
                prop_assert_eq!(&opened, &data);

                // The 128-bit kernels agree with the 256-bit ones.
                let narrow = Aes128GcmNi { wide: false, ..k.clone() };
                let mut n = data.clone();
                prop_assert_eq!(narrow.seal(&nonce, &mut n), tag);
                prop_assert_eq!(&n, &want);

                // A flipped ciphertext or tag bit fails and leaves zeros.
                let mut forged = got.clone();
                let mut bad_tag = tag;
                if forged.is_empty() {
                    bad_tag[flip.index(16)] ^= 1;
                } else {
                    let i = flip.index(forged.len());
                    forged[i] ^= 0x80;
                }
                prop_assert!(!k.open(&nonce, &mut forged, &bad_tag));
                prop_assert!(forged.iter().all(|&b| b == 0));
            }
        }
    }
}
