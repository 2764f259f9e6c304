//! The small serving setup the engine and scheduler tests share: a config with pages of
//! four and a batch cap of six, and seeded workloads of short prompts.

use inferlab::serve::workload::{LengthDist, Workload};
use inferlab::serve::{CacheKind, Policy, Request, ServeConfig};

/// `policy` and `cache` with `budget` KV tokens, pages of 4, at most 6 requests and 24
/// tokens per iteration.
pub fn cfg(policy: Policy, cache: CacheKind, budget: usize) -> ServeConfig {
    ServeConfig {
        policy,
        cache,
        kv_budget_tokens: budget,
        page_size: 4,
        max_batch: 6,
        token_budget: 24,
        prefix_sharing: true,
        reserve: Default::default(),
    }
}

/// `n` requests with prompts of 3–16 tokens and up to 1–20 new ones, arriving `gap`
/// iterations apart on average.
pub fn workload(n: usize, gap: f64, seed: u64) -> Vec<Request> {
    let source: Vec<u32> = (0..400u32).map(|i| 3 + (i * 7919 % 250)).collect();
    Workload {
        requests: n,
        prompt_min: 3,
        prompt_max: 16,
        output_min: 1,
        output_max: 20,
        output_dist: LengthDist::Uniform,
        mean_gap: gap,
        rate_per_s: 0.0,
        seed,
    }
    .generate(&source)
}
