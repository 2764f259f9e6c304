//! The live request's own KV cache as a picture: the contiguous reservation slot by slot,
//! tokens filled and reserved-but-unused slots empty, as the app's KV pane shows it.

use super::svg::{hex, Svg};
use super::ExportError;
use crate::report::StepReport;
use crate::views::palette::request_rgb;
use crate::views::request_kv::{self, RequestKv};

const COLS: usize = 32;
const CELL: f32 = 18.0;
/// Most cells drawn; a longer reservation is drawn several slots to a cell.
const MAX_CELLS: usize = 32 * 16;

/// The reservation of the report's request.
pub fn render(r: &StepReport) -> Result<String, ExportError> {
    let v = RequestKv::new(&r.kv, MAX_CELLS)
        .ok_or_else(|| ExportError::NoData("the request holds no KV cache yet".into()))?;
    let rows = v.filled.len().div_ceil(COLS);
    let (left, top) = (24.0, 92.0);
    let w = left * 2.0 + COLS as f32 * CELL;
    let h = top + rows as f32 * CELL + 70.0;
    let mut svg = Svg::new(w, h);
    svg.text(
        left,
        28.0,
        16.0,
        "start",
        &format!(
            "{} · the live request",
            request_kv::title(r.settings.run.kv_elem)
        ),
        0.0,
    );
    svg.text(left, 52.0, 12.0, "start", &v.slots, 0.0);
    svg.text(left, 70.0, 12.0, "start", &v.bytes, 0.0);
    let filled = hex(request_rgb(0));
    for (c, &full) in v.filled.iter().enumerate() {
        let (x, y) = (
            left + (c % COLS) as f32 * CELL,
            top + (c / COLS) as f32 * CELL,
        );
        let fill = if full { filled.as_str() } else { "#eeeef2" };
        svg.rect(
            x,
            y,
            CELL - 2.0,
            CELL - 2.0,
            fill,
            r##"stroke="#999999" stroke-width="0.4""##,
        );
    }
    let ly = top + rows as f32 * CELL + 24.0;
    let end = svg.legend(
        left,
        ly,
        &[
            (filled.as_str(), "", "token"),
            ("#eeeef2", "", "reserved, unused"),
        ],
    );
    svg.text(end, ly + 11.0, 11.0, "start", &v.cell_key(), 0.0);
    Ok(svg.finish())
}
