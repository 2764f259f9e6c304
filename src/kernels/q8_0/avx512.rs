//! The Q8_0 dot products with AVX-512 VNNI: `vpdpbusd` on interleaved blocks, and the
//! activation quantizer on 16 lanes.

use super::{GROUP, QK};
use std::arch::x86_64::*;

/// [`super::quantize_block`] on 16 lanes, with the same operations in the same order so
/// the bytes come out identical.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn quantize_block(chunk: &[f32], out: &mut [i8]) -> f32 {
    assert!(chunk.len() == QK && out.len() == QK);
    // SAFETY: both slices hold 32 elements, two 16-lane vectors.
    unsafe {
        let lo = _mm512_loadu_ps(chunk.as_ptr());
        let hi = _mm512_loadu_ps(chunk.as_ptr().add(16));
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
        let d = amax / 127.0;
        let id = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let sign = _mm512_set1_ps(-0.0);
        let half = _mm512_set1_ps(0.5);
        for (i, v) in [lo, hi].into_iter().enumerate() {
            let x = _mm512_mul_ps(v, id);
            // 0.5 with x's sign, then truncation: half away from zero.
            let h = _mm512_or_ps(half, _mm512_and_ps(x, sign));
            let q = _mm512_cvttps_epi32(_mm512_add_ps(x, h));
            let b = _mm512_cvtsepi32_epi8(q);
            _mm_storeu_si128(out.as_mut_ptr().add(i * 16) as *mut _, b);
        }
        d
    }
}

/// Rows of interleaved activations: `q` bytes and `s` scales, row j at `j * stride`.
pub struct Acts<'a> {
    pub q: &'a [u8],
    pub s: &'a [f32],
    pub q_stride: usize,
    pub s_stride: usize,
}

/// One weight row against `m` activation rows, up to eight rows per weight load.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_rows(w_s: &[f32], w_q: &[i8], a: &Acts, m: usize, dst: &mut [f32]) {
    // The loads in `group` are unchecked; these bounds make them sound.
    let kb = w_s.len();
    assert!(w_q.len() >= kb * QK && dst.len() >= m && a.q_stride >= kb * QK);
    assert!(m == 0 || (a.q.len() >= (m - 1) * a.q_stride + kb * QK && a.s.len() >= m * a.s_stride));
    let mut r0 = 0;
    while r0 < m {
        let g = match m - r0 {
            8.. => 8,
            4..=7 => 4,
            2 | 3 => 2,
            _ => 1,
        };
        // SAFETY: every group stays inside rows r0..m, which the caller sized.
        unsafe {
            match g {
                8 => group::<8>(w_s, w_q, a, r0, dst),
                4 => group::<4>(w_s, w_q, a, r0, dst),
                2 => group::<2>(w_s, w_q, a, r0, dst),
                _ => group::<1>(w_s, w_q, a, r0, dst),
            }
        }
        r0 += g;
    }
}

/// `G` activation rows against one weight row.
///
/// Whole groups: lane j of every 64-byte vector belongs to block j of the group, so
/// eight `vpdpbusd` leave each block's full int32 dot in its own lane, and one
/// convert-and-scale per row finishes sixteen blocks. `vpdpbusd` wants unsigned ×
/// signed, so activations arrive as `a + 128` and `128 · Σw` is taken off once per
/// group. The remaining blocks go two at a time with per-pair scaling.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn group<const G: usize>(w_s: &[f32], w_q: &[i8], a: &Acts, r0: usize, dst: &mut [f32]) {
    let kb = w_s.len();
    let groups = kb / GROUP;
    let c128 = _mm512_set1_epi8(-128);
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); G];
    // SAFETY (whole block): every offset below stays inside row r0 + j < m of the
    // activations (sized by the caller) and inside this weight row's kb blocks.
    unsafe {
        let q0 = a.q.as_ptr().add(r0 * a.q_stride);
        let s0 = a.s.as_ptr().add(r0 * a.s_stride);
        for g in 0..groups {
            let wg = w_q.as_ptr().add(g * GROUP * QK);
            let qg = q0.add(g * GROUP * QK);
            let mut corr = zero;
            let mut dots = [zero; G];
            for c in 0..QK / 4 {
                let w = _mm512_loadu_si512(wg.add(c * 64) as *const _);
                corr = _mm512_dpbusd_epi32(corr, c128, w);
                for (j, d) in dots.iter_mut().enumerate() {
                    let x = _mm512_loadu_si512(qg.add(j * a.q_stride + c * 64) as *const _);
                    *d = _mm512_dpbusd_epi32(*d, x, w);
                }
            }
            let ws = _mm512_loadu_ps(w_s.as_ptr().add(g * GROUP));
            let sg = s0.add(g * GROUP);
            for (j, acc) in acc.iter_mut().enumerate() {
                let dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(dots[j], corr));
                let s = _mm512_loadu_ps(sg.add(j * a.s_stride));
                *acc = _mm512_fmadd_ps(dot, _mm512_mul_ps(ws, s), *acc);
            }
        }
        let tail0 = groups * GROUP;
        for bp in 0..(kb - tail0) / 2 {
            let b = tail0 + bp * 2;
            let w = _mm512_loadu_si512(w_q.as_ptr().add(b * QK) as *const _);
            let corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, w));
            let wsv = _mm512_mask_mov_ps(
                _mm512_set1_ps(*w_s.get_unchecked(b)),
                0xFF00,
                _mm512_set1_ps(*w_s.get_unchecked(b + 1)),
            );
            let qb = q0.add(b * QK);
            let sb = s0.add(tail0 + bp * 16);
            for (j, acc) in acc.iter_mut().enumerate() {
                let x = _mm512_loadu_si512(qb.add(j * a.q_stride) as *const _);
                let s = _mm512_loadu_ps(sb.add(j * a.s_stride));
                let p = _mm512_dpbusd_epi32(corr, x, w);
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(wsv, s), *acc);
            }
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        dst[r0 + j] = _mm512_reduce_add_ps(*acc);
    }
}
