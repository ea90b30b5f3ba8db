//! Packet-crypto benchmarks named and sized like kcp-go v5.6.72's
//! `crypt_test.go`, so the two can be run side by side and compared per packet:
//!
//! - `AES128`, `Salsa20`, ... (kcp-go's `benchCrypt`): the cipher transform of
//!   a 1500-byte buffer, encrypt then decrypt, no checksum.
//! - `CRC32`: CRC-32/IEEE of 1024 bytes.
//! - `CFB_AES_128_CRC32`, `CFB_Salsa20_CRC32`: CRC32 and in-place encryption of
//!   a 1400-byte datagram, i.e. our `seal` with a 1380-byte payload.
//! - `AEAD_AES_128_GCM`: AES-128-GCM seal of a 1400-byte buffer's bytes past the
//!   nonce, i.e. our `seal` with a 1388-byte payload.
//!
//! Plus `packet/<method>`: the full `seal` + `open` of a 1500-byte datagram for
//! every kcptun method (no kcp-go counterpart; it includes both CRCs).
//!
//! `scripts/crypto_vs_kcpgo.sh` runs kcp-go's benchmarks and these in one
//! sitting and prints the per-packet ratios.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_main};
use kcpio::crypto::{MAX_DATAGRAM, Method, PacketCrypto};

/// kcp-go's benchmark key bytes are arbitrary; any fixed key will do.
fn key(method: Method) -> Vec<u8> {
    (0..method.key_len()).map(|i| i as u8 ^ 0xa5).collect()
}

fn crypto(method: Method) -> PacketCrypto {
    PacketCrypto::new(method, &key(method)).unwrap()
}

/// Pseudo-random bytes (kcp-go fills its buffers from crypto/rand).
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn bench_crypt(c: &mut Criterion) {
    let cases = [
        ("SM4", Method::Sm4),
        ("AES128", Method::Aes128),
        ("AES192", Method::Aes192),
        ("AES256", Method::Aes),
        ("TEA", Method::Tea),
        ("XOR", Method::Xor),
        ("Blowfish", Method::Blowfish),
        ("None", Method::None),
        ("Cast5", Method::Cast5),
        ("3DES", Method::TripleDes),
        ("Twofish", Method::Twofish),
        ("XTEA", Method::Xtea),
        ("Salsa20", Method::Salsa20),
    ];
    let mut g = c.benchmark_group("crypt");
    g.throughput(Throughput::Bytes(2 * MAX_DATAGRAM as u64));
    for (name, method) in cases {
        let pc = crypto(method);
        // Decrypting restores the buffer, so every round starts from the same bytes.
        let mut buf = noise(MAX_DATAGRAM);
        g.bench_function(name, |b| {
            b.iter(|| {
                pc.encrypt_raw(black_box(&mut buf));
                pc.decrypt_raw(black_box(&mut buf));
            })
        });
    }
    g.finish();
}

fn bench_crc(c: &mut Criterion) {
    let content = vec![0u8; 1024];
    let mut g = c.benchmark_group("crypt");
    g.throughput(Throughput::Bytes(content.len() as u64));
    g.bench_function("CRC32", |b| b.iter(|| crc32fast::hash(black_box(&content))));
    g.finish();
}

fn bench_seal(c: &mut Criterion) {
    let cases = [
        ("CFB_AES_128_CRC32", Method::Aes128),
        ("AEAD_AES_128_GCM", Method::Aes128Gcm),
        ("CFB_Salsa20_CRC32", Method::Salsa20),
    ];
    let mut g = c.benchmark_group("crypt");
    g.throughput(Throughput::Bytes(1400));
    for (name, method) in cases {
        let pc = crypto(method);
        // kcp-go seals the bytes after the nonce of a 1400-byte buffer.
        let payload = 1400 - pc.header_len();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let nonce = vec![0x5au8; pc.nonce_len()];
        g.bench_function(name, |b| {
            b.iter(|| pc.seal(black_box(&mut buf), payload, &nonce).unwrap())
        });
    }
    g.finish();
}

fn bench_packet(c: &mut Criterion) {
    let mut g = c.benchmark_group("packet");
    g.throughput(Throughput::Bytes(2 * MAX_DATAGRAM as u64));
    for method in Method::ALL {
        let pc = crypto(method);
        let payload = MAX_DATAGRAM - pc.overhead();
        let mut buf = noise(MAX_DATAGRAM);
        let nonce = vec![0x5au8; pc.nonce_len()];
        g.bench_function(method.name(), |b| {
            b.iter(|| {
                let n = pc.seal(black_box(&mut buf), payload, &nonce).unwrap();
                pc.open(black_box(&mut buf[..n])).unwrap()
            })
        });
    }
    g.finish();
}

// `criterion_group!` expands to an undocumented `pub fn`; a private module
// keeps it out of `missing_docs`.
mod entry {
    criterion::criterion_group!(
        benches,
        super::bench_crypt,
        super::bench_crc,
        super::bench_seal,
        super::bench_packet
    );
}
criterion_main!(entry::benches);
