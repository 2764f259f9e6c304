//! The batching timeline as a picture: a row per request, a column per iteration, each
//! cell the request's phase in that iteration as the scheduler reported it.

use super::svg::{hex, Svg};
use super::ExportError;
use crate::serve::ReqPhase;
use crate::views::palette::request_rgb;
use crate::views::timeline as views;
use std::collections::VecDeque;

/// How a prefill cell differs from a decode cell of the same colour: paler, outlined.
const PREFILL: &str = r##"fill-opacity="0.45" stroke="#333333" stroke-width="0.6""##;
/// How a padding cell differs from a decode cell: a faint trace of the finished row.
const PADDING: &str = r##"fill-opacity="0.15""##;

/// The timeline of `(request, phase)` columns, oldest first; each row ends in its
/// request's time to first token (`ttft_ms`), once it has one.
pub fn render(
    title: &str,
    timeline: &VecDeque<Vec<(u64, ReqPhase)>>,
    ttft_ms: &[(u64, f64)],
) -> Result<String, ExportError> {
    if timeline.is_empty() {
        return Err(ExportError::NoData(
            "no serving iterations yet: run a few steps first".into(),
        ));
    }
    let n_req = views::requests(timeline);
    let cols = timeline.len();
    let cw = (900.0 / cols as f32).clamp(3.0, 16.0);
    let rh = 20.0;
    let (left, top) = (60.0, 70.0);
    let w = left + cols as f32 * cw + 100.0;
    let h = top + n_req as f32 * rh + 114.0;
    let mut s = Svg::new(w.max(900.0), h);
    s.text(16.0, 28.0, 16.0, "start", title, 0.0);
    let peak = views::peak_active(timeline);
    s.text(
        16.0,
        48.0,
        11.0,
        "start",
        &format!("{cols} iterations · peak active set {peak} · rows: requests, columns: iterations (oldest left) · right: time to first token"),
        0.0,
    );
    let right = left + cols as f32 * cw + 8.0;
    for id in 0..n_req {
        let y = top + id as f32 * rh;
        s.text(left - 8.0, y + 14.0, 11.0, "end", &format!("r{id}"), 0.0);
        if let Some(&(_, ms)) = ttft_ms.iter().find(|t| t.0 == id as u64) {
            let text = format!("{ms:.0} ms");
            s.text(right, y + 14.0, 11.0, "start", &text, 0.0);
        }
    }
    for (c, col) in timeline.iter().enumerate() {
        let x = left + c as f32 * cw;
        for &(id, ph) in col {
            let y = top + id as f32 * rh;
            cell(&mut s, (x, y), (cw, rh), id, ph);
        }
    }
    legend(&mut s, left, top + n_req as f32 * rh + 30.0);
    Ok(s.finish())
}

/// One request's phase in one iteration, as a cell `cw` wide in a row `rh` high at `(x, y)`.
fn cell(s: &mut Svg, (x, y): (f32, f32), (cw, rh): (f32, f32), id: u64, ph: ReqPhase) {
    let base = hex(request_rgb(id as usize));
    match ph {
        ReqPhase::Decode => s.rect(x, y + 2.0, cw, rh - 4.0, &base, ""),
        ReqPhase::Prefill => s.rect(x, y + 2.0, cw, rh - 4.0, &base, PREFILL),
        ReqPhase::Waiting => s.rect(x, y + rh / 2.0 - 1.0, cw, 2.0, "#b0b0b8", ""),
        ReqPhase::Preempted => s.rect(x, y + 2.0, cw, rh - 4.0, "#d62728", ""),
        ReqPhase::Rejected => s.rect(x, y + 2.0, cw, rh - 4.0, "#7f7f7f", ""),
        ReqPhase::Padding => s.rect(x, y + 2.0, cw, rh - 4.0, &base, PADDING),
        ReqPhase::Finished => {}
    }
}

/// What each kind of cell means, in two rows so the legend fits the picture's width
/// whatever the timeline's length.
fn legend(s: &mut Svg, left: f32, ly: f32) {
    let legend: [(&str, &str, &str); 6] = [
        ("#56b4e9", "", "decode"),
        ("#56b4e9", PREFILL, "prefill"),
        ("#b0b0b8", "", "waiting in the queue"),
        ("#d62728", "", "preempted (pages freed)"),
        ("#56b4e9", PADDING, "padding (finished, row still runs)"),
        ("#7f7f7f", "", "rejected"),
    ];
    s.legend(left, ly, &legend[..3]);
    s.legend(left, ly + 24.0, &legend[3..]);
}
