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
//!
//! The tokio surface replaces `TcpStream` and `TcpListener`: [`KcpStream`]
//! (`AsyncRead + AsyncWrite`, `into_split`, a message API in message mode)
//! and [`KcpListener`], configured by one validated [`Config`]. Each UDP
//! socket is served by one driver task, whatever the number of sessions on
//! it.
//!
//! ```no_run
//! use kcpio::{Config, KcpListener, KcpStream, Key, Method, Preset};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::builder()
//!     .preset(Preset::Fast3)
//!     .window(1024, 1024)
//!     .stream(true)
//!     .crypto(Method::Aes128, Key::passphrase("it's a secrect"))
//!     .fec(10, 3)
//!     .build()?;
//!
//! let listener = KcpListener::bind("127.0.0.1:0", &config).await?;
//! let addr = listener.local_addr()?;
//! tokio::spawn(async move {
//!     while let Ok((stream, _peer)) = listener.accept().await {
//!         tokio::spawn(async move {
//!             let (mut r, mut w) = stream.into_split();
//!             let _ = tokio::io::copy(&mut r, &mut w).await;
//!         });
//!     }
//! });
//!
//! let mut stream = KcpStream::connect(addr, &config).await?;
//! stream.write_all(b"hello").await?;
//! let mut buf = [0; 5];
//! stream.read_exact(&mut buf).await?;
//! assert_eq!(&buf, b"hello");
//! # Ok(()) }
//! ```

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
