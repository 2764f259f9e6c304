//! "What does this token look at": for the bottom row of the heatmap window (the newest
//! token unless scrolled back), the keys it attends to most in the chosen layer and head,
//! how its attention splits between the prompt and the generated text, and where every
//! other head of the layer looks.

use super::{block, label, put_text};
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::views::looks::Looks;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

pub use crate::views::looks::ranked;

/// The query row the view describes: the bottom row of the heatmap window.
pub fn query_row(app: &App) -> Option<usize> {
    let n = app
        .frames
        .shown()
        .history
        .get(app.screen.layer)?
        .weights
        .len();
    (n > 0).then(|| n - 1 - app.screen.scroll.min(n - 1))
}

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let view = match (
        app.report(),
        app.frames.shown().history.get(app.screen.layer),
        query_row(app),
    ) {
        (Some(r), Some(hist), Some(q)) => {
            Looks::of(r, &hist.weights, app.screen.layer, app.screen.head, q)
        }
        _ => None,
    };
    let title = match &view {
        Some(v) => format!(
            " what does {:?} (pos {}, {}) look at · layer {} · head {} · w back to heatmap ",
            v.piece,
            v.q,
            kind(v.generated),
            v.layer,
            v.head
        ),
        None => " what does it look at ".into(),
    };
    let b = block(app, theme, Pane::Attention, title, area.width);
    let inner = b.inner(area);
    b.render(area, buf);
    match &view {
        Some(v) => draw(v, theme, inner, buf),
        None if app.report().is_some() => {}
        None => put_text(
            buf,
            inner,
            1,
            inner.y,
            "press space to run the prefill",
            theme.dim(),
        ),
    }
}

fn kind(generated: bool) -> &'static str {
    if generated {
        "generated"
    } else {
        "prompt"
    }
}

/// Draws a view into `inner`: where the mass goes, the ranked keys with bars, and every
/// head's favourite key.
pub fn draw(v: &Looks, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    // Position 0 first: the attention-sink lesson reads it, and a narrow pane cuts the end.
    let mass = format!(
        "softmax mass on position 0 {:.2} · the prompt {:.2} · generated tokens {:.2}",
        v.on_first, v.on_prompt, v.on_generated
    );
    put_text(buf, inner, 0, inner.y, mass, Style::default());
    let bar_w = 24usize;
    let list_rows = (inner.height as usize).saturating_sub(4).clamp(1, 12);
    for (k, key) in v.keys.iter().take(list_rows).enumerate() {
        let w = key.weight;
        let bar: String = "█".repeat(((w * bar_w as f32).round() as usize).min(bar_w));
        let st = if key.generated {
            theme.accent()
        } else {
            Style::default()
        };
        let line = format!(
            "{:>2}. pos {:>4} {} {:<9} {w:.3} {bar}",
            k + 1,
            key.pos,
            label(&key.piece, 12),
            kind(key.generated)
        );
        put_text(buf, inner, 0, inner.y + 2 + k as u16, line, st);
    }
    // Every head of this layer: its favourite key for the same query row.
    let y = inner.y + 3 + list_rows as u16;
    if y < inner.y + inner.height {
        let title = "top key per head of this layer:";
        put_text(buf, inner, 0, y, title, theme.dim());
        let below = Rect {
            y: y + 1,
            height: inner.bottom().saturating_sub(y + 1),
            ..inner
        };
        per_head(v, theme, below, buf);
    }
}

/// Each head's favourite key, as many per line as fit; the rest wrap onto the lines below.
fn per_head(v: &Looks, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let mut line = String::new();
    let mut y = area.y;
    for (h, key) in &v.per_head {
        let item = format!(
            "h{h}→{}:{}={:.2}",
            key.pos,
            label(&key.piece, 6).trim_end(),
            key.weight
        );
        if !line.is_empty() && line.chars().count() + item.chars().count() + 2 > area.width as usize
        {
            put_text(buf, area, 0, y, &line, theme.dim());
            y += 1;
            line.clear();
        }
        if !line.is_empty() {
            line.push_str("  ");
        }
        line.push_str(&item);
    }
    put_text(buf, area, 0, y, &line, theme.dim());
}
