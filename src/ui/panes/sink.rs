//! The attention-sink experiment: the same text read through the full cache, a sliding
//! window, and the window that keeps the first page; per cache, its perplexity, what it
//! predicts next, and which pages it still holds.

use super::{block, label, put_text};
use crate::sink::{SinkLane, SinkView};
use crate::ui::app::{App, Pane};
use crate::ui::theme::{ColorMode, Theme};
use crate::views::sink::{lane_pages, lane_title, Page};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let view: Option<&SinkView> = app.report().and_then(|r| r.sink.as_ref());
    let head = match view {
        Some(v) => format!(
            " attention sink · window {} tokens = {} pages of {} · token {}/{} ",
            v.window,
            v.window / v.page_size.max(1),
            v.page_size,
            v.pos,
            v.text_tokens
        ),
        None => " attention sink ".into(),
    };
    let b = block(app, theme, Pane::Serving, head, area.width);
    let inner = b.inner(area);
    b.render(area, buf);
    match view {
        Some(v) => draw(v, theme, inner, buf),
        None => put_text(
            buf,
            inner,
            0,
            inner.y,
            "press space: each step reads one more token of the eval text through three caches",
            theme.dim(),
        ),
    }
}

/// Draws one step of the experiment into `inner`: what was read, then each cache's lane.
pub fn draw(v: &SinkView, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    // Roomy: the read line, a gap, three lanes with gaps, the legend (12 lines). Short
    // terminals drop the gaps, then the legend and the read line, never a lane.
    let h = inner.height;
    let (read_line, gap, legend) = match h {
        12.. => (true, 1, true),
        8..=11 => (true, 0, true),
        _ => (false, 0, false),
    };
    let mut y = inner.y;
    if read_line {
        put_text(
            buf,
            inner,
            0,
            y,
            format!(
                "read {} → predict {}{}",
                label(&v.token, 10).trim_end(),
                label(&v.next, 10).trim_end(),
                if v.done { " · end of the text" } else { "" }
            ),
            Style::default(),
        );
        y += 1 + gap;
    }
    for (k, l) in v.lanes.iter().enumerate() {
        if y + 1 >= inner.y + h {
            break;
        }
        let style = if k == 0 {
            Style::default()
        } else {
            theme.accent()
        };
        put_text(buf, inner, 0, y, lane_line(l), style);
        page_cells(v, l, k, theme, Rect { y: y + 1, ..inner }, buf);
        y += 2 + gap;
    }
    if legend {
        put_text(
            buf,
            inner,
            0,
            y,
            "█ page held  ▄ page being filled  × evicted  · not read yet · x turns the experiment off",
            theme.dim(),
        );
    }
}

/// A lane's figures on one line: its perplexity, before and after its first eviction
/// (nothing is evicted before the window fills), and what it predicts next.
fn lane_line(l: &SinkLane) -> String {
    let top: Vec<String> = l
        .top
        .iter()
        .map(|(p, pr)| format!("{} {:.2}", label(p, 8).trim_end(), pr))
        .collect();
    format!(
        // Sized so that p(next), which lesson ten reads, ends within 78 columns.
        "{:<22} ppl {:>6.2} · after 1st eviction {:>6} · p(next) {:.3} · {}",
        lane_title(&l.name),
        l.perplexity,
        l.after_eviction_label(),
        l.p_next,
        top.join(" | ")
    )
}

/// One cell per page of the text (held, being filled, evicted, not yet read), then what
/// the lane holds, on the first row of `row`.
fn page_cells(v: &SinkView, l: &SinkLane, k: usize, theme: &Theme, row: Rect, buf: &mut Buffer) {
    put_text(buf, row, 0, row.y, "  pages ", theme.dim());
    let pages = lane_pages(v, l);
    let held_style = match theme.mode {
        ColorMode::None => Style::default(),
        _ => Style::default().fg(theme.request(k)),
    };
    for (p, page) in pages
        .iter()
        .take(row.width.saturating_sub(8) as usize)
        .enumerate()
    {
        let (ch, st) = match page {
            Page::Filling(_) => ('▄', held_style),
            Page::Held => ('█', held_style),
            Page::Evicted => ('×', theme.dim()),
            Page::Unread => ('·', theme.dim()),
        };
        buf[(row.x + 8 + p as u16, row.y)]
            .set_char(ch)
            .set_style(st);
    }
    put_text(
        buf,
        row,
        9 + pages.len().min(200) as u16,
        row.y,
        format!(
            "{} tokens held · {} page(s) evicted",
            l.cached_tokens, l.evicted_pages
        ),
        theme.dim(),
    );
}
