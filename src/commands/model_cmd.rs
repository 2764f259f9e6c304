//! `inferlab model fetch|info|tokenize`.

use super::{load_model, model_path, ModelArgs, SourceArgs};
use anyhow::{Context, Result};
use inferlab::kv::KvElem;
use inferlab::model::{gguf, LlamaConfig};
use serde::Serialize;

/// Model subcommands.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Make sure the model is in the cache (downloading it if needed) and print its path.
    Fetch {
        #[command(flatten)]
        source: SourceArgs,
        /// Print one JSON object (snake_case keys) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Describe the model: shape, RoPE, context, vocabulary, quant types, KV bytes per token.
    Info {
        #[command(flatten)]
        source: SourceArgs,
        /// Print one JSON object (snake_case keys) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Show the token ids and pieces of TEXT.
    Tokenize {
        #[command(flatten)]
        source: SourceArgs,
        text: String,
        /// Wrap TEXT in the chat template first.
        #[arg(long)]
        chat: bool,
        /// How `<|im_end|>` and other control tokens written in TEXT are read: as text, or
        /// as the control tokens (HF's default). The listing marks control tokens.
        #[arg(long, value_enum, default_value = "text")]
        special_tokens: super::Specials,
        /// Print one JSON object (snake_case keys) instead of the table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize)]
struct Info {
    path: String,
    #[serde(flatten)]
    cfg: LlamaConfig,
    quant_types: Vec<(String, usize)>,
    kv_bytes_per_token_f32: usize,
    kv_bytes_per_token_f16: usize,
    kv_bytes_per_token_int8: usize,
}

impl Info {
    /// The shape of the model at `path` (a GGUF file, or a folder with `config.json`) and
    /// how many tensors of each type it holds.
    fn read(path: &std::path::Path) -> Result<Self> {
        let (cfg, quant_types) = if path.is_dir() {
            let p = path.join("config.json");
            let text = inferlab::files::read_text(&p, inferlab::files::Kind::Config)?;
            let cfg = LlamaConfig::from_hf_json(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
            (cfg, vec![("F32".to_string(), 0)])
        } else {
            let (ct, _) = gguf::open(path)?;
            let cfg = LlamaConfig::from_gguf(&ct).with_context(|| path.display().to_string())?;
            let mut counts = std::collections::BTreeMap::<String, usize>::new();
            for i in ct.tensor_infos.values() {
                *counts.entry(format!("{:?}", i.ggml_dtype)).or_default() += 1;
            }
            (cfg, counts.into_iter().collect())
        };
        Ok(Info {
            path: path.display().to_string(),
            kv_bytes_per_token_f32: cfg.kv_bytes_per_token(KvElem::F32),
            kv_bytes_per_token_f16: cfg.kv_bytes_per_token(KvElem::F16),
            kv_bytes_per_token_int8: cfg.kv_bytes_per_token(KvElem::Int8),
            cfg,
            quant_types,
        })
    }

    /// A table for people.
    fn table(&self) -> String {
        let c = &self.cfg;
        let q: Vec<String> = self
            .quant_types
            .iter()
            .map(|(t, n)| format!("{t}×{n}"))
            .collect();
        let rows = [
            ("path", self.path.clone()),
            ("architecture", c.architecture.to_string()),
            ("layers", c.n_layer.to_string()),
            ("hidden", c.hidden.to_string()),
            ("ffn", c.ffn.to_string()),
            ("query heads", c.n_head.to_string()),
            (
                "kv heads",
                format!(
                    "{} ({} query heads per KV head)",
                    c.n_kv_head,
                    c.group_size()
                ),
            ),
            ("head dim", c.head_dim.to_string()),
            ("rope base", c.rope_base.to_string()),
            ("rms eps", format!("{:e}", c.rms_eps)),
            ("context", c.context.to_string()),
            ("vocab", c.vocab.to_string()),
            ("tensor types", q.join(", ")),
            (
                "KV bytes/token",
                format!(
                    "{} (f32, inferlab's default), {} (f16), {} (int8 + scales)",
                    self.kv_bytes_per_token_f32,
                    self.kv_bytes_per_token_f16,
                    self.kv_bytes_per_token_int8
                ),
            ),
        ];
        rows.iter().map(|(k, v)| format!("{k:<15} {v}\n")).collect()
    }
}

/// Runs a model subcommand.
pub fn run(cmd: &Cmd) -> Result<()> {
    match cmd {
        Cmd::Fetch { source, json } => {
            let (path, origin) = model_path(source)?;
            if *json {
                println!("{}", serde_json::json!({"path": path, "origin": origin}));
            } else {
                let path = inferlab::files::printable(&path.display().to_string());
                println!("{path} (from {origin:?})");
            }
        }
        Cmd::Info { source, json } => {
            let (path, _) = model_path(source)?;
            let info = Info::read(&path)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                print!("{}", info.table());
            }
        }
        Cmd::Tokenize {
            source,
            text,
            chat,
            special_tokens,
            json,
        } => {
            let model = load_model(&ModelArgs::from_source(source))?;
            let tok = &model.tokenizer;
            let as_text = *special_tokens == super::Specials::Text;
            let ids = match chat {
                true => tok.encode_chat(text, as_text)?,
                false => tok.encode_user(text, as_text)?,
            };
            let pieces: Vec<String> = ids.iter().map(|&i| tok.piece(i)).collect();
            let control: Vec<bool> = ids.iter().map(|&i| tok.is_control(i)).collect();
            if *json {
                println!(
                    "{}",
                    serde_json::json!({"ids": ids, "pieces": pieces, "control": control})
                );
            } else {
                for ((i, p), c) in ids.iter().zip(&pieces).zip(&control) {
                    let mark = if *c { "  (control token)" } else { "" };
                    println!("{i:>6}  {p:?}{mark}");
                }
                println!("{} tokens", ids.len());
            }
        }
    }
    Ok(())
}
