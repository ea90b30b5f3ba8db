//! Transcript helpers: two endpoints wired by hand, packets parsed for asserts.
#![allow(
    dead_code,
    reason = "shared helpers; not every test module uses every one"
)]

use crate::arq::segment::{Header, Segments};
use crate::arq::{ArqConfig, Kcp, Origin, Timestamp};

pub(crate) fn t(ms: u32) -> Timestamp {
    Timestamp::from_millis(ms)
}

/// Every packet `k` emits at `now`.
pub(crate) fn drain(k: &mut Kcp, now: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Some(n) = k.poll_transmit(t(now), &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// Headers of every segment of a packet.
pub(crate) fn headers(packet: &[u8]) -> Vec<Header> {
    Segments::new(packet).map(|s| s.unwrap().header()).collect()
}

/// `(cmd, sn)` of every segment in `packets`.
pub(crate) fn cmd_sn(packets: &[Vec<u8>]) -> Vec<(u8, u32)> {
    packets
        .iter()
        .flat_map(|p| headers(p))
        .map(|h| (h.cmd, h.sn))
        .collect()
}

pub(crate) fn deliver(to: &mut Kcp, now: u32, packets: &[Vec<u8>]) {
    for p in packets {
        to.handle_datagram(t(now), p, Origin::Regular).unwrap();
    }
}

pub(crate) fn pair(cfg: &ArqConfig) -> (Kcp, Kcp) {
    (Kcp::new(7, cfg).unwrap(), Kcp::new(7, cfg).unwrap())
}

pub(crate) const PUSH: u8 = 81;
pub(crate) const ACK: u8 = 82;
pub(crate) const WASK: u8 = 83;
pub(crate) const WINS: u8 = 84;

/// One segment of conversation 7.
pub(crate) fn seg(cmd: u8, frg: u8, wnd: u16, ts: u32, sn: u32, una: u32, data: &[u8]) -> Vec<u8> {
    let h = Header {
        conv: 7,
        cmd,
        frg,
        wnd,
        ts,
        sn,
        una,
        len: data.len() as u32,
    };
    let mut out = vec![0u8; 24 + data.len()];
    h.encode_at(&mut out, 0, data).unwrap();
    out
}

pub(crate) fn ack(sn: u32, ts: u32, una: u32, wnd: u16) -> Vec<u8> {
    seg(ACK, 0, wnd, ts, sn, una, &[])
}

pub(crate) fn push(sn: u32, ts: u32, una: u32, data: &[u8]) -> Vec<u8> {
    seg(PUSH, 0, 32, ts, sn, una, data)
}

/// Run every tick due from `from` up to and including `until` (a deadline in
/// the past runs at `from`), collecting output with its time.
pub(crate) fn run_until(k: &mut Kcp, from: u32, until: u32) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut now = from;
    while let Some(due) = k.poll_timeout() {
        if due.diff(t(until)) > 0 {
            break;
        }
        if due.diff(t(now)) > 0 {
            now = due.as_millis();
        }
        k.handle_timeout(t(now));
        out.extend(drain(k, now).into_iter().map(|p| (now, p)));
    }
    out
}

/// Times at which a PUSH with this sn left.
pub(crate) fn push_times(out: &[(u32, Vec<u8>)], sn: u32) -> Vec<u32> {
    out.iter()
        .filter(|(_, p)| headers(p).iter().any(|h| h.cmd == PUSH && h.sn == sn))
        .map(|(t, _)| *t)
        .collect()
}
