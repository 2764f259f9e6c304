//! Serving: the batch engine's real KV pages (or contiguous reservations) coloured by
//! request, and the active set per iteration as a timeline.

use super::{block, put, put_text};
use crate::serve::ReqPhase;
use crate::ui::app::{App, Pane};
use crate::ui::theme::{ColorMode, Theme};
use crate::views::pages::{self, Grid};
use crate::views::timeline;
use crate::views::units;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

/// The serving settings the panes draw, and whether the report's serving views belong
/// to them. Live, once the user has asked for another run (`c`, `b`, `g`), the report on
/// screen still holds the old run's: the panes then name the new run and wait for its
/// first iteration rather than draw the old one under the new name.
fn shown(app: &App) -> (crate::settings::Serving, bool) {
    match app.report() {
        Some(r) if app.worker.replaying || app.frames.cursor().is_some() => {
            (r.settings.serving, true)
        }
        Some(r) if r.settings.serving == app.settings.serving => (r.settings.serving, true),
        _ => (app.settings.serving, false),
    }
}

/// Draws the pane for the main serving workload.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let (serving, current) = shown(app);
    let view = app
        .report()
        .and_then(|r| r.serve.as_ref())
        .filter(|_| current);
    // The engine's own policy and cache where it ran (recordings older than the
    // settings in each report have only these).
    let (policy, cache) = view.map_or((serving.policy, serving.cache), |v| (v.policy, v.cache));
    let chunks = if serving.chunked {
        " · chunked prefill"
    } else {
        ""
    };
    let title = fitted_title(
        area,
        format!(" serving · {policy:?} batching · {cache:?} KV{chunks} "),
        format!(" {policy:?} · {cache:?} "),
    );
    render_view(
        app,
        theme,
        area,
        buf,
        title,
        Runs {
            now: view,
            before: before(app, current, |r| r.serve.as_ref()),
        },
        &app.frames.shown().timeline,
    );
}

/// Draws the side-by-side copy (the same workload, one setting flipped).
pub fn render_compare(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let (serving, current) = shown(app);
    let view = app
        .report()
        .and_then(|r| r.serve_compare.as_ref())
        .filter(|_| current);
    // The engine's own run where it ran, else the settings' (the recordings from before
    // `max_batch` was kept, and before settings were, have only the first).
    let (long, one_at_a_time, policy, cache) =
        match (view.filter(|v| v.max_batch > 0), serving.other()) {
            (Some(v), _) => (v.describe(), v.max_batch == 1, v.policy, v.cache),
            (None, Some(o)) => (o.describe(), o.one_at_a_time, o.policy, o.cache),
            (None, None) => return,
        };
    // A run beside under another layout names it even in the short title, and before its
    // first iteration (from the settings, as the worker will choose it).
    let planned = serving
        .other()
        .filter(|o| o.other_layout)
        .map(|_| crate::settings::other_serving_layout(app.settings.run.layout));
    let layout = view
        .and_then(|v| v.layout)
        .or(planned)
        .map_or(String::new(), |l| format!("· {l} ").to_lowercase());
    let short = if one_at_a_time {
        " one at a time ".to_string()
    } else {
        format!(" {policy:?} · {cache:?} {layout}")
    };
    let title = fitted_title(area, format!(" serving · {long} "), short);
    render_view(
        app,
        theme,
        area,
        buf,
        title,
        Runs {
            now: view,
            before: before(app, current, |r| r.serve_compare.as_ref()),
        },
        &app.frames.shown().timeline_compare,
    );
    // The two runs see the same requests: the ratio of their speeds is the lesson.
    draw_ratio(&ratio_line(app, serving, current, view), theme, area, buf);
}

/// The ratio line on the pane's bottom rows, two where the pane is too narrow for one.
fn draw_ratio(line: &str, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let inner = ratatui::widgets::Block::bordered().inner(area);
    let w = inner.width as usize;
    let rows = units::wrap(line, w);
    let rows = &rows[..rows.len().min(2)];
    let top = (inner.y + inner.height).saturating_sub(rows.len() as u16);
    for (i, line) in rows.iter().enumerate() {
        // Padded to the pane's width: the row may hold the timeline's legend already.
        put(
            buf,
            inner,
            0,
            top + i as u16,
            format!("{line:<w$}"),
            theme.accent(),
        );
    }
}

/// The main run over the one beside it: tokens/s, then p99 time to first token. The
/// figure comes first, so a narrow pane cuts the words, not the number.
fn ratio_line(
    app: &App,
    serving: crate::settings::Serving,
    current: bool,
    beside: Option<&crate::report::ServeReport>,
) -> String {
    let main = app
        .report()
        .and_then(|r| r.serve.as_ref())
        .filter(|_| current);
    let (policy, cache) = main.map_or((serving.policy, serving.cache), |v| (v.policy, v.cache));
    let ratio = app
        .report()
        .filter(|_| current)
        .and_then(|r| r.serve_ratio());
    let Some(ratio) = ratio else {
        return format!("ratio after {} iterations", crate::report::RATIO_WARMUP);
    };
    let p99 = |v: Option<&crate::report::ServeReport>| {
        v.map(|v| v.latency.ttft_ms_p99).filter(|&t| t > 0.0)
    };
    let ttft = match (p99(main), p99(beside)) {
        (Some(a), Some(b)) => format!(" · {:.2}× p99 ttft", a / b),
        _ => String::new(),
    };
    // The direction first: a narrow pane wraps the rest, never what divides what.
    format!("left ÷ this: {ratio:.2}× the tokens/s{ttft} · left: {policy:?}, {cache:?}")
        .to_lowercase()
}

/// `long` when it fits the pane's top border, else `short` (lower case either way).
fn fitted_title(area: Rect, long: String, short: String) -> String {
    let t = if long.chars().count() + 2 <= area.width as usize {
        long
    } else {
        short
    };
    t.to_lowercase()
}

fn render_view(
    app: &App,
    theme: &Theme,
    area: Rect,
    buf: &mut Buffer,
    title: String,
    runs: Runs,
    timeline: &std::collections::VecDeque<Vec<(u64, ReqPhase)>>,
) {
    let (view, before) = (runs.now, runs.before);
    let b = block(app, theme, Pane::Serving, title, area.width);
    let inner = b.inner(area);
    b.render(area, buf);
    let Some(sv) = view else {
        return draw_waiting(app, before, theme, inner, buf);
    };
    // A step about the timeline gives it the rows the block tables and notes would take.
    let timeline_first = app
        .points_at()
        .iter()
        .any(|k| timeline::PHASES.iter().any(|p| p.2 == k.as_str()));
    let rows = header(sv, app.points_at(), inner, buf);
    // The grid starts on the row after the header's last.
    let below = Rect {
        y: inner.y + rows - 1,
        height: inner.height.saturating_sub(rows - 1),
        ..inner
    };
    let (y, req) = draw_memory(app, sv, timeline_first, theme, (inner, below), buf);
    let rest = Rect {
        y,
        height: (inner.y + inner.height).saturating_sub(y),
        ..inner
    };
    let y = if timeline_first {
        y
    } else {
        other_tables(sv, req, theme, rest, buf)
    };
    draw_timeline(
        Some(sv.requests),
        timeline,
        Some(&sv.ttft_ms),
        theme,
        Rect { y, ..inner }.intersection(inner),
        buf,
    );
}

/// The page grid (or reservations) in `below`, then the notes under it: latency, this
/// run's copies on write, and the chosen request's block table (pages) or the free gaps
/// (contiguous). Returns the row after them and the chosen request.
fn draw_memory(
    app: &App,
    sv: &crate::report::ServeReport,
    timeline_first: bool,
    theme: &Theme,
    (inner, below): (Rect, Rect),
    buf: &mut Buffer,
) -> (u16, Option<u64>) {
    // The chosen request's pages stand out, and its block table maps its logical blocks
    // to them (paged cache only).
    let req = app
        .screen
        .selected_req
        .filter(|id| sv.step.block_tables.iter().any(|t| t.0 == *id))
        .or_else(|| sv.step.block_tables.first().map(|t| t.0));
    let blocks = req.map(|r| pages::block_table(sv, r)).unwrap_or_default();
    let marked: Vec<u32> = blocks.iter().map(|b| b.page).collect();
    let legend = if timeline_first { Some(1) } else { None };
    let y = draw_grid_with(&Grid::of(sv), &marked, legend, theme, below, buf);
    let table = req.map(|r| pages::describe_table(r, &blocks, sv.page_size));
    let notes = [
        sv.describe_latency(),
        pages::describe_copies(sv).filter(|_| !timeline_first),
        table
            .or_else(|| pages::describe_gaps(sv))
            .filter(|_| !timeline_first),
    ];
    let y = draw_notes(
        app.points_at(),
        notes.into_iter().flatten(),
        theme,
        inner,
        y,
        buf,
    );
    (y, req)
}

/// A run not started yet: what starts it, and what the run before it came to.
fn draw_waiting(
    app: &App,
    before: Option<(&crate::report::ServeReport, bool)>,
    theme: &Theme,
    inner: Rect,
    buf: &mut Buffer,
) {
    let line = match app.report() {
        Some(_) => "this run starts at the next iteration (space)",
        None => "a 10-request workload runs here, one iteration per step",
    };
    put_text(buf, inner, 0, inner.y, line, theme.dim());
    if let Some(text) = before.and_then(|(v, chunked)| run_before(v, chunked)) {
        for (i, row) in units::wrap(&text, inner.width as usize).iter().enumerate() {
            put(buf, inner, 0, inner.y + 2 + i as u16, row, theme.accent());
        }
    }
}

/// The notes under the grid from row `y`, one row each, but a note a lesson step points at
/// (`keep`) wraps rather than being cut. Returns the row after them.
fn draw_notes(
    keep: &[String],
    notes: impl Iterator<Item = String>,
    theme: &Theme,
    inner: Rect,
    mut y: u16,
    buf: &mut Buffer,
) -> u16 {
    for line in notes {
        let rows = match keep.iter().any(|k| line.contains(k.as_str())) {
            true => units::wrap(&line, inner.width as usize),
            false => vec![line],
        };
        for row in rows {
            put_text(buf, inner, 0, y, row, theme.accent());
            y += 1;
        }
    }
    y
}

/// The run a serving pane draws, and, until its first iteration, the one before it.
struct Runs<'a> {
    now: Option<&'a crate::report::ServeReport>,
    /// The run before, and whether it fed prompts in chunks.
    before: Option<(&'a crate::report::ServeReport, bool)>,
}

/// The run the report on screen holds while the settings ask for another (`current`
/// false): the run before the restart.
fn before(
    app: &App,
    current: bool,
    run: impl Fn(&crate::report::StepReport) -> Option<&crate::report::ServeReport>,
) -> Option<(&crate::report::ServeReport, bool)> {
    // Only a run of the same requests is worth setting beside the new one: after a
    // switch of workload (chat to the long story, or a burst) it would compare nothing.
    let same = |r: &&crate::report::StepReport| {
        let (was, now) = (r.settings.serving, app.settings.serving);
        was.workload == now.workload && was.burst == now.burst
    };
    let r = app.report().filter(|_| !current).filter(same)?;
    run(r).map(|v| (v, r.settings.serving.chunked))
}

/// What the run before a restart (`c`, `b`, `d`, …) came to, so that the figures a step
/// asks to compare stay on screen until the new run has its own.
fn run_before(v: &crate::report::ServeReport, chunked: bool) -> Option<String> {
    let latency = v.describe_latency()?;
    let tps = v
        .tokens_per_s()
        .map(|t| format!(" · {t:.0} tok/s"))
        .unwrap_or_default();
    let chunks = if chunked { " · chunked prefill" } else { "" };
    // A step's iteration counts from 0: the run had one more than its last index.
    let n = v.step.iteration + 1;
    let s = if n == 1 { "" } else { "s" };
    Some(format!(
        "the run before ({}{chunks}, {n} iteration{s}{tps}): {latency}",
        v.describe(),
    ))
}

/// Every block table but `shown`'s from `at`'s first row, where rows are left over once
/// the timeline has a row for each request and its key; returns the row after them.
fn other_tables(
    sv: &crate::report::ServeReport,
    shown: Option<u64>,
    theme: &Theme,
    at: Rect,
    buf: &mut Buffer,
) -> u16 {
    let spare = (at.height as usize).saturating_sub(sv.requests + 1);
    let others = sv.step.block_tables.iter().filter(|t| Some(t.0) != shown);
    let mut y = at.y;
    for (id, _) in others.take(spare) {
        let line = pages::describe_table(*id, &pages::block_table(sv, *id), sv.page_size);
        put_text(buf, at, 0, y, line, theme.dim());
        y += 1;
    }
    y
}

/// The iteration's numbers on two rows (one where the pane is that short): how many run
/// against the batch limit, why the queue waits, speed; then what the KV memory holds
/// and what its utilization divides. Returns the rows drawn.
fn header(sv: &crate::report::ServeReport, keep: &[String], inner: Rect, buf: &mut Buffer) -> u16 {
    let s = &sv.step;
    let running = s.running();
    // Running against its cap first, since a narrow pane cuts what comes after; short
    // enough that a pane side by side at 80 columns keeps why the queue waits.
    let cap = if sv.max_batch > 0 {
        format!("/{}", sv.max_batch)
    } else {
        String::new()
    };
    let queue = match (s.queue.len(), s.head_wait) {
        (0, _) => "queue 0".to_string(),
        (n, Some(w)) => format!("queue {n}: {}", w.describe()),
        (n, None) => format!("queue {n}"),
    };
    let first = format!(
        "running {running}{cap} · {queue}{}{}",
        if s.not_arrived > 0 {
            format!(" · {} to arrive", s.not_arrived)
        } else {
            String::new()
        },
        if sv.done { " · done" } else { "" }
    );
    put_text(buf, inner, 0, inner.y, &first, Style::default());
    if inner.height < 8 {
        return 1;
    }
    // The KV figure first: lesson eight reads it, and a narrow pane cuts the line's end.
    let second = format!(
        "KV {} · {}preempted {} · budget {} · iter {}",
        s.memory.describe_utilization(),
        sv.tokens_per_s()
            .map(|t| format!("{t:.0} tok/s · "))
            .unwrap_or_default(),
        sv.preemptions,
        s.memory.capacity_tokens,
        s.iteration,
    );
    // Wrapped when a lesson step points into it, else cut at the border.
    let rows = match keep.iter().any(|k| second.contains(k.as_str())) {
        true => units::wrap(&second, inner.width as usize),
        false => vec![second],
    };
    for (i, row) in rows.iter().enumerate() {
        put_text(buf, inner, 0, inner.y + 1 + i as u16, row, Style::default());
    }
    1 + rows.len() as u16
}

/// The KV grid on the rows after `inner`'s first, and its legend; returns the row after
/// it. Each cell is one character, or, where the width allows, the character and the
/// page's fill (`▄14`: 14 slots hold tokens).
pub fn draw_grid(g: &Grid, marked: &[u32], theme: &Theme, inner: Rect, buf: &mut Buffer) -> u16 {
    draw_grid_with(g, marked, None, theme, inner, buf)
}

/// [`draw_grid`] with the legend held to `legend_rows` rows where given.
fn draw_grid_with(
    g: &Grid,
    marked: &[u32],
    legend_rows: Option<usize>,
    theme: &Theme,
    inner: Rect,
    buf: &mut Buffer,
) -> u16 {
    const WIDE: usize = 4;
    let width = (inner.width as usize).max(1);
    let cell_w = if g.cells.len() * WIDE <= width * 2 {
        WIDE
    } else {
        1
    };
    let w = (width / cell_w).max(1);
    let y = inner.y + 1;
    // Where the pane has rows to spare, each wide cell takes two: its fill, then its owner.
    let grid_rows = g.cells.len().div_ceil(w);
    let tall = cell_w == WIDE && inner.height as usize >= 2 * grid_rows + TALL_SPARE;
    let cell_h = if tall { 2 } else { 1 };
    for (i, c) in g.cells.iter().enumerate() {
        let (x, yy) = (
            inner.x + ((i % w) * cell_w) as u16,
            y + ((i / w) * cell_h) as u16,
        );
        if yy >= inner.y + inner.height {
            break;
        }
        let mut st = match (c.owner, theme.mode) {
            (Some(o), m) if m != ColorMode::None => Style::default().fg(theme.request(o as usize)),
            _ => theme.dim(),
        };
        if marked.contains(&(i as u32)) {
            st = st.add_modifier(ratatui::style::Modifier::REVERSED);
        }
        if cell_w == WIDE {
            buf.set_stringn(x, yy, g.wide(c), WIDE - 1, st);
            if tall && yy + 1 < inner.y + inner.height {
                buf.set_stringn(x, yy + 1, g.owner_label(c), WIDE - 1, st);
            }
        } else {
            buf[(x, yy)].set_char(g.glyph(c)).set_style(st);
        }
    }
    let y = y + (grid_rows * cell_h) as u16;
    let legend = if cell_w == WIDE {
        g.wide_legend()
    } else {
        g.legend().to_string()
    };
    draw_legend(&legend, legend_rows, theme, inner, y, buf)
}

/// The grid's legend from row `y`: it wraps onto more rows where the pane has room to
/// spare below the grid (a third of it, two rows from five), else the one row is cut.
/// Returns the row after it.
fn draw_legend(
    legend: &str,
    legend_rows: Option<usize>,
    theme: &Theme,
    inner: Rect,
    y: u16,
    buf: &mut Buffer,
) -> u16 {
    let spare = (inner.y + inner.height).saturating_sub(y) as usize;
    let most = match legend_rows {
        Some(n) => n,
        None if spare >= 5 => (spare / 3).max(2),
        None => 1,
    };
    let rows = wrap_items(legend, (inner.width as usize).max(1), most);
    for (i, row) in rows.iter().enumerate() {
        put_text(buf, inner, 0, y + i as u16, row, theme.dim());
    }
    y + rows.len() as u16
}

/// `text`'s items (two spaces apart) packed into rows of `width` columns, at most `most`
/// rows: the last takes whatever is left, for the pane to cut.
fn wrap_items(text: &str, width: usize, most: usize) -> Vec<String> {
    let mut rows: Vec<String> = Vec::new();
    for item in text.split("  ") {
        let full = rows.len() >= most;
        match rows.last_mut() {
            Some(r) if full || r.chars().count() + 2 + item.chars().count() <= width => {
                r.push_str("  ");
                r.push_str(item);
            }
            _ => rows.push(item.to_string()),
        }
    }
    rows
}

/// Rows a pane keeps for the legend, the notes and the timeline before its page grid
/// takes two rows a cell (fill, then owner).
const TALL_SPARE: usize = 24;

/// Columns the time to first token takes at the end of a timeline row.
const TTFT_WIDTH: usize = 8;

/// A row per request, a column per iteration (newest on the right), each row ending in
/// its request's time to first token once it has one (when the pane is wide enough), and
/// the phases' key under the rows when there is a row to spare. It scales to the area: a
/// short history stretches to up to three columns per iteration, and when the rows run
/// out the requests in play now are the ones shown, with a count of the rest.
pub fn draw_timeline(
    requests: Option<usize>,
    timeline: &std::collections::VecDeque<Vec<(u64, ReqPhase)>>,
    ttft_ms: Option<&[(u64, f64)]>,
    theme: &Theme,
    area: Rect,
    buf: &mut Buffer,
) {
    // The TTFT column: "  1234ms", right-aligned, where the cells keep 30 columns or more
    // (none where the timeline's requests have no TTFT of ours: a server's).
    let ttft_w = match ttft_ms {
        Some(_) if area.width >= 40 => TTFT_WIDTH,
        _ => 0,
    };
    let ttft_ms = ttft_ms.unwrap_or_default();
    let cols = (area.width as usize).saturating_sub(4 + ttft_w);
    let cw = timeline::col_width(timeline.len(), cols);
    let (ids, hidden) = timeline::rows_shown(timeline, requests, area.height as usize, cols / cw);
    for (i, &id) in ids.iter().enumerate() {
        let row = area.y + i as u16;
        let st = Style::default().fg(theme.request(id as usize));
        put(buf, area, 0, row, format!("r{id:<2} "), st);
        for (c, col) in timeline::window(timeline, cols / cw).enumerate() {
            if let Some(&(_, ph)) = col.iter().find(|(r, _)| *r == id) {
                let x = 4 + (c * cw) as u16;
                put(buf, area, x, row, timeline::cell(ph, cw), st);
            }
        }
        // A request that ended before the newest columns keeps its row: how it ended.
        if let Some(ph) = timeline::before_window(timeline, cols / cw, id) {
            let text = format!("{} {} earlier", timeline::glyph(ph), timeline::name(ph));
            put(buf, area, 4, row, text, theme.dim());
        }
        let ttft = ttft_ms.iter().find(|t| t.0 == id && ttft_w > 0);
        if let Some(&(_, ms)) = ttft {
            let x = area.width - ttft_w as u16;
            let text = format!("{:>w$}", format!("{ms:.0}ms"), w = ttft_w);
            put(buf, area, x, row, text, theme.dim());
        }
    }
    let key_row = area.y + ids.len() as u16;
    if key_row < area.y + area.height {
        let key: Vec<String> = timeline::PHASES
            .iter()
            .map(|&(_, g, name)| format!("{g} {name}"))
            .collect();
        let more = if hidden > 0 {
            format!("+{hidden} more · ")
        } else {
            String::new()
        };
        let ttft = if ttft_w > 0 { " · ms: TTFT" } else { "" };
        let line = format!("{more}{}{ttft}", key.join(" "));
        put_text(buf, area, 0, key_row, &line, theme.dim());
    }
}

/// The summary's headline: the serving iteration, who runs and waits, and the KV in use.
pub fn summary(_app: &App, r: &crate::report::StepReport) -> String {
    match r.serve.as_ref() {
        Some(s) => format!(
            "iteration {} · {} active · {} queued{} · KV {}",
            s.step.iteration + 1,
            s.step.active.len(),
            s.step.queue.len(),
            s.tokens_per_s()
                .map(|t| format!(" · {t:.0} tok/s"))
                .unwrap_or_default(),
            s.step.memory.describe_utilization()
        ),
        None => "no serving iteration".into(),
    }
}

/// The main run and the run beside it, each in half of the room.
pub fn render_side_by_side(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    use ratatui::layout::{Constraint, Layout};
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    render(app, theme, left, buf);
    render_compare(app, theme, right, buf);
}
