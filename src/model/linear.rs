//! Linear layers: `y = x Wᵀ`. A Q8_0 matrix runs on our kernel ([`crate::kernels::q8_0`]),
//! which reads each weight block once for every row of the batch, so B rows cost far less
//! than B single steps: the reason batching raises throughput. A Q4_1 matrix runs on our
//! 4-bit kernel ([`crate::kernels::q4`]), which reads about 0.6 bytes a weight where Q8_0
//! reads 1.06. Other stored types, and the reference path, run on candle's quantized matmul.

use crate::kernels::q4::BatchedQ4;
use crate::kernels::q8_0::BatchedQ8;
use candle_core::quantized::{GgmlDType, QMatMul};
use candle_core::{Module, Result, Tensor};
use std::sync::Arc;

/// Most rows candle's CUDA matmul gets at once for quantized weights (see `on_candle`).
pub const GPU_ROWS: usize = 8;

/// A matrix laid out for one of our kernels.
pub enum Fast {
    Q8(BatchedQ8),
    Q4(BatchedQ4),
}

/// A linear layer: the stored matrix, and for Q8_0 and Q4_1 the same bytes laid out for
/// our kernel. Measured here our kernel beats candle's Q8_0 matmul already at one row
/// (0.047 vs 0.101 ms for 1536×576), so it runs for every row count on the CPU.
#[derive(Clone)]
pub struct Linear {
    pub q: QMatMul,
    pub fast: Option<Arc<Fast>>,
}

impl Linear {
    /// Wraps a matmul that always runs on candle's kernels (the reference path).
    pub fn candle_only(q: QMatMul) -> Self {
        Self { q, fast: None }
    }

    /// Wraps a matmul; Q8_0 and Q4_1 matrices also get our kernels' layouts.
    pub fn new(q: QMatMul) -> Result<Self> {
        let fast = match &q {
            QMatMul::QTensor(t) if matches!(t.dtype(), GgmlDType::Q8_0 | GgmlDType::Q4_1) => {
                let (n, k) = t.shape().dims2()?;
                let data = t.data()?;
                Some(Arc::new(if t.dtype() == GgmlDType::Q8_0 {
                    Fast::Q8(BatchedQ8::for_this_cpu(&data, n, k)?)
                } else {
                    Fast::Q4(BatchedQ4::for_this_cpu(&data, n, k)?)
                }))
            }
            _ => None,
        };
        Ok(Self { q, fast })
    }

    /// The Q8_0 layout, where this matrix has it.
    fn q8(&self) -> Option<&BatchedQ8> {
        match self.fast.as_deref() {
            Some(Fast::Q8(w)) => Some(w),
            _ => None,
        }
    }

    /// The Q4_1 layout, where this matrix has it.
    fn q4(&self) -> Option<&BatchedQ4> {
        match self.fast.as_deref() {
            Some(Fast::Q4(w)) => Some(w),
            _ => None,
        }
    }

    /// `x` is `(m, k)`; returns `(m, n)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.fast.as_deref() {
            Some(Fast::Q8(w)) if x.device().is_cpu() => Ok(on_kernel(&[w], x)?.remove(0)),
            Some(Fast::Q4(w)) if x.device().is_cpu() => Ok(on_kernel(&[w], x)?.remove(0)),
            _ => self.on_candle(x),
        }
    }

    /// candle's matmul. On CUDA, quantized weights times more than 8 rows take another
    /// kernel (candle's MMQ). On an H200 it turned a 14-token prefill of the real model
    /// into NaN logits, though on random weights and unit-scale rows of the same shapes it
    /// agrees with the CPU to 3e-4 (tests/cuda.rs prints both): the real activations, not
    /// the shapes, set it off. Up to 8 rows (MMVQ) the real model agrees with the CPU, so
    /// on CUDA a larger batch runs in slices of 8 rows.
    fn on_candle(&self, x: &Tensor) -> Result<Tensor> {
        let m = x.dim(0)?;
        if !x.device().is_cuda() || !matches!(self.q, QMatMul::QTensor(_)) || m <= GPU_ROWS {
            return self.q.forward(x);
        }
        let parts = (0..m)
            .step_by(GPU_ROWS)
            .map(|s| self.q.forward(&x.narrow(0, s, GPU_ROWS.min(m - s))?))
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&parts, 0)
    }

    /// Several layers on the same input, `x` `(m, k)`, one output each: one pass of our
    /// kernel when every one runs on it (the input quantized once, the cores woken once),
    /// else one by one.
    pub fn forward_many<const N: usize>(ls: [&Linear; N], x: &Tensor) -> Result<[Tensor; N]> {
        let fast: Vec<&BatchedQ8> = ls.iter().filter_map(|l| l.q8()).collect();
        let four: Vec<&BatchedQ4> = ls.iter().filter_map(|l| l.q4()).collect();
        let outs = if x.device().is_cpu() && fast.len() == N {
            on_kernel(&fast, x)?
        } else if x.device().is_cpu() && four.len() == N {
            on_kernel(&four, x)?
        } else {
            ls.iter()
                .map(|l| l.forward(x))
                .collect::<Result<Vec<_>>>()?
        };
        outs.try_into()
            .map_err(|_| candle_core::Error::Msg(format!("{N} layers in, another count out")))
    }

    /// `(out, in)`: the matrix's shape.
    pub fn dims(&self) -> (usize, usize) {
        match (self.fast.as_deref(), &self.q) {
            (Some(Fast::Q8(w)), _) => w.shape(),
            (Some(Fast::Q4(w)), _) => w.shape(),
            (None, QMatMul::QTensor(t)) => t.shape().dims2().unwrap_or((0, 0)),
            (None, QMatMul::Tensor(t) | QMatMul::TensorF16(t)) => t.dims2().unwrap_or((0, 0)),
        }
    }

    /// Bytes one pass over the matrix reads, as stored for the kernel that runs it (our
    /// Q8_0 layouts: 32 int8 and a scale per block of 32 weights; Q4_1: 16 bytes of
    /// nibbles, a scale and a minimum).
    pub fn bytes(&self) -> usize {
        match (self.fast.as_deref(), &self.q) {
            (Some(Fast::Q8(w)), _) => w.bytes(),
            (Some(Fast::Q4(w)), _) => w.bytes(),
            (None, QMatMul::QTensor(t)) => t.storage_size_in_bytes(),
            (None, QMatMul::Tensor(t) | QMatMul::TensorF16(t)) => {
                t.elem_count() * t.dtype().size_in_bytes()
            }
        }
    }
}

/// What [`on_kernel`] needs of a layout of ours: its shape, and several matrices on the
/// same activations in one pass.
trait Batched: Sized {
    fn shape(&self) -> (usize, usize);
    fn matmul_many(ws: &[&Self], x: &[f32], m: usize) -> Result<Vec<Vec<f32>>>;
}

impl Batched for BatchedQ8 {
    fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }
    fn matmul_many(ws: &[&Self], x: &[f32], m: usize) -> Result<Vec<Vec<f32>>> {
        BatchedQ8::matmul_many(ws, x, m)
    }
}

impl Batched for BatchedQ4 {
    fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }
    fn matmul_many(ws: &[&Self], x: &[f32], m: usize) -> Result<Vec<Vec<f32>>> {
        BatchedQ4::matmul_many(ws, x, m)
    }
}

/// `x` `(m, k)` through our kernel's matrices (all Q8_0 or all Q4_1), all in one pass;
/// each result `(m, n)`.
fn on_kernel<W: Batched>(ws: &[&W], x: &Tensor) -> Result<Vec<Tensor>> {
    let (m, k) = x.dims2()?;
    if let Some(w) = ws.iter().find(|w| w.shape().1 != k) {
        candle_core::bail!(
            "linear: input has {k} columns, the weight expects {}",
            w.shape().1
        );
    }
    let xs = x
        .to_dtype(candle_core::DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    W::matmul_many(ws, &xs, m)?
        .into_iter()
        .zip(ws)
        .map(|(out, w)| Tensor::from_vec(out, (m, w.shape().0), x.device()))
        .collect()
}
