//! Watching a forward pass from outside. The pass calls an [`Observer`]'s named hooks as
//! each layer runs; every hook does nothing unless implemented, so serving and the
//! benchmarks pass [`Unobserved`] and pay next to nothing (two clock readings a hook), while
//! the probe implements them to fill
//! the panes. What the pass moved and computed, and where its time went, it counts itself
//! and returns ([`PassCounts`]); the time spent in the hooks is measured by the pass and
//! kept apart from the model's own.

use super::attention::{Observed, Span};
use super::flash::IoCount;
use super::rope::Rope;
use super::traffic::Traffic;
use candle_core::{Result, Tensor};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Hooks a forward pass calls: `start`; then for every layer `layer`, `entering`,
/// `attention`, `after_attention`, `gate`, `leaving`; then `lens`, after the LM head.
pub trait Observer: Send {
    /// A pass begins.
    fn start(&mut self) {}

    /// Layer `layer` begins; sequence 0's rows in the batch are `first`. Returns how many
    /// of the newest of them to capture (0: none; then attention keeps no scores and
    /// `attention` and `gate` are not called).
    fn layer(&mut self, _layer: usize, _first: Span) -> usize {
        0
    }

    /// The residual `x` entering the layer and RMSNorm's output `h`.
    fn entering(&mut self, _x: &Tensor, _h: &Tensor) -> Result<()> {
        Ok(())
    }

    /// Sequence 0's attention: queries, keys and values before and after RoPE, and what
    /// the kernel produced, with the captured rows' scores.
    fn attention(&mut self, _seen: Observed, _rope: &Rope) -> Result<()> {
        Ok(())
    }

    /// The residual after attention has been added.
    fn after_attention(&mut self, _x: &Tensor) -> Result<()> {
        Ok(())
    }

    /// The MLP's `silu(gate)`.
    fn gate(&mut self, _gate: &Tensor) -> Result<()> {
        Ok(())
    }

    /// The residual leaving the layer; `heads` is (query heads, KV heads, head width).
    fn leaving(&mut self, _x: &Tensor, _heads: (usize, usize, usize)) -> Result<()> {
        Ok(())
    }

    /// Whether the pass should run the logit lens: sequence 0's newest residual after
    /// every layer through the final RMSNorm and the LM head.
    fn wants_lens(&self) -> bool {
        false
    }

    /// The logit lens, one row of logits per layer.
    fn lens(&mut self, _logits: Tensor) {}
}

/// The observer that looks at nothing.
pub struct Unobserved;

impl Observer for Unobserved {}

/// Wall time of the stages of one forward call, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timing {
    pub embed_ms: f64,
    pub layers_ms: Vec<f64>,
    pub lm_head_ms: f64,
    /// Of the step's wall time, the time spent looking rather than computing: in the
    /// pass, the observer's hooks (copying captures out, scoring the captured rows again
    /// for the heatmap, the logit lens), which fall inside the stages above; after it, the
    /// session turning the lens into rows. The model's own time is the rest (recordings
    /// made before it read 0).
    #[serde(default)]
    pub observe_ms: f64,
}

/// What one pass moved, computed and took, counted by the pass from the operations it ran.
#[derive(Debug, Clone, Default)]
pub struct PassCounts {
    /// Attention bytes moved to and from main memory, all layers and heads.
    pub attn_io: IoCount,
    /// Weights, KV and scores read and written, and FLOPs.
    pub traffic: Traffic,
    pub timing: Timing,
    /// The attention route that ran.
    pub route: super::batched::AttnRoute,
    /// Operations the batched route launched for attention (0 on the host route).
    pub device_ops: usize,
}

/// A forward pass's result: each sequence's logits and what the pass counted.
pub struct Pass {
    pub logits: Vec<Tensor>,
    pub counts: PassCounts,
}

/// The observer as the pass holds it: every hook timed, and the current layer's capture
/// size remembered.
pub(crate) struct Timed<'a> {
    obs: &'a mut dyn Observer,
    rows: usize,
    /// Milliseconds spent in hooks (and on looking the pass did for them) so far.
    pub ms: f64,
}

impl<'a> Timed<'a> {
    pub fn new(obs: &'a mut dyn Observer) -> Self {
        Self {
            obs,
            rows: 0,
            ms: 0.0,
        }
    }

    /// Starts the pass.
    pub fn start(&mut self) {
        self.see(|o| o.start());
    }

    /// Starts layer `layer`; returns the rows it captures.
    pub fn layer(&mut self, layer: usize, first: Span) -> usize {
        let t0 = Instant::now();
        self.rows = self.obs.layer(layer, first);
        self.ms += ms_since(t0);
        self.rows
    }

    /// Newest rows of sequence 0 the current layer captures (0: none).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Calls a hook, timing it.
    pub fn see<R>(&mut self, hook: impl FnOnce(&mut dyn Observer) -> R) -> R {
        let t0 = Instant::now();
        let r = hook(&mut *self.obs);
        self.ms += ms_since(t0);
        r
    }

    /// Whether the observer wants the logit lens.
    pub fn wants_lens(&self) -> bool {
        self.obs.wants_lens()
    }
}

/// Milliseconds since `t0`.
pub fn ms_since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e3
}
