//! What kcpio's tests, benches and lab share (unpublished): the lossy UDP
//! relay, wrappers that build and run the Go peers in `interop/` (kcp-go
//! v5.6.72, kcp-go v5.6.1, xtaci/smux), kcpio echo/sink helpers, the payload
//! pattern and its verifier, forged-datagram helpers and percentiles, CPU time per call for the benches, a TCP echo server,
//! and whether Debian's kcptun is installed.
//!
//! Each test binary uses a different subset.

pub mod cpu;
pub mod goduration;
pub mod gopeer;
pub mod kcp;
pub mod kcptun;
pub mod pattern;
pub mod relay;
pub mod smuxpeer;
pub mod spoof;
pub mod stats;
pub mod tcp;
