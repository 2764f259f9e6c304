//! `bench kv`: the cache's element type side by side (f32, f16, int8 with a scale per
//! token and KV head): bytes per token, where the cache outweighs the weights, how many
//! requests fit a budget, what the rounding costs in the model's predictions against
//! f32, and serving throughput on pages and on a contiguous cache.
//!
//! The quality figures come from the model with f32 weights, where nothing else rounds:
//! with int8 weights each matrix product rounds its input to int8 too, which turns any
//! change, even f32 sums taken in another order, into a few flipped top-1 picks (about
//! 2% on this text), and the cache's own cost drowns in that.

use super::heads::{all_logits, quality, WORKLOAD_TOKENS};
use super::Result;
use crate::assets::EVAL_TEXT;
use crate::kv::KvElem;
use crate::model::{Model, RunOptions};
use crate::serve::workload::{source_tokens, Workload};
use crate::serve::{CacheKind, Policy, Reserve, ServeConfig, ServeEngine};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// Slots per page of the serving runs' paged cache.
pub const PAGE_SIZE: usize = 16;

/// One element type's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ElemFigures {
    pub bytes_per_token: usize,
    /// Cached tokens at which one decode step reads as many KV bytes as weight bytes.
    pub crossover_tokens: usize,
    /// Requests of `tokens_per_request` whose caches fit the budget at once.
    pub requests_fit: usize,
    /// Share of the eval text's positions whose top next token is f32's.
    pub top1_agreement: f64,
    /// Mean KL divergence from f32's next-token distribution, nats.
    pub kl: f64,
    pub perplexity: f64,
    /// Serving throughput on the workload, paged and contiguous (median of the rounds).
    pub paged_tok_per_s: f64,
    pub contiguous_tok_per_s: f64,
    /// The median over rounds of each round's paged ÷ contiguous.
    pub paged_over_contiguous: f64,
}

/// The report; keys as scripts read them.
#[derive(Debug, Clone, Serialize)]
pub struct KvReport {
    pub budget_bytes: usize,
    pub tokens_per_request: usize,
    /// Weight bytes one decode step reads (the crossover's other side).
    pub weight_bytes: usize,
    pub eval_tokens: usize,
    pub workload: Workload,
    pub kv_budget_tokens: usize,
    pub rounds: usize,
    #[serde(flatten)]
    pub elems: BTreeMap<String, ElemFigures>,
}

impl KvReport {
    /// A table for people.
    pub fn table(&self) -> String {
        let mut s = format!(
            "KV budget {:.0} MiB, {} tokens per request; weights {:.1} MiB per step; quality on {} tokens of assets/eval.txt against f32 (f32 weights); serving {} requests, {} KV tokens, paged and contiguous in lock-step, median of {} rounds\n",
            self.budget_bytes as f64 / 1048576.0,
            self.tokens_per_request,
            self.weight_bytes as f64 / 1048576.0,
            self.eval_tokens,
            self.workload.requests,
            self.kv_budget_tokens,
            self.rounds,
        );
        s += &format!(
            "{:<5} {:>8} {:>10} {:>5} {:>8} {:>9} {:>6} {:>11} {:>11} {:>7}\n",
            "type",
            "B/token",
            "crossover",
            "fit",
            "top-1 =",
            "KL",
            "ppl",
            "paged t/s",
            "contig t/s",
            "p ÷ c"
        );
        for e in KvElem::ALL {
            let f = &self.elems[e.name()];
            s += &format!(
                "{:<5} {:>8} {:>10} {:>5} {:>7.2}% {:>9.5} {:>6.3} {:>11.1} {:>11.1} {:>7.3}\n",
                e.name(),
                f.bytes_per_token,
                f.crossover_tokens,
                f.requests_fit,
                100.0 * f.top1_agreement,
                f.kl,
                f.perplexity,
                f.paged_tok_per_s,
                f.contiguous_tok_per_s,
                f.paged_over_contiguous
            );
        }
        s
    }
}

/// What a run of `bench kv` measures on.
pub struct KvBench {
    pub budget_bytes: usize,
    pub workload: Workload,
    pub kv_budget_tokens: usize,
    pub rounds: usize,
}

/// `base` under every element type (its layout and kernel as they are).
fn under_every_type(base: &Model) -> Result<Vec<(KvElem, Model)>> {
    KvElem::ALL
        .iter()
        .map(|&kv_elem| {
            let run = RunOptions {
                kv_elem,
                ..base.run_options()
            };
            Ok((kv_elem, base.with_run(run)?))
        })
        .collect()
}

/// Runs the comparison: speeds and sizes on `base`, quality on `exact` (the same model
/// with f32 weights).
pub fn run(base: &Model, exact: &Model, b: &KvBench) -> Result<KvReport> {
    let models = under_every_type(base)?;
    let exact = under_every_type(exact)?;
    let seqs = vec![base.tokenizer.encode(EVAL_TEXT.trim())?];
    let reference = all_logits(&exact[0].1, &seqs)?;
    let speeds = serving_speeds(&models, b)?;
    let weight_bytes = base.matrix_cost().0;
    let mut elems = BTreeMap::new();
    for (((elem, m), (_, e)), (paged, contiguous, ratio)) in models.iter().zip(&exact).zip(speeds) {
        // f32 against itself is the reference, already computed.
        let logits = match elem {
            KvElem::F32 => reference.clone(),
            _ => all_logits(e, &seqs)?,
        };
        let q = quality(&seqs, &logits, &reference, base.cfg.vocab);
        let bpt = m.kv_bytes_per_token();
        elems.insert(
            elem.name().to_string(),
            ElemFigures {
                bytes_per_token: bpt,
                crossover_tokens: weight_bytes / bpt,
                requests_fit: b.budget_bytes / (bpt * WORKLOAD_TOKENS),
                top1_agreement: q.top1_agreement,
                kl: q.mean_kl,
                perplexity: q.perplexity,
                paged_tok_per_s: paged,
                contiguous_tok_per_s: contiguous,
                paged_over_contiguous: ratio,
            },
        );
    }
    Ok(KvReport {
        budget_bytes: b.budget_bytes,
        tokens_per_request: WORKLOAD_TOKENS,
        weight_bytes,
        eval_tokens: seqs[0].len() - 1,
        workload: b.workload.clone(),
        kv_budget_tokens: b.kv_budget_tokens,
        rounds: b.rounds,
        elems,
    })
}

/// Per element type: paged and contiguous serving tok/s and paged ÷ contiguous, each the
/// median over rounds. Within a round the two serve in lock-step ([`paired_tok_per_s`]).
fn serving_speeds(models: &[(KvElem, Model)], b: &KvBench) -> Result<Vec<(f64, f64, f64)>> {
    let source = source_tokens(&models[0].1.tokenizer);
    let cfg = |cache| ServeConfig {
        policy: Policy::Continuous,
        cache,
        kv_budget_tokens: b.kv_budget_tokens,
        page_size: PAGE_SIZE,
        max_batch: b.workload.requests,
        token_budget: 512,
        prefix_sharing: true,
        reserve: Reserve::PromptPlusMaxNew,
    };
    let mut runs = vec![(Vec::new(), Vec::new(), Vec::new()); models.len()];
    for round in 0..b.rounds.max(1) {
        for ((_, m), (p, c, r)) in models.iter().zip(runs.iter_mut()) {
            let [paged, contiguous] = paired_tok_per_s(
                m,
                [cfg(CacheKind::Paged), cfg(CacheKind::Contiguous)],
                (&b.workload, &source),
                round % 2 == 1,
            )?;
            p.push(paged);
            c.push(contiguous);
            r.push(paged / contiguous.max(f64::MIN_POSITIVE));
        }
    }
    Ok(runs
        .into_iter()
        .map(|(p, c, r)| (super::median(p), super::median(c), super::median(r)))
        .collect())
}

/// Tokens per second of two configurations serving the same workload in lock-step: one
/// iteration of each in turn (the second opening every turn when `second_first`), each
/// timed over its own iterations. The machine's noise comes in bursts of a second or more,
/// so run one after the other the two met different bursts (their ratio swung ±8% from
/// round to round); interleaved, a burst slows both alike. Each step also starts with the
/// other's data in the CPU's caches, so both read slower than alone: the ratio is the
/// figure, not either speed.
fn paired_tok_per_s(
    m: &Model,
    cfgs: [ServeConfig; 2],
    (w, source): (&Workload, &[u32]),
    second_first: bool,
) -> Result<[f64; 2]> {
    let first = usize::from(second_first);
    let mut engines = Vec::new();
    for c in cfgs {
        engines.push(ServeEngine::new(m, c, w.generate(source))?);
    }
    let mut busy_s = [0.0f64; 2];
    while engines.iter().any(|e| !e.done()) {
        for i in [first, 1 - first] {
            if !engines[i].done() {
                let t = Instant::now();
                engines[i].step()?;
                busy_s[i] += t.elapsed().as_secs_f64();
            }
        }
    }
    Ok([0, 1].map(|i| {
        let generated: usize = engines[i]
            .requests()
            .iter()
            .map(|r| r.generated.len())
            .sum();
        generated as f64 / busy_s[i].max(f64::MIN_POSITIVE)
    }))
}
