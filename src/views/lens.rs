//! The logit lens, decided once for the pane and its picture: per layer, the token the
//! model would pick if it stopped there, and where the finally sampled token takes over.

use crate::model::session::LensRow;
use crate::report::StepReport;

/// What the lens shows for one step.
#[derive(Debug, Clone, PartialEq)]
pub struct LensView<'a> {
    pub rows: &'a [LensRow],
    /// The token the step sampled.
    pub chosen: String,
    /// The first layer from which the chosen token is the top guess at every later layer.
    pub forms_at: Option<usize>,
    /// The first layer where the chosen token is the top guess at all.
    pub first_top: Option<usize>,
}

/// The lens of a report, when the step ran it.
pub fn view(r: &StepReport) -> Option<LensView<'_>> {
    let rows = r.info.logit_lens.as_slice();
    if rows.is_empty() {
        return None;
    }
    Some(LensView {
        rows,
        chosen: r.info.token.clone(),
        forms_at: forms_at(rows, r.info.token_id),
        first_top: rows
            .iter()
            .find(|l| l.id == r.info.token_id)
            .map(|l| l.layer),
    })
}

impl LensView<'_> {
    /// "sampled " K" · top guess from layer 21 on (first at 19)".
    pub fn headline(&self) -> String {
        let at = match (self.forms_at, self.first_top) {
            (Some(s), Some(f)) if s != f => format!("top guess from layer {s} on (first at {f})"),
            (Some(s), _) => format!("top guess from layer {s} on"),
            _ => "never the top guess of a single layer".into(),
        };
        format!("sampled {:?} · {at}", self.chosen)
    }
}

/// The layer from which `chosen` stays the top-1 guess to the end of the stack.
pub fn forms_at(rows: &[LensRow], chosen: u32) -> Option<usize> {
    let last_wrong = rows.iter().rposition(|r| r.id != chosen);
    match last_wrong {
        None => rows.first().map(|r| r.layer),
        Some(i) => rows.get(i + 1).map(|r| r.layer),
    }
}
