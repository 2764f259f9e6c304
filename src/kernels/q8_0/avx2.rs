//! The Q8_0 matmul with AVX2 alone, for CPUs without `vpdpbusd`: the AVX-VNNI kernel's
//! panels of 8 rows (`avxvnni.rs`), one row per 32-bit lane, with its one instruction
//! replaced by four. `maddubs` multiplies unsigned by signed bytes and adds pairs into
//! 16 bits; `w + 128` times an activation could overflow those, so the panels here hold
//! `w` itself, and each product is taken as `|w| · (a with w's sign)`, at most
//! 2 · 128 · 127 per pair. `madd` with ones then widens the pairs into the 32-bit lane.
//! The weights' absolute values are taken once per chunk and used for every activation
//! row of the tile, which is what the old kernel (one weight row at a time) could not do.

use super::{ActTile, PanelTile, TileOut, QK};
use std::arch::x86_64::*;

/// Rows per panel: one per 32-bit lane of a 256-bit vector.
const LANES: usize = 8;

/// `R` panels × `G` activation rows over all `kb` blocks; the results go to the first
/// eight lanes of each `out[r][j]`. The panels hold `w` (not `w + 128`), so no correction
/// term enters the sums.
// Indices `r` (panel) and `j` (activation row) name the register tile.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile<const R: usize, const G: usize>(
    w: &PanelTile,
    a: &ActTile,
    out: &mut TileOut<R, G>,
) {
    let kb = w.kb;
    // Every load below is unchecked; these bounds make them sound.
    super::check_tile(w, a, R, G, LANES, false);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); G]; R];
    // SAFETY: b < kb, c < 8, r < R and j < G keep every offset inside the asserted lengths.
    unsafe {
        for b in 0..kb {
            let fetch = w.next.takes(b);
            let mut dot = [[_mm256_setzero_si256(); G]; R];
            for c in 0..QK / 4 {
                let mut wv = [_mm256_setzero_si256(); R];
                let mut wabs = [_mm256_setzero_si256(); R];
                if c % 2 == 0 && fetch {
                    for r in 0..R {
                        let at = ((r * kb + b) * (QK / 4) + c) * 32;
                        _mm_prefetch::<_MM_HINT_T1>(w.next.bytes.as_ptr().add(at) as *const i8);
                    }
                }
                for r in 0..R {
                    let at = ((r * kb + b) * (QK / 4) + c) * 32;
                    wv[r] = _mm256_loadu_si256(w.q.as_ptr().add(at) as *const _);
                    wabs[r] = _mm256_abs_epi8(wv[r]);
                }
                for j in 0..G {
                    let p = a.q.as_ptr().add(j * a.k + b * QK + c * 4) as *const i32;
                    let x = _mm256_set1_epi32(p.read_unaligned());
                    for r in 0..R {
                        let pairs = _mm256_maddubs_epi16(wabs[r], _mm256_sign_epi8(x, wv[r]));
                        dot[r][j] = _mm256_add_epi32(dot[r][j], _mm256_madd_epi16(pairs, ones));
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
