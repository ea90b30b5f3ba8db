//! Differential replay against kcp-go itself.
//!
//! `kcpio/tests/vectors/arq_kcpgo_trace.json` was produced by
//! `testkit/interop/kcpgo-arq-trace` (regenerate with its `gen.sh`): kcp-go v5.6.72's
//! KCP, driven like a UDPSession drives it, on a virtual clock, through lossy,
//! jittery, window-limited scenarios (two in raw message mode, where KCP
//! fragments messages itself; two where lost packets come back as
//! FEC-recovered input). Here the same scenarios run through our
//! `Kcp` with the same event loop, and every datagram must match: time,
//! direction, length, CRC-32 of the bytes (so every header field, `ts`
//! included, and every payload byte), in order.

use std::collections::BTreeMap;

use serde_json::Value;

use super::util::{drain, headers, t};

use crate::arq::{ArqConfig, Kcp, Origin, RecvError};

const JSON: &str = include_str!("../../../tests/vectors/arq_kcpgo_trace.json");

/// The trace generator's per-datagram fate: dropped, its one-way delay,
/// whether a duplicate follows 3 ms later, and whether a dropped one is
/// "recovered by FEC" (delivered 5 ms late as `Origin::Recovered`).
fn fate(link: [u32; 5], seed: u32, dir: u32, k: u32) -> (bool, u32, bool, bool) {
    let [loss, delay, jitter, dup, recover] = link;
    let mut x = k
        .wrapping_mul(2_654_435_761)
        .wrapping_add(seed.wrapping_mul(40503))
        .wrapping_add(dir.wrapping_mul(7919));
    x ^= x >> 15;
    x = x.wrapping_mul(0x2c1b_3c6d);
    x ^= x >> 12;
    (
        x % 100 < loss,
        delay + (x >> 8) % (jitter + 1),
        (x >> 20) % 100 < dup,
        (x >> 24) % 100 < recover,
    )
}

fn pattern(i: usize) -> u8 {
    ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8
}

/// `cmd/frg/wnd/ts/sn/una/len;` per segment, as the generator writes it.
fn summary(p: &[u8]) -> String {
    headers(p)
        .iter()
        .map(|h| {
            format!(
                "{}/{}/{}/{}/{}/{}/{};",
                h.cmd, h.frg, h.wnd, h.ts, h.sn, h.una, h.len
            )
        })
        .collect()
}

struct Dgram {
    t: u32,
    dir: &'static str,
    len: usize,
    crc: u32,
    segs: String,
}

fn run(s: &Value) -> (Vec<Dgram>, u32) {
    let g = |k: &str| s[k].as_u64().unwrap() as u32;
    let b = |k: &str| s[k].as_bool().unwrap();
    let cfg = ArqConfig {
        mtu: g("mtu") as usize,
        snd_wnd: g("snd_wnd") as u16,
        rcv_wnd: g("rcv_wnd") as u16,
        nodelay: g("nodelay") != 0,
        interval: g("interval"),
        fast_resend: g("resend"),
        no_congestion: g("nc") != 0,
        stream: b("stream"),
        write_delay: b("write_delay"),
        ack_nodelay: b("ack_nodelay"),
        ..ArqConfig::default()
    };
    let (loss, delay, jitter, seed) = (g("loss_percent"), g("delay_ms"), g("jitter_ms"), g("seed"));
    let total = s["bytes"].as_u64().unwrap() as usize;
    let (pause_from, pause_to) = (g("pause_from"), g("pause_to"));
    let (dup, base, initial_sn) = (g("dup_percent"), g("clock_base"), g("initial_sn"));
    // > 0: raw message mode, messages of up to this many segments.
    let msg_segs = g("message_segments");
    let recover = g("recover_percent");
    let mut msgs = 0u32;
    // The loop runs on relative time; the endpoints see base + now, which may wrap.
    let clock = |rel: u32| t(base.wrapping_add(rel));
    let conv = 0x1122_3344;
    // [client, server]
    let mut ends = [Kcp::new(conv, &cfg).unwrap(), Kcp::new(conv, &cfg).unwrap()];
    for e in &mut ends {
        assert!(e.set_initial_sn(initial_sn));
    }
    let mss = ends[0].mss();
    let mut trace = Vec::new();
    // (at, seq) -> (to_server, origin, bytes)
    let mut wire: BTreeMap<(u32, u32), (bool, Origin, Vec<u8>)> = BTreeMap::new();
    let mut seq = 0u32;
    let mut k = [0u32; 2];
    let (mut sent, mut got) = (0usize, 0usize);
    let mut rbuf = vec![0u8; 1 << 20];

    // Emit whatever endpoint `i` has to send at `now` onto the link.
    let mut flush_out = |ends: &mut [Kcp; 2],
                         i: usize,
                         now: u32,
                         trace: &mut Vec<Dgram>,
                         wire: &mut BTreeMap<_, _>| {
        for p in drain(&mut ends[i], base.wrapping_add(now)) {
            let dir = if i == 0 { "c2s" } else { "s2c" };
            trace.push(Dgram {
                t: now,
                dir,
                len: p.len(),
                crc: crc32fast::hash(&p),
                segs: summary(&p),
            });
            let (drop, d, twice, recovered) =
                fate([loss, delay, jitter, dup, recover], seed, i as u32, k[i]);
            k[i] += 1;
            if !drop {
                seq += 1;
                wire.insert((now + d, seq), (i == 0, Origin::Regular, p.clone()));
                if twice {
                    seq += 1;
                    wire.insert((now + d + 3, seq), (i == 0, Origin::Regular, p));
                }
            } else if recovered {
                seq += 1;
                wire.insert((now + d + 5, seq), (i == 0, Origin::Recovered, p));
            }
        }
    };

    // Creation: kcp-go sessions run their timer at once.
    for e in &mut ends {
        e.handle_timeout(clock(0));
    }
    let mut now = 0u32;
    loop {
        // 1. deliveries due now, in (arrival, sequence) order
        while let Some((&(at, sq), _)) = wire.first_key_value() {
            if at != now {
                assert!(at > now);
                break;
            }
            let (to_server, origin, p) = wire.remove(&(at, sq)).unwrap();
            let i = usize::from(to_server);
            ends[i].handle_datagram(clock(now), &p, origin).unwrap();
            flush_out(&mut ends, i, now, &mut trace, &mut wire);
        }
        // 2. timers, client then server
        for i in 0..2 {
            if ends[i]
                .poll_timeout()
                .is_some_and(|d| d.diff(clock(now)) <= 0)
            {
                ends[i].handle_timeout(clock(now));
            }
            flush_out(&mut ends, i, now, &mut trace, &mut wire);
        }
        // 3. application, every 5 ms
        if now.is_multiple_of(5) {
            while sent < total && ends[0].wait_snd() < cfg.snd_wnd as usize {
                let mut n = mss.min(total - sent);
                if msg_segs > 0 {
                    n = (1
                        + (msgs.wrapping_mul(7919).wrapping_add(seed.wrapping_mul(31))
                            % (msg_segs * mss as u32)) as usize)
                        .min(total - sent);
                    msgs += 1;
                }
                let piece: Vec<u8> = (sent..sent + n).map(pattern).collect();
                if msg_segs > 0 {
                    assert_eq!(ends[0].send_message(&piece), Ok(()));
                } else {
                    assert_eq!(ends[0].send(&piece), n);
                }
                sent += n;
                flush_out(&mut ends, 0, now, &mut trace, &mut wire);
            }
            if !(now >= pause_from && now < pause_to) {
                loop {
                    match ends[1].recv_message(&mut rbuf) {
                        Ok(n) => {
                            assert!(
                                rbuf[..n]
                                    .iter()
                                    .enumerate()
                                    .all(|(j, &x)| x == pattern(got + j))
                            );
                            got += n;
                        }
                        Err(RecvError::NotReady) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                flush_out(&mut ends, 1, now, &mut trace, &mut wire);
            }
        }
        if got == total && ends[0].wait_snd() == 0 && wire.is_empty() {
            return (trace, now);
        }
        assert!(now < 3_600_000, "no completion");
        // Next event: a delivery, a deadline, or the application's 5 ms grid.
        let mut next = (now / 5 + 1) * 5;
        if let Some((&(at, _), _)) = wire.first_key_value() {
            next = next.min(at);
        }
        for e in &ends {
            if let Some(d) = e.poll_timeout() {
                let d = now + d.diff(clock(now)).max(1) as u32;
                next = next.min(d);
            }
        }
        now = next;
    }
}

#[test]
fn every_datagram_matches_kcp_go_on_the_same_events() {
    let v: Value = serde_json::from_str(JSON).unwrap();
    let scenarios = v["scenarios"].as_array().unwrap();
    assert!(scenarios.len() >= 14);
    for s in scenarios {
        let name = s["name"].as_str().unwrap();
        let (ours, end) = run(s);
        let theirs = s["trace"].as_array().unwrap();
        for (i, (o, r)) in ours.iter().zip(theirs).enumerate() {
            let rt = (
                r["t"].as_u64().unwrap() as u32,
                r["dir"].as_str().unwrap(),
                r["len"].as_u64().unwrap() as usize,
                r["crc32"].as_u64().unwrap() as u32,
            );
            assert_eq!(
                (o.t, o.dir, o.len, o.crc),
                rt,
                "{name}: datagram #{i} differs\n ours:   {}\n kcp-go: {}",
                o.segs,
                r["segs"].as_str().unwrap()
            );
        }
        assert_eq!(ours.len(), theirs.len(), "{name}: datagram count");
        assert_eq!(
            end,
            s["end_ms"].as_u64().unwrap() as u32,
            "{name}: completion time"
        );
    }
}
