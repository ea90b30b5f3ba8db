//! Sealing with AES in kcp-go's CFB (WIRE.md 5.2) at the latency of the
//! AES rounds alone.
//!
//! Sealing is one chain: each keystream block is the encryption of the
//! previous ciphertext block. Through the `aes` crate every link also pays a
//! load and store of the block, the whitening XOR with round key 0 and the
//! XOR with the plaintext, about 13 `aesenc` latencies a block where the
//! cipher needs 10 (AES-128). Here the chain is the rounds alone:
//! `aesenclast(x, k)` is `ShiftRows(SubBytes(x)) ^ k`, so with
//! `k = rk_last ^ plaintext ^ rk_0` the last round of one block directly
//! yields the whitened input of the next, and a second `aesenclast` beside it,
//! with `k = rk_last ^ plaintext`, yields the ciphertext to store. Both keys
//! depend only on the plaintext, computed off the chain.
//!
//! Opening stays on the `aes` crate: its keystream blocks are independent and
//! already run eight at a time.
//!
//! [`AesCfbNi::new`] returns `None` without AES-NI and SSE2; the caller then
//! keeps the `aes` crate's path, which is the reference in the tests.

/// kcp-go's fixed CFB initial vector (`crypto::cfb::IV`).
const IV: [u8; 16] = [
    0xa7, 0x73, 0x4f, 0x9c, 0x12, 0xac, 0x1b, 0x01, 0xa4, 0x15, 0xf2, 0xc1, 0xfc, 0x78, 0xe6, 0x6b,
];

/// Expanded AES round keys (FIPS 197 byte order), for 10, 12 or 14 rounds.
#[derive(Clone)]
pub(crate) struct AesCfbNi {
    rk: [[u8; 16]; 15],
    rounds: usize,
}

impl AesCfbNi {
    /// Expands a 16-, 24- or 32-byte key, or `None` when the CPU lacks
    /// AES-NI or the key has another length.
    pub(crate) fn new(key: &[u8]) -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            if matches!(key.len(), 16 | 24 | 32) && x86::supported() {
                // SAFETY: the required CPU features were detected just above.
                return Some(unsafe { x86::expand(key) });
            }
        }
        let _ = key;
        None
    }

    /// Encrypts `buf` in place in kcp-go's CFB mode (from the fixed IV).
    pub(crate) fn encrypt(&self, buf: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `self` exists only if `new` found the CPU features.
        unsafe {
            x86::encrypt(self, buf)
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = buf;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{AesCfbNi, IV};
    use crate::simd::mem::{load128 as load, store128 as store};
    use core::arch::x86_64::*;

    pub(super) fn supported() -> bool {
        std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("sse2")
    }

    /// FIPS 197 SubWord of a big-endian-in-memory word (`aeskeygenassist`
    /// substitutes the bytes of its second word into its first, unrotated).
    #[inline]
    #[target_feature(enable = "aes,sse2")]
    fn sub_word(w: [u8; 4]) -> [u8; 4] {
        let v = _mm_set_epi32(0, 0, i32::from_le_bytes(w), 0);
        let out = _mm_cvtsi128_si32(_mm_aeskeygenassist_si128::<0>(v));
        out.to_le_bytes()
    }

    /// FIPS 197 key expansion (section 5.2) for any of the three key sizes.
    #[target_feature(enable = "aes,sse2")]
    pub(super) fn expand(key: &[u8]) -> AesCfbNi {
        let nk = key.len() / 4;
        let rounds = nk + 6;
        let mut w = [[0u8; 4]; 60];
        for (word, chunk) in w.iter_mut().zip(key.chunks_exact(4)) {
            word.copy_from_slice(chunk);
        }
        let mut rcon = 1u8;
        for i in nk..4 * (rounds + 1) {
            let mut t = w[i - 1];
            if i % nk == 0 {
                t.rotate_left(1);
                t = sub_word(t);
                t[0] ^= rcon;
                rcon = (rcon << 1) ^ if rcon & 0x80 != 0 { 0x1b } else { 0 };
            } else if nk > 6 && i % nk == 4 {
                t = sub_word(t);
            }
            let prev = w[i - nk];
            w[i] = core::array::from_fn(|j| prev[j] ^ t[j]);
        }
        let mut rk = [[0u8; 16]; 15];
        for (k, words) in rk.iter_mut().zip(w.chunks_exact(4)) {
            for (dst, word) in k.chunks_exact_mut(4).zip(words) {
                dst.copy_from_slice(word);
            }
        }
        AesCfbNi { rk, rounds }
    }

    /// The middle rounds (1 .. R-1) of one block.
    #[inline]
    #[target_feature(enable = "aes,sse2")]
    fn middle<const R: usize>(rk: &[__m128i; 15], mut x: __m128i) -> __m128i {
        for k in &rk[1..R] {
            x = _mm_aesenc_si128(x, *k);
        }
        x
    }

    /// The CFB chain for `R` rounds (see the module comment).
    #[inline]
    #[target_feature(enable = "aes,sse2")]
    fn chain<const R: usize>(rk: &[__m128i; 15], buf: &mut [u8]) {
        let (first, out_key) = (rk[0], rk[R]);
        let next_key = _mm_xor_si128(out_key, first);
        let mut x = _mm_xor_si128(load(&IV), first);
        let (blocks, tail) = buf.as_chunks_mut::<16>();
        for block in blocks {
            let p = load(block);
            let y = middle::<R>(rk, x);
            store(block, _mm_aesenclast_si128(y, _mm_xor_si128(out_key, p)));
            x = _mm_aesenclast_si128(y, _mm_xor_si128(next_key, p));
        }
        let mut ks = [0u8; 16];
        store(&mut ks, _mm_aesenclast_si128(middle::<R>(rk, x), out_key));
        for (d, k) in tail.iter_mut().zip(ks) {
            *d ^= k;
        }
    }

    #[target_feature(enable = "aes,sse2")]
    pub(super) fn encrypt(c: &AesCfbNi, buf: &mut [u8]) {
        let mut rk = [_mm_setzero_si128(); 15];
        for (k, bytes) in rk.iter_mut().zip(&c.rk) {
            *k = load(bytes);
        }
        match c.rounds {
            10 => chain::<10>(&rk, buf),
            12 => chain::<12>(&rk, buf),
            _ => chain::<14>(&rk, buf),
        }
    }
}
