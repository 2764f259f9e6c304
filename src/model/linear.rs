//! Linear layers. One token at a time they run on candle's quantized matmul; for a batch
//! of B rows our own Q8_0 kernel reads each weight block once and dots it with all B
//! activation rows (int8 × int8 with AVX2 where the CPU has it), so a batch costs far
//! less than B single steps — the reason continuous batching raises throughput.

use candle_core::quantized::{GgmlDType, QMatMul};
use candle_core::{Module, Result, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

const QK: usize = 32;

/// A weight matrix in Q8_0 laid out for the batched kernel: per block a scale and 32 int8.
pub struct BatchedQ8 {
    pub n: usize,
    pub k: usize,
    scales: Vec<f32>,
    qs: Vec<i8>,
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
                let blocks = n * k / QK;
                let mut scales = Vec::with_capacity(blocks);
                let mut qs = Vec::with_capacity(blocks * QK);
                for b in data.chunks_exact(34) {
                    scales.push(half::f16::from_le_bytes([b[0], b[1]]).to_f32());
                    qs.extend(b[2..].iter().map(|&x| x as i8));
                }
                Some(Arc::new(BatchedQ8 { n, k, scales, qs }))
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
                let xs = x
                    .to_dtype(candle_core::DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?;
                let out = w.matmul(&xs, m);
                debug_assert_eq!(k, w.k);
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

/// Activations offset to unsigned (`q + 128`, what `vpdpbusd` multiplies) and each block
/// scale repeated eight times, so one 64-byte load feeds a two-block dot product.
struct WideActs {
    offset: Vec<u8>,
    scales8: Vec<f32>,
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

fn quantize_rows(x: &[f32], m: usize, k: usize, wide: bool) -> QActs {
    let kb = k / QK;
    let mut scales = vec![0.0; m * kb];
    let mut qs = vec![0i8; m * k];
    for (bi, (chunk, out)) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK)).enumerate() {
        let amax = chunk.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        for (o, &v) in out.iter_mut().zip(chunk) {
            // Round half away from zero, as `f32::round` does, without its libm call.
            let x = v * id;
            *o = (x + 0.5f32.copysign(x)) as i8;
        }
        // candle stores the scale as f16; round the same way so results agree.
        scales[bi] = half::f16::from_f32(d).to_f32();
    }
    let wide = wide.then(|| WideActs {
        offset: qs.iter().map(|&q| (q as u8) ^ 0x80).collect(),
        scales8: scales.iter().flat_map(|&s| [s; 8]).collect(),
    });
    QActs { scales, qs, wide }
}

impl BatchedQ8 {
    /// `(m, k) × (n, k)ᵀ → (m, n)`.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.matmul_with(x, m, use_avx512_vnni())
    }

    /// `matmul` with the AVX-512 kernel chosen explicitly, to compare the two side by side
    /// (`wide` is ignored unless the CPU has AVX-512 VNNI).
    pub fn matmul_with(&self, x: &[f32], m: usize, wide: bool) -> Vec<f32> {
        assert_eq!(x.len(), m * self.k);
        assert!(self.k.is_multiple_of(QK));
        let a = quantize_rows(x, m, self.k, wide && use_avx512_vnni());
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
        out
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
            let offset = &wide.offset[r0 * kb * QK..(r0 + m) * kb * QK];
            let scales8 = &wide.scales8[r0 * kb * 8..(r0 + m) * kb * 8];
            // SAFETY: `wide` only exists when the AVX-512 features were detected.
            unsafe { avx512::dot_rows(w_s, w_q, offset, scales8, m, kb, dst) };
            if kb % 2 == 1 {
                // The odd last block of every row, which the two-block kernel leaves out.
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
    use super::QK;
    use std::arch::x86_64::*;

    /// One weight row against `m` activation rows, two blocks (64 bytes) per instruction
    /// and up to eight activation rows per weight load. `vpdpbusd` wants unsigned × signed,
    /// so activations arrive as `a + 128` and each block pair subtracts `128 · Σw` once.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn dot_rows(
        w_s: &[f32],
        w_q: &[i8],
        offset: &[u8],
        scales8: &[f32],
        m: usize,
        kb: usize,
        dst: &mut [f32],
    ) {
        let a = (offset, scales8);
        let mut r0 = 0;
        while r0 < m {
            // SAFETY: every group stays inside rows r0..m, which the caller sized.
            unsafe {
                match m - r0 {
                    8.. => group::<8>(w_s, w_q, a, r0, kb, dst),
                    4..=7 => group::<4>(w_s, w_q, a, r0, kb, dst),
                    2 | 3 => group::<2>(w_s, w_q, a, r0, kb, dst),
                    _ => group::<1>(w_s, w_q, a, r0, kb, dst),
                }
            }
            r0 += match m - r0 {
                8.. => 8,
                4..=7 => 4,
                2 | 3 => 2,
                _ => 1,
            };
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn group<const G: usize>(
        w_s: &[f32],
        w_q: &[i8],
        a: (&[u8], &[f32]),
        r0: usize,
        kb: usize,
        dst: &mut [f32],
    ) {
        let c128 = _mm512_set1_epi8(-128);
        let zero = _mm512_setzero_si512();
        let mut acc = [_mm512_setzero_ps(); G];
        // Row j of the group starts `j * stride` after row r0, in both activation arrays.
        let (q_stride, s_stride) = (kb * QK, kb * 8);
        let q0 = a.0[r0 * q_stride..].as_ptr();
        let s0 = a.1[r0 * s_stride..].as_ptr();
        for bp in 0..kb / 2 {
            let b = bp * 2;
            // SAFETY: b + 1 < kb keeps every 64-byte load inside its row's blocks, and
            // the caller guarantees rows r0..r0 + G exist.
            unsafe {
                let w = _mm512_loadu_si512(w_q.as_ptr().add(b * QK) as *const _);
                let corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c128, w));
                let wsv = _mm512_mask_mov_ps(
                    _mm512_set1_ps(*w_s.get_unchecked(b)),
                    0xFF00,
                    _mm512_set1_ps(*w_s.get_unchecked(b + 1)),
                );
                let qb = q0.add(b * QK);
                let sb = s0.add(b * 8);
                for (j, acc) in acc.iter_mut().enumerate() {
                    let x = _mm512_loadu_si512(qb.add(j * q_stride) as *const _);
                    let s = _mm512_loadu_ps(sb.add(j * s_stride));
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
        // k = 576 has an even block count, 608 an odd one (the two-block kernel's tail).
        for (n, k) in [(96, 576), (40, 608)] {
            let w = Tensor::from_vec(pseudo_random(n * k, 3), (n, k), &Device::Cpu).unwrap();
            let q = QMatMul::from_qtensor(QTensor::quantize(&w, GgmlDType::Q8_0).unwrap()).unwrap();
            let lin = Linear::new(q.clone()).unwrap();
            let f = lin.fast.as_ref().unwrap();
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
                let mut kernels = vec![f.matmul_with(&xs, m, false)];
                if use_avx512_vnni() {
                    kernels.push(f.matmul_with(&xs, m, true));
                }
                for ours in &kernels {
                    let d = ours
                        .iter()
                        .zip(&theirs)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0, f32::max);
                    assert!(d < 1e-3, "n={n} k={k} m={m}: {d}");
                }
                // Scalar fallback on the same quantized data.
                let a = quantize_rows(&xs, m, k, false);
                let kb = k / QK;
                for row in [0usize, 17, n - 1] {
                    let mut s = vec![0.0; m];
                    scalar_dot_rows(
                        &f.scales[row * kb..][..kb],
                        &f.qs[row * k..][..k],
                        &a.scales,
                        &a.qs,
                        m,
                        kb,
                        &mut s,
                    );
                    for r in 0..m {
                        assert!((s[r] - kernels[0][r * n + row]).abs() < 1e-3);
                    }
                }
            }
        }
    }
}
