//! The windowed cache of the attention-sink experiment.

mod common;

use common::*;
use inferlab::kv::window::Windowed;
use inferlab::kv::KvStore;
use inferlab::model::{Logits, Model};

fn read(m: &Model, toks: &[u32], kv: &mut dyn KvStore) -> Vec<Vec<f32>> {
    toks.iter()
        .map(|t| Model::last_logits(&m.forward(&[*t], kv, None, Logits::Last).unwrap()).unwrap())
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
