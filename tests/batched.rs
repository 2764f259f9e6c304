//! The batched attention route against the host route, on the CPU device: the same
//! model, the same tokens, one attention per layer for the whole step instead of one per
//! request. What a GPU would run is checked here, where the tests run.

mod common;

use candle_core::Device;
use common::*;
use inferlab::kv::paged::{PagedKv, SeqSlots};
use inferlab::kv::KvElem;
use inferlab::model::sampler::argmax;
use inferlab::model::{AttnRoute, HeadLayout, LoadOptions, Logits, Model, Requant, RunOptions};
use std::sync::OnceLock;

/// The real model with f32 weights, loaded once for the file. (With 8-bit weights each
/// layer's input is rounded to 8 bits, and a difference in the last bit of attention can
/// flip one of those roundings: the routes then agree on the function, not on the bits.)
fn real() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let opts = LoadOptions {
            requant: Requant::F32,
            device: Device::Cpu,
        };
        Model::load(&real_model(), &opts).unwrap()
    })
}

fn on(route: AttnRoute, layout: HeadLayout, kv_elem: KvElem) -> Model {
    real()
        .with_run(RunOptions {
            layout,
            route,
            kv_elem,
            ..Default::default()
        })
        .unwrap()
}

fn row(t: &candle_core::Tensor) -> Vec<f32> {
    Model::last_logits(t).unwrap()
}

/// Greedy tokens and every step's logits: the prompt, then `n` decode steps.
fn greedy(m: &Model, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut kv = m.new_cache(prompt.len() + n + 1);
    let mut logits = vec![row(&m.forward(prompt, &mut kv, Logits::Last).unwrap())];
    let mut toks = Vec::new();
    for _ in 0..n {
        let next = argmax(logits.last().unwrap());
        toks.push(next);
        logits.push(row(&m.forward(&[next], &mut kv, Logits::Last).unwrap()));
    }
    (toks, logits)
}

fn prompt(text: &str) -> Vec<u32> {
    real().tokenizer.encode(text).unwrap()
}

#[test]
fn batched_route_gives_the_host_routes_tokens_and_logits() {
    let p = prompt("The capital of France is Paris, and the capital of Italy is");
    let (host_toks, host) = greedy(&on(AttnRoute::Host, HeadLayout::Gqa, KvElem::F32), &p, 24);
    let m = on(AttnRoute::Batched, HeadLayout::Gqa, KvElem::F32);
    let (toks, batched) = greedy(&m, &p, 24);
    assert_eq!(toks, host_toks);
    // It was the batched route that ran, on the model's own one-sequence store.
    let mut kv = m.new_cache(8);
    let pass = m.pass(
        &[&p[..4]],
        &mut kv,
        &mut inferlab::model::Unobserved,
        Logits::Last,
    );
    assert_eq!(pass.unwrap().counts.route, AttnRoute::Batched);
    for (i, (a, b)) in host.iter().zip(&batched).enumerate() {
        let d = max_abs_diff(a, b);
        assert!(d < 1e-3, "step {i}: logits differ by {d}");
    }
}

#[test]
fn with_f16_keys_and_values_the_batched_route_picks_the_host_routes_tokens() {
    let p = prompt("Once upon a time, in a small village by the sea,");
    let (host, _) = greedy(&on(AttnRoute::Host, HeadLayout::Gqa, KvElem::F16), &p, 24);
    let (batched, _) = greedy(
        &on(AttnRoute::Batched, HeadLayout::Gqa, KvElem::F16),
        &p,
        24,
    );
    assert_eq!(batched, host);
}

#[test]
fn every_head_layout_runs_the_same_on_both_routes() {
    let p = prompt("Water boils at a temperature of");
    for layout in [HeadLayout::Mha, HeadLayout::Gqa, HeadLayout::Mqa] {
        let (_, host) = greedy(&on(AttnRoute::Host, layout, KvElem::F32), &p, 4);
        let (_, batched) = greedy(&on(AttnRoute::Batched, layout, KvElem::F32), &p, 4);
        for (a, b) in host.iter().zip(&batched) {
            let d = max_abs_diff(a, b);
            assert!(d < 1e-3, "{layout:?}: logits differ by {d}");
        }
    }
}

/// Slots for sequences of `lens` tokens on pages of `page`, handed out from the end of
/// the pool backwards, so no sequence's pages are in order or next to each other.
fn scattered(lens: &[usize], page: usize, pages: usize) -> Vec<Vec<u32>> {
    let mut next = pages;
    lens.iter()
        .map(|&n| {
            let mut slots = Vec::new();
            while slots.len() < n {
                next -= 1;
                let first = (next * page) as u32;
                slots.extend((0..page as u32).map(|i| first + i));
            }
            slots.truncate(n);
            slots
        })
        .collect()
}

/// Runs `seqs` as one batch on pages: their prompts in one pass, then `steps` decode
/// passes of all of them together (greedy); returns each pass's last logits per sequence
/// and the batched route's operation count of each pass.
fn on_pages(m: &Model, seqs: &[Vec<u32>], steps: usize) -> (Vec<Vec<Vec<f32>>>, Vec<usize>) {
    let (page, pages) = (16, 64);
    let shape = (m.kv_heads(), m.cfg.head_dim);
    let layers = m.cfg.n_layer;
    let elem = m.run_options().kv_elem;
    let mut kv = match m.run_options().route {
        AttnRoute::Batched => PagedKv::on_slots(layers, shape, (pages, page), elem, &Device::Cpu),
        AttnRoute::Host => {
            PagedKv::new(layers, shape.0, shape.1, (pages, page), elem, &Device::Cpu)
        }
    }
    .unwrap();
    let lens: Vec<usize> = seqs.iter().map(|s| s.len() + steps).collect();
    let slots = scattered(&lens, page, pages);
    let (mut feed, mut before) = (seqs.to_vec(), vec![0; seqs.len()]);
    let (mut out, mut ops) = (Vec::new(), Vec::new());
    for _ in 0..=steps {
        let plan = feed
            .iter()
            .zip(&before)
            .zip(&slots)
            .map(|((f, &b), all)| SeqSlots {
                before: b,
                all: all[..b + f.len()].to_vec(),
            })
            .collect();
        let refs: Vec<&[u32]> = feed.iter().map(Vec::as_slice).collect();
        let mut batch = kv.batch(plan);
        let pass = m
            .pass(
                &refs,
                &mut batch,
                &mut inferlab::model::Unobserved,
                Logits::Last,
            )
            .unwrap();
        ops.push(pass.counts.device_ops);
        let rows: Vec<Vec<f32>> = pass.logits.iter().map(row).collect();
        for (i, f) in feed.iter_mut().enumerate() {
            before[i] += f.len();
            *f = vec![argmax(&rows[i])];
        }
        out.push(rows);
    }
    (out, ops)
}

fn three_prompts() -> Vec<Vec<u32>> {
    [
        "The capital of France is",
        "1, 2, 3, 4,",
        "A short poem about the moon and the stars:",
    ]
    .iter()
    .map(|t| prompt(t))
    .collect()
}

#[test]
fn a_batch_on_pages_gives_each_request_what_it_gets_alone_and_what_the_host_route_gives() {
    let seqs = three_prompts();
    let batched = on(AttnRoute::Batched, HeadLayout::Gqa, KvElem::F32);
    let (together, _) = on_pages(&batched, &seqs, 3);
    let (host, _) = on_pages(&on(AttnRoute::Host, HeadLayout::Gqa, KvElem::F32), &seqs, 3);
    for (i, s) in seqs.iter().enumerate() {
        let (alone, _) = on_pages(&batched, std::slice::from_ref(s), 3);
        // On scattered pages, alone, against one contiguous reservation.
        let (_, contiguous) = greedy(&batched, s, 3);
        for step in 0..=3 {
            let got = &together[step][i];
            for (what, want) in [
                ("alone", &alone[step][0]),
                ("on the host route", &host[step][i]),
                ("in a contiguous reservation", &contiguous[step]),
            ] {
                let d = max_abs_diff(got, want);
                assert!(d < 1e-3, "request {i}, step {step}: {d} from {what}");
            }
        }
    }
}

#[test]
fn a_step_mixing_a_prompt_chunk_with_decode_rows_matches_the_host_route() {
    // Chunked prefill: one request's prompt arrives in two chunks while the others
    // decode, so one pass holds a chunk that starts past position 0 beside single rows.
    let seqs = three_prompts();
    let chunked = |m: &Model| {
        let (page, pages) = (16, 64);
        let layers = m.cfg.n_layer;
        let shape = (m.kv_heads(), m.cfg.head_dim);
        let mut kv = match m.run_options().route {
            AttnRoute::Batched => {
                PagedKv::on_slots(layers, shape, (pages, page), KvElem::F32, &Device::Cpu)
            }
            AttnRoute::Host => PagedKv::new(
                layers,
                shape.0,
                shape.1,
                (pages, page),
                KvElem::F32,
                &Device::Cpu,
            ),
        }
        .unwrap();
        let long = &seqs[2];
        let half = long.len() / 2;
        let slots = scattered(
            &[seqs[0].len() + 1, seqs[1].len() + 1, long.len()],
            page,
            pages,
        );
        let mut run = |feed: Vec<&[u32]>, plan: Vec<SeqSlots>| {
            let mut batch = kv.batch(plan);
            let pass = m.pass(
                &feed,
                &mut batch,
                &mut inferlab::model::Unobserved,
                Logits::Last,
            );
            pass.unwrap().logits.iter().map(row).collect::<Vec<_>>()
        };
        let seq = |i: usize, before: usize, n: usize| SeqSlots {
            before,
            all: slots[i][..before + n].to_vec(),
        };
        let (a, b) = (seqs[0].len(), seqs[1].len());
        // Pass 1: two whole prompts and the long prompt's first half.
        run(
            vec![&seqs[0], &seqs[1], &long[..half]],
            vec![seq(0, 0, a), seq(1, 0, b), seq(2, 0, half)],
        );
        // Pass 2: two decode rows beside the second half.
        run(
            vec![&[42u32], &[7u32], &long[half..]],
            vec![seq(0, a, 1), seq(1, b, 1), seq(2, half, long.len() - half)],
        )
    };
    let host = chunked(&on(AttnRoute::Host, HeadLayout::Gqa, KvElem::F32));
    let batched = chunked(&on(AttnRoute::Batched, HeadLayout::Gqa, KvElem::F32));
    for (i, (h, b)) in host.iter().zip(&batched).enumerate() {
        let d = max_abs_diff(h, b);
        assert!(d < 1e-3, "request {i}: logits differ by {d}");
    }
}

#[test]
fn the_batched_route_launches_as_many_operations_for_eight_requests_as_for_one() {
    let m = on(AttnRoute::Batched, HeadLayout::Gqa, KvElem::F32);
    let p = prompt("The capital of France is");
    let (_, one) = on_pages(&m, std::slice::from_ref(&p), 1);
    let (_, eight) = on_pages(&m, &vec![p; 8], 1);
    assert!(one[1] > 0, "the batched route counted nothing");
    assert_eq!(one, eight, "operations per pass, one request against eight");
    // The host route launches none of its own.
    let host = on(AttnRoute::Host, HeadLayout::Gqa, KvElem::F32);
    let (_, ops) = on_pages(&host, std::slice::from_ref(&prompt("Hi")), 1);
    assert_eq!(ops, vec![0, 0]);
}

#[test]
fn the_batched_route_refuses_what_slot_tensors_cannot_hold() {
    for (kv_elem, kernel) in [
        (KvElem::Int8, inferlab::model::AttnKernel::Naive),
        (
            KvElem::F32,
            inferlab::model::AttnKernel::Tiled {
                sram_bytes: 1 << 20,
            },
        ),
    ] {
        let run = RunOptions {
            kv_elem,
            kernel,
            route: AttnRoute::Batched,
            ..Default::default()
        };
        let err = real().with_run(run).err().expect("refused").to_string();
        assert!(err.contains("--attention-route host"), "{err}");
    }
}

#[test]
fn with_f16_weights_a_gpus_default_both_routes_pick_the_same_tokens() {
    let opts = LoadOptions {
        requant: Requant::F16,
        device: Device::Cpu,
    };
    let base = Model::load(&real_model(), &opts).unwrap();
    let route = |route| {
        let run = RunOptions {
            route,
            ..Default::default()
        };
        base.with_run(run).unwrap()
    };
    let p = prompt("The three primary colors are");
    let (host, hl) = greedy(&route(AttnRoute::Host), &p, 8);
    let (batched, bl) = greedy(&route(AttnRoute::Batched), &p, 8);
    assert_eq!(batched, host);
    // And they are the f32 weights' tokens: f16 rounds each weight, not the answer.
    let (exact, _) = greedy(&on(AttnRoute::Host, HeadLayout::Gqa, KvElem::F32), &p, 8);
    assert_eq!(batched, exact);
    let d = max_abs_diff(&hl[0], &bl[0]);
    eprintln!("f16 weights: host and batched logits differ by {d}");
    assert!(d < 0.05, "{d}");
}

#[test]
fn the_probe_sees_the_same_attention_on_both_routes() {
    use inferlab::model::{LayerSelect, Probe};
    let p = prompt("The capital of France is Paris, and the capital of Italy is");
    let mut seen = Vec::new();
    for route in AttnRoute::ALL {
        let m = on(route, HeadLayout::Gqa, KvElem::F32);
        let mut kv = m.new_cache(p.len() + 2);
        let mut probe = Probe::new(LayerSelect::All);
        m.pass(&[&p], &mut kv, &mut probe, Logits::Last).unwrap();
        // And a decode step after the prompt.
        m.pass(&[&[42u32]], &mut kv, &mut probe, Logits::Last)
            .unwrap();
        seen.push(probe.captures);
    }
    let (host, batched) = (&seen[0], &seen[1]);
    assert_eq!(host.len(), batched.len());
    for (a, b) in host.iter().zip(batched) {
        assert_eq!((a.layer, a.t, a.kv_len), (b.layer, b.t, b.kv_len));
        let d = max_abs_diff(&a.weights, &b.weights);
        assert!(d < 1e-4, "layer {}: weights differ by {d}", a.layer);
    }
}

#[test]
fn the_sink_experiments_windows_read_the_same_on_both_routes_through_evictions() {
    use inferlab::sink::SinkRun;
    let text = "The old lighthouse keeper climbed the stairs every evening to light the lamp, \
                and every morning he wrote in his log what the sea had done during the night. \
                Some nights were calm and some were wild, but the lamp never went out.";
    let toks = prompt(text);
    let (window, page) = (16, 4);
    assert!(
        toks.len() > window + 3 * page,
        "the text must evict several pages"
    );
    let run = |route| {
        let m = on(route, HeadLayout::Gqa, KvElem::F32);
        let mut run = SinkRun::new(&m, toks.clone(), window, page).unwrap();
        let mut views = Vec::new();
        while !run.done() {
            views.push(run.step(&m).unwrap());
        }
        views
    };
    let (host, batched) = (run(AttnRoute::Host), run(AttnRoute::Batched));
    assert_eq!(host.len(), batched.len());
    for (i, (h, b)) in host.iter().zip(&batched).enumerate() {
        for (lh, lb) in h.lanes.iter().zip(&b.lanes) {
            assert_eq!(lh.kept_pages, lb.kept_pages, "token {i}, {}", lh.name);
            let d = (lh.p_next - lb.p_next).abs();
            assert!(d < 1e-4, "token {i}, {}: p(next) differs by {d}", lh.name);
            // The device's top three are the host's, in the same order.
            let names = |l: &inferlab::sink::SinkLane| {
                l.top.iter().map(|t| t.0.clone()).collect::<Vec<_>>()
            };
            assert_eq!(names(lh), names(lb), "token {i}, {}", lh.name);
            assert!((lh.perplexity - lb.perplexity).abs() < 1e-3 * lh.perplexity);
        }
    }
    // The windows did evict, and the sink lane kept page 0 all along.
    let last = &batched.last().unwrap().lanes;
    assert!(last[1].evicted_pages >= 3 && last[2].kept_pages[0] == 0);
    assert!(last[1].kept_pages[0] > 0);
}

#[test]
fn a_session_on_the_batched_route_picks_on_the_device_what_the_host_picks() {
    use inferlab::model::session::Session;
    use inferlab::model::SamplerConfig;
    let p = prompt("Once upon a time, in a small village by the sea,");
    // Nuclei of one token to a few hundred. (Over the whole vocabulary at T 1.5 a draw
    // can land a few ids away: the host sums 49,152 probabilities one by one in f32, the
    // device in blocks, and the two sums part by more than a tail token's probability.)
    for (temperature, top_p) in [(0.0, 0.9), (1.0, 0.9), (0.7, 0.5)] {
        let cfg = SamplerConfig {
            temperature,
            top_p,
            seed: 11,
        };
        let steps = |route| {
            let mut s = Session::new(&on(route, HeadLayout::Gqa, KvElem::F32), p.clone(), 24, cfg);
            s.probe.lens = true;
            (0..24).map(|_| s.step().unwrap()).collect::<Vec<_>>()
        };
        let (host, dev) = (steps(AttnRoute::Host), steps(AttnRoute::Batched));
        let ids = |v: &[inferlab::model::session::StepInfo]| {
            v.iter().map(|s| s.token_id).collect::<Vec<_>>()
        };
        assert_eq!(ids(&dev), ids(&host), "T {temperature} top-p {top_p}");
        for (h, d) in host.iter().zip(&dev) {
            assert_eq!(d.route, AttnRoute::Batched);
            for (a, b) in h.top_k.iter().zip(&d.top_k) {
                assert_eq!(a.id, b.id, "step {}", h.step);
                // The routes' logits differ in the fourth decimal, and so then do the
                // probabilities (the unit tests compare the pick on equal logits exactly).
                let close = (a.prob - b.prob).abs() < 1e-3 && (a.drawn - b.drawn).abs() < 1e-3;
                assert!(close, "step {}: {a:?} against {b:?}", h.step);
            }
            assert_eq!(h.top_k.len(), d.top_k.len());
            assert_eq!(h.logit_lens.len(), d.logit_lens.len());
            for (a, b) in h.logit_lens.iter().zip(&d.logit_lens) {
                assert_eq!(a.id, b.id, "step {} layer {}", h.step, a.layer);
                assert!((a.prob - b.prob).abs() < 1e-3);
                assert!((a.chosen_prob - b.chosen_prob).abs() < 1e-3);
            }
        }
    }
}
