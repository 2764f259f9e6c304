//! The logit lens (o): for the live request's newest position, what each layer would
//! predict if the stack stopped there, and where the token finally sampled takes over.

use super::{block, label, put_text};
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::views::lens::{self, LensView};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let b = block(
        app,
        theme,
        Pane::Lens,
        " logit lens · what each layer would predict ".into(),
    );
    let inner = b.inner(area);
    b.render(area, buf);
    match app.report().and_then(lens::view) {
        Some(v) => draw(&v, theme, inner, buf),
        None => put_text(
            buf,
            inner,
            0,
            inner.y,
            "runs from the next step on: press space (each layer's last row through the LM head)",
            theme.dim(),
        ),
    }
}

/// Draws a lens view into `inner`: the headline, then one row per layer shown.
pub fn draw(v: &LensView, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    put_text(buf, inner, 0, inner.y, v.headline(), theme.accent());
    let chosen = label(&v.chosen, 10).trim_end().to_string();
    put_text(
        buf,
        inner,
        0,
        inner.y + 1,
        format!("layer  top guess     p      p({chosen})"),
        theme.dim(),
    );
    let bar_w = inner.width.saturating_sub(38).min(40) as f32;
    let (hidden, rows) = v.shown(inner.height.saturating_sub(2) as usize);
    let mut y = inner.y + 2;
    if hidden > 0 {
        let line = format!(
            "  layers 0–{} above (z gives the pane more room)",
            hidden - 1
        );
        put_text(buf, inner, 0, y, line, theme.dim());
        y += 1;
    }
    for (i, r) in rows.iter().enumerate() {
        let formed = v.forms_at.is_some_and(|f| r.layer >= f);
        let bar = "█".repeat((r.chosen_prob * bar_w).round() as usize);
        let line = format!(
            "{:>5}  {} {:>5.2}  {:>5.2} {bar}",
            r.layer,
            label(&r.token, 12),
            r.prob,
            r.chosen_prob
        );
        let style = if formed {
            theme.accent()
        } else {
            Style::default()
        };
        put_text(buf, inner, 0, y + i as u16, line, style);
    }
}
