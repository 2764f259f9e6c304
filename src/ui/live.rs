//! What the lesson walker and the predictions may read of the app: the user's choices
//! and the newest report, borrowed as plain data. The app hands this view out, so the
//! lesson code never reaches into the app and the app alone depends on the lessons.

use crate::model::{AttnKernel, HeadLayout};
use crate::serve::{CacheKind, Policy};
use crate::worker::{AppWorkload, StepReport};

pub use crate::screen::Pane;

/// A setting a lesson step (or anything else) can ask for by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Layout(HeadLayout),
    Kernel(AttnKernel),
    Serve(Policy, CacheKind, Compare),
    Sink(bool),
    Workload(AppWorkload),
    Focus(Pane),
    /// The focused pane has the body (`true`) or the grid of panes is shown.
    Zoom(bool),
    /// Raw scores (true) or softmax weights.
    Values(bool),
    Layer(usize),
    Head(usize),
    /// The live request's sampling temperature, in tenths (0: greedy).
    Temperature(u8),
    /// The live request's KV cache on or off.
    KvCache(bool),
}

/// What the side-by-side view varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    Off,
    /// The other cache kind, same policy.
    Cache,
    /// The other policy, same cache kind.
    Policy,
    /// The same requests one at a time (FIFO, batch of one): the baseline continuous
    /// batching is measured against.
    OneAtATime,
}

/// The app's state as the lessons see it, read-only.
#[derive(Debug, Clone, Copy)]
pub struct LiveState<'a> {
    /// The newest report on screen (none before the first iteration, or while a new
    /// one is being graded against it).
    pub report: Option<&'a StepReport>,
    pub layer: usize,
    pub head: usize,
    pub layout: HeadLayout,
    pub kernel: AttnKernel,
    pub policy: Policy,
    pub cache: CacheKind,
    pub compare: Compare,
    pub workload: AppWorkload,
    pub focus: Pane,
    /// Raw scores (true) or softmax weights in the heatmap.
    pub show_scores: bool,
    /// The attention-sink experiment runs.
    pub sink: bool,
    /// A new prompt waits for its prefill: the report on screen is the old request's,
    /// and the next iteration will be a prefill, not a decode step.
    pub prompt_queued: bool,
    /// How the live request picks its next token.
    pub sampler: crate::model::SamplerConfig,
    /// The live request keeps a KV cache.
    pub kv_cache: bool,
}
