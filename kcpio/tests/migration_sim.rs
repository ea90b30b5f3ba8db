//! Address changes in the deterministic simulator: a client behind a link
//! with loss, duplication and reordering echoes a stream through a
//! listening host whose session table and migration rules are the driver's
//! (`kcpio::sim_support`), and its address changes mid-transfer: a new port
//! (NAT rebinding), then a new IP. The client is not told (a NAT changed
//! under it). Every byte must come back in order exactly once, the longest
//! pause in what the client reads must stay within 1 RTT + 1 s, the session
//! must move exactly twice and end at the client's last address.
//!
//! A third address copies every client datagram (a mirror, ahead of the
//! original or behind it) and then replays all of them: nothing moves, the
//! transfer is not stalled, and it never gets more than 3 times the bytes
//! it sent.

mod sim;

use std::net::SocketAddr;
use std::time::Duration;

use kcpio::{Config, ConnError, Key, Method};
use sim::{Flow, Link, Mirror, Sim, payload};

const TOTAL: usize = 600 * 1024;
/// The client writes at most this far ahead of the echo.
const AHEAD: usize = 64 * 1024;
const HOST: &str = "10.0.0.1:4000";
const HOME: &str = "10.0.1.2:40000";
/// The NAT's new port.
const REBOUND: &str = "10.0.1.2:40999";
/// The client's new network.
const NEW_IP: &str = "10.0.2.7:50000";
const THIRD: &str = "10.0.9.9:666";

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("an address")
}

fn config(fec: bool) -> Config {
    let mut b = Config::builder().stream(true).crypto(
        Method::Aes128Gcm,
        Key::passphrase("migration in the simulator"),
    );
    if fec {
        b = b.fec(10, 3);
    }
    b.build().expect("valid")
}

/// What one run showed.
#[derive(Debug)]
struct Run {
    /// Longest pause between two reads that brought bytes, in ms, after
    /// the first byte came back.
    stall: u64,
    /// The worst round-trip time the link can give (ms).
    rtt: u64,
    migrations: Vec<(u64, SocketAddr, SocketAddr)>,
    final_peer: Option<SocketAddr>,
    sessions: usize,
    unroutable: u64,
    probes: u64,
    stale: u64,
    /// Sealed bytes the host got from the third address and sent to it.
    third_in: u64,
    third_out: u64,
    end_ms: u64,
}

/// The client echoes `TOTAL` bytes through the host and checks them;
/// at a third and two thirds of the echo it moves to `moves[0]`, then
/// `moves[1]`. `mirror`: the third address's copies (delay in ms, on),
/// and whether it replays everything at the end.
fn run(seed: u64, link: &Link, fec: bool, moves: &[&str], mirror: Option<(u64, bool)>) -> Run {
    run_as(seed, link, fec, moves, mirror, true)
}

/// [`run`], the client a kcpio one (`kcpio`: it clocks its probes and
/// answers, and probes when its data stops) or not (kcp-go's wire).
fn run_as(
    seed: u64,
    link: &Link,
    fec: bool,
    moves: &[&str],
    mirror: Option<(u64, bool)>,
    kcpio: bool,
) -> Run {
    let config = config(fec);
    let mut sim = Sim::new(seed, 1_000);
    let host = addr(HOST);
    sim.listen(host, &config, link.clone());
    let c = sim.add(0x5eed_0001, &config, link.clone());
    sim.place(c, addr(HOME), host);
    if let Some((delay, _)) = mirror {
        sim.mirror = Some(Mirror {
            node: c,
            from: addr(THIRD),
            delay,
            // Captured from the start; copies once the echo runs (an
            // attacker faster than the opener would own the session from
            // its first datagram, migration or not).
            on: false,
        });
    }
    let now = sim.now();
    sim.conn(c).connect(now);
    // As the tokio client does with migration on.
    sim.conn(c).probe_when_quiet(kcpio);
    let data = payload(seed, TOTAL);
    let (mut sent, mut got) = (0usize, 0usize);
    let mut echo: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut last_read, mut stall) = (None::<u64>, 0u64);
    let mut moved = 0;
    let (mut replayed, mut replay_end) = (false, 0);
    let done = sim.drive(2_000_000, |sim| {
        let t = sim.elapsed_ms();
        // The client writes while less than `AHEAD` is unechoed, so it
        // sends until the end.
        while sent < TOTAL && sent < got + AHEAD {
            match sim
                .conn(c)
                .write(&data[sent..TOTAL.min(sent + 16 * 1024).min(got + AHEAD)])
            {
                Ok(n) => sent += n,
                Err(ConnError::WouldBlock) => break,
                Err(e) => panic!("client write: {e}"),
            }
        }
        // The server echoes.
        serve_echo(sim, &mut echo, &mut buf);
        // The client checks the echo.
        loop {
            match sim.conn(c).read(&mut buf) {
                Ok(n) => {
                    assert!(got + n <= TOTAL, "more bytes than sent");
                    assert_eq!(&buf[..n], &data[got..got + n], "a wrong byte at {got}");
                    got += n;
                    if let Some(l) = last_read {
                        stall = stall.max(t - l);
                    }
                    last_read = Some(t);
                }
                Err(ConnError::WouldBlock) => break,
                Err(e) => panic!("client read: {e} at {got}\n{}\n{}", sim.log, summary(sim)),
            }
        }
        if let Some((_, true)) = mirror
            && got > 0
            && !replayed
        {
            sim.mirror.as_mut().expect("a mirror").on = true;
        }
        if moved < moves.len() && got >= TOTAL / 3 * (moved + 1) {
            sim.move_node(c, addr(moves[moved]));
            moved += 1;
        }
        if got == TOTAL {
            if mirror.is_some() && !replayed {
                // The replay: every captured datagram again, from the third
                // address, then a while to let it all arrive.
                replayed = true;
                sim.replay(5);
                sim.mirror.as_mut().expect("a mirror").on = false;
                replay_end = t + 2_000;
            }
            if t >= replay_end {
                return Flow::Done;
            }
            return Flow::WakeAt(replay_end);
        }
        Flow::Continue
    });
    assert!(done, "deadlock at {got} of {TOTAL} bytes");
    let h = sim.host.as_ref().expect("a host");
    let third = addr(THIRD);
    let s = h.sessions.first().copied().expect("a session");
    Run {
        stall,
        rtt: 2 * (link.delay + 4 * link.jitter),
        migrations: h.migrations.clone(),
        final_peer: sim.session_peer(s),
        sessions: h.sessions.len(),
        unroutable: sim.unroutable,
        probes: h.path_probes,
        stale: h.stale,
        third_in: h.received_from.get(&third).copied().unwrap_or(0),
        third_out: h.sent_to.get(&third).copied().unwrap_or(0),
        end_ms: sim.elapsed_ms(),
    }
}

/// The host's first session echoes: what `echo` holds goes out first,
/// then it reads (into `buf`) until it would block.
fn serve_echo(sim: &mut Sim, echo: &mut Vec<u8>, buf: &mut [u8]) {
    let Some(&s) = sim.host.as_ref().and_then(|h| h.sessions.first()) else {
        return;
    };
    loop {
        if !echo.is_empty() {
            match sim.conn(s).write(echo) {
                Ok(n) => drop(echo.drain(..n)),
                Err(ConnError::WouldBlock) => break,
                Err(e) => panic!("server write: {e}"),
            }
            if !echo.is_empty() {
                break;
            }
        }
        match sim.conn(s).read(buf) {
            Ok(n) => echo.extend_from_slice(&buf[..n]),
            Err(ConnError::WouldBlock) => break,
            Err(e) => panic!("server read: {e}\n{}\n{}", sim.log, summary(sim)),
        }
    }
}

/// The host's counters, for a failure's message.
fn summary(sim: &Sim) -> String {
    let Some(h) = sim.host.as_ref() else {
        return String::new();
    };
    format!(
        "moves {:?}, probes {}, stale {}, dropped {:?}, from {:?}, to {:?}, unroutable {}",
        h.migrations, h.path_probes, h.stale, h.dropped, h.received_from, h.sent_to, sim.unroutable
    )
}

/// The grid's impaired link: `loss`, 1% duplicated, 2% held back, 20 ms +
/// 0-10 ms.
fn lossy(loss: f64) -> Link {
    Link::lossy(loss, 1500)
}

#[test]
fn a_session_follows_a_new_port_then_a_new_ip_under_loss() {
    for fec in [false, true] {
        for loss in [0.0, 0.02, 0.05] {
            for seed in 1..=4u64 {
                let r = run(seed, &lossy(loss), fec, &[REBOUND, NEW_IP], None);
                eprintln!(
                    "figure: fec {fec} loss {loss} seed {seed}: longest read pause {} ms \
                     (bound {} ms); moves {:?}; {} lost to the old addresses; {} probes; {} ms",
                    r.stall,
                    r.rtt + 1_000,
                    r.migrations,
                    r.unroutable,
                    r.probes,
                    r.end_ms
                );
                let what = format!("fec {fec} loss {loss} seed {seed}: {r:?}");
                assert!(r.stall <= r.rtt + 1_000, "stall bound: {what}");
                assert_eq!(r.sessions, 1, "the same session: {what}");
                let moves: Vec<_> = r.migrations.iter().map(|m| (m.1, m.2)).collect();
                assert_eq!(
                    moves,
                    [(addr(HOME), addr(REBOUND)), (addr(REBOUND), addr(NEW_IP))],
                    "{what}"
                );
                assert_eq!(r.final_peer, Some(addr(NEW_IP)), "{what}");
                assert!(r.unroutable > 0, "the old address saw traffic: {what}");
            }
        }
    }
}

#[test]
fn a_mirror_ahead_of_the_client_and_its_replay_move_nothing() {
    for fec in [false, true] {
        for seed in 1..=3u64 {
            let r = run(seed, &lossy(0.02), fec, &[], Some((2, true)));
            eprintln!(
                "figure: mirror ahead, fec {fec} seed {seed}: third address sent {} B, got {} B \
                 back; {} probes; {} stale; longest read pause {} ms",
                r.third_in, r.third_out, r.probes, r.stale, r.stall
            );
            let what = format!("fec {fec} seed {seed}: {r:?}");
            assert!(r.migrations.is_empty(), "{what}");
            assert_eq!(r.final_peer, Some(addr(HOME)), "{what}");
            assert!(r.third_out <= 3 * r.third_in, "{what}");
            assert!(r.probes > 0, "the mirror was a candidate: {what}");
            assert!(r.stale > 0, "the replay was refused: {what}");
            assert!(r.stall <= r.rtt + 1_000, "{what}");
        }
    }
}

#[test]
fn a_mirror_behind_the_client_during_its_moves_and_its_replay_move_nothing_else() {
    for fec in [false, true] {
        for seed in 1..=3u64 {
            // The copies arrive 60 ms after they left: behind the originals.
            let r = run(
                seed,
                &lossy(0.02),
                fec,
                &[REBOUND, NEW_IP],
                Some((60, true)),
            );
            eprintln!(
                "figure: mirror behind, fec {fec} seed {seed}: third address sent {} B, got {} B \
                 back; moves {:?}; {} stale; longest read pause {} ms",
                r.third_in, r.third_out, r.migrations, r.stale, r.stall
            );
            let what = format!("fec {fec} seed {seed}: {r:?}");
            let moves: Vec<_> = r.migrations.iter().map(|m| m.2).collect();
            assert_eq!(moves, [addr(REBOUND), addr(NEW_IP)], "{what}");
            assert_eq!(r.final_peer, Some(addr(NEW_IP)), "{what}");
            assert!(r.third_out <= 3 * r.third_in, "{what}");
            assert!(r.stale > 0, "{what}");
            assert!(r.stall <= r.rtt + 1_000, "{what}");
        }
    }
}

/// A client on kcp-go's wire (no clocked probes or answers): its answers
/// cannot be bound to a probe, so they count only after its old address
/// fell silent; it still follows both changes, and a mirror ahead of it
/// (whose copies of its answers to the listener's other probes would
/// otherwise count) moves nothing.
#[test]
fn a_client_on_kcp_gos_wire_follows_too_and_a_mirror_moves_nothing() {
    for fec in [false, true] {
        for seed in 1..=3u64 {
            let r = run_as(seed, &lossy(0.02), fec, &[REBOUND, NEW_IP], None, false);
            let what = format!("moves, fec {fec} seed {seed}: {r:?}");
            eprintln!("figure: kcp-go wire, {what}");
            assert!(r.stall <= r.rtt + 1_000, "stall bound: {what}");
            assert_eq!(r.final_peer, Some(addr(NEW_IP)), "{what}");
            assert_eq!(r.migrations.len(), 2, "{what}");
            let r = run_as(seed, &lossy(0.02), fec, &[], Some((2, true)), false);
            let what = format!("mirror ahead, fec {fec} seed {seed}: {r:?}");
            eprintln!("figure: kcp-go wire, {what}");
            assert!(r.migrations.is_empty(), "{what}");
            assert!(r.third_out <= 3 * r.third_in, "{what}");
        }
    }
}

/// A client on kcp-go's wire whose port changes while the server has not
/// read for a while: the session's window is closed and everything the
/// client sent is acknowledged, so the client sends only zero-window
/// probes, which carry nothing fresh (a replay could carry the same). The
/// first one from the new port makes a weak candidate; the host's nudge
/// there (a PUSH without data for a segment the client holds) comes back
/// acknowledged, bound to the nudge, and the session moves before the
/// server reads again; then the echo completes. Without the nudge the
/// probes stay stale, the session stays at the old address and the echo
/// deadlocks (checked by hand).
#[test]
fn a_client_on_kcp_gos_wire_behind_a_closed_window_is_nudged_and_follows() {
    const PAUSE_AT: u64 = 300;
    const MOVE_AT: u64 = 1_500;
    const RESUME_AT: u64 = 4_000;
    for fec in [false, true] {
        for (seed, loss) in [(1, 0.0), (2, 0.02), (3, 0.02)] {
            let what = format!("fec {fec} seed {seed} loss {loss}");
            // Small windows: the echo is still under way at the pause, and
            // the session's window closes soon after.
            let mut b = Config::builder().stream(true).window(32, 32).crypto(
                Method::Aes128Gcm,
                Key::passphrase("migration in the simulator"),
            );
            if fec {
                b = b.fec(10, 3);
            }
            let config = b.build().expect("valid");
            let mut sim = Sim::new(seed, 1_000);
            let host = addr(HOST);
            sim.listen(host, &config, lossy(loss));
            let c = sim.add(0x5eed_0004, &config, lossy(loss));
            sim.place(c, addr(HOME), host);
            let now = sim.now();
            sim.conn(c).connect(now);
            let data = payload(seed, TOTAL);
            let (mut sent, mut got) = (0usize, 0usize);
            let mut echo: Vec<u8> = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            let (mut moved, mut moved_before_resume) = (false, false);
            let done = sim.drive(2_000_000, |sim| {
                let t = sim.elapsed_ms();
                while sent < TOTAL {
                    match sim.conn(c).write(&data[sent..TOTAL.min(sent + 16 * 1024)]) {
                        Ok(n) => sent += n,
                        Err(ConnError::WouldBlock) => break,
                        Err(e) => panic!("client write: {e}"),
                    }
                }
                if !(PAUSE_AT..RESUME_AT).contains(&t) {
                    serve_echo(sim, &mut echo, &mut buf);
                }
                while let Ok(n) = sim.conn(c).read(&mut buf) {
                    assert_eq!(&buf[..n], &data[got..got + n], "a wrong byte at {got}");
                    got += n;
                }
                if !moved && t >= MOVE_AT {
                    moved = true;
                    sim.move_node(c, addr(REBOUND));
                }
                if t < RESUME_AT {
                    let h = sim.host.as_ref().expect("a host");
                    moved_before_resume = !h.migrations.is_empty();
                }
                if got == TOTAL {
                    return Flow::Done;
                }
                // Every 50 ms until the server reads again (the move and
                // the resume fall on that grid), then at every event.
                if t < RESUME_AT {
                    Flow::WakeAt(t / 50 * 50 + 50)
                } else {
                    Flow::Continue
                }
            });
            let summary = summary(&sim);
            assert!(done, "deadlock at {got} of {TOTAL}: {what}: {summary}");
            let h = sim.host.as_ref().expect("a host");
            let s = h.sessions.first().copied().expect("a session");
            eprintln!("figure: closed window, {what}: {summary}");
            assert_eq!(got, TOTAL, "{what}");
            assert_eq!(h.migrations.len(), 1, "{what}: {summary}");
            assert!(
                moved_before_resume,
                "nudged, not freed by the server's reads: {what}: {summary}"
            );
            assert_eq!(sim.session_peer(s), Some(addr(REBOUND)), "{what}");
            assert!(
                h.stale > 0,
                "its window probes were stale: {what}: {summary}"
            );
        }
    }
}

/// A client restarted with the same conv from another address while the
/// session lives (and acknowledged more than a window of the server's
/// data): its openers are stale for the session, and so is the rest of
/// what it sends (its `una` starts at 0, far behind what the session's
/// peer acknowledged), so the session stays where it is: no hand-over to a
/// newcomer that cannot prove it owns it. (A younger session, with less
/// than two windows acknowledged, cannot tell; see `ConfigBuilder::migration`.)
#[test]
fn a_restart_with_the_same_conv_elsewhere_takes_nothing_over() {
    let config = Config::builder()
        .stream(true)
        .window(32, 32)
        .crypto(
            Method::Aes128Gcm,
            Key::passphrase("migration in the simulator"),
        )
        .build()
        .expect("valid");
    let mut sim = Sim::new(11, 1_000);
    let host = addr(HOST);
    sim.listen(host, &config, lossy(0.0));
    let c = sim.add(0x5eed_0003, &config, lossy(0.0));
    sim.place(c, addr(HOME), host);
    let now = sim.now();
    sim.conn(c).connect(now);
    sim.conn(c).probe_when_quiet(true);
    let mut again = None;
    let mut buf = vec![0u8; 64 * 1024];
    sim.drive(400_000, |sim| {
        let t = sim.elapsed_ms();
        let _ = sim.conn(c).write(&payload(t, 8 * 1024));
        // The server echoes (so the session's peer acknowledges its data)
        // and the first client drains.
        if let Some(&s) = sim.host.as_ref().and_then(|h| h.sessions.first()) {
            while let Ok(n) = sim.conn(s).read(&mut buf) {
                let _ = sim.conn(s).write(&buf[..n]);
            }
        }
        while sim.conn(c).read(&mut buf).is_ok() {}
        if t >= 800 && again.is_none() {
            let n = sim.add(0x5eed_0003, &config, lossy(0.0));
            sim.place(n, addr(NEW_IP), host);
            let now = sim.now();
            sim.conn(n).connect(now);
            sim.conn(n).probe_when_quiet(true);
            again = Some(n);
        }
        if let Some(n) = again {
            let _ = sim.conn(n).write(&payload(t + 1, 200));
        }
        if t >= 3_000 {
            Flow::Done
        } else {
            Flow::WakeAt(t / 50 * 50 + 50)
        }
    });
    let h = sim.host.as_ref().expect("a host");
    assert!(h.migrations.is_empty(), "{}", summary(&sim));
    assert_eq!(h.sessions.len(), 1);
    assert_eq!(sim.session_peer(h.sessions[0]), Some(addr(HOME)));
    let n = again.expect("the restarted client");
    assert!(
        sim.nodes[n].conn.is_connecting(),
        "no answer for the newcomer"
    );
    assert_eq!(h.sent_to.get(&addr(NEW_IP)), None, "nothing to it");
}

/// Without migration (`aes`, no MAC), the same change strands the echo:
/// the table refuses the new address, so the runs above prove the rules.
#[test]
fn without_migration_the_new_port_is_refused() {
    let config = Config::builder()
        .stream(true)
        .crypto(Method::Aes128, Key::passphrase("no migration"))
        .build()
        .expect("valid");
    let mut sim = Sim::new(7, 1_000);
    let host = addr(HOST);
    sim.listen(host, &config, Link::clean(10));
    let c = sim.add(0x5eed_0002, &config, Link::clean(10));
    sim.place(c, addr(HOME), host);
    let now = sim.now();
    sim.conn(c).connect(now);
    let mut moved = false;
    sim.drive(200_000, |sim| {
        // A little every 50 ms.
        let t = sim.elapsed_ms();
        if t % 50 == 0 {
            let _ = sim.conn(c).write(&payload(t, 100));
        }
        if !moved && sim.elapsed_ms() > 300 {
            sim.move_node(c, addr(REBOUND));
            moved = true;
        }
        if t >= 3_000 {
            Flow::Done
        } else {
            Flow::WakeAt(t / 50 * 50 + 50)
        }
    });
    let h = sim.host.as_ref().expect("a host");
    assert!(h.migrations.is_empty());
    assert!(
        h.dropped.get("NotOpener").copied().unwrap_or(0) > 0,
        "{:?}",
        h.dropped
    );
    let _ = Duration::ZERO;
}
