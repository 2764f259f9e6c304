//! The architecture numbers of a Llama-family model, read from GGUF metadata or config.json.

use super::error::{Malformed, ModelError, Result};
use crate::kv::KvElem;
use candle_core::quantized::gguf_file;
use serde::{Deserialize, Serialize};

/// Shape of a Llama-family transformer. Everything the forward pass and the KV cache need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    pub architecture: String,
    pub n_layer: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub rope_base: f32,
    pub rms_eps: f64,
    pub context: usize,
    pub vocab: usize,
    /// GGUF permutes Q/K rows so that rotary pairs are adjacent (2i, 2i+1);
    /// HF safetensors keep the halves layout (i, i + d/2).
    pub rope_interleaved: bool,
}

impl LlamaConfig {
    /// Query heads that share one KV head.
    pub fn group_size(&self) -> usize {
        self.n_head / self.n_kv_head
    }

    /// Bytes the KV cache holds per token: layers × (K and V) × KV heads × one row of
    /// head dim numbers stored as `elem`.
    pub fn kv_bytes_per_token(&self, elem: KvElem) -> usize {
        self.kv_bytes_per_token_with(self.n_kv_head, elem)
    }

    /// The same with `kv_heads` stored per layer (another head layout than the trained one).
    pub fn kv_bytes_per_token_with(&self, kv_heads: usize, elem: KvElem) -> usize {
        crate::kv::bytes_per_token(self.n_layer, kv_heads, self.head_dim, elem)
    }

    /// A prompt of `tokens` plus `max_new` to generate fits the context (checked: the
    /// command line's `--max-tokens` may be anything up to `usize::MAX`).
    pub fn check_fits(&self, tokens: usize, max_new: usize) -> Result<()> {
        if tokens.checked_add(max_new).is_none_or(|n| n > self.context) {
            return Err(ModelError::PromptTooLong {
                tokens,
                max_new,
                context: self.context,
            });
        }
        Ok(())
    }

    /// Reads the config from GGUF metadata, refusing non-Llama architectures and
    /// validating every number before anything is sized from it.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let arch = llama_architecture(ct)?;
        let key = |k: &str| format!("{arch}.{k}");
        let get = |k: &str| ct.metadata.get(&key(k));
        let u = |k: &str| -> Result<usize> {
            gguf_size(
                &key(k),
                get(k).ok_or_else(|| ModelError::MissingMetadata(key(k)))?,
            )
        };
        let n_head = u("attention.head_count")?;
        let hidden = u("embedding_length")?;
        let n_kv_head = match get("attention.head_count_kv") {
            Some(v) => gguf_size(&key("attention.head_count_kv"), v)?,
            None => n_head,
        };
        let head_dim = match get("rope.dimension_count") {
            Some(v) => gguf_size(&key("rope.dimension_count"), v)?,
            // checked_div: a head count of 0 is reported by validate(), not divided by.
            None => hidden.checked_div(n_head).unwrap_or(0),
        };
        check_kv_width(ct, &arch, head_dim)?;
        let vocab = gguf_vocab(ct, &arch)?;
        let float = |k: &str, default: f64| match get(k) {
            Some(v) => gguf_number(&key(k), v),
            None => Ok(default),
        };
        let cfg = Self {
            n_layer: u("block_count")?,
            hidden,
            ffn: u("feed_forward_length")?,
            n_head,
            n_kv_head,
            head_dim,
            rope_base: float("rope.freq_base", 10_000.0)? as f32,
            rms_eps: float("attention.layer_norm_rms_epsilon", 1e-5)?,
            context: u("context_length")?,
            vocab,
            rope_interleaved: true,
            architecture: arch,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads an HF `config.json` (LlamaForCausalLM and friends), validated as GGUF is.
    pub fn from_hf_json(text: &str) -> std::result::Result<Self, Malformed> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Malformed(e.to_string()))?;
        // serde would describe another shape by its own struct ("expected struct Hf").
        if !v.is_object() {
            return Err(Malformed("not a JSON object: config.json holds the model's sizes as an object (num_hidden_layers, hidden_size, …)".into()));
        }
        let hf: Hf = serde_json::from_value(v).map_err(|e| Malformed(e.to_string()))?;
        let arch = hf.model_type.clone().unwrap_or_else(|| "llama".into());
        if arch != "llama" {
            return Err(Malformed(format!(
                "unsupported architecture `{}`",
                crate::files::printable(&arch)
            )));
        }
        hf.refuse_what_inferlab_lacks()?;
        let cfg = Self {
            architecture: arch,
            n_layer: hf.num_hidden_layers,
            hidden: hf.hidden_size,
            ffn: hf.intermediate_size,
            n_head: hf.num_attention_heads,
            n_kv_head: hf.num_key_value_heads.unwrap_or(hf.num_attention_heads),
            head_dim: hf.head_dim.unwrap_or_else(|| {
                hf.hidden_size
                    .checked_div(hf.num_attention_heads)
                    .unwrap_or(0)
            }),
            rope_base: hf.rope_theta.unwrap_or(10_000.0),
            rms_eps: hf.rms_norm_eps.unwrap_or(1e-5),
            context: hf.max_position_embeddings.unwrap_or(2048),
            vocab: hf.vocab_size,
            rope_interleaved: false,
        };
        cfg.validate().map_err(|e| Malformed(e.to_string()))?;
        Ok(cfg)
    }

    /// Whether an HF `config.json` lets the LM head be the embedding: unless it says
    /// `tie_word_embeddings: false`.
    pub fn hf_tied(text: &str) -> bool {
        serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v.get("tie_word_embeddings").and_then(|t| t.as_bool()))
            .unwrap_or(true)
    }

    /// The config against itself and against inferlab's bounds. Every size the loader,
    /// the RoPE tables and the KV cache derive from it is then small enough to compute
    /// without overflow and to allocate without surprise.
    pub fn validate(&self) -> Result<()> {
        let in_range = |field: &str, v: usize, lo: usize, hi: usize| {
            if v < lo || v > hi {
                Err(invalid(field, v, &format!("expected {lo} to {hi}")))
            } else {
                Ok(())
            }
        };
        in_range("block_count (layers)", self.n_layer, 1, limits::LAYERS)?;
        in_range(
            "embedding_length (hidden size)",
            self.hidden,
            1,
            limits::HIDDEN,
        )?;
        in_range("feed_forward_length", self.ffn, 1, limits::FFN)?;
        in_range("attention.head_count", self.n_head, 1, limits::HEADS)?;
        in_range("attention.head_count_kv", self.n_kv_head, 1, self.n_head)?;
        in_range("context_length", self.context, 1, limits::CONTEXT)?;
        in_range("vocabulary size", self.vocab, 1, limits::VOCAB)?;
        if !self.n_head.is_multiple_of(self.n_kv_head) {
            return Err(invalid(
                "attention.head_count_kv",
                self.n_kv_head,
                &format!("must divide the {} query heads", self.n_head),
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Err(invalid(
                "head dimension",
                self.head_dim,
                "must be even and non-zero (RoPE rotates pairs)",
            ));
        }
        if self.head_dim * self.n_head != self.hidden {
            return Err(invalid(
                "head dimension",
                self.head_dim,
                &format!(
                    "times {} heads must equal the hidden size {}",
                    self.n_head, self.hidden
                ),
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return Err(invalid(
                "rope.freq_base",
                self.rope_base,
                "must be a finite number above 1",
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0 && self.rms_eps < 1.0) {
            return Err(invalid(
                "layer_norm_rms_epsilon",
                self.rms_eps,
                "must be between 0 and 1",
            ));
        }
        Ok(())
    }
}

/// The fields of an HF `config.json` inferlab reads, and those it must refuse.
#[derive(Deserialize)]
struct Hf {
    #[serde(default)]
    model_type: Option<String>,
    num_hidden_layers: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_attention_heads: usize,
    #[serde(default)]
    num_key_value_heads: Option<usize>,
    #[serde(default)]
    head_dim: Option<usize>,
    #[serde(default)]
    rope_theta: Option<f32>,
    #[serde(default)]
    rms_norm_eps: Option<f64>,
    #[serde(default)]
    max_position_embeddings: Option<usize>,
    vocab_size: usize,
    #[serde(default)]
    rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    attention_bias: Option<bool>,
    #[serde(default)]
    mlp_bias: Option<bool>,
    #[serde(default)]
    hidden_act: Option<String>,
    #[serde(default)]
    sliding_window: Option<serde_json::Value>,
    #[serde(default)]
    partial_rotary_factor: Option<f64>,
}

impl Hf {
    /// What transformers' Llama can do and inferlab's forward pass does not, refused by
    /// key rather than ignored.
    fn refuse_what_inferlab_lacks(&self) -> std::result::Result<(), Malformed> {
        let lacks = |feature: &str, key: &str, v: &dyn std::fmt::Debug| {
            Err(Malformed(format!(
                "inferlab does not implement {feature} (key `{key}` = {v:?})"
            )))
        };
        if let Some(v) = self.rope_scaling.as_ref().filter(|v| !v.is_null()) {
            return lacks("RoPE scaling", "rope_scaling", v);
        }
        if let Some(v) = self.sliding_window.as_ref().filter(|v| !v.is_null()) {
            return lacks("sliding-window attention", "sliding_window", v);
        }
        if self.attention_bias == Some(true) {
            return lacks("bias terms", "attention_bias", &true);
        }
        if self.mlp_bias == Some(true) {
            return lacks("bias terms", "mlp_bias", &true);
        }
        if let Some(f) = self.partial_rotary_factor.filter(|&f| f != 1.0) {
            return lacks("RoPE over part of each head", "partial_rotary_factor", &f);
        }
        if let Some(act) = self.hidden_act.as_ref().filter(|a| a.as_str() != "silu") {
            return lacks("activations other than SiLU", "hidden_act", act);
        }
        Ok(())
    }
}

/// Keys and values as wide as the heads RoPE turns (`head_dim`): a file whose
/// `attention.key_length` or `value_length` says otherwise is another model.
fn check_kv_width(ct: &gguf_file::Content, arch: &str, head_dim: usize) -> Result<()> {
    for k in ["attention.key_length", "attention.value_length"] {
        let key = format!("{arch}.{k}");
        let Some(v) = ct.metadata.get(&key) else {
            continue;
        };
        let n = gguf_size(&key, v)?;
        if n != head_dim {
            return Err(invalid(
                &key,
                n,
                "inferlab's heads are as wide as rope.dimension_count (or embedding_length / head_count); keys and values of another width are not implemented",
            ));
        }
    }
    Ok(())
}

/// The vocabulary: the tokenizer's list of tokens, which a `vocab_size` key must agree
/// with (a disagreement is a damaged file), or that key alone.
fn gguf_vocab(ct: &gguf_file::Content, arch: &str) -> Result<usize> {
    let key = format!("{arch}.vocab_size");
    let size = ct
        .metadata
        .get(&key)
        .map(|v| gguf_size(&key, v))
        .transpose()?;
    match (ct.metadata.get("tokenizer.ggml.tokens"), size) {
        (Some(gguf_file::Value::Array(a)), Some(n)) if n != a.len() => Err(invalid(
            &key,
            n,
            &format!("the tokenizer lists {} tokens", a.len()),
        )),
        (Some(gguf_file::Value::Array(a)), _) => Ok(a.len()),
        (Some(other), _) => Err(invalid(
            "tokenizer.ggml.tokens",
            super::tokenizer::brief(other),
            "not an array of token strings",
        )),
        (None, Some(n)) => Ok(n),
        (None, None) => Err(ModelError::MissingMetadata(key)),
    }
}

/// `general.architecture`, which must be the string `llama`.
fn llama_architecture(ct: &gguf_file::Content) -> Result<String> {
    let arch = match ct.metadata.get("general.architecture") {
        Some(gguf_file::Value::String(s)) => crate::files::printable(s),
        Some(other) => {
            return Err(invalid(
                "general.architecture",
                super::tokenizer::brief(other),
                "not a string",
            ))
        }
        None => return Err(ModelError::MissingMetadata("general.architecture".into())),
    };
    if arch != "llama" {
        return Err(ModelError::UnsupportedArchitecture(arch));
    }
    Ok(arch)
}

/// Bounds on a model's shape: far above any model this tool can run on a laptop, far below
/// what would overflow a size or ask the allocator for terabytes.
pub mod limits {
    pub const LAYERS: usize = 512;
    pub const HIDDEN: usize = 1 << 15;
    pub const FFN: usize = 1 << 17;
    pub const HEADS: usize = 1024;
    /// RoPE tables are `context × head_dim / 2` floats, four of them: 128k positions of
    /// a 128-wide head are 128 MB, which is where this stops.
    pub const CONTEXT: usize = 1 << 17;
    pub const VOCAB: usize = 1 << 20;
}

fn invalid(field: &str, value: impl std::fmt::Display, why: &str) -> ModelError {
    ModelError::InvalidConfig {
        field: field.to_string(),
        value: value.to_string(),
        why: why.to_string(),
    }
}

/// A GGUF metadata value that must be a size: a non-negative integer of any width.
fn gguf_size(key: &str, v: &gguf_file::Value) -> Result<usize> {
    let n = match v {
        gguf_file::Value::U64(x) => *x,
        gguf_file::Value::I64(x) if *x >= 0 => *x as u64,
        gguf_file::Value::I32(x) if *x >= 0 => *x as u64,
        other => other
            .to_u32()
            .map_err(|_| invalid(key, format!("{other:?}"), "not a size"))? as u64,
    };
    usize::try_from(n).map_err(|_| invalid(key, n, "too large"))
}

/// A GGUF metadata value that must be a number (f32 or f64).
fn gguf_number(key: &str, v: &gguf_file::Value) -> Result<f64> {
    v.to_f32()
        .map(|x| x as f64)
        .or_else(|_| v.to_f64())
        .map_err(|_| invalid(key, format!("{v:?}"), "not a number"))
}
