//! A model file checked against what inferlab computes. A file that parses is not yet a
//! model inferlab runs faithfully: a bias it does not add, a RoPE scaling it does not
//! apply or a layer it does not run would be ignored, and the output would look
//! plausible while being another model's. So everything a file declares is either read
//! by the forward pass or refused, naming the key or tensor:
//!
//! - every tensor is one the forward pass reads ([`check_tensors`]), with a type that fits
//!   its role (norm weights are F32);
//! - no metadata key asks for a feature the forward pass lacks ([`check_features`]);
//! - special token ids are non-negative integers inside the vocabulary ([`special_id`]);
//! - every float weight and every quantized block's scale is finite ([`finite_ggml`],
//!   [`finite_f32`]), checked once at load;
//! - what loading allocates is bounded by the file's size ([`check_allocation`]).

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::GgmlDType;

pub use super::error::Malformed;

/// What a tensor name is, for a model of `n_layer` layers: a weight the forward pass
/// reads, or the feature it would need and inferlab lacks.
fn unknown_tensor(name: &str, n_layer: usize) -> Malformed {
    let feature = if name.ends_with(".bias") {
        "bias terms".to_string()
    } else if name.starts_with("rope_freqs") || name.contains("rope_factors") {
        "RoPE frequency factors (Llama 3 style RoPE scaling)".to_string()
    } else if let Some(i) = name
        .strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|i| i.parse::<usize>().ok())
    {
        if i >= n_layer {
            format!("layers beyond block_count = {n_layer}")
        } else {
            "this per-layer tensor".to_string()
        }
    } else {
        "this tensor".to_string()
    };
    Malformed(format!(
        "inferlab does not implement {feature} (tensor `{name}`); it runs Llama models without them"
    ))
}

/// Every tensor in the file is one the forward pass reads, with a type fit for its role.
/// `expected` is the names the config implies (`output.weight` is optional).
pub fn check_tensors(ct: &Content, expected: &[String], n_layer: usize) -> Result<(), Malformed> {
    let known: std::collections::HashSet<&str> = expected.iter().map(|s| s.as_str()).collect();
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort();
    for name in names {
        if !known.contains(name.as_str()) && name != "output.weight" {
            return Err(unknown_tensor(name, n_layer));
        }
        let dtype = ct.tensor_infos[name].ggml_dtype;
        // Norm weights scale every activation; inferlab (and llama.cpp's converter) keeps
        // them F32. A quantized norm is a damaged or foreign file.
        if name.ends_with("norm.weight") && dtype != GgmlDType::F32 {
            return Err(Malformed(format!(
                "tensor `{name}` is stored as {dtype:?}; norm weights must be F32"
            )));
        }
    }
    Ok(())
}

/// A key's value when it is set to something other than "off".
fn active(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if s == "none" || s.is_empty() => None,
        Value::Bool(false) => None,
        Value::F32(x) if *x == 0.0 || *x == 1.0 => None,
        Value::F64(x) if *x == 0.0 || *x == 1.0 => None,
        Value::U32(0) | Value::U64(0) | Value::I32(0) | Value::I64(0) => None,
        Value::String(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    }
}

/// No metadata key asks for what the forward pass does not compute. Keys inferlab does
/// not know at all (authors, licenses, quantization notes) change no math and pass.
pub fn check_features(ct: &Content, arch: &str) -> Result<(), Malformed> {
    const FEATURES: &[(&str, &str)] = &[
        ("rope.scaling.type", "RoPE scaling"),
        ("rope.scaling.factor", "RoPE scaling"),
        ("rope.freq_scale", "RoPE scaling"),
        ("expert_count", "mixture-of-experts layers"),
        ("attention.sliding_window", "sliding-window attention"),
        ("attention.clamp_kqv", "clamped Q, K and V"),
        ("logit_scale", "scaled logits"),
        ("attention.scale", "a custom attention scale"),
        ("embedding_scale", "a scaled embedding"),
        ("residual_scale", "a scaled residual"),
    ];
    // Keys whose unusual value is "true", or, for the causal mask, "false".
    let flags = [
        (
            format!("{arch}.attention.causal"),
            false,
            "attention without the causal mask",
        ),
        (
            "tokenizer.ggml.add_bos_token".into(),
            true,
            "a BOS token added before the text",
        ),
        (
            "tokenizer.ggml.add_eos_token".into(),
            true,
            "an EOS token added after the text",
        ),
    ];
    for (key, unusual, feature) in flags {
        match ct.metadata.get(&key) {
            Some(Value::Bool(b)) if *b == unusual => {
                return Err(Malformed(format!(
                    "inferlab does not implement {feature} (key `{key}` = {b})"
                )))
            }
            Some(Value::Bool(_)) | None => {}
            Some(other) => {
                return Err(Malformed(format!("`{key}` = {other:?}: not true or false")))
            }
        }
    }
    for (suffix, feature) in FEATURES {
        let key = format!("{arch}.{suffix}");
        let v = ct.metadata.get(&key);
        // For the attention scale 0 means "the default 1/√d"; 1.0 is a real scale.
        let v = match (*suffix, v) {
            ("attention.scale", Some(Value::F32(x))) if *x != 0.0 => Some(format!("{x}")),
            (_, v) => v.and_then(active),
        };
        if let Some(v) = v {
            return Err(Malformed(format!(
                "inferlab does not implement {feature} (key `{key}` = {v})"
            )));
        }
    }
    Ok(())
}

/// Why a special token id is refused.
#[derive(Debug, thiserror::Error)]
pub enum BadId {
    #[error("{0}")]
    NotAnId(String),
    #[error("{0}")]
    OutsideVocabulary(String),
}

/// A special token id (`tokenizer.ggml.eos_token_id` …): absent is `None`; present it must
/// be a non-negative integer inside the vocabulary. Treating a bad one as absent would let
/// chat generation run past `<|im_end|>` without a word.
pub fn special_id(ct: &Content, key: &str, vocab: usize) -> Result<Option<u32>, BadId> {
    let Some(v) = ct.metadata.get(key) else {
        return Ok(None);
    };
    let id: Option<u64> = match v {
        Value::U8(x) => Some(u64::from(*x)),
        Value::U16(x) => Some(u64::from(*x)),
        Value::U32(x) => Some(u64::from(*x)),
        Value::U64(x) => Some(*x),
        Value::I8(x) => u64::try_from(*x).ok(),
        Value::I16(x) => u64::try_from(*x).ok(),
        Value::I32(x) => u64::try_from(*x).ok(),
        Value::I64(x) => u64::try_from(*x).ok(),
        _ => None,
    };
    let Some(id) = id else {
        return Err(BadId::NotAnId(format!(
            "`{key}` = {v:?}: a token id must be a non-negative integer"
        )));
    };
    if id >= vocab as u64 {
        return Err(BadId::OutsideVocabulary(format!(
            "`{key}` = {id} is outside the vocabulary of {vocab} tokens"
        )));
    }
    Ok(Some(id as u32))
}

/// Whether the IEEE half-precision value in `bits` is finite.
fn f16_finite(bits: u16) -> bool {
    bits & 0x7c00 != 0x7c00
}

/// Byte offsets of the f16 scales inside one block of `dtype`, and the block's size.
fn scale_offsets(dtype: GgmlDType) -> (&'static [usize], usize) {
    use GgmlDType::*;
    let offsets: &'static [usize] = match dtype {
        Q4_0 | Q5_0 | Q8_0 => &[0],
        Q4_1 | Q5_1 | Q4K | Q5K => &[0, 2],
        // Q2K: scales[16], qs[64], then d and dmin.
        Q2K => &[80, 82],
        // Q3K: hmask[32], qs[64], scales[12], then d.
        Q3K => &[108],
        // Q6K: ql[128], qh[64], scales[16], then d.
        Q6K => &[208],
        _ => &[],
    };
    (offsets, dtype.type_size())
}

/// Every scale of a quantized tensor, and every value of a float one, is finite. `bytes`
/// are the tensor's raw GGML bytes; the error names the first bad block or element.
pub fn finite_ggml(dtype: GgmlDType, bytes: &[u8]) -> Result<(), Malformed> {
    let half = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
    match dtype {
        GgmlDType::F32 => {
            let bad = bytes.chunks_exact(4).position(|b| {
                u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & 0x7f80_0000 == 0x7f80_0000
            });
            bad.map_or(Ok(()), |i| {
                Err(Malformed(format!("element {i} is NaN or infinite")))
            })
        }
        GgmlDType::F16 => {
            let bad = bytes.chunks_exact(2).position(|b| !f16_finite(half(b)));
            bad.map_or(Ok(()), |i| {
                Err(Malformed(format!("element {i} is NaN or infinite")))
            })
        }
        GgmlDType::BF16 => {
            let bad = bytes
                .chunks_exact(2)
                .position(|b| half(b) & 0x7f80 == 0x7f80);
            bad.map_or(Ok(()), |i| {
                Err(Malformed(format!("element {i} is NaN or infinite")))
            })
        }
        _ => {
            let (offsets, size) = scale_offsets(dtype);
            let bad = bytes
                .chunks_exact(size)
                .position(|b| offsets.iter().any(|&o| !f16_finite(half(&b[o..]))));
            bad.map_or(Ok(()), |i| {
                Err(Malformed(format!("block {i} has a NaN or infinite scale")))
            })
        }
    }
}

/// Every value is finite (safetensors weights, after conversion to f32).
pub fn finite_f32(values: &[f32]) -> Result<(), Malformed> {
    match values.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(Malformed(format!("element {i} is NaN or infinite"))),
        None => Ok(()),
    }
}

/// What loading allocates is bounded by what the file holds: at most 4× its size plus
/// 1 GB. Tensor ranges are disjoint, so a small file cannot declare a large model; this
/// catches the expansion that remains (a Q2K file dequantized to f32 is 12× its size).
/// `matrix_bytes(elems, stored)` is what one matrix takes once loaded, in the load mode
/// called `mode`.
pub fn check_allocation(
    ct: &Content,
    mode: &str,
    matrix_bytes: impl Fn(u64, u64) -> u64,
    file_len: u64,
) -> Result<(), Malformed> {
    let mut total = 0u64;
    let mut largest = 0u64;
    let tied = !ct.tensor_infos.contains_key("output.weight");
    for (name, info) in &ct.tensor_infos {
        let elems = info.shape.elem_count() as u64;
        let stored = super::gguf::tensor_bytes(elems, info.ggml_dtype).unwrap_or(u64::MAX);
        let f32_bytes = elems.saturating_mul(4);
        let bytes = if name.ends_with("norm.weight") {
            f32_bytes
        } else if name == "token_embd.weight" {
            // Dequantized for lookups; tied, it is the LM head's matrix as well.
            let head = if tied { matrix_bytes(elems, stored) } else { 0 };
            f32_bytes.saturating_add(head)
        } else {
            let held = matrix_bytes(elems, stored);
            if held != stored {
                // Converted through an f32 copy.
                largest = largest.max(f32_bytes);
            }
            held
        };
        total = total.saturating_add(bytes);
    }
    // Converting goes through one f32 copy of a tensor at a time.
    total = total.saturating_add(largest);
    let bound = file_len.saturating_mul(4).saturating_add(1 << 30);
    if total > bound {
        return Err(Malformed(format!(
            "loading its weights ({mode}) would take {} MB, more than inferlab allows for a file of {} MB (4× its size plus 1 GB)",
            total / 1_000_000,
            file_len / 1_000_000
        )));
    }
    Ok(())
}

/// The config's sizes agree with the tensors' shapes only up to leading 1s: `(1, 576)`
/// and `(576)` are the same norm. Strips them for comparison.
pub fn squeeze(dims: &[usize]) -> &[usize] {
    let first = dims.iter().position(|&d| d != 1).unwrap_or(dims.len());
    let first = first.min(dims.len().saturating_sub(1));
    &dims[first..]
}

/// A tensor's shape as stored against the one the forward pass reads: the same rank and
/// sizes, except that a vector (a norm) may be stored as `(1, n)`. A rank the forward
/// pass would index otherwise is refused here, with the tensor's name, not found later.
pub fn same_shape(got: &[usize], want: &[usize]) -> bool {
    let rank = got.len() == want.len() || (want.len() == 1 && got.len() == 2 && got[0] == 1);
    rank && squeeze(got) == squeeze(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nan_scale_is_found_in_every_quant_type() {
        use GgmlDType::*;
        for dtype in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K] {
            let size = dtype.type_size();
            let mut bytes = vec![0u8; 3 * size];
            assert!(finite_ggml(dtype, &bytes).is_ok(), "{dtype:?}");
            for &o in scale_offsets(dtype).0 {
                let mut b = bytes.clone();
                b[size + o..size + o + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
                let e = finite_ggml(dtype, &b).unwrap_err();
                assert!(e.0.contains("block 1"), "{dtype:?}: {e}");
            }
            // The quantized values themselves are integers: any byte is fine.
            bytes.iter_mut().for_each(|b| *b = 0x11);
            assert!(finite_ggml(dtype, &bytes).is_ok(), "{dtype:?}");
        }
        let f = [1.0f32, f32::INFINITY];
        let b: Vec<u8> = f.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert!(finite_ggml(F32, &b).unwrap_err().0.contains("element 1"));
    }

    #[test]
    fn loading_a_heavily_quantized_file_as_f32_is_bounded_by_the_file() {
        use candle_core::quantized::gguf_file::{TensorInfo, VersionedMagic};
        // A 4096 × 262144 Q2K matrix: 352 MB in the file, 4.3 GB as f32.
        let info = TensorInfo {
            ggml_dtype: GgmlDType::Q2K,
            shape: (4096usize, 262_144usize).into(),
            offset: 0,
        };
        let stored = 4096 * 262_144 / 256 * 84;
        let ct = Content {
            magic: VersionedMagic::GgufV3,
            metadata: Default::default(),
            tensor_infos: [("blk.0.ffn_up.weight".to_string(), info)].into(),
            tensor_data_offset: 0,
        };
        let f32_bytes = |e: u64, _| e * 4;
        let e = check_allocation(&ct, "F32", f32_bytes, stored).unwrap_err();
        assert!(e.0.contains("F32") && e.0.contains("4× its size"), "{e}");
        let as_stored = |_, s: u64| s;
        // Kept as stored, only the one f32 copy made while converting is added.
        assert!(check_allocation(&ct, "Keep", as_stored, stored).is_ok());
    }

    #[test]
    fn squeeze_keeps_a_lone_one() {
        assert_eq!(squeeze(&[1, 576]), &[576]);
        assert_eq!(squeeze(&[1, 1]), &[1]);
        assert_eq!(squeeze(&[576, 1]), &[576, 1]);
        assert!(same_shape(&[1, 576], &[576]) && same_shape(&[576], &[576]));
        assert!(!same_shape(&[1, 1, 576], &[576]) && !same_shape(&[1, 8, 8], &[8, 8]));
    }
}
