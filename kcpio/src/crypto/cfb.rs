//! kcp-go's cipher-feedback mode: full-block CFB restarted for every datagram
//! from one fixed IV (WIRE.md 5.2).
//!
//! Only the forward (encrypt) direction of the block cipher is used. Sealing
//! is inherently serial (each keystream block is the encryption of the
//! previous ciphertext block); opening encrypts ciphertext blocks that are all
//! known up front, so it feeds the backend's parallel path when it has one
//! (AES-NI pipelines eight blocks).
//!
//! A trailing partial block is XORed with the first bytes of the next
//! keystream block, exactly as kcp-go and RustCrypto's `cfb-mode` do; unlike
//! `cfb-mode` we skip the keystream block nobody would use.

use cipher::{
    Block, BlockCipherEncBackend, BlockCipherEncClosure, BlockCipherEncrypt, BlockSizeUser,
    ParBlocks, ParBlocksSizeUser,
    array::{Array, ArraySize},
    inout::InOut,
    typenum::Unsigned,
};
use core::marker::PhantomData;

/// kcp-go's fixed initial vector; ciphers with 8-byte blocks use its first half.
pub(crate) const IV: [u8; 16] = [
    0xa7, 0x73, 0x4f, 0x9c, 0x12, 0xac, 0x1b, 0x01, 0xa4, 0x15, 0xf2, 0xc1, 0xfc, 0x78, 0xe6, 0x6b,
];

/// A block cipher on two 32-bit words (8-byte blocks, big-endian on the
/// wire), encrypt direction only: the hand-written 64-bit ciphers.
pub(crate) trait Words64 {
    /// Encrypts one block given as its two big-endian words.
    fn encrypt_words(&self, l: u32, r: u32) -> (u32, u32);
}

/// [`encrypt`] for a [`Words64`] cipher: the chaining value stays in two
/// registers from block to block (no store and reload of the previous
/// ciphertext, no byte-array round trips), which is all the serial path has
/// besides the cipher itself.
pub(crate) fn encrypt_words<C: Words64>(cipher: &C, buf: &mut [u8]) {
    let word = |b: [u8; 4]| u32::from_be_bytes(b);
    let [i0, i1, i2, i3, i4, i5, i6, i7, ..] = IV;
    let (mut l, mut r) = cipher.encrypt_words(word([i0, i1, i2, i3]), word([i4, i5, i6, i7]));
    let (blocks, tail) = buf.as_chunks_mut::<8>();
    for block in blocks {
        let [b0, b1, b2, b3, b4, b5, b6, b7] = *block;
        let c0 = word([b0, b1, b2, b3]) ^ l;
        let c1 = word([b4, b5, b6, b7]) ^ r;
        let (hi, lo) = (c0.to_be_bytes(), c1.to_be_bytes());
        *block = [hi[0], hi[1], hi[2], hi[3], lo[0], lo[1], lo[2], lo[3]];
        (l, r) = cipher.encrypt_words(c0, c1);
    }
    let mut ks = [0u8; 8];
    ks[..4].copy_from_slice(&l.to_be_bytes());
    ks[4..].copy_from_slice(&r.to_be_bytes());
    xor_tail(tail, &ks);
}

/// An 8-byte-block cipher that encrypts up to 16 independent blocks at once
/// (wide SIMD where the CPU has it).
pub(crate) trait Many64 {
    /// The encryptions of the first `n` of `inputs` (big-endian blocks); the
    /// rest of the output is unspecified.
    fn encrypt_many(&self, inputs: &[u64; 16], n: usize) -> [u64; 16];
}

/// [`decrypt`] for a [`Many64`] cipher: every keystream block is the
/// encryption of a known ciphertext block (or the IV), so they go 16 at a
/// time through [`Many64::encrypt_many`].
pub(crate) fn decrypt_many<C: Many64>(cipher: &C, buf: &mut [u8]) {
    let [i0, i1, i2, i3, i4, i5, i6, i7, ..] = IV;
    let mut prev = u64::from_be_bytes([i0, i1, i2, i3, i4, i5, i6, i7]);
    for group in buf.chunks_mut(8 * 16) {
        // Block j of the group takes the encryption of block j - 1 (the
        // previous group's last block for j = 0), and so does the trailing
        // partial block.
        let (blocks, tail) = group.as_chunks_mut::<8>();
        let mut inputs = [0u64; 16];
        inputs[0] = prev;
        for (input, b) in inputs[1..].iter_mut().zip(blocks.iter()) {
            *input = u64::from_be_bytes(*b);
        }
        if let Some(last) = blocks.last() {
            prev = u64::from_be_bytes(*last);
        }
        let n = blocks.len() + usize::from(!tail.is_empty());
        let ks = cipher.encrypt_many(&inputs, n);
        for (b, k) in blocks.iter_mut().zip(ks) {
            *b = (u64::from_be_bytes(*b) ^ k).to_be_bytes();
        }
        if let Some(k) = ks.get(blocks.len()) {
            xor_tail(tail, &k.to_be_bytes());
        }
    }
}

/// Encrypts `buf` in place.
pub(crate) fn encrypt<C: BlockCipherEncrypt>(cipher: &C, buf: &mut [u8]) {
    cipher.encrypt_with_backend(Encrypt::<C::BlockSize> {
        buf,
        _block: PhantomData,
    });
}

/// Decrypts `buf` in place.
pub(crate) fn decrypt<C: BlockCipherEncrypt>(cipher: &C, buf: &mut [u8]) {
    cipher.encrypt_with_backend(Decrypt::<C::BlockSize> {
        buf,
        _block: PhantomData,
    });
}

/// The first keystream block: the encryption of the fixed IV.
#[inline(always)]
fn first_keystream<B: BlockCipherEncBackend>(backend: &B) -> Block<B> {
    let mut ks = Block::<B>::default();
    for (k, v) in ks.iter_mut().zip(IV.iter()) {
        *k = *v;
    }
    backend.encrypt_block_inplace(&mut ks);
    ks
}

#[inline(always)]
fn xor_in_place<N: ArraySize>(data: &mut Array<u8, N>, ks: &Array<u8, N>) {
    for (d, k) in data.iter_mut().zip(ks.iter()) {
        *d ^= *k;
    }
}

#[inline(always)]
fn xor_tail(tail: &mut [u8], ks: &[u8]) {
    for (d, k) in tail.iter_mut().zip(ks.iter()) {
        *d ^= *k;
    }
}

/// Encrypts `input` into `out` (the backend's own in/out form).
#[inline(always)]
fn encrypt_b2b<B: BlockCipherEncBackend>(backend: &B, input: &Block<B>, out: &mut Block<B>) {
    backend.encrypt_block(InOut::from((input, out)));
}

// Code shape. A keystream block carried from one loop iteration to the next
// is split by LLVM into 16 byte-sized values and rebuilt byte by byte every
// block (pextrb/pinsrb), tripling the cost of AES-NI CFB. So no loop below
// carries a keystream block: sealing re-reads the previous ciphertext block
// from the buffer, and opening walks backwards, where the previous block is
// still ciphertext.

struct Encrypt<'a, BS> {
    buf: &'a mut [u8],
    _block: PhantomData<BS>,
}

impl<BS: ArraySize> BlockSizeUser for Encrypt<'_, BS> {
    type BlockSize = BS;
}

impl<BS: ArraySize> BlockCipherEncClosure for Encrypt<'_, BS> {
    #[inline(always)]
    fn call<B: BlockCipherEncBackend<BlockSize = BS>>(self, backend: &B) {
        let (blocks, tail) = Array::<u8, BS>::slice_as_chunks_mut(self.buf);
        let Some((first, _)) = blocks.split_first_mut() else {
            xor_tail(tail, &first_keystream(backend));
            return;
        };
        xor_in_place(first, &first_keystream(backend));
        for i in 1..blocks.len() {
            let (done, todo) = blocks.split_at_mut(i);
            if let (Some(prev), Some(cur)) = (done.last(), todo.first_mut()) {
                let mut ks = Block::<B>::default();
                encrypt_b2b(backend, prev, &mut ks);
                xor_in_place(cur, &ks);
            }
        }
        if let Some(last) = blocks.last()
            && !tail.is_empty()
        {
            let mut ks = Block::<B>::default();
            encrypt_b2b(backend, last, &mut ks);
            xor_tail(tail, &ks);
        }
    }
}

struct Decrypt<'a, BS> {
    buf: &'a mut [u8],
    _block: PhantomData<BS>,
}

impl<BS: ArraySize> BlockSizeUser for Decrypt<'_, BS> {
    type BlockSize = BS;
}

impl<BS: ArraySize> BlockCipherEncClosure for Decrypt<'_, BS> {
    #[inline(always)]
    fn call<B: BlockCipherEncBackend<BlockSize = BS>>(self, backend: &B) {
        let (blocks, tail) = Array::<u8, BS>::slice_as_chunks_mut(self.buf);
        // The tail's keystream is the encryption of the last full block, or
        // of the IV when there is none.
        match blocks.last() {
            None => {
                xor_tail(tail, &first_keystream(backend));
                return;
            }
            Some(last) if !tail.is_empty() => {
                let mut ks = Block::<B>::default();
                encrypt_b2b(backend, last, &mut ks);
                xor_tail(tail, &ks);
            }
            Some(_) => {}
        }
        // Block i (i >= 1) is XORed with the encryption of ciphertext block
        // i - 1; going backwards, that block is still ciphertext. Whole groups
        // go through the backend's parallel path: blocks s..s+P take the
        // encryptions of blocks s-1..s+P-1, one contiguous run.
        let par = <B as ParBlocksSizeUser>::ParBlocksSize::USIZE;
        let mut end = blocks.len();
        while end > par {
            let start = end - par;
            let mut ks = ParBlocks::<B>::default();
            let Some(run) = blocks.get(start - 1..end - 1) else {
                break;
            };
            let (inputs, _) = ParBlocks::<B>::slice_as_chunks(run);
            let Some(input) = inputs.first() else {
                break;
            };
            backend.encrypt_par_blocks(InOut::from((input, &mut ks)));
            if let Some(group) = blocks.get_mut(start..end) {
                for (block, k) in group.iter_mut().zip(ks.iter()) {
                    xor_in_place(block, k);
                }
            }
            end = start;
        }
        for i in (1..end).rev() {
            let (done, todo) = blocks.split_at_mut(i);
            if let (Some(prev), Some(cur)) = (done.last(), todo.first_mut()) {
                let mut ks = Block::<B>::default();
                encrypt_b2b(backend, prev, &mut ks);
                xor_in_place(cur, &ks);
            }
        }
        if let Some(first) = blocks.first_mut() {
            xor_in_place(first, &first_keystream(backend));
        }
    }
}
