//! Twofish-256 with the key-dependent S-boxes folded into four 256-entry
//! tables at key setup (as kcp-go's `x/crypto/twofish` does), so a round's
//! `g` function is four lookups. The `twofish` crate recomputes the S-boxes
//! from the 4-bit permutations on every block, about a hundred times slower;
//! it remains the reference this module is tested against.
//!
//! Only 32-byte keys (kcptun's) and the encrypt direction exist here.

use cipher::{
    Block, BlockCipherEncBackend, BlockCipherEncClosure, BlockCipherEncrypt, BlockSizeUser,
    ParBlocksSizeUser,
    consts::{U1, U16},
    inout::InOut,
};

/// The 4-bit permutations t0..t3 that build q0 and q1 (Twofish paper, 4.3.5).
const T: [[[u8; 16]; 4]; 2] = [
    [
        [8, 1, 7, 13, 6, 15, 3, 2, 0, 11, 5, 9, 14, 12, 10, 4],
        [14, 12, 11, 8, 1, 2, 3, 5, 15, 4, 10, 6, 7, 0, 9, 13],
        [11, 10, 5, 14, 6, 13, 9, 0, 12, 8, 15, 3, 2, 4, 7, 1],
        [13, 7, 15, 4, 1, 2, 6, 14, 9, 11, 3, 0, 8, 5, 12, 10],
    ],
    [
        [2, 8, 11, 13, 15, 7, 6, 14, 3, 1, 9, 4, 0, 10, 12, 5],
        [1, 14, 2, 11, 4, 12, 3, 7, 6, 13, 10, 5, 15, 9, 0, 8],
        [4, 12, 7, 5, 1, 6, 9, 10, 0, 14, 13, 8, 2, 11, 3, 15],
        [11, 9, 5, 1, 12, 3, 13, 14, 6, 4, 7, 15, 2, 0, 8, 10],
    ],
];

/// q0 (`which` = 0) or q1 (`which` = 1) as a full byte permutation.
const fn q_table(which: usize) -> [u8; 256] {
    let t = &T[which];
    let mut out = [0u8; 256];
    let mut x = 0;
    while x < 256 {
        let (a0, b0) = ((x >> 4) as u8, (x & 15) as u8);
        let a1 = a0 ^ b0;
        let b1 = (a0 ^ (((b0 >> 1) | (b0 << 3)) & 15) ^ ((a0 << 3) & 15)) & 15;
        let (a2, b2) = (t[0][a1 as usize], t[1][b1 as usize]);
        let a3 = a2 ^ b2;
        let b3 = (a2 ^ (((b2 >> 1) | (b2 << 3)) & 15) ^ ((a2 << 3) & 15)) & 15;
        let (a4, b4) = (t[2][a3 as usize], t[3][b3 as usize]);
        out[x] = (b4 << 4) | a4;
        x += 1;
    }
    out
}

const Q0: [u8; 256] = q_table(0);
const Q1: [u8; 256] = q_table(1);

/// Multiplication in GF(2^8) modulo `poly` (with its x^8 term).
const fn gf_mul(mut a: u8, mut b: u8, poly: u16) -> u8 {
    let mut r = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= (poly & 0xff) as u8;
        }
        b >>= 1;
    }
    r
}

const MDS_POLY: u16 = 0x169;
const RS_POLY: u16 = 0x14d;

/// The MDS matrix, by rows.
const MDS: [[u8; 4]; 4] = [
    [0x01, 0xef, 0x5b, 0x5b],
    [0x5b, 0xef, 0xef, 0x01],
    [0xef, 0x5b, 0x01, 0xef],
    [0xef, 0x01, 0xef, 0x5b],
];

/// The Reed-Solomon matrix that derives the S-box key words.
const RS: [[u8; 8]; 4] = [
    [0x01, 0xa4, 0x55, 0x87, 0x5a, 0x58, 0xdb, 0x9e],
    [0xa4, 0x56, 0x82, 0xf3, 0x1e, 0xc6, 0x68, 0xe5],
    [0x02, 0xa1, 0xfc, 0xc1, 0x47, 0xae, 0x3d, 0x19],
    [0xa4, 0x55, 0x87, 0x5a, 0x58, 0xdb, 0x9e, 0x03],
];

/// Column `col` of the MDS matrix times byte `y`, as a little-endian word.
fn mds_column(col: usize, y: u8) -> u32 {
    let mut z = [0u8; 4];
    for (row, zb) in MDS.iter().zip(z.iter_mut()) {
        *zb = gf_mul(row[col % 4], y, MDS_POLY);
    }
    u32::from_le_bytes(z)
}

/// Byte `pos` of `h`'s input through the q chain for a 256-bit key, with
/// `l[i]` the byte list L_i.
fn h_byte(pos: usize, x: u8, l: &[[u8; 4]; 4]) -> u8 {
    let p = pos % 4;
    // Which permutation each of the five stages applies to byte `p`.
    const ORDER: [[bool; 5]; 4] = [
        // false = q0, true = q1; stages: k=4 stage, k=3 stage, then three final.
        [true, true, false, false, true],
        [false, true, true, false, false],
        [false, false, false, true, true],
        [true, false, true, true, false],
    ];
    let q = |one: bool, v: u8| if one { Q1[v as usize] } else { Q0[v as usize] };
    let o = ORDER[p];
    let mut y = q(o[0], x) ^ l[3][p];
    y = q(o[1], y) ^ l[2][p];
    y = q(o[2], y) ^ l[1][p];
    y = q(o[3], y) ^ l[0][p];
    q(o[4], y)
}

fn h(x: u32, l: &[[u8; 4]; 4]) -> u32 {
    x.to_le_bytes()
        .iter()
        .enumerate()
        .fold(0, |acc, (pos, &b)| acc ^ mds_column(pos, h_byte(pos, b, l)))
}

/// Twofish with a 256-bit key, S-boxes precomputed.
#[derive(Clone)]
pub(crate) struct Twofish256 {
    s: [[u32; 256]; 4],
    k: [u32; 40],
}

impl Twofish256 {
    /// Expands a 32-byte key.
    pub(crate) fn new(key: &[u8; 32]) -> Box<Self> {
        let mut words = [[0u8; 4]; 8];
        for (w, c) in words.iter_mut().zip(key.chunks_exact(4)) {
            w.copy_from_slice(c);
        }
        let even = [words[0], words[2], words[4], words[6]];
        let odd = [words[1], words[3], words[5], words[7]];

        let mut this = Box::new(Self {
            s: [[0; 256]; 4],
            k: [0; 40],
        });
        const RHO: u32 = 0x0101_0101;
        for (i, pair) in this.k.chunks_exact_mut(2).enumerate() {
            let i = i as u32;
            let a = h(2 * i * RHO, &even);
            let b = h((2 * i + 1) * RHO, &odd).rotate_left(8);
            pair[0] = a.wrapping_add(b);
            pair[1] = a.wrapping_add(b).wrapping_add(b).rotate_left(9);
        }

        // S-box key words S_0..S_3 (RS code over 8 key bytes each); g uses
        // them in reverse: L_0 = S_3, ..., L_3 = S_0.
        let mut sk = [[0u8; 4]; 4];
        for (i, chunk) in key.chunks_exact(8).enumerate() {
            for (r, row) in RS.iter().enumerate() {
                let v = row
                    .iter()
                    .zip(chunk)
                    .fold(0u8, |acc, (&m, &k)| acc ^ gf_mul(m, k, RS_POLY));
                if let Some(slot) = sk.get_mut(3 - i % 4).and_then(|s| s.get_mut(r)) {
                    *slot = v;
                }
            }
        }
        for (pos, table) in this.s.iter_mut().enumerate() {
            for (x, entry) in table.iter_mut().enumerate() {
                *entry = mds_column(pos, h_byte(pos, x as u8, &sk));
            }
        }
        this
    }

    #[inline(always)]
    fn g(&self, x: u32) -> u32 {
        let [b0, b1, b2, b3] = x.to_le_bytes();
        self.s[0][b0 as usize]
            ^ self.s[1][b1 as usize]
            ^ self.s[2][b2 as usize]
            ^ self.s[3][b3 as usize]
    }

    #[inline(always)]
    fn encrypt_words(&self, p: [u32; 4]) -> [u32; 4] {
        let k = &self.k;
        let [mut a, mut b, mut c, mut d] = [p[0] ^ k[0], p[1] ^ k[1], p[2] ^ k[2], p[3] ^ k[3]];
        for r in k[8..].chunks_exact(4) {
            let t1 = self.g(b.rotate_left(8));
            let t0 = self.g(a).wrapping_add(t1);
            c = (c ^ t0.wrapping_add(r[0])).rotate_right(1);
            d = d.rotate_left(1) ^ t1.wrapping_add(t0).wrapping_add(r[1]);

            let t1 = self.g(d.rotate_left(8));
            let t0 = self.g(c).wrapping_add(t1);
            a = (a ^ t0.wrapping_add(r[2])).rotate_right(1);
            b = b.rotate_left(1) ^ t1.wrapping_add(t0).wrapping_add(r[3]);
        }
        [c ^ k[4], d ^ k[5], a ^ k[6], b ^ k[7]]
    }
}

impl BlockSizeUser for Twofish256 {
    type BlockSize = U16;
}

impl ParBlocksSizeUser for Twofish256 {
    type ParBlocksSize = U1;
}

impl BlockCipherEncrypt for Twofish256 {
    #[inline]
    fn encrypt_with_backend(&self, f: impl BlockCipherEncClosure<BlockSize = U16>) {
        f.call(self)
    }
}

impl BlockCipherEncBackend for Twofish256 {
    #[inline(always)]
    fn encrypt_block(&self, mut block: InOut<'_, '_, Block<Self>>) {
        let mut p = [0u32; 4];
        for (w, c) in p.iter_mut().zip(block.get_in().chunks_exact(4)) {
            let mut b = [0u8; 4];
            b.copy_from_slice(c);
            *w = u32::from_le_bytes(b);
        }
        let out = self.encrypt_words(p);
        for (c, w) in block.get_out().chunks_exact_mut(4).zip(out) {
            c.copy_from_slice(&w.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cipher::KeyInit;
    use proptest::prelude::*;

    #[test]
    fn q_tables_are_permutations() {
        for q in [Q0, Q1] {
            let mut seen = [false; 256];
            for v in q {
                assert!(!seen[v as usize]);
                seen[v as usize] = true;
            }
        }
        // Known first entries of q0 and q1 (Twofish paper's tables).
        assert_eq!(&Q0[..4], &[0xa9, 0x67, 0xb3, 0xe8]);
        assert_eq!(&Q1[..4], &[0x75, 0xf3, 0xc6, 0xf4]);
    }

    #[test]
    fn zero_key_zero_block_matches_the_paper() {
        // Twofish paper, 256-bit key test: key 0, plaintext 0.
        let tf = Twofish256::new(&[0; 32]);
        let mut block = Block::<Twofish256>::default();
        tf.encrypt_block_inplace(&mut block);
        assert_eq!(
            block[..],
            [
                0x57, 0xff, 0x73, 0x9d, 0x4d, 0xc9, 0x2c, 0x1b, 0xd7, 0xfc, 0x01, 0x70, 0x0c, 0xc8,
                0x21, 0x6f
            ]
        );
    }

    proptest! {
        #[test]
        fn matches_the_twofish_crate(key in any::<[u8; 32]>(), blocks in any::<[[u8; 16]; 4]>()) {
            let ours = Twofish256::new(&key);
            let reference = twofish::Twofish::new_from_slice(&key).unwrap();
            for b in blocks {
                let mut x = Block::<Twofish256>::from(b);
                let mut y = x;
                ours.encrypt_block_inplace(&mut x);
                BlockCipherEncrypt::encrypt_block(&reference, &mut y);
                prop_assert_eq!(x, y);
            }
        }
    }
}
