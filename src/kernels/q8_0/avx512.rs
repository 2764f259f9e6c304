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
    // SAFETY: the caller's contract is this function's.
    unsafe { dot_rows_w::<1>([w_s], [w_q], a, m, [dst]) }
}

/// `W` weight rows against `m` activation rows: each activation vector is loaded once
/// for all `W` rows, and each weight vector once for up to eight activation rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_rows_w<const W: usize>(
    w_s: [&[f32]; W],
    w_q: [&[i8]; W],
    a: &Acts,
    m: usize,
    mut dst: [&mut [f32]; W],
) {
    // The loads in `group` are unchecked; these bounds make them sound.
    let kb = w_s[0].len();
    for k in 0..W {
        assert!(w_s[k].len() == kb && w_q[k].len() >= kb * QK && dst[k].len() >= m);
    }
    assert!(a.q_stride >= kb * QK);
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
                8 => group::<W, 8>(&w_s, &w_q, a, r0, &mut dst),
                4 => group::<W, 4>(&w_s, &w_q, a, r0, &mut dst),
                2 => group::<W, 2>(&w_s, &w_q, a, r0, &mut dst),
                _ => group::<W, 1>(&w_s, &w_q, a, r0, &mut dst),
            }
        }
        r0 += g;
    }
}

/// `W` weight rows against `G` activation rows.
///
/// Whole groups: lane j of every 64-byte vector belongs to block j of the group, so
/// eight `vpdpbusd` leave each block's full int32 dot in its own lane, and one
/// convert-and-scale per row finishes sixteen blocks. `vpdpbusd` wants unsigned ×
/// signed, so activations arrive as `a + 128` and `128 · Σw` is taken off once per
/// group and weight row. The remaining blocks go two at a time with per-pair scaling.
// Indices `k` (weight row) and `j` (activation row) name the register tile; iterators
// over two arrays at once would hide which accumulator is which.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn group<const W: usize, const G: usize>(
    w_s: &[&[f32]; W],
    w_q: &[&[i8]; W],
    a: &Acts,
    r0: usize,
    dst: &mut [&mut [f32]; W],
) {
    let kb = w_s[0].len();
    let groups = kb / GROUP;
    let c128 = _mm512_set1_epi8(-128);
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); G]; W];
    // SAFETY (whole block): every offset below stays inside row r0 + j < m of the
    // activations (sized by the caller) and inside each weight row's kb blocks.
    unsafe {
        let q0 = a.q.as_ptr().add(r0 * a.q_stride);
        let s0 = a.s.as_ptr().add(r0 * a.s_stride);
        for g in 0..groups {
            let qg = q0.add(g * GROUP * QK);
            let mut corr = [zero; W];
            let mut dots = [[zero; G]; W];
            for c in 0..QK / 4 {
                let mut w = [zero; W];
                for k in 0..W {
                    w[k] = _mm512_loadu_si512(
                        w_q[k].as_ptr().add(g * GROUP * QK + c * 64) as *const _
                    );
                    corr[k] = _mm512_dpbusd_epi32(corr[k], c128, w[k]);
                }
                for j in 0..G {
                    let x = _mm512_loadu_si512(qg.add(j * a.q_stride + c * 64) as *const _);
                    for k in 0..W {
                        dots[k][j] = _mm512_dpbusd_epi32(dots[k][j], x, w[k]);
                    }
                }
            }
            let sg = s0.add(g * GROUP);
            for k in 0..W {
                let ws = _mm512_loadu_ps(w_s[k].as_ptr().add(g * GROUP));
                for j in 0..G {
                    let dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(dots[k][j], corr[k]));
                    let s = _mm512_loadu_ps(sg.add(j * a.s_stride));
                    acc[k][j] = _mm512_fmadd_ps(dot, _mm512_mul_ps(ws, s), acc[k][j]);
                }
            }
        }
        let tail0 = groups * GROUP;
        for bp in 0..(kb - tail0) / 2 {
            let b = tail0 + bp * 2;
            let mut w = [zero; W];
            let mut corr = [zero; W];
            let mut wsv = [_mm512_setzero_ps(); W];
            for k in 0..W {
                w[k] = _mm512_loadu_si512(w_q[k].as_ptr().add(b * QK) as *const _);
                corr[k] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, w[k]));
                wsv[k] = _mm512_mask_mov_ps(
                    _mm512_set1_ps(*w_s[k].get_unchecked(b)),
                    0xFF00,
                    _mm512_set1_ps(*w_s[k].get_unchecked(b + 1)),
                );
            }
            let qb = q0.add(b * QK);
            let sb = s0.add(tail0 + bp * 16);
            for j in 0..G {
                let x = _mm512_loadu_si512(qb.add(j * a.q_stride) as *const _);
                let s = _mm512_loadu_ps(sb.add(j * a.s_stride));
                for k in 0..W {
                    let p = _mm512_dpbusd_epi32(corr[k], x, w[k]);
                    acc[k][j] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(wsv[k], s), acc[k][j]);
                }
            }
        }
    }
    for k in 0..W {
        for j in 0..G {
            dst[k][r0 + j] = _mm512_reduce_add_ps(acc[k][j]);
        }
    }
}
