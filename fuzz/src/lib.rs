//! Shared pieces of the fuzz targets: an input reader, the key the seed
//! vectors use, a live-heap counter, the crypto round-trip checks, and the
//! harness of the extension targets.

pub mod arq;
pub mod ext;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use kcpio::crypto::{Method, PacketCrypto};

/// The key `tests/vectors/crypto.json` derives from its passphrase
/// (`kcpio-test-vector-passphrase`), so seeds taken from it open.
pub const KEY: [u8; 32] = [
    0x0e, 0xdb, 0x36, 0x82, 0x9a, 0xe4, 0x7c, 0xc6, 0xb1, 0xdb, 0x6f, 0xc6, 0x12, 0x17, 0x99, 0x58,
    0xb3, 0x7e, 0xf5, 0x5e, 0x9e, 0x69, 0x0a, 0x00, 0xdc, 0x97, 0xb8, 0x35, 0x00, 0xdc, 0x55, 0x90,
];

/// The CFB block-cipher methods.
pub const CFB: [Method; 10] = [
    Method::Aes,
    Method::Aes128,
    Method::Aes192,
    Method::Blowfish,
    Method::Twofish,
    Method::Cast5,
    Method::TripleDes,
    Method::Tea,
    Method::Xtea,
    Method::Sm4,
];

/// The methods with no cipher or a keyless-to-forge one.
pub const PLAIN: [Method; 3] = [Method::Xor, Method::None, Method::Null];

/// Every method, in the order the pipeline target's selector byte uses.
pub const ALL: [Method; 15] = Method::ALL;

/// `method` keyed with [`KEY`]'s prefix.
#[must_use]
pub fn crypto(method: Method) -> PacketCrypto {
    PacketCrypto::new(method, &KEY[..method.key_len()]).expect("valid key length")
}

/// Consumes fuzz input front to back; reads past the end give zeros.
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    #[must_use]
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// A record: a u16 length then that many bytes (fewer at the end).
    pub fn record(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16());
        self.bytes(n)
    }
}

/// A global allocator that counts live heap bytes, so targets can assert
/// that state stays bounded whatever arrives.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged and only
// keeps a counter beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Live heap bytes right now (all threads).
#[must_use]
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Opens `datagram` with one of `methods` (picked by its first byte) and
/// checks the invariants of the crypto layer:
/// - an opened datagram's plaintext lies between the header and the trailer;
/// - sealing that plaintext again with the datagram's own nonce gives back
///   the datagram byte for byte (open is the inverse of seal);
/// - sealing the input as a payload and opening it gives the payload back.
pub fn check_crypto(methods: &[Method], cryptos: &[PacketCrypto], input: &[u8]) {
    let Some((&sel, datagram)) = input.split_first() else {
        return;
    };
    let i = usize::from(sel) % methods.len();
    let c = &cryptos[i];
    assert_eq!(c.method(), methods[i]);
    let (header, trailer) = (c.header_len(), c.trailer_len());

    // 1. Open whatever arrived.
    let mut buf = datagram.to_vec();
    if let Ok(range) = c.open(&mut buf) {
        assert_eq!(range.start, header, "{:?}", c.method());
        assert_eq!(range.end + trailer, datagram.len(), "{:?}", c.method());
        let plain = buf[range.clone()].to_vec();
        // The nonce as it was before sealing: CFB, xor and none encrypt it
        // with the rest, so it is read back from the opened buffer.
        let nonce = &buf[..c.nonce_len()];
        let mut again = vec![0u8; datagram.len()];
        again[header..header + plain.len()].copy_from_slice(&plain);
        let n = c
            .seal(&mut again, plain.len(), nonce)
            .expect("an opened datagram seals again");
        assert_eq!(n, datagram.len());
        assert_eq!(
            again,
            datagram,
            "{:?}: open then seal is not identity",
            c.method()
        );
    }

    // 2. Seal the input as a payload, open it back.
    let nonce_len = c.nonce_len();
    let nonce: Vec<u8> = (0..nonce_len).map(|k| sel.wrapping_add(k as u8)).collect();
    let payload = datagram;
    let mut out = vec![0u8; header + payload.len() + trailer];
    out[header..header + payload.len()].copy_from_slice(payload);
    match c.seal(&mut out, payload.len(), &nonce) {
        Ok(n) => {
            assert_eq!(n, out.len());
            let range = c.open(&mut out[..n]).expect("a sealed datagram opens");
            assert_eq!(&out[range], payload, "{:?}: seal then open", c.method());
        }
        Err(_) => assert!(header + payload.len() + trailer > 1500),
    }
}
