//! `bench decode`: prefill and decode speed of our forward pass (capture off, one layer,
//! all layers; Q8_0 and the file's own quant types) against candle-transformers'
//! `quantized_llama` on the same file, measured interleaved in one run.

use super::median;
use super::{BenchError, Result};
use crate::model::sampler::argmax;
use crate::model::{LayerSelect, LoadOptions, Logits, Model, Probe, Requant};
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
    /// Per weight type (`f32`, `q8_0`, `q4`): the decode lever, bytes against speed and
    /// quality.
    pub weights: BTreeMap<String, WeightFigures>,
}

/// One weight type: the bytes a decode token reads, the speed that gives, and what the
/// rounding costs against f32 weights on the shipped evaluation text.
#[derive(Debug, Clone, Serialize)]
pub struct WeightFigures {
    pub weight_bytes_per_token: usize,
    /// Decode, median over the rounds.
    pub tok_per_s: f64,
    /// Weight bytes × tok/s ÷ this machine's read bandwidth (absent on a GPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fraction_of_bandwidth: Option<f64>,
    pub perplexity: f64,
    /// How often its next token is f32's, over every position of the text.
    pub top1_agreement_vs_f32: f64,
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
        s += &self.weights_table();
        s += &crate::machine::cached_note(self.machine_age_s);
        s
    }

    /// The weight types side by side, and which limit each runs into.
    fn weights_table(&self) -> String {
        if self.weights.is_empty() {
            return String::new();
        }
        let mut s = format!(
            "\n{:<8} {:>12} {:>10} {:>12} {:>11} {:>13}  limit\n",
            "weights", "MB/token", "decode t/s", "of read bw", "perplexity", "top-1 vs f32"
        );
        for (name, w) in &self.weights {
            let of = w
                .fraction_of_bandwidth
                .map_or("-".to_string(), |f| format!("{:.0}%", 100.0 * f));
            // Half the bandwidth or more: the bytes set the pace, not the arithmetic.
            let limit = match w.fraction_of_bandwidth {
                Some(f) if f >= 0.5 => "memory: fewer bytes, faster steps",
                Some(_) => "below the bandwidth: work beside the weight read",
                None => "",
            };
            s += &format!(
                "{name:<8} {:>12.1} {:>10.1} {of:>12} {:>11.2} {:>12.1}%  {limit}\n",
                w.weight_bytes_per_token as f64 / 1e6,
                w.tok_per_s,
                w.perplexity,
                100.0 * w.top1_agreement_vs_f32
            );
        }
        s + "(f32 is the file's weights dequantized; q4 runs its 4-bit blocks as stored and its 8-bit LM head as Q8_0; q8_0 rounds the 4-bit blocks again to 8 bits)\n"
    }
}

/// Every configuration once, one after another, so a burst of noise from the machine
/// hits them alike: (name, (prefill s, decode s)).
fn one_round(
    [q8, q4, native]: [&Model; 3],
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
        ("ours_q4", time_ours(q4, prompt, n, LayerSelect::None)?),
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
    let mut f = std::fs::File::open(path).map_err(|err| BenchError::Open {
        path: path.to_path_buf(),
        err,
    })?;
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

/// The model at `path` with its matrices as `requant` asks.
fn load(path: &Path, dev: &Device, requant: Requant) -> Result<Model> {
    Model::load(
        path,
        &LoadOptions {
            requant,
            device: dev.clone(),
        },
    )
    .map_err(|err| BenchError::Load {
        path: path.to_path_buf(),
        err,
    })
}

/// Loads every configuration and measures them round-robin.
pub fn run(
    path: &Path,
    dev: &Device,
    n: usize,
    rounds: usize,
    verbose: bool,
) -> Result<DecodeReport> {
    let load = |requant| load(path, dev, requant);
    let q8 = load(Requant::Q8_0)?;
    let q4 = load(Requant::Q4)?;
    let native = load(Requant::Keep)?;
    let mut candle = candle_model(path, dev)?;
    let prompt = q8.tokenizer.encode(PROMPT)?;
    refuse_unless!(
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
        let runs = one_round([&q8, &q4, &native], &mut candle, &prompt, n, dev)?;
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
    let f32 = load(Requant::F32)?;
    let weights = weight_figures(
        [("f32", &f32), ("q8_0", &q8), ("q4", &q4)],
        &configs,
        (&prompt, n),
        dev.is_cpu().then_some(read_gb_per_s),
    )?;
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
        weights,
    })
}

/// Each weight type's bytes, decode speed (the rounds' median where it ran in them; f32,
/// slow, is timed once here) and quality against f32 on the evaluation text.
fn weight_figures(
    models: [(&str, &Model); 3],
    configs: &BTreeMap<String, Speed>,
    (prompt, n): (&[u32], usize),
    read_gb_per_s: Option<f64>,
) -> Result<BTreeMap<String, WeightFigures>> {
    let f32 = models[0].1;
    let seqs = vec![f32.tokenizer.encode(crate::assets::EVAL_TEXT.trim())?];
    let reference = super::heads::all_logits(f32, &seqs)?;
    let mut out = BTreeMap::new();
    for (name, m) in models {
        let tok_per_s = match name {
            "q8_0" => configs.get("ours").map(|s| s.decode_tok_per_s),
            "q4" => configs.get("ours_q4").map(|s| s.decode_tok_per_s),
            _ => None,
        };
        let tok_per_s = match tok_per_s {
            Some(t) => t,
            None => n as f64 / time_ours(m, prompt, n, LayerSelect::None)?.1,
        };
        let logits = super::heads::all_logits(m, &seqs)?;
        let q = super::heads::quality(&seqs, &logits, &reference, m.cfg.vocab);
        let bytes = m.matrix_cost().0;
        out.insert(
            name.to_string(),
            WeightFigures {
                weight_bytes_per_token: bytes,
                tok_per_s,
                fraction_of_bandwidth: read_gb_per_s
                    .map(|bw| bytes as f64 * tok_per_s / (bw * 1e9).max(1.0)),
                perplexity: q.perplexity,
                top1_agreement_vs_f32: q.top1_agreement,
            },
        );
    }
    Ok(out)
}
