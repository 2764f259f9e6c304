//! The probe: what the forward pass hands out about its insides when asked.
//! When no layer is selected the forward pass copies nothing.

use super::attention::{Observed, Span};
use super::observe::Observer;
pub use super::observe::Timing;
use super::rope::Rope;
use candle_core::{DType, Result, Tensor, D};
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
    /// RoPE's relative property on this layer's own vectors (recordings made before it
    /// read as zero).
    #[serde(default)]
    pub rope_shift: RopeShift,
}

/// Head 0's newest query and its KV head's newest key, both before RoPE, scored as if they
/// sat `offset` apart ending at `at`, then with both moved by `shift`, then `2 × offset`
/// apart: the first two agree (the positional part depends on the offset only), the third
/// differs.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct RopeShift {
    pub offset: u32,
    pub at: u32,
    pub shift: u32,
    pub score: f32,
    pub score_shifted: f32,
    pub score_other_offset: f32,
}

impl RopeShift {
    /// Offset and shift of the demonstration.
    const OFFSET: usize = 4;
    const SHIFT: usize = 1000;

    /// The demonstration for a query and key at `at`, when the context has room.
    fn measure(rope: &Rope, q: &[f32], k: &[f32], at: usize) -> Option<Self> {
        let (o, s) = (Self::OFFSET, Self::SHIFT);
        let at = at.max(2 * o);
        Some(Self {
            offset: o as u32,
            at: at as u32,
            shift: s as u32,
            score: rope.score_at(q, k, at, at - o)?,
            score_shifted: rope.score_at(q, k, at + s, at + s - o)?,
            score_other_offset: rope.score_at(q, k, at, at - 2 * o)?,
        })
    }
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

/// The observer behind the panes: collects [`LayerCapture`]s for the selected layers and
/// the logit lens.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    pub select: LayerSelect,
    /// Keep only this many of the newest query rows of each captured layer (`None`: all).
    /// A prompt of thousands of tokens would otherwise capture gigabytes of scores.
    pub row_limit: Option<usize>,
    pub captures: Vec<LayerCapture>,
    /// Run the logit lens: every layer's newest residual (of the first sequence) through
    /// the final RMSNorm and the LM head.
    pub lens: bool,
    /// The lens of the last call: one row of next-token logits per layer.
    pub lens_logits: Option<candle_core::Tensor>,
    /// The layer being looked at, while the pass runs it.
    look: Option<LayerLook>,
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

impl Observer for Probe {
    fn start(&mut self) {
        self.captures.clear();
        self.lens_logits = None;
    }

    fn layer(&mut self, layer: usize, first: Span) -> usize {
        let kept = if self.select.wants(layer) {
            self.row_limit.unwrap_or(usize::MAX).clamp(1, first.len)
        } else {
            0
        };
        self.look = (kept > 0).then(|| LayerLook::new(layer, first, kept));
        kept
    }

    fn entering(&mut self, x: &Tensor, h: &Tensor) -> Result<()> {
        self.look.as_mut().map_or(Ok(()), |l| l.entering(x, h))
    }

    fn attention(&mut self, seen: Observed, rope: &Rope) -> Result<()> {
        self.look
            .as_mut()
            .map_or(Ok(()), |l| l.attention(seen, rope))
    }

    fn after_attention(&mut self, x: &Tensor) -> Result<()> {
        self.look.as_mut().map_or(Ok(()), |l| l.after_attention(x))
    }

    fn gate(&mut self, gate: &Tensor) -> Result<()> {
        self.look.as_mut().map_or(Ok(()), |l| l.gate(gate))
    }

    fn leaving(&mut self, x: &Tensor, heads: (usize, usize, usize)) -> Result<()> {
        if let Some(look) = self.look.take() {
            self.captures.extend(look.leaving(x, heads)?);
        }
        Ok(())
    }

    fn wants_lens(&self) -> bool {
        self.lens
    }

    fn lens(&mut self, logits: Tensor) {
        self.lens_logits = Some(logits);
    }
}

/// What the probe gathers from one captured layer while the block runs, stage by stage.
#[derive(Debug, Clone)]
struct LayerLook {
    layer: usize,
    /// Sequence 0's rows in this call and the position of the first.
    first: Span,
    /// How many of those rows, the newest, the capture keeps (0: the layer is not captured).
    kept: usize,
    norm_in: Vec<f32>,
    norm_attn: Vec<f32>,
    block: BlockProbe,
    seen: Option<Observed>,
}

impl LayerLook {
    /// The look at `layer`, keeping the newest `kept` of sequence 0's rows `first`.
    fn new(layer: usize, first: Span, kept: usize) -> Self {
        Self {
            layer,
            first,
            kept,
            norm_in: Vec::new(),
            norm_attn: Vec::new(),
            block: BlockProbe::default(),
            seen: None,
        }
    }

    /// The residual `x` entering the layer and RMSNorm's output `h`.
    fn entering(&mut self, x: &Tensor, h: &Tensor) -> Result<()> {
        self.norm_in = self.norms(x)?;
        self.block.rms_in = rms(&self.newest(x)?);
        self.block.rms_normed = rms(&self.newest(h)?);
        Ok(())
    }

    /// Sequence 0's attention; a query head's length before and after RoPE, and RoPE's
    /// relative property on its vectors.
    fn attention(&mut self, s: Observed, rope: &Rope) -> Result<()> {
        // Head 0, newest row: a rotation keeps its length.
        let t = self.first.len;
        let norm = |a: &Tensor| -> Result<f32> {
            let row = a.get(0)?.get(t - 1)?.to_vec1::<f32>()?;
            Ok(row.iter().map(|x| x * x).sum::<f32>().sqrt())
        };
        self.block.q_norm_pre_rope = norm(&s.q_pre)?;
        self.block.q_norm_post_rope = norm(&s.q)?;
        self.block.rope_angle0 = (self.first.pos0 + t - 1) as f32;
        let newest = |a: &Tensor| -> Result<Vec<f32>> { a.get(0)?.get(t - 1)?.to_vec1::<f32>() };
        let (q, k) = (newest(&s.q_pre)?, newest(&s.k_pre)?);
        self.block.rope_shift =
            RopeShift::measure(rope, &q, &k, self.first.pos0 + t - 1).unwrap_or_default();
        self.seen = Some(s);
        Ok(())
    }

    /// The residual after attention has been added.
    fn after_attention(&mut self, x: &Tensor) -> Result<()> {
        self.norm_attn = self.norms(x)?;
        Ok(())
    }

    /// The MLP's `silu(gate)`: how many of its values are nearly closed.
    fn gate(&mut self, gate: &Tensor) -> Result<()> {
        let row = self.newest(gate)?;
        let closed = row.iter().filter(|g| g.abs() < 0.1).count();
        self.block.gate_closed_pct = 100.0 * closed as f32 / row.len().max(1) as f32;
        Ok(())
    }

    /// The residual leaving the layer; returns the capture, if the layer was captured.
    fn leaving(self, x: &Tensor, heads: (usize, usize, usize)) -> Result<Option<LayerCapture>> {
        let Some(s) = self.seen.as_ref() else {
            return Ok(None);
        };
        let (t0, kept) = (self.first.len, self.kept);
        // Only the newest `kept` rows: the scores and weights already are.
        let skip = t0 - kept;
        let flat =
            |t: &Tensor| -> Result<Vec<f32>> { t.narrow(1, skip, kept)?.flatten_all()?.to_vec1() };
        let tail = |v: &[f32]| v[skip..].to_vec();
        let grid = |t: &Tensor| -> Result<Vec<f32>> { t.flatten_all()?.to_vec1() };
        let (n_head, n_kv_head, head_dim) = heads;
        Ok(Some(LayerCapture {
            layer: self.layer,
            n_head,
            n_kv_head,
            head_dim,
            t: kept,
            kv_len: self.first.pos0 + t0,
            pos0: self.first.pos0 + skip,
            q: flat(&s.q)?,
            k: flat(&s.k)?,
            v: flat(&s.v)?,
            scores: grid(&s.scores)?,
            weights: grid(&s.weights)?,
            head_out: flat(&s.out)?,
            resid_norm_in: tail(&self.norm_in),
            resid_norm_attn: tail(&self.norm_attn),
            resid_norm_out: tail(&self.norms(x)?),
            tile_schedule: s.schedule.clone(),
            block: self.block.clone(),
        }))
    }

    /// Row norms of sequence 0's rows of a `(rows, hidden)` tensor.
    fn norms(&self, x: &Tensor) -> Result<Vec<f32>> {
        x.narrow(0, self.first.off, self.first.len)?
            .sqr()?
            .sum(D::Minus1)?
            .sqrt()?
            .to_vec1()
    }

    /// Sequence 0's newest row of a `(rows, width)` tensor.
    fn newest(&self, x: &Tensor) -> Result<Vec<f32>> {
        x.get(self.first.off + self.first.len - 1)?
            .to_dtype(DType::F32)?
            .to_vec1()
    }
}

/// Root mean square of a row.
fn rms(row: &[f32]) -> f32 {
    (row.iter().map(|x| x * x).sum::<f32>() / row.len().max(1) as f32).sqrt()
}
