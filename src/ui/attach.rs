//! The attach screen: a real server's serving figures in our words. The collector
//! thread ([`crate::attach::poll`]) sends a snapshot per poll and the load thread an
//! outcome per request; this thread keeps the newest of each, draws, and never waits on
//! the network.

use crate::attach::engines::{HistReading, Reading, Server};
use crate::attach::http::Base;
use crate::attach::poll::{Link, Point, Snapshot, RATE_WINDOW_S};
use crate::attach::{load, poll, LoadSummary};
use crate::ui::theme::Theme;
use crate::views::units::fit;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget, Wrap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// What the screen holds between frames.
#[derive(Debug, Clone)]
pub struct AttachView {
    pub snap: Snapshot,
    /// Requests `--rate` planned, their rate, and their outcomes so far.
    pub load: Option<(usize, f64, Vec<load::Outcome>)>,
    pub help: bool,
}

/// The keys, for the footer and the help screen alike.
const KEYS: [(&str, &str); 3] = [("q", "quit"), ("?", "help"), ("Esc", "close help")];

/// Draws the whole screen into `area`.
pub fn draw(v: &AttachView, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(area);
    header(v, theme, head.width as usize).render(head, buf);
    let wide = body.width >= 120;
    let (charts, figs) = if wide {
        let [a, b] = Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)])
            .areas(body);
        (a, b)
    } else {
        let [a, b] = Layout::vertical([Constraint::Percentage(42), Constraint::Min(6)]).areas(body);
        (a, b)
    };
    charts_pane(&v.snap, theme, charts, buf);
    figures_pane(v, theme, figs, buf);
    footer(theme).render(foot, buf);
    if v.help {
        help(theme, area, buf);
    }
}

/// The server, its version, the URL, and whether the last poll answered.
fn header<'a>(v: &'a AttachView, theme: &Theme, width: usize) -> Paragraph<'a> {
    let s = &v.snap;
    let name = s.server.map_or("server", Server::name);
    let version = s
        .version
        .as_deref()
        .map(|v| format!(" ({v})"))
        .unwrap_or_default();
    let link = match &s.link {
        Link::Connecting => "connecting…".to_string(),
        Link::Up => format!("polled {}×", s.polls),
        Link::Down { why, tries } => format!("no answer ({tries}×, retrying): {why}"),
    };
    let style = match s.link {
        Link::Down { .. } => theme.warm(),
        _ => theme.dim(),
    };
    let lead = format!("attached: {name}{version} ");
    let url = format!("{} · ", s.url);
    let room = width.saturating_sub(lead.chars().count() + url.chars().count());
    Paragraph::new(Line::from(vec![
        Span::styled(lead, theme.accent()),
        Span::raw(url),
        Span::styled(fit(&link, room), style),
    ]))
}

/// The footer: the keys.
fn footer(theme: &Theme) -> Paragraph<'static> {
    let spans: Vec<Span> = KEYS[..2]
        .iter()
        .flat_map(|(k, what)| {
            [
                Span::styled(format!(" {k} "), theme.accent()),
                Span::raw(format!("{what} ")),
            ]
        })
        .collect();
    Paragraph::new(Line::from(spans))
}

/// The help screen over the middle of `area`.
fn help(theme: &Theme, area: Rect, buf: &mut Buffer) {
    let mut lines: Vec<Line> = KEYS
        .iter()
        .map(|(k, what)| Line::from(format!("{k:>5}  {what}")))
        .collect();
    lines.push(Line::from(""));
    for text in [
        "Upper chart: running (█) and waiting (░) requests at each poll, newest at the right.",
        "Lower chart: requests advanced per decode call between two polls (vLLM: tokens per engine step).",
        "Every figure names the metric it was read from. Counters become rates between polls; histograms count from when you attached.",
    ] {
        lines.push(Line::from(text));
    }
    let w = area.width.min(70);
    let h = area.height.min(16);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    Clear.render(r, buf);
    Paragraph::new(lines)
        .wrap(Wrap { trim: true })
        .block(Block::bordered().title(Span::styled(" help ", theme.focused())))
        .render(r, buf);
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
    let title = " requests, a column per poll (¼ s): █ running  ░ waiting ";
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
fn figures_pane(v: &AttachView, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let rows = figure_rows(v);
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
        // The newest poll that saw decode calls: between two quarter-second polls the
        // server's counters do not always move, and a "—" every other poll reads as a
        // server that stopped.
        batch_row(g.server, recent_batch(&s.history, last.t_s)),
        rate_row(last.tok_per_s, g.generated_total),
        gauge("KV cache in use", g.kv_used_pct, "%"),
        gauge("preemptions", s.since.preemptions, ""),
    ];
    let load = v.load.as_ref().map(|(n, _, o)| LoadSummary::of(*n, o));
    rows.extend(latency_rows(&s.since.ttft, &s.since.itl, load.as_ref()));
    rows.extend(slot_and_load_rows(v, load.as_ref()));
    rows.extend(what_was_not_read(s, g));
    rows
}

/// llama.cpp's slots, and the load we send.
fn slot_and_load_rows(v: &AttachView, load: Option<&LoadSummary>) -> Vec<Row> {
    let s = &v.snap;
    let mut rows = Vec::new();
    if !s.slots.is_empty() {
        let busy = s.slots.iter().filter(|b| **b).count();
        let cells: String = s.slots.iter().map(|b| if *b { '▣' } else { '□' }).collect();
        rows.push((
            "slots".into(),
            format!("{busy} of {}", s.slots.len()),
            format!("{cells} /slots is_processing"),
        ));
    }
    if let (Some((n, rate, _)), Some(l)) = (&v.load, load) {
        let error = l.first_error.as_deref().map(|e| format!(": {e}"));
        rows.push((
            "our load".into(),
            format!("{}/{n} done", l.done),
            format!(
                "{rate:.2} req/s Poisson, {} failed{}",
                l.failed,
                error.unwrap_or_default()
            ),
        ));
    }
    rows
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

/// Runs the attach screen until the user quits: polls `base` four times a second and,
/// with `plan` (the requests and their rate), sends that load.
pub fn run(base: Base, plan: Option<(Vec<crate::serve::Request>, f64)>) -> std::io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let (stx, srx) = mpsc::channel();
    poll::spawn(base.clone(), Duration::from_millis(250), stop.clone(), stx);
    let (ltx, lrx) = mpsc::channel();
    let mut view = AttachView {
        snap: poll::Poller::new(base.as_str()).snap,
        load: None,
        help: false,
    };
    if let Some((reqs, rate)) = plan {
        view.load = Some((reqs.len(), rate, Vec::new()));
        load::spawn(base, reqs, stop.clone(), ltx);
    }
    let theme = Theme::detect();
    let result = super::with_terminal(|t| loop {
        // The newest snapshot of a burst; every outcome.
        if let Some(s) = srx.try_iter().last() {
            view.snap = s;
        }
        if let Some((_, _, outcomes)) = &mut view.load {
            outcomes.extend(lrx.try_iter());
        }
        t.draw(|f| draw(&view, &theme, f.area(), f.buffer_mut()))?;
        if event::poll(Duration::from_millis(100))? && !keys(&mut view, event::read()?) {
            return Ok(());
        }
    });
    // The threads see this within a poll and end; nothing waits for them.
    stop.store(true, Ordering::Relaxed);
    result
}

/// Applies one terminal event; false when it asks to quit.
fn keys(view: &mut AttachView, ev: TermEvent) -> bool {
    let TermEvent::Key(k) = ev else {
        return true;
    };
    if k.kind != KeyEventKind::Press {
        return true;
    }
    match k.code {
        KeyCode::Char('q') => false,
        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => false,
        KeyCode::Char('?') => {
            view.help = !view.help;
            true
        }
        KeyCode::Esc => {
            view.help = false;
            true
        }
        _ => true,
    }
}
