//! Turning logits into the next token: greedy, or temperature + nucleus (top-p), seeded.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Sampling settings. `temperature == 0` is greedy.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct SamplerConfig {
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 0.9,
            seed: 42,
        }
    }
}

/// One entry of a top-k list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopToken {
    pub id: u32,
    pub token: String,
    pub logit: f32,
    pub prob: f32,
}

/// A seeded sampler.
pub struct Sampler {
    cfg: SamplerConfig,
    rng: StdRng,
}

/// Softmax of `logits` at `temperature` (1.0 = the model's own distribution).
pub fn softmax(logits: &[f32], temperature: f32) -> Vec<f32> {
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = logits.iter().map(|&l| ((l - max) / t).exp()).collect();
    let s: f32 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// Index of the largest logit (first one on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// The `k` most likely ids with their logits and probabilities, most likely first.
pub fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32, f32)> {
    let p = softmax(logits, 1.0);
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    let k = k.min(idx.len());
    idx.select_nth_unstable_by(k.saturating_sub(1), |&a, &b| {
        logits[b].total_cmp(&logits[a])
    });
    idx.truncate(k);
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    idx.into_iter()
        .map(|i| (i as u32, logits[i], p[i]))
        .collect()
}

impl Sampler {
    /// A sampler seeded from `cfg.seed`.
    pub fn new(cfg: SamplerConfig) -> Self {
        Self {
            cfg,
            rng: StdRng::seed_from_u64(cfg.seed),
        }
    }

    /// Picks the next token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.cfg.temperature <= 0.0 {
            return argmax(logits);
        }
        let p = softmax(logits, self.cfg.temperature);
        let mut idx: Vec<usize> = (0..p.len()).collect();
        idx.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
        // Nucleus: the smallest set of tokens whose mass reaches top_p.
        let mut mass = 0.0;
        let mut keep = 0;
        for &i in &idx {
            mass += p[i];
            keep += 1;
            if mass >= self.cfg.top_p {
                break;
            }
        }
        let r: f32 = self.rng.random::<f32>() * mass;
        let mut acc = 0.0;
        for &i in &idx[..keep] {
            acc += p[i];
            if acc >= r {
                return i as u32;
            }
        }
        idx[keep - 1] as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_is_argmax_and_seeded_sampling_repeats() {
        let logits = vec![0.1, 2.0, 1.5, -1.0];
        let mut g = Sampler::new(SamplerConfig::default());
        assert_eq!(g.sample(&logits), 1);
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_p: 1.0,
            seed: 7,
        };
        let a: Vec<u32> = {
            let mut s = Sampler::new(cfg);
            (0..50).map(|_| s.sample(&logits)).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(cfg);
            (0..50).map(|_| s.sample(&logits)).collect()
        };
        assert_eq!(a, b);
        assert!(
            a.iter().any(|&x| x != 1),
            "temperature 1 should not be greedy"
        );
    }

    #[test]
    fn top_p_small_keeps_only_the_best() {
        let logits = vec![0.0, 5.0, 1.0];
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_p: 0.01,
            seed: 1,
        });
        assert!((0..20).all(|_| s.sample(&logits) == 1));
    }

    #[test]
    fn top_k_is_sorted_and_probs_sum_below_one() {
        let logits = vec![0.5, 3.0, -2.0, 1.0, 2.0];
        let tk = top_k(&logits, 3);
        assert_eq!(tk.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 4, 3]);
        let s: f32 = tk.iter().map(|x| x.2).sum();
        assert!(s < 1.0 && s > 0.5);
    }
}
