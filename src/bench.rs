//! Benchmarks that compare configurations side by side in one run.

pub mod arrivals;
pub mod attention;
pub mod decode;
pub mod heads;
pub mod kv;
pub mod render;
pub mod serve;
pub mod sink;

/// Median of a non-empty list: of an even count, the mean of the middle two (the upper one
/// alone would lean every even-count figure, and a ratio's against its target, upwards).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n % 2 {
        1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
