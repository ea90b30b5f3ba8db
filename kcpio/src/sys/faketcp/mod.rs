//! Datagrams carried as TCP segments (fake TCP), wire-compatible with
//! `kcptun --tcp` (xtaci/tcpraw). [`codec`] is the wire, sans-IO.

#[allow(dead_code, reason = "the transport that uses it comes next")]
pub(crate) mod codec;
