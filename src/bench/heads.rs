//! `bench heads`: MHA vs GQA vs MQA on the same pretrained weights — cache size,
//! concurrency at a fixed budget, decode speed, and quality against the model as trained.

use super::Result;
use crate::assets::{EVAL_TEXT, PROMPTS};
use crate::kv::KvElem;
use crate::model::sampler::{argmax, softmax};
use crate::model::{AttnKernel, HeadLayout, Logits, Model, RunOptions};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// The standard workload the byte figures are given for.
pub const WORKLOAD_REQUESTS: usize = 32;
/// Tokens per request of the standard workload.
pub const WORKLOAD_TOKENS: usize = 1024;

/// One layout's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LayoutFigures {
    pub kv_heads: usize,
    pub kv_bytes_per_token: usize,
    pub kv_bytes_workload: usize,
    pub max_concurrent: usize,
    pub decode_tok_per_s: f64,
    pub top1_agreement: f64,
    pub mean_kl: f64,
    pub perplexity: f64,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct HeadsReport {
    pub budget_bytes: usize,
    pub workload_requests: usize,
    pub workload_tokens_per_request: usize,
    pub eval_tokens: usize,
    #[serde(flatten)]
    pub layouts: BTreeMap<String, LayoutFigures>,
}

impl HeadsReport {
    /// A table for people.
    pub fn table(&self) -> String {
        let mut s = format!(
            "KV budget {:.0} MiB; workload {} requests × {} tokens; quality on {} tokens of shipped text and prompts\n",
            self.budget_bytes as f64 / 1048576.0,
            self.workload_requests,
            self.workload_tokens_per_request,
            self.eval_tokens
        );
        s += &format!(
            "{:<6} {:>8} {:>12} {:>14} {:>10} {:>11} {:>9} {:>10} {:>11}\n",
            "layout",
            "KV heads",
            "KV B/token",
            "KV workload",
            "fit",
            "decode t/s",
            "top-1 =",
            "mean KL",
            "perplexity"
        );
        for l in HeadLayout::ALL {
            let name = l.to_string().to_lowercase();
            let f = &self.layouts[&name];
            s += &format!(
                "{:<6} {:>8} {:>12} {:>11.1} MiB {:>10} {:>11.1} {:>8.1}% {:>10.4} {:>11.3}\n",
                l.to_string(),
                f.kv_heads,
                f.kv_bytes_per_token,
                f.kv_bytes_workload as f64 / 1048576.0,
                f.max_concurrent,
                f.decode_tok_per_s,
                100.0 * f.top1_agreement,
                f.mean_kl,
                f.perplexity
            );
        }
        s
    }
}

/// Logits for every position of each sequence, flattened per sequence.
pub(crate) fn all_logits(m: &Model, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
    seqs.iter()
        .map(|s| Ok(crate::model::eval::all_logits(m, s)?))
        .collect()
}

fn decode_speed(m: &Model, prompt: &[u32], n: usize) -> Result<f64> {
    let mut kv = m.new_cache(prompt.len() + n + 1);
    let l = m.forward(prompt, &mut kv, Logits::Last)?;
    let mut tok = argmax(&Model::last_logits(&l)?);
    let t = Instant::now();
    for _ in 0..n {
        let l = m.forward(&[tok], &mut kv, Logits::Last)?;
        tok = argmax(&Model::last_logits(&l)?);
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// How one layout's next-token predictions compare with the trained layout's.
pub(crate) struct Quality {
    pub top1_agreement: f64,
    pub mean_kl: f64,
    pub perplexity: f64,
}

/// Over every position of `seqs`: how often `logits` pick the same next token as
/// `reference`, the mean KL divergence from the reference's distribution to theirs, and
/// their perplexity on the text. Each sequence's logits are `vocab` wide per position.
pub(crate) fn quality(
    seqs: &[Vec<u32>],
    logits: &[Vec<f32>],
    reference: &[Vec<f32>],
    vocab: usize,
) -> Quality {
    let (mut agree, mut kl, mut nll, mut n) = (0usize, 0f64, 0f64, 0usize);
    for ((seq, lg), rf) in seqs.iter().zip(logits).zip(reference) {
        for pos in 0..seq.len() - 1 {
            let a = &lg[pos * vocab..][..vocab];
            let r = &rf[pos * vocab..][..vocab];
            agree += (argmax(a) == argmax(r)) as usize;
            let pa = softmax(a, 1.0);
            let pr = softmax(r, 1.0);
            kl += pr
                .iter()
                .zip(&pa)
                .filter(|(p, _)| **p > 0.0)
                .map(|(p, q)| (*p as f64) * ((*p as f64) / (*q as f64).max(1e-30)).ln())
                .sum::<f64>();
            nll += crate::model::eval::surprise(a, seq[pos + 1] as usize);
            n += 1;
        }
    }
    let n = n.max(1) as f64;
    Quality {
        top1_agreement: agree as f64 / n,
        mean_kl: kl / n,
        perplexity: (nll / n).exp(),
    }
}

/// The model under each head layout, naive kernel and f32 cache.
fn layout_models(base: &Model) -> Result<Vec<(HeadLayout, Model)>> {
    HeadLayout::ALL
        .iter()
        .map(|&l| {
            let m = base.with_run(RunOptions {
                layout: l,
                kernel: AttnKernel::Naive,
                kv_elem: KvElem::F32,
                route: base.run_options().route,
            })?;
            Ok((l, m))
        })
        .collect()
}

/// Runs the comparison with a KV budget of `budget_bytes`.
pub fn run(base: &Model, budget_bytes: usize, decode_tokens: usize) -> Result<HeadsReport> {
    let tok = &base.tokenizer;
    let mut seqs = vec![tok.encode(EVAL_TEXT.trim())?];
    for p in PROMPTS.lines().filter(|l| !l.trim().is_empty()) {
        seqs.push(tok.encode(&crate::model::TextTokenizer::chat_prompt(p))?);
    }
    refuse_unless!(
        seqs[1].len() + decode_tokens <= base.cfg.context,
        "--tokens {decode_tokens} after the {}-token prompt is past the model's context of {}",
        seqs[1].len(),
        base.cfg.context
    );
    let eval_tokens: usize = seqs.iter().map(|s| s.len() - 1).sum();
    let v = base.cfg.vocab;
    let models = layout_models(base)?;
    let gqa = &models
        .iter()
        .find(|(l, _)| *l == HeadLayout::Gqa)
        .expect("gqa")
        .1;
    let reference = all_logits(gqa, &seqs)?;
    let mut layouts = BTreeMap::new();
    for (layout, m) in &models {
        let logits = if *layout == HeadLayout::Gqa {
            reference.clone()
        } else {
            all_logits(m, &seqs)?
        };
        let q = quality(&seqs, &logits, &reference, v);
        let bpt = m.new_cache(1).bytes_per_token();
        let per_request = bpt * WORKLOAD_TOKENS;
        layouts.insert(
            layout.to_string().to_lowercase(),
            LayoutFigures {
                kv_heads: m.kv_heads(),
                kv_bytes_per_token: bpt,
                kv_bytes_workload: per_request * WORKLOAD_REQUESTS,
                max_concurrent: budget_bytes / per_request,
                decode_tok_per_s: decode_speed(m, &seqs[1], decode_tokens)?,
                top1_agreement: q.top1_agreement,
                mean_kl: q.mean_kl,
                perplexity: q.perplexity,
            },
        );
    }
    Ok(HeadsReport {
        budget_bytes,
        workload_requests: WORKLOAD_REQUESTS,
        workload_tokens_per_request: WORKLOAD_TOKENS,
        eval_tokens,
        layouts,
    })
}
