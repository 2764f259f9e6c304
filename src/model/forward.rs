//! The Llama forward pass, top to bottom: [`Model::forward_batch`] embeds the tokens, runs
//! every layer's `Model::block` — RMSNorm → Q, K, V → RoPE → attention → output
//! projection → residual → RMSNorm → SwiGLU MLP → residual — then the final RMSNorm and
//! the LM head. The pieces live next door: `attention.rs` (the math and its routes),
//! `rope.rs`, `linear.rs` (`y = x Wᵀ`), and `observe.rs`, the hooks through which an
//! observer (the probe, for the panes) sees inside each layer.

pub use super::attention::AttnKernel;
use super::attention::{self, Span};
pub use super::batched::AttnRoute;
use super::batched::{self, Step};
use super::config::LlamaConfig;
use super::error::{ModelError, Result};
use super::flash::IoCount;
use super::heads::{self, HeadLayout, LayoutError};
use super::linear::Linear;
use super::observe::{Observer, Pass, PassCounts, Timed, Unobserved};
use super::rope::Rope;
use super::tokenizer::TextTokenizer;
use super::traffic::Traffic;
use super::weights::{LoadOptions, Weights};
use crate::kv::{BatchKv, KvElem};
use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Tensor};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Which positions get logits. The LM head is the single biggest matrix, so during
/// generation only the last position pays for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    Last,
    All,
}

/// How the forward pass runs: the head layout, the attention kernel and what the KV
/// cache stores each number as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RunOptions {
    pub layout: HeadLayout,
    pub kernel: AttnKernel,
    /// Recordings made before element types were f32.
    #[serde(default)]
    pub kv_elem: KvElem,
    /// Attention per request, or the whole step at once through slot indexes.
    #[serde(default)]
    pub route: AttnRoute,
}

/// A loaded model: config, weights, rotary tables and tokenizer. Cloning is cheap
/// (tensors are shared), so one set of weights can run under several layouts.
#[derive(Clone)]
pub struct Model {
    pub cfg: LlamaConfig,
    pub weights: Arc<Weights>,
    pub tokenizer: Arc<TextTokenizer>,
    rope: Arc<Rope>,
    pub device: Device,
    run: RunOptions,
    /// Run attention on candle ops only, in candle's order (set for `--weights keep`).
    reference: bool,
    /// K and V projections per layer for `run.layout` (the trained ones for GQA).
    kv_proj: Arc<Vec<(Linear, Linear)>>,
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
                reason: super::Malformed(format!("a parser gave up on it ({why})")),
            })
        })
    }

    fn load_unguarded(path: &Path, opts: &LoadOptions) -> Result<Self> {
        let (cfg, weights, tokenizer) = if path.is_dir() {
            let cfg_path = path.join("config.json");
            let text = crate::files::read_text(&cfg_path, crate::files::Kind::Config)?;
            let cfg = LlamaConfig::from_hf_json(&text).map_err(|reason| ModelError::InFile {
                path: cfg_path.clone(),
                inner: Box::new(ModelError::Config(reason)),
            })?;
            let tok = TextTokenizer::from_file(&path.join("tokenizer.json"))?;
            tok.check_vocab(cfg.vocab)
                .map_err(|reason| ModelError::CorruptFile {
                    path: path.join("tokenizer.json"),
                    reason,
                })?;
            let w = super::hf_dir::load(path, &cfg, opts, LlamaConfig::hf_tied(&text))?;
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
        let rope = Arc::new(Rope::new(&cfg));
        let kv_proj = weights
            .layers
            .iter()
            .map(|l| (l.wk.clone(), l.wv.clone()))
            .collect();
        Ok(Self {
            cfg,
            weights: Arc::new(weights),
            tokenizer: Arc::new(tokenizer),
            rope,
            device: device.clone(),
            run: RunOptions::default(),
            reference: false,
            kv_proj: Arc::new(kv_proj),
        })
    }

    /// What loading noticed that changes no math (a repeated token, an ignored buffer).
    pub fn warnings(&self) -> Vec<String> {
        let t = self.tokenizer.warnings.iter();
        t.chain(&self.weights.warnings).cloned().collect()
    }

    /// How this model runs now.
    pub fn run_options(&self) -> RunOptions {
        self.run
    }

    /// The same weights under another head layout, kernel, KV element type and attention
    /// route (int8 KV on the host route of the CPU only; f16 on a device only on the
    /// batched route, whose slot tensors hold it; the batched route runs the naive kernel).
    pub fn with_run(&self, run: RunOptions) -> std::result::Result<Self, LayoutError> {
        run.layout.check(&self.cfg)?;
        // The device stores keep f32, or f16 in slot tensors; counting bytes of another
        // type there would be false.
        let batched = run.route == AttnRoute::Batched;
        let on_slots = batched && run.kv_elem == KvElem::F16;
        if run.kv_elem != KvElem::F32 && !self.device.is_cpu() && !on_slots {
            return Err(LayoutError::KvElemOnDevice(run.kv_elem));
        }
        if batched && (run.kv_elem == KvElem::Int8 || run.kernel != AttnKernel::Naive) {
            return Err(LayoutError::NotBatched(run.kv_elem, run.kernel.name()));
        }
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

    /// KV bytes one token takes in the cache (all layers, K and V) under the current
    /// layout and element type: the one formula every view and count uses.
    pub fn kv_bytes_per_token(&self) -> usize {
        self.cfg
            .kv_bytes_per_token_with(self.kv_heads(), self.run.kv_elem)
    }

    /// What one token costs in matrix work under the current layout: bytes of weights read
    /// (every projection, the MLP and the LM head, as stored) and multiply-accumulates.
    /// A decode step reads every byte once however many rows the batch has.
    pub fn matrix_cost(&self) -> (usize, usize) {
        let mut all: Vec<&Linear> = vec![&self.weights.lm_head];
        for (l, (wk, wv)) in self.weights.layers.iter().zip(self.kv_proj.iter()) {
            all.extend([&l.wq, wk, wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        }
        let bytes = all.iter().map(|l| l.bytes()).sum();
        let macs = all.iter().map(|l| l.dims().0 * l.dims().1).sum();
        (bytes, macs)
    }

    /// Weight bytes one pass reads under `layout`: the K and V projections have one block
    /// of rows per stored KV head (rows are quantized independently, so bytes scale with
    /// heads); every other matrix stays as it is.
    pub fn weight_bytes_under(&self, layout: HeadLayout) -> u64 {
        let (all, _) = self.matrix_cost();
        let kv: usize = self
            .kv_proj
            .iter()
            .map(|(k, v)| k.bytes() + v.bytes())
            .sum();
        let per_head = kv / self.kv_heads();
        (all - kv + per_head * layout.kv_heads(&self.cfg)) as u64
    }

    /// KV heads stored under the current layout.
    pub fn kv_heads(&self) -> usize {
        self.run.layout.kv_heads(&self.cfg)
    }

    /// A KV cache sized for `capacity` tokens of this model: slot tensors on the batched
    /// route (allocated now), else allocated a layer at a time on first use.
    pub fn new_cache(&self, capacity: usize) -> crate::kv::Contiguous {
        let capacity = capacity.min(self.cfg.context);
        if self.run.route == AttnRoute::Batched {
            let shape = (self.kv_heads(), self.cfg.head_dim);
            let slots = crate::kv::Contiguous::on_slots(
                self.cfg.n_layer,
                shape,
                capacity,
                self.run.kv_elem,
                &self.device,
            );
            // `with_run` refused every element type slot tensors cannot hold, so this
            // fails only when the memory is not there; the host store then says so on use.
            if let Ok(c) = slots {
                return c;
            }
        }
        crate::kv::Contiguous::new(
            self.cfg.n_layer,
            self.kv_heads(),
            self.cfg.head_dim,
            capacity,
            self.run.kv_elem,
            &self.device,
        )
    }

    /// Runs `tokens` (positions `kv.len()..`) through the model, appending their keys and
    /// values to `kv`, and returns logits `(rows, vocab)` for the positions `which` asks for.
    pub fn forward(&self, tokens: &[u32], kv: &mut dyn BatchKv, which: Logits) -> Result<Tensor> {
        let mut out = self.forward_batch(&[tokens], kv, which)?;
        Ok(out.pop().expect("one sequence in, one out"))
    }

    /// Runs several sequences in one pass, ORCA's selective batching: the linear layers
    /// (projections, MLP, LM head) run once on all tokens concatenated; attention runs per
    /// sequence against its own cache. Returns each sequence's logits.
    pub fn forward_batch(
        &self,
        seqs: &[&[u32]],
        kv: &mut dyn BatchKv,
        which: Logits,
    ) -> Result<Vec<Tensor>> {
        Ok(self.pass(seqs, kv, &mut Unobserved, which)?.logits)
    }

    /// [`Model::forward_batch`] with `obs` shown sequence 0's insides, returning also what
    /// the pass moved, computed and took.
    pub fn pass(
        &self,
        seqs: &[&[u32]],
        kv: &mut dyn BatchKv,
        obs: &mut dyn Observer,
        which: Logits,
    ) -> Result<Pass> {
        // The pass runs on one of rayon's own threads, so each of the ~200 parallel
        // matmuls per pass is split between workers directly instead of waking them from
        // a foreign thread and sleeping until they finish (measured: 9 → 7 ms at one row).
        if self.runs_on_our_kernels() {
            on_pool_kept_awake(|| self.pass_here(seqs, kv, obs, which))
        } else {
            // candle's matmuls run on candle's own worker threads, which a kept-awake
            // rayon worker would only compete with (measured: 20 → 7 tok/s on two cores).
            rayon::scope(|_| self.pass_here(seqs, kv, obs, which))
        }
    }

    /// Whether the passes run their matrices on our kernel, on the CPU, with rayon's workers
    /// (then a worker is kept awake through each pass); candle's matmuls run on threads of
    /// their own.
    pub fn runs_on_our_kernels(&self) -> bool {
        let ours = |l: &Linear| l.fast.is_some();
        // (The reference path's matrices are candle's alone, so it needs no check of its own.)
        self.device.is_cpu()
            && self
                .weights
                .layers
                .iter()
                .all(|w| ours(&w.wq) && ours(&w.w_gate) && ours(&w.w_down))
    }

    fn pass_here(
        &self,
        seqs: &[&[u32]],
        kv: &mut dyn BatchKv,
        obs: &mut dyn Observer,
        which: Logits,
    ) -> Result<Pass> {
        let spans = self.spans(seqs, kv)?;
        let step = self.batched_step(&spans, kv)?;
        let (mut counts, mut watch) = (PassCounts::default(), Timed::new(obs));
        watch.start();
        let mut clock = Lap::start();
        // Embedding: a row lookup per token.
        let ids = Tensor::new(seqs.concat().as_slice(), &self.device)?;
        let mut x = self.weights.embed.index_select(&ids, 0)?;
        counts.timing.embed_ms = clock.lap();
        let mut lens_rows = Vec::new();
        for layer in 0..self.cfg.n_layer {
            watch.layer(layer, spans[0]);
            let rows = (spans.as_slice(), step.as_ref());
            let (y, io, traffic) = self.block(layer, &x, rows, kv, &mut watch)?;
            if watch.wants_lens() {
                let newest = spans[0].off + spans[0].len - 1;
                lens_rows.push(watch.see(|_| y.narrow(0, newest, 1))?);
            }
            counts.attn_io.add(io);
            counts.traffic.add(traffic);
            counts.timing.layers_ms.push(clock.lap());
            x = y;
        }
        kv.advance();
        counts.route = step
            .as_ref()
            .map_or(AttnRoute::Host, |_| AttnRoute::Batched);
        counts.device_ops = step.as_ref().map_or(0, Step::ops);
        let logits = self.lm_head(&x, &spans, which)?;
        counts.traffic.add(self.lm_head_traffic(&logits));
        if !lens_rows.is_empty() {
            let lens = watch.see(|_| self.logit_lens(&lens_rows))?;
            watch.see(|o| o.lens(lens));
        }
        // The lens is timed in the LM head's stage: the stages add up to the whole pass.
        counts.timing.lm_head_ms = clock.lap();
        counts.timing.observe_ms = watch.ms;
        Ok(Pass { logits, counts })
    }

    /// What the LM head read and computed for the rows that got logits.
    fn lm_head_traffic(&self, logits: &[Tensor]) -> Traffic {
        let rows: usize = logits.iter().map(|l| l.dim(0).unwrap_or(0)).sum();
        let head = &self.weights.lm_head;
        let (out, inp) = head.dims();
        Traffic::matrix(head.bytes(), out, inp, rows)
    }

    /// The logit lens: each layer's residual read out as if it were the last layer's —
    /// final RMSNorm and LM head — all layers in one batched call. Row `l` holds the logits
    /// the model would give if it stopped after layer `l` (the session turns each row into
    /// its top token and probabilities without a full softmax).
    pub fn logit_lens(&self, rows: &[Tensor]) -> Result<Tensor> {
        let x = Tensor::cat(rows, 0)?;
        let x = candle_nn::ops::rms_norm(&x, &self.weights.final_norm, self.cfg.rms_eps as f32)?;
        Ok(self.weights.lm_head.forward(&x)?.to_dtype(DType::F32)?)
    }

    /// One transformer layer on every row of the batch: the attention block, then the MLP
    /// block, each added to the residual stream. Returns the new residual, the bytes
    /// attention moved, and everything the layer read and computed.
    fn block(
        &self,
        layer: usize,
        x: &Tensor,
        rows: (&[Span], Option<&Step>),
        kv: &mut dyn BatchKv,
        watch: &mut Timed,
    ) -> Result<(Tensor, IoCount, Traffic)> {
        let (x, att) = self.attention_block(layer, x, rows, kv, watch)?;
        let x = self.mlp_block(layer, &x, watch)?;
        let heads = (self.cfg.n_head, self.kv_heads(), self.cfg.head_dim);
        watch.see(|o| o.leaving(&x, heads))?;
        let traffic = self.matrix_traffic(layer, x.dim(0)?, att.traffic);
        Ok((x, att.io, traffic))
    }

    /// RMSNorm, then Q, K and V for every row at once; RoPE, the cache and attention per
    /// sequence; the output projection added to the residual.
    fn attention_block(
        &self,
        layer: usize,
        x: &Tensor,
        (spans, step): (&[Span], Option<&Step>),
        kv: &mut dyn BatchKv,
        watch: &mut Timed,
    ) -> Result<(Tensor, attention::Attended)> {
        let w = &self.weights.layers[layer];
        let h = candle_nn::ops::rms_norm(x, &w.attn_norm, self.cfg.rms_eps as f32)?;
        watch.see(|o| o.entering(x, &h))?;
        // K and V come from the current layout's projections (GQA: the trained ones). The
        // three share their input, so they run as one pass.
        let (wk, wv) = &self.kv_proj[layer];
        let [q, k, v] = Linear::forward_many([&w.wq, wk, wv], &h)?;
        let setup = self.attention_setup(layer);
        // The batched route when this step has its indexes, else each request on its own.
        let att = match step {
            Some(step) => batched::attend(&setup, step, (&q, &k, &v), spans)?,
            None => attention::attend(&setup, &q, &k, &v, spans, kv)?,
        };
        // What the probe sees is recomputed after the math, from sequence 0's projections
        // and its cache, whichever route ran; it is timed as looking.
        let rows = watch.rows();
        if rows > 0 {
            let schedule = att.schedule.clone();
            watch.see(|o| {
                let seen = attention::observe(&setup, (&q, &k, &v), spans[0], kv, rows, schedule)?;
                o.attention(seen, &self.rope)
            })?;
        }
        let x = (x + w.wo.forward(&att.out)?)?;
        watch.see(|o| o.after_attention(&x))?;
        Ok((x, att))
    }

    /// RMSNorm, then SwiGLU: down(silu(gate(h)) · up(h)), added to the residual.
    fn mlp_block(&self, layer: usize, x: &Tensor, watch: &mut Timed) -> Result<Tensor> {
        let w = &self.weights.layers[layer];
        let h = candle_nn::ops::rms_norm(x, &w.ffn_norm, self.cfg.rms_eps as f32)?;
        let [gate, up] = Linear::forward_many([&w.w_gate, &w.w_up], &h)?;
        let gu = self.swiglu(gate, &up, watch)?;
        Ok((x + w.w_down.forward(&gu)?)?)
    }

    /// Attention's traffic plus every matrix of the layer, each read once for all the
    /// batch's `rows`.
    fn matrix_traffic(&self, layer: usize, rows: usize, attention: Traffic) -> Traffic {
        let w = &self.weights.layers[layer];
        let (wk, wv) = &self.kv_proj[layer];
        let mut traffic = attention;
        for l in [&w.wq, wk, wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down] {
            let (out, inp) = l.dims();
            traffic.add(Traffic::matrix(l.bytes(), out, inp, rows));
        }
        traffic
    }

    /// SwiGLU's gate, `silu(gate) · up`: one vectorized pass over host memory on the CPU,
    /// candle's ops on the reference path and on devices. The observer, when it captures
    /// this layer, gets `silu(gate)` on its own.
    fn swiglu(&self, gate: Tensor, up: &Tensor, watch: &mut Timed) -> Result<Tensor> {
        if watch.rows() > 0 {
            watch.see(|o| o.gate(&candle_nn::ops::silu(&gate)?))?;
        }
        if self.reference || !gate.device().is_cpu() {
            return Ok((candle_nn::ops::silu(&gate)? * up)?);
        }
        let (m, n) = gate.dims2()?;
        let mut g = gate.flatten_all()?.to_vec1::<f32>()?;
        let u = up.flatten_all()?.to_vec1::<f32>()?;
        crate::kernels::elementwise::swiglu_in_place(&mut g, &u);
        Ok(Tensor::from_vec(g, (m, n), gate.device())?)
    }

    /// How attention runs in `layer` under this model's layout and kernel.
    fn attention_setup(&self, layer: usize) -> attention::Setup<'_> {
        attention::Setup {
            layer,
            n_head: self.cfg.n_head,
            n_kv_head: self.kv_heads(),
            head_dim: self.cfg.head_dim,
            kernel: self.run.kernel,
            kv_elem: self.run.kv_elem,
            reference: self.reference,
            rope: &self.rope,
        }
    }

    /// The batched route's indexes for this step, where the route is batched and the
    /// store keeps slot tensors (else the pass runs the host route).
    fn batched_step(&self, spans: &[Span], kv: &mut dyn BatchKv) -> Result<Option<Step>> {
        if self.run.route != AttnRoute::Batched {
            return Ok(None);
        }
        let lens: Vec<usize> = spans.iter().map(|p| p.pos0 + p.len).collect();
        let Some(slots) = kv.slot_step(&lens) else {
            return Ok(None);
        };
        Ok(Some(Step::new(spans, slots, &self.rope, &self.device)?))
    }

    /// Where each sequence's rows sit in the batch; refuses empty sequences and any that
    /// would outgrow the context.
    fn spans(&self, seqs: &[&[u32]], kv: &dyn BatchKv) -> Result<Vec<Span>> {
        let mut spans = Vec::with_capacity(seqs.len());
        let mut off = 0;
        for (s, toks) in seqs.iter().enumerate() {
            if toks.is_empty() {
                return Err(ModelError::EmptyPrompt);
            }
            let pos0 = kv.len(s);
            if pos0 + toks.len() > self.cfg.context {
                return Err(ModelError::PromptTooLong {
                    tokens: pos0 + toks.len(),
                    max_new: 0,
                    context: self.cfg.context,
                });
            }
            spans.push(Span {
                off,
                len: toks.len(),
                pos0,
            });
            off += toks.len();
        }
        if spans.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        Ok(spans)
    }

    /// The final RMSNorm and the LM head, once, on the rows that need logits; returns each
    /// sequence's logits.
    fn lm_head(&self, x: &Tensor, spans: &[Span], which: Logits) -> Result<Vec<Tensor>> {
        let rows: Vec<Tensor> = spans
            .iter()
            .map(|p| match which {
                Logits::Last => x.narrow(0, p.off + p.len - 1, 1),
                Logits::All => x.narrow(0, p.off, p.len),
            })
            .collect::<candle_core::Result<_>>()?;
        let x = Tensor::cat(&rows, 0)?;
        let x = candle_nn::ops::rms_norm(&x, &self.weights.final_norm, self.cfg.rms_eps as f32)?;
        let logits = self.weights.lm_head.forward(&x)?.to_dtype(DType::F32)?;
        // One sum sees every NaN or infinity (finite logits cannot overflow it), at the
        // cost of one reduction and one number copied back from a device.
        if !logits.sum_all()?.to_scalar::<f32>()?.is_finite() {
            let device = match logits.device() {
                candle_core::Device::Cpu => "CPU",
                candle_core::Device::Cuda(_) => "CUDA GPU",
                candle_core::Device::Metal(_) => "Metal GPU",
            };
            return Err(ModelError::NotFinite {
                device: device.into(),
            });
        }
        let mut out = Vec::with_capacity(spans.len());
        let mut r = 0;
        for p in spans {
            let n = if which == Logits::Last { 1 } else { p.len };
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
}

/// Runs `f` on one of rayon's threads while another worker keeps taking its parallel
/// work ([`keep_awake`]); returns what `f` returns, and a panic in `f` unwinds out of it
/// as from a plain call.
fn on_pool_kept_awake<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let done = &AtomicBool::new(false);
    rayon::scope(|scope| {
        let driver = rayon::current_thread_index();
        scope.spawn(move |_| keep_awake(driver, done));
        // Set on the way out, a panic included: the scope waits for `keep_awake`.
        let _stop = SetOnDrop(done);
        f()
    })
}

/// Keeps another worker taking the pass's parallel work until `done`. Between two
/// parallel sections (a norm, a residual add, the attention bookkeeping) an idle rayon
/// worker soon goes to sleep, and waking it costs more than a one-row matmul saves; a pass
/// has about 200 such sections. Running on the driving thread itself (which happens if
/// no other worker took this job first), it returns at once: that thread has the pass to
/// finish. With nothing to take it offers its core to the OS (a yield, not a sleep), so
/// the UI thread or another program's threads still get it.
fn keep_awake(driver: Option<usize>, done: &AtomicBool) {
    if rayon::current_thread_index() == driver {
        return;
    }
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            std::thread::yield_now();
        }
    }
}

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A stopwatch that reads the time since its last reading.
struct Lap(std::time::Instant);

impl Lap {
    fn start() -> Self {
        Self(std::time::Instant::now())
    }

    /// Milliseconds since the last lap (or the start).
    fn lap(&mut self) -> f64 {
        let now = std::time::Instant::now();
        let ms = (now - self.0).as_secs_f64() * 1e3;
        self.0 = now;
        ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Runs `f` on its own thread; None if it has not finished within 20 s.
    fn within_time<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(20)).ok()
    }

    #[test]
    fn kept_awake_returns_what_the_work_returns() {
        let got = within_time(|| {
            on_pool_kept_awake(|| (0..10_000u64).into_par_iter().map(|i| i * i).sum::<u64>())
        });
        assert_eq!(got, Some((0..10_000u64).map(|i| i * i).sum()));
    }

    #[test]
    fn kept_awake_lets_a_panic_out_instead_of_hanging() {
        let got = within_time(|| {
            std::panic::catch_unwind(|| on_pool_kept_awake(|| -> u32 { panic!("inside the pass") }))
                .is_err()
        });
        assert_eq!(got, Some(true), "the panic did not come out within 20 s");
    }

    #[test]
    fn kept_awake_nests() {
        // A pass inside a pass (as when tests run passes from rayon tasks) still ends.
        let got = within_time(|| {
            (0..8u32)
                .into_par_iter()
                .map(|i| on_pool_kept_awake(|| (0..1000u32).into_par_iter().map(|j| j ^ i).max()))
                .filter_map(|m| m)
                .count()
        });
        assert_eq!(got, Some(8));
    }
}
