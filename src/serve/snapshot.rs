//! What the serving engine reports after each iteration, for the UI, recordings and
//! benchmarks: the active set, the queue, and the KV memory page by page — read from the
//! scheduler's own state, never recomputed beside it.

use super::memory::Memory;
use super::scheduler::{Plan, ReqPhase, Scheduler, Wait};
use super::ReqId;
use serde::{Deserialize, Serialize};

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
pub struct PageEntry {
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
    /// Contiguous: the longest free run, and what the queue's head needs (0: no queue).
    /// Free slots beyond the largest gap that the head cannot use are external
    /// fragmentation (recordings made before these read as zero).
    #[serde(default)]
    pub largest_gap: usize,
    #[serde(default)]
    pub head_need: usize,
}

impl MemoryStats {
    /// Share of allocated KV memory holding real tokens, percent (`None` while nothing is
    /// allocated: an empty pool wastes nothing, but it uses nothing either).
    pub fn utilization_pct(&self) -> Option<f64> {
        (self.allocated_slots > 0)
            .then(|| 100.0 * self.token_slots as f64 / self.allocated_slots as f64)
    }

    /// What KV utilization divides, with the figures, the share first (a narrow pane cuts
    /// the end): "86%: 412 tokens in 480 held slots".
    pub fn describe_utilization(&self) -> String {
        match self.utilization_pct() {
            Some(p) => format!(
                "{p:.0}%: {} tokens in {} held slots",
                self.token_slots, self.allocated_slots
            ),
            None => "no slots held".into(),
        }
    }
}

/// What one serving iteration did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeStep {
    pub iteration: usize,
    pub active: Vec<ActiveEntry>,
    pub queue: Vec<ReqId>,
    /// Why the queue's head waits (recordings made before it read as none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_wait: Option<Wait>,
    /// Requests of the workload that have not arrived yet.
    #[serde(default)]
    pub not_arrived: usize,
    pub finished: Vec<ReqId>,
    pub preempted: Vec<ReqId>,
    pub tokens_generated: usize,
    pub tokens_scheduled: usize,
    /// Paged only: page → owners and fill.
    pub pages: Vec<PageEntry>,
    /// Paged only: each request's block table, its logical blocks in order as the
    /// physical pages that hold them (recordings made before it read as empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_tables: Vec<(ReqId, Vec<u32>)>,
    /// Contiguous only: (request, reserved slots, used slots), in address order.
    pub reservations: Vec<(ReqId, usize, usize)>,
    /// Paged only: the copies made on write this iteration, (request, from page, to
    /// page): a request wrote into a page another request also held, so it got its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<(ReqId, u32, u32)>,
    /// Contiguous only: the free gaps between reservations, (first slot, length).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<(usize, usize)>,
    pub memory: MemoryStats,
    pub wall_ms: f64,
    /// What the iteration's forward pass moved and computed (recordings made before it
    /// read as zero).
    #[serde(default)]
    pub traffic: crate::model::traffic::Traffic,
}

impl ServeStep {
    /// Requests in the active set that have not finished: what runs against the batch
    /// limit.
    pub fn running(&self) -> usize {
        self.active
            .iter()
            .filter(|a| a.phase != ReqPhase::Finished)
            .count()
    }
}

/// The report of the iteration `plan` ran; `finished` are the requests `postprocess`
/// ended, `bytes_per_token` the KV bytes of one token under the model's layout.
pub fn step(
    s: &Scheduler,
    plan: &Plan,
    finished: &[ReqId],
    bytes_per_token: usize,
    wall_ms: f64,
    traffic: crate::model::traffic::Traffic,
) -> ServeStep {
    let finished: Vec<ReqId> = plan.finished.iter().chain(finished).copied().collect();
    let scheduled = |id: ReqId| plan.work.iter().find(|w| w.id == id).map_or(0, |w| w.n);
    let mut active: Vec<ActiveEntry> = s
        .running()
        .iter()
        .chain(finished.iter())
        .map(|&id| {
            let r = &s.requests[id as usize];
            ActiveEntry {
                id,
                phase: r.phase,
                len: r.len(),
                scheduled: scheduled(id),
            }
        })
        .collect();
    active.sort_by_key(|a| a.id);
    let (memory, pages, reservations) = memory(s, bytes_per_token);
    let block_tables = match &s.memory {
        Memory::Paged(p) => {
            let mut t: Vec<(ReqId, Vec<u32>)> =
                p.requests().map(|(&id, t)| (id, t.pages.clone())).collect();
            t.sort_by_key(|e| e.0);
            t
        }
        Memory::Reserved(_) => Vec::new(),
    };
    let gaps = match &s.memory {
        Memory::Reserved(a) => a.gaps().iter().map(|g| (g.start, g.len)).collect(),
        Memory::Paged(_) => Vec::new(),
    };
    ServeStep {
        copies: plan.copies.clone(),
        gaps,
        block_tables,
        iteration: plan.iteration,
        active,
        queue: s.queue(),
        head_wait: s.head_wait(),
        not_arrived: s.not_arrived(),
        finished,
        preempted: plan.preempted.clone(),
        tokens_generated: plan.work.iter().filter(|w| w.sample).count(),
        tokens_scheduled: plan.work.iter().map(|w| w.n).sum(),
        pages,
        reservations,
        memory,
        wall_ms,
        traffic,
    }
}

/// Memory statistics and the per-page / per-reservation views, from the allocator or the
/// reservations.
pub fn memory(
    s: &Scheduler,
    bytes_per_token: usize,
) -> (MemoryStats, Vec<PageEntry>, Vec<(ReqId, usize, usize)>) {
    match &s.memory {
        Memory::Paged(p) => {
            let st = p.stats();
            let mut pages: Vec<PageEntry> = (0..st.total_pages as u32)
                .map(|pg| PageEntry {
                    owners: Vec::new(),
                    fill: p.fill(pg),
                })
                .collect();
            for (&id, t) in p.requests() {
                for &pg in &t.pages {
                    pages[pg as usize].owners.push(id);
                }
            }
            for pg in pages.iter_mut() {
                pg.owners.sort();
            }
            let m = MemoryStats {
                capacity_tokens: st.total_pages * st.page_size,
                token_slots: st.token_slots,
                allocated_slots: st.used_pages * st.page_size,
                reserved_unused: 0,
                internal_fragmentation: st.internal_fragmentation,
                shared_pages: st.shared_pages,
                bytes_per_token,
                largest_gap: 0,
                head_need: 0,
            };
            (m, pages, Vec::new())
        }
        Memory::Reserved(arena) => {
            // A reservation holds the request's computed tokens; the rest is reserved air.
            let res: Vec<(ReqId, usize, usize)> = arena
                .runs()
                .iter()
                .map(|&(id, r)| (id, r.len, s.requests[id as usize].computed.min(r.len)))
                .collect();
            let used: usize = res.iter().map(|r| r.2).sum();
            let reserved = s.reserved();
            let m = MemoryStats {
                capacity_tokens: arena.capacity(),
                token_slots: used,
                allocated_slots: reserved,
                reserved_unused: reserved - used,
                internal_fragmentation: 0,
                shared_pages: 0,
                bytes_per_token,
                largest_gap: arena.largest_gap(),
                head_need: s.head_need().unwrap_or(0),
            };
            (m, Vec::new(), res)
        }
    }
}
