//! "What does this token look at": for the bottom row of the heatmap window (the newest
//! token unless scrolled back), the keys it attends to most in the chosen layer and head,
//! how its attention splits between the prompt and the generated text, and where every
//! other head of the layer looks.

use super::{block, label, put};
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

/// The ranked keys of one query row: `(position, weight)`, largest first.
pub fn ranked(row: &[f32]) -> Vec<(usize, f32)> {
    let mut v: Vec<(usize, f32)> = row.iter().copied().enumerate().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// The query row the view describes: the bottom row of the heatmap window.
pub fn query_row(app: &App) -> Option<usize> {
    let n = app.history.get(app.layer)?.weights.len();
    (n > 0).then(|| n - 1 - app.scroll.min(n - 1))
}

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let (Some(r), Some(hist), Some(q)) = (
        app.report.as_ref(),
        app.history.get(app.layer),
        query_row(app),
    ) else {
        let b = block(app, theme, Pane::Attention, " what does it look at ".into());
        let inner = b.inner(area);
        b.render(area, buf);
        put(
            buf,
            inner,
            1,
            inner.y,
            "press space to run the prefill",
            theme.dim(),
        );
        return;
    };
    let piece = |i: usize| r.pieces.get(i).map(String::as_str).unwrap_or("");
    let kind = |i: usize| {
        if i >= r.prompt_len {
            "generated"
        } else {
            "prompt"
        }
    };
    let title = format!(
        " what does {:?} (pos {q}, {}) look at · layer {} · head {} · w back to heatmap ",
        piece(q),
        kind(q),
        app.layer,
        app.head
    );
    let b = block(app, theme, Pane::Attention, title);
    let inner = b.inner(area);
    b.render(area, buf);
    let Some(row) = hist.weights[q].get(app.head) else {
        return;
    };
    let prompt: f32 = row.iter().take(r.prompt_len).sum();
    let gen: f32 = row.iter().skip(r.prompt_len).sum();
    put(
        buf,
        inner,
        0,
        inner.y,
        format!(
            "softmax mass on the prompt {prompt:.2} · on generated tokens {gen:.2} · on position 0 {:.2}",
            row.first().copied().unwrap_or(0.0)
        ),
        Style::default(),
    );
    let bar_w = 24usize;
    let list_rows = (inner.height as usize).saturating_sub(4).clamp(1, 12);
    for (k, &(j, w)) in ranked(row).iter().take(list_rows).enumerate() {
        let bar: String = "█".repeat(((w * bar_w as f32).round() as usize).min(bar_w));
        let st = if j >= r.prompt_len {
            theme.accent()
        } else {
            Style::default()
        };
        put(
            buf,
            inner,
            0,
            inner.y + 2 + k as u16,
            format!(
                "{:>2}. pos {j:>4} {} {:<9} {w:.3} {bar}",
                k + 1,
                label(piece(j), 12),
                kind(j)
            ),
            st,
        );
    }
    // Every head of this layer: its favourite key for the same query row.
    let y = inner.y + 3 + list_rows as u16;
    if y < inner.y + inner.height {
        let heads: Vec<String> = hist.weights[q]
            .iter()
            .enumerate()
            .map(|(h, row)| {
                let (j, w) = ranked(row)[0];
                format!("h{h}→{j}:{}={w:.2}", label(piece(j), 6).trim_end())
            })
            .collect();
        put(
            buf,
            inner,
            0,
            y,
            "top key per head of this layer:",
            theme.dim(),
        );
        // As many per line as fit; the rest wrap onto the lines below.
        let mut line = String::new();
        let mut yy = y + 1;
        for h in heads {
            if !line.is_empty()
                && line.chars().count() + h.chars().count() + 2 > inner.width as usize
            {
                put(buf, inner, 0, yy, &line, theme.dim());
                yy += 1;
                line.clear();
            }
            if !line.is_empty() {
                line.push_str("  ");
            }
            line.push_str(&h);
        }
        put(buf, inner, 0, yy, &line, theme.dim());
    }
}
