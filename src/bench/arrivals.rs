//! `bench serve`'s arrivals: the same requests arriving over time, a seeded Poisson
//! process on the engine's clock, under static batching, continuous batching (each
//! prompt whole in one iteration, and chunked to a token budget), and one request at a
//! time; what each user felt (time to first token, inter-token latency) and the
//! throughput. A quarter of the prompts are long, cut from the shipped long story: a
//! whole long prompt in one iteration holds every running decode back for that
//! iteration, which is what chunked prefill spreads out.

use super::Result;
use crate::model::Model;
use crate::serve::latency::Latency;
use crate::serve::rate::{
    corrected_rate, estimated_rate, prefill_ms_per_token, Costs, Load, BUSY_SHARE,
};
use crate::serve::workload::{LengthDist, Workload};
use crate::serve::{CacheKind, Policy, Request, ServeConfig, ServeEngine};
use serde::Serialize;
use std::collections::BTreeMap;

/// Requests in the arrivals workload, and every how many one has a long prompt.
const REQUESTS: usize = 24;
const LONG_EVERY: usize = 4;
/// Tokens of a long prompt.
const LONG_PROMPT: usize = 512;
/// The default token budget per iteration of the chunked run (the others take a prompt
/// whole). A chunk should cost an iteration only a few decode steps: on the AVX-512 CPU it
/// was chosen on, a prompt token cost about 1 ms and a decode step 5–10, so 32 tokens add
/// a few steps' time (on an AVX2-only Zen 3, 2.5 ms and 8: about ten steps). At 70% busy the p99 inter-token latency of whole prompts is set by the short prompts'
/// prefills (up to 96 tokens), and chunks of 64, the app's
/// ([`crate::serve::workload::APP_CHUNK_TOKENS`], where all the long prompts arrive at
/// once), measured worse than whole prompts: p99 92 ms against 61.
pub const CHUNK_TOKENS: usize = 32;
const WHOLE_PROMPT: usize = 4096;
/// Least KV memory of the arrivals runs, tokens: room for several long prompts at once,
/// whatever budget the rest of `bench serve` was given.
const MIN_KV_TOKENS: usize = 4096;

/// What the arrivals part is asked for.
#[derive(Debug, Clone)]
pub struct ArrivalsArgs {
    /// Requests per second, or None for the default from this machine's costs.
    pub rate: Option<f64>,
    /// Seeded arrival sequences run one after another and pooled: a p99 over one run's
    /// two dozen requests is its one or two slowest, which a single unlucky arrival sets.
    pub seeds: usize,
    /// Prompt tokens per iteration of the chunked run.
    pub chunk_tokens: usize,
    /// A real server to run the same arrivals on, and its slot count (`--peer`).
    pub peer: Option<(crate::attach::http::Base, usize)>,
}

impl ArrivalsArgs {
    /// Refuses what the arrivals part cannot run, before any of `bench serve` runs.
    pub fn check(&self) -> Result<()> {
        if let Some(r) = self.rate {
            refuse_unless!(
                r > 0.0 && r.is_finite(),
                "--rate must be a number of requests per second above 0 (got {r})"
            );
        }
        refuse_unless!(self.seeds >= 1, "--arrival-seeds must be at least 1");
        refuse_unless!(self.chunk_tokens >= 1, "--chunk-tokens must be at least 1");
        Ok(())
    }
}

/// One policy under the arrivals.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ArrivalRun {
    #[serde(flatten)]
    pub latency: Latency,
    pub tok_per_s: f64,
    pub iterations: usize,
    /// The runs' length on the engine's clock: their iterations and their waits for
    /// arrivals (summed over the pooled sequences, as are the iterations).
    pub wall_s: f64,
    /// Share of `wall_s` the engine was running iterations, percent (the rest it waited
    /// with nothing to do): the utilization the arrival rate was chosen to give.
    pub busy_pct: f64,
    /// Milliseconds of iterations per request: what the engine spent on each, on average.
    pub work_ms_per_request: f64,
}

/// The default rate's first estimate ([`estimated_rate`]), and how busy continuous batching
/// really was at it: the rate used is the estimate scaled by [`BUSY_SHARE`] ÷ that share.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FirstEstimate {
    /// Requests per second the model estimated would keep the engine 70% busy.
    pub rate_per_s: f64,
    /// Requests the estimate expected in a decode step, on average.
    pub batch: f64,
    /// Milliseconds of iterations the estimate expected a request to cost.
    pub work_ms_per_request: f64,
    /// Share of its time continuous batching was busy at this rate, percent.
    pub busy_pct: f64,
}

/// Every policy under the same arrivals.
#[derive(Debug, Clone, Serialize)]
pub struct ArrivalsReport {
    pub rate_per_s: f64,
    /// How the rate was chosen, in words.
    pub rate_basis: String,
    /// The default rate's first estimate and the run that corrected it (null when
    /// `--rate` gave the rate).
    pub first_estimate: Option<FirstEstimate>,
    /// Requests over all the pooled sequences, and how many sequences (seeds) they are.
    pub requests: usize,
    pub seeds: usize,
    pub long_prompts: usize,
    pub long_prompt_tokens: usize,
    pub chunk_tokens: usize,
    pub max_batch: usize,
    pub kv_budget_tokens: usize,
    #[serde(rename = "static")]
    pub static_: ArrivalRun,
    pub continuous: ArrivalRun,
    pub continuous_chunked: ArrivalRun,
    pub request_at_a_time: ArrivalRun,
    /// p99 time to first token, static ÷ continuous.
    pub static_over_continuous_ttft_p99: f64,
    /// p99 inter-token latency, continuous (whole prompts) ÷ continuous chunked.
    pub continuous_over_chunked_itl_p99: f64,
    /// The same requests without the long prompts, at their own default rate: the chat
    /// traffic where a newcomer's wait is all queueing, not a long prefill.
    pub chat_mix: ChatMix,
    /// A real server under the same arrivals (`--peer`), sent in real time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerRun>,
}

/// A real server's row beside ours (`--peer`).
#[derive(Debug, Clone, Serialize)]
pub struct PeerRun {
    #[serde(flatten)]
    pub run: ArrivalRun,
    /// What the server is.
    pub server: String,
    /// Its slots: requests it decodes together (ours ran with this as its batch cap).
    pub max_batch: usize,
}

impl PeerRun {
    /// The server under `sequences`, measured as [`timed`] measures our engine.
    fn measure(
        (base, slots): &(crate::attach::http::Base, usize),
        sequences: &[Vec<Request>],
    ) -> Result<Self> {
        let s = super::peer::run(base, sequences)?;
        let generated: usize = s.requests.iter().map(|r| r.generated.len()).sum();
        let wall = s.wall_s.max(1e-9);
        Ok(Self {
            run: ArrivalRun {
                latency: Latency::of(&s.requests),
                tok_per_s: generated as f64 / wall,
                iterations: s.iterations,
                wall_s: s.wall_s,
                busy_pct: 100.0 * s.busy_s / wall,
                work_ms_per_request: 1e3 * s.busy_s / s.requests.len().max(1) as f64,
            },
            server: s.server,
            max_batch: *slots,
        })
    }
}

/// Static and continuous batching on the short prompts alone.
#[derive(Debug, Clone, Serialize)]
pub struct ChatMix {
    pub rate_per_s: f64,
    #[serde(rename = "static")]
    pub static_: ArrivalRun,
    pub continuous: ArrivalRun,
    /// p99 time to first token, static ÷ continuous.
    pub static_over_continuous_ttft_p99: f64,
}

/// The workload: short chat-like prompts, every [`LONG_EVERY`]th one long.
fn requests(w: &Workload, source: &[u32], long: &[u32]) -> Vec<Request> {
    let mut reqs = w.generate(source);
    for (i, r) in reqs
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| i % LONG_EVERY == 1)
    {
        let start = (i * 97) % long.len().saturating_sub(LONG_PROMPT).max(1);
        r.prompt = long[start..].iter().take(LONG_PROMPT).copied().collect();
    }
    reqs
}

/// `n` requests of the chat workload (the short prompts alone) from `source`, arriving at
/// `rate_per_s`: what `inferlab attach --rate` sends a real server.
pub fn chat_requests(source: &[u32], rate_per_s: f64, n: usize, seed: u64) -> Vec<Request> {
    Workload {
        requests: n,
        rate_per_s,
        ..workload(seed)
    }
    .generate(source)
}

/// The arrivals workload's lengths (its rate is set once chosen).
fn workload(seed: u64) -> Workload {
    Workload {
        requests: REQUESTS,
        prompt_min: 16,
        prompt_max: 96,
        output_min: 16,
        output_max: 64,
        output_dist: LengthDist::Uniform,
        mean_gap: 0.0,
        rate_per_s: 0.0,
        seed,
    }
}

/// Which prompts an arrival sequence holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prompts {
    /// Short chat-like prompts, every [`LONG_EVERY`]th one long.
    Mix,
    /// The short prompts alone.
    Chat,
}

impl Prompts {
    /// The share of prompts that are [`LONG_PROMPT`] tokens long.
    fn long_share(self) -> f64 {
        match self {
            Prompts::Mix => 1.0 / LONG_EVERY as f64,
            Prompts::Chat => 0.0,
        }
    }
}

/// What the seeded arrival sequences are made of; [`Sequences::at`] makes them.
struct Sequences<'a> {
    base: Workload,
    seeds: usize,
    source: &'a [u32],
    long: &'a [u32],
}

impl Sequences<'_> {
    /// Every seed's requests of `prompts`, arriving at `rate_per_s`: the same seeds at any
    /// rate, so a faster rate is the same arrivals closer together.
    fn at(&self, rate_per_s: f64, prompts: Prompts) -> Vec<Vec<Request>> {
        (0..self.seeds as u64)
            .map(|k| Workload {
                seed: self.base.seed + k,
                rate_per_s,
                ..self.base.clone()
            })
            .map(|w| match prompts {
                Prompts::Mix => requests(&w, self.source, self.long),
                Prompts::Chat => w.generate(self.source),
            })
            .collect()
    }

    /// The first estimate of the default rate for `prompts`, from the decode steps
    /// measured by batch size and a prefill of the long prompt timed now.
    fn estimate(
        &self,
        model: &Model,
        prompts: Prompts,
        (step_ms_by_batch, max_batch): (&BTreeMap<usize, f64>, usize),
    ) -> Result<(Load, String)> {
        let (w, share) = (&self.base, prompts.long_share());
        let short = (w.prompt_min + w.prompt_max) as f64 / 2.0;
        let prompt = (1.0 - share) * short + share * LONG_PROMPT as f64;
        let output = (w.output_min + w.output_max) as f64 / 2.0;
        let costs = Costs {
            step_ms_by_batch: step_ms_by_batch.clone(),
            prefill_ms_per_token: prefill_ms_per_token(model, self.long)?,
            max_batch,
        };
        Ok(estimated_rate(&costs, (prompt, output)))
    }
}

/// The rate given by `--rate`, or the default: the `estimate`, corrected by how busy a real
/// run of continuous batching at the estimate (`run_at`) was. The estimate's model of how
/// requests share decode steps is rough, and a few dozen seeded arrivals come a little
/// faster or slower than their rate; the run on those same arrivals measures both.
fn choose_rate(
    given: Option<f64>,
    estimate: impl FnOnce() -> Result<(Load, String)>,
    run_at: impl FnOnce(f64) -> Result<ArrivalRun>,
) -> Result<(f64, String, Option<FirstEstimate>)> {
    if let Some(r) = given {
        return Ok((r, "given by --rate".into(), None));
    }
    let (load, model) = estimate()?;
    let first = FirstEstimate {
        rate_per_s: load.rate_per_s,
        batch: load.batch,
        work_ms_per_request: load.work_ms,
        busy_pct: run_at(load.rate_per_s)?.busy_pct,
    };
    let why = format!(
        "aimed at {:.0}% busy: continuous batching was {:.0}% busy at a first estimate of {:.2} req/s, which is scaled by {:.0}/{:.0}; that estimate took {model}",
        100.0 * BUSY_SHARE,
        first.busy_pct,
        first.rate_per_s,
        100.0 * BUSY_SHARE,
        first.busy_pct,
    );
    let rate = corrected_rate(first.rate_per_s, first.busy_pct / 100.0);
    refuse_unless!(
        rate > 0.0 && rate.is_finite(),
        "the corrected arrival rate is not a rate ({rate}): {why}"
    );
    Ok((rate, why, Some(first)))
}

/// A paged cache of `kv_budget_tokens` in pages of `page_size`, prefixes shared; the
/// policy and batch limits are each run's own.
fn paged(kv_budget_tokens: usize, page_size: usize) -> ServeConfig {
    ServeConfig {
        policy: Policy::Continuous,
        cache: CacheKind::Paged,
        kv_budget_tokens,
        page_size,
        max_batch: 1,
        token_budget: WHOLE_PROMPT,
        prefix_sharing: true,
        reserve: Default::default(),
    }
}

/// Runs every policy on the same timed arrivals (`args.seeds` sequences of them, pooled).
pub fn run(
    model: &Model,
    source: &[u32],
    step_ms_by_batch: &BTreeMap<usize, f64>,
    (kv_budget_tokens, page_size, max_batch): (usize, usize, usize),
    args: ArrivalsArgs,
    seed: u64,
) -> Result<ArrivalsReport> {
    args.check()?;
    let long = long_tokens(model)?;
    let kv_budget_tokens = kv_budget_tokens.max(MIN_KV_TOKENS);
    let cfg = |policy, max_batch, token_budget| ServeConfig {
        policy,
        max_batch,
        token_budget,
        ..paged(kv_budget_tokens, page_size)
    };
    let seqs = Sequences {
        base: workload(seed),
        seeds: args.seeds,
        source,
        long: &long,
    };
    let continuous = cfg(Policy::Continuous, max_batch, WHOLE_PROMPT);
    // Given, or estimated and corrected by a run of continuous batching at the estimate.
    let rate_for = |prompts| {
        choose_rate(
            args.rate,
            || seqs.estimate(model, prompts, (step_ms_by_batch, max_batch)),
            |r| timed(model, continuous.clone(), &seqs.at(r, prompts)),
        )
    };
    let (rate_per_s, rate_basis, first_estimate) = rate_for(Prompts::Mix)?;
    let mix = seqs.at(rate_per_s, Prompts::Mix);
    let one = |c: ServeConfig| timed(model, c, &mix);
    let runs = [
        one(cfg(Policy::Static, max_batch, WHOLE_PROMPT))?,
        one(continuous.clone())?,
        one(cfg(Policy::Continuous, max_batch, args.chunk_tokens))?,
        one(cfg(Policy::Static, 1, WHOLE_PROMPT))?,
    ];
    // The short prompts alone: at the rate that keeps continuous batching as busy as the
    // mix does (the same rate when --rate gives one).
    let (chat_rate, _, _) = rate_for(Prompts::Chat)?;
    let chat = seqs.at(chat_rate, Prompts::Chat);
    let static_cfg = cfg(Policy::Static, max_batch, WHOLE_PROMPT);
    let chat_mix = ChatMix::run(model, (chat_rate, &chat), static_cfg)?;
    let peer = args.peer.as_ref().map(|p| PeerRun::measure(p, &mix));
    Ok(ArrivalsReport {
        peer: peer.transpose()?,
        ..ArrivalsReport::of(
            (rate_per_s, rate_basis, first_estimate),
            (count_long(&mix), max_batch, kv_budget_tokens),
            (args, runs),
            chat_mix,
        )
    })
}

/// The shipped long story's tokens, which the long prompts are cut from.
fn long_tokens(model: &Model) -> Result<Vec<u32>> {
    let long = model.tokenizer.encode(crate::assets::LONG_TEXT)?;
    refuse_unless!(
        long.len() > LONG_PROMPT,
        "the shipped long story is too short"
    );
    Ok(long)
}

/// How many of the sequences' prompts are long.
fn count_long(sequences: &[Vec<Request>]) -> usize {
    sequences
        .iter()
        .flatten()
        .filter(|r| r.prompt.len() == LONG_PROMPT)
        .count()
}

impl ChatMix {
    /// Static batching under `static_cfg` and continuous batching under the same budgets,
    /// on `sequences`, arriving at `rate_per_s`.
    fn run(
        model: &Model,
        (rate_per_s, sequences): (f64, &[Vec<Request>]),
        static_cfg: ServeConfig,
    ) -> Result<Self> {
        let continuous_cfg = ServeConfig {
            policy: Policy::Continuous,
            ..static_cfg.clone()
        };
        let static_ = timed(model, static_cfg, sequences)?;
        let continuous = timed(model, continuous_cfg, sequences)?;
        Ok(Self {
            rate_per_s,
            static_over_continuous_ttft_p99: static_.latency.ttft_ms_p99
                / continuous.latency.ttft_ms_p99.max(1e-9),
            static_,
            continuous,
        })
    }
}

impl ArrivalsReport {
    /// The report of the four runs: static, continuous, continuous chunked, one at a time.
    fn of(
        (rate_per_s, rate_basis, first_estimate): (f64, String, Option<FirstEstimate>),
        (long_prompts, max_batch, kv_budget_tokens): (usize, usize, usize),
        (args, runs): (ArrivalsArgs, [ArrivalRun; 4]),
        chat_mix: ChatMix,
    ) -> Self {
        let [static_, continuous, continuous_chunked, request_at_a_time] = runs;
        let ratio = |a: f64, b: f64| a / b.max(1e-9);
        Self {
            rate_per_s,
            rate_basis,
            first_estimate,
            requests: REQUESTS * args.seeds,
            seeds: args.seeds,
            long_prompts,
            long_prompt_tokens: LONG_PROMPT,
            chunk_tokens: args.chunk_tokens,
            max_batch,
            kv_budget_tokens,
            static_over_continuous_ttft_p99: ratio(
                static_.latency.ttft_ms_p99,
                continuous.latency.ttft_ms_p99,
            ),
            continuous_over_chunked_itl_p99: ratio(
                continuous.latency.itl_ms_p99,
                continuous_chunked.latency.itl_ms_p99,
            ),
            static_,
            continuous,
            continuous_chunked,
            request_at_a_time,
            chat_mix,
            peer: None,
        }
    }
}

/// One policy over every sequence of arrivals, each on a fresh engine and its clock (with
/// nothing to do, the engine waits for the next arrival: its clock jumps there, the bench
/// does not sleep through it). Latency percentiles are over all their requests together.
fn timed(model: &Model, cfg: ServeConfig, sequences: &[Vec<Request>]) -> Result<ArrivalRun> {
    let (mut served, mut wall_s, mut idle_s, mut iterations) = (Vec::new(), 0.0, 0.0, 0);
    for reqs in sequences {
        let mut e = ServeEngine::new(model, cfg.clone(), reqs.clone())?;
        while !e.done() {
            e.step()?;
        }
        (wall_s, idle_s) = (wall_s + e.clock_s(), idle_s + e.idle_s());
        iterations += e.iteration();
        served.extend_from_slice(e.requests());
    }
    let generated: usize = served.iter().map(|r| r.generated.len()).sum();
    Ok(ArrivalRun {
        latency: Latency::of(&served),
        tok_per_s: generated as f64 / wall_s.max(1e-9),
        iterations,
        wall_s,
        busy_pct: 100.0 * (1.0 - idle_s / wall_s.max(1e-9)),
        work_ms_per_request: 1e3 * (wall_s - idle_s) / served.len().max(1) as f64,
    })
}

impl ArrivalsReport {
    /// A table for people.
    pub fn table(&self) -> String {
        let mut s = format!(
            "arrivals: {} requests ({} with {}-token prompts; {} seeded sequences pooled) at {:.2} req/s, a Poisson process ({})\n\
             {:<28}{:>14}{:>14}{:>13}{:>13}{:>10}{:>7}\n",
            self.requests,
            self.long_prompts,
            self.long_prompt_tokens,
            self.seeds,
            self.rate_per_s,
            self.rate_basis,
            "",
            "TTFT p50 ms",
            "TTFT p99 ms",
            "ITL p50 ms",
            "ITL p99 ms",
            "tok/s",
            "busy"
        );
        let chunked = format!("continuous, chunks of {}", self.chunk_tokens);
        let mut rows = vec![
            ("static".to_string(), &self.static_),
            ("continuous, whole prompts".into(), &self.continuous),
            (chunked, &self.continuous_chunked),
            ("one request at a time".into(), &self.request_at_a_time),
        ];
        if let Some(p) = &self.peer {
            rows.push((format!("{} (peer)", p.server), &p.run));
        }
        for (name, r) in rows {
            let l = &r.latency;
            s += &format!(
                "{name:<28}{:>14.1}{:>14.1}{:>13.1}{:>13.1}{:>10.1}{:>6.0}%\n",
                l.ttft_ms_p50, l.ttft_ms_p99, l.itl_ms_p50, l.itl_ms_p99, r.tok_per_s, r.busy_pct
            );
        }
        if let Some(p) = &self.peer {
            s += &format!(
                "the peer ran the same requests in real time with {} slots; ours ran with a batch cap of {} (its slot count, so the two decode as many at once)\n",
                p.max_batch, self.max_batch
            );
        }
        let c = &self.chat_mix;
        s + &format!(
            "p99 TTFT static / continuous: {:.2}× · p99 ITL whole prompts / chunked: {:.2}×\n\
             without the long prompts, at {:.2} req/s: p99 TTFT static {:.1} ms / continuous {:.1} ms = {:.2}×\n",
            self.static_over_continuous_ttft_p99,
            self.continuous_over_chunked_itl_p99,
            c.rate_per_s,
            c.static_.latency.ttft_ms_p99,
            c.continuous.latency.ttft_ms_p99,
            c.static_over_continuous_ttft_p99
        )
    }
}
