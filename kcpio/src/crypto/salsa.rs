//! Salsa20/20 as kcp-go frames it: a 32-byte key, the datagram's first 8
//! bytes as the nonce, the keystream from block 0 over the rest.
//!
//! The `salsa20` crate computes one block at a time in scalar code, about a
//! third of the speed of kcp-go's SSE2 assembly. The keystream comes instead
//! from `crate::simd::salsa20`, which runs 4 (SSE2) or 8 (AVX2) blocks at once
//! with runtime dispatch; the crate stays the reference in the tests below.

/// "expand 32-byte k" as four little-endian words.
const SIGMA: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

/// A Salsa20 key, laid out as the words of the initial state.
#[derive(Clone)]
pub(crate) struct Salsa20 {
    key: [u32; 8],
}

impl Salsa20 {
    /// Prepares a 32-byte key.
    pub(crate) fn new(key: &[u8; 32]) -> Self {
        let mut words = [0u32; 8];
        for (w, c) in words.iter_mut().zip(key.chunks_exact(4)) {
            let mut b = [0u8; 4];
            b.copy_from_slice(c);
            *w = u32::from_le_bytes(b);
        }
        Self { key: words }
    }

    /// The initial state for `nonce` (block counter words left at zero).
    fn state(&self, nonce: &[u8; 8]) -> [u32; 16] {
        let [n0, n1, n2, n3, n4, n5, n6, n7] = *nonce;
        let k = &self.key;
        [
            SIGMA[0],
            k[0],
            k[1],
            k[2],
            k[3],
            SIGMA[1],
            u32::from_le_bytes([n0, n1, n2, n3]),
            u32::from_le_bytes([n4, n5, n6, n7]),
            0,
            0,
            SIGMA[2],
            k[4],
            k[5],
            k[6],
            k[7],
            SIGMA[3],
        ]
    }

    /// XORs the keystream for `nonce`, starting at block 0, over `data`.
    pub(crate) fn apply_keystream(&self, nonce: &[u8; 8], data: &mut [u8]) {
        crate::simd::salsa20::xor_keystream(&self.state(nonce), data);
    }

    /// The same with the portable scalar code only (tests compare the two).
    #[cfg(test)]
    fn apply_keystream_portable(&self, nonce: &[u8; 8], data: &mut [u8]) {
        crate::simd::salsa20::portable::xor_keystream(&self.state(nonce), data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cipher::{KeyIvInit, StreamCipher};
    use proptest::prelude::*;

    fn reference(key: &[u8; 32], nonce: &[u8; 8], data: &mut [u8]) {
        let mut c = salsa20::Salsa20::new(&(*key).into(), &(*nonce).into());
        c.apply_keystream(data);
    }

    #[test]
    fn lengths_around_batch_edges_match_the_crate() {
        let key = [0x11u8; 32];
        let nonce = [0x22u8; 8];
        let s = Salsa20::new(&key);
        for len in [
            0, 1, 63, 64, 65, 255, 256, 257, 511, 512, 513, 1492, 1500, 4096,
        ] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut theirs = data.clone();
            reference(&key, &nonce, &mut theirs);
            let mut ours = data.clone();
            s.apply_keystream(&nonce, &mut ours);
            assert_eq!(ours, theirs, "dispatched, len {len}");
            let mut portable = data.clone();
            s.apply_keystream_portable(&nonce, &mut portable);
            assert_eq!(portable, theirs, "portable, len {len}");
        }
    }

    proptest! {
        #[test]
        fn matches_the_salsa20_crate(
            key in any::<[u8; 32]>(),
            nonce in any::<[u8; 8]>(),
            data in proptest::collection::vec(any::<u8>(), 0..2000),
        ) {
            let s = Salsa20::new(&key);
            let mut theirs = data.clone();
            reference(&key, &nonce, &mut theirs);
            let mut ours = data.clone();
            s.apply_keystream(&nonce, &mut ours);
            prop_assert_eq!(&ours, &theirs);
            let mut portable = data;
            s.apply_keystream_portable(&nonce, &mut portable);
            prop_assert_eq!(&portable, &theirs);
        }
    }
}
