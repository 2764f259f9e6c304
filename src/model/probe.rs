//! The probe: what the forward pass hands out about its insides when asked.
//! When no layer is selected the forward pass copies nothing.

use serde::{Deserialize, Serialize};

/// Which layers to capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum LayerSelect {
    #[default]
    None,
    One(usize),
    All,
}

impl LayerSelect {
    /// Does this selection include `layer`?
    pub fn wants(&self, layer: usize) -> bool {
        match self {
            LayerSelect::None => false,
            LayerSelect::One(l) => *l == layer,
            LayerSelect::All => true,
        }
    }
}

/// Everything captured from one layer during one forward call. Tensors are flattened
/// row-major; the shape of each is given in its doc.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LayerCapture {
    pub layer: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// New query rows in this call.
    pub t: usize,
    /// Keys attended to (cached + new).
    pub kv_len: usize,
    /// Position of the first new row.
    pub pos0: usize,
    /// `(n_head, t, head_dim)` after RoPE.
    pub q: Vec<f32>,
    /// `(n_kv_head, t, head_dim)` after RoPE, new rows only.
    pub k: Vec<f32>,
    /// `(n_kv_head, t, head_dim)`, new rows only.
    pub v: Vec<f32>,
    /// `(n_head, t, kv_len)`: Q·Kᵀ/√d, unmasked.
    pub scores: Vec<f32>,
    /// `(n_head, t, kv_len)`: causal softmax.
    pub weights: Vec<f32>,
    /// `(n_head, t, head_dim)`.
    pub head_out: Vec<f32>,
    /// `(t)`: ‖x‖ entering the layer, after attention, after the MLP.
    pub resid_norm_in: Vec<f32>,
    pub resid_norm_attn: Vec<f32>,
    pub resid_norm_out: Vec<f32>,
    /// With the tiled kernel: (query tile, key tile) pairs of head 0, in processing order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tile_schedule: Vec<(u32, u32)>,
    /// The newest row's pieces of the block, measured on the live vectors.
    #[serde(default)]
    pub block: BlockProbe,
}

/// RoPE, RMSNorm and SwiGLU seen on the newest row of one layer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct BlockProbe {
    /// ‖q‖ of head 0 before and after RoPE (a rotation keeps it).
    pub q_norm_pre_rope: f32,
    pub q_norm_post_rope: f32,
    /// Angle of head 0's first rotary pair, radians (position × base⁰).
    pub rope_angle0: f32,
    /// RMS of the residual entering attention, and of RMSNorm's output.
    pub rms_in: f32,
    pub rms_normed: f32,
    /// Share of the MLP's silu(gate) values with magnitude below 0.1, percent.
    pub gate_closed_pct: f32,
}

impl LayerCapture {
    /// Softmax weight of head `h`, query row `i`, key `j`.
    pub fn weight(&self, h: usize, i: usize, j: usize) -> f32 {
        self.weights[(h * self.t + i) * self.kv_len + j]
    }

    /// The attention row of head `h`, query row `i`.
    pub fn weight_row(&self, h: usize, i: usize) -> &[f32] {
        let s = (h * self.t + i) * self.kv_len;
        &self.weights[s..s + self.kv_len]
    }
}

/// Collects [`LayerCapture`]s for the selected layers.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    pub select: LayerSelect,
    /// Keep only this many of the newest query rows of each captured layer (`None`: all).
    /// A prompt of thousands of tokens would otherwise capture gigabytes of scores.
    pub row_limit: Option<usize>,
    pub captures: Vec<LayerCapture>,
    /// Attention bytes moved to/from main memory in the last call, all layers and heads
    /// (counted whether or not a layer is captured).
    pub attn_io: crate::model::flash::IoCount,
    /// Where the last call's time went, milliseconds: embedding, each layer, LM head.
    pub timing: Timing,
}

/// Wall time of the stages of one forward call, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timing {
    pub embed_ms: f64,
    pub layers_ms: Vec<f64>,
    pub lm_head_ms: f64,
}

impl Probe {
    /// A probe capturing `select`.
    pub fn new(select: LayerSelect) -> Self {
        Self {
            select,
            ..Default::default()
        }
    }
}
