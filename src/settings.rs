//! Every switch of the app as one value. A key (or a lesson step) makes a new
//! [`Settings`]; one command carries it to the worker; the worker compares it with what
//! runs, rebuilds only what changed, and echoes the settings it ran under in every
//! report. A pane's title and its body then read the same report, so they cannot
//! disagree about what was computed.

use crate::model::{AttnKernel, HeadLayout, RunOptions, SamplerConfig};
use crate::serve::workload::AppWorkload;
use crate::serve::{CacheKind, Policy};
use serde::{Deserialize, Serialize};

/// Everything the worker computes under, and what it computes for the screen.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// The forward pass: head layout and attention kernel (the model is rebuilt).
    pub run: RunOptions,
    /// The serving workload beside the live request (restarted when it changes).
    pub serving: Serving,
    /// The attention-sink experiment runs beside the request.
    pub sink: bool,
    /// The live request's own switches (it keeps its tokens when they change).
    pub request: RequestSettings,
    /// What the screen shows that costs the worker work.
    pub watch: Watch,
    /// The matrices' stored type (the model is loaded again when it changes).
    pub weights: crate::model::Requant,
}

/// How the app's serving workload runs, and what runs beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Serving {
    pub policy: Policy,
    pub cache: CacheKind,
    pub compare: Compare,
    pub workload: AppWorkload,
    /// Prompts fed in chunks of a small token budget per iteration (chunked prefill), so
    /// a long one no longer holds every decode back for an iteration.
    pub chunked: bool,
    /// The chat requests arrive a few iterations apart (a burst), rather than at the
    /// measured rate on the engine's clock: the queue fills within the first iterations,
    /// so memory, not arrivals, decides how many run (the paging lesson's setting).
    pub burst: bool,
}

/// What the side-by-side view varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Compare {
    #[default]
    Off,
    /// The other cache kind, same policy.
    Cache,
    /// The other policy, same cache kind.
    Policy,
    /// The same requests one at a time (first come first served, a batch of one): the
    /// baseline continuous batching is measured against.
    OneAtATime,
    /// The same requests under the other head layout (MHA beside GQA or MQA, GQA beside
    /// MHA) in the same KV memory in bytes: fewer KV heads, more requests at once.
    Layout,
}

/// One serving engine's run: its policy and cache, or the requests one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServingRun {
    pub policy: Policy,
    pub cache: CacheKind,
    pub one_at_a_time: bool,
    /// Under the other head layout ([`other_serving_layout`]), in the same KV bytes.
    pub other_layout: bool,
}

impl ServingRun {
    /// "continuous batching · paged kv", or "one at a time · paged kv" for the same
    /// requests in batches of one.
    pub fn describe(&self) -> String {
        let how = if self.one_at_a_time {
            "one at a time".to_string()
        } else {
            format!("{:?} batching", self.policy)
        };
        format!("{how} · {:?} KV", self.cache).to_lowercase()
    }
}

impl Serving {
    /// The main run.
    pub fn main(&self) -> ServingRun {
        ServingRun {
            policy: self.policy,
            cache: self.cache,
            one_at_a_time: false,
            other_layout: false,
        }
    }

    /// The run beside the main one, on the same requests: one setting flipped.
    pub fn other(&self) -> Option<ServingRun> {
        let main = self.main();
        match self.compare {
            Compare::Off => None,
            Compare::Cache => Some(ServingRun {
                cache: self.cache.other(),
                ..main
            }),
            Compare::Policy => Some(ServingRun {
                policy: self.policy.other(),
                ..main
            }),
            Compare::OneAtATime => Some(ServingRun {
                policy: Policy::Static,
                one_at_a_time: true,
                ..main
            }),
            Compare::Layout => Some(ServingRun {
                other_layout: true,
                ..main
            }),
        }
    }
}

impl Compare {
    /// Off → cache → policy → one at a time → layout → off.
    pub fn next(self) -> Self {
        match self {
            Compare::Off => Compare::Cache,
            Compare::Cache => Compare::Policy,
            Compare::Policy => Compare::OneAtATime,
            Compare::OneAtATime => Compare::Layout,
            Compare::Layout => Compare::Off,
        }
    }
}

/// The head layout a [`Compare::Layout`] run uses beside a model running `now`: MHA
/// beside the layouts that share KV heads, GQA beside MHA.
pub fn other_serving_layout(now: HeadLayout) -> HeadLayout {
    match now {
        HeadLayout::Mha => HeadLayout::Gqa,
        _ => HeadLayout::Mha,
    }
}

/// The live request's switches.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RequestSettings {
    /// How it picks its next token (greedy by default).
    pub sampler: SamplerConfig,
    /// It keeps a KV cache (off: every step recomputes the keys and values of the sequence).
    pub kv_cache: bool,
    /// The head layout its tokens also run under, shown beside it.
    pub beside: Option<HeadLayout>,
}

impl Default for RequestSettings {
    fn default() -> Self {
        Self {
            sampler: SamplerConfig::default(),
            kv_cache: true,
            beside: None,
        }
    }
}

/// What the screen shows that the worker computes for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Watch {
    /// The layer on screen: a long context's captures keep only that layer.
    pub layer: usize,
    /// The logit lens is shown (it costs an LM head pass over every layer's newest row).
    pub lens: bool,
}

impl Settings {
    /// These settings with what cannot hold together made to: a layout beside the live
    /// one that has become the live one is no comparison and ends.
    pub fn settled(mut self) -> Self {
        if self.request.beside == Some(self.run.layout) {
            self.request.beside = None;
        }
        self
    }

    /// The next head layout beside the live one: the layouts other than the live one,
    /// in order, then none.
    pub fn next_beside(&self) -> Option<HeadLayout> {
        let others: Vec<HeadLayout> = HeadLayout::ALL
            .into_iter()
            .filter(|&l| l != self.run.layout)
            .collect();
        match self
            .request
            .beside
            .and_then(|b| others.iter().position(|&l| l == b))
        {
            None => others.first().copied(),
            Some(i) => others.get(i + 1).copied(),
        }
    }
}

/// The other attention kernel: naive ↔ tiled (with an A100's on-chip memory).
pub fn other_kernel(k: AttnKernel) -> AttnKernel {
    match k {
        AttnKernel::Naive => AttnKernel::Tiled {
            sram_bytes: crate::model::flash::A100_SRAM_BYTES,
        },
        AttnKernel::Tiled { .. } => AttnKernel::Naive,
    }
}

/// The next head layout: MHA → GQA → MQA → MHA.
pub fn next_layout(l: HeadLayout) -> HeadLayout {
    let i = HeadLayout::ALL.iter().position(|x| *x == l).unwrap_or(1);
    HeadLayout::ALL[(i + 1) % HeadLayout::ALL.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_beside_flips_one_setting_and_a_live_layout_is_never_beside_itself() {
        let s = Serving {
            compare: Compare::Cache,
            ..Serving::default()
        };
        assert_eq!(s.other().unwrap().cache, CacheKind::Contiguous);
        assert_eq!(s.other().unwrap().policy, s.policy);
        let s = Serving {
            compare: Compare::OneAtATime,
            ..s
        };
        assert!(s.other().unwrap().one_at_a_time);
        assert_eq!(Serving::default().other(), None);
        let mut all = Settings::default();
        all.request.beside = Some(all.run.layout);
        assert_eq!(all.settled().request.beside, None);
        // Beside cycles through the two other layouts, then off.
        let mut seen = Vec::new();
        loop {
            all.request.beside = all.next_beside();
            match all.request.beside {
                Some(l) => seen.push(l),
                None => break,
            }
        }
        assert_eq!(seen.len(), HeadLayout::ALL.len() - 1);
        assert!(!seen.contains(&all.run.layout));
    }
}
