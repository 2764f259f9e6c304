//! The Llama forward pass, top to bottom, in one file:
//! embedding → for each layer (RMSNorm → Q,K,V → RoPE → attention → output projection →
//! residual → RMSNorm → SwiGLU MLP → residual) → final RMSNorm → LM head.

use super::attention::{self, row_norms};
use super::config::LlamaConfig;
use super::error::{ModelError, Result};
use super::flash::{IoCount, Tiles};
use super::heads::{self, HeadLayout, LayoutError};
use super::probe::{LayerCapture, Probe, Timing};
use super::tokenizer::TextTokenizer;
use super::weights::{LoadOptions, Weights};
use crate::kv::KvStore;
use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Module, Tensor, D};
use std::path::Path;
use std::sync::Arc;

/// Which positions get logits. The LM head is the single biggest matrix, so during
/// generation only the last position pays for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    Last,
    All,
}

/// Which attention kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnKernel {
    /// Full score matrix in memory (candle tensors).
    #[default]
    Naive,
    /// FlashAttention-style tiles, with this much on-chip memory.
    Tiled { sram_bytes: usize },
}

/// How the forward pass runs: the head layout and the attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RunOptions {
    pub layout: HeadLayout,
    pub kernel: AttnKernel,
}

/// A loaded model: config, weights, rotary tables and tokenizer. Cloning is cheap
/// (tensors are shared), so one set of weights can run under several layouts.
#[derive(Clone)]
pub struct Model {
    pub cfg: LlamaConfig,
    pub weights: Arc<Weights>,
    pub tokenizer: Arc<TextTokenizer>,
    cos: Tensor,
    sin: Tensor,
    pub device: Device,
    run: RunOptions,
    /// K and V projections per layer for `run.layout` (the trained ones for GQA).
    kv_proj: Arc<Vec<(QMatMul, QMatMul)>>,
}

/// RoPE tables: angle `pos · base^(-2i/d)` for each position and rotary pair.
fn rope_tables(cfg: &LlamaConfig, device: &Device) -> Result<(Tensor, Tensor)> {
    let half = cfg.head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / cfg.rope_base.powf(2.0 * i as f32 / cfg.head_dim as f32))
        .collect();
    let inv = Tensor::from_vec(inv, (1, half), device)?;
    let pos = Tensor::arange(0u32, cfg.context as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((cfg.context, 1))?;
    let ang = pos.matmul(&inv)?;
    Ok((ang.cos()?, ang.sin()?))
}

impl Model {
    /// Loads a GGUF file or an HF safetensors directory.
    pub fn load(path: &Path, opts: &LoadOptions) -> Result<Self> {
        let (cfg, weights, tokenizer) = if path.is_dir() {
            let cfg_path = path.join("config.json");
            let text = std::fs::read_to_string(&cfg_path)
                .map_err(|_| ModelError::NotFound(cfg_path.clone()))?;
            let cfg =
                LlamaConfig::from_hf_json(&text).map_err(|reason| ModelError::CorruptFile {
                    path: cfg_path.clone(),
                    reason,
                })?;
            let tok = TextTokenizer::from_file(&path.join("tokenizer.json"))?;
            let w = Weights::from_safetensors(path, &cfg, opts)?;
            (cfg, w, tok)
        } else {
            let (ct, _) = super::gguf::open(path)?;
            let cfg = LlamaConfig::from_gguf(&ct)?;
            let tok = TextTokenizer::from_gguf(&ct)?;
            let (w, _) = Weights::from_gguf(path, &cfg, opts)?;
            (cfg, w, tok)
        };
        Self::from_parts(cfg, weights, tokenizer, &opts.device)
    }

    /// Assembles a model from already-loaded pieces.
    pub fn from_parts(
        cfg: LlamaConfig,
        weights: Weights,
        tokenizer: TextTokenizer,
        device: &Device,
    ) -> Result<Self> {
        let (cos, sin) = rope_tables(&cfg, device)?;
        let kv_proj = weights
            .layers
            .iter()
            .map(|l| (l.wk.clone(), l.wv.clone()))
            .collect();
        Ok(Self {
            cfg,
            weights: Arc::new(weights),
            tokenizer: Arc::new(tokenizer),
            cos,
            sin,
            device: device.clone(),
            run: RunOptions::default(),
            kv_proj: Arc::new(kv_proj),
        })
    }

    /// How this model runs now.
    pub fn run_options(&self) -> RunOptions {
        self.run
    }

    /// The same weights under another head layout and kernel.
    pub fn with_run(&self, run: RunOptions) -> std::result::Result<Self, LayoutError> {
        run.layout.check(&self.cfg)?;
        let mut m = self.clone();
        if run.layout != self.run.layout {
            let proj = self
                .weights
                .layers
                .iter()
                .map(|l| {
                    Ok((
                        heads::derive_projection(&l.wk, &self.cfg, run.layout)?,
                        heads::derive_projection(&l.wv, &self.cfg, run.layout)?,
                    ))
                })
                .collect::<candle_core::Result<Vec<_>>>()
                .map_err(|e| LayoutError::Build(run.layout, e.to_string()))?;
            m.kv_proj = Arc::new(proj);
        }
        m.run = run;
        Ok(m)
    }

    /// KV heads stored under the current layout.
    pub fn kv_heads(&self) -> usize {
        self.run.layout.kv_heads(&self.cfg)
    }

    /// A KV cache sized for `capacity` tokens of this model.
    pub fn new_cache(&self, capacity: usize) -> crate::kv::Contiguous {
        crate::kv::Contiguous::new(
            self.cfg.n_layer,
            self.kv_heads(),
            self.cfg.head_dim,
            capacity.min(self.cfg.context),
            &self.device,
        )
    }

    fn rope(&self, x: &Tensor, pos0: usize) -> Result<Tensor> {
        let t = x.dim(1)?;
        let cos = self.cos.narrow(0, pos0, t)?;
        let sin = self.sin.narrow(0, pos0, t)?;
        let x = x.unsqueeze(0)?.contiguous()?;
        let y = if self.cfg.rope_interleaved {
            candle_nn::rotary_emb::rope_i(&x, &cos, &sin)?
        } else {
            candle_nn::rotary_emb::rope(&x, &cos, &sin)?
        };
        Ok(y.squeeze(0)?)
    }

    /// Runs `tokens` (positions `kv.len()..`) through the model, appending their keys and
    /// values to `kv`, and returns logits `(rows, vocab)` for the positions `which` asks for.
    pub fn forward(
        &self,
        tokens: &[u32],
        kv: &mut dyn KvStore,
        mut probe: Option<&mut Probe>,
        which: Logits,
    ) -> Result<Tensor> {
        let cfg = &self.cfg;
        let t = tokens.len();
        if t == 0 {
            return Err(ModelError::EmptyPrompt);
        }
        let pos0 = kv.len();
        if pos0 + t > cfg.context {
            return Err(ModelError::PromptTooLong {
                tokens: pos0 + t,
                max_new: 0,
                context: cfg.context,
            });
        }
        if let Some(p) = probe.as_deref_mut() {
            p.captures.clear();
            p.attn_io = IoCount::default();
            p.timing = Timing::default();
        }
        let mut clock = std::time::Instant::now();
        let mut lap = || {
            let ms = clock.elapsed().as_secs_f64() * 1e3;
            clock = std::time::Instant::now();
            ms
        };
        let (nh, nkv, hd) = (cfg.n_head, self.kv_heads(), cfg.head_dim);
        let ids = Tensor::new(tokens, &self.device)?;
        // Embedding: a row lookup per token.
        let mut x = self.weights.embed.index_select(&ids, 0)?;
        if let Some(p) = probe.as_deref_mut() {
            p.timing.embed_ms = lap();
        }
        for (li, lw) in self.weights.layers.iter().enumerate() {
            let capture = probe.as_ref().is_some_and(|p| p.select.wants(li));
            let norm_in = if capture { row_norms(&x)? } else { Vec::new() };
            // Attention block.
            let h = candle_nn::ops::rms_norm(&x, &lw.attn_norm, cfg.rms_eps as f32)?;
            let q = lw.wq.forward(&h)?.reshape((t, nh, hd))?.transpose(0, 1)?;
            // K and V come from the current layout's projections (GQA: the trained ones).
            let (wk, wv) = &self.kv_proj[li];
            let k = wk.forward(&h)?.reshape((t, nkv, hd))?.transpose(0, 1)?;
            let v = wv
                .forward(&h)?
                .reshape((t, nkv, hd))?
                .transpose(0, 1)?
                .contiguous()?;
            let q = self.rope(&q, pos0)?;
            let k = self.rope(&k, pos0)?;
            let (k_all, v_all) = kv.append(li, &k, &v)?;
            let att = match self.run.kernel {
                AttnKernel::Naive => attention::naive(&q, &k_all, &v_all, pos0, capture)?,
                AttnKernel::Tiled { sram_bytes } => {
                    let tiles = Tiles::from_sram(sram_bytes, hd)
                        .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
                    attention::tiled(&q, &k_all, &v_all, pos0, tiles, capture)?
                }
            };
            if let Some(p) = probe.as_deref_mut() {
                p.attn_io.add(att.io);
            }
            let o = att.out.transpose(0, 1)?.reshape((t, nh * hd))?;
            x = (x + lw.wo.forward(&o)?)?;
            let norm_attn = if capture { row_norms(&x)? } else { Vec::new() };
            // MLP block: SwiGLU.
            let h = candle_nn::ops::rms_norm(&x, &lw.ffn_norm, cfg.rms_eps as f32)?;
            let gate = candle_nn::ops::silu(&lw.w_gate.forward(&h)?)?;
            let up = lw.w_up.forward(&h)?;
            x = (x + lw.w_down.forward(&(gate * up)?)?)?;
            if capture {
                let flat = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.flatten_all()?.to_vec1()?) };
                let cap = LayerCapture {
                    layer: li,
                    n_head: nh,
                    n_kv_head: nkv,
                    head_dim: hd,
                    t,
                    kv_len: pos0 + t,
                    pos0,
                    q: flat(&q)?,
                    k: flat(&k)?,
                    v: flat(&v)?,
                    scores: flat(att.scores.as_ref().expect("captured"))?,
                    weights: flat(att.weights.as_ref().expect("captured"))?,
                    head_out: flat(&att.out)?,
                    resid_norm_in: norm_in,
                    resid_norm_attn: norm_attn,
                    resid_norm_out: row_norms(&x)?,
                    tile_schedule: att.schedule.clone(),
                };
                if let Some(p) = probe.as_deref_mut() {
                    p.captures.push(cap);
                }
            }
            if let Some(p) = probe.as_deref_mut() {
                p.timing.layers_ms.push(lap());
            }
        }
        kv.advance(t);
        let x = match which {
            Logits::Last => x.narrow(0, t - 1, 1)?,
            Logits::All => x,
        };
        let x = candle_nn::ops::rms_norm(&x, &self.weights.final_norm, cfg.rms_eps as f32)?;
        let logits = self.weights.lm_head.forward(&x)?.to_dtype(DType::F32)?;
        if let Some(p) = probe {
            p.timing.lm_head_ms = lap();
        }
        Ok(logits)
    }

    /// Logits of the last row as a Vec.
    pub fn last_logits(logits: &Tensor) -> Result<Vec<f32>> {
        let n = logits.dim(0)?;
        Ok(logits.narrow(0, n - 1, 1)?.squeeze(0)?.to_vec1()?)
    }

    /// Softmax of a logits row, in f32.
    pub fn probs(logits: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::softmax(logits, D::Minus1)?)
    }
}
