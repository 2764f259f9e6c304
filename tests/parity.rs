//! Our forward pass against candle-transformers' quantized_llama, and cached decode
//! against full recompute.

mod common;

use candle_core::quantized::{gguf_file, GgmlDType};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use common::*;
use inferlab::model::sampler::argmax;
use inferlab::model::{LoadOptions, Logits, Model, Requant};
use std::path::Path;

fn candle_model(path: &Path) -> ModelWeights {
    let mut f = std::fs::File::open(path).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    ModelWeights::from_gguf(ct, &mut f, &Device::Cpu).unwrap()
}

fn ours(path: &Path, requant: Requant) -> Model {
    Model::load(
        path,
        &LoadOptions {
            requant,
            device: Device::Cpu,
        },
    )
    .unwrap()
}

/// Max |Δlogit| on the prompt's last position and the greedy continuations of both.
fn compare(path: &Path, prompt: &[u32], n: usize) -> (f32, Vec<u32>, Vec<u32>) {
    let m = ours(path, Requant::Keep);
    let mut c = candle_model(path);
    let mut kv = m.new_cache(prompt.len() + n + 1);
    let a = Model::last_logits(&m.forward(prompt, &mut kv, Logits::Last).unwrap()).unwrap();
    let x = Tensor::new(prompt, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let b: Vec<f32> = c
        .forward(&x, 0)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec1()
        .unwrap();
    let diff = max_abs_diff(&a, &b);
    let (mut ta, mut tb) = (vec![argmax(&a)], vec![argmax(&b)]);
    for i in 0..n - 1 {
        let la = m
            .forward(&[*ta.last().unwrap()], &mut kv, Logits::Last)
            .unwrap();
        ta.push(argmax(&Model::last_logits(&la).unwrap()));
        let x = Tensor::new(&[*tb.last().unwrap()], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let lb: Vec<f32> = c
            .forward(&x, prompt.len() + i)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1()
            .unwrap();
        tb.push(argmax(&lb));
    }
    (diff, ta, tb)
}

#[test]
fn tiny_model_matches_candle_quantized_llama() {
    for dtype in [GgmlDType::F32, GgmlDType::Q8_0, GgmlDType::Q4_1] {
        let (_d, p) = tiny_file(&Tiny {
            dtype,
            ..Default::default()
        });
        let prompt: Vec<u32> = (3..20).collect();
        let (diff, a, b) = compare(&p, &prompt, 32);
        assert!(diff < 1e-3, "{dtype:?}: max abs logit diff {diff}");
        assert_eq!(a, b, "{dtype:?}: greedy continuations differ");
    }
}

#[test]
fn real_model_matches_candle_quantized_llama() {
    let p = real_model();
    let m = ours(&p, Requant::Keep);
    let prompt = m
        .tokenizer
        .encode(&inferlab::model::TextTokenizer::chat_prompt(
            "What is a KV cache?",
        ))
        .unwrap();
    drop(m);
    let (diff, a, b) = compare(&p, &prompt, 32);
    assert!(diff < 1e-3, "max abs logit diff {diff}");
    assert_eq!(a, b, "greedy continuations differ");
}

#[test]
fn cached_decode_equals_full_recompute_with_f32_weights() {
    let (_d, p) = tiny_file(&Tiny::default());
    let m = ours(&p, Requant::F32);
    let mut seq: Vec<u32> = vec![5, 9, 40, 41, 100, 7];
    let mut kv = m.new_cache(64);
    let mut cached = Vec::new();
    let mut next = seq.clone();
    for _ in 0..20 {
        let l = m.forward(&next, &mut kv, Logits::Last).unwrap();
        let t = argmax(&Model::last_logits(&l).unwrap());
        cached.push(t);
        next = vec![t];
    }
    let mut full = Vec::new();
    for _ in 0..20 {
        let mut fresh = m.new_cache(64);
        let l = m.forward(&seq, &mut fresh, Logits::Last).unwrap();
        let t = argmax(&Model::last_logits(&l).unwrap());
        full.push(t);
        seq.push(t);
        assert_eq!(fresh.len(), seq.len() - 1);
    }
    assert_eq!(cached, full);
}

#[test]
fn all_position_logits_end_with_the_last_position() {
    let (_d, p) = tiny_file(&Tiny::default());
    let m = ours(&p, Requant::F32);
    let prompt: Vec<u32> = (10..30).collect();
    let all = m
        .forward(&prompt, &mut m.new_cache(64), Logits::All)
        .unwrap();
    assert_eq!(all.dims(), &[20, m.cfg.vocab]);
    let last = m
        .forward(&prompt, &mut m.new_cache(64), Logits::Last)
        .unwrap();
    let a = Model::last_logits(&all).unwrap();
    let b = Model::last_logits(&last).unwrap();
    let d = max_abs_diff(&a, &b);
    assert!(d < 1e-4, "{d}");
}

#[test]
fn only_passes_on_our_kernel_keep_a_worker_awake() {
    let (_d, p) = tiny_file(&Tiny::default());
    assert!(ours(&p, Requant::Q8_0).runs_on_our_kernels());
    // candle's matmuls bring worker threads of their own, which a spinning one would slow.
    assert!(!ours(&p, Requant::Keep).runs_on_our_kernels());
    assert!(!ours(&p, Requant::F32).runs_on_our_kernels());
}

#[test]
fn every_prompt_position_on_the_host_matches_the_tensor_kernels() {
    // Our path attends each prompt row on the host over the keys up to its own position;
    // the reference runs the naive kernel, with its causal mask, on candle tensors. Every
    // position's logits must agree, not only the last one's, which sees every key anyway.
    let (_d, p) = tiny_file(&Tiny::default());
    let (host, reference) = (ours(&p, Requant::F32), ours(&p, Requant::Keep));
    let prompt: Vec<u32> = (10..40).collect();
    let all = |m: &Model| -> Vec<Vec<f32>> {
        m.forward(&prompt, &mut m.new_cache(64), Logits::All)
            .unwrap()
            .to_vec2()
            .unwrap()
    };
    let (a, b) = (all(&host), all(&reference));
    assert_eq!(a.len(), prompt.len());
    for (pos, (x, y)) in a.iter().zip(&b).enumerate() {
        let d = max_abs_diff(x, y);
        assert!(d < 1e-4, "position {pos}: max abs logit diff {d}");
    }
}

/// The 4-bit path runs the file's own Q4_1 blocks on our kernel: its logits stay close to
/// the same weights in f32 (the activations' int8 rounding is the only difference), it
/// reads fewer weight bytes than Q8_0, and the file's 8-bit matrix (the tied LM head)
/// stays 8-bit.
#[test]
fn the_four_bit_path_matches_f32_weights_and_reads_fewer_bytes() {
    let p = real_model();
    let (q4, q8, f) = (
        ours(&p, Requant::Q4),
        ours(&p, Requant::Q8_0),
        ours(&p, Requant::F32),
    );
    let prompt = q4
        .tokenizer
        .encode(&inferlab::model::TextTokenizer::chat_prompt(
            "Name three colours of the rainbow.",
        ))
        .unwrap();
    let logits = |m: &Model| {
        Model::last_logits(
            &m.forward(&prompt, &mut m.new_cache(prompt.len()), Logits::Last)
                .unwrap(),
        )
        .unwrap()
    };
    let (a, b) = (logits(&q4), logits(&f));
    let top = b.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let diff = a
        .iter()
        .zip(&b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff < 5e-2 * top, "max |Δlogit| {diff} of {top}");
    assert_eq!(argmax(&a), argmax(&b));
    let (bytes4, bytes8) = (q4.matrix_cost().0, q8.matrix_cost().0);
    assert!(
        (bytes4 as f64) < 0.75 * bytes8 as f64,
        "q4 reads {bytes4} bytes a token, q8_0 {bytes8}"
    );
    assert_eq!(q4.weights.lm_head.bytes(), q8.weights.lm_head.bytes());
}
