//! Placeholder until the fec benchmarks land.
fn main() {}
