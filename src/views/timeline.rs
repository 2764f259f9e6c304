//! The batching timeline, decided once: a row per request, a column per iteration, each
//! cell the request's phase as the scheduler reported it, and what each phase is called.

use crate::serve::ReqPhase;
use std::collections::VecDeque;

/// Every phase with its one-character glyph and its name, in legend order.
pub const PHASES: [(ReqPhase, char, &str); 7] = [
    (ReqPhase::Prefill, 'P', "prefill"),
    (ReqPhase::Decode, '█', "decode"),
    (ReqPhase::Padding, '░', "pad"),
    (ReqPhase::Finished, '✓', "done"),
    (ReqPhase::Waiting, '·', "wait"),
    (ReqPhase::Preempted, 'x', "preempt"),
    (ReqPhase::Rejected, '!', "rejected"),
];

/// A phase as one terminal character.
pub fn glyph(p: ReqPhase) -> char {
    PHASES.iter().find(|x| x.0 == p).map_or('?', |x| x.1)
}

/// The newest `cols` columns of a timeline (all of it when it is shorter).
pub fn window(
    t: &VecDeque<Vec<(u64, ReqPhase)>>,
    cols: usize,
) -> impl Iterator<Item = &Vec<(u64, ReqPhase)>> {
    t.iter().skip(t.len().saturating_sub(cols))
}

/// The last phase of request `id` before the newest `cols` columns, when the window holds
/// none of its cells: a request that finished (or was turned away) before the window
/// would otherwise leave its row blank.
pub fn before_window(t: &VecDeque<Vec<(u64, ReqPhase)>>, cols: usize, id: u64) -> Option<ReqPhase> {
    let cut = t.len().saturating_sub(cols);
    let find = |c: &Vec<(u64, ReqPhase)>| c.iter().find(|(r, _)| *r == id).map(|x| x.1);
    if t.iter().skip(cut).any(|c| find(c).is_some()) {
        return None;
    }
    t.iter().take(cut).rev().find_map(find)
}

/// A phase's name in the legend.
pub fn name(p: ReqPhase) -> &'static str {
    PHASES.iter().find(|x| x.0 == p).map_or("?", |x| x.2)
}

/// Requests in the timeline (ids run from 0).
pub fn requests(t: &VecDeque<Vec<(u64, ReqPhase)>>) -> usize {
    t.iter()
        .flat_map(|c| c.iter().map(|(id, _)| *id + 1))
        .max()
        .unwrap_or(0) as usize
}

/// The most requests running (prefill or decode) in one iteration.
pub fn peak_active(t: &VecDeque<Vec<(u64, ReqPhase)>>) -> usize {
    t.iter()
        .map(|c| {
            c.iter()
                .filter(|(_, p)| matches!(p, ReqPhase::Prefill | ReqPhase::Decode))
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Columns per iteration: a short timeline in a wide pane stretches to fill it, up to
/// three columns per iteration, so a few iterations do not huddle at the left edge.
pub fn col_width(iterations: usize, cols: usize) -> usize {
    (cols / iterations.max(1)).clamp(1, 3)
}

/// The rows of a pane of `rows` rows: for a workload of `total` requests (`Some`), every
/// request when they fit; for a server's endless stream (`None`), the requests the newest
/// `cols` columns show. When they do not fit, above a last row that counts the rest,
/// those in play in the newest iteration (running, padded, preempted, then waiting) come
/// before those finished or not yet arrived (a server's newest first), since those are
/// what the batch is doing now. Returns the ids and how many were left out.
pub fn rows_shown(
    t: &VecDeque<Vec<(u64, ReqPhase)>>,
    total: Option<usize>,
    rows: usize,
    cols: usize,
) -> (Vec<u64>, usize) {
    let mut ids: Vec<u64> = match total {
        Some(total) => (0..requests(t).max(total) as u64).collect(),
        None => window(t, cols).flatten().map(|c| c.0).collect(),
    };
    ids.sort_unstable();
    ids.dedup();
    let n = ids.len();
    if n <= rows {
        return (ids, 0);
    }
    let rows = rows.saturating_sub(1).max(1);
    let newest = t.back().cloned().unwrap_or_default();
    let rank = |id: u64| match newest.iter().find(|(r, _)| *r == id).map(|x| x.1) {
        Some(ReqPhase::Prefill | ReqPhase::Decode | ReqPhase::Padding) => 0,
        Some(ReqPhase::Preempted) => 1,
        Some(ReqPhase::Waiting) => 2,
        _ => 3,
    };
    // A workload's order is its ids'; a server's, the newest requests first.
    let order = |id: u64| if total.is_some() { id } else { u64::MAX - id };
    ids.sort_by_key(|&id| (rank(id), order(id)));
    ids.truncate(rows);
    ids.sort_unstable();
    (ids, n - rows)
}

/// A cell `width` columns wide: bar glyphs repeat, letters and marks stand once.
pub fn cell(p: ReqPhase, width: usize) -> String {
    let g = glyph(p);
    if matches!(g, '█' | '░' | '·') {
        std::iter::repeat_n(g, width).collect()
    } else {
        format!("{g:<width$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_ended_before_the_window_says_so() {
        use ReqPhase::*;
        let t: VecDeque<Vec<(u64, ReqPhase)>> = VecDeque::from(vec![
            vec![(0, Decode), (1, Decode)],
            vec![(0, Finished), (1, Decode)],
            vec![(1, Decode)],
            vec![(1, Finished)],
        ]);
        assert_eq!(before_window(&t, 2, 0), Some(Finished));
        // In the window, or with the whole timeline in view: nothing to add.
        assert_eq!(before_window(&t, 2, 1), None);
        assert_eq!(before_window(&t, 4, 0), None);
        assert_eq!(before_window(&t, 2, 7), None);
    }

    #[test]
    fn a_short_timeline_stretches_and_a_tall_one_keeps_the_requests_in_play() {
        assert_eq!(col_width(10, 60), 3);
        assert_eq!(col_width(25, 60), 2);
        assert_eq!(col_width(200, 60), 1);
        assert_eq!(col_width(0, 60), 3);
        assert_eq!(cell(ReqPhase::Decode, 3), "███");
        assert_eq!(cell(ReqPhase::Prefill, 3), "P  ");
        // Six requests, four rows: the newest iteration has 1 and 4 decoding, 5 waiting.
        let mut t = VecDeque::new();
        t.push_back(vec![
            (0, ReqPhase::Finished),
            (1, ReqPhase::Decode),
            (4, ReqPhase::Decode),
            (5, ReqPhase::Waiting),
            (2, ReqPhase::Finished),
            (3, ReqPhase::Finished),
        ]);
        assert_eq!(rows_shown(&t, Some(6), 5, 80), (vec![0, 1, 4, 5], 2));
        assert_eq!(rows_shown(&t, Some(6), 6, 80).1, 0);
        // Requests not yet arrived still get their rows when there is room.
        assert_eq!(rows_shown(&t, Some(8), 9, 80).0.len(), 8);
        // A server's stream: only what the newest columns show, the newest finished first.
        t.push_front(vec![(9, ReqPhase::Decode)]);
        t.push_front(vec![(8, ReqPhase::Decode)]);
        assert_eq!(rows_shown(&t, None, 20, 2).0, vec![0, 1, 2, 3, 4, 5, 9]);
        assert_eq!(rows_shown(&t, None, 4, 3), (vec![1, 4, 5], 5));
    }
}
