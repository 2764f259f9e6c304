//! Predictions about an attached server (`inferlab attach URL`), graded by its polls
//! rather than by our engine's iterations: the learner answers, the server goes on
//! serving whatever load reaches it, and the polls of the next seconds say what it did.

use super::choices::{LiveChoices, Pending};
use crate::attach::poll::{Link, Point, Snapshot};
use crate::lesson::Predict;

/// Seconds of polls after the answer that grade a prediction of `kind`.
pub fn window_s(kind: Predict) -> f64 {
    match kind {
        Predict::ServerBatch => 5.0,
        _ => 10.0,
    }
}

/// The queue's peak over the window, by band.
const WAITING: [&str; 4] = [
    "none: each request finds a slot free",
    "one or two at a time, now and then",
    "three to five at once, for a while",
    "six or more: the queue keeps growing",
];

/// The choices of server prediction `kind` as poll `s` offers them; `None` while the
/// server does not answer or does not give what the prediction reads.
pub fn choices(s: &Snapshot, kind: Predict) -> Option<LiveChoices> {
    if s.link != Link::Up {
        return None;
    }
    // The poll the answer is given at: the window starts there.
    let asked_ms = (s.history.last()?.t_s * 1e3) as u64;
    let (labels, values) = match kind {
        Predict::ServerBatch => {
            let n = s.slots.len() as u64;
            if n < 2 {
                return None;
            }
            let values = batch_values(n);
            let labels = values
                .iter()
                .map(|&k| match k {
                    1 => "about 1: one request per call".to_string(),
                    k if k == n => format!("about {n}: every slot in every call"),
                    k => format!("about {k}"),
                })
                .collect();
            (labels, values)
        }
        Predict::ServerWaiting => {
            s.gauges.as_ref()?.waiting?;
            let labels = WAITING.iter().map(|l| l.to_string()).collect();
            (labels, (0..WAITING.len() as u64).collect())
        }
        _ => return None,
    };
    Some(LiveChoices {
        labels,
        values,
        subject: asked_ms,
        before: Vec::new(),
    })
}

/// Batch sizes offered for a server of `n` slots: each one up to six, else five spread.
fn batch_values(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = match n {
        0..=6 => (1..=n).collect(),
        _ => vec![1, n / 4, n / 2, 3 * n / 4, n],
    };
    v.dedup();
    v
}

/// Whether prediction `p` came true over the polls after it was asked, and what the
/// server did; `None` until the polls span its window (and, for the batch, until the
/// server has decoded at all: a server with no load has no batch to grade).
pub fn outcome(p: &Pending, s: &Snapshot) -> Option<(bool, String)> {
    let t0 = p.subject as f64 / 1e3;
    let after: Vec<&Point> = s.history.iter().filter(|q| q.t_s > t0).collect();
    let span = after.last()?.t_s - t0;
    if span < window_s(p.kind) {
        return None;
    }
    let chosen = p.shown.values[p.choice];
    let (right, why) = match p.kind {
        Predict::ServerBatch => batch_outcome(&p.shown.values, &after, span, s.slots.len())?,
        Predict::ServerWaiting => waiting_outcome(&after, span, s),
        _ => return None,
    };
    let ok = right.contains(&chosen);
    let counted: Vec<String> = (p.shown.values.iter().zip(&p.shown.labels))
        .filter(|(v, _)| right.contains(v))
        .map(|(_, l)| format!("\"{l}\""))
        .collect();
    Some(match ok || counted.is_empty() {
        true => (ok, why),
        false => (
            ok,
            format!("{why}. Counted right: {}", counted.join(" and ")),
        ),
    })
}

/// The mean batch over the window, each interval weighed by its decode calls, and the
/// offered sizes it counts as: the nearest, and both neighbours within 10% of the middle
/// between them.
fn batch_outcome(
    values: &[u64],
    points: &[&Point],
    span: f64,
    slots: usize,
) -> Option<(Vec<u64>, String)> {
    let (busy, calls) = points
        .iter()
        .filter_map(|q| Some((q.batch? * q.calls?, q.calls?)))
        .fold((0.0, 0.0), |(b, c), (x, y)| (b + x, c + y));
    if calls < 1.0 {
        return None;
    }
    let mean = busy / calls;
    let mut right: Vec<u64> = Vec::new();
    for w in values.windows(2) {
        let mid = (w[0] + w[1]) as f64 / 2.0;
        if (mean - mid).abs() <= 0.1 * mid {
            right.extend([w[0], w[1]]);
        }
    }
    let nearest = values.iter().min_by(|a, b| {
        (**a as f64 - mean)
            .abs()
            .total_cmp(&(**b as f64 - mean).abs())
    })?;
    right.push(*nearest);
    right.sort_unstable();
    right.dedup();
    let why = format!(
        "over {span:.0} s its {calls:.0} decode calls advanced {mean:.1} requests each, with {slots} slots (llamacpp:n_busy_slots_per_decode × llamacpp:n_decode_total)"
    );
    Some((right, why))
}

/// The queue's peak over the window, as its band.
fn waiting_outcome(points: &[&Point], span: f64, s: &Snapshot) -> (Vec<u64>, String) {
    let peak = points.iter().filter_map(|q| q.waiting).fold(0.0, f64::max);
    let band = match peak as u64 {
        0 => 0,
        1..=2 => 1,
        3..=5 => 2,
        _ => 3,
    };
    let metric = s
        .gauges
        .as_ref()
        .and_then(|g| g.waiting)
        .map_or("its waiting count", |r| r.metric);
    let why = format!("over {span:.0} s its queue ({metric}) held at most {peak:.0}");
    (vec![band], why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_offered_cover_one_to_every_slot() {
        assert_eq!(batch_values(4), vec![1, 2, 3, 4]);
        assert_eq!(batch_values(16), vec![1, 4, 8, 12, 16]);
        assert_eq!(batch_values(7), vec![1, 3, 5, 7]);
    }

    #[test]
    fn the_batch_is_weighed_by_calls_and_an_edge_counts_both_neighbours() {
        let p = |batch, calls| Point {
            batch: Some(batch),
            calls: Some(calls),
            ..Default::default()
        };
        let (a, b) = (p(4.0, 30.0), p(0.0, 10.0));
        let (right, why) = batch_outcome(&[1, 2, 3, 4], &[&a, &b], 5.0, 4).unwrap();
        // 120 / 40 = 3.0, where the unweighed mean would be 2.0: nearest 3, near no edge.
        assert_eq!(right, vec![3], "{why}");
        let (c, d) = (p(4.0, 10.0), p(3.0, 10.0));
        let (right, _) = batch_outcome(&[1, 2, 3, 4], &[&c, &d], 5.0, 4).unwrap();
        assert!(right.contains(&3) && right.contains(&4));
        assert!(batch_outcome(&[1, 2], &[&p(2.0, 0.0)], 5.0, 2).is_none());
    }
}
