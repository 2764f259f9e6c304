//! The windowed cache of the attention-sink experiment.

mod common;

use common::*;
use inferlab::kv::window::Windowed;
use inferlab::kv::BatchKv;
use inferlab::model::{Logits, Model};

fn read(m: &Model, toks: &[u32], kv: &mut dyn BatchKv) -> Vec<Vec<f32>> {
    toks.iter()
        .map(|t| Model::last_logits(&m.forward(&[*t], kv, Logits::Last).unwrap()).unwrap())
        .collect()
}

#[test]
fn a_window_that_never_fills_matches_the_full_cache() {
    let (_d, m) = tiny_f32();
    let toks: Vec<u32> = (10..40).collect();
    let mut full = m.new_cache(64);
    let mut w = Windowed::new(N_LAYER, N_KV, HIDDEN / N_HEAD, 64, 8, false, &m.device).unwrap();
    let a = read(&m, &toks, &mut full);
    let b = read(&m, &toks, &mut w);
    for (x, y) in a.iter().zip(&b) {
        assert!(max_abs_diff(x, y) < 1e-4);
    }
    assert_eq!(w.evicted_pages, 0);
}

#[test]
fn eviction_keeps_the_window_and_optionally_the_first_page() {
    let (_d, m) = tiny_f32();
    let toks: Vec<u32> = (10..50).collect();
    for sink in [false, true] {
        let mut w = Windowed::new(N_LAYER, N_KV, HIDDEN / N_HEAD, 16, 4, sink, &m.device).unwrap();
        let out = read(&m, &toks, &mut w);
        assert!(out.iter().flatten().all(|x| x.is_finite()));
        assert!(w.positions.len() <= 16);
        assert_eq!(w.len(), 40, "positions keep counting after evictions");
        assert_eq!(*w.positions.last().unwrap(), 39);
        if sink {
            assert_eq!(&w.positions[..4], &[0, 1, 2, 3]);
        } else {
            assert!(w.positions[0] > 20);
        }
        // Every eviction removes one page of four.
        assert_eq!(w.evicted_pages * 4 + w.positions.len(), 40);
    }
    assert!(Windowed::new(N_LAYER, N_KV, 16, 4, 4, true, &m.device).is_err());
}

#[test]
fn the_live_sink_experiment_agrees_until_the_window_fills_then_keeps_page_zero() {
    use inferlab::sink::SinkRun;
    let (_d, m) = tiny_f32();
    let toks: Vec<u32> = (0..40).map(|i| 5 + (i * 7) % 50).collect();
    let (window, page) = (12, 4);
    let mut run = SinkRun::new(&m, toks.clone(), window, page).unwrap();
    let mut views = Vec::new();
    while !run.done() {
        views.push(run.step(&m).unwrap());
    }
    assert_eq!(views.len(), toks.len() - 1);
    assert!(run.step(&m).is_err(), "reading past the text is refused");
    for v in &views {
        let [full, win, sink] = [&v.lanes[0], &v.lanes[1], &v.lanes[2]];
        if v.pos <= window {
            // Nothing evicted yet: the three caches are the same cache.
            assert!(
                (full.p_next - win.p_next).abs() < 1e-5 && (full.p_next - sink.p_next).abs() < 1e-5
            );
            assert_eq!(win.kept_pages, full.kept_pages);
            assert!(win.perplexity_after_eviction.is_none());
        } else {
            assert!(win.cached_tokens <= window && sink.cached_tokens <= window);
            assert!(
                !win.kept_pages.contains(&0),
                "the plain window evicts page 0"
            );
            assert_eq!(sink.kept_pages[0], 0, "the sink keeps page 0");
            assert!(win.evicted_pages > 0 && win.evicted_pages == sink.evicted_pages);
            assert_eq!(full.kept_pages.len(), (v.pos - 1) / page + 1);
        }
    }
    // The full lane's running perplexity is the perplexity of one forward over the text.
    let mut kv = m.new_cache(64);
    let logits = m.forward(&toks, &mut kv, Logits::All).unwrap();
    let rows = logits.to_vec2::<f32>().unwrap();
    let nll: f64 = (0..toks.len() - 1)
        .map(|i| {
            let r = &rows[i];
            let mx = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let z: f64 = r.iter().map(|&x| ((x - mx) as f64).exp()).sum();
            z.ln() - (r[toks[i + 1] as usize] - mx) as f64
        })
        .sum();
    let ppl = (nll / (toks.len() - 1) as f64).exp();
    let live = views.last().unwrap().lanes[0].perplexity;
    assert!(
        (live - ppl).abs() / ppl < 1e-3,
        "live {live} vs one pass {ppl}"
    );
}

#[test]
fn the_sink_experiment_refuses_a_text_shorter_than_the_window() {
    let (_d, m) = tiny_f32();
    let e = inferlab::sink::SinkRun::new(&m, (1..10).collect(), 12, 4)
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            inferlab::sink::SinkError::TextTooShort {
                tokens: 9,
                window: 12
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("must be longer than the window"),
        "{e}"
    );
}

#[test]
fn a_window_read_in_place_gives_what_the_tensor_kernels_give_after_evictions() {
    use inferlab::model::{AttnKernel, RunOptions};
    // The naive kernel on the CPU reads the window's rows in place; the tiled kernel runs
    // on tensors the window hands back. Past the evictions both see the same rows.
    let (_d, m) = tiny_f32();
    let tiled = m
        .with_run(RunOptions {
            kernel: AttnKernel::Tiled {
                sram_bytes: 1 << 16,
            },
            ..m.run_options()
        })
        .unwrap();
    let toks: Vec<u32> = (10..50).collect();
    for sink in [false, true] {
        let new = || Windowed::new(N_LAYER, N_KV, HIDDEN / N_HEAD, 16, 4, sink, &m.device).unwrap();
        let (mut a, mut b) = (new(), new());
        let in_place = read(&m, &toks, &mut a);
        let on_tensors = read(&tiled, &toks, &mut b);
        assert!(a.evicted_pages > 0 && a.rows(0).is_some());
        for (x, y) in in_place.iter().zip(&on_tensors) {
            assert!(max_abs_diff(x, y) < 1e-4, "{}", max_abs_diff(x, y));
        }
    }
}
