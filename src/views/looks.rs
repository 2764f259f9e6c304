//! "What does this token look at", decided once: for one query row of one layer, the keys
//! its chosen head attends to most, how its attention splits between the prompt and the
//! generated text, and every head's favourite key.

use crate::report::StepReport;

/// The ranked keys of one query row: `(position, weight)`, largest first.
pub fn ranked(row: &[f32]) -> Vec<(usize, f32)> {
    let mut v: Vec<(usize, f32)> = row.iter().copied().enumerate().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// One key of the ranking.
pub struct Key {
    pub pos: usize,
    pub piece: String,
    pub generated: bool,
    pub weight: f32,
}

/// What the view shows.
pub struct Looks {
    /// The query row and its token.
    pub q: usize,
    pub piece: String,
    pub generated: bool,
    pub layer: usize,
    pub head: usize,
    /// Softmax mass on the prompt, on generated tokens, on position 0.
    pub on_prompt: f32,
    pub on_generated: f32,
    pub on_first: f32,
    /// The chosen head's keys, largest weight first.
    pub keys: Vec<Key>,
    /// Per head of the layer, its favourite key.
    pub per_head: Vec<(usize, Key)>,
}

impl Looks {
    /// The view of row `q` in a layer's rows `rows[p][h]`; `None` when that row was not kept.
    pub fn of(
        r: &StepReport,
        rows: &[Vec<Vec<f32>>],
        layer: usize,
        head: usize,
        q: usize,
    ) -> Option<Self> {
        let heads = rows.get(q)?;
        let row = heads.get(head)?;
        let key = |pos: usize, weight: f32| Key {
            pos,
            piece: r.pieces.get(pos).cloned().unwrap_or_default(),
            generated: pos >= r.prompt_len,
            weight,
        };
        Some(Self {
            q,
            piece: r.pieces.get(q).cloned().unwrap_or_default(),
            generated: q >= r.prompt_len,
            layer,
            head,
            // Folded from +0.0: a float `sum` of nothing is -0.0, printed "-0.00".
            on_prompt: row.iter().take(r.prompt_len).fold(0.0, |a, w| a + w),
            on_generated: row.iter().skip(r.prompt_len).fold(0.0, |a, w| a + w),
            on_first: row.first().copied().unwrap_or(0.0),
            keys: ranked(row).into_iter().map(|(j, w)| key(j, w)).collect(),
            per_head: heads
                .iter()
                .enumerate()
                .filter_map(|(h, row)| ranked(row).first().map(|&(j, w)| (h, key(j, w))))
                .collect(),
        })
    }
}
