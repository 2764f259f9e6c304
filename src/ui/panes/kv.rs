//! KV cache: the request's reserved slots, filled and empty, with utilization and bytes.

use super::{block, bytes, put_text};
use crate::report::KvView;
use crate::ui::app::{App, Pane};
use crate::ui::theme::{ColorMode, Theme};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let elem = app
        .report()
        .map(|r| r.settings.run.kv_elem)
        .unwrap_or_default();
    let title = format!(" KV cache · contiguous · {elem} ");
    let b = block(app, theme, Pane::Kv, title);
    let inner = b.inner(area);
    b.render(area, buf);
    if let Some(r) = app.report() {
        draw(&r.kv, theme, inner, buf);
    }
}

/// Draws a request's reservation into `inner`: its numbers, a cell per slot (or per run of
/// slots), and the legend.
pub fn draw(kv: &KvView, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    put_text(
        buf,
        inner,
        0,
        inner.y,
        format!(
            "utilization {:.1}%: {} of {} slots hold tokens",
            kv.utilization_pct(),
            kv.used,
            kv.capacity
        ),
        Style::default(),
    );
    put_text(
        buf,
        inner,
        0,
        inner.y + 1,
        format!(
            "{} used of {} reserved · {} per token",
            bytes(kv.used * kv.bytes_per_token),
            bytes(kv.reserved_bytes),
            bytes(kv.bytes_per_token)
        ),
        theme.dim(),
    );
    // One cell per slot, row-major: filled slots in the request's colour, reserved-but-unused dim.
    let w = inner.width.max(1) as usize;
    let grid_rows = inner.height.saturating_sub(3) as usize;
    let per_cell = kv.capacity.div_ceil((w * grid_rows).max(1)).max(1);
    for cell in 0..(kv.capacity.div_ceil(per_cell)).min(w * grid_rows) {
        let (x, y) = (inner.x + (cell % w) as u16, inner.y + 2 + (cell / w) as u16);
        let first = cell * per_cell;
        let filled = first < kv.used;
        let (ch, st) = match (filled, theme.mode) {
            (true, ColorMode::None) => ('█', Style::default()),
            (true, _) => ('█', Style::default().fg(theme.request(0))),
            (false, _) => ('░', theme.dim()),
        };
        buf[(x, y)].set_char(ch).set_style(st);
    }
    let legend = match per_cell {
        1 => "█ token  ░ reserved, unused".to_string(),
        n => format!("one cell = {n} slots · █ token  ░ reserved, unused"),
    };
    put_text(
        buf,
        inner,
        0,
        inner.y + inner.height - 1,
        legend,
        theme.dim(),
    );
}
