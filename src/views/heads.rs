//! Head sharing, decided once: which KV head each query head reads under the current
//! layout, and what each layout costs in KV bytes for this request's cache.

use crate::kv::KvElem;
use crate::model::HeadLayout;
use crate::report::StepReport;

/// What the heads pane and its picture show.
pub struct Heads {
    /// Per query head, the KV head it reads.
    pub map: Vec<usize>,
    pub n_kv: usize,
    pub layout: HeadLayout,
    /// What the cache stores each number as (the costs count it).
    pub kv_elem: KvElem,
    /// The tokens the cache is sized for (the reservation, or the context so far).
    pub tokens: usize,
    /// Per layout: KV bytes per token, and for `tokens` tokens.
    pub costs: Vec<(HeadLayout, usize, usize)>,
}

impl Heads {
    /// The view of a report; `None` before the first step.
    pub fn of(r: &StepReport) -> Option<Self> {
        let map = r.info.query_to_kv.clone();
        if map.is_empty() {
            return None;
        }
        let tokens = r.kv.capacity.max(r.pieces.len());
        let costs = HeadLayout::ALL
            .iter()
            .map(|&l| {
                let bpt = r.info.kv_bytes_per_token.get(&l).copied().unwrap_or(0);
                (l, bpt, bpt * tokens)
            })
            .collect();
        Some(Self {
            n_kv: map.iter().max().map_or(0, |m| m + 1),
            map,
            layout: r.settings.run.layout,
            kv_elem: r.settings.run.kv_elem,
            tokens,
            costs,
        })
    }
}
