//! The KV memory as the scheduler plans with it: bookkeeping only, no tensors. Either the
//! page allocator (block tables, free list, ref counts, prefix hashes) or contiguous
//! reservations placed in an arena. Every question the scheduler asks of its memory is a
//! method here, so that the scheduler reads as policy (who runs next) and this file as
//! what each cache can hold.

use super::ReqId;
use crate::kv::pool::{KvError, PagePool};
use crate::kv::Arena;

/// The KV memory of one serving run.
pub enum Memory {
    /// The page allocator: block tables, free list, ref counts, prefix hashes.
    Paged(Box<PagePool>),
    /// Contiguous reservations: one run of slots per running request, placed in an arena.
    Reserved(Arena),
}

/// Where a work item's keys and values are, as the runner writes and reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The page slot of every token of the sequence once this pass has run, in order:
    /// the pass writes the last `n`, attention reads them all.
    Pages(Vec<u32>),
    /// A contiguous reservation of `len` slots from slot `start` of the arena: the pass
    /// writes from `from` on.
    Reserved { start: usize, len: usize },
}

/// A running request as admission counts it: its id and the tokens it has still to
/// compute (its prompt, or a recompute after preemption, until they have run).
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    pub id: ReqId,
    pub to_compute: usize,
}

impl Memory {
    /// An empty page pool of `n_pages` pages of `page_size` tokens.
    pub fn paged(n_pages: usize, page_size: usize, prefix_sharing: bool) -> Result<Self, KvError> {
        let mut pool = PagePool::new(n_pages, page_size)?;
        pool.prefix_sharing = prefix_sharing;
        Ok(Self::Paged(Box::new(pool)))
    }

    /// An empty arena of `capacity` slots for contiguous reservations.
    pub fn reserved(capacity: usize) -> Self {
        Self::Reserved(Arena::new(capacity))
    }

    /// Slots reserved by contiguous requests (0 for pages).
    pub fn reserved_slots(&self) -> usize {
        match self {
            Self::Reserved(a) => a.reserved(),
            Self::Paged(_) => 0,
        }
    }

    /// Free pages (paged) or unreserved slots (contiguous).
    pub fn free_capacity(&self) -> usize {
        match self {
            Self::Paged(p) => p.free_pages(),
            Self::Reserved(a) => a.free(),
        }
    }

    /// The allocator's own invariants, or reservations within the budget.
    #[cfg(any(test, feature = "testing"))]
    pub fn check(&self) -> Result<(), KvError> {
        match self {
            Self::Paged(p) => p.check(),
            Self::Reserved(a) => a.check(),
        }
    }

    /// Whether running `work` (request, new tokens) needs more pages than are free. A
    /// contiguous cache reserved every slot at admission, so it is never short.
    pub fn short_for(&self, work: &[(ReqId, usize)]) -> bool {
        let Self::Paged(p) = self else {
            return false;
        };
        let need: usize = work
            .iter()
            .map(|&(id, n)| p.pages_needed(id, n).unwrap_or(0))
            .sum();
        need > p.free_pages()
    }

    /// Whether a request with these `tokens` (a contiguous cache: this `reserve`) can be
    /// admitted beside the `running` ones.
    pub fn can_admit(&self, tokens: &[u32], reserve: usize, running: &[Pending]) -> bool {
        let p = match self {
            // One free run as long as the whole reservation, not just enough free slots.
            Self::Reserved(a) => return a.largest_gap() >= reserve,
            Self::Paged(p) => p,
        };
        // Room for the tokens to recompute, less the full prompt pages it will share with
        // requests already running (as vLLM counts only the blocks not cached), one page
        // to grow into, and one page of headroom per running request: admitting into the
        // last free pages only to preempt on the next page boundary would thrash (each
        // preemption recomputes the victim's whole prompt).
        let shared = p.shared_on_admit(tokens);
        let need = p.pages_for(tokens.len()).saturating_sub(shared) + 1 + running.len();
        // Pages already promised: admitted requests whose prompt (or recompute) has not
        // run yet hold none so far, but will on their next iteration.
        let promised: usize = running
            .iter()
            .map(|q| p.pages_needed(q.id, q.to_compute).unwrap_or(0))
            .sum();
        // Alone in the pool a request may start even if its whole prompt plus headroom
        // exceeds the pool: it has nobody to preempt.
        if running.is_empty() {
            p.free_pages() >= need.min(p.total_pages())
        } else {
            p.free_pages() >= need + promised
        }
    }

    /// Contiguous only: the free slots add up to `reserve` but no single gap is that long
    /// (external fragmentation).
    pub fn fragmented(&self, reserve: usize) -> bool {
        matches!(self, Self::Reserved(a) if a.free() >= reserve && a.largest_gap() < reserve)
    }

    /// Admits request `id`: on pages, its prompt's shared prefix is taken from the pool;
    /// contiguous, a run of `reserve` slots is placed. Returns the tokens already
    /// computed (the shared prefix; 0 contiguous).
    pub fn admit(&mut self, id: ReqId, tokens: &[u32], reserve: usize) -> Result<usize, KvError> {
        match self {
            Self::Paged(p) => p.admit(id, tokens),
            Self::Reserved(a) => {
                // The longest gap is looked up only when placing fails.
                a.place(id, reserve).ok_or_else(|| KvError::OutOfPages {
                    need: reserve,
                    free: a.largest_gap(),
                })?;
                Ok(0)
            }
        }
    }

    /// Where `tokens`, the next of request `id`, go: on pages the allocator appends them
    /// now (new pages, and a copy of a shared last page first, added to `copies` as
    /// (request, from, to)); a contiguous reservation is where admission placed it.
    pub fn place(
        &mut self,
        id: ReqId,
        tokens: &[u32],
        copies: &mut Vec<(ReqId, u32, u32)>,
    ) -> Result<Placement, KvError> {
        Ok(match self {
            Self::Paged(p) => {
                let a = p.append(id, tokens)?;
                copies.extend(a.copies.iter().map(|&(from, to)| (id, from, to)));
                Placement::Pages(p.slots(id))
            }
            Self::Reserved(a) => {
                let run = a.get(id);
                Placement::Reserved {
                    start: run.map_or(0, |r| r.start),
                    len: run.map_or(0, |r| r.len),
                }
            }
        })
    }

    /// Frees everything request `id` holds.
    pub fn release(&mut self, id: ReqId) {
        match self {
            Self::Paged(p) => {
                let _ = p.free(id);
            }
            Self::Reserved(a) => a.free_run(id),
        }
    }

    /// Drops request `id`'s last token, to be written again (a padding row re-running its
    /// last position). A reservation keeps its slots, so only pages change.
    pub fn drop_last(&mut self, id: ReqId) -> Result<(), KvError> {
        match self {
            Self::Paged(p) => p.truncate(id, 1),
            Self::Reserved(_) => Ok(()),
        }
    }
}
