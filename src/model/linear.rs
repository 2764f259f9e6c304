//! Linear layers. One token at a time they run on candle's quantized matmul; for a batch
//! of B rows our own Q8_0 kernel reads each weight block once and dots it with all B
//! activation rows (int8 × int8 with AVX2 where the CPU has it), so a batch costs far
//! less than B single steps — the reason continuous batching raises throughput.

use candle_core::quantized::{GgmlDType, QMatMul};
use candle_core::{Module, Result, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

const QK: usize = 32;

/// Blocks per interleaved group of the AVX-512 kernel: one 64-byte vector holds four bytes
/// of each of 16 blocks, so each of its 16 int32 lanes sums one block's products and a
/// group needs a single int → float conversion per activation row (not one per block pair).
const GROUP: usize = 16;

/// A weight matrix in Q8_0 laid out for the batched kernel: per block a scale and 32 int8.
pub struct BatchedQ8 {
    pub n: usize,
    pub k: usize,
    /// Per row, block scales in block order.
    scales: Vec<f32>,
    /// Per row, the blocks' bytes: in block order, or (when `interleaved`) whole groups of
    /// `GROUP` blocks interleaved four bytes at a time and the remaining blocks as they are.
    qs: Vec<i8>,
    interleaved: bool,
}

/// Reorders one row's bytes for the AVX-512 kernel: within each group of `GROUP` blocks,
/// chunk `c` holds bytes `4c..4c + 4` of every block in turn. Blocks after the last whole
/// group keep their order. `flip` is XORed into every byte (0x80 turns i8 into `i8 + 128`).
fn interleave(src: &[u8], dst: &mut [u8], flip: u8) {
    let kb = src.len() / QK;
    let main = kb / GROUP * GROUP * QK;
    let flip4 = u32::from_ne_bytes([flip; 4]);
    // Four bytes move together, as one u32.
    let word = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    for g in 0..kb / GROUP {
        let s = &src[g * GROUP * QK..][..GROUP * QK];
        let d = &mut dst[g * GROUP * QK..][..GROUP * QK];
        for (n, out) in d.chunks_exact_mut(4).enumerate() {
            // Output word n is chunk c = n / GROUP of block j = n % GROUP.
            let (c, j) = (n / GROUP, n % GROUP);
            out.copy_from_slice(&(word(s, j * QK + c * 4) ^ flip4).to_ne_bytes());
        }
    }
    for (d, s) in dst[main..].iter_mut().zip(&src[main..]) {
        *d = s ^ flip;
    }
}

/// A linear layer: candle's matmul for one row, ours for several.
#[derive(Clone)]
pub struct Linear {
    pub q: QMatMul,
    pub fast: Option<Arc<BatchedQ8>>,
}

/// Rows at and above which our kernel runs. Measured here it is faster than candle's
/// Q8_0 matmul already at one row (0.047 vs 0.101 ms for 1536×576), so it always runs.
pub const BATCH_MIN_ROWS: usize = 1;

impl Linear {
    /// Wraps a matmul that always runs on candle's kernels (the reference path).
    pub fn candle_only(q: QMatMul) -> Self {
        Self { q, fast: None }
    }

    /// Wraps a matmul; Q8_0 matrices also get the batched layout.
    pub fn new(q: QMatMul) -> Result<Self> {
        let fast = match &q {
            QMatMul::QTensor(t) if t.dtype() == GgmlDType::Q8_0 => {
                let (n, k) = t.shape().dims2()?;
                let data = t.data()?;
                Some(Arc::new(BatchedQ8::from_q8_0(
                    &data,
                    n,
                    k,
                    use_avx512_vnni(),
                )?))
            }
            _ => None,
        };
        Ok(Self { q, fast })
    }

    /// `x` is `(m, k)`; returns `(m, n)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match &self.fast {
            Some(w) if x.dim(0)? >= BATCH_MIN_ROWS && x.device().is_cpu() => {
                let (m, k) = x.dims2()?;
                if k != w.k {
                    candle_core::bail!("linear: input has {k} columns, the weight expects {}", w.k);
                }
                let xs = x
                    .to_dtype(candle_core::DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?;
                let out = w.matmul(&xs, m)?;
                Tensor::from_vec(out, (m, w.n), x.device())
            }
            _ => self.q.forward(x),
        }
    }
}

/// Activations quantized to Q8_0, row by row (as candle does for its own dot products).
struct QActs {
    scales: Vec<f32>,
    qs: Vec<i8>,
    /// The same activations in the form the AVX-512 VNNI kernel wants, when the CPU has it.
    wide: Option<WideActs>,
}

/// Activations for the AVX-512 kernel: offset to unsigned (`q + 128`, what `vpdpbusd`
/// multiplies) and interleaved as the weights are; per row the scales of the whole groups
/// in block order, then each remaining block's scale repeated eight times (one 64-byte
/// load then feeds a two-block dot product).
struct WideActs {
    offset: Vec<u8>,
    scales: Vec<f32>,
    /// Floats of `scales` per row.
    s_stride: usize,
}

/// Whether the AVX-512 VNNI kernel runs; `INFERLAB_NO_AVX512` turns it off to compare.
fn use_avx512_vnni() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vnni")
                && std::env::var_os("INFERLAB_NO_AVX512").is_none()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// One block of 32 activations to int8 with scale `max|x| / 127`; returns the scale.
fn quantize_block(chunk: &[f32], out: &mut [i8]) -> f32 {
    let amax = chunk.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (o, &v) in out.iter_mut().zip(chunk) {
        // Round half away from zero, as `f32::round` does, without its libm call.
        let x = v * id;
        *o = (x + 0.5f32.copysign(x)) as i8;
    }
    d
}

fn quantize_rows(x: &[f32], m: usize, k: usize, wide: bool) -> QActs {
    let kb = k / QK;
    let mut scales = vec![0.0; m * kb];
    let mut qs = vec![0i8; m * k];
    let simd = use_avx512_vnni();
    for (bi, (chunk, out)) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK)).enumerate() {
        #[cfg(target_arch = "x86_64")]
        let d = if simd {
            // SAFETY: the AVX-512 features were detected.
            unsafe { avx512::quantize_block(chunk, out) }
        } else {
            quantize_block(chunk, out)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let d = quantize_block(chunk, out);
        // candle stores the scale as f16; round the same way so results agree.
        scales[bi] = half::f16::from_f32(d).to_f32();
    }
    let wide = wide.then(|| {
        let main = kb / GROUP * GROUP;
        let s_stride = main + (kb - main) * 8;
        let mut offset = vec![0u8; m * k];
        let mut wide_scales = Vec::with_capacity(m * s_stride);
        for r in 0..m {
            // SAFETY: i8 and u8 have the same size and alignment.
            let row: &[u8] =
                unsafe { std::slice::from_raw_parts(qs[r * k..].as_ptr() as *const u8, k) };
            interleave(row, &mut offset[r * k..(r + 1) * k], 0x80);
            let rs = &scales[r * kb..(r + 1) * kb];
            wide_scales.extend_from_slice(&rs[..main]);
            wide_scales.extend(rs[main..].iter().flat_map(|&s| [s; 8]));
        }
        WideActs {
            offset,
            scales: wide_scales,
            s_stride,
        }
    });
    QActs { scales, qs, wide }
}

impl BatchedQ8 {
    /// From GGUF Q8_0 bytes (per block an f16 scale and 32 int8) of an `(n, k)` matrix.
    /// `interleaved` lays the bytes out for the AVX-512 VNNI kernel, and needs that CPU.
    /// Sizes are checked, not trusted: they come from a model file.
    pub fn from_q8_0(data: &[u8], n: usize, k: usize, interleaved: bool) -> Result<Self> {
        assert!(!interleaved || use_avx512_vnni());
        if n == 0 || k == 0 || !k.is_multiple_of(QK) {
            candle_core::bail!("Q8_0 matrix ({n}, {k}): rows must be whole blocks of {QK}");
        }
        let blocks = n
            .checked_mul(k / QK)
            .filter(|b| b.checked_mul(34) == Some(data.len()))
            .ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "Q8_0 matrix ({n}, {k}) does not match its {} bytes",
                    data.len()
                ))
            })?;
        let mut scales = Vec::with_capacity(blocks);
        let mut bytes = Vec::with_capacity(blocks * QK);
        for b in data.chunks_exact(34) {
            scales.push(half::f16::from_le_bytes([b[0], b[1]]).to_f32());
            bytes.extend_from_slice(&b[2..]);
        }
        if interleaved {
            let mut out = vec![0u8; bytes.len()];
            for (src, dst) in bytes.chunks_exact(k).zip(out.chunks_exact_mut(k)) {
                interleave(src, dst, 0);
            }
            bytes = out;
        }
        Ok(Self {
            n,
            k,
            scales,
            qs: bytes.into_iter().map(|x| x as i8).collect(),
            interleaved,
        })
    }

    /// `(m, k) × (n, k)ᵀ → (m, n)`. The unsafe writes below rely on these sizes, so they
    /// are checked here, where a wrong shape becomes an error instead of a stray write.
    pub fn matmul(&self, x: &[f32], m: usize) -> Result<Vec<f32>> {
        let out_len = m.checked_mul(self.n);
        if m.checked_mul(self.k) != Some(x.len()) || out_len.is_none() {
            candle_core::bail!(
                "batched matmul: {} inputs are not {m} rows of {} (weight {}×{})",
                x.len(),
                self.k,
                self.n,
                self.k
            );
        }
        debug_assert!(self.k.is_multiple_of(QK) && self.scales.len() * QK == self.qs.len());
        let a = quantize_rows(x, m, self.k, self.interleaved);
        let kb = self.k / QK;
        // Output rows of W in chunks per task. Each task computes a (rows × m) slab and
        // writes it straight into its own columns of the (m, n) result. 64 rows rather than
        // 32: on two cores fewer tasks mean fewer rayon wake-ups, measured at 30 layers of
        // the model's shapes as 15.5 → 12.3 ms at 8 rows and 4.7 → 4.6 ms at one (minima).
        const CHUNK: usize = 64;
        let n = self.n;
        let mut out = vec![0.0f32; m * n];
        let dst = OutPtr(out.as_mut_ptr());
        (0..n.div_ceil(CHUNK)).into_par_iter().for_each(|c| {
            let n0 = c * CHUNK;
            let rows = CHUNK.min(n - n0);
            let mut slab = [0.0f32; CHUNK * 32];
            let mut r0 = 0;
            // Activation rows in groups of 32 so the slab stays on the stack.
            while r0 < m {
                let g = (m - r0).min(32);
                for i in 0..rows {
                    let row = n0 + i;
                    dot_rows(
                        &self.scales[row * kb..(row + 1) * kb],
                        &self.qs[row * self.k..(row + 1) * self.k],
                        &a,
                        r0,
                        g,
                        kb,
                        &mut slab[i * g..(i + 1) * g],
                    );
                }
                for r in 0..g {
                    for i in 0..rows {
                        // SAFETY: column n0 + i belongs to this task alone and r0 + r < m.
                        unsafe { *dst.at((r0 + r) * n + n0 + i) = slab[i * g + r] };
                    }
                }
                r0 += g;
            }
        });
        Ok(out)
    }
}

/// The result buffer shared by the matmul's tasks; each writes only its own columns.
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint elements and the buffer outlives the parallel loop.
unsafe impl Sync for OutPtr {}
impl OutPtr {
    /// A method (not field access) so closures capture the whole Sync wrapper.
    fn at(&self, i: usize) -> *mut f32 {
        // SAFETY: callers index inside the buffer.
        unsafe { self.0.add(i) }
    }
}

/// One weight row against activation rows `r0..r0 + m`.
#[allow(clippy::too_many_arguments)]
fn dot_rows(w_s: &[f32], w_q: &[i8], a: &QActs, r0: usize, m: usize, kb: usize, dst: &mut [f32]) {
    let a_s = &a.scales[r0 * kb..(r0 + m) * kb];
    let a_q = &a.qs[r0 * kb * QK..(r0 + m) * kb * QK];
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(wide) = &a.wide {
            let view = avx512::Acts {
                q: &wide.offset[r0 * kb * QK..(r0 + m) * kb * QK],
                s: &wide.scales[r0 * wide.s_stride..(r0 + m) * wide.s_stride],
                q_stride: kb * QK,
                s_stride: wide.s_stride,
            };
            // SAFETY: `wide` only exists when the AVX-512 features were detected.
            unsafe { avx512::dot_rows(w_s, w_q, &view, m, dst) };
            if kb % GROUP % 2 == 1 {
                // The odd last block of every row, which the two-block tail leaves out.
                let b = kb - 1;
                for (r, d) in dst.iter_mut().enumerate().take(m) {
                    let wq = &w_q[b * QK..][..QK];
                    let aq = &a_q[(r * kb + b) * QK..][..QK];
                    let dot: i32 = wq.iter().zip(aq).map(|(&x, &y)| x as i32 * y as i32).sum();
                    *d += dot as f32 * w_s[b] * a_s[r * kb + b];
                }
            }
            return;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the features were just detected; slices are sized by the caller.
            unsafe { avx2::dot_rows(w_s, w_q, a_s, a_q, m, kb, dst) };
            return;
        }
    }
    scalar_dot_rows(w_s, w_q, a_s, a_q, m, kb, dst);
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::QK;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// One weight row against `m` activation rows, four rows at a time so the
    /// accumulators stay in registers and each weight block is loaded once per group.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_rows(
        w_s: &[f32],
        w_q: &[i8],
        a_s: &[f32],
        a_q: &[i8],
        m: usize,
        kb: usize,
        dst: &mut [f32],
    ) {
        // The loads below are unchecked; these bounds make them sound.
        assert!(w_s.len() >= kb && w_q.len() >= kb * QK && dst.len() >= m);
        assert!(a_s.len() >= m * kb && a_q.len() >= m * kb * QK);
        let ones = _mm256_set1_epi16(1);
        let mut r0 = 0;
        while r0 < m {
            let g = (m - r0).min(4);
            let mut acc = [_mm256_setzero_ps(); 4];
            for b in 0..kb {
                // SAFETY: b < kb and rows < m keep every load inside the slices.
                let w = unsafe { _mm256_loadu_si256(w_q.as_ptr().add(b * QK) as *const __m256i) };
                let wabs = _mm256_sign_epi8(w, w);
                let ws = w_s[b];
                for (j, acc) in acc.iter_mut().enumerate().take(g) {
                    let r = r0 + j;
                    let a = unsafe {
                        _mm256_loadu_si256(a_q.as_ptr().add((r * kb + b) * QK) as *const __m256i)
                    };
                    // |w| · (a with w's sign) = w · a, in the unsigned × signed form maddubs needs.
                    let p16 = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a, w));
                    let p32 = _mm256_madd_epi16(p16, ones);
                    let scale = _mm256_set1_ps(ws * a_s[r * kb + b]);
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, *acc);
                }
            }
            for (j, acc) in acc.iter().enumerate().take(g) {
                dst[r0 + j] = hsum(*acc);
            }
            r0 += g;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
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
        assert!(
            m == 0 || (a.q.len() >= (m - 1) * a.q_stride + kb * QK && a.s.len() >= m * a.s_stride)
        );
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::flash::pseudo_random;
    use candle_core::quantized::QTensor;
    use candle_core::Device;

    #[test]
    fn batched_kernel_matches_candle_and_the_scalar_reference() {
        // Block counts: 18 = one interleaved group + a pair, 19 = group + pair + odd block,
        // 33 = two groups + odd block, 48 = three groups and no tail.
        for (n, k) in [(96, 576), (40, 608), (24, 1056), (20, 1536)] {
            let w = Tensor::from_vec(pseudo_random(n * k, 3), (n, k), &Device::Cpu).unwrap();
            let qt = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
            let data = qt.data().unwrap().to_vec();
            let q = QMatMul::from_qtensor(qt).unwrap();
            let plain = BatchedQ8::from_q8_0(&data, n, k, false).unwrap();
            let mut layouts = vec![&plain];
            let wide;
            if use_avx512_vnni() {
                wide = BatchedQ8::from_q8_0(&data, n, k, true).unwrap();
                layouts.push(&wide);
            }
            for m in [1usize, 2, 3, 5, 9, 16, 19] {
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
                for f in &layouts {
                    let ours = f.matmul(&xs, m).unwrap();
                    let d = ours
                        .iter()
                        .zip(&theirs)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0, f32::max);
                    assert!(d < 1e-3, "n={n} k={k} m={m} wide={}: {d}", f.interleaved);
                }
                // Scalar fallback on the same quantized data.
                let a = quantize_rows(&xs, m, k, false);
                let kb = k / QK;
                let reference = plain.matmul(&xs, m).unwrap();
                for row in [0usize, 17, n - 1] {
                    let mut s = vec![0.0; m];
                    scalar_dot_rows(
                        &plain.scales[row * kb..][..kb],
                        &plain.qs[row * k..][..k],
                        &a.scales,
                        &a.qs,
                        m,
                        kb,
                        &mut s,
                    );
                    for r in 0..m {
                        assert!((s[r] - reference[r * n + row]).abs() < 1e-3);
                    }
                }
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
        for chunk in x.chunks_exact(QK) {
            let (mut a, mut b) = ([0i8; QK], [0i8; QK]);
            let da = quantize_block(chunk, &mut a);
            #[cfg(target_arch = "x86_64")]
            if use_avx512_vnni() {
                // SAFETY: detected.
                let db = unsafe { avx512::quantize_block(chunk, &mut b) };
                assert_eq!(da.to_bits(), db.to_bits());
                assert_eq!(a, b);
            }
            let _ = &mut b;
            assert!(a.iter().any(|&q| q.unsigned_abs() == 127) || da == 0.0);
        }
    }

    #[test]
    fn interleaving_puts_each_block_in_its_own_lane() {
        // Two groups and a tail of three blocks; byte value = block index.
        let kb = 2 * GROUP + 3;
        let src: Vec<u8> = (0..kb * QK).map(|i| (i / QK) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        interleave(&src, &mut dst, 0);
        for g in 0..2 {
            for c in 0..QK / 4 {
                let chunk = &dst[(g * GROUP * QK + c * 64)..][..64];
                for (lane, four) in chunk.chunks_exact(4).enumerate() {
                    assert!(four.iter().all(|&b| b as usize == g * GROUP + lane));
                }
            }
        }
        assert_eq!(&dst[2 * GROUP * QK..], &src[2 * GROUP * QK..]);
    }
}
