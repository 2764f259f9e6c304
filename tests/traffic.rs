//! The engine counts the bytes and FLOPs of the operations it runs: on a tiny model the
//! counts equal the analytic sums.

mod common;

use common::*;
use inferlab::model::{AttnKernel, LayerSelect, Logits, Probe, RunOptions};

#[test]
fn a_pass_counts_the_bytes_and_flops_it_moves() {
    let (_d, m) = tiny_f32();
    let (layers, heads, d) = (N_LAYER as u64, N_HEAD as u64, (HIDDEN / N_HEAD) as u64);
    // One layer's K and V row of one token, f32.
    let row = (2 * N_KV * (HIDDEN / N_HEAD) * 4) as u64;
    let (weight_bytes, macs) = m.matrix_cost();
    let (head_out, head_in) = m.weights.lm_head.dims();
    let head_macs = (head_out * head_in) as u64;
    let layer_macs = macs as u64 - head_macs;
    let mut kv = m.new_cache(64);
    let mut probe = Probe::new(LayerSelect::None);
    // A prefill of 10 tokens: every matrix read once for all ten rows, logits for one.
    let prompt: Vec<u32> = (3..13).collect();
    m.forward(&prompt, &mut kv, Some(&mut probe), Logits::Last)
        .unwrap();
    let t = probe.traffic;
    assert_eq!(t.weight_bytes, weight_bytes as u64);
    assert_eq!(t.kv_write_bytes, layers * 10 * row);
    assert_eq!(t.kv_read_bytes, layers * 10 * row);
    // Naive attention writes and reads back the 10 × 10 scores and weights of every head.
    assert_eq!(t.score_bytes, layers * 16 * heads * 10 * 10);
    let attention = layers * 4 * heads * 10 * 10 * d;
    assert_eq!(t.flops, 2 * (10 * layer_macs + head_macs) + attention);
    // One decode step: the same weights again, one new row, every cached row read.
    m.forward(&[5], &mut kv, Some(&mut probe), Logits::Last)
        .unwrap();
    let t = probe.traffic;
    assert_eq!(t.weight_bytes, weight_bytes as u64);
    assert_eq!(t.kv_write_bytes, layers * row);
    assert_eq!(t.kv_read_bytes, layers * 11 * row);
    assert_eq!(t.score_bytes, layers * 16 * heads * 11);
    assert_eq!(
        t.flops,
        2 * (layer_macs + head_macs) + layers * 4 * heads * 11 * d
    );
}

#[test]
fn the_tiled_kernel_moves_fewer_score_bytes_and_batches_read_weights_once() {
    let (_d, m) = tiny_f32();
    let prompt: Vec<u32> = (3..40).collect();
    let score = |run: RunOptions| {
        let m = m.with_run(run).unwrap();
        let mut kv = m.new_cache(64);
        let mut probe = Probe::new(LayerSelect::None);
        m.forward(&prompt, &mut kv, Some(&mut probe), Logits::Last)
            .unwrap();
        probe.traffic
    };
    let naive = score(RunOptions::default());
    let tiled = score(RunOptions {
        kernel: AttnKernel::Tiled { sram_bytes: 4096 },
        ..Default::default()
    });
    assert!(
        tiled.score_bytes < naive.score_bytes,
        "{tiled:?} vs {naive:?}"
    );
    assert_eq!(tiled.kv_read_bytes, naive.kv_read_bytes);
    assert_eq!(tiled.weight_bytes, naive.weight_bytes);
    // Two sequences in one pass read the weights once, not twice.
    let mut a = m.new_cache(64);
    let mut b = m.new_cache(64);
    let mut batch = inferlab::kv::ContiguousBatch(vec![&mut a, &mut b]);
    let mut probe = Probe::new(LayerSelect::None);
    let seqs: [&[u32]; 2] = [&prompt[..5], &prompt[..7]];
    m.forward_batch(&seqs, &mut batch, Some(&mut probe), Logits::Last)
        .unwrap();
    assert_eq!(probe.traffic.weight_bytes, m.matrix_cost().0 as u64);
    let row = (2 * N_KV * (HIDDEN / N_HEAD) * 4) as u64;
    assert_eq!(probe.traffic.kv_write_bytes, N_LAYER as u64 * 12 * row);
}

#[test]
fn a_serving_iteration_reads_the_weights_once_for_its_whole_batch() {
    use inferlab::serve::{CacheKind, Policy, Request, ServeConfig, ServeEngine};
    let (_d, m) = tiny_f32();
    let cfg = ServeConfig {
        policy: Policy::Continuous,
        cache: CacheKind::Paged,
        kv_budget_tokens: 256,
        page_size: 4,
        max_batch: 4,
        token_budget: 64,
        prefix_sharing: false,
        reserve: Default::default(),
    };
    let reqs = (0..3)
        .map(|i| Request::new(i, (3 + i as u32..9 + i as u32).collect(), 4, 0))
        .collect();
    let mut e = ServeEngine::new(&m, cfg, reqs).unwrap();
    let row = (2 * N_KV * (HIDDEN / N_HEAD) * 4) as u64;
    for _ in 0..3 {
        let s = e.step().unwrap();
        // One pass per iteration: the weights once, each scheduled token's K and V once.
        assert_eq!(s.traffic.weight_bytes, m.matrix_cost().0 as u64);
        assert_eq!(
            s.traffic.kv_write_bytes,
            N_LAYER as u64 * s.tokens_scheduled as u64 * row
        );
    }
}
