//! The weights of a Llama model, held as candle tensors, from a GGUF file or an HF
//! safetensors directory.

use super::config::LlamaConfig;
use super::error::{Malformed, ModelError, Result};
use super::linear::Linear;
use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Tensor};
use std::path::Path;

/// Whether to re-quantize matrices at load time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Requant {
    /// Keep the file's own quant types (needed for bit-exact parity with candle).
    Keep,
    /// Re-quantize every matrix to Q8_0: candle's Q4_1 dot product is scalar while
    /// Q8_0 has SIMD paths, so this is much faster and slightly *more* precise than
    /// the Q4_1 it came from.
    #[default]
    #[strum(serialize = "q8_0")]
    Q8_0,
    /// Dequantize to f32 (slow, exact reference for tests).
    F32,
    /// Dequantize to f16, dense: a GPU's default (its matmuls take any number of rows
    /// at full speed); 2 bytes a weight.
    F16,
    /// Keep (or make) 4-bit Q4_1 blocks, on our 4-bit kernel: 20 bytes per 32 weights
    /// where Q8_0 takes 34, so decode at batch one reads about 40% fewer bytes.
    Q4,
}

impl Requant {
    /// The default for a device: Q8_0 on the CPU (our kernels), f16 on a GPU.
    pub fn default_for(device: &candle_core::Device) -> Self {
        if device.is_cpu() {
            Requant::Q8_0
        } else {
            Requant::F16
        }
    }

    /// The weights the app's `W` cycles through: 8-bit, 4-bit, and the f32 reference.
    pub const LIVE: [Requant; 3] = [Requant::Q8_0, Requant::Q4, Requant::F32];

    /// The name flags, lessons and the header use.
    pub const fn name(self) -> &'static str {
        match self {
            Requant::Keep => "keep",
            Requant::Q8_0 => "q8_0",
            Requant::Q4 => "q4",
            Requant::F32 => "f32",
            Requant::F16 => "f16",
        }
    }

    /// The next of [`Self::LIVE`] (the file's own types go to Q8_0).
    pub fn next_live(self) -> Self {
        let i = Self::LIVE.iter().position(|&w| w == self);
        i.map_or(Requant::Q8_0, |i| Self::LIVE[(i + 1) % Self::LIVE.len()])
    }

    /// Bytes a matrix of `elems` elements, `stored` bytes in the file, takes once loaded.
    pub fn held_bytes(self, elems: u64, stored: u64) -> u64 {
        match self {
            Requant::Keep => stored,
            Requant::Q8_0 => elems / 32 * 34,
            // An upper bound: the file's 8-bit matrices stay 8-bit.
            Requant::Q4 => elems / 32 * 34,
            Requant::F32 => elems.saturating_mul(4),
            Requant::F16 => elems.saturating_mul(2),
        }
    }
}

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub requant: Requant,
    pub device: Device,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            requant: Requant::default(),
            device: Device::Cpu,
        }
    }
}

/// The shape (outermost first) every tensor the forward pass reads must have, in GGUF's
/// names.
pub(super) fn expected_shapes(cfg: &LlamaConfig) -> Vec<(String, Vec<usize>)> {
    let (h, q, kv, f) = (
        cfg.hidden,
        cfg.n_head * cfg.head_dim,
        cfg.n_kv_head * cfg.head_dim,
        cfg.ffn,
    );
    let mut v = vec![
        ("token_embd.weight".to_string(), vec![cfg.vocab, h]),
        ("output_norm.weight".to_string(), vec![h]),
    ];
    for i in 0..cfg.n_layer {
        let b = |n: &str| format!("blk.{i}.{n}.weight");
        v.push((b("attn_norm"), vec![h]));
        v.push((b("ffn_norm"), vec![h]));
        v.push((b("attn_q"), vec![q, h]));
        v.push((b("attn_k"), vec![kv, h]));
        v.push((b("attn_v"), vec![kv, h]));
        v.push((b("attn_output"), vec![h, q]));
        v.push((b("ffn_gate"), vec![f, h]));
        v.push((b("ffn_up"), vec![f, h]));
        v.push((b("ffn_down"), vec![h, f]));
    }
    v
}

/// Every tensor present with the shape the config implies (norms may be stored as
/// `(1, h)`); an `output.weight`, when there is one, shaped like the embedding.
fn check_shapes(ct: &gguf_file::Content, cfg: &LlamaConfig) -> std::result::Result<(), Malformed> {
    let mut want = expected_shapes(cfg);
    if ct.tensor_infos.contains_key("output.weight") {
        want.push(("output.weight".into(), vec![cfg.vocab, cfg.hidden]));
    }
    for (name, dims) in want {
        let info = ct
            .tensor_infos
            .get(&name)
            .ok_or_else(|| format!("missing tensor `{name}`"))?;
        if !super::audit::same_shape(info.shape.dims(), &dims) {
            return Err(Malformed(format!(
                "tensor `{name}` has shape {:?}, but the metadata implies {dims:?}",
                info.shape.dims()
            )));
        }
        if dims.len() == 2 && dims[1] % info.ggml_dtype.block_size() != 0 {
            return Err(Malformed(format!(
                "tensor `{name}`: rows of {} are not whole {:?} blocks",
                dims[1], info.ggml_dtype
            )));
        }
    }
    Ok(())
}

/// Everything about a GGUF checked before a tensor is read: shapes against the config,
/// every tensor one the forward pass reads, no feature it lacks, and what loading under
/// `requant` allocates bounded by the file's size.
fn check_file(
    ct: &gguf_file::Content,
    cfg: &LlamaConfig,
    requant: Requant,
    file_len: u64,
) -> std::result::Result<(), Malformed> {
    let names: Vec<String> = expected_shapes(cfg).into_iter().map(|(n, _)| n).collect();
    check_shapes(ct, cfg)?;
    super::audit::check_tensors(ct, &names, cfg.n_layer)?;
    super::audit::check_features(ct, &cfg.architecture)?;
    let mode = format!("{requant:?}");
    super::audit::check_allocation(ct, &mode, |e, s| requant.held_bytes(e, s), file_len)
}

/// One transformer block's weights.
pub struct LayerWeights {
    pub attn_norm: Tensor,
    pub wq: Linear,
    pub wk: Linear,
    pub wv: Linear,
    pub wo: Linear,
    pub ffn_norm: Tensor,
    pub w_gate: Linear,
    pub w_up: Linear,
    pub w_down: Linear,
}

/// All weights of the model.
pub struct Weights {
    /// Token embedding table, dequantized: a lookup, not a matmul.
    pub embed: Tensor,
    pub layers: Vec<LayerWeights>,
    pub final_norm: Tensor,
    /// LM head; in SmolLM2 it is tied to the embedding (there is no `output.weight`).
    pub lm_head: Linear,
    /// The quant types found in the file, with how many tensors have each.
    pub quant_types: Vec<(String, usize)>,
    /// What loading ignored without changing the math, for the user to read.
    pub warnings: Vec<String>,
}

/// Reads one tensor's bytes, checks its scales (or values) are finite, and makes it a
/// tensor on `dev`. The header was bounded by `gguf::open`, so the size is known good.
fn read_tensor(
    ct: &gguf_file::Content,
    file: &mut std::fs::File,
    name: &str,
    dev: &Device,
) -> std::result::Result<QTensor, Malformed> {
    use std::io::{Read, Seek, SeekFrom};
    let info = ct.tensor_infos.get(name).ok_or("missing")?;
    let n = super::gguf::tensor_bytes(info.shape.elem_count() as u64, info.ggml_dtype)?;
    let mut bytes = vec![0u8; n as usize];
    file.seek(SeekFrom::Start(ct.tensor_data_offset + info.offset))
        .and_then(|_| file.read_exact(&mut bytes))
        .map_err(|e| Malformed(e.to_string()))?;
    super::audit::finite_ggml(info.ggml_dtype, &bytes)?;
    candle_core::quantized::ggml_file::qtensor_from_ggml(
        info.ggml_dtype,
        &bytes,
        info.shape.dims().to_vec(),
        dev,
    )
    .map_err(|e| Malformed(e.to_string()))
}

fn to_matmul(t: QTensor, requant: Requant, device: &Device) -> Result<Linear> {
    let t = match (requant, t.dtype()) {
        // The file's own types on candle's own kernels: the parity reference.
        (Requant::Keep, _) => return Ok(Linear::candle_only(QMatMul::from_qtensor(t)?)),
        (Requant::Q8_0, GgmlDType::Q8_0) => t,
        (Requant::Q8_0, _) => quantized_on_host(&t.dequantize(device)?, GgmlDType::Q8_0)?,
        (Requant::F32, _) => return Ok(Linear::new(QMatMul::Tensor(t.dequantize(device)?))?),
        (Requant::F16, _) => {
            return Ok(Linear::new(QMatMul::TensorF16(t.dequantize_f16(device)?))?)
        }
        // On the CPU our 4-bit kernel for what the file stores in 4 bits; what it keeps at
        // 8 bits (SmolLM2's tied embedding and LM head) stays so, as llama.cpp's 4-bit
        // files keep their output matrix finer: rounded to 4 bits it cost 13 points of
        // top-1 agreement with f32. A device keeps the Q8_0 it runs fastest.
        (Requant::Q4, GgmlDType::Q4_1) if device.is_cpu() => t,
        (Requant::Q4, GgmlDType::Q8_0) => t,
        (Requant::Q4, GgmlDType::Q4_0 | GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16)
            if device.is_cpu() && t.shape().dims().last().is_some_and(|k| k % 32 == 0) =>
        {
            let f = t.dequantize(device)?;
            QTensor::quantize(&f, GgmlDType::Q4_1)?
        }
        (Requant::Q4, _) => quantized_on_host(&t.dequantize(device)?, GgmlDType::Q8_0)?,
    };
    Ok(Linear::new(QMatMul::from_qtensor(t)?)?)
}

/// `f` quantized to `dtype` on the host, then put where `f` is. candle's CUDA quantizer
/// leaves the padding of its blocks uninitialized, which its matmul then reads; its GGUF
/// load path, used here to upload, zero-fills it.
pub(crate) fn quantized_on_host(f: &Tensor, dtype: GgmlDType) -> candle_core::Result<QTensor> {
    if f.device().is_cpu() {
        return QTensor::quantize(f, dtype);
    }
    let host = QTensor::quantize(&f.to_device(&Device::Cpu)?, dtype)?;
    let dims = f.dims().to_vec();
    candle_core::quantized::ggml_file::qtensor_from_ggml(dtype, &host.data()?, dims, f.device())
}

/// Layer `i`'s tensors, read through `get`; the matrices as `opts.requant` asks.
fn gguf_layer(
    get: &mut dyn FnMut(&str) -> Result<QTensor>,
    i: usize,
    opts: &LoadOptions,
) -> Result<LayerWeights> {
    let dev = &opts.device;
    let mut m = |n: &str| -> Result<Linear> {
        to_matmul(get(&format!("blk.{i}.{n}.weight"))?, opts.requant, dev)
    };
    Ok(LayerWeights {
        wq: m("attn_q")?,
        wk: m("attn_k")?,
        wv: m("attn_v")?,
        wo: m("attn_output")?,
        w_gate: m("ffn_gate")?,
        w_up: m("ffn_up")?,
        w_down: m("ffn_down")?,
        attn_norm: get(&format!("blk.{i}.attn_norm.weight"))?.dequantize(dev)?,
        ffn_norm: get(&format!("blk.{i}.ffn_norm.weight"))?.dequantize(dev)?,
    })
}

impl Weights {
    /// Loads from a GGUF file whose header `gguf::open` has read and bounded. Every
    /// tensor's shape is checked against `cfg` before any of them is read, so a file whose
    /// shapes disagree with its own metadata is refused without allocating.
    pub fn from_gguf(
        path: &Path,
        ct: &gguf_file::Content,
        file: &mut std::fs::File,
        cfg: &LlamaConfig,
        opts: &LoadOptions,
    ) -> Result<Self> {
        let refuse = |reason: Malformed| ModelError::CorruptFile {
            path: path.to_path_buf(),
            reason,
        };
        let file_len = file
            .metadata()
            .map_err(|e| refuse(Malformed(e.to_string())))?
            .len();
        check_file(ct, cfg, opts.requant, file_len).map_err(refuse)?;
        let dev = &opts.device;
        let mut get = |name: &str| -> Result<QTensor> {
            read_tensor(ct, file, name, dev)
                .map_err(|e| refuse(Malformed(format!("tensor `{name}`: {e}"))))
        };
        let embed_q = get("token_embd.weight")?;
        let embed = embed_q.dequantize(dev)?;
        let final_norm = get("output_norm.weight")?.dequantize(dev)?;
        let lm_head = if ct.tensor_infos.contains_key("output.weight") {
            to_matmul(get("output.weight")?, opts.requant, dev)?
        } else {
            to_matmul(embed_q, opts.requant, dev)?
        };
        let layers = (0..cfg.n_layer)
            .map(|i| gguf_layer(&mut get, i, opts))
            .collect::<Result<Vec<_>>>()?;
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        for info in ct.tensor_infos.values() {
            *counts.entry(format!("{:?}", info.ggml_dtype)).or_default() += 1;
        }
        Ok(Self {
            embed,
            layers,
            final_norm,
            lm_head,
            quant_types: counts.into_iter().collect(),
            warnings: Vec::new(),
        })
    }
}
