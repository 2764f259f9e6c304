//! Seeded workloads: prompt and output lengths drawn from uniform ranges, arrival times,
//! prompts cut from real shipped text so the model sees real tokens.

use super::batch::Request;
use crate::model::TextTokenizer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// A workload description.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Workload {
    pub requests: usize,
    pub prompt_min: usize,
    pub prompt_max: usize,
    pub output_min: usize,
    pub output_max: usize,
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
                let o = rng.random_range(self.output_min..=self.output_max.max(self.output_min));
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
    let text = format!(
        "{}\n{}",
        crate::bench::heads::EVAL_TEXT,
        crate::bench::heads::PROMPTS
    );
    tok.encode(&text).unwrap_or_default()
}
