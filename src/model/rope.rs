//! Rotary position embedding (RoPE): each pair of a head's coordinates is turned by an
//! angle `position · base^(-2i/d)`. A rotation keeps the vector's length, and the dot
//! product of a rotated query and key depends only on how far apart their positions are.

use super::config::LlamaConfig;
use candle_core::{Result, Tensor};

/// The cos/sin tables for every position of the context, `context × head_dim/2` each.
pub struct Rope {
    cos: Vec<f32>,
    sin: Vec<f32>,
    head_dim: usize,
    /// Pairs are `(2i, 2i+1)` (GGUF's layout) rather than `(i, i + d/2)` (HF's).
    interleaved: bool,
}

impl Rope {
    /// The tables for a model's head size, base and context.
    pub fn new(cfg: &LlamaConfig) -> Self {
        let half = cfg.head_dim / 2;
        let mut cos = Vec::with_capacity(cfg.context * half);
        let mut sin = Vec::with_capacity(cfg.context * half);
        for pos in 0..cfg.context {
            for i in 0..half {
                // The same f32 arithmetic as building the table with tensor ops
                // (`arange · inv_freq`, then cos and sin), so results match candle's.
                let inv = 1.0 / cfg.rope_base.powf(2.0 * i as f32 / cfg.head_dim as f32);
                let ang = pos as f32 * inv;
                cos.push(ang.cos());
                sin.push(ang.sin());
            }
        }
        Self {
            cos,
            sin,
            head_dim: cfg.head_dim,
            interleaved: cfg.rope_interleaved,
        }
    }

    /// Rotates one token's heads in place: `x` is `heads × head_dim` values at `pos`.
    pub fn rotate(&self, x: &mut [f32], pos: usize) {
        let d = self.head_dim;
        let half = d / 2;
        let (cos, sin) = (
            &self.cos[pos * half..][..half],
            &self.sin[pos * half..][..half],
        );
        for head in x.chunks_exact_mut(d) {
            for i in 0..half {
                let (a, b) = if self.interleaved {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + half)
                };
                let (x1, x2) = (head[a], head[b]);
                head[a] = x1 * cos[i] - x2 * sin[i];
                head[b] = x1 * sin[i] + x2 * cos[i];
            }
        }
    }

    /// Rotates `(heads, t, head_dim)`, row `i` sitting at position `pos0 + i`. The rows go
    /// through host memory: the same arithmetic on every device, one RoPE to read.
    pub fn apply(&self, x: &Tensor, pos0: usize) -> Result<Tensor> {
        let (heads, t, d) = x.dims3()?;
        let mut v = x.flatten_all()?.to_vec1::<f32>()?;
        for (r, row) in v.chunks_exact_mut(d).enumerate() {
            self.rotate(row, pos0 + r % t);
        }
        Tensor::from_vec(v, (heads, t, d), x.device())
    }
}
