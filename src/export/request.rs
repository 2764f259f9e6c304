//! The live request's own KV cache as a picture: the contiguous reservation slot by slot,
//! tokens filled and reserved-but-unused slots empty, as the app's KV pane shows it.

use super::svg::{hex, Svg};
use super::ExportError;
use crate::report::KvView;
use crate::views::palette::request_rgb;

const COLS: usize = 32;
const CELL: f32 = 18.0;
/// Most cells drawn; a longer reservation is drawn several slots to a cell.
const MAX_CELLS: usize = 32 * 16;

/// The reservation of one request.
pub fn render(kv: &KvView) -> Result<String, ExportError> {
    if kv.capacity == 0 {
        return Err(ExportError::NoData(
            "the request holds no KV cache yet".into(),
        ));
    }
    let per_cell = kv.capacity.div_ceil(MAX_CELLS).max(1);
    let cells = kv.capacity.div_ceil(per_cell);
    let rows = cells.div_ceil(COLS);
    let (left, top) = (24.0, 92.0);
    let w = left * 2.0 + COLS as f32 * CELL;
    let h = top + rows as f32 * CELL + 70.0;
    let mut svg = Svg::new(w, h);
    header(&mut svg, kv, left);
    let filled = hex(request_rgb(0));
    for c in 0..cells {
        let (x, y) = (
            left + (c % COLS) as f32 * CELL,
            top + (c / COLS) as f32 * CELL,
        );
        let fill = if c * per_cell < kv.used {
            filled.as_str()
        } else {
            "#eeeef2"
        };
        svg.rect(
            x,
            y,
            CELL - 2.0,
            CELL - 2.0,
            fill,
            r##"stroke="#999999" stroke-width="0.4""##,
        );
    }
    let key = if per_cell > 1 {
        format!("one cell = {per_cell} slots")
    } else {
        "one cell = one slot".into()
    };
    let ly = top + rows as f32 * CELL + 24.0;
    let end = svg.legend(
        left,
        ly,
        &[
            (filled.as_str(), "", "token"),
            ("#eeeef2", "", "reserved, unused"),
        ],
    );
    svg.text(end, ly + 11.0, 11.0, "start", &key, 0.0);
    Ok(svg.finish())
}

/// The title and the reservation's figures: slots held, utilization, bytes.
fn header(s: &mut Svg, kv: &KvView, left: f32) {
    s.text(
        left,
        28.0,
        16.0,
        "start",
        "KV cache · contiguous · the live request",
        0.0,
    );
    let mb = |b: usize| b as f64 / 1e6;
    s.text(
        left,
        52.0,
        12.0,
        "start",
        &format!(
            "{} of {} reserved slots hold tokens · utilization {:.1}%",
            kv.used,
            kv.capacity,
            kv.utilization_pct()
        ),
        0.0,
    );
    s.text(
        left,
        70.0,
        12.0,
        "start",
        &format!(
            "{:.2} MB used of {:.2} MB reserved · {} bytes per token",
            mb(kv.used * kv.bytes_per_token),
            mb(kv.reserved_bytes),
            kv.bytes_per_token
        ),
        0.0,
    );
}
