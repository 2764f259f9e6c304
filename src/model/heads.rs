//! Head layouts on one set of trained weights.
//!
//! SmolLM2 is trained with grouped-query attention (GQA): 9 query heads read 3 KV heads.
//! - **MHA** gives every query head its own K/V head by copying the projection rows of
//!   its group's KV head: the same function, identical logits, 3× the KV cache.
//! - **MQA** makes one K/V head by mean-pooling the K and V projections of all KV heads
//!   (the checkpoint conversion of Ainslie et al. 2023): a cheaper but *different* model.

use super::config::LlamaConfig;
use crate::kv::KvElem;
use candle_core::quantized::{ggml_file, GgmlDType, QMatMul, QTensor};
use candle_core::{Result, Tensor};
use serde::{Deserialize, Serialize};

/// How query heads map onto K/V heads.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
#[derive(strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum HeadLayout {
    Mha,
    #[default]
    Gqa,
    Mqa,
}

/// A layout name that is not one of mha, gqa, mqa, or a layout the model can't take.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("unknown head layout `{0}` (expected mha, gqa or mqa)")]
    Unknown(String),
    #[error(
        "{layout:?} needs the {n_head} query heads to divide evenly over {n_kv_head} KV heads"
    )]
    Indivisible {
        layout: HeadLayout,
        n_head: usize,
        n_kv_head: usize,
    },
    #[error("building the {0} projections: {1}")]
    Build(HeadLayout, String),
    #[error(
        "a KV cache of {0} runs on the CPU only; on a device it stores f32 (use --kv-elem f32)"
    )]
    KvElemOnDevice(crate::kv::KvElem),
    #[error(
        "the batched attention route runs the naive kernel over f32 or f16 KV; not {1} over \
         {0:?} (use --attention-route host)"
    )]
    NotBatched(crate::kv::KvElem, &'static str),
}

impl std::str::FromStr for HeadLayout {
    type Err = LayoutError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "mha" => Ok(Self::Mha),
            "gqa" => Ok(Self::Gqa),
            "mqa" => Ok(Self::Mqa),
            _ => Err(LayoutError::Unknown(s.to_string())),
        }
    }
}

impl std::fmt::Display for HeadLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Mha => "MHA",
            Self::Gqa => "GQA",
            Self::Mqa => "MQA",
        })
    }
}

impl HeadLayout {
    /// All three, in the order the UI cycles them.
    pub const ALL: [HeadLayout; 3] = [HeadLayout::Mha, HeadLayout::Gqa, HeadLayout::Mqa];

    /// KV heads this layout stores for a model trained as `cfg`.
    pub fn kv_heads(self, cfg: &LlamaConfig) -> usize {
        match self {
            Self::Mha => cfg.n_head,
            Self::Gqa => cfg.n_kv_head,
            Self::Mqa => 1,
        }
    }

    /// For each query head, the KV head it reads.
    pub fn query_to_kv(self, cfg: &LlamaConfig) -> Vec<usize> {
        let group = cfg.n_head / self.kv_heads(cfg);
        (0..cfg.n_head).map(|h| h / group).collect()
    }

    /// KV-cache bytes per token under this layout.
    pub fn kv_bytes_per_token(self, cfg: &LlamaConfig, elem: KvElem) -> usize {
        cfg.kv_bytes_per_token_with(self.kv_heads(cfg), elem)
    }

    /// Checks the trained head counts allow this layout.
    pub fn check(self, cfg: &LlamaConfig) -> std::result::Result<(), LayoutError> {
        if cfg.n_kv_head == 0 || !cfg.n_head.is_multiple_of(cfg.n_kv_head) {
            return Err(LayoutError::Indivisible {
                layout: self,
                n_head: cfg.n_head,
                n_kv_head: cfg.n_kv_head,
            });
        }
        Ok(())
    }
}

/// Builds the K or V projection of `layout` from the trained (GQA) projection `w`,
/// whose rows are `n_kv_head` blocks of `head_dim`.
pub fn derive_projection(w: &QMatMul, cfg: &LlamaConfig, layout: HeadLayout) -> Result<QMatMul> {
    let hd = cfg.head_dim;
    match layout {
        HeadLayout::Gqa => Ok(w.clone()),
        HeadLayout::Mha => {
            // Query head h reads KV head h / group: copy that head's rows, bytes unchanged,
            // so the function (and every logit) stays exactly the same.
            let group = cfg.group_size();
            let rows: Vec<usize> = (0..cfg.n_head)
                .flat_map(|h| {
                    let g = h / group;
                    (g * hd..(g + 1) * hd).collect::<Vec<_>>()
                })
                .collect();
            select_rows(w, &rows)
        }
        HeadLayout::Mqa => {
            let f = dequantize(w)?; // (n_kv*hd, hidden)
            let hidden = f.dim(1)?;
            let pooled = f.reshape((cfg.n_kv_head, hd, hidden))?.mean(0)?;
            requantize_like(w, pooled)
        }
    }
}

fn dequantize(w: &QMatMul) -> Result<Tensor> {
    match w {
        QMatMul::QTensor(q) => q.dequantize(&q.device()),
        QMatMul::Tensor(t) | QMatMul::TensorF16(t) => t.to_dtype(candle_core::DType::F32),
    }
}

fn requantize_like(w: &QMatMul, t: Tensor) -> Result<QMatMul> {
    // Pooled rows are new numbers, so they need a fresh quantization; Q8_0 is the
    // fast type whenever the source was quantized at all.
    match w {
        QMatMul::QTensor(q) if q.dtype() != GgmlDType::F32 && t.dim(1)? % 32 == 0 => {
            QMatMul::from_qtensor(QTensor::quantize(&t, GgmlDType::Q8_0)?)
        }
        _ => Ok(QMatMul::Tensor(t)),
    }
}

fn select_rows(w: &QMatMul, rows: &[usize]) -> Result<QMatMul> {
    match w {
        QMatMul::QTensor(q) => {
            let (n, k) = q.shape().dims2()?;
            let row_bytes = q.storage_size_in_bytes() / n;
            let data = q.data()?;
            let mut out = Vec::with_capacity(rows.len() * row_bytes);
            for &r in rows {
                out.extend_from_slice(&data[r * row_bytes..(r + 1) * row_bytes]);
            }
            let qt =
                ggml_file::qtensor_from_ggml(q.dtype(), &out, vec![rows.len(), k], &q.device())?;
            QMatMul::from_qtensor(qt)
        }
        QMatMul::Tensor(t) | QMatMul::TensorF16(t) => {
            let idx = Tensor::new(
                rows.iter().map(|&r| r as u32).collect::<Vec<_>>(),
                t.device(),
            )?;
            Ok(QMatMul::Tensor(t.index_select(&idx, 0)?))
        }
    }
}
