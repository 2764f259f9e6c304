//! Benchmarks that compare configurations side by side in one run.

pub mod arrivals;
pub mod attention;
pub mod decode;
pub mod heads;
pub mod kv;
pub mod peer;
pub mod render;
pub mod serve;
pub mod sink;

/// Median of a non-empty list: of an even count, the mean of the middle two (the upper one
/// alone would lean every even-count figure, and a ratio's against its target, upwards).
pub fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "the median of nothing");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n % 2 {
        1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_an_odd_count_is_the_middle_and_of_an_even_count_the_middle_twos_mean() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(vec![0.9, 1.1, 0.95, 1.0]), 0.975);
        assert_eq!(super::median(vec![5.0]), 5.0);
    }
}
