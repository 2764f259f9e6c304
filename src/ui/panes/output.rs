//! Output: the generated text and the next-token distribution (top-k) as bars.

use super::{block, label, put, put_text};
use crate::report::StepReport;
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
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
    if let Some(r) = app.report() {
        draw(r, theme, inner, buf);
    }
}

/// Draws a report's text so far and its next-token distribution into `inner`.
pub fn draw(r: &StepReport, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    // The generated text keeps at least two rows (of a pane that has five): on a small
    // screen the distribution shows fewer of its top tokens instead.
    let text_min = 2.min(inner.height.saturating_sub(3));
    let k = (r.info.top_k.len() as u16).min(inner.height.saturating_sub(1 + text_min));
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
    let below = Rect {
        y: inner.y + text_h,
        height: inner.height - text_h,
        ..inner
    };
    draw_distribution(r, k as usize, theme, below, buf);
}

/// The step's token and its top `k` next tokens with bars, from the first row of `area`.
/// Sampling: the model's probability, then the one the sampler drew with (after
/// temperature and top-p), whose bar is drawn.
fn draw_distribution(r: &StepReport, k: usize, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let sampling = r.info.sampler.temperature > 0.0;
    let head = if sampling {
        format!(
            "step {} drew {:?} · model % → drawn % ({})",
            r.info.step,
            r.info.token,
            r.info.sampler.describe()
        )
    } else {
        format!("step {} took {:?} (greedy)", r.info.step, r.info.token)
    };
    put_text(buf, area, 0, area.y, head, theme.dim());
    let bar_w = area.width.saturating_sub(if sampling { 30 } else { 22 }) as f32;
    for (i, t) in r.info.top_k.iter().take(k).enumerate() {
        let p = if sampling { t.drawn } else { t.prob };
        // Clamped: a recording is untrusted, and a bar never outgrows its pane.
        let n = ((p.clamp(0.0, 1.0) * bar_w).round() as usize).min(bar_w as usize);
        let drawn = if sampling {
            format!(" →{:>5.1}%", 100.0 * t.drawn)
        } else {
            String::new()
        };
        let st = if t.id == r.info.token_id {
            theme.accent()
        } else {
            Style::default()
        };
        let line = format!(
            "{} {:>5.1}%{drawn} {}",
            label(&t.token, 12),
            100.0 * t.prob,
            "█".repeat(n)
        );
        put(buf, area, 0, area.y + 1 + i as u16, line, st);
    }
}
