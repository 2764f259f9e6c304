//! What one iteration produced, as plain serializable data: the UI, `trace --json` and
//! recordings read the same structs.

use crate::model::session::StepInfo;
use crate::model::LlamaConfig;
use crate::serve::{CacheKind, Policy, ServeStep};
use crate::settings::Settings;
use serde::{Deserialize, Serialize};

/// The KV cache of the request as the store reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct KvReport {
    /// Token slots reserved (contiguous: prompt + max new tokens).
    pub capacity: usize,
    /// Slots holding real tokens.
    pub used: usize,
    pub bytes_per_token: usize,
    pub reserved_bytes: usize,
}

impl KvReport {
    /// Share of reserved memory holding real tokens, percent.
    pub fn utilization_pct(&self) -> f64 {
        if self.capacity == 0 {
            0.0
        } else {
            100.0 * self.used as f64 / self.capacity as f64
        }
    }
}

/// Why a report read from a file cannot be drawn: a count, index or length the screens
/// would trust is out of range, said in words (which iteration's which part).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Inconsistent(pub String);

impl From<&str> for Inconsistent {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl From<String> for Inconsistent {
    fn from(s: String) -> Self {
        Self(s)
    }
}

/// One iteration of the engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepReport {
    /// Iterations since the engine started (survives prompt changes).
    pub iteration: usize,
    pub cfg: LlamaConfig,
    /// What the worker ran this iteration under: every pane's title reads these, so a
    /// title names what its body was computed with (the user's newer choices apply from
    /// the next report on).
    pub settings: Settings,
    pub prompt: String,
    /// Every token of the sequence so far as printable pieces (prompt, then generated).
    pub pieces: Vec<String>,
    pub prompt_len: usize,
    /// The generated text so far.
    pub generated: String,
    pub info: StepInfo,
    pub kv: KvReport,
    /// Decode speed over this request's decode steps so far.
    pub decode_tok_per_s: f64,
    pub finished: bool,
    /// This report recomputed the request's tokens under new settings (`m`, `f`): its
    /// distribution is for the same next position as the report before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recomputed: bool,
    /// The request had already finished: its last report again, carrying the serving and
    /// sink iterations that went on beside it (no new token, no new attention rows).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat: bool,
    /// The serving side: a small workload batched beside the request above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<ServeReport>,
    /// The same workload under one other setting, when comparing side by side.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "serve_b")]
    pub serve_compare: Option<ServeReport>,
    /// The attention-sink experiment, when it is on: one more token of the shipped text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<crate::sink::SinkView>,
    /// The same tokens under another head layout, when it is shown beside (`M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beside: Option<BesideReport>,
}

/// The live request's tokens run under a second head layout: its next-token distribution
/// for the same position, its cache so far, and how often its top token was the one the
/// live request took.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BesideReport {
    pub layout: crate::model::HeadLayout,
    pub top_k: Vec<crate::model::sampler::TopToken>,
    /// KV bytes its cache holds now.
    pub kv_bytes: usize,
    /// Positions compared so far, and at how many its top token was the live one's.
    pub compared: usize,
    pub agreed: usize,
}

/// Iterations both serving runs must have run before their speeds are compared: the
/// first few are all prefill and arrivals, and their ratio says little.
pub const RATIO_WARMUP: usize = 10;

impl StepReport {
    /// The serving run (main or beside) batching under `policy`; a run of one request at
    /// a time is not static batching, though it admits like it.
    pub fn serving_run(&self, policy: Policy) -> Option<&ServeReport> {
        [self.serve.as_ref(), self.serve_compare.as_ref()]
            .into_iter()
            .flatten()
            .find(|v| v.policy == policy && v.max_batch != 1)
    }

    /// Tokens/s of the main serving run over the run beside it, once both have run
    /// [`RATIO_WARMUP`] iterations.
    pub fn serve_ratio(&self) -> Option<f64> {
        let (sa, sb) = (self.serve.as_ref()?, self.serve_compare.as_ref()?);
        if sa.step.iteration.min(sb.step.iteration) + 1 < RATIO_WARMUP {
            return None;
        }
        let (a, b) = (sa.tokens_per_s()?, sb.tokens_per_s()?);
        (b > 0.0).then(|| a / b)
    }

    /// Checks every index and length the screens will trust, for a report read from a
    /// file: a recording is untrusted input.
    pub fn check(&self) -> Result<(), Inconsistent> {
        self.cfg
            .validate()
            .map_err(|e| Inconsistent::from(format!("model shape: {e}")))?;
        self.check_request()?;
        // Heads as this report ran them: MHA and MQA are built from the trained GQA model.
        let kv_heads = self.info.layout.kv_heads(&self.cfg);
        for c in &self.info.captures {
            check_capture(c, &self.cfg, kv_heads)
                .map_err(|e| Inconsistent::from(format!("layer {} capture: {e}", c.layer)))?;
        }
        if let Some(s) = &self.sink {
            check_sink(s).map_err(|e| Inconsistent::from(format!("sink experiment: {e}")))?;
        }
        for (name, v) in [
            ("serve", &self.serve),
            ("serve_compare", &self.serve_compare),
        ] {
            if let Some(v) = v {
                v.check(self.cfg.context)
                    .map_err(|e| Inconsistent::from(format!("serving run `{name}`: {e}")))?;
            }
        }
        if let Some(b) = &self.beside {
            if b.agreed > b.compared || b.top_k.iter().any(|t| t.id as usize >= self.cfg.vocab) {
                return Err(Inconsistent::from(
                    "the layout beside names a token or agreement it cannot have",
                ));
            }
        }
        Ok(())
    }

    /// The live request's own figures: tokens, heads, top tokens, timings, captures and
    /// the lens within what the model has.
    fn check_request(&self) -> Result<(), Inconsistent> {
        let (cfg, info) = (&self.cfg, &self.info);
        if self.prompt_len > self.pieces.len() + 1 {
            return Err(Inconsistent(format!(
                "prompt_len {} but only {} tokens",
                self.prompt_len,
                self.pieces.len()
            )));
        }
        let kv_heads = info.layout.kv_heads(cfg);
        if info.query_to_kv.iter().any(|&k| k >= kv_heads) || info.query_to_kv.len() > cfg.n_head {
            return Err(Inconsistent(format!(
                "query_to_kv names a KV head the model has not got under {}",
                info.layout
            )));
        }
        let prob = |p: f32| (0.0..=1.0).contains(&p);
        if info
            .top_k
            .iter()
            .any(|t| !prob(t.prob) || t.id as usize >= cfg.vocab)
        {
            return Err(Inconsistent::from(
                "a top-k entry is not a probability of a vocabulary token",
            ));
        }
        if info.timing.layers_ms.len() > cfg.n_layer {
            return Err(Inconsistent::from(
                "timing lists more layers than the model has",
            ));
        }
        if info.captures.len() > cfg.n_layer || self.pieces.len() > cfg.context + 1 {
            return Err(Inconsistent(format!(
                "{} captures and {} tokens for a model of {} layers and {} positions",
                info.captures.len(),
                self.pieces.len(),
                cfg.n_layer,
                cfg.context
            )));
        }
        let lens_ok = |l: &crate::model::session::LensRow| {
            l.layer < cfg.n_layer
                && (l.id as usize) < cfg.vocab
                && prob(l.prob)
                && prob(l.chosen_prob)
        };
        if info.logit_lens.len() > cfg.n_layer || !info.logit_lens.iter().all(lens_ok) {
            return Err(Inconsistent(
                "the logit lens names a layer, token or probability the model cannot have".into(),
            ));
        }
        Ok(())
    }
}

/// The sink experiment's sizes: the pane and picture draw one cell per page of the text
/// for each lane.
fn check_sink(s: &crate::sink::SinkView) -> Result<(), Inconsistent> {
    // Far beyond any shipped text (the experiment reads about 2,000 tokens in pages of
    // 16, three lanes); small enough to draw.
    const MOST_PAGES: usize = 1 << 14;
    const MOST_LANES: usize = 8;
    const MOST_TOP: usize = 64;
    let pages = s.text_tokens.checked_div(s.page_size);
    if s.page_size == 0
        || s.page_size > limits::PAGE_SIZE
        || pages.is_none_or(|p| p > MOST_PAGES)
        || s.pos > s.text_tokens
    {
        return Err(Inconsistent(format!(
            "{} of {} tokens read in pages of {} (at most {MOST_PAGES} pages)",
            s.pos, s.text_tokens, s.page_size
        )));
    }
    let pages = s.text_tokens.div_ceil(s.page_size);
    if s.lanes.len() > MOST_LANES
        || s.lanes.iter().any(|l| {
            l.kept_pages.len() > pages.max(1)
                || l.top.len() > MOST_TOP
                || l.kept_pages.iter().any(|&p| p >= pages.max(1))
        })
    {
        return Err(Inconsistent(format!(
            "{} lanes, or a lane keeping pages beyond the text's {pages}",
            s.lanes.len()
        )));
    }
    Ok(())
}

/// A capture's sizes against its model and against each other.
fn check_capture(
    c: &crate::model::LayerCapture,
    cfg: &LlamaConfig,
    kv_heads: usize,
) -> Result<(), Inconsistent> {
    if c.layer >= cfg.n_layer {
        return Err(Inconsistent(format!(
            "the model has {} layers",
            cfg.n_layer
        )));
    }
    if c.n_head != cfg.n_head || c.n_kv_head != kv_heads || c.head_dim != cfg.head_dim {
        return Err(Inconsistent(format!(
            "{} query and {} KV heads of {}, where the report's layout has {} and {kv_heads} of {}",
            c.n_head, c.n_kv_head, c.head_dim, cfg.n_head, cfg.head_dim
        )));
    }
    if c.t == 0
        || c.kv_len > cfg.context
        || c.pos0.checked_add(c.t).is_none_or(|end| end > c.kv_len)
    {
        return Err(Inconsistent(format!(
            "rows {}..{} do not fit {} keys",
            c.pos0,
            c.pos0.saturating_add(c.t),
            c.kv_len
        )));
    }
    // kv_len ≤ context and t ≤ kv_len keep this product far from overflow.
    let grid = c.n_head * c.t * c.kv_len;
    for (name, v) in [("weights", &c.weights), ("scores", &c.scores)] {
        if v.len() != grid {
            return Err(Inconsistent(format!(
                "{name} hold {} values, not {grid}",
                v.len()
            )));
        }
    }
    for (name, v) in [
        ("resid_norm_in", &c.resid_norm_in),
        ("resid_norm_attn", &c.resid_norm_attn),
        ("resid_norm_out", &c.resid_norm_out),
    ] {
        if !v.is_empty() && v.len() != c.t {
            return Err(Inconsistent(format!(
                "{name} holds {} values for {} rows",
                v.len(),
                c.t
            )));
        }
    }
    Ok(())
}

/// One iteration of the serving engine, as the app shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeReport {
    pub policy: Policy,
    pub cache: CacheKind,
    pub page_size: usize,
    pub requests: usize,
    pub step: ServeStep,
    pub preemptions: usize,
    pub done: bool,
    /// Tokens generated and milliseconds spent since the run started (zero in recordings
    /// made before they were kept).
    #[serde(default)]
    pub generated_total: usize,
    #[serde(default)]
    pub elapsed_ms: f64,
    /// Pages copied on write since the run started (zero in older recordings), and the
    /// last copy: (iteration, request, from page, to page).
    #[serde(default)]
    pub copies_total: usize,
    #[serde(default)]
    pub last_copy: Option<(usize, u64, u32, u32)>,
    /// Most requests in one iteration (1: the same requests one at a time; 0 in
    /// recordings made before it was kept).
    #[serde(default)]
    pub max_batch: usize,
    /// The head layout the run computed under, where it is not the model's own (a run
    /// beside under the other layout); `None` otherwise and in older recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<crate::model::HeadLayout>,
    /// What the run's users have felt so far: time to first token and between tokens,
    /// p50 and p99 (zero in recordings made before it was kept).
    #[serde(default)]
    pub latency: crate::serve::latency::Latency,
    /// Each request's time to first token so far, ms, once it has had its first (empty in
    /// recordings made before it was kept).
    #[serde(default)]
    pub ttft_ms: Vec<(crate::serve::ReqId, f64)>,
    /// Requests per second arriving on the engine's clock (0: by iteration, and in
    /// recordings made before it was kept).
    #[serde(default)]
    pub rate_per_s: f64,
}

impl ServeReport {
    /// "p50/p99 TTFT 120/410 · ITL 9/15 ms" (ITL: inter-token latency), once a token came,
    /// then the arrival rate where requests arrive by the clock. Short enough, with
    /// four-digit times, for a serving pane beside the lesson at 200 columns.
    pub fn describe_latency(&self) -> Option<String> {
        let l = &self.latency;
        let rate = match self.rate_per_s {
            r if r > 0.0 => format!(" · {r:.1} arrivals/s"),
            _ => String::new(),
        };
        (l.ttft_ms_p99 > 0.0).then(|| {
            format!(
                "p50/p99 TTFT {:.0}/{:.0} · ITL {:.0}/{:.0} ms{rate}",
                l.ttft_ms_p50, l.ttft_ms_p99, l.itl_ms_p50, l.itl_ms_p99
            )
        })
    }

    /// "continuous batching · paged kv", or "one at a time · paged kv": what the run
    /// did, as the serving panes title it.
    pub fn describe(&self) -> String {
        let run = crate::settings::ServingRun {
            policy: self.policy,
            cache: self.cache,
            one_at_a_time: self.max_batch == 1,
            other_layout: false,
        }
        .describe();
        match self.layout {
            Some(l) => format!("{run} · {l}").to_lowercase(),
            None => run,
        }
    }

    /// The run's counts against themselves, for a view read from a recording.
    pub fn check(&self, context: usize) -> Result<(), Inconsistent> {
        if !(self.elapsed_ms.is_finite() && self.elapsed_ms >= 0.0) {
            return Err(Inconsistent(format!("elapsed {} ms", self.elapsed_ms)));
        }
        if let Some((_, id, a, b)) = self.last_copy {
            let n = self.step.pages.len();
            if id as usize >= self.requests || a as usize >= n || b as usize >= n {
                return Err(Inconsistent::from(
                    "the last copy names a page or request the run does not have",
                ));
            }
        }
        let ttft_ok = |&(id, ms): &(crate::serve::ReqId, f64)| {
            (id as usize) < self.requests && ms.is_finite() && ms >= 0.0
        };
        if self.ttft_ms.len() > self.requests || !self.ttft_ms.iter().all(ttft_ok) {
            return Err(Inconsistent::from(
                "a time to first token for no request of the run, or not a time",
            ));
        }
        check_step(&self.step, self.requests, self.page_size, context)
    }

    /// The run's tokens per second so far (its own compute time, not the live request's).
    pub fn tokens_per_s(&self) -> Option<f64> {
        (self.elapsed_ms > 0.0).then(|| 1e3 * self.generated_total as f64 / self.elapsed_ms)
    }
}

/// Bounds on a serving step read from a recording: far beyond what a session produces
/// (32 requests, 6,144 tokens of KV in pages of 16), small enough to draw.
pub mod limits {
    pub const REQUESTS: usize = 4096;
    pub const CAPACITY_TOKENS: usize = 1 << 20;
    pub const PAGES: usize = 1 << 16;
    pub const PAGE_SIZE: usize = 1024;
}

/// Every count and index the panes and pictures trust in a serving step, checked against
/// the run's own `requests` and `page_size` and against `limits`: a recording is
/// untrusted input.
fn check_step(
    s: &ServeStep,
    requests: usize,
    page_size: usize,
    context: usize,
) -> Result<(), Inconsistent> {
    use limits::*;
    if requests > REQUESTS || page_size == 0 || page_size > PAGE_SIZE {
        return Err(Inconsistent(format!(
            "{requests} requests in pages of {page_size} (at most {REQUESTS} requests, pages of 1 to {PAGE_SIZE})"
        )));
    }
    check_memory_counts(&s.memory)?;
    check_requests(s, requests, context)?;
    check_pages(s, requests, page_size)?;
    check_arena(s, requests)?;
    if !(s.wall_ms.is_finite() && s.wall_ms >= 0.0) {
        return Err(Inconsistent(format!("wall time {} ms", s.wall_ms)));
    }
    Ok(())
}

/// The memory statistics against each other and the capacity bound.
fn check_memory_counts(m: &crate::serve::snapshot::MemoryStats) -> Result<(), Inconsistent> {
    let cap = limits::CAPACITY_TOKENS;
    if m.capacity_tokens > cap
        || m.allocated_slots > m.capacity_tokens
        || m.token_slots > m.allocated_slots.max(m.capacity_tokens)
        || m.largest_gap > m.capacity_tokens
        || m.head_need > cap
    {
        return Err(Inconsistent(format!(
            "memory of {} tokens ({} allocated, {} used, gap {}) is impossible or over {cap}",
            m.capacity_tokens, m.allocated_slots, m.token_slots, m.largest_gap
        )));
    }
    Ok(())
}

/// Every request id the step names is one of the run's, and no request is longer than
/// the model's context.
fn check_requests(s: &ServeStep, requests: usize, context: usize) -> Result<(), Inconsistent> {
    let known = |id: crate::serve::ReqId| (id as usize) < requests;
    let mut ids = (s.active.iter().map(|a| a.id))
        .chain(s.queue.iter().copied())
        .chain(s.finished.iter().copied())
        .chain(s.preempted.iter().copied());
    if s.active.len() > requests || s.queue.len() > requests || !ids.all(known) {
        return Err(Inconsistent(format!(
            "a request id beyond the run's {requests} requests"
        )));
    }
    if (s.active.iter()).any(|a| a.len > context || a.scheduled > context) {
        return Err(Inconsistent(format!(
            "a request longer than the model's {context} tokens"
        )));
    }
    Ok(())
}

/// The page grid (one cell per page, for a contiguous arena too), block tables and
/// copies name only pages and requests the run has.
fn check_pages(s: &ServeStep, requests: usize, page_size: usize) -> Result<(), Inconsistent> {
    let (n_pages, capacity) = (s.pages.len(), s.memory.capacity_tokens);
    if n_pages > limits::PAGES
        || capacity / page_size > limits::PAGES
        || (n_pages > 0 && n_pages * page_size != capacity)
    {
        return Err(Inconsistent(format!(
            "{n_pages} pages of {page_size} for {capacity} tokens"
        )));
    }
    let known = |id: crate::serve::ReqId| (id as usize) < requests;
    let page = |p: u32| (p as usize) < n_pages;
    let page_ok = |p: &crate::serve::snapshot::PageEntry| {
        p.fill as usize <= page_size
            && p.owners.len() <= requests
            && p.owners.iter().all(|&o| known(o))
    };
    let table_ok = |(id, t): &(crate::serve::ReqId, Vec<u32>)| {
        known(*id) && t.len() <= n_pages && t.iter().all(|&p| page(p))
    };
    let copy_ok = |&(id, a, b): &(crate::serve::ReqId, u32, u32)| known(id) && page(a) && page(b);
    if !s.pages.iter().all(page_ok)
        || s.block_tables.len() > requests
        || !s.block_tables.iter().all(table_ok)
        || s.copies.len() > n_pages
        || !s.copies.iter().all(copy_ok)
    {
        return Err(Inconsistent(
            "a page, block table or copy names a page or request the run does not have".into(),
        ));
    }
    Ok(())
}

/// A contiguous arena's reservations and gaps fit inside it.
fn check_arena(s: &ServeStep, requests: usize) -> Result<(), Inconsistent> {
    let capacity = s.memory.capacity_tokens;
    let reserved = (s.reservations.iter()).try_fold(0usize, |sum, &(id, len, used)| {
        ((id as usize) < requests && used <= len)
            .then(|| sum.checked_add(len))
            .flatten()
    });
    if s.reservations.len() > requests || reserved.is_none_or(|r| r > capacity) {
        return Err(Inconsistent::from(
            "reservations exceed the arena or name an unknown request",
        ));
    }
    let gap_ok =
        |&(start, len): &(usize, usize)| start.checked_add(len).is_some_and(|end| end <= capacity);
    if s.gaps.len() > capacity || !s.gaps.iter().all(gap_ok) {
        return Err(Inconsistent::from("a gap lies outside the arena"));
    }
    Ok(())
}
