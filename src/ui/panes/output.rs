//! Output: the generated text and the next-token distribution (top-k) as bars.

use super::{block, label, put, put_text};
use crate::report::StepReport;
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::views::output::OutputView;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::{Paragraph, Widget, Wrap};

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let b = block(
        app,
        theme,
        Pane::Output,
        " output · next-token distribution ".into(),
        area.width,
    );
    let inner = b.inner(area);
    b.render(area, buf);
    if let Some(r) = app.report() {
        draw(r, theme, inner, buf);
    }
}

/// Draws a report's text so far and its next-token distribution into `inner`.
fn draw(r: &StepReport, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    let out = OutputView::new(r);
    // The generated text keeps at least two rows (of a pane that has five): on a small
    // screen the distribution shows fewer of its top tokens instead.
    let text_min = 2.min(inner.height.saturating_sub(3));
    let k = (out.bars.len() as u16).min(inner.height.saturating_sub(1 + text_min));
    let text_h = inner.height.saturating_sub(k + 1);
    let para = Paragraph::new(out.text.as_str()).wrap(Wrap { trim: false });
    // Wrapped rows, not text lines: the newest words stay in view however long a line is.
    let lines = para.line_count(inner.width).min(u16::MAX as usize) as u16;
    para.scroll((lines.saturating_sub(text_h), 0)).render(
        Rect {
            height: text_h,
            ..inner
        },
        buf,
    );
    let below = Rect {
        y: inner.y + text_h,
        height: inner.height - text_h,
        ..inner
    };
    draw_distribution(&out, k as usize, theme, below, buf);
}

/// What the step took and its top `k` candidates with bars, from the first row of `area`.
fn draw_distribution(out: &OutputView, k: usize, theme: &Theme, area: Rect, buf: &mut Buffer) {
    put_text(buf, area, 0, area.y, out.head.clone(), theme.dim());
    let sampling = out.bars.iter().any(|b| b.drawn.is_some());
    let bar_w = area.width.saturating_sub(if sampling { 30 } else { 22 }) as f32;
    for (i, b) in out.bars.iter().take(k).enumerate() {
        // A bar never outgrows its pane.
        let n = ((b.share() * bar_w).round() as usize).min(bar_w as usize);
        let st = if b.chosen {
            theme.accent()
        } else {
            Style::default()
        };
        let line = format!("{} {} {}", label(&b.token, 12), b.figures(), "█".repeat(n));
        put(buf, area, 0, area.y + 1 + i as u16, line, st);
    }
}

/// The summary's headline: the token sampled and the model's top choice.
pub fn summary(_app: &App, r: &StepReport) -> String {
    match r.info.top_k.first() {
        Some(t) => format!(
            "sampled {:?} · top {:?} {:.0}%",
            r.info.token,
            t.token,
            100.0 * t.prob
        ),
        None => format!("sampled {:?}", r.info.token),
    }
}
