//! The Q8_0 matmul on arm64 with the dot-product extension (ARMv8.2 `sdot`; every Apple
//! M-series chip and most arm64 cores since 2018 have it). `sdot` multiplies signed bytes
//! by signed bytes and adds each group of four into a 32-bit lane, so the panels hold `w`
//! itself and no correction term is needed. A panel is 4 rows, one per lane of a 128-bit
//! register; the indexed form `sdot v.4s, w.16b, a.4b[i]` takes four activation bytes
//! from lane `i` of a register, so one 16-byte load of activations feeds four chunks.
//!
//! Rust's `vdotq_laneq_s32` is still nightly-only, so `sdot` (and `fcvtl`, for the f16
//! scales, whose Rust type is unstable too) are written as inline assembly; everything
//! else is ordinary NEON intrinsics. The next panels are fetched into L2 while these
//! compute, as on x86 (`prfm`, also assembly: Rust's `_prefetch` is unstable here).

use super::{ActTile, PanelTile, TileOut, QK};
use std::arch::aarch64::*;
use std::arch::asm;

/// Rows per panel: one per 32-bit lane of a 128-bit register.
const LANES: usize = 4;

/// `acc + Σ` over each lane's four bytes of `w` times the four bytes in lane `L` of `a`.
#[inline(always)]
unsafe fn sdot_lane<const L: i32>(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: register-only arithmetic; the caller's function enables `dotprod`.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{l}]",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            l = const L,
            options(pure, nomem, nostack),
        );
    }
    acc
}

/// Asks for the cache line at `p` to be brought into L2.
#[inline(always)]
unsafe fn prefetch_l2(p: *const u8) {
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe { asm!("prfm pldl2keep, [{p}]", p = in(reg) p, options(nostack, readonly)) };
}

/// Four f16 values (as bits) to f32.
#[inline(always)]
unsafe fn f16x4_to_f32(bits: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: register-only conversion, part of base arm64.
    unsafe {
        asm!(
            "fcvtl {o:v}.4s, {i:v}.4h",
            o = out(vreg) out,
            i = in(vreg) bits,
            options(pure, nomem, nostack),
        );
    }
    out
}

/// `R` panels × `G` activation rows over all `kb` blocks; the results go to the first
/// four lanes of each `out[r][j]`.
// Indices `r` (panel), `j` (activation row) and `c` (chunk) name the register tile.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn tile<const R: usize, const G: usize>(
    w: &PanelTile,
    a: &ActTile,
    out: &mut TileOut<R, G>,
) {
    let kb = w.kb;
    // Every load below is unchecked; these bounds make them sound.
    super::check_tile(w, a, R, G, LANES, false);
    let mut acc = [[vdupq_n_f32(0.0); G]; R];
    // SAFETY: b < kb, half < 2, c < 4, r < R and j < G keep every offset inside the
    // asserted lengths.
    unsafe {
        for b in 0..kb {
            let fetch = w.next.takes(b);
            let mut dot = [[vdupq_n_s32(0); G]; R];
            // Eight chunks of four bytes per block: two halves of four chunks, each half
            // one 16-byte load of every activation row.
            for half in 0..2 {
                let mut wv = [[vdupq_n_s8(0); 4]; R];
                // Four chunks of 16 bytes make a cache line.
                if fetch {
                    for r in 0..R {
                        let at = ((r * kb + b) * (QK / 4) + half * 4) * LANES * 4;
                        prefetch_l2(w.next.bytes.as_ptr().add(at));
                    }
                }
                for r in 0..R {
                    for c in 0..4 {
                        let at = ((r * kb + b) * (QK / 4) + half * 4 + c) * LANES * 4;
                        wv[r][c] = vld1q_s8(w.q.as_ptr().add(at) as *const i8);
                    }
                }
                for j in 0..G {
                    let x = vld1q_s8(a.q.as_ptr().add(j * a.k + b * QK + half * 16));
                    for r in 0..R {
                        let d = sdot_lane::<0>(dot[r][j], wv[r][0], x);
                        let d = sdot_lane::<1>(d, wv[r][1], x);
                        let d = sdot_lane::<2>(d, wv[r][2], x);
                        dot[r][j] = sdot_lane::<3>(d, wv[r][3], x);
                    }
                }
            }
            for r in 0..R {
                let sp = w.scales.as_ptr().add((r * kb + b) * LANES);
                let ws = f16x4_to_f32(vld1_u16(sp));
                for j in 0..G {
                    let s = *a.scales.get_unchecked(j * kb + b);
                    let t = vmulq_n_f32(vcvtq_f32_s32(dot[r][j]), s);
                    acc[r][j] = vfmaq_f32(acc[r][j], t, ws);
                }
            }
        }
        for r in 0..R {
            for j in 0..G {
                vst1q_f32(out[r][j].as_mut_ptr(), acc[r][j]);
            }
        }
    }
}
