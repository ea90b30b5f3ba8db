//! Unit tests of the state machine, grouped by mechanism and written as
//! transcripts at explicit timestamps.

mod util;

mod basic;
mod vectors;
