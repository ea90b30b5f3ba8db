//! Per-datagram sealing, byte-compatible with kcp-go v5.6.72.
//!
//! Every outgoing datagram is sealed on its own, in place, and every incoming
//! one opened on its own, in place. Two framings exist:
//!
//! ```text
//! CFB family, salsa20, xor, none:  | nonce 16 | crc32 LE 4 | payload |        (all of it encrypted,
//!                                                                           salsa20 leaves nonce[..8] clear)
//! aes-128-gcm (AEAD):              | nonce 12 | ciphertext of payload | tag 16 |
//! null:                            | payload |
//! ```
//!
//! The CRC is CRC-32/IEEE over the payload. Nonces come from the caller (the
//! driver's CSPRNG); this module has no randomness, clock or I/O of its own.
//! Key schedules are expanded once in [`PacketCrypto::new`]; [`PacketCrypto::seal`]
//! and [`PacketCrypto::open`] neither allocate nor panic, whatever the input.
//!
//! ```
//! use kcpio::crypto::{derive_key, Method, PacketCrypto};
//!
//! let method = Method::from_name("aes-128").unwrap();
//! let key = derive_key("it's a secrect");
//! let crypto = PacketCrypto::new(method, &key[..method.key_len()]).unwrap();
//!
//! let payload = b"a KCP packet";
//! let mut buf = [0u8; 1500];
//! let h = crypto.header_len();
//! buf[h..h + payload.len()].copy_from_slice(payload);
//! let nonce = [7u8; 16]; // from a CSPRNG in real use
//! let n = crypto.seal(&mut buf, payload.len(), &nonce).unwrap();
//!
//! let range = crypto.open(&mut buf[..n]).unwrap();
//! assert_eq!(&buf[range], payload);
//! ```
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod blowfish_be;
mod cast128;
mod cfb;
mod des3;
mod salsa;
mod sm4t;
mod tea;
mod twofish256;

use core::fmt;
use core::ops::Range;

use aes_gcm::aead::AeadInOut;
use cipher::{
    KeyInit,
    array::Array,
    consts::{U12, U16},
};

type GcmNonce = Array<u8, U12>;
type GcmTag = Array<u8, U16>;

/// Longest datagram kcp-go reads (`mtuLimit`); longer ones are refused both ways.
pub const MAX_DATAGRAM: usize = 1500;

/// Length of the random nonce in front of CFB-family datagrams.
const CFB_NONCE: usize = 16;
/// Nonce plus CRC32: the CFB-family header.
const CFB_HEADER: usize = 20;
/// AES-GCM nonce length.
const GCM_NONCE: usize = 12;
/// AES-GCM tag length.
const GCM_TAG: usize = 16;
/// Salt kcptun hands PBKDF2 when it turns a passphrase into a key.
const KEY_SALT: &[u8] = b"kcp-go";
/// PBKDF2 iterations kcptun uses.
const KEY_ITERATIONS: u32 = 4096;
/// Salt of the `xor` method's pad derivation.
const XOR_SALT: &[u8] = b"sH3CIVoF#rWLtJo6";
/// PBKDF2 iterations of the `xor` method's pad derivation.
const XOR_ITERATIONS: u32 = 32;

/// A packet-encryption method, by its kcptun name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `null`: no crypto layer at all; datagrams carry the bare payload.
    Null,
    /// `none`: nonce and CRC32 framing, no cipher.
    None,
    /// `xor`: XOR with a 1500-byte pad derived from the key (not secure).
    Xor,
    /// `aes`: AES-256 in kcp-go's CFB.
    Aes,
    /// `aes-128`: AES-128 in kcp-go's CFB.
    Aes128,
    /// `aes-192`: AES-192 in kcp-go's CFB.
    Aes192,
    /// `salsa20`: Salsa20/20 keyed with 32 bytes, nonce = first 8 datagram bytes.
    Salsa20,
    /// `blowfish`: Blowfish with a 32-byte key in kcp-go's CFB.
    Blowfish,
    /// `twofish`: Twofish-256 in kcp-go's CFB.
    Twofish,
    /// `cast5`: CAST-128 in kcp-go's CFB.
    Cast5,
    /// `3des`: DES-EDE3 in kcp-go's CFB.
    TripleDes,
    /// `tea`: TEA reduced to 16 rounds, big-endian words, in kcp-go's CFB.
    Tea,
    /// `xtea`: XTEA with big-endian words in kcp-go's CFB.
    Xtea,
    /// `sm4`: SM4 in kcp-go's CFB.
    Sm4,
    /// `aes-128-gcm`: AES-128-GCM AEAD with a 12-byte nonce and a 16-byte tag.
    Aes128Gcm,
}

impl Method {
    /// Every method, in kcptun's documentation order.
    pub const ALL: [Method; 15] = [
        Method::Null,
        Method::None,
        Method::Xor,
        Method::Aes,
        Method::Aes128,
        Method::Aes192,
        Method::Salsa20,
        Method::Blowfish,
        Method::Twofish,
        Method::Cast5,
        Method::TripleDes,
        Method::Tea,
        Method::Xtea,
        Method::Sm4,
        Method::Aes128Gcm,
    ];

    /// The method kcptun calls `name`, or `None` for a name it does not know.
    ///
    /// (kcptun itself falls back to `aes` for unknown names; a typo should
    /// rather be an error here.)
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    /// kcptun's name of the method.
    pub fn name(self) -> &'static str {
        match self {
            Method::Null => "null",
            Method::None => "none",
            Method::Xor => "xor",
            Method::Aes => "aes",
            Method::Aes128 => "aes-128",
            Method::Aes192 => "aes-192",
            Method::Salsa20 => "salsa20",
            Method::Blowfish => "blowfish",
            Method::Twofish => "twofish",
            Method::Cast5 => "cast5",
            Method::TripleDes => "3des",
            Method::Tea => "tea",
            Method::Xtea => "xtea",
            Method::Sm4 => "sm4",
            Method::Aes128Gcm => "aes-128-gcm",
        }
    }

    /// How many leading bytes of the 32-byte [`derive_key`] output kcptun hands
    /// this method; [`PacketCrypto::new`] wants a key of exactly this length
    /// (`null` ignores its key and `none` accepts any).
    pub fn key_len(self) -> usize {
        match self {
            Method::Null => 0,
            Method::Aes128 | Method::Cast5 | Method::Tea | Method::Xtea | Method::Sm4 => 16,
            Method::Aes128Gcm => 16,
            Method::Aes192 | Method::TripleDes => 24,
            Method::None
            | Method::Xor
            | Method::Aes
            | Method::Salsa20
            | Method::Blowfish
            | Method::Twofish => 32,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// kcptun's key derivation: PBKDF2-HMAC-SHA1 of `passphrase` with salt
/// `kcp-go` and 4096 iterations, 32 bytes. Each method takes its
/// [`Method::key_len`] prefix.
pub fn derive_key(passphrase: &str) -> [u8; 32] {
    pbkdf2::pbkdf2_hmac_array::<sha1::Sha1, 32>(passphrase.as_bytes(), KEY_SALT, KEY_ITERATIONS)
}

/// [`PacketCrypto::new`] was given a key of the wrong length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyError {
    /// The method the key was for.
    pub method: Method,
    /// The length the method needs ([`Method::key_len`]).
    pub expected: usize,
    /// The length given.
    pub actual: usize,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} needs a {}-byte key, got {} bytes",
            self.method, self.expected, self.actual
        )
    }
}

impl std::error::Error for KeyError {}

/// Why [`PacketCrypto::seal`] refused a buffer. These are caller bugs, not
/// network conditions: nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealError {
    /// `buf` is shorter than header + payload + trailer.
    BufferTooSmall {
        /// Bytes the sealed datagram needs.
        needed: usize,
        /// Length of the buffer given.
        available: usize,
    },
    /// The sealed datagram would exceed [`MAX_DATAGRAM`].
    TooLarge {
        /// Length the sealed datagram would have.
        len: usize,
    },
    /// The nonce is not [`PacketCrypto::nonce_len`] bytes long.
    NonceLength {
        /// Length the method needs.
        expected: usize,
        /// Length given.
        actual: usize,
    },
}

impl fmt::Display for SealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SealError::BufferTooSmall { needed, available } => write!(
                f,
                "seal buffer too small: {needed} bytes needed, {available} available"
            ),
            SealError::TooLarge { len } => {
                write!(f, "sealed datagram of {len} bytes exceeds {MAX_DATAGRAM}")
            }
            SealError::NonceLength { expected, actual } => {
                write!(f, "nonce must be {expected} bytes, got {actual}")
            }
        }
    }
}

impl std::error::Error for SealError {}

/// Why [`PacketCrypto::open`] dropped a datagram. Each is a property of
/// untrusted input: count it and drop the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// Shorter than the method's header and trailer.
    Truncated {
        /// Length of the datagram.
        len: usize,
        /// Shortest datagram the method can open.
        min: usize,
    },
    /// Longer than [`MAX_DATAGRAM`]: kcp-go never sends one, and its socket
    /// reads would have cut it (and so broken its checksum).
    TooLarge {
        /// Length of the datagram.
        len: usize,
    },
    /// The CRC32 after decryption does not match (wrong key, corruption,
    /// forgery, or a peer using another method).
    BadChecksum,
    /// The AEAD tag does not verify (wrong key, corruption or forgery).
    BadTag,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            OpenError::Truncated { len, min } => {
                write!(f, "datagram of {len} bytes is shorter than {min}")
            }
            OpenError::TooLarge { len } => {
                write!(f, "datagram of {len} bytes exceeds {MAX_DATAGRAM}")
            }
            OpenError::BadChecksum => f.write_str("datagram checksum mismatch"),
            OpenError::BadTag => f.write_str("datagram authentication tag mismatch"),
        }
    }
}

impl std::error::Error for OpenError {}

/// The keyed transform of one method, expanded once.
enum Engine {
    Null,
    None,
    Xor(Box<[u8; MAX_DATAGRAM]>),
    Salsa20(salsa::Salsa20),
    Aes128(Box<AesCfb<aes::Aes128>>),
    Aes192(Box<AesCfb<aes::Aes192>>),
    Aes256(Box<AesCfb<aes::Aes256>>),
    Blowfish(Box<blowfish_be::BlowfishBe>),
    Twofish(Box<twofish256::Twofish256>),
    Cast5(Box<cast128::Cast128>),
    TripleDes(Box<des3::TripleDes>),
    Tea(Box<tea::Tea16>),
    Xtea(Box<tea::XteaBe>),
    Sm4(Box<sm4t::Sm4>),
    Aes128Gcm(Box<Gcm>),
}

/// Seals and opens datagrams for one method and key.
///
/// Build it once per session (the key schedule is expanded here), then call
/// [`seal`](Self::seal) and [`open`](Self::open) per datagram; both work in
/// place, never allocate and never panic. `PacketCrypto` is `Send + Sync`:
/// neither call mutates it.
pub struct PacketCrypto {
    method: Method,
    engine: Engine,
}

impl fmt::Debug for PacketCrypto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketCrypto")
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

/// Copies an exact-length key into an array.
fn key_array<const N: usize>(method: Method, key: &[u8]) -> Result<[u8; N], KeyError> {
    key.try_into().map_err(|_| KeyError {
        method,
        expected: N,
        actual: key.len(),
    })
}

impl PacketCrypto {
    /// `null`'s: what a configuration without a cipher (the builder's
    /// default) uses. Infallible, where [`new`](Self::new) checks the key.
    pub(crate) fn null() -> Self {
        Self {
            method: Method::Null,
            engine: Engine::Null,
        }
    }

    /// Expands `key` for `method`. The key must be exactly
    /// [`Method::key_len`] bytes, except for `null` and `none`, which ignore it.
    ///
    /// # Errors
    /// [`KeyError`] when the key length does not fit the method.
    pub fn new(method: Method, key: &[u8]) -> Result<Self, KeyError> {
        let bad = || KeyError {
            method,
            expected: method.key_len(),
            actual: key.len(),
        };
        let engine = match method {
            Method::Null => Engine::Null,
            Method::None => Engine::None,
            Method::Xor => {
                let key = key_array::<32>(method, key)?;
                let mut pad = Box::new([0u8; MAX_DATAGRAM]);
                pbkdf2::pbkdf2_hmac::<sha1::Sha1>(&key, XOR_SALT, XOR_ITERATIONS, &mut pad[..]);
                Engine::Xor(pad)
            }
            Method::Salsa20 => Engine::Salsa20(salsa::Salsa20::new(&key_array::<32>(method, key)?)),
            Method::Aes => Engine::Aes256(Box::new(AesCfb::new(
                aes::Aes256::new_from_slice(key).map_err(|_| bad())?,
                key,
            ))),
            Method::Aes128 => Engine::Aes128(Box::new(AesCfb::new(
                aes::Aes128::new_from_slice(key).map_err(|_| bad())?,
                key,
            ))),
            Method::Aes192 => Engine::Aes192(Box::new(AesCfb::new(
                aes::Aes192::new_from_slice(key).map_err(|_| bad())?,
                key,
            ))),
            Method::Blowfish => {
                let key = key_array::<32>(method, key)?;
                Engine::Blowfish(Box::new(
                    blowfish_be::BlowfishBe::new(&key).ok_or_else(bad)?,
                ))
            }
            Method::Twofish => {
                let key = key_array::<32>(method, key)?;
                Engine::Twofish(twofish256::Twofish256::new(&key))
            }
            Method::Cast5 => {
                let key = key_array::<16>(method, key)?;
                Engine::Cast5(Box::new(cast128::Cast128::new(&key)))
            }
            Method::TripleDes => Engine::TripleDes(Box::new(des3::TripleDes::new(
                &key_array::<24>(method, key)?,
            ))),
            Method::Tea => Engine::Tea(Box::new(tea::Tea16::new(&key_array::<16>(method, key)?))),
            Method::Xtea => {
                Engine::Xtea(Box::new(tea::XteaBe::new(&key_array::<16>(method, key)?)))
            }
            Method::Sm4 => Engine::Sm4(Box::new(sm4t::Sm4::new(&key_array::<16>(method, key)?))),
            Method::Aes128Gcm => {
                let key = key_array::<16>(method, key)?;
                Engine::Aes128Gcm(Box::new(Gcm {
                    fast: crate::simd::gcm::Aes128GcmNi::new(&key),
                    generic: aes_gcm::Aes128Gcm::new(&key.into()),
                }))
            }
        };
        Ok(Self { method, engine })
    }

    /// The method this instance seals with.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Bytes in front of the payload: 20 (nonce + CRC32), 12 (AEAD nonce) or 0 (`null`).
    pub fn header_len(&self) -> usize {
        match self.engine {
            Engine::Null => 0,
            Engine::Aes128Gcm(_) => GCM_NONCE,
            _ => CFB_HEADER,
        }
    }

    /// Bytes after the payload: 16 (AEAD tag) or 0.
    pub fn trailer_len(&self) -> usize {
        match self.engine {
            Engine::Aes128Gcm(_) => GCM_TAG,
            _ => 0,
        }
    }

    /// Length of the nonce [`seal`](Self::seal) wants: 16, 12 (AEAD) or 0 (`null`).
    pub fn nonce_len(&self) -> usize {
        match self.engine {
            Engine::Null => 0,
            Engine::Aes128Gcm(_) => GCM_NONCE,
            _ => CFB_NONCE,
        }
    }

    /// Bytes the layer adds to a payload: `header_len() + trailer_len()`.
    pub fn overhead(&self) -> usize {
        self.header_len() + self.trailer_len()
    }

    /// Seals one datagram in place and returns its length.
    ///
    /// `buf` holds `header_len()` free bytes, then the `payload_len` payload
    /// bytes, then at least `trailer_len()` free bytes; `nonce` is
    /// `nonce_len()` fresh bytes from the caller's CSPRNG. The sealed datagram
    /// is `buf[..returned]`.
    ///
    /// # Errors
    /// [`SealError`] when the buffer, the resulting datagram or the nonce has
    /// the wrong size; `buf` is then left untouched.
    pub fn seal(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        nonce: &[u8],
    ) -> Result<usize, SealError> {
        let header = self.header_len();
        let needed = header
            .saturating_add(payload_len)
            .saturating_add(self.trailer_len());
        if needed > MAX_DATAGRAM {
            return Err(SealError::TooLarge { len: needed });
        }
        if nonce.len() != self.nonce_len() {
            return Err(SealError::NonceLength {
                expected: self.nonce_len(),
                actual: nonce.len(),
            });
        }
        let available = buf.len();
        let Some(datagram) = buf.get_mut(..needed) else {
            return Err(SealError::BufferTooSmall { needed, available });
        };
        match &self.engine {
            Engine::Null => {}
            Engine::Aes128Gcm(aead) => {
                let (head, rest) = datagram.split_at_mut(GCM_NONCE);
                head.copy_from_slice(nonce);
                let (body, tag_out) = rest.split_at_mut(payload_len);
                let nonce = <[u8; GCM_NONCE]>::try_from(&*head).unwrap_or_default();
                let tag = aead
                    .seal(&nonce, body)
                    .ok_or(SealError::TooLarge { len: needed })?;
                tag_out.copy_from_slice(&tag);
            }
            engine => {
                let (head, body) = datagram.split_at_mut(CFB_HEADER);
                let (nonce_out, crc_out) = head.split_at_mut(CFB_NONCE);
                nonce_out.copy_from_slice(nonce);
                crc_out.copy_from_slice(&crate::simd::crc32::hash(body).to_le_bytes());
                engine.apply(datagram, Direction::Seal);
            }
        }
        Ok(needed)
    }

    /// Opens one datagram in place and returns where its payload now lies.
    ///
    /// # Errors
    /// [`OpenError`] for a datagram that is too short or too long, fails its
    /// checksum or its authentication tag. The datagram's bytes are then
    /// unspecified (partly decrypted); drop it.
    pub fn open(&self, datagram: &mut [u8]) -> Result<Range<usize>, OpenError> {
        let len = datagram.len();
        if len > MAX_DATAGRAM {
            return Err(OpenError::TooLarge { len });
        }
        let min = self.overhead();
        if len < min {
            return Err(OpenError::Truncated { len, min });
        }
        match &self.engine {
            Engine::Null => Ok(0..len),
            Engine::Aes128Gcm(aead) => {
                let (head, rest) = datagram.split_at_mut(GCM_NONCE);
                let (body, tag) = rest.split_at_mut(len - GCM_NONCE - GCM_TAG);
                let nonce = <[u8; GCM_NONCE]>::try_from(&*head).unwrap_or_default();
                let tag = <[u8; GCM_TAG]>::try_from(&*tag).unwrap_or_default();
                if !aead.open(&nonce, body, &tag) {
                    return Err(OpenError::BadTag);
                }
                Ok(GCM_NONCE..len - GCM_TAG)
            }
            engine => {
                engine.apply(datagram, Direction::Open);
                let (head, body) = datagram.split_at(CFB_HEADER);
                let mut stored = [0u8; 4];
                stored.copy_from_slice(head.get(CFB_NONCE..).unwrap_or(&[0; 4]));
                if crate::simd::crc32::hash(body) != u32::from_le_bytes(stored) {
                    return Err(OpenError::BadChecksum);
                }
                Ok(CFB_HEADER..len)
            }
        }
    }
}

impl PacketCrypto {
    /// The cipher transform alone, in place over a whole datagram, without
    /// nonce, checksum or length rules: what kcp-go's `BlockCrypt.Encrypt`
    /// does. Exists so benchmarks can be compared with kcp-go's
    /// `benchCrypt`; `null`, `none` and AEAD leave the bytes as they are.
    #[doc(hidden)]
    pub fn encrypt_raw(&self, datagram: &mut [u8]) {
        self.engine.apply(datagram, Direction::Seal);
    }

    /// The CRC-32/IEEE that [`seal`](Self::seal) stores and
    /// [`open`](Self::open) checks. Exists so benchmarks can be compared with
    /// kcp-go's `BenchmarkCRC32`.
    #[doc(hidden)]
    pub fn checksum(data: &[u8]) -> u32 {
        crate::simd::crc32::hash(data)
    }

    /// The inverse of [`encrypt_raw`](Self::encrypt_raw).
    #[doc(hidden)]
    pub fn decrypt_raw(&self, datagram: &mut [u8]) {
        self.engine.apply(datagram, Direction::Open);
    }
}

/// An AES key for kcp-go's CFB: sealing runs the AES-NI chain kernel when
/// the CPU has it; opening (parallel across blocks) and sealing without it
/// use the `aes` crate.
struct AesCfb<C> {
    cipher: C,
    seal: Option<crate::simd::aes_cfb::AesCfbNi>,
}

impl<C: cipher::BlockCipherEncrypt> AesCfb<C> {
    fn new(cipher: C, key: &[u8]) -> Self {
        Self {
            cipher,
            seal: crate::simd::aes_cfb::AesCfbNi::new(key),
        }
    }

    fn apply(&self, buf: &mut [u8], dir: Direction) {
        match (dir, &self.seal) {
            (Direction::Seal, Some(k)) => k.encrypt(buf),
            (Direction::Seal, None) => cfb::encrypt(&self.cipher, buf),
            (Direction::Open, _) => cfb::decrypt(&self.cipher, buf),
        }
    }
}

/// AES-128-GCM: the one-pass AES-NI/PCLMULQDQ kernel when the CPU has
/// it, else the `aes-gcm` crate.
struct Gcm {
    fast: Option<crate::simd::gcm::Aes128GcmNi>,
    generic: aes_gcm::Aes128Gcm,
}

impl Gcm {
    /// Encrypts `body` in place and returns the tag; `None` only beyond
    /// GCM's 64 GiB message limit.
    fn seal(&self, nonce: &[u8; GCM_NONCE], body: &mut [u8]) -> Option<[u8; GCM_TAG]> {
        match &self.fast {
            Some(k) => Some(k.seal(nonce, body)),
            None => self
                .generic
                .encrypt_inout_detached(&GcmNonce::from(*nonce), &[], body.into())
                .ok()
                .map(Into::into),
        }
    }

    /// Verifies and decrypts `body` in place.
    fn open(&self, nonce: &[u8; GCM_NONCE], body: &mut [u8], tag: &[u8; GCM_TAG]) -> bool {
        match &self.fast {
            Some(k) => k.open(nonce, body, tag),
            None => self
                .generic
                .decrypt_inout_detached(
                    &GcmNonce::from(*nonce),
                    &[],
                    body.into(),
                    &GcmTag::from(*tag),
                )
                .is_ok(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Seal,
    Open,
}

impl Engine {
    /// The whole-datagram transform of the CFB-style framings.
    fn apply(&self, datagram: &mut [u8], dir: Direction) {
        fn cfb<C: cipher::BlockCipherEncrypt>(c: &C, buf: &mut [u8], dir: Direction) {
            match dir {
                Direction::Seal => cfb::encrypt(c, buf),
                Direction::Open => cfb::decrypt(c, buf),
            }
        }
        /// Sealing with a [`cfb::Words64`] cipher keeps the chain in registers.
        fn cfb64<C: cipher::BlockCipherEncrypt + cfb::Words64>(
            c: &C,
            buf: &mut [u8],
            dir: Direction,
        ) {
            match dir {
                Direction::Seal => cfb::encrypt_words(c, buf),
                Direction::Open => cfb::decrypt(c, buf),
            }
        }
        /// Opening with a [`cfb::Many64`] cipher takes 16 blocks at a time.
        fn cfb_many<C: cfb::Words64 + cfb::Many64>(c: &C, buf: &mut [u8], dir: Direction) {
            match dir {
                Direction::Seal => cfb::encrypt_words(c, buf),
                Direction::Open => cfb::decrypt_many(c, buf),
            }
        }
        match self {
            Engine::Null | Engine::None | Engine::Aes128Gcm(_) => {}
            Engine::Xor(pad) => crate::simd::xor::xor_into(datagram, &pad[..]),
            Engine::Salsa20(s) => {
                if let Some((nonce, body)) = datagram.split_first_chunk_mut::<8>() {
                    s.apply_keystream(nonce, body);
                }
            }
            Engine::Aes128(c) => c.apply(datagram, dir),
            Engine::Aes192(c) => c.apply(datagram, dir),
            Engine::Aes256(c) => c.apply(datagram, dir),
            Engine::Blowfish(c) => cfb64(&**c, datagram, dir),
            Engine::Twofish(c) => cfb(&**c, datagram, dir),
            Engine::Cast5(c) => cfb64(&**c, datagram, dir),
            Engine::TripleDes(c) => cfb_many(&**c, datagram, dir),
            Engine::Tea(c) => cfb64(&**c, datagram, dir),
            Engine::Xtea(c) => cfb_many(&**c, datagram, dir),
            Engine::Sm4(c) => cfb(&**c, datagram, dir),
        }
    }
}

#[cfg(test)]
mod tests;
