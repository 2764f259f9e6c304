//! MHA built from GQA weights is the same function; MQA is a different one.

mod common;

use candle_core::quantized::GgmlDType;
use candle_core::Device;
use common::*;
use inferlab::model::sampler::softmax;
use inferlab::model::{AttnKernel, HeadLayout, LoadOptions, Logits, Model, Requant, RunOptions};

fn logits(m: &Model, prompt: &[u32]) -> (Vec<f32>, usize) {
    let mut kv = m.new_cache(64);
    let l = m.forward(prompt, &mut kv, Logits::All).unwrap();
    let v: Vec<f32> = l.flatten_all().unwrap().to_vec1().unwrap();
    (v, kv.reserved_bytes())
}

fn with(m: &Model, layout: HeadLayout) -> Model {
    m.with_run(RunOptions {
        layout,
        kernel: AttnKernel::Naive,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn mha_expanded_equals_gqa_with_three_times_the_cache() {
    for (dtype, requant) in [
        (GgmlDType::F32, Requant::Keep),
        (GgmlDType::Q4_1, Requant::Q8_0),
    ] {
        let (_d, p) = tiny_file(&Tiny {
            dtype,
            ..Default::default()
        });
        let m = Model::load(
            &p,
            &LoadOptions {
                requant,
                device: Device::Cpu,
            },
        )
        .unwrap();
        let prompt: Vec<u32> = (3..30).collect();
        let (g, gb) = logits(&m, &prompt);
        let mha = with(&m, HeadLayout::Mha);
        assert_eq!(mha.kv_heads(), N_HEAD);
        let (a, ab) = logits(&mha, &prompt);
        let d = max_abs_diff(&g, &a);
        assert!(d < 1e-4, "{dtype:?}: MHA differs from GQA by {d}");
        assert_eq!(
            ab,
            gb * N_HEAD / N_KV,
            "KV bytes scale by n_head / n_kv_head"
        );
    }
}

#[test]
fn mqa_is_smaller_and_different() {
    let (_d, p) = tiny_file(&Tiny::default());
    let m = Model::load(&p, &LoadOptions::default()).unwrap();
    let prompt: Vec<u32> = (3..30).collect();
    let (g, gb) = logits(&m, &prompt);
    let mqa = with(&m, HeadLayout::Mqa);
    let (q, qb) = logits(&mqa, &prompt);
    assert_eq!(qb * N_KV, gb);
    let v = m.cfg.vocab;
    let mut kl = 0.0;
    for r in 0..prompt.len() {
        let pg = softmax(&g[r * v..][..v], 1.0);
        let pq = softmax(&q[r * v..][..v], 1.0);
        kl += pg
            .iter()
            .zip(&pq)
            .map(|(a, b)| a * (a / b).ln())
            .sum::<f32>();
    }
    assert!(kl > 1e-4, "mean-pooled K/V must change the model (KL {kl})");
    // Mapping: every query head reads KV head 0.
    assert_eq!(HeadLayout::Mqa.query_to_kv(&m.cfg), vec![0; N_HEAD]);
    assert_eq!(HeadLayout::Gqa.query_to_kv(&m.cfg), vec![0, 0, 1, 1]);
    assert_eq!(HeadLayout::Mha.query_to_kv(&m.cfg), vec![0, 1, 2, 3]);
}

#[test]
fn unknown_layout_is_a_clear_error() {
    let e = "moa".parse::<HeadLayout>().unwrap_err().to_string();
    assert!(e.contains("moa") && e.contains("mha, gqa or mqa"), "{e}");
    assert_eq!("GQA".parse::<HeadLayout>().unwrap(), HeadLayout::Gqa);
}

#[test]
fn tiled_kernel_in_the_model_gives_the_same_logits_and_fewer_bytes() {
    let (_d, p) = tiny_file(&Tiny::default());
    let m = Model::load(
        &p,
        &LoadOptions {
            requant: Requant::F32,
            device: Device::Cpu,
        },
    )
    .unwrap();
    let prompt: Vec<u32> = (3..50).collect();
    let run = |kernel| {
        let mm = m
            .with_run(RunOptions {
                layout: HeadLayout::Gqa,
                kernel,
                ..Default::default()
            })
            .unwrap();
        let mut probe = inferlab::model::Probe::new(inferlab::model::LayerSelect::One(0));
        let pass = mm
            .pass(&[&prompt], &mut mm.new_cache(64), &mut probe, Logits::All)
            .unwrap();
        let l = pass.logits[0]
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        (l, pass.counts.attn_io, probe)
    };
    let (a, io_a, _) = run(AttnKernel::Naive);
    let (b, io_b, pb) = run(AttnKernel::Tiled {
        sram_bytes: 4 * 4 * 16 * 16,
    });
    let d = max_abs_diff(&a, &b);
    assert!(d < 1e-4, "{d}");
    assert!(io_b.total() < io_a.total(), "{io_b:?} vs {io_a:?}");
    assert!(!pb.captures[0].tile_schedule.is_empty());
}
