//! `bench decode`: prefill and decode speed of our forward pass (capture off, one layer,
//! all layers; Q8_0 and the file's own quant types) against candle-transformers'
//! `quantized_llama` on the same file, measured interleaved in one run.

use super::median;
use crate::model::sampler::argmax;
use crate::model::{LayerSelect, LoadOptions, Logits, Model, Probe, Requant};
use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// A fixed prompt so every configuration does identical work.
pub const PROMPT: &str = "The key-value cache stores the keys and values of every earlier token so that each new \
token only computes its own projections. Explain, step by step, why decoding one token at a time is limited by \
memory bandwidth rather than arithmetic, and what batching changes.";

/// Speeds of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Speed {
    pub prefill_tok_per_s: f64,
    pub decode_tok_per_s: f64,
}

/// The report: configurations by name, plus context.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeReport {
    pub prompt_tokens: usize,
    pub decode_tokens: usize,
    pub rounds: usize,
    #[serde(flatten)]
    pub configs: BTreeMap<String, Speed>,
    /// Bytes of matrix weights one decode token reads (Q8_0 as our kernel stores them).
    pub weight_bytes_per_token: usize,
    /// This machine's memory read bandwidth (`bench machine`), GB/s.
    pub read_gb_per_s: f64,
    /// How long ago that bandwidth was measured, seconds (absent when unknown).
    pub machine_age_s: Option<u64>,
    /// `ours` decode: weight bytes per token × tokens per second ÷ read bandwidth. Absent
    /// on a GPU: `bench machine` measures the CPU's memory, not the GPU's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_read_bandwidth_fraction: Option<f64>,
}

impl DecodeReport {
    /// A table for people, with ratios against candle's quantized_llama and capture off.
    pub fn table(&self) -> String {
        let base = self.configs.get("candle_quantized_llama");
        let ours = self.configs.get("ours");
        let mut s = format!(
            "prompt {} tokens, decode {} tokens, median of {} rounds\n{:<26} {:>12} {:>12} {:>12} {:>12}\n",
            self.prompt_tokens, self.decode_tokens, self.rounds,
            "configuration", "prefill t/s", "decode t/s", "× candle", "× ours"
        );
        for (name, sp) in &self.configs {
            let r = |b: Option<&Speed>| {
                b.map(|b| format!("{:.2}", sp.decode_tok_per_s / b.decode_tok_per_s))
                    .unwrap_or_default()
            };
            s += &format!(
                "{:<26} {:>12.1} {:>12.1} {:>12} {:>12}\n",
                name,
                sp.prefill_tok_per_s,
                sp.decode_tok_per_s,
                r(base),
                r(ours)
            );
        }
        let ours = ours.map_or(0.0, |o| o.decode_tok_per_s);
        let (mb, gb) = (
            self.weight_bytes_per_token as f64 / 1e6,
            self.weight_bytes_per_token as f64 * ours / 1e9,
        );
        s += &match self.decode_read_bandwidth_fraction {
            Some(f) => format!(
                "a decode token reads {mb:.1} MB of weights: at {ours:.1} tok/s that is {gb:.1} GB/s, {:.0}% of this machine's {:.1} GB/s read bandwidth\n",
                100.0 * f,
                self.read_gb_per_s
            ),
            None => format!(
                "a decode token reads {mb:.1} MB of weights: at {ours:.1} tok/s that is {gb:.1} GB/s from the GPU's memory (`bench machine` measures the CPU's, so no fraction is given)\n"
            ),
        };
        s += &crate::machine::cached_note(self.machine_age_s);
        s
    }
}

/// Every configuration once, one after another, so a burst of noise from the machine
/// hits them alike: (name, (prefill s, decode s)).
fn one_round(
    q8: &Model,
    native: &Model,
    candle: &mut ModelWeights,
    prompt: &[u32],
    n: usize,
    dev: &Device,
) -> Result<Vec<(&'static str, (f64, f64))>> {
    let mid = q8.cfg.n_layer / 2;
    Ok(vec![
        ("ours", time_ours(q8, prompt, n, LayerSelect::None)?),
        (
            "ours_capture_one_layer",
            time_ours(q8, prompt, n, LayerSelect::One(mid))?,
        ),
        (
            "ours_capture_all",
            time_ours(q8, prompt, n, LayerSelect::All)?,
        ),
        (
            "ours_file_quant",
            time_ours(native, prompt, n, LayerSelect::None)?,
        ),
        (
            "candle_quantized_llama",
            time_candle(candle, prompt, n, dev)?,
        ),
    ])
}

/// Runs prefill then `n` greedy decode steps, returning (prefill s, decode s).
fn time_ours(m: &Model, prompt: &[u32], n: usize, select: LayerSelect) -> Result<(f64, f64)> {
    let mut kv = m.new_cache(prompt.len() + n + 1);
    let mut probe = Probe::new(select);
    let t0 = Instant::now();
    let pass = m.pass(&[prompt], &mut kv, &mut probe, Logits::Last)?;
    let mut tok = argmax(&Model::last_logits(&pass.logits[0])?);
    let prefill = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for _ in 0..n {
        let pass = m.pass(&[&[tok]], &mut kv, &mut probe, Logits::Last)?;
        tok = argmax(&Model::last_logits(&pass.logits[0])?);
    }
    debug_assert_eq!(kv.len(), prompt.len() + n);
    Ok((prefill, t1.elapsed().as_secs_f64()))
}

fn time_candle(m: &mut ModelWeights, prompt: &[u32], n: usize, dev: &Device) -> Result<(f64, f64)> {
    m.clear_kv_cache();
    let t0 = Instant::now();
    let x = Tensor::new(prompt, dev)?.unsqueeze(0)?;
    let logits = m.forward(&x, 0)?.squeeze(0)?.to_vec1::<f32>()?;
    let mut tok = argmax(&logits);
    let prefill = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for i in 0..n {
        let x = Tensor::new(&[tok], dev)?.unsqueeze(0)?;
        let logits = m
            .forward(&x, prompt.len() + i)?
            .squeeze(0)?
            .to_vec1::<f32>()?;
        tok = argmax(&logits);
    }
    Ok((prefill, t1.elapsed().as_secs_f64()))
}

/// candle-transformers' own Llama over the same file: the reference we race.
fn candle_model(path: &Path, dev: &Device) -> Result<ModelWeights> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let ct = candle_core::quantized::gguf_file::Content::read(&mut f)?;
    Ok(ModelWeights::from_gguf(ct, &mut f, dev)?)
}

/// Each configuration's median prefill and decode speeds over the rounds.
fn medians(samples: BTreeMap<String, (Vec<f64>, Vec<f64>)>) -> BTreeMap<String, Speed> {
    let speed = |(pf, dc): (Vec<f64>, Vec<f64>)| Speed {
        prefill_tok_per_s: median(pf),
        decode_tok_per_s: median(dc),
    };
    samples.into_iter().map(|(k, v)| (k, speed(v))).collect()
}

/// Loads every configuration and measures them round-robin.
pub fn run(
    path: &Path,
    dev: &Device,
    n: usize,
    rounds: usize,
    verbose: bool,
) -> Result<DecodeReport> {
    let load = |requant| {
        Model::load(
            path,
            &LoadOptions {
                requant,
                device: dev.clone(),
            },
        )
        .with_context(|| format!("loading {}", path.display()))
    };
    let q8 = load(Requant::Q8_0)?;
    let native = load(Requant::Keep)?;
    let mut candle = candle_model(path, dev)?;
    let prompt = q8.tokenizer.encode(PROMPT)?;
    anyhow::ensure!(
        prompt.len() + n <= q8.cfg.context,
        "--tokens {n} after the {}-token prompt is past the model's context of {}",
        prompt.len(),
        q8.cfg.context
    );
    let mut samples: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for round in 0..rounds {
        if verbose {
            eprintln!("round {}/{rounds}", round + 1);
        }
        let runs = one_round(&q8, &native, &mut candle, &prompt, n, dev)?;
        for (name, (pf, dc)) in runs {
            let e = samples.entry(name.to_string()).or_default();
            e.0.push(prompt.len() as f64 / pf);
            e.1.push(n as f64 / dc);
        }
    }
    let configs = medians(samples);
    let weight_bytes_per_token = q8.matrix_cost().0;
    let machine = crate::machine::get()?;
    let read_gb_per_s = machine.read_gb_per_s;
    let ours = configs.get("ours").map_or(0.0, |s| s.decode_tok_per_s);
    Ok(DecodeReport {
        prompt_tokens: prompt.len(),
        decode_tokens: n,
        rounds,
        configs,
        weight_bytes_per_token,
        read_gb_per_s,
        machine_age_s: machine.age_s(),
        decode_read_bandwidth_fraction: dev
            .is_cpu()
            .then(|| weight_bytes_per_token as f64 * ours / (read_gb_per_s * 1e9).max(1.0)),
    })
}
