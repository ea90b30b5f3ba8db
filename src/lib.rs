//! # kcpio
//!
//! Fast, secure, reliable streams over UDP for tokio: the KCP ARQ protocol,
//! optional Reed-Solomon FEC and optional per-packet encryption, byte-compatible
//! with Go's kcp-go v5.
//!
//! Data walks one way through layers that each live in one module:
//!
//! ```text
//!  write ─► KcpStream ─► driver ─► arq (segments) ─► fec (shards) ─► crypto (seal) ─► sys (batch send) ─► UDP
//!  read  ◄─ KcpStream ◄─ driver ◄─ arq (reassembly) ◄─ fec (recover) ◄─ crypto (open) ◄─ sys (batch recv) ◄─ UDP
//! ```
//!
//! [`arq`], [`fec`] and [`crypto`] are sans-IO: bytes and `now` in, datagrams
//! and deadlines out. They can be driven from any runtime or a game loop.

#[forbid(unsafe_code)]
pub mod arq;
#[forbid(unsafe_code)]
pub mod crypto;
#[forbid(unsafe_code)]
pub mod fec;
// Runtime-dispatched SIMD kernels (GF(2^8) for the FEC codec, stream ciphers).
#[allow(unsafe_code)]
mod simd;
// Batched datagram syscalls; the only other place `unsafe` is allowed.
#[forbid(unsafe_code)]
mod config;
#[forbid(unsafe_code)]
mod driver;
#[forbid(unsafe_code)]
mod listener;
#[forbid(unsafe_code)]
mod session;
#[allow(unsafe_code)]
mod sys;

pub use config::{Config, ConfigBuilder, ConfigError, Key, Preset};
pub use crypto::Method;
pub use listener::{KcpListener, ListenerStats};
pub use session::{KcpStream, OwnedReadHalf, OwnedWriteHalf, SessionStats};
