//! Seeded workloads: prompt lengths drawn uniformly, output lengths uniformly or
//! log-uniformly, arrival times, prompts cut from real shipped text so the model sees real
//! tokens.

use super::scheduler::Request;
use crate::model::TextTokenizer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// How output lengths spread over their range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LengthDist {
    /// Every length equally likely.
    #[default]
    Uniform,
    /// Equally likely per doubling: many short answers and a few long ones, the skew real
    /// chat traffic has (the median of 8–256 is 45 tokens, the mean about 72).
    LogUniform,
}

impl LengthDist {
    /// A length in `lo..=hi`.
    pub fn draw(self, rng: &mut StdRng, lo: usize, hi: usize) -> usize {
        let hi = hi.max(lo);
        match self {
            LengthDist::Uniform => rng.random_range(lo..=hi),
            LengthDist::LogUniform => {
                let (a, b) = ((lo.max(1) as f64).ln(), ((hi + 1) as f64).ln());
                let x = (a + rng.random::<f64>() * (b - a)).exp().floor() as usize;
                x.clamp(lo, hi)
            }
        }
    }
}

/// A workload description.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Workload {
    pub requests: usize,
    pub prompt_min: usize,
    pub prompt_max: usize,
    pub output_min: usize,
    pub output_max: usize,
    /// How output lengths spread (recordings made before this field read as uniform).
    #[serde(default)]
    pub output_dist: LengthDist,
    /// Mean iterations between arrivals (0: everything arrives at once).
    pub mean_gap: f64,
    pub seed: u64,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            requests: 32,
            prompt_min: 16,
            prompt_max: 128,
            output_min: 8,
            output_max: 256,
            output_dist: LengthDist::Uniform,
            mean_gap: 0.0,
            seed: 7,
        }
    }
}

impl Workload {
    /// Draws the requests: each prompt is a window of `source` ids of the drawn length.
    pub fn generate(&self, source: &[u32]) -> Vec<Request> {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut t = 0.0f64;
        (0..self.requests)
            .map(|i| {
                let p = rng.random_range(self.prompt_min..=self.prompt_max.max(self.prompt_min));
                let o = self
                    .output_dist
                    .draw(&mut rng, self.output_min, self.output_max);
                let start = if source.len() > p {
                    rng.random_range(0..source.len() - p)
                } else {
                    0
                };
                let prompt: Vec<u32> = (0..p).map(|k| source[(start + k) % source.len()]).collect();
                if self.mean_gap > 0.0 {
                    // Exponential gaps: a Poisson arrival process.
                    let u: f64 = rng.random::<f64>().max(1e-12);
                    t += -u.ln() * self.mean_gap;
                }
                Request::new(i as u64, prompt, o, t as usize)
            })
            .collect()
    }
}

/// Token ids of the shipped text and prompts, the source of workload prompts.
pub fn source_tokens(tok: &TextTokenizer) -> Vec<u32> {
    let text = format!("{}\n{}", crate::assets::EVAL_TEXT, crate::assets::PROMPTS);
    tok.encode(&text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_stay_in_range_and_log_uniform_leans_short() {
        let mut rng = StdRng::seed_from_u64(1);
        let draw = |d: LengthDist, rng: &mut StdRng| -> Vec<usize> {
            (0..4000).map(|_| d.draw(rng, 8, 256)).collect()
        };
        let (u, l) = (
            draw(LengthDist::Uniform, &mut rng),
            draw(LengthDist::LogUniform, &mut rng),
        );
        for v in [&u, &l] {
            assert!(v.iter().all(|&x| (8..=256).contains(&x)));
            assert!(v.contains(&8) && v.iter().any(|&x| x >= 250));
        }
        let median = |v: &[usize]| {
            let mut s = v.to_vec();
            s.sort();
            s[s.len() / 2]
        };
        // Uniform: about 132. Log-uniform: 8 · 32^0.5 ≈ 45.
        assert!((120..145).contains(&median(&u)), "{}", median(&u));
        assert!((38..54).contains(&median(&l)), "{}", median(&l));
    }
}
