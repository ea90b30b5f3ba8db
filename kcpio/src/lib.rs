//! # kcpio
//!
//! Fast, secure, reliable streams over UDP for tokio: the KCP ARQ protocol,
//! optional Reed-Solomon FEC and optional per-packet encryption, byte-compatible
//! with Go's kcp-go v5.
//!
//! A [`KcpStream`] is `AsyncRead + AsyncWrite` like a `TcpStream` (with
//! `split`, `into_split` and `reunite`, and a message API in message mode),
//! and a [`KcpListener`] accepts them like a `TcpListener`; one [`Config`] (kcpio's
//! defaults or kcp-go's, with kcptun's [`Preset`]s) describes both. KCP
//! retransmits early and, with FEC, rebuilds lost datagrams from parity, so
//! latency stays low on long, lossy links where TCP waits out a timeout.
//!
//! # Example
//!
//! An echo over loopback, encrypted with AES-128:
//!
//! ```
//! use kcpio::{Config, KcpListener, KcpStream, Key, Method};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Both ends must agree on the cipher and key; the rest is local, and the
//! // defaults suit a TcpStream user (see `ConfigBuilder`).
//! let config = Config::builder()
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
//! // Returns once the listener answered (its `accept` has returned too).
//! let mut stream = KcpStream::connect(addr, &config).await?;
//! stream.write_all(b"hello").await?;
//! let mut buf = [0; 5];
//! stream.read_exact(&mut buf).await?;
//! assert_eq!(&buf, b"hello");
//! # Ok(()) }
//! ```
//!
//! Beside the stream, a session with FEC on carries unreliable datagrams,
//! byte-compatible with kcp-go's out-of-band packets:
//! [`KcpStream::send_datagram`] and [`KcpStream::recv_datagram`] (each
//! payload one UDP datagram, sent once, at most
//! [`max_datagram_payload`](KcpStream::max_datagram_payload) bytes, e.g.
//! 1368 with the default mtu; queues bounded at
//! [`conn::DATAGRAM_QUEUE_LEN`] datagrams and [`conn::DATAGRAM_QUEUE_BYTES`]
//! bytes each way, overflow counted).
//!
//! The repository's `kcpio/examples/` hold an echo pair, a game loop
//! without tokio and the lossy-link demo
//! (`cargo run --release --example demo`); the `kcpio-tunnel` crate is a
//! kcptun-compatible TCP tunnel built on this one.
//!
//! # KcpStream and TcpStream: the differences
//!
//! A [`KcpStream`] has `TcpStream`'s shape (`connect`; `split`, and
//! `into_split` with `reunite`; `peer_addr` and `local_addr`;
//! `AsyncRead + AsyncWrite`) and a [`KcpListener`] has `TcpListener`'s (`bind`,
//! `accept`, `poll_accept`). What differs comes from running over UDP, with the
//! connection state in this process instead of the kernel. The defaults named
//! below are marked in **bold** beside the builder method that sets them.
//!
//! - **Handshake.** There is no SYN. [`KcpStream::connect`] sends a KCP window
//!   probe (a WASK segment; kcp-go, C KCP and kcpio answer it at their next
//!   flush), resends it with back-off, and returns once any valid datagram of
//!   the conversation arrives. After `connect_timeout` (**5 s**,
//!   [`ConfigBuilder::connect_timeout`](ConfigBuilder::connect_timeout)) it fails with `TimedOut`: a missing
//!   server, a different key or cipher, a blocked path, a server at its
//!   session cap and a client over the server's per-source rate look alike
//!   from the client, and the error names them all; the server's
//!   [`ListenerStats`] counts each and logs the first of each peer. A kcpio or kcp-go listener creates the
//!   session when the probe arrives (kcp-go's `accept` returns it then;
//!   kcpio's once the client's driver has answered the window probe of the
//!   session's first reply, about half a round trip after `connect`
//!   returns, so a forged source never reaches `accept`), and
//!   protocols where the server speaks first work. `connect_probe(false)`
//!   (**on** by default, [`ConfigBuilder::connect_probe`](ConfigBuilder::connect_probe)) gives KCP's bare
//!   behaviour for a peer that must see data first: `connect` returns at once
//!   and nothing is sent before the first write.
//! - **End of stream.** KCP has no FIN, and neither has kcp-go. `shutdown`
//!   stops this side's writes and completes once the peer acknowledged
//!   everything written, or fails with `TimedOut` after
//!   [`linger`](ConfigBuilder::linger) (**5 s**); reading goes on. The peer is
//!   not told: its reads never return `Ok(0)` (a read returns `Ok(0)` only into
//!   an empty buffer), so `tokio::io::copy` from a `KcpStream` ends only with an
//!   error. Dropping a stream (both halves) sends nothing either: the driver
//!   keeps delivering what was written for up to `linger`, then frees the
//!   session silently. The side left behind learns of it from the idle timeout
//!   below; from the dead-link limit ([`dead_link`](ConfigBuilder::dead_link))
//!   when it has unacknowledged data; or, on a listener, when the same address
//!   opens a new conversation (the old session fails with `ConnectionReset`).
//!   Bytes received before a failure are still read out first, then every read
//!   and write fails, with a [`SessionError`] source naming the cause. For an
//!   end marker, frame your own, or run [`mux`] (smux) over the session as
//!   kcptun does: its streams have EOF and half-close.
//! - **Liveness.** An idle TCP connection lives for ever, and its keepalive is
//!   off by default. A `KcpStream` sends a window probe whenever it sent nothing
//!   for `keepalive` (**10 s**, [`ConfigBuilder::keepalive`](ConfigBuilder::keepalive)); the peer answers
//!   it. A session that received nothing valid for
//!   [`idle_timeout`](ConfigBuilder::idle_timeout) (**30 s**) fails with
//!   `TimedOut` ([`SessionError::IdleTimeout`]). `None` turns either off. An
//!   idle session costs one small datagram each way per keepalive interval.
//!   kcp-go answers probes but sends none, so a kcpio end keeps a pair with
//!   kcp-go alive and notices when kcp-go goes away. A client whose server
//!   process is gone hears ICMP port unreachable for what it sends; repeated
//!   reports with nothing valid in between fail it with `ConnectionReset`
//!   ([`SessionError::PortUnreachable`]) within about half a second of the
//!   first, as TCP's RST would ([`icmp_reset`](ConfigBuilder::icmp_reset),
//!   **on**; one stray report never does).
//! - **Address changes.** A TCP connection dies when the client's address
//!   changes. A kcpio listener with `aes-128-gcm` follows a session's peer
//!   to a new address (NAT rebinding, Wi-Fi to mobile data) once the peer
//!   answers a probe there ([`migration`](ConfigBuilder::migration), **on
//!   with `aes-128-gcm`**, off with every other cipher; kcp-go and kcptun
//!   clients need nothing new). `peer_addr` then names the new address. The dead-link limit
//!   ([`dead_link`](ConfigBuilder::dead_link), **0**: never) fails a session
//!   once one segment was sent that many times unacknowledged.
//! - **Capacity.** TCP buffers in the kernel and sizes its windows itself. A
//!   KCP session's windows are fixed, in segments
//!   ([`window`](ConfigBuilder::window), **1024 / 1024**). A side can write
//!   `2 × its send window + the peer's receive window` segments of up to mss
//!   bytes (mss = [`Config::kcp_mtu`] − 24: 1376 with the **1400**-byte
//!   [`mtu`](ConfigBuilder::mtu) and no cipher) before its writes wait for the
//!   peer to read: about 4.2 MB with 1024 / 1024, 132 KB with kcp-go's 32 / 32.
//!   Two ends that both write more than that before reading deadlock, as over
//!   TCP with full buffers. At most `min(send window, peer's receive window)`
//!   segments are in flight, so a session moves at most that many per round
//!   trip (1024 × 1376 bytes per 100 ms is about 110 Mbit/s).
//! - **Which preset.** The default, [`Preset::Fast`] (**kcptun's `fast`**,
//!   [`preset`](ConfigBuilder::preset)), suits most paths. [`Preset::Fast3`]
//!   (10 ms flush interval, 30 ms minimum RTO) recovers sooner from loss for
//!   more retransmissions; [`Preset::LowLatency`] is for small messages at a
//!   steady rate (games, voice) and sends several times the payload. kcp-go's
//!   own defaults ([`ConfigBuilder::kcp_go_defaults`](ConfigBuilder::kcp_go_defaults): [`Preset::Default`],
//!   windows 32, no liveness) are slow (a 100 ms flush interval, no fast
//!   retransmit) and there to behave exactly like a kcp-go peer. None of these
//!   changes the wire format: each end picks its own. On lossy paths add FEC
//!   ([`fec`](ConfigBuilder::fec)`(10, 3)`, kcptun's).
//! - **Security.** Where TCP leaves encryption to TLS above it, a `KcpStream`
//!   seals each datagram itself ([`crypto`](ConfigBuilder::crypto)); only
//!   `aes-128-gcm` also authenticates. What each cipher protects is in
//!   [Security](#security) below.
//!
//! # Defaults
//!
//! [`Config::builder`] starts from kcpio's defaults, chosen for a user who
//! replaces a `TcpStream`; [`ConfigBuilder::kcp_go_defaults`] gives kcp-go's
//! exact ones. kcptun's are beside them for comparison. None of them changes
//! the wire format.
//!
//! | setting | builder method | kcpio / kcp-go default | kcptun |
//! | --- | --- | --- | --- |
//! | preset | [`preset`](ConfigBuilder::preset) | `Fast` (0, 30, 2, 1); kcp-go: `Default` (0, 100, 0, 0) | `fast` |
//! | datagram MTU (headers included, max 1500) | [`mtu`](ConfigBuilder::mtu) | 1400 | 1350 |
//! | send / receive window (segments) | [`window`](ConfigBuilder::window) | 1024 / 1024; kcp-go: 32 / 32 | 128 / 512 client, 1024 / 1024 server |
//! | stream mode (merge small writes) | [`stream`](ConfigBuilder::stream) | off | on |
//! | cipher and key | [`crypto`](ConfigBuilder::crypto) | `Method::Null` (no crypto header) | `aes`, PBKDF2 of `--key` |
//! | FEC data / parity shards (send side) | [`fec`](ConfigBuilder::fec) | off (0 / 0) | 10 / 3 |
//! | write delay | [`write_delay`](ConfigBuilder::write_delay) | off | off |
//! | ACK without delay | [`ack_nodelay`](ConfigBuilder::ack_nodelay) | off | off |
//! | each ACK sent twice, in two flushes | [`ack_repeat`](ConfigBuilder::ack_repeat) | on; kcp-go: off | off |
//! | congestion controller | [`congestion`](ConfigBuilder::congestion) | the preset's (`Fast`: none, kcp-go's `nc = 1`) | none (`nc = 1`) |
//! | rate limit (bytes/s per UDP socket) | [`rate_limit`](ConfigBuilder::rate_limit) | 0 (unlimited) | — |
//! | DSCP | [`dscp`](ConfigBuilder::dscp) | 0 (OS default) | 0 |
//! | socket receive / send buffers | [`socket_buffers`](ConfigBuilder::socket_buffers) | receive at least 4 MiB (a listener: 16 MiB shared by its sockets, at least 4 MiB each) / OS default | 4 MiB / 4 MiB |
//! | accept backlog | [`accept_backlog`](ConfigBuilder::accept_backlog) | 128 | 128 |
//! | sessions per listener | [`max_sessions`](ConfigBuilder::max_sessions) | 4096 | unbounded (kcp-go) |
//! | connect probe (WASK, answered by a WINS) | [`connect_probe`](ConfigBuilder::connect_probe), [`connect_timeout`](ConfigBuilder::connect_timeout) | on, 5 s; kcp-go: none | none |
//! | keepalive (a WASK when nothing was sent) | [`keepalive`](ConfigBuilder::keepalive) | 10 s; kcp-go: none | smux keepalive (10 s) above KCP |
//! | idle timeout | [`idle_timeout`](ConfigBuilder::idle_timeout) | 30 s; kcp-go: off | smux timeout (30 s) above KCP |
//! | dead link (transmissions of one segment) | [`dead_link`](ConfigBuilder::dead_link) | 0 = never (kcp-go's behaviour) | never |
//! | ICMP port unreachable fails an established client session | [`icmp_reset`](ConfigBuilder::icmp_reset) | on (3 reports over ≥ 250 ms with nothing valid between); kcp-go: ignored | ignored |
//! | listener follows a session's peer to a new address | [`migration`](ConfigBuilder::migration) | on with `aes-128-gcm`, off otherwise (refused); kcp-go: never | never |
//! | linger on shutdown / drop | [`linger`](ConfigBuilder::linger) | 5 s | — |
//! | conversation id (client) | [`conv`](ConfigBuilder::conv) | random | random |
//! | batched syscalls (`recvmmsg`/`sendmmsg`, GRO/GSO) | [`batching`](ConfigBuilder::batching) | on | on (Linux) |
//! | FEC-protected datagrams between kcpio ends (kcpio-only, negotiated; kcp-go peers get plain OOB) | [`datagram_fec`](ConfigBuilder::datagram_fec) | off | — |
//! | their group deadline (the latency knob) | [`datagram_fec_deadline`](ConfigBuilder::datagram_fec_deadline) | 15 ms | — |
//! | their residual-loss target (ppm) | [`datagram_fec_residual_ppm`](ConfigBuilder::datagram_fec_residual_ppm) | 100 (10^-4) | — |
//!
//! The KCP MTU ([`Config::kcp_mtu`]) is the datagram MTU minus the crypto
//! header (20 bytes, 12 for `aes-128-gcm`, 0 for `null`), the FEC header
//! (8 bytes when sending FEC) and the AEAD tag (16 bytes for
//! `aes-128-gcm`), as in kcp-go. Each builder method documents its range as
//! well as its default, and [`ConfigBuilder::build`] refuses any value
//! outside it with a [`ConfigError`] naming the option, the value and the
//! range; nothing is clamped silently.
//!
//! # Security
//!
//! What the packet crypto protects depends on the method, exactly as in
//! kcp-go, because it is the wire format:
//!
//! | [`Method`] | confidentiality | integrity |
//! | --- | --- | --- |
//! | `aes-128-gcm` | yes | yes: a 16-byte GCM tag; a forged or altered datagram is dropped |
//! | `aes`, `aes-128`, `aes-192`, `blowfish`, `twofish`, `cast5`, `3des`, `tea`, `xtea`, `sm4` (CFB) | yes | only a CRC-32 under the cipher: it catches accidents, it is not a MAC |
//! | `salsa20` | yes | none against an attacker: bits of a captured datagram can be flipped and the encrypted CRC-32 patched to match without the key (the CRC is linear) |
//! | `xor` | weak: one fixed pad derived from the key, reused for every datagram | none, as `salsa20` |
//! | `none` | no (a nonce and a CRC-32 in clear) | none |
//! | `null` | no | none: anyone who can reach the port speaks KCP to it |
//!
//! Use `aes-128-gcm` ([`Method::Aes128Gcm`]) where integrity matters; with
//! every other method an attacker on the path can alter or forge datagrams.
//! No method detects a replayed datagram by itself; inside a session KCP's
//! sequence numbers drop replays, and a listener refuses a replayed
//! session-opening datagram (below).
//!
//! Every datagram is untrusted and dropped and counted when it does not fit.
//! Memory a peer can make a session hold is bounded: the ARQ by its windows,
//! the FEC decoder by the shards actually received and a cap on the shard
//! ratio it learns ([`fec::DEFAULT_MAX_SHARDS`], set with
//! [`fec_max_shards`](ConfigBuilder::fec_max_shards);
//! [`fec::FecDecoder::memory_bound`]), received datagrams by
//! [`conn::DATAGRAM_QUEUE_BYTES`], the FEC datagram extension (when on) by
//! its fixed arenas (128 received shards, 32 parity shards, 4 partial
//! datagrams of up to 16 fragments, 48 shards on the send side: at most
//! about 0.5 MiB per session, allocated on first use); sessions per listener by
//! [`max_sessions`](ConfigBuilder::max_sessions). A listener (see
//! [`KcpListener`]) opens a session only on a datagram that begins a
//! conversation, refuses replays of such datagrams, limits how fast one
//! source address creates sessions, sends an address that has not proved it
//! receives at most 3× the bytes it sent ([`Conn::require_proof`]), and
//! evicts sessions that never proved it ([hostile peers](KcpListener#hostile-peers)).
//!
//! In all, a peer can make one session hold at most its receive window of
//! segments (1024 × up to 1,376 bytes, about 1.4 MiB, at the defaults), the
//! FEC decoder's bound and the datagram queue; what the application writes
//! is bounded by the send window (writes wait). The send queue's storage
//! follows its load: about once a second it is cut back to the power of two
//! above the most segments it held in the last second, so a session that
//! once held a full queue gives that memory back when its load falls
//! (a session idle since keeps it until its next input or timer). A listener holds at most
//! `max_sessions` of those: about 9 GiB at the defaults, reached only by
//! 4,096 proven peers each filling its window while the application does
//! not read. Lower [`window`](ConfigBuilder::window) or `max_sessions` where
//! that is too much (with kcp-go's windows of 32 a session holds about
//! 44 KB). In the kernel, what a listener's sockets may queue is their
//! receive buffers: 16 MiB in all by default, 4 MiB per socket from four
//! sockets on ([`socket_buffers`](ConfigBuilder::socket_buffers)).
//!
//! Above KCP, a [`mux`] session bounds what a peer holding the key can make
//! it hold, each limit in [`MuxConfig`](mux::MuxConfig) with its default:
//! streams open at once (`max_open_streams`, 65,536), streams waiting for
//! `accept` (`accept_backlog`, 1,024), streams the peer opens per second
//! (`stream_opens_per_second`, 1,024, as a burst too), received and unread
//! bytes (`receive_buffer`, 4 MiB, plus one frame), and queued output per
//! stream (`stream_send_buffer`, 128 KiB) and per session
//! (`session_send_buffer`, 8 MiB). A SYN over a limit is answered with a
//! FIN and counted in [`MuxStats`](mux::MuxStats); the session and its
//! other streams go on. Output over a send budget waits (backpressure,
//! never a drop), so a peer that stops reading costs at most the session's
//! send budget, whatever the application writes; in smux v2 the stream's
//! window stops it first. What such a peer can still do: keep up to those
//! bounds held per session for as long as it keeps the session alive,
//! open streams at the permitted rate, and, in smux v1 (no per-stream
//! window), stall every stream of *its own* session by not reading.
//!
//! **Migration** ([`migration`](ConfigBuilder::migration), `aes-128-gcm`
//! only). A listener moves a session to a new peer address only when all
//! three hold: the datagram from there opens under the key (authentic); it
//! carries something the session never received, a new data segment, an
//! acknowledgement of a segment in flight or a `una` beyond what was
//! acknowledged (fresh: a replay of anything received is not, wherever it
//! comes from); and after a window probe sent there, a window update
//! (WINS) comes back from there while nothing arrived from the old address
//! meanwhile. Until then the new address is sent at most 3× the bytes
//! received from it, and one probe per 100 ms. So replayed datagrams move
//! nothing and are sent nothing (`migration_stale` counts them), and an
//! attacker who copies the client's fresh datagrams from a third address
//! gets at most 3× its bytes back and moves nothing while the client keeps
//! talking from its own. The other ciphers cannot offer this: without a
//! MAC an attacker who never held the key can alter a captured datagram to
//! look fresh and forge the answer, and point the session's traffic at a
//! third party. What remains with `aes-128-gcm`: an attacker on the path
//! that drops the client's datagrams and relays them from another address
//! can move the session there (it could cut the session anyway); once the
//! client is heard from its own address again, the session moves back. A
//! new IP address resets the session's RTT estimate and congestion window;
//! a new port on the same IP (NAT rebinding) keeps them. With migration on,
//! a live session's conv belongs to it from any address: a replay of its
//! opening datagrams from elsewhere opens no second session.
//!
//! **ICMP** ([`icmp_reset`](ConfigBuilder::icmp_reset)). ICMP is not
//! authenticated: an attacker who can send it to the client and knows both
//! ends' addresses and ports can end a client session whose peer answers
//! slower than the streak lasts (250 ms, or the RTO up to 1 s), as a forged
//! RST ends a TCP connection. Turn it off where that matters more than
//! noticing a dead server quickly.
//!
//! The proof is what the KCP wire allows: there is no secret for a peer to
//! echo, so an attacker who holds the key (or anyone under `null`, `none`,
//! and the stream ciphers given a captured datagram) can forge an
//! acknowledgement blindly. These rules stop reflection and session creation
//! by replayed or spoofed datagrams of others, not an attacker who can speak
//! the protocol.
//!
//! # Layers
//!
//! Data walks one way through layers that each live in one module:
//!
//! ```text
//!  write ─► KcpStream ─► Conn ─► arq (segments) ─► fec (shards) ─► driver: crypto (seal) ─► sys (batch send) ─► UDP | fake TCP
//!  read  ◄─ KcpStream ◄─ Conn ◄─ arq (reassembly) ◄─ fec (recover) ◄─ driver: table ◄─ crypto (open) ◄─ sys (batch recv) ◄─ UDP | fake TCP
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
//!   GSO/GRO on Linux), over UDP or, with [`Carrier::FakeTcp`], as TCP
//!   segments of a kernel-opened flow (`kcptun --tcp`'s wire; Linux, root).
//!
//! [`Conn`], [`arq`], [`fec`] and [`crypto`] are sans-IO: bytes and `now`
//! in, datagrams and deadlines out. A [`Conn`] with a [`crypto`] cipher is a
//! whole kcp-go-compatible session that any runtime or a game loop can drive:
//! the repository's `kcpio/examples/gameloop.rs` runs one (cipher, FEC, ARQ)
//! over a `std::net::UdpSocket` with a plain loop and no tokio, and
//! its own unit tests run it against kcp-go.
//!
//! One noun per object: a **session** is one KCP conversation ([`Conn`] is
//! its state machine, [`SessionStats`] its counters, [`SessionError`] why
//! it ended; a driver keeps one per conversation); a **stream** is the
//! tokio handle on a session ([`KcpStream`] and its halves, made by
//! [`KcpStream::connect`], [`KcpSocket::connect`] or
//! [`KcpListener::accept`]). smux's session, which carries many
//! [`mux::MuxStream`]s over one byte stream, is [`mux::Session`], always
//! named with its module.
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
#[cfg(fuzzing)]
#[forbid(unsafe_code)]
pub mod fuzzing;
#[forbid(unsafe_code)]
mod listener;
#[forbid(unsafe_code)]
pub mod mux;
#[forbid(unsafe_code)]
mod relay;

#[allow(unsafe_code)]
mod simd; // runtime-dispatched SIMD kernels (GF(2^8), Salsa20, GCM): unsafe allowed
#[forbid(unsafe_code)]
mod socket;
#[forbid(unsafe_code)]
mod stream;
#[allow(unsafe_code)]
mod sys; // batched datagram syscalls: the only other place unsafe is allowed

pub use arq::Congestion;
pub use config::{
    Carrier, Config, ConfigBuilder, ConfigError, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_DATAGRAM_FEC_DEADLINE, DEFAULT_DATAGRAM_FEC_RESIDUAL_PPM, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_KEEPALIVE, Key, MIN_WRITE_CAPACITY, Preset,
};

pub use conn::{Conn, ConnError, DatagramFecStats, SessionError, SessionStats, StreamFecStats};
pub use crypto::Method;
pub use listener::{KcpListener, ListenerStats};
pub use relay::RelaySocket;
pub use socket::KcpSocket;
pub use stream::split::{OwnedReadHalf, OwnedWriteHalf, ReadHalf, ReuniteError, WriteHalf};
pub use stream::{KcpStream, StatsHandle};

/// Returns the heap memory this process has freed to the operating system,
/// where the allocator allows it; reports whether any was returned.
///
/// After a burst (thousands of sessions or streams that queued megabytes,
/// then ended) the freed memory stays with the allocator: glibc keeps it in
/// its per-thread arenas, so the process's resident size stays at its peak
/// although nothing holds it. On Linux with glibc this calls
/// `malloc_trim(0)`, which hands the free pages of every arena back; it
/// walks the whole heap (milliseconds for hundreds of megabytes), so call it
/// when a large load has just drained, not per request. Elsewhere (musl,
/// other systems, or another global allocator in charge of the memory) it
/// does nothing useful and returns `false`. kcpio never calls it itself:
/// the application knows when a burst is over (`kcpio-tunnel`'s server does
/// when its buffer budget drains).
pub fn release_free_memory() -> bool {
    sys::trim_heap()
}

/// The listener's session table and migration rules for the simulator
/// (`kcpio/tests/sim`). Not part of the API.
#[doc(hidden)]
pub use driver::migrate::sim_support;
