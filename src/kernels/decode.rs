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

/// Head width this kernel handles.
pub const D: usize = 64;

/// Whether this CPU runs the kernel.
pub fn available() -> bool {
    std::is_x86_feature_detected!("avx512f")
}

/// Attention of `group` query heads (`q`: `group × 64` values, rotated) sharing one KV
/// head whose rows for positions `0..rows.len()` start at `rows[j]` in `k` and `v`.
/// Returns the heads' outputs, `group × 64`. `softmax` normalizes one head's scores in
/// place (the caller's, so both routes share it). Panics if a row lies outside `k` or
/// `v`, if there are no rows, or if the CPU lacks AVX-512 ([`available`]).
pub fn group_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    rows: &[usize],
    softmax: impl Fn(&mut [f32]),
) -> Vec<f32> {
    assert!(q.len().is_multiple_of(D), "query heads must be {D} wide");
    assert!(!rows.is_empty(), "attention over an empty cache");
    let fits = |buf: &[f32]| {
        rows.iter()
            .all(|&r| r.checked_add(D).is_some_and(|e| e <= buf.len()))
    };
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
            match n {
                3 => x86::scores::<3>(q, k, rows, scale, w),
                2 => x86::scores::<2>(q, k, rows, scale, w),
                _ => x86::scores::<1>(q, k, rows, scale, w),
            }
            for wi in w.chunks_exact_mut(kv_len).take(n) {
                softmax(wi);
            }
            match n {
                3 => x86::weighted_sum::<3>(w, v, rows, out),
                2 => x86::weighted_sum::<2>(w, v, rows, out),
                _ => x86::weighted_sum::<1>(w, v, rows, out),
            }
        }
        h += n;
    }
    out
}

// Indices name the register tile (head i, quarter c of the row); iterators over two arrays
// at once would hide which accumulator is which.
#[allow(clippy::needless_range_loop)]
mod x86 {
    use super::D;
    use crate::kernels::{prefetch, ROWS_AHEAD};
    use std::arch::x86_64::*;

    /// Row `at` of `buf` as four vectors.
    #[inline(always)]
    unsafe fn load_row(buf: &[f32], at: usize) -> [__m512; 4] {
        // SAFETY: the caller checked at + 64 <= buf.len().
        unsafe { std::array::from_fn(|c| _mm512_loadu_ps(buf.as_ptr().add(at + 16 * c))) }
    }

    /// `w[i · kv_len + j] = q_i · k_j · scale` for the `G` heads of `q`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn scores<const G: usize>(
        q: &[f32],
        k: &[f32],
        rows: &[usize],
        scale: f32,
        w: &mut [f32],
    ) {
        let kv_len = rows.len();
        assert!(q.len() >= G * D && w.len() >= G * kv_len);
        // SAFETY: q holds G heads; row offsets were checked by the caller; j < kv_len.
        unsafe {
            let qv: [[__m512; 4]; G] = std::array::from_fn(|i| load_row(q, i * D));
            for (j, &at) in rows.iter().enumerate() {
                if let Some(&next) = rows.get(j + ROWS_AHEAD) {
                    prefetch(&k[next..][..D]);
                }
                let kr = load_row(k, at);
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

    /// `out_i = Σ_j w[i · kv_len + j] · v_j` for the `G` heads.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn weighted_sum<const G: usize>(
        w: &[f32],
        v: &[f32],
        rows: &[usize],
        out: &mut [f32],
    ) {
        let kv_len = rows.len();
        assert!(w.len() >= G * kv_len && out.len() >= G * D);
        // SAFETY: as in `scores`; out holds G heads.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 4]; G];
            for (j, &at) in rows.iter().enumerate() {
                if let Some(&next) = rows.get(j + ROWS_AHEAD) {
                    prefetch(&v[next..][..D]);
                }
                let vr = load_row(v, at);
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
        group_attention(&[0.0; D], &k, &v, &[0, 3 * D, 3 * D + 32], |_| {});
    }

    #[test]
    #[should_panic(expected = "64 wide")]
    fn refuses_query_heads_of_another_width() {
        group_attention(&[0.0; 48], &[0.0; D], &[0.0; D], &[0], |_| {});
    }
}
