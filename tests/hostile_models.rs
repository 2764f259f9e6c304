//! Crafted model files: each must load or be refused with a message naming the file and
//! the field, never panic, wrap a size, write out of bounds or allocate without bound.
//! One named test per case found by hand, then a mutation fuzz over a valid tiny file.

mod common;

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::GgmlDType;
use candle_core::Device;
use common::*;
use inferlab::model::{LoadOptions, Logits, Model, Requant};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn q8() -> Tiny {
    Tiny {
        dtype: GgmlDType::Q8_0,
        ..Default::default()
    }
}

fn load(path: &Path) -> Result<Model, String> {
    let opts = LoadOptions {
        requant: Requant::Q8_0,
        device: Device::Cpu,
    };
    Model::load(path, &opts).map_err(|e| e.to_string())
}

/// Writes the parts into a temp file and loads it; the error text on refusal.
fn refuse(md: &[(String, Value)], ts: &[RawTensor]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("crafted.gguf");
    std::fs::write(&p, raw_gguf(md, ts)).unwrap();
    let t = Instant::now();
    let e = match load(&p) {
        Ok(_) => panic!("a crafted file loaded"),
        Err(e) => e,
    };
    assert!(t.elapsed() < Duration::from_secs(5), "slow refusal: {e}");
    assert!(e.contains("crafted.gguf"), "the error names the file: {e}");
    e
}

fn tensor<'a>(ts: &'a mut [RawTensor], name: &str) -> &'a mut RawTensor {
    ts.iter_mut().find(|t| t.name == name).unwrap()
}

#[test]
fn the_hand_written_file_loads_and_runs() {
    let (md, ts) = tiny_raw(&q8());
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ok.gguf");
    std::fs::write(&p, raw_gguf(&md, &ts)).unwrap();
    let m = load(&p).unwrap();
    let mut kv = m.new_cache(8);
    m.forward(&[5, 6, 7], &mut kv, Logits::Last).unwrap();
}

#[test]
fn dims_whose_product_wraps_past_u64_are_refused_before_the_kernel() {
    let (md, mut ts) = tiny_raw(&q8());
    // (2^59 + 64) × 32 = 2^64 + 2048: wrapped, that is 64 rows of 32, which the data holds.
    let t = tensor(&mut ts, "blk.0.attn_q.weight");
    t.dims = vec![32, (1 << 59) + 64];
    t.data.truncate(64 * 34);
    let e = refuse(&md, &ts);
    assert!(
        e.contains("blk.0.attn_q.weight") && e.contains("no valid size"),
        "{e}"
    );
    // The kernel itself refuses the same shape rather than trusting it.
    let data = vec![0u8; 64 * 34];
    let r = inferlab::kernels::q8_0::BatchedQ8::from_q8_0(
        &data,
        (1 << 59) + 64,
        32,
        inferlab::kernels::q8_0::Kernel::Scalar,
    );
    assert!(r.is_err());
    let ok = inferlab::kernels::q8_0::BatchedQ8::from_q8_0(
        &data,
        64,
        32,
        inferlab::kernels::q8_0::Kernel::best(),
    )
    .unwrap();
    assert!(
        ok.matmul(&[0.0; 31], 1).is_err(),
        "a short input is an error"
    );
    assert!(ok.matmul(&[0.0; 64], usize::MAX / 8).is_err());
}

#[test]
fn dims_that_wrap_to_zero_elements_are_refused() {
    let (md, mut ts) = tiny_raw(&q8());
    tensor(&mut ts, "token_embd.weight").dims = vec![1 << 32, 1 << 32];
    let e = refuse(&md, &ts);
    assert!(e.contains("token_embd.weight"), "{e}");
}

#[test]
fn an_alignment_of_zero_is_refused() {
    let (mut md, ts) = tiny_raw(&q8());
    set_meta(&mut md, "general.alignment", Value::U32(0));
    let e = refuse(&md, &ts);
    assert!(e.contains("general.alignment = 0"), "{e}");
}

#[test]
fn zero_heads_without_a_rope_dimension_are_refused() {
    let (mut md, ts) = tiny_raw(&q8());
    md.retain(|(k, _)| k != "llama.rope.dimension_count");
    set_meta(&mut md, "llama.attention.head_count", Value::U32(0));
    let e = refuse(&md, &ts);
    assert!(e.contains("attention.head_count = 0"), "{e}");
}

#[test]
fn a_token_type_array_longer_than_the_vocabulary_is_refused() {
    let (mut md, ts) = tiny_raw(&q8());
    let n = md
        .iter()
        .find(|(k, _)| k == "tokenizer.ggml.tokens")
        .map(|(_, v)| v.to_vec().unwrap().len())
        .unwrap();
    set_meta(
        &mut md,
        "tokenizer.ggml.token_type",
        Value::Array(vec![Value::I32(3); n + 10]),
    );
    let e = refuse(&md, &ts);
    assert!(e.contains("token_type"), "{e}");
}

#[test]
fn huge_layer_counts_and_contexts_are_refused_without_allocating() {
    for (key, v) in [
        ("llama.block_count", u32::MAX),
        ("llama.context_length", (1u32 << 31) - 1),
        ("llama.embedding_length", u32::MAX),
        ("llama.feed_forward_length", 0),
        ("llama.attention.head_count_kv", 3),
    ] {
        let (mut md, ts) = tiny_raw(&q8());
        set_meta(&mut md, key, Value::U32(v));
        let e = refuse(&md, &ts);
        let field = key.trim_start_matches("llama.");
        assert!(e.contains(field) || e.contains("head"), "{key}: {e}");
    }
}

#[test]
fn a_projection_whose_input_is_not_the_hidden_size_is_a_load_error() {
    let (md, mut ts) = tiny_raw(&q8());
    let t = tensor(&mut ts, "blk.1.attn_q.weight");
    // Same bytes, shape (32, 128) instead of (64, 64).
    t.dims = vec![128, 32];
    let e = refuse(&md, &ts);
    assert!(
        e.contains("blk.1.attn_q.weight") && e.contains("shape"),
        "{e}"
    );
}

#[test]
fn a_tensor_past_the_end_of_the_file_is_refused() {
    let (md, ts) = tiny_raw(&q8());
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("crafted.gguf");
    let bytes = raw_gguf(&md, &ts);
    std::fs::write(&p, &bytes[..bytes.len() - 100]).unwrap();
    let e = load(&p).err().unwrap();
    assert!(e.contains("crafted.gguf") && e.contains("truncated"), "{e}");
}

#[test]
fn a_64_mib_metadata_array_is_refused_quickly() {
    // Written as bytes: a Vec of 64 Mi parsed values would itself take 2 GB in this test.
    let (mut md, ts) = tiny_raw(&q8());
    set_meta(&mut md, "general.junk", Value::Array(vec![Value::U8(7)]));
    let mut bytes = raw_gguf(&md, &ts);
    let key = b"general.junk";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    // type (array), element type (u8), length, one element.
    let len_at = at + 8;
    let n: u64 = (64 << 20) + 1;
    bytes[len_at..len_at + 8].copy_from_slice(&n.to_le_bytes());
    // 64 Mi more elements: a multiple of 32, so the tensor data stays aligned.
    bytes.splice(len_at + 9..len_at + 9, std::iter::repeat_n(7u8, 64 << 20));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("crafted.gguf");
    std::fs::write(&p, &bytes).unwrap();
    drop(bytes);
    let t = Instant::now();
    let e = load(&p).err().unwrap();
    assert!(
        e.contains("crafted.gguf") && e.contains("general.junk"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn an_hf_config_with_zero_heads_is_refused() {
    for (heads, kv) in [(0, 0), (9, 0), (9, 4)] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = format!(
            r#"{{"num_hidden_layers":2,"hidden_size":576,"intermediate_size":64,
            "num_attention_heads":{heads},"num_key_value_heads":{kv},"vocab_size":10}}"#
        );
        std::fs::write(dir.path().join("config.json"), cfg).unwrap();
        let e = load(dir.path()).err().unwrap();
        assert!(e.contains("config.json") && e.contains("head"), "{e}");
    }
}

// ---- The fuzz: mutate a valid file's header and metadata, expect Ok or Err, never worse.

/// A small deterministic generator (splitmix64), so a failing case can be replayed by seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values that break careless size arithmetic.
const INTERESTING: [u64; 12] = [
    0,
    1,
    2,
    3,
    31,
    0x7FFF_FFFF,
    0xFFFF_FFFF,
    0x1_0000_0000,
    (1 << 59) + 64,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
];

/// One mutated file: header bytes, a metadata value, a tensor's dims, type, data offset or
/// name, a repeated key, or a cut.
fn mutate(rng: &mut Rng, md: &[(String, Value)], ts: &[RawTensor], header_len: usize) -> Vec<u8> {
    let (mut md, mut ts) = (md.to_vec(), ts.to_vec());
    match rng.below(11) {
        9 => {
            // A key that changes the math, set to anything.
            const KEYS: [&str; 6] = [
                "llama.attention.causal",
                "tokenizer.ggml.add_bos_token",
                "tokenizer.ggml.add_eos_token",
                "llama.attention.key_length",
                "llama.attention.value_length",
                "llama.vocab_size",
            ];
            let key = KEYS[rng.below(KEYS.len())];
            let v = INTERESTING[rng.below(INTERESTING.len())];
            let v = match rng.below(3) {
                0 => Value::Bool(v % 2 == 1),
                1 => Value::U32(v as u32),
                _ => Value::String(format!("{v}")),
            };
            set_meta(&mut md, key, v);
            raw_gguf(&md, &ts)
        }
        10 => {
            // A tensor's rank changed: a 1 added or a dimension folded into the next.
            let i = rng.below(ts.len());
            let t = &mut ts[i];
            if rng.below(2) == 0 || t.dims.len() < 2 {
                t.dims.insert(rng.below(t.dims.len() + 1), 1);
            } else {
                let last = t.dims.pop().unwrap();
                *t.dims.last_mut().unwrap() *= last;
            }
            raw_gguf(&md, &ts)
        }
        6 => {
            // Data offsets: one moved onto another tensor's bytes, or anywhere.
            let mut at = Vec::new();
            let mut o = 0u64;
            for t in &ts {
                at.push(o);
                o = (o + t.data.len() as u64).div_ceil(32) * 32;
            }
            let i = rng.below(at.len());
            at[i] = match rng.below(3) {
                0 => at[rng.below(at.len())],
                1 => INTERESTING[rng.below(INTERESTING.len())] / 32 * 32,
                _ => 0,
            };
            raw_gguf_at(&md, &ts, Some(&at))
        }
        7 => {
            // A tensor renamed: to a bias, a layer past the end, or another's name.
            let i = rng.below(ts.len());
            ts[i].name = match rng.below(3) {
                0 => ts[i].name.replace(".weight", ".bias"),
                1 => ts[i].name.replace("blk.1.", "blk.7."),
                _ => ts[rng.below(ts.len())].name.clone(),
            };
            raw_gguf(&md, &ts)
        }
        8 => {
            // A metadata key repeated with another value.
            let i = rng.below(md.len());
            let (k, _) = md[i].clone();
            md.push((
                k,
                Value::U32(INTERESTING[rng.below(INTERESTING.len())] as u32),
            ));
            raw_gguf(&md, &ts)
        }
        0 | 1 => {
            let mut b = raw_gguf(&md, &ts);
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(header_len);
                b[i] ^= 1 << rng.below(8);
            }
            b
        }
        2 => {
            let mut b = raw_gguf(&md, &ts);
            let v = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
            let w = if rng.below(2) == 0 { 4 } else { 8 };
            let i = rng.below(header_len - w);
            b[i..i + w].copy_from_slice(&v[..w]);
            b
        }
        3 => {
            let i = rng.below(md.len());
            let v = INTERESTING[rng.below(INTERESTING.len())];
            md[i].1 = match rng.below(4) {
                0 => Value::U32(v as u32),
                1 => Value::U64(v),
                2 => Value::I32(v as i32),
                _ => Value::F32(f32::from_bits(v as u32)),
            };
            raw_gguf(&md, &ts)
        }
        4 => {
            let i = rng.below(ts.len());
            let t = &mut ts[i];
            if rng.below(3) == 0 {
                t.type_id = rng.below(40) as u32;
            } else {
                let d = rng.below(t.dims.len());
                t.dims[d] = INTERESTING[rng.below(INTERESTING.len())];
            }
            raw_gguf(&md, &ts)
        }
        _ => {
            let b = raw_gguf(&md, &ts);
            let cut = rng.below(b.len());
            b[..cut].to_vec()
        }
    }
}

/// Peak resident memory of this process so far (Linux), in MiB.
fn peak_rss_mib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

#[test]
fn mutated_model_files_load_or_fail_cleanly() {
    let cases: usize = std::env::var("INFERLAB_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let (md, ts) = tiny_raw(&q8());
    let dir = tempfile::tempdir().unwrap();
    let clean: PathBuf = dir.path().join("clean.gguf");
    std::fs::write(&clean, raw_gguf(&md, &ts)).unwrap();
    let header_len = inferlab::model::gguf::open(&clean)
        .unwrap()
        .0
        .tensor_data_offset as usize;
    let p = dir.path().join("case.gguf");
    let (mut ok, mut refused) = (0, 0);
    for case in 0..cases {
        let mut rng = Rng(case as u64);
        std::fs::write(&p, mutate(&mut rng, &md, &ts, header_len)).unwrap();
        let t = Instant::now();
        let r = std::panic::catch_unwind(|| match load(&p) {
            Ok(m) => {
                // A file that loads must also run: no deferred huge allocation or panic.
                let mut kv = m.new_cache(4);
                m.forward(&[1, 2], &mut kv, Logits::Last)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e),
        });
        match r {
            Ok(Ok(())) => ok += 1,
            Ok(Err(e)) => {
                assert!(!e.is_empty());
                refused += 1
            }
            Err(_) => panic!("case {case} panicked (replay with Rng({case}))"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "case {case} took {:?}",
            t.elapsed()
        );
    }
    eprintln!("{cases} mutated files: {ok} loaded and ran, {refused} refused");
    // Both outcomes happen, so the mutations neither always break the file nor miss it.
    assert!(
        ok > cases / 50 && refused > cases / 2,
        "{ok} ok, {refused} refused"
    );
    if let Some(mib) = peak_rss_mib() {
        assert!(mib < 2048, "peak RSS {mib} MiB");
    }
}

#[test]
fn an_hf_directory_with_a_broken_tokenizer_or_weights_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"{{"num_hidden_layers":{N_LAYER},"hidden_size":{HIDDEN},"intermediate_size":{FFN},
        "num_attention_heads":{N_HEAD},"num_key_value_heads":{N_KV},"vocab_size":261}}"#
    );
    std::fs::write(dir.path().join("config.json"), cfg).unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), "{\"version\": ").unwrap();
    let e = load(dir.path()).err().unwrap();
    assert!(e.contains("tokenizer.json"), "{e}");
    // A real tokenizer, then weights that are not safetensors at all.
    let (_d, tiny) = tiny_file(&q8());
    let m = load(&tiny).unwrap();
    m.tokenizer
        .inner
        .save(dir.path().join("tokenizer.json"), false)
        .unwrap();
    std::fs::write(dir.path().join("model.safetensors"), [0xFFu8; 64]).unwrap();
    let e = load(dir.path()).err().unwrap();
    assert!(!e.is_empty() && !e.contains("panicked"), "{e}");
}

#[test]
fn weights_that_hold_a_nan_are_refused_at_load_naming_the_tensor() {
    let (md, mut ts) = tiny_raw(&q8());
    // The second Q8_0 block's scale (an f16 at the block's start) becomes a NaN.
    let w = tensor(&mut ts, "blk.0.ffn_down.weight");
    assert_eq!(w.type_id, 8, "GGML type 8 is Q8_0");
    w.data[34..36].copy_from_slice(&0x7e00u16.to_le_bytes());
    let e = refuse(&md, &ts);
    assert!(
        e.contains("blk.0.ffn_down.weight") && e.contains("block 1") && e.contains("NaN"),
        "{e}"
    );
    // An infinity in an F32 norm too.
    let (md, mut ts) = tiny_raw(&q8());
    let n = tensor(&mut ts, "output_norm.weight");
    n.data[8..12].copy_from_slice(&f32::INFINITY.to_le_bytes());
    let e = refuse(&md, &ts);
    assert!(
        e.contains("output_norm.weight") && e.contains("element 2"),
        "{e}"
    );
    // The command line says so and fails, rather than printing tokens picked from NaN.
    let (md, mut ts) = tiny_raw(&q8());
    tensor(&mut ts, "blk.0.ffn_down.weight").data[..2].copy_from_slice(&0x7e00u16.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nan.gguf");
    std::fs::write(&p, raw_gguf(&md, &ts)).unwrap();
    let o = std::process::Command::new(bin())
        .args(["generate", "--max-tokens", "4", "--prompt", "the"])
        .arg("--model")
        .arg(&p)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("NaN") && err.contains("ffn_down"), "{err}");
}

// ---- Silently a different model: each must be refused, naming the key or tensor. ----

#[test]
fn a_repeated_metadata_key_is_refused_not_last_wins() {
    let (mut md, ts) = tiny_raw(&q8());
    md.push(("llama.block_count".into(), Value::U32(1)));
    let e = refuse(&md, &ts);
    assert!(e.contains("`llama.block_count` appears twice"), "{e}");
}

#[test]
fn overlapping_or_out_of_order_tensor_data_is_refused() {
    let (md, ts) = tiny_raw(&q8());
    // Every tensor at offset 0: the header declares many times what the file holds.
    let zeros = vec![0u64; ts.len()];
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("overlap.gguf");
    std::fs::write(&p, raw_gguf_at(&md, &ts, Some(&zeros))).unwrap();
    let e = load(&p).err().expect("overlapping data loaded");
    assert!(
        e.contains("overlap.gguf") && e.contains("must not overlap"),
        "{e}"
    );
    // The honest offsets, packed in order, load.
    let mut at = Vec::new();
    let mut o = 0u64;
    for t in &ts {
        at.push(o);
        o = (o + t.data.len() as u64).div_ceil(32) * 32;
    }
    std::fs::write(&p, raw_gguf_at(&md, &ts, Some(&at))).unwrap();
    load(&p).unwrap();
    // Two tensors' places swapped (the first two have the same size): disjoint but out
    // of order is refused as well.
    let same = ts
        .iter()
        .position(|t| t.data.len() == ts[2].data.len() && t.name != ts[2].name);
    let j = same.unwrap();
    at.swap(2, j);
    std::fs::write(&p, raw_gguf_at(&md, &ts, Some(&at))).unwrap();
    let e = load(&p).err().expect("out-of-order data loaded");
    assert!(e.contains("in order"), "{e}");
}

#[test]
fn a_norm_stored_quantized_or_as_f16_is_refused() {
    let (md, mut ts) = tiny_raw(&q8());
    let n = tensor(&mut ts, "blk.1.ffn_norm.weight");
    let halves: Vec<u8> = n
        .data
        .chunks_exact(4)
        .flat_map(|b| {
            half::f16::from_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]])).to_le_bytes()
        })
        .collect();
    n.data = halves;
    n.type_id = 1;
    let e = refuse(&md, &ts);
    assert!(
        e.contains("blk.1.ffn_norm.weight") && e.contains("must be F32"),
        "{e}"
    );
}

#[test]
fn features_inferlab_does_not_compute_are_refused_by_name() {
    let extra = |name: &str, dims: Vec<u64>| RawTensor {
        name: name.into(),
        data: vec![0u8; 4 * dims.iter().product::<u64>() as usize],
        dims,
        type_id: 0,
    };
    let cases = [
        (extra("blk.0.attn_q.bias", vec![64]), "bias terms"),
        (
            extra("rope_freqs.weight", vec![8]),
            "RoPE frequency factors",
        ),
        (
            extra("blk.2.attn_norm.weight", vec![64]),
            "beyond block_count",
        ),
        (
            extra("vision.patch_embd.weight", vec![64]),
            "vision.patch_embd",
        ),
    ];
    for (t, want) in cases {
        let (md, mut ts) = tiny_raw(&q8());
        let name = t.name.clone();
        ts.push(t);
        let e = refuse(&md, &ts);
        assert!(
            e.contains("does not implement") && e.contains(&name) && e.contains(want),
            "{e}"
        );
    }
    for (key, v, want) in [
        (
            "llama.rope.scaling.type",
            Value::String("yarn".into()),
            "RoPE scaling",
        ),
        (
            "llama.rope.scaling.type",
            Value::String("linear".into()),
            "RoPE scaling",
        ),
        ("llama.rope.scaling.factor", Value::F32(8.0), "RoPE scaling"),
        ("llama.expert_count", Value::U32(8), "mixture-of-experts"),
        (
            "llama.attention.sliding_window",
            Value::U32(4096),
            "sliding-window",
        ),
    ] {
        let (mut md, ts) = tiny_raw(&q8());
        set_meta(&mut md, key, v);
        let e = refuse(&md, &ts);
        assert!(
            e.contains("does not implement") && e.contains(key) && e.contains(want),
            "{e}"
        );
    }
    // Keys that say "off" change nothing and load.
    let (mut md, ts) = tiny_raw(&q8());
    set_meta(
        &mut md,
        "llama.rope.scaling.type",
        Value::String("none".into()),
    );
    set_meta(&mut md, "llama.rope.scaling.factor", Value::F32(1.0));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("off.gguf");
    std::fs::write(&p, raw_gguf(&md, &ts)).unwrap();
    load(&p).unwrap();
}

#[test]
fn special_ids_of_the_wrong_type_negative_or_past_the_vocabulary_are_refused() {
    for (key, v, want) in [
        (
            "tokenizer.ggml.eos_token_id",
            Value::String("2".into()),
            "non-negative integer",
        ),
        (
            "tokenizer.ggml.eos_token_id",
            Value::I32(-1),
            "non-negative integer",
        ),
        (
            "tokenizer.ggml.bos_token_id",
            Value::U32(100_000),
            "outside the vocabulary",
        ),
        (
            "tokenizer.ggml.padding_token_id",
            Value::F32(0.0),
            "non-negative integer",
        ),
    ] {
        let (mut md, ts) = tiny_raw(&q8());
        set_meta(&mut md, key, v);
        let e = refuse(&md, &ts);
        assert!(e.contains(key) && e.contains(want), "{e}");
    }
    // An id inferlab does not use, one past the vocabulary, is noted, not refused (real
    // files carry such padding ids; llama.cpp ignores them too).
    let (mut md, ts) = tiny_raw(&q8());
    set_meta(
        &mut md,
        "tokenizer.ggml.padding_token_id",
        Value::U32(100_000),
    );
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pad.gguf");
    std::fs::write(&p, raw_gguf(&md, &ts)).unwrap();
    let m = load(&p).unwrap();
    assert!(m.warnings().iter().any(|w| w.contains("padding_token_id")));
    // A metadata value of the wrong type names its key.
    let (mut md, ts) = tiny_raw(&q8());
    set_meta(&mut md, "general.architecture", Value::U32(7));
    let e = refuse(&md, &ts);
    assert!(
        e.contains("general.architecture") && e.contains("U32(7)"),
        "{e}"
    );
    let (mut md, ts) = tiny_raw(&q8());
    set_meta(&mut md, "tokenizer.ggml.model", Value::U32(7));
    let e = refuse(&md, &ts);
    assert!(
        e.contains("tokenizer.ggml.model") && e.contains("U32(7)"),
        "{e}"
    );
}

#[test]
fn a_token_that_is_not_utf8_is_refused_and_a_repeated_one_is_named() {
    let (md, ts) = tiny_raw(&q8());
    let mut bytes = raw_gguf(&md, &ts);
    // The token "he" (the last one) as it is stored: a length, then its bytes.
    let stored = [&2u64.to_le_bytes()[..], b"he"].concat();
    let at = bytes
        .windows(stored.len())
        .position(|w| w == stored.as_slice())
        .unwrap();
    bytes[at + 8] = 0xff;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad-token.gguf");
    std::fs::write(&p, &bytes).unwrap();
    let e = load(&p).err().expect("a non-UTF-8 token loaded");
    assert!(
        e.contains("tokenizer.ggml.tokens") && e.contains("not UTF-8"),
        "{e}"
    );
    // A token listed twice loads (llama.cpp accepts such files), with a warning naming it.
    let (mut md, ts) = tiny_raw(&q8());
    let toks = md
        .iter_mut()
        .find(|(k, _)| k == "tokenizer.ggml.tokens")
        .unwrap();
    let Value::Array(list) = &mut toks.1 else {
        unreachable!()
    };
    // Two byte-alphabet tokens no merge uses.
    list[3] = list[4].clone();
    let p = dir.path().join("twice.gguf");
    std::fs::write(&p, raw_gguf(&md, &ts)).unwrap();
    let m = load(&p).unwrap();
    let w = m.tokenizer.warnings.join("\n");
    assert!(w.contains("token 4 repeats token 3"), "{w}");
}

// ---- HF safetensors directories ----

/// The tiny model as an HF directory: f32 safetensors under transformers' names (one shard
/// per entry of `shards`, each a list of name prefixes it takes), config and tokenizer.
fn hf_dir(
    config_extra: &str,
    edit: impl FnOnce(&mut Vec<(String, candle_core::Tensor)>),
) -> tempfile::TempDir {
    let (_, parts) = tiny_parts(&Tiny::default());
    let hf_name = |n: &str| -> String {
        let n = n
            .replace("token_embd", "model.embed_tokens")
            .replace("output_norm", "model.norm");
        let Some(rest) = n.strip_prefix("blk.") else {
            return n;
        };
        let (i, t) = rest.split_once('.').unwrap();
        let t = t
            .replace("attn_norm", "input_layernorm")
            .replace("ffn_norm", "post_attention_layernorm")
            .replace("attn_q", "self_attn.q_proj")
            .replace("attn_k", "self_attn.k_proj")
            .replace("attn_v", "self_attn.v_proj")
            .replace("attn_output", "self_attn.o_proj")
            .replace("ffn_gate", "mlp.gate_proj")
            .replace("ffn_up", "mlp.up_proj")
            .replace("ffn_down", "mlp.down_proj");
        format!("model.layers.{i}.{t}")
    };
    let mut ts: Vec<(String, candle_core::Tensor)> = parts
        .iter()
        .map(|(n, q)| (hf_name(n), q.dequantize(&Device::Cpu).unwrap()))
        .collect();
    edit(&mut ts);
    let dir = tempfile::tempdir().unwrap();
    let map: std::collections::HashMap<String, candle_core::Tensor> = ts.into_iter().collect();
    candle_core::safetensors::save(&map, dir.path().join("model.safetensors")).unwrap();
    let cfg = format!(
        r#"{{"num_hidden_layers":{N_LAYER},"hidden_size":{HIDDEN},"intermediate_size":{FFN},
        "num_attention_heads":{N_HEAD},"num_key_value_heads":{N_KV},"vocab_size":261{config_extra}}}"#
    );
    std::fs::write(dir.path().join("config.json"), cfg).unwrap();
    let (_d, tiny) = tiny_file(&q8());
    load(&tiny)
        .unwrap()
        .tokenizer
        .inner
        .save(dir.path().join("tokenizer.json"), false)
        .unwrap();
    dir
}

fn refuse_dir(dir: &Path) -> String {
    match load(dir) {
        Ok(_) => panic!("a crafted directory loaded"),
        Err(e) => {
            assert!(!e.contains("panicked"), "{e}");
            e
        }
    }
}

#[test]
fn an_hf_directory_loads_and_every_silent_substitution_is_refused() {
    let ok = hf_dir("", |_| {});
    let m = load(ok.path()).unwrap();
    let mut kv = m.new_cache(8);
    m.forward(&[5, 6, 7], &mut kv, Logits::Last).unwrap();
    // An LM head of the wrong shape is not replaced by the embedding.
    let d = hf_dir("", |ts| {
        ts.push((
            "lm_head.weight".into(),
            candle_core::Tensor::zeros((261, 32), candle_core::DType::F32, &Device::Cpu).unwrap(),
        ));
    });
    let e = refuse_dir(d.path());
    assert!(e.contains("lm_head.weight") && e.contains("shape"), "{e}");
    // Nor one stored as integers.
    let d = hf_dir("", |ts| {
        ts.push((
            "lm_head.weight".into(),
            candle_core::Tensor::zeros((261, HIDDEN), candle_core::DType::I64, &Device::Cpu)
                .unwrap(),
        ));
    });
    let e = refuse_dir(d.path());
    assert!(e.contains("lm_head.weight") && e.contains("I64"), "{e}");
    // A config with fewer layers than the weights.
    let d = hf_dir("", |_| {});
    let cfg = std::fs::read_to_string(d.path().join("config.json")).unwrap();
    std::fs::write(
        d.path().join("config.json"),
        cfg.replace("\"num_hidden_layers\":2", "\"num_hidden_layers\":1"),
    )
    .unwrap();
    let e = refuse_dir(d.path());
    assert!(
        e.contains("beyond num_hidden_layers") && e.contains("model.layers.1."),
        "{e}"
    );
    // A bias, and RoPE scaling in the config.
    let d = hf_dir("", |ts| {
        ts.push((
            "model.layers.0.self_attn.q_proj.bias".into(),
            candle_core::Tensor::zeros(HIDDEN, candle_core::DType::F32, &Device::Cpu).unwrap(),
        ));
    });
    let e = refuse_dir(d.path());
    assert!(e.contains("bias terms") && e.contains("q_proj.bias"), "{e}");
    let d = hf_dir(
        r#","rope_scaling":{"rope_type":"llama3","factor":8.0}"#,
        |_| {},
    );
    let e = refuse_dir(d.path());
    assert!(
        e.contains("RoPE scaling") && e.contains("rope_scaling"),
        "{e}"
    );
    // A NaN weight.
    let d = hf_dir("", |ts| {
        let t = &mut ts
            .iter_mut()
            .find(|(n, _)| n == "model.layers.1.mlp.up_proj.weight")
            .unwrap()
            .1;
        let mut v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v[7] = f32::NAN;
        *t = candle_core::Tensor::from_vec(v, t.shape(), &Device::Cpu).unwrap();
    });
    let e = refuse_dir(d.path());
    assert!(e.contains("mlp.up_proj") && e.contains("element 7"), "{e}");
    // The same tensor in two shards.
    let d = hf_dir("", |_| {});
    let norm = candle_core::Tensor::ones(HIDDEN, candle_core::DType::F32, &Device::Cpu).unwrap();
    let map: std::collections::HashMap<String, candle_core::Tensor> =
        [("model.norm.weight".to_string(), norm)]
            .into_iter()
            .collect();
    candle_core::safetensors::save(&map, d.path().join("model-2.safetensors")).unwrap();
    let e = refuse_dir(d.path());
    assert!(
        e.contains("model.norm.weight") && e.contains("also in"),
        "{e}"
    );
    // Tokenizer ids beyond the config's vocabulary (and an embedding to match).
    let d = hf_dir("", |ts| {
        let t = &mut ts
            .iter_mut()
            .find(|(n, _)| n == "model.embed_tokens.weight")
            .unwrap()
            .1;
        *t = t.narrow(0, 0, 200).unwrap();
    });
    let cfg = std::fs::read_to_string(d.path().join("config.json")).unwrap();
    std::fs::write(d.path().join("config.json"), cfg.replace("261", "200")).unwrap();
    let e = refuse_dir(d.path());
    assert!(
        e.contains("tokenizer.json") && e.contains("vocab_size of 200"),
        "{e}"
    );
}

// ---- Memory: what any input makes inferlab allocate is bounded by the file ----

/// Runs inferlab under an address-space limit of 4× `file_len` plus 1 GB: an allocation
/// beyond it fails, and Rust aborts the process (a signal, no exit code).
fn under_memory_bound(args: &[&std::ffi::OsStr], file_len: u64) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let limit = file_len.saturating_mul(4).saturating_add(1 << 30);
    let mut c = std::process::Command::new(bin());
    c.args(args)
        .env("INFERLAB_QUIET", "1")
        .env("INFERLAB_OFFLINE", "1");
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c.output().unwrap()
}

#[test]
fn the_real_model_runs_within_four_times_its_file_plus_a_gigabyte() {
    let model = real_model();
    let len = std::fs::metadata(&model).unwrap().len();
    for weights in ["q8_0", "f32"] {
        let args = [
            "generate",
            "--prompt",
            "hi",
            "--max-tokens",
            "3",
            "--weights",
            weights,
            "--model",
        ];
        let mut a: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_ref()).collect();
        a.push(model.as_os_str());
        let o = under_memory_bound(&a, len);
        assert!(
            o.status.success(),
            "--weights {weights}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn mutated_model_files_stay_within_the_memory_bound() {
    let (md, ts) = tiny_raw(&q8());
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.gguf");
    std::fs::write(&clean, raw_gguf(&md, &ts)).unwrap();
    let header_len = inferlab::model::gguf::open(&clean)
        .unwrap()
        .0
        .tensor_data_offset as usize;
    let p = dir.path().join("case.gguf");
    for case in 0..120u64 {
        let mut rng = Rng(10_000 + case);
        let bytes = mutate(&mut rng, &md, &ts, header_len);
        std::fs::write(&p, &bytes).unwrap();
        let args = [
            "generate",
            "--prompt",
            "the",
            "--max-tokens",
            "2",
            "--weights",
            "f32",
            "--model",
        ];
        let mut a: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_ref()).collect();
        a.push(p.as_os_str());
        let o = under_memory_bound(&a, bytes.len() as u64);
        // Success or a clean refusal; a signal means an allocation hit the bound.
        assert!(
            matches!(o.status.code(), Some(0) | Some(1)),
            "case {case} (Rng({})): {:?} {}",
            10_000 + case,
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// A recording never replaces a file the app reads, however the model was named: through
/// `INFERLAB_MODEL`, through the cache, or as a file inside an HF directory given with
/// `--model`. Each is refused before the app starts, and the file is left as it was.
#[test]
fn a_recording_never_replaces_a_file_the_app_reads() {
    let d = tempfile::tempdir().unwrap();
    let (_t, tiny) = tiny_file(&Tiny::default());
    let model = d.path().join("m.gguf");
    std::fs::copy(&tiny, &model).unwrap();
    let cache = d.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    let cached = cache.join(inferlab::model::source::GGUF_NAME);
    std::fs::copy(&tiny, &cached).unwrap();
    let hf = hf_dir("", |_| {});
    let tokenizer = hf.path().join("tokenizer.json");
    // (environment, arguments, the file the recording must not replace)
    type Case<'a> = (Vec<(&'a str, &'a Path)>, Vec<String>, &'a Path);
    let cases: Vec<Case> = vec![
        (vec![("INFERLAB_MODEL", &model)], vec![], &model),
        (vec![("INFERLAB_CACHE_DIR", &cache)], vec![], &cached),
        (
            vec![],
            vec!["--model".into(), hf.path().display().to_string()],
            &tokenizer,
        ),
    ];
    for (env, args, target) in cases {
        let before = std::fs::read(target).unwrap();
        let mut cmd = std::process::Command::new(common::bin());
        cmd.env_remove("INFERLAB_MODEL")
            .args(&args)
            .arg("--record")
            .arg(target)
            .arg("--force")
            .stdin(std::process::Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("own input"), "{err}");
        assert_eq!(
            std::fs::read(target).unwrap(),
            before,
            "{}",
            target.display()
        );
    }
}

/// Every GGUF or HF key that changes the math is honoured or refused, naming the key:
/// the causal mask switched off, a BOS or EOS token the file asks to add, keys and values
/// of another width than the heads, a vocabulary size the tokenizer contradicts, RoPE
/// over part of each head. Each tensor's rank is checked too, norms included, with a
/// message naming the tensor.
#[test]
fn every_key_that_changes_the_math_is_honoured_or_refused() {
    let (md0, ts0) = tiny_raw(&Tiny::default());
    let cases: Vec<(&str, Value, &str)> = vec![
        ("llama.attention.causal", Value::Bool(false), "causal"),
        (
            "tokenizer.ggml.add_bos_token",
            Value::Bool(true),
            "add_bos_token",
        ),
        (
            "tokenizer.ggml.add_eos_token",
            Value::Bool(true),
            "add_eos_token",
        ),
        ("llama.attention.key_length", Value::U32(3), "key_length"),
        (
            "llama.attention.value_length",
            Value::U32(3),
            "value_length",
        ),
        ("llama.vocab_size", Value::U32(7), "vocab_size"),
        ("llama.attention.causal", Value::U32(1), "causal"),
    ];
    for (key, v, says) in cases {
        let mut md = md0.clone();
        set_meta(&mut md, key, v);
        let e = refuse(&md, &ts0);
        assert!(e.contains(says), "{key}: {e}");
    }
    // Their ordinary values load.
    let mut md = md0.clone();
    set_meta(&mut md, "llama.attention.causal", Value::Bool(true));
    set_meta(&mut md, "tokenizer.ggml.add_bos_token", Value::Bool(false));
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ok.gguf");
    std::fs::write(&p, raw_gguf(&md, &ts0)).unwrap();
    load(&p).unwrap();
    // A tensor of the wrong rank, a norm included: refused by name, never a panic. (A
    // norm stored as (1, h), as some converters write it, is the one other rank allowed.)
    type Reshape = fn(&[u64]) -> Vec<u64>;
    let ranks: [(&str, Reshape); 5] = [
        ("blk.0.attn_norm.weight", |d| vec![d[0], 1, 1]),
        ("output_norm.weight", |d| vec![d[0], 1, 1, 1]),
        ("blk.0.attn_q.weight", |d| vec![d[0] * d[1]]),
        ("blk.0.ffn_down.weight", |d| vec![d[0], d[1], 1]),
        ("token_embd.weight", |d| vec![d[0], 1, d[1]]),
    ];
    for (name, reshape) in ranks {
        let mut ts = ts0.clone();
        let t = ts.iter_mut().find(|t| t.name == name).unwrap();
        t.dims = reshape(&t.dims);
        let e = refuse(&md0, &ts);
        assert!(e.contains(name) && !e.contains("panicked"), "{name}: {e}");
    }
    // HF: RoPE over part of each head.
    let d = hf_dir(r#","partial_rotary_factor":0.5"#, |_| {});
    let e = refuse_dir(d.path());
    assert!(e.contains("partial_rotary_factor"), "{e}");
    load(hf_dir(r#","partial_rotary_factor":1.0"#, |_| {}).path()).unwrap();
}
