//! Helpers shared by the integration tests: the lossy relay, the Go peer and
//! the payload pattern.

// Every test binary uses a different subset.
#![allow(dead_code)]

pub(crate) mod gopeer;
pub(crate) mod kcp;
pub(crate) mod pattern;
pub(crate) mod relay;
pub(crate) mod smuxpeer;
