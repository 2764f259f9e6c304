//! The architecture numbers of a Llama-family model, read from GGUF metadata or config.json.

use super::error::{ModelError, Result};
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

    /// Bytes the KV cache holds per token: layers × (K and V) × KV heads × head dim × element size.
    pub fn kv_bytes_per_token(&self, elem_bytes: usize) -> usize {
        self.n_layer * 2 * self.n_kv_head * self.head_dim * elem_bytes
    }

    /// Reads the config from GGUF metadata, refusing non-Llama architectures.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let arch = match ct.metadata.get("general.architecture") {
            Some(v) => v.to_string().map_err(ModelError::from)?.clone(),
            None => return Err(ModelError::MissingMetadata("general.architecture".into())),
        };
        if arch != "llama" {
            return Err(ModelError::UnsupportedArchitecture(arch));
        }
        let get = |k: &str| -> Result<&gguf_file::Value> {
            ct.metadata
                .get(&format!("{arch}.{k}"))
                .ok_or_else(|| ModelError::MissingMetadata(format!("{arch}.{k}")))
        };
        let u = |k: &str| -> Result<usize> { Ok(get(k)?.to_u32()? as usize) };
        let n_head = u("attention.head_count")?;
        let hidden = u("embedding_length")?;
        let n_kv_head = match get("attention.head_count_kv") {
            Ok(v) => v.to_u32()? as usize,
            Err(_) => n_head,
        };
        let head_dim = match get("rope.dimension_count") {
            Ok(v) => v.to_u32()? as usize,
            Err(_) => hidden / n_head,
        };
        let vocab = match ct.metadata.get("tokenizer.ggml.tokens") {
            Some(v) => v.to_vec()?.len(),
            None => u("vocab_size")?,
        };
        let cfg = Self {
            n_layer: u("block_count")?,
            hidden,
            ffn: u("feed_forward_length")?,
            n_head,
            n_kv_head,
            head_dim,
            rope_base: get("rope.freq_base")
                .and_then(|v| Ok(v.to_f32()?))
                .unwrap_or(10_000.0),
            rms_eps: get("attention.layer_norm_rms_epsilon")
                .and_then(|v| Ok(v.to_f32()? as f64))
                .unwrap_or(1e-5),
            context: u("context_length")?,
            vocab,
            rope_interleaved: true,
            architecture: arch,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads an HF `config.json` (LlamaForCausalLM and friends).
    pub fn from_hf_json(text: &str) -> std::result::Result<Self, String> {
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
            rope_theta: Option<f32>,
            #[serde(default)]
            rms_norm_eps: Option<f64>,
            #[serde(default)]
            max_position_embeddings: Option<usize>,
            vocab_size: usize,
        }
        let hf: Hf = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let arch = hf.model_type.unwrap_or_else(|| "llama".into());
        if arch != "llama" {
            return Err(format!("unsupported architecture `{arch}`"));
        }
        Ok(Self {
            architecture: arch,
            n_layer: hf.num_hidden_layers,
            hidden: hf.hidden_size,
            ffn: hf.intermediate_size,
            n_head: hf.num_attention_heads,
            n_kv_head: hf.num_key_value_heads.unwrap_or(hf.num_attention_heads),
            head_dim: hf.hidden_size / hf.num_attention_heads,
            rope_base: hf.rope_theta.unwrap_or(10_000.0),
            rms_eps: hf.rms_norm_eps.unwrap_or(1e-5),
            context: hf.max_position_embeddings.unwrap_or(2048),
            vocab: hf.vocab_size,
            rope_interleaved: false,
        })
    }

    fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(ModelError::MissingMetadata(what.to_string()));
        if self.n_head == 0 || self.n_kv_head == 0 || !self.n_head.is_multiple_of(self.n_kv_head) {
            return bad("a head count divisible by the KV head count");
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) || self.n_layer == 0 {
            return bad("an even, non-zero head dimension and at least one layer");
        }
        Ok(())
    }
}
