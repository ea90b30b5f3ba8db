//! Unit tests of the state machine, grouped by mechanism and written as
//! transcripts at explicit timestamps.

mod util;

mod ackrepeat;
mod alloc;
mod basic;
mod kcpgo_trace;
mod lend;
mod link;
mod lowlat;
mod modes;
mod probe;
mod progress;
mod prop;
mod reassembly;
mod retransmit;
mod vectors;
