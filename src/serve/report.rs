//! What one iteration produced, as plain serializable data: the UI, `trace --json` and
//! recordings read the same structs.

use super::batch::{CacheKind, Policy, ServeStep};
use crate::model::session::StepInfo;
use crate::model::{LlamaConfig, RunOptions};
use serde::{Deserialize, Serialize};

/// The KV cache of the request as the store reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct KvView {
    /// Token slots reserved (contiguous: prompt + max new tokens).
    pub capacity: usize,
    /// Slots holding real tokens.
    pub used: usize,
    pub bytes_per_token: usize,
    pub reserved_bytes: usize,
}

impl KvView {
    /// Share of reserved memory holding real tokens, percent.
    pub fn utilization_pct(&self) -> f64 {
        if self.capacity == 0 {
            0.0
        } else {
            100.0 * self.used as f64 / self.capacity as f64
        }
    }
}

/// One iteration of the engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepReport {
    /// Iterations since the engine started (survives prompt changes).
    pub iteration: usize,
    pub cfg: LlamaConfig,
    pub run: RunOptions,
    pub prompt: String,
    /// Every token of the sequence so far as printable pieces (prompt, then generated).
    pub pieces: Vec<String>,
    pub prompt_len: usize,
    /// The generated text so far.
    pub generated: String,
    pub info: StepInfo,
    pub kv: KvView,
    /// Decode speed over this request's decode steps so far.
    pub decode_tok_per_s: f64,
    pub finished: bool,
    /// The serving side: a small workload batched beside the request above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<ServeView>,
    /// The same workload under one other setting, when comparing side by side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_b: Option<ServeView>,
    /// The attention-sink experiment, when it is on: one more token of the shipped text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<super::sink::SinkView>,
}

/// One iteration of the serving engine, as the app shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeView {
    pub policy: Policy,
    pub cache: CacheKind,
    pub page_size: usize,
    pub requests: usize,
    pub step: ServeStep,
    pub preemptions: usize,
    pub done: bool,
}
