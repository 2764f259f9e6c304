//! The cuda build on a GPU: the forward pass, both KV caches and the serving engine on
//! CUDA device 0 give what they give on the CPU. Compiled only with `--features cuda`, so
//! CI (no GPU, no CUDA) never builds it; `scripts/gpu-check.sh` runs it where a GPU is.
//! Each comparison prints its figures, so a run on the GPU reports them (`--nocapture`).
#![cfg(feature = "cuda")]

mod common;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use common::serving::{cfg, workload};
use common::*;
use inferlab::model::linear::Linear;
use inferlab::model::sampler::argmax;
use inferlab::model::{AttnKernel, HeadLayout, LoadOptions, Logits, Model, Requant, RunOptions};
use inferlab::serve::{CacheKind, Policy, ServeEngine};
use std::path::Path;

fn gpu() -> Device {
    Device::new_cuda(0).expect("these tests need CUDA device 0")
}

fn load(path: &Path, requant: Requant, device: Device) -> Model {
    Model::load(path, &LoadOptions { requant, device }).unwrap()
}

/// Logits of the prompt's last position, then of `steps` greedy decode steps taken from
/// the CPU's choices (so both devices see the same tokens even where a near-tie flips).
fn logits_along(m: &Model, prompt: &[u32], choices: &[u32]) -> Vec<Vec<f32>> {
    let mut kv = m.new_cache(prompt.len() + choices.len() + 1);
    let first = m.forward(prompt, &mut kv, Logits::Last).unwrap();
    let mut out = vec![Model::last_logits(&first).unwrap()];
    for &t in choices {
        let l = m.forward(&[t], &mut kv, Logits::Last).unwrap();
        out.push(Model::last_logits(&l).unwrap());
    }
    out
}

/// CPU greedy tokens after `prompt`, `n` of them.
fn cpu_choices(m: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut kv = m.new_cache(prompt.len() + n + 1);
    let mut next = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..n {
        let l = m.forward(&next, &mut kv, Logits::Last).unwrap();
        let t = argmax(&Model::last_logits(&l).unwrap());
        out.push(t);
        next = vec![t];
    }
    out
}

/// Largest |Δlogit| over all steps, relative to the largest |logit| on the CPU; infinite
/// where the GPU gave a NaN.
fn relative_gap(cpu: &[Vec<f32>], gpu: &[Vec<f32>]) -> f32 {
    if gpu.iter().flatten().any(|x| !x.is_finite()) {
        return f32::INFINITY;
    }
    let scale = cpu.iter().flatten().fold(0f32, |a, x| a.max(x.abs()));
    let gap = cpu
        .iter()
        .zip(gpu)
        .map(|(a, b)| max_abs_diff(a, b))
        .fold(0f32, f32::max);
    gap / scale.max(1e-6)
}

#[test]
fn tiny_model_on_cuda_matches_the_cpu_in_every_layout_and_kernel() {
    let (_d, p) = tiny_file(&Tiny::default());
    // 8 rows and 20: candle's CUDA matmul switches kernels above 8.
    let short = [5u32, 9, 40, 41, 100, 7, 3, 60];
    let long: Vec<u32> = (0..20).map(|i| 3 + i * 11 % 250).collect();
    for (prompt, (requant, tol)) in [&short[..], &long[..]]
        .into_iter()
        .flat_map(|p| [(p, (Requant::F32, 1e-4)), (p, (Requant::Q8_0, 3e-2))])
    {
        let cpu = load(&p, requant, Device::Cpu);
        let dev = load(&p, requant, gpu());
        for layout in [HeadLayout::Mha, HeadLayout::Gqa, HeadLayout::Mqa] {
            for kernel in [AttnKernel::Naive, AttnKernel::Tiled { sram_bytes: 4096 }] {
                let run = RunOptions {
                    layout,
                    kernel,
                    ..Default::default()
                };
                let (c, g) = (cpu.with_run(run).unwrap(), dev.with_run(run).unwrap());
                let choices = cpu_choices(&c, prompt, 12);
                let gap = relative_gap(
                    &logits_along(&c, prompt, &choices),
                    &logits_along(&g, prompt, &choices),
                );
                let rows = prompt.len();
                eprintln!(
                    "tiny {requant:?} {layout:?} {kernel:?} {rows} rows: relative gap {gap:.2e}"
                );
                assert!(
                    gap <= tol,
                    "{requant:?} {layout:?} {kernel:?}: {gap:.2e} > {tol:.0e}"
                );
            }
        }
    }
}

#[test]
fn serving_on_cuda_gives_the_cpu_tokens_with_both_caches() {
    let (_d, p) = tiny_file(&Tiny::default());
    let cpu = load(&p, Requant::F32, Device::Cpu);
    let dev = load(&p, Requant::F32, gpu());
    let reqs = workload(10, 0.5, 5);
    for cache in [CacheKind::Paged, CacheKind::Contiguous] {
        // A budget small enough that paging preempts: recompute runs on the GPU too.
        let run = |m: &Model| {
            let mut e =
                ServeEngine::new(m, cfg(Policy::Continuous, cache, 64), reqs.clone()).unwrap();
            let mut steps = 0;
            while !e.done() {
                e.step().unwrap();
                e.check_pool().unwrap();
                steps += 1;
                assert!(steps < 20_000, "no progress");
            }
            let tokens: Vec<Vec<u32>> = e.requests().iter().map(|r| r.generated.clone()).collect();
            (tokens, e.preemptions())
        };
        let (a, pa) = run(&cpu);
        let (b, pb) = run(&dev);
        eprintln!(
            "serving {cache:?}: {} requests, preemptions cpu {pa} gpu {pb}",
            a.len()
        );
        assert_eq!(a, b, "{cache:?}");
        assert_eq!(pa, pb, "{cache:?}");
    }
}

#[test]
fn real_model_on_cuda_matches_the_cpu() {
    let p = real_model();
    // f32 weights: only the order of the sums differs. Q8_0 (the default): the CPU runs our
    // int8 kernel, the GPU candle's, each rounding activations its own way.
    for (requant, tol, flips) in [(Requant::F32, 1e-3, 0), (Requant::Q8_0, 5e-2, 1)] {
        let cpu = load(&p, requant, Device::Cpu);
        let dev = load(&p, requant, gpu());
        let prompt = cpu
            .tokenizer
            .encode("The capital of France is Paris. The capital of Italy is")
            .unwrap();
        let choices = cpu_choices(&cpu, &prompt, 16);
        let (a, b) = (
            logits_along(&cpu, &prompt, &choices),
            logits_along(&dev, &prompt, &choices),
        );
        let gap = relative_gap(&a, &b);
        let agree = a
            .iter()
            .zip(&b)
            .filter(|(x, y)| argmax(x) == argmax(y))
            .count();
        eprintln!(
            "real model {requant:?}: relative gap {gap:.2e}, greedy choice agrees at {agree} of {} steps; the CPU continues {:?}",
            a.len(),
            cpu.tokenizer.decode(&choices).unwrap_or_default()
        );
        assert_eq!(argmax(&a[0]), argmax(&b[0]), "{requant:?}: the first token");
        assert!(gap <= tol, "{requant:?}: {gap:.2e} > {tol:.0e}");
        assert!(
            agree + flips >= a.len(),
            "{requant:?}: {agree} of {}",
            a.len()
        );
    }
}

/// `(m, k)` random rows on the CPU.
fn rows(m: usize, k: usize) -> Tensor {
    Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu).unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn quantized_matmul_on_cuda_matches_the_cpu_for_every_row_count() {
    // The real model's matrix shapes (out, in), Q8_0 as the app loads them.
    for (n, k) in [(576, 576), (192, 576), (1536, 576), (576, 1536)] {
        let w = (rows(n, k) * 0.05).unwrap();
        let cpu = Linear::new(
            QMatMul::from_qtensor(QTensor::quantize(&w, GgmlDType::Q8_0).unwrap()).unwrap(),
        )
        .unwrap();
        let wg = QTensor::quantize(&w.to_device(&gpu()).unwrap(), GgmlDType::Q8_0).unwrap();
        let raw = QMatMul::from_qtensor(wg).unwrap();
        let dev = Linear::candle_only(raw.clone());
        for m in [1, 2, 8, 9, 14, 16, 20, 53] {
            let x = rows(m, k);
            let xg = x.to_device(&gpu()).unwrap();
            let want = [values(&cpu.forward(&x).unwrap())];
            let ours = [values(&dev.forward(&xg).unwrap())];
            let theirs = [values(&raw.forward(&xg).unwrap())];
            let (g_ours, g_theirs) = (relative_gap(&want, &ours), relative_gap(&want, &theirs));
            let nan = theirs[0].iter().filter(|v| !v.is_finite()).count();
            eprintln!(
                "{n}x{k}, {m} rows: our Linear {g_ours:.2e}; candle's QMatMul alone {g_theirs:.2e} ({nan} of {} not finite)",
                theirs[0].len()
            );
            assert!(g_ours <= 3e-2, "{n}x{k}, {m} rows: {g_ours:.2e}");
        }
    }
}
