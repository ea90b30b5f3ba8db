//! Placeholder until the crypto benchmarks land.
fn main() {}
