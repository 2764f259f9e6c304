//! The Llama forward pass, top to bottom, in one file:
//! embedding → for each layer (RMSNorm → Q,K,V → RoPE → attention → output projection →
//! residual → RMSNorm → SwiGLU MLP → residual) → final RMSNorm → LM head.

use super::attention::{self, row_norms};
use super::config::LlamaConfig;
use super::error::{ModelError, Result};
use super::flash::{self, IoCount, Tiles};
use super::heads::{self, HeadLayout, LayoutError};
use super::linear::Linear;
use super::probe::{LayerCapture, Probe, Timing};
use super::tokenizer::TextTokenizer;
use super::weights::{LoadOptions, Weights};
use crate::kv::{BatchKv, KvStore};
use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Tensor, D};
use rayon::prelude::*;
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
    /// The same tables as plain rows (`context × head_dim/2`), for the decode fast path.
    rope_host: Arc<(Vec<f32>, Vec<f32>)>,
    pub device: Device,
    run: RunOptions,
    /// Run attention on candle ops only, in candle's order (set for `--weights keep`).
    reference: bool,
    /// K and V projections per layer for `run.layout` (the trained ones for GQA).
    kv_proj: Arc<Vec<(Linear, Linear)>>,
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
    /// Loads a GGUF file or an HF safetensors directory. The files are untrusted: what we
    /// parse ourselves is validated, and a panic inside a foreign parser (tokenizers,
    /// safetensors) is contained and reported as a load error naming the file.
    pub fn load(path: &Path, opts: &LoadOptions) -> Result<Self> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Self::load_unguarded(path, opts)
        }))
        .unwrap_or_else(|p| {
            let why = super::error::panic_message(p.as_ref(), "");
            Err(ModelError::CorruptFile {
                path: path.to_path_buf(),
                reason: format!("a parser gave up on it ({why})"),
            })
        })
    }

    fn load_unguarded(path: &Path, opts: &LoadOptions) -> Result<Self> {
        let (cfg, weights, tokenizer) = if path.is_dir() {
            let cfg_path = path.join("config.json");
            let text = std::fs::read_to_string(&cfg_path)
                .map_err(|_| ModelError::NotFound(cfg_path.clone()))?;
            let cfg = LlamaConfig::from_hf_json(&text).map_err(|reason| ModelError::InFile {
                path: cfg_path.clone(),
                inner: Box::new(ModelError::Config(reason)),
            })?;
            let tok = TextTokenizer::from_file(&path.join("tokenizer.json"))?;
            let w = Weights::from_safetensors(path, &cfg, opts)?;
            (cfg, w, tok)
        } else {
            let (ct, mut file) = super::gguf::open(path)?;
            let in_file = |e: ModelError| match e {
                ModelError::CorruptFile { .. } | ModelError::NotFound(_) => e,
                e => ModelError::InFile {
                    path: path.to_path_buf(),
                    inner: Box::new(e),
                },
            };
            let cfg = LlamaConfig::from_gguf(&ct).map_err(in_file)?;
            let tok = TextTokenizer::from_gguf(&ct, cfg.vocab).map_err(in_file)?;
            let w = Weights::from_gguf(path, &ct, &mut file, &cfg, opts)?;
            (cfg, w, tok)
        };
        let mut m = Self::from_parts(cfg, weights, tokenizer, &opts.device)?;
        m.reference = opts.requant == super::weights::Requant::Keep;
        Ok(m)
    }

    /// Assembles a model from already-loaded pieces.
    pub fn from_parts(
        cfg: LlamaConfig,
        weights: Weights,
        tokenizer: TextTokenizer,
        device: &Device,
    ) -> Result<Self> {
        let (cos, sin) = rope_tables(&cfg, device)?;
        let rope_host = Arc::new((
            cos.flatten_all()?.to_vec1::<f32>()?,
            sin.flatten_all()?.to_vec1::<f32>()?,
        ));
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
            rope_host,
            device: device.clone(),
            run: RunOptions::default(),
            reference: false,
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
                        self.linear(heads::derive_projection(&l.wk.q, &self.cfg, run.layout)?)?,
                        self.linear(heads::derive_projection(&l.wv.q, &self.cfg, run.layout)?)?,
                    ))
                })
                .collect::<candle_core::Result<Vec<_>>>()
                .map_err(|e| LayoutError::Build(run.layout, e.to_string()))?;
            m.kv_proj = Arc::new(proj);
        }
        m.run = run;
        Ok(m)
    }

    fn linear(&self, q: QMatMul) -> candle_core::Result<Linear> {
        if self.reference {
            Ok(Linear::candle_only(q))
        } else {
            Linear::new(q)
        }
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

    /// RoPE on one token's heads in place (`heads × head_dim` values at position `pos`),
    /// the same arithmetic as candle's `rope`/`rope_i` kernels.
    fn rope_row(&self, x: &mut [f32], pos: usize) {
        let d = self.cfg.head_dim;
        let half = d / 2;
        let (cos, sin) = &*self.rope_host;
        let (cos, sin) = (&cos[pos * half..][..half], &sin[pos * half..][..half]);
        for head in x.chunks_exact_mut(d) {
            for i in 0..half {
                let (a, b) = if self.cfg.rope_interleaved {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + half)
                };
                let (x1, x2) = (head[a], head[b]);
                head[a] = x1 * cos[i] - x2 * sin[i];
                head[b] = x1 * sin[i] + x2 * cos[i];
            }
        }
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
        probe: Option<&mut Probe>,
        which: Logits,
    ) -> Result<Tensor> {
        let mut one = crate::kv::One(kv);
        let mut out = self.forward_batch(&[tokens], &mut one, probe, which)?;
        Ok(out.pop().expect("one sequence in, one out"))
    }

    /// Runs several sequences in one pass, ORCA's selective batching: the linear layers
    /// (projections, MLP, LM head) run once on all tokens concatenated; attention runs per
    /// sequence against its own cache. Returns each sequence's logits. The probe, when
    /// given, captures sequence 0.
    pub fn forward_batch(
        &self,
        seqs: &[&[u32]],
        kv: &mut dyn BatchKv,
        probe: Option<&mut Probe>,
        which: Logits,
    ) -> Result<Vec<Tensor>> {
        // The pass runs on one of rayon's own threads, so each of the ~200 parallel
        // matmuls per pass is split between workers directly instead of waking them from
        // a foreign thread and sleeping until they finish (measured: 9 → 7 ms at one row).
        rayon::scope(|_| self.forward_batch_here(seqs, kv, probe, which))
    }

    fn forward_batch_here(
        &self,
        seqs: &[&[u32]],
        kv: &mut dyn BatchKv,
        mut probe: Option<&mut Probe>,
        which: Logits,
    ) -> Result<Vec<Tensor>> {
        let cfg = &self.cfg;
        let mut offsets = Vec::with_capacity(seqs.len());
        let mut total = 0;
        for (s, toks) in seqs.iter().enumerate() {
            if toks.is_empty() {
                return Err(ModelError::EmptyPrompt);
            }
            let pos0 = kv.len(s);
            if pos0 + toks.len() > cfg.context {
                return Err(ModelError::PromptTooLong {
                    tokens: pos0 + toks.len(),
                    max_new: 0,
                    context: cfg.context,
                });
            }
            offsets.push((total, toks.len(), pos0));
            total += toks.len();
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
        let all: Vec<u32> = seqs.iter().flat_map(|s| s.iter().copied()).collect();
        let ids = Tensor::new(all.as_slice(), &self.device)?;
        // Embedding: a row lookup per token.
        let mut x = self.weights.embed.index_select(&ids, 0)?;
        if let Some(p) = probe.as_deref_mut() {
            p.timing.embed_ms = lap();
        }
        for (li, lw) in self.weights.layers.iter().enumerate() {
            let capture = probe.as_ref().is_some_and(|p| p.select.wants(li));
            let (_, t0, pos00) = offsets[0];
            // The newest rows the probe keeps: a long prompt's capture stays bounded.
            let kept = probe
                .as_ref()
                .and_then(|p| p.row_limit)
                .unwrap_or(usize::MAX)
                .clamp(1, t0);
            let capture_rows = if capture { kept } else { 0 };
            let norm_in = if capture {
                row_norms(&x.narrow(0, 0, t0)?)?
            } else {
                Vec::new()
            };
            // Attention block: projections on every token at once.
            let h = candle_nn::ops::rms_norm(&x, &lw.attn_norm, cfg.rms_eps as f32)?;
            let mut block = crate::model::probe::BlockProbe::default();
            if capture {
                let rms = |a: &Tensor| -> Result<f32> {
                    let row = a.get(t0 - 1)?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
                    Ok((row.iter().map(|x| x * x).sum::<f32>() / row.len() as f32).sqrt())
                };
                block.rms_in = rms(&x)?;
                block.rms_normed = rms(&h)?;
            }
            let q_all = lw.wq.forward(&h)?;
            // K and V come from the current layout's projections (GQA: the trained ones).
            let (wk, wv) = &self.kv_proj[li];
            let k_all = wk.forward(&h)?;
            let v_all = wv.forward(&h)?;
            // Decode rows (one token, not captured) skip the tensor plumbing: RoPE and
            // attention run on plain slices, which keeps a request's fixed cost per step
            // small next to the batched matmuls.
            let fast = !self.reference
                && matches!(self.run.kernel, AttnKernel::Naive)
                && self.device.is_cpu()
                && offsets.iter().any(|&(_, t, _)| t == 1);
            let host = |a: &Tensor| -> Result<Vec<f32>> {
                if fast {
                    Ok(a.flatten_all()?.to_vec1::<f32>()?)
                } else {
                    Ok(Vec::new())
                }
            };
            let (q_host, k_host, v_host) = (host(&q_all)?, host(&k_all)?, host(&v_all)?);
            let (qw, kw) = (nh * hd, nkv * hd);
            let mut o_host = if fast {
                vec![0.0f32; total * qw]
            } else {
                Vec::new()
            };
            let mut outs = Vec::with_capacity(seqs.len());
            let mut decode = Vec::new();
            let mut in_place = Vec::new();
            let mut cap = None;
            for (s, &(off, t, pos0)) in offsets.iter().enumerate() {
                let want = capture && s == 0;
                if fast && t == 1 && !want {
                    let mut k = k_host[off * kw..][..kw].to_vec();
                    self.rope_row(&mut k, pos0);
                    let v = &v_host[off * kw..][..kw];
                    // A paged store on the CPU takes the row in place; attention then
                    // reads the pool through the block table below.
                    if kv.append_row(s, li, &k, v)? {
                        if let Some(p) = probe.as_deref_mut() {
                            p.attn_io.add(flash::naive_io(1, pos0 + 1, hd).times(nh));
                        }
                        in_place.push((off, pos0, s));
                        continue;
                    }
                    let k = Tensor::from_vec(k, (nkv, 1, hd), &self.device)?;
                    let v = Tensor::from_slice(v, (nkv, 1, hd), &self.device)?;
                    let (k_cache, v_cache) = kv.append(s, li, &k, &v)?;
                    if let Some(p) = probe.as_deref_mut() {
                        p.attn_io
                            .add(flash::naive_io(1, k_cache.dim(1)?, hd).times(nh));
                    }
                    decode.push((off, pos0, k_cache, v_cache));
                    continue;
                }
                let split = |a: &Tensor, heads: usize| -> Result<Tensor> {
                    Ok(a.narrow(0, off, t)?
                        .reshape((t, heads, hd))?
                        .transpose(0, 1)?
                        .contiguous()?)
                };
                let q_pre = split(&q_all, nh)?;
                let q = self.rope(&q_pre, pos0)?;
                if want {
                    // Head 0, newest row: its length before and after the rotation.
                    let norm = |a: &Tensor| -> Result<f32> {
                        let row = a.get(0)?.get(t - 1)?.to_vec1::<f32>()?;
                        Ok(row.iter().map(|x| x * x).sum::<f32>().sqrt())
                    };
                    block.q_norm_pre_rope = norm(&q_pre)?;
                    block.q_norm_post_rope = norm(&q)?;
                    block.rope_angle0 = (pos0 + t - 1) as f32;
                }
                let k = self.rope(&split(&k_all, nkv)?, pos0)?;
                let v = split(&v_all, nkv)?;
                let (k_cache, v_cache) = kv.append(s, li, &k, &v)?;
                let rows = if want { capture_rows } else { 0 };
                let att = match self.run.kernel {
                    AttnKernel::Naive if self.reference => {
                        attention::naive_tensors(&q, &k_cache, &v_cache, pos0, rows)?
                    }
                    AttnKernel::Naive => attention::naive(&q, &k_cache, &v_cache, pos0, rows)?,
                    AttnKernel::Tiled { sram_bytes } => {
                        let tiles = Tiles::from_sram(sram_bytes, hd)
                            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
                        attention::tiled(&q, &k_cache, &v_cache, pos0, tiles, rows)?
                    }
                };
                if let Some(p) = probe.as_deref_mut() {
                    p.attn_io.add(att.io);
                }
                let o = att.out.transpose(0, 1)?.reshape((t, nh * hd))?;
                if fast {
                    let o = o.flatten_all()?.to_vec1::<f32>()?;
                    o_host[off * qw..][..t * qw].copy_from_slice(&o);
                } else {
                    outs.push(o);
                }
                if want {
                    cap = Some((q, k, v, att));
                }
            }
            // Attention of the decode rows, one request per task (ORCA runs attention per
            // request; these are independent, so they spread over the cores).
            let rows: Vec<(usize, Vec<f32>)> = decode
                .par_iter()
                .map(|(off, pos0, k_cache, v_cache)| {
                    let mut q = q_host[off * qw..][..qw].to_vec();
                    self.rope_row(&mut q, *pos0);
                    attention::decode_slices(&q, nh, k_cache, v_cache).map(|o| (*off, o))
                })
                .collect::<candle_core::Result<_>>()?;
            for (off, o) in rows {
                o_host[off * qw..][..qw].copy_from_slice(&o);
            }
            // Decode rows whose K/V stay in the page pool: PagedAttention proper.
            let views: Vec<(usize, usize, crate::kv::KvRows)> = in_place
                .iter()
                .map(|&(off, pos0, s)| {
                    kv.rows(s, li)
                        .map(|r| (off, pos0, r))
                        .ok_or_else(|| candle_core::Error::Msg("paged rows vanished".into()))
                })
                .collect::<candle_core::Result<_>>()?;
            let rows: Vec<(usize, Vec<f32>)> = views
                .par_iter()
                .map(|&(off, pos0, r)| {
                    let mut q = q_host[off * qw..][..qw].to_vec();
                    self.rope_row(&mut q, pos0);
                    (off, attention::decode_paged(&q, nh, nkv, r.k, r.v, r.slots))
                })
                .collect();
            for (off, o) in rows {
                o_host[off * qw..][..qw].copy_from_slice(&o);
            }
            let o = if fast {
                Tensor::from_vec(o_host, (total, qw), &self.device)?
            } else {
                Tensor::cat(&outs, 0)?
            };
            x = (x + lw.wo.forward(&o)?)?;
            let norm_attn = if capture {
                row_norms(&x.narrow(0, 0, t0)?)?
            } else {
                Vec::new()
            };
            // MLP block: SwiGLU, again on every token at once.
            let h = candle_nn::ops::rms_norm(&x, &lw.ffn_norm, cfg.rms_eps as f32)?;
            let gate = candle_nn::ops::silu(&lw.w_gate.forward(&h)?)?;
            if capture {
                let row = gate.get(t0 - 1)?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
                let closed = row.iter().filter(|g| g.abs() < 0.1).count();
                block.gate_closed_pct = 100.0 * closed as f32 / row.len().max(1) as f32;
            }
            let up = lw.w_up.forward(&h)?;
            x = (x + lw.w_down.forward(&(gate * up)?)?)?;
            if let Some((q, k, v, att)) = cap {
                // Only the newest `kept` rows: scores and weights already are.
                let skip = t0 - kept;
                let flat = |t: &Tensor| -> Result<Vec<f32>> {
                    Ok(t.narrow(1, skip, kept)?.flatten_all()?.to_vec1()?)
                };
                let tail = |v: Vec<f32>| v[skip..].to_vec();
                let grid = |t: Option<&Tensor>| -> Result<Vec<f32>> {
                    Ok(t.expect("captured").flatten_all()?.to_vec1()?)
                };
                let c = LayerCapture {
                    layer: li,
                    n_head: nh,
                    n_kv_head: nkv,
                    head_dim: hd,
                    t: kept,
                    kv_len: pos00 + t0,
                    pos0: pos00 + skip,
                    q: flat(&q)?,
                    k: flat(&k)?,
                    v: flat(&v)?,
                    scores: grid(att.scores.as_ref())?,
                    weights: grid(att.weights.as_ref())?,
                    head_out: flat(&att.out)?,
                    resid_norm_in: tail(norm_in),
                    resid_norm_attn: tail(norm_attn),
                    resid_norm_out: tail(row_norms(&x.narrow(0, 0, t0)?)?),
                    tile_schedule: att.schedule.clone(),
                    block: block.clone(),
                };
                if let Some(p) = probe.as_deref_mut() {
                    p.captures.push(c);
                }
            }
            if let Some(p) = probe.as_deref_mut() {
                p.timing.layers_ms.push(lap());
            }
        }
        kv.advance();
        // The LM head, once, on the rows that need logits.
        let rows: Vec<Tensor> = offsets
            .iter()
            .map(|&(off, t, _)| match which {
                Logits::Last => x.narrow(0, off + t - 1, 1),
                Logits::All => x.narrow(0, off, t),
            })
            .collect::<candle_core::Result<_>>()?;
        let x = Tensor::cat(&rows, 0)?;
        let x = candle_nn::ops::rms_norm(&x, &self.weights.final_norm, cfg.rms_eps as f32)?;
        let logits = self.weights.lm_head.forward(&x)?.to_dtype(DType::F32)?;
        if let Some(p) = probe {
            p.timing.lm_head_ms = lap();
        }
        let mut out = Vec::with_capacity(seqs.len());
        let mut r = 0;
        for &(_, t, _) in &offsets {
            let n = if which == Logits::Last { 1 } else { t };
            out.push(logits.narrow(0, r, n)?);
            r += n;
        }
        Ok(out)
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
