//! Attention heatmap: query positions (rows) × key positions (columns) for one layer and
//! head, two query rows per terminal cell with half blocks, the causal mask visible, the
//! newest query row marked.

use super::{block, label, put, put_text};
use crate::report::StepReport;
use crate::ui::app::{App, Pane};
use crate::ui::theme::{ColorMode, Theme};
use crate::views::heatmap::{Heatmap, Source, Window};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::widgets::Widget;

const LABEL_W: u16 = 10;

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let b = block(app, theme, Pane::Attention, title(app), area.width);
    let inner = b.inner(area);
    b.render(area, buf);
    let hist = app
        .frames
        .shown()
        .history
        .get(app.screen.layer)
        .filter(|h| !h.weights.is_empty());
    let (Some(r), Some(hist)) = (app.report(), hist) else {
        let msg = match app.report() {
            Some(_) if app.worker.replaying => format!(
                "layer {} was not recorded: a recording keeps the layer that was on screen",
                app.screen.layer
            ),
            Some(_) => format!(
                "layer {}: press space to capture its next rows",
                app.screen.layer
            ),
            None => "press space to run the prefill".into(),
        };
        put(buf, inner, 1, inner.y, &msg, theme.dim());
        return;
    };
    let rows = if app.screen.show_scores {
        &hist.scores
    } else {
        &hist.weights
    };
    if rows.is_empty() || inner.height < 4 || inner.width <= LABEL_W + 4 {
        return;
    }
    let per_cell = if theme.mode == ColorMode::None { 1 } else { 2 };
    let char_rows = cell_rows(inner);
    let src = Source {
        report: r,
        rows,
        layer: app.screen.layer,
        head: app.screen.head,
        scores: app.screen.show_scores,
    };
    let window = Window {
        rows: char_rows * per_cell,
        cols: (inner.width - LABEL_W) as usize,
        scroll: app.screen.scroll,
    };
    let Some(v) = Heatmap::build(&src, window) else {
        return;
    };
    let newest = rows
        .last()
        .and_then(|r| r.get(app.screen.head))
        .filter(|r| !r.is_empty());
    let looks = newest.map_or(Vec::new(), |row| looks_at(r, row));
    draw(&v, &looks, theme, inner, buf);
}

/// The pane's title: where it looks (layer, query head and the KV head it reads) and
/// which values it shows.
fn title(app: &App) -> String {
    // Before the first pass the model's shape is not known: no "/max" to give.
    if app.report().is_none() {
        return format!(
            " attention · layer {} · head {} · waiting for a first pass ",
            app.screen.layer, app.screen.head
        );
    }
    let kv_of = app
        .report()
        .and_then(|r| r.info.query_to_kv.get(app.screen.head).copied())
        .unwrap_or(0);
    let (n_layer, n_head) = app.dims();
    format!(
        " attention · layer {}/{} · head {}/{} → kv {} · {} ",
        app.screen.layer,
        n_layer.saturating_sub(1),
        app.screen.head,
        n_head.saturating_sub(1),
        kv_of,
        if app.screen.show_scores {
            "scores Q·Kᵀ/√d"
        } else {
            "softmax weights"
        }
    )
}

/// The four keys the newest row attends to most, as `position:piece=weight`.
fn looks_at(r: &StepReport, row: &[f32]) -> Vec<String> {
    super::looks::ranked(row)
        .iter()
        .take(4)
        .map(|&(j, w)| {
            let piece = r.pieces.get(j).map_or("", String::as_str);
            format!("{j}:{}={w:.2}", label(piece, 8).trim_end())
        })
        .collect()
}

/// Draws a heatmap view into `inner`: the key ruler, the cells with their row labels, the
/// legend, and `looks` (what the newest row attends to most, already in words). Rows are
/// halved into half blocks unless the terminal has no colour.
pub fn draw(v: &Heatmap, looks: &[String], theme: &Theme, inner: Rect, buf: &mut Buffer) {
    if inner.height < 4 || inner.width <= LABEL_W + 4 {
        return;
    }
    let per_cell = if theme.mode == ColorMode::None { 1 } else { 2 };
    // Few keys in a wide pane: each key gets up to four columns rather than a sliver.
    let keys = v.end.saturating_sub(v.k0).max(1);
    let cw = ((inner.width - LABEL_W) as usize / keys).clamp(1, 4) as u16;
    key_ruler(v, cw, theme, inner, buf);
    cells(v, cw, theme, inner, buf, per_cell);
    if footer_rows(inner) == 3 {
        key_axis(v, cw, theme, inner, inner.y + inner.height - 3, buf);
    }
    let ly = inner.y + inner.height - 2;
    put(buf, inner, 0, ly, format!("{:>8.3} ", v.lo), theme.dim());
    // The colour ramp gives way in a narrow pane so the key range after it stays whole.
    let ramp: u16 = if inner.width < 60 { 8 } else { 16 };
    for i in 0..ramp {
        let x = inner.x + 9 + i;
        if x < inner.x + inner.width {
            let f = i as f32 / (ramp - 1) as f32;
            if theme.mode == ColorMode::None {
                buf[(x, ly)].set_char(Theme::shade(f));
            } else {
                buf[(x, ly)]
                    .set_char('█')
                    .set_style(Style::default().fg(theme.ramp(f)));
            }
        }
    }
    let keys = format!("keys {}..{}", v.k0, v.end - 1);
    put_text(
        buf,
        inner,
        9 + ramp + 1,
        ly,
        format!(" {:.3}  {keys}  ·=masked  ┣ +=generated  w: look-at", v.hi),
        theme.dim(),
    );
    if !looks.is_empty() {
        let text = format!("newest row looks at  {}", looks.join("  "));
        put_text(buf, inner, 0, ly + 1, text, theme.dim());
    }
}

/// Rows under the cells: the key axis when the pane has room for it, and the legend's two.
fn footer_rows(inner: Rect) -> u16 {
    if inner.height >= 14 {
        3
    } else {
        2
    }
}

/// Terminal rows left for cells: all but the key ruler on top and the footer.
fn cell_rows(inner: Rect) -> usize {
    inner.height.saturating_sub(1 + footer_rows(inner)) as usize
}

/// The key axis under the cells: each key's token where columns are wide enough to hold
/// one, else the key positions at round intervals.
fn key_axis(v: &Heatmap, cw: u16, theme: &Theme, inner: Rect, y: u16, buf: &mut Buffer) {
    put(buf, inner, 0, y, "key →", theme.dim());
    let x0 = |kj: usize| LABEL_W + (kj - v.k0) as u16 * cw;
    if cw >= 3 {
        for kj in v.k0..v.end {
            let piece = label(v.piece(kj), cw as usize - 1);
            put(buf, inner, x0(kj), y, piece, theme.dim());
        }
        return;
    }
    // Room for a number of up to four digits and a space between neighbours.
    let step = [2, 5, 10, 20, 50, 100]
        .into_iter()
        .find(|s| s * cw as usize >= 6)
        .unwrap_or(100);
    for kj in (v.k0..v.end).filter(|k| k % step == 0) {
        put(buf, inner, x0(kj), y, kj.to_string(), theme.dim());
    }
}

/// The key ruler: which columns are prompt keys and which generated ones, the boundary
/// marked.
fn key_ruler(v: &Heatmap, cw: u16, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    let pl = v.prompt_len;
    put(buf, inner, 0, inner.y, "q↓ keys→", theme.dim());
    for (cx, kj) in (v.k0..v.end).enumerate() {
        let ch = match kj.cmp(&pl) {
            std::cmp::Ordering::Less => '─',
            std::cmp::Ordering::Equal => '┃',
            std::cmp::Ordering::Greater => '━',
        };
        for dx in 0..cw {
            let x = inner.x + LABEL_W + cx as u16 * cw + dx;
            let ch = if dx > 0 && ch == '┃' { '━' } else { ch };
            buf[(x, inner.y)].set_char(ch).set_style(theme.dim());
        }
    }
    let gen_col = pl.saturating_sub(v.k0) * cw as usize;
    if pl > v.k0 && (pl >= v.end || gen_col >= 7) {
        put(buf, inner, LABEL_W, inner.y, "prompt", theme.dim());
    }
    if pl < v.end && (LABEL_W as usize + gen_col + 1) < inner.width as usize {
        put(
            buf,
            inner,
            LABEL_W + gen_col as u16 + 1,
            inner.y,
            "generated",
            theme.accent(),
        );
    }
}

/// The cells, `per_cell` query rows per terminal row (two with half blocks), each row
/// labelled with its token, the newest marked.
fn cells(v: &Heatmap, cw: u16, theme: &Theme, inner: Rect, buf: &mut Buffer, per_cell: usize) {
    let masked = theme.rgb(28, 28, 34);
    let color = |c: Option<f32>| c.map(|x| theme.ramp(x)).unwrap_or(masked);
    let char_rows = cell_rows(inner);
    for (cy, qi) in (v.q0..v.end).step_by(per_cell).enumerate().take(char_rows) {
        let y = inner.y + 1 + cy as u16;
        // Row label: the query token (both rows of the cell when halved, newest marked).
        let last = (qi + per_cell - 1).min(v.end - 1);
        let newest = last == v.len - 1;
        // The first cell holding a generated row marks the prompt/generation boundary.
        let gen_mark = if qi <= v.prompt_len && v.prompt_len <= last {
            '┣'
        } else if v.generated(last) {
            '+'
        } else {
            ' '
        };
        let lab = format!(
            "{}{}{}",
            if newest { '▶' } else { ' ' },
            gen_mark,
            label(v.piece(last), LABEL_W as usize - 3)
        );
        let st = if newest { theme.accent() } else { theme.dim() };
        put(buf, inner, 0, y, lab, st);
        for (cx, kj) in (v.k0..v.end).enumerate() {
            for dx in 0..cw {
                let cell = &mut buf[(inner.x + LABEL_W + cx as u16 * cw + dx, y)];
                if theme.mode == ColorMode::None {
                    cell.set_char(v.cell(qi, kj).map_or('·', Theme::shade));
                } else {
                    let top = color(v.cell(qi, kj));
                    let bottom = if qi + 1 < v.end {
                        color(v.cell(qi + 1, kj))
                    } else {
                        Color::Reset
                    };
                    cell.set_char('▀')
                        .set_style(Style::default().fg(top).bg(bottom));
                }
            }
        }
    }
}

/// The summary's headline: the layer and head shown, and how many keys they read.
pub fn summary(app: &App, r: &StepReport) -> String {
    format!(
        "layer {} head {}, {} keys",
        app.screen.layer, app.screen.head, r.info.kv_len
    )
}
