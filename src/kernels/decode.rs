//! One decode row's attention for one KV head, for heads 64 wide, on AVX-512 (x86-64
//! only). The math is `model/attention.rs`'s `decode_loops`, which stays the reference
//! the tests compare this against; the sums run in another order, so the last bits differ.
//!
//! A 64-wide row is four 512-bit vectors, so three query heads (12 registers) and their
//! three outputs (12 more) stay in registers while every cached key and value row is
//! loaded once and used for all three. Written as plain loops over a slice of any width,
//! the same work loaded and stored each head's output for every value row, and summed
//! every score with a long tail of shuffles: at 8 requests of 150 cached tokens the
//! decode attention was a quarter of a serving step.
//!
//! The cache may store its numbers as f32, f16 or int8 with a scale per row ([`Rows`]); a
//! row is widened to f32 in registers as it is loaded, so the smaller types read fewer
//! bytes and cost no copy.

use half::f16;

/// Head width this kernel handles.
pub const D: usize = 64;

/// Whether this CPU runs the kernel.
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx512f")
}

/// Cached rows as the store holds them. Offsets count numbers, not bytes.
#[derive(Clone, Copy)]
pub enum Rows<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    /// Row `at / 64` is `q[at..at + 64] × scale[at / 64]`.
    Int8 {
        q: &'a [i8],
        scale: &'a [f32],
    },
}

impl Rows<'_> {
    /// Does a 64-wide row start at `at`, inside the store (on a row boundary for int8)?
    fn holds(&self, at: usize) -> bool {
        let inside = |len: usize| at.checked_add(D).is_some_and(|e| e <= len);
        match self {
            Self::F32(b) => inside(b.len()),
            Self::F16(b) => inside(b.len()),
            Self::Int8 { q, scale } => {
                inside(q.len()) && at.is_multiple_of(D) && at / D < scale.len()
            }
        }
    }
}

/// Attention of `group` query heads (`q`: `group × 64` values, rotated) sharing one KV
/// head whose rows for positions `0..rows.len()` start at `rows[j]` in `k` and `v`.
/// Returns the heads' outputs, `group × 64`. `softmax` normalizes one head's scores in
/// place (the caller's, so both routes share it). Panics if a row lies outside `k` or
/// `v` (or off a row boundary of int8), if there are no rows, or if the CPU lacks
/// AVX-512 ([`available`]).
pub fn group_attention(
    q: &[f32],
    k: Rows,
    v: Rows,
    rows: &[usize],
    softmax: impl Fn(&mut [f32]),
) -> Vec<f32> {
    assert!(q.len().is_multiple_of(D), "query heads must be {D} wide");
    assert!(!rows.is_empty(), "attention over an empty cache");
    let fits = |buf: Rows| rows.iter().all(|&r| buf.holds(r));
    assert!(fits(k) && fits(v), "a cached row lies outside the cache");
    assert!(available(), "the decode kernel needs AVX-512");
    let group = q.len() / D;
    let kv_len = rows.len();
    let scale = 1.0 / (D as f32).sqrt();
    let mut w = vec![0.0f32; group * kv_len];
    let mut out = vec![0.0f32; group * D];
    // Three heads at a time fill the registers; MQA's nine heads read the rows three times
    // (from cache: the first pass brought them in).
    let mut h = 0;
    while h < group {
        let n = (group - h).min(3);
        let (q, w, out) = (&q[h * D..], &mut w[h * kv_len..], &mut out[h * D..]);
        // SAFETY: AVX-512 was checked above; every row offset was checked against k and v,
        // and q, w and out hold n heads from here.
        unsafe {
            x86::scores(n, q, k, rows, scale, w);
            for wi in w.chunks_exact_mut(kv_len).take(n) {
                softmax(wi);
            }
            x86::weighted_sum(n, w, v, rows, out);
        }
        h += n;
    }
    out
}

// Indices name the register tile (head i, quarter c of the row); iterators over two arrays
// at once would hide which accumulator is which.
#[allow(clippy::needless_range_loop)]
mod x86 {
    use super::{Rows, D};
    use crate::kernels::{prefetch, ROWS_AHEAD};
    use half::f16;
    use std::arch::x86_64::*;

    /// Loads 64-wide rows as four f32 vectors, widening what is stored narrower.
    trait Load: Copy {
        /// Row `at` as four vectors. Safety: the caller checked the row is in the store.
        unsafe fn load(self, at: usize) -> [__m512; 4];
        /// Starts loading row `at` (which the caller checked).
        fn prefetch(self, at: usize);
    }

    impl Load for &[f32] {
        #[inline(always)]
        unsafe fn load(self, at: usize) -> [__m512; 4] {
            // SAFETY: at + 64 <= len, checked by the caller.
            unsafe { std::array::from_fn(|c| _mm512_loadu_ps(self.as_ptr().add(at + 16 * c))) }
        }
        #[inline(always)]
        fn prefetch(self, at: usize) {
            prefetch(&self[at..][..D]);
        }
    }

    impl Load for &[f16] {
        #[inline(always)]
        unsafe fn load(self, at: usize) -> [__m512; 4] {
            // SAFETY: at + 64 <= len, checked by the caller; 16 halves are 256 bits.
            unsafe {
                std::array::from_fn(|c| {
                    let p = self.as_ptr().add(at + 16 * c).cast::<__m256i>();
                    _mm512_cvtph_ps(_mm256_loadu_si256(p))
                })
            }
        }
        #[inline(always)]
        fn prefetch(self, at: usize) {
            prefetch(&self[at..][..D]);
        }
    }

    impl Load for (&[i8], &[f32]) {
        #[inline(always)]
        unsafe fn load(self, at: usize) -> [__m512; 4] {
            let (q, scale) = self;
            // SAFETY: at + 64 <= q.len() and at / 64 < scale.len(), checked by the caller;
            // 16 int8 are 128 bits.
            unsafe {
                let s = _mm512_set1_ps(*scale.get_unchecked(at / D));
                std::array::from_fn(|c| {
                    let p = q.as_ptr().add(at + 16 * c).cast::<__m128i>();
                    let x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p)));
                    _mm512_mul_ps(x, s)
                })
            }
        }
        #[inline(always)]
        fn prefetch(self, at: usize) {
            prefetch(&self.0[at..][..D]);
            prefetch(&self.1[at / D..][..1]);
        }
    }

    /// `w[i · kv_len + j] = q_i · k_j · scale` for `n` (1 to 3) heads of `q`.
    ///
    /// Safety: AVX-512, every row in `k`, `q` holding `n` heads, `w` `n` rows of scores.
    pub(super) unsafe fn scores(
        n: usize,
        q: &[f32],
        k: Rows,
        rows: &[usize],
        s: f32,
        w: &mut [f32],
    ) {
        // SAFETY: passed on from the caller.
        unsafe {
            match (n, k) {
                (3, Rows::F32(k)) => scores_of::<3, _>(q, k, rows, s, w),
                (2, Rows::F32(k)) => scores_of::<2, _>(q, k, rows, s, w),
                (_, Rows::F32(k)) => scores_of::<1, _>(q, k, rows, s, w),
                (3, Rows::F16(k)) => scores_of::<3, _>(q, k, rows, s, w),
                (2, Rows::F16(k)) => scores_of::<2, _>(q, k, rows, s, w),
                (_, Rows::F16(k)) => scores_of::<1, _>(q, k, rows, s, w),
                (3, Rows::Int8 { q: kq, scale }) => scores_of::<3, _>(q, (kq, scale), rows, s, w),
                (2, Rows::Int8 { q: kq, scale }) => scores_of::<2, _>(q, (kq, scale), rows, s, w),
                (_, Rows::Int8 { q: kq, scale }) => scores_of::<1, _>(q, (kq, scale), rows, s, w),
            }
        }
    }

    /// `out_i = Σ_j w[i · kv_len + j] · v_j` for `n` (1 to 3) heads.
    ///
    /// Safety: AVX-512, every row in `v`, `w` holding `n` rows of weights, `out` `n` heads.
    pub(super) unsafe fn weighted_sum(
        n: usize,
        w: &[f32],
        v: Rows,
        rows: &[usize],
        out: &mut [f32],
    ) {
        // SAFETY: passed on from the caller.
        unsafe {
            match (n, v) {
                (3, Rows::F32(v)) => weighted_sum_of::<3, _>(w, v, rows, out),
                (2, Rows::F32(v)) => weighted_sum_of::<2, _>(w, v, rows, out),
                (_, Rows::F32(v)) => weighted_sum_of::<1, _>(w, v, rows, out),
                (3, Rows::F16(v)) => weighted_sum_of::<3, _>(w, v, rows, out),
                (2, Rows::F16(v)) => weighted_sum_of::<2, _>(w, v, rows, out),
                (_, Rows::F16(v)) => weighted_sum_of::<1, _>(w, v, rows, out),
                (3, Rows::Int8 { q, scale }) => weighted_sum_of::<3, _>(w, (q, scale), rows, out),
                (2, Rows::Int8 { q, scale }) => weighted_sum_of::<2, _>(w, (q, scale), rows, out),
                (_, Rows::Int8 { q, scale }) => weighted_sum_of::<1, _>(w, (q, scale), rows, out),
            }
        }
    }

    /// [`scores`] for `G` heads over rows stored as `K` reads them.
    #[target_feature(enable = "avx512f")]
    unsafe fn scores_of<const G: usize, K: Load>(
        q: &[f32],
        k: K,
        rows: &[usize],
        scale: f32,
        w: &mut [f32],
    ) {
        let kv_len = rows.len();
        assert!(q.len() >= G * D && w.len() >= G * kv_len);
        // SAFETY: q holds G heads; row offsets were checked by the caller; j < kv_len.
        unsafe {
            let qv: [[__m512; 4]; G] = std::array::from_fn(|i| (&q[i * D..]).load(0));
            for (j, &at) in rows.iter().enumerate() {
                if let Some(&next) = rows.get(j + ROWS_AHEAD) {
                    k.prefetch(next);
                }
                let kr = k.load(at);
                for i in 0..G {
                    let mut acc = _mm512_mul_ps(qv[i][0], kr[0]);
                    for c in 1..4 {
                        acc = _mm512_fmadd_ps(qv[i][c], kr[c], acc);
                    }
                    *w.get_unchecked_mut(i * kv_len + j) = _mm512_reduce_add_ps(acc) * scale;
                }
            }
        }
    }

    /// [`weighted_sum`] for `G` heads over rows stored as `V` reads them.
    #[target_feature(enable = "avx512f")]
    unsafe fn weighted_sum_of<const G: usize, V: Load>(
        w: &[f32],
        v: V,
        rows: &[usize],
        out: &mut [f32],
    ) {
        let kv_len = rows.len();
        assert!(w.len() >= G * kv_len && out.len() >= G * D);
        // SAFETY: as in `scores_of`; out holds G heads.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 4]; G];
            for (j, &at) in rows.iter().enumerate() {
                if let Some(&next) = rows.get(j + ROWS_AHEAD) {
                    v.prefetch(next);
                }
                let vr = v.load(at);
                for i in 0..G {
                    let p = _mm512_set1_ps(*w.get_unchecked(i * kv_len + j));
                    for c in 0..4 {
                        acc[i][c] = _mm512_fmadd_ps(p, vr[c], acc[i][c]);
                    }
                }
            }
            for i in 0..G {
                for c in 0..4 {
                    _mm512_storeu_ps(out.as_mut_ptr().add(i * D + 16 * c), acc[i][c]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "outside the cache")]
    fn refuses_a_row_past_the_end_of_the_cache() {
        let (k, v) = (vec![0.0; 4 * D], vec![0.0; 4 * D]);
        // Row 3 ends exactly at the end; row 3.5 would read 32 values past it.
        let (k, v) = (Rows::F32(&k), Rows::F32(&v));
        group_attention(&[0.0; D], k, v, &[0, 3 * D, 3 * D + 32], |_| {});
    }

    #[test]
    #[should_panic(expected = "outside the cache")]
    fn refuses_an_int8_row_off_a_row_boundary() {
        let (q, scale) = ([0i8; 2 * D], [1.0f32; 2]);
        let rows = Rows::Int8 {
            q: &q,
            scale: &scale,
        };
        group_attention(&[0.0; D], rows, rows, &[0, D / 2], |_| {});
    }

    #[test]
    #[should_panic(expected = "64 wide")]
    fn refuses_query_heads_of_another_width() {
        let row = Rows::F32(&[0.0; D]);
        group_attention(&[0.0; 48], row, row, &[0], |_| {});
    }
}
