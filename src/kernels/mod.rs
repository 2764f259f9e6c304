//! Number-crunching kernels, kept apart from the glass box: the model code says *what* is
//! computed (`model/linear.rs` is `y = x Wᵀ`), these files say how to do it fast on this
//! CPU. Each SIMD path is checked against a plain scalar reference in its tests.

#[cfg(target_arch = "x86_64")]
pub mod decode;
pub mod elementwise;
pub mod peak;
pub mod q4;
pub mod q8_0;

/// How many rows ahead the decode loops ask for the cache's rows with [`prefetch`]. One
/// request's rows for a layer sit in several short runs (per KV head; per page when
/// paged), too short for the hardware prefetcher to get going: asking 16 rows ahead
/// measured 1.4–1.8× faster than not asking, over 8 and 28 requests of 200 cached tokens
/// (32 and 64 measured no better for the AVX-512 kernel).
pub const ROWS_AHEAD: usize = 16;

/// Asks the CPU to bring `row` (of any element type) into the cache ahead of its use, one
/// 64-byte line at a time: a hint that changes no result and never faults. A no-op where
/// there is no such instruction.
#[inline(always)]
pub fn prefetch<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let (p, n) = (row.as_ptr().cast::<u8>(), std::mem::size_of_val(row));
        for off in (0..n).step_by(64) {
            // SAFETY: `off` stays inside `row`; a prefetch reads nothing architecturally.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

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
