//! Rotary position embedding (RoPE): each pair of a head's coordinates is turned by an
//! angle `position · base^(-2i/d)`. A rotation keeps the vector's length, and the dot
//! product of a rotated query and key depends on the two vectors and on the offset
//! between their positions, not on where the pair sits: the positional part is relative.

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

    /// The scaled score q·k/√d of one head's query and key (both before RoPE) placed at
    /// positions `pq` and `pk`; `None` past the context. Moving both by the same amount
    /// leaves it as it was, up to rounding.
    pub fn score_at(&self, q: &[f32], k: &[f32], pq: usize, pk: usize) -> Option<f32> {
        let d = self.head_dim;
        let half = d / 2;
        if q.len() < d || k.len() < d || pq.max(pk) >= self.cos.len() / half.max(1) {
            return None;
        }
        let (mut q, mut k) = (q[..d].to_vec(), k[..d].to_vec());
        self.rotate(&mut q, pq);
        self.rotate(&mut k, pk);
        let dot: f32 = q.iter().zip(&k).map(|(a, b)| a * b).sum();
        Some(dot / (d as f32).sqrt())
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

    /// Whether pairs are `(2i, 2i+1)` (GGUF's layout) rather than `(i, i + d/2)`.
    pub fn interleaved(&self) -> bool {
        self.interleaved
    }

    /// The cos and sin rows of `positions`, one after another (`head_dim/2` each): what a
    /// step whose rows sit at those positions turns them by. Past the context, the last.
    pub fn tables_at(&self, positions: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let half = self.head_dim / 2;
        let last = (self.cos.len() / half.max(1)).saturating_sub(1);
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for &pos in positions {
            let at = pos.min(last) * half;
            cos.extend_from_slice(&self.cos[at..at + half]);
            sin.extend_from_slice(&self.sin[at..at + half]);
        }
        (cos, sin)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rope(interleaved: bool) -> Rope {
        Rope::new(&LlamaConfig {
            architecture: "llama".into(),
            n_layer: 1,
            hidden: 64,
            ffn: 128,
            n_head: 1,
            n_kv_head: 1,
            head_dim: 64,
            rope_base: 10000.0,
            rms_eps: 1e-5,
            context: 2048,
            vocab: 16,
            rope_interleaved: interleaved,
        })
    }

    #[test]
    fn a_score_depends_on_the_offset_and_the_contents_not_on_where_the_pair_sits() {
        for interleaved in [false, true] {
            let r = rope(interleaved);
            let q: Vec<f32> = (0..64).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
            let k: Vec<f32> = (0..64).map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0).collect();
            let here = r.score_at(&q, &k, 12, 8).unwrap();
            let moved = r.score_at(&q, &k, 1012, 1008).unwrap();
            assert!(
                (here - moved).abs() < 1e-3 * here.abs().max(1.0),
                "{here} vs {moved}"
            );
            // Another offset, or another key at the same offset, scores differently.
            let farther = r.score_at(&q, &k, 12, 4).unwrap();
            assert!((here - farther).abs() > 1e-3, "{here} vs {farther}");
            let other: Vec<f32> = k.iter().map(|x| -x).collect();
            assert!((r.score_at(&q, &other, 12, 8).unwrap() - here).abs() > 1e-3);
            assert_eq!(r.score_at(&q, &k, 2048, 0), None);
        }
    }
}
