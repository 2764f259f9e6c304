//! The runner: carries out the scheduler's plan on the model. It owns the KV tensors — the
//! page store, or one contiguous store per running request — runs every scheduled
//! sequence through one batched forward pass, and picks each finished sequence's next
//! token greedily.

use super::scheduler::{CacheKind, Memory, Plan, Scheduler, ServeConfig};
use super::ServeError;
use crate::kv::pool::ReqId;
use crate::kv::{paged::PagedKv, Contiguous, ContiguousBatch, KvStore};
use crate::model::sampler::argmax;
use crate::model::traffic::Traffic;
use crate::model::{LayerSelect, Logits, Model, Probe};
use std::collections::BTreeMap;

/// Where the keys and values live.
enum Store {
    Paged(Box<PagedKv>),
    /// One store per running request, sized to its reservation.
    Contiguous(BTreeMap<ReqId, Contiguous>),
}

/// The model and the KV tensors of a serving engine.
pub struct Runner {
    model: Model,
    store: Store,
}

impl Runner {
    /// A runner over `model` with the KV memory `cfg` asks for.
    pub fn new(model: &Model, cfg: &ServeConfig) -> Result<Self, ServeError> {
        let store = match cfg.cache {
            CacheKind::Paged => Store::Paged(Box::new(PagedKv::new(
                model.cfg.n_layer,
                model.kv_heads(),
                model.cfg.head_dim,
                cfg.kv_budget_tokens / cfg.page_size,
                cfg.page_size,
                &model.device,
            )?)),
            CacheKind::Contiguous => Store::Contiguous(BTreeMap::new()),
        };
        Ok(Self {
            model: model.clone(),
            store,
        })
    }

    /// The model it runs.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Runs the plan's work in one forward pass; returns, per work item, the greedy next
    /// token where the item samples one, and what the pass moved and computed.
    pub fn run(
        &mut self,
        s: &mut Scheduler,
        plan: &Plan,
    ) -> Result<(Vec<Option<u32>>, Traffic), ServeError> {
        self.sync(s);
        if plan.work.is_empty() {
            return Ok((Vec::new(), Traffic::default()));
        }
        // A probe that captures nothing: it only counts.
        let mut probe = Probe::new(LayerSelect::None);
        let seqs: Vec<Vec<u32>> = plan
            .work
            .iter()
            .map(|w| s.requests[w.id as usize].tokens(w.from, w.n))
            .collect();
        let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
        let logits = match (&mut self.store, &mut s.memory) {
            (Store::Paged(kv), Memory::Paged(pool)) => {
                let items: Vec<(ReqId, &[u32])> = plan
                    .work
                    .iter()
                    .zip(&refs)
                    .map(|(w, t)| (w.id, *t))
                    .collect();
                let mut batch = kv.batch(pool, &items)?;
                self.model
                    .forward_batch(&refs, &mut batch, Some(&mut probe), Logits::Last)
            }
            (Store::Contiguous(stores), Memory::Reserved(_)) => {
                // The plan's work is in id order, and so is the map.
                let mut batch = ContiguousBatch(
                    stores
                        .iter_mut()
                        .filter(|(id, _)| plan.work.iter().any(|w| w.id == **id))
                        .map(|(_, c)| c)
                        .collect(),
                );
                self.model
                    .forward_batch(&refs, &mut batch, Some(&mut probe), Logits::Last)
            }
            _ => {
                return Err(ServeError::Invariant(
                    "the KV store and the scheduler's memory disagree".into(),
                ))
            }
        }?;
        let tokens = plan
            .work
            .iter()
            .zip(&logits)
            .map(|(w, l)| {
                if !w.sample {
                    return Ok(None);
                }
                let row: Vec<f32> = l
                    .squeeze(0)
                    .and_then(|x| x.to_vec1())
                    .map_err(crate::model::ModelError::from)?;
                Ok(Some(argmax(&row)))
            })
            .collect::<Result<_, ServeError>>()?;
        Ok((tokens, probe.traffic))
    }

    /// Brings the contiguous stores in line with the scheduler's reservations: a store for
    /// each admitted request, none for those that left, and no token past what the
    /// scheduler counts as computed (a rewound padding row). Pages need nothing: the
    /// allocator is the scheduler's, and a page's bytes are simply overwritten.
    pub fn sync(&mut self, s: &Scheduler) {
        let (Store::Contiguous(stores), Memory::Reserved(arena)) = (&mut self.store, &s.memory)
        else {
            return;
        };
        stores.retain(|&id, _| arena.get(id).is_some());
        for (id, run) in arena.runs() {
            let slots = run.len;
            let c = stores.entry(id).or_insert_with(|| {
                Contiguous::new(
                    self.model.cfg.n_layer,
                    self.model.kv_heads(),
                    self.model.cfg.head_dim,
                    slots,
                    &self.model.device,
                )
            });
            let computed = s.requests[id as usize].computed;
            if c.len() > computed {
                c.truncate(computed);
            }
        }
    }
}
