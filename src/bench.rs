//! Benchmarks that compare configurations side by side in one run.

pub mod decode;
