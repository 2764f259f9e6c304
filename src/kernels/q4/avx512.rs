//! The 4-bit matmul with AVX-512 VNNI, register-blocked as the Q8_0 kernel is: lane i of
//! every 64-byte vector belongs to row i of a 16-row panel, so each lane sums its own row
//! and a tile ends in plain stores.
//!
//! One 64-byte load holds four bytes of nibbles for each of the 16 rows: their low
//! nibbles are weights `4c..4c + 4` of the block and their high nibbles weights
//! `16 + 4c..16 + 4c + 4`. A mask and a shift make two vectors of unsigned bytes (0..15),
//! and a `vpdpbusd` each multiplies them by the four activation bytes they pair with.

use super::{ActTile, PanelTile, LANES, QK};
use std::arch::x86_64::*;

/// `R` panels × `G` activation rows over all `kb` blocks.
// Indices `r` (panel) and `j` (activation row) name the register tile; iterators over two
// arrays at once would hide which accumulator is which.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
pub(super) unsafe fn tile<const R: usize, const G: usize>(
    w: &PanelTile,
    a: &ActTile,
    out: &mut [[[f32; LANES]; G]; R],
) {
    let kb = w.kb;
    // Every load below is unchecked; these bounds make them sound.
    assert!(w.q.len() >= R * kb * LANES * QK / 2);
    assert!(w.d.len() >= R * kb * LANES && w.m.len() >= R * kb * LANES);
    assert!(a.k == kb * QK && a.q.len() >= G * a.k);
    assert!(a.scales.len() >= G * kb && a.sums.len() >= G * kb);
    let low = _mm512_set1_epi8(0x0F);
    let mut acc = [[_mm512_setzero_ps(); G]; R];
    // SAFETY: b < kb, c < 4, r < R and j < G keep every offset inside the asserted lengths.
    unsafe {
        for b in 0..kb {
            let mut dot = [[_mm512_setzero_si512(); G]; R];
            for c in 0..4 {
                let mut lo = [_mm512_setzero_si512(); R];
                let mut hi = [_mm512_setzero_si512(); R];
                for r in 0..R {
                    let at = ((r * kb + b) * 4 + c) * 64;
                    let v = _mm512_loadu_si512(w.q.as_ptr().add(at) as *const _);
                    lo[r] = _mm512_and_si512(v, low);
                    hi[r] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
                }
                for j in 0..G {
                    let row = a.q.as_ptr().add(j * a.k + b * QK + c * 4);
                    let xl = _mm512_set1_epi32((row as *const i32).read_unaligned());
                    let xh = _mm512_set1_epi32((row.add(16) as *const i32).read_unaligned());
                    for r in 0..R {
                        dot[r][j] = _mm512_dpbusd_epi32(dot[r][j], lo[r], xl);
                        dot[r][j] = _mm512_dpbusd_epi32(dot[r][j], hi[r], xh);
                    }
                }
            }
            for r in 0..R {
                let at = (r * kb + b) * LANES;
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(w.d.as_ptr().add(at) as *const _));
                let m = _mm512_cvtph_ps(_mm256_loadu_si256(w.m.as_ptr().add(at) as *const _));
                for j in 0..G {
                    let s = *a.scales.get_unchecked(j * kb + b);
                    let sum = *a.sums.get_unchecked(j * kb + b);
                    let t = _mm512_mul_ps(_mm512_cvtepi32_ps(dot[r][j]), _mm512_set1_ps(s));
                    acc[r][j] = _mm512_fmadd_ps(t, d, acc[r][j]);
                    acc[r][j] = _mm512_fmadd_ps(_mm512_set1_ps(s * sum), m, acc[r][j]);
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
