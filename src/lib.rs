//! inferlab: a glass-box transformer inference lab.
//!
//! The library holds everything the binary wires together: model loading and the
//! instrumented forward pass (`model`), the KV cache (`kv`) and the benchmarks (`bench`).

pub mod assets;
pub mod attach;
pub mod bench;
pub mod budget;
pub mod export;
pub mod files;
pub mod kernels;
pub mod kv;
pub mod lesson;
pub mod machine;
pub mod model;
pub mod report;
pub mod screen;
pub mod serve;
pub mod settings;
pub mod sink;
pub mod ui;
pub mod views;
pub mod worker;
