//! DES-EDE3 (kcptun's `3des`) with combined S-box/P-permutation tables.
//!
//! The `des` crate evaluates the expansion and the P permutation with bit
//! arithmetic in every round and runs the initial and final permutations
//! around each of the three DES passes: about a third of kcp-go's speed. Here,
//! as in Go's `crypto/des`, each S-box is folded with P into a 64-entry table
//! (so a round is eight lookups), the halves are kept rotated so that the
//! expansion is two XORs with pre-arranged subkeys, and the initial and final
//! permutations run once per block (they cancel between the passes). The
//! crate stays the reference in the tests.
//!
//! Only the encrypt direction exists: kcp-go's CFB never decrypts a block.
//! Sealing is one chain of blocks, so its speed is a round's latency;
//! opening's keystream blocks are independent and go 16 at a time through
//! the AVX-512 rounds of `simd::des16` where the CPU has them.

use super::cfb::Many64;
use crate::simd::des16::{SubkeyWords, rounds16};
use cipher::{
    Block, BlockCipherEncBackend, BlockCipherEncClosure, BlockCipherEncrypt, BlockSizeUser,
    ParBlocks, ParBlocksSizeUser,
    consts::{U4, U8},
    inout::InOut,
};

/// The eight S-boxes of FIPS 46-3, `[row][column]`.
const SBOX: [[[u8; 16]; 4]; 8] = [
    [
        [14, 4, 13, 1, 2, 15, 11, 8, 3, 10, 6, 12, 5, 9, 0, 7],
        [0, 15, 7, 4, 14, 2, 13, 1, 10, 6, 12, 11, 9, 5, 3, 8],
        [4, 1, 14, 8, 13, 6, 2, 11, 15, 12, 9, 7, 3, 10, 5, 0],
        [15, 12, 8, 2, 4, 9, 1, 7, 5, 11, 3, 14, 10, 0, 6, 13],
    ],
    [
        [15, 1, 8, 14, 6, 11, 3, 4, 9, 7, 2, 13, 12, 0, 5, 10],
        [3, 13, 4, 7, 15, 2, 8, 14, 12, 0, 1, 10, 6, 9, 11, 5],
        [0, 14, 7, 11, 10, 4, 13, 1, 5, 8, 12, 6, 9, 3, 2, 15],
        [13, 8, 10, 1, 3, 15, 4, 2, 11, 6, 7, 12, 0, 5, 14, 9],
    ],
    [
        [10, 0, 9, 14, 6, 3, 15, 5, 1, 13, 12, 7, 11, 4, 2, 8],
        [13, 7, 0, 9, 3, 4, 6, 10, 2, 8, 5, 14, 12, 11, 15, 1],
        [13, 6, 4, 9, 8, 15, 3, 0, 11, 1, 2, 12, 5, 10, 14, 7],
        [1, 10, 13, 0, 6, 9, 8, 7, 4, 15, 14, 3, 11, 5, 2, 12],
    ],
    [
        [7, 13, 14, 3, 0, 6, 9, 10, 1, 2, 8, 5, 11, 12, 4, 15],
        [13, 8, 11, 5, 6, 15, 0, 3, 4, 7, 2, 12, 1, 10, 14, 9],
        [10, 6, 9, 0, 12, 11, 7, 13, 15, 1, 3, 14, 5, 2, 8, 4],
        [3, 15, 0, 6, 10, 1, 13, 8, 9, 4, 5, 11, 12, 7, 2, 14],
    ],
    [
        [2, 12, 4, 1, 7, 10, 11, 6, 8, 5, 3, 15, 13, 0, 14, 9],
        [14, 11, 2, 12, 4, 7, 13, 1, 5, 0, 15, 10, 3, 9, 8, 6],
        [4, 2, 1, 11, 10, 13, 7, 8, 15, 9, 12, 5, 6, 3, 0, 14],
        [11, 8, 12, 7, 1, 14, 2, 13, 6, 15, 0, 9, 10, 4, 5, 3],
    ],
    [
        [12, 1, 10, 15, 9, 2, 6, 8, 0, 13, 3, 4, 14, 7, 5, 11],
        [10, 15, 4, 2, 7, 12, 9, 5, 6, 1, 13, 14, 0, 11, 3, 8],
        [9, 14, 15, 5, 2, 8, 12, 3, 7, 0, 4, 10, 1, 13, 11, 6],
        [4, 3, 2, 12, 9, 5, 15, 10, 11, 14, 1, 7, 6, 0, 8, 13],
    ],
    [
        [4, 11, 2, 14, 15, 0, 8, 13, 3, 12, 9, 7, 5, 10, 6, 1],
        [13, 0, 11, 7, 4, 9, 1, 10, 14, 3, 5, 12, 2, 15, 8, 6],
        [1, 4, 11, 13, 12, 3, 7, 14, 10, 15, 6, 8, 0, 5, 9, 2],
        [6, 11, 13, 8, 1, 4, 10, 7, 9, 5, 0, 15, 14, 2, 3, 12],
    ],
    [
        [13, 2, 8, 4, 6, 15, 11, 1, 10, 9, 3, 14, 5, 0, 12, 7],
        [1, 15, 13, 8, 10, 3, 7, 4, 12, 5, 6, 11, 0, 14, 9, 2],
        [7, 11, 4, 1, 9, 12, 14, 2, 0, 6, 10, 13, 15, 3, 5, 8],
        [2, 1, 14, 7, 4, 10, 8, 13, 15, 12, 9, 0, 3, 5, 6, 11],
    ],
];

/// The P permutation: output bit `j` (1-based, MSB first) is input bit `P[j-1]`.
const P: [u8; 32] = [
    16, 7, 20, 21, 29, 12, 28, 17, 1, 15, 23, 26, 5, 18, 31, 10, 2, 8, 24, 14, 32, 27, 3, 9, 19,
    13, 30, 6, 22, 11, 4, 25,
];

/// The initial permutation (64 bits, 1-based, MSB first).
const IP: [u8; 64] = [
    58, 50, 42, 34, 26, 18, 10, 2, 60, 52, 44, 36, 28, 20, 12, 4, 62, 54, 46, 38, 30, 22, 14, 6,
    64, 56, 48, 40, 32, 24, 16, 8, 57, 49, 41, 33, 25, 17, 9, 1, 59, 51, 43, 35, 27, 19, 11, 3, 61,
    53, 45, 37, 29, 21, 13, 5, 63, 55, 47, 39, 31, 23, 15, 7,
];

/// Permuted choice 1 (56 of the 64 key bits).
const PC1: [u8; 56] = [
    57, 49, 41, 33, 25, 17, 9, 1, 58, 50, 42, 34, 26, 18, 10, 2, 59, 51, 43, 35, 27, 19, 11, 3, 60,
    52, 44, 36, 63, 55, 47, 39, 31, 23, 15, 7, 62, 54, 46, 38, 30, 22, 14, 6, 61, 53, 45, 37, 29,
    21, 13, 5, 28, 20, 12, 4,
];

/// Permuted choice 2 (48 of the 56 rotated key bits).
const PC2: [u8; 48] = [
    14, 17, 11, 24, 1, 5, 3, 28, 15, 6, 21, 10, 23, 19, 12, 4, 26, 8, 16, 7, 27, 20, 13, 2, 41, 52,
    31, 37, 47, 55, 30, 40, 51, 45, 33, 48, 44, 49, 39, 56, 34, 53, 46, 42, 50, 36, 29, 32,
];

/// Left rotations of the key halves before each round.
const SHIFTS: [u32; 16] = [1, 1, 2, 2, 2, 2, 2, 2, 1, 2, 2, 2, 2, 2, 2, 1];

/// Applies a bit permutation: `width_in` input bits right-aligned in `x`,
/// output bit `j` = input bit `table[j]` (1-based, MSB first).
const fn permute(x: u64, width_in: u32, table: &[u8]) -> u64 {
    let mut out = 0u64;
    let mut j = 0;
    while j < table.len() {
        let bit = (x >> (width_in - table[j] as u32)) & 1;
        out = (out << 1) | bit;
        j += 1;
    }
    out
}

/// `SP[i][v]`: S-box `i` of the 6-bit input `v`, placed at its output nibble,
/// through P, rotated right by one (the halves are kept rotated that way).
const fn sp_tables() -> [[u32; 64]; 8] {
    let mut t = [[0u32; 64]; 8];
    let mut i = 0;
    while i < 8 {
        let mut v = 0;
        while v < 64 {
            let row = ((v >> 4) & 2) | (v & 1);
            let col = (v >> 1) & 15;
            let s = SBOX[i][row][col] as u64;
            let p = permute(s << (28 - 4 * i), 32, &P) as u32;
            t[i][v] = p.rotate_right(1);
            v += 1;
        }
        i += 1;
    }
    t
}

static SP: [[u32; 64]; 8] = sp_tables();

/// The final permutation, IP's inverse.
const fn fp_table() -> [u8; 64] {
    let mut t = [0u8; 64];
    let mut j = 0;
    while j < 64 {
        t[IP[j] as usize - 1] = j as u8 + 1;
        j += 1;
    }
    t
}

const FP: [u8; 64] = fp_table();

/// IP sends every bit of input byte `k` (bytes counted from the most
/// significant) to bit `k` of some output byte, the same output byte for
/// every `k`; so IP is eight lookups in one table of byte 0's images, shifted
/// by `k`. FP, the inverse, sends every bit of input byte `k` to bit
/// `FP_SHIFT[k]` of an output byte: one table of byte 3's images.
const FP_SHIFT: [u32; 8] = [6, 4, 2, 0, 7, 5, 3, 1];

const fn byte_tables() -> ([u64; 256], [u64; 256]) {
    let mut ip = [0u64; 256];
    let mut fp = [0u64; 256];
    let mut v = 0;
    while v < 256 {
        // Input byte 0 lands at shift 0.
        ip[v] = permute((v as u64) << 56, 64, &IP);
        // Input byte 3 lands at shift 0.
        fp[v] = permute((v as u64) << 32, 64, &FP);
        v += 1;
    }
    (ip, fp)
}

static BYTE_TABLES: ([u64; 256], [u64; 256]) = byte_tables();

#[inline(always)]
fn ip(x: u64) -> u64 {
    let t = &BYTE_TABLES.0;
    x.to_be_bytes()
        .iter()
        .enumerate()
        .fold(0, |acc, (k, &b)| acc | (t[b as usize] << k))
}

#[inline(always)]
fn fp(x: u64) -> u64 {
    let t = &BYTE_TABLES.1;
    x.to_be_bytes()
        .iter()
        .zip(FP_SHIFT)
        .fold(0, |acc, (&b, s)| acc | (t[b as usize] << s))
}

/// One round subkey, split for the rotated-half layout: `even` holds the
/// 6-bit key groups 0, 2, 4, 6 at bits 26, 18, 10, 2; `odd` holds groups
/// 7, 1, 3, 5 at bits 30 (wrapping around into bits 0 and 1), 22, 14, 6,
/// i.e. where they lie in the half itself, so the half needs no rotation
/// before the lookups.
#[derive(Clone, Copy, Default)]
struct Subkey {
    even: u32,
    odd: u32,
}

/// The 16 round subkeys of one DES key, in encryption order.
fn schedule(key: &[u8; 8]) -> [Subkey; 16] {
    let cd = permute(u64::from_be_bytes(*key), 64, &PC1);
    let (mut c, mut d) = ((cd >> 28) as u32, (cd & 0x0fff_ffff) as u32);
    let rot28 = |x: u32, n: u32| ((x << n) | (x >> (28 - n))) & 0x0fff_ffff;
    let mut out = [Subkey::default(); 16];
    for (sk, &n) in out.iter_mut().zip(SHIFTS.iter()) {
        c = rot28(c, n);
        d = rot28(d, n);
        let k48 = permute((u64::from(c) << 28) | u64::from(d), 56, &PC2);
        let group = |i: u32| ((k48 >> (42 - 6 * i)) & 0x3f) as u32;
        sk.even = (group(0) << 26) | (group(2) << 18) | (group(4) << 10) | (group(6) << 2);
        let odd = (group(7) << 26) | (group(1) << 18) | (group(3) << 10) | (group(5) << 2);
        sk.odd = odd.rotate_left(4);
    }
    out
}

/// One DES round, `l ^ f(r)`, on halves kept rotated right by one.
///
/// Shaped for latency, since sealing chains 48 rounds per block: the eight
/// S-box/P outputs occupy disjoint bits, so XOR, OR and addition agree on
/// them, and mixing the three stops LLVM from flattening the sum into one
/// chain of eight dependent XORs. The two lookups whose index takes one
/// instruction (a shift or a mask) meet `l` first, the other six pair up.
#[inline(always)]
fn round(l: u32, r: u32, k: Subkey) -> u32 {
    let t = r ^ k.even;
    let u = r ^ k.odd;
    let idx = |x: u32, s: u32| ((x >> s) & 0x3f) as usize;
    let early = SP[0][(t >> 26) as usize] | SP[6][idx(t, 2)];
    let p = SP[2][idx(t, 18)] | SP[4][idx(t, 10)];
    let q = SP[7][(u.rotate_left(2) & 0x3f) as usize] | SP[1][idx(u, 22)];
    let w = SP[3][idx(u, 14)] ^ SP[5][idx(u, 6)];
    ((l ^ early) ^ p) ^ q.wrapping_add(w)
}

/// DES-EDE3: encrypt with K1, decrypt with K2, encrypt with K3.
#[derive(Clone)]
pub(crate) struct TripleDes {
    /// 48 subkeys in the order they are applied.
    keys: [Subkey; 48],
    /// The same as `(even, odd)` pairs, for the 16-lane kernel.
    pairs: [SubkeyWords; 48],
}

impl TripleDes {
    /// Expands a 24-byte key (K1 | K2 | K3).
    pub(crate) fn new(key: &[u8; 24]) -> Self {
        let mut parts = [[0u8; 8]; 3];
        for (p, c) in parts.iter_mut().zip(key.chunks_exact(8)) {
            p.copy_from_slice(c);
        }
        let [k1, k2, k3] = parts.map(|p| schedule(&p));
        let mut keys = [Subkey::default(); 48];
        for (dst, src) in keys
            .iter_mut()
            .zip(k1.iter().chain(k2.iter().rev()).chain(k3.iter()))
        {
            *dst = *src;
        }
        let pairs = keys.map(|k| (k.even, k.odd));
        Self { keys, pairs }
    }

    /// [`Many64::encrypt_many`] without AVX-512.
    fn encrypt_by_fours(&self, inputs: &[u64; 16], n: usize) -> [u64; 16] {
        let mut out = [0u64; 16];
        let (groups, _) = inputs.as_chunks::<4>();
        let (outs, _) = out.as_chunks_mut::<4>();
        for (o, g) in outs.iter_mut().zip(groups).take(n.div_ceil(4)) {
            *o = self.encrypt_u64x4(*g);
        }
        out
    }

    #[inline(always)]
    fn encrypt_u64(&self, block: u64) -> u64 {
        let x = ip(block);
        let mut l = ((x >> 32) as u32).rotate_right(1);
        let mut r = (x as u32).rotate_right(1);
        for pass in self.keys.chunks_exact(16) {
            for pair in pass.chunks_exact(2) {
                l = round(l, r, pair[0]);
                r = round(r, l, pair[1]);
            }
            // Each pass ends with the halves swapped; the final and initial
            // permutations between passes cancel.
            core::mem::swap(&mut l, &mut r);
        }
        let pre = (u64::from(l.rotate_left(1)) << 32) | u64::from(r.rotate_left(1));
        fp(pre)
    }

    /// Four independent blocks in lockstep: the table lookups of one round
    /// of all four overlap instead of waiting on each other.
    #[inline(always)]
    fn encrypt_u64x4(&self, blocks: [u64; 4]) -> [u64; 4] {
        let x = blocks.map(ip);
        let mut l = x.map(|x| ((x >> 32) as u32).rotate_right(1));
        let mut r = x.map(|x| (x as u32).rotate_right(1));
        for pass in self.keys.chunks_exact(16) {
            for pair in pass.chunks_exact(2) {
                for (l, r) in l.iter_mut().zip(r.iter()) {
                    *l = round(*l, *r, pair[0]);
                }
                for (r, l) in r.iter_mut().zip(l.iter()) {
                    *r = round(*r, *l, pair[1]);
                }
            }
            core::mem::swap(&mut l, &mut r);
        }
        core::array::from_fn(|i| {
            fp((u64::from(l[i].rotate_left(1)) << 32) | u64::from(r[i].rotate_left(1)))
        })
    }
}

/// Opening goes 16 blocks at a time ([`super::cfb::decrypt_many`]).
impl Many64 for TripleDes {
    /// 16 lanes of AVX-512 when there are more than four blocks and the CPU
    /// has it, else four blocks at a time.
    fn encrypt_many(&self, inputs: &[u64; 16], n: usize) -> [u64; 16] {
        if n > 4 {
            let mut l = [0u32; 16];
            let mut r = [0u32; 16];
            for ((l, r), &x) in l.iter_mut().zip(r.iter_mut()).zip(inputs) {
                let x = ip(x);
                *l = ((x >> 32) as u32).rotate_right(1);
                *r = (x as u32).rotate_right(1);
            }
            if rounds16(&SP, &self.pairs, &mut l, &mut r) {
                return core::array::from_fn(|i| {
                    fp((u64::from(l[i].rotate_left(1)) << 32) | u64::from(r[i].rotate_left(1)))
                });
            }
        }
        self.encrypt_by_fours(inputs, n)
    }
}

/// Sealing keeps the CFB chain in two registers ([`super::cfb::encrypt_words`]).
impl super::cfb::Words64 for TripleDes {
    #[inline(always)]
    fn encrypt_words(&self, l: u32, r: u32) -> (u32, u32) {
        let out = self.encrypt_u64((u64::from(l) << 32) | u64::from(r));
        ((out >> 32) as u32, out as u32)
    }
}

impl BlockSizeUser for TripleDes {
    type BlockSize = U8;
}

/// Opening a CFB datagram encrypts ciphertext blocks that are all known:
/// four at a time.
impl ParBlocksSizeUser for TripleDes {
    type ParBlocksSize = U4;
}

impl BlockCipherEncrypt for TripleDes {
    #[inline]
    fn encrypt_with_backend(&self, f: impl BlockCipherEncClosure<BlockSize = U8>) {
        f.call(self)
    }
}

impl BlockCipherEncBackend for TripleDes {
    #[inline(always)]
    fn encrypt_block(&self, mut block: InOut<'_, '_, Block<Self>>) {
        let mut b = [0u8; 8];
        b.copy_from_slice(block.get_in());
        let out = self.encrypt_u64(u64::from_be_bytes(b));
        block.get_out().copy_from_slice(&out.to_be_bytes());
    }

    #[inline(always)]
    fn encrypt_par_blocks(&self, mut blocks: InOut<'_, '_, ParBlocks<Self>>) {
        let input = blocks.get_in();
        let words: [u64; 4] = core::array::from_fn(|i| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&input[i]);
            u64::from_be_bytes(b)
        });
        let out = self.encrypt_u64x4(words);
        for (o, w) in blocks.get_out().iter_mut().zip(out) {
            o.copy_from_slice(&w.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cipher::KeyInit;
    use proptest::prelude::*;

    #[test]
    fn table_permutations_match_the_bitwise_ones() {
        let mut x = 0x0123_4567_89ab_cdefu64;
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let y = ip(x);
            assert_eq!(y, permute(x, 64, &IP));
            assert_eq!(fp(y), x);
            assert_eq!(permute(y, 64, &FP), x);
        }
        for k in 0..64 {
            assert_eq!(ip(1 << k), permute(1 << k, 64, &IP), "bit {k}");
            assert_eq!(fp(1 << k), permute(1 << k, 64, &FP), "bit {k}");
        }
    }

    #[test]
    fn cfb_open_inverts_seal_at_every_length() {
        let t = TripleDes::new(&core::array::from_fn(|i| (i * 11 + 1) as u8));
        for len in 0..400 {
            let data: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
            let mut buf = data.clone();
            crate::crypto::cfb::encrypt_words(&t, &mut buf);
            let mut reference = buf.clone();
            crate::crypto::cfb::decrypt(&t, &mut reference);
            assert_eq!(reference, data, "len {len}");
            crate::crypto::cfb::decrypt_many(&t, &mut buf);
            assert_eq!(buf, data, "len {len}");
        }
    }

    #[test]
    fn known_answer() {
        // The classic single-DES example (key 133457799BBCDFF1, plaintext
        // 0123456789ABCDEF -> 85E813540F0AB405), as EDE3 with K1 = K2 = K3.
        let k = [0x13, 0x34, 0x57, 0x79, 0x9b, 0xbc, 0xdf, 0xf1];
        let mut key = [0u8; 24];
        for c in key.chunks_exact_mut(8) {
            c.copy_from_slice(&k);
        }
        let t = TripleDes::new(&key);
        assert_eq!(t.encrypt_u64(0x0123_4567_89ab_cdef), 0x85e8_1354_0f0a_b405);
    }

    proptest! {
        #[test]
        fn four_block_path_matches_single_blocks(key in any::<[u8; 24]>(), blocks in any::<[u64; 4]>()) {
            let t = TripleDes::new(&key);
            let four = t.encrypt_u64x4(blocks);
            for (b, f) in blocks.iter().zip(four) {
                prop_assert_eq!(t.encrypt_u64(*b), f);
            }
        }

        #[test]
        fn many_block_paths_match_single_blocks(key in any::<[u8; 24]>(), blocks in any::<[u64; 16]>(), n in 0usize..=16) {
            let t = TripleDes::new(&key);
            let many = t.encrypt_many(&blocks, n);
            let fours = t.encrypt_by_fours(&blocks, n);
            for i in 0..n {
                let one = t.encrypt_u64(blocks[i]);
                prop_assert_eq!(many[i], one, "block {} of {}", i, n);
                prop_assert_eq!(fours[i], one, "block {} of {}", i, n);
            }
        }

        #[test]
        fn cfb_open_matches_the_generic_cfb(key in any::<[u8; 24]>(), data in proptest::collection::vec(any::<u8>(), 0..1500)) {
            let t = TripleDes::new(&key);
            let mut ours = data.clone();
            crate::crypto::cfb::decrypt_many(&t, &mut ours);
            let mut reference = data.clone();
            crate::crypto::cfb::decrypt(&t, &mut reference);
            prop_assert_eq!(ours, reference);
        }

        #[test]
        fn matches_the_des_crate(key in any::<[u8; 24]>(), blocks in any::<[[u8; 8]; 4]>()) {
            let ours = TripleDes::new(&key);
            let reference = des::TdesEde3::new_from_slice(&key).unwrap();
            for b in blocks {
                let mut x = Block::<TripleDes>::from(b);
                let mut y = x;
                ours.encrypt_block_inplace(&mut x);
                BlockCipherEncrypt::encrypt_block(&reference, &mut y);
                prop_assert_eq!(x, y);
            }
        }
    }
}
