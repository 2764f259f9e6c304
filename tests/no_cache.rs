//! The cache's counterfactual: without a KV cache every decode step recomputes the keys
//! and values of the whole sequence. The tokens are the same; the work grows with the
//! position, where the cached step's stays flat.

mod common;

use inferlab::model::session::Session;
use inferlab::model::SamplerConfig;

/// Greedy tokens and per-step FLOPs of `steps` iterations, with or without the cache.
fn run(m: &inferlab::model::Model, recompute: bool, steps: usize) -> (Vec<u32>, Vec<u64>) {
    let mut s = Session::new(m, (3..13).collect(), steps, SamplerConfig::default());
    s.recompute = recompute;
    let mut flops = Vec::new();
    for _ in 0..steps {
        let info = s.step().unwrap();
        assert_eq!(
            info.step == 0,
            info.phase == inferlab::model::session::Phase::Prefill
        );
        flops.push(info.traffic.flops);
    }
    (s.generated().to_vec(), flops)
}

#[test]
fn without_the_cache_the_tokens_are_the_same_and_each_step_redoes_the_whole_sequence() {
    let (_dir, m) = common::tiny_f32();
    let (cached, cached_flops) = run(&m, false, 8);
    let (recomputed, recomputed_flops) = run(&m, true, 8);
    assert_eq!(
        cached, recomputed,
        "the cache changes the work, not the tokens"
    );
    // The prefill is the same pass either way.
    assert_eq!(cached_flops[0], recomputed_flops[0]);
    for k in 2..8 {
        // Cached: one token's matmuls, plus a little more attention per step.
        assert!(
            cached_flops[k] < cached_flops[0],
            "step {k}: {cached_flops:?}"
        );
        // Recomputed: the whole sequence (prompt of 10 plus k tokens) every step, growing.
        assert!(
            recomputed_flops[k] > recomputed_flops[k - 1],
            "step {k}: {recomputed_flops:?}"
        );
        assert!(recomputed_flops[k] > 5 * cached_flops[k], "step {k}");
    }
}
