//! Attention heatmap: query positions (rows) × key positions (columns) for one layer and
//! head, two query rows per terminal cell with half blocks, the causal mask visible, the
//! newest query row marked.

use super::{block, label, put};
use crate::ui::app::{App, Pane};
use crate::ui::theme::{ColorMode, Theme};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::widgets::Widget;

const LABEL_W: u16 = 10;

/// The colour scale's ends: the smallest to the largest value shown, from 0 for softmax
/// weights (which are never negative) so that equal weights get equal colours everywhere.
pub fn value_range(values: impl Iterator<Item = f32>, scores: bool) -> (f32, f32) {
    let (lo, hi) = values.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    (if scores { lo } else { 0.0 }, hi)
}

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let kv_of = app
        .report
        .as_ref()
        .and_then(|r| r.info.query_to_kv.get(app.head).copied())
        .unwrap_or(0);
    let n_layer = app.report.as_ref().map(|r| r.cfg.n_layer).unwrap_or(0);
    let n_head = app.report.as_ref().map(|r| r.cfg.n_head).unwrap_or(0);
    let title = format!(
        " attention · layer {}/{} · head {}/{} → kv {} · {} ",
        app.layer,
        n_layer.saturating_sub(1),
        app.head,
        n_head.saturating_sub(1),
        kv_of,
        if app.show_scores {
            "scores Q·Kᵀ/√d"
        } else {
            "softmax weights"
        }
    );
    let b = block(app, theme, Pane::Attention, title);
    let inner = b.inner(area);
    b.render(area, buf);
    let hist = app.history.get(app.layer).filter(|h| !h.weights.is_empty());
    let (Some(r), Some(hist)) = (app.report.as_ref(), hist) else {
        let msg = match &app.report {
            Some(_) if app.replaying => format!(
                "layer {} was not recorded: a recording keeps the layer that was on screen",
                app.layer
            ),
            Some(_) => format!("layer {}: press space to capture its next rows", app.layer),
            None => "press space to run the prefill".into(),
        };
        put(buf, inner, 1, inner.y, &msg, theme.dim());
        return;
    };
    let rows = if app.show_scores {
        &hist.scores
    } else {
        &hist.weights
    };
    if rows.is_empty() || inner.height < 4 || inner.width <= LABEL_W + 4 {
        return;
    }
    let n = rows.len();
    let cols = (inner.width - LABEL_W) as usize;
    let per_cell = if theme.mode == ColorMode::None { 1 } else { 2 };
    // One line for the key ruler on top, two for the legend below.
    let char_rows = (inner.height - 3) as usize;
    // The window ends `scroll` positions before the newest (0 follows the newest).
    let end = n - app.scroll.min(n - 1);
    let q0 = end.saturating_sub(char_rows * per_cell);
    let k0 = end.saturating_sub(cols);
    let value = |i: usize, j: usize| -> Option<f32> {
        rows.get(i)
            .and_then(|r| r.get(app.head))
            .and_then(|row| row.get(j))
            .copied()
    };
    let (lo, hi) = value_range(
        (q0..end).flat_map(|i| (k0..end).filter_map(move |j| value(i, j))),
        app.show_scores,
    );
    let norm = |v: f32| if hi > lo { (v - lo) / (hi - lo) } else { 1.0 };
    // Key ruler: which columns are prompt keys and which generated ones, the boundary marked.
    let pl = r.prompt_len;
    put(buf, inner, 0, inner.y, "keys:", theme.dim());
    for (cx, kj) in (k0..end).enumerate() {
        let ch = match kj.cmp(&pl) {
            std::cmp::Ordering::Less => '─',
            std::cmp::Ordering::Equal => '┃',
            std::cmp::Ordering::Greater => '━',
        };
        buf[(inner.x + LABEL_W + cx as u16, inner.y)]
            .set_char(ch)
            .set_style(theme.dim());
    }
    let gen_col = pl.saturating_sub(k0);
    if pl > k0 && (pl >= end || gen_col >= 7) {
        put(buf, inner, LABEL_W, inner.y, "prompt", theme.dim());
    }
    if pl < end && (LABEL_W as usize + gen_col + 1) < inner.width as usize {
        put(
            buf,
            inner,
            LABEL_W + gen_col as u16 + 1,
            inner.y,
            "generated",
            theme.accent(),
        );
    }
    let masked = theme.rgb(28, 28, 34);
    let cell_color = |v: Option<f32>| v.map(|v| theme.ramp(norm(v))).unwrap_or(masked);
    for (cy, qi) in (q0..end).step_by(per_cell).enumerate() {
        let y = inner.y + 1 + cy as u16;
        if cy >= char_rows {
            break;
        }
        // Row label: the query token (both rows of the cell when halved, newest marked).
        let last = (qi + per_cell - 1).min(end - 1);
        let newest = last == n - 1;
        let piece = r.pieces.get(last).map(String::as_str).unwrap_or("");
        // The first cell holding a generated row marks the prompt/generation boundary.
        let gen_mark = if qi <= r.prompt_len && r.prompt_len <= last {
            '┣'
        } else if last >= r.prompt_len {
            '+'
        } else {
            ' '
        };
        let lab = format!(
            "{}{}{}",
            if newest { '▶' } else { ' ' },
            gen_mark,
            label(piece, LABEL_W as usize - 3)
        );
        let st = if newest { theme.accent() } else { theme.dim() };
        put(buf, inner, 0, y, lab, st);
        for (cx, kj) in (k0..end).enumerate() {
            let x = inner.x + LABEL_W + cx as u16;
            let cell = &mut buf[(x, y)];
            if theme.mode == ColorMode::None {
                let ch = match value(qi, kj) {
                    Some(v) => Theme::shade(norm(v)),
                    None => '·',
                };
                cell.set_char(ch);
            } else {
                let top = cell_color(value(qi, kj));
                let bottom = if qi + 1 < end {
                    cell_color(value(qi + 1, kj))
                } else {
                    Color::Reset
                };
                cell.set_char('▀')
                    .set_style(Style::default().fg(top).bg(bottom));
            }
        }
    }
    // Legend and what the newest row looks at.
    let ly = inner.y + inner.height - 2;
    put(buf, inner, 0, ly, format!("{:>8.3} ", lo), theme.dim());
    for i in 0..16u16 {
        let x = inner.x + 9 + i;
        if x < inner.x + inner.width {
            let f = i as f32 / 15.0;
            if theme.mode == ColorMode::None {
                buf[(x, ly)].set_char(Theme::shade(f));
            } else {
                buf[(x, ly)]
                    .set_char('█')
                    .set_style(Style::default().fg(theme.ramp(f)));
            }
        }
    }
    let keys = if k0 > 0 {
        format!("keys {k0}..{}", end - 1)
    } else {
        format!("keys 0..{}", end - 1)
    };
    put(
        buf,
        inner,
        26,
        ly,
        format!(" {:.3}  {keys}  ·=masked  ┣ +=generated  w: look-at", hi),
        theme.dim(),
    );
    let newest = value(n - 1, 0).is_some().then(|| &rows[n - 1][app.head]);
    if let Some(row) = newest {
        let top: Vec<String> = super::looks::ranked(row)
            .iter()
            .take(4)
            .map(|&(j, w)| {
                format!(
                    "{}:{}={:.2}",
                    j,
                    label(r.pieces.get(j).map(String::as_str).unwrap_or(""), 8).trim_end(),
                    w
                )
            })
            .collect();
        put(
            buf,
            inner,
            0,
            ly + 1,
            format!("newest row looks at  {}", top.join("  ")),
            theme.dim(),
        );
    }
}
