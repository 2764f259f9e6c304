//! The Q8_0 matrix multiply: int8 weights (a scale per block of 32) times activations
//! quantized to int8 the same way. Each weight block is read once for all activation rows,
//! which is why a batch of B rows costs far less than B single rows.
//!
//! Five kernels compute the same thing ([`Kernel`]): the portable scalar reference
//! ([`scalar_dot_rows`]) and four register-blocked kernels that lay the weights out in
//! panels, one row per vector lane: 16 rows on AVX-512 VNNI (`q8_0/avx512.rs`), 8 on
//! AVX-VNNI (`q8_0/avxvnni.rs`), 8 on plain AVX2 (`q8_0/avx2.rs`), which builds each
//! `vpdpbusd` from `maddubs` and `madd`, and 4 on arm64 with `sdot` (`q8_0/neon.rs`). The
//! tests run every kernel this CPU has against the scalar reference.

use candle_core::Result;
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avxvnni;
#[cfg(target_arch = "aarch64")]
mod neon;

pub(crate) const QK: usize = 32;

/// Rows per panel of the widest layout (one per 32-bit lane of a 512-bit vector).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const MAX_LANES: usize = 16;

/// Which kernel a matrix runs on; its layout follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Plain Rust, one block at a time: the reference.
    Scalar,
    /// `maddubs` and `madd` on panels of 8 weight rows (CPUs with AVX2 but no VNNI): the
    /// AVX-VNNI tiles, with four instructions where that kernel has one.
    Avx2,
    /// `vpdpbusd` on 256-bit vectors (CPUs with AVX-VNNI but no AVX-512): panels of 8
    /// weight rows, a register tile of up to 2 panels × 3 rows (16 vector registers).
    AvxVnni,
    /// `vpdpbusd` on panels of 16 weight rows, a register tile of up to 2 panels × 6 rows.
    Avx512Vnni,
    /// arm64's `sdot` (the dot-product extension) on panels of 4 weight rows, a register
    /// tile of up to 2 panels × 5 rows (32 vector registers).
    Neon,
}

impl Kernel {
    /// The kernels this CPU can run, the reference first.
    pub fn available() -> Vec<Kernel> {
        let mut out = vec![Kernel::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") && has!("f16c") {
                out.push(Kernel::Avx2);
            }
            if has!("avx2") && has!("fma") && has!("f16c") && has!("avxvnni") {
                out.push(Kernel::AvxVnni);
            }
            if has!("avx512f") && has!("avx512bw") && has!("avx512vnni") && has!("f16c") {
                out.push(Kernel::Avx512Vnni);
            }
        }
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            out.push(Kernel::Neon);
        }
        out
    }

    /// The fastest kernel here. `INFERLAB_KERNEL=scalar|avx2|avxvnni` picks a slower one
    /// to compare.
    pub fn best() -> Kernel {
        static BEST: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            let have = Kernel::available();
            let wanted = match std::env::var("INFERLAB_KERNEL").as_deref() {
                Ok("scalar") => Some(Kernel::Scalar),
                Ok("avx2") => Some(Kernel::Avx2),
                Ok("avxvnni") => Some(Kernel::AvxVnni),
                _ => None,
            };
            match wanted {
                Some(k) if have.contains(&k) => k,
                _ => *have.last().unwrap_or(&Kernel::Scalar),
            }
        })
    }
}

/// A weight matrix in Q8_0, laid out for one kernel.
pub struct BatchedQ8 {
    pub n: usize,
    pub k: usize,
    kernel: Kernel,
    layout: Layout,
}

enum Layout {
    /// Row by row: each row's block scales, and its bytes in block order (the reference).
    Rows { scales: Vec<f32>, qs: Vec<i8> },
    /// Panels of 16 rows (AVX-512), 8 (AVX-VNNI, AVX2) or 4 (arm64) for the
    /// register-blocked kernels.
    Panels(Panels),
}

/// 64 bytes on a cache-line boundary, so no vector load of the panels straddles two lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Weights in panels of `lanes` rows (the last one padded with zero rows). Per panel and
/// block: eight chunks of `4 · lanes` bytes, where chunk c holds bytes `4c..4c + 4` of
/// each row in turn, and `lanes` f16 scales. Panels follow each other, blocks in order.
/// The `vpdpbusd` kernels multiply unsigned bytes, so for them a byte holds `w + 128`;
/// for AVX2 and arm64 it holds `w`.
struct Panels {
    lines: Vec<Line>,
    scales: Vec<u16>,
    lanes: usize,
    count: usize,
    kb: usize,
    kernel: Kernel,
}

impl Panels {
    /// From GGUF Q8_0 blocks (34 bytes each: f16 scale, 32 int8), `kb` per row, laid out
    /// for `kernel` (one of the panel kernels).
    fn new(data: &[u8], n: usize, kb: usize, kernel: Kernel) -> Panels {
        let lanes = match kernel {
            Kernel::Avx512Vnni => 16,
            Kernel::Neon => 4,
            _ => 8,
        };
        // XOR with 0x80 turns an int8 w into the unsigned byte w + 128, which `vpdpbusd`
        // needs; `maddubs` (through signs) and `sdot` take w as it is.
        let offset = match kernel {
            Kernel::Avx2 | Kernel::Neon => 0,
            _ => 0x80,
        };
        let count = n.div_ceil(lanes);
        // Padding rows: w = 0 with scale 0. A panel is a whole number of lines:
        // kb · lanes · 32 bytes, and lanes is 4, 8 or 16.
        let mut lines = vec![Line([offset; 64]); count * kb * lanes * QK / 64];
        let mut scales = vec![0u16; count * kb * lanes];
        // SAFETY: a Line is 64 plain bytes with no padding.
        let bytes: &mut [u8] = unsafe {
            std::slice::from_raw_parts_mut(lines.as_mut_ptr() as *mut u8, lines.len() * 64)
        };
        for (bi, blk) in data.chunks_exact(34).enumerate() {
            let (row, b) = (bi / kb, bi % kb);
            let (p, lane) = (row / lanes, row % lanes);
            let at = p * kb + b;
            scales[at * lanes + lane] = u16::from_le_bytes([blk[0], blk[1]]);
            for (c, four) in blk[2..].chunks_exact(4).enumerate() {
                let chunk = &mut bytes[((at * QK / 4 + c) * lanes + lane) * 4..][..4];
                for (d, s) in chunk.iter_mut().zip(four) {
                    *d = s ^ offset;
                }
            }
        }
        Panels {
            lines,
            scales,
            lanes,
            count,
            kb,
            kernel,
        }
    }

    /// Bytes of panels `p..p + r`.
    fn bytes(&self, p: usize, r: usize) -> &[u8] {
        let per = self.kb * self.lanes * QK;
        // SAFETY: a Line is 64 plain bytes with no padding.
        let all = unsafe {
            std::slice::from_raw_parts(self.lines.as_ptr() as *const u8, self.lines.len() * 64)
        };
        &all[p * per..(p + r) * per]
    }
}

/// `R` consecutive panels of weights for a tile: per panel and block, the bytes (four per
/// lane per vector, as [`Panels`] stores them for the kernel) and the f16 scales.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
struct PanelTile<'a> {
    q: &'a [u8],
    scales: &'a [u16],
    kb: usize,
    next: Prefetch<'a>,
}

/// The panels a task reads next, fetched into L2 while the tiles compute on the current
/// ones. Without it the first tile over each panel waits on main memory and the others
/// find the panel cached, so reading and arithmetic take turns instead of overlapping
/// (on two Zen 4 cores, a decode step for 8 requests takes about 30% less time with it).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[derive(Clone, Copy)]
struct Prefetch<'a> {
    /// Their bytes, laid out like the current panels' (empty: nothing to prefetch).
    bytes: &'a [u8],
    /// This tile fetches the blocks `b` with `b % of == share`, so the tiles over the same
    /// panels split the work.
    share: usize,
    of: usize,
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl Prefetch<'_> {
    /// Whether this tile fetches block `b` of the next panels.
    fn takes(&self, b: usize) -> bool {
        !self.bytes.is_empty() && b % self.of == self.share
    }
}

/// The bounds every tile kernel's unchecked loads rely on: `r` panels of `lanes` weight
/// rows over `w.kb` blocks (and as many of the next panels, when they are prefetched), and
/// `g` activation rows with a scale per block, and with `-128 · Σa` per block where
/// `corrections` (the `vpdpbusd` kernels). Panics where one fails.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn check_tile(w: &PanelTile, a: &ActTile, r: usize, g: usize, lanes: usize, corrections: bool) {
    let (kb, rows) = (w.kb, r * w.kb * lanes);
    assert!(w.q.len() >= rows * QK && w.scales.len() >= rows);
    assert!(w.next.bytes.is_empty() || w.next.bytes.len() >= rows * QK);
    assert!(a.k == kb * QK && a.q.len() >= g * a.k && a.scales.len() >= g * kb);
    assert!(!corrections || a.neg_corr.len() >= g * kb);
}

/// `G` activation rows for a tile: signed bytes, per block a scale and `-128 · Σa`, row j
/// at `j · k`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
struct ActTile<'a> {
    q: &'a [i8],
    scales: &'a [f32],
    // Only the `vpdpbusd` kernels (x86) read it.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    neg_corr: &'a [i32],
    /// Bytes per row of `q`; the scales and corrections have `k / 32` per row.
    k: usize,
}

/// A tile's results: `out[r][j]` holds the rows of panel `r` for activation row `j` (in
/// the first `lanes` entries: 8 for the 256-bit kernels, 4 on arm64).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
type TileOut<const R: usize, const G: usize> = [[[f32; MAX_LANES]; G]; R];

/// Activations quantized to Q8_0 row by row, as candle does for its own dot products.
pub(crate) struct QActs {
    pub(crate) scales: Vec<f32>,
    pub(crate) qs: Vec<i8>,
    /// Per row and block `-128 · Σq`: what the AVX-512 kernel's unsigned weights add.
    pub(crate) neg_corr: Vec<i32>,
}

/// One block of 32 activations to int8 with scale `max|x| / 127`; returns the scale, NaN
/// if the block holds a NaN.
fn quantize_block(chunk: &[f32], out: &mut [i8]) -> f32 {
    // `f32::max` skips a NaN, and a NaN times the inverse scale becomes a 0 byte: the NaN
    // would vanish into finite results. Carried into the scale, it reaches the logits,
    // where the forward pass reports it.
    let amax = chunk.iter().fold(0.0f32, |a, &v| {
        if a.is_nan() || v.is_nan() {
            f32::NAN
        } else {
            a.max(v.abs())
        }
    });
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (o, &v) in out.iter_mut().zip(chunk) {
        // Round half away from zero, as `f32::round` does, without its libm call.
        let x = v * id;
        *o = (x + 0.5f32.copysign(x)) as i8;
    }
    d
}

/// Quantizes `m` rows of `k` activations. A big batch is split over the threads: done on
/// one, it was an eighth of a 32-row step while the other core waited.
pub(crate) fn quantize_rows(x: &[f32], m: usize, k: usize, kernel: Kernel) -> QActs {
    const PER_TASK: usize = 256;
    let blocks = m * (k / QK);
    let mut a = QActs {
        scales: vec![0.0; blocks],
        qs: vec![0i8; m * k],
        neg_corr: vec![0; blocks],
    };
    if blocks < 2 * PER_TASK {
        quantize_blocks(x, &mut a.qs, &mut a.scales, &mut a.neg_corr, kernel);
        return a;
    }
    x.par_chunks(PER_TASK * QK)
        .zip(a.qs.par_chunks_mut(PER_TASK * QK))
        .zip(a.scales.par_chunks_mut(PER_TASK))
        .zip(a.neg_corr.par_chunks_mut(PER_TASK))
        .for_each(|(((x, q), s), c)| quantize_blocks(x, q, s, c, kernel));
    a
}

/// Blocks of 32 activations: their bytes, scales and `-128 · Σq`.
fn quantize_blocks(
    x: &[f32],
    qs: &mut [i8],
    scales: &mut [f32],
    neg_corr: &mut [i32],
    kernel: Kernel,
) {
    let blocks = x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK));
    for ((chunk, out), (s, c)) in blocks.zip(scales.iter_mut().zip(neg_corr.iter_mut())) {
        #[cfg(target_arch = "x86_64")]
        let (d, sum) = if kernel == Kernel::Avx512Vnni {
            // SAFETY: this kernel is only chosen where its features were detected.
            unsafe { avx512::quantize_block(chunk, out) }
        } else {
            let d = quantize_block(chunk, out);
            (d, out.iter().map(|&q| q as i32).sum())
        };
        #[cfg(not(target_arch = "x86_64"))]
        let (d, sum) = {
            let _ = kernel;
            let d = quantize_block(chunk, out);
            (d, out.iter().map(|&q| q as i32).sum::<i32>())
        };
        // candle stores the scale as f16; round the same way so results agree.
        *s = half::f16::from_f32(d).to_f32();
        *c = -128 * sum;
    }
}

/// An `(n, k)` matrix of `name` blocks, `block_bytes` each per 32 weights, against the
/// `len` bytes it came with. Sizes come from a model file: checked, not trusted.
pub(crate) fn check_blocks(
    name: &str,
    block_bytes: usize,
    len: usize,
    (n, k): (usize, usize),
) -> Result<()> {
    if n == 0 || k == 0 || !k.is_multiple_of(QK) {
        candle_core::bail!("{name} matrix ({n}, {k}): rows must be whole blocks of {QK}");
    }
    n.checked_mul(k / QK)
        .filter(|b| b.checked_mul(block_bytes) == Some(len))
        .ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "{name} matrix ({n}, {k}) does not match its {len} bytes"
            ))
        })?;
    Ok(())
}

impl BatchedQ8 {
    /// From GGUF Q8_0 bytes, laid out for the fastest kernel this CPU runs.
    pub fn for_this_cpu(data: &[u8], n: usize, k: usize) -> Result<Self> {
        Self::from_q8_0(data, n, k, Kernel::best())
    }

    /// From GGUF Q8_0 bytes (per block an f16 scale and 32 int8) of an `(n, k)` matrix,
    /// for `kernel`, which must be one this CPU has. Sizes are checked, not trusted: they
    /// come from a model file.
    pub fn from_q8_0(data: &[u8], n: usize, k: usize, kernel: Kernel) -> Result<Self> {
        if !Kernel::available().contains(&kernel) {
            candle_core::bail!("this CPU cannot run the {kernel:?} kernel");
        }
        check_blocks("Q8_0", 34, data.len(), (n, k))?;
        let layout = if kernel != Kernel::Scalar {
            Layout::Panels(Panels::new(data, n, k / QK, kernel))
        } else {
            let scales = data.chunks_exact(34);
            Layout::Rows {
                scales: scales
                    .clone()
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                qs: scales
                    .flat_map(|b| b[2..].iter().map(|&x| x as i8))
                    .collect(),
            }
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

    /// Bytes one pass over the matrix reads: per block of 32 weights the 32 int8 and the
    /// scale (f16 in panels, f32 in rows), padding rows included.
    pub fn bytes(&self) -> usize {
        match &self.layout {
            Layout::Rows { scales, qs } => scales.len() * 4 + qs.len(),
            Layout::Panels(p) => p.lines.len() * 64 + p.scales.len() * 2,
        }
    }

    /// Whether `x` is `m` rows of this matrix's width and the `(m, n)` result fits. The
    /// unsafe writes of the kernels rely on these sizes, so they are checked here, where a
    /// wrong shape becomes an error instead of a stray write.
    fn check_input(&self, x: &[f32], m: usize) -> Result<()> {
        if m.checked_mul(self.k) != Some(x.len()) || m.checked_mul(self.n).is_none() {
            candle_core::bail!(
                "batched matmul: {} inputs are not {m} rows of {} (weight {}×{})",
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
        self.check_input(x, m)?;
        let a = quantize_rows(x, m, self.k, self.kernel);
        let mut out = vec![0.0f32; m * self.n];
        let dst = OutPtr(out.as_mut_ptr());
        match &self.layout {
            Layout::Rows { scales, qs } => self.by_rows(scales, qs, &a, m, &dst),
            #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
            Layout::Panels(p) => by_panels(&[(p, self.n, &dst)], &a, m),
            #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
            Layout::Panels(_) => unreachable!("panels are only built for x86-64 and arm64"),
        }
        Ok(out)
    }

    /// Several matrices of the same input width on the same activations, in one parallel
    /// pass: the rows are quantized once, and the cores work through all the matrices'
    /// panels together (Q, K and V share their input, as do the MLP's gate and up), so
    /// they are woken once instead of once per matrix. Each result as [`Self::matmul`].
    pub fn matmul_many(ws: &[&BatchedQ8], x: &[f32], m: usize) -> Result<Vec<Vec<f32>>> {
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        return ws.iter().map(|w| w.matmul(x, m)).collect();
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Self::matmul_many_panels(ws, x, m)
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn matmul_many_panels(ws: &[&BatchedQ8], x: &[f32], m: usize) -> Result<Vec<Vec<f32>>> {
        let Some(first) = ws.first() else {
            return Ok(Vec::new());
        };
        let same = ws
            .iter()
            .all(|w| w.k == first.k && w.kernel == first.kernel);
        let panels: Vec<&Panels> = ws
            .iter()
            .filter_map(|w| match &w.layout {
                Layout::Panels(p) => Some(p),
                Layout::Rows { .. } => None,
            })
            .collect();
        if !same || panels.len() != ws.len() {
            return ws.iter().map(|w| w.matmul(x, m)).collect();
        }
        for w in ws {
            w.check_input(x, m)?;
        }
        let a = quantize_rows(x, m, first.k, first.kernel);
        let mut outs: Vec<Vec<f32>> = ws.iter().map(|w| vec![0.0f32; m * w.n]).collect();
        let dsts: Vec<OutPtr> = outs.iter_mut().map(|o| OutPtr(o.as_mut_ptr())).collect();
        let jobs: Vec<(&Panels, usize, &OutPtr)> = panels
            .iter()
            .zip(ws)
            .zip(&dsts)
            .map(|((p, w), d)| (*p, w.n, d))
            .collect();
        by_panels(&jobs, &a, m);
        Ok(outs)
    }

    /// The reference, in tasks of 64 weight rows, each row against every activation row.
    fn by_rows(&self, w_s: &[f32], w_q: &[i8], a: &QActs, m: usize, dst: &OutPtr) {
        // 64 rows rather than 32: on two cores fewer tasks mean fewer rayon wake-ups.
        const CHUNK: usize = 64;
        let (n, kb) = (self.n, self.k / QK);
        (0..n.div_ceil(CHUNK)).into_par_iter().for_each(|c| {
            let mut col = vec![0.0f32; m];
            for row in c * CHUNK..(c * CHUNK + CHUNK).min(n) {
                let ws = &w_s[row * kb..(row + 1) * kb];
                let wq = &w_q[row * self.k..(row + 1) * self.k];
                scalar_dot_rows(ws, wq, &a.scales, &a.qs, m, kb, &mut col);
                for (r, v) in col.iter().enumerate() {
                    // SAFETY: column `row` belongs to this task alone and r < m.
                    unsafe { *dst.at(r * n + row) = *v };
                }
            }
        });
    }
}

/// The result buffer shared by the matmul's tasks; each writes only its own columns.
pub(crate) struct OutPtr(pub(crate) *mut f32);
// SAFETY: tasks write disjoint elements and the buffer outlives the parallel loop.
unsafe impl Sync for OutPtr {}
impl OutPtr {
    /// A method (not field access) so closures capture the whole Sync wrapper.
    pub(crate) fn at(&self, i: usize) -> *mut f32 {
        // SAFETY: callers index inside the buffer.
        unsafe { self.0.add(i) }
    }
}

/// The `vpdpbusd` kernels over all panels of one or more matrices, each `(panels, n,
/// result)`: tasks of a few panels each, and in a task register tiles of R panels × G
/// activation rows. One activation row (a single decode
/// step) is bound by reading the weights, so it takes four panels at a time to keep more
/// loads in flight; from two rows on, 2 × 6 tiles make the most of AVX-512's 32 vector
/// registers (2 × 3 of AVX-VNNI's 16).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn by_panels(jobs: &[(&Panels, usize, &OutPtr)], a: &QActs, m: usize) {
    let tasks: Vec<(usize, usize, usize)> = jobs
        .iter()
        .enumerate()
        .flat_map(|(i, (p, _, _))| panel_tasks(p).map(move |(s, e)| (i, s, e)))
        .collect();
    tasks.into_par_iter().for_each(|(i, start, end)| {
        let (p, n, dst) = jobs[i];
        panel_range(p, start, end, a, m, n, dst);
    });
}

/// A matrix's panels in tasks: enough for both cores to share the work evenly, few
/// enough that waking them costs little; an even count per task so two-panel tiles fit.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn panel_tasks(p: &Panels) -> impl Iterator<Item = (usize, usize)> + Send + '_ {
    let per_task = (p.count.div_ceil(16).clamp(2, 8) + 1) & !1;
    (0..p.count.div_ceil(per_task)).map(move |t| (t * per_task, ((t + 1) * per_task).min(p.count)))
}

/// Panels `start..end` against every activation row.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn panel_range(p: &Panels, start: usize, end: usize, a: &QActs, m: usize, n: usize, dst: &OutPtr) {
    let mut at = start;
    while at < end {
        let r = match (p.lanes, m, end - at) {
            (16, 1..=3, 4..) | (_, 1, 4..) => 4,
            (_, _, 2..) => 2,
            _ => 1,
        };
        // The panels after these, past the end of this task too: rayon hands a thread
        // neighbouring tasks in order, so they are usually the ones it reads next.
        let next = if at + 2 * r <= p.count {
            p.bytes(at + r, r)
        } else {
            &[]
        };
        match r {
            4 => panel_rows::<4>(p, at, a, m, n, dst, next),
            2 => panel_rows::<2>(p, at, a, m, n, dst, next),
            _ => panel_rows::<1>(p, at, a, m, n, dst, next),
        }
        at += r;
    }
}

/// Panels `at..at + R` against every activation row, in tiles of as many rows as the
/// registers hold, of nearly equal size (8 rows: 4 + 4, not 6 + 2); the tiles share the
/// prefetching of `next`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn panel_rows<const R: usize>(
    p: &Panels,
    at: usize,
    a: &QActs,
    m: usize,
    n: usize,
    dst: &OutPtr,
    next: &[u8],
) {
    // Accumulators: two per tile cell (int32 block sums and the float total), plus R
    // weight vectors and one broadcast, within 32 registers (16 for 256-bit vectors).
    // AVX2 keeps the weights' absolute values beside them, one more register per panel;
    // arm64 has 32 registers but keeps four chunks of weights per panel (one 16-byte
    // load of activations feeds four `sdot`s).
    let most = match (p.kernel, R) {
        (Kernel::Avx512Vnni, _) => 6,
        (Kernel::Neon, 1) => 6,
        (Kernel::Neon, 2) => 5,
        (Kernel::Avx2, 1) => 4,
        (Kernel::Avx2, 2) => 4,
        (_, 1) => 6,
        (_, 2) => 3,
        _ => 1,
    };
    let tiles = m.div_ceil(most);
    let mut j0 = 0;
    for t in 0..tiles {
        let g = m / tiles + usize::from(t < m % tiles);
        let next = Prefetch {
            bytes: next,
            share: t,
            of: tiles,
        };
        match g {
            1 => tile::<R, 1>(p, at, a, j0, n, dst, next),
            2 => tile::<R, 2>(p, at, a, j0, n, dst, next),
            3 => tile::<R, 3>(p, at, a, j0, n, dst, next),
            4 => tile::<R, 4>(p, at, a, j0, n, dst, next),
            5 => tile::<R, 5>(p, at, a, j0, n, dst, next),
            _ => tile::<R, 6>(p, at, a, j0, n, dst, next),
        }
        j0 += g;
    }
}

/// One register tile: panels `at..at + R` × activation rows `j0..j0 + G`, written into
/// the tile's own columns of the result (the padding rows of a last panel are dropped),
/// fetching its share of the next panels on the way.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn tile<const R: usize, const G: usize>(
    p: &Panels,
    at: usize,
    a: &QActs,
    j0: usize,
    n: usize,
    dst: &OutPtr,
    next: Prefetch,
) {
    let kb = p.kb;
    let k = kb * QK;
    let lanes = p.lanes;
    let w = PanelTile {
        q: p.bytes(at, R),
        scales: &p.scales[at * kb * lanes..(at + R) * kb * lanes],
        kb,
        next,
    };
    let acts = ActTile {
        q: &a.qs[j0 * k..(j0 + G) * k],
        scales: &a.scales[j0 * kb..(j0 + G) * kb],
        neg_corr: &a.neg_corr[j0 * kb..(j0 + G) * kb],
        k,
    };
    let mut out = [[[0.0f32; MAX_LANES]; G]; R];
    // SAFETY: panels for a kernel exist only where its features were detected.
    unsafe {
        match p.kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => avx512::tile::<R, G>(&w, &acts, &mut out),
            #[cfg(target_arch = "x86_64")]
            Kernel::AvxVnni => avxvnni::tile::<R, G>(&w, &acts, &mut out),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => avx2::tile::<R, G>(&w, &acts, &mut out),
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => neon::tile::<R, G>(&w, &acts, &mut out),
            _ => unreachable!("{:?} has no panels on this architecture", p.kernel),
        }
    };
    for (r, panel) in out.iter().enumerate() {
        let row0 = (at + r) * lanes;
        let valid = lanes.min(n.saturating_sub(row0));
        for (j, lanes) in panel.iter().enumerate() {
            // SAFETY: columns row0..row0 + valid belong to this task; j0 + j < m.
            unsafe {
                std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst.at((j0 + j) * n + row0), valid)
            };
        }
    }
}

/// Portable reference: per block an exact int32 dot, scaled by both block scales.
pub fn scalar_dot_rows(
    w_s: &[f32],
    w_q: &[i8],
    a_s: &[f32],
    a_q: &[i8],
    m: usize,
    kb: usize,
    dst: &mut [f32],
) {
    for r in 0..m {
        let mut acc = 0.0f32;
        for b in 0..kb {
            let wq = &w_q[b * QK..(b + 1) * QK];
            let aq = &a_q[(r * kb + b) * QK..][..QK];
            let dot: i32 = wq.iter().zip(aq).map(|(&x, &y)| x as i32 * y as i32).sum();
            acc += dot as f32 * w_s[b] * a_s[r * kb + b];
        }
        dst[r] = acc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::pseudo_random;
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::{Device, Module, Tensor};

    /// Raw Q8_0 bytes for an `(n, k)` matrix: every int8 value occurs, -128 included
    /// (which a quantizer never writes but a file may hold), with scales of both signs.
    fn raw_q8(n: usize, k: usize, seed: u64) -> Vec<u8> {
        let noise = pseudo_random(n * k / QK * 33, seed);
        let mut data = Vec::with_capacity(n * k / QK * 34);
        for blk in noise.chunks_exact(33) {
            data.extend_from_slice(&half::f16::from_f32(blk[0] * 0.02).to_le_bytes());
            data.extend(
                blk[1..]
                    .iter()
                    .map(|v| ((v * 128.0).floor() as i32).clamp(-128, 127) as u8),
            );
        }
        data
    }

    /// The reference result of row `row` for activation row `r`, and the sum of the
    /// magnitudes of its terms (what bounds the rounding of a different summation order).
    fn reference(w: &BatchedQ8, a: &QActs, row: usize, r: usize) -> (f32, f32) {
        let Layout::Rows { scales, qs } = &w.layout else {
            panic!("the reference reads rows")
        };
        let kb = w.k / QK;
        let mut out = [0.0f32];
        let ws = &scales[row * kb..][..kb];
        let wq = &qs[row * w.k..][..w.k];
        let (a_s, a_q) = (&a.scales[r * kb..][..kb], &a.qs[r * w.k..][..w.k]);
        scalar_dot_rows(ws, wq, a_s, a_q, 1, kb, &mut out);
        // Term by term, not block by block: a kernel that sums lanes of a block apart
        // (AVX2) rounds partial sums that a block's total can cancel.
        let mag = (0..kb)
            .map(|b| {
                let d: i32 = (0..QK)
                    .map(|i| (wq[b * QK + i] as i32 * a_q[b * QK + i] as i32).abs())
                    .sum();
                (d as f32 * ws[b] * a_s[b]).abs()
            })
            .sum();
        (out[0], mag)
    }

    #[test]
    fn every_kernel_matches_the_scalar_reference_over_odd_shapes() {
        // Rows that fill no panel, one panel and one row over, two and a half panels, an
        // odd panel count; one to nineteen blocks per row.
        // Then enough panels that each task reads several pairs, and (one block per row)
        // several groups of four, so tiles prefetch the panels that follow.
        for (n, kb) in [
            (1, 1),
            (15, 2),
            (17, 3),
            (40, 18),
            (48, 19),
            (81, 7),
            (600, 2),
            (1561, 1),
        ] {
            let k = kb * QK;
            let data = raw_q8(n, k, (n * 31 + kb) as u64);
            let reference_w = BatchedQ8::from_q8_0(&data, n, k, Kernel::Scalar).unwrap();
            for kernel in Kernel::available() {
                let w = BatchedQ8::from_q8_0(&data, n, k, kernel).unwrap();
                for m in (1..=20).chain([31, 32, 33, 47, 64, 67]) {
                    let x = pseudo_random(m * k, (m * 7 + n) as u64);
                    let a = quantize_rows(&x, m, k, Kernel::Scalar);
                    let ours = w.matmul(&x, m).unwrap();
                    for r in 0..m {
                        for row in 0..n {
                            let (want, mag) = reference(&reference_w, &a, row, r);
                            let got = ours[r * n + row];
                            // f32 sums of kb terms in another order and with fused
                            // multiply-adds: within a few ulps of the terms' magnitude.
                            let tol = 1e-5 * mag + 1e-7;
                            assert!(
                                (got - want).abs() <= tol,
                                "{kernel:?} n={n} kb={kb} m={m} r={r} row={row}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn several_matrices_in_one_pass_equal_each_alone() {
        // Q, K and V of different heights (one not a whole number of panels) on one input.
        let (k, heights) = (96, [48, 17, 33]);
        for kernel in Kernel::available() {
            let ws: Vec<BatchedQ8> = heights
                .iter()
                .map(|&n| BatchedQ8::from_q8_0(&raw_q8(n, k, n as u64), n, k, kernel).unwrap())
                .collect();
            let refs: Vec<&BatchedQ8> = ws.iter().collect();
            for m in [1, 5, 13] {
                let x = pseudo_random(m * k, m as u64);
                let together = BatchedQ8::matmul_many(&refs, &x, m).unwrap();
                for (w, out) in ws.iter().zip(&together) {
                    assert_eq!(out, &w.matmul(&x, m).unwrap(), "{kernel:?} m={m}");
                }
            }
            assert!(BatchedQ8::matmul_many(&refs, &[0.0; 95], 1).is_err());
        }
    }

    #[test]
    fn every_kernel_matches_candle() {
        for (n, k) in [(96, 576), (41, 576), (20, 1536)] {
            let w = Tensor::from_vec(pseudo_random(n * k, 3), (n, k), &Device::Cpu).unwrap();
            let qt = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
            let data = qt.data().unwrap().to_vec();
            let q = QMatMul::from_qtensor(qt).unwrap();
            for m in [1usize, 3, 9, 19] {
                let x = Tensor::from_vec(pseudo_random(m * k, m as u64 + 9), (m, k), &Device::Cpu)
                    .unwrap();
                let theirs: Vec<f32> = q
                    .forward(&x)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap();
                let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
                for kernel in Kernel::available() {
                    let ours = BatchedQ8::from_q8_0(&data, n, k, kernel)
                        .unwrap()
                        .matmul(&xs, m)
                        .unwrap();
                    let d = ours
                        .iter()
                        .zip(&theirs)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0, f32::max);
                    assert!(d < 1e-3, "{kernel:?} n={n} k={k} m={m}: {d}");
                }
            }
        }
    }

    #[test]
    fn a_nan_activation_makes_its_row_nan_on_every_kernel() {
        // `f32::max` skips a NaN: the quantizers once turned it into a 0 byte with a finite
        // scale, so on CPUs without AVX-512 a NaN in the model's activations came out as
        // plausible logits, past the forward pass's check.
        let (n, k, m) = (40, 96, 3);
        let data = raw_q8(n, k, 11);
        for kernel in Kernel::available() {
            let w = BatchedQ8::from_q8_0(&data, n, k, kernel).unwrap();
            for at in [0, 37, 95] {
                let mut x = pseudo_random(m * k, 4);
                x[k + at] = f32::NAN;
                let out = w.matmul(&x, m).unwrap();
                assert!(
                    out[n..2 * n].iter().all(|v| v.is_nan()),
                    "{kernel:?} at {at}"
                );
                let others = out[..n].iter().chain(&out[2 * n..]);
                assert!(others.copied().all(f32::is_finite), "{kernel:?} at {at}");
            }
        }
    }

    #[test]
    fn simd_quantization_gives_the_same_bytes_as_the_scalar_one() {
        let mut x = pseudo_random(QK * 64, 5);
        // Exact halves, zeros and a block of zeros: the rounding and d = 0 edges.
        x[3] = 0.0;
        x[40..72].fill(0.0);
        x[100] = -x[101] * 0.5;
        for kernel in Kernel::available() {
            let ours = quantize_rows(&x, 4, QK * 16, kernel);
            let plain = quantize_rows(&x, 4, QK * 16, Kernel::Scalar);
            assert_eq!(ours.qs, plain.qs, "{kernel:?}");
            assert_eq!(ours.scales, plain.scales, "{kernel:?}");
            assert_eq!(ours.neg_corr, plain.neg_corr, "{kernel:?}");
        }
        let a = quantize_rows(&x, 4, QK * 16, Kernel::Scalar);
        for (blk, s) in a.qs.chunks_exact(QK).zip(&a.scales) {
            assert!(blk.iter().any(|&q| q.unsigned_abs() == 127) || *s == 0.0);
        }
        let sum: i32 = a.qs[..QK].iter().map(|&q| q as i32).sum();
        assert_eq!(a.neg_corr[0], -128 * sum);
    }

    #[test]
    fn a_panel_lane_holds_one_row_four_bytes_at_a_time() {
        // Row r, block b, byte i holds (r * 7 + b * 3 + i) as a byte; 20 rows: one whole
        // panel and one padded.
        let (n, kb) = (20, 3);
        let mut data = Vec::new();
        for r in 0..n {
            for b in 0..kb {
                data.extend_from_slice(&half::f16::from_f32((r * 10 + b) as f32).to_le_bytes());
                data.extend((0..QK).map(|i| (r * 7 + b * 3 + i) as u8));
            }
        }
        for (kernel, want_lanes, offset) in [
            (Kernel::Avx2, 8, 0),
            (Kernel::AvxVnni, 8, 0x80),
            (Kernel::Avx512Vnni, 16, 0x80),
            (Kernel::Neon, 4, 0),
        ] {
            let p = Panels::new(&data, n, kb, kernel);
            let lanes = p.lanes;
            assert_eq!(lanes, want_lanes, "{kernel:?}");
            assert_eq!(p.count, n.div_ceil(lanes));
            let all = p.bytes(0, p.count);
            for r in 0..p.count * lanes {
                let (panel, lane) = (r / lanes, r % lanes);
                for b in 0..kb {
                    let at = panel * kb + b;
                    let scale = half::f16::from_bits(p.scales[at * lanes + lane]).to_f32();
                    let bytes: Vec<u8> = (0..QK / 4)
                        .flat_map(|c| all[((at * QK / 4 + c) * lanes + lane) * 4..][..4].to_vec())
                        .collect();
                    if r < n {
                        assert_eq!(scale, (r * 10 + b) as f32);
                        let want: Vec<u8> = (0..QK)
                            .map(|i| (r * 7 + b * 3 + i) as u8 ^ offset)
                            .collect();
                        assert_eq!(bytes, want, "{kernel:?} row {r} block {b}");
                    } else {
                        // Padding: weight 0 with scale 0.
                        assert_eq!(scale, 0.0);
                        assert!(bytes.iter().all(|&x| x == offset));
                    }
                }
            }
        }
    }
}
