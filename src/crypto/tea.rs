//! The two TEA-family ciphers as kcp-go uses them, both on big-endian words.
//!
//! - [`Tea16`]: TEA reduced to 16 rounds (8 cycles), which is what kcp-go's
//!   `NewTEABlockCrypt` asks of `x/crypto/tea`. No crate offers it.
//! - [`XteaBe`]: standard 32-cycle XTEA from the `xtea` crate, which reads its
//!   words little-endian; kcp-go's reads them big-endian, so each 32-bit word
//!   of the key, the input and the output is byte-swapped around the crate.
//!
//! Only the encrypt direction exists: kcp-go's CFB never decrypts a block.

use cipher::{
    Block, BlockCipherEncBackend, BlockCipherEncClosure, BlockCipherEncrypt, BlockSizeUser,
    KeyInit, ParBlocksSizeUser,
    consts::{U1, U8},
    inout::InOut,
};

const DELTA: u32 = 0x9e37_79b9;

/// Reads the big-endian word at `at` (0 or 4) of an 8-byte block.
#[inline(always)]
fn word(block: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(src) = block.get(at..at + 4) {
        w.copy_from_slice(src);
    }
    u32::from_be_bytes(w)
}

/// TEA with 16 rounds, big-endian key and block words.
#[derive(Clone)]
pub(crate) struct Tea16 {
    k: [u32; 4],
}

impl Tea16 {
    /// Expands a 16-byte key.
    pub(crate) fn new(key: &[u8; 16]) -> Self {
        let mut k = [0u32; 4];
        for (w, c) in k.iter_mut().zip(key.chunks_exact(4)) {
            *w = word(c, 0);
        }
        Self { k }
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
}

impl BlockSizeUser for Tea16 {
    type BlockSize = U8;
}

impl ParBlocksSizeUser for Tea16 {
    type ParBlocksSize = U1;
}

impl BlockCipherEncrypt for Tea16 {
    #[inline]
    fn encrypt_with_backend(&self, f: impl BlockCipherEncClosure<BlockSize = U8>) {
        f.call(self)
    }
}

impl BlockCipherEncBackend for Tea16 {
    #[inline(always)]
    fn encrypt_block(&self, mut block: InOut<'_, '_, Block<Self>>) {
        let input = block.get_in();
        let (v0, v1) = self.encrypt_words(word(input, 0), word(input, 4));
        let out = block.get_out();
        out[..4].copy_from_slice(&v0.to_be_bytes());
        out[4..].copy_from_slice(&v1.to_be_bytes());
    }
}

/// Reverses the bytes of each 32-bit word of an 8-byte block.
#[inline(always)]
fn swap_words(block: &Block<XteaBe>) -> Block<XteaBe> {
    let mut out = Block::<XteaBe>::default();
    for (o, i) in out.chunks_exact_mut(4).zip(block.chunks_exact(4)) {
        for (ob, ib) in o.iter_mut().zip(i.iter().rev()) {
            *ob = *ib;
        }
    }
    out
}

/// XTEA with big-endian words, on top of the little-endian `xtea` crate.
pub(crate) struct XteaBe {
    inner: xtea::Xtea,
}

impl XteaBe {
    /// Expands a 16-byte key.
    pub(crate) fn new(key: &[u8; 16]) -> Self {
        let mut swapped = [0u8; 16];
        for (o, i) in swapped.chunks_exact_mut(4).zip(key.chunks_exact(4)) {
            for (ob, ib) in o.iter_mut().zip(i.iter().rev()) {
                *ob = *ib;
            }
        }
        Self {
            inner: xtea::Xtea::new(&swapped.into()),
        }
    }
}

impl BlockSizeUser for XteaBe {
    type BlockSize = U8;
}

impl ParBlocksSizeUser for XteaBe {
    type ParBlocksSize = U1;
}

impl BlockCipherEncrypt for XteaBe {
    #[inline]
    fn encrypt_with_backend(&self, f: impl BlockCipherEncClosure<BlockSize = U8>) {
        f.call(self)
    }
}

impl BlockCipherEncBackend for XteaBe {
    #[inline(always)]
    fn encrypt_block(&self, mut block: InOut<'_, '_, Block<Self>>) {
        let mut le = swap_words(block.get_in());
        BlockCipherEncrypt::encrypt_block(&self.inner, &mut le);
        *block.get_out() = swap_words(&le);
    }
}
