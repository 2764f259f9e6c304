//! The serving engine's KV memory as a picture: the paged pool page by page (owner,
//! fill, sharing) or the contiguous reservations, with the store's own statistics.

use super::svg::{hex, Svg};
use super::ExportError;
use crate::report::ServeReport;
use crate::serve::CacheKind;
use crate::views::pages::{self, Cell, Grid};
use crate::views::palette::request_rgb;

const COLS: usize = 16;
const CELL: f32 = 34.0;

/// The page grid of a serving iteration.
pub fn render(sv: &ServeReport) -> Result<String, ExportError> {
    let s = &sv.step;
    let g = Grid::of(sv);
    let (ps, cells) = (g.page_size, &g.cells);
    if cells.is_empty() {
        return Err(ExportError::NoData(
            "the serving workload holds no KV memory at this iteration".into(),
        ));
    }
    let rows = cells.len().div_ceil(COLS);
    let (left, top) = (24.0, 92.0);
    let w = left * 2.0 + COLS as f32 * CELL + 240.0;
    let tables = &s.block_tables;
    // The legend, the owners, a line per block table and one for the note under them.
    let h = top + rows as f32 * CELL + 128.0 + 18.0 * tables.len() as f32;
    let mut svg = Svg::new(w, h);
    heading(&mut svg, sv, left, ps);
    for (i, c) in cells.iter().enumerate() {
        let x = left + (i % COLS) as f32 * CELL;
        let y = top + (i / COLS) as f32 * CELL;
        cell(&mut svg, x, y, c, ps);
    }
    footer(&mut svg, sv, &g, left, top + rows as f32 * CELL + 24.0);
    Ok(svg.finish())
}

/// The title and the two lines under it: what the memory holds, and how to read a cell.
fn heading(svg: &mut Svg, sv: &ServeReport, left: f32, ps: usize) {
    let (s, m) = (&sv.step, &sv.step.memory);
    let kind = match sv.cache {
        CacheKind::Paged => "paged",
        CacheKind::Contiguous => "contiguous",
    };
    let policy = format!("{:?}", sv.policy).to_lowercase();
    let title = format!(
        "KV cache · {kind} · {policy} batching · iteration {}",
        s.iteration
    );
    svg.text(left, 28.0, 16.0, "start", &title, 0.0);
    let held = format!(
        "{} of {} allocated slots hold tokens ({} utilization) · budget {} tokens · {} shared page(s) · {} preemption(s)",
        m.token_slots,
        m.allocated_slots,
        m.utilization_pct()
            .map_or("no".into(), |u| format!("{u:.1}%")),
        m.capacity_tokens,
        m.shared_pages,
        sv.preemptions
    );
    svg.text(left, 50.0, 11.0, "start", &held, 0.0);
    let how = format!(
        "one cell = {ps} token slots; the coloured height is the share holding tokens; the label is the owning request"
    );
    svg.text(left, 68.0, 11.0, "start", &how, 0.0);
}

/// Under the grid, from `ly` down: the legend, which request each colour is, each
/// request's block table, and a note: a contiguous cache's gaps (external fragmentation
/// when the next request waits) or a paged cache's copies on write.
fn footer(svg: &mut Svg, sv: &ServeReport, g: &Grid, left: f32, ly: f32) {
    let legend: [(&str, &str, &str); 4] = [
        ("#56b4e9", "", "slots holding tokens"),
        ("#d5ecf9", "", "allocated or reserved, empty"),
        (
            "#f4f4f6",
            r##"stroke="#9a9aa0" stroke-width="0.8""##,
            "free",
        ),
        (
            "#ffffff",
            r##"stroke="#111111" stroke-width="2.5""##,
            "shared (prefix)",
        ),
    ];
    svg.legend(left, ly, &legend);
    let owners = g.owners();
    for (k, id) in owners.iter().enumerate() {
        let x = left + (k % 12) as f32 * 56.0;
        let y = ly + 30.0 + (k / 12) as f32 * 20.0;
        svg.rect(x, y, 14.0, 14.0, &hex(request_rgb(*id as usize)), "");
        svg.text(x + 18.0, y + 11.0, 11.0, "start", &format!("r{id}"), 0.0);
    }
    // Each request's block table: its logical blocks in order, as the pages that hold them.
    let y0 = ly + 40.0 + owners.len().div_ceil(12) as f32 * 20.0;
    let tables = &sv.step.block_tables;
    for (k, (id, _)) in tables.iter().enumerate() {
        let blocks = pages::block_table(sv, *id);
        let line = pages::describe_table(*id, &blocks, g.page_size);
        svg.text(left, y0 + 18.0 * k as f32, 11.0, "start", &line, 0.0);
    }
    if let Some(line) = pages::describe_gaps(sv).or_else(|| pages::describe_copies(sv)) {
        let mark = if g.cells.iter().any(|c| c.stranded) {
            "  (× marks the gaps too short for it)"
        } else {
            ""
        };
        let y = y0 + 18.0 * tables.len() as f32;
        svg.text(left, y, 11.0, "start", &format!("{line}{mark}"), 0.0);
    }
}

/// One cell at `(x, y)`: free, or the owner's colour filled from the bottom as far as
/// slots hold tokens, outlined heavily when shared.
fn cell(svg: &mut Svg, x: f32, y: f32, c: &Cell, ps: usize) {
    let (cw, ch) = (CELL - 4.0, CELL - 4.0);
    let outline = if c.shared > 1 {
        r##"stroke="#111111" stroke-width="2.5""##
    } else {
        r##"stroke="#9a9aa0" stroke-width="0.8""##
    };
    let Some(id) = c.owner else {
        svg.rect(x, y, cw, ch, "#f4f4f6", outline);
        if c.stranded {
            svg.text(x + cw / 2.0, y + ch / 2.0 + 5.0, 14.0, "middle", "×", 0.0);
        }
        return;
    };
    let rgb = request_rgb(id as usize);
    // Reserved or allocated but empty: a pale wash of the owner's colour.
    let pale = |v: u8| 255 - (255 - v) / 4;
    svg.rect(
        x,
        y,
        cw,
        ch,
        &hex((pale(rgb.0), pale(rgb.1), pale(rgb.2))),
        "",
    );
    let fh = ch * c.fill as f32 / ps as f32;
    svg.rect(x, y + ch - fh, cw, fh, &hex(rgb), "");
    svg.rect(x, y, cw, ch, "none", outline);
    let label = if c.shared > 1 {
        format!("r{id}×{}", c.shared)
    } else {
        format!("r{id}")
    };
    svg.text(
        x + cw / 2.0,
        y + ch / 2.0 + 4.0,
        10.0,
        "middle",
        &label,
        0.0,
    );
}
