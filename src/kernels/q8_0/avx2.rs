//! The Q8_0 dot products with AVX2: `maddubs` on int8 pairs, accumulated in f32.

use super::QK;
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps(v, 1);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

/// One weight row against `m` activation rows, four rows at a time so the
/// accumulators stay in registers and each weight block is loaded once per group.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_rows(
    w_s: &[f32],
    w_q: &[i8],
    a_s: &[f32],
    a_q: &[i8],
    m: usize,
    kb: usize,
    dst: &mut [f32],
) {
    // The loads below are unchecked; these bounds make them sound.
    assert!(w_s.len() >= kb && w_q.len() >= kb * QK && dst.len() >= m);
    assert!(a_s.len() >= m * kb && a_q.len() >= m * kb * QK);
    let ones = _mm256_set1_epi16(1);
    let mut r0 = 0;
    while r0 < m {
        let g = (m - r0).min(4);
        let mut acc = [_mm256_setzero_ps(); 4];
        for b in 0..kb {
            // SAFETY: b < kb and rows < m keep every load inside the slices.
            let w = unsafe { _mm256_loadu_si256(w_q.as_ptr().add(b * QK) as *const __m256i) };
            let wabs = _mm256_sign_epi8(w, w);
            let ws = w_s[b];
            for (j, acc) in acc.iter_mut().enumerate().take(g) {
                let r = r0 + j;
                let a = unsafe {
                    _mm256_loadu_si256(a_q.as_ptr().add((r * kb + b) * QK) as *const __m256i)
                };
                // |w| · (a with w's sign) = w · a, in the unsigned × signed form maddubs needs.
                let p16 = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a, w));
                let p32 = _mm256_madd_epi16(p16, ones);
                let scale = _mm256_set1_ps(ws * a_s[r * kb + b]);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, *acc);
            }
        }
        for (j, acc) in acc.iter().enumerate().take(g) {
            dst[r0 + j] = hsum(*acc);
        }
        r0 += g;
    }
}
