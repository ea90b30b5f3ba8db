//! The socket half of a driver: the receive batch (GRO split, open in
//! place), the transmit slots (seal outside any session lock, GSO runs),
//! the rate limiter, and the system calls. Knows nothing of sessions.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use super::shared::DriverShared;
use super::stats::{add, bump};
use crate::config::{ConfigInner, DEFAULT_RECV_BUFFER, LISTENER_RECV_BUFFER};
use crate::crypto::{MAX_DATAGRAM, PacketCrypto};
use crate::sys::faketcp::FakeTcpSocket;
use crate::sys::{BATCH_SIZE, RecvMeta, Transmit, UdpSock, UdpState};

/// Receive buffers of a client socket (a listener uses `BATCH_SIZE`).
const CLIENT_RECV_BUFFERS: usize = 8;
/// Transmit slots (plus one per parity shard): what one flush can hand the
/// kernel. With GSO a run of full-size datagrams to one peer is one message
/// (up to 46 of 1400 bytes), so 128 slots fill one `sendmmsg` with about
/// three GSO messages where 32 slots made one call per 32 datagrams. Pages
/// of the buffer are touched only as far as it fills, so an idle session's
/// socket does not pay for it.
const TX_SLOTS: usize = 4 * BATCH_SIZE;
/// Rate limiter burst in bytes (kcp-go: 64 datagrams of 1500 bytes).
const RATE_BURST: f64 = 96_000.0;

/// Token bucket for `rate_limit`.
struct RateLimiter {
    rate: f64,
    tokens: f64,
    last: Duration,
}

/// One datagram of the receive batch: `start..end` in the batch buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Datagram {
    pub(crate) peer: SocketAddr,
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// When it arrived, on the driver's clock ([`RxClock`]).
    pub(crate) arrived: Duration,
}

/// The datagrams of one received message, by value (borrows nothing).
pub(crate) struct Datagrams {
    peer: SocketAddr,
    off: usize,
    end: usize,
    stride: usize,
    arrived: Duration,
}

impl Iterator for Datagrams {
    type Item = Datagram;

    fn next(&mut self) -> Option<Datagram> {
        if self.off >= self.end {
            return None;
        }
        let next = (self.off + self.stride).min(self.end);
        let d = Datagram {
            peer: self.peer,
            start: self.off,
            end: next,
            arrived: self.arrived,
        };
        self.off = next;
        Some(d)
    }
}

/// Turns the kernel's receive stamps ([`RecvMeta::rx_time`],
/// `CLOCK_REALTIME`) into arrival times on the driver's clock, so the
/// sessions' one-way-delay figures measure the path, not how late the
/// driver woke.
///
/// Once per batch that carries stamps, the realtime and driver clocks are
/// read together after the receive call: a stamp's age on the realtime
/// clock, taken from the driver time just read, is its arrival. (That may
/// be later than the round's `now`, read before the call: a datagram that
/// came in after it did arrive then. Clamping it to `now` would make it
/// early, and an early arrival lowers the receivers' base delay.)
/// Realtime can be stepped (NTP, an administrator) while a datagram
/// waits; an arrival computed across a step is off by the step, and one
/// too early would lower the receivers' base one-way delay for its whole
/// window, so every later datagram would read as queued. Three guards
/// keep a step from poisoning anything:
/// - every arrival is clamped to `[floor, read]`: no later than the driver
///   time read after the receive call (it had arrived by then), and no
///   earlier than the last time this socket was found drained (nothing
///   received after that can have arrived before it), so a step moves an
///   arrival at most within the time its datagram may really have waited;
/// - realtime − driver time is compared with the previous batch's: a
///   change larger than 2 ms plus 1,000 ppm of the time between them
///   (slewing moves it by at most 500 ppm) is a step, and from then until
///   the socket is next found drained (every datagram stamped before the
///   step consumed) the batch's processing time is used instead;
/// - a stamp later than the realtime clock read after it is age 0.
///
/// A driver clock that is not the wall's (tokio's paused test time) reads
/// as a step every batch: processing time, as without stamps.
#[derive(Debug, Default)]
pub(crate) struct RxClock {
    /// Realtime and driver time read together at the last stamped batch.
    last: Option<(Duration, Duration)>,
    /// Driver time when the socket was last found drained.
    floor: Duration,
    /// A step was seen and the socket not drained since.
    stepped: bool,
    /// This batch carries stamps: `last` was read after it arrived.
    stamped: bool,
    /// This batch's processing time.
    now: Duration,
}

/// Largest realtime − driver-time change between batches that is not a step:
/// this plus a thousandth of the time between them.
const STEP_SLACK: Duration = Duration::from_millis(2);

impl RxClock {
    /// A batch was received at driver time `now` (read before the receive
    /// call); `clocks` reads (realtime since the epoch, driver time) now,
    /// called only when a stamp is there to convert.
    pub(crate) fn batch(
        &mut self,
        now: Duration,
        stamped: bool,
        clocks: impl FnOnce() -> (Duration, Duration),
    ) {
        self.now = now;
        self.stamped = stamped;
        if !stamped {
            return;
        }
        let (real, mono) = clocks();
        if let Some((real0, mono0)) = self.last {
            // (real - mono) - (real0 - mono0), as two non-negative parts.
            let (a, b) = (real + mono0, real0 + mono);
            let moved = a.max(b) - a.min(b);
            let slack = STEP_SLACK + mono.saturating_sub(mono0) / 1000;
            self.stepped |= moved > slack;
        }
        self.last = Some((real, mono));
    }

    /// The receive call that made the batch found the socket drained
    /// (`now`: the driver time read before it): later datagrams arrived
    /// after `now`, and none stamped before a step is left.
    pub(crate) fn drained(&mut self, now: Duration) {
        self.floor = self.floor.max(now);
        self.stepped = false;
    }

    /// The arrival of a datagram of this batch stamped `rx_time`.
    pub(crate) fn arrival(&self, rx_time: Option<Duration>) -> Duration {
        let now = self.now;
        match (rx_time, self.last) {
            (Some(stamp), Some((real, mono))) if self.stamped && !self.stepped => {
                let age = real.saturating_sub(stamp);
                mono.saturating_sub(age).clamp(self.floor.min(mono), mono)
            }
            _ => now,
        }
    }
}

/// What carries a driver's datagrams ([`crate::Carrier`]).
pub(crate) enum Socket {
    Udp(UdpSock),
    FakeTcp(Box<FakeTcpSocket>),
}

impl Socket {
    /// The local address.
    fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Self::Udp(s) => s.local_addr(),
            Self::FakeTcp(f) => Ok(f.get().local_addr()),
        }
    }
}

/// A socket with its reused buffers.
pub(crate) struct Io {
    socket: Socket,
    crypto: Arc<PacketCrypto>,
    rng: ChaCha20Rng,
    nonce: [u8; 16],
    // Receive buffers: `rx_count` buffers of `rx_size` bytes, laid end to end.
    rx: Vec<u8>,
    rx_size: usize,
    rx_count: usize,
    rx_meta: Vec<RecvMeta>,
    rx_got: usize,
    rx_clock: RxClock,
    /// The last receive call found the socket drained, at this driver time
    /// (applied to `rx_clock` once its batch has been walked).
    rx_drained: Option<Duration>,
    // Transmit slots of `stride` bytes (the configured MTU, the largest
    // datagram we send), laid end to end so a run of full-size datagrams to
    // one peer is contiguous and goes out as one GSO message:
    // `[tx_sent, tx_count)` wait to be sent, `[tx_sealed, tx_count)` still
    // need sealing.
    tx: Vec<u8>,
    stride: usize,
    tx_len: Vec<usize>,
    tx_dest: Vec<SocketAddr>,
    tx_slots: usize,
    tx_count: usize,
    tx_sealed: usize,
    tx_sent: usize,
    rate: Option<RateLimiter>,
    /// The rate limiter holds the slots until then.
    pub(crate) rate_wait: Option<Duration>,
    /// A send or receive reported `ConnectionRefused` (ICMP port
    /// unreachable on a connected client socket) since the driver last
    /// looked.
    pub(crate) refused: bool,
    /// A send failed because this socket's local address no longer works
    /// (no route, the address gone, the network down) since the driver
    /// last looked.
    pub(crate) path_failed: bool,
}

impl Io {
    /// Buffers for `socket`: a listener's receive batch is `BATCH_SIZE`
    /// buffers, a client's `CLIENT_RECV_BUFFERS`.
    pub(crate) fn new(
        socket: Socket,
        udp: &UdpState,
        config: &ConfigInner,
        listener: bool,
    ) -> Self {
        let parity = config.fec.map_or(0, |(_, p)| p);
        let tx_slots = TX_SLOTS + parity;
        let stride = config.mtu.clamp(1, MAX_DATAGRAM);
        let rx_count = if listener {
            BATCH_SIZE
        } else {
            CLIENT_RECV_BUFFERS
        };
        let rx_size = if matches!(socket, Socket::FakeTcp(_)) {
            // The whole IP packet: headers of up to 60 bytes each, then a
            // datagram; anything longer is cut, counted and dropped.
            MAX_DATAGRAM + 120
        } else if udp.gro_segments() > 1 {
            (udp.gro_segments() * MAX_DATAGRAM).min(65_536)
        } else {
            MAX_DATAGRAM
        };
        let rate = (config.rate_limit > 0).then_some(RateLimiter {
            rate: config.rate_limit as f64,
            tokens: RATE_BURST,
            last: Duration::ZERO,
        });
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        Self {
            socket,
            crypto: config.crypto.clone(),
            rng: ChaCha20Rng::from_os_rng(),
            nonce: [0; 16],
            rx: vec![0; rx_count * rx_size],
            rx_size,
            rx_count,
            rx_meta: vec![RecvMeta::default(); rx_count],
            rx_got: 0,
            rx_clock: RxClock::default(),
            rx_drained: None,
            tx: vec![0; tx_slots * stride],
            stride,
            tx_len: vec![0; tx_slots],
            tx_dest: vec![unspecified; tx_slots],
            tx_slots,
            tx_count: 0,
            tx_sealed: 0,
            tx_sent: 0,
            rate,
            rate_wait: None,
            refused: false,
            path_failed: false,
        }
    }

    /// The socket's local address.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Sends and receives on `socket` from now on (a client rebound to a
    /// new local address); datagrams waiting in the slots go out on it.
    pub(crate) fn replace_socket(&mut self, socket: UdpSock) {
        self.socket = Socket::Udp(socket);
    }

    /// The receive buffer the kernel granted the UDP socket (it reports
    /// double, with its bookkeeping); `None` for fake TCP.
    pub(crate) fn recv_buffer(&self) -> Option<usize> {
        match &self.socket {
            Socket::Udp(socket) => socket2::SockRef::from(socket.get())
                .recv_buffer_size()
                .ok()
                .map(|n| n / 2),
            Socket::FakeTcp(_) => None,
        }
    }

    /// Whether datagrams ride plain UDP (a fake-TCP flow is tied to its
    /// kernel connection and cannot be rebound to a new local address).
    pub(crate) fn is_udp(&self) -> bool {
        matches!(self.socket, Socket::Udp(_))
    }

    /// A random conversation id for a client.
    pub(crate) fn random_conv(&mut self) -> u32 {
        self.rng.next_u32()
    }

    // ------------------------------------------------------------ receive

    /// One receive system call at driver time `now`. `Ready(n)` with the
    /// number of messages received (0 after a counted error), `Pending`
    /// when the socket is drained. Then [`message`](Self::message) walks
    /// them, each datagram with its arrival time ([`RxClock`]).
    pub(crate) fn poll_recv(
        &mut self,
        cx: &mut Context<'_>,
        shared: &DriverShared,
        now: Duration,
    ) -> Poll<usize> {
        // The last batch has been walked: its drain bounds the next one.
        if let Some(at) = self.rx_drained.take() {
            self.rx_clock.drained(at);
        }
        let poll = self.poll_recv_raw(cx, shared, now);
        let got = match poll {
            Poll::Pending => {
                self.rx_clock.drained(now);
                0
            }
            Poll::Ready(got) => got,
        };
        let stamped = self
            .rx_meta
            .get(..got)
            .is_some_and(|m| m.iter().any(|m| m.rx_time.is_some()));
        let epoch = shared.epoch;
        self.rx_clock.batch(now, stamped, || {
            let real = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (
                real,
                tokio::time::Instant::now().saturating_duration_since(epoch),
            )
        });
        poll
    }

    /// The last [`poll_recv`](Self::poll_recv) found the socket drained
    /// (and cleared its readiness): the next one registers the waker.
    pub(crate) fn recv_drained(&self) -> bool {
        self.rx_drained.is_some()
    }

    /// [`poll_recv`](Self::poll_recv) without the clock: the system call;
    /// notes in `rx_drained` when it found the socket drained.
    fn poll_recv_raw(
        &mut self,
        cx: &mut Context<'_>,
        shared: &DriverShared,
        now: Duration,
    ) -> Poll<usize> {
        self.rx_got = 0;
        let socket = match &self.socket {
            Socket::Udp(socket) => socket,
            Socket::FakeTcp(fake) => {
                let mut chunks = self.rx.chunks_mut(self.rx_size);
                let mut bufs: [IoSliceMut<'_>; BATCH_SIZE] =
                    std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
                let n = self.rx_count.min(BATCH_SIZE);
                let got = match fake.poll_recv(
                    cx,
                    &shared.udp,
                    bufs.get_mut(..n).unwrap_or_default(),
                    &mut self.rx_meta,
                ) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(got)) => got,
                    Poll::Ready(Err(_)) => {
                        bump(&shared.counters.recv_errors);
                        0
                    }
                };
                self.rx_got = got;
                return Poll::Ready(got);
            }
        };
        let (udp, rx, meta) = (&shared.udp, &mut self.rx, &mut self.rx_meta);
        let size = self.rx_size;
        let count = self.rx_count;
        let mut drained = false;
        // A short batch (fewer messages than asked for) means the kernel
        // found the queue empty: `recvmmsg` and the portable loop stop
        // early only at EAGAIN or at an error, and errors cannot arise
        // mid-queue here (driver sockets are never connected and do not
        // set IP_RECVERR, so no ICMP error is queued but a connected
        // client's one refusal, met first; the portable path
        // says when it holds one back). The socket then clears its
        // readiness now instead of with one more `recvmmsg` that would
        // return EAGAIN. A datagram that arrives meanwhile is not missed:
        // only the readiness handed out is cleared, not an event delivered
        // after it.
        let res = socket.poll_recv(cx, |s| {
            let mut chunks = rx.chunks_mut(size);
            let mut bufs: [IoSliceMut<'_>; BATCH_SIZE] =
                std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
            let n = count.min(udp.batch_size());
            let got = udp.recv(
                socket2::SockRef::from(s),
                bufs.get_mut(..n).unwrap_or_default(),
                meta,
            )?;
            drained = got > 0 && got < n && !udp.recv_error_pending();
            Ok((got, drained))
        });
        if drained {
            self.rx_drained = Some(now);
        }
        let got = match res {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(e)) => {
                // ICMP errors, truncation reports...: counted, never fatal
                // here (the driver decides what a refusal means).
                self.refused |= e.kind() == io::ErrorKind::ConnectionRefused;
                bump(&shared.counters.recv_errors);
                return Poll::Ready(0);
            }
        };
        self.rx_got = got;
        Poll::Ready(got)
    }

    /// The datagrams of message `i` of the last receive (a GRO run split
    /// into its datagrams), in arrival order.
    pub(crate) fn message(&self, i: usize) -> Option<Datagrams> {
        if i >= self.rx_got {
            return None;
        }
        let m = self.rx_meta.get(i)?;
        let start = i * self.rx_size + m.offset.min(self.rx_size);
        let end = (start + m.len).min((i + 1) * self.rx_size);
        Some(Datagrams {
            peer: m.addr,
            off: start,
            end,
            stride: m.stride.max(1),
            arrived: self.rx_clock.arrival(m.rx_time),
        })
    }

    /// Opens (decrypts and verifies) a datagram in place; the plaintext's
    /// range in the batch buffer.
    pub(crate) fn open(&mut self, d: Datagram) -> Option<Range<usize>> {
        let datagram = self.rx.get_mut(d.start..d.end)?;
        let range = self.crypto.open(datagram).ok()?;
        let (start, end) = (d.start + range.start, d.start + range.end);
        (start <= end && end <= d.end).then_some(start..end)
    }

    /// Bytes of the batch buffer (a plaintext range from [`open`](Self::open)).
    pub(crate) fn rx(&self, range: Range<usize>) -> &[u8] {
        self.rx.get(range).unwrap_or_default()
    }

    // ----------------------------------------------------------- transmit

    /// Slots free for new datagrams.
    pub(crate) fn free_slots(&self) -> usize {
        self.tx_slots - self.tx_count
    }

    /// Whether datagrams are waiting to be sent.
    pub(crate) fn has_pending(&self) -> bool {
        self.tx_count > 0
    }

    /// The next free slot (`stride` bytes), for a session to write into.
    pub(crate) fn next_slot(&mut self) -> &mut [u8] {
        let base = self.tx_count * self.stride;
        self.tx
            .get_mut(base..base + self.stride)
            .unwrap_or_default()
    }

    /// The next slot now holds a datagram body of `payload` plaintext bytes
    /// for `dest`, to be sealed.
    pub(crate) fn push(&mut self, dest: SocketAddr, payload: usize) {
        if let (Some(len), Some(d)) = (
            self.tx_len.get_mut(self.tx_count),
            self.tx_dest.get_mut(self.tx_count),
        ) {
            *len = payload;
            *d = dest;
            self.tx_count += 1;
        }
    }

    /// Seals the datagrams not yet sealed (no session lock is held here).
    fn seal_pending(&mut self) {
        let nonce_len = self.crypto.nonce_len().min(self.nonce.len());
        let plain = self.crypto.header_len() == 0 && self.crypto.trailer_len() == 0;
        while self.tx_sealed < self.tx_count {
            let i = self.tx_sealed;
            self.tx_sealed += 1;
            if plain {
                continue;
            }
            let base = i * self.stride;
            let (Some(buf), Some(len)) = (
                self.tx.get_mut(base..base + self.stride),
                self.tx_len.get_mut(i),
            ) else {
                continue;
            };
            let nonce = self.nonce.get_mut(..nonce_len).unwrap_or_default();
            self.rng.fill_bytes(nonce);
            match self.crypto.seal(buf, *len, nonce) {
                Ok(n) => *len = n,
                Err(_) => *len = 0, // cannot happen with Conn's headroom; never sent
            }
        }
    }

    /// Whether the rate limiter lets a send go now (else `rate_wait` says
    /// until when).
    fn rate_allows(&mut self, now: Duration) -> bool {
        if let Some(rate) = self.rate.as_mut() {
            let elapsed = now.saturating_sub(rate.last).as_secs_f64();
            rate.last = now;
            rate.tokens = (rate.tokens + elapsed * rate.rate).min(RATE_BURST);
            if rate.tokens < 0.0 {
                let wait = Duration::from_secs_f64(-rate.tokens / rate.rate);
                self.rate_wait = Some(now + wait);
                return false;
            }
        }
        self.rate_wait = None;
        true
    }

    /// Sends what is in the transmit slots. Returns true when they are all
    /// gone (and reset), false when the socket (or the rate limit) blocked.
    pub(crate) fn poll_flush(
        &mut self,
        cx: &mut Context<'_>,
        now: Duration,
        shared: &DriverShared,
    ) -> bool {
        self.seal_pending();
        while self.tx_sent < self.tx_count {
            if !self.rate_allows(now) {
                return false;
            }
            if let Socket::Udp(socket) = &mut self.socket {
                match socket.poll_send_ready(cx) {
                    Poll::Pending => return false,
                    Poll::Ready(Err(_)) => bump(&shared.counters.send_errors),
                    Poll::Ready(Ok(())) => {}
                }
            }
            let mut transmits = [Transmit {
                destination: shared.local_addr,
                contents: &[],
                segment_size: None,
            }; BATCH_SIZE];
            // Slots per transmit, to map "n transmits sent" back to slots.
            let mut spans = [0usize; BATCH_SIZE];
            // Under a rate limit one call sends at most a batch's worth of
            // slots (GSO runs included), so what leaves on credit past the
            // bucket stays one batch, as with kcp-go.
            let upto = if self.rate.is_some() {
                self.tx_count.min(self.tx_sent + BATCH_SIZE)
            } else {
                self.tx_count
            };
            let slots = Slots {
                tx: &self.tx,
                len: self.tx_len.get(..upto).unwrap_or_default(),
                dest: &self.tx_dest,
                stride: self.stride,
            };
            let (n, skipped) = slots.gather(
                self.tx_sent,
                &mut transmits,
                &mut spans,
                shared.udp.max_gso_segments(),
            );
            self.tx_sent += skipped;
            if n == 0 {
                continue;
            }
            let batch = transmits.get(..n).unwrap_or_default();
            let res = match &mut self.socket {
                Socket::Udp(socket) => {
                    socket.try_send(|s| shared.udp.send(socket2::SockRef::from(s), batch))
                }
                Socket::FakeTcp(fake) => match fake.poll_send(cx, &shared.udp, batch) {
                    Poll::Pending => return false,
                    Poll::Ready(r) => r,
                },
            };
            match res {
                Ok(sent) => {
                    let sent = sent.clamp(1, n.max(1));
                    let sent_bytes: usize = batch.iter().take(sent).map(|t| t.contents.len()).sum();
                    let slots: usize = spans.iter().take(sent).sum();
                    add(&shared.counters.datagrams_out, slots);
                    add(&shared.counters.bytes_out, sent_bytes);
                    if let Some(rate) = self.rate.as_mut() {
                        rate.tokens -= sent_bytes as f64;
                    }
                    self.tx_sent += slots.max(1);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    // About transmits[0] only (unreachable, too large...):
                    // drop it; KCP retransmits what mattered.
                    self.refused |= e.kind() == io::ErrorKind::ConnectionRefused;
                    self.path_failed |= local_path_failed(&e);
                    bump(&shared.counters.send_errors);
                    self.tx_sent += spans.first().copied().unwrap_or(1).max(1);
                }
            }
        }
        self.tx_count = 0;
        self.tx_sealed = 0;
        self.tx_sent = 0;
        true
    }
}

/// A send error that says this host's side of the path is gone:
/// `ENETUNREACH`, `ENETDOWN`, `EADDRNOTAVAIL`.
fn local_path_failed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::NetworkDown
            | io::ErrorKind::AddrNotAvailable
    )
}

/// The filled transmit slots, borrowed for one send.
struct Slots<'a> {
    tx: &'a [u8],
    /// Lengths of the filled slots.
    len: &'a [usize],
    dest: &'a [SocketAddr],
    stride: usize,
}

impl<'a> Slots<'a> {
    /// Fills `transmits` from slot `from` on: runs of full-stride datagrams
    /// to one peer become one GSO transmit. Returns how many, and how many
    /// leading slots that failed to seal were skipped; `spans[i]` is the
    /// number of slots behind `transmits[i]`.
    fn gather(
        &self,
        from: usize,
        transmits: &mut [Transmit<'a>; BATCH_SIZE],
        spans: &mut [usize; BATCH_SIZE],
        max_gso: usize,
    ) -> (usize, usize) {
        let stride = self.stride;
        let count = self.len.len();
        let max_run = max_gso.min(65_507 / stride.max(1)).max(1);
        let (mut n, mut skipped) = (0, 0);
        let mut i = from;
        while i < count && n < BATCH_SIZE {
            let Some(&dest) = self.dest.get(i) else { break };
            let first = self.len.get(i).copied().unwrap_or(0);
            if first == 0 {
                // A slot that failed to seal is never sent: skip it when it
                // leads the batch, else end the batch before it.
                if n == 0 {
                    skipped += 1;
                    i += 1;
                    continue;
                }
                break;
            }
            // A GSO run: full-stride datagrams to one peer, the last may be
            // shorter; they are contiguous because slots are `stride` apart.
            let mut j = i + 1;
            let mut total = first;
            if first == stride {
                while j < count && j - i < max_run {
                    let (len, d) = (
                        self.len.get(j).copied().unwrap_or(0),
                        self.dest.get(j).copied(),
                    );
                    if d != Some(dest) || len == 0 || len > stride {
                        break;
                    }
                    total += len;
                    j += 1;
                    if len < stride {
                        break;
                    }
                }
            }
            let base = i * stride;
            if let (Some(t), Some(span)) = (transmits.get_mut(n), spans.get_mut(n)) {
                t.destination = dest;
                t.contents = self.tx.get(base..base + total).unwrap_or_default();
                t.segment_size = (j - i > 1).then_some(stride);
                *span = j - i;
            }
            n += 1;
            i = j;
        }
        (n, skipped)
    }
}

/// Opens one of a listener's `shards` UDP sockets, bound to `bind`,
/// configured from `config`, with its batched-I/O state. Unless configured,
/// its receive buffer is its share of [`LISTENER_RECV_BUFFER`], at least
/// [`DEFAULT_RECV_BUFFER`].
pub(crate) fn open_listener_socket(
    bind: SocketAddr,
    config: &ConfigInner,
    shards: usize,
) -> io::Result<(Socket, UdpState)> {
    let recv_default = (LISTENER_RECV_BUFFER / shards.max(1)).max(DEFAULT_RECV_BUFFER);
    let sock = bind_socket(bind, config, shards > 1, recv_default)?;
    let (socket, udp) = wrap_socket(sock, config)?;
    Ok((Socket::Udp(socket), udp))
}

/// With [`crate::Carrier::FakeTcp`], a listener's `shards` sockets at once
/// (one kernel listening socket and firewall table behind them; see
/// `sys::faketcp`); with UDP none (each is opened by [`open_listener_socket`]).
pub(crate) fn open_fake_tcp_shards(
    bind: SocketAddr,
    config: &ConfigInner,
    shards: usize,
) -> io::Result<Vec<(Socket, UdpState)>> {
    if config.carrier != crate::Carrier::FakeTcp {
        return Ok(Vec::new());
    }
    crate::sys::faketcp::FakeTcp::listen(bind, MAX_DATAGRAM, config.dscp, shards)?
        .into_iter()
        .map(|fake| {
            Ok((
                Socket::FakeTcp(Box::new(FakeTcpSocket::new(fake)?)),
                UdpState::for_fake_tcp(),
            ))
        })
        .collect()
}

/// A new UDP socket bound to `bind`, with `config`'s socket options; its
/// receive buffer at least `recv_default` bytes unless `config` sets one
/// ([`DEFAULT_RECV_BUFFER`] but for a listener's).
pub(crate) fn bind_socket(
    bind: SocketAddr,
    config: &ConfigInner,
    reuse_port: bool,
    recv_default: usize,
) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = Domain::for_address(bind);
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    configure_socket(&sock, bind.is_ipv4(), config, recv_default)?;
    if reuse_port {
        #[cfg(all(unix, not(any(target_os = "solaris", target_os = "illumos"))))]
        sock.set_reuse_port(true)?;
    }
    sock.bind(&bind.into())?;
    Ok(sock)
}

/// Hands a bound socket to tokio with its batched-I/O state (non-blocking,
/// GRO where the kernel has it).
pub(crate) fn wrap_socket(
    sock: socket2::Socket,
    config: &ConfigInner,
) -> io::Result<(UdpSock, UdpState)> {
    let udp = UdpState::new(socket2::SockRef::from(&sock), config.batching)?;
    let std_sock: std::net::UdpSocket = sock.into();
    let socket = UdpSock::new(std_sock)?;
    Ok((socket, udp))
}

/// The receive buffer: `asked` bytes, or by default at least `default`
/// ([`DEFAULT_RECV_BUFFER`], 4 MiB, or a listener's share of
/// [`LISTENER_RECV_BUFFER`]: a burst of full windows from many peers must
/// not overflow it, or every drop costs a retransmission). The kernel
/// caps `SO_RCVBUF` at `net.core.rmem_max` (Linux's default cap is 208
/// KiB); when it granted less than asked, `SO_RCVBUFFORCE` asks past the
/// cap, which works for a process with `CAP_NET_ADMIN` (root), and
/// otherwise the capped size stays. Linux reports double the size asked
/// (its bookkeeping overhead), so granted means reported / 2.
fn size_recv_buffer(
    sock: &socket2::Socket,
    asked: Option<usize>,
    default: usize,
) -> io::Result<()> {
    let want = match asked {
        Some(n) => {
            sock.set_recv_buffer_size(n)?;
            n
        }
        None => {
            if sock.recv_buffer_size().is_ok_and(|n| n / 2 >= default) {
                return Ok(());
            }
            // Best effort: a small buffer is slower, not wrong.
            let _ = sock.set_recv_buffer_size(default);
            default
        }
    };
    let granted = sock.recv_buffer_size().map_or(0, |n| n / 2);
    if granted < want {
        crate::sys::force_recv_buffer(sock, want);
    }
    Ok(())
}

/// `config`'s buffer sizes and DSCP on `sock` (a receive buffer of at least
/// `recv_default` bytes unless `config` sets one).
pub(crate) fn configure_socket(
    sock: &socket2::Socket,
    ipv4: bool,
    config: &ConfigInner,
    recv_default: usize,
) -> io::Result<()> {
    size_recv_buffer(sock, config.recv_buffer, recv_default)?;
    if let Some(n) = config.send_buffer {
        sock.set_send_buffer_size(n)?;
    }
    if config.dscp != 0 {
        let tos = u32::from(config.dscp) << 2;
        if ipv4 {
            sock.set_tos(tos)?;
        } else {
            #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
            sock.set_tclass_v6(tos)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Realtime 1,000 s ahead of the driver's clock.
    const WALL: Duration = Duration::from_secs(1_000);

    /// A late reader's batch: stamps become arrivals on the driver's clock,
    /// between the last drain and the clocks' reading after the receive.
    #[test]
    fn stamps_become_arrivals_between_the_last_drain_and_the_receive() {
        let mut c = RxClock::default();
        c.drained(ms(100));
        // Woke at 180 (clocks read at 181); datagrams came in at 120 and 150.
        c.batch(ms(180), true, || (WALL + ms(181), ms(181)));
        assert_eq!(c.arrival(Some(WALL + ms(120))), ms(120));
        assert_eq!(c.arrival(Some(WALL + ms(150))), ms(150));
        // A datagram that came in after `now` was read (before the call).
        assert_eq!(
            c.arrival(Some(WALL + ms(180) + ms(1) / 2)),
            ms(180) + ms(1) / 2
        );
        // No stamp: the processing time; a stamp from the future: when
        // the clocks were read.
        assert_eq!(c.arrival(None), ms(180));
        assert_eq!(c.arrival(Some(WALL + ms(190))), ms(181));
        // Before the socket was last found drained: the drain.
        assert_eq!(c.arrival(Some(WALL + ms(50))), ms(100));
        // A batch without stamps reads no clock.
        c.batch(ms(200), false, || panic!("clock read without stamps"));
        assert_eq!(c.arrival(Some(WALL + ms(199))), ms(200));
    }

    /// Realtime stepped while datagrams waited: no arrival moves outside
    /// `[drain, now]`, and until the socket is drained the processing time
    /// is used; slewing (under 1,000 ppm) is not a step.
    #[test]
    fn a_realtime_step_cannot_poison_the_arrivals() {
        let mut c = RxClock::default();
        c.batch(ms(1_000), true, || (WALL + ms(1_000), ms(1_000)));
        c.drained(ms(1_000));
        // Slewed by 0.5 ms over 1 s: still trusted.
        let slewed = WALL + ms(2_000) + Duration::from_micros(500);
        c.batch(ms(2_000), true, || (slewed, ms(2_000)));
        assert_eq!(c.arrival(Some(slewed - ms(10))), ms(1_990));
        c.drained(ms(2_000));
        // Stepped forward an hour after a datagram stamped at 2,990 came
        // in: its stamp looks an hour old. Not trusted until drained.
        let hour = Duration::from_secs(3_600);
        c.batch(ms(3_000), true, || (WALL + hour + ms(3_000), ms(3_000)));
        assert_eq!(c.arrival(Some(WALL + ms(2_990))), ms(3_000));
        // A full batch after it (not drained): still the processing time.
        c.batch(ms(3_010), true, || (WALL + hour + ms(3_010), ms(3_010)));
        assert_eq!(c.arrival(Some(WALL + ms(2_995))), ms(3_010));
        // Drained: the new offset holds from here.
        c.drained(ms(3_010));
        c.batch(ms(3_100), true, || (WALL + hour + ms(3_100), ms(3_100)));
        assert_eq!(c.arrival(Some(WALL + hour + ms(3_050))), ms(3_050));
        // Stepped back: arrivals never later than the clocks were read.
        c.drained(ms(3_100));
        c.batch(ms(3_200), true, || (WALL + ms(3_200), ms(3_200)));
        let got = c.arrival(Some(WALL + hour + ms(3_150)));
        assert_eq!(got, ms(3_200));
        // Even undetected (no earlier batch to compare with), a forward
        // step only moves an arrival down to the last drain.
        let mut fresh = RxClock::default();
        fresh.drained(ms(500));
        fresh.batch(ms(600), true, || (WALL + hour + ms(600), ms(600)));
        assert_eq!(fresh.arrival(Some(WALL + ms(590))), ms(500));
    }

    /// What the kernel grants without `CAP_NET_ADMIN`: `net.core.rmem_max`.
    fn rmem_max() -> usize {
        std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(usize::MAX)
    }

    /// A listener's sockets share `LISTENER_RECV_BUFFER` (at least 4 MiB
    /// each); a configured size wins. As root (`SO_RCVBUFFORCE`) the sizes
    /// are exact; otherwise the kernel's cap bounds them.
    #[tokio::test]
    async fn a_listener_socket_gets_its_share_of_the_listener_buffer() {
        let bind = SocketAddr::from(([127, 0, 0, 1], 0));
        let granted = |config: &ConfigInner, shards| {
            let (socket, _) = open_listener_socket(bind, config, shards).unwrap();
            let Socket::Udp(socket) = &socket else {
                panic!("udp")
            };
            socket2::SockRef::from(socket.get())
                .recv_buffer_size()
                .unwrap()
                / 2
        };
        let config = crate::Config::default();
        let cap = rmem_max();
        let root = force_allowed();
        for (shards, want) in [(1, 16 << 20), (2, 8 << 20), (4, 4 << 20), (16, 4 << 20)] {
            let got = granted(&config.inner, shards);
            if root {
                assert_eq!(got, want, "{shards} shards");
            } else {
                assert!(got >= want.min(cap), "{shards} shards: {got}");
            }
        }
        let config = crate::Config::builder()
            .socket_buffers(1 << 20, 0)
            .build()
            .unwrap();
        let got = granted(&config.inner, 1);
        assert!(got >= (1 << 20usize).min(cap) && got < 4 << 20, "{got}");
    }

    /// Whether this process may set receive buffers past `rmem_max`.
    fn force_allowed() -> bool {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        crate::sys::force_recv_buffer(&sock, 64 << 20)
            && sock.recv_buffer_size().is_ok_and(|n| n / 2 == 64 << 20)
    }
}
