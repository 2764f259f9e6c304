//! The runner: carries out the scheduler's plan on the model, and nothing else. It owns
//! the KV bytes (the pages, or one contiguous store per running request), runs every
//! planned sequence through one batched forward pass, and picks each finished sequence's
//! next token greedily. Which page or reservation holds what is the scheduler's
//! decision, handed over in the plan: the runner never sees the allocator.

use super::scheduler::{CacheKind, Placement, Plan, ServeConfig};
use super::ReqId;
use super::ServeError;
use crate::kv::paged::{PagedKv, SeqSlots};
use crate::kv::{Contiguous, ContiguousBatch};
use crate::model::sampler::argmax;
use crate::model::traffic::Traffic;
use crate::model::{AttnRoute, Logits, Model, Unobserved};
use std::collections::BTreeMap;

/// Where the keys and values live.
enum KvBytes {
    Paged(Box<PagedKv>),
    /// One store per running request, sized to its reservation.
    Contiguous(BTreeMap<ReqId, Contiguous>),
    /// The batched route's contiguous memory: the whole arena as slot tensors, each
    /// reservation one run of its slots (pages of one slot, in the store's terms).
    Arena(Box<PagedKv>),
}

/// The model and the KV bytes of a serving engine.
pub struct Runner {
    model: Model,
    kv: KvBytes,
}

impl Runner {
    /// A runner over `model` with the KV memory `cfg` asks for.
    pub fn new(model: &Model, cfg: &ServeConfig) -> Result<Self, ServeError> {
        let (layers, shape) = (model.cfg.n_layer, (model.kv_heads(), model.cfg.head_dim));
        let elem = model.run_options().kv_elem;
        let pages = (cfg.kv_budget_tokens / cfg.page_size, cfg.page_size);
        let batched = model.run_options().route == AttnRoute::Batched;
        let kv = match (cfg.cache, batched) {
            (CacheKind::Paged, false) => KvBytes::Paged(Box::new(PagedKv::new(
                layers,
                shape.0,
                shape.1,
                pages,
                elem,
                &model.device,
            )?)),
            (CacheKind::Paged, true) => KvBytes::Paged(Box::new(PagedKv::on_slots(
                layers,
                shape,
                pages,
                elem,
                &model.device,
            )?)),
            (CacheKind::Contiguous, false) => KvBytes::Contiguous(BTreeMap::new()),
            (CacheKind::Contiguous, true) => KvBytes::Arena(Box::new(PagedKv::on_slots(
                layers,
                shape,
                (cfg.capacity_tokens(), 1),
                elem,
                &model.device,
            )?)),
        };
        Ok(Self {
            model: model.clone(),
            kv,
        })
    }

    /// The model it runs.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Runs the plan in one forward pass; returns, per work item, the greedy next token
    /// where the item samples one, and what the pass moved and computed.
    pub fn run(&mut self, plan: &Plan) -> Result<(Vec<Option<u32>>, Traffic), ServeError> {
        self.release(plan.preempted.iter().chain(&plan.finished));
        if plan.work.is_empty() {
            return Ok((Vec::new(), Traffic::default()));
        }
        let refs: Vec<&[u32]> = plan.work.iter().map(|w| w.tokens.as_slice()).collect();
        let pass = match &mut self.kv {
            KvBytes::Paged(kv) => {
                let copies: Vec<(u32, u32)> = plan.copies.iter().map(|c| (c.1, c.2)).collect();
                kv.copy_pages(&copies)
                    .map_err(crate::model::ModelError::from)?;
                let seqs = plan.work.iter().map(paged_seq).collect::<Result<_, _>>()?;
                let mut batch = kv.batch(seqs);
                self.model
                    .pass(&refs, &mut batch, &mut Unobserved, Logits::Last)
            }
            KvBytes::Arena(kv) => {
                let seqs = plan
                    .work
                    .iter()
                    .map(reserved_seq)
                    .collect::<Result<_, _>>()?;
                let mut batch = kv.batch(seqs);
                self.model
                    .pass(&refs, &mut batch, &mut Unobserved, Logits::Last)
            }
            KvBytes::Contiguous(stores) => {
                reserve(&self.model, stores, plan)?;
                // The plan's work is in id order, and so is the map.
                let mut batch = ContiguousBatch(
                    stores
                        .iter_mut()
                        .filter(|(id, _)| plan.work.iter().any(|w| w.id == **id))
                        .map(|(_, c)| c)
                        .collect(),
                );
                self.model
                    .pass(&refs, &mut batch, &mut Unobserved, Logits::Last)
            }
        }?;
        let next = match pass.counts.route {
            AttnRoute::Batched => greedy_on_device(plan, &pass.logits)?,
            AttnRoute::Host => greedy(plan, &pass.logits)?,
        };
        Ok((next, pass.counts.traffic))
    }

    /// Drops the contiguous stores of requests that left (finished or preempted): their
    /// reservations are free again. Pages need nothing: their bytes are overwritten.
    pub fn release<'a>(&mut self, ids: impl IntoIterator<Item = &'a ReqId>) {
        if let KvBytes::Contiguous(stores) = &mut self.kv {
            for id in ids {
                stores.remove(id);
            }
        }
    }
}

/// A contiguous store for every work item that has none yet, sized to its reservation;
/// one that holds more than the item has computed (a rewound padding row, which writes
/// its last position again) is cut back.
fn reserve(
    m: &Model,
    stores: &mut BTreeMap<ReqId, Contiguous>,
    plan: &Plan,
) -> Result<(), ServeError> {
    for w in &plan.work {
        let Placement::Reserved { len: slots, .. } = w.place else {
            return Err(mixed_plan());
        };
        let c = stores.entry(w.id).or_insert_with(|| {
            Contiguous::new(
                m.cfg.n_layer,
                m.kv_heads(),
                m.cfg.head_dim,
                slots,
                m.run_options().kv_elem,
                &m.device,
            )
        });
        if c.len() > w.from {
            c.truncate(w.from);
        }
    }
    Ok(())
}

/// The greedy next token of each work item that samples one.
fn greedy(plan: &Plan, logits: &[candle_core::Tensor]) -> Result<Vec<Option<u32>>, ServeError> {
    plan.work
        .iter()
        .zip(logits)
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
        .collect()
}

/// The batched route's greedy pick: every row's argmax where the logits are, and one
/// small copy back (a token id per row) instead of a vocabulary's logits per request.
fn greedy_on_device(
    plan: &Plan,
    logits: &[candle_core::Tensor],
) -> Result<Vec<Option<u32>>, ServeError> {
    let pick = || -> candle_core::Result<Vec<u32>> {
        candle_core::Tensor::cat(logits, 0)?.argmax(1)?.to_vec1()
    };
    let ids = pick().map_err(crate::model::ModelError::from)?;
    Ok(plan
        .work
        .iter()
        .zip(ids)
        .map(|(w, id)| w.sample.then_some(id))
        .collect())
}

/// A paged work item's slots.
fn paged_seq(w: &super::scheduler::Work) -> Result<SeqSlots, ServeError> {
    match &w.place {
        Placement::Pages(all) if all.len() == w.from + w.n => Ok(SeqSlots {
            before: w.from,
            all: all.clone(),
        }),
        Placement::Pages(_) => Err(ServeError::Invariant(format!(
            "request {}: the plan's slots do not cover its tokens",
            w.id
        ))),
        Placement::Reserved { .. } => Err(mixed_plan()),
    }
}

/// A contiguous work item's slots in the arena: its run, up to the tokens it will hold.
fn reserved_seq(w: &super::scheduler::Work) -> Result<SeqSlots, ServeError> {
    let Placement::Reserved { start, len } = w.place else {
        return Err(mixed_plan());
    };
    let upto = w.from + w.n;
    if upto > len {
        return Err(ServeError::Invariant(format!(
            "request {}: {upto} tokens in a reservation of {len}",
            w.id
        )));
    }
    Ok(SeqSlots {
        before: w.from,
        all: (start..start + upto).map(|s| s as u32).collect(),
    })
}

fn mixed_plan() -> ServeError {
    ServeError::Invariant("the plan places work in the other kind of KV cache".into())
}
