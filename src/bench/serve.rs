//! `bench serve`: the same seeded workload on the real model and the same KV budget,
//! static vs continuous batching and contiguous vs paged cache, side by side; and how the
//! cost of one decode iteration grows with the batch size.

use super::Result;
use crate::kv::paged::{PagedKv, SeqSlots};
use crate::kv::ContiguousBatch;
use crate::model::{AttnRoute, Logits, Model, Unobserved};
use crate::serve::workload::{source_tokens, Workload};
use crate::serve::{CacheKind, Policy, Reserve, ServeConfig, ServeEngine};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// One configuration's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    pub policy: Policy,
    pub cache: CacheKind,
    pub tok_per_s: f64,
    pub generated_tokens: usize,
    pub iterations: usize,
    pub wall_s: f64,
    pub mean_latency_s: f64,
    pub p99_latency_s: f64,
    /// Share of allocated KV memory holding real tokens over the whole run: token slots
    /// summed over iterations ÷ allocated slots summed over iterations, so each iteration
    /// counts by the memory it held (a nearly empty pool at the end weighs little).
    pub kv_utilization_pct: f64,
    pub peak_concurrent: usize,
    pub preemptions: usize,
    pub rejected: usize,
    /// Rows computed for requests already finished (static batching's rigid batch).
    pub padding_rows: usize,
    /// Tokens each request generated, grouped by the iteration that admitted it (a static
    /// run's batches; for the ceiling, not in the JSON).
    #[serde(skip)]
    pub admitted_together: Vec<Vec<usize>>,
}

/// The report; keys as scripts read them.
#[derive(Debug, Clone, Serialize)]
pub struct ServeReport {
    pub workload: Workload,
    pub kv_budget_tokens: usize,
    /// The batch cap of the static vs continuous pair.
    pub max_batch: usize,
    pub page_size: usize,
    /// What the contiguous cache reserves per request.
    pub reserve: Reserve,
    /// One request at a time (a batch of one, each to its end): the baseline.
    pub request_at_a_time: RunFigures,
    /// Continuous batching's throughput over the request-at-a-time baseline.
    pub continuous_over_request_at_a_time: f64,
    #[serde(rename = "static")]
    pub static_: RunFigures,
    pub continuous: RunFigures,
    pub contiguous: RunFigures,
    pub paged: RunFigures,
    /// The uncapped paged run again with pages half as big: less of each request's last
    /// page stands empty (absent when pages are a single token already).
    pub paged_small_pages: Option<RunFigures>,
    pub small_page_size: usize,
    pub preemptions: usize,
    /// The most continuous batching could gain over static batching on the static run's
    /// output lengths, were an iteration's cost the same at any batch size: the rigid
    /// batches' iterations (each as long as its longest request) over the iterations of
    /// every row kept busy. See [`rigid_over_busy`].
    pub continuous_over_static_ceiling: f64,
    /// How a decode iteration's cost grows with the batch (keys at the top level).
    #[serde(flatten)]
    pub steps: StepFigures,
    /// The same kind of requests arriving over time: what each policy's users felt.
    pub arrivals: super::arrivals::ArrivalsReport,
}

/// One decode iteration's cost by batch size, and its matrix work against this machine's
/// int8 peak.
#[derive(Debug, Clone, Serialize)]
pub struct StepFigures {
    /// Batch size → ms for one decode iteration of that many requests.
    pub step_ms_by_batch: BTreeMap<usize, f64>,
    /// One decode step of the single-request path, for comparison with batch size 1.
    pub single_request_step_ms: f64,
    /// Matrix multiply-accumulates per second of those steps, by batch size.
    pub gmac_per_s_by_batch: BTreeMap<usize, f64>,
    /// The same as a fraction of this machine's int8 peak (`bench machine`). Absent on a
    /// GPU: that peak is the CPU's.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub int8_peak_fraction_by_batch: BTreeMap<usize, f64>,
    /// This machine's int8 peak for our kernel (`bench machine`), GMAC/s.
    pub int8_gmac_per_s: f64,
    /// The attention route the steps ran on (`host` or `batched`).
    pub attention_route: &'static str,
    /// Batched route only: operations its attention launches for one decode step of B
    /// requests, B = 1, 2, 4 … 64 (flat in B is the point; every matrix is one operation
    /// at any B besides).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub device_ops_per_step_by_batch: BTreeMap<usize, usize>,
    /// How long ago that peak was measured, seconds (absent when unknown).
    pub machine_age_s: Option<u64>,
}

impl ServeReport {
    /// A table for people.
    pub fn table(&self) -> String {
        let w = &self.workload;
        let mut s = format!(
            "workload: {} requests, prompts {}–{}, outputs {}–{} ({:?}), seed {}; KV budget {} tokens (pages of {}) for every run\n\
             static vs continuous: at most {} requests per iteration; contiguous vs paged (continuous, uncapped): KV memory alone limits the batch, contiguous reserving {}\n",
            w.requests, w.prompt_min, w.prompt_max, w.output_min, w.output_max, w.output_dist, w.seed, self.kv_budget_tokens, self.page_size, self.max_batch,
            match self.reserve {
                Reserve::PromptPlusMaxNew => "prompt + max new tokens",
                Reserve::Context => "the model's whole context",
            }
        );
        s += &self.runs_table();
        s += &format!(
            "continuous / request at a time: {:.2}×\n",
            self.continuous_over_request_at_a_time
        );
        s += &format!(
            "continuous / static throughput: {:.2}× (on these output lengths at most {:.2}×, were an iteration's cost the same at any batch size)\n\
             paged / contiguous peak concurrency: {:.2}×\n\
             static batching computed {} rows for requests already finished (its rigid batch keeps them until the longest is done)\n",
            self.continuous.tok_per_s / self.static_.tok_per_s,
            self.continuous_over_static_ceiling,
            self.paged.peak_concurrent as f64 / self.contiguous.peak_concurrent.max(1) as f64,
            self.static_.padding_rows
        );
        s + &self.steps.table() + &self.arrivals.table()
    }

    /// One line per configuration.
    fn runs_table(&self) -> String {
        let mut s = format!(
            "{:<24} {:>9} {:>6} {:>9} {:>9} {:>8} {:>6} {:>8}\n",
            "configuration", "tok/s", "iters", "mean lat", "p99 lat", "KV util", "peak", "preempt"
        );
        let small = format!("uncapped + paged of {}", self.small_page_size);
        let mut rows = vec![
            ("request at a time", &self.request_at_a_time),
            ("static + paged", &self.static_),
            ("continuous + paged", &self.continuous),
            ("uncapped + contiguous", &self.contiguous),
            ("uncapped + paged", &self.paged),
        ];
        if let Some(f) = &self.paged_small_pages {
            rows.push((small.as_str(), f));
        }
        for (name, f) in rows {
            s += &format!(
                "{:<24} {:>9.1} {:>6} {:>8.1}s {:>8.1}s {:>7.1}% {:>6} {:>8}\n",
                name,
                f.tok_per_s,
                f.iterations,
                f.mean_latency_s,
                f.p99_latency_s,
                f.kv_utilization_pct,
                f.peak_concurrent,
                f.preemptions
            );
        }
        s
    }
}

impl StepFigures {
    /// Measures the steps (see [`step_costs`]) and sets their matrix work against the
    /// machine's int8 peak.
    fn measure(model: &Model, source: &[u32]) -> Result<Self> {
        let (step_ms_by_batch, single_request_step_ms) = step_costs(model, source)?;
        let macs = model.matrix_cost().1 as f64;
        let gmac_per_s_by_batch: BTreeMap<usize, f64> = step_ms_by_batch
            .iter()
            .map(|(&b, &ms)| (b, b as f64 * macs / (ms / 1e3) / 1e9))
            .collect();
        let machine = crate::machine::get()?;
        let int8_gmac_per_s = machine.int8_gmac_per_s;
        let int8_peak_fraction_by_batch = if model.device.is_cpu() {
            gmac_per_s_by_batch
                .iter()
                .map(|(&b, &g)| (b, g / int8_gmac_per_s.max(f64::MIN_POSITIVE)))
                .collect()
        } else {
            BTreeMap::new()
        };
        let mut device_ops_per_step_by_batch = BTreeMap::new();
        if model.run_options().route == AttnRoute::Batched {
            for b in [1, 2, 4, 8, 16, 32, 64] {
                device_ops_per_step_by_batch.insert(b, slot_steps(model, b, source, 1)?.1);
            }
        }
        Ok(Self {
            step_ms_by_batch,
            single_request_step_ms,
            gmac_per_s_by_batch,
            int8_peak_fraction_by_batch,
            int8_gmac_per_s,
            machine_age_s: machine.age_s(),
            attention_route: model.run_options().route.name(),
            device_ops_per_step_by_batch,
        })
    }

    /// The step costs and their matrix work, a line each.
    fn table(&self) -> String {
        let mut s = format!(
            "decode iteration cost by batch size ({} attention route):",
            self.attention_route
        );
        let b1 = self.step_ms_by_batch.get(&1).copied().unwrap_or(1.0);
        for (b, ms) in &self.step_ms_by_batch {
            s += &format!("  B={b}: {ms:.1} ms ({:.1}×)", ms / b1);
        }
        s += &format!(
            "\nsingle-request decode step: {:.1} ms\n",
            self.single_request_step_ms
        );
        s += &if self.int8_peak_fraction_by_batch.is_empty() {
            "matrix work by batch size, on the GPU (`bench machine`'s int8 peak is the CPU's, so no fraction is given):".to_string()
        } else {
            format!(
                "matrix work by batch size, against this machine's int8 peak of {:.1} GMAC/s:",
                self.int8_gmac_per_s
            )
        };
        for (b, g) in &self.gmac_per_s_by_batch {
            s += &match self.int8_peak_fraction_by_batch.get(b) {
                Some(f) => format!("  B={b}: {g:.1} GMAC/s ({:.0}%)", 100.0 * f),
                None => format!("  B={b}: {g:.1} GMAC/s"),
            };
        }
        s += "\n";
        if !self.device_ops_per_step_by_batch.is_empty() {
            s += "operations the batched route's attention launches per decode step:";
            for (b, n) in &self.device_ops_per_step_by_batch {
                s += &format!("  B={b}: {n}");
            }
            s += "\n(on a CPU the batched route is slower than the host route, as expected: \
                  it pads and copies to save launches, which cost a CPU little)\n";
        }
        s + &crate::machine::cached_note(self.machine_age_s)
    }
}

/// Tokens each request generated, grouped by the iteration that admitted it.
fn admitted_together(e: &ServeEngine) -> Vec<Vec<usize>> {
    let mut by_iteration: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for r in e.requests() {
        if let Some(at) = r.admitted_at {
            by_iteration.entry(at).or_default().push(r.generated.len());
        }
    }
    by_iteration.into_values().collect()
}

/// How much longer rigid batches run than batches of `batch` rows refilled the moment a
/// request ends, in decode iterations. `batches` holds each rigid batch's requests as the
/// tokens they generate. A rigid batch lasts as long as its longest request; kept full,
/// the same tokens need `Σ tokens ÷ batch` iterations (and at least the longest
/// request's). If an iteration cost the same at any batch size, this would be the most
/// continuous batching could gain over static. Where a smaller batch costs less, as on a
/// CPU, and where both pay the same prefill, the gain is smaller.
pub fn rigid_over_busy(batches: &[Vec<usize>], batch: usize) -> f64 {
    let longest = |c: &Vec<usize>| c.iter().copied().max().unwrap_or(0);
    let rigid: usize = batches.iter().map(longest).sum();
    let tokens: usize = batches.iter().flatten().sum();
    let busy = tokens
        .div_ceil(batch.max(1))
        .max(batches.iter().map(longest).max().unwrap_or(0));
    rigid as f64 / busy.max(1) as f64
}

pub(crate) fn run_one(
    model: &Model,
    cfg: ServeConfig,
    w: &Workload,
    source: &[u32],
) -> Result<RunFigures> {
    let mut e = ServeEngine::new(model, cfg.clone(), w.generate(source))?;
    let t = Instant::now();
    let (mut tokens, mut allocated, mut peak) = (0usize, 0usize, 0usize);
    while !e.done() {
        let s = e.step()?;
        tokens += s.memory.token_slots;
        allocated += s.memory.allocated_slots;
        peak = peak.max(e.running().len() + s.finished.len());
    }
    let wall = t.elapsed().as_secs_f64();
    let mut lat: Vec<f64> = e
        .requests()
        .iter()
        .filter_map(|r| r.finished_s.map(|f| f - r.arrival_s))
        .collect();
    lat.sort_by(f64::total_cmp);
    let generated: usize = e.requests().iter().map(|r| r.generated.len()).sum();
    Ok(RunFigures {
        policy: cfg.policy,
        cache: cfg.cache,
        tok_per_s: generated as f64 / wall,
        generated_tokens: generated,
        iterations: e.iteration(),
        wall_s: wall,
        mean_latency_s: lat.iter().sum::<f64>() / lat.len().max(1) as f64,
        p99_latency_s: lat
            .get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0),
        kv_utilization_pct: if allocated > 0 {
            100.0 * tokens as f64 / allocated as f64
        } else {
            0.0
        },
        peak_concurrent: peak,
        preemptions: e.preemptions(),
        rejected: e
            .requests()
            .iter()
            .filter(|r| r.reject_reason.is_some())
            .count(),
        padding_rows: e.padding_rows(),
        admitted_together: admitted_together(&e),
    })
}

/// Median ms of one decode iteration (of seven) with `b` requests whose caches hold a
/// 32-token prompt.
pub fn decode_step_ms(model: &Model, b: usize, source: &[u32]) -> Result<f64> {
    if model.run_options().route == AttnRoute::Batched {
        return Ok(super::median(slot_steps(model, b, source, 7)?.0));
    }
    let mut caches: Vec<_> = (0..b).map(|_| model.new_cache(64)).collect();
    let prompts: Vec<Vec<u32>> = (0..b).map(|i| source[i..i + 32].to_vec()).collect();
    for (c, p) in caches.iter_mut().zip(&prompts) {
        model.forward(p, c, Logits::Last)?;
    }
    let mut times = Vec::new();
    for round in 0..7 {
        let toks: Vec<Vec<u32>> = (0..b).map(|i| vec![source[40 + i + round]]).collect();
        let refs: Vec<&[u32]> = toks.iter().map(Vec::as_slice).collect();
        let mut batch = ContiguousBatch(caches.iter_mut().collect());
        let t = Instant::now();
        model.forward_batch(&refs, &mut batch, Logits::Last)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(super::median(times))
}

/// The batched route's decode steps: `b` requests with a 32-token prompt each on one
/// store of slot tensors (a 64-slot page each), then `rounds` decode steps of all of them.
/// Returns each step's ms and the operations the last one's attention launched.
fn slot_steps(model: &Model, b: usize, source: &[u32], rounds: usize) -> Result<(Vec<f64>, usize)> {
    let (layers, shape) = (model.cfg.n_layer, (model.kv_heads(), model.cfg.head_dim));
    let elem = model.run_options().kv_elem;
    let mut kv = PagedKv::on_slots(layers, shape, (b, 64), elem, &model.device)?;
    let tok = |i: usize| source[i % source.len()];
    let prompts: Vec<Vec<u32>> = (0..b).map(|i| (i..i + 32).map(tok).collect()).collect();
    let seq = |i: usize, before: usize, n: usize| SeqSlots {
        before,
        all: (i * 64..i * 64 + before + n).map(|s| s as u32).collect(),
    };
    let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let mut batch = kv.batch((0..b).map(|i| seq(i, 0, 32)).collect());
    model.pass(&refs, &mut batch, &mut Unobserved, Logits::Last)?;
    let (mut times, mut ops) = (Vec::new(), 0);
    for round in 0..rounds {
        let toks: Vec<Vec<u32>> = (0..b).map(|i| vec![tok(40 + i + round)]).collect();
        let refs: Vec<&[u32]> = toks.iter().map(Vec::as_slice).collect();
        let mut batch = kv.batch((0..b).map(|i| seq(i, 32 + round, 1)).collect());
        let t = Instant::now();
        let pass = model.pass(&refs, &mut batch, &mut Unobserved, Logits::Last)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        ops = pass.counts.device_ops;
    }
    Ok((times, ops))
}

/// Median ms of one decode step (of seven) of the single-request path after a 32-token prompt.
fn single_step_ms(model: &Model, source: &[u32]) -> Result<f64> {
    let mut c = model.new_cache(64);
    model.forward(&source[..32], &mut c, Logits::Last)?;
    let mut times = Vec::new();
    for i in 0..7 {
        let t = Instant::now();
        model.forward(&[source[40 + i]], &mut c, Logits::Last)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(super::median(times))
}

/// The batching runs' settings: continuous batching on pages, under the batch cap.
fn capped_config(
    kv_budget_tokens: usize,
    page_size: usize,
    reserve: Reserve,
    max_batch: usize,
) -> ServeConfig {
    ServeConfig {
        policy: Policy::Continuous,
        cache: CacheKind::Paged,
        kv_budget_tokens,
        page_size,
        max_batch,
        token_budget: 512,
        prefix_sharing: true,
        reserve,
    }
}

/// Runs the comparison.
pub fn run(
    model: &Model,
    w: &Workload,
    kv_budget_tokens: usize,
    page_size: usize,
    reserve: Reserve,
    max_batch: usize,
    arrivals: super::arrivals::ArrivalsArgs,
) -> Result<ServeReport> {
    let source = source_tokens(&model.tokenizer);
    refuse_unless!(
        source.len() > 200,
        "the shipped text is too short for the workload"
    );
    let capped = capped_config(kv_budget_tokens, page_size, reserve, max_batch);
    let (static_, continuous, request_at_a_time) = batching_runs(model, &capped, w, &source)?;
    // The cache pair runs without a batch cap: KV memory alone decides how many requests
    // run at once, which is what the layouts differ in.
    let uncapped = ServeConfig {
        max_batch: w.requests,
        ..capped
    };
    let (contiguous, paged, paged_small_pages) = cache_runs(model, &uncapped, w, &source)?;
    let small_page_size = page_size / 2;
    let steps = StepFigures::measure(model, &source)?;
    let shape = (kv_budget_tokens, page_size, max_batch);
    let arrivals = super::arrivals::run(
        model,
        &source,
        &steps.step_ms_by_batch,
        shape,
        arrivals,
        w.seed,
    )?;
    Ok(ServeReport {
        continuous_over_request_at_a_time: continuous.tok_per_s
            / request_at_a_time.tok_per_s.max(f64::MIN_POSITIVE),
        continuous_over_static_ceiling: rigid_over_busy(&static_.admitted_together, max_batch),
        steps,
        arrivals,
        request_at_a_time,
        workload: w.clone(),
        kv_budget_tokens,
        max_batch,
        page_size,
        reserve,
        preemptions: paged.preemptions,
        paged,
        paged_small_pages,
        small_page_size,
        static_,
        continuous,
        contiguous,
    })
}

/// Static and continuous batching under the batch cap, and the baseline the chapter's
/// ~22× is measured against: one request at a time, each run to its end before the next.
fn batching_runs(
    model: &Model,
    capped: &ServeConfig,
    w: &Workload,
    source: &[u32],
) -> Result<(RunFigures, RunFigures, RunFigures)> {
    let with = |policy, max_batch| ServeConfig {
        policy,
        max_batch,
        ..capped.clone()
    };
    Ok((
        run_one(model, with(Policy::Static, capped.max_batch), w, source)?,
        run_one(model, with(Policy::Continuous, capped.max_batch), w, source)?,
        run_one(model, with(Policy::Static, 1), w, source)?,
    ))
}

/// The same uncapped continuous run on a contiguous cache, on pages, and on pages half
/// the size (less left empty in each request's last page), when they can be halved.
fn cache_runs(
    model: &Model,
    paged: &ServeConfig,
    w: &Workload,
    source: &[u32],
) -> Result<(RunFigures, RunFigures, Option<RunFigures>)> {
    let contiguous = ServeConfig {
        cache: CacheKind::Contiguous,
        ..paged.clone()
    };
    let small = ServeConfig {
        page_size: paged.page_size / 2,
        ..paged.clone()
    };
    Ok((
        run_one(model, contiguous, w, source)?,
        run_one(model, paged.clone(), w, source)?,
        (small.page_size >= 1)
            .then(|| run_one(model, small, w, source))
            .transpose()?,
    ))
}

/// One decode step's cost by batch size, and the single-request path's step. Three
/// sweeps over every batch size and the single-request path, interleaved so a burst of
/// noise from the machine hits all of them alike; each keeps its fastest sweep (the
/// median of seven steps each).
fn step_costs(model: &Model, source: &[u32]) -> Result<(BTreeMap<usize, f64>, f64)> {
    let mut step_ms_by_batch: BTreeMap<usize, f64> = BTreeMap::new();
    let mut single = f64::INFINITY;
    for _ in 0..3 {
        single = single.min(single_step_ms(model, source)?);
        for b in [1, 2, 4, 8, 16, 32] {
            let ms = decode_step_ms(model, b, source)?;
            let e = step_ms_by_batch.entry(b).or_insert(ms);
            *e = e.min(ms);
        }
    }
    Ok((step_ms_by_batch, single))
}

#[cfg(test)]
mod tests {
    use super::rigid_over_busy;

    #[test]
    fn a_rigid_batch_lasts_as_long_as_its_longest_request() {
        // Equal lengths: refilling rows gains nothing.
        assert_eq!(rigid_over_busy(&[vec![8, 8, 8], vec![1, 1, 1]], 3), 1.0);
        // One long request holds each batch of three for 10 iterations; kept full, the
        // 24 tokens need 8 rows-of-three, but the longest request still needs 10.
        assert_eq!(rigid_over_busy(&[vec![10, 1, 1], vec![10, 1, 1]], 3), 2.0);
        // Short requests only: 40 tokens in rows of four is 10 iterations against 4 × 7.
        let b = vec![
            vec![7, 1, 1, 1],
            vec![7, 1, 1, 1],
            vec![7, 1, 1, 1],
            vec![7, 1, 1, 1],
        ];
        assert_eq!(rigid_over_busy(&b, 4), 2.8);
        assert_eq!(rigid_over_busy(&[], 8), 0.0);
    }
}
