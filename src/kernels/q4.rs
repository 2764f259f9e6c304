//! The 4-bit matrix multiply: weights kept as GGUF's Q4_1 blocks (per 32 weights an f16
//! scale `d`, an f16 minimum `m` and 32 four-bit integers `q`, so `w = d·q + m`), times
//! activations quantized to int8 as for Q8_0. A block is 20 bytes where Q8_0 takes 34:
//! decode at batch one reads every weight once, so its time follows these bytes.
//!
//! A block's dot product splits in two. With the activations `x = dx·qx`:
//! `Σ w·x = d·dx·Σ q·qx + m·dx·Σ qx`. The first sum is an integer dot of unsigned nibbles
//! by signed bytes, which `vpdpbusd` computes four at a time on the nibbles as they are
//! (no offset to take off); the second depends on the activations only, and its `Σ qx`
//! is already kept per block for the Q8_0 kernels.
//!
//! Three kernels: the portable reference ([`BatchedQ4::matmul`] on rows, one block at a
//! time), AVX-512 VNNI on panels of 16 rows (`q4/avx512.rs`), and AVX2 on the same panels
//! (`q4/avx2.rs`, which CPUs with AVX-VNNI but no AVX-512 run too). Other CPUs (arm64)
//! run the reference: correct, and slower than their Q8_0 kernel.

use super::q8_0::{check_blocks, quantize_rows, Kernel, OutPtr, QActs, QK};
use candle_core::Result;
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

/// The most activation rows an AVX2 tile takes.
#[cfg(target_arch = "x86_64")]
const AVX2_ROWS: usize = avx2::MAX_ROWS;
#[cfg(not(target_arch = "x86_64"))]
const AVX2_ROWS: usize = 3;

/// Bytes of one Q4_1 block in a GGUF file: `d`, `m` (f16 each), 16 bytes of nibbles.
pub const BLOCK_BYTES: usize = 20;
/// Rows per panel: one per 32-bit lane of AVX-512 (AVX2 takes a panel in two halves).
const LANES: usize = 16;

/// A weight matrix in Q4_1, laid out for one kernel.
pub struct BatchedQ4 {
    pub n: usize,
    pub k: usize,
    kernel: Kernel,
    layout: Layout,
}

enum Layout {
    /// The file's blocks as they are, row after row (the reference).
    Rows(Vec<u8>),
    /// Panels of 16 rows for AVX-512 VNNI or AVX2.
    Panels(Panels),
}

/// Weights in panels of 16 rows (the last padded with zero rows). Per panel and block:
/// four chunks of 64 bytes, chunk c holding bytes `4c..4c + 4` of each row's 16 bytes of
/// nibbles in turn (low nibbles: weights `4c..4c + 4`; high: `16 + 4c..16 + 4c + 4`),
/// then the 16 rows' `d` and `m` as f16.
struct Panels {
    q: Vec<u8>,
    d: Vec<u16>,
    m: Vec<u16>,
    count: usize,
    kb: usize,
    /// AVX-512 VNNI's tiles, or AVX2's.
    wide: bool,
}

impl Panels {
    fn new(data: &[u8], n: usize, kb: usize, wide: bool) -> Self {
        let count = n.div_ceil(LANES);
        let mut q = vec![0u8; count * kb * LANES * QK / 2];
        let (mut d, mut m) = (
            vec![0u16; count * kb * LANES],
            vec![0u16; count * kb * LANES],
        );
        for (bi, blk) in data.chunks_exact(BLOCK_BYTES).enumerate() {
            let (row, b) = (bi / kb, bi % kb);
            let (p, lane) = (row / LANES, row % LANES);
            let at = p * kb + b;
            d[at * LANES + lane] = u16::from_le_bytes([blk[0], blk[1]]);
            m[at * LANES + lane] = u16::from_le_bytes([blk[2], blk[3]]);
            for (c, four) in blk[4..].chunks_exact(4).enumerate() {
                q[((at * 4 + c) * LANES + lane) * 4..][..4].copy_from_slice(four);
            }
        }
        Self {
            q,
            d,
            m,
            count,
            kb,
            wide,
        }
    }
}

/// `R` panels of weights for a tile (see [`Panels`]).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct PanelTile<'a> {
    q: &'a [u8],
    d: &'a [u16],
    m: &'a [u16],
    kb: usize,
}

/// `G` activation rows for a tile: signed bytes, per block the scale and `Σ qx`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct ActTile<'a> {
    q: &'a [i8],
    scales: &'a [f32],
    sums: &'a [f32],
    /// Bytes per row of `q`.
    k: usize,
}

impl BatchedQ4 {
    /// From GGUF Q4_1 bytes of an `(n, k)` matrix, for the kernel the Q8_0 matrices run
    /// ([`Kernel::best`], which `INFERLAB_KERNEL` can lower to compare): AVX-VNNI without
    /// AVX-512 takes the AVX2 kernel, arm64 the reference.
    pub fn for_this_cpu(data: &[u8], n: usize, k: usize) -> Result<Self> {
        let kernel = match Kernel::best() {
            Kernel::AvxVnni => Kernel::Avx2,
            Kernel::Neon => Kernel::Scalar,
            k => k,
        };
        Self::from_q4_1(data, n, k, kernel)
    }

    /// From GGUF Q4_1 bytes of an `(n, k)` matrix, for `kernel` (the reference, or AVX-512
    /// VNNI or AVX2 where this CPU has it). Sizes are checked, not trusted: they come from
    /// a file.
    pub fn from_q4_1(data: &[u8], n: usize, k: usize, kernel: Kernel) -> Result<Self> {
        if !matches!(kernel, Kernel::Scalar | Kernel::Avx2 | Kernel::Avx512Vnni)
            || !Kernel::available().contains(&kernel)
        {
            candle_core::bail!("the 4-bit matmul has no {kernel:?} kernel on this CPU");
        }
        check_blocks("Q4_1", BLOCK_BYTES, data.len(), (n, k))?;
        let layout = match kernel {
            Kernel::Avx512Vnni => Layout::Panels(Panels::new(data, n, k / QK, true)),
            Kernel::Avx2 => Layout::Panels(Panels::new(data, n, k / QK, false)),
            _ => Layout::Rows(data.to_vec()),
        };
        Ok(Self {
            n,
            k,
            kernel,
            layout,
        })
    }

    /// The kernel this matrix runs on.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Bytes one pass over the matrix reads: 20 per block of 32 weights, padding rows
    /// included.
    pub fn bytes(&self) -> usize {
        match &self.layout {
            Layout::Rows(b) => b.len(),
            Layout::Panels(p) => p.q.len() + 2 * (p.d.len() + p.m.len()),
        }
    }

    /// Whether `x` is `m` rows of this matrix's width and the `(m, n)` result fits: the
    /// kernels' unchecked writes rely on it.
    fn check_input(&self, x: &[f32], m: usize) -> Result<()> {
        if m.checked_mul(self.k) != Some(x.len()) || m.checked_mul(self.n).is_none() {
            candle_core::bail!(
                "4-bit matmul: {} inputs are not {m} rows of {} (weight {}×{})",
                x.len(),
                self.k,
                self.n,
                self.k
            );
        }
        Ok(())
    }

    /// `(m, k) × (n, k)ᵀ → (m, n)`.
    pub fn matmul(&self, x: &[f32], m: usize) -> Result<Vec<f32>> {
        Ok(Self::matmul_many(&[self], x, m)?.remove(0))
    }

    /// Several matrices of the same input width on the same activations (Q, K and V; the
    /// MLP's gate and up): the rows quantized once, and on panels the cores work through
    /// all the matrices in one parallel pass. Each result as [`Self::matmul`].
    pub fn matmul_many(ws: &[&BatchedQ4], x: &[f32], m: usize) -> Result<Vec<Vec<f32>>> {
        let Some(first) = ws.first() else {
            return Ok(Vec::new());
        };
        for w in ws {
            w.check_input(x, m)?;
        }
        if ws
            .iter()
            .any(|w| w.k != first.k || w.kernel != first.kernel)
        {
            return ws.iter().map(|w| w.matmul(x, m)).collect();
        }
        let a = quantize_rows(x, m, first.k, first.kernel);
        let sums: Vec<f32> = a.neg_corr.iter().map(|&c| (-c / 128) as f32).collect();
        let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| vec![0.0f32; m * w.n]).collect();
        let dsts: Vec<OutPtr> = outs.iter_mut().map(|o| OutPtr(o.as_mut_ptr())).collect();
        let mut panels = Vec::new();
        for (w, dst) in ws.iter().zip(&dsts) {
            match &w.layout {
                Layout::Rows(blocks) => w.by_rows(blocks, &a, &sums, m, dst),
                Layout::Panels(p) => panels.push((p, w.n, dst)),
            }
        }
        by_panels(&panels, &a, &sums, m);
        Ok(outs)
    }

    /// The reference, in tasks of 64 weight rows.
    fn by_rows(&self, blocks: &[u8], a: &QActs, sums: &[f32], m: usize, dst: &OutPtr) {
        const CHUNK: usize = 64;
        let (n, kb) = (self.n, self.k / QK);
        (0..n.div_ceil(CHUNK)).into_par_iter().for_each(|c| {
            for row in c * CHUNK..(c * CHUNK + CHUNK).min(n) {
                let w = &blocks[row * kb * BLOCK_BYTES..(row + 1) * kb * BLOCK_BYTES];
                for j in 0..m {
                    let v = scalar_row(
                        w,
                        &a.qs[j * self.k..][..self.k],
                        &a.scales[j * kb..],
                        sums,
                        j * kb,
                    );
                    // SAFETY: column `row` belongs to this task alone and j < m.
                    unsafe { *dst.at(j * n + row) = v };
                }
            }
        });
    }
}

/// One weight row (`kb` Q4_1 blocks) against one activation row: per block the exact
/// integer dot of nibbles and bytes, scaled, plus the minimum times the block's sum.
pub fn scalar_row(w: &[u8], aq: &[i8], a_s: &[f32], sums: &[f32], s0: usize) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
        let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
        let m = half::f16::from_le_bytes([blk[2], blk[3]]).to_f32();
        let x = &aq[b * QK..][..QK];
        let dot: i32 = blk[4..]
            .iter()
            .enumerate()
            .map(|(i, &byte)| {
                i32::from(byte & 0x0F) * i32::from(x[i])
                    + i32::from(byte >> 4) * i32::from(x[16 + i])
            })
            .sum();
        let s = a_s[b];
        acc += dot as f32 * s * d + m * s * sums[s0 + b];
    }
    acc
}

/// The SIMD kernel over all panels of one or more matrices, each `(panels, n,
/// result)`, in tasks of a few panels each.
fn by_panels(jobs: &[(&Panels, usize, &OutPtr)], a: &QActs, sums: &[f32], m: usize) {
    let tasks: Vec<(usize, usize, usize)> = jobs
        .iter()
        .enumerate()
        .flat_map(|(i, (p, _, _))| {
            let per_task = (p.count.div_ceil(16).clamp(2, 8) + 1) & !1;
            (0..p.count.div_ceil(per_task))
                .map(move |t| (i, t * per_task, ((t + 1) * per_task).min(p.count)))
        })
        .collect();
    tasks.into_par_iter().for_each(|(i, start, end)| {
        let (p, n, dst) = jobs[i];
        panel_range(p, (start, end), a, sums, m, n, dst);
    });
}

/// Panels `start..end` against every activation row, in register tiles of up to 2
/// panels × 6 activation rows (AVX-512) or 1 × 3 (AVX2's 16 registers).
fn panel_range(
    p: &Panels,
    (start, end): (usize, usize),
    a: &QActs,
    sums: &[f32],
    m: usize,
    n: usize,
    dst: &OutPtr,
) {
    let (most_r, most_g) = if p.wide { (2, 6) } else { (1, AVX2_ROWS) };
    let mut at = start;
    while at < end {
        let r = if end - at >= 2 { most_r } else { 1 };
        let mut j0 = 0;
        while j0 < m {
            let g = (m - j0).min(most_g);
            match (r, g) {
                (2, 1) => tile::<2, 1>(p, at, a, sums, j0, n, dst),
                (2, 2) => tile::<2, 2>(p, at, a, sums, j0, n, dst),
                (2, 3) => tile::<2, 3>(p, at, a, sums, j0, n, dst),
                (2, 4) => tile::<2, 4>(p, at, a, sums, j0, n, dst),
                (2, 5) => tile::<2, 5>(p, at, a, sums, j0, n, dst),
                (2, _) => tile::<2, 6>(p, at, a, sums, j0, n, dst),
                (_, 1) => tile::<1, 1>(p, at, a, sums, j0, n, dst),
                (_, 2) => tile::<1, 2>(p, at, a, sums, j0, n, dst),
                (_, 3) => tile::<1, 3>(p, at, a, sums, j0, n, dst),
                (_, 4) => tile::<1, 4>(p, at, a, sums, j0, n, dst),
                (_, 5) => tile::<1, 5>(p, at, a, sums, j0, n, dst),
                _ => tile::<1, 6>(p, at, a, sums, j0, n, dst),
            }
            j0 += g;
        }
        at += r;
    }
}

/// Panels `at..at + R` × activation rows `j0..j0 + G`, written into the tile's own columns
/// of the result (a last panel's padding rows dropped).
fn tile<const R: usize, const G: usize>(
    p: &Panels,
    at: usize,
    a: &QActs,
    sums: &[f32],
    j0: usize,
    n: usize,
    dst: &OutPtr,
) {
    let kb = p.kb;
    let k = kb * QK;
    let per = kb * LANES;
    let w = PanelTile {
        q: &p.q[at * per * QK / 2..(at + R) * per * QK / 2],
        d: &p.d[at * per..(at + R) * per],
        m: &p.m[at * per..(at + R) * per],
        kb,
    };
    let acts = ActTile {
        q: &a.qs[j0 * k..(j0 + G) * k],
        scales: &a.scales[j0 * kb..(j0 + G) * kb],
        sums: &sums[j0 * kb..(j0 + G) * kb],
        k,
    };
    // Written only by the x86 tiles: elsewhere no panel is ever built (`from_q4_1`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut out = [[[0.0f32; LANES]; G]; R];
    #[cfg(target_arch = "x86_64")]
    // SAFETY: wide panels exist only where AVX-512 VNNI was detected, the others only
    // where AVX2, FMA and F16C were (`from_q4_1`); AVX2 tiles are 1 × up to 3
    // (`panel_range`).
    unsafe {
        if p.wide {
            avx512::tile::<R, G>(&w, &acts, &mut out)
        } else {
            avx2::tile::<R, G>(&w, &acts, &mut out)
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (&w, &acts);
    for (r, panel) in out.iter().enumerate() {
        let row0 = (at + r) * LANES;
        let valid = LANES.min(n.saturating_sub(row0));
        for (j, lanes) in panel.iter().enumerate() {
            // SAFETY: columns row0..row0 + valid belong to this task; j0 + j < m.
            unsafe {
                std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst.at((j0 + j) * n + row0), valid)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::pseudo_random;

    /// Raw Q4_1 bytes for an `(n, k)` matrix: every nibble occurs, scales and minimums of
    /// both signs.
    fn raw_q4(n: usize, k: usize, seed: u64) -> Vec<u8> {
        let noise = pseudo_random(n * k / QK * 18, seed);
        let mut data = Vec::with_capacity(n * k / QK * BLOCK_BYTES);
        for blk in noise.chunks_exact(18) {
            data.extend_from_slice(&half::f16::from_f32(blk[0] * 0.02).to_le_bytes());
            data.extend_from_slice(&half::f16::from_f32(blk[1] * 0.1).to_le_bytes());
            data.extend(
                blk[2..]
                    .iter()
                    .map(|v| ((v + 1.0) * 128.0).clamp(0.0, 255.0) as u8),
            );
        }
        data
    }

    /// The dequantized weights, row-major.
    fn dequant(data: &[u8]) -> Vec<f32> {
        let mut out = Vec::new();
        for blk in data.chunks_exact(BLOCK_BYTES) {
            let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            let m = half::f16::from_le_bytes([blk[2], blk[3]]).to_f32();
            let q = &blk[4..];
            out.extend(q.iter().map(|&b| d * f32::from(b & 0x0F) + m));
            out.extend(q.iter().map(|&b| d * f32::from(b >> 4) + m));
        }
        out
    }

    #[test]
    fn every_kernel_matches_the_f32_product_of_the_same_weights() {
        // 37 rows: a last panel with padding; 1..8 activation rows: every tile shape.
        let (n, k) = (37, 96);
        let data = raw_q4(n, k, 7);
        let w = dequant(&data);
        for kernel in [Kernel::Scalar, Kernel::Avx2, Kernel::Avx512Vnni] {
            if !Kernel::available().contains(&kernel) {
                continue;
            }
            let q4 = BatchedQ4::from_q4_1(&data, n, k, kernel).unwrap();
            assert!(q4.bytes() >= data.len());
            for m in 1..=8 {
                let x: Vec<f32> = pseudo_random(m * k, 100 + m as u64);
                let got = q4.matmul(&x, m).unwrap();
                for j in 0..m {
                    for r in 0..n {
                        let want: f32 = (0..k).map(|i| w[r * k + i] * x[j * k + i]).sum();
                        let scale: f32 = (0..k).map(|i| (w[r * k + i] * x[j * k + i]).abs()).sum();
                        let err = (got[j * n + r] - want).abs();
                        // The activations' int8 rounding: well under 1% of the magnitudes.
                        assert!(
                            err <= 0.01 * scale + 1e-4,
                            "{kernel:?} m={m} ({j},{r}): {} vs {want}",
                            got[j * n + r]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_simd_kernels_equal_the_reference() {
        let (n, k) = (50, 576);
        let data = raw_q4(n, k, 3);
        let slow = BatchedQ4::from_q4_1(&data, n, k, Kernel::Scalar).unwrap();
        let x = pseudo_random(7 * k, 9);
        let a = slow.matmul(&x, 7).unwrap();
        let mut ran = 0;
        for kernel in [Kernel::Avx2, Kernel::Avx512Vnni] {
            if !Kernel::available().contains(&kernel) {
                continue;
            }
            let fast = BatchedQ4::from_q4_1(&data, n, k, kernel).unwrap();
            for (u, v) in a.iter().zip(&fast.matmul(&x, 7).unwrap()) {
                // Same integer sums; only the float accumulation order differs.
                assert!(
                    (u - v).abs() <= 1e-4 * (1.0 + u.abs()),
                    "{kernel:?}: {u} vs {v}"
                );
            }
            ran += 1;
        }
        // Every x86-64 machine this project runs on has AVX2.
        #[cfg(target_arch = "x86_64")]
        assert!(ran >= 1, "no SIMD kernel ran");
        #[cfg(not(target_arch = "x86_64"))]
        let _ = ran;
    }

    #[test]
    fn sizes_that_do_not_match_are_refused() {
        let data = raw_q4(2, 64, 1);
        assert!(BatchedQ4::from_q4_1(&data, 2, 65, Kernel::Scalar).is_err());
        assert!(BatchedQ4::from_q4_1(&data[1..], 2, 64, Kernel::Scalar).is_err());
        assert!(BatchedQ4::from_q4_1(&data, 3, 64, Kernel::Scalar).is_err());
        let w = BatchedQ4::from_q4_1(&data, 2, 64, Kernel::Scalar).unwrap();
        assert!(w.matmul(&[0.0; 63], 1).is_err());
    }
}
