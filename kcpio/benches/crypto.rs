//! Packet-crypto benchmarks named and sized like kcp-go v5.6.72's
//! `crypt_test.go`, so the two can be run side by side and compared per packet:
//!
//! - `crypt/AES128`, `crypt/Salsa20`, ... (kcp-go's `benchCrypt`): the cipher
//!   transform of a 1500-byte buffer, encrypt then decrypt, no checksum.
//! - `crypt/CRC32`: CRC-32/IEEE of 1024 bytes.
//! - `crypt/CFB_AES_128_CRC32`, `crypt/CFB_Salsa20_CRC32`: CRC32 and in-place
//!   encryption of a 1400-byte datagram, i.e. our `seal` of a 1380-byte payload.
//! - `crypt/AEAD_AES_128_GCM`: AES-128-GCM seal of a 1400-byte buffer's bytes
//!   past the nonce, i.e. our `seal` of a 1388-byte payload.
//!
//! Plus `packet/<method>`: the full `seal` + `open` of a 1500-byte datagram for
//! every kcptun method (no kcp-go counterpart; it includes both CRCs).
//!
//! With `KCPIO_BENCH_CPU_MS=M` set, criterion is skipped: every case (or those
//! whose name contains `KCPIO_BENCH_FILTER`) runs for `M` ms of CPU time and
//! prints the CPU time per iteration of the benchmark thread, which a loaded
//! machine disturbs far less than wall-clock time. `lab/scripts/crypto_vs_kcpgo.sh` uses that mode against
//! kcp-go's own benchmarks and prints the per-packet ratios.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use kcpio::crypto::{MAX_DATAGRAM, Method, PacketCrypto};
use kcpio_testkit::cpu::ns_per_call;

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

/// One benchmark: its name, bytes per iteration, and the iteration itself.
struct Case {
    name: String,
    bytes: u64,
    run: Box<dyn FnMut()>,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let crypt = [
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
    for (name, method) in crypt {
        let pc = crypto(method);
        // Decrypting restores the buffer, so every round starts from the same bytes.
        let mut buf = noise(MAX_DATAGRAM);
        out.push(Case {
            name: format!("crypt/{name}"),
            bytes: 2 * MAX_DATAGRAM as u64,
            run: Box::new(move || {
                pc.encrypt_raw(black_box(&mut buf));
                pc.decrypt_raw(black_box(&mut buf));
            }),
        });
    }

    let content = vec![0u8; 1024];
    out.push(Case {
        name: "crypt/CRC32".into(),
        bytes: content.len() as u64,
        run: Box::new(move || {
            black_box(PacketCrypto::checksum(black_box(&content)));
        }),
    });

    let seal = [
        ("CFB_AES_128_CRC32", Method::Aes128),
        ("AEAD_AES_128_GCM", Method::Aes128Gcm),
        ("CFB_Salsa20_CRC32", Method::Salsa20),
    ];
    for (name, method) in seal {
        let pc = crypto(method);
        // kcp-go seals the bytes after the nonce of a 1400-byte buffer.
        let payload = 1400 - pc.header_len();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let nonce = vec![0x5au8; pc.nonce_len()];
        out.push(Case {
            name: format!("crypt/{name}"),
            bytes: 1400,
            run: Box::new(move || {
                black_box(pc.seal(black_box(&mut buf), payload, &nonce).unwrap());
            }),
        });
    }

    for method in Method::ALL {
        let pc = crypto(method);
        let payload = MAX_DATAGRAM - pc.overhead();
        let mut buf = noise(MAX_DATAGRAM);
        let nonce = vec![0x5au8; pc.nonce_len()];
        out.push(Case {
            name: format!("packet/{}", method.name()),
            bytes: 2 * MAX_DATAGRAM as u64,
            run: Box::new(move || {
                let n = pc.seal(black_box(&mut buf), payload, &nonce).unwrap();
                black_box(pc.open(black_box(&mut buf[..n])).unwrap());
            }),
        });
    }
    out
}

fn criterion_benches(c: &mut Criterion) {
    for mut case in cases() {
        let (group, name) = case.name.split_once('/').unwrap();
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Bytes(case.bytes));
        g.bench_function(name, |b| b.iter(&mut case.run));
        g.finish();
    }
}

/// Runs each case until it has used `millis` of CPU time (schedstat only
/// advances at scheduler ticks, so runs must be long) and prints the CPU time
/// per iteration.
fn cpu_time_mode(millis: u64, filter: &str) {
    let budget = Duration::from_millis(millis);
    for mut case in cases() {
        if !case.name.contains(filter) {
            continue;
        }
        for _ in 0..100 {
            (case.run)();
        }
        let ns = ns_per_call(budget, &mut case.run);
        println!("{} {ns:.1} ns/op cpu", case.name);
    }
}

fn main() {
    if let Ok(ms) = std::env::var("KCPIO_BENCH_CPU_MS") {
        let filter = std::env::var("KCPIO_BENCH_FILTER").unwrap_or_default();
        cpu_time_mode(ms.parse().expect("KCPIO_BENCH_CPU_MS: a number"), &filter);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c);
    c.final_summary();
}
