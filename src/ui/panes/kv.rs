//! KV cache: the request's reserved slots, filled and empty, with utilization and bytes.

use super::{block, put_text};
use crate::ui::app::{App, Pane};
use crate::ui::theme::{ColorMode, Theme};
use crate::views::request_kv::{self, RequestKv};
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
    let b = block(
        app,
        theme,
        Pane::Kv,
        format!(" {} ", request_kv::title(elem)),
        area.width,
    );
    let inner = b.inner(area);
    b.render(area, buf);
    // Two rows above the grid for the figures, one below for the legend.
    let cells = inner.width as usize * inner.height.saturating_sub(3) as usize;
    if let Some(v) = app.report().and_then(|r| RequestKv::new(&r.kv, cells)) {
        draw(&v, theme, inner, buf);
    }
}

/// Draws a reservation into `inner`: its figures, its cells row-major, and the legend.
fn draw(v: &RequestKv, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    if inner.width == 0 || inner.height == 0 {
        return;
    }
    put_text(buf, inner, 0, inner.y, v.slots.clone(), Style::default());
    put_text(buf, inner, 0, inner.y + 1, v.bytes.clone(), theme.dim());
    // Filled slots in the request's colour, reserved-but-unused dim.
    let w = inner.width.max(1) as usize;
    let grid = w * inner.height.saturating_sub(3) as usize;
    for (cell, &filled) in v.filled.iter().enumerate().take(grid) {
        let (x, y) = (inner.x + (cell % w) as u16, inner.y + 2 + (cell / w) as u16);
        let (ch, st) = match (filled, theme.mode) {
            (true, ColorMode::None) => ('█', Style::default()),
            (true, _) => ('█', Style::default().fg(theme.request(0))),
            (false, _) => ('░', theme.dim()),
        };
        buf[(x, y)].set_char(ch).set_style(st);
    }
    let legend = match v.per_cell {
        1 => "█ token  ░ reserved, unused".to_string(),
        _ => format!("{} · █ token  ░ reserved, unused", v.cell_key()),
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

/// The summary's headline: the slots that hold tokens and the bytes reserved.
pub fn summary(_app: &App, r: &crate::report::StepReport) -> String {
    format!(
        "{} of {} slots hold tokens · {} reserved",
        r.kv.used,
        r.kv.capacity,
        super::bytes(r.kv.reserved_bytes)
    )
}
