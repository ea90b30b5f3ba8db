//! SM4 with the S-box folded into its linear transform: the round function
//! `T = L(tau(x))` becomes four lookups in 256-entry word tables (built at
//! compile time), where the `sm4` crate substitutes bytes and then rotates
//! five times per round. The crate stays the reference in the tests.
//!
//! Only the encrypt direction exists: kcp-go's CFB never decrypts a block.

use cipher::{
    Block, BlockCipherEncBackend, BlockCipherEncClosure, BlockCipherEncrypt, BlockSizeUser,
    ParBlocks, ParBlocksSizeUser,
    consts::{U4, U16},
    inout::InOut,
};

/// The SM4 S-box (GB/T 32907-2016).
const SBOX: [u8; 256] = [
    0xd6, 0x90, 0xe9, 0xfe, 0xcc, 0xe1, 0x3d, 0xb7, 0x16, 0xb6, 0x14, 0xc2, 0x28, 0xfb, 0x2c, 0x05,
    0x2b, 0x67, 0x9a, 0x76, 0x2a, 0xbe, 0x04, 0xc3, 0xaa, 0x44, 0x13, 0x26, 0x49, 0x86, 0x06, 0x99,
    0x9c, 0x42, 0x50, 0xf4, 0x91, 0xef, 0x98, 0x7a, 0x33, 0x54, 0x0b, 0x43, 0xed, 0xcf, 0xac, 0x62,
    0xe4, 0xb3, 0x1c, 0xa9, 0xc9, 0x08, 0xe8, 0x95, 0x80, 0xdf, 0x94, 0xfa, 0x75, 0x8f, 0x3f, 0xa6,
    0x47, 0x07, 0xa7, 0xfc, 0xf3, 0x73, 0x17, 0xba, 0x83, 0x59, 0x3c, 0x19, 0xe6, 0x85, 0x4f, 0xa8,
    0x68, 0x6b, 0x81, 0xb2, 0x71, 0x64, 0xda, 0x8b, 0xf8, 0xeb, 0x0f, 0x4b, 0x70, 0x56, 0x9d, 0x35,
    0x1e, 0x24, 0x0e, 0x5e, 0x63, 0x58, 0xd1, 0xa2, 0x25, 0x22, 0x7c, 0x3b, 0x01, 0x21, 0x78, 0x87,
    0xd4, 0x00, 0x46, 0x57, 0x9f, 0xd3, 0x27, 0x52, 0x4c, 0x36, 0x02, 0xe7, 0xa0, 0xc4, 0xc8, 0x9e,
    0xea, 0xbf, 0x8a, 0xd2, 0x40, 0xc7, 0x38, 0xb5, 0xa3, 0xf7, 0xf2, 0xce, 0xf9, 0x61, 0x15, 0xa1,
    0xe0, 0xae, 0x5d, 0xa4, 0x9b, 0x34, 0x1a, 0x55, 0xad, 0x93, 0x32, 0x30, 0xf5, 0x8c, 0xb1, 0xe3,
    0x1d, 0xf6, 0xe2, 0x2e, 0x82, 0x66, 0xca, 0x60, 0xc0, 0x29, 0x23, 0xab, 0x0d, 0x53, 0x4e, 0x6f,
    0xd5, 0xdb, 0x37, 0x45, 0xde, 0xfd, 0x8e, 0x2f, 0x03, 0xff, 0x6a, 0x72, 0x6d, 0x6c, 0x5b, 0x51,
    0x8d, 0x1b, 0xaf, 0x92, 0xbb, 0xdd, 0xbc, 0x7f, 0x11, 0xd9, 0x5c, 0x41, 0x1f, 0x10, 0x5a, 0xd8,
    0x0a, 0xc1, 0x31, 0x88, 0xa5, 0xcd, 0x7b, 0xbd, 0x2d, 0x74, 0xd0, 0x12, 0xb8, 0xe5, 0xb4, 0xb0,
    0x89, 0x69, 0x97, 0x4a, 0x0c, 0x96, 0x77, 0x7e, 0x65, 0xb9, 0xf1, 0x09, 0xc5, 0x6e, 0xc6, 0x84,
    0x18, 0xf0, 0x7d, 0xec, 0x3a, 0xdc, 0x4d, 0x20, 0x79, 0xee, 0x5f, 0x3e, 0xd7, 0xcb, 0x39, 0x48,
];

/// The system parameter FK.
const FK: [u32; 4] = [0xa3b1_bac6, 0x56aa_3350, 0x677d_9197, 0xb270_22dc];

/// The fixed parameters CK: byte `j` of `CK[i]` is `(4i + j) * 7 mod 256`.
const fn ck() -> [u32; 32] {
    let mut out = [0u32; 32];
    let mut i = 0;
    while i < 32 {
        let mut w = 0u32;
        let mut j = 0;
        while j < 4 {
            w = (w << 8) | (((4 * i + j) * 7) % 256) as u32;
            j += 1;
        }
        out[i] = w;
        i += 1;
    }
    out
}

const CK: [u32; 32] = ck();

/// The round transform's linear part L.
const fn l(b: u32) -> u32 {
    b ^ b.rotate_left(2) ^ b.rotate_left(10) ^ b.rotate_left(18) ^ b.rotate_left(24)
}

/// `T[k][v] = L(S(v) << (24 - 8k))`: L is linear, so `T(x)` is the XOR of the
/// four bytes' entries.
const fn t_tables() -> [[u32; 256]; 4] {
    let mut t = [[0u32; 256]; 4];
    let mut v = 0;
    while v < 256 {
        let s = SBOX[v] as u32;
        let mut k = 0;
        while k < 4 {
            t[k][v] = l(s << (24 - 8 * k));
            k += 1;
        }
        v += 1;
    }
    t
}

static T: [[u32; 256]; 4] = t_tables();

#[inline(always)]
fn t(x: u32) -> u32 {
    let [b0, b1, b2, b3] = x.to_be_bytes();
    T[0][b0 as usize] ^ T[1][b1 as usize] ^ T[2][b2 as usize] ^ T[3][b3 as usize]
}

/// The key schedule's transform `L'(tau(x))`.
fn t_key(x: u32) -> u32 {
    let [b0, b1, b2, b3] = x.to_be_bytes();
    let s = u32::from_be_bytes([
        SBOX[b0 as usize],
        SBOX[b1 as usize],
        SBOX[b2 as usize],
        SBOX[b3 as usize],
    ]);
    s ^ s.rotate_left(13) ^ s.rotate_left(23)
}

/// SM4 with its 32 round keys expanded.
#[derive(Clone)]
pub(crate) struct Sm4 {
    rk: [u32; 32],
}

impl Sm4 {
    /// Expands a 16-byte key.
    pub(crate) fn new(key: &[u8; 16]) -> Self {
        let mut k = [0u32; 4];
        for ((w, c), f) in k.iter_mut().zip(key.chunks_exact(4)).zip(FK) {
            let mut b = [0u8; 4];
            b.copy_from_slice(c);
            *w = u32::from_be_bytes(b) ^ f;
        }
        let mut rk = [0u32; 32];
        for (i, (r, c)) in rk.iter_mut().zip(CK).enumerate() {
            let next = k[i % 4] ^ t_key(k[(i + 1) % 4] ^ k[(i + 2) % 4] ^ k[(i + 3) % 4] ^ c);
            k[i % 4] = next;
            *r = next;
        }
        Self { rk }
    }

    #[inline(always)]
    fn encrypt_words(&self, [mut x0, mut x1, mut x2, mut x3]: [u32; 4]) -> [u32; 4] {
        for r in self.rk.chunks_exact(4) {
            x0 ^= t(x1 ^ x2 ^ x3 ^ r[0]);
            x1 ^= t(x2 ^ x3 ^ x0 ^ r[1]);
            x2 ^= t(x3 ^ x0 ^ x1 ^ r[2]);
            x3 ^= t(x0 ^ x1 ^ x2 ^ r[3]);
        }
        [x3, x2, x1, x0]
    }

    /// Four independent blocks in lockstep, so their lookups overlap.
    #[inline(always)]
    fn encrypt_words4(&self, x: [[u32; 4]; 4]) -> [[u32; 4]; 4] {
        let mut x = x;
        for r in self.rk.chunks_exact(4) {
            for (i, &k) in r.iter().enumerate() {
                for s in x.iter_mut() {
                    let t_in = s[(i + 1) % 4] ^ s[(i + 2) % 4] ^ s[(i + 3) % 4] ^ k;
                    s[i % 4] ^= t(t_in);
                }
            }
        }
        x.map(|[a, b, c, d]| [d, c, b, a])
    }
}

impl BlockSizeUser for Sm4 {
    type BlockSize = U16;
}

/// Opening a CFB datagram encrypts ciphertext blocks that are all known:
/// four at a time.
impl ParBlocksSizeUser for Sm4 {
    type ParBlocksSize = U4;
}

impl BlockCipherEncrypt for Sm4 {
    #[inline]
    fn encrypt_with_backend(&self, f: impl BlockCipherEncClosure<BlockSize = U16>) {
        f.call(self)
    }
}

impl BlockCipherEncBackend for Sm4 {
    #[inline(always)]
    fn encrypt_block(&self, mut block: InOut<'_, '_, Block<Self>>) {
        let mut x = [0u32; 4];
        for (w, c) in x.iter_mut().zip(block.get_in().chunks_exact(4)) {
            let mut b = [0u8; 4];
            b.copy_from_slice(c);
            *w = u32::from_be_bytes(b);
        }
        let out = self.encrypt_words(x);
        for (c, w) in block.get_out().chunks_exact_mut(4).zip(out) {
            c.copy_from_slice(&w.to_be_bytes());
        }
    }
    #[inline(always)]
    fn encrypt_par_blocks(&self, mut blocks: InOut<'_, '_, ParBlocks<Self>>) {
        let input = blocks.get_in();
        let words: [[u32; 4]; 4] = core::array::from_fn(|b| {
            core::array::from_fn(|w| {
                let mut bytes = [0u8; 4];
                bytes.copy_from_slice(&input[b][4 * w..4 * w + 4]);
                u32::from_be_bytes(bytes)
            })
        });
        let out = self.encrypt_words4(words);
        for (block, ws) in blocks.get_out().iter_mut().zip(out) {
            for (c, w) in block.chunks_exact_mut(4).zip(ws) {
                c.copy_from_slice(&w.to_be_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cipher::KeyInit;
    use proptest::prelude::*;

    #[test]
    fn standard_example() {
        // GB/T 32907 example 1: key = plaintext = 0123456789abcdeffedcba9876543210.
        let k = [
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54,
            0x32, 0x10,
        ];
        let mut b = Block::<Sm4>::from(k);
        Sm4::new(&k).encrypt_block_inplace(&mut b);
        assert_eq!(
            b[..],
            [
                0x68, 0x1e, 0xdf, 0x34, 0xd2, 0x06, 0x96, 0x5e, 0x86, 0xb3, 0xe9, 0x4f, 0x53, 0x6e,
                0x42, 0x46
            ]
        );
        assert_eq!(CK[1], 0x1c23_2a31);
    }

    proptest! {
        #[test]
        fn four_block_path_matches_single_blocks(key in any::<[u8; 16]>(), blocks in any::<[[u32; 4]; 4]>()) {
            let s = Sm4::new(&key);
            let four = s.encrypt_words4(blocks);
            for (b, f) in blocks.iter().zip(four) {
                prop_assert_eq!(s.encrypt_words(*b), f);
            }
        }

        #[test]
        fn matches_the_sm4_crate(key in any::<[u8; 16]>(), blocks in any::<[[u8; 16]; 4]>()) {
            let ours = Sm4::new(&key);
            let reference = sm4::Sm4::new_from_slice(&key).unwrap();
            for b in blocks {
                let mut x = Block::<Sm4>::from(b);
                let mut y = x;
                ours.encrypt_block_inplace(&mut x);
                BlockCipherEncrypt::encrypt_block(&reference, &mut y);
                prop_assert_eq!(x, y);
            }
        }
    }
}
