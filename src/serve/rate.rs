//! How fast requests arrive: the rate of a Poisson process that keeps continuous batching
//! busy a set share of its time on this machine. Queueing's utilization ρ = arrival rate ÷
//! service rate sets how long newcomers wait; at ρ ≈ 0.7 a good scheduler rarely keeps
//! anyone waiting long, and a poor one (static batching, whose batch runs as long as its
//! longest answer) is already near its own limit.

use super::scheduler::Request;
use super::ServeError;
use crate::kv::ContiguousBatch;
use crate::model::{Logits, Model, ModelError};
use std::collections::BTreeMap;
use std::time::Instant;

/// Share of the time the default rate keeps continuous batching busy.
pub const BUSY_SHARE: f64 = 0.7;

/// What one request costs continuous batching, and the rate that keeps the engine busy
/// [`BUSY_SHARE`] of the time: its prompt at the measured prefill cost per token, and its
/// answer's tokens at a decode step's cost shared by the batch (`step_ms_by_batch`: the
/// step's milliseconds by batch size, of which the largest up to `max_batch` counts).
/// Returns the rate in requests per second and how it was chosen, in words.
///
/// Sharing every decode step among a full batch is the estimate's optimism: at such a
/// load the batch is seldom full, each answer token costs more, and the engine runs
/// busier than [`BUSY_SHARE`] (`bench serve` measured 65–89%, mostly over 80%, where 70%
/// was meant).
pub fn default_rate(
    step_ms_by_batch: &BTreeMap<usize, f64>,
    max_batch: usize,
    prefill_ms_per_token: f64,
    (mean_prompt, mean_output): (f64, f64),
) -> (f64, String) {
    let (b, step_ms) = step_ms_by_batch
        .range(..=max_batch)
        .next_back()
        .map_or((1, 10.0), |(b, ms)| (*b, ms.max(0.01)));
    let per_request_ms = mean_prompt * prefill_ms_per_token + mean_output * step_ms / b as f64;
    let rate = BUSY_SHARE * 1e3 / per_request_ms.max(1e-3);
    let why = format!(
        "{:.0}% of what continuous batching serves: a request costs {mean_prompt:.0} prompt tokens at {prefill_ms_per_token:.2} ms and {mean_output:.0} answer tokens at {step_ms:.1} ms per step shared by {b}",
        100.0 * BUSY_SHARE
    );
    (rate, why)
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

/// [`default_rate`] for `reqs` (their mean prompt and answer lengths) served `max_batch`
/// at a time, with both costs measured here and now on `model`: prefills of the first
/// prompt ([`prefill_ms_per_token`]), and the fastest of three decode steps of
/// `max_batch` one-token requests (the first pays for cold caches). Takes a few hundred
/// milliseconds.
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
    let per_token = prefill_ms_per_token(model, prompt)?;
    let b = max_batch.max(1);
    let mut caches: Vec<_> = (0..b).map(|_| model.new_cache(4)).collect();
    let token = [prompt[0]];
    let step_ms = fastest(3, || {
        let seqs = vec![&token[..]; b];
        let mut batch = ContiguousBatch(caches.iter_mut().collect());
        model
            .forward_batch(&seqs, &mut batch, Logits::Last)
            .map(drop)
    })?;
    let n = reqs.len().max(1) as f64;
    let mean_prompt = reqs.iter().map(|r| r.prompt.len()).sum::<usize>() as f64 / n;
    let mean_output = reqs.iter().map(|r| r.max_new).sum::<usize>() as f64 / n;
    let costs = BTreeMap::from([(b, step_ms)]);
    Ok(default_rate(
        &costs,
        b,
        per_token,
        (mean_prompt, mean_output),
    ))
}

/// The fewest milliseconds `f` took over `tries` runs.
fn fastest(tries: usize, mut f: impl FnMut() -> Result<(), ModelError>) -> Result<f64, ModelError> {
    let mut best = f64::INFINITY;
    for _ in 0..tries {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_keeps_the_engine_busy_its_share_of_the_time() {
        // 100 prompt tokens at 1 ms and 40 answer tokens at 10 ms shared by 4:
        // 100 + 100 = 200 ms a request, so 0.7 × 5 = 3.5 requests a second.
        let costs = BTreeMap::from([(1, 5.0), (4, 10.0), (8, 30.0)]);
        let (rate, why) = default_rate(&costs, 6, 1.0, (100.0, 40.0));
        assert!((rate - 3.5).abs() < 1e-9, "{rate}");
        assert!(why.contains("shared by 4"), "{why}");
    }
}
