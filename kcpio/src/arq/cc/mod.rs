//! Congestion control: which segments this side may send, and when.
//!
//! Sender side only: a controller changes when this end admits new data and
//! how fast it lets segments leave, never the wire format or what the peer
//! sees (ACKs, windows, `una` are produced exactly as before). Three
//! controllers exist ([`Congestion`]), one file each:
//!
//! * `None` and `Kcp` are kcp-go's two modes (`nc = 1` and `nc = 0`),
//!   byte-identical to kcp-go, as the differential trace checks. `None` is
//!   the windows alone; `Kcp` is [`KcpCwnd`] (`kcp.rs`).
//! * `Bbr` is [`Bbr`] (`bbr.rs`): a model of the path in the spirit of
//!   BBR (startup, drain, a windowed maximum of the delivery rate, the
//!   minimum RTT, pacing).

mod bbr;
mod kcp;

pub use bbr::BbrStats;
pub(crate) use bbr::{Bbr, TxStamp};
pub(crate) use kcp::KcpCwnd;

/// How this side paces and limits what it sends.
///
/// Sender side only: the peer needs no support and sees no difference on
/// the wire, so every choice works against kcp-go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Congestion {
    /// No congestion control (kcp-go `nc = 1`): as much in flight as the send
    /// window and the peer's receive window allow, sent as soon as it can
    /// go. Fills any bottleneck queue whose path holds less than the window.
    None,
    /// KCP's classic congestion window (kcp-go `nc = 0`): slow start from a
    /// threshold of 2 segments, halving on fast retransmit, restart from 1
    /// segment on timeout. Byte-identical to kcp-go. Collapses on lossy or
    /// long paths, since every loss is read as congestion.
    Kcp,
    /// **kcpio-only**: a model of the path in the spirit of BBR. Measures the
    /// delivery rate and RTT from every acknowledgement, paces segments at
    /// the bottleneck rate it found and keeps about two bandwidth-delay
    /// products in flight, probing periodically for more bandwidth and a
    /// lower RTT. Random loss (up to about 15%) does not lower its rate;
    /// loss together with a standing queue does. Send and receive windows
    /// still cap what is in flight, so size them to at least twice the
    /// path's bandwidth-delay product in segments.
    Bbr,
}

impl Congestion {
    /// The controller called `name`: `none`, `kcp` or `bbr`; `model`, its
    /// earlier name, is accepted for [`Bbr`](Self::Bbr) too.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "kcp" => Some(Self::Kcp),
            "bbr" | "model" => Some(Self::Bbr),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Congestion;

    #[test]
    fn names_include_the_models_earlier_one() {
        assert_eq!(Congestion::from_name("none"), Some(Congestion::None));
        assert_eq!(Congestion::from_name("kcp"), Some(Congestion::Kcp));
        assert_eq!(Congestion::from_name("bbr"), Some(Congestion::Bbr));
        assert_eq!(Congestion::from_name("model"), Some(Congestion::Bbr));
        assert_eq!(Congestion::from_name("cubic"), None);
    }
}
