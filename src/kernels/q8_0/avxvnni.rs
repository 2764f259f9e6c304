//! The Q8_0 matmul with AVX-VNNI: the AVX-512 kernel (`avx512.rs`) at half the width, for
//! CPUs that have `vpdpbusd` on 256-bit vectors but no AVX-512. Panels are 8 rows, one per
//! 32-bit lane; with 16 vector registers a tile holds 2 panels × 3 activation rows, 4
//! panels × 1 row, or 1 panel × 6 rows. The arithmetic is the same, lane for lane: weights
//! as `w + 128`, each block's sum started at `-128 · Σa`, then scaled by both block scales.

use super::{ActTile, PanelTile, TileOut, QK};
use std::arch::x86_64::*;

/// Rows per panel: one per 32-bit lane of a 256-bit vector.
const LANES: usize = 8;

/// `R` panels × `G` activation rows over all `kb` blocks; the results go to the first
/// eight lanes of each `out[r][j]`.
// Indices `r` (panel) and `j` (activation row) name the register tile.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn tile<const R: usize, const G: usize>(
    w: &PanelTile,
    a: &ActTile,
    out: &mut TileOut<R, G>,
) {
    let kb = w.kb;
    // Every load below is unchecked; these bounds make them sound.
    super::check_tile(w, a, R, G, LANES, true);
    let mut acc = [[_mm256_setzero_ps(); G]; R];
    // SAFETY: b < kb, c < 8, r < R and j < G keep every offset inside the asserted lengths.
    unsafe {
        for b in 0..kb {
            let fetch = w.next.takes(b);
            let mut dot = [[_mm256_setzero_si256(); G]; R];
            for j in 0..G {
                let start = _mm256_set1_epi32(*a.neg_corr.get_unchecked(j * kb + b));
                for r in 0..R {
                    dot[r][j] = start;
                }
            }
            for c in 0..QK / 4 {
                let mut wv = [_mm256_setzero_si256(); R];
                // Two 32-byte chunks make a cache line: one prefetch per line, into L2,
                // leaving L1 to the panels the other tiles still read.
                if c % 2 == 0 && fetch {
                    for r in 0..R {
                        let at = ((r * kb + b) * (QK / 4) + c) * 32;
                        _mm_prefetch::<_MM_HINT_T1>(w.next.bytes.as_ptr().add(at) as *const i8);
                    }
                }
                for r in 0..R {
                    let at = ((r * kb + b) * (QK / 4) + c) * 32;
                    wv[r] = _mm256_loadu_si256(w.q.as_ptr().add(at) as *const _);
                }
                for j in 0..G {
                    let p = a.q.as_ptr().add(j * a.k + b * QK + c * 4) as *const i32;
                    let x = _mm256_set1_epi32(p.read_unaligned());
                    for r in 0..R {
                        dot[r][j] = _mm256_dpbusd_avx_epi32(dot[r][j], wv[r], x);
                    }
                }
            }
            for r in 0..R {
                let sp = w.scales.as_ptr().add((r * kb + b) * LANES);
                let ws = _mm256_cvtph_ps(_mm_loadu_si128(sp as *const _));
                for j in 0..G {
                    let s = _mm256_set1_ps(*a.scales.get_unchecked(j * kb + b));
                    let t = _mm256_mul_ps(_mm256_cvtepi32_ps(dot[r][j]), s);
                    acc[r][j] = _mm256_fmadd_ps(t, ws, acc[r][j]);
                }
            }
        }
        for r in 0..R {
            for j in 0..G {
                _mm256_storeu_ps(out[r][j].as_mut_ptr(), acc[r][j]);
            }
        }
    }
}
