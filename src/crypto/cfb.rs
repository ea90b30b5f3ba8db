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
        let mut ks = first_keystream(backend);
        let (blocks, tail) = Array::<u8, BS>::slice_as_chunks_mut(self.buf);
        if let Some((last, rest)) = blocks.split_last_mut() {
            for block in rest {
                xor_in_place(block, &ks);
                encrypt_b2b(backend, block, &mut ks);
            }
            xor_in_place(last, &ks);
            if tail.is_empty() {
                return;
            }
            encrypt_b2b(backend, last, &mut ks);
        }
        xor_tail(tail, &ks);
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
        let mut ks = first_keystream(backend);
        let (blocks, tail) = Array::<u8, BS>::slice_as_chunks_mut(self.buf);
        let mut rest: &mut [Block<B>] = blocks;
        if <B as ParBlocksSizeUser>::ParBlocksSize::USIZE > 1 {
            let (groups, remainder) = ParBlocks::<B>::slice_as_chunks_mut(rest);
            for group in groups {
                // Keystream block i+1 is the encryption of ciphertext block i:
                // all of them at once, before the group is overwritten.
                let mut next = ParBlocks::<B>::default();
                backend.encrypt_par_blocks(InOut::from((&*group, &mut next)));
                let mut prev = &ks;
                for (block, k) in group.iter_mut().zip(next.iter()) {
                    xor_in_place(block, prev);
                    prev = k;
                }
                ks = prev.clone();
            }
            rest = remainder;
        }
        if let Some((last, init)) = rest.split_last_mut() {
            for block in init {
                let mut next = Block::<B>::default();
                encrypt_b2b(backend, block, &mut next);
                xor_in_place(block, &ks);
                ks = next;
            }
            let mut next = Block::<B>::default();
            if !tail.is_empty() {
                encrypt_b2b(backend, last, &mut next);
            }
            xor_in_place(last, &ks);
            ks = next;
        }
        xor_tail(tail, &ks);
    }
}
