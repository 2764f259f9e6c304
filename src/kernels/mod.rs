//! Number-crunching kernels, kept apart from the glass box: the model code says *what* is
//! computed (`model/linear.rs` is `y = x Wᵀ`), these files say how to do it fast on this
//! CPU. Each SIMD path is checked against a plain scalar reference in its tests.

pub mod peak;
pub mod q8_0;

/// Deterministic pseudo-random values in [-1, 1) (xorshift): the same inputs on every
/// machine, for the attention benchmark and the kernel tests.
pub fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}
