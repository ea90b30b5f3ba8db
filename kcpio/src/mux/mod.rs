//! Streams over one connection: smux v1 and v2, wire-compatible with Go's
//! `xtaci/smux` and so with kcptun.
//!
//! KCP carries one byte stream with no end-of-stream marker and no liveness
//! check. smux adds both and more: many independent streams over one
//! session, each with its own EOF and half-close (SYN/FIN), a keepalive
//! that notices a dead peer, and in v2 a credit window per stream, so a
//! stream whose reader stops does not stall the others.
//!
//! - [`Mux`] runs a session over any `AsyncRead + AsyncWrite` (a
//!   [`KcpStream`](crate::KcpStream), a `TcpStream`, a duplex pipe) on one
//!   task and hands out [`MuxStream`]s: `open_stream`, `accept_stream`,
//!   and streams that read, write, half-close and `into_split` like a
//!   `TcpStream`.
//! - [`Snappy`] is kcptun's optional compression layer (the snappy framing
//!   format) between the session and the transport.
//! - [`Session`] is the protocol itself, sans-IO (bytes in, frames out,
//!   `now` passed in), and [`frame`] the frame codec, for other runtimes.
//!
//! # Example
//!
//! A session over a KCP stream; each side can open and accept streams.
//!
//! ```
//! use kcpio::mux::{Mux, MuxConfig, Version};
//! use kcpio::{Config, KcpListener, KcpStream, Preset};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::builder().preset(Preset::Fast3).build()?;
//! let mux_config = MuxConfig::builder().version(Version::V2).build()?;
//!
//! let listener = KcpListener::bind("127.0.0.1:0", &config).await?;
//! let addr = listener.local_addr()?;
//! let server_config = mux_config.clone();
//! tokio::spawn(async move {
//!     let (kcp, _peer) = listener.accept().await?;
//!     let mux = Mux::server(kcp, &server_config);
//!     loop {
//!         // Echo every stream until its end.
//!         let mut stream = mux.accept_stream().await?;
//!         tokio::spawn(async move {
//!             let (mut r, mut w) = tokio::io::split(&mut stream);
//!             tokio::io::copy(&mut r, &mut w).await?;
//!             stream.shutdown().await
//!         });
//!     }
//!     #[allow(unreachable_code)]
//!     Ok::<_, std::io::Error>(())
//! });
//!
//! let mux = Mux::client(KcpStream::connect(addr, &config).await?, &mux_config);
//! let mut stream = mux.open_stream().await?;
//! stream.write_all(b"hello").await?;
//! stream.shutdown().await?; // half-close: the echo still comes back
//! let mut echo = Vec::new();
//! stream.read_to_end(&mut echo).await?; // ends at the server's FIN
//! assert_eq!(echo, b"hello");
//! # Ok(()) }
//! ```
//!
//! # Compatibility
//!
//! Frames are what Go smux v1.5.58 accepts (and v1.5.16 too): the session's
//! version byte on every frame, client stream ids 3, 5, 7, … and server ids
//! 2, 4, …, a stream registered before its SYN, FIN behind the stream's
//! data, UPD only in v2. Input is read as leniently as v1.5.16 where that
//! cannot desynchronise the byte stream (PSH of length 0 or for unknown
//! streams is skipped, UPD in v1 is skipped, duplicate SYNs are ignored);
//! a version mismatch, an unknown command, or a SYN/FIN/NOP with a body
//! ends the session with an error naming the header that arrived. The peer
//! sees only silence then, as with Go.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod config;
pub mod frame;
// The tokio adapter owns the clock (keepalive timers) and spawns the
// session's task; everything else in `mux` is sans-IO.
#[allow(clippy::disallowed_methods, clippy::disallowed_types)]
mod rt;
mod session;
pub mod snappy;

#[cfg(test)]
mod tests;

pub use config::{MuxConfig, MuxConfigBuilder, MuxConfigError, Version};
pub use frame::ProtocolError;
pub use rt::{Mux, MuxStream, OwnedReadHalf, OwnedWriteHalf, Snappy};
pub use session::{
    Error, Event, MuxStats, OpenError, REFUSED_QUEUE, Role, STREAM_SEND_BUFFER, Session,
    StreamError, StreamId,
};

/// Feeds arbitrary bytes to a fresh session (both roles and versions, small
/// budgets) and drains its output: the body of the `mux_session` fuzz
/// target (`kcpio::fuzzing::mux_session`) and of the unit tests that replay
/// its findings. Never panics; checks that the session stays within its
/// budgets.
///
/// # Panics
///
/// Only if a budget is exceeded (a bug).
#[cfg(any(test, fuzzing))]
pub(crate) fn fuzz_session(data: &[u8]) {
    use core::time::Duration;
    let Some((&selector, input)) = data.split_first() else {
        return;
    };
    let version = if selector & 1 == 0 {
        Version::V1
    } else {
        Version::V2
    };
    let role = if selector & 2 == 0 {
        Role::Client
    } else {
        Role::Server
    };
    let Ok(config) = MuxConfig::builder()
        .version(version)
        .receive_buffer(4096)
        .stream_window(2048)
        .accept_backlog(4)
        .max_open_streams(8)
        .stream_opens_per_second(6)
        .stream_send_buffer(600)
        .session_send_buffer(1500)
        .max_frame_size(512)
        .build()
    else {
        return;
    };
    let mut s = Session::new(role, &config, Duration::ZERO);
    let mut out = [0u8; 2048];
    let mut read = [0u8; 700];
    let mut now = Duration::ZERO;
    // Split the input at arbitrary points chosen by the input itself.
    let step = usize::from(selector >> 2).max(1);
    let mut pos = 0;
    let mut rounds = 0;
    while pos < input.len() && rounds < 100_000 {
        rounds += 1;
        let end = (pos + step).min(input.len());
        match s.handle_input(&input[pos..end]) {
            Ok(n) => pos += n,
            Err(_) => break,
        }
        // The application: accept, read some, write, close some; open
        // streams of its own and half-close them (stream lifecycles).
        if let Some(sid) = s.accept_stream() {
            let _ = s.write(sid, &input[pos.min(input.len())..end]);
            if sid % 3 == 0 {
                s.close_stream(sid);
            }
        }
        if rounds % 7 == 0
            && let Ok(sid) = s.open_stream()
        {
            let room = s.write_room(sid).unwrap_or(0);
            let data = &input[pos.min(input.len())..end];
            let n = s.write(sid, data).unwrap_or(0);
            assert_eq!(n, data.len().min(room));
            if rounds % 14 == 0 {
                let _ = s.shutdown_write(sid);
            } else if rounds % 21 == 0 {
                s.close_stream(sid);
            }
        }
        if !s.wants_input() {
            // Drain the streams so input can resume.
            for sid in 0..=64 {
                loop {
                    // `readable` says whether the read returns now.
                    let ready = s.readable(sid);
                    let r = s.read(sid, &mut read);
                    match (ready, r) {
                        (Ok(true), Ok(Some(n))) if n > 0 => continue,
                        (Ok(true), Ok(Some(_)) | Err(_)) | (Err(_), Err(_)) => break,
                        (Ok(false), Ok(None)) => break,
                        (ready, r) => panic!("readable {ready:?} but read {r:?}"),
                    }
                }
            }
            while s.accept_stream().is_some() {}
        }
        while s.poll_transmit(&mut out) > 0 {}
        now += Duration::from_millis(u64::from(selector));
        s.set_time(now);
        s.handle_timeout(now);
        assert!(s.stream_count() <= config.max_open_streams());
        assert!(s.backlog_len() <= config.accept_backlog());
        assert!(s.buffered() <= config.receive_buffer() + frame::MAX_PAYLOAD);
        assert!(s.send_buffered() <= config.session_send_buffer());
        if !s.wants_input() && s.error().is_none() {
            // Paused on streams we do not know the ids of: stop.
            break;
        }
    }
}
