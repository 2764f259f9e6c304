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
        area.width,
    );
    let inner = b.inner(area);
    b.render(area, buf);
    match app.report().and_then(lens::view) {
        Some(v) => draw(&v, theme, inner, buf),
        // Wrapped: at 80 columns the one line would lose what the lens is.
        None => ratatui::widgets::Paragraph::new(
            "runs from the next step on: press space (each layer's last row through the LM head)",
        )
        .style(theme.dim())
        .wrap(ratatui::widgets::Wrap { trim: true })
        .render(inner, buf),
    }
}

/// Draws a lens view into `inner`: the headline, then one row per layer, or, where the
/// pane is too short for a row each, every layer in columns (top to bottom, then left to
/// right), so the whole stack is always on screen.
pub fn draw(v: &LensView, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    put_text(buf, inner, 0, inner.y, v.headline(), theme.accent());
    let chosen = label(&v.chosen, 10).trim_end().to_string();
    let height = inner.height.saturating_sub(2) as usize;
    if v.rows.len() > height && height > 0 {
        return columns(v, &chosen, theme, inner, buf);
    }
    put_text(
        buf,
        inner,
        0,
        inner.y + 1,
        format!("layer  top guess     p      p({chosen})"),
        theme.dim(),
    );
    let bar_w = inner.width.saturating_sub(38).min(40) as f32;
    for (i, r) in v.rows.iter().enumerate() {
        let bar = "█".repeat((r.chosen_prob * bar_w).round() as usize);
        let line = format!(
            "{:>5}  {} {:>5.2}  {:>5.2} {bar}",
            format!("L{}", r.layer),
            label(&r.token, 12),
            r.prob,
            r.chosen_prob
        );
        put_text(
            buf,
            inner,
            0,
            inner.y + 2 + i as u16,
            line,
            row_style(v, r, theme),
        );
    }
}

/// Every layer in as many columns as the rows need: `L7 ·three .48` (layer, top guess,
/// the probability it gives the token finally sampled).
fn columns(v: &LensView, chosen: &str, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    let height = inner.height.saturating_sub(2) as usize;
    let cols = v.rows.len().div_ceil(height);
    let col_w = (inner.width as usize / cols).max(1);
    put_text(
        buf,
        inner,
        0,
        inner.y + 1,
        format!("layer, top guess, p({chosen}); in columns, first layer top left"),
        theme.dim(),
    );
    for (i, r) in v.rows.iter().enumerate() {
        // A guess cut to one or two letters says nothing: narrow columns drop it.
        let token = match col_w.saturating_sub(10) {
            0..=2 => String::new(),
            w => format!("{} ", label(&r.token, w.min(9))),
        };
        let cell = format!("{:<4}{token}{:.2}", format!("L{}", r.layer), r.chosen_prob);
        let cell = cell.replacen("0.", ".", 1);
        let x = ((i / height) * col_w) as u16;
        let y = inner.y + 2 + (i % height) as u16;
        let room = Rect {
            x: inner.x + x,
            width: (col_w.saturating_sub(1) as u16).min(inner.width.saturating_sub(x)),
            ..inner
        };
        put_text(buf, room, 0, y, cell, row_style(v, r, theme));
    }
}

/// Highlighted from the layer where the sampled token takes over.
fn row_style(v: &LensView, r: &crate::model::session::LensRow, theme: &Theme) -> Style {
    if v.forms_at.is_some_and(|f| r.layer >= f) {
        theme.accent()
    } else {
        Style::default()
    }
}

/// The summary's headline: the lens's own, or how to turn it on.
pub fn summary(_app: &App, r: &crate::report::StepReport) -> String {
    match lens::view(r) {
        Some(v) => v.headline(),
        None => "off until shown (o)".into(),
    }
}
