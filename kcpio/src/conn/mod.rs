//! One KCP session, sans-IO: ARQ, FEC and lifecycle behind one type.
//!
//! [`Conn`] is what kcp-go calls a `UDPSession` minus the socket: the
//! [`arq::Kcp`](crate::arq::Kcp), the FEC encoder and decoder, the session's
//! lifecycle (failure, shutdown and linger, release, idle timeout, dead
//! link) and its next deadline. Opened datagrams and `now` go in; datagram
//! bodies ready for sealing and one deadline come out. It reads no clock,
//! owns no socket and spawns nothing (clippy's `disallowed_methods` and
//! `disallowed_types` are denied here), so it runs the same under the tokio
//! driver, a simulator or a game loop.
//!
//! # API in one screen
//!
//! ```text
//! Conn::new(conv, &config) -> Result<Conn, ConfigError>
//! // network side (now: Duration since the caller's epoch, never going back)
//! conn.handle_packet(now, plaintext) -> Received     // one opened datagram
//! conn.handle_timeout(now)                           // when poll_timeout says
//! conn.poll_transmit(now, slot) -> Option<Transmit>  // until None; seal slot[..]
//! conn.poll_timeout() -> Option<Duration>            // next handle_timeout
//! // application side: verdicts, never Poll
//! conn.write(data) / read(buf) -> Result<usize, ConnError>
//! conn.send_message(msg) -> Result<(), ConnError>
//! conn.recv_message(buf) -> Result<usize, ConnError>
//! conn.shutdown() -> Result<(), ConnError>           // Ok once all is acknowledged
//! conn.send_datagram(payload) / recv_datagram(buf)   // unreliable, beside the stream
//! conn.release()  conn.abort(reason)                  // lifecycle from outside
//! conn.connect(now) conn.established() -> Result<(), ConnError> // client probe
//! conn.readable() conn.writable() conn.error() conn.is_finished() conn.stats()
//! conn.header_len() conn.max_datagram()              // the slot layout
//! ```
//!
//! # Datagram layout
//!
//! `poll_transmit` fills a caller slot of at least
//! [`max_datagram`](Conn::max_datagram) bytes laid out as in `docs/DESIGN.md`:
//! `[crypto header room | FEC header | KCP packet | crypto trailer room]`.
//! It writes from [`header_len`](Conn::header_len) on and returns the
//! plaintext length `len`; the caller seals in place with
//! [`PacketCrypto::seal`](crate::crypto::PacketCrypto::seal)`(slot, len,
//! nonce)` and sends the `header_len + len + trailer` bytes it returns. This
//! module is the one place that arithmetic lives.
//!
//! # Unreliable datagrams
//!
//! Beside the reliable stream a session carries unreliable datagrams,
//! byte-compatible with kcp-go's out-of-band packets (`SendOOB` /
//! `SetOOBHandler`, kcp-go v5.6.60 and later): each
//! [`send_datagram`](Conn::send_datagram) payload leaves as one UDP
//! datagram (FEC header with flag 0xF3, the conv, the payload; sealed like
//! any packet), is never retransmitted, acknowledged or FEC-protected, and
//! does not touch the ARQ, so the stream's reliability and order are
//! unaffected. As in kcp-go they need FEC on
//! ([`ConfigBuilder::fec`](crate::ConfigBuilder::fec)), whose header they
//! reuse, and a payload is at most
//! [`max_datagram_payload`](Conn::max_datagram_payload) bytes (the KCP mtu
//! minus the 4-byte conv: 1368 with the default mtu 1400 and a CFB
//! cipher). Both directions queue at most [`DATAGRAM_QUEUE_LEN`] datagrams
//! and [`DATAGRAM_QUEUE_BYTES`] payload bytes; received datagrams beyond
//! that are dropped and counted ([`SessionStats::oob_dropped`]).
//!
//! ## FEC-protected datagrams between kcpio ends
//!
//! With [`ConfigBuilder::datagram_fec`](crate::ConfigBuilder::datagram_fec)
//! on at both ends (FEC for the stream is then not needed), the same calls
//! carry datagrams under a kcpio extension of the OOB packet, negotiated
//! on the KCP window probe (the client offers on its connect probe, and
//! when nothing answered that, or without a connect probe from right
//! after its first datagram, on up to [`OFFER_RESENDS`] lone window
//! probes outside the FEC stream; a
//! listener's session answers only in kind, see
//! [`answer_datagram_fec_only`](Conn::answer_datagram_fec_only)), so a
//! kcp-go or kcptun peer sees exactly kcp-go's wire and gets plain OOB
//! datagrams. Once [`datagram_fec_negotiated`](Conn::datagram_fec_negotiated):
//!
//! - each datagram leaves at once as a data shard; the group's parity
//!   follows when it holds as many shards as arrive within the group
//!   deadline ([`datagram_fec_deadline`](crate::ConfigBuilder::datagram_fec_deadline),
//!   15 ms; at most 32) or at that deadline; a slow stream (one datagram
//!   per 12 ms or more at the default) gets its parity right after each
//!   datagram;
//! - the receiver hands each datagram on as it arrives, and a rebuilt one
//!   the moment it is rebuilt (nothing waits for a group);
//! - the receiver reports the loss it sees (rate and burst length) every
//!   50 ms; the sender picks the fewest parity shards meeting the residual
//!   target ([`datagram_fec_residual_ppm`](crate::ConfigBuilder::datagram_fec_residual_ppm))
//!   on a Gilbert-Elliott model for the group size at hand, paces data and
//!   parity within the rate the path delivered, lowers parity when that
//!   rate does not hold it, and drops the oldest queued datagrams (counted)
//!   when even the data does not fit; the send queue is bounded by time
//!   first: each datagram waits at most twice the group deadline (pending
//!   parity shed before data waits past one), and while the path shows a
//!   standing queue it holds up to [`DATAGRAM_FEC_SEND_QUEUE_LEN`]
//!   datagrams and [`DATAGRAM_FEC_SEND_QUEUE_BYTES`] bytes (a tunnelled
//!   TCP's burst for that long), so pacing delays a burst rather than
//!   shedding it; without one (a datagram leaves after half the deadline
//!   whatever the pacing) [`DATAGRAM_FEC_OPEN_QUEUE_LEN`] and
//!   [`DATAGRAM_FEC_OPEN_QUEUE_BYTES`]; a full
//!   send queue drops its oldest instead of saying `WouldBlock`; the
//!   receive queue holds [`DATAGRAM_FEC_RECV_QUEUE_LEN`] datagrams and
//!   [`DATAGRAM_FEC_RECV_QUEUE_BYTES`] bytes;
//! - a datagram longer than one packet is cut into up to 16 fragments and
//!   reassembled (4 at once, 1 s each), so
//!   [`max_datagram_payload`](Conn::max_datagram_payload) grows: one packet
//!   carries 1,353 bytes at the default mtu of 1400 under `aes-128-gcm`
//!   (1,361 under a CFB cipher), the most a datagram may be is 16 times
//!   that, capped at [`DATAGRAM_QUEUE_BYTES`];
//! - a 1,024-shard replay window drops replays and duplicates; counters
//!   are in [`SessionStats::datagram_fec`].
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod datagram;
mod dgram_fec;
mod error;
mod fec_rx;
mod loss_model;
mod stream_fec;
#[cfg(test)]
mod tests;

pub use datagram::{
    DATAGRAM_FEC_OPEN_QUEUE_BYTES, DATAGRAM_FEC_OPEN_QUEUE_LEN, DATAGRAM_FEC_RECV_QUEUE_BYTES,
    DATAGRAM_FEC_RECV_QUEUE_LEN, DATAGRAM_FEC_SEND_QUEUE_BYTES, DATAGRAM_FEC_SEND_QUEUE_LEN,
    DATAGRAM_QUEUE_BYTES, DATAGRAM_QUEUE_LEN,
};
pub use dgram_fec::DatagramFecStats;
pub use error::{ConnError, SessionError};
/// The loss model's table rebuild for `benches/loss_model.rs`. Not part of the API.
#[doc(hidden)]
pub use loss_model::bench_support as loss_model_bench;
pub use stream_fec::StreamFecStats;

use datagram::DatagramQueue;
use dgram_fec::DgramFec;
use stream_fec::StreamFec;

use std::sync::Arc;
use std::time::Duration;

use crate::arq::{ArqStats, Kcp, Origin, RecvError, Timestamp};
use crate::config::{Config, ConfigError, ConfigInner};
use crate::crypto::MAX_DATAGRAM;
use crate::fec::{self, FecDecoder, FecEncoder, FecStats, PacketKind};

/// Counters and estimator state of one session, from [`Conn::stats`] and
/// [`KcpStream::stats`](crate::KcpStream::stats).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct SessionStats {
    /// The conversation id.
    pub conv: u32,
    /// Smoothed round-trip time (kcp-go `SRTT`, whole milliseconds; zero
    /// before the first acknowledgement).
    pub srtt: Duration,
    /// Current retransmission timeout (kcp-go `RTO`, whole milliseconds).
    pub rto: Duration,
    /// Segments queued or in flight (kcp-go `WaitSnd`).
    pub wait_snd: usize,
    /// Datagrams received for this session (after demultiplexing).
    pub datagrams_in: u64,
    /// Bytes of those datagrams on the wire.
    pub bytes_in: u64,
    /// Datagrams produced for this session, parity included.
    pub datagrams_out: u64,
    /// Bytes of those datagrams before sealing (crypto overhead not counted).
    pub bytes_out: u64,
    /// Packets the ARQ refused (malformed, wrong conv), regular or recovered.
    pub input_errors: u64,
    /// ARQ counters: segments in and out, retransmissions by rule, ...
    pub arq: ArqStats,
    /// FEC encoder counters (data shards and parity sent); default when FEC
    /// is off.
    pub fec_out: FecStats,
    /// FEC decoder counters (shards received, packets recovered); default
    /// until the peer sends FEC.
    pub fec_in: FecStats,
    /// Unreliable datagrams ([`Conn::send_datagram`]) sent: handed to the
    /// socket side by `poll_transmit`.
    pub oob_sent: u64,
    /// Unreliable datagrams received and queued for
    /// [`Conn::recv_datagram`].
    pub oob_received: u64,
    /// Unreliable datagrams received and dropped: the receive queue was full
    /// ([`DATAGRAM_QUEUE_LEN`], [`DATAGRAM_QUEUE_BYTES`]), or FEC is off on
    /// this side (datagrams unsupported, as in kcp-go).
    pub oob_dropped: u64,
    /// The FEC datagram extension
    /// ([`ConfigBuilder::datagram_fec`](crate::ConfigBuilder::datagram_fec)):
    /// negotiated or not, datagrams and shards each way, rebuilt and lost
    /// after FEC, redundancy in use, the loss and rate estimates, added
    /// delay. Default when off.
    pub datagram_fec: DatagramFecStats,
    /// The adaptive stream FEC between kcpio ends
    /// ([`ConfigBuilder::adaptive_fec`](crate::ConfigBuilder::adaptive_fec)):
    /// shards and parity each way, rebuilt, lost on the wire, redundancy in
    /// use and the loss estimate. Default until negotiated.
    pub stream_fec: StreamFecStats,
    /// What the model-based congestion controller
    /// ([`Congestion::Bbr`](crate::Congestion::Bbr)) estimates:
    /// bandwidth, minimum RTT, pacing rate, in-flight cap; `None` with the
    /// other controllers.
    pub congestion: Option<crate::arq::BbrStats>,
}

/// What [`Conn::handle_packet`] made of one packet, for the caller's
/// socket-level counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Received {
    /// The packet (or one FEC rebuilt with it) was valid input: the idle
    /// timer restarted.
    pub accepted: bool,
    /// KCP packets the ARQ refused: the packet's own, or recovered ones.
    pub bad_kcp: u32,
    /// The FEC decoder refused the packet.
    pub bad_fec: bool,
}

/// One datagram body written by [`Conn::poll_transmit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Plaintext bytes at `slot[header_len..header_len + len]`: the length
    /// to hand to `PacketCrypto::seal`.
    pub len: usize,
    /// A FEC parity packet (else a KCP packet, FEC-framed when FEC is on).
    pub parity: bool,
}

/// A shutdown or release timer: asked for, then armed at the next call
/// that brings `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Linger {
    Off,
    Requested,
    Until(Duration),
}

impl Linger {
    fn arm(&mut self, now: Duration, linger: Duration) {
        if *self == Linger::Requested {
            *self = Linger::Until(now.saturating_add(linger));
        }
    }

    fn until(self) -> Option<Duration> {
        match self {
            Linger::Until(d) => Some(d),
            _ => None,
        }
    }
}

/// The receive side of FEC, made at the first FEC packet from the peer.
struct FecIn {
    dec: FecDecoder,
    /// Recovered packets land here before they go to the ARQ.
    scratch: Box<[u8]>,
}

/// The first wait between connect probes; doubled after each, up to
/// [`PROBE_MAX_WAIT`].
pub const PROBE_FIRST_WAIT: Duration = Duration::from_millis(250);
/// The longest wait between two connect probes.
pub const PROBE_MAX_WAIT: Duration = Duration::from_secs(2);

/// When a repeated probe goes out: at `next`, then `wait` later, the wait
/// doubling up to [`PROBE_MAX_WAIT`] (the connect probe, the offer's
/// resends, the proof probe).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Backoff {
    /// When the next probe goes out.
    next: Duration,
    /// The wait after that one.
    wait: Duration,
}

impl Backoff {
    /// The first probe at `next`, the second [`PROBE_FIRST_WAIT`] after it.
    fn starting(next: Duration) -> Self {
        Self {
            next,
            wait: PROBE_FIRST_WAIT,
        }
    }

    /// Whether a probe is due at `now`; if so, the schedule moves on to
    /// the next one.
    fn step(&mut self, now: Duration) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now.saturating_add(self.wait);
        self.wait = self.wait.saturating_mul(2).min(PROBE_MAX_WAIT);
        true
    }
}

/// A client's connect probe while it waits for the peer's first datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Probe {
    /// When its WASKs go out.
    at: Backoff,
    /// When the connect fails (`None`: never).
    deadline: Option<Duration>,
}

/// Tagged window probes a client sends at most after its connect probe
/// ended with no WINS answering any of its probes, or from its first
/// datagram on when it has no connect probe: each alone in a KCP
/// datagram without the FEC header, at the connect probe's pace, until a
/// WINS comes back or its offers are answered in kind (`docs/DESIGN.md`,
/// "Negotiation").
pub const OFFER_RESENDS: u8 = 6;

/// A client's extension offer that nothing answered yet when its connect
/// probe ended: the tagged WASKs were lost (or their answers were) and an
/// ACK, data or the listener's own probe got through. The tag would then
/// ride only on keepalives, which a session that keeps writing never
/// sends. The tagged WASK goes on at the connect probe's pace, each alone
/// in an unframed KCP datagram (outside the FEC stream: no seqid, group
/// or other packet of the stream changes), until any WINS comes back
/// (kcp-go's is untagged: it heard the offer and does not speak it), the
/// offers are answered in kind, or [`OFFER_RESENDS`] went out. A client
/// without the connect probe starts it with its first datagram, the
/// first WASK right after that datagram (`Conn::spoke_first`).
#[derive(Clone, Copy, Debug)]
struct Offering {
    /// When they go out (the connect probe's schedule, continued).
    at: Backoff,
    /// How many may still go out.
    left: u8,
}

/// Port-unreachable reports (ICMP) on an established client session that
/// fail it ([`SessionError::PortUnreachable`]) when no valid datagram came
/// in between (see [`Conn::handle_unreachable`]).
pub const UNREACHABLE_REPORTS: u32 = 3;
/// The shortest streak of such reports that fails a session (or the
/// session's RTO when longer, up to [`UNREACHABLE_MAX_SPAN`]): a live peer
/// answers the probes sent meanwhile, which ends the streak.
pub const UNREACHABLE_SPAN: Duration = Duration::from_millis(250);
/// The longest streak asked for, however slow the path.
pub const UNREACHABLE_MAX_SPAN: Duration = Duration::from_secs(1);
/// While a streak lasts, a window probe goes out this often.
pub const UNREACHABLE_PROBE_EVERY: Duration = Duration::from_millis(250);

/// Port-unreachable reports since the last valid datagram.
#[derive(Clone, Copy, Debug)]
struct Unreachable {
    since: Duration,
    reports: u32,
    next_probe: Duration,
}

/// How much a peer that has not proved it receives may be sent: this many
/// times the bytes it sent us (QUIC's anti-amplification factor).
pub const AMPLIFICATION_FACTOR: u64 = 3;

pub use crate::config::PROOF_TIMEOUT;

/// The anti-amplification account of a peer that has not yet proved it
/// receives what we send.
#[derive(Clone, Copy, Debug)]
struct Unproven {
    /// Wire bytes received from the peer (crypto overhead included).
    received: u64,
    /// Wire bytes sent to it, parity, fillers and retransmissions included.
    sent: u64,
    /// The session fails unproven at this time.
    deadline: Duration,
    /// WINS received before our first WASK left (they answer nothing).
    wins_seen: u64,
    /// When the proof probe goes out again while nothing comes in (each
    /// input puts it off by its current wait): a peer that has nothing to
    /// send (a client waiting for a server that speaks first) may
    /// otherwise never be asked again after its answer was lost.
    probe: Backoff,
}

/// Datagram and packet counters of one session.
#[derive(Clone, Copy, Debug, Default)]
struct Wire {
    datagrams_in: u64,
    bytes_in: u64,
    datagrams_out: u64,
    bytes_out: u64,
    input_errors: u64,
    oob_sent: u64,
    oob_received: u64,
    oob_dropped: u64,
}

/// One KCP session, sans-IO: the ARQ, FEC and lifecycle of a kcp-go
/// `UDPSession` without the socket.
///
/// # Call contract
///
/// Time is a `Duration` since an epoch of the caller's choosing that never
/// goes back; the KCP timestamps on the wire are its milliseconds modulo
/// 2^32 (as `arq::Timestamp`).
///
/// - [`handle_packet`](Self::handle_packet) for every datagram of this
///   session after the caller opened it (decrypted and verified); the caller
///   has demultiplexed by address and conv.
/// - [`handle_timeout`](Self::handle_timeout) once
///   [`poll_timeout`](Self::poll_timeout) is reached.
/// - After every `handle_*` call and every application call,
///   [`poll_transmit`](Self::poll_transmit) until it returns `None`; then
///   re-read `poll_timeout`. A caller that stops early (no free slot) resumes
///   later without loss: parity and KCP output wait inside.
/// - The application calls ([`write`](Self::write), [`read`](Self::read),
///   [`send_message`](Self::send_message),
///   [`recv_message`](Self::recv_message), [`shutdown`](Self::shutdown),
///   [`send_datagram`](Self::send_datagram),
///   [`recv_datagram`](Self::recv_datagram)) return at once with a
///   verdict; [`ConnError::WouldBlock`] means "retry after the next
///   `handle_*` call" ([`readable`](Self::readable),
///   [`writable`](Self::writable) and their `datagram_` twins tell when).
///   They may move the deadline earlier: a driver compares `poll_timeout`
///   with the deadline it armed.
/// - [`is_finished`](Self::is_finished) after `poll_transmit` returned
///   `None`: the session failed, or was released and has nothing left to
///   send. The caller then drops it.
///
/// Nothing from the network panics or grows without bound: a malformed
/// packet is counted in [`Received`] and dropped.
///
/// # Examples
///
/// Two sessions over a lossless in-memory link, driven by a plain loop:
///
/// ```
/// use std::time::Duration;
/// use kcpio::{Config, Conn, Key, Method};
///
/// let config = Config::builder()
///     .crypto(Method::Aes128, Key::passphrase("secret"))
///     .fec(3, 1)
///     .build()?;
/// let crypto = config.packet_crypto();
/// let mut conns = [Conn::new(7, &config)?, Conn::new(7, &config)?];
/// conns[0].write(b"hello over kcp").unwrap();
///
/// let mut slot = vec![0u8; conns[0].max_datagram()];
/// let mut got = Vec::new();
/// let mut now = Duration::ZERO;
/// for _ in 0..100 {
///     for from in 0..2 {
///         let [a, b] = &mut conns;
///         let (from, to) = if from == 0 { (a, b) } else { (b, a) };
///         from.handle_timeout(now);
///         while let Some(t) = from.poll_transmit(now, &mut slot) {
///             let nonce = [0x5a; 16]; // a CSPRNG's in real use
///             let n = crypto.seal(&mut slot, t.len, &nonce[..crypto.nonce_len()])?;
///             // ... the datagram slot[..n] crosses the network ...
///             let plain = crypto.open(&mut slot[..n])?;
///             let _ = to.handle_packet(now, &slot[plain]);
///         }
///     }
///     let mut buf = [0u8; 64];
///     if let Ok(n) = conns[1].read(&mut buf) {
///         got.extend_from_slice(&buf[..n]);
///     }
///     now += Duration::from_millis(10);
/// }
/// assert_eq!(got, b"hello over kcp");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Conn {
    kcp: Kcp,
    config: Arc<ConfigInner>,
    enc: Option<FecEncoder>,
    dec: Option<FecIn>,
    /// Crypto header room, FEC header (8 or 0), KCP mtu, whole slot.
    header: usize,
    fec_header: usize,
    kcp_mtu: usize,
    datagram: usize,
    /// The wire size of a datagram carrying `n` plaintext bytes is
    /// `n + overhead`.
    overhead: usize,
    /// The latest `now` seen.
    now: Duration,
    last_input: Duration,
    /// When the last datagram left (the keepalive counts from it).
    last_output: Duration,
    /// A client's connect probe, until any valid datagram arrives.
    connecting: Option<Probe>,
    /// A client's offer resent after the connect probe, while unanswered.
    offering: Option<Offering>,
    /// A keepalive probe went out and nothing valid came in since.
    keepalive_unanswered: bool,
    /// A client's quiet probe ([`probe_when_quiet`](Self::probe_when_quiet)):
    /// `None` when off.
    quiet: Option<Quiet>,
    /// The peer's host reported its port unreachable and nothing valid
    /// came in since.
    unreachable: Option<Unreachable>,
    error: Option<SessionError>,
    write_closed: bool,
    shutdown: Linger,
    released: bool,
    release: Linger,
    wire: Wire,
    /// Unreliable datagrams waiting for `poll_transmit`.
    oob_out: DatagramQueue,
    /// Unreliable datagrams waiting for `recv_datagram`.
    oob_in: DatagramQueue,
    /// Set while the peer has not proved it receives (a listener's new
    /// session): output is held to `AMPLIFICATION_FACTOR` times input.
    unproven: Option<Unproven>,
    /// A datagram body produced but over the budget: `(len, parity)` of the
    /// plaintext kept in `held_buf`, sent first once the budget allows.
    held: Option<(usize, bool)>,
    held_buf: Vec<u8>,
    /// The FEC datagram extension, when configured.
    dx: Option<Box<DgramFec>>,
    /// This side tags its window probes (a client with the extension on,
    /// or any side once the peer offered it).
    dx_offer: bool,
    /// The peer speaks the extension.
    dx_on: bool,
    /// The adaptive stream FEC, once negotiated: it then frames the KCP
    /// output in place of the fixed encoder.
    sx: Option<Box<StreamFec>>,
    /// This side tags its probes with the stream offer (a client with
    /// adaptive FEC on, or any side once the peer offered it).
    sx_offer: bool,
    /// The peer's stream-extension packets arrived: its data shards no
    /// longer go to the fixed decoder.
    sx_peer: bool,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("conv", &self.kcp.conv())
            .field("error", &self.error)
            .field("write_closed", &self.write_closed)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

/// The KCP timestamp of `now`: its milliseconds modulo 2^32.
/// The KCP bytes of an opened datagram (none in parity or OOB).
fn kcp_of(packet: &[u8]) -> Option<&[u8]> {
    match fec::classify(packet) {
        PacketKind::Kcp => Some(packet),
        PacketKind::Data => fec::data_payload(packet),
        PacketKind::Parity | PacketKind::Oob => None,
    }
}

fn ts(now: Duration) -> Timestamp {
    Timestamp::from_millis(now.as_millis() as u32)
}

/// Hands each packet `poll` rebuilds into `buf` to the ARQ as
/// [`Origin::Recovered`], counting those it refuses.
fn feed_rebuilt(
    kcp: &mut Kcp,
    now_ts: Timestamp,
    out: &mut Received,
    buf: &mut [u8],
    mut poll: impl FnMut(&mut [u8]) -> Option<usize>,
) {
    while let Some(n) = poll(buf) {
        let Some(rec) = buf.get(..n) else {
            break;
        };
        if kcp.handle_datagram(now_ts, rec, Origin::Recovered).is_err() {
            out.bad_kcp += 1;
        }
    }
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Conn {
    /// A session for conversation `conv` with `config`'s ARQ, FEC, cipher
    /// layout and lifecycle settings (idle timeout, linger). Its clock starts
    /// at the first call that brings `now`; the idle timer at zero.
    ///
    /// # Errors
    ///
    /// None for a `Config` from [`ConfigBuilder::build`](crate::ConfigBuilder::build),
    /// which validated everything; the ARQ's or FEC's refusal otherwise.
    pub fn new(conv: u32, config: &Config) -> Result<Self, ConfigError> {
        Self::with_config(conv, config.inner.clone(), Duration::ZERO)
    }

    /// [`new`](Self::new) for the driver: shares its configuration, starts
    /// the idle timer at `now`.
    pub(crate) fn with_config(
        conv: u32,
        config: Arc<ConfigInner>,
        now: Duration,
    ) -> Result<Self, ConfigError> {
        let mut kcp = Kcp::new(conv, &config.arq).map_err(ConfigError::Arq)?;
        // Input ACKs flushed late (the driver's deferred flush) share the
        // reply's datagram.
        kcp.set_merge_flushes(true);
        // Window updates and data leave when reads and ACKs make room, not
        // at the next tick (bulk at the path's pace, not one window per interval).
        kcp.set_ack_clock(true);
        let enc = match config.fec {
            Some((data, parity)) => {
                let mut enc = FecEncoder::new(data, parity)
                    .map_err(|_| ConfigError::InvalidFec { data, parity })?;
                enc.set_group_deadline(config.fec_group_deadline);
                // Until the peer is seen sending our shape, its decoder may
                // be guessing (kcp-go v5.6.1 decodes with its guess): guard.
                enc.set_guard(Some(conv));
                Some(enc)
            }
            None => None,
        };
        let header = config.crypto.header_len();
        let fec_header = config.fec_header();
        let kcp_mtu = config.arq.mtu;
        let trailer = config.crypto.trailer_len();
        let dx = config.datagram_fec.then(|| {
            Box::new(DgramFec::new(
                config.datagram_fec_deadline,
                config.datagram_fec_residual,
                header + trailer,
                config
                    .mtu
                    .clamp(1, MAX_DATAGRAM)
                    .saturating_sub(header + trailer),
            ))
        });
        let dx_offer = config.datagram_fec;
        let sx_offer = config.adaptive_fec && config.fec.is_some();
        Ok(Self {
            kcp,
            enc,
            dec: None,
            header,
            fec_header,
            kcp_mtu,
            datagram: config.mtu.clamp(1, MAX_DATAGRAM),
            overhead: header + trailer,
            config,
            now,
            last_input: now,
            last_output: now,
            connecting: None,
            offering: None,
            keepalive_unanswered: false,
            quiet: None,
            unreachable: None,
            error: None,
            write_closed: false,
            shutdown: Linger::Off,
            released: false,
            release: Linger::Off,
            wire: Wire::default(),
            oob_out: DatagramQueue::default(),
            oob_in: DatagramQueue::default(),
            unproven: None,
            held: None,
            held_buf: Vec::new(),
            dx,
            dx_offer,
            dx_on: false,
            sx: None,
            sx_offer,
            sx_peer: false,
        })
    }

    /// The conversation id.
    #[must_use]
    pub fn conv(&self) -> u32 {
        self.kcp.conv()
    }

    /// Bytes a [`poll_transmit`](Self::poll_transmit) slot needs: the
    /// configured datagram size (`mtu`, at most 1500).
    #[must_use]
    pub fn max_datagram(&self) -> usize {
        self.datagram
    }

    /// Where the plaintext starts in a slot: the crypto header's room.
    #[must_use]
    pub fn header_len(&self) -> usize {
        self.header
    }

    /// [`Kcp::set_initial_sn`] for the simulator (`tests/sim`), so a test
    /// crosses the 2^32 sequence wrap; both ends must use the same value,
    /// before any traffic. Not part of the stable API.
    #[doc(hidden)]
    pub fn set_initial_sn(&mut self, sn: u32) -> bool {
        self.kcp.set_initial_sn(sn)
    }

    /// Treats the peer as unproven until it shows it receives what this
    /// side sends, as a server must for a peer whose address may be
    /// forged (QUIC's address validation, RFC 9000 section 8.1, in spirit):
    ///
    /// - until then, the wire bytes sent to it (crypto overhead, FEC parity
    ///   and fillers, retransmissions all counted) stay within
    ///   [`AMPLIFICATION_FACTOR`] times the wire bytes received from it; a
    ///   datagram over that budget waits inside until more input arrives;
    /// - while a datagram waits over the budget, the ACKs, window answers
    ///   and the proof probe still go out alone within it, so the peer can
    ///   always prove it receives;
    /// - the proof is an acknowledgement of a segment this side sent, or a
    ///   window answer (WINS) to the window probe (WASK) this side sends
    ///   with its first flush, after every datagram while unproven, and
    ///   again [`PROBE_FIRST_WAIT`] after the last one (doubling up to
    ///   [`PROBE_MAX_WAIT`]) while the peer is silent (kcp-go and C KCP
    ///   answer one at their next flush);
    /// - without proof by `now +` the configured
    ///   [`proof_timeout`](crate::ConfigBuilder::proof_timeout) (default
    ///   [`PROOF_TIMEOUT`]), the session fails with
    ///   [`SessionError::DeadLink`].
    ///
    /// The KCP wire has no secret for a peer to echo, so an attacker who
    /// holds the key (or any attacker under `null` crypto) can forge the
    /// proof blindly; the rule stops reflection by replayed or spoofed
    /// datagrams of others. The tokio listener calls it for every session
    /// it accepts; client sessions start proven (they chose their peer).
    pub fn require_proof(&mut self, now: Duration) {
        self.advance(now);
        if self.unproven.is_none() && !self.kcp.peer_acked() {
            self.unproven = Some(Unproven {
                received: 0,
                sent: 0,
                deadline: self.now.saturating_add(self.config.proof_timeout),
                wins_seen: self.kcp.stats().wins_in,
                probe: Backoff::starting(self.now.saturating_add(PROBE_FIRST_WAIT)),
            });
            self.kcp.request_window_probe();
        }
    }

    /// A listener's session: speaks the FEC datagram extension
    /// ([`ConfigBuilder::datagram_fec`](crate::ConfigBuilder::datagram_fec))
    /// only after the peer offered it, so a kcp-go client sees exactly
    /// kcp-go's wire. The tokio listener calls it for every session it
    /// accepts; no effect without the extension or once negotiated.
    pub fn answer_datagram_fec_only(&mut self) {
        if !self.dx_on {
            self.dx_offer = false;
        }
        if self.sx.is_none() {
            self.sx_offer = false;
        }
    }

    /// The peer offered the adaptive stream FEC
    /// ([`ConfigBuilder::adaptive_fec`](crate::ConfigBuilder::adaptive_fec))
    /// and this side has it on (with FEC configured): the stream's parity
    /// now follows the path's loss instead of the configured shape.
    #[must_use]
    pub fn adaptive_fec_negotiated(&self) -> bool {
        self.sx.is_some()
    }

    /// The peer offered or spoke the adaptive stream FEC: switch the
    /// sender, continuing the fixed encoder's seqids.
    fn sx_heard(&mut self) {
        if self.sx.is_some() || !self.config.adaptive_fec {
            return;
        }
        let Some(enc) = self.enc.as_ref() else {
            return;
        };
        let deadline = self
            .config
            .fec_group_deadline
            .map_or(stream_fec::DEFAULT_DEADLINE, |ms| {
                Duration::from_millis(u64::from(ms))
            });
        self.sx = Some(Box::new(StreamFec::new(deadline, enc.next_seqid())));
        self.sx_offer = true;
    }

    /// The tag this side's window probes carry (`None`: untagged).
    fn offer_tag(&self) -> Option<u8> {
        let dx = if self.dx_offer {
            dgram_fec::OFFER_BIT
        } else {
            0
        };
        let sx = if self.sx_offer {
            stream_fec::OFFER_BIT
        } else {
            0
        };
        let bits = dx | sx;
        (bits != 0).then_some(PROBE_TAG_BASE | bits)
    }

    /// This side offers an extension the peer has not answered in kind.
    fn offer_pending(&self) -> bool {
        (self.dx_offer && self.dx.is_some() && !self.dx_on) || (self.sx_offer && self.sx.is_none())
    }

    /// The peer answered one of this side's window probes (a WINS came
    /// in): it heard the offer, and answered in kind or not at all.
    fn probe_answered(&self) -> bool {
        self.kcp.stats().wins_in > 0
    }

    /// The connect probe `p` ended on valid input: the offer goes on while
    /// nothing answered it (see [`Offering`]).
    fn connected(&mut self, p: Probe) {
        if self.offer_pending() && !self.probe_answered() {
            self.offering = Some(Offering {
                at: p.at,
                left: OFFER_RESENDS,
            });
        }
    }

    /// This side's first datagram is leaving: with nothing received yet
    /// and no connect probe, it is a client without one
    /// ([`connect_probe(false)`](crate::ConfigBuilder::connect_probe),
    /// [`kcp_go_defaults`](crate::ConfigBuilder::kcp_go_defaults)), which
    /// sends no WASK of its own (the peer's are answered by WINSs, which
    /// a migrating client clocks instead of tagging), so nothing would
    /// carry its offer to a peer that never asks: the offer goes out at
    /// once, alone, right after this datagram, and on as the connect
    /// probe's resends do (see [`Offering`]).
    fn spoke_first(&mut self) {
        if self.connecting.is_none() && self.wire.datagrams_in == 0 && self.offer_pending() {
            self.offering = Some(Offering {
                at: Backoff::starting(self.now),
                left: OFFER_RESENDS,
            });
        }
    }

    /// The peer speaks the FEC datagram extension (it offered it, or sent
    /// an extension packet) and this side has it on: datagrams are
    /// FEC-protected from now on.
    #[must_use]
    pub fn datagram_fec_negotiated(&self) -> bool {
        self.dx_on
    }

    fn datagrams_supported(&self) -> bool {
        self.enc.is_some() || self.dx.is_some()
    }

    /// Datagrams may leave: as kcp-go OOB packets, which need FEC on the
    /// sending side (kcp-go's rule; kcptun's kcp-go 5.6.1 listener has no
    /// OOB and reads one as a KCP packet of another conv, and, when its
    /// bytes 12..16 are zero, closes the session for a new one), or under
    /// the negotiated extension.
    fn datagrams_sendable(&self) -> bool {
        self.enc.is_some() || self.dx_on
    }

    /// The plaintext room of one slot.
    fn plain_max(&self) -> usize {
        self.datagram.saturating_sub(self.overhead)
    }

    /// The peer offered or spoke the extension.
    fn dx_heard(&mut self) {
        if let Some(dx) = self.dx.as_mut()
            && !self.dx_on
        {
            self.dx_on = true;
            self.dx_offer = true;
            dx.set_negotiated();
            // Bursts wait for pacing (bounded by the group deadline)
            // rather than overflow kcp-go's OOB queue bound.
            // (Deeper while the path shows a standing queue: see
            // `DgramFec::send_queue_bounds`, applied at each send.)
            self.oob_out
                .raise_bounds(DATAGRAM_FEC_OPEN_QUEUE_LEN, DATAGRAM_FEC_OPEN_QUEUE_BYTES);
            // And one batch of the driver's receive (32 packets, more with
            // GRO, plus what rebuilding adds) waits for the reader rather
            // than overflow 32 KiB: a tunnel reader on a busy core lost
            // 7% of a WireGuard download there.
            self.oob_in
                .raise_bounds(DATAGRAM_FEC_RECV_QUEUE_LEN, DATAGRAM_FEC_RECV_QUEUE_BYTES);
        }
    }

    /// The peer proved it receives what this side sends, or was never
    /// asked to (see [`require_proof`](Self::require_proof)).
    #[must_use]
    pub fn is_proven(&self) -> bool {
        self.unproven.is_none()
    }

    /// After input: the proof arrived, or ask for it again.
    fn check_proof(&mut self) {
        let Some(u) = self.unproven.as_mut() else {
            return;
        };
        let arq = self.kcp.stats();
        // A WINS answers our probe only once one has left: those received
        // before are not counted.
        let answered = arq.wask_out > 0 && arq.wins_in > u.wins_seen;
        if arq.wask_out == 0 {
            u.wins_seen = arq.wins_in;
        }
        if self.kcp.peer_acked() || answered {
            self.unproven = None;
        } else {
            self.kcp.request_window_probe();
            u.probe.next = self.now.saturating_add(u.probe.wait);
        }
    }

    /// Whether a datagram carrying `len` plaintext bytes fits the
    /// anti-amplification budget; charges it when it does.
    fn charge(&mut self, len: usize) -> bool {
        let Some(u) = self.unproven.as_mut() else {
            return true;
        };
        let wire = (len + self.overhead) as u64;
        if u.sent + wire > u.received.saturating_mul(AMPLIFICATION_FACTOR) {
            return false;
        }
        u.sent += wire;
        true
    }

    /// Sends a produced body, or keeps it for later when it is over the
    /// budget (`slot` starts at the plaintext).
    fn emit(&mut self, plain: &[u8], parity: bool) -> Option<Transmit> {
        let len = plain.len();
        if self.charge(len) {
            return Some(self.sent(len, parity));
        }
        self.held_buf.clear();
        self.held_buf.extend_from_slice(plain);
        self.held = Some((len, parity));
        None
    }

    // ------------------------------------------------------------ network

    fn advance(&mut self, now: Duration) {
        self.now = self.now.max(now);
        let linger = self.config.linger;
        self.shutdown.arm(self.now, linger);
        self.release.arm(self.now, linger);
    }

    /// One opened datagram of this session (plaintext, FEC-framed or not):
    /// FEC data shards go to the ARQ and then the decoder, parity to the
    /// decoder, and packets the decoder rebuilds to the ARQ as
    /// [`Origin::Recovered`]. Ignored once the session failed.
    ///
    /// The datagram is taken to have arrived at `now`; where the caller
    /// knows better (a kernel receive stamp), use
    /// [`handle_packet_at`](Self::handle_packet_at).
    pub fn handle_packet(&mut self, now: Duration, packet: &[u8]) -> Received {
        self.handle_packet_at(now, now, packet)
    }

    /// As [`handle_packet`](Self::handle_packet), for a datagram that
    /// arrived at `arrived` (same clock as `now`) and is processed at
    /// `now`, later when the caller woke late. `arrived` may be a little
    /// after `now` when the caller read `now` before its receive call; it
    /// is taken as given.
    ///
    /// Only the FEC receivers' one-way-delay samples (the path's queueing
    /// delay in their reports) take `arrived`, so a late wake-up does not
    /// read as a queue on the path. Everything else runs at `now`: the ARQ's
    /// round-trip samples and retransmission timers must include this host's
    /// own delay (a retransmission decided on a busy host waits for that host
    /// too, so a timeout that left it out would fire early), the ACKs carry
    /// the peer's own stamps back (no receive time is on the wire), and kcp-go,
    /// which this ARQ matches packet for packet, has no other time.
    pub fn handle_packet_at(
        &mut self,
        now: Duration,
        arrived: Duration,
        packet: &[u8],
    ) -> Received {
        self.advance(now);
        let mut out = Received::default();
        if self.error.is_some() {
            return out;
        }
        let now_ts = ts(self.now);
        self.wire.datagrams_in += 1;
        self.wire.bytes_in += (packet.len() + self.overhead) as u64;
        if let Some(u) = self.unproven.as_mut() {
            u.received += (packet.len() + self.overhead) as u64;
        }
        let kind = fec::classify(packet);
        let awaiting = (self.dx.is_some() && !self.dx_on)
            || (self.sx.is_none() && self.config.adaptive_fec && self.enc.is_some());
        // This side did not offer and now speaks what the peer offered.
        let mut ask_back = false;
        let kcp_bytes = match kind {
            PacketKind::Kcp | PacketKind::Data if awaiting => {
                let bytes = if kind == PacketKind::Kcp {
                    Some(packet)
                } else {
                    fec::data_payload(packet)
                };
                let offers = bytes.map_or(0, |b| probe_offers(b, self.kcp.conv()));
                let silent = self.offer_tag().is_none();
                if offers & dgram_fec::OFFER_BIT != 0 {
                    self.dx_heard();
                }
                if offers & stream_fec::OFFER_BIT != 0 {
                    self.sx_heard();
                }
                ask_back = silent && self.offer_tag().is_some();
                bytes
            }
            PacketKind::Kcp => Some(packet),
            PacketKind::Data => fec::data_payload(packet),
            PacketKind::Parity => None,
            PacketKind::Oob => {
                self.handle_oob(packet, arrived, &mut out);
                None
            }
        };
        // A data shard too short for a KCP packet (a deadline filler or a
        // guard shard) is only for the decoder.
        let shard_only = kind == PacketKind::Data && kcp_bytes.is_none();
        if matches!(kind, PacketKind::Kcp | PacketKind::Data) && !shard_only {
            match kcp_bytes.map(|p| self.kcp.handle_datagram(now_ts, p, Origin::Regular)) {
                Some(Ok(())) => out.accepted = true,
                _ => out.bad_kcp += 1,
            }
        }
        // A listener's session heard the offer on the peer's WINS (its
        // answer to our proof probe), not on a WASK whose answer would
        // carry our tag: the peer does not know we speak it. One tagged
        // WASK of ours tells it (the peer is a kcpio client: a kcp-go
        // client never tags).
        if ask_back && !self.kcp.answers_probe() {
            self.kcp.request_window_probe();
        }
        if kind == PacketKind::Parity && stream_fec::is_stream_parity(packet) {
            // The peer's adaptive parity: only once this side speaks it.
            self.sx_heard();
            if self.sx.as_mut().is_some_and(|sx| sx.handle_parity(packet)) {
                out.accepted = true;
                self.sx_peer = true;
            } else {
                out.bad_fec = true;
            }
            self.feed_recovered(now_ts, &mut out);
        } else if kind == PacketKind::Data
            && let Some(sx) = self.sx.as_mut()
        {
            sx.handle_data(self.now, arrived, packet);
            if shard_only {
                out.accepted = true;
            }
            self.feed_recovered(now_ts, &mut out);
        }
        let fixed = match kind {
            PacketKind::Parity => !stream_fec::is_stream_parity(packet),
            PacketKind::Data => !self.sx_peer,
            _ => false,
        };
        if fixed {
            let shape = self.config.fec.unwrap_or((1, 1));
            let fec_in = self.dec.get_or_insert_with(|| FecIn {
                dec: FecDecoder::with_max_shards(shape.0, shape.1, self.config.fec_max_shards),
                scratch: vec![0; MAX_DATAGRAM].into_boxed_slice(),
            });
            if fec_in.dec.handle(packet).is_err() {
                out.bad_fec = true;
            } else if kind == PacketKind::Parity || shard_only {
                out.accepted = true;
            }
            // The peer sends our shape, so its decoder (kcp-go's too) works
            // in it from the start: no more guard shards.
            if let Some(enc) = self.enc.as_mut() {
                let ours = (enc.data_shards(), enc.parity_shards());
                if enc.guard().is_some() && fec_in.dec.learned_shape() == Some(ours) {
                    enc.set_guard(None);
                }
            }
            let dec = &mut fec_in.dec;
            feed_rebuilt(&mut self.kcp, now_ts, &mut out, &mut fec_in.scratch, |b| {
                dec.poll_recovered(b)
            });
        }
        self.wire.input_errors += u64::from(out.bad_kcp);
        if out.accepted
            && let Some(q) = self.quiet.as_mut()
        {
            q.heard(self.now, self.kcp.stats().push_in);
        }
        if out.accepted {
            self.last_input = self.now;
            if let Some(p) = self.connecting.take() {
                self.connected(p);
            }
            self.keepalive_unanswered = false;
            self.unreachable = None;
        }
        if self.offering.is_some() && (self.probe_answered() || !self.offer_pending()) {
            self.offering = None;
        }
        self.check_proof();
        out
    }

    /// Hands the KCP packets the adaptive stream FEC rebuilt to the ARQ.
    fn feed_recovered(&mut self, now_ts: Timestamp, out: &mut Received) {
        let Some(sx) = self.sx.as_mut().filter(|sx| sx.has_recovered()) else {
            return;
        };
        // Only when a group was rebuilt: not a zeroed buffer per packet.
        let mut buf = [0u8; MAX_DATAGRAM];
        feed_rebuilt(&mut self.kcp, now_ts, out, &mut buf, |b| {
            sx.poll_recovered(b)
        });
    }

    /// An out-of-band packet: its payload joins the receive queue when it
    /// carries this session's conv, datagrams are supported (FEC on) and
    /// the queue has room; else it is dropped and counted.
    fn handle_oob(&mut self, packet: &[u8], arrived: Duration, out: &mut Received) {
        if stream_fec::is_stream_report(packet) {
            if fec::oob_payload(packet).is_some_and(|(c, _)| c == self.kcp.conv()) {
                self.sx_heard();
                if let Some(sx) = self.sx.as_mut() {
                    if sx.handle_report(self.now, packet) {
                        out.accepted = true;
                        self.sx_peer = true;
                    }
                    return;
                }
            }
            out.bad_kcp += 1;
            return;
        }
        if self.dx.is_some() && dgram_fec::ext_type(packet).is_some() {
            if fec::oob_payload(packet).is_some_and(|(c, _)| c == self.kcp.conv()) {
                out.accepted = true;
                self.dx_heard();
                if let Some(dx) = self.dx.as_mut() {
                    let mut sink = dgram_fec::Sink {
                        queue: &mut self.oob_in,
                        now: self.now,
                        arrived,
                        dropped: &mut self.wire.oob_dropped,
                    };
                    let _ = dx.handle(packet, &mut sink);
                }
            } else {
                out.bad_kcp += 1;
            }
            return;
        }
        match fec::oob_payload(packet) {
            Some((conv, payload)) if conv == self.kcp.conv() => {
                // Valid input of this session: the peer is alive.
                out.accepted = true;
                if self.datagrams_supported() && self.oob_in.push_at(payload, self.now) {
                    self.wire.oob_received += 1;
                } else {
                    self.wire.oob_dropped += 1;
                }
            }
            _ => out.bad_kcp += 1,
        }
    }

    /// Runs the timers that are due at `now`: the ARQ's flush, the FEC group
    /// deadline, and arms a pending shutdown or release linger. Then call
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn handle_timeout(&mut self, now: Duration) {
        self.advance(now);
        if self.error.is_some() {
            return;
        }
        if let Some(u) = self.unproven
            && self.now >= u.deadline
        {
            self.error = Some(SessionError::DeadLink);
            return;
        }
        if let Some(u) = self.unproven.as_mut()
            && u.probe.step(self.now)
        {
            // Within the budget like any output (alone when data is held).
            self.kcp.probe_window();
        }
        if self.held.is_some() {
            // Blocked by the budget: the timers wait for the peer's input.
            return;
        }
        // Before the ARQ's tick, which would flush (and so hide) a pending
        // answer to the peer's probe.
        self.run_probes();
        let now_ts = ts(self.now);
        if self.kcp.poll_timeout().is_some_and(|t| now_ts.diff(t) >= 0) {
            self.kcp.handle_timeout(now_ts);
        }
        // kcpio-only FEC group deadline: close a group that did not fill in
        // time (fillers and parity come out of poll_parity).
        if let Some(sx) = self.sx.as_mut() {
            sx.handle_timeout(self.now);
        } else if let Some(enc) = self.enc.as_mut()
            && enc.poll_timeout().is_some_and(|t| now_ts.diff(t) >= 0)
        {
            enc.handle_timeout(now_ts);
        }
        if self.dx_on
            && let Some(dx) = self.dx.as_mut()
        {
            dx.handle_timeout(self.now);
        }
    }

    /// Writes the next datagram body into `slot` (at least
    /// [`max_datagram`](Self::max_datagram) bytes; a shorter slot gets `None`
    /// and nothing is taken): FEC parity first, so a completed group's parity
    /// is out before the next data shard, then queued unreliable datagrams
    /// ([`send_datagram`](Self::send_datagram)), then KCP packets,
    /// FEC-framed when FEC is on. `None` when nothing is due; the session's dead-link and
    /// idle rules are checked then.
    pub fn poll_transmit(&mut self, now: Duration, slot: &mut [u8]) -> Option<Transmit> {
        self.advance(now);
        if self.error.is_some() {
            return None;
        }
        let slot = slot.get_mut(..self.datagram)?;
        let (hc, hf) = (self.header, self.fec_header);
        if let Some((len, parity)) = self.held {
            slot.get(hc..hc + len)?;
            if !self.charge(len) {
                // Held by the budget: the ARQ's ACKs and probes still go
                // out alone within it (the proof needs them), the data
                // waits. The idle and dead-link rules still run, so a
                // silent unproven peer times out as any other.
                let control = self.poll_held_control(slot);
                if control.is_none() {
                    self.check_liveness();
                }
                return control;
            }
            slot.get_mut(hc..hc + len)?
                .copy_from_slice(self.held_buf.get(..len)?);
            self.held = None;
            return Some(self.sent(len, parity));
        }
        if let Some(sx) = self.sx.as_mut() {
            let conv = self.kcp.conv();
            if let Some(p) = slot
                .get_mut(hc..)
                .and_then(|b| sx.poll_report(self.now, b, conv))
            {
                return self.emit(slot.get(hc..hc + p)?, false);
            }
            if let Some(p) = slot.get_mut(hc..).and_then(|b| sx.poll_parity(b)) {
                return self.emit(slot.get(hc..hc + p)?, true);
            }
        } else if let Some(enc) = self.enc.as_mut()
            && let Some(p) = slot.get_mut(hc..).and_then(|b| enc.poll_parity(b))
        {
            return self.emit(slot.get(hc..hc + p)?, true);
        }
        if self.dx_on {
            let plain = self.plain_max();
            let conv = self.kcp.conv();
            if let (Some(dx), Some(body)) = (self.dx.as_mut(), slot.get_mut(hc..hc + plain))
                && let Some(len) = dx.poll_transmit(self.now, body, &mut self.oob_out, conv)
            {
                return self.emit(slot.get(hc..hc + len)?, false);
            }
        } else if let Some(len) = self.poll_oob(slot) {
            self.wire.oob_sent += 1;
            return self.emit(slot.get(hc..hc + len)?, false);
        }
        if self.quiet.as_mut().is_some_and(|q| q.due(self.now)) {
            return self.write_window_probe(crate::arq::CLOCKED_PROBE, 0, slot);
        }
        if let Some(t) = self.poll_offer(slot) {
            return Some(t);
        }
        let now_ts = ts(self.now);
        let wins_out = self.kcp.stats().wins_out;
        let kcp_buf = slot.get_mut(hc + hf..hc + hf + self.kcp_mtu)?;
        let Some(n) = self.kcp.poll_transmit(now_ts, kcp_buf) else {
            self.check_liveness();
            return None;
        };
        self.mark_probes(kcp_buf.get_mut(..n)?, wins_out);
        let len = self.fec_frame(slot.get_mut(hc..)?, n);
        self.emit(slot.get(hc..hc + len)?, false)
    }

    /// What a KCP packet's probes carry beyond kcp-go's: the offer's tag on
    /// a client's WASKs, and the clock on its WINS answers
    /// (`wins_out`: the ARQ's count before the packet was written).
    fn mark_probes(&mut self, packet: &mut [u8], wins_out: u64) {
        if let Some(tag) = self.offer_tag() {
            tag_probes(packet, tag);
        }
        // A client's answers are clocked for migration even when it offers
        // extensions: the listener hears the offer on the client's WASKs
        // (connect probe, keepalives), and the tunnel's clients offer
        // adaptive FEC by default.
        if self.quiet.is_some() && self.kcp.stats().wins_out != wins_out {
            clock_answers(packet, ts(self.now).as_millis(), self.kcp.wask_sn_in());
        }
    }

    /// While a body waits over the anti-amplification budget: the ARQ's
    /// ACKs, its answer to the peer's probe and its own proof probe
    /// ([`Kcp::poll_control`]), alone in a KCP packet that fits what is
    /// left of the budget, so a held body never keeps the peer from
    /// proving it receives (a listener that speaks first and lost its
    /// first flush would otherwise leave every connect probe unanswered).
    /// Unframed even with FEC on (kcp-go and kcpio take a KCP packet
    /// without the FEC header whatever their setting), so the FEC groups
    /// and parity wait with the held body. Charged to the budget.
    fn poll_held_control(&mut self, slot: &mut [u8]) -> Option<Transmit> {
        let u = self.unproven?;
        let left = u
            .received
            .saturating_mul(AMPLIFICATION_FACTOR)
            .saturating_sub(u.sent)
            .saturating_sub(self.overhead as u64);
        let room = usize::try_from(left).map_or(self.kcp_mtu, |l| l.min(self.kcp_mtu));
        let hc = self.header;
        let wins_out = self.kcp.stats().wins_out;
        let kcp_buf = slot.get_mut(hc..hc + room)?;
        let n = self.kcp.poll_control(ts(self.now), kcp_buf)?;
        self.mark_probes(kcp_buf.get_mut(..n)?, wins_out);
        // Within the budget by construction: `room` is what it leaves.
        self.charge(n).then(|| self.sent(n, false))
    }

    /// The oldest queued datagram framed as kcp-go's OOB packet at
    /// `slot[header..]`: `| 0xFFFFFFFF | 0xF3 | size | conv | payload |`.
    fn poll_oob(&mut self, slot: &mut [u8]) -> Option<usize> {
        let len = self.oob_out.front_len()?;
        let body = slot.get_mut(self.header..)?;
        let conv_at = fec::DATA_HEADER;
        let payload = body.get_mut(conv_at + 4..conv_at + 4 + len)?;
        self.oob_out.pop_into(payload)?;
        body.get_mut(conv_at..conv_at + 4)?
            .copy_from_slice(&self.kcp.conv().to_le_bytes());
        Some(fec::encode_oob(body, 4 + len))
    }

    fn sent(&mut self, len: usize, parity: bool) -> Transmit {
        if self.wire.datagrams_out == 0 {
            self.spoke_first();
        }
        self.last_output = self.now;
        self.wire.datagrams_out += 1;
        self.wire.bytes_out += len as u64;
        Transmit { len, parity }
    }

    /// The connect probe and the keepalive, when due: a WASK (see
    /// [`Kcp::probe_window`]) the peer answers with a WINS.
    fn run_probes(&mut self) {
        if let Some(u) = self.unreachable.as_mut()
            && self.now >= u.next_probe
        {
            u.next_probe = self.now.saturating_add(UNREACHABLE_PROBE_EVERY);
            self.kcp.probe_window();
        }
        if let Some(p) = self.connecting.as_mut() {
            if p.at.step(self.now) {
                self.kcp.probe_window();
            }
        } else if let Some(k) = self.keepalive_at()
            && self.now >= k
        {
            // Counted as output when it leaves, which re-arms this. The
            // answer to the peer's own probe, when one is due, is as
            // good as a probe of ours (the peer's probe was our input).
            self.last_output = self.now;
            if !self.kcp.answers_probe() {
                self.kcp.probe_window();
                self.keepalive_unanswered = true;
            }
        }
    }

    /// When the keepalive probe is due: `keepalive` after the last datagram
    /// we sent (any datagram proves as much to the peer's idle timer), or a
    /// quarter of that after a probe nothing answered yet, so a lossy path
    /// gets several tries before the idle timeout.
    fn keepalive_at(&self) -> Option<Duration> {
        let k = self.config.keepalive?;
        // Nothing to keep alive before the conversation began (a client
        // without the connect probe that has not written yet: a peer that
        // must see data first sees none of ours).
        if self.wire.datagrams_in == 0 && self.wire.datagrams_out == 0 {
            return None;
        }
        let wait = if self.keepalive_unanswered { k / 4 } else { k };
        Some(self.last_output.saturating_add(wait))
    }

    /// The connect, dead-link and idle rules, after the output is drained.
    /// The idle timer does not run while the connect probe does.
    fn check_liveness(&mut self) {
        if let Some(p) = self.connecting {
            if p.deadline.is_some_and(|d| self.now >= d) {
                self.error = Some(SessionError::ConnectTimeout);
            }
        } else if self.kcp.is_dead() {
            self.error = Some(SessionError::DeadLink);
        } else if let Some(idle) = self.config.idle_timeout
            && self.now.saturating_sub(self.last_input) >= idle
        {
            self.error = Some(SessionError::IdleTimeout);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must run next: the
    /// ARQ's flush, the FEC group deadline, the connect probe and its
    /// timeout, the keepalive, the idle timeout, and the shutdown and
    /// release lingers while data is unacknowledged. `None` when nothing is
    /// scheduled (a quiet session with keepalive and idle timeout off) or
    /// the session failed. A quiet session with them on has one deadline
    /// per keepalive interval.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        if self.error.is_some() {
            return None;
        }
        if self.shutdown == Linger::Requested
            || self.release == Linger::Requested
            || (!self.dx_on && !self.oob_out.is_empty())
        {
            return Some(self.now);
        }
        let proof = self.unproven.map(|u| u.deadline.min(u.probe.next));
        let idle = self.config.idle_timeout;
        let idle_at = idle.map(|i| self.last_input.saturating_add(i));
        if self.held.is_some() {
            // Blocked by the budget until the peer sends more.
            return earliest(proof, idle_at);
        }
        let now_ts = ts(self.now);
        let at = |t: Timestamp| self.now + Duration::from_millis(t.diff(now_ts).max(0) as u64);
        let mut next = self.kcp.poll_timeout().map(at);
        next = match self.sx.as_ref() {
            Some(sx) => earliest(next, sx.poll_timeout()),
            None => earliest(
                next,
                self.enc.as_ref().and_then(FecEncoder::poll_timeout).map(at),
            ),
        };
        if self.dx_on
            && let Some(dx) = self.dx.as_ref()
        {
            next = earliest(next, dx.poll_timeout(self.oob_out.front_time()));
        }
        if let Some(p) = self.connecting {
            next = earliest(next, Some(p.at.next));
            next = earliest(next, p.deadline);
        } else {
            next = earliest(next, self.keepalive_at());
            next = earliest(next, idle_at);
        }
        next = earliest(next, proof);
        next = earliest(next, self.unreachable.map(|u| u.next_probe));
        next = earliest(next, self.quiet.and_then(|q| q.at));
        next = earliest(next, self.offering.map(|o| o.at.next));
        if !self.kcp.is_flushed() {
            let shutdown = self.shutdown.until().filter(|&d| d > self.now);
            next = earliest(next, shutdown);
            next = earliest(next, self.release.until());
        }
        next
    }

    /// Starts the client's connect probe at `now`: a window probe (WASK,
    /// `sn` 0, `una` 0: a conversation opener) goes out at once and again
    /// after [`PROBE_FIRST_WAIT`], doubling up to [`PROBE_MAX_WAIT`],
    /// until any valid datagram of the conversation arrives (kcp-go and C
    /// KCP answer a WASK with a WINS at their next flush). With
    /// [`ConfigBuilder::connect_timeout`](crate::ConfigBuilder::connect_timeout)
    /// on, the session fails with [`SessionError::ConnectTimeout`] when
    /// nothing came by then. [`established`](Self::established) tells the
    /// outcome. Call once, before anything else is sent; no effect on a
    /// session that already heard from its peer.
    pub fn connect(&mut self, now: Duration) {
        self.advance(now);
        if self.error.is_some() || self.wire.datagrams_in > 0 {
            return;
        }
        self.connecting = Some(Probe {
            at: Backoff::starting(self.now),
            deadline: self
                .config
                .connect_timeout
                .map(|t| self.now.saturating_add(t)),
        });
        self.run_probes();
    }

    /// The peer's host reported its port unreachable (an ICMP error on a
    /// connected client socket). While the connect probe runs, the session
    /// fails at once with [`SessionError::Refused`]. Once established (with
    /// [`ConfigBuilder::icmp_reset`](crate::ConfigBuilder::icmp_reset) on,
    /// the default), one report starts a streak and a window probe goes
    /// out at once and every [`UNREACHABLE_PROBE_EVERY`]; any valid
    /// datagram ends the streak. The session fails with
    /// [`SessionError::PortUnreachable`] at the [`UNREACHABLE_REPORTS`]th
    /// report of a streak at least [`UNREACHABLE_SPAN`] (or the RTO, up to
    /// [`UNREACHABLE_MAX_SPAN`]) old. So one stray report never fails a
    /// session, and a live peer answers a probe within the span.
    pub fn handle_unreachable(&mut self, now: Duration) {
        self.advance(now);
        if self.error.is_some() {
            return;
        }
        if self.connecting.is_some() {
            self.error = Some(SessionError::Refused);
            return;
        }
        if !self.config.icmp_reset {
            return;
        }
        let now = self.now;
        let u = self.unreachable.get_or_insert(Unreachable {
            since: now,
            reports: 0,
            next_probe: now,
        });
        u.reports = u.reports.saturating_add(1);
        let rto = Duration::from_millis(u64::from(self.kcp.rto()));
        let span = rto.clamp(UNREACHABLE_SPAN, UNREACHABLE_MAX_SPAN);
        if u.reports >= UNREACHABLE_REPORTS && now.saturating_sub(u.since) >= span {
            self.error = Some(SessionError::PortUnreachable);
        }
    }

    /// This side's address changed (a client rebound to a new local
    /// address): a window probe goes out at once, so the peer hears from
    /// the new address, and the retransmissions follow on their timers.
    pub fn path_changed(&mut self, now: Duration) {
        self.advance(now);
        if self.error.is_none() {
            self.kcp.probe_window();
        }
    }

    /// Whether an opened datagram of this conversation carries something
    /// this session never received ([`Kcp::is_fresh`], or a datagram
    /// extension shard the FEC datagram receiver never had: a `--udp`
    /// tunnel's session carries nothing else while its flows send): what
    /// may make a new address a migration candidate. Parity, kcp-go OOB
    /// packets and other conversations' packets are not.
    pub(crate) fn is_fresh(&self, packet: &[u8]) -> bool {
        if let Some(dx) = self.dx.as_ref()
            && matches!(fec::classify(packet), PacketKind::Oob)
            && dgram_fec::ext_type(packet).is_some()
        {
            return fec::oob_payload(packet).is_some_and(|(c, _)| c == self.kcp.conv())
                && dx.is_fresh(packet);
        }
        kcp_of(packet).is_some_and(|k| self.kcp.is_fresh(k))
    }

    /// A path probe: one window probe (WASK) in a datagram of its own at
    /// `slot[header_len()..]` (FEC-framed when FEC is on), for the driver to
    /// send to an address the peer may have moved to. The peer's WINS
    /// answer, from there, proves it receives there. Changes nothing in the
    /// ARQ; counted as output.
    /// `tag` goes in its `sn` ([`probe_tag`](Self::probe_tag)).
    pub(crate) fn poll_path_probe(
        &mut self,
        now: Duration,
        tag: u32,
        slot: &mut [u8],
    ) -> Option<Transmit> {
        self.advance(now);
        if self.error.is_some() {
            return None;
        }
        let slot = slot.get_mut(..self.datagram)?;
        self.write_window_probe(0, tag, slot)
    }

    /// A path probe's tag for the `k`-th candidate (`Kcp::probe_tag`).
    pub(crate) fn probe_tag(&self, k: u32) -> u32 {
        self.kcp.probe_tag(k)
    }

    /// The peer is a kcpio client that clocks its probes and answers, so
    /// only a bound answer ([`is_bound_answer`](Self::is_bound_answer))
    /// proves it receives at a candidate address.
    pub(crate) fn peer_clocks(&self) -> bool {
        self.kcp.peer_clocks()
    }

    /// An opened datagram carries the peer's answer to the path probe
    /// tagged `tag`: a clocked WINS that echoes it, newer than every
    /// clocked segment received.
    pub(crate) fn is_bound_answer(&self, packet: &[u8], tag: u32) -> bool {
        kcp_of(packet).is_some_and(|k| self.kcp.is_bound_answer(k, tag))
    }

    /// One WASK with `frg` (0, or [`CLOCKED_PROBE`](crate::arq::CLOCKED_PROBE))
    /// and `sn` stamped now, alone in a datagram at `slot[header_len()..]`
    /// (FEC-framed when FEC is on); the ARQ's state untouched.
    fn write_window_probe(&mut self, frg: u8, sn: u32, slot: &mut [u8]) -> Option<Transmit> {
        self.write_control(slot, |kcp, now, buf| {
            kcp.write_window_probe(now, frg, sn, buf)
        })
    }

    /// The offer's resend when due ([`Offering`]): a tagged WASK alone in
    /// an unframed KCP datagram at `slot[header..]`, even with FEC on
    /// (kcp-go and kcpio take a KCP packet without the FEC header whatever
    /// their FEC setting), so the FEC stream's seqids and groups are those
    /// of a session without the offer. Changes nothing in the ARQ.
    fn poll_offer(&mut self, slot: &mut [u8]) -> Option<Transmit> {
        let now = self.now;
        let o = self.offering.as_mut()?;
        if !o.at.step(now) {
            return None;
        }
        o.left = o.left.saturating_sub(1);
        if o.left == 0 {
            self.offering = None;
        }
        let tag = self.offer_tag()?;
        let hc = self.header;
        let n = self
            .kcp
            .write_window_probe(ts(now), tag, 0, slot.get_mut(hc..)?)?;
        self.emit(slot.get(hc..hc + n)?, false)
    }

    /// A segment `write` puts at the KCP bytes of `slot` (given the ARQ and
    /// the time), alone in a datagram (FEC-framed when FEC is on).
    fn write_control(
        &mut self,
        slot: &mut [u8],
        write: impl FnOnce(&Kcp, Timestamp, &mut [u8]) -> Option<usize>,
    ) -> Option<Transmit> {
        let (hc, hf) = (self.header, self.fec_header);
        let now_ts = ts(self.now);
        let n = write(&self.kcp, now_ts, slot.get_mut(hc + hf..)?)?;
        let len = self.fec_frame(slot.get_mut(hc..)?, n);
        Some(self.sent(len, false))
    }

    /// Frames the KCP packet at `buf[8..8 + n]` as a data shard when FEC
    /// is on (the adaptive stream FEC's once negotiated, so its seqids
    /// are the only ones in use); returns the packet length.
    fn fec_frame(&mut self, buf: &mut [u8], n: usize) -> usize {
        match (self.sx.as_mut(), self.enc.as_mut()) {
            (Some(sx), _) => {
                sx.set_srtt(self.kcp.srtt());
                sx.encode(self.now, buf, n)
            }
            (None, Some(enc)) => enc.encode(ts(self.now), buf, n),
            _ => n,
        }
    }

    /// A path nudge toward an address a kcp-go peer may have moved to
    /// while it sends nothing fresh (`Kcp::write_path_nudge`: a PUSH
    /// without data for a segment it holds, which it acknowledges with the
    /// nudge's `sn` and `ts`), at `slot[header_len()..]` as
    /// [`poll_path_probe`](Self::poll_path_probe) writes; its `(sn, ts)`
    /// for [`is_nudge_answer`](Self::is_nudge_answer). `None` until the
    /// peer acknowledged a segment. Changes nothing in the ARQ; counted as
    /// output. The same wire size as a path probe.
    pub(crate) fn poll_path_nudge(
        &mut self,
        now: Duration,
        slot: &mut [u8],
    ) -> Option<(Transmit, (u32, u32))> {
        self.advance(now);
        if self.error.is_some() {
            return None;
        }
        let slot = slot.get_mut(..self.datagram)?;
        let mut nudge = None;
        let t = self.write_control(slot, |kcp, now, buf| {
            let (n, sent) = kcp.write_path_nudge(now, buf)?;
            nudge = Some(sent);
            Some(n)
        })?;
        Some((t, nudge?))
    }

    /// An opened datagram acknowledges the path nudge `nudge`.
    pub(crate) fn is_nudge_answer(&self, packet: &[u8], nudge: (u32, u32)) -> bool {
        kcp_of(packet).is_some_and(|k| self.kcp.is_nudge_answer(k, nudge))
    }

    /// A client's quiet probe, on or off (the tokio client turns it on
    /// with [`ConfigBuilder::migration`](crate::ConfigBuilder::migration)):
    /// when data stopped coming for 400 ms (the client's address
    /// may have changed under it, and its server's data is going to the
    /// old one), a WASK stamped with this end's clock goes out
    /// (`frg` 0xD2 marks its `ts` as this end's clock), again after twice
    /// and four times that while nothing is heard. A migrating listener
    /// takes it as fresh and validates the address it came from, so a
    /// client that only downloads gets its data back without writing. Any
    /// answer ends it; a kcp-go peer answers it as any WASK.
    pub fn probe_when_quiet(&mut self, on: bool) {
        self.quiet = on.then(Quiet::default);
    }

    /// The wire size of a [`poll_path_probe`](Self::poll_path_probe)
    /// datagram.
    pub(crate) fn path_probe_wire_len(&self) -> usize {
        crate::arq::segment::HEADER_LEN + self.fec_header + self.overhead
    }

    /// The peer moved to another IP address: the RTT estimate and the
    /// congestion window start over on the new path.
    pub(crate) fn reset_path(&mut self) {
        self.kcp.reset_path();
    }

    /// The connect probe's verdict: `Ok` once the peer answered (or no
    /// probe ran).
    ///
    /// # Errors
    ///
    /// [`ConnError::WouldBlock`] while the probe waits for an answer
    /// (retry after the next `handle_*` call), [`ConnError::Closed`] when
    /// the session failed ([`SessionError::ConnectTimeout`],
    /// [`SessionError::Refused`], ...).
    pub fn established(&self) -> Result<(), ConnError> {
        match (self.error, self.connecting) {
            (Some(e), _) => Err(ConnError::Closed(e)),
            (None, Some(_)) => Err(ConnError::WouldBlock),
            (None, None) => Ok(()),
        }
    }

    /// The connect probe is still waiting for the peer's first datagram.
    #[must_use]
    pub fn is_connecting(&self) -> bool {
        self.connecting.is_some() && self.error.is_none()
    }

    // -------------------------------------------------------- application

    /// Queues bytes of the stream (kcp-go `Write`); returns how many were
    /// taken (fewer than `data.len()` when the send window fills).
    ///
    /// # Errors
    ///
    /// [`ConnError::WouldBlock`] when the send window is full,
    /// [`ConnError::WriteShutdown`] after [`shutdown`](Self::shutdown),
    /// [`ConnError::Closed`] once the session failed.
    pub fn write(&mut self, data: &[u8]) -> Result<usize, ConnError> {
        self.check_write()?;
        if data.is_empty() {
            return Ok(0);
        }
        match self.kcp.send(data) {
            0 => Err(ConnError::WouldBlock),
            n => Ok(n),
        }
    }

    /// [`write`](Self::write) in two halves around a copy the caller
    /// makes without the session's lock: takes what fits now (the head
    /// merged into the tail segment, and free send slots' buffers lent into
    /// `bufs`); the caller fills them ([`Lent::fill`](crate::arq::Lent::fill))
    /// and calls [`end_lent_write`](Self::end_lent_write). A lend of no
    /// buffers is a whole write already.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    pub(crate) fn begin_lent_write(
        &mut self,
        data: &[u8],
        bufs: &mut [Vec<u8>],
    ) -> Result<crate::arq::Lent, ConnError> {
        self.check_write()?;
        self.kcp.begin_lend(data, bufs).ok_or(ConnError::WouldBlock)
    }

    /// Ends [`begin_lent_write`](Self::begin_lent_write): the filled
    /// buffers are queued, or, when the session failed or was shut since,
    /// given back; returns the bytes the write accepted.
    ///
    /// # Errors
    ///
    /// The failure or shutdown, when not even the merged head was taken.
    pub(crate) fn end_lent_write(
        &mut self,
        lent: &crate::arq::Lent,
        bufs: &mut [Vec<u8>],
    ) -> Result<usize, ConnError> {
        let ok = self.check_write();
        match self.kcp.end_lend(lent, bufs, ok.is_ok()) {
            0 => ok.map(|()| 0),
            n => Ok(n),
        }
    }

    fn check_write(&self) -> Result<(), ConnError> {
        if let Some(e) = self.error {
            return Err(ConnError::Closed(e));
        }
        if self.write_closed {
            return Err(ConnError::WriteShutdown);
        }
        Ok(())
    }

    /// Copies received bytes into `buf` (message boundaries ignored);
    /// returns how many. Data received before a failure is still handed out.
    ///
    /// # Errors
    ///
    /// [`ConnError::WouldBlock`] when nothing is readable,
    /// [`ConnError::Closed`] once the session failed and nothing is left.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, ConnError> {
        if self.kcp.readable() {
            return Ok(self.kcp.recv(buf));
        }
        match self.error {
            Some(e) => Err(ConnError::Closed(e)),
            None => Err(ConnError::WouldBlock),
        }
    }

    /// Queues `msg` as one message (message mode).
    ///
    /// # Errors
    ///
    /// [`ConnError::StreamMode`] in stream mode, [`ConnError::Message`] for
    /// an empty or too long message, [`ConnError::WouldBlock`] while the send
    /// window has no room for it, and the errors of [`write`](Self::write).
    pub fn send_message(&mut self, msg: &[u8]) -> Result<(), ConnError> {
        if self.config.arq.stream {
            return Err(ConnError::StreamMode);
        }
        self.check_write()?;
        Ok(self.kcp.send_message(msg)?)
    }

    /// Takes one whole message into `buf` (message mode); returns its length.
    ///
    /// # Errors
    ///
    /// [`ConnError::StreamMode`] in stream mode,
    /// [`ConnError::BufferTooSmall`] (the message stays queued),
    /// [`ConnError::WouldBlock`] when no whole message is queued,
    /// [`ConnError::Closed`] once the session failed and nothing is left.
    pub fn recv_message(&mut self, buf: &mut [u8]) -> Result<usize, ConnError> {
        if self.config.arq.stream {
            return Err(ConnError::StreamMode);
        }
        match (self.kcp.recv_message(buf), self.error) {
            (Err(RecvError::NotReady), Some(e)) => Err(ConnError::Closed(e)),
            (r, _) => Ok(r?),
        }
    }

    /// Stops writing and reports whether everything written was
    /// acknowledged. The first call arms the linger timer
    /// ([`ConfigBuilder::linger`](crate::ConfigBuilder::linger)) at the
    /// next call that brings `now`; call again after `handle_*` calls.
    ///
    /// # Errors
    ///
    /// [`ConnError::WouldBlock`] while data is unacknowledged,
    /// [`ConnError::LingerExpired`] when the linger time passed first,
    /// [`ConnError::Closed`] once the session failed.
    pub fn shutdown(&mut self) -> Result<(), ConnError> {
        if !self.write_closed {
            self.write_closed = true;
            self.shutdown = Linger::Requested;
        }
        if self.kcp.is_flushed() {
            return Ok(());
        }
        if let Some(e) = self.error {
            return Err(ConnError::Closed(e));
        }
        if self.shutdown.until().is_some_and(|d| self.now >= d) {
            return Err(ConnError::LingerExpired);
        }
        Err(ConnError::WouldBlock)
    }

    /// No one will read or write any more: keep sending what is queued for
    /// up to the linger time, then [`is_finished`](Self::is_finished).
    pub fn release(&mut self) {
        if !self.released {
            self.released = true;
            self.release = Linger::Requested;
        }
    }

    /// Fails the session with `reason` from outside (a takeover by a new
    /// conversation, the driver stopping); no effect once failed.
    pub fn abort(&mut self, reason: SessionError) {
        if self.error.is_none() {
            self.error = Some(reason);
        }
    }

    /// The largest payload [`send_datagram`](Self::send_datagram) takes:
    /// the KCP mtu minus the 4-byte conv (kcp-go's `GetOOBMaxSize`), so a
    /// datagram is never longer than the session's largest KCP datagram.
    /// With the default mtu of 1400 that is 1368 bytes under a CFB-family
    /// cipher, 1360 under AES-GCM and 1388 without crypto. 0 when FEC is
    /// off (datagrams unsupported) until the FEC datagram extension is
    /// negotiated; once it is, 16 fragments of 1,353 bytes at the
    /// default mtu under AES-GCM (21,648; at most [`DATAGRAM_QUEUE_BYTES`]).
    #[must_use]
    pub fn max_datagram_payload(&self) -> usize {
        if self.dx_on {
            DgramFec::max_payload(self.plain_max()).min(DATAGRAM_QUEUE_BYTES)
        } else if self.datagrams_sendable() {
            // kcp-go's OOB packet: its 8-byte FEC header and the conv.
            self.plain_max().saturating_sub(fec::DATA_HEADER + 4)
        } else {
            0
        }
    }

    /// Queues `payload` as one unreliable datagram (kcp-go's `SendOOB`): it
    /// leaves whole in one UDP datagram at the next
    /// [`poll_transmit`](Self::poll_transmit), ahead of KCP output, and is
    /// never retransmitted; it may be lost, duplicated or reordered, and
    /// the stream is not affected. Empty payloads are allowed.
    ///
    /// # Errors
    ///
    /// [`ConnError::DatagramsUnsupported`] when FEC is off (kcp-go's rule:
    /// the packet reuses the FEC header) and the FEC datagram extension is
    /// not negotiated, [`ConnError::DatagramTooLarge`]
    /// beyond [`max_datagram_payload`](Self::max_datagram_payload),
    /// [`ConnError::WouldBlock`] while the send queue is full
    /// ([`DATAGRAM_QUEUE_LEN`] datagrams or [`DATAGRAM_QUEUE_BYTES`] bytes;
    /// it empties at the next `poll_transmit`; with the FEC datagram
    /// extension negotiated the oldest queued datagrams are dropped instead,
    /// counted in [`DatagramFecStats::dropped_overload`]),
    /// [`ConnError::Closed`] once the session failed.
    pub fn send_datagram(&mut self, payload: &[u8]) -> Result<(), ConnError> {
        self.send_datagram_at(self.now, payload)
    }

    /// [`send_datagram`](Self::send_datagram) at `now`: the datagram's
    /// queueing time, from which the FEC datagram extension's stale rule
    /// (dropped after twice the group deadline unsent) counts. A caller
    /// between events (a handle on another task) passes the clock's time,
    /// as the session's own last `now` may be long past on an idle session.
    ///
    /// # Errors
    ///
    /// As [`send_datagram`](Self::send_datagram).
    pub fn send_datagram_at(&mut self, now: Duration, payload: &[u8]) -> Result<(), ConnError> {
        self.advance(now);
        if let Some(e) = self.error {
            return Err(ConnError::Closed(e));
        }
        if !self.datagrams_sendable() {
            return Err(ConnError::DatagramsUnsupported);
        }
        let max = self.max_datagram_payload();
        if payload.len() > max {
            return Err(ConnError::DatagramTooLarge {
                len: payload.len(),
                max,
            });
        }
        if self.dx_on
            && let Some(dx) = self.dx.as_ref()
        {
            // Lowered bounds (the hold ended) shed the oldest beyond them
            // at this send, as a full queue does: without the hold they
            // would leave at once as overdue, one burst into the
            // bottleneck's queue, which the hold had just found standing.
            let (len, bytes) = dx.send_queue_bounds(self.now);
            self.oob_out.set_bounds(len, bytes);
        }
        if self.oob_out.push_at(payload, self.now) {
            return Ok(());
        }
        if self.dx_on {
            // The extension drops the oldest instead (counted): a newer
            // datagram is worth more than an older one to a game or a VPN.
            while !self.oob_out.push_at(payload, self.now) {
                if self.oob_out.is_empty() {
                    return Err(ConnError::WouldBlock);
                }
                let len = self.oob_out.front_len().unwrap_or(0);
                self.oob_out.drop_front();
                if let Some(dx) = self.dx.as_mut() {
                    dx.count_dropped(len);
                }
            }
            return Ok(());
        }
        Err(ConnError::WouldBlock)
    }

    /// Takes the oldest received datagram into `buf`; returns its length.
    /// Datagrams received before a failure are still handed out.
    ///
    /// # Errors
    ///
    /// [`ConnError::DatagramsUnsupported`] when FEC is off,
    /// [`ConnError::BufferTooSmall`] when `buf` is shorter than the
    /// datagram (which stays queued; a buffer of 1488 bytes fits any
    /// kcp-go OOB datagram, and one of
    /// [`max_datagram_payload`](Self::max_datagram_payload) bytes any of
    /// the negotiated FEC datagram extension),
    /// [`ConnError::WouldBlock`] when none is queued,
    /// [`ConnError::Closed`] once the session failed and none is left.
    pub fn recv_datagram(&mut self, buf: &mut [u8]) -> Result<usize, ConnError> {
        if !self.datagrams_supported() {
            return Err(ConnError::DatagramsUnsupported);
        }
        if let Some(needed) = self.oob_in.front_len() {
            return self
                .oob_in
                .pop_into(buf)
                .ok_or(ConnError::BufferTooSmall { needed });
        }
        match self.error {
            Some(e) => Err(ConnError::Closed(e)),
            None => Err(ConnError::WouldBlock),
        }
    }

    /// [`recv_datagram`](Self::recv_datagram) would not say `WouldBlock`: a
    /// datagram is queued, the session failed, or datagrams are
    /// unsupported.
    #[must_use]
    pub fn datagram_readable(&self) -> bool {
        !self.oob_in.is_empty() || self.error.is_some() || !self.datagrams_supported()
    }

    /// [`send_datagram`](Self::send_datagram) of a largest payload would
    /// not say `WouldBlock`.
    #[must_use]
    pub fn datagram_writable(&self) -> bool {
        self.oob_out.has_room(self.max_datagram_payload())
            || self.dx_on
            || self.error.is_some()
            || !self.datagrams_sendable()
    }

    // -------------------------------------------------------------- state

    /// Why the session failed, once it did.
    #[must_use]
    pub fn error(&self) -> Option<SessionError> {
        self.error
    }

    /// [`read`](Self::read) would not say `WouldBlock`: data is readable or
    /// the session failed.
    #[must_use]
    pub fn readable(&self) -> bool {
        self.kcp.readable() || self.error.is_some()
    }

    /// A blocked writer or shutdown has news: the send window has room,
    /// everything was acknowledged, the shutdown linger expired, or the
    /// session failed.
    #[must_use]
    pub fn writable(&self) -> bool {
        self.error.is_some()
            || self.kcp.send_capacity() > 0
            || self.kcp.is_flushed()
            || self.shutdown.until().is_some_and(|d| self.now >= d)
    }

    /// The caller may drop the session: it failed, or it was
    /// [`release`](Self::release)d and has nothing left to send (data
    /// acknowledged, last ACKs out) or its linger time passed.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        if self.error.is_some() {
            return true;
        }
        self.released
            && ((self.kcp.is_flushed() && self.kcp.poll_timeout().is_none())
                || self.release.until().is_some_and(|d| self.now >= d))
    }

    /// What the model-based congestion controller
    /// ([`Congestion::Bbr`](crate::Congestion::Bbr)) estimates now:
    /// bandwidth, minimum RTT, pacing rate, in-flight cap. `None` with
    /// the other controllers.
    #[must_use]
    pub fn congestion_state(&self) -> Option<crate::arq::BbrStats> {
        self.kcp.congestion_state()
    }

    /// A snapshot of the session's counters, RTT estimate and queue.
    #[must_use]
    pub fn stats(&self) -> SessionStats {
        SessionStats {
            conv: self.kcp.conv(),
            srtt: Duration::from_millis(self.kcp.srtt().into()),
            rto: Duration::from_millis(self.kcp.rto().into()),
            wait_snd: self.kcp.wait_snd(),
            datagrams_in: self.wire.datagrams_in,
            bytes_in: self.wire.bytes_in,
            datagrams_out: self.wire.datagrams_out,
            bytes_out: self.wire.bytes_out,
            input_errors: self.wire.input_errors,
            arq: self.kcp.stats().clone(),
            fec_out: self
                .enc
                .as_ref()
                .map(|e| e.stats().clone())
                .unwrap_or_default(),
            fec_in: self
                .dec
                .as_ref()
                .map(|d| d.dec.stats().clone())
                .unwrap_or_default(),
            oob_sent: self.wire.oob_sent,
            oob_received: self.wire.oob_received,
            oob_dropped: self.wire.oob_dropped,
            datagram_fec: self.dx.as_ref().map(|d| d.stats()).unwrap_or_default(),
            stream_fec: self.sx.as_ref().map(|s| s.stats()).unwrap_or_default(),
            congestion: self.kcp.congestion_state(),
        }
    }
}

/// Whether a KCP packet of conversation `conv` holds a window probe or
/// answer (WASK, WINS) whose `frg` is the extension's tag.
/// `frg` of a tagged window probe: `0xD0 | offers`, where the offers are
/// bit 0 (the datagram extension, `dgram_fec::OFFER_BIT`: 0xD1) and bit 2
/// (the adaptive stream FEC, `stream_fec::OFFER_BIT`: 0xD4, both 0xD5).
/// Bit 1 is never an offer: 0xD2 is migration's clocked probe.
const PROBE_TAG_BASE: u8 = 0xD0;
/// The bits a tag may offer.
const PROBE_OFFERS: u8 = dgram_fec::OFFER_BIT | stream_fec::OFFER_BIT;

/// The extensions the window probes of an opened KCP packet offer.
fn probe_offers(packet: &[u8], conv: u32) -> u8 {
    use crate::arq::segment::{Command, Segments};
    Segments::new(packet)
        .filter_map(Result::ok)
        .filter(|s| s.conv() == conv && matches!(s.command(), Some(Command::Wask | Command::Wins)))
        .map(|s| s.frg())
        .filter(|f| f & 0xF0 == PROBE_TAG_BASE && f & !PROBE_OFFERS & 0x0F == 0)
        .fold(0, |acc, f| acc | (f & PROBE_OFFERS))
}

/// How long a client hears no data before its quiet probe (then twice and
/// four times that): within the 1 s a migration's stall may take, above
/// the gaps of a flow on a long path.
pub(crate) const QUIET_AFTER: Duration = Duration::from_millis(400);
/// Quiet probes per quiet spell.
const QUIET_TRIES: u8 = 3;

/// A client's quiet-probe timer: armed by every datagram that brings data.
#[derive(Clone, Copy, Debug, Default)]
struct Quiet {
    /// When the next probe goes out, unless something is heard first.
    at: Option<Duration>,
    /// Probes sent in this spell.
    tries: u8,
    /// The ARQ's PUSH count at the last input.
    push_in: u64,
}

impl Quiet {
    /// A valid datagram at `now`; `push_in` counts every PUSH received so
    /// far. Data: re-armed. Anything else after a probe: answered, ended.
    fn heard(&mut self, now: Duration, push_in: u64) {
        if push_in != self.push_in {
            self.push_in = push_in;
            self.at = Some(now + QUIET_AFTER);
            self.tries = 0;
        } else if self.tries > 0 {
            self.at = None;
        }
    }

    /// The probe is due at `now`: counted, the next one armed.
    fn due(&mut self, now: Duration) -> bool {
        if self.at.is_none_or(|t| now < t) {
            return false;
        }
        self.tries += 1;
        self.at = (self.tries < QUIET_TRIES).then(|| now + QUIET_AFTER * (1 << self.tries));
        true
    }
}

/// A kcpio client's answers: every WINS of an outgoing KCP packet gets
/// `frg` [`CLOCKED_PROBE`](crate::arq::CLOCKED_PROBE), `ts` this end's clock
/// `now` and `sn` the `sn` of the WASK it answers (`echo`), so a migrating
/// listener can tell its answer to a path probe from a copy of an older
/// one. kcp-go reads none of the three on a WINS.
fn clock_answers(packet: &mut [u8], now: u32, echo: u32) {
    use crate::arq::segment::field;
    let mut at = 0usize;
    while let Some(h) = packet.get(at..at + field::HEADER_LEN) {
        let cmd = h[field::CMD];
        let len = u32::from_le_bytes([h[20], h[21], h[22], h[23]]) as usize;
        if cmd == crate::arq::segment::Command::Wins as u8
            && let Some(seg) = packet.get_mut(at..at + field::HEADER_LEN)
        {
            seg[field::FRG] = crate::arq::CLOCKED_PROBE;
            seg[field::TS].copy_from_slice(&now.to_le_bytes());
            seg[field::SN].copy_from_slice(&echo.to_le_bytes());
        }
        at = at.saturating_add(field::HEADER_LEN).saturating_add(len);
    }
}

/// Sets `frg` of every WASK and WINS segment of an outgoing KCP packet to
/// `tag` (kcp-go reads `frg` of PUSH segments only).
fn tag_probes(packet: &mut [u8], tag: u8) {
    use crate::arq::segment::field;
    let mut at = 0usize;
    while let Some(h) = packet.get(at..at + field::HEADER_LEN) {
        let cmd = h[field::CMD];
        let len = u32::from_le_bytes([h[20], h[21], h[22], h[23]]) as usize;
        if (cmd == 83 || cmd == 84)
            && let Some(f) = packet.get_mut(at + field::FRG)
        {
            *f = tag;
        }
        at = at.saturating_add(field::HEADER_LEN).saturating_add(len);
    }
}
