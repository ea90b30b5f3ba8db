//! # kcpio
//!
//! Fast, secure, reliable streams over UDP for tokio: the KCP ARQ protocol,
//! optional Reed-Solomon FEC and optional per-packet encryption, byte-compatible
//! with Go's kcp-go v5.
//!
//! A [`KcpStream`] is `AsyncRead + AsyncWrite` like a `TcpStream` (with
//! `into_split`, and a message API in message mode), and a
//! [`KcpListener`] accepts them like a `TcpListener`; one [`Config`] (built
//! from kcp-go's defaults, with kcptun's [`Preset`]s) describes both. KCP
//! retransmits early and, with FEC, rebuilds lost datagrams from parity, so
//! latency stays low on long, lossy links where TCP waits out a timeout.
//!
//! # Example
//!
//! An echo over loopback, encrypted with AES-128:
//!
//! ```
//! use kcpio::{Config, KcpListener, KcpStream, Key, Method, Preset};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Both ends must agree on the cipher and key; the rest is local.
//! let config = Config::builder()
//!     .preset(Preset::Fast3)
//!     .crypto(Method::Aes128, Key::passphrase("it's a secret"))
//!     .build()?;
//!
//! let listener = KcpListener::bind("127.0.0.1:0", &config).await?;
//! let addr = listener.local_addr()?;
//! tokio::spawn(async move {
//!     let (mut stream, _peer) = listener.accept().await?;
//!     let mut buf = [0; 5];
//!     stream.read_exact(&mut buf).await?;
//!     stream.write_all(&buf).await?;
//!     stream.shutdown().await // waits for the acknowledgement
//! });
//!
//! let mut stream = KcpStream::connect(addr, &config).await?;
//! stream.write_all(b"hello").await?;
//! let mut buf = [0; 5];
//! stream.read_exact(&mut buf).await?;
//! assert_eq!(&buf, b"hello");
//! # Ok(()) }
//! ```
//!
//! KCP has no end-of-stream marker (neither has kcp-go): `shutdown` waits
//! until everything written is acknowledged, but the peer never reads EOF.
//! [`mux`] adds it, with many streams per session and a keepalive (smux v1
//! and v2, as kcptun runs over kcp-go). Otherwise frame your own end marker
//! and set an
//! [`idle_timeout`](ConfigBuilder::idle_timeout) to reap sessions whose peer
//! went away. The repository's `examples/` hold an echo pair, a TCP port
//! forwarder (`tunnel.rs`) and the lossy-link demo
//! (`cargo run --release --example demo`).
//!
//! # Security
//!
//! Only [`Method::Aes128Gcm`] authenticates datagrams. The CFB block ciphers
//! (`aes`, `blowfish`, `sm4`, ...) encrypt but check integrity with a CRC-32
//! only, which is not a MAC; under `salsa20`, `xor` and `none` the CRC sits
//! under a stream cipher (or none), so bits of a captured datagram can be
//! flipped and the CRC patched without the key; `null` protects nothing.
//! This is kcp-go's wire format. Use `aes-128-gcm` where integrity matters.
//! No method detects a replayed datagram by itself; inside a session KCP's
//! sequence numbers drop replays, and a listener refuses a replayed
//! session-opening datagram (below).
//!
//! Every datagram is untrusted and dropped and counted when it does not fit.
//! Memory a peer can make a session hold is bounded: the ARQ by its windows,
//! the FEC decoder by the shards actually received and a cap on the shard
//! ratio it learns ([`fec::DEFAULT_MAX_SHARDS`], set with
//! [`fec_max_shards`](ConfigBuilder::fec_max_shards);
//! [`fec::FecDecoder::memory_bound`]); sessions per listener by
//! [`max_sessions`](ConfigBuilder::max_sessions). A listener (see
//! [`KcpListener`]) opens a session only on a datagram that begins a
//! conversation, refuses replays of such datagrams, limits how fast one
//! source address creates sessions, sends an address that has not proved it
//! receives at most 3× the bytes it sent ([`Conn::require_proof`]), and
//! evicts sessions that never proved it. See the README's Security section.
//!
//! # Layers
//!
//! Data walks one way through layers that each live in one module:
//!
//! ```text
//!  write ─► KcpStream ─► Conn ─► arq (segments) ─► fec (shards) ─► driver: crypto (seal) ─► sys (batch send) ─► UDP
//!  read  ◄─ KcpStream ◄─ Conn ◄─ arq (reassembly) ◄─ fec (recover) ◄─ driver: table ◄─ crypto (open) ◄─ sys (batch recv) ◄─ UDP
//! ```
//!
//! - [`mux`] (optional, above everything) multiplexes streams over one
//!   session, wire-compatible with Go's smux;
//! - [`KcpStream`] and [`KcpListener`] are the tokio surface: thin adapters
//!   that lock a session and call its [`Conn`];
//! - one driver task per UDP socket, whatever the number of sessions on it,
//!   opens and seals datagrams, routes them to sessions through its session
//!   table, runs their timers and batches their output;
//! - [`Conn`] is one session: ARQ, FEC, lifecycle (idle timeout, dead link,
//!   shutdown and linger) and its next deadline;
//! - [`arq`] is the KCP state machine (segments, acknowledgements,
//!   retransmission, windows);
//! - [`fec`] adds Reed-Solomon parity shards and rebuilds lost data shards;
//! - [`crypto`] seals and opens each datagram (kcptun's ciphers);
//! - `sys` sends and receives datagrams in batches (`sendmmsg`/`recvmmsg`,
//!   GSO/GRO on Linux).
//!
//! [`Conn`], [`arq`], [`fec`] and [`crypto`] are sans-IO: bytes and `now`
//! in, datagrams and deadlines out. A [`Conn`] with a [`crypto`] cipher is a
//! whole kcp-go-compatible session that any runtime or a game loop can drive:
//! `examples/gameloop.rs` runs one (cipher, FEC, ARQ) over a
//! `std::net::UdpSocket` with a plain loop and no tokio, and
//! `tests/gameloop.rs` runs it against kcp-go.
//!
//! # Errors
//!
//! A failed session's `io::Error` carries a [`SessionError`] as its source
//! (`err.get_ref().and_then(|e| e.downcast_ref::<SessionError>())`:
//! dead link, idle timeout, reset by the peer, aborted); other refusals
//! carry a [`ConnError`].

#[forbid(unsafe_code)]
pub mod arq;
#[forbid(unsafe_code)]
mod config;
#[forbid(unsafe_code)]
pub mod conn;
#[forbid(unsafe_code)]
pub mod crypto;
#[forbid(unsafe_code)]
mod driver;
#[forbid(unsafe_code)]
pub mod fec;
#[forbid(unsafe_code)]
mod listener;
#[forbid(unsafe_code)]
pub mod mux;
#[forbid(unsafe_code)]
mod pool;
#[forbid(unsafe_code)]
mod session;
#[allow(unsafe_code)]
mod simd; // runtime-dispatched SIMD kernels (GF(2^8), Salsa20, GCM): unsafe allowed
#[allow(unsafe_code)]
mod sys; // batched datagram syscalls: the only other place unsafe is allowed

pub use config::{Config, ConfigBuilder, ConfigError, Key, Preset};

/// The session table's routing and admission fed an arbitrary sequence of
/// datagrams, clock jumps, proofs and removals: the `session_table` fuzz
/// target's body. The table is internal; this is not part of the stable
/// API.
///
/// # Panics
///
/// Only when one of the table's invariants breaks (a bug): its books
/// balance, sessions stay under the cap, and every memory (tombstones,
/// replay fingerprints, per-source buckets, the unproven queue) within its
/// bound.
#[doc(hidden)]
pub fn fuzz_session_table(data: &[u8]) {
    driver::fuzz_table(data);
}
pub use conn::{Conn, ConnError, SessionError, SessionStats};
pub use crypto::Method;
pub use listener::{KcpListener, ListenerStats};
pub use pool::MuxPool;
pub use session::{KcpStream, OwnedReadHalf, OwnedWriteHalf};
