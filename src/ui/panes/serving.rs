//! Serving: the batch engine's real KV pages (or contiguous reservations) coloured by
//! request, and the active set per iteration as a timeline.

use super::{block, put};
use crate::serve::{CacheKind, ReqPhase};
use crate::ui::app::{App, Pane};
use crate::ui::theme::{ColorMode, Theme};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

fn phase_char(p: ReqPhase) -> char {
    match p {
        ReqPhase::Waiting => '·',
        ReqPhase::Prefill => 'P',
        ReqPhase::Decode => '█',
        ReqPhase::Preempted => 'x',
        ReqPhase::Padding => '░',
        ReqPhase::Finished => '✓',
        ReqPhase::Rejected => '!',
    }
}

/// Draws the pane for the main serving workload.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let view = app.report.as_ref().and_then(|r| r.serve.as_ref());
    render_view(
        app,
        theme,
        area,
        buf,
        (app.policy, app.cache),
        view,
        &app.timeline,
    );
}

/// Draws the side-by-side copy (the same workload, one setting flipped).
pub fn render_compare(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let Some(settings) = app.other() else { return };
    let view = app.report.as_ref().and_then(|r| r.serve_b.as_ref());
    render_view(app, theme, area, buf, settings, view, &app.timeline_b);
}

fn render_view(
    app: &App,
    theme: &Theme,
    area: Rect,
    buf: &mut Buffer,
    (policy, cache): (crate::serve::Policy, CacheKind),
    view: Option<&crate::worker::report::ServeView>,
    timeline: &std::collections::VecDeque<Vec<(u64, ReqPhase)>>,
) {
    let title = format!(" serving · {policy:?} batching · {cache:?} KV ").to_lowercase();
    let b = block(app, theme, Pane::Serving, title);
    let inner = b.inner(area);
    b.render(area, buf);
    let Some(sv) = view else {
        put(
            buf,
            inner,
            0,
            inner.y,
            "a 10-request workload runs here, one iteration per step",
            theme.dim(),
        );
        return;
    };
    let s = &sv.step;
    let running = s
        .active
        .iter()
        .filter(|a| a.phase != ReqPhase::Finished)
        .count();
    put(
        buf,
        inner,
        0,
        inner.y,
        format!(
            "iter {} · active {} · queue {} · KV util {:.0}% · preempted {}{}",
            s.iteration,
            running,
            s.queue.len(),
            s.memory.utilization_pct(),
            sv.preemptions,
            if sv.done { " · done" } else { "" }
        ),
        Style::default(),
    );
    // KV grid: one cell per page (paged) or per page-sized run of reserved slots (contiguous).
    let w = inner.width as usize;
    let mut y = inner.y + 1;
    let cells: Vec<(char, Option<u64>)> = match sv.cache {
        CacheKind::Paged => s
            .pages
            .iter()
            .map(|p| match p.owners.as_slice() {
                [] => ('·', None),
                [o] if p.fill as usize == sv.page_size => ('█', Some(*o)),
                [o] => ('▄', Some(*o)),
                [o, ..] => ('▒', Some(*o)),
            })
            .collect(),
        CacheKind::Contiguous => {
            let mut v = Vec::new();
            for &(id, reserved, used) in &s.reservations {
                for c in 0..reserved.div_ceil(sv.page_size) {
                    let filled = c * sv.page_size < used;
                    v.push((if filled { '█' } else { '░' }, Some(id)));
                }
            }
            let free = s
                .memory
                .capacity_tokens
                .saturating_sub(s.memory.allocated_slots)
                / sv.page_size;
            v.extend(std::iter::repeat_n(('·', None), free));
            v
        }
    };
    for (i, (ch, owner)) in cells.iter().enumerate() {
        let (x, yy) = (inner.x + (i % w) as u16, y + (i / w) as u16);
        if yy >= inner.y + inner.height {
            break;
        }
        let st = match (owner, theme.mode) {
            (Some(o), m) if m != ColorMode::None => Style::default().fg(theme.request(*o as usize)),
            _ => theme.dim(),
        };
        buf[(x, yy)].set_char(*ch).set_style(st);
    }
    y += cells.len().div_ceil(w.max(1)) as u16;
    let legend = match sv.cache {
        CacheKind::Paged => "█ full page  ▄ partly filled  ▒ shared  · free",
        CacheKind::Contiguous => "█ holds tokens  ░ reserved, unused  · free",
    };
    put(buf, inner, 0, y, legend, theme.dim());
    y += 1;
    // Timeline: a row per request, a column per iteration (newest on the right).
    let cols = w.saturating_sub(4);
    let start = timeline.len().saturating_sub(cols);
    // The timeline's key goes under the request rows when there is a row to spare.
    let key_row = y + sv.requests as u16;
    if key_row < inner.y + inner.height {
        let key: Vec<String> = [
            (ReqPhase::Prefill, "prefill"),
            (ReqPhase::Decode, "decode"),
            (ReqPhase::Padding, "pad"),
            (ReqPhase::Finished, "done"),
            (ReqPhase::Waiting, "wait"),
            (ReqPhase::Preempted, "preempt"),
        ]
        .iter()
        .map(|&(p, name)| format!("{} {name}", phase_char(p)))
        .collect();
        put(buf, inner, 0, key_row, key.join(" "), theme.dim());
    }
    for id in 0..sv.requests as u64 {
        let row = y + id as u16;
        if row >= inner.y + inner.height {
            break;
        }
        put(
            buf,
            inner,
            0,
            row,
            format!("r{id:<2} "),
            Style::default().fg(theme.request(id as usize)),
        );
        for (c, col) in timeline.iter().skip(start).enumerate() {
            if let Some(&(_, ph)) = col.iter().find(|(r, _)| *r == id) {
                let x = inner.x + 4 + c as u16;
                buf[(x, row)]
                    .set_char(phase_char(ph))
                    .set_style(Style::default().fg(theme.request(id as usize)));
            }
        }
    }
}
