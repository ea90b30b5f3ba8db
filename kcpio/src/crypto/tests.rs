use super::*;
use proptest::prelude::*;

/// A key of the method's length with a fixed pattern.
fn key_for(method: Method) -> Vec<u8> {
    (0..method.key_len())
        .map(|i| (i as u8).wrapping_mul(37) ^ 0x5a)
        .collect()
}

fn crypto(method: Method) -> PacketCrypto {
    PacketCrypto::new(method, &key_for(method)).unwrap()
}

fn nonce_for(c: &PacketCrypto, seed: u8) -> Vec<u8> {
    (0..c.nonce_len())
        .map(|i| seed.wrapping_add(i as u8))
        .collect()
}

/// Seals `payload` and returns the datagram.
fn seal_vec(c: &PacketCrypto, payload: &[u8], seed: u8) -> Vec<u8> {
    let mut buf = vec![0u8; c.overhead() + payload.len()];
    let h = c.header_len();
    buf[h..h + payload.len()].copy_from_slice(payload);
    let n = c
        .seal(&mut buf, payload.len(), &nonce_for(c, seed))
        .unwrap();
    assert_eq!(n, buf.len());
    buf
}

#[test]
fn names_round_trip_and_unknown_names_are_refused() {
    for m in Method::ALL {
        assert_eq!(Method::from_name(m.name()), Some(m));
        assert_eq!(m.to_string(), m.name());
    }
    for bad in ["", "AES", "aes256", "aes-256", "chacha20", "3DES ", "gcm"] {
        assert_eq!(Method::from_name(bad), None, "{bad:?}");
    }
}

#[test]
fn header_trailer_and_nonce_lengths() {
    for m in Method::ALL {
        let c = crypto(m);
        let (h, t, n) = match m {
            Method::Null => (0, 0, 0),
            Method::Aes128Gcm => (12, 16, 12),
            _ => (20, 0, 16),
        };
        assert_eq!(
            (c.header_len(), c.trailer_len(), c.nonce_len()),
            (h, t, n),
            "{m}"
        );
        assert_eq!(c.overhead(), h + t);
        assert_eq!(c.method(), m);
    }
}

#[test]
fn wrong_key_lengths_are_typed_errors() {
    for m in Method::ALL {
        if matches!(m, Method::Null | Method::None) {
            // Both ignore the key.
            assert!(PacketCrypto::new(m, &[]).is_ok());
            assert!(PacketCrypto::new(m, &[1; 7]).is_ok());
            continue;
        }
        for len in [0, 1, m.key_len() - 1, m.key_len() + 1, 64] {
            let err = PacketCrypto::new(m, &vec![1u8; len]).unwrap_err();
            assert_eq!(
                err,
                KeyError {
                    method: m,
                    expected: m.key_len(),
                    actual: len
                }
            );
            assert!(err.to_string().contains(m.name()));
        }
    }
}

#[test]
fn seal_refuses_bad_buffers_and_nonces_without_writing() {
    for m in Method::ALL {
        let c = crypto(m);
        let nonce = nonce_for(&c, 1);
        let payload_len = 100;
        let needed = c.overhead() + payload_len;

        let mut small = vec![0xeeu8; needed - 1];
        assert_eq!(
            c.seal(&mut small, payload_len, &nonce),
            Err(SealError::BufferTooSmall {
                needed,
                available: needed - 1
            }),
            "{m}"
        );
        assert!(small.iter().all(|&b| b == 0xee));

        let mut buf = vec![0xeeu8; MAX_DATAGRAM + 100];
        let too_long = MAX_DATAGRAM - c.overhead() + 1;
        assert_eq!(
            c.seal(&mut buf, too_long, &nonce),
            Err(SealError::TooLarge {
                len: MAX_DATAGRAM + 1
            })
        );
        assert_eq!(
            c.seal(&mut buf, usize::MAX, &nonce),
            Err(SealError::TooLarge { len: usize::MAX })
        );
        let wrong_nonce = vec![0u8; c.nonce_len() + 1];
        assert_eq!(
            c.seal(&mut buf, payload_len, &wrong_nonce),
            Err(SealError::NonceLength {
                expected: c.nonce_len(),
                actual: c.nonce_len() + 1
            })
        );
        assert!(buf.iter().all(|&b| b == 0xee));

        // Exactly MAX_DATAGRAM fits, and a longer buffer is fine.
        let max_payload = MAX_DATAGRAM - c.overhead();
        assert_eq!(c.seal(&mut buf, max_payload, &nonce), Ok(MAX_DATAGRAM));
    }
}

#[test]
fn short_and_oversized_datagrams_are_typed_errors() {
    for m in Method::ALL {
        let c = crypto(m);
        for len in 0..c.overhead() {
            let mut d = vec![0u8; len];
            assert_eq!(
                c.open(&mut d),
                Err(OpenError::Truncated {
                    len,
                    min: c.overhead()
                }),
                "{m}"
            );
        }
        let mut big = vec![0u8; MAX_DATAGRAM + 1];
        assert_eq!(
            c.open(&mut big),
            Err(OpenError::TooLarge {
                len: MAX_DATAGRAM + 1
            })
        );
    }
}

#[test]
fn empty_payloads_round_trip() {
    for m in Method::ALL {
        let c = crypto(m);
        let mut d = seal_vec(&c, &[], 9);
        assert_eq!(d.len(), c.overhead());
        let r = c.open(&mut d).unwrap();
        assert!(r.is_empty(), "{m}");
    }
}

#[test]
fn forged_datagrams_are_rejected() {
    // An attacker without the key writing a nonce, a CRC of its chosen
    // payload and the payload, as if the method were `none`.
    let payload = b"\x01\x02\x03\x04\x51\x00\x20\x00forged";
    let plain = seal_vec(&crypto(Method::None), payload, 3);
    for m in Method::ALL {
        if matches!(m, Method::Null | Method::None) {
            continue;
        }
        let c = crypto(m);
        let mut d = plain.clone();
        d.resize(plain.len().max(c.overhead()), 0);
        let want = if m == Method::Aes128Gcm {
            OpenError::BadTag
        } else {
            OpenError::BadChecksum
        };
        assert_eq!(c.open(&mut d), Err(want), "{m}");
    }
}

#[test]
fn the_nonce_changes_every_byte_of_the_ciphertext_chain() {
    // kcp-go's fixed IV is harmless only because the random nonce leads the
    // chain: two seals of one payload with different nonces must differ in
    // every CFB block after the first.
    for m in [Method::Aes128, Method::Blowfish, Method::Tea, Method::Sm4] {
        let c = crypto(m);
        let payload = [0x42u8; 200];
        let a = seal_vec(&c, &payload, 1);
        let b = seal_vec(&c, &payload, 2);
        let block = if matches!(m, Method::Blowfish | Method::Tea) {
            8
        } else {
            16
        };
        for (i, (x, y)) in a.chunks(block).zip(b.chunks(block)).enumerate().skip(1) {
            assert_ne!(x, y, "{m}: block {i}");
        }
    }
}

/// RustCrypto's `cfb-mode` is the reference for the CFB variant (WIRE.md 5.2).
fn cfb_mode_reference<C>(cipher: C, iv: &[u8], buf: &mut [u8])
where
    C: cipher::BlockCipherEncrypt,
{
    use cipher::InnerIvInit;
    let iv = cipher::Iv::<cfb_mode::Encryptor<C>>::try_from(iv).unwrap();
    cfb_mode::Encryptor::inner_iv_init(cipher, &iv).encrypt(buf);
}

#[test]
fn our_cfb_matches_cfb_mode_at_every_length() {
    // Covers no full block, only a tail, and every split between AES-NI's
    // eight-block groups, single blocks and the tail.
    let aes = aes::Aes128::new(&[7u8; 16].into());
    let cast = cast5::Cast5::new_from_slice(&[9u8; 16]).unwrap();
    for len in 0..400 {
        let data: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();

        let mut ours = data.clone();
        cfb::encrypt(&aes, &mut ours);
        let mut reference = data.clone();
        cfb_mode_reference(aes.clone(), &cfb::IV, &mut reference);
        assert_eq!(ours, reference, "aes, len {len}");
        cfb::decrypt(&aes, &mut ours);
        assert_eq!(ours, data, "aes, len {len}");

        let mut ours = data.clone();
        cfb::encrypt(&cast, &mut ours);
        let mut reference = data.clone();
        cfb_mode_reference(cast.clone(), &cfb::IV[..8], &mut reference);
        assert_eq!(ours, reference, "cast5, len {len}");
        cfb::decrypt(&cast, &mut ours);
        assert_eq!(ours, data, "cast5, len {len}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn our_cfb_matches_cfb_mode(len in 0usize..300, seed in any::<u8>()) {
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
        let key16 = [seed; 16];

        let aes = aes::Aes128::new(&key16.into());
        let mut ours = data.clone();
        cfb::encrypt(&aes, &mut ours);
        let mut reference = data.clone();
        cfb_mode_reference(aes.clone(), &cfb::IV, &mut reference);
        prop_assert_eq!(&ours, &reference);
        cfb::decrypt(&aes, &mut ours);
        prop_assert_eq!(&ours, &data);

        let cast = cast5::Cast5::new_from_slice(&key16).unwrap();
        let mut ours = data.clone();
        cfb::encrypt(&cast, &mut ours);
        let mut reference = data.clone();
        cfb_mode_reference(cast.clone(), &cfb::IV[..8], &mut reference);
        prop_assert_eq!(&ours, &reference);
        cfb::decrypt(&cast, &mut ours);
        prop_assert_eq!(&ours, &data);
    }

    #[test]
    fn random_bytes_never_panic_open(
        method in proptest::sample::select(Method::ALL.to_vec()),
        mut data in proptest::collection::vec(any::<u8>(), 0..1600),
    ) {
        let c = crypto(method);
        let len = data.len();
        match c.open(&mut data) {
            Ok(r) => {
                prop_assert!(r.start <= r.end && r.end <= len);
                // Only the framings without a secret accept random bytes
                // (up to a 2^-32 CRC collision, which these seeds do not hit).
                prop_assert!(matches!(method, Method::Null));
            }
            Err(OpenError::Truncated { len: l, min }) => {
                prop_assert_eq!(l, len);
                prop_assert!(len < min);
            }
            Err(OpenError::TooLarge { len: l }) => {
                prop_assert_eq!(l, len);
                prop_assert!(len > MAX_DATAGRAM);
            }
            Err(OpenError::BadChecksum | OpenError::BadTag) => {}
        }
    }

    #[test]
    fn seal_then_open_round_trips(
        method in proptest::sample::select(Method::ALL.to_vec()),
        payload in proptest::collection::vec(any::<u8>(), 0..1472),
        seed in any::<u8>(),
        slack in 0usize..64,
    ) {
        let c = crypto(method);
        let h = c.header_len();
        let mut buf = vec![0u8; c.overhead() + payload.len() + slack];
        buf[h..h + payload.len()].copy_from_slice(&payload);
        let n = c.seal(&mut buf, payload.len(), &nonce_for(&c, seed)).unwrap();
        prop_assert_eq!(n, c.overhead() + payload.len());
        if !matches!(method, Method::Null | Method::None) && payload.len() >= 16 {
            prop_assert_ne!(&buf[h..h + payload.len()], &payload[..]);
        }
        let range = c.open(&mut buf[..n]).unwrap();
        prop_assert_eq!(range.clone(), h..h + payload.len());
        prop_assert_eq!(&buf[range], &payload[..]);
    }

    #[test]
    fn a_flipped_bit_after_the_nonce_is_caught(
        method in proptest::sample::select(Method::ALL.to_vec()),
        payload in proptest::collection::vec(any::<u8>(), 1..600),
        pos in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        prop_assume!(method != Method::Null);
        let c = crypto(method);
        let mut d = seal_vec(&c, &payload, 5);
        // CFB framings: the nonce is not covered by the CRC.
        let first = if c.header_len() == 20 { 16 } else { 0 };
        let i = first + pos.index(d.len() - first);
        d[i] ^= 1 << bit;
        prop_assert!(c.open(&mut d).is_err());
    }
}

#[test]
fn packet_crypto_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<PacketCrypto>();
}

#[test]
fn gcm_fallback_and_kernel_agree() {
    // The crate path runs only on CPUs without AES-NI/PCLMULQDQ: check it
    // against the kernel path (when there is one) and round-trip it.
    let key = [0x42u8; 16];
    let fallback = Gcm {
        fast: None,
        generic: aes_gcm::Aes128Gcm::new(&key.into()),
    };
    let fast = Gcm {
        fast: crate::simd::gcm::Aes128GcmNi::new(&key),
        generic: aes_gcm::Aes128Gcm::new(&key.into()),
    };
    for len in [0usize, 1, 15, 16, 17, 127, 128, 129, 1388] {
        let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let nonce = [len as u8; 12];
        let mut a = data.clone();
        let ta = fallback.seal(&nonce, &mut a).unwrap();
        let mut b = data.clone();
        let tb = fast.seal(&nonce, &mut b).unwrap();
        assert_eq!((&a, ta), (&b, tb), "len {len}");
        assert!(fallback.open(&nonce, &mut b, &tb));
        assert_eq!(b, data);
        let mut bad = ta;
        bad[0] ^= 1;
        assert!(!fallback.open(&nonce, &mut a, &bad));
    }
}

/// The AES-NI CFB sealing kernel against `cfb-mode` over the `aes` crate.
fn aes_cfb_kernel_matches_cfb_mode_for(key: &[u8], data: &[u8]) -> Result<(), TestCaseError> {
    let Some(kernel) = crate::simd::aes_cfb::AesCfbNi::new(key) else {
        return Ok(()); // no AES-NI: the crate path is the only one
    };
    let mut ours = data.to_vec();
    kernel.encrypt(&mut ours);
    let mut reference = data.to_vec();
    match key.len() {
        16 => cfb_mode_reference(
            aes::Aes128::new_from_slice(key).unwrap(),
            &cfb::IV,
            &mut reference,
        ),
        24 => cfb_mode_reference(
            aes::Aes192::new_from_slice(key).unwrap(),
            &cfb::IV,
            &mut reference,
        ),
        _ => cfb_mode_reference(
            aes::Aes256::new_from_slice(key).unwrap(),
            &cfb::IV,
            &mut reference,
        ),
    }
    prop_assert_eq!(
        ours,
        reference,
        "key of {} bytes, len {}",
        key.len(),
        data.len()
    );
    Ok(())
}

#[test]
fn aes_cfb_kernel_matches_cfb_mode_at_every_length() {
    for key_len in [16usize, 24, 32] {
        let key: Vec<u8> = (0..key_len).map(|i| (i * 29 + 3) as u8).collect();
        for len in 0..400 {
            let data: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
            aes_cfb_kernel_matches_cfb_mode_for(&key, &data).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn aes_cfb_kernel_matches_cfb_mode(
        key_len in proptest::sample::select(vec![16usize, 24, 32]),
        key in any::<[u8; 32]>(),
        data in proptest::collection::vec(any::<u8>(), 0..1500),
    ) {
        aes_cfb_kernel_matches_cfb_mode_for(&key[..key_len], &data)?;
    }
}

#[test]
fn aes_cfb_without_the_kernel_matches_with_it() {
    // The crate path seals only on CPUs without AES-NI: round-trip it
    // against the kernel's output through `open`'s shared path.
    let key = [0x3cu8; 32];
    let fallback = AesCfb {
        cipher: aes::Aes256::new(&key.into()),
        seal: None,
    };
    let fast = AesCfb::new(aes::Aes256::new(&key.into()), &key);
    for len in [0usize, 1, 15, 16, 17, 127, 128, 129, 1400] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let mut a = data.clone();
        fallback.apply(&mut a, Direction::Seal);
        let mut b = data.clone();
        fast.apply(&mut b, Direction::Seal);
        assert_eq!(a, b, "len {len}");
        fast.apply(&mut b, Direction::Open);
        assert_eq!(b, data, "len {len}");
    }
}
