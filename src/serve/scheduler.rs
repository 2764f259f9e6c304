//! The scheduler: which requests run in each iteration, and how many tokens each. It
//! works on plain data — requests, a queue, and the KV memory's bookkeeping (the page
//! allocator, or contiguous reservations) — and never touches the model, so it is tested
//! without weights. Each iteration is `schedule` (arrivals, admission by KV capacity, the
//! token budget, preemption), the runner's forward pass, then `postprocess` (tokens in,
//! finished requests out), as in nano-vllm.

pub use super::memory::Placement;
use super::memory::{Memory, Pending};
use super::ReqId;
use super::ServeError;
use crate::kv::pool::KvError;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Request-level (static) or iteration-level (continuous) batching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Policy {
    /// Take up to B requests, run until all have finished, then take the next B. The batch
    /// is rigid, as in engines before ORCA: a finished request keeps its row (padding)
    /// until the longest one finishes, and only then do they all leave.
    Static,
    /// Every iteration finished requests leave and waiting ones join (ORCA).
    #[default]
    Continuous,
}

impl Policy {
    /// Static ↔ continuous.
    pub fn other(self) -> Self {
        match self {
            Policy::Static => Policy::Continuous,
            Policy::Continuous => Policy::Static,
        }
    }
}

/// How KV memory is handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum CacheKind {
    /// Each request reserves prompt + max new tokens up front.
    Contiguous,
    /// Pages on demand from a shared pool.
    #[default]
    Paged,
}

impl CacheKind {
    /// Paged ↔ contiguous.
    pub fn other(self) -> Self {
        match self {
            CacheKind::Paged => CacheKind::Contiguous,
            CacheKind::Contiguous => CacheKind::Paged,
        }
    }
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
    pub fn validate(&self) -> Result<(), ServeError> {
        let bad = |why: String| Err(ServeError::Config(why));
        if self.page_size == 0 {
            return bad("page size must be at least 1 token".into());
        }
        if self.kv_budget_tokens < self.page_size {
            return bad(format!(
                "the KV budget of {} tokens is smaller than one page of {}",
                self.kv_budget_tokens, self.page_size
            ));
        }
        if self.max_batch == 0 {
            return bad("the batch size must be at least 1".into());
        }
        if self.token_budget == 0 {
            return bad("the token budget per iteration must be at least 1".into());
        }
        Ok(())
    }

    /// Token slots the KV memory really has (whole pages for the paged pool).
    pub fn capacity_tokens(&self) -> usize {
        (self.kv_budget_tokens / self.page_size) * self.page_size
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

/// Why the request at the head of the queue did not join this iteration's batch (those
/// behind it wait for it: admission is first come, first served).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// Static batching: the running batch must finish before anyone joins.
    Batch,
    /// The batch already holds `max_batch` requests, the engine's cap on rows per step.
    BatchLimit,
    /// The KV memory has no room for it: too few free pages, or no gap as long as its
    /// reservation.
    Memory,
}

impl Wait {
    /// A few words for the screen.
    pub fn describe(self) -> &'static str {
        match self {
            Wait::Batch => "batch still running",
            Wait::BatchLimit => "batch limit",
            Wait::Memory => "KV memory",
        }
    }
}

/// One request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub id: ReqId,
    pub prompt: Vec<u32>,
    pub max_new: usize,
    /// Iteration at which it arrives (unless it arrives by the clock, `due_s`).
    pub arrival: usize,
    /// A timed workload: the engine's clock, seconds, at which it arrives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_s: Option<f64>,
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
    /// The engine's clock, seconds, when each generated token came out of its iteration
    /// (time to first token and inter-token latency are read from these).
    #[serde(default)]
    pub token_s: Vec<f64>,
}

impl Request {
    /// A new request.
    pub fn new(id: ReqId, prompt: Vec<u32>, max_new: usize, arrival: usize) -> Self {
        Self {
            id,
            prompt,
            max_new,
            arrival,
            due_s: None,
            generated: Vec::new(),
            computed: 0,
            phase: ReqPhase::Waiting,
            admitted_at: None,
            finished_at: None,
            arrival_s: 0.0,
            finished_s: None,
            preemptions: 0,
            reject_reason: None,
            token_s: Vec::new(),
        }
    }

    /// Whether it has arrived by iteration `it` at the engine's clock `now` (it then
    /// stays arrived).
    fn due(&self, it: usize, now: f64) -> bool {
        match self.due_s {
            Some(t) => t <= now,
            None => self.arrival <= it,
        }
    }

    /// Prompt and generated tokens so far.
    pub fn len(&self) -> usize {
        self.prompt.len() + self.generated.len()
    }

    /// True before it has any token (an empty prompt, which is rejected).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Token `i` of prompt-then-generated.
    pub fn token(&self, i: usize) -> u32 {
        if i < self.prompt.len() {
            self.prompt[i]
        } else {
            self.generated[i - self.prompt.len()]
        }
    }

    /// Tokens `from..from + n`.
    pub fn tokens(&self, from: usize, n: usize) -> Vec<u32> {
        (from..from + n).map(|i| self.token(i)).collect()
    }

    /// Finished or rejected.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, ReqPhase::Finished | ReqPhase::Rejected)
    }

    /// KV slots it needs over its whole life.
    fn lifetime_tokens(&self) -> usize {
        self.prompt.len() + self.max_new
    }
}

/// One request's share of an iteration, as the token budget deals it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Share {
    id: ReqId,
    from: usize,
    n: usize,
    sample: bool,
}

/// One request's share of an iteration: tokens `from..from + n` run through the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    pub id: ReqId,
    pub from: usize,
    pub n: usize,
    /// This pass reaches the request's end, so its last logits give the next token (false
    /// for a prefill chunk and for static batching's padding rows).
    pub sample: bool,
    /// Tokens `from..from + n`.
    pub tokens: Vec<u32>,
    pub place: Placement,
}

/// What `schedule` decided for one iteration: everything the runner needs, so that it
/// never sees the scheduler or the page allocator.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub iteration: usize,
    /// In request id order.
    pub work: Vec<Work>,
    /// Pages to copy before the pass writes (copy on write of a shared last page), in
    /// order: (request, from page, to page).
    pub copies: Vec<(ReqId, u32, u32)>,
    pub preempted: Vec<ReqId>,
    /// Padding rows ended early to make room (static batching on pages).
    pub finished: Vec<ReqId>,
}

/// The scheduler's state: every request, the queue, the running set and the KV memory.
pub struct Scheduler {
    pub cfg: ServeConfig,
    pub requests: Vec<Request>,
    queue: VecDeque<ReqId>,
    /// Which requests have arrived (joined the queue, or been rejected).
    arrived: Vec<bool>,
    /// Running requests in admission order (the last is preempted first).
    running: Vec<ReqId>,
    pub memory: Memory,
    /// The model's context, what `Reserve::Context` reserves.
    context: usize,
    pub iteration: usize,
    pub preemptions: usize,
    /// Rows run for requests already finished (static batching's padding), all iterations.
    pub padding_rows: usize,
    /// Contiguous only: iterations in which the queue's head waited although the free
    /// slots added up to its reservation, because no single gap was long enough.
    pub fragmentation_waits: usize,
}

impl Scheduler {
    /// A scheduler for `requests` (ids must be 0..n in order) over a model whose context
    /// is `context` tokens.
    pub fn new(
        cfg: ServeConfig,
        requests: Vec<Request>,
        context: usize,
    ) -> Result<Self, ServeError> {
        cfg.validate()?;
        if let Some((i, r)) = requests
            .iter()
            .enumerate()
            .find(|(i, r)| r.id != *i as ReqId)
        {
            return Err(ServeError::Config(format!(
                "request ids must be 0..n in order (found {} at {i})",
                r.id
            )));
        }
        let memory = match cfg.cache {
            CacheKind::Paged => Memory::paged(
                cfg.kv_budget_tokens / cfg.page_size,
                cfg.page_size,
                cfg.prefix_sharing,
            )?,
            CacheKind::Contiguous => Memory::reserved(cfg.capacity_tokens()),
        };
        Ok(Self {
            cfg,
            arrived: vec![false; requests.len()],
            requests,
            queue: VecDeque::new(),
            running: Vec::new(),
            memory,
            context,
            iteration: 0,
            preemptions: 0,
            padding_rows: 0,
            fragmentation_waits: 0,
        })
    }

    /// True when every request has finished or been rejected.
    pub fn done(&self) -> bool {
        self.requests.iter().all(Request::is_done)
    }

    /// The clock time at which the next timed request arrives, while nothing has work:
    /// an engine with no request arrived but some still due can wait for it.
    pub fn idle_until(&self) -> Option<f64> {
        if !self.running.is_empty() || !self.queue.is_empty() {
            return None;
        }
        (0..self.requests.len())
            .filter(|&i| !self.arrived[i])
            .filter_map(|i| self.requests[i].due_s)
            .min_by(f64::total_cmp)
    }

    /// Running requests, in admission order.
    pub fn running(&self) -> &[ReqId] {
        &self.running
    }

    /// Waiting requests, head first.
    pub fn queue(&self) -> Vec<ReqId> {
        self.queue.iter().copied().collect()
    }

    /// Why the queue's head is still waiting after this iteration's admissions (`None`:
    /// no queue), the same tests `admit_waiting` made, in its order. A request preempted
    /// this iteration heads the queue too: it waits for memory as well.
    pub fn head_wait(&self) -> Option<Wait> {
        self.queue.front()?;
        Some(
            if self.cfg.policy == Policy::Static && !self.running.is_empty() {
                Wait::Batch
            } else if self.running.len() >= self.cfg.max_batch {
                Wait::BatchLimit
            } else {
                Wait::Memory
            },
        )
    }

    /// Whether request `id` has arrived (joined the queue, or been rejected).
    pub fn has_arrived(&self, id: ReqId) -> bool {
        self.arrived.get(id as usize).copied().unwrap_or(false)
    }

    /// Requests of the workload that have not arrived yet.
    pub fn not_arrived(&self) -> usize {
        self.arrived.iter().filter(|&&a| !a).count()
    }

    /// KV slots the queue's head needs to be admitted (its reservation, or its tokens).
    pub fn head_need(&self) -> Option<usize> {
        let &id = self.queue.front()?;
        Some(self.footprint(&self.requests[id as usize]))
    }

    /// Slots reserved by contiguous requests (0 for pages).
    pub fn reserved(&self) -> usize {
        self.memory.reserved_slots()
    }

    /// Free pages (paged) or unreserved slots (contiguous).
    pub fn free_capacity(&self) -> usize {
        self.memory.free_capacity()
    }

    /// Checks the memory's invariants: the allocator's own, or reservations within budget.
    #[cfg(any(test, feature = "testing"))]
    pub fn check_memory(&self) -> Result<(), KvError> {
        self.memory.check()
    }

    /// Decides this iteration: arrivals, admission, padding rewinds, the work that fits
    /// the token budget and the free pages (preempting when it does not), and where each
    /// work item's keys and values go (allocating its pages).
    pub fn schedule(&mut self, now: f64) -> Result<Plan, ServeError> {
        self.arrive(now);
        self.admit_waiting()?;
        self.rewind_padding()?;
        let mut plan = Plan {
            iteration: self.iteration,
            ..Plan::default()
        };
        let shares = loop {
            let work = self.fill_budget();
            let wants: Vec<(ReqId, usize)> = work.iter().map(|w| (w.id, w.n)).collect();
            if !self.memory.short_for(&wants) {
                break work;
            }
            // A padding row's answer is complete: end it before preempting anyone.
            if let Some(id) = self.last_running(ReqPhase::Padding) {
                self.finish(id, now);
                plan.finished.push(id);
            } else {
                let victim = self.preempt_last().ok_or_else(|| {
                    ServeError::Invariant("out of pages with no request to preempt".into())
                })?;
                plan.preempted.push(victim);
            }
        };
        for sh in shares {
            let w = self.place(sh, &mut plan.copies)?;
            plan.work.push(w);
        }
        Ok(plan)
    }

    /// A share with its tokens and their place in memory (see [`Memory::place`]).
    fn place(&mut self, sh: Share, copies: &mut Vec<(ReqId, u32, u32)>) -> Result<Work, KvError> {
        let tokens = self.requests[sh.id as usize].tokens(sh.from, sh.n);
        let place = self.memory.place(sh.id, &tokens, copies)?;
        Ok(Work {
            id: sh.id,
            from: sh.from,
            n: sh.n,
            sample: sh.sample,
            tokens,
            place,
        })
    }

    /// Takes the pass's sampled tokens (one per work item; `None` where nothing was
    /// sampled) and returns the requests that finished.
    pub fn postprocess(
        &mut self,
        plan: &Plan,
        tokens: &[Option<u32>],
        eos: Option<u32>,
        now: f64,
    ) -> Vec<ReqId> {
        let mut done = Vec::new();
        for (w, tok) in plan.work.iter().zip(tokens) {
            let r = &mut self.requests[w.id as usize];
            r.computed = w.from + w.n;
            if r.phase == ReqPhase::Padding {
                self.padding_rows += 1;
                continue; // its output is thrown away
            }
            let Some(&tok) = tok.as_ref().filter(|_| w.sample) else {
                continue; // a prefill chunk: no token yet
            };
            r.generated.push(tok);
            r.token_s.push(now);
            r.phase = ReqPhase::Decode;
            if Some(tok) == eos || r.generated.len() >= r.max_new {
                match self.cfg.policy {
                    Policy::Continuous => done.push(w.id),
                    Policy::Static => r.phase = ReqPhase::Padding,
                }
            }
        }
        // A static batch leaves all at once, when its last request finishes.
        let all_padding = self
            .running
            .iter()
            .all(|&id| self.requests[id as usize].phase == ReqPhase::Padding);
        if self.cfg.policy == Policy::Static && all_padding {
            done.extend(self.running.iter().copied());
        }
        for &id in &done {
            self.finish(id, now);
        }
        self.iteration += 1;
        done
    }

    /// Arrivals due by this iteration (or by the clock) join the queue; one that could
    /// never fit is rejected.
    fn arrive(&mut self, now: f64) {
        let (it, capacity) = (self.iteration, self.cfg.capacity_tokens());
        for i in 0..self.requests.len() {
            let r = &self.requests[i];
            if self.arrived[i] || !r.due(it, now) {
                continue;
            }
            self.arrived[i] = true;
            let need = self.footprint(r);
            let why = self.rejection(r, need, capacity);
            let r = &mut self.requests[i];
            // A timed request's clock starts when it arrived, not when an iteration
            // boundary noticed it: its wait for that boundary is part of what it feels.
            r.arrival_s = r.due_s.unwrap_or(now);
            match why {
                Some(why) => {
                    r.phase = ReqPhase::Rejected;
                    r.reject_reason = Some(why);
                    r.finished_at = Some(it);
                    r.finished_s = Some(now);
                }
                None => self.queue.push_back(r.id),
            }
        }
    }

    /// Why `r` can never run under this budget, if it cannot.
    fn rejection(&self, r: &Request, need: usize, capacity: usize) -> Option<String> {
        if r.prompt.is_empty() {
            return Some("empty prompt".into());
        }
        if need <= capacity {
            return None;
        }
        Some(
            if self.cfg.reserve == Reserve::Context && self.cfg.cache == CacheKind::Contiguous {
                format!("reserves {need} KV slots (the model's whole context) but the whole budget is {capacity}")
            } else {
                format!(
                "needs {need} KV slots (prompt {} + up to {} new) but the whole budget is {capacity}",
                r.prompt.len(),
                r.max_new
            )
            },
        )
    }

    /// Admission from the head of the queue while the batch and the memory allow:
    /// continuous batching every iteration, static only when the last batch has left.
    fn admit_waiting(&mut self) -> Result<(), KvError> {
        if self.cfg.policy == Policy::Static && !self.running.is_empty() {
            return Ok(());
        }
        while self.running.len() < self.cfg.max_batch {
            let Some(&head) = self.queue.front() else {
                break;
            };
            let r = &self.requests[head as usize];
            if !self.can_admit(r) {
                if self.memory.fragmented(self.reservation(r)) {
                    self.fragmentation_waits += 1;
                }
                break;
            }
            self.queue.pop_front();
            self.admit(head)?;
        }
        Ok(())
    }

    /// Slots a contiguous cache reserves for `r` when it is admitted.
    fn reservation(&self, r: &Request) -> usize {
        match self.cfg.reserve {
            Reserve::PromptPlusMaxNew => r.lifetime_tokens(),
            Reserve::Context => self.context.max(r.lifetime_tokens()),
        }
    }

    /// Slots `r` needs to run at all under this cache: its reservation (contiguous) or
    /// its lifetime tokens (paged).
    fn footprint(&self, r: &Request) -> usize {
        match self.cfg.cache {
            CacheKind::Contiguous => self.reservation(r),
            CacheKind::Paged => r.lifetime_tokens(),
        }
    }

    fn can_admit(&self, r: &Request) -> bool {
        let running: Vec<Pending> = self
            .running
            .iter()
            .map(|&id| {
                let q = &self.requests[id as usize];
                Pending {
                    id,
                    to_compute: q.len() - q.computed,
                }
            })
            .collect();
        self.memory
            .can_admit(&r.tokens(0, r.len()), self.reservation(r), &running)
    }

    fn admit(&mut self, id: ReqId) -> Result<(), KvError> {
        let r = &self.requests[id as usize];
        let (tokens, reserve) = (r.tokens(0, r.len()), self.reservation(r));
        // A prefix already in the pool counts as computed.
        let computed = self.memory.admit(id, &tokens, reserve)?;
        let it = self.iteration;
        let r = &mut self.requests[id as usize];
        r.computed = computed;
        r.phase = ReqPhase::Prefill;
        r.admitted_at.get_or_insert(it);
        self.running.push(id);
        Ok(())
    }

    /// Frees a request's memory and takes it out of the running set.
    fn release(&mut self, id: ReqId) {
        self.memory.release(id);
        self.running.retain(|&r| r != id);
    }

    /// Ends a request now: it leaves the batch and its memory is freed.
    fn finish(&mut self, id: ReqId, now: f64) {
        let r = &mut self.requests[id as usize];
        r.phase = ReqPhase::Finished;
        r.finished_at = Some(self.iteration);
        r.finished_s = Some(now);
        self.release(id);
    }

    /// A padding row re-runs its last position in place: the cache drops that token and
    /// the step writes it again (the same K/V), so the row costs a full decode step while
    /// holding no more memory than its own tokens.
    fn rewind_padding(&mut self) -> Result<(), KvError> {
        for &id in &self.running {
            let r = &mut self.requests[id as usize];
            if r.phase != ReqPhase::Padding || r.computed < r.len() {
                continue;
            }
            r.computed -= 1;
            self.memory.drop_last(id)?;
        }
        Ok(())
    }

    /// Decodes first (one token each), then prefill chunks and padding rows, while the
    /// token budget lasts; in request id order.
    fn fill_budget(&self) -> Vec<Share> {
        let mut budget = self.cfg.token_budget;
        let mut order = self.running.clone();
        order.sort_by_key(|&id| self.requests[id as usize].phase != ReqPhase::Decode);
        let mut work = Vec::new();
        for id in order {
            let r = &self.requests[id as usize];
            let n = (r.len() - r.computed).min(budget);
            if n == 0 {
                continue;
            }
            budget -= n;
            work.push(Share {
                id,
                from: r.computed,
                n,
                sample: r.computed + n == r.len() && r.phase != ReqPhase::Padding,
            });
        }
        work.sort_by_key(|w| w.id);
        work
    }

    /// The most recently admitted running request in `phase`.
    fn last_running(&self, phase: ReqPhase) -> Option<ReqId> {
        self.running
            .iter()
            .rev()
            .copied()
            .find(|&id| self.requests[id as usize].phase == phase)
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
}
