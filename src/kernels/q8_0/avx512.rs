//! The Q8_0 matmul with AVX-512 VNNI, register-blocked.
//!
//! Weights come in panels of 16 rows ([`super::Panels`]): lane i of every 64-byte vector
//! belongs to row i of the panel. One `vpdpbusd` multiplies four bytes of each of the 16
//! rows by the same four activation bytes (broadcast), so each lane sums its own row's dot
//! product and a tile ends in plain stores, with no horizontal sums. A tile is `R` panels
//! (16·R weight rows) by `G` activation rows: every weight vector is loaded once for the G
//! rows and every activation broadcast once for the R panels, and the R·G accumulators
//! stay in registers for the whole row.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes. The weights are stored as `w + 128`
//! (unsigned) and the activations as they are (signed), so the product carries an extra
//! `128 · Σa` per block; it depends on the activations only and is taken off by starting
//! each block's sum at `-128 · Σa`, computed once when the activations are quantized.

use super::{ActTile, PanelTile, TileOut, QK};
use std::arch::x86_64::*;

/// Rows per panel: one per 32-bit lane of a 512-bit vector.
const LANES: usize = 16;

/// [`super::quantize_block`] on 16 lanes, with the same operations in the same order so
/// the bytes come out identical. Also returns the sum of the bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn quantize_block(chunk: &[f32], out: &mut [i8]) -> (f32, i32) {
    assert!(chunk.len() == QK && out.len() == QK);
    // SAFETY: both slices hold 32 elements, two 16-lane vectors.
    unsafe {
        let lo = _mm512_loadu_ps(chunk.as_ptr());
        let hi = _mm512_loadu_ps(chunk.as_ptr().add(16));
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
        // A NaN anywhere makes the scale NaN, as in the scalar quantizer: `max` keeps or
        // drops a NaN depending on its operand's position.
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(lo, hi) != 0;
        let d = if nan { f32::NAN } else { amax / 127.0 };
        let id = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let sign = _mm512_set1_ps(-0.0);
        let half = _mm512_set1_ps(0.5);
        let mut sum = _mm512_setzero_si512();
        for (i, v) in [lo, hi].into_iter().enumerate() {
            let x = _mm512_mul_ps(v, id);
            // 0.5 with x's sign, then truncation: half away from zero.
            // (Integer and/or: the float forms need AVX-512 DQ and were not inlined.)
            let h = _mm512_castsi512_ps(_mm512_or_si512(
                _mm512_castps_si512(half),
                _mm512_and_si512(_mm512_castps_si512(x), _mm512_castps_si512(sign)),
            ));
            let q = _mm512_cvttps_epi32(_mm512_add_ps(x, h));
            // Saturated to int8 as the store does, so the sum matches the bytes.
            let q = _mm512_max_epi32(
                _mm512_min_epi32(q, _mm512_set1_epi32(127)),
                _mm512_set1_epi32(-128),
            );
            sum = _mm512_add_epi32(sum, q);
            let b = _mm512_cvtepi32_epi8(q);
            _mm_storeu_si128(out.as_mut_ptr().add(i * 16) as *mut _, b);
        }
        (d, _mm512_reduce_add_epi32(sum))
    }
}

/// `R` panels × `G` activation rows over all `kb` blocks.
// Indices `r` (panel) and `j` (activation row) name the register tile; iterators over two
// arrays at once would hide which accumulator is which.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn tile<const R: usize, const G: usize>(
    w: &PanelTile,
    a: &ActTile,
    out: &mut TileOut<R, G>,
) {
    let kb = w.kb;
    // Every load below is unchecked; these bounds make them sound.
    super::check_tile(w, a, R, G, LANES, true);
    let mut acc = [[_mm512_setzero_ps(); G]; R];
    // SAFETY: b < kb, c < 8, r < R and j < G keep every offset inside the asserted lengths.
    unsafe {
        for b in 0..kb {
            let fetch = w.next.takes(b);
            let mut dot = [[_mm512_setzero_si512(); G]; R];
            for j in 0..G {
                let start = _mm512_set1_epi32(*a.neg_corr.get_unchecked(j * kb + b));
                for r in 0..R {
                    dot[r][j] = start;
                }
            }
            for c in 0..QK / 4 {
                let mut wv = [_mm512_setzero_si512(); R];
                // One line of the next panels per line read here; the hint puts it in L2,
                // leaving L1 to the panels the other tiles still read.
                if fetch {
                    for r in 0..R {
                        let at = ((r * kb + b) * (QK / 4) + c) * 64;
                        _mm_prefetch::<_MM_HINT_T1>(w.next.bytes.as_ptr().add(at) as *const i8);
                    }
                }
                for r in 0..R {
                    let at = ((r * kb + b) * (QK / 4) + c) * 64;
                    wv[r] = _mm512_loadu_si512(w.q.as_ptr().add(at) as *const _);
                }
                for j in 0..G {
                    let p = a.q.as_ptr().add(j * a.k + b * QK + c * 4) as *const i32;
                    let x = _mm512_set1_epi32(p.read_unaligned());
                    for r in 0..R {
                        dot[r][j] = _mm512_dpbusd_epi32(dot[r][j], wv[r], x);
                    }
                }
            }
            for r in 0..R {
                let sp = w.scales.as_ptr().add((r * kb + b) * LANES);
                let ws = _mm512_cvtph_ps(_mm256_loadu_si256(sp as *const _));
                for j in 0..G {
                    let s = _mm512_set1_ps(*a.scales.get_unchecked(j * kb + b));
                    let t = _mm512_mul_ps(_mm512_cvtepi32_ps(dot[r][j]), s);
                    acc[r][j] = _mm512_fmadd_ps(t, ws, acc[r][j]);
                }
            }
        }
        for r in 0..R {
            for j in 0..G {
                _mm512_storeu_ps(out[r][j].as_mut_ptr(), acc[r][j]);
            }
        }
    }
}
