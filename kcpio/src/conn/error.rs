//! The verdicts of [`Conn`](super::Conn)'s application calls and why a
//! session stops.

use std::fmt;
use std::io;

use crate::arq::{RecvError, SendError};

/// Why a session stopped working. Once set it is final: every later read,
/// write and shutdown fails with it.
///
/// The tokio surface carries it inside the `io::Error` it returns, so a
/// caller tells the reasons apart without parsing messages:
///
/// ```
/// use kcpio::SessionError;
///
/// fn why(err: &std::io::Error) -> Option<SessionError> {
///     err.get_ref()?.downcast_ref::<SessionError>().copied()
/// }
/// let err = std::io::Error::from(SessionError::IdleTimeout);
/// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
/// assert_eq!(why(&err), Some(SessionError::IdleTimeout));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionError {
    /// A segment reached the dead-link transmission limit
    /// ([`ConfigBuilder::dead_link`](crate::ConfigBuilder::dead_link)): the
    /// peer is unreachable. `io::ErrorKind::TimedOut`.
    DeadLink,
    /// Nothing valid arrived for
    /// [`ConfigBuilder::idle_timeout`](crate::ConfigBuilder::idle_timeout).
    /// `io::ErrorKind::TimedOut`.
    IdleTimeout,
    /// The peer started a new conversation from the same address (a
    /// restarted client, kcp-go's rule). `io::ErrorKind::ConnectionReset`.
    Reset,
    /// The session was stopped from this side: its driver went away (the
    /// runtime shut down, or the listener was dropped before `accept`).
    /// `io::ErrorKind::ConnectionAborted`.
    Aborted,
    /// The connect probe got no answer within
    /// [`ConfigBuilder::connect_timeout`](crate::ConfigBuilder::connect_timeout):
    /// no server at that address, a server with another key or cipher
    /// (its datagrams and ours fail to open), a path that drops UDP, a
    /// server at its session cap
    /// ([`ConfigBuilder::max_sessions`](crate::ConfigBuilder::max_sessions)),
    /// or this client's address over the server's per-source rate
    /// ([`ConfigBuilder::sessions_per_source`](crate::ConfigBuilder::sessions_per_source)).
    /// They look the same from the client; the server's
    /// [`ListenerStats`](crate::ListenerStats) counts and logs each.
    /// `io::ErrorKind::TimedOut`.
    ConnectTimeout,
    /// The peer's host reported the port unreachable (ICMP) while the
    /// connect probe ran: nothing listens there.
    /// `io::ErrorKind::ConnectionRefused`.
    Refused,
    /// The peer's host kept reporting the port unreachable (ICMP) on an
    /// established session, and nothing valid came from the peer in
    /// between: the server process is gone. Only client sessions see
    /// these reports; see
    /// [`ConfigBuilder::icmp_reset`](crate::ConfigBuilder::icmp_reset).
    /// `io::ErrorKind::ConnectionReset`.
    PortUnreachable,
}

impl SessionError {
    /// The `io::ErrorKind` this reason travels under.
    #[must_use]
    pub fn kind(self) -> io::ErrorKind {
        match self {
            Self::DeadLink | Self::IdleTimeout | Self::ConnectTimeout => io::ErrorKind::TimedOut,
            Self::Refused => io::ErrorKind::ConnectionRefused,
            Self::Reset | Self::PortUnreachable => io::ErrorKind::ConnectionReset,
            Self::Aborted => io::ErrorKind::ConnectionAborted,
        }
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::DeadLink => "kcp peer unreachable: retransmission limit (dead_link) reached",
            Self::IdleTimeout => "kcp session idle: nothing received within idle_timeout",
            Self::Reset => "kcp peer restarted the conversation from the same address",
            Self::Aborted => "kcp session stopped: its driver went away",
            Self::ConnectTimeout => {
                "kcp connect timed out: no answer to the connect probe within connect_timeout \
                 (no server at that address, a server with a different key, cipher or FEC \
                 setting, a path that blocks UDP, a server at its session cap, or this \
                 client's address over the server's per-source session rate; the server's \
                 listener stats and logs tell these apart)"
            }
            Self::Refused => {
                "kcp connect refused: the peer's host reports nothing listening on that UDP port"
            }
            Self::PortUnreachable => {
                "kcp peer gone: its host keeps reporting the UDP port unreachable \
                 (the server process stopped)"
            }
        })
    }
}

impl std::error::Error for SessionError {}

impl From<SessionError> for io::Error {
    fn from(e: SessionError) -> Self {
        io::Error::new(e.kind(), e)
    }
}

/// The verdict of an application call on a [`Conn`](super::Conn) that did
/// not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnError {
    /// Nothing to read yet, the send window is full, or shutdown is still
    /// waiting for acknowledgements: retry after the next `handle_*` call.
    WouldBlock,
    /// The session failed; final.
    Closed(SessionError),
    /// A write after [`shutdown`](super::Conn::shutdown).
    WriteShutdown,
    /// [`shutdown`](super::Conn::shutdown): what was written was not
    /// acknowledged within the linger time. The session goes on (reads
    /// still work).
    LingerExpired,
    /// A message the ARQ refuses (empty, or more fragments than the window
    /// or 255); never [`SendError::WouldBlock`], which is [`Self::WouldBlock`].
    Message(SendError),
    /// The buffer is shorter than the next message or datagram, which stays
    /// queued.
    BufferTooSmall {
        /// Length of the next message.
        needed: usize,
    },
    /// The message calls need message mode (`stream(false)`).
    StreamMode,
    /// Unreliable datagrams need FEC on this side
    /// ([`ConfigBuilder::fec`](crate::ConfigBuilder::fec)), as in kcp-go:
    /// the packet reuses the FEC header.
    DatagramsUnsupported,
    /// A datagram payload longer than
    /// [`max_datagram_payload`](super::Conn::max_datagram_payload).
    DatagramTooLarge {
        /// The payload's length.
        len: usize,
        /// The largest payload this session sends.
        max: usize,
    },
}

impl ConnError {
    /// The `io::ErrorKind` this verdict travels under.
    #[must_use]
    pub fn kind(self) -> io::ErrorKind {
        match self {
            Self::WouldBlock => io::ErrorKind::WouldBlock,
            Self::Closed(e) => e.kind(),
            Self::WriteShutdown => io::ErrorKind::BrokenPipe,
            Self::LingerExpired => io::ErrorKind::TimedOut,
            Self::Message(_) | Self::BufferTooSmall { .. } => io::ErrorKind::InvalidInput,
            Self::StreamMode => io::ErrorKind::Unsupported,
            Self::DatagramsUnsupported => io::ErrorKind::Unsupported,
            Self::DatagramTooLarge { .. } => io::ErrorKind::InvalidInput,
        }
    }
}

impl From<SendError> for ConnError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::WouldBlock => Self::WouldBlock,
            e => Self::Message(e),
        }
    }
}

impl From<RecvError> for ConnError {
    fn from(e: RecvError) -> Self {
        match e {
            RecvError::NotReady => Self::WouldBlock,
            RecvError::BufferTooSmall { needed } => Self::BufferTooSmall { needed },
        }
    }
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WouldBlock => f.write_str("kcp session not ready"),
            Self::Closed(e) => e.fmt(f),
            Self::WriteShutdown => f.write_str("kcp stream was shut down for writing"),
            Self::LingerExpired => f.write_str("kcp shutdown: data not acknowledged within linger"),
            Self::Message(e) => write!(f, "kcp message refused: {e}"),
            Self::BufferTooSmall { needed } => {
                write!(f, "kcp message or datagram of {needed} bytes does not fit the buffer")
            }
            Self::StreamMode => {
                f.write_str("message API needs message mode (Config::builder().stream(false))")
            }
            Self::DatagramsUnsupported => f.write_str(
                "kcp datagrams need FEC on this side (Config::builder().fec(data, parity)), as in kcp-go",
            ),
            Self::DatagramTooLarge { len, max } => {
                write!(f, "kcp datagram of {len} bytes exceeds the maximum payload of {max}")
            }
        }
    }
}

impl std::error::Error for ConnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Closed(e) => Some(e),
            Self::Message(e) => Some(e),
            _ => None,
        }
    }
}

/// A session failure becomes an `io::Error` carrying the [`SessionError`]
/// itself; every other verdict carries the [`ConnError`].
impl From<ConnError> for io::Error {
    fn from(e: ConnError) -> Self {
        match e {
            ConnError::Closed(s) => s.into(),
            e => io::Error::new(e.kind(), e),
        }
    }
}
