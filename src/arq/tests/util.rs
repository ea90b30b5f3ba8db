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
