//! The engine counts the bytes and FLOPs of the operations it runs: on a tiny model the
//! counts equal the analytic sums.

mod common;

use common::*;
use inferlab::model::{AttnKernel, Logits, RunOptions, Unobserved};

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
    // A prefill of 10 tokens: every matrix read once for all ten rows, logits for one.
    let prompt: Vec<u32> = (3..13).collect();
    let t = m
        .pass(&[&prompt], &mut kv, &mut Unobserved, Logits::Last)
        .unwrap()
        .counts
        .traffic;
    assert_eq!(t.weight_bytes, weight_bytes as u64);
    assert_eq!(t.kv_write_bytes, layers * 10 * row);
    assert_eq!(t.kv_read_bytes, layers * 10 * row);
    // Naive attention writes and reads back the 10 × 10 scores and weights of every head.
    assert_eq!(t.score_bytes, layers * 16 * heads * 10 * 10);
    let attention = layers * 4 * heads * 10 * 10 * d;
    assert_eq!(t.flops, 2 * (10 * layer_macs + head_macs) + attention);
    // One decode step: the same weights again, one new row, every cached row read.
    let t = m
        .pass(&[&[5]], &mut kv, &mut Unobserved, Logits::Last)
        .unwrap()
        .counts
        .traffic;
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
        let pass = m.pass(&[&prompt], &mut kv, &mut Unobserved, Logits::Last);
        pass.unwrap().counts.traffic
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
    let seqs: [&[u32]; 2] = [&prompt[..5], &prompt[..7]];
    let pass = m.pass(&seqs, &mut batch, &mut Unobserved, Logits::Last);
    let t = pass.unwrap().counts.traffic;
    assert_eq!(t.weight_bytes, m.matrix_cost().0 as u64);
    let row = (2 * N_KV * (HIDDEN / N_HEAD) * 4) as u64;
    assert_eq!(t.kv_write_bytes, N_LAYER as u64 * 12 * row);
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

#[test]
fn the_traffic_view_takes_its_figures_from_the_reports() {
    use inferlab::model::HeadLayout;
    use inferlab::views::traffic;
    let (_d, m) = tiny_f32_with_context(256);
    let reports = inferlab::worker::run_request(&m, "Hi", 4, 3).unwrap();
    let machine = common::fixture::machine();
    let now = &reports[2];
    let v = traffic::view(now, &reports[..2], Some(&machine));
    // The crossover: the pass's weight bytes over each layout's KV bytes per token.
    let c = v.crossover.clone().unwrap();
    assert_eq!(c.weight_bytes, now.info.traffic.weight_bytes);
    assert_eq!(c.layout, HeadLayout::Gqa);
    assert_eq!(c.live, now.info.kv_len);
    // The weights each layout would read: the counted ones for the layout that ran.
    let weights = &now.info.weight_bytes_by_layout;
    assert_eq!(weights[&HeadLayout::Gqa], c.weight_bytes);
    assert!(
        weights[&HeadLayout::Mha] > c.weight_bytes && weights[&HeadLayout::Mqa] < c.weight_bytes
    );
    for (l, n) in &c.tokens {
        let (per, w) = (now.info.kv_bytes_per_token[l] as u64, weights[l]);
        assert!(n * per >= w && (n - 1) * per < w, "{l}");
    }
    let at = |l: HeadLayout| c.tokens.iter().find(|t| t.0 == l).unwrap().1 as f64;
    // MHA stores every query head's K and V: N_HEAD / N_KV times the KV bytes per token,
    // against slightly more weights (its K and V projections grow too).
    let sooner = at(HeadLayout::Gqa) / at(HeadLayout::Mha);
    let ratio = (N_HEAD / N_KV) as f64;
    assert!(sooner < ratio && sooner > 0.6 * ratio, "{sooner}");
    assert!(at(HeadLayout::Mqa) > at(HeadLayout::Gqa));
    // The roofline: the prefill from history, this decode step, no serving batch here.
    let labels: Vec<&str> = v.points.iter().map(|p| p.label).collect();
    assert_eq!(labels, ["prefill", "B=1 decode"]);
    assert!(v.points[1].now && !v.points[0].now);
    // A prefill reuses each weight over many rows: more work per byte than a decode row.
    assert!(v.points[0].at.intensity() > 3.0 * v.points[1].at.intensity());
    // The point is the model's: the step's wall time less the probe's looking, which the
    // run did (it captured attention) and the headline shows beside.
    let looking = now.info.timing.observe_ms;
    assert!(looking > 0.0 && looking < now.info.wall_ms, "{looking}");
    let ms = now.info.wall_ms - looking;
    assert!((v.now.ms - ms).abs() < 1e-9);
    let bytes = v.now.bytes() as f64;
    assert!((v.now.gb_per_s() - bytes / 1e9 / (ms / 1e3)).abs() < 1e-9);
    let head = v.rows(false).into_iter().next();
    assert!(
        matches!(&head, Some(traffic::Row::Text(t)) if t.contains("capturing for the panes")),
        "the probe's time is shown apart"
    );
    let roof = v.roof.unwrap();
    assert_eq!(roof.peak_gops, 2.0 * machine.int8_gmac_per_s);
    assert_eq!(roof.at(1.0), machine.read_gb_per_s);
    assert_eq!(roof.at(1e6), roof.peak_gops);
    // Scrubbed back to the prefill, later steps are not on the roofline.
    let back = traffic::view(&reports[0], &reports, None);
    let labels: Vec<&str> = back.points.iter().map(|p| p.label).collect();
    assert_eq!(labels, ["prefill"]);
    assert!(back.roof.is_none());
}

#[test]
fn the_long_workload_passes_the_crossover_under_gqa_and_mha_passes_it_sooner() {
    use inferlab::model::{HeadLayout, LoadOptions, Model, TextTokenizer};
    let base = Model::load(&real_model(), &LoadOptions::default()).unwrap();
    let parts = inferlab::worker::long_parts();
    assert_eq!(parts.len(), 8, "eight parts, the title joined to the first");
    for line in inferlab::assets::LONG_TEXT
        .lines()
        .filter(|l| !l.is_empty())
    {
        assert_eq!(
            parts.iter().filter(|p| p.contains(line)).count(),
            1,
            "{line}"
        );
    }
    let prompts: usize = parts
        .iter()
        .map(|p| {
            base.tokenizer
                .encode(&TextTokenizer::chat_prompt(p))
                .unwrap()
                .len()
        })
        .sum();
    // The workload's KV budget holds every prompt with its longest output: no preemption.
    assert!(prompts + 8 * 192 <= 6144, "{prompts}");
    let crossover = |l: HeadLayout| {
        let m = base
            .with_run(RunOptions {
                layout: l,
                ..Default::default()
            })
            .unwrap();
        // What the report says for a layout is what that model really reads.
        assert_eq!(base.weight_bytes_under(l), m.matrix_cost().0 as u64, "{l}");
        (m.matrix_cost().0 / m.kv_bytes_per_token()) as f64
    };
    let (gqa, mha) = (crossover(HeadLayout::Gqa), crossover(HeadLayout::Mha));
    crossover(HeadLayout::Mqa);
    // Under GQA the batch crosses while it decodes (prompts alone are below, prompts and
    // the shortest outputs above); under MHA the prompts alone are well past it: three
    // times the KV per token against ~10% more weights.
    assert!(
        (prompts as f64) < gqa && (prompts + 8 * 96) as f64 > gqa,
        "{prompts} vs {gqa}"
    );
    assert!(gqa / mha > 2.6 && gqa / mha < 3.0, "{}", gqa / mha);
    assert!(prompts as f64 > 2.5 * mha);
}
