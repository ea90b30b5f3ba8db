//! The two TEA-family ciphers as kcp-go uses them, both on big-endian words.
//!
//! - [`Tea16`]: TEA reduced to 16 rounds (8 cycles), which is what kcp-go's
//!   `NewTEABlockCrypt` asks of `x/crypto/tea`. No crate offers it.
//! - [`XteaBe`]: standard 32-cycle XTEA on big-endian words. The `xtea`
//!   crate reads its words little-endian; byte-swapping each 32-bit word of
//!   the key, the input and the output around it gives kcp-go's cipher, and
//!   that is the reference the tests hold ours to (ours precomputes the
//!   round constants instead, twice as fast).
//!
//! Only the encrypt direction exists: kcp-go's CFB never decrypts a block.

use cipher::{
    Block, BlockCipherEncBackend, BlockCipherEncClosure, BlockCipherEncrypt, BlockSizeUser,
    ParBlocks, ParBlocksSizeUser,
    consts::{U4, U8},
    inout::InOut,
};

const DELTA: u32 = 0x9e37_79b9;

/// Reads the big-endian word at `at` (0 or 4) of an 8-byte block.
#[inline(always)]
pub(super) fn word(block: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(src) = block.get(at..at + 4) {
        w.copy_from_slice(src);
    }
    u32::from_be_bytes(w)
}

/// The four big-endian words of a 16-byte key.
fn key_words(key: &[u8; 16]) -> [u32; 4] {
    let mut k = [0u32; 4];
    for (w, c) in k.iter_mut().zip(key.chunks_exact(4)) {
        *w = word(c, 0);
    }
    k
}

/// The `cipher` traits of an 8-byte, encrypt-only block cipher on two
/// big-endian words, from the type's `encrypt_words` (one block) and
/// `encrypt_lanes` (four blocks, one per lane of `[u32; 4]`).
///
/// Opening a CFB datagram encrypts ciphertext blocks that are all known, so
/// the ciphers take them four at a time (TEA and XTEA have only shifts, adds
/// and XORs: LLVM vectorizes the lanes).
macro_rules! be_word_cipher {
    ($t:ty) => {
        impl super::cfb::Words64 for $t {
            #[inline(always)]
            fn encrypt_words(&self, l: u32, r: u32) -> (u32, u32) {
                <$t>::encrypt_words(self, l, r)
            }
        }

        impl BlockSizeUser for $t {
            type BlockSize = U8;
        }

        impl ParBlocksSizeUser for $t {
            type ParBlocksSize = U4;
        }

        impl BlockCipherEncrypt for $t {
            #[inline]
            fn encrypt_with_backend(&self, f: impl BlockCipherEncClosure<BlockSize = U8>) {
                f.call(self)
            }
        }

        impl BlockCipherEncBackend for $t {
            #[inline(always)]
            fn encrypt_block(&self, mut block: InOut<'_, '_, Block<Self>>) {
                let input = block.get_in();
                let (v0, v1) = self.encrypt_words(word(input, 0), word(input, 4));
                let out = block.get_out();
                out[..4].copy_from_slice(&v0.to_be_bytes());
                out[4..].copy_from_slice(&v1.to_be_bytes());
            }

            #[inline(always)]
            fn encrypt_par_blocks(&self, mut blocks: InOut<'_, '_, ParBlocks<Self>>) {
                let input = blocks.get_in();
                let mut v0: [u32; 4] = core::array::from_fn(|i| word(&input[i], 0));
                let mut v1: [u32; 4] = core::array::from_fn(|i| word(&input[i], 4));
                self.encrypt_lanes(&mut v0, &mut v1);
                for (out, (a, b)) in blocks.get_out().iter_mut().zip(v0.iter().zip(v1.iter())) {
                    out[..4].copy_from_slice(&a.to_be_bytes());
                    out[4..].copy_from_slice(&b.to_be_bytes());
                }
            }
        }
    };
}

pub(super) use be_word_cipher;

/// TEA with 16 rounds, big-endian key and block words.
#[derive(Clone)]
pub(crate) struct Tea16 {
    k: [u32; 4],
}

impl Tea16 {
    /// Expands a 16-byte key.
    pub(crate) fn new(key: &[u8; 16]) -> Self {
        Self { k: key_words(key) }
    }

    #[inline(always)]
    fn encrypt_words(&self, mut v0: u32, mut v1: u32) -> (u32, u32) {
        let [k0, k1, k2, k3] = self.k;
        let mut sum = 0u32;
        for _ in 0..8 {
            sum = sum.wrapping_add(DELTA);
            v0 = v0.wrapping_add(
                ((v1 << 4).wrapping_add(k0)) ^ v1.wrapping_add(sum) ^ ((v1 >> 5).wrapping_add(k1)),
            );
            v1 = v1.wrapping_add(
                ((v0 << 4).wrapping_add(k2)) ^ v0.wrapping_add(sum) ^ ((v0 >> 5).wrapping_add(k3)),
            );
        }
        (v0, v1)
    }

    /// [`Self::encrypt_words`] on four blocks, one per lane.
    #[inline(always)]
    fn encrypt_lanes(&self, v0: &mut [u32; 4], v1: &mut [u32; 4]) {
        let [k0, k1, k2, k3] = self.k;
        let mut sum = 0u32;
        for _ in 0..8 {
            sum = sum.wrapping_add(DELTA);
            for (a, &b) in v0.iter_mut().zip(v1.iter()) {
                *a = a.wrapping_add(
                    ((b << 4).wrapping_add(k0)) ^ b.wrapping_add(sum) ^ ((b >> 5).wrapping_add(k1)),
                );
            }
            for (b, &a) in v1.iter_mut().zip(v0.iter()) {
                *b = b.wrapping_add(
                    ((a << 4).wrapping_add(k2)) ^ a.wrapping_add(sum) ^ ((a >> 5).wrapping_add(k3)),
                );
            }
        }
    }
}

be_word_cipher!(Tea16);

/// XTEA (32 cycles) with big-endian words. The per-round `sum + key[..]`
/// terms depend only on the key, so they are computed once (as Go's
/// `x/crypto/xtea` does); the little-endian `xtea` crate, byte-swapped, is
/// the reference in the tests.
#[derive(Clone)]
pub(crate) struct XteaBe {
    table: [u32; 64],
}

impl XteaBe {
    /// Expands a 16-byte key.
    pub(crate) fn new(key: &[u8; 16]) -> Self {
        let k = key_words(key);
        let mut table = [0u32; 64];
        let mut sum = 0u32;
        for pair in table.chunks_exact_mut(2) {
            pair[0] = sum.wrapping_add(k[(sum & 3) as usize]);
            sum = sum.wrapping_add(DELTA);
            pair[1] = sum.wrapping_add(k[((sum >> 11) & 3) as usize]);
        }
        Self { table }
    }

    #[inline(always)]
    fn encrypt_words(&self, mut v0: u32, mut v1: u32) -> (u32, u32) {
        for pair in self.table.chunks_exact(2) {
            v0 = v0.wrapping_add((((v1 << 4) ^ (v1 >> 5)).wrapping_add(v1)) ^ pair[0]);
            v1 = v1.wrapping_add((((v0 << 4) ^ (v0 >> 5)).wrapping_add(v0)) ^ pair[1]);
        }
        (v0, v1)
    }

    /// [`Self::encrypt_words`] on four blocks, one per lane.
    #[inline(always)]
    fn encrypt_lanes(&self, v0: &mut [u32; 4], v1: &mut [u32; 4]) {
        for pair in self.table.chunks_exact(2) {
            let (t0, t1) = (pair[0], pair[1]);
            for (a, b) in v0.iter_mut().zip(v1.iter()) {
                *a = a.wrapping_add((((b << 4) ^ (b >> 5)).wrapping_add(*b)) ^ t0);
            }
            for (b, a) in v1.iter_mut().zip(v0.iter()) {
                *b = b.wrapping_add((((a << 4) ^ (a >> 5)).wrapping_add(*a)) ^ t1);
            }
        }
    }
}

be_word_cipher!(XteaBe);

/// Opening goes 16 blocks at a time ([`super::cfb::decrypt_many`]): 16 lanes
/// of AVX-512 where the CPU has it, else four lanes at a time.
impl super::cfb::Many64 for XteaBe {
    fn encrypt_many(&self, inputs: &[u64; 16], n: usize) -> [u64; 16] {
        let mut v0 = [0u32; 16];
        let mut v1 = [0u32; 16];
        for ((a, b), &x) in v0.iter_mut().zip(v1.iter_mut()).zip(inputs) {
            (*a, *b) = ((x >> 32) as u32, x as u32);
        }
        if n <= 4 || !crate::simd::xtea16::rounds16(&self.table, &mut v0, &mut v1) {
            let (a4, _) = v0.as_chunks_mut::<4>();
            let (b4, _) = v1.as_chunks_mut::<4>();
            for (a, b) in a4.iter_mut().zip(b4.iter_mut()).take(n.div_ceil(4)) {
                self.encrypt_lanes(a, b);
            }
        }
        core::array::from_fn(|i| (u64::from(v0[i]) << 32) | u64::from(v1[i]))
    }
}

/// One 8-byte block through any block cipher (the tests compare ours with
/// the reference crates block by block).
#[cfg(test)]
pub(super) fn encrypt_one<C>(c: &C, block: [u8; 8]) -> [u8; 8]
where
    C: BlockCipherEncrypt<BlockSize = U8>,
{
    let mut b = Block::<C>::from(block);
    BlockCipherEncrypt::encrypt_block(c, &mut b);
    b.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cipher::KeyInit;
    use proptest::prelude::*;

    /// Reverses the bytes of each 32-bit word.
    fn swap_words<const N: usize>(b: [u8; N]) -> [u8; N] {
        let mut out = b;
        for c in out.chunks_exact_mut(4) {
            c.reverse();
        }
        out
    }

    /// x/crypto/tea with 16 rounds, written out independently of `Tea16`.
    fn tea16_reference(key: &[u8; 16], block: [u8; 8]) -> [u8; 8] {
        let k: Vec<u32> = key
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect();
        let mut v0 = u32::from_be_bytes(block[..4].try_into().unwrap());
        let mut v1 = u32::from_be_bytes(block[4..].try_into().unwrap());
        let mut sum = 0u32;
        for _ in 0..16 / 2 {
            sum = sum.wrapping_add(DELTA);
            v0 = v0.wrapping_add(
                (v1 << 4).wrapping_add(k[0]) ^ v1.wrapping_add(sum) ^ (v1 >> 5).wrapping_add(k[1]),
            );
            v1 = v1.wrapping_add(
                (v0 << 4).wrapping_add(k[2]) ^ v0.wrapping_add(sum) ^ (v0 >> 5).wrapping_add(k[3]),
            );
        }
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&v0.to_be_bytes());
        out[4..].copy_from_slice(&v1.to_be_bytes());
        out
    }

    proptest! {
        #[test]
        fn xtea_many_block_paths_match_single_blocks(key in any::<[u8; 16]>(), blocks in any::<[u64; 16]>(), n in 0usize..=16) {
            use crate::crypto::cfb::{Many64, Words64};
            let t = XteaBe::new(&key);
            let many = t.encrypt_many(&blocks, n);
            for i in 0..n {
                let (a, b) = Words64::encrypt_words(&t, (blocks[i] >> 32) as u32, blocks[i] as u32);
                prop_assert_eq!(many[i], (u64::from(a) << 32) | u64::from(b), "block {} of {}", i, n);
            }
        }

        #[test]
        fn xtea_cfb_open_matches_the_generic_cfb(key in any::<[u8; 16]>(), data in proptest::collection::vec(any::<u8>(), 0..1500)) {
            let t = XteaBe::new(&key);
            let mut ours = data.clone();
            crate::crypto::cfb::decrypt_many(&t, &mut ours);
            let mut reference = data.clone();
            crate::crypto::cfb::decrypt(&t, &mut reference);
            prop_assert_eq!(ours, reference);
        }

        #[test]
        fn xtea_matches_the_byte_swapped_crate(key in any::<[u8; 16]>(), block in any::<[u8; 8]>()) {
            let ours = XteaBe::new(&key);
            let mut x = Block::<XteaBe>::from(block);
            ours.encrypt_block_inplace(&mut x);

            let reference = xtea::Xtea::new(&swap_words(key).into());
            let mut y = Block::<XteaBe>::from(swap_words(block));
            BlockCipherEncrypt::encrypt_block(&reference, &mut y);
            prop_assert_eq!(x, Block::<XteaBe>::from(swap_words(y.into())));
        }

        #[test]
        fn four_lane_paths_match_single_blocks(key in any::<[u8; 16]>(), blocks in any::<[[u8; 8]; 4]>()) {
            let par = ParBlocks::<XteaBe>::from(blocks.map(Block::<XteaBe>::from));
            let xtea = XteaBe::new(&key);
            let tea = Tea16::new(&key);
            let mut x4 = par;
            let mut t4 = par;
            xtea.encrypt_par_blocks(InOut::from((&par, &mut x4)));
            tea.encrypt_par_blocks(InOut::from((&par, &mut t4)));
            for i in 0..4 {
                let mut x = par[i];
                xtea.encrypt_block_inplace(&mut x);
                prop_assert_eq!(x4[i], x);
                let mut t = par[i];
                tea.encrypt_block_inplace(&mut t);
                prop_assert_eq!(t4[i], t);
            }
        }

        #[test]
        fn tea16_matches_the_reference(key in any::<[u8; 16]>(), block in any::<[u8; 8]>()) {
            let mut x = Block::<Tea16>::from(block);
            Tea16::new(&key).encrypt_block_inplace(&mut x);
            prop_assert_eq!(<[u8; 8]>::from(x), tea16_reference(&key, block));
        }
    }
}
