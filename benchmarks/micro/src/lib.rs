//! Micro-benchmarks live in `benches/`.
