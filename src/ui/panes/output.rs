//! Output: the generated text and the next-token distribution (top-k) as bars.

use super::{block, label, put, put_text};
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::worker::report::StepReport;
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
    );
    let inner = b.inner(area);
    b.render(area, buf);
    if let Some(r) = app.report.as_ref() {
        draw(r, theme, inner, buf);
    }
}

/// Draws a report's text so far and its next-token distribution into `inner`.
pub fn draw(r: &StepReport, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    let k = r.info.top_k.len() as u16;
    let text_h = inner.height.saturating_sub(k + 1);
    let text = format!("> {}\n{}", r.prompt, r.generated);
    let para = Paragraph::new(text).wrap(Wrap { trim: false });
    // Wrapped rows, not text lines: the newest words stay in view however long a line is.
    let lines = para.line_count(inner.width).min(u16::MAX as usize) as u16;
    para.scroll((lines.saturating_sub(text_h), 0)).render(
        Rect {
            height: text_h,
            ..inner
        },
        buf,
    );
    let y0 = inner.y + text_h;
    put_text(
        buf,
        inner,
        0,
        y0,
        format!("step {} sampled {:?}", r.info.step, r.info.token),
        theme.dim(),
    );
    let bar_w = inner.width.saturating_sub(22) as f32;
    for (i, t) in r.info.top_k.iter().enumerate() {
        let y = y0 + 1 + i as u16;
        // Clamped: a recording is untrusted, and a bar never outgrows its pane.
        let n = ((t.prob.clamp(0.0, 1.0) * bar_w).round() as usize).min(bar_w as usize);
        let st = if t.id == r.info.token_id {
            theme.accent()
        } else {
            Style::default()
        };
        put(
            buf,
            inner,
            0,
            y,
            format!(
                "{} {:>5.1}% {}",
                label(&t.token, 12),
                100.0 * t.prob,
                "█".repeat(n)
            ),
            st,
        );
    }
}
