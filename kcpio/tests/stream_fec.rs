//! Adaptive stream FEC between kcpio ends (`ConfigBuilder::adaptive_fec`):
//! on the simulator, a bulk stream is delivered whole and in order under
//! i.i.d. and burst loss, reordering, duplication and a rate limit, with
//! parity that follows the loss (none on a clean path, less than the fixed
//! 10/3 shape on a lossy one); and the negotiation transcripts (a kcp-go-
//! shaped peer sees the fixed shape's bytes, a listener answers only in
//! kind).

mod sim;

use std::time::Duration;

use kcpio::{Config, Congestion, Conn, Key, Method, Preset, StreamFecStats};
use sim::{Flow, Link, Sim};

fn builder() -> kcpio::ConfigBuilder {
    Config::builder()
        .preset(Preset::Fast3)
        .congestion(Congestion::Bbr)
        .stream(true)
        .window(512, 512)
        .crypto(Method::Aes128Gcm, Key::passphrase("stream fec"))
        .fec(10, 3)
}

fn config(adaptive: bool) -> Config {
    builder().adaptive_fec(adaptive).build().expect("valid")
}

/// The stream's byte at `offset`.
fn pattern(offset: u64) -> u8 {
    (offset % 251) as u8 ^ (offset >> 11) as u8
}

/// What one bulk run measured.
#[derive(Debug)]
struct Bulk {
    delivered: u64,
    /// Bytes delivered by [`Path::from_ms`] into the transfer.
    delivered_from: u64,
    /// The transfer's length, ms (`limit_ms` when it did not finish).
    elapsed_ms: u64,
    /// The sender's and the receiver's stream-FEC counters.
    tx: StreamFecStats,
    rx: StreamFecStats,
    /// Parity shards of kcp-go's fixed shape sent after the switch.
    fixed_parity: u64,
    /// The sender's retransmissions after a timeout.
    retransmit_rto: u64,
    /// Datagrams the downstream bottleneck dropped and passed (0 without one).
    queue_drops: u64,
    queue_passed: u64,
    /// Datagrams each end sent during the transfer, and in how many
    /// batches (driver wake-ups that sent): sender, then receiver.
    datagrams: (u64, u64),
    batches: (u64, u64),
}

impl Bulk {
    /// Goodput after `from_ms`, bytes/s.
    fn goodput_from(&self, from_ms: u64) -> f64 {
        (self.delivered - self.delivered_from) as f64 * 1e3
            / self.elapsed_ms.saturating_sub(from_ms).max(1) as f64
    }
}

/// Node 0 writes `total` pattern bytes to node 1 over `down` (and `up` for
/// the return path); the receiver checks every byte in order. Stops when
/// all arrived or at `limit_ms`.
fn bulk(seed: u64, down: Link, up: Link, total: u64, limit_ms: u64) -> Bulk {
    bulk_with(seed, down, up, None, total, limit_ms)
}

/// As [`bulk`], each direction behind a bottleneck of `rate` bytes/s and
/// `queue` bytes when `limit` is `Some((rate, queue))`.
fn bulk_with(
    seed: u64,
    down: Link,
    up: Link,
    limit: Option<(u64, u64)>,
    total: u64,
    limit_ms: u64,
) -> Bulk {
    let cfg = config(true);
    bulk_on(&Path {
        seed,
        down,
        up,
        limit,
        cfg: &cfg,
        request: false,
        from_ms: 0,
        total,
        limit_ms,
    })
}

/// One bulk run's path and sessions.
struct Path<'a> {
    seed: u64,
    down: Link,
    up: Link,
    /// A bottleneck of `rate` bytes/s and `queue` bytes in each direction.
    limit: Option<(u64, u64)>,
    cfg: &'a Config,
    /// The receiver first sends a short request (as a tunnel's HTTP
    /// client does), so that it has a round-trip sample of its own.
    request: bool,
    /// When [`Bulk::delivered_from`] is read, ms into the transfer.
    from_ms: u64,
    total: u64,
    limit_ms: u64,
}

fn bulk_on(p: &Path<'_>) -> Bulk {
    let mut sim = Sim::new(p.seed, 0);
    let (down, up) = match p.limit {
        Some((rate, queue)) => {
            let a = sim.add_bottleneck(rate, queue);
            let b = sim.add_bottleneck(rate, queue);
            (p.down.clone().through(a), p.up.clone().through(b))
        }
        None => (p.down.clone(), p.up.clone()),
    };
    let c = sim.add(11, p.cfg, down);
    let s = sim.add(11, p.cfg, up);
    sim.connect(c, s);
    let now = sim.now();
    sim.conn(s).answer_datagram_fec_only();
    sim.conn(c).connect(now);
    sim.run_until(300, 100_000);
    assert!(sim.conn(c).adaptive_fec_negotiated());
    assert!(sim.conn(s).adaptive_fec_negotiated());
    if p.request {
        assert_eq!(sim.conn(s).write(&[7; 200]), Ok(200));
        let mut got = 0;
        let mut buf = [0u8; 256];
        sim.drive(400_000, |sim| {
            got += sim.conn(c).read(&mut buf).unwrap_or(0);
            if got >= 200 {
                Flow::Done
            } else {
                Flow::WakeAt(10_000)
            }
        });
        assert_eq!(got, 200);
    }
    let fixed0 = sim.conn(c).stats().fec_out.parity_out;
    let start = sim.elapsed_ms();
    let counts = |sim: &Sim| {
        let (a, b) = (&sim.nodes[c], &sim.nodes[s]);
        ((a.sent, b.sent), (a.batches, b.batches))
    };
    let (sent0, batches0) = counts(&sim);
    let (mut written, mut delivered, mut delivered_from) = (0u64, 0u64, None);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut rbuf = vec![0u8; 64 * 1024];
    sim.drive(p.limit_ms * 400, |sim| {
        while written < p.total {
            let n = chunk.len().min((p.total - written) as usize);
            for (i, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern(written + i as u64);
            }
            match sim.conn(c).write(&chunk[..n]) {
                Ok(w) if w > 0 => written += w as u64,
                _ => break,
            }
        }
        let t = sim.elapsed_ms() - start;
        if t >= p.from_ms {
            delivered_from.get_or_insert(delivered);
        }
        while let Ok(n) = sim.conn(s).read(&mut rbuf) {
            if n == 0 {
                break;
            }
            for (i, &b) in rbuf[..n].iter().enumerate() {
                assert_eq!(
                    b,
                    pattern(delivered + i as u64),
                    "byte {}",
                    delivered + i as u64
                );
            }
            delivered += n as u64;
        }
        assert!(sim.conn(c).error().is_none() && sim.conn(s).error().is_none());
        if delivered >= p.total || t >= p.limit_ms {
            Flow::Done
        } else {
            Flow::WakeAt(start + p.limit_ms)
        }
    });
    let (tx, rx) = (sim.conn(c).stats(), sim.conn(s).stats());
    let (queue_drops, queue_passed) = sim
        .bottlenecks
        .first()
        .map_or((0, 0), |b| (b.drops, b.passed));
    let (sent1, batches1) = counts(&sim);
    Bulk {
        datagrams: (sent1.0 - sent0.0, sent1.1 - sent0.1),
        batches: (batches1.0 - batches0.0, batches1.1 - batches0.1),
        retransmit_rto: tx.arq.retransmit_rto,
        queue_drops,
        queue_passed,
        delivered,
        delivered_from: delivered_from.unwrap_or(delivered),
        elapsed_ms: sim.elapsed_ms() - start,
        fixed_parity: tx.fec_out.parity_out - fixed0,
        tx: tx.stream_fec,
        rx: rx.stream_fec,
    }
}

const TOTAL: u64 = 4 << 20;

fn parity_per_data(b: &Bulk) -> f64 {
    b.tx.parity_out as f64 / b.tx.data_out.max(1) as f64
}

#[test]
fn a_clean_path_carries_no_parity_once_the_loss_is_known() {
    let b = bulk(1, Link::clean(20), Link::clean(20), TOTAL, 30_000);
    eprintln!("clean {b:?}");
    assert_eq!(b.delivered, TOTAL, "{b:?}");
    assert_eq!(b.fixed_parity, 0, "{b:?}");
    // Only the first groups, built on the prior before any report (the
    // first 100 ms of a 260 ms transfer), carry parity: a fixed 10/3
    // shape would have sent 0.3 per data shard.
    assert!(parity_per_data(&b) < 0.06, "{b:?}");
    assert_eq!(b.rx.lost_on_wire, 0, "{b:?}");
    assert!(b.tx.loss_estimate < 0.01, "{b:?}");
    assert_eq!(b.tx.redundancy, 0.0, "{b:?}");
}

#[test]
fn independent_loss_is_repaired_with_less_parity_than_the_fixed_shape() {
    let link = Link {
        loss: 0.05,
        ..Link::clean(20)
    };
    let b = bulk(2, link.clone(), link, TOTAL, 60_000);
    eprintln!("iid 5% {b:?}");
    assert_eq!(b.delivered, TOTAL, "{b:?}");
    assert!(b.rx.recovered > 0, "{b:?}");
    // Most losses are rebuilt (the target leaves about 1% to the ARQ; the
    // half-the-data bound and deadline-closed small groups some more).
    assert!(b.rx.recovered * 10 >= b.rx.lost_on_wire * 7, "{b:?}");
    let r = parity_per_data(&b);
    assert!((0.05..0.3).contains(&r), "{r} {b:?}");
    assert!((0.03..0.08).contains(&b.tx.loss_estimate), "{b:?}");
    assert_eq!(b.tx.malformed + b.rx.malformed, 0, "{b:?}");
}

#[test]
fn bursts_reordering_and_duplicates_are_survived() {
    let link = Link {
        loss: 0.05,
        burst: 3.0,
        dup: 0.01,
        reorder: 0.02,
        jitter: 10,
        ..Link::clean(30)
    };
    let b = bulk(3, link.clone(), link, TOTAL, 90_000);
    eprintln!("bursty {b:?}");
    assert_eq!(b.delivered, TOTAL, "{b:?}");
    assert!(b.rx.recovered > 0 && b.rx.duplicates > 0, "{b:?}");
    // Bursts call for more parity than independent loss, within the bound.
    assert!(parity_per_data(&b) <= 0.5, "{b:?}");
    assert!(b.tx.burst_estimate > 1.5, "{b:?}");
    assert_eq!(b.tx.malformed + b.rx.malformed, 0, "{b:?}");
}

#[test]
fn a_rate_limited_lossy_path_reports_the_channel_loss_not_the_overflow() {
    // 10 Mbit/s each way with 100 kB of queue, 3% loss behind it.
    let link = Link {
        loss: 0.03,
        ..Link::clean(40)
    };
    let b = bulk_with(
        4,
        link.clone(),
        link,
        Some((1_250_000, 100_000)),
        TOTAL,
        90_000,
    );
    eprintln!("rate-limited {b:?}");
    assert_eq!(b.delivered, TOTAL, "{b:?}");
    assert!(b.rx.recovered > 0, "{b:?}");
    // The queue stands near full most of the time: few shards arrive
    // while it does not, and some of the sender's overflow still reads as
    // loss among them, so the estimate is above the 3%, not under it (it
    // was 0.7% when the shards received at a queue counted as received
    // while the gaps among them did not, and parity stayed under the
    // fixed 10/3 only by that).
    assert!((0.02..0.08).contains(&b.tx.loss_estimate), "{b:?}");
    // Small groups (about 9 shards in 10 ms here) need more than 10/3 for
    // 10^-4 at 3%; the half-the-data bound holds.
    assert!(parity_per_data(&b) <= 0.5, "{b:?}");
    assert_eq!(b.tx.malformed + b.rx.malformed, 0, "{b:?}");
}

/// The field's lossy path on the simulator (200 ms, 4.6% each way) with
/// the tunnel's windows (kcptun's 1024 / 512, growing up to 16384), and a
/// bottleneck of 100 Mbit/s with one BDP of queue when `limit`.
fn field_path(limit: bool) -> Bulk {
    let cfg = builder()
        .window(1024, 512)
        .max_window(16384)
        .adaptive_fec(true)
        .build()
        .expect("valid");
    let link = Link {
        loss: 0.046,
        ..Link::clean(100)
    };
    bulk_on(&Path {
        seed: 5,
        down: link.clone(),
        up: link,
        limit: limit.then_some((12_500_000, 2_500_000)),
        cfg: &cfg,
        request: true,
        from_ms: 0,
        total: 48 << 20,
        limit_ms: 8_000,
    })
}

/// The adaptive FEC rebuilds nearly every loss, so a receive window that
/// grew only behind a hole the ARQ repairs stayed small: it must grow with
/// what the sender holds in flight (before: 9.7 MB/s here, and on the
/// field's path 512 segments, 3.4 MB/s, for most of a transfer).
#[test]
fn a_long_lossy_path_grows_the_receive_window_fec_keeps_whole() {
    let b = field_path(false);
    let rate = b.goodput_from(0);
    eprintln!("long lossy path: {:.2} MB/s, {b:?}", rate / 1e6);
    assert_eq!(b.delivered, 48 << 20, "{b:?}");
    assert!(b.rx.recovered * 10 >= b.rx.lost_on_wire * 9, "{b:?}");
    assert!(rate >= 15e6, "{:.2} MB/s {b:?}", rate / 1e6);
}

/// Behind a bottleneck whose queue the sender fills now and then, random
/// loss is still reported as loss: the shards received while the path
/// queued are left out of the report with the gaps among them (before:
/// the sender estimated 0.7% of the 4.6%).
#[test]
fn random_loss_behind_a_queue_is_still_reported_as_loss() {
    let b = field_path(true);
    eprintln!("long lossy path, 1 BDP queue: {b:?}");
    assert_eq!(b.delivered, 48 << 20, "{b:?}");
    assert!(
        b.rx.lost_congested > 0 && b.rx.received_congested > 0,
        "{b:?}"
    );
    assert!((0.03..0.07).contains(&b.tx.loss_estimate), "{b:?}");
}

// ---------------------------------------------------------------- negotiation

/// What kcp-go and kcptun peers run: the fixed shape, no extension.
fn kcp_go_shaped() -> Config {
    builder().build().expect("valid")
}

/// Pumps a client of `cc` (its connect probe started) and a listener's
/// session of `sc` for `ms` ms, each writing 2 kB of stream every 3 ms;
/// returns the plaintexts each sent.
fn transcript(cc: &Config, sc: &Config, ms: u64) -> ([Vec<Vec<u8>>; 2], Conn, Conn) {
    transcript_losing(cc, sc, ms, |_, _| false)
}

/// As [`transcript`], the client's packets for which `lost(ms, plaintext)`
/// holds recorded as sent but not delivered.
fn transcript_losing(
    cc: &Config,
    sc: &Config,
    ms: u64,
    lost: impl Fn(u64, &[u8]) -> bool,
) -> ([Vec<Vec<u8>>; 2], Conn, Conn) {
    transcript_of(cc, true, sc, ms, lost)
}

/// As [`transcript_losing`]; `probe`: the client connects with the
/// connect probe (else its first write is its first datagram).
fn transcript_of(
    cc: &Config,
    probe: bool,
    sc: &Config,
    ms: u64,
    lost: impl Fn(u64, &[u8]) -> bool,
) -> ([Vec<Vec<u8>>; 2], Conn, Conn) {
    let mut client = Conn::new(21, cc).unwrap();
    if probe {
        client.connect(Duration::ZERO);
    }
    let mut server = Conn::new(21, sc).unwrap();
    server.require_proof(Duration::ZERO);
    server.answer_datagram_fec_only();
    let crypto = cc.packet_crypto();
    let mut slot = vec![0u8; 1500];
    let mut seen = [Vec::new(), Vec::new()];
    let mut buf = vec![0u8; 65536];
    for t in 0..ms {
        let now = Duration::from_millis(t);
        if t % 3 == 0 {
            let _ = client.write(&[t as u8; 2000]);
            let _ = server.write(&[t as u8; 2000]);
        }
        for (dir, seen) in seen.iter_mut().enumerate() {
            let (from, to) = if dir == 0 {
                (&mut client, &mut server)
            } else {
                (&mut server, &mut client)
            };
            from.handle_timeout(now);
            while let Some(tx) = from.poll_transmit(now, &mut slot) {
                let n = crypto
                    .seal(&mut slot, tx.len, &[7; 16][..crypto.nonce_len()])
                    .unwrap();
                let range = crypto.open(&mut slot[..n]).unwrap();
                seen.push(slot[range.clone()].to_vec());
                if dir == 0 && lost(t, &slot[range.clone()]) {
                    continue;
                }
                let _ = to.handle_packet(now, &slot[range]);
            }
        }
        while client.read(&mut buf).is_ok_and(|n| n > 0) {}
        while server.read(&mut buf).is_ok_and(|n| n > 0) {}
    }
    (seen, client, server)
}

/// The packet with `frg` of its WASK/WINS segments (after the 8-byte
/// data-shard header) set to `to`, and the `frg` values it had.
fn untag(plain: &[u8], to: u8) -> (Vec<u8>, Vec<u8>) {
    let mut p = plain.to_vec();
    let mut frgs = Vec::new();
    if p.len() < 8 || p[4..6] != [0xF1, 0] {
        return (p, frgs);
    }
    let mut at = 8;
    while p.len() >= at + 24 {
        if p[at + 4] == 83 || p[at + 4] == 84 {
            frgs.push(p[at + 5]);
            p[at + 5] = to;
        }
        at += 24 + u32::from_le_bytes(p[at + 20..at + 24].try_into().unwrap()) as usize;
    }
    (p, frgs)
}

/// Whether an opened packet is a stream-extension packet (parity or report).
fn is_stream_extension(p: &[u8]) -> bool {
    p.len() >= 8 && ((p[4] == 0xF2 && p[5] == 0x8A) || (p[4..6] == [0xF3, 0] && p[7] == 0x8B))
}

/// Whether an opened packet is a window probe alone, without the FEC
/// header: the offer's resend (`Conn`'s `Offering`).
fn is_lone_probe(p: &[u8]) -> bool {
    p.len() == 24 && p[4] == 83
}

/// The client's packets `on` (the offer on) are `off`'s (the offer off,
/// the same peer and path) but for the probes' tag, the parity rows of a
/// group holding a tagged probe, and the offer's resends (tagged WASKs
/// alone in an unframed datagram, outside the FEC stream), which are
/// returned.
fn differs_only_in_the_offer(on: &[Vec<u8>], off: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let (resends, on): (Vec<_>, Vec<_>) = on.iter().cloned().partition(|p| is_lone_probe(p));
    assert!(off.iter().all(|p| !is_lone_probe(p)));
    assert_eq!(on.len(), off.len());
    let mut offers = resends.iter().filter(|p| p[5] == 0xD4).count();
    assert_eq!(offers, resends.len(), "an untagged resend");
    for (a, b) in on.iter().zip(off) {
        if a[4..6] == [0xF2, 0] {
            // Parity of a group holding a tagged probe differs in its rows
            // (kcp-go's FEC covers the probe's bytes), never in its framing.
            assert_eq!((a.len(), &a[..6]), (b.len(), &b[..6]));
            continue;
        }
        let (a, frgs) = untag(a, 0);
        offers += frgs.iter().filter(|&&f| f == 0xD4).count();
        assert!(frgs.iter().all(|&f| f == 0xD4), "{frgs:x?}");
        assert_eq!(&a, b, "the client's bytes differ beyond the probe tag");
    }
    assert!(offers > 0, "the client never offered");
    resends
}

#[test]
fn a_kcp_go_shaped_server_sees_the_fixed_shape_byte_for_byte() {
    let server = kcp_go_shaped();
    let ([on, on_down], client, srv_on) = transcript(&config(true), &server, 600);
    let ([off, off_down], _, srv_off) = transcript(&config(false), &server, 600);
    assert!(!client.adaptive_fec_negotiated());
    // The connect probe is answered (untagged): no resend of the offer.
    assert!(differs_only_in_the_offer(&on, &off).is_empty());
    assert_eq!(srv_on.stats().arq.wask_in, srv_off.stats().arq.wask_in);
    assert_eq!(on_down, off_down, "the server answered differently");
    assert!(on.iter().chain(&on_down).all(|p| !is_stream_extension(p)));
    // The fixed shape's parity is there, as kcp-go expects.
    assert!(on.iter().any(|p| p.len() > 6 && p[4..6] == [0xF2, 0]));
}

#[test]
fn a_kcp_go_shaped_server_whose_first_probe_was_lost_sees_one_more_probe() {
    // The client's first datagrams (the tagged connect probe and its
    // first writes: 5 data shards of the first group, so its 3 parity
    // shards cannot rebuild the probe) are lost; the server's own proof
    // probe ends the connect probe with nothing answered. The offer goes on once, at the connect
    // probe's pace (250 ms), in a datagram of its own outside the FEC
    // stream; kcp-go answers it with a WINS (untagged), which ends it.
    // Nothing else the server sees changes.
    let server = kcp_go_shaped();
    let first = |t: u64, _: &[u8]| t < 5;
    let ([on, _], client, srv_on) = transcript_losing(&config(true), &server, 1_500, first);
    let ([off, _], _, srv_off) = transcript_losing(&config(false), &server, 1_500, first);
    assert!(!client.adaptive_fec_negotiated());
    assert_eq!(differs_only_in_the_offer(&on, &off).len(), 1);
    let (s_on, s_off) = (srv_on.stats().arq, srv_off.stats().arq);
    assert_eq!(s_on.wask_in, s_off.wask_in + 1);
    assert_eq!(s_on.wins_out, s_off.wins_out + 1);
    assert_eq!(srv_on.stats().input_errors, 0);
}

#[test]
fn a_peer_that_never_answers_the_offer_gets_a_bounded_number_of_resends() {
    // The client's connect probe and every lone probe after it are lost
    // (a peer that drops packets without the FEC header, as kcp-go before
    // 5.6 did with FEC on): the offer is resent `OFFER_RESENDS` (6) times,
    // at the connect probe's pace (250 ms, 750 ms, 1.75 s, 3.75 s, 5.75 s
    // and 7.75 s), then never again.
    let server = kcp_go_shaped();
    let lone = |t: u64, p: &[u8]| t < 5 || is_lone_probe(p);
    let ([on, _], client, _) = transcript_losing(&config(true), &server, 12_000, lone);
    let ([off, _], _, _) = transcript_losing(&config(false), &server, 12_000, lone);
    assert!(!client.adaptive_fec_negotiated());
    assert_eq!(differs_only_in_the_offer(&on, &off).len(), 6);
    assert_eq!(kcpio::conn::OFFER_RESENDS, 6);
}

#[test]
fn a_kcp_go_shaped_server_sees_one_lone_offer_from_a_client_without_the_connect_probe() {
    // No connect probe (kcp-go's defaults): the client's first write is
    // its first datagram, and it has no WASK of its own to tag. Its offer
    // goes alone, unframed, right after that datagram; kcp-go answers
    // with a WINS (untagged), which ends it. Nothing else the server sees
    // changes: one WASK in and one WINS out more.
    let server = kcp_go_shaped();
    let none = |_: u64, _: &[u8]| false;
    let ([on, _], client, srv_on) = transcript_of(&config(true), false, &server, 1_500, none);
    let ([off, _], _, srv_off) = transcript_of(&config(false), false, &server, 1_500, none);
    assert!(!client.adaptive_fec_negotiated());
    assert!(
        !is_lone_probe(&on[0]) && is_lone_probe(&on[1]),
        "not right after the first"
    );
    assert_eq!(differs_only_in_the_offer(&on, &off).len(), 1);
    let (s_on, s_off) = (srv_on.stats().arq, srv_off.stats().arq);
    assert_eq!((s_on.wask_in, s_off.wask_in), (1, 0));
    assert_eq!(s_on.wins_out, s_off.wins_out + 1);
    assert_eq!(srv_on.stats().input_errors, 0);
    // A peer that never answers it (every lone probe lost): 6 in all, at
    // once and 250 ms, 750 ms, 1.75 s, 3.75 s and 5.75 s after the first
    // datagram, then never again.
    let lone = |_: u64, p: &[u8]| is_lone_probe(p);
    let ([on, _], _, _) = transcript_of(&config(true), false, &server, 12_000, lone);
    let ([off, _], _, _) = transcript_of(&config(false), false, &server, 12_000, lone);
    assert_eq!(differs_only_in_the_offer(&on, &off).len(), 6);
}

/// `frg` of every WASK segment of an opened packet (bare or a data shard).
fn wask_frgs(plain: &[u8]) -> Vec<u8> {
    let at = if plain.len() >= 8 && plain[4..6] == [0xF1, 0] {
        8
    } else {
        0
    };
    let mut out = Vec::new();
    let mut at = at;
    while plain.len() >= at + 24 {
        if plain[at + 4] == 83 {
            out.push(plain[at + 5]);
        }
        at += 24 + u32::from_le_bytes(plain[at + 20..at + 24].try_into().unwrap()) as usize;
    }
    out
}

#[test]
fn a_listener_that_hears_the_offer_on_a_wins_asks_back_in_kind() {
    // A client with the datagram extension and without the connect probe
    // whose lone offers are all lost (or a kcpio before them): its tag
    // reaches the listener only on its WINS answering the listener's proof
    // probe, which negotiates the listener; the listener, proven by that
    // WINS, asked nothing more, and the client never heard a tag (no
    // datagram flows: nothing of the extension told it either). Now the
    // listener sends one tagged WASK, and the client has it.
    let cfg = builder().datagram_fec(true).build().expect("valid");
    let lone = |_: u64, p: &[u8]| is_lone_probe(p);
    let ([_, down], client, server) = transcript_of(&cfg, false, &cfg, 1_500, lone);
    assert!(server.datagram_fec_negotiated());
    let tagged: usize = (down.iter())
        .map(|p| wask_frgs(p).iter().filter(|&&f| f == 0xD1).count())
        .sum();
    assert!(
        client.datagram_fec_negotiated(),
        "the client never heard the tag"
    );
    assert_eq!(tagged, 1, "the listener's tagged WASKs");
}

#[test]
fn a_listener_answers_a_kcp_go_client_byte_for_byte() {
    let client = kcp_go_shaped();
    let ([_, on], _, server) = transcript(&client, &config(true), 600);
    let ([_, off], _, _) = transcript(&client, &client, 600);
    assert!(!server.adaptive_fec_negotiated());
    assert_eq!(on, off, "a kcp-go client saw other bytes");
}

#[test]
fn two_kcpio_ends_switch_to_adaptive_parity() {
    let cfg = config(true);
    let ([up, down], client, server) = transcript(&cfg, &cfg, 1_500);
    assert!(client.adaptive_fec_negotiated() && server.adaptive_fec_negotiated());
    for dir in [&up, &down] {
        assert!(dir.iter().any(|p| is_stream_extension(p)));
        // After the first stream packet, no fixed-shape parity.
        let first = dir.iter().position(|p| is_stream_extension(p)).unwrap();
        assert!(
            dir[first..]
                .iter()
                .all(|p| !(p.len() > 6 && p[4..6] == [0xF2, 0]))
        );
    }
    let (c, s) = (client.stats().stream_fec, server.stats().stream_fec);
    assert!(c.reports_in > 0 && s.reports_in > 0, "{c:?} {s:?}");
    assert_eq!(c.malformed + s.malformed, 0, "{c:?} {s:?}");
    // A lossless path: the estimate falls and parity stops.
    assert_eq!(c.lost_on_wire + s.lost_on_wire, 0);
}

#[test]
fn both_extensions_negotiate_on_one_tag() {
    let cfg = builder()
        .adaptive_fec(true)
        .datagram_fec(true)
        .build()
        .unwrap();
    let ([up, _], client, server) = transcript(&cfg, &cfg, 400);
    assert!(up.iter().any(|p| untag(p, 0).1.contains(&0xD5)));
    assert!(client.adaptive_fec_negotiated() && server.adaptive_fec_negotiated());
    assert!(client.datagram_fec_negotiated() && server.datagram_fec_negotiated());
}

#[test]
fn a_short_queue_overflowed_by_the_sender_is_not_read_as_channel_loss() {
    // The field's clean path: 50 Mbit/s, 1 ms RTT, a 48 kB queue, no
    // random loss. The drops are this side's own overflow (the ARQ's
    // controller answers them); parity for them would overflow it more.
    let b = bulk_with(
        5,
        Link::clean(0),
        Link::clean(0),
        Some((6_250_000, 48_448)),
        16 << 20,
        60_000,
    );
    eprintln!("short queue {b:?}");
    assert_eq!(b.delivered, 16 << 20, "{b:?}");
    // The first groups' parity (the prior's margin before reports come),
    // then none: the fixed 10/3 would send 0.3 per data shard.
    assert!(parity_per_data(&b) < 0.08, "{b:?}");
    assert_eq!(b.tx.redundancy, 0.0, "{b:?}");
    assert!(b.rx.lost_congested > b.rx.lost_on_wire, "{b:?}");
}

/// The field's clean path (50 Mbit/s, 1 ms, a 48 kB queue: 34 packets)
/// with the tunnel's defaults (kcptun's `fast`: a 30 ms interval, no
/// ACK-nodelay, so the receiver acknowledges a packet of 56 segments at
/// a time or at its flush; windows 1024 growing to 16384).
///
/// Before: 4.65 MB/s, 9.4% of the datagrams dropped at the queue, 73
/// timeouts. The in-flight cap left a flat 30 ms of the rate (130
/// segments) for delayed ACKs, so the pacer's overshoots overflowed the
/// queue; startup paced its window out in half of a 1 ms round trip and
/// saw no queue (7.7 ms under the 5 ms slack), and the lost segments,
/// counted in flight, held the drain at a third of the rate while their
/// retransmissions, sent at once, overflowed the queue again.
#[test]
fn a_short_queue_on_a_1_ms_path_is_filled_without_overflowing_it() {
    let cfg = builder()
        .nodelay(false, 30, 2, true)
        .congestion(Congestion::Bbr)
        .window(1024, 1024)
        .max_window(16384)
        .adaptive_fec(true)
        .build()
        .expect("valid");
    let b = bulk_on(&Path {
        seed: 5,
        down: Link::clean(0),
        up: Link::clean(0),
        limit: Some((6_250_000, 48_448)),
        cfg: &cfg,
        request: true,
        from_ms: 0,
        total: 16 << 20,
        limit_ms: 60_000,
    });
    let rate = b.goodput_from(0);
    let per_batch = b.datagrams.0 as f64 / b.batches.0.max(1) as f64;
    eprintln!(
        "1 ms path, short queue: {:.2} MB/s, {per_batch:.2} datagrams per sender batch {b:?}",
        rate / 1e6
    );
    assert_eq!(b.delivered, 16 << 20, "{b:?}");
    // 6.25 MB/s of datagrams carry about 5.9 of stream.
    assert!(rate >= 5.2e6, "{:.2} MB/s {b:?}", rate / 1e6);
    assert!(
        b.queue_drops * 100 <= 6 * b.queue_passed,
        "{} dropped of {} {b:?}",
        b.queue_drops,
        b.queue_passed
    );
    assert!(b.retransmit_rto <= 10, "{b:?}");
    // CPU: every batch is a driver wake-up and a `sendmmsg`. The pacer
    // releases bursts (about 2 ms of the rate, 9 segments here), not a
    // segment or two per wake-up, paced retransmissions included: 5.8
    // datagrams per batch (6.2 with retransmissions unpaced, 5.1 with
    // the old flat ACK room). And the receiver acknowledges a packet of
    // ACKs at a time: 25 data datagrams per datagram back.
    assert!(per_batch >= 4.0, "{per_batch:.2} per batch {b:?}");
    assert!(b.datagrams.1 * 16 <= b.datagrams.0, "{b:?}");
}

#[test]
fn kcpio_ends_negotiate_over_sockets() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cfg = config(true);
        let listener = kcpio::KcpListener::bind("127.0.0.1:0", &cfg).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 1 << 20];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf[..1024]).await.unwrap();
            s.stats().stream_fec
        });
        let mut c = kcpio::KcpStream::connect(addr, &cfg).await.unwrap();
        c.write_all(&vec![7u8; 1 << 20]).await.unwrap();
        let mut back = [0u8; 1024];
        tokio::time::timeout(Duration::from_secs(20), c.read_exact(&mut back))
            .await
            .expect("1 MiB over loopback within 20 s")
            .unwrap();
        let s = server.await.unwrap();
        let c = c.stats().stream_fec;
        assert!(c.negotiated && s.negotiated, "{c:?} {s:?}");
        assert!(s.data_in > 0 && c.data_out > 0, "{c:?} {s:?}");
    });
}
