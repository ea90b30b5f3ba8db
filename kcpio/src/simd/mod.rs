//! Runtime-dispatched SIMD kernels: the one place besides `sys` where `unsafe`
//! is allowed. Each kernel picks its implementation once with
//! `is_x86_feature_detected!` (or the target's equivalent), keeps a portable
//! fallback, and is proven byte-identical to that fallback by property tests.
//! Every `unsafe` block carries a `// SAFETY:` comment.

pub(crate) mod aes_cfb;
pub(crate) mod crc32;
pub(crate) mod des16;
pub(crate) mod gcm;
pub(crate) mod gf256;
#[cfg(target_arch = "x86_64")]
pub(crate) mod mem;
pub(crate) mod salsa20;
pub(crate) mod xor;
pub(crate) mod xtea16;
