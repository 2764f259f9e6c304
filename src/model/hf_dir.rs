//! An HF safetensors directory (`config.json`, `tokenizer.json`, `model*.safetensors`),
//! loaded with the same care as a GGUF file: every shard a regular file, every tensor one
//! the forward pass reads (once, in one shard) with the shape and a float type the config
//! implies, every value finite. The safetensors parser itself checks that each shard's
//! data ranges are in order, disjoint and inside the file, so what loading allocates is
//! bounded by the shards' size (twice it for BF16 weights held as f32).

use super::audit;
use super::config::LlamaConfig;
use super::error::{ModelError, Result};
use super::linear::Linear;
use super::weights::{quantized_on_host, LayerWeights, LoadOptions, Requant, Weights};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A block tensor's GGUF role and its name in transformers' Llama.
const ROLES: [(&str, &str); 9] = [
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// A tensor's GGUF name as transformers names it.
fn hf_name(gguf: &str) -> String {
    match gguf {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        _ => {}
    }
    let renamed = gguf.strip_prefix("blk.").and_then(|rest| {
        let (layer, role) = rest.split_once('.')?;
        let role = role.strip_suffix(".weight")?;
        let (_, hf) = ROLES.iter().find(|(g, _)| *g == role)?;
        Some(format!("model.layers.{layer}.{hf}.weight"))
    });
    renamed.unwrap_or_else(|| gguf.to_string())
}

/// The tensors the forward pass reads, with their shapes, in HF's names: the GGUF
/// loader's list, renamed.
fn expected(cfg: &LlamaConfig) -> Vec<(String, Vec<usize>)> {
    super::weights::expected_shapes(cfg)
        .into_iter()
        .map(|(name, shape)| (hf_name(&name), shape))
        .collect()
}

/// Why a tensor name is not one inferlab reads.
fn unknown(name: &str, n_layer: usize) -> String {
    let feature = if name.ends_with(".bias") {
        "bias terms".to_string()
    } else if let Some(i) = name
        .strip_prefix("model.layers.")
        .and_then(|r| r.split('.').next())
        .and_then(|i| i.parse::<usize>().ok())
        .filter(|&i| i >= n_layer)
    {
        format!("layers beyond num_hidden_layers = {n_layer} (layer {i})")
    } else {
        "this tensor".to_string()
    };
    format!("inferlab does not implement {feature} (tensor `{name}`)")
}

/// The shards of `dir`, sorted, each opened and parsed; a tensor's name maps to its shard.
struct Shards {
    files: Vec<(PathBuf, MmapedSafetensors)>,
    index: HashMap<String, usize>,
}

impl Shards {
    fn open(dir: &Path) -> Result<Self> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|_| ModelError::NotFound(dir.to_path_buf()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        paths.sort();
        if paths.is_empty() {
            return Err(ModelError::NotFound(dir.join("model.safetensors")));
        }
        let mut files = Vec::new();
        let mut index = HashMap::new();
        for p in paths {
            crate::files::open(&p, crate::files::Kind::Shard)?;
            // SAFETY: the file is only read; mmap is how safetensors are opened.
            let st = unsafe { MmapedSafetensors::new(&p) }.map_err(|e| corrupt(&p, e))?;
            for (name, _) in st.tensors() {
                if let Some(&first) = index.get(&name) {
                    let (other, _): &(PathBuf, _) = &files[first];
                    return Err(corrupt(
                        &p,
                        format!("tensor `{name}` is also in {}", other.display()),
                    ));
                }
                index.insert(name, files.len());
            }
            files.push((p, st));
        }
        Ok(Self { files, index })
    }

    /// Checks every tensor against what the forward pass reads; returns what was ignored
    /// without changing the math.
    fn check(&self, cfg: &LlamaConfig) -> Result<Vec<String>> {
        let mut want: HashMap<String, Vec<usize>> = expected(cfg).into_iter().collect();
        want.insert("lm_head.weight".into(), vec![cfg.vocab, cfg.hidden]);
        let mut warnings = Vec::new();
        let mut names: Vec<&String> = self.index.keys().collect();
        names.sort();
        for name in names {
            let (path, st) = &self.files[self.index[name]];
            let view = st.get(name).map_err(|e| corrupt(path, e))?;
            if name.ends_with("rotary_emb.inv_freq") {
                warnings.push(format!(
                    "ignored `{name}`: inferlab computes the RoPE frequencies from rope_theta"
                ));
                continue;
            }
            let Some(shape) = want.get(name.as_str()) else {
                return Err(corrupt(path, unknown(name, cfg.n_layer)));
            };
            let dtype = format!("{:?}", view.dtype());
            if !matches!(dtype.as_str(), "F32" | "F16" | "BF16") {
                return Err(corrupt(
                    path,
                    format!("tensor `{name}` is {dtype}; weights must be F32, F16 or BF16"),
                ));
            }
            if !audit::same_shape(view.shape(), shape) {
                return Err(corrupt(
                    path,
                    format!(
                        "tensor `{name}` has shape {:?}, but config.json implies {shape:?}",
                        view.shape()
                    ),
                ));
            }
        }
        Ok(warnings)
    }

    /// One tensor as f32 on the device, its values checked finite.
    fn get(&self, name: &str, dev: &candle_core::Device) -> Result<Tensor> {
        let Some(&i) = self.index.get(name) else {
            let dir = self.files[0].0.parent().unwrap_or(Path::new("."));
            return Err(corrupt(dir, format!("missing tensor `{name}`")));
        };
        let (path, st) = &self.files[i];
        let t = st
            .load(name, dev)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| corrupt(path, e))?;
        let values = t.flatten_all().and_then(|t| t.to_vec1::<f32>())?;
        audit::finite_f32(&values).map_err(|e| corrupt(path, format!("tensor `{name}`: {e}")))?;
        Ok(t)
    }
}

fn corrupt(path: &Path, reason: impl std::fmt::Display) -> ModelError {
    ModelError::CorruptFile {
        path: path.to_path_buf(),
        reason: super::Malformed(reason.to_string()),
    }
}

/// Loads the weights of `dir`. `tied`: whether config.json lets the LM head be the
/// embedding (`tie_word_embeddings`; absent counts as tied, since a directory without a
/// head has no other matrix it could mean).
pub fn load(dir: &Path, cfg: &LlamaConfig, opts: &LoadOptions, tied: bool) -> Result<Weights> {
    let shards = Shards::open(dir)?;
    let warnings = shards.check(cfg)?;
    let dev = &opts.device;
    let mat = |t: Tensor| -> Result<Linear> {
        let q = match opts.requant {
            Requant::F32 | Requant::Keep => QMatMul::Tensor(t),
            Requant::F16 => QMatMul::TensorF16(t.to_dtype(DType::F16)?),
            Requant::Q8_0 => QMatMul::from_qtensor(quantized_on_host(&t, GgmlDType::Q8_0)?)?,
            // Our 4-bit kernel is the CPU's; a device keeps the Q8_0 it runs fastest.
            Requant::Q4 if dev.is_cpu() => {
                QMatMul::from_qtensor(QTensor::quantize(&t, GgmlDType::Q4_1)?)?
            }
            Requant::Q4 => QMatMul::from_qtensor(quantized_on_host(&t, GgmlDType::Q8_0)?)?,
        };
        Ok(Linear::new(q)?)
    };
    let get = |n: &str| shards.get(n, dev);
    let h = cfg.hidden;
    let embed = get("model.embed_tokens.weight")?.reshape((cfg.vocab, h))?;
    let mut layers = Vec::with_capacity(cfg.n_layer);
    for i in 0..cfg.n_layer {
        let p = |n: &str| format!("model.layers.{i}.{n}.weight");
        let norm = |n: &str| -> Result<Tensor> { Ok(get(&p(n))?.reshape(h)?) };
        layers.push(LayerWeights {
            attn_norm: norm("input_layernorm")?,
            wq: mat(get(&p("self_attn.q_proj"))?)?,
            wk: mat(get(&p("self_attn.k_proj"))?)?,
            wv: mat(get(&p("self_attn.v_proj"))?)?,
            wo: mat(get(&p("self_attn.o_proj"))?)?,
            ffn_norm: norm("post_attention_layernorm")?,
            w_gate: mat(get(&p("mlp.gate_proj"))?)?,
            w_up: mat(get(&p("mlp.up_proj"))?)?,
            w_down: mat(get(&p("mlp.down_proj"))?)?,
        });
    }
    let final_norm = get("model.norm.weight")?.reshape(h)?;
    // Only a missing head falls back to the embedding, and only where the config ties
    // them; a head of the wrong shape or type was refused by `check`.
    let lm_head = if shards.index.contains_key("lm_head.weight") {
        mat(get("lm_head.weight")?.reshape((cfg.vocab, h))?)?
    } else if tied {
        mat(embed.clone())?
    } else {
        return Err(corrupt(
            dir,
            "missing tensor `lm_head.weight` (config.json sets tie_word_embeddings = false)",
        ));
    };
    Ok(Weights {
        embed,
        layers,
        final_norm,
        lm_head,
        quant_types: vec![("F32".into(), 0)],
        warnings,
    })
}
