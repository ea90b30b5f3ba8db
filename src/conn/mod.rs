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
//! conn.release()  conn.abort(reason)                  // lifecycle from outside
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
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod error;
#[cfg(test)]
mod tests;

pub use error::{ConnError, SessionError};

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
    /// Smoothed round-trip time in milliseconds.
    pub srtt: u32,
    /// Current retransmission timeout in milliseconds.
    pub rto: u32,
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

/// How much a peer that has not proved it receives may be sent: this many
/// times the bytes it sent us (QUIC's anti-amplification factor).
pub const AMPLIFICATION_FACTOR: u64 = 3;

/// How long a peer has to prove it receives (see
/// [`Conn::require_proof`]) before the session fails with
/// [`SessionError::DeadLink`].
pub const PROOF_TIMEOUT: Duration = Duration::from_secs(10);

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
}

/// Datagram and packet counters of one session.
#[derive(Clone, Copy, Debug, Default)]
struct Wire {
    datagrams_in: u64,
    bytes_in: u64,
    datagrams_out: u64,
    bytes_out: u64,
    input_errors: u64,
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
///   [`recv_message`](Self::recv_message), [`shutdown`](Self::shutdown))
///   return at once with a verdict; [`ConnError::WouldBlock`] means "retry
///   after the next `handle_*` call" ([`readable`](Self::readable) and
///   [`writable`](Self::writable) tell when). They may move the deadline
///   earlier: a driver compares `poll_timeout` with the deadline it armed.
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
    error: Option<SessionError>,
    write_closed: bool,
    shutdown: Linger,
    released: bool,
    release: Linger,
    wire: Wire,
    /// Set while the peer has not proved it receives (a listener's new
    /// session): output is held to `AMPLIFICATION_FACTOR` times input.
    unproven: Option<Unproven>,
    /// A datagram body produced but over the budget: `(len, parity)` of the
    /// plaintext kept in `held_buf`, sent first once the budget allows.
    held: Option<(usize, bool)>,
    held_buf: Vec<u8>,
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
fn ts(now: Duration) -> Timestamp {
    Timestamp::from_millis(now.as_millis() as u32)
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
        let enc = match config.fec {
            Some((data, parity)) => {
                let mut enc = FecEncoder::new(data, parity)
                    .map_err(|_| ConfigError::InvalidFec { data, parity })?;
                enc.set_group_deadline(config.fec_group_deadline);
                Some(enc)
            }
            None => None,
        };
        let header = config.crypto.header_len();
        let fec_header = config.fec_header();
        let kcp_mtu = config.arq.mtu;
        let trailer = config.crypto.trailer_len();
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
            error: None,
            write_closed: false,
            shutdown: Linger::Off,
            released: false,
            release: Linger::Off,
            wire: Wire::default(),
            unproven: None,
            held: None,
            held_buf: Vec::new(),
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
    /// - the proof is an acknowledgement of a segment this side sent, or a
    ///   window answer (WINS) to the window probe (WASK) this side sends
    ///   with its first flush and after every datagram while unproven
    ///   (kcp-go and C KCP answer one at their next flush);
    /// - without proof by `now +` [`PROOF_TIMEOUT`], the session fails with
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
                deadline: self.now.saturating_add(PROOF_TIMEOUT),
                wins_seen: self.kcp.stats().wins_in,
            });
            self.kcp.request_window_probe();
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
    pub fn handle_packet(&mut self, now: Duration, packet: &[u8]) -> Received {
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
        let kcp_bytes = match kind {
            PacketKind::Kcp => Some(packet),
            PacketKind::Data => fec::data_payload(packet),
            PacketKind::Parity | PacketKind::Oob => None,
        };
        if matches!(kind, PacketKind::Kcp | PacketKind::Data) {
            match kcp_bytes.map(|p| self.kcp.handle_datagram(now_ts, p, Origin::Regular)) {
                Some(Ok(())) => out.accepted = true,
                _ => out.bad_kcp += 1,
            }
        }
        if matches!(kind, PacketKind::Data | PacketKind::Parity) {
            let shape = self.config.fec.unwrap_or((1, 1));
            let fec_in = self.dec.get_or_insert_with(|| FecIn {
                dec: FecDecoder::with_max_shards(shape.0, shape.1, self.config.fec_max_shards),
                scratch: vec![0; MAX_DATAGRAM].into_boxed_slice(),
            });
            if fec_in.dec.handle(packet).is_err() {
                out.bad_fec = true;
            } else if kind == PacketKind::Parity {
                out.accepted = true;
            }
            while let Some(n) = fec_in.dec.poll_recovered(&mut fec_in.scratch) {
                let Some(rec) = fec_in.scratch.get(..n) else {
                    break;
                };
                if self
                    .kcp
                    .handle_datagram(now_ts, rec, Origin::Recovered)
                    .is_err()
                {
                    out.bad_kcp += 1;
                }
            }
        }
        self.wire.input_errors += u64::from(out.bad_kcp);
        if out.accepted {
            self.last_input = self.now;
        }
        self.check_proof();
        out
    }

    /// Runs the timers that are due at `now`: the ARQ's flush, the FEC group
    /// deadline, and arms a pending shutdown or release linger. Then call
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn handle_timeout(&mut self, now: Duration) {
        self.advance(now);
        if self.error.is_some() {
            return;
        }
        if let Some(u) = self.unproven {
            if self.now >= u.deadline {
                self.error = Some(SessionError::DeadLink);
                return;
            }
        }
        if self.held.is_some() {
            // Blocked by the budget: the timers wait for the peer's input.
            return;
        }
        let now_ts = ts(self.now);
        if self.kcp.poll_timeout().is_some_and(|t| now_ts.diff(t) >= 0) {
            self.kcp.handle_timeout(now_ts);
        }
        // kcpio-only FEC group deadline: close a group that did not fill in
        // time (fillers and parity come out of poll_parity).
        if let Some(enc) = self.enc.as_mut() {
            if enc.poll_timeout().is_some_and(|t| now_ts.diff(t) >= 0) {
                enc.handle_timeout(now_ts);
            }
        }
    }

    /// Writes the next datagram body into `slot` (at least
    /// [`max_datagram`](Self::max_datagram) bytes; a shorter slot gets `None`
    /// and nothing is taken): FEC parity first, so a completed group's parity
    /// is out before the next data shard, then KCP packets, FEC-framed when
    /// FEC is on. `None` when nothing is due; the session's dead-link and
    /// idle rules are checked then.
    pub fn poll_transmit(&mut self, now: Duration, slot: &mut [u8]) -> Option<Transmit> {
        self.advance(now);
        if self.error.is_some() {
            return None;
        }
        let slot = slot.get_mut(..self.datagram)?;
        let (hc, hf) = (self.header, self.fec_header);
        if let Some((len, parity)) = self.held {
            let out = slot.get_mut(hc..hc + len)?;
            if !self.charge(len) {
                return None;
            }
            out.copy_from_slice(self.held_buf.get(..len)?);
            self.held = None;
            return Some(self.sent(len, parity));
        }
        if let Some(enc) = self.enc.as_mut() {
            if let Some(p) = slot.get_mut(hc..).and_then(|b| enc.poll_parity(b)) {
                return self.emit(slot.get(hc..hc + p)?, true);
            }
        }
        let now_ts = ts(self.now);
        let kcp_buf = slot.get_mut(hc + hf..hc + hf + self.kcp_mtu)?;
        let Some(n) = self.kcp.poll_transmit(now_ts, kcp_buf) else {
            self.check_liveness();
            return None;
        };
        let len = match (self.enc.as_mut(), slot.get_mut(hc..)) {
            (Some(enc), Some(buf)) => enc.encode(now_ts, buf, n),
            _ => n,
        };
        self.emit(slot.get(hc..hc + len)?, false)
    }

    fn sent(&mut self, len: usize, parity: bool) -> Transmit {
        self.wire.datagrams_out += 1;
        self.wire.bytes_out += len as u64;
        Transmit { len, parity }
    }

    /// The dead-link and idle rules, after the output is drained.
    fn check_liveness(&mut self) {
        if self.kcp.is_dead() {
            self.error = Some(SessionError::DeadLink);
        } else if let Some(idle) = self.config.idle_timeout {
            if self.now.saturating_sub(self.last_input) >= idle {
                self.error = Some(SessionError::IdleTimeout);
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must run next: the
    /// ARQ's flush, the FEC group deadline, the idle timeout, and the
    /// shutdown and release lingers while data is unacknowledged. `None`
    /// when nothing is scheduled (a quiet session with no idle timeout
    /// costs nothing) or the session failed.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        if self.error.is_some() {
            return None;
        }
        if self.shutdown == Linger::Requested || self.release == Linger::Requested {
            return Some(self.now);
        }
        let proof = self.unproven.map(|u| u.deadline);
        let idle = self.config.idle_timeout;
        let idle_at = idle.map(|i| self.last_input.saturating_add(i));
        if self.held.is_some() {
            // Blocked by the budget until the peer sends more.
            return earliest(proof, idle_at);
        }
        let now_ts = ts(self.now);
        let at = |t: Timestamp| self.now + Duration::from_millis(t.diff(now_ts).max(0) as u64);
        let mut next = self.kcp.poll_timeout().map(at);
        next = earliest(
            next,
            self.enc.as_ref().and_then(FecEncoder::poll_timeout).map(at),
        );
        next = earliest(next, idle_at);
        next = earliest(next, proof);
        if !self.kcp.is_flushed() {
            let shutdown = self.shutdown.until().filter(|&d| d > self.now);
            next = earliest(next, shutdown);
            next = earliest(next, self.release.until());
        }
        next
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

    /// A snapshot of the session's counters, RTT estimate and queue.
    #[must_use]
    pub fn stats(&self) -> SessionStats {
        SessionStats {
            conv: self.kcp.conv(),
            srtt: self.kcp.srtt(),
            rto: self.kcp.rto(),
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
        }
    }
}
