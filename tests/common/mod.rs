//! Test helpers: a tiny random-weight Llama written as a real GGUF file (with a
//! byte-level tokenizer in its metadata), and access to the real model.
#![allow(dead_code)]

pub mod fixture;
pub mod llama_server;
pub mod serving;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::path::{Path, PathBuf};

/// Shape of the tiny test model: 2 layers, 4 query heads sharing 2 KV heads.
pub struct Tiny {
    pub arch: &'static str,
    pub dtype: GgmlDType,
    /// One tensor stored in this type instead (to test refusal of unsupported types).
    pub odd_dtype: Option<GgmlDType>,
    pub context: u32,
    pub seed: u64,
}

impl Default for Tiny {
    fn default() -> Self {
        Self {
            arch: "llama",
            dtype: GgmlDType::F32,
            odd_dtype: None,
            context: 64,
            seed: 1,
        }
    }
}

pub const HIDDEN: usize = 64;
pub const FFN: usize = 128;
pub const N_HEAD: usize = 4;
pub const N_KV: usize = 2;
pub const N_LAYER: usize = 2;

fn tokens() -> Vec<String> {
    let mut t: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut alpha: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet()
        .into_iter()
        .collect();
    alpha.sort();
    t.extend(alpha.into_iter().map(|c| c.to_string()));
    t.push("Ġt".into());
    t.push("he".into());
    t
}

/// Writes the tiny model to `path`.
pub fn write_tiny(path: &Path, spec: &Tiny) {
    let (md, tensors) = tiny_parts(spec);
    let md_ref: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_ref: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md_ref, &t_ref).unwrap();
}

/// Metadata entries in the order they are written.
pub type Metadata = Vec<(String, Value)>;

/// The tiny model's metadata and tensors, before they are written.
pub fn tiny_parts(spec: &Tiny) -> (Metadata, Vec<(String, QTensor)>) {
    let dev = Device::Cpu;
    let toks = tokens();
    let vocab = toks.len();
    let mut rng_state = spec.seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut rand = |shape: &[usize], scale: f32| -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                rng_state = rng_state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((rng_state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
            })
            .collect();
        Tensor::from_vec(v, shape, &dev).unwrap()
    };
    let q = |t: Tensor, d: GgmlDType| QTensor::quantize(&t, d).unwrap();
    let hd = HIDDEN / N_HEAD;
    let mut tensors: Vec<(String, QTensor)> = vec![
        (
            "token_embd.weight".into(),
            q(rand(&[vocab, HIDDEN], 1.0), spec.dtype),
        ),
        (
            "output_norm.weight".into(),
            q((rand(&[HIDDEN], 0.1) + 1.0).unwrap(), GgmlDType::F32),
        ),
    ];
    for l in 0..N_LAYER {
        let p = format!("blk.{l}");
        let s = 0.2;
        tensors.push((
            format!("{p}.attn_norm.weight"),
            q((rand(&[HIDDEN], 0.1) + 1.0).unwrap(), GgmlDType::F32),
        ));
        tensors.push((
            format!("{p}.ffn_norm.weight"),
            q((rand(&[HIDDEN], 0.1) + 1.0).unwrap(), GgmlDType::F32),
        ));
        tensors.push((
            format!("{p}.attn_q.weight"),
            q(rand(&[HIDDEN, HIDDEN], s), spec.dtype),
        ));
        tensors.push((
            format!("{p}.attn_k.weight"),
            q(rand(&[N_KV * hd, HIDDEN], s), spec.dtype),
        ));
        tensors.push((
            format!("{p}.attn_v.weight"),
            q(rand(&[N_KV * hd, HIDDEN], s), spec.dtype),
        ));
        tensors.push((
            format!("{p}.attn_output.weight"),
            q(rand(&[HIDDEN, HIDDEN], s), spec.dtype),
        ));
        tensors.push((
            format!("{p}.ffn_gate.weight"),
            q(rand(&[FFN, HIDDEN], s), spec.dtype),
        ));
        tensors.push((
            format!("{p}.ffn_up.weight"),
            q(rand(&[FFN, HIDDEN], s), spec.dtype),
        ));
        let down_dtype = if l == 0 {
            spec.odd_dtype.unwrap_or(spec.dtype)
        } else {
            spec.dtype
        };
        tensors.push((
            format!("{p}.ffn_down.weight"),
            q(rand(&[HIDDEN, FFN], s), down_dtype),
        ));
    }
    let a = spec.arch;
    let types: Vec<Value> = (0..vocab)
        .map(|i| Value::I32(if i < 3 { 3 } else { 1 }))
        .collect();
    let md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        (format!("{a}.block_count"), Value::U32(N_LAYER as u32)),
        (format!("{a}.embedding_length"), Value::U32(HIDDEN as u32)),
        (format!("{a}.feed_forward_length"), Value::U32(FFN as u32)),
        (
            format!("{a}.attention.head_count"),
            Value::U32(N_HEAD as u32),
        ),
        (
            format!("{a}.attention.head_count_kv"),
            Value::U32(N_KV as u32),
        ),
        (format!("{a}.rope.dimension_count"), Value::U32(hd as u32)),
        (format!("{a}.rope.freq_base"), Value::F32(10000.0)),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        ),
        (format!("{a}.context_length"), Value::U32(spec.context)),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("smollm".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(toks.iter().map(|t| Value::String(t.clone())).collect()),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(vec![
                Value::String("Ġ t".into()),
                Value::String("h e".into()),
            ]),
        ),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
    ];
    (md, tensors)
}

/// A tensor as a GGUF header declares it: any dims, any type id, whatever bytes follow.
#[derive(Clone)]
pub struct RawTensor {
    pub name: String,
    /// Innermost dimension first, as the file stores them.
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
}

/// The tiny model as raw tensors, for tests that declare shapes a real writer would refuse.
pub fn tiny_raw(spec: &Tiny) -> (Vec<(String, Value)>, Vec<RawTensor>) {
    let (md, tensors) = tiny_parts(spec);
    let raw = tensors
        .into_iter()
        .map(|(name, t)| RawTensor {
            name,
            dims: t.shape().dims().iter().rev().map(|&d| d as u64).collect(),
            type_id: match t.dtype() {
                GgmlDType::F32 => 0,
                GgmlDType::F16 => 1,
                GgmlDType::Q4_1 => 3,
                GgmlDType::Q8_0 => 8,
                GgmlDType::Q8_1 => 9,
                d => panic!("tiny_raw: add the type id of {d:?}"),
            },
            data: t.data().unwrap().to_vec(),
        })
        .collect();
    (md, raw)
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(x) => {
            out.extend((x.len() as u64).to_le_bytes());
            out.extend(x.as_bytes());
        }
        Value::Array(xs) => {
            let ty = xs.first().map(type_id).unwrap_or(4);
            out.extend(ty.to_le_bytes());
            out.extend((xs.len() as u64).to_le_bytes());
            for x in xs {
                put_value(out, x);
            }
        }
    }
}

fn type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

/// GGUF v3 bytes, written by hand so that tests can declare anything: the header exactly
/// as given, then each tensor's data at 32-byte aligned offsets.
pub fn raw_gguf(md: &[(String, Value)], tensors: &[RawTensor]) -> Vec<u8> {
    raw_gguf_at(md, tensors, None)
}

/// The same with the data offsets the header declares given (`None`: packed in order).
/// With offsets given, the data section is as long as the furthest tensor's end.
pub fn raw_gguf_at(md: &[(String, Value)], tensors: &[RawTensor], at: Option<&[u64]>) -> Vec<u8> {
    let align = |n: usize| n.div_ceil(32) * 32;
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((md.len() as u64).to_le_bytes());
    for (k, v) in md {
        put_value(&mut out, &Value::String(k.clone()));
        out.extend(type_id(v).to_le_bytes());
        put_value(&mut out, v);
    }
    let mut offset = 0usize;
    for t in tensors {
        put_value(&mut out, &Value::String(t.name.clone()));
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.type_id.to_le_bytes());
        out.extend((offset as u64).to_le_bytes());
        offset = align(offset + t.data.len());
    }
    out.resize(align(out.len()), 0);
    let Some(at) = at else {
        for t in tensors {
            out.extend(&t.data);
            out.resize(align(out.len()), 0);
        }
        return out;
    };
    // Patch the declared offsets: each is the last 8 bytes of its tensor's info.
    let mut pos = 24 + md_bytes(md);
    let mut data = Vec::new();
    for (t, &o) in tensors.iter().zip(at) {
        pos += 8 + t.name.len() + 4 + 8 * t.dims.len() + 4;
        out[pos..pos + 8].copy_from_slice(&o.to_le_bytes());
        pos += 8;
        // An offset past what a test file holds declares bytes the file does not have.
        let Some(end) = (o as usize)
            .checked_add(t.data.len())
            .filter(|&e| e < 1 << 26)
        else {
            continue;
        };
        if data.len() < end {
            data.resize(end, 0);
        }
        data[o as usize..end].copy_from_slice(&t.data);
    }
    out.extend(data);
    out.resize(align(out.len()), 0);
    out
}

/// Bytes the metadata section takes.
fn md_bytes(md: &[(String, Value)]) -> usize {
    let mut out = Vec::new();
    for (k, v) in md {
        put_value(&mut out, &Value::String(k.clone()));
        out.extend(type_id(v).to_le_bytes());
        put_value(&mut out, v);
    }
    out.len()
}

/// Replaces (or adds) one metadata entry.
pub fn set_meta(md: &mut Vec<(String, Value)>, key: &str, v: Value) {
    md.retain(|(k, _)| k != key);
    md.push((key.to_string(), v));
}

/// A tiny model file in a fresh temp dir (kept alive by the returned guard).
pub fn tiny_file(spec: &Tiny) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    write_tiny(&p, spec);
    (dir, p)
}

/// The real SmolLM2 GGUF, fetched into the cache if needed (CI fetches it before tests).
pub fn real_model() -> PathBuf {
    let (p, _) = inferlab::model::source::resolve(None, &mut |_| {})
        .expect("the real model is needed: run `cargo run --release -- model fetch`");
    p
}

/// The built binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_inferlab"))
}

/// The default tiny model loaded with f32 weights (exact reference arithmetic).
pub fn tiny_f32() -> (tempfile::TempDir, inferlab::model::Model) {
    tiny_f32_with_context(Tiny::default().context)
}

/// The same with room for `context` tokens (a chat-templated prompt needs ~100).
pub fn tiny_f32_with_context(context: u32) -> (tempfile::TempDir, inferlab::model::Model) {
    let (d, p) = tiny_file(&Tiny {
        context,
        ..Tiny::default()
    });
    let opts = inferlab::model::LoadOptions {
        requant: inferlab::model::Requant::F32,
        device: Device::Cpu,
    };
    (d, inferlab::model::Model::load(&p, &opts).unwrap())
}

/// Largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
