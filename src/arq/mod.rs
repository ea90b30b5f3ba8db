//! The arq layer (see docs/DESIGN.md).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod time;

pub use time::Timestamp;
