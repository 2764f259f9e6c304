//! The head the app opens on, picked from the model's own attention: a head that parks its
//! weight on the first token (the attention sink) or spreads it evenly shows little, so
//! the first screen shows the head whose prefill rows are the sharpest elsewhere.

use crate::model::probe::LayerCapture;

/// Below this share of weight on token 0 a head counts as looking at the text.
const SINK_SHARE: f32 = 0.5;

/// `(layer, head)` with the lowest mean entropy over the later half of the prompt's rows,
/// among heads that put less than half their weight on token 0 there; `None` when no
/// capture holds a prompt of at least four tokens.
pub fn sharpest_head(captures: &[LayerCapture]) -> Option<(usize, usize)> {
    let mut best: Option<(f32, usize, usize)> = None;
    for c in captures.iter().filter(|c| c.pos0 == 0 && c.t >= 4) {
        for h in 0..c.n_head {
            let rows: Vec<&[f32]> = (c.t / 2..c.t)
                .filter_map(|i| c.weights.get((h * c.t + i) * c.kv_len..)?.get(..=i))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let n = rows.len() as f32;
            let sink = rows.iter().map(|r| r[0]).sum::<f32>() / n;
            let entropy = rows.iter().map(|r| entropy(r)).sum::<f32>() / n;
            if sink < SINK_SHARE && best.is_none_or(|b| entropy < b.0) {
                best = Some((entropy, c.layer, h));
            }
        }
    }
    best.map(|(_, layer, head)| (layer, head))
}

/// Shannon entropy of a softmax row, nats.
fn entropy(row: &[f32]) -> f32 {
    row.iter().filter(|&&w| w > 0.0).map(|&w| -w * w.ln()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A capture of `rows` given per head, each row over keys `0..=i`.
    fn capture(layer: usize, heads: &[&dyn Fn(usize) -> Vec<f32>]) -> LayerCapture {
        let t = 6;
        let mut weights = vec![0.0; heads.len() * t * t];
        for (h, f) in heads.iter().enumerate() {
            for i in 0..t {
                let row = f(i);
                weights[(h * t + i) * t..][..=i].copy_from_slice(&row);
            }
        }
        LayerCapture {
            layer,
            n_head: heads.len(),
            t,
            kv_len: t,
            weights,
            ..Default::default()
        }
    }

    #[test]
    fn the_sharpest_head_off_the_first_token_wins() {
        let uniform = |i: usize| vec![1.0 / (i + 1) as f32; i + 1];
        let sink = |i: usize| {
            let mut r = vec![0.0; i + 1];
            r[0] = 1.0;
            r
        };
        let previous = |i: usize| {
            let mut r = vec![0.0; i + 1];
            r[i.saturating_sub(1)] = 0.9;
            r[i] += 0.1;
            r
        };
        let caps = [
            capture(0, &[&uniform, &sink]),
            capture(1, &[&uniform, &previous, &sink]),
        ];
        assert_eq!(sharpest_head(&caps), Some((1, 1)));
        // Only sinks and even spreads: the even one (the sink is never picked).
        assert_eq!(sharpest_head(&caps[..1]), Some((0, 0)));
        assert_eq!(sharpest_head(&[]), None);
    }
}
