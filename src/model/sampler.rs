//! Turning logits into the next token: greedy, or temperature + nucleus (top-p), seeded.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// The temperatures the app's `T` steps through (0: greedy), and the top-p values of `P`.
pub const TEMPERATURES: [f32; 4] = [0.0, 0.7, 1.0, 1.5];
pub const TOP_PS: [f32; 3] = [0.9, 0.5, 1.0];

/// Sampling settings. `temperature == 0` is greedy.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
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

impl SamplerConfig {
    /// "greedy", or "T 0.7 · top-p 0.9".
    pub fn describe(&self) -> String {
        if self.temperature <= 0.0 {
            "greedy".into()
        } else {
            format!("T {} · top-p {}", self.temperature, self.top_p)
        }
    }
}

/// One entry of a top-k list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopToken {
    pub id: u32,
    pub token: String,
    pub logit: f32,
    /// The model's own probability (softmax of the logits).
    pub prob: f32,
    /// The probability the sampler drew with, after temperature and top-p (1 for the
    /// greedy pick, 0 for the rest; recordings made before it read as 0).
    #[serde(default)]
    pub drawn: f32,
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
    let k = k.min(logits.len());
    if k == 0 {
        return Vec::new();
    }
    // Runs every decode step over the whole vocabulary: one pass keeps the k largest in a
    // short sorted list (first index first on ties), one sums the exps for the
    // probabilities, and nothing the vocabulary's size is allocated.
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    let mut best: Vec<usize> = Vec::with_capacity(k + 1);
    for (i, &l) in logits.iter().enumerate() {
        if best.len() == k && l <= logits[best[k - 1]] {
            continue;
        }
        let at = best.partition_point(|&j| logits[j] >= l);
        best.insert(at, i);
        best.truncate(k);
    }
    best.into_iter()
        .map(|i| (i as u32, logits[i], (logits[i] - max).exp() / sum))
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
        let p = distribution(&self.cfg, logits);
        self.draw(&p)
    }

    /// Draws an id from a distribution over the vocabulary (its largest entry for greedy
    /// settings, where it is one-hot).
    pub fn draw(&mut self, p: &[f32]) -> u32 {
        let r = self.uniform();
        self.draw_with(p, r)
    }

    /// The uniform number the next draw uses (none for greedy settings, which draw
    /// nothing): what a device picking the token itself is handed.
    pub fn uniform(&mut self) -> f32 {
        if self.cfg.temperature <= 0.0 {
            return 0.0;
        }
        self.rng.random::<f32>()
    }

    /// The id a draw with uniform number `r` takes from `p`: the first whose running sum
    /// reaches `r` (the largest entry for greedy settings).
    pub fn draw_with(&self, p: &[f32], r: f32) -> u32 {
        if self.cfg.temperature <= 0.0 {
            return argmax(p);
        }
        let mut acc = 0.0;
        let mut last = 0;
        for (i, &x) in p.iter().enumerate() {
            if x > 0.0 {
                acc += x;
                last = i;
                if acc >= r {
                    return i as u32;
                }
            }
        }
        last as u32
    }

    /// The settings this sampler draws with.
    pub fn config(&self) -> SamplerConfig {
        self.cfg
    }
}

/// The distribution the sampler draws from: greedy puts everything on the largest logit;
/// otherwise the softmax at the temperature, cut to the nucleus (the fewest most likely
/// tokens whose mass reaches top-p) and renormalized.
pub fn distribution(cfg: &SamplerConfig, logits: &[f32]) -> Vec<f32> {
    let mut p = vec![0.0; logits.len()];
    if logits.is_empty() {
        return p;
    }
    if cfg.temperature <= 0.0 {
        p[argmax(logits) as usize] = 1.0;
        return p;
    }
    let soft = softmax(logits, cfg.temperature);
    let mut idx: Vec<usize> = (0..soft.len()).collect();
    idx.sort_by(|&a, &b| soft[b].total_cmp(&soft[a]));
    let mut mass = 0.0;
    for &i in &idx {
        p[i] = soft[i];
        mass += soft[i];
        if mass >= cfg.top_p {
            break;
        }
    }
    p.iter_mut().for_each(|x| *x /= mass);
    p
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
    fn the_drawn_distribution_is_what_temperature_and_top_p_make_of_the_logits() {
        let logits = vec![2.0, 1.0, 0.0, -1.0];
        let greedy = distribution(&SamplerConfig::default(), &logits);
        assert_eq!(greedy, vec![1.0, 0.0, 0.0, 0.0]);
        let at = |temperature, top_p| {
            distribution(
                &SamplerConfig {
                    temperature,
                    top_p,
                    seed: 0,
                },
                &logits,
            )
        };
        // Temperature above one flattens: the top token loses probability.
        let own = softmax(&logits, 1.0);
        assert!((at(1.0, 1.0)[0] - own[0]).abs() < 1e-6);
        assert!(at(1.5, 1.0)[0] < own[0] && at(0.5, 1.0)[0] > own[0]);
        // Top-p keeps the fewest tokens reaching the mass, renormalized.
        let nucleus = at(1.0, 0.8);
        assert_eq!(nucleus.iter().filter(|&&x| x > 0.0).count(), 2);
        assert!((nucleus.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((nucleus[0] - own[0] / (own[0] + own[1])).abs() < 1e-6);
    }

    #[test]
    fn top_k_equals_a_full_sort_ties_included() {
        // Values on a coarse grid, so many logits tie.
        let mut x = 7u64;
        let logits: Vec<f32> = (0..5000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 40) % 200) as f32 / 8.0 - 12.0
            })
            .collect();
        let p = softmax(&logits, 1.0);
        let mut all: Vec<usize> = (0..logits.len()).collect();
        all.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        for k in [1, 3, 10, 64] {
            let tk = top_k(&logits, k);
            let ids: Vec<usize> = tk.iter().map(|t| t.0 as usize).collect();
            assert_eq!(ids, all[..k], "k = {k}");
            for (id, l, prob) in tk {
                assert_eq!(l, logits[id as usize]);
                assert!((prob - p[id as usize]).abs() < 1e-6);
            }
        }
        assert!(top_k(&logits, 0).is_empty());
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
