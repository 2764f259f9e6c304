//! Benchmarks that compare configurations side by side in one run.

pub mod arrivals;
pub mod attention;
pub mod decode;
pub mod heads;
pub mod kv;
pub mod render;
pub mod serve;
pub mod sink;

/// Median of a non-empty list.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
