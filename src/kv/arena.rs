//! Where a contiguous cache puts its reservations: one run of slots per request in a
//! single arena, placed first fit. A request needs one free run as long as its whole
//! reservation, so when requests of different sizes come and go, the free slots split
//! into gaps, and a request can wait although the free slots add up to more than it needs:
//! external fragmentation, the second waste (after the unused tail of every reservation)
//! that paging removes.

use crate::kv::SeqId;
use std::collections::BTreeMap;

/// A request's run: slots `start..start + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub start: usize,
    pub len: usize,
}

/// The arena: `capacity` slots and the runs placed in it.
#[derive(Debug, Clone, Default)]
pub struct Arena {
    capacity: usize,
    runs: BTreeMap<SeqId, Run>,
}

impl Arena {
    /// An empty arena of `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            runs: BTreeMap::new(),
        }
    }

    /// Total slots.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Runs in address order, with their owners.
    pub fn runs(&self) -> Vec<(SeqId, Run)> {
        let mut v: Vec<(SeqId, Run)> = self.runs.iter().map(|(&id, &r)| (id, r)).collect();
        v.sort_by_key(|(_, r)| r.start);
        v
    }

    /// The free gaps between runs, in address order.
    pub fn gaps(&self) -> Vec<Run> {
        let mut gaps = Vec::new();
        let mut at = 0;
        for (_, r) in self.runs() {
            if r.start > at {
                gaps.push(Run {
                    start: at,
                    len: r.start - at,
                });
            }
            at = r.start + r.len;
        }
        if self.capacity > at {
            gaps.push(Run {
                start: at,
                len: self.capacity - at,
            });
        }
        gaps
    }

    /// Slots held by runs.
    pub fn reserved(&self) -> usize {
        self.runs.values().map(|r| r.len).sum()
    }

    /// Slots in no run (in however many gaps).
    pub fn free(&self) -> usize {
        self.capacity - self.reserved()
    }

    /// The longest run a new request could get.
    pub fn largest_gap(&self) -> usize {
        self.gaps().iter().map(|g| g.len).max().unwrap_or(0)
    }

    /// `id`'s run, if it has one.
    pub fn get(&self, id: SeqId) -> Option<Run> {
        self.runs.get(&id).copied()
    }

    /// Places `len` slots for `id` in the first gap long enough; `None` when no gap is,
    /// however many slots are free in all.
    pub fn place(&mut self, id: SeqId, len: usize) -> Option<Run> {
        if self.runs.contains_key(&id) {
            return None;
        }
        let gap = self.gaps().into_iter().find(|g| g.len >= len)?;
        let run = Run {
            start: gap.start,
            len,
        };
        self.runs.insert(id, run);
        Some(run)
    }

    /// Frees `id`'s run, if any.
    pub fn free_run(&mut self, id: SeqId) {
        self.runs.remove(&id);
    }

    /// Runs inside the arena and not overlapping: the allocator's invariant.
    #[cfg(any(test, feature = "testing"))]
    pub fn check(&self) -> Result<(), super::pool::KvError> {
        let mut end = 0;
        for (id, r) in self.runs() {
            if r.start < end || r.start + r.len > self.capacity {
                return Err(super::pool::KvError::Broken(format!(
                    "request {id}'s run {}..{} overlaps another or leaves the arena of {}",
                    r.start,
                    r.start + r.len,
                    self.capacity
                )));
            }
            end = r.start + r.len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_runs_leave_gaps_that_a_longer_request_cannot_use() {
        let mut a = Arena::new(100);
        assert_eq!(a.place(1, 30).unwrap().start, 0);
        assert_eq!(a.place(2, 30).unwrap().start, 30);
        assert_eq!(a.place(3, 30).unwrap().start, 60);
        a.free_run(1);
        a.free_run(3);
        // 70 slots free, in gaps of 30 and 40: 50 fits nowhere.
        assert_eq!(a.free(), 70);
        assert_eq!(a.largest_gap(), 40);
        assert!(a.place(4, 50).is_none());
        // First fit: 25 goes to the first gap long enough, at the start.
        assert_eq!(a.place(4, 25).unwrap().start, 0);
        assert_eq!(
            a.gaps(),
            vec![Run { start: 25, len: 5 }, Run { start: 60, len: 40 }]
        );
        a.check().unwrap();
        assert!(a.place(4, 1).is_none(), "one run per request");
    }
}
