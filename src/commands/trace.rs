//! `inferlab trace --json`: one JSON object per step for notebooks and scripts.

use super::{load_model, prompt_ids};
use anyhow::{Context, Result};
use inferlab::model::session::Session;
use inferlab::model::LayerSelect;
use serde::Serialize;
use std::io::Write;

/// Arguments of `trace`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: super::ModelArgs,
    /// The prompt text.
    #[arg(long)]
    pub prompt: String,
    /// Wrap the prompt in the chat template.
    #[arg(long)]
    pub chat: bool,
    /// Steps to run (the first is the prefill).
    #[arg(long, default_value_t = 16)]
    pub max_tokens: usize,
    /// Layer whose attention to include.
    #[arg(long, default_value_t = 0)]
    pub layer: usize,
    /// Query head whose attention to include.
    #[arg(long, default_value_t = 0)]
    pub head: usize,
    /// Top-k entries per step.
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
    #[command(flatten)]
    pub sampling: super::SamplingArgs,
    /// How `<|im_end|>` and other control tokens written in the prompt are read: as text
    /// (split into ordinary pieces, so the prompt cannot close its own turn) or as the
    /// control tokens (to write a chat template by hand).
    #[arg(long, value_enum, default_value = "text")]
    pub special_tokens: super::Specials,
    /// Write one JSON object per step (attention rows, traffic, logit lens) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// `off`: no KV cache, every decode step recomputes the keys and values of the whole
    /// sequence (the same tokens; watch `traffic.flops` grow with the position). Its JSON
    /// lines still hold only the step's newest attention row: the rows before it repeat
    /// what earlier lines hold, and all of them would grow as the square of the length.
    #[arg(long, value_enum, default_value = "on")]
    pub kv_cache: OnOff,
}

/// A switch on the command line.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    info: &'a inferlab::model::session::StepInfo,
    layer: usize,
    head: usize,
    /// The query position of `attention`'s first row.
    first_row: usize,
    /// One row per query position this step adds (the prompt's at the prefill, the newest
    /// after it): weights over keys 0..kv_len.
    attention: Vec<Vec<f32>>,
}

/// `--layer` and `--head` within the model's.
fn check_layer_and_head(a: &Args, cfg: &inferlab::model::LlamaConfig) -> Result<()> {
    anyhow::ensure!(
        a.layer < cfg.n_layer,
        "--layer {} is out of range: the model has layers 0..{}",
        a.layer,
        cfg.n_layer - 1
    );
    anyhow::ensure!(
        a.head < cfg.n_head,
        "--head {} is out of range: the model has heads 0..{}",
        a.head,
        cfg.n_head - 1
    );
    Ok(())
}

/// Runs `trace`.
pub fn run(a: &Args) -> Result<()> {
    let model = load_model(&a.model)?;
    check_layer_and_head(a, &model.cfg)?;
    let ids = prompt_ids(&model, &a.prompt, (a.chat, a.special_tokens), a.max_tokens)?;
    let mut s = Session::new(&model, ids, a.max_tokens, a.sampling.config());
    s.probe.select = LayerSelect::One(a.layer);
    // JSON lines carry the logit lens: every layer's guess for the next token.
    s.probe.lens = a.json;
    s.top_k = a.top_k;
    s.recompute = a.kv_cache == OnOff::Off;
    let mut out = std::io::stdout().lock();
    if !a.json {
        writeln!(
            out,
            "step  phase    rows  keys  token            ms  top-{} (probability)   · layer {} head {}: top key of the newest row",
            a.top_k, a.layer, a.head
        )?;
    }
    for _ in 0..a.max_tokens {
        let mut info = s.step()?;
        let cap = info.captures.pop().context("the probe captured nothing")?;
        // A decode step adds one row, cache or not (without it the earlier rows come out
        // again, the same): only that row is written.
        let first = if info.step > 0 {
            cap.t.saturating_sub(1)
        } else {
            0
        };
        let attention: Vec<Vec<f32>> = (first..cap.t)
            .map(|i| cap.weight_row(a.head, i).to_vec())
            .collect();
        let eos = info.is_eos;
        if !a.json {
            table_row(&mut out, &info, &attention)?;
            if eos {
                break;
            }
            continue;
        }
        let line = Line {
            info: &info,
            layer: a.layer,
            head: a.head,
            first_row: cap.pos0 + first,
            attention,
        };
        serde_json::to_writer(&mut out, &line)?;
        writeln!(out)?;
        if eos {
            break;
        }
    }
    Ok(())
}

/// One step as a line for people: what was sampled, how long it took, the top-k, and
/// where the newest row of the chosen head looked most.
fn table_row(
    out: &mut impl Write,
    info: &inferlab::model::session::StepInfo,
    attention: &[Vec<f32>],
) -> Result<()> {
    let top: Vec<String> = info
        .top_k
        .iter()
        .map(|t| format!("{:?} {:.2}", t.token, t.prob))
        .collect();
    let looked = attention
        .last()
        .and_then(|row| {
            row.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(j, w)| format!("key {j} ({w:.2})"))
        })
        .unwrap_or_default();
    writeln!(
        out,
        "{:>4}  {:<7} {:>5} {:>5}  {:<14} {:>6.1}  {}   · {looked}",
        info.step,
        format!("{:?}", info.phase).to_lowercase(),
        info.input_len,
        info.kv_len,
        format!("{:?}", info.token),
        info.wall_ms,
        top.join("  "),
    )?;
    Ok(())
}
