//! Memory bounded by what is on screen: long prompts run attention in chunks with the same
//! result, the probe keeps the newest rows, and the engine's capture plan stays within its
//! byte budgets for any prompt length.

mod common;

use candle_core::{Device, Tensor};
use common::*;
use inferlab::model::attention::{naive, newest_scores, MAX_SCORE_ELEMS};
use inferlab::model::flash::pseudo_random;
use inferlab::model::{LayerSelect, LlamaConfig, Logits, Probe};
use inferlab::worker::{plan_capture, CAPTURE_ALL_BYTES, CAPTURE_ONE_BYTES, MAX_CAPTURE_ROWS};

fn tensor(shape: (usize, usize, usize), seed: u64) -> Tensor {
    let n = shape.0 * shape.1 * shape.2;
    Tensor::from_vec(pseudo_random(n, seed), shape, &Device::Cpu).unwrap()
}

#[test]
fn chunked_attention_equals_one_block_and_the_newest_rows_score_alike() {
    // 4 heads × 2,100 rows × 2,100 keys is over MAX_SCORE_ELEMS, so the rows run in chunks.
    let (h, kvh, t, d) = (4, 2, 2100, 16);
    assert!(h * t * t > MAX_SCORE_ELEMS);
    let q = tensor((h, t, d), 1);
    let k = tensor((kvh, t, d), 2);
    let v = tensor((kvh, t, d), 3);
    let chunked = naive(&q, &k, &v, 0).unwrap();
    let flat = |x: &Tensor| -> Vec<f32> { x.flatten_all().unwrap().to_vec1().unwrap() };
    // The same rows one at a time (each row's softmax is its own).
    for row in [0, 1500, t - 1] {
        let one = naive(&q.narrow(1, row, 1).unwrap(), &k, &v, row).unwrap();
        let a = flat(&chunked.out.narrow(1, row, 1).unwrap());
        assert!(max_abs_diff(&a, &flat(&one.out)) < 1e-5, "row {row}");
    }
    // What the probe keeps: the 5 newest rows' weights, causal, and each row's own.
    let (_, w) = newest_scores(&q, &k, 0, 5).unwrap();
    assert_eq!(w.dims(), &[h, 5, t], "only the 5 newest rows are kept");
    // The oldest kept row (position t - 5) gives no weight to the keys after it.
    let first: Vec<f32> = w.get(0).unwrap().get(0).unwrap().to_vec1().unwrap();
    assert!(first[t - 4..].iter().all(|&x| x == 0.0) && first[t - 5] > 0.0);
    let (_, alone) = newest_scores(&q.narrow(1, t - 1, 1).unwrap(), &k, t - 1, 1).unwrap();
    let last = flat(&w.narrow(1, 4, 1).unwrap());
    assert!(max_abs_diff(&last, &flat(&alone)) < 1e-6);
}

#[test]
fn the_probe_keeps_only_the_newest_rows_of_a_prefill() {
    let (_d, m) = tiny_f32();
    let prompt: Vec<u32> = (1..=40).collect();
    let mut all = Probe::new(LayerSelect::All);
    let mut kv = m.new_cache(48);
    m.pass(&[&prompt], &mut kv, &mut all, Logits::Last).unwrap();
    let mut few = Probe::new(LayerSelect::All);
    few.row_limit = Some(6);
    let mut kv = m.new_cache(48);
    m.pass(&[&prompt], &mut kv, &mut few, Logits::Last).unwrap();
    for (a, f) in all.captures.iter().zip(&few.captures) {
        assert_eq!((f.t, f.pos0, f.kv_len), (6, 34, 40));
        let n = a.n_head;
        for hh in 0..n {
            for i in 0..6 {
                let want = &a.weights[(hh * 40 + 34 + i) * 40..][..40];
                let got = &f.weights[(hh * 6 + i) * 40..][..40];
                assert_eq!(want, got, "layer {} head {hh} row {i}", a.layer);
            }
        }
        assert_eq!(&a.resid_norm_out[34..], &f.resid_norm_out[..]);
        assert_eq!(f.q.len(), n * 6 * a.head_dim);
    }
}

fn smollm2() -> LlamaConfig {
    LlamaConfig {
        architecture: "llama".into(),
        n_layer: 30,
        hidden: 576,
        ffn: 1536,
        n_head: 9,
        n_kv_head: 3,
        head_dim: 64,
        rope_base: 100_000.0,
        rms_eps: 1e-5,
        context: 8192,
        vocab: 49152,
        rope_interleaved: true,
    }
}

/// Bytes of scores and weights a plan captures for `t` rows over `keys`.
fn planned_bytes(p: &Probe, cfg: &LlamaConfig, t: usize, keys: usize) -> usize {
    let layers = match p.select {
        LayerSelect::All => cfg.n_layer,
        LayerSelect::One(_) => 1,
        LayerSelect::None => 0,
    };
    let rows = t.min(p.row_limit.unwrap_or(usize::MAX));
    layers * rows * cfg.n_head * keys * 8
}

#[test]
fn the_capture_plan_is_bounded_for_every_prompt_length() {
    let cfg = smollm2();
    for (t, keys) in [
        (40, 40),
        (300, 300),
        (1400, 1400),
        (8000, 8000),
        (1, 100),
        (1, 8100),
    ] {
        let mut p = Probe::default();
        plan_capture(&mut p, &cfg, (t, keys), 7);
        let bytes = planned_bytes(&p, &cfg, t, keys);
        assert!(
            bytes <= CAPTURE_ALL_BYTES.max(CAPTURE_ONE_BYTES),
            "{t}×{keys}: {bytes}"
        );
        assert!(p.row_limit.unwrap() <= MAX_CAPTURE_ROWS.max(t));
        match p.select {
            LayerSelect::One(l) => assert_eq!(l, 7, "the focused layer"),
            LayerSelect::All => assert!(bytes <= CAPTURE_ALL_BYTES),
            LayerSelect::None => panic!("something is always captured"),
        }
    }
    // A short chat prompt keeps every layer, so j / k browse them all.
    let mut p = Probe::default();
    plan_capture(&mut p, &cfg, (40, 40), 3);
    assert_eq!(p.select, LayerSelect::All);
    assert!(p.row_limit.unwrap() >= 40);
}

#[test]
fn a_recording_keeps_the_layer_on_screen_and_is_written_off_thread() {
    use inferlab::worker::recording::{self, BackgroundRecorder, Recorder};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let w = BackgroundRecorder::spawn(
        Recorder::create(&path, "fixture.gguf", Default::default()).unwrap(),
    );
    let r = fixture::report();
    assert_eq!(r.info.captures.len(), 2);
    assert!(w.write(&r, 1));
    drop(w); // joins the writer: everything queued is on disk
    let back = recording::read(&path).unwrap();
    let layers: Vec<usize> = back.reports[0]
        .info
        .captures
        .iter()
        .map(|c| c.layer)
        .collect();
    assert_eq!(layers, vec![1]);
}

#[test]
fn the_heatmap_history_stays_within_its_byte_cap_and_keeps_the_newest_rows() {
    use inferlab::ui::app::HISTORY_BYTES;
    use inferlab::worker::Event;
    let mut app = fixture::app();
    let n_head = 9;
    // Decode rows of a long context, one layer on screen: 9 heads × 8,000+ keys each.
    for k in 8000..8300 {
        let mut r = fixture::report();
        r.info.step = k;
        r.info.captures = vec![inferlab::model::LayerCapture {
            layer: 0,
            n_head,
            n_kv_head: 3,
            head_dim: 64,
            t: 1,
            kv_len: k,
            pos0: k - 1,
            weights: vec![0.5; n_head * k],
            scores: vec![1.0; n_head * k],
            ..Default::default()
        }];
        app.on_event(Event::Report(Box::new(r)));
    }
    let h = &app.frames.shown().history[0];
    let floats: usize = h
        .weights
        .iter()
        .chain(&h.scores)
        .flat_map(|row| row.iter().map(|r| r.len()))
        .sum();
    assert!(
        4 * floats <= HISTORY_BYTES,
        "{} MB kept",
        (4 * floats) >> 20
    );
    assert_eq!(h.weights.len(), 8299, "row index stays the position");
    assert!(!h.weights[8298].is_empty(), "the newest row is kept");
    assert!(h.weights[7999].is_empty(), "the oldest rows gave way");
}
