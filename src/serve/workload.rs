//! Seeded workloads: prompt lengths drawn uniformly, output lengths uniformly or
//! log-uniformly, arrival times, prompts cut from real shipped text so the model sees real
//! tokens.

use super::scheduler::Request;
use super::{CacheKind, Policy, ServeConfig};
use crate::model::{Model, TextTokenizer};
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
    /// Requests per second arriving as a Poisson process on the engine's clock, in place
    /// of `mean_gap` (0: arrivals by iteration).
    #[serde(default)]
    pub rate_per_s: f64,
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
            rate_per_s: 0.0,
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
                // Exponential gaps: a Poisson arrival process, in seconds or iterations.
                let gap = match self.rate_per_s {
                    r if r > 0.0 => 1.0 / r,
                    _ => self.mean_gap,
                };
                if gap > 0.0 {
                    let u: f64 = rng.random::<f64>().max(1e-12);
                    t += -u.ln() * gap;
                }
                let mut r = Request::new(i as u64, prompt, o, t as usize);
                if self.rate_per_s > 0.0 {
                    (r.arrival, r.due_s) = (0, Some(t));
                }
                r
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

/// The chat workload's arrival rate on this machine, requests per second, and how it was
/// chosen: the rate that keeps continuous batching [`super::rate::BUSY_SHARE`] busy, from
/// a prefill and a decode step timed on `model` now.
pub fn chat_rate(model: &Model) -> Result<(f64, String), super::ServeError> {
    let (cfg, reqs) = chat_serving(model, Policy::Continuous, CacheKind::Paged, 0.0)?;
    super::rate::measured_rate(model, &reqs, cfg.max_batch)
}

/// Which requests the app's serving engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum AppWorkload {
    /// Ten short chat prompts in a small KV budget: batching and paging at work.
    #[default]
    Chat,
    /// The eight parts of a long story at once: the batch's cache outgrows the weights.
    Long,
}

impl AppWorkload {
    /// Chat ↔ the long story.
    pub fn other(self) -> Self {
        match self {
            AppWorkload::Chat => AppWorkload::Long,
            AppWorkload::Long => AppWorkload::Chat,
        }
    }
}

// ---- The app's two workloads (what the serving pane and the lessons run) ----

/// The token budget per iteration when the app's serving run feeds prompts in chunks
/// (`d`): a long prompt takes several iterations, and the decodes beside it go on in each.
pub const APP_CHUNK_TOKENS: usize = 64;

/// The app's serving run: `workload`'s requests under `policy` and `cache`, one at a time
/// (a batch of one) or batched, with prompts in chunks of [`APP_CHUNK_TOKENS`] or whole.
/// `chat_rate` is the chat requests' arrival rate per second (see [`chat_rate`]).
pub fn app_serving(
    model: &Model,
    (policy, cache): (Policy, CacheKind),
    (workload, chat_rate): (AppWorkload, f64),
    one_at_a_time: bool,
    chunked: bool,
) -> Result<(ServeConfig, Vec<Request>), super::ServeError> {
    let (mut cfg, reqs) = match workload {
        AppWorkload::Chat => chat_serving(model, policy, cache, chat_rate)?,
        AppWorkload::Long => long_serving(model, policy, cache)?,
    };
    if one_at_a_time {
        cfg.max_batch = 1;
    }
    if chunked {
        cfg.token_budget = APP_CHUNK_TOKENS;
    }
    Ok((cfg, reqs))
}

/// Token slots per KV page in the app's serving engines.
pub const APP_PAGE_SIZE: usize = 16;

/// The eight parts of the long story, all arriving in the first iterations, with room for
/// all of them: some 3,000 cached tokens once their prompts are in, a little under the
/// GQA crossover (the weights' ~143 MB ÷ 46,080 B per token ≈ 3,100 tokens), which they
/// pass while they decode; under MHA (≈ 1,140 tokens) the prompts alone are past it.
pub fn long_serving(
    model: &Model,
    policy: Policy,
    cache: CacheKind,
) -> Result<(ServeConfig, Vec<Request>), super::ServeError> {
    let parts = long_parts();
    let w = Workload {
        requests: parts.len(),
        prompt_min: 1,
        prompt_max: 1,
        output_min: 96,
        output_max: 192,
        output_dist: LengthDist::Uniform,
        mean_gap: 0.5,
        rate_per_s: 0.0,
        seed: 5,
    };
    let mut reqs = w.generate(&[0]);
    // The story starts at once: the first part arrives in the first iteration, so the
    // first press of space already has something to run.
    let first = reqs.iter().map(|r| r.arrival).min().unwrap_or(0);
    for (r, part) in reqs.iter_mut().zip(&parts) {
        r.prompt = model.tokenizer.encode(&TextTokenizer::chat_prompt(part))?;
        r.arrival -= first;
    }
    let cfg = ServeConfig {
        policy,
        cache,
        kv_budget_tokens: 6144,
        page_size: APP_PAGE_SIZE,
        max_batch: parts.len(),
        token_budget: 512,
        prefix_sharing: true,
        reserve: Default::default(),
    };
    Ok((cfg, reqs))
}

/// The long story split at its numbered part headings ("I. …", "II. …").
pub fn long_parts() -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    for line in crate::assets::LONG_TEXT.lines() {
        let heading = line
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| "IVX".contains(c)));
        match parts.last_mut() {
            Some(p) if !heading => {
                p.push_str(line);
                p.push('\n');
            }
            _ => parts.push(format!("{line}\n")),
        }
    }
    // The title line before part I joins it.
    if parts.len() > 1 && !parts[0].contains(". ") {
        let title = parts.remove(0);
        parts[0].insert_str(0, &title);
    }
    parts
}

/// The most tokens each chat request may generate, as a client's `max_tokens`: answers
/// usually end sooner, at the model's end-of-turn token, but a contiguous cache must
/// reserve room for all of them up front.
pub const CHAT_MAX_TOKENS: usize = 128;

/// The chat workload's KV memory, in tokens: 24 pages. Memory, not the batch limit, is
/// what binds first: a contiguous reservation (prompt + [`CHAT_MAX_TOKENS`], about 170
/// slots) fits twice, while pages hold only what each request has written, so about
/// twice as many requests run at once in the same memory.
pub const CHAT_KV_TOKENS: usize = 384;

/// The most requests one iteration of the chat workload may run, whatever memory allows.
pub const CHAT_MAX_BATCH: usize = 8;

/// Which line of `assets/prompts.txt` each chat request asks. The second asks one this
/// model answers in a few tokens: it starts with the first (a server opening with two
/// users waiting), so a static batch shows its finished row padding from the start. The
/// third asks the first's question again (see [`chat_serving`]).
const ASKED: [usize; 10] = [0, 8, 0, 3, 4, 5, 6, 7, 1, 9];

/// The app's chat workload: ten requests, each a question from `assets/prompts.txt`
/// after the shared system prompt, arriving as a Poisson process of `rate_per_s` requests
/// a second on the engine's clock (0: a few iterations apart). The third asks again the
/// question of the first, as users do: it arrives once the first has run its prompt and
/// while it still answers (the pool is nearly empty then, whatever this machine's speed),
/// so its prompt shares every page with it, the partly filled last one too, until its
/// first write copies that page (copy-on-write).
pub fn chat_serving(
    model: &Model,
    policy: Policy,
    cache: CacheKind,
    rate_per_s: f64,
) -> Result<(ServeConfig, Vec<Request>), super::ServeError> {
    let w = Workload {
        requests: 10,
        prompt_min: 1,
        prompt_max: 1,
        output_min: CHAT_MAX_TOKENS,
        output_max: CHAT_MAX_TOKENS,
        output_dist: LengthDist::Uniform,
        mean_gap: 3.0,
        rate_per_s,
        // Chosen so the first requests arrive within the first iterations, five within a
        // second at the usual rate: sharing, paging and the queue show from the start.
        seed: 1340,
    };
    let prompts: Vec<&str> = crate::assets::PROMPTS
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let mut reqs = w.generate(&[0]);
    for (r, &asked) in reqs.iter_mut().zip(ASKED.iter().cycle()) {
        r.prompt = model
            .tokenizer
            .encode(&TextTokenizer::chat_prompt(prompts[asked % prompts.len()]))?;
    }
    // The first two arrive together.
    (reqs[1].arrival, reqs[1].due_s) = (reqs[0].arrival, reqs[0].due_s);
    let cfg = ServeConfig {
        policy,
        cache,
        kv_budget_tokens: CHAT_KV_TOKENS,
        page_size: APP_PAGE_SIZE,
        max_batch: CHAT_MAX_BATCH,
        token_budget: 256,
        prefix_sharing: true,
        reserve: Default::default(),
    };
    Ok((cfg, reqs))
}
