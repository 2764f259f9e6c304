//! The next token picked where the logits are. On a GPU, copying a vocabulary of logits
//! back every step (49,152 numbers for SmolLM2) costs more than picking from them, so the
//! batched route does the sampler's work and the panes' top-k with tensor operations and
//! copies back one short row: the id drawn and the top-k's ids, logits and probabilities.
//! It draws what [`super::sampler`] draws on the host, from the same random number:
//!
//! 1. greedy takes the largest logit;
//! 2. otherwise the nucleus is every token whose tempered logit reaches one threshold,
//!    found by halving an interval (the host sorts instead: a full sort of the vocabulary
//!    does not fit a GPU block's memory, a comparison against a threshold does);
//! 3. the draw is the first id whose running sum of the renormalized nucleus reaches the
//!    random number, the running sum taken in blocks as two small matmuls.
//!
//! The top-k is sorted in two rounds: the best k of each block of 256 logits, then the
//! best k of those.

use super::sampler::SamplerConfig;
use candle_core::{DType, Result, Tensor, D};

/// Logits per block: a block is sorted, or summed as one matmul row, at a time.
const BLOCK: usize = 256;
/// The most top-k entries a device sorts (the second round sorts 192 × k candidates).
pub const MAX_TOP_K: usize = 32;
/// Halvings of the nucleus threshold: from a logit range of ~60, finer than an f32 step.
const HALVINGS: usize = 32;

/// Ids with their probabilities, most likely first.
pub type TopProbs = Vec<(u32, f32)>;

/// What comes back from the device for one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Picked {
    /// The token drawn.
    pub id: u32,
    /// The `k` most likely tokens, most likely first: id, logit, the model's own
    /// probability, and the probability the sampler drew with.
    pub top: Vec<(u32, f32, f32, f32)>,
}

/// Picks the next token from `logits` (`(vocab,)`, on any device) as `cfg` says, with `r`
/// the sampler's uniform number (unused for greedy), and the `k` most likely tokens.
pub fn pick(logits: &Tensor, cfg: &SamplerConfig, k: usize, r: f32) -> Result<Picked> {
    let logits = logits.flatten_all()?.to_dtype(DType::F32)?;
    let v = logits.dim(0)?;
    if v == 0 || k > MAX_TOP_K {
        candle_core::bail!("picking {k} of {v} logits (at most {MAX_TOP_K} on a device)");
    }
    let k = k.min(v);
    let own = candle_nn::ops::softmax_last_dim(&logits)?;
    let top = top_ids(&logits, k)?;
    let pick = |t: &Tensor| t.index_select(&top, 0);
    // What the sampler drew the top-k with: greedy puts everything on its pick.
    let (id, drawn) = if cfg.temperature <= 0.0 {
        let id = logits.argmax(0)?.reshape(1)?;
        let drawn = top.broadcast_eq(&id)?.to_dtype(DType::F32)?;
        (id, drawn)
    } else {
        let p = nucleus(&logits, cfg)?;
        (inverse_cdf(&p, r)?, pick(&p)?)
    };
    let row = Tensor::cat(
        &[
            id.to_dtype(DType::F32)?,
            top.to_dtype(DType::F32)?,
            pick(&logits)?,
            pick(&own)?,
            drawn,
        ],
        0,
    )?;
    // The one copy back of the step.
    let row = row.to_vec1::<f32>()?;
    let col = |c: usize| &row[1 + c * k..1 + (c + 1) * k];
    let top = (0..k)
        .map(|i| (col(0)[i] as u32, col(1)[i], col(2)[i], col(3)[i]))
        .collect();
    Ok(Picked {
        id: row[0] as u32,
        top,
    })
}

/// The log-probabilities `logits` (`(vocab,)`) give the tokens `ids` (in log space, so a
/// rare token does not underflow to 0), and its `k` most likely tokens with their
/// probabilities, in one copy back: what the sink's lanes show of each prediction.
pub fn log_probs_and_top(logits: &Tensor, ids: &[u32], k: usize) -> Result<(Vec<f32>, TopProbs)> {
    let logits = logits.flatten_all()?.to_dtype(DType::F32)?;
    let k = k.min(logits.dim(0)?);
    if k > MAX_TOP_K {
        candle_core::bail!("the top {k} of a vocabulary (at most {MAX_TOP_K} on a device)");
    }
    let probs = candle_nn::ops::softmax_last_dim(&logits)?;
    let top = top_ids(&logits, k)?;
    let asked = Tensor::new(ids, logits.device())?;
    let row = Tensor::cat(
        &[
            candle_nn::ops::log_softmax(&logits, D::Minus1)?.index_select(&asked, 0)?,
            top.to_dtype(DType::F32)?,
            probs.index_select(&top, 0)?,
        ],
        0,
    )?
    .to_vec1::<f32>()?;
    let (of_ids, rest) = row.split_at(ids.len());
    let top = (0..k).map(|i| (rest[i] as u32, rest[k + i])).collect();
    Ok((of_ids.to_vec(), top))
}

/// The distribution the sampler draws from, `(vocab,)` in id order: the softmax at the
/// temperature, cut to the fewest most likely tokens whose mass reaches top-p, renormalized.
fn nucleus(logits: &Tensor, cfg: &SamplerConfig) -> Result<Tensor> {
    let s = (logits / cfg.temperature as f64)?;
    let soft = candle_nn::ops::softmax_last_dim(&s)?;
    let zeros = soft.zeros_like()?;
    let mass_from = |at: &Tensor| {
        s.broadcast_ge(at)?
            .where_cond(&soft, &zeros)?
            .sum_keepdim(0)
    };
    // `lo` always keeps enough mass, `hi` never does: every token is kept from the lowest
    // logit, none from above the highest. The nucleus is everything from `lo` up.
    let top = s.max_keepdim(0)?;
    let mut lo = s.min_keepdim(0)?;
    let mut hi = (&top + 1.0)?;
    for _ in 0..HALVINGS {
        let mid = ((&lo + &hi)? * 0.5)?;
        let enough = mass_from(&mid)?.ge(cfg.top_p as f64)?;
        lo = enough.where_cond(&mid, &lo)?;
        hi = enough.where_cond(&hi, &mid)?;
    }
    // The most likely token always stays, as the host's nucleus keeps its first token
    // whatever top-p asks (a top-p of 0 would otherwise keep nothing).
    let kept = s
        .broadcast_ge(&lo.minimum(&top)?)?
        .where_cond(&soft, &zeros)?;
    kept.broadcast_div(&kept.sum_keepdim(0)?)
}

/// The first id whose running sum of `p` reaches `r` (the last id with any mass if
/// rounding keeps the sum below it), as a `(1,)` u32 tensor.
fn inverse_cdf(p: &Tensor, r: f32) -> Result<Tensor> {
    let v = p.dim(0)?;
    let below = running_sum(p)?
        .lt(r as f64)?
        .to_dtype(DType::F32)?
        .sum_keepdim(0)?;
    let ids = Tensor::arange(0f32, v as f32, p.device())?;
    let last = p
        .gt(0.0)?
        .where_cond(&ids, &ids.zeros_like()?)?
        .max_keepdim(0)?;
    below.minimum(&last)?.to_dtype(DType::U32)
}

/// The inclusive running sum of `x` (`(n,)`): within blocks of [`BLOCK`] by one matmul with
/// an upper triangle of ones, then each block's total carried into the blocks after it by
/// a second (candle's own `cumsum` would build an n × n triangle).
fn running_sum(x: &Tensor) -> Result<Tensor> {
    let (n, dev) = (x.dim(0)?, x.device());
    let blocks = n.div_ceil(BLOCK);
    let padded = Tensor::cat(
        &[x, &Tensor::zeros(blocks * BLOCK - n, DType::F32, dev)?],
        0,
    )?;
    let within =
        padded
            .reshape((blocks, BLOCK))?
            .matmul(&Tensor::triu2(BLOCK, DType::F32, dev)?)?;
    let totals = within.narrow(1, BLOCK - 1, 1)?;
    let idx = Tensor::arange(0u32, blocks as u32, dev)?;
    let earlier = idx
        .unsqueeze(1)?
        .broadcast_gt(&idx.unsqueeze(0)?)?
        .to_dtype(DType::F32)?;
    let carried = within.broadcast_add(&earlier.matmul(&totals)?)?;
    carried.flatten_all()?.narrow(0, 0, n)
}

/// The ids of the `k` largest of `x` (`(n,)`), largest first, `k` at most [`BLOCK`].
fn top_ids(x: &Tensor, k: usize) -> Result<Tensor> {
    let (n, dev) = (x.dim(0)?, x.device());
    let blocks = n.div_ceil(BLOCK);
    let pad = Tensor::full(f32::NEG_INFINITY, blocks * BLOCK - n, dev)?;
    let padded = Tensor::cat(&[x, &pad], 0)?;
    let each = k.min(BLOCK);
    let within = padded
        .reshape((blocks, BLOCK))?
        .arg_sort_last_dim(false)?
        .narrow(D::Minus1, 0, each)?;
    let starts = Tensor::arange_step(0u32, (blocks * BLOCK) as u32, BLOCK as u32, dev)?;
    let ids = within.broadcast_add(&starts.unsqueeze(1)?)?.flatten_all()?;
    let best = padded
        .index_select(&ids, 0)?
        .arg_sort_last_dim(false)?
        .narrow(0, 0, k)?;
    ids.index_select(&best, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sampler::{distribution, top_k, Sampler};
    use candle_core::Device;

    /// Logits over a vocabulary of 1000 (four blocks, the last one short), spread wide
    /// enough that the nucleus holds from one token to hundreds.
    fn logits(seed: u64, spread: f32) -> Vec<f32> {
        let mut x = seed;
        (0..1000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * spread
            })
            .collect()
    }

    #[test]
    fn the_device_draws_what_the_host_sampler_draws_from_the_same_number() -> Result<()> {
        for (seed, spread) in [(1, 4.0), (2, 12.0), (3, 30.0)] {
            let x = logits(seed, spread);
            let t = Tensor::new(x.as_slice(), &Device::Cpu)?;
            for (temperature, top_p) in [(0.0, 0.9), (0.7, 0.9), (1.0, 1.0), (1.5, 0.5), (1.0, 0.0)]
            {
                let cfg = SamplerConfig {
                    temperature,
                    top_p,
                    seed,
                };
                let p = distribution(&cfg, &x);
                for r in [0.01f32, 0.3, 0.62, 0.97] {
                    let host = Sampler::new(cfg).draw_with(&p, r);
                    let got = pick(&t, &cfg, 5, r)?;
                    assert_eq!(got.id, host, "seed {seed} T {temperature} p {top_p} r {r}");
                    let want = top_k(&x, 5);
                    for ((id, logit, own, drawn), (wid, wl, wp)) in got.top.iter().zip(&want) {
                        assert_eq!((id, logit), (wid, wl));
                        assert!((own - wp).abs() < 1e-6);
                        assert!((drawn - p[*id as usize]).abs() < 1e-5);
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn the_running_sum_in_blocks_is_the_running_sum() -> Result<()> {
        let x: Vec<f32> = (0..700).map(|i| (i % 7) as f32).collect();
        let got = running_sum(&Tensor::new(x.as_slice(), &Device::Cpu)?)?.to_vec1::<f32>()?;
        let mut acc = 0.0;
        for (i, (&xi, &g)) in x.iter().zip(&got).enumerate() {
            acc += xi;
            assert_eq!(g, acc, "at {i}");
        }
        Ok(())
    }
}
