//! Heads: which query heads read which KV head under the current layout, and what each
//! layout costs in KV bytes.

use super::{block, bytes, put, thousands};
use crate::model::HeadLayout;
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::widgets::Widget;

/// Columns per query-head label in the head row (used for mouse hits too).
pub const HEAD_W: u16 = 4;
/// Row (inside the pane) of the query-head labels.
pub const HEAD_ROW: u16 = 1;

/// The query head under column `x` of the pane's inner area, if any.
pub fn head_at(inner: Rect, x: u16, y: u16, n_head: usize) -> Option<usize> {
    if y != inner.y + HEAD_ROW || x < inner.x {
        return None;
    }
    let h = ((x - inner.x) / HEAD_W) as usize;
    (h < n_head).then_some(h)
}

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let b = block(
        app,
        theme,
        Pane::Heads,
        format!(" heads · {} ", app.run.layout),
    );
    let inner = b.inner(area);
    b.render(area, buf);
    let Some(r) = app.report.as_ref() else {
        put(
            buf,
            inner,
            0,
            inner.y,
            "waiting for the first step",
            theme.dim(),
        );
        return;
    };
    let map = &r.info.query_to_kv;
    let n_kv = map.iter().max().map(|m| m + 1).unwrap_or(0);
    put(
        buf,
        inner,
        0,
        inner.y,
        format!("{} query heads read {} KV head(s)", map.len(), n_kv),
        Style::default(),
    );
    let row = inner.y + HEAD_ROW;
    for (h, &g) in map.iter().enumerate() {
        let mut st = Style::default().fg(theme.request(g));
        if h == app.head {
            st = st.add_modifier(Modifier::REVERSED | Modifier::BOLD);
        }
        put(buf, inner, h as u16 * HEAD_W, row, format!("q{h:<2}"), st);
        // Under each query head, the KV head it reads.
        put(
            buf,
            inner,
            h as u16 * HEAD_W,
            row + 1,
            format!("↓{g:<2}"),
            Style::default().fg(theme.request(g)),
        );
    }
    put(buf, inner, 0, row + 2, "kv heads: ", theme.dim());
    for g in 0..n_kv {
        put(
            buf,
            inner,
            10 + g as u16 * HEAD_W,
            row + 2,
            format!("k{g:<2}"),
            Style::default().fg(theme.request(g)),
        );
    }
    let tokens = r.kv.capacity;
    put(
        buf,
        inner,
        0,
        row + 4,
        format!(
            "{:<5} {:>10} {:>12}",
            "",
            "B/token",
            format!("{tokens} tok")
        ),
        theme.dim(),
    );
    for (i, l) in HeadLayout::ALL.iter().enumerate() {
        let bpt = r.info.kv_bytes_per_token.get(l).copied().unwrap_or(0);
        let st = if *l == r.run.layout {
            theme.accent()
        } else {
            Style::default()
        };
        put(
            buf,
            inner,
            0,
            row + 5 + i as u16,
            format!(
                "{:<5} {:>10} {:>12}",
                l.to_string(),
                thousands(bpt),
                bytes(bpt * tokens)
            ),
            st,
        );
    }
}
