//! The serving engine: a request queue, a scheduler that picks each iteration's batch
//! (static or ORCA-style continuous), admission by KV capacity (pages or reserved slots),
//! preemption by recompute when pages run out, and one batched forward pass per iteration.

use crate::kv::pool::{KvError, PoolStats, ReqId};
use crate::kv::{paged::PagedKv, Contiguous, ContiguousBatch};
use crate::model::sampler::argmax;
use crate::model::{Logits, Model};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Instant;

/// Request-level (static) or iteration-level (continuous) batching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Take up to B requests, run until all have finished, then take the next B. The batch
    /// is rigid, as in engines before ORCA: a finished request keeps its row (padding)
    /// until the longest one finishes, and only then do they all leave.
    Static,
    /// Every iteration finished requests leave and waiting ones join (ORCA).
    Continuous,
}

/// How KV memory is handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheKind {
    /// Each request reserves prompt + max new tokens up front.
    Contiguous,
    /// Pages on demand from a shared pool.
    Paged,
}

/// How much a contiguous cache reserves per request when it is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Reserve {
    /// Prompt plus the request's max new tokens (the tightest bound known up front).
    #[default]
    PromptPlusMaxNew,
    /// The model's whole context window, whatever the request asks for.
    Context,
}

/// Engine settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeConfig {
    pub policy: Policy,
    pub cache: CacheKind,
    /// KV memory in tokens (the same for both cache kinds).
    pub kv_budget_tokens: usize,
    pub page_size: usize,
    /// Most requests in one iteration.
    pub max_batch: usize,
    /// Most tokens (prefill + decode) in one iteration; prefill is chunked to fit.
    pub token_budget: usize,
    pub prefix_sharing: bool,
    /// Contiguous only: what each admitted request reserves.
    #[serde(default)]
    pub reserve: Reserve,
}

impl ServeConfig {
    /// Refuses zero and absurd settings.
    pub fn validate(&self) -> Result<(), String> {
        if self.page_size == 0 {
            return Err("page size must be at least 1 token".into());
        }
        if self.kv_budget_tokens < self.page_size {
            return Err(format!(
                "the KV budget of {} tokens is smaller than one page of {}",
                self.kv_budget_tokens, self.page_size
            ));
        }
        if self.max_batch == 0 {
            return Err("the batch size must be at least 1".into());
        }
        if self.token_budget == 0 {
            return Err("the token budget per iteration must be at least 1".into());
        }
        Ok(())
    }
}

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReqPhase {
    Waiting,
    Prefill,
    Decode,
    Preempted,
    /// Static batching only: its answer is complete, but its row keeps running (padding,
    /// output thrown away) until every request of the batch has finished.
    Padding,
    Finished,
    Rejected,
}

/// One request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub id: ReqId,
    pub prompt: Vec<u32>,
    pub max_new: usize,
    /// Iteration at which it arrives.
    pub arrival: usize,
    pub generated: Vec<u32>,
    /// Tokens whose K/V are in the cache.
    pub computed: usize,
    pub phase: ReqPhase,
    pub admitted_at: Option<usize>,
    pub finished_at: Option<usize>,
    /// Wall-clock seconds from the engine's start to arrival and to finish.
    pub arrival_s: f64,
    pub finished_s: Option<f64>,
    pub preemptions: usize,
    pub reject_reason: Option<String>,
}

impl Request {
    /// A new request.
    pub fn new(id: ReqId, prompt: Vec<u32>, max_new: usize, arrival: usize) -> Self {
        Self {
            id,
            prompt,
            max_new,
            arrival,
            generated: Vec::new(),
            computed: 0,
            phase: ReqPhase::Waiting,
            admitted_at: None,
            finished_at: None,
            arrival_s: 0.0,
            finished_s: None,
            preemptions: 0,
            reject_reason: None,
        }
    }

    fn len(&self) -> usize {
        self.prompt.len() + self.generated.len()
    }

    fn token(&self, i: usize) -> u32 {
        if i < self.prompt.len() {
            self.prompt[i]
        } else {
            self.generated[i - self.prompt.len()]
        }
    }

    fn is_done(&self) -> bool {
        matches!(self.phase, ReqPhase::Finished | ReqPhase::Rejected)
    }
}

/// A request's line in the step report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ActiveEntry {
    pub id: ReqId,
    pub phase: ReqPhase,
    pub len: usize,
    /// Tokens it ran this iteration.
    pub scheduled: usize,
}

/// One page of the pool, for drawing the grid.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PageView {
    /// The requests holding it (more than one when shared).
    pub owners: Vec<ReqId>,
    pub fill: u32,
}

/// KV memory as the store reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct MemoryStats {
    pub capacity_tokens: usize,
    /// Slots holding real tokens.
    pub token_slots: usize,
    /// Slots allocated (pages in use × page size, or contiguous reservations).
    pub allocated_slots: usize,
    /// Contiguous: reserved but not (yet) holding a token.
    pub reserved_unused: usize,
    /// Paged: empty slots of partly filled pages.
    pub internal_fragmentation: usize,
    pub shared_pages: usize,
    pub bytes_per_token: usize,
}

impl MemoryStats {
    /// Share of allocated KV memory holding real tokens, percent.
    pub fn utilization_pct(&self) -> f64 {
        if self.allocated_slots == 0 {
            100.0
        } else {
            100.0 * self.token_slots as f64 / self.allocated_slots as f64
        }
    }
}

/// What one serving iteration did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeStep {
    pub iteration: usize,
    pub active: Vec<ActiveEntry>,
    pub queue: Vec<ReqId>,
    pub finished: Vec<ReqId>,
    pub preempted: Vec<ReqId>,
    pub tokens_generated: usize,
    pub tokens_scheduled: usize,
    /// Paged only: page → owners and fill.
    pub pages: Vec<PageView>,
    /// Contiguous only: (request, reserved slots, used slots).
    pub reservations: Vec<(ReqId, usize, usize)>,
    pub memory: MemoryStats,
    pub wall_ms: f64,
}

enum Kv {
    Paged(Box<PagedKv>),
    Contiguous {
        stores: Vec<Option<Contiguous>>,
        reserved: usize,
    },
}

/// The engine.
pub struct ServeEngine {
    pub cfg: ServeConfig,
    model: Model,
    pub requests: Vec<Request>,
    queue: VecDeque<ReqId>,
    /// Running requests in admission order (the last is preempted first).
    running: Vec<ReqId>,
    kv: Kv,
    pub iteration: usize,
    pub preemptions: usize,
    /// Rows run for requests already finished (static batching's padding), all iterations.
    pub padding_rows: usize,
    start: Instant,
}

impl ServeEngine {
    /// An engine over `model` with `requests` (ids must be 0..n in order).
    pub fn new(model: &Model, cfg: ServeConfig, requests: Vec<Request>) -> Result<Self, String> {
        cfg.validate()?;
        let kv = match cfg.cache {
            CacheKind::Paged => {
                let mut p = PagedKv::new(
                    model.cfg.n_layer,
                    model.kv_heads(),
                    model.cfg.head_dim,
                    cfg.kv_budget_tokens / cfg.page_size,
                    cfg.page_size,
                    &model.device,
                )
                .map_err(|e| e.to_string())?;
                p.pool.prefix_sharing = cfg.prefix_sharing;
                Kv::Paged(Box::new(p))
            }
            CacheKind::Contiguous => Kv::Contiguous {
                stores: (0..requests.len()).map(|_| None).collect(),
                reserved: 0,
            },
        };
        for (i, r) in requests.iter().enumerate() {
            if r.id != i as ReqId {
                return Err(format!(
                    "request ids must be 0..n in order (found {} at {i})",
                    r.id
                ));
            }
        }
        Ok(Self {
            cfg,
            model: model.clone(),
            requests,
            queue: VecDeque::new(),
            running: Vec::new(),
            kv,
            iteration: 0,
            preemptions: 0,
            padding_rows: 0,
            start: Instant::now(),
        })
    }

    /// True when every request has finished or been rejected.
    pub fn done(&self) -> bool {
        self.requests.iter().all(Request::is_done)
    }

    /// Running requests, in admission order.
    pub fn running(&self) -> &[ReqId] {
        &self.running
    }

    /// Waiting requests, head first.
    pub fn queue(&self) -> Vec<ReqId> {
        self.queue.iter().copied().collect()
    }

    /// Token slots the KV memory really has (whole pages for the paged pool).
    pub fn capacity_tokens(&self) -> usize {
        (self.cfg.kv_budget_tokens / self.cfg.page_size) * self.cfg.page_size
    }

    /// KV slots a request needs over its whole life.
    fn lifetime_tokens(r: &Request) -> usize {
        r.prompt.len() + r.max_new
    }

    /// Slots a contiguous cache reserves for `r` when it is admitted.
    fn reservation(&self, r: &Request) -> usize {
        match self.cfg.reserve {
            Reserve::PromptPlusMaxNew => Self::lifetime_tokens(r),
            Reserve::Context => self.model.cfg.context.max(Self::lifetime_tokens(r)),
        }
    }

    /// Slots `r` needs to run at all under this cache: its reservation (contiguous) or
    /// its lifetime tokens (paged).
    fn footprint(&self, r: &Request) -> usize {
        match self.cfg.cache {
            CacheKind::Contiguous => self.reservation(r),
            CacheKind::Paged => Self::lifetime_tokens(r),
        }
    }

    fn can_admit(&self, r: &Request) -> bool {
        match &self.kv {
            Kv::Paged(p) => {
                // Room for the tokens to recompute, one page to grow into, and one page
                // of headroom per running request: admitting into the last free pages
                // only to preempt on the next page boundary would thrash (each
                // preemption recomputes the victim's whole prompt).
                let need = p.pool.pages_for(r.len()) + 1 + self.running.len();
                // Pages already promised: admitted requests whose prompt (or recompute)
                // has not run yet hold none so far, but will on their next iteration.
                let promised: usize = self
                    .running
                    .iter()
                    .map(|&id| {
                        let q = &self.requests[id as usize];
                        p.pool.pages_needed(id, q.len() - q.computed).unwrap_or(0)
                    })
                    .sum();
                // Alone in the pool a request may start even if its whole prompt plus
                // headroom exceeds the pool: it has nobody to preempt.
                let total = p.pool.total_pages();
                if self.running.is_empty() {
                    p.pool.free_pages() >= need.min(total)
                } else {
                    p.pool.free_pages() >= need + promised
                }
            }
            Kv::Contiguous { reserved, .. } => {
                reserved + self.reservation(r) <= self.capacity_tokens()
            }
        }
    }

    fn admit(&mut self, id: ReqId) -> Result<(), KvError> {
        let r = &self.requests[id as usize];
        let toks: Vec<u32> = (0..r.len()).map(|i| r.token(i)).collect();
        let reserve = self.reservation(r);
        let computed = match &mut self.kv {
            Kv::Paged(p) => p.pool.admit(id, &toks)?,
            Kv::Contiguous { stores, reserved } => {
                *reserved += reserve;
                stores[id as usize] = Some(Contiguous::new(
                    self.model.cfg.n_layer,
                    self.model.kv_heads(),
                    self.model.cfg.head_dim,
                    reserve,
                    &self.model.device,
                ));
                0
            }
        };
        let it = self.iteration;
        let r = &mut self.requests[id as usize];
        r.computed = computed;
        r.phase = ReqPhase::Prefill;
        r.admitted_at.get_or_insert(it);
        self.running.push(id);
        Ok(())
    }

    fn release(&mut self, id: ReqId) {
        match &mut self.kv {
            Kv::Paged(p) => {
                let _ = p.pool.free(id);
            }
            Kv::Contiguous { stores, reserved } => {
                if let Some(c) = stores[id as usize].take() {
                    *reserved -= c.capacity();
                }
            }
        }
        self.running.retain(|&r| r != id);
    }

    /// Ends a request now: it leaves the batch and its memory is freed.
    fn finish(&mut self, id: ReqId, it: usize, now: f64) {
        let r = &mut self.requests[id as usize];
        r.phase = ReqPhase::Finished;
        r.finished_at = Some(it);
        r.finished_s = Some(now);
        self.release(id);
    }

    /// A padding row re-runs its last position in place: the cache drops that token and
    /// the step writes it again (the same K/V), so the row costs a full decode step while
    /// holding no more memory than its own tokens.
    fn rewind_padding(&mut self) -> Result<(), String> {
        for &id in &self.running {
            let r = &mut self.requests[id as usize];
            if r.phase != ReqPhase::Padding || r.computed < r.len() {
                continue;
            }
            r.computed -= 1;
            match &mut self.kv {
                Kv::Paged(p) => p.pool.truncate(id, 1).map_err(|e| e.to_string())?,
                Kv::Contiguous { stores, .. } => {
                    let c = stores[id as usize]
                        .as_mut()
                        .expect("admitted requests have a store");
                    c.truncate(r.computed);
                }
            }
        }
        Ok(())
    }

    /// Preemption by recompute: free every page of the most recently admitted request,
    /// forget what it computed, and put it back at the head of the queue.
    fn preempt_last(&mut self) -> Option<ReqId> {
        let victim = *self.running.last()?;
        self.release(victim);
        let r = &mut self.requests[victim as usize];
        r.computed = 0;
        r.phase = ReqPhase::Preempted;
        r.preemptions += 1;
        self.preemptions += 1;
        self.queue.push_front(victim);
        Some(victim)
    }

    /// Runs one iteration.
    pub fn step(&mut self) -> Result<ServeStep, String> {
        let t0 = Instant::now();
        let it = self.iteration;
        let now = self.start.elapsed().as_secs_f64();
        let capacity = self.capacity_tokens();
        // Arrivals; a request that could never fit the whole budget is rejected now.
        let whole_context =
            self.cfg.cache == CacheKind::Contiguous && self.cfg.reserve == Reserve::Context;
        for i in 0..self.requests.len() {
            let r = &self.requests[i];
            if r.arrival == it && r.phase == ReqPhase::Waiting {
                let need = self.footprint(r);
                let r = &mut self.requests[i];
                r.arrival_s = now;
                if need > capacity || r.prompt.is_empty() {
                    r.phase = ReqPhase::Rejected;
                    r.reject_reason = Some(if r.prompt.is_empty() {
                        "empty prompt".into()
                    } else if whole_context {
                        format!(
                            "reserves {need} KV slots (the model's whole context) but the whole budget is {capacity}"
                        )
                    } else {
                        format!(
                            "needs {} KV slots (prompt {} + up to {} new) but the whole budget is {}",
                            need,
                            r.prompt.len(),
                            r.max_new,
                            capacity
                        )
                    });
                    r.finished_at = Some(it);
                    r.finished_s = Some(now);
                } else {
                    self.queue.push_back(r.id);
                }
            }
        }
        // Admission.
        let may_admit = match self.cfg.policy {
            Policy::Continuous => true,
            Policy::Static => self.running.is_empty(),
        };
        if may_admit {
            while self.running.len() < self.cfg.max_batch {
                let Some(&head) = self.queue.front() else {
                    break;
                };
                if !self.can_admit(&self.requests[head as usize]) {
                    break;
                }
                self.queue.pop_front();
                self.admit(head).map_err(|e| e.to_string())?;
            }
        }
        // This iteration's work: decodes first (one token each), then prefill chunks and
        // padding rows.
        self.rewind_padding()?;
        let mut preempted = Vec::new();
        let mut finished = Vec::new();
        let work = loop {
            let mut budget = self.cfg.token_budget;
            let mut work: Vec<(ReqId, usize, usize)> = Vec::new(); // (id, from, n)
            let mut order: Vec<ReqId> = self.running.clone();
            order.sort_by_key(|&id| self.requests[id as usize].phase != ReqPhase::Decode);
            for id in order {
                let r = &self.requests[id as usize];
                let n = (r.len() - r.computed).min(budget);
                if n == 0 {
                    continue;
                }
                budget -= n;
                work.push((id, r.computed, n));
            }
            work.sort_by_key(|w| w.0);
            if let Kv::Paged(p) = &self.kv {
                let need: usize = work
                    .iter()
                    .map(|&(id, _, n)| p.pool.pages_needed(id, n).unwrap_or(0))
                    .sum();
                if need > p.pool.free_pages() {
                    // A padding row's answer is complete: end it before preempting anyone.
                    let pad = self
                        .running
                        .iter()
                        .rev()
                        .copied()
                        .find(|&id| self.requests[id as usize].phase == ReqPhase::Padding);
                    if let Some(id) = pad {
                        self.finish(id, it, self.start.elapsed().as_secs_f64());
                        finished.push(id);
                        continue;
                    }
                    match self.preempt_last() {
                        Some(v) => {
                            preempted.push(v);
                            continue;
                        }
                        None => return Err("no request to preempt".into()),
                    }
                }
            }
            break work;
        };
        let seqs: Vec<Vec<u32>> = work
            .iter()
            .map(|&(id, from, n)| {
                let r = &self.requests[id as usize];
                (from..from + n).map(|i| r.token(i)).collect()
            })
            .collect();
        let seq_refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
        let logits = if work.is_empty() {
            Vec::new()
        } else {
            match &mut self.kv {
                Kv::Paged(p) => {
                    let items: Vec<(ReqId, &[u32])> =
                        work.iter().zip(&seq_refs).map(|(w, s)| (w.0, *s)).collect();
                    let mut batch = p.batch(&items).map_err(|e| e.to_string())?;
                    self.model
                        .forward_batch(&seq_refs, &mut batch, None, Logits::Last)
                        .map_err(|e| e.to_string())?
                }
                Kv::Contiguous { stores, .. } => {
                    let ids: std::collections::HashSet<ReqId> = work.iter().map(|w| w.0).collect();
                    let refs: Vec<&mut Contiguous> = stores
                        .iter_mut()
                        .enumerate()
                        .filter(|(i, _)| ids.contains(&(*i as ReqId)))
                        .map(|(_, s)| s.as_mut().expect("admitted requests have a store"))
                        .collect();
                    let mut batch = ContiguousBatch(refs);
                    self.model
                        .forward_batch(&seq_refs, &mut batch, None, Logits::Last)
                        .map_err(|e| e.to_string())?
                }
            }
        };
        // Sample where a sequence reached its end; finished requests leave.
        let now = self.start.elapsed().as_secs_f64();
        let eos = self.model.tokenizer.eos;
        let mut generated = 0;
        let mut done = Vec::new();
        for (&(id, from, n), l) in work.iter().zip(&logits) {
            let r = &mut self.requests[id as usize];
            r.computed = from + n;
            if r.phase == ReqPhase::Padding {
                self.padding_rows += 1;
                continue; // its output is thrown away
            }
            if r.computed < r.len() {
                continue; // a prefill chunk: no token yet
            }
            let row: Vec<f32> = l
                .squeeze(0)
                .and_then(|x| x.to_vec1())
                .map_err(|e| e.to_string())?;
            let tok = argmax(&row);
            r.generated.push(tok);
            r.phase = ReqPhase::Decode;
            generated += 1;
            if Some(tok) == eos || r.generated.len() >= r.max_new {
                match self.cfg.policy {
                    Policy::Continuous => done.push(id),
                    Policy::Static => r.phase = ReqPhase::Padding,
                }
            }
        }
        // A static batch leaves all at once, when its last request finishes.
        if self.cfg.policy == Policy::Static
            && self
                .running
                .iter()
                .all(|&id| self.requests[id as usize].phase == ReqPhase::Padding)
        {
            done.extend(self.running.iter().copied());
        }
        for id in done {
            self.finish(id, it, now);
            finished.push(id);
        }
        let scheduled: std::collections::HashMap<ReqId, usize> =
            work.iter().map(|w| (w.0, w.2)).collect();
        let mut active: Vec<ActiveEntry> = self
            .running
            .iter()
            .chain(finished.iter())
            .map(|&id| {
                let r = &self.requests[id as usize];
                ActiveEntry {
                    id,
                    phase: r.phase,
                    len: r.len(),
                    scheduled: scheduled.get(&id).copied().unwrap_or(0),
                }
            })
            .collect();
        active.sort_by_key(|a| a.id);
        let (memory, pages, reservations) = self.memory_view();
        self.iteration += 1;
        Ok(ServeStep {
            iteration: it,
            active,
            queue: self.queue(),
            finished,
            preempted,
            tokens_generated: generated,
            tokens_scheduled: seqs.iter().map(Vec::len).sum(),
            pages,
            reservations,
            memory,
            wall_ms: t0.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// Memory statistics and the per-page / per-reservation views, from the store.
    pub fn memory_view(&self) -> (MemoryStats, Vec<PageView>, Vec<(ReqId, usize, usize)>) {
        let bpt = self.model.cfg.n_layer * 2 * self.model.kv_heads() * self.model.cfg.head_dim * 4;
        match &self.kv {
            Kv::Paged(p) => {
                let s: PoolStats = p.stats();
                let mut pages: Vec<PageView> = (0..s.total_pages as u32)
                    .map(|pg| PageView {
                        owners: Vec::new(),
                        fill: p.pool.fill(pg),
                    })
                    .collect();
                for (&id, t) in p.pool.requests() {
                    for &pg in &t.pages {
                        pages[pg as usize].owners.push(id);
                    }
                }
                for pg in pages.iter_mut() {
                    pg.owners.sort();
                }
                let m = MemoryStats {
                    capacity_tokens: s.total_pages * s.page_size,
                    token_slots: s.token_slots,
                    allocated_slots: s.used_pages * s.page_size,
                    reserved_unused: 0,
                    internal_fragmentation: s.internal_fragmentation,
                    shared_pages: s.shared_pages,
                    bytes_per_token: bpt,
                };
                (m, pages, Vec::new())
            }
            Kv::Contiguous { stores, reserved } => {
                use crate::kv::KvStore;
                let res: Vec<(ReqId, usize, usize)> = stores
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.as_ref().map(|s| (i as ReqId, s.capacity(), s.len())))
                    .collect();
                let used: usize = res.iter().map(|r| r.2).sum();
                let m = MemoryStats {
                    capacity_tokens: self.cfg.kv_budget_tokens,
                    token_slots: used,
                    allocated_slots: *reserved,
                    reserved_unused: reserved - used,
                    internal_fragmentation: 0,
                    shared_pages: 0,
                    bytes_per_token: bpt,
                };
                (m, Vec::new(), res)
            }
        }
    }

    /// Paged only: checks the allocator's invariants.
    pub fn check_pool(&self) -> Result<(), String> {
        match &self.kv {
            Kv::Paged(p) => p.pool.check(),
            Kv::Contiguous { reserved, .. } => {
                if *reserved > self.cfg.kv_budget_tokens {
                    Err(format!(
                        "reserved {} > budget {}",
                        reserved, self.cfg.kv_budget_tokens
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Free pages (paged) or unreserved slots (contiguous).
    pub fn free_capacity(&self) -> usize {
        match &self.kv {
            Kv::Paged(p) => p.pool.free_pages(),
            Kv::Contiguous { reserved, .. } => self.cfg.kv_budget_tokens - reserved,
        }
    }
}
