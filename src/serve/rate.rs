//! How fast requests arrive: the rate of a Poisson process that keeps continuous batching
//! busy a set share of its time on this machine. Queueing's utilization ρ = arrival rate ÷
//! service rate sets how long newcomers wait; at ρ ≈ 0.7 a good scheduler rarely keeps
//! anyone waiting long, and a poor one (static batching, whose batch runs as long as its
//! longest answer) is already near its own limit.
//!
//! What a request costs depends on the rate itself: a decode step is shared by the
//! requests decoding together, and how many those are depends on how fast they come.
//! [`estimated_rate`] solves for that with Little's law; `bench serve` then checks the
//! estimate with a real run and corrects it ([`corrected_rate`]).

use super::scheduler::Request;
use super::ServeError;
use crate::kv::ContiguousBatch;
use crate::model::{Logits, Model, ModelError};
use std::collections::BTreeMap;
use std::time::Instant;

/// Share of the time the default rate keeps continuous batching busy.
pub const BUSY_SHARE: f64 = 0.7;

/// What continuous batching's costs were measured to be on this machine.
#[derive(Debug, Clone)]
pub struct Costs {
    /// A decode step's milliseconds by batch size (requests decoding together).
    pub step_ms_by_batch: BTreeMap<usize, f64>,
    /// Prefill milliseconds per prompt token.
    pub prefill_ms_per_token: f64,
    /// Most requests decoding together.
    pub max_batch: usize,
}

/// What one request of a workload costs continuous batching at one arrival rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// Requests per second.
    pub rate_per_s: f64,
    /// Mean requests in a decode step (those decoding when any is).
    pub batch: f64,
    /// Milliseconds of iterations per request: its prefill and its share of decode steps.
    pub work_ms: f64,
}

impl Costs {
    /// A decode step's milliseconds at a batch of `b` (a mean, so fractional): straight
    /// lines between the measured sizes, the nearest one outside them.
    pub fn step_ms(&self, b: f64) -> f64 {
        let m = &self.step_ms_by_batch;
        let below = m.range(..=b.floor() as usize).next_back();
        let above = m.range(b.ceil() as usize..).next();
        match (below, above) {
            (Some((&b0, &t0)), Some((&b1, &t1))) if b1 > b0 => {
                t0 + (t1 - t0) * (b - b0 as f64) / (b1 - b0) as f64
            }
            (Some((_, &t)), _) | (None, Some((_, &t))) => t,
            // Nothing measured: a CPU decode step of this model, as a placeholder.
            (None, None) => 10.0,
        }
        .max(0.01)
    }

    /// The load `rate_per_s` requests a second of `mean_prompt` prompt tokens and
    /// `mean_output` answer tokens put on continuous batching. A request's prefill takes
    /// the engine `prefill` = prompt × cost per token, a share λ·prefill of all its time;
    /// its `output` decode steps are stretched by the other requests' prefills, so it
    /// decodes for W = output × step(B) ÷ (1 − λ·prefill). Little's law puts N = λ·W
    /// requests decoding on average; a step that decodes at all has B = N ÷ (1 − e^−N) of
    /// them (the mean of a Poisson count, given it is not zero). Each answer token then
    /// costs step(B) ÷ B. B and W depend on each other, so they are iterated to agreement.
    pub fn load(&self, rate_per_s: f64, (mean_prompt, mean_output): (f64, f64)) -> Load {
        let prefill_s = mean_prompt * self.prefill_ms_per_token / 1e3;
        let stretch = 1.0 / (1.0 - rate_per_s * prefill_s).max(0.05);
        let cap = self.max_batch.max(1) as f64;
        let mut batch = 1.0;
        for _ in 0..50 {
            let decoding_s = mean_output * self.step_ms(batch) / 1e3 * stretch;
            let n = (rate_per_s * decoding_s).max(1e-9);
            batch = (n / (1.0 - (-n).exp())).clamp(1.0, cap);
        }
        Load {
            rate_per_s,
            batch,
            work_ms: 1e3 * prefill_s + mean_output * self.step_ms(batch) / batch,
        }
    }
}

/// The rate that keeps continuous batching [`BUSY_SHARE`] busy by [`Costs::load`]: where
/// rate × work per request = [`BUSY_SHARE`] (the product grows with the rate, so halving
/// the interval finds it; no rate above a million a second is tried). Returns the load
/// there and the costs it assumed, in words.
pub fn estimated_rate(costs: &Costs, lengths: (f64, f64)) -> (Load, String) {
    let busy = |r: f64| r * costs.load(r, lengths).work_ms / 1e3;
    let (mut lo, mut hi) = (0.0, 1.0);
    while busy(hi) < BUSY_SHARE && hi < 1e6 {
        hi *= 2.0;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if busy(mid) < BUSY_SHARE {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let load = costs.load(hi, lengths);
    let (prompt, output) = lengths;
    let why = format!(
        "{prompt:.0} prompt tokens a request at {:.2} ms per token, and {output:.0} answer tokens at {:.1} ms per decode step shared by {:.1} requests on average",
        costs.prefill_ms_per_token,
        costs.step_ms(load.batch),
        load.batch,
    );
    (load, why)
}

/// How `bench serve` corrects [`estimated_rate`], in one approximate step: a real run at
/// `rate_per_s` kept the engine busy `busy_share` of its time, and on the same seeded
/// arrivals, closer together or further apart, the busy share moves nearly in proportion
/// to the rate. Nearly: what a request costs changes with the load as well (shared steps,
/// prefills that stall more decodes), so the run at the corrected rate lands a few points
/// off (`bench serve` measured 70–77% busy after first runs at 56–60%). A first run that
/// was saturated (busy near 100%) would say too little to correct from.
pub fn corrected_rate(rate_per_s: f64, busy_share: f64) -> f64 {
    rate_per_s * BUSY_SHARE / busy_share.max(1e-3)
}

/// Milliseconds per token of a prefill of `tokens` (at most 256 of them) on `model`: the
/// median of three.
pub fn prefill_ms_per_token(model: &Model, tokens: &[u32]) -> Result<f64, ModelError> {
    let n = tokens.len().min(256);
    let mut ms = Vec::new();
    for _ in 0..3 {
        let mut c = model.new_cache(n);
        let t = Instant::now();
        model.forward(&tokens[..n], &mut c, Logits::Last)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3 / n.max(1) as f64);
    }
    Ok(super::latency::percentile(&ms, 50.0))
}

/// [`estimated_rate`] for `reqs` (their mean prompt and answer lengths) served `max_batch`
/// at a time, with the costs measured here and now on `model`: prefills of the first
/// prompt ([`prefill_ms_per_token`]), and the fastest of three decode steps of one request
/// and of `max_batch` (the first pays for cold caches). Takes a few hundred milliseconds.
pub fn measured_rate(
    model: &Model,
    reqs: &[Request],
    max_batch: usize,
) -> Result<(f64, String), ServeError> {
    let prompt = reqs
        .iter()
        .map(|r| r.prompt.as_slice())
        .find(|p| !p.is_empty())
        .ok_or_else(|| ServeError::Config("no request with a prompt to time".into()))?;
    let prefill_ms_per_token = prefill_ms_per_token(model, prompt)?;
    let mut step_ms_by_batch = BTreeMap::new();
    for b in [1, max_batch.max(1)] {
        step_ms_by_batch.insert(b, step_ms(model, prompt[0], b)?);
    }
    let n = reqs.len().max(1) as f64;
    let mean_prompt = reqs.iter().map(|r| r.prompt.len()).sum::<usize>() as f64 / n;
    let mean_output = reqs.iter().map(|r| r.max_new).sum::<usize>() as f64 / n;
    let costs = Costs {
        step_ms_by_batch,
        prefill_ms_per_token,
        max_batch,
    };
    let (load, why) = estimated_rate(&costs, (mean_prompt, mean_output));
    Ok((load.rate_per_s, why))
}

/// The fastest of three decode steps of `b` one-token requests.
fn step_ms(model: &Model, token: u32, b: usize) -> Result<f64, ModelError> {
    let mut caches: Vec<_> = (0..b).map(|_| model.new_cache(4)).collect();
    let token = [token];
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let seqs = vec![&token[..]; b];
        let mut batch = ContiguousBatch(caches.iter_mut().collect());
        let t = Instant::now();
        model.forward_batch(&seqs, &mut batch, Logits::Last)?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> Costs {
        Costs {
            step_ms_by_batch: BTreeMap::from([(1, 8.0), (4, 11.0), (8, 15.0)]),
            prefill_ms_per_token: 1.0,
            max_batch: 8,
        }
    }

    #[test]
    fn a_step_s_cost_runs_straight_between_measured_batches() {
        let c = costs();
        assert_eq!(c.step_ms(1.0), 8.0);
        assert!((c.step_ms(2.5) - 9.5).abs() < 1e-9);
        assert!((c.step_ms(6.0) - 13.0).abs() < 1e-9);
        assert_eq!(c.step_ms(0.5), 8.0);
        assert_eq!(c.step_ms(12.0), 15.0);
    }

    #[test]
    fn a_light_load_decodes_alone_and_a_heavy_one_shares_its_steps() {
        let c = costs();
        // A request every 100 s: nobody decodes together, each token costs a whole step.
        let light = c.load(0.01, (100.0, 40.0));
        assert!(light.batch < 1.01, "{light:?}");
        assert!(
            (light.work_ms - (100.0 + 40.0 * 8.0)).abs() < 1.0,
            "{light:?}"
        );
        // Forty a second of decode-only requests fill the batch: a token costs 15 ms ÷ 8.
        let heavy = c.load(40.0, (0.0, 40.0));
        assert_eq!(heavy.batch, 8.0);
        assert!(
            (heavy.work_ms - 40.0 * 15.0 / 8.0).abs() < 1e-6,
            "{heavy:?}"
        );
    }

    #[test]
    fn the_estimated_rate_keeps_the_engine_busy_its_share_of_the_time() {
        let c = costs();
        let (load, why) = estimated_rate(&c, (100.0, 40.0));
        let busy = load.rate_per_s * load.work_ms / 1e3;
        assert!((busy - BUSY_SHARE).abs() < 1e-6, "{load:?}");
        // Sharing steps makes a request cheaper than alone (420 ms), dearer than in a
        // full batch (175 ms).
        assert!(load.work_ms < 419.0 && load.work_ms > 176.0, "{load:?}");
        assert!(load.batch > 1.0 && load.batch < 8.0, "{load:?}");
        assert!(why.contains("shared by"), "{why}");
        assert!((corrected_rate(2.0, 0.8) - 1.75).abs() < 1e-12);
    }
}
