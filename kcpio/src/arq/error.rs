//! Typed errors of the state machine's entry points.

use core::fmt;

/// Why [`Kcp::handle_datagram`](super::Kcp::handle_datagram) rejected (part of) a packet.
///
/// As in kcp-go, segments before the bad one have already been applied; the
/// bad segment and everything after it are dropped, and neither an RTT sample
/// nor the input-triggered flush happens. Each reason is counted in
/// [`ArqStats`](super::ArqStats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputError {
    /// Shorter than one 24-byte header.
    Truncated,
    /// A segment's conversation id is not ours.
    ConvMismatch,
    /// A segment's `len` exceeds the bytes left in the packet.
    BadLength,
    /// A segment's command is not PUSH, ACK, WASK or WINS.
    BadCommand,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncated => "KCP packet shorter than a segment header",
            Self::ConvMismatch => "KCP segment for another conversation",
            Self::BadLength => "KCP segment length exceeds the packet",
            Self::BadCommand => "unknown KCP command",
        })
    }
}

impl std::error::Error for InputError {}

/// Why [`Kcp::send_message`](super::Kcp::send_message) refused a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// Zero-length message (kcp-go rejects them; C would send an empty segment).
    Empty,
    /// More fragments than the receive window, 255 (kcp-go's limit) or the send
    /// buffer can hold: it could never be delivered.
    TooLarge,
    /// Not enough free send-buffer slots now; retry after acknowledgements.
    WouldBlock,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "empty KCP message",
            Self::TooLarge => "KCP message needs more fragments than the window allows",
            Self::WouldBlock => "KCP send buffer full",
        })
    }
}

impl std::error::Error for SendError {}

/// Why [`Kcp::recv_message`](super::Kcp::recv_message) returned no message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvError {
    /// No complete message is queued.
    NotReady,
    /// The buffer is shorter than the next message; nothing was consumed.
    BufferTooSmall {
        /// Length of the next message.
        needed: usize,
    },
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotReady => f.write_str("no complete KCP message"),
            Self::BufferTooSmall { needed } => {
                write!(f, "buffer too small for a {needed}-byte KCP message")
            }
        }
    }
}

impl std::error::Error for RecvError {}
