//! Placeholder until the arq benchmarks land.
fn main() {}
