//! Number-crunching kernels, kept apart from the glass box: the model code says *what* is
//! computed (`model/linear.rs` is `y = x Wᵀ`), these files say how to do it fast on this
//! CPU. Each SIMD path is checked against a plain scalar reference in its tests.

pub mod peak;
pub mod q8_0;
