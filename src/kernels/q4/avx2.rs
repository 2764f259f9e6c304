//! The 4-bit matmul with AVX2, on the same 16-row panels as the AVX-512 kernel, each
//! 64-byte chunk taken as two 32-byte halves (rows 0–7 and 8–15). AVX2 has no `vpdpbusd`:
//! `vpmaddubsw` multiplies the unsigned nibbles by the signed activation bytes and adds
//! neighbouring pairs into 16 bits, and `vpmaddwd` by ones adds those pairs into each
//! row's 32-bit lane. A nibble is at most 15, so no 16-bit sum can saturate: four products
//! (the low and the high nibbles' pairs) reach at most 4 × 15 × 128 = 7,680.
//!
//! AVX2 has 16 vector registers, so a tile is one panel (two halves) × up to 3 activation
//! rows: 6 accumulators and 6 integer sums, with the nibbles, the activations and two
//! constants beside them (about 20 live, so a few spill). Tiles of 2 rows prefilled no
//! faster on this project's machine (a 311-token prompt, medians of four: 646 against
//! 643 tokens/s).

use super::{ActTile, PanelTile, LANES, QK};
use std::arch::x86_64::*;

/// The largest activation tile this kernel takes: beyond it, registers spill.
pub(super) const MAX_ROWS: usize = 3;

/// One panel (`R` must be 1) × `G` activation rows over all `kb` blocks.
// Indices `j` (activation row) and `h` (half) name the register tile; iterators over two
// arrays at once would hide which accumulator is which.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile<const R: usize, const G: usize>(
    w: &PanelTile,
    a: &ActTile,
    out: &mut [[[f32; LANES]; G]; R],
) {
    let kb = w.kb;
    // Every load below is unchecked; these bounds make them sound.
    assert!(R == 1 && G <= MAX_ROWS);
    assert!(w.q.len() >= kb * LANES * QK / 2);
    assert!(w.d.len() >= kb * LANES && w.m.len() >= kb * LANES);
    assert!(a.k == kb * QK && a.q.len() >= G * a.k);
    assert!(a.scales.len() >= G * kb && a.sums.len() >= G * kb);
    let (low, ones) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi16(1));
    let mut acc = [[_mm256_setzero_ps(); 2]; G];
    // SAFETY: b < kb, c < 4, h < 2 and j < G keep every offset inside the asserted lengths.
    unsafe {
        for b in 0..kb {
            let mut dot = [[_mm256_setzero_si256(); 2]; G];
            for c in 0..4 {
                let at = (b * 4 + c) * 64;
                let mut lo = [_mm256_setzero_si256(); 2];
                let mut hi = [_mm256_setzero_si256(); 2];
                for h in 0..2 {
                    let v = _mm256_loadu_si256(w.q.as_ptr().add(at + 32 * h) as *const _);
                    lo[h] = _mm256_and_si256(v, low);
                    hi[h] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                }
                for j in 0..G {
                    let row = a.q.as_ptr().add(j * a.k + b * QK + c * 4);
                    let xl = _mm256_set1_epi32((row as *const i32).read_unaligned());
                    let xh = _mm256_set1_epi32((row.add(16) as *const i32).read_unaligned());
                    for h in 0..2 {
                        let pairs = _mm256_add_epi16(
                            _mm256_maddubs_epi16(lo[h], xl),
                            _mm256_maddubs_epi16(hi[h], xh),
                        );
                        dot[j][h] = _mm256_add_epi32(dot[j][h], _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
            for h in 0..2 {
                let at = b * LANES + 8 * h;
                let d = _mm256_cvtph_ps(_mm_loadu_si128(w.d.as_ptr().add(at) as *const _));
                let m = _mm256_cvtph_ps(_mm_loadu_si128(w.m.as_ptr().add(at) as *const _));
                for j in 0..G {
                    let s = *a.scales.get_unchecked(j * kb + b);
                    let sum = *a.sums.get_unchecked(j * kb + b);
                    let t = _mm256_mul_ps(_mm256_cvtepi32_ps(dot[j][h]), _mm256_set1_ps(s));
                    acc[j][h] = _mm256_fmadd_ps(t, d, acc[j][h]);
                    acc[j][h] = _mm256_fmadd_ps(_mm256_set1_ps(s * sum), m, acc[j][h]);
                }
            }
        }
        for j in 0..G {
            for h in 0..2 {
                _mm256_storeu_ps(out[0][j].as_mut_ptr().add(8 * h), acc[j][h]);
            }
        }
    }
}
