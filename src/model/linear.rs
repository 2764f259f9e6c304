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
    fast: Option<Arc<BatchedQ8>>,
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
}

fn quantize_rows(x: &[f32], m: usize, k: usize) -> QActs {
    let kb = k / QK;
    let mut scales = vec![0.0; m * kb];
    let mut qs = vec![0i8; m * k];
    for (bi, (chunk, out)) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK)).enumerate() {
        let amax = chunk.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        for (o, &v) in out.iter_mut().zip(chunk) {
            *o = (v * id).round() as i8;
        }
        // candle stores the scale as f16; round the same way so results agree.
        scales[bi] = half::f16::from_f32(d).to_f32();
    }
    QActs { scales, qs }
}

impl BatchedQ8 {
    /// `(m, k) × (n, k)ᵀ → (m, n)`.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        assert_eq!(x.len(), m * self.k);
        assert!(self.k.is_multiple_of(QK));
        let a = quantize_rows(x, m, self.k);
        let kb = self.k / QK;
        // Output rows of W in chunks per task; each task writes its own (rows × m) slab.
        const CHUNK: usize = 32;
        let mut out_t = vec![0.0f32; self.n * m];
        out_t
            .par_chunks_mut(CHUNK * m)
            .enumerate()
            .for_each(|(c, slab)| {
                let n0 = c * CHUNK;
                for (i, dst) in slab.chunks_exact_mut(m).enumerate() {
                    let row = n0 + i;
                    let w_s = &self.scales[row * kb..(row + 1) * kb];
                    let w_q = &self.qs[row * self.k..(row + 1) * self.k];
                    dot_rows(w_s, w_q, &a, m, kb, dst);
                }
            });
        // Transpose (n, m) → (m, n).
        let mut out = vec![0.0f32; m * self.n];
        for j in 0..self.n {
            for r in 0..m {
                out[r * self.n + j] = out_t[j * m + r];
            }
        }
        out
    }
}

fn dot_rows(w_s: &[f32], w_q: &[i8], a: &QActs, m: usize, kb: usize, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the features were just detected; slices are sized by the caller.
            unsafe { avx2::dot_rows(w_s, w_q, &a.scales, &a.qs, m, kb, dst) };
            return;
        }
    }
    scalar_dot_rows(w_s, w_q, &a.scales, &a.qs, m, kb, dst);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::flash::pseudo_random;
    use candle_core::quantized::QTensor;
    use candle_core::Device;

    #[test]
    fn batched_kernel_matches_candle_and_the_scalar_reference() {
        let (n, k) = (96, 576);
        let w = Tensor::from_vec(pseudo_random(n * k, 3), (n, k), &Device::Cpu).unwrap();
        let q = QMatMul::from_qtensor(QTensor::quantize(&w, GgmlDType::Q8_0).unwrap()).unwrap();
        let lin = Linear::new(q.clone()).unwrap();
        for m in [1usize, 2, 3, 5, 16] {
            let x =
                Tensor::from_vec(pseudo_random(m * k, m as u64 + 9), (m, k), &Device::Cpu).unwrap();
            let ours: Vec<f32> = lin
                .forward(&x)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let theirs: Vec<f32> = q
                .forward(&x)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let d = ours
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(d < 1e-3, "m={m}: {d}");
            // Scalar fallback on the same quantized data.
            let f = lin.fast.as_ref().unwrap();
            let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
            let a = quantize_rows(&xs, m, k);
            let kb = k / QK;
            for row in [0usize, 17, 95] {
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
                    assert!((s[r] - ours[r * n + row]).abs() < 1e-3);
                }
            }
        }
    }
}
