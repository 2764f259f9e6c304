//! Heads: which query heads read which KV head under the current layout, and what each
//! layout costs in KV bytes.

use super::{block, bytes, put, thousands};
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::views::heads::Heads;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::widgets::Widget;

/// Columns per query-head label in the head row (used for mouse hits too): four where
/// every head fits so, else three (`q8` stays on screen in a narrow pane).
pub fn head_w(n_head: usize, width: u16) -> u16 {
    if n_head as u16 * 4 <= width {
        4
    } else {
        3
    }
}
/// Row (inside the pane) of the query-head labels.
pub const HEAD_ROW: u16 = 1;

/// The query head under column `x` of the pane's inner area, if any.
pub fn head_at(inner: Rect, x: u16, y: u16, n_head: usize) -> Option<usize> {
    if y != inner.y + HEAD_ROW || x < inner.x {
        return None;
    }
    let h = ((x - inner.x) / head_w(n_head, inner.width)) as usize;
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
    let Some(v) = app.report.as_ref().and_then(|r| Heads::of(r)) else {
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
    draw(&v, app.head, theme, inner, buf);
}

/// Draws a heads view into `inner`, query head `selected` highlighted.
pub fn draw(v: &Heads, selected: usize, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    let line = format!("{} query heads read {} KV head(s)", v.map.len(), v.n_kv);
    super::put_text(buf, inner, 0, inner.y, line, Style::default());
    let row = inner.y + HEAD_ROW;
    let w = head_w(v.map.len(), inner.width);
    for (h, &g) in v.map.iter().enumerate() {
        let kv_style = Style::default().fg(theme.request(g));
        let mut st = kv_style;
        if h == selected {
            st = st.add_modifier(Modifier::REVERSED | Modifier::BOLD);
        }
        put(buf, inner, h as u16 * w, row, format!("q{h:<2}"), st);
        // Under each query head, the KV head it reads.
        put(
            buf,
            inner,
            h as u16 * w,
            row + 1,
            format!("↓{g:<2}"),
            kv_style,
        );
    }
    put(buf, inner, 0, row + 2, "kv heads: ", theme.dim());
    for g in 0..v.n_kv {
        let st = Style::default().fg(theme.request(g));
        put(
            buf,
            inner,
            10 + g as u16 * w,
            row + 2,
            format!("k{g:<2}"),
            st,
        );
    }
    let tok = format!("{} tok", v.tokens);
    put(
        buf,
        inner,
        0,
        row + 4,
        format!("{:<5} {:>10} {tok:>12}", "", "B/token"),
        theme.dim(),
    );
    for (i, &(l, bpt, total)) in v.costs.iter().enumerate() {
        let st = if l == v.layout {
            theme.accent()
        } else {
            Style::default()
        };
        let text = format!(
            "{:<5} {:>10} {:>12}",
            l.to_string(),
            thousands(bpt),
            bytes(total)
        );
        super::put_text(buf, inner, 0, row + 5 + i as u16, text, st);
    }
}
