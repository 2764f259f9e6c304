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
    m.forward(&[5, 6, 7], &mut kv, None, Logits::Last).unwrap();
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

/// One mutated file: header bytes, a metadata value, a tensor's dims or type, or a cut.
fn mutate(rng: &mut Rng, md: &[(String, Value)], ts: &[RawTensor], header_len: usize) -> Vec<u8> {
    let (mut md, mut ts) = (md.to_vec(), ts.to_vec());
    match rng.below(6) {
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
                m.forward(&[1, 2], &mut kv, None, Logits::Last)
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
fn weights_that_hold_a_nan_stop_with_an_error_instead_of_sampling_garbage() {
    let (md, mut ts) = tiny_raw(&q8());
    // The first Q8_0 block's scale (an f16 at the block's start) becomes a NaN.
    let w = tensor(&mut ts, "blk.0.ffn_down.weight");
    assert_eq!(w.type_id, 8, "GGML type 8 is Q8_0");
    w.data[..2].copy_from_slice(&0x7e00u16.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nan.gguf");
    std::fs::write(&p, raw_gguf(&md, &ts)).unwrap();
    let m = load(&p).unwrap();
    let mut kv = m.new_cache(8);
    let e = m
        .forward(&[5, 6, 7], &mut kv, None, Logits::Last)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a number") && e.contains("CPU"), "{e}");
    // The command line says so and fails, rather than printing tokens picked from NaN.
    let o = std::process::Command::new(bin())
        .args(["generate", "--max-tokens", "4", "--prompt", "the"])
        .arg("--model")
        .arg(&p)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a number"), "{err}");
}
