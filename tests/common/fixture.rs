//! A fixed step report (and the app state built from it) for pane and picture tests: a
//! 10-token request on a 2-layer, 3-head model, with known attention patterns.

use inferlab::model::config::LlamaConfig;
use inferlab::model::flash::IoCount;
use inferlab::model::probe::{LayerCapture, Timing};
use inferlab::model::sampler::TopToken;
use inferlab::model::session::{Phase, StepInfo};
use inferlab::model::{AttnKernel, HeadLayout, RunOptions};
use inferlab::report::{KvReport, StepReport};
use inferlab::ui::app::App;
use inferlab::worker::Event;

pub fn cfg() -> LlamaConfig {
    LlamaConfig {
        architecture: "llama".into(),
        n_layer: 2,
        hidden: 12,
        ffn: 24,
        n_head: 3,
        n_kv_head: 1,
        head_dim: 4,
        rope_base: 10000.0,
        rms_eps: 1e-5,
        context: 64,
        vocab: 10,
        rope_interleaved: true,
    }
}

/// A causal attention pattern: head h favours key (i - h), the rest spread evenly.
pub fn capture(layer: usize, t: usize) -> LayerCapture {
    let (nh, kv) = (3, t);
    let mut w = vec![0.0; nh * t * kv];
    for h in 0..nh {
        for i in 0..t {
            let fav = i.saturating_sub(h);
            for j in 0..=i {
                w[(h * t + i) * kv + j] = if j == fav { 0.6 } else { 0.4 / i.max(1) as f32 };
            }
        }
    }
    LayerCapture {
        layer,
        n_head: nh,
        n_kv_head: 1,
        head_dim: 4,
        t,
        kv_len: kv,
        pos0: 0,
        scores: w.iter().map(|x| x * 10.0 - 2.0).collect(),
        weights: w,
        resid_norm_in: vec![1.0; t],
        resid_norm_attn: vec![2.0; t],
        resid_norm_out: vec![3.5; t],
        tile_schedule: vec![(0, 0), (1, 0), (1, 1)],
        block: inferlab::model::probe::BlockProbe {
            q_norm_pre_rope: 3.25,
            q_norm_post_rope: 3.25,
            rope_angle0: (t - 1) as f32,
            rms_in: 0.8,
            rms_normed: 1.9,
            gate_closed_pct: 41.0,
            rope_shift: inferlab::model::probe::RopeShift {
                offset: 4,
                at: 8,
                shift: 1000,
                score: 1.25,
                score_shifted: 1.25,
                score_other_offset: 0.5,
            },
        },
        ..Default::default()
    }
}

pub fn report() -> StepReport {
    let pieces: Vec<String> = [
        "<|im_start|>",
        "user",
        "\n",
        "What",
        " is",
        " a",
        " cache",
        "?",
        "A",
        " cache",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let t = pieces.len();
    StepReport {
        iteration: 3,
        cfg: cfg(),
        settings: inferlab::settings::Settings {
            run: RunOptions {
                layout: HeadLayout::Gqa,
                kernel: AttnKernel::Naive,
                ..Default::default()
            },
            ..Default::default()
        },
        prompt: "What is a cache?".into(),
        pieces,
        prompt_len: 8,
        generated: "A cache".into(),
        info: StepInfo {
            step: 0,
            phase: Phase::Prefill,
            input_len: t,
            token_id: 4,
            token: " stores".into(),
            kv_len: t,
            top_k: vec![
                TopToken {
                    id: 4,
                    token: " stores".into(),
                    logit: 5.0,
                    prob: 0.62,
                    drawn: 1.0,
                },
                TopToken {
                    id: 5,
                    token: " is".into(),
                    logit: 4.0,
                    prob: 0.21,
                    drawn: 0.0,
                },
                TopToken {
                    id: 6,
                    token: " keeps".into(),
                    logit: 3.0,
                    prob: 0.08,
                    drawn: 0.0,
                },
            ],
            is_eos: false,
            wall_ms: 12.5,
            layout: HeadLayout::Gqa,
            query_to_kv: vec![0, 0, 0],
            kv_bytes_per_token: HeadLayout::ALL
                .iter()
                .map(|l| (*l, l.kv_bytes_per_token(&cfg(), inferlab::kv::KvElem::F32)))
                .collect(),
            weight_bytes_by_layout: Default::default(),
            kernel: AttnKernel::Naive,
            no_cache: false,
            sampler: Default::default(),
            route: Default::default(),
            device_ops: 0,
            attn_io: IoCount {
                read: 40_000,
                written: 9_000,
            },
            timing: Timing {
                embed_ms: 0.02,
                layers_ms: vec![4.0, 6.0],
                lm_head_ms: 1.5,
                observe_ms: 0.0,
            },
            sample_ms: 0.03,
            traffic: Default::default(),
            captures: vec![capture(0, t), capture(1, t)],
            logit_lens: Vec::new(),
        },
        kv: KvReport {
            capacity: 40,
            used: t,
            bytes_per_token: 64,
            reserved_bytes: 2560,
        },
        decode_tok_per_s: 0.0,
        finished: false,
        recomputed: false,
        repeat: false,
        serve: None,
        serve_compare: None,
        sink: None,
        beside: None,
    }
}

/// An app that has received the fixture report.
pub fn app() -> App {
    let mut a = App::new(RunOptions::default());
    a.on_event(Event::Ready {
        model: "fixture.gguf".into(),
    });
    a.on_event(Event::Report(Box::new(report())));
    a
}

/// The fixture as iteration `i` of a session.
pub fn numbered(i: usize) -> StepReport {
    let mut r = report();
    r.iteration = i;
    r.info.step = i - 1;
    r.generated = format!("text after {i}");
    r
}

/// Fixture reports, iterations `1..=n`, each with one iteration of a real tiny-model
/// serving engine (5 requests, pages of 4, a 96-token budget, at most 3 at once) beside it.
pub fn serving_reports(cache: inferlab::serve::CacheKind, n: usize) -> Vec<StepReport> {
    serving_reports_with(inferlab::serve::Policy::Continuous, cache, n)
}

/// [`serving_reports`] under a chosen batching policy.
pub fn serving_reports_with(
    policy: inferlab::serve::Policy,
    cache: inferlab::serve::CacheKind,
    n: usize,
) -> Vec<StepReport> {
    use inferlab::report::ServeReport;
    use inferlab::serve::{ServeConfig, ServeEngine};
    let (_d, m) = super::tiny_f32();
    let w = inferlab::serve::workload::Workload {
        requests: 5,
        prompt_min: 4,
        prompt_max: 12,
        output_min: 3,
        output_max: 9,
        output_dist: inferlab::serve::workload::LengthDist::Uniform,
        mean_gap: 1.0,
        rate_per_s: 0.0,
        seed: 4,
    };
    let src: Vec<u32> = (3..200).collect();
    let cfg = ServeConfig {
        policy,
        cache,
        kv_budget_tokens: 96,
        page_size: 4,
        max_batch: 3,
        token_budget: 32,
        prefix_sharing: true,
        reserve: Default::default(),
    };
    let mut e = ServeEngine::new(&m, cfg, w.generate(&src)).unwrap();
    let mut generated = 0;
    (1..=n)
        .map(|i| {
            let s = e.step().unwrap();
            generated += s.tokens_generated;
            let mut r = report();
            r.iteration = i;
            (r.settings.serving.policy, r.settings.serving.cache) = (policy, cache);
            r.serve = Some(ServeReport {
                policy,
                cache,
                page_size: 4,
                requests: 5,
                max_batch: 3,
                layout: None,
                step: s,
                preemptions: e.preemptions(),
                done: e.done(),
                generated_total: generated,
                copies_total: 0,
                last_copy: None,
                // A fixed 5 ms per iteration: pictures must not depend on this machine.
                elapsed_ms: 5.0 * i as f64,
                latency: Default::default(),
                // Requests with a token so far waited 2 ms per id (fixed, as above).
                ttft_ms: e
                    .requests()
                    .iter()
                    .filter(|r| !r.generated.is_empty())
                    .map(|r| (r.id, 2.0 * r.id as f64 + 1.0))
                    .collect(),
                rate_per_s: 0.0,
            });
            r
        })
        .collect()
}

/// One step of the sink experiment: token 20 of 40, a 12-token window of 4-token pages;
/// the plain window has lost pages 0 and 1, the sink window pages 1 and 2.
pub fn sink_view() -> inferlab::sink::SinkView {
    use inferlab::sink::{SinkLane, SinkView};
    let lane = |name: &str, ppl: f64, kept: Vec<usize>, evicted: usize| SinkLane {
        name: name.into(),
        perplexity: ppl,
        perplexity_after_eviction: Some(ppl + 1.0),
        p_next: 0.25,
        top: vec![(" the".into(), 0.25), (" a".into(), 0.125)],
        kept_pages: kept,
        cached_tokens: 12,
        evicted_pages: evicted,
    };
    SinkView {
        pos: 20,
        text_tokens: 40,
        window: 12,
        page_size: 4,
        token: " sat".into(),
        next: " on".into(),
        lanes: vec![
            lane("full", 10.5, (0..5).collect(), 0),
            lane("window", 30.25, vec![2, 3, 4], 2),
            lane("window_sink", 11.75, vec![0, 3, 4], 2),
        ],
        done: false,
    }
}

/// Fixed machine limits, so pictures drawn against them do not depend on this machine.
pub fn machine() -> inferlab::machine::Machine {
    inferlab::machine::Machine {
        cpu: "fixture CPU".into(),
        threads: 2,
        read_gb_per_s: 20.0,
        read_gb_per_s_one_thread: 12.0,
        int8_gmac_per_s: 800.0,
        f32_gflop_per_s: 400.0,
        q8_kernel_gmac_per_s: 100.0,
        features: vec!["avx2".into()],
        measured_at_unix_s: None,
    }
}

/// An app that ran a real tiny-model request (a prefill and two decode steps) with a real
/// tiny serving engine beside it, the traffic pane shown and the machine's limits known.
/// Times are fixed (a real run's vary) so the pictures are stable.
pub fn traffic_app() -> App {
    let (_d, m) = super::tiny_f32_with_context(256);
    let live = inferlab::worker::run_request(&m, "Hi", 4, 3).unwrap();
    let serving = serving_reports(inferlab::serve::CacheKind::Paged, 3);
    let mut a = App::new(RunOptions::default());
    a.on_event(Event::Ready {
        model: "fixture.gguf".into(),
    });
    a.on_event(Event::Machine(machine()));
    for (i, (mut r, s)) in live.into_iter().zip(serving).enumerate() {
        r.iteration = i + 1;
        r.info.wall_ms = [40.0, 2.0, 2.5][i];
        r.decode_tok_per_s = 400.0;
        let t = &mut r.info.timing;
        t.layers_ms
            .iter_mut()
            .enumerate()
            .for_each(|(l, ms)| *ms = 1.0 + l as f64);
        (t.embed_ms, t.lm_head_ms, r.info.sample_ms) = (0.01, 0.3, 0.02);
        t.observe_ms = [4.0, 0.5, 0.5][i];
        r.serve = s.serve.map(|mut v| {
            v.step.wall_ms = 5.0;
            v
        });
        a.on_event(Event::Report(Box::new(r)));
    }
    a.update(inferlab::ui::app::Action::ToggleTraffic);
    a
}
