//! Scaled dot-product attention with grouped KV heads, written out so each piece
//! (scores, mask, softmax, weighted sum) can be looked at.

use candle_core::{Result, Tensor, D};

/// What one attention call produced.
pub struct AttnOut {
    /// `(n_head, t, head_dim)`: each head's weighted sum of values.
    pub out: Tensor,
    /// `(n_head, t, kv_len)`: Q·Kᵀ/√d before the mask, when asked for.
    pub scores: Option<Tensor>,
    /// `(n_head, t, kv_len)`: causal softmax weights, when asked for.
    pub weights: Option<Tensor>,
}

/// Additive causal mask `(t, kv_len)`: query i sits at position `pos0 + i` and may see
/// keys `0..=pos0 + i`.
pub fn causal_mask(
    t: usize,
    pos0: usize,
    kv_len: usize,
    device: &candle_core::Device,
) -> Result<Tensor> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..kv_len).map(move |j| if j > pos0 + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(mask, (t, kv_len), device)
}

/// Naive attention: materializes the whole `t × kv_len` score matrix per head.
///
/// `q` is `(n_head, t, d)`, `k`/`v` are `(n_kv_head, kv_len, d)`; query head `h` reads
/// KV head `h / (n_head / n_kv_head)` — grouped-query attention without copying K/V.
pub fn naive(q: &Tensor, k: &Tensor, v: &Tensor, pos0: usize, capture: bool) -> Result<AttnOut> {
    let (n_head, t, d) = q.dims3()?;
    let (n_kv, kv_len, _) = k.dims3()?;
    let group = n_head / n_kv;
    // Heads of one group are adjacent, so (n_head, t) folds into (n_kv, group * t).
    let qg = q.reshape((n_kv, group * t, d))?;
    let k = k.contiguous()?;
    let v = v.contiguous()?;
    let scores = (qg.matmul(&k.t()?)? / (d as f64).sqrt())?.reshape((n_head, t, kv_len))?;
    let masked = if t > 1 {
        scores.broadcast_add(&causal_mask(t, pos0, kv_len, q.device())?)?
    } else {
        scores.clone()
    };
    let weights = candle_nn::ops::softmax_last_dim(&masked)?;
    let out = weights
        .reshape((n_kv, group * t, kv_len))?
        .matmul(&v)?
        .reshape((n_head, t, d))?;
    Ok(AttnOut {
        out,
        scores: capture.then_some(scores),
        weights: capture.then(|| weights.clone()),
    })
}

/// Row-wise L2 norms of a `(t, hidden)` tensor, for the residual-stream view.
pub fn row_norms(x: &Tensor) -> Result<Vec<f32>> {
    x.sqr()?.sum(D::Minus1)?.sqrt()?.to_vec1()
}
