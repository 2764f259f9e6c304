//! The batched attention route: one attention per layer for the whole step, prompt rows
//! and decode rows alike, as a GPU wants it. The host route runs each request's rows on
//! their own (cheap on a CPU, where a small operation costs little); on a device every
//! operation is a kernel launch, so a step that launches per request costs B times one.
//!
//! Here the block tables become index tensors, uploaded once per step ([`Step`]):
//!
//! 1. RoPE turns every new query and key row at its own position, one call each.
//! 2. One indexed write per layer puts every new K and V row into its slot.
//! 3. One gather per layer reads every sequence's keys and values by slot, padded to the
//!    longest sequence of the step: `(B, n_kv, L, d)`.
//! 4. Queries padded the same way, `(B, n_kv, group × T, d)`: a group's query heads read
//!    their KV head by index (GQA and MQA without copying heads).
//! 5. Q·Kᵀ, a mask (causal, and the padding), softmax and ·V as batched matmuls over
//!    (request, KV head); the padding rows are dropped again.
//!
//! The number of operations a step launches does not depend on how many requests it
//! holds; [`Step::ops`] counts them.

use super::attention::{Attended, Setup, Span};
use super::rope::Rope;
use crate::kv::{SlotStep, SlotTensors};
use candle_core::{DType, Device, Result, Tensor};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Which way attention runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum AttnRoute {
    /// Each request on its own: rows read in place on the CPU, tensors per request on a
    /// device.
    #[default]
    Host,
    /// The whole step at once on tensors, through slot indexes (a GPU's route).
    Batched,
}

impl AttnRoute {
    /// Both routes.
    pub const ALL: [AttnRoute; 2] = [AttnRoute::Host, AttnRoute::Batched];

    /// The route's name, as flags and the screen spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Batched => "batched",
        }
    }

    /// The host route (serde leaves it out of recordings, as they were before routes).
    pub fn is_host(&self) -> bool {
        *self == Self::Host
    }

    /// The default for a device: host on the CPU, batched on a GPU.
    pub fn default_for(device: &Device) -> Self {
        if device.is_cpu() {
            Self::Host
        } else {
            Self::Batched
        }
    }
}

/// A step's indexes, built and uploaded once and used by every layer.
pub struct Step {
    store: SlotTensors,
    /// Sequences, most query rows of one, most keys of one, and all query rows.
    b: usize,
    t: usize,
    l: usize,
    rows: usize,
    /// `(rows, width)`: each new row's slot, repeated across the row.
    write: Tensor,
    /// `(B × L,)`: the slot of every key of every sequence, padded with its first slot.
    keys: Tensor,
    /// `(B × T,)`: the batch row each padded query row takes (padding repeats a real one).
    pad: Tensor,
    /// `(rows,)`: the padded row of each batch row.
    unpad: Tensor,
    /// `(B, 1, 1, T, L)`: 0 where a query row may read a key, −∞ elsewhere.
    mask: Tensor,
    /// `(rows, 1, d/2)`: RoPE's cos and sin at each row's position.
    cos: Tensor,
    sin: Tensor,
    interleaved: bool,
    ops: AtomicUsize,
}

impl Step {
    /// The indexes of a step over `spans`, whose slots `slots` lends.
    pub fn new(spans: &[Span], slots: SlotStep, rope: &Rope, device: &Device) -> Result<Self> {
        let b = spans.len();
        let t = spans.iter().map(|p| p.len).max().unwrap_or(0);
        // A sequence's keys are its table's slots: as many as its positions, except in a
        // window that has evicted some (RoPE still turns each row at its true position).
        let l = slots.tables.iter().map(Vec::len).max().unwrap_or(0);
        let rows = spans.iter().map(|p| p.len).sum::<usize>();
        let width = slots.store.width();
        if slots.tables.len() != b || b == 0 {
            candle_core::bail!("{} slot tables for {b} sequences", slots.tables.len());
        }
        let (mut write, mut keys) = (Vec::with_capacity(rows * width), vec![0u32; b * l]);
        let (mut pad, mut unpad) = (vec![0u32; b * t], Vec::with_capacity(rows));
        let mut mask = vec![f32::NEG_INFINITY; b * t * l];
        let mut positions = Vec::with_capacity(rows);
        for (i, (p, table)) in spans.iter().zip(&slots.tables).enumerate() {
            let cached = keys_before(i, table, p)?;
            for (j, &slot) in table.iter().enumerate() {
                keys[i * l + j] = slot;
            }
            keys[i * l + table.len()..(i + 1) * l].fill(table[0]);
            for r in 0..t {
                // A padding row repeats the sequence's last real row and reads its keys.
                let real = r.min(p.len - 1);
                pad[i * t + r] = (p.off + real) as u32;
                let row_mask = &mut mask[(i * t + r) * l..][..l];
                row_mask[..=cached + real].fill(0.0);
                if r < p.len {
                    unpad.push((i * t + r) as u32);
                    write.extend(std::iter::repeat_n(table[cached + r], width));
                    positions.push(p.pos0 + r);
                }
            }
        }
        let (cos, sin) = rope.tables_at(&positions);
        let half = cos.len() / rows.max(1);
        Ok(Self {
            store: slots.store,
            b,
            t,
            l,
            rows,
            write: Tensor::from_vec(write, (rows, width), device)?,
            keys: Tensor::from_vec(keys, b * l, device)?,
            pad: Tensor::from_vec(pad, b * t, device)?,
            unpad: Tensor::from_vec(unpad, rows, device)?,
            mask: Tensor::from_vec(mask, (b, 1, 1, t, l), device)?,
            cos: Tensor::from_vec(cos, (rows, 1, half), device)?,
            sin: Tensor::from_vec(sin, (rows, 1, half), device)?,
            interleaved: rope.interleaved(),
            ops: AtomicUsize::new(7),
        })
    }

    /// Device operations launched so far this step: the seven uploads, then every
    /// operation of every layer that computes or copies (views such as a reshape are free).
    pub fn ops(&self) -> usize {
        self.ops.load(Ordering::Relaxed)
    }

    /// Counts one launched operation.
    fn op<T>(&self, r: Result<T>) -> Result<T> {
        self.count(1);
        r
    }

    fn count(&self, n: usize) {
        self.ops.fetch_add(n, Ordering::Relaxed);
    }

    /// Rows `(rows, heads × d)` turned by RoPE at their positions, in one call.
    fn rope(&self, x: &Tensor, heads: usize, d: usize) -> Result<Tensor> {
        let x = x.reshape((self.rows, heads, 1, d))?;
        let x = if x.is_contiguous() {
            x
        } else {
            self.op(x.contiguous())?
        };
        let turned = if self.interleaved {
            candle_nn::rotary_emb::rope_i(&x, &self.cos, &self.sin)
        } else {
            candle_nn::rotary_emb::rope(&x, &self.cos, &self.sin)
        };
        self.op(turned)?.reshape((self.rows, heads * d))
    }
}

/// The keys sequence `i` holds before the step's new rows, from its table of every slot it
/// holds after them: its position, or fewer in a window that has evicted some.
fn keys_before(i: usize, table: &[u32], p: &Span) -> Result<usize> {
    if table.len() < p.len || table.len() > p.pos0 + p.len {
        let (n, all) = (table.len(), p.pos0 + p.len);
        candle_core::bail!("sequence {i}: {n} slots for {} new of {all} tokens", p.len);
    }
    Ok(table.len() - p.len)
}

/// Attention of the whole step for one layer: every sequence's new keys and values go
/// into their slots, and every query row reads its sequence's keys, in a fixed number of
/// operations.
pub fn attend(
    s: &Setup,
    step: &Step,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    spans: &[Span],
) -> Result<Attended> {
    let (nh, nk, d) = (s.n_head, s.n_kv_head, s.head_dim);
    let (b, t, l, g) = (step.b, step.t, step.l, nh / nk);
    let qr = step.rope(q, nh, d)?;
    let kr = step.rope(k, nk, d)?;
    let v = if v.is_contiguous() {
        v.clone()
    } else {
        step.op(v.contiguous())?
    };
    // Two writes (K and V) and two gathers, each with a cast when the cache is not f32.
    let each = 2 * (1 + usize::from(step.store.dtype() != DType::F32));
    step.count(each);
    step.store.scatter(s.layer, &step.write, &kr, &v)?;
    step.count(each);
    let (ka, va) = step.store.gather(s.layer, &step.keys)?;
    let heads = |x: Tensor| step.op(x.reshape((b, l, nk, d))?.transpose(1, 2)?.contiguous());
    let (kh, vh) = (heads(ka)?, heads(va)?);
    let qp = step
        .op(qr.index_select(&step.pad, 0))?
        .reshape((b, t, nk, g, d))?;
    let qp = step
        .op(qp.permute((0, 2, 3, 1, 4))?.contiguous())?
        .reshape((b, nk, g * t, d))?;
    let scores = step.op(qp.matmul(&step.op(kh.t()?.contiguous())?))?;
    let scores = step
        .op(scores / (d as f64).sqrt())?
        .reshape((b, nk, g, t, l))?;
    let masked = step.op(scores.broadcast_add(&step.mask))?;
    let weights = step.op(candle_nn::ops::softmax_last_dim(&masked))?;
    let out = step.op(weights.reshape((b, nk, g * t, l))?.matmul(&vh))?;
    let out = out.reshape((b, nk, g, t, d))?.permute((0, 3, 1, 2, 4))?;
    let out = step.op(out.contiguous())?.reshape((b * t, nh * d))?;
    let out = step.op(out.index_select(&step.unpad, 0))?;
    let (io, traffic) = super::attention::naive_counts(s, spans);
    Ok(Attended {
        out,
        io,
        traffic,
        schedule: Vec::new(),
    })
}
