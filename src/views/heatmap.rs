//! The attention heatmap of one layer and head, decided once: the window of query rows ×
//! key columns shown, each cell's value on the colour scale (or masked: a future key), the
//! scale's ends, the token labels and the prompt/generation boundary. The terminal pane
//! and the exported picture both draw this.

use crate::report::StepReport;

/// Which rows and columns fit: at most `rows` query rows and `cols` key columns, ending
/// `scroll` rows before the newest (0 follows the newest).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub rows: usize,
    pub cols: usize,
    pub scroll: usize,
}

impl Window {
    /// Every row and column.
    pub const ALL: Window = Window {
        rows: usize::MAX,
        cols: usize::MAX,
        scroll: 0,
    };
}

/// What to draw.
pub struct Heatmap {
    pub layer: usize,
    pub head: usize,
    /// The KV head this query head reads.
    pub kv_head: usize,
    /// Raw scores Q·Kᵀ/√d instead of softmax weights.
    pub scores: bool,
    /// Query rows `q0..end` and key columns `k0..end`, by position.
    pub q0: usize,
    pub k0: usize,
    pub end: usize,
    /// Positions of the whole history; the newest is `len - 1`.
    pub len: usize,
    /// The colour scale's ends over the window.
    pub lo: f32,
    pub hi: f32,
    pub prompt_len: usize,
    /// Row-major `(end - q0) × (end - k0)`, on the scale's 0..1; `None` is a masked (future)
    /// key or a row not captured.
    cells: Vec<Option<f32>>,
    /// Token pieces of positions `min(q0, k0)..end`.
    pieces: Vec<String>,
    first_piece: usize,
}

/// What the heatmap reads: a report, and the layer's rows `rows[p][h]` (weights or scores
/// of head `h` at query position `p` over keys `0..=p`).
pub struct Source<'a> {
    pub report: &'a StepReport,
    pub rows: &'a [Vec<Vec<f32>>],
    pub layer: usize,
    pub head: usize,
    pub scores: bool,
}

/// The colour scale's ends: the smallest to the largest value shown, from 0 for softmax
/// weights (which are never negative) so that equal weights get equal colours everywhere.
pub fn value_range(values: impl Iterator<Item = f32>, scores: bool) -> (f32, f32) {
    let (lo, hi) = values.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    (if scores { lo } else { 0.0 }, hi)
}

impl Heatmap {
    /// The view of `src` in `w`; `None` when there are no rows.
    pub fn build(src: &Source, w: Window) -> Option<Self> {
        let n = src.rows.len();
        if n == 0 || w.rows == 0 || w.cols == 0 {
            return None;
        }
        let raw = |i: usize, j: usize| -> Option<f32> {
            src.rows
                .get(i)
                .and_then(|r| r.get(src.head))
                .and_then(|row| row.get(j))
                .copied()
        };
        let end = n - w.scroll.min(n - 1);
        let (q0, k0) = (end.saturating_sub(w.rows), end.saturating_sub(w.cols));
        let (lo, hi) = value_range(
            (q0..end).flat_map(|i| (k0..end).filter_map(move |j| raw(i, j))),
            src.scores,
        );
        let norm = |v: f32| if hi > lo { (v - lo) / (hi - lo) } else { 1.0 };
        let cells = (q0..end)
            .flat_map(|i| (k0..end).map(move |j| raw(i, j).map(norm)))
            .collect();
        let first_piece = q0.min(k0);
        let r = src.report;
        Some(Self {
            layer: src.layer,
            head: src.head,
            kv_head: r.info.query_to_kv.get(src.head).copied().unwrap_or(0),
            scores: src.scores,
            q0,
            k0,
            end,
            len: n,
            lo,
            hi,
            prompt_len: r.prompt_len,
            cells,
            pieces: (first_piece..end)
                .map(|p| r.pieces.get(p).cloned().unwrap_or_default())
                .collect(),
            first_piece,
        })
    }

    /// Cell of query `q` and key `k` (positions) on the scale's 0..1; `None` is masked.
    pub fn cell(&self, q: usize, k: usize) -> Option<f32> {
        if !(self.q0..self.end).contains(&q) || !(self.k0..self.end).contains(&k) {
            return None;
        }
        self.cells[(q - self.q0) * (self.end - self.k0) + (k - self.k0)]
    }

    /// The token piece at position `p` (empty outside the window).
    pub fn piece(&self, p: usize) -> &str {
        p.checked_sub(self.first_piece)
            .and_then(|i| self.pieces.get(i))
            .map_or("", String::as_str)
    }

    /// Whether position `p` is a generated token (not the prompt).
    pub fn generated(&self, p: usize) -> bool {
        p >= self.prompt_len
    }

    /// What the cells hold, in words.
    pub fn what(&self) -> &'static str {
        if self.scores {
            "scores Q·Kᵀ/√d"
        } else {
            "softmax weights"
        }
    }
}
