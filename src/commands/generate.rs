//! `inferlab generate`: stream a completion to stdout.

use super::{load_model, prompt_ids};
use anyhow::Result;
use inferlab::model::session::Session;
use inferlab::model::Model;
use std::io::Write;

/// Arguments of `generate`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: super::ModelArgs,
    /// The prompt text.
    #[arg(long)]
    pub prompt: String,
    /// Wrap the prompt in the model's chat template (system + user, assistant to answer).
    #[arg(long)]
    pub chat: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: super::SamplingArgs,
    /// How `<|im_end|>` and other control tokens written in the prompt are read: as text
    /// (split into ordinary pieces, so the prompt cannot close its own turn) or as the
    /// control tokens (to write a chat template by hand).
    #[arg(long, value_enum, default_value = "text")]
    pub special_tokens: super::Specials,
    /// Print prefill and decode speed to stderr at the end.
    #[arg(long)]
    pub stats: bool,
    /// Print one JSON object at the end (text, token counts, speeds) instead of streaming.
    #[arg(long)]
    pub json: bool,
}

/// What `generate --json` prints.
#[derive(serde::Serialize)]
struct Summary {
    text: String,
    prompt_tokens: usize,
    generated_tokens: usize,
    /// `eos` (the model ended it) or `max_tokens`.
    finish_reason: &'static str,
    prefill_ms: f64,
    prefill_tok_per_s: Option<f64>,
    decode_tok_per_s: Option<f64>,
}

/// Prints the generation's text past the first `printed` bytes; returns the bytes printed
/// now. The whole generation is decoded, so a character split across tokens prints whole
/// once its last token has come.
fn print_new(out: &mut impl Write, model: &Model, gen: &[u32], printed: usize) -> Result<usize> {
    let text = model.tokenizer.decode(gen)?;
    if text.len() <= printed || text.ends_with('\u{FFFD}') {
        return Ok(printed);
    }
    write!(out, "{}", &text[printed..])?;
    out.flush()?;
    Ok(text.len())
}

/// Runs `generate`.
pub fn run(a: &Args) -> Result<()> {
    let model = load_model(&a.model)?;
    let ids = prompt_ids(&model, &a.prompt, (a.chat, a.special_tokens), a.max_tokens)?;
    let mut s = Session::new(&model, ids, a.max_tokens, a.sampling.config());
    let mut out = std::io::stdout().lock();
    let (mut prefill_ms, mut decode_ms, mut decoded) = (0.0, 0.0, 0usize);
    let mut printed = 0usize;
    let mut finish = "max_tokens";
    for _ in 0..a.max_tokens {
        let info = s.step()?;
        if info.step == 0 {
            prefill_ms = info.wall_ms;
        } else {
            decode_ms += info.wall_ms;
            decoded += 1;
        }
        if info.is_eos {
            finish = "eos";
            break;
        }
        if a.json {
            continue;
        }
        printed = print_new(&mut out, &model, s.generated(), printed)?;
    }
    // A rate only where something was timed: `--max-tokens 0` runs no pass at all.
    let rate = |n: usize, ms: f64| (n > 0 && ms > 0.0).then(|| n as f64 / (ms / 1e3));
    let prefill_tok_per_s = rate(s.prompt_len, prefill_ms);
    let decode_tok_per_s = rate(decoded, decode_ms);
    if a.json {
        let summary = Summary {
            text: model.tokenizer.decode(s.generated())?,
            prompt_tokens: s.prompt_len,
            generated_tokens: s.generated().len(),
            finish_reason: finish,
            prefill_ms,
            prefill_tok_per_s,
            decode_tok_per_s,
        };
        serde_json::to_writer(&mut out, &summary)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out)?;
    if a.stats {
        eprintln!(
            "prefill: {} tokens in {:.1} ms ({:.1} tok/s); decode: {} tokens at {:.1} tok/s",
            s.prompt_len,
            prefill_ms,
            prefill_tok_per_s.unwrap_or(0.0),
            decoded,
            decode_tok_per_s.unwrap_or(0.0)
        );
    }
    Ok(())
}
