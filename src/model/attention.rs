//! Scaled dot-product attention with grouped KV heads, written out so each piece
//! (scores, mask, softmax, weighted sum) can be looked at.

use super::flash::{self, IoCount, Tiles};
use candle_core::{Result, Tensor, D};

/// What one attention call produced.
pub struct AttnOut {
    /// `(n_head, t, head_dim)`: each head's weighted sum of values.
    pub out: Tensor,
    /// `(n_head, r, kv_len)`: Q·Kᵀ/√d before the mask, for the last `r` query rows
    /// (`r = min(t, capture_rows)`), when asked for.
    pub scores: Option<Tensor>,
    /// `(n_head, r, kv_len)`: causal softmax weights of the same rows, when asked for.
    pub weights: Option<Tensor>,
    /// Bytes this call moved to and from main memory, all heads (FlashAttention IO model).
    pub io: IoCount,
    /// Tiled kernel only: head 0's (query tile, key tile) pairs in processing order.
    pub schedule: Vec<(u32, u32)>,
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

/// Most score elements one naive call holds at once (f32: 64 MB per tensor). Longer
/// prompts run in chunks of query rows: a row's softmax needs only its own scores, so the
/// result is the same and memory stays bounded whatever the prompt's length.
pub const MAX_SCORE_ELEMS: usize = 16 << 20;

/// Naive attention: materializes the whole `t × kv_len` score matrix per head (in chunks
/// of query rows beyond [`MAX_SCORE_ELEMS`]).
///
/// `q` is `(n_head, t, d)`, `k`/`v` are `(n_kv_head, kv_len, d)`; query head `h` reads
/// KV head `h / (n_head / n_kv_head)` — grouped-query attention without copying K/V.
/// `capture_rows` asks for the scores and weights of that many of the newest rows (0: none).
pub fn naive(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos0: usize,
    capture_rows: usize,
) -> Result<AttnOut> {
    if q.dim(1)? == 1 && capture_rows == 0 && q.device().is_cpu() {
        return decode_row(q, k, v);
    }
    naive_tensors(q, k, v, pos0, capture_rows)
}

/// [`naive`] always on candle tensor ops (the reference path: same order of operations
/// as candle's own quantized_llama, so results match it bit for bit).
pub fn naive_tensors(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos0: usize,
    capture_rows: usize,
) -> Result<AttnOut> {
    let (n_head, t, _) = q.dims3()?;
    let kv_len = k.dim(1)?;
    let chunk = (MAX_SCORE_ELEMS / (n_head * kv_len).max(1)).max(1);
    if t <= chunk {
        return naive_block(q, k, v, pos0, capture_rows);
    }
    let first_kept = t - capture_rows.min(t);
    let (mut outs, mut scores, mut weights) = (Vec::new(), Vec::new(), Vec::new());
    let mut io = IoCount::default();
    for r0 in (0..t).step_by(chunk) {
        let n = chunk.min(t - r0);
        // Rows of this chunk that are among the newest `capture_rows`.
        let keep = (r0 + n).saturating_sub(first_kept.max(r0));
        let part = naive_block(&q.narrow(1, r0, n)?, k, v, pos0 + r0, keep)?;
        outs.push(part.out);
        io.add(part.io);
        scores.extend(part.scores);
        weights.extend(part.weights);
    }
    let cat = |v: Vec<Tensor>| -> Result<Option<Tensor>> {
        if v.is_empty() {
            Ok(None)
        } else {
            Tensor::cat(&v, 1).map(Some)
        }
    };
    Ok(AttnOut {
        out: Tensor::cat(&outs, 1)?,
        scores: cat(scores)?,
        weights: cat(weights)?,
        io,
        schedule: Vec::new(),
    })
}

/// One block of query rows, the whole score matrix at once.
fn naive_block(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos0: usize,
    capture_rows: usize,
) -> Result<AttnOut> {
    let (n_head, t, d) = q.dims3()?;
    let (n_kv, kv_len, _) = k.dims3()?;
    let group = n_head / n_kv;
    // Heads of one group are adjacent, so (n_head, t) folds into (n_kv, group * t).
    let qg = q.reshape((n_kv, group * t, d))?;
    let k = k.contiguous()?;
    let v = v.contiguous()?;
    let scores = (qg.matmul(&k.t()?)? / (d as f64).sqrt())?.reshape((n_head, t, kv_len))?;
    // Only rows with keys after them need the mask: a decode row sees every key.
    let masked = if pos0 + 1 < kv_len {
        scores.broadcast_add(&causal_mask(t, pos0, kv_len, q.device())?)?
    } else {
        scores.clone()
    };
    let weights = candle_nn::ops::softmax_last_dim(&masked)?;
    let out = weights
        .reshape((n_kv, group * t, kv_len))?
        .matmul(&v)?
        .reshape((n_head, t, d))?;
    let keep = capture_rows.min(t);
    let newest = |x: &Tensor| x.narrow(1, t - keep, keep);
    Ok(AttnOut {
        out,
        scores: if keep > 0 {
            Some(newest(&scores)?)
        } else {
            None
        },
        weights: if keep > 0 {
            Some(newest(&weights)?)
        } else {
            None
        },
        io: flash::naive_io(t, kv_len, d).times(n_head),
        schedule: Vec::new(),
    })
}

/// Row-wise L2 norms of a `(t, hidden)` tensor, for the residual-stream view.
pub fn row_norms(x: &Tensor) -> Result<Vec<f32>> {
    x.sqr()?.sum(D::Minus1)?.sqrt()?.to_vec1()
}

/// Tiled (FlashAttention) attention over all heads: same shapes as [`naive`]. Returns the
/// output with the bytes moved by all heads and head 0's tile schedule.
pub fn tiled(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pos0: usize,
    tiles: Tiles,
    capture_rows: usize,
) -> Result<AttnOut> {
    let (n_head, t, d) = q.dims3()?;
    let (n_kv, kv_len, _) = k.dims3()?;
    let group = n_head / n_kv;
    let qv = q.flatten_all()?.to_vec1::<f32>()?;
    let kv_ = k.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let vv = v.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let mut out = Vec::with_capacity(n_head * t * d);
    let mut io = IoCount::default();
    let mut schedule = Vec::new();
    for h in 0..n_head {
        let g = h / group;
        let r = flash::tiled_head(
            &qv[h * t * d..][..t * d],
            &kv_[g * kv_len * d..][..kv_len * d],
            &vv[g * kv_len * d..][..kv_len * d],
            d,
            pos0,
            true,
            tiles,
        );
        out.extend_from_slice(&r.out);
        io.add(r.io);
        if h == 0 {
            schedule = r.schedule;
        }
    }
    let out = Tensor::from_vec(out, (n_head, t, d), q.device())?;
    // The tiled kernel never forms the score matrix; for the probe we recompute it
    // on the side only when a layer is being captured.
    let (scores, weights) = if capture_rows > 0 {
        let n = naive(q, k, v, pos0, capture_rows)?;
        (n.scores, n.weights)
    } else {
        (None, None)
    };
    Ok(AttnOut {
        out,
        scores,
        weights,
        io,
        schedule,
    })
}

/// The same computation for one decode row, on plain slices: at this size the fixed cost
/// of a tensor op (allocation, thread hand-off) is larger than the arithmetic, and a batch
/// runs this once per request per layer.
fn decode_row(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<AttnOut> {
    let (n_head, _, d) = q.dims3()?;
    let kv_len = k.dim(1)?;
    let qv = q.flatten_all()?.to_vec1::<f32>()?;
    let out = decode_slices(&qv, n_head, k, v)?;
    Ok(AttnOut {
        out: Tensor::from_vec(out, (n_head, 1, d), q.device())?,
        scores: None,
        weights: None,
        io: flash::naive_io(1, kv_len, d).times(n_head),
        schedule: Vec::new(),
    })
}

/// One decode query row (`n_head × d` values, already rotated) against every cached key:
/// the softmax-weighted sum of values per head, `n_head × d`, on plain slices.
pub fn decode_slices(qv: &[f32], n_head: usize, k: &Tensor, v: &Tensor) -> Result<Vec<f32>> {
    let (n_kv, kv_len, d) = k.dims3()?;
    let kv_ = k.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let vv = v.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    // (n_kv, kv_len, d): head-major rows.
    Ok(decode_core(
        qv,
        n_head,
        n_kv,
        d,
        kv_len,
        &kv_,
        &vv,
        |g, j| (g * kv_len + j) * d,
    ))
}

/// One decode row's attention read in place through a block table, as PagedAttention's
/// kernel does: `k_pool`/`v_pool` hold token-major rows `(slot, n_kv * d)` of the whole page
/// pool and `slots` lists the sequence's slots in position order. No K/V is copied.
pub fn decode_paged(
    qv: &[f32],
    n_head: usize,
    n_kv: usize,
    k_pool: &[f32],
    v_pool: &[f32],
    slots: &[u32],
) -> Vec<f32> {
    let d = qv.len() / n_head;
    decode_core(qv, n_head, n_kv, d, slots.len(), k_pool, v_pool, |g, j| {
        (slots[j] as usize * n_kv + g) * d
    })
}

/// Attention of one query row, KV head by KV head: every cached key and value row is read
/// once for all the query heads that share it (GQA's saving, in the loop structure).
/// `at(g, j)` is where KV head `g`'s row for position `j` starts in `k` and `v`, which is
/// all that differs between the contiguous and the paged layout.
#[allow(clippy::too_many_arguments)]
fn decode_core(
    qv: &[f32],
    n_head: usize,
    n_kv: usize,
    d: usize,
    kv_len: usize,
    k: &[f32],
    v: &[f32],
    at: impl Fn(usize, usize) -> usize,
) -> Vec<f32> {
    let group = n_head / n_kv;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0.0f32; n_head * d];
    // Weights of the group's heads, head-major: w[i * kv_len + j].
    let mut w = vec![0.0f32; group * kv_len];
    for g in 0..n_kv {
        let h0 = g * group;
        for j in 0..kv_len {
            let kr = &k[at(g, j)..][..d];
            for i in 0..group {
                w[i * kv_len + j] = dot(&qv[(h0 + i) * d..][..d], kr) * scale;
            }
        }
        for wi in w.chunks_exact_mut(kv_len) {
            let mx = wi.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for x in wi.iter_mut() {
                *x = (*x - mx).exp();
                sum += *x;
            }
            let inv = 1.0 / sum;
            for x in wi.iter_mut() {
                *x *= inv;
            }
        }
        let og = &mut out[h0 * d..(h0 + group) * d];
        for j in 0..kv_len {
            let vr = &v[at(g, j)..][..d];
            for (i, oh) in og.chunks_exact_mut(d).enumerate() {
                let p = w[i * kv_len + j];
                for (o, x) in oh.iter_mut().zip(vr) {
                    *o += p * x;
                }
            }
        }
    }
    out
}

/// A dot product in eight independent lanes, so the compiler can keep it in one SIMD
/// register instead of one long dependent chain of adds.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}
