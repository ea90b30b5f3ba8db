//! [`Key`]: the packet cipher's key material, raw or a kcptun passphrase
//! derived once by [`ConfigBuilder::build`](super::ConfigBuilder::build).

use std::fmt;

use crate::crypto;

/// Key material for the packet cipher.
#[derive(Clone)]
pub struct Key(KeyInner);

#[derive(Clone)]
enum KeyInner {
    Raw(Vec<u8>),
    Passphrase(String),
}

impl Key {
    /// Raw key bytes. A key longer than the method needs is cut to the
    /// method's length ([`Method::key_len`](crate::Method::key_len)), as
    /// kcptun does with its 32-byte derived key.
    #[must_use]
    pub fn raw(bytes: impl Into<Vec<u8>>) -> Self {
        Self(KeyInner::Raw(bytes.into()))
    }

    /// A kcptun passphrase (`--key`): derived once, in
    /// [`ConfigBuilder::build`](super::ConfigBuilder::build), with
    /// PBKDF2-HMAC-SHA1 (salt `kcp-go`, 4096 rounds, 32 bytes) like kcptun.
    #[must_use]
    pub fn passphrase(passphrase: impl Into<String>) -> Self {
        Self(KeyInner::Passphrase(passphrase.into()))
    }

    /// The key bytes: raw as given, or the passphrase derived (PBKDF2,
    /// 4096 rounds: call once per build).
    pub(super) fn bytes(&self) -> Vec<u8> {
        match &self.0 {
            KeyInner::Raw(b) => b.clone(),
            KeyInner::Passphrase(p) => crypto::derive_key(p).to_vec(),
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            KeyInner::Raw(b) => write!(f, "Key::raw({} bytes)", b.len()),
            KeyInner::Passphrase(_) => f.write_str("Key::passphrase(..)"),
        }
    }
}
