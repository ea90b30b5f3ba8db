//! [`ConfigError`]: why [`ConfigBuilder::build`](super::ConfigBuilder::build)
//! refused a configuration, naming the option and its range.

use std::fmt;

use super::defaults::MIN_KCP_MTU;
use crate::{arq, crypto};

/// Why [`ConfigBuilder::build`](super::ConfigBuilder::build) refused a
/// configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The MTU leaves no room for a KCP segment once the crypto and FEC
    /// headers are taken off (kcp mtu = min(mtu, 1500) - crypto header -
    /// FEC header - AEAD tag must be at least 25 bytes).
    MtuTooSmall {
        /// The MTU asked for.
        mtu: usize,
        /// Bytes the crypto and FEC layers take from every datagram.
        overhead: usize,
    },
    /// The FEC shape is invalid (both numbers must be 0 to turn FEC off, or
    /// both positive with at most 255 shards in all).
    InvalidFec {
        /// Data shards asked for.
        data: usize,
        /// Parity shards asked for.
        parity: usize,
    },
    /// The key does not suit the cipher (for example too short).
    InvalidKey(crypto::KeyError),
    /// The ARQ refused its parameters.
    Arq(arq::ArqConfigError),
    /// A value outside its documented range (named, with the range).
    /// Durations are given in whole milliseconds, and their name says so:
    /// `idle_timeout (ms)`.
    OutOfRange {
        /// The builder option (with the argument, for options that take
        /// several: `window(recv)`; with the unit for durations).
        name: &'static str,
        /// The value asked for.
        value: u64,
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// An option that only works together with another one.
    Requires {
        /// The option set.
        name: &'static str,
        /// What it needs, as the builder spells it.
        needs: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MtuTooSmall { mtu, overhead } => write!(
                f,
                "mtu {mtu} is too small: {overhead} bytes of crypto/FEC headers (and a fake-TCP header's 24) leave less than {MIN_KCP_MTU} for KCP"
            ),
            Self::InvalidFec { data, parity } => write!(
                f,
                "invalid FEC shape {data} data + {parity} parity shards: \
                 use 0 + 0 for off, or both at least 1 and at most 255 in all"
            ),
            Self::InvalidKey(e) => write!(f, "invalid key: {e}"),
            Self::Arq(e) => write!(f, "invalid ARQ parameters: {e}"),
            Self::OutOfRange {
                name,
                value,
                min,
                max,
            } => write!(f, "{name} = {value} is outside {min}..={max}"),
            Self::Requires { name, needs } => write!(f, "{name} needs {needs}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidKey(e) => Some(e),
            Self::Arq(e) => Some(e),
            _ => None,
        }
    }
}
