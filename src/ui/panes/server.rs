//! The attached server: a real llama.cpp, vLLM or SGLang server's serving figures in our
//! words, in the attention pane's place while the app is attached (`inferlab attach URL`).
//! Its active set is drawn by the same timeline as our serving pane's, one column per
//! poll; every figure names the metric it came from.

use super::{block, put_text, serving};
use crate::attach::engines::{HistReading, Reading, Server};
use crate::attach::poll::{Link, Point, Snapshot, RATE_WINDOW_S};
use crate::attach::LoadSummary;
use crate::ui::app::{App, Pane};
use crate::ui::attach::AttachView;
use crate::ui::theme::Theme;
use crate::views::units::fit;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Widget};

/// Draws the attached server's pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let Some(v) = &app.attached else {
        return;
    };
    let b = block(app, theme, Pane::Server, title(&v.snap), area.width);
    let inner = b.inner(area);
    b.render(area, buf);
    let (line, style) = match &v.snap.link {
        Link::Down { why, tries } => (
            format!("no answer ({tries}×, retrying): {why}"),
            theme.warm(),
        ),
        Link::Connecting => ("connecting…".to_string(), theme.dim()),
        Link::Up => (headline(v), theme.accent()),
    };
    put_text(buf, inner, 0, inner.y, line, style);
    let body = Rect {
        y: inner.y + 1,
        height: inner.height.saturating_sub(1),
        ..inner
    };
    let (left, right) = if body.width >= 100 {
        // The figures' sources are long metric names: they get the wider half.
        let [a, b] = Layout::horizontal([Constraint::Percentage(44), Constraint::Percentage(56)])
            .areas(body);
        (a, b)
    } else if figures_pointed_at(app, v) {
        // A step about a figure row: the rows first, the active set in what is left.
        let [b, a] = Layout::vertical([Constraint::Min(4), Constraint::Percentage(25)]).areas(body);
        (a, b)
    } else {
        let [a, b] = Layout::vertical([Constraint::Percentage(45), Constraint::Min(4)]).areas(body);
        (a, b)
    };
    // Its active set as our timeline draws ours; on a tall pane, the counts over time too.
    let (slots, charts) = if left.height >= 24 {
        let [a, b] =
            Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(left);
        (a, Some(b))
    } else {
        (left, None)
    };
    active_set(v, theme, slots, buf);
    if let Some(c) = charts {
        charts_pane(&v.snap, theme, c, buf);
    }
    figures_pane(v, app.points_at(), theme, right, buf);
}

/// Whether the open lesson step points at a figure row the headline does not hold.
fn figures_pointed_at(app: &App, v: &AttachView) -> bool {
    let head = headline(v);
    let keep: Vec<&String> = app
        .points_at()
        .iter()
        .filter(|k| !head.contains(k.as_str()))
        .collect();
    figure_rows(v).iter().any(|r| holds_any(r, &keep))
}

/// Whether figure row `r` holds any of the pieces in `keep`.
fn holds_any<K: AsRef<str>>((a, b, c): &Row, keep: &[K]) -> bool {
    keep.iter().any(|k| {
        let k = k.as_ref();
        a.contains(k) || b.contains(k) || c.contains(k)
    })
}

/// "attached: llama.cpp server (build b0) · http://…" (the first line says how the link
/// stands).
fn title(s: &Snapshot) -> String {
    let name = s.server.map_or("server", Server::name);
    let version = s
        .version
        .as_deref()
        .map(|v| format!(" ({v})"))
        .unwrap_or_default();
    format!(" attached: {name}{version} · {} ", s.url)
}

/// The figures a glance needs, in the words of our own serving pane.
fn headline(v: &AttachView) -> String {
    let s = &v.snap;
    let g = s.gauges.as_ref();
    let n = |r: Option<Reading>| r.map_or("—".to_string(), |r| format!("{:.0}", r.value));
    let last = s.history.last().copied().unwrap_or_default();
    let batch = recent_batch(&s.history, last.t_s).map_or("—".into(), |b| format!("{b:.1}"));
    let slots = match s.slots.len() {
        0 => String::new(),
        k => format!(" of {k} slots"),
    };
    let rate = last
        .tok_per_s
        .map_or(String::new(), |t| format!(" · {t:.0} tok/s"));
    format!(
        "running {}{slots} · waiting {} · batch {batch} per decode{rate}",
        n(g.and_then(|g| g.running)),
        n(g.and_then(|g| g.waiting)),
    )
}

/// The requests holding a slot at each poll: our serving pane's timeline, drawn from
/// `/slots` (llama.cpp only; other servers name no requests).
fn active_set(v: &AttachView, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let block = Block::default().borders(Borders::TOP).title(Span::styled(
        " requests in a slot, a column per poll (¼ s) ",
        theme.focused(),
    ));
    let inner = block.inner(area);
    block.render(area, buf);
    let a = &v.snap.active;
    if a.requests() == 0 {
        let why = match v.snap.server {
            Some(Server::LlamaCpp) | None => "no request has held a slot yet",
            Some(_) => "this server lists no requests; the counts are in the figures",
        };
        return put_text(buf, inner, 0, inner.y, why, theme.dim());
    }
    serving::draw_timeline(None, &a.columns, None, theme, inner, buf);
}

/// The summary's headline.
pub fn summary(app: &App, _r: &crate::report::StepReport) -> String {
    now(app)
}

/// The headline, or how the link stands while there is none: the server's figures do
/// not wait for our iterations.
pub fn now(app: &App) -> String {
    match app.attached.as_ref() {
        None => "not attached".into(),
        Some(v) => match &v.snap.link {
            Link::Up => headline(v),
            Link::Connecting => "connecting…".into(),
            Link::Down { tries, .. } => format!("no answer ({tries}×, retrying)"),
        },
    }
}

/// Running vs waiting requests over time (one column per poll, newest at the right), and
/// the batch per decode step below it.
fn charts_pane(s: &Snapshot, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let [top, bottom] =
        Layout::vertical([Constraint::Percentage(62), Constraint::Percentage(38)]).areas(area);
    let reqs: Vec<(f64, f64)> = s
        .history
        .iter()
        .map(|p| (p.running.unwrap_or(0.0), p.waiting.unwrap_or(0.0)))
        .collect();
    let title = " requests per poll: █ running ░ waiting ";
    columns(&reqs, (title, theme), top, buf);
    let batch: Vec<(f64, f64)> = s
        .history
        .iter()
        .map(|p: &Point| (p.batch.unwrap_or(0.0), 0.0))
        .collect();
    let what = match s.server {
        Some(Server::Vllm) => " tokens per engine step ",
        _ => " busy slots per decode call (batch) ",
    };
    columns(&batch, (what, theme), bottom, buf);
}

/// A column chart of (lower, upper) stacked values, scaled to the largest sum.
fn columns(values: &[(f64, f64)], (title, theme): (&str, &Theme), area: Rect, buf: &mut Buffer) {
    let top = values.iter().map(|(a, b)| a + b).fold(1.0, f64::max);
    let block = Block::default()
        .borders(Borders::TOP)
        .title(Span::styled(title, theme.focused()))
        .title(Line::from(format!(" max {top:.0} ")).right_aligned());
    let inner = block.inner(area);
    block.render(area, buf);
    let (w, h) = (inner.width as usize, inner.height as usize);
    if w == 0 || h == 0 {
        return;
    }
    let shown = &values[values.len().saturating_sub(w)..];
    let offset = w - shown.len();
    for (i, &(a, b)) in shown.iter().enumerate() {
        let rows = |v: f64| ((v / top) * h as f64).round() as usize;
        let (ra, rb) = (rows(a), rows(a + b).saturating_sub(rows(a)));
        for k in 0..(ra + rb).min(h) {
            let (ch, style) = if k < ra {
                ('█', theme.accent())
            } else {
                ('░', theme.warm())
            };
            let x = inner.x + (offset + i) as u16;
            let y = inner.y + (h - 1 - k) as u16;
            buf[(x, y)].set_char(ch).set_style(style);
        }
    }
}

/// The figures, each with the metric it came from.
fn figures_pane(v: &AttachView, keep: &[String], theme: &Theme, area: Rect, buf: &mut Buffer) {
    let mut rows = figure_rows(v);
    // The rows a lesson step points at first, where a short pane cannot show them all.
    rows.sort_by_key(|r| !holds_any(r, keep));
    // One line per figure; a source too long for the width ends in "…".
    let room = (area.width as usize).saturating_sub(22 + 15);
    let lines: Vec<Line> = rows
        .into_iter()
        .map(|(label, value, from)| {
            Line::from(vec![
                Span::raw(format!("{label:<22}")),
                // A space after the value however long it is ("1393 / 3373 ms timed…").
                Span::styled(format!("{:<15}", format!("{value} ")), theme.accent()),
                Span::styled(fit(&from, room), theme.dim()),
            ])
        })
        .collect();
    Paragraph::new(lines)
        .block(Block::default().borders(Borders::TOP).title(Span::styled(
            " figures · value · where it came from ",
            theme.focused(),
        )))
        .render(area, buf);
}

/// A figure, its value, and where it came from.
type Row = (String, String, String);

/// Every figure's row.
fn figure_rows(v: &AttachView) -> Vec<Row> {
    let s = &v.snap;
    let Some(g) = &s.gauges else {
        return vec![(
            "waiting for a first answer".into(),
            String::new(),
            s.url.clone(),
        )];
    };
    let last = s.history.last().copied().unwrap_or_default();
    let gauge = |label: &str, r: Option<Reading>, unit: &str| match r {
        Some(r) => (
            label.to_string(),
            format!("{:.0}{unit}", r.value),
            r.metric.to_string(),
        ),
        None => (
            label.to_string(),
            "—".into(),
            "not exposed by this server".into(),
        ),
    };
    let mut rows = vec![
        gauge("running requests", g.running, ""),
        gauge("waiting (queue)", g.waiting, ""),
    ];
    // The slots right under the counts: a llama.cpp slot is a request's room.
    rows.extend(slot_row(s));
    rows.extend([
        // The newest poll that saw decode calls: between two quarter-second polls the
        // server's counters do not always move, and a "—" every other poll reads as a
        // server that stopped.
        batch_row(g.server, recent_batch(&s.history, last.t_s)),
        rate_row(last.tok_per_s, g.generated_total),
        gauge("KV cache in use", g.kv_used_pct, "%"),
        gauge("preemptions", s.since.preemptions, ""),
    ]);
    let load = v.load_summary();
    rows.extend(latency_rows(&s.since.ttft, &s.since.itl, load.as_ref()));
    rows.extend(load_row(v, load.as_ref()));
    rows.extend(what_was_not_read(s, g));
    rows
}

/// llama.cpp's slots, busy or free, as `/slots` lists them.
fn slot_row(s: &Snapshot) -> Option<Row> {
    if s.slots.is_empty() {
        return None;
    }
    let busy = s.slots.iter().filter(|s| s.busy).count();
    let cells: String = s
        .slots
        .iter()
        .map(|s| if s.busy { '▣' } else { '□' })
        .collect();
    Some((
        "slots".into(),
        format!("{busy} of {}", s.slots.len()),
        format!("{cells} /slots is_processing"),
    ))
}

/// The load we send, once we send one.
fn load_row(v: &AttachView, load: Option<&LoadSummary>) -> Option<Row> {
    let (Some((n, rate, _)), Some(l)) = (&v.load, load) else {
        return None;
    };
    let error = l.first_error.as_deref().map(|e| format!(": {e}"));
    Some((
        "our load".into(),
        format!("{}/{n} done", l.done),
        format!(
            "{rate:.2} req/s Poisson, {} failed{}",
            l.failed,
            error.unwrap_or_default()
        ),
    ))
}

/// The server's metrics no figure reads, histograms that did not add up, and lines that
/// were not samples.
fn what_was_not_read(s: &Snapshot, g: &crate::attach::engines::Gauges) -> Vec<Row> {
    let mut rows = Vec::new();
    if !g.unmapped.is_empty() {
        rows.push((
            "not mapped".into(),
            format!("{} metrics", g.unmapped.len()),
            g.unmapped.join(", "),
        ));
    }
    for b in &g.broken {
        rows.push(("unreadable".into(), String::new(), b.clone()));
    }
    if s.skipped_lines > 0 || s.truncated {
        let cut = if s.truncated {
            ", cut at the sample limit"
        } else {
            ""
        };
        rows.push((
            "skipped lines".into(),
            s.skipped_lines.to_string(),
            format!("/metrics lines that were not samples{cut}"),
        ));
    }
    rows
}

/// The batch of the newest poll within [`RATE_WINDOW_S`] of `now_s` that saw decode calls.
fn recent_batch(history: &[Point], now_s: f64) -> Option<f64> {
    let recent = history
        .iter()
        .rev()
        .take_while(|p| p.t_s >= now_s - RATE_WINDOW_S);
    recent.filter_map(|p| p.batch).next()
}

/// Batch per decode step, and how it was worked out.
fn batch_row(server: Server, batch: Option<f64>) -> (String, String, String) {
    let from = match server {
        Server::LlamaCpp => "llamacpp:n_busy_slots_per_decode (recent)",
        Server::Vllm => "mean of vllm:iteration_tokens_total over the interval",
        _ => "not exposed by this server",
    };
    let value = batch.map_or("—".into(), |b| format!("{b:.1}"));
    ("batch per decode step".into(), value, from.into())
}

/// Generated tokens per second between the last two polls.
fn rate_row(tok_per_s: Option<f64>, total: Option<Reading>) -> (String, String, String) {
    match (tok_per_s, total) {
        (Some(t), Some(r)) => (
            "tokens/s generated".into(),
            format!("{t:.0}"),
            format!("{}, last {RATE_WINDOW_S:.0} s", r.metric),
        ),
        _ => (
            "tokens/s generated".into(),
            "—".into(),
            "no token counter yet".into(),
        ),
    }
}

/// TTFT and ITL p50/p99: the server's histograms since the attach began, else our own
/// requests' streams.
fn latency_rows(
    ttft: &Option<HistReading>,
    itl: &Option<HistReading>,
    load: Option<&LoadSummary>,
) -> Vec<(String, String, String)> {
    let from_hist = |label: &str, h: &Option<HistReading>| {
        let h = h.as_ref()?;
        let (p50, p99) = (h.hist.quantile(0.5)?, h.hist.quantile(0.99)?);
        Some((
            label.to_string(),
            format!("{:.0} / {:.0} ms", 1e3 * p50, 1e3 * p99),
            format!("{} since attach", h.metric),
        ))
    };
    let from_load = |label: &str, (p50, p99): (f64, f64)| {
        let l = load.filter(|l| l.done > 0)?;
        Some((
            label.to_string(),
            format!("{p50:.0} / {p99:.0} ms"),
            format!("timed by us on our {} streamed requests", l.done),
        ))
    };
    let none = |label: &str| {
        (
            label.to_string(),
            "—".into(),
            "no histogram; send load with --rate".into(),
        )
    };
    let lat = load.map(|l| l.latency).unwrap_or_default();
    vec![
        from_hist("TTFT p50 / p99", ttft)
            .or_else(|| from_load("TTFT p50 / p99", (lat.ttft_ms_p50, lat.ttft_ms_p99)))
            .unwrap_or_else(|| none("TTFT p50 / p99")),
        from_hist("ITL p50 / p99", itl)
            .or_else(|| from_load("ITL p50 / p99", (lat.itl_ms_p50, lat.itl_ms_p99)))
            .unwrap_or_else(|| none("ITL p50 / p99")),
    ]
}
