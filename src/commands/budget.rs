//! `inferlab budget`: how many requests' KV caches fit next to a model's weights.

use anyhow::{Context, Result};
use inferlab::budget::{self, KvNumbers, Shape};
use inferlab::kv::KvElem;
use inferlab::model::{gguf, LlamaConfig};
use std::path::PathBuf;

/// Arguments of `budget`.
#[derive(clap::Args)]
pub struct Args {
    /// A preset shape (see --list).
    #[arg(long, default_value = "smollm2-135m")]
    pub preset: String,
    /// A config.json or GGUF file to take the shape from instead of a preset.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Device memory, e.g. 24GiB, 80GB.
    #[arg(long, default_value = "24GiB")]
    pub memory: String,
    /// Tokens per request (prompt + output).
    #[arg(long, default_value_t = 4096)]
    pub seq_len: usize,
    /// Bytes per KV element (2 for f16/bf16, 1 for 8-bit, 4 for f32).
    #[arg(long, default_value_t = 2, conflicts_with = "kv_elem")]
    pub kv_bytes: usize,
    /// One of inferlab's element types instead of --kv-bytes: f32, f16, or int8 (whose
    /// rows of one token and KV head carry a 4-byte scale each, as the app stores them).
    #[arg(long, value_enum)]
    pub kv_elem: Option<KvElem>,
    /// Bytes per weight for the weights' footprint (2 for f16).
    #[arg(long, default_value_t = 2.0)]
    pub weight_bytes: f64,
    /// List the presets.
    #[arg(long)]
    pub list: bool,
    /// Print one JSON object (snake_case keys) instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn shape_from_path(p: &PathBuf) -> Result<(Shape, Option<u64>)> {
    let name = p.display().to_string();
    let cfg = if p.extension().is_some_and(|e| e == "gguf") {
        let (ct, _) = gguf::open(p)?;
        LlamaConfig::from_gguf(&ct).with_context(|| name.clone())?
    } else {
        let text = inferlab::files::read_text(p, inferlab::files::Kind::Config)?;
        LlamaConfig::from_hf_json(&text).map_err(|e| anyhow::anyhow!("{name}: {e}"))?
    };
    let params = cfg.vocab * cfg.hidden
        + cfg.n_layer
            * (2 * cfg.hidden * cfg.n_head * cfg.head_dim
                + 2 * cfg.hidden * cfg.n_kv_head * cfg.head_dim
                + 3 * cfg.hidden * cfg.ffn);
    let file_bytes = p
        .extension()
        .is_some_and(|e| e == "gguf")
        .then(|| std::fs::metadata(p).map(|m| m.len()).ok())
        .flatten();
    Ok((
        Shape {
            name: name.clone(),
            display: name,
            layers: cfg.n_layer,
            n_head: cfg.n_head,
            n_kv_head: cfg.n_kv_head,
            head_dim: cfg.head_dim,
            context: cfg.context,
            params_b: params as f64 / 1e9,
        },
        file_bytes,
    ))
}

/// Runs `budget`.
pub fn run(a: &Args) -> Result<()> {
    let presets = budget::presets();
    if a.list {
        for p in &presets {
            println!(
                "{:<14} {:<14} layers {:>3}  heads {:>3}  KV heads {:>3}  head dim {:>3}  context {:>6}  {:.2}B params",
                p.name, p.display, p.layers, p.n_head, p.n_kv_head, p.head_dim, p.context, p.params_b
            );
        }
        return Ok(());
    }
    anyhow::ensure!(a.seq_len > 0, "--seq-len must be at least 1");
    anyhow::ensure!(
        (1..=16).contains(&a.kv_bytes),
        "--kv-bytes {} : a KV element is 1 to 16 bytes (2 for f16)",
        a.kv_bytes
    );
    anyhow::ensure!(
        a.weight_bytes.is_finite() && a.weight_bytes > 0.0 && a.weight_bytes <= 16.0,
        "--weight-bytes {}: a weight is more than 0 and at most 16 bytes (2 for f16)",
        a.weight_bytes
    );
    let (shape, file_bytes) = match &a.config {
        Some(p) => shape_from_path(p)?,
        None => {
            let s = presets
                .iter()
                .find(|s| s.name.eq_ignore_ascii_case(&a.preset))
                .cloned()
                .with_context(|| {
                    let names: Vec<_> = presets.iter().map(|p| p.name.as_str()).collect();
                    format!(
                        "unknown preset `{}` (known: {})",
                        a.preset,
                        names.join(", ")
                    )
                })?;
            (s, None)
        }
    };
    let memory = budget::parse_bytes(&a.memory).map_err(anyhow::Error::msg)?;
    let weights = file_bytes.unwrap_or((shape.params_b * 1e9 * a.weight_bytes) as u64);
    let kv = a
        .kv_elem
        .map_or(KvNumbers::Bytes(a.kv_bytes), KvNumbers::Elem);
    let b = budget::compute(&shape, memory, weights, a.seq_len, kv).map_err(anyhow::Error::msg)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&b)?);
    } else {
        print!("{}", b.table());
        if b.lines[0].requests_that_fit == 0 {
            println!(
                "(not even one request fits: the weights take {} of {} bytes)",
                weights, memory
            );
        }
    }
    Ok(())
}
