//! One request decoded step by step: the first step is the prefill of the whole prompt,
//! every later step feeds back the token just sampled.

use super::error::Result;
use super::flash::IoCount;
use super::forward::{AttnKernel, AttnRoute};
use super::forward::{Logits, Model};
use super::heads::HeadLayout;
use super::probe::{LayerCapture, LayerSelect, Probe, Timing};
use super::sampler::{distribution, top_k, Sampler, SamplerConfig, TopToken};
use crate::kv::Contiguous;
use candle_core::Tensor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Prefill processes the prompt; decode one new token per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Prefill,
    Decode,
}

/// What one step did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepInfo {
    pub step: usize,
    pub phase: Phase,
    /// Tokens fed this step.
    pub input_len: usize,
    /// The token sampled at the end of the step.
    pub token_id: u32,
    pub token: String,
    /// Tokens in the KV cache after the step.
    pub kv_len: usize,
    pub top_k: Vec<TopToken>,
    pub is_eos: bool,
    pub wall_ms: f64,
    /// Head layout this step ran under, and the KV head each query head read.
    pub layout: HeadLayout,
    pub query_to_kv: Vec<usize>,
    /// KV-cache bytes per token for every layout of this model (as stored, f32).
    pub kv_bytes_per_token: BTreeMap<HeadLayout, usize>,
    /// Weight bytes a pass reads under every layout (the K and V projections differ);
    /// empty in recordings made before it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weight_bytes_by_layout: BTreeMap<HeadLayout, u64>,
    pub kernel: AttnKernel,
    /// The step ran without a KV cache: it recomputed the whole sequence.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_cache: bool,
    /// How the step's token was picked (recordings made before it read as greedy).
    #[serde(default)]
    pub sampler: SamplerConfig,
    /// The attention route that ran (recordings made before it read as host).
    #[serde(default, skip_serializing_if = "AttnRoute::is_host")]
    pub route: AttnRoute,
    /// Operations the batched route's attention launched this step (0 on the host route).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub device_ops: usize,
    /// Attention bytes moved to and from main memory this step, all layers and heads.
    pub attn_io: IoCount,
    /// Where the step's time went; `sample_ms` is the sampler's share.
    pub timing: Timing,
    /// What the step moved through memory and computed (recordings made before it read
    /// as zero).
    #[serde(default)]
    pub traffic: crate::model::traffic::Traffic,
    pub sample_ms: f64,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub captures: Vec<LayerCapture>,
    /// The logit lens of the newest position, one row per layer, when it was asked for.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub logit_lens: Vec<LensRow>,
}

/// What the model would predict if it stopped after one layer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LensRow {
    pub layer: usize,
    /// The top token at this layer and its probability.
    pub id: u32,
    pub token: String,
    pub prob: f32,
    /// The probability this layer gives the token the step finally sampled.
    pub chosen_prob: f32,
}

/// The lens rows of a `(layers, vocab)` logits tensor, against the sampled token. A row
/// needs only its top logit and the softmax's denominator, not every probability: the top
/// token's probability is `1 / Σ exp(x − max)`, the chosen one's `exp(x_c − max)` times
/// that. Rows run in parallel.
fn lens_rows(
    logits: &candle_core::Tensor,
    chosen: u32,
    tok: &super::tokenizer::TextTokenizer,
) -> Result<Vec<LensRow>> {
    use rayon::prelude::*;
    let logits: Vec<Vec<f32>> = logits.to_vec2()?;
    let stats: Vec<(usize, f32, f32)> = logits
        .par_iter()
        .map(|x| {
            let (id, max) =
                x.iter().enumerate().fold(
                    (0, f32::NEG_INFINITY),
                    |b, (i, &v)| if v > b.1 { (i, v) } else { b },
                );
            let sum: f32 = x.iter().map(|&v| (v - max).exp()).sum();
            let chosen = x
                .get(chosen as usize)
                .map_or(0.0, |&v| (v - max).exp() / sum);
            (id, 1.0 / sum, chosen)
        })
        .collect();
    Ok(stats
        .into_iter()
        .enumerate()
        .map(|(layer, (id, prob, chosen_prob))| LensRow {
            layer,
            id: id as u32,
            token: tok.piece(id as u32),
            prob,
            chosen_prob,
        })
        .collect())
}

/// [`lens_rows`] computed where the logits are: each layer's top id, its probability and
/// the chosen token's, three numbers a layer copied back instead of a vocabulary.
fn lens_rows_on_device(
    logits: &candle_core::Tensor,
    chosen: u32,
    tok: &super::tokenizer::TextTokenizer,
) -> Result<Vec<LensRow>> {
    use candle_core::DType;
    let logits = logits.to_dtype(DType::F32)?;
    let max = logits.max_keepdim(1)?;
    let sum = logits.broadcast_sub(&max)?.exp()?.sum_keepdim(1)?;
    let top_prob = sum.recip()?;
    let at = logits.narrow(1, chosen as usize, 1)?;
    let chosen_prob = (at - &max)?.exp()?.div(&sum)?;
    let id = logits.argmax_keepdim(1)?.to_dtype(DType::F32)?;
    let rows: Vec<Vec<f32>> = Tensor::cat(&[id, top_prob, chosen_prob], 1)?.to_vec2()?;
    Ok(rows
        .into_iter()
        .enumerate()
        .map(|(layer, r)| LensRow {
            layer,
            id: r[0] as u32,
            token: tok.piece(r[0] as u32),
            prob: r[1],
            chosen_prob: r[2],
        })
        .collect())
}

/// A request being generated.
pub struct Session {
    model: Model,
    pub kv: Contiguous,
    sampler: Sampler,
    pending: Vec<u32>,
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    pub step: usize,
    pub probe: Probe,
    pub top_k: usize,
    /// The counterfactual without a KV cache: every decode step recomputes the keys and
    /// values of the whole sequence instead of reading them back, so its time, bytes and
    /// FLOPs grow with the position (the tokens come out the same).
    pub recompute: bool,
}

impl Session {
    /// Starts a session; the cache reserves the prompt plus `max_new` tokens.
    pub fn new(model: &Model, prompt: Vec<u32>, max_new: usize, sampler: SamplerConfig) -> Self {
        Self {
            model: model.clone(),
            kv: model.new_cache(prompt.len() + max_new),
            sampler: Sampler::new(sampler),
            prompt_len: prompt.len(),
            tokens: prompt.clone(),
            pending: prompt,
            step: 0,
            probe: Probe::new(LayerSelect::None),
            top_k: 5,
            recompute: false,
        }
    }

    /// The next iteration's shape: query rows it will run, and keys they will see.
    pub fn next_rows(&self) -> (usize, usize) {
        if self.recompute && self.step > 0 {
            return (self.tokens.len(), self.tokens.len());
        }
        let t = self.pending.len();
        (t, self.kv.len() + t)
    }

    /// Runs one iteration: prefill on the first call, one decode step afterwards.
    pub fn step(&mut self) -> Result<StepInfo> {
        let t0 = std::time::Instant::now();
        let phase = if self.step == 0 {
            Phase::Prefill
        } else {
            Phase::Decode
        };
        let mut input = std::mem::take(&mut self.pending);
        let no_cache = self.recompute && self.step > 0;
        if no_cache {
            // No cache to read: forget it and run the whole sequence again for one token.
            self.kv = self.model.new_cache(self.kv.capacity());
            input = self.tokens.clone();
        }
        // The probe always goes along: with no layer selected it copies nothing.
        let mut pass = (self.model).pass(&[&input], &mut self.kv, &mut self.probe, Logits::Last)?;
        let run = self.model.run_options();
        let ts = std::time::Instant::now();
        let (id, tk) = self.pick(&pass.logits[0])?;
        let sample_ms = ts.elapsed().as_secs_f64() * 1e3;
        let logit_lens = self.lens_rows(id, &mut pass.counts.timing)?;
        self.tokens.push(id);
        self.pending = vec![id];
        let info = StepInfo {
            step: self.step,
            phase,
            input_len: input.len(),
            token_id: id,
            token: self.model.tokenizer.piece(id),
            kv_len: self.kv.len(),
            top_k: tk,
            is_eos: Some(id) == self.model.tokenizer.eos,
            wall_ms: t0.elapsed().as_secs_f64() * 1e3,
            layout: run.layout,
            query_to_kv: run.layout.query_to_kv(&self.model.cfg),
            kv_bytes_per_token: per_layout(|l| l.kv_bytes_per_token(&self.model.cfg, run.kv_elem)),
            weight_bytes_by_layout: per_layout(|l| self.model.weight_bytes_under(l)),
            kernel: run.kernel,
            no_cache,
            sampler: self.sampler.config(),
            route: pass.counts.route,
            device_ops: pass.counts.device_ops,
            attn_io: pass.counts.attn_io,
            timing: pass.counts.timing,
            traffic: pass.counts.traffic,
            sample_ms,
            captures: std::mem::take(&mut self.probe.captures),
            logit_lens,
        };
        self.step += 1;
        Ok(info)
    }

    /// The next token and the `top_k` most likely, from the pass's `logits`: on the host
    /// route from the vocabulary's logits copied back; on the batched route by the device,
    /// which sends back only the pick and the top-k.
    fn pick(&mut self, logits: &candle_core::Tensor) -> Result<(u32, Vec<TopToken>)> {
        if self.model.run_options().route == AttnRoute::Batched {
            let r = self.sampler.uniform();
            let cfg = self.sampler.config();
            let k = self.top_k.min(super::sample_on_device::MAX_TOP_K);
            let last = logits.narrow(0, logits.dim(0)? - 1, 1)?;
            let picked = super::sample_on_device::pick(&last, &cfg, k, r)?;
            let top = (picked.top.into_iter())
                .map(|(id, logit, prob, drawn)| self.top_token(id, logit, prob, drawn))
                .collect();
            return Ok((picked.id, top));
        }
        let row = Model::last_logits(logits)?;
        let drawn = distribution(&self.sampler.config(), &row);
        let id = self.sampler.draw(&drawn);
        Ok((id, self.top_tokens(&row, &drawn)))
    }

    /// The logit lens of the last pass, as rows with `id` the token taken (added to the
    /// pass's `timing` as looking).
    fn lens_rows(&mut self, id: u32, timing: &mut Timing) -> Result<Vec<LensRow>> {
        let t0 = std::time::Instant::now();
        let on_device = self.model.run_options().route == AttnRoute::Batched;
        let rows = match self.probe.lens_logits.take() {
            Some(p) if on_device => lens_rows_on_device(&p, id, &self.model.tokenizer)?,
            Some(p) => lens_rows(&p, id, &self.model.tokenizer)?,
            None => Vec::new(),
        };
        timing.observe_ms += super::observe::ms_since(t0);
        Ok(rows)
    }

    /// The `top_k` most likely next tokens, with the share each got in the distribution
    /// the sampler drew from.
    fn top_tokens(&self, row: &[f32], drawn: &[f32]) -> Vec<TopToken> {
        top_k(row, self.top_k)
            .into_iter()
            .map(|(id, logit, prob)| self.top_token(id, logit, prob, drawn[id as usize]))
            .collect()
    }

    fn top_token(&self, id: u32, logit: f32, prob: f32, drawn: f32) -> TopToken {
        TopToken {
            id,
            token: self.model.tokenizer.piece(id),
            logit,
            prob,
            drawn,
        }
    }

    /// Takes `id` as the token this session just produced, in place of its own pick, so
    /// it runs on another session's tokens (a second head layout beside the live one).
    pub fn follow(&mut self, id: u32) {
        if self.step > 0 {
            if let Some(last) = self.tokens.last_mut() {
                *last = id;
            }
            self.pending = vec![id];
        }
    }

    /// Draws the next tokens with `cfg` (temperature, top-p, seed) from now on.
    pub fn set_sampler(&mut self, cfg: SamplerConfig) {
        self.sampler = Sampler::new(cfg);
    }

    /// The model this session runs.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The generated ids so far (prompt excluded).
    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }
}

/// A figure for every head layout.
fn per_layout<T>(f: impl Fn(HeadLayout) -> T) -> std::collections::BTreeMap<HeadLayout, T> {
    HeadLayout::ALL.into_iter().map(|l| (l, f(l))).collect()
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
