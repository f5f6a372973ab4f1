//! Criterion micro-benchmarks live in `benches/benches/`.
