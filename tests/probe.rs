//! The probe sees what the forward pass computes, and only when asked.

mod common;

use candle_core::Tensor;
use common::*;
use inferlab::kv::{BatchKv, Contiguous};
use inferlab::model::{LayerSelect, Logits, Model, Observer, Probe, Unobserved};

fn model() -> (tempfile::TempDir, Model) {
    tiny_f32()
}

/// One sequence through `m` with `obs` looking; its logits for the last position.
fn observed(m: &Model, tokens: &[u32], kv: &mut dyn BatchKv, obs: &mut dyn Observer) -> Tensor {
    m.pass(&[tokens], kv, obs, Logits::Last)
        .unwrap()
        .logits
        .remove(0)
}

/// The tiny model after a 12-token prompt (tokens 20..32), every layer captured.
fn prefilled() -> (tempfile::TempDir, Model, Contiguous, Probe) {
    let (d, m) = model();
    let mut kv = m.new_cache(64);
    let mut probe = Probe::new(LayerSelect::All);
    let prompt: Vec<u32> = (20..32).collect();
    observed(&m, &prompt, &mut kv, &mut probe);
    (d, m, kv, probe)
}

#[test]
fn captured_weights_are_causal_softmax_rows() {
    let (_d, m, mut kv, mut probe) = prefilled();
    assert_eq!(probe.captures.len(), N_LAYER);
    let c = &probe.captures[1];
    assert_eq!(
        (c.t, c.kv_len, c.n_head, c.n_kv_head),
        (12, 12, N_HEAD, N_KV)
    );
    for h in 0..N_HEAD {
        for i in 0..c.t {
            let row = c.weight_row(h, i);
            let s: f32 = row.iter().sum();
            assert!((s - 1.0).abs() < 1e-5, "row sums to {s}");
            assert!(row[i + 1..].iter().all(|&w| w == 0.0), "future keys masked");
            // The weights are the softmax of the captured scores over visible keys.
            let sc = &c.scores[(h * c.t + i) * c.kv_len..][..=i];
            let mx = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let z: f32 = sc.iter().map(|x| (x - mx).exp()).sum();
            for j in 0..=i {
                assert!(((sc[j] - mx).exp() / z - row[j]).abs() < 1e-5);
            }
        }
    }
    // Decode: one new row against all cached keys.
    observed(&m, &[40], &mut kv, &mut probe);
    let c = &probe.captures[0];
    assert_eq!((c.t, c.kv_len, c.pos0), (1, 13, 12));
    assert!(c.weight_row(0, 0).iter().all(|&w| w > 0.0));
}

#[test]
fn one_layer_selection_captures_exactly_that_layer() {
    let (_d, m) = model();
    let mut probe = Probe::new(LayerSelect::One(1));
    observed(&m, &[5, 6, 7], &mut m.new_cache(8), &mut probe);
    assert_eq!(probe.captures.len(), 1);
    assert_eq!(probe.captures[0].layer, 1);
    let mut off = Probe::new(LayerSelect::None);
    observed(&m, &[5, 6, 7], &mut m.new_cache(8), &mut off);
    assert!(off.captures.is_empty());
}

#[test]
fn capture_does_not_change_the_logits() {
    let (_d, m) = model();
    let p: Vec<u32> = (3..15).collect();
    let a = m.forward(&p, &mut m.new_cache(16), Logits::Last).unwrap();
    let mut probe = Probe::new(LayerSelect::All);
    let b = observed(&m, &p, &mut m.new_cache(16), &mut probe);
    assert_eq!(
        Model::last_logits(&a).unwrap(),
        Model::last_logits(&b).unwrap()
    );
    // A decode step after it, looked at or not.
    let step = |obs: &mut dyn Observer| {
        let mut cache = m.new_cache(16);
        m.forward(&p, &mut cache, Logits::Last).unwrap();
        let l = observed(&m, &[9], &mut cache, obs);
        Model::last_logits(&l).unwrap()
    };
    let mut probe = Probe::new(LayerSelect::All);
    assert_eq!(step(&mut Unobserved), step(&mut probe));
    assert!(!probe.captures.is_empty());
}

#[test]
fn kv_cache_full_is_an_error_not_a_panic() {
    let (_d, m) = model();
    let mut kv = m.new_cache(4);
    assert!(m.forward(&[1, 2, 3, 4, 5], &mut kv, Logits::Last).is_err());
}

#[test]
fn rope_rmsnorm_and_swiglu_are_measured_on_the_live_vectors() {
    let (_d, _m, _kv, probe) = prefilled();
    for c in &probe.captures {
        let b = &c.block;
        // RoPE is a rotation: the length survives, the vector moved.
        assert!(b.q_norm_pre_rope > 0.0);
        assert!((b.q_norm_pre_rope - b.q_norm_post_rope).abs() < 1e-4 * b.q_norm_pre_rope);
        assert_eq!(b.rope_angle0, 11.0);
        // The newest row's rotated q is what was captured.
        let d = c.head_dim;
        let q0 = &c.q[(c.t - 1) * d..c.t * d];
        let n: f32 = q0.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - b.q_norm_post_rope).abs() < 1e-4 * n);
        assert!(b.rms_in > 0.0 && b.rms_normed > 0.0);
        assert!((0.0..=100.0).contains(&b.gate_closed_pct));
    }
}

/// An observer that only takes its time.
struct Slow(std::time::Duration);

impl Observer for Slow {
    fn entering(&mut self, _x: &Tensor, _h: &Tensor) -> candle_core::Result<()> {
        std::thread::sleep(self.0);
        Ok(())
    }
}

#[test]
fn the_pass_times_its_observer_apart_from_its_own_work() {
    let (_d, m) = model();
    let p: Vec<u32> = (3..15).collect();
    let pass = |obs: &mut dyn Observer| {
        let t = (m
            .pass(&[&p], &mut m.new_cache(16), obs, Logits::Last)
            .unwrap())
        .counts
        .timing;
        let stages = t.embed_ms + t.layers_ms.iter().sum::<f64>() + t.lm_head_ms;
        (t.observe_ms, stages)
    };
    // Every hook call is timed by the pass, and it is a part of the stages it fell in.
    let (slow, stages) = pass(&mut Slow(std::time::Duration::from_millis(5)));
    assert!(slow >= 5.0 * N_LAYER as f64, "{slow} ms");
    assert!(slow <= stages, "{slow} of {stages} ms");
    // The probe looking at every layer, the logit lens included (it runs after the LM head).
    let mut probe = Probe::new(LayerSelect::All);
    probe.lens = true;
    let (looking, stages) = pass(&mut probe);
    assert!(probe.lens_logits.is_some());
    assert!(
        looking > 0.0 && looking <= stages,
        "{looking} of {stages} ms"
    );
    // Nobody looking costs next to nothing.
    let (none, _) = pass(&mut Unobserved);
    assert!(none * 10.0 < slow, "{none} ms");
}
