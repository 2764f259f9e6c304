//! Screen layout: header, panes, footer. Pure: the same state and size always give the
//! same picture (which the snapshot tests rely on).

use super::app::{Action, App, Pane, SPEEDS};
use super::panes::{self, put};
use super::screen_state::ScreenState;
use super::theme::Theme;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::widgets::{Block, Borders, Gauge, Paragraph, Widget, Wrap};

/// The smallest terminal the main screen fits in.
pub const MIN_W: u16 = 80;
pub const MIN_H: u16 = 24;

/// Where each pane sits for a screen of `area`.
pub struct Areas {
    pub header: Rect,
    pub attention: Rect,
    pub output: Rect,
    pub heads: Rect,
    pub kv: Rect,
    pub serving: Rect,
    pub forward: Rect,
    /// The lesson panel (zero-sized when no lesson is open).
    pub lesson: Rect,
    pub footer: Rect,
}

impl Areas {
    /// The rectangle of the grid place `place` (one of [`panes::PLACES`]); a pane that is
    /// only ever drawn in another's place has no room of its own.
    pub fn of(&self, place: Pane) -> Rect {
        match place {
            Pane::Attention => self.attention,
            Pane::Output => self.output,
            Pane::Heads => self.heads,
            Pane::Kv => self.kv,
            Pane::Serving => self.serving,
            Pane::Forward => self.forward,
            _ => Rect::default(),
        }
    }
}

/// Splits the screen; with a lesson open, the lesson panel takes the right third.
pub fn areas(area: Rect, lesson: bool) -> Areas {
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(10),
        Constraint::Length(1),
    ])
    .areas(area);
    let (body, lesson) = if lesson {
        let [main, side] =
            Layout::horizontal([Constraint::Percentage(64), Constraint::Percentage(36)])
                .areas(body);
        (main, side)
    } else {
        (body, Rect::default())
    };
    let [top, bottom] =
        Layout::vertical([Constraint::Percentage(62), Constraint::Percentage(38)]).areas(body);
    let [attention, right] =
        Layout::horizontal([Constraint::Percentage(58), Constraint::Percentage(42)]).areas(top);
    let [output, heads] =
        Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(right);
    let [kv, serving, forward] = Layout::horizontal([
        Constraint::Percentage(28),
        Constraint::Percentage(36),
        Constraint::Percentage(36),
    ])
    .areas(bottom);
    Areas {
        header,
        attention,
        output,
        heads,
        kv,
        serving,
        forward,
        lesson,
        footer,
    }
}

/// Where things sit when one pane has the room (`z`, or a lesson step about that pane):
/// the pane, the others as one-line summaries, the lesson text.
pub struct Focused {
    pub header: Rect,
    pub pane: Rect,
    pub summaries: Vec<(Pane, Rect)>,
    pub lesson: Rect,
    pub footer: Rect,
}

/// Below this width a lesson goes above the pane instead of beside it.
const SIDE_BY_SIDE_W: u16 = 120;

/// Splits the screen for the focused arrangement: the focused pane takes the body except
/// one line per other pane; a lesson takes the right third, or on a narrow terminal the
/// top part, where the summaries give way to it.
pub fn focused_areas(area: Rect, screen: &ScreenState, lesson: bool) -> Focused {
    let (focus, pane_full) = (screen.focus, screen.pane_full);
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(10),
        Constraint::Length(1),
    ])
    .areas(area);
    let others: Vec<Pane> = Pane::ALL
        .into_iter()
        .filter(|p| *p != focus && screen.can_focus(*p))
        .collect();
    let (main, lesson_area, summaries) = if !lesson {
        (body, Rect::default(), others.len() as u16)
    } else if pane_full {
        // The lesson keeps one line inside its border: its step, and how to get it back.
        let [text, main] =
            Layout::vertical([Constraint::Length(3), Constraint::Min(5)]).areas(body);
        (main, text, 0)
    } else if area.width >= SIDE_BY_SIDE_W {
        let [main, side] =
            Layout::horizontal([Constraint::Percentage(64), Constraint::Percentage(36)])
                .areas(body);
        (main, side, others.len() as u16)
    } else {
        let [text, main] =
            Layout::vertical([Constraint::Percentage(48), Constraint::Percentage(52)]).areas(body);
        (main, text, 0)
    };
    // Summaries only while the pane keeps most of the height.
    let summaries = if main.height >= summaries * 3 {
        summaries
    } else {
        0
    };
    let [pane, rest] =
        Layout::vertical([Constraint::Min(5), Constraint::Length(summaries)]).areas(main);
    let summaries = others
        .into_iter()
        .take(summaries as usize)
        .enumerate()
        .map(|(i, p)| {
            (
                p,
                Rect {
                    y: rest.y + i as u16,
                    height: 1,
                    ..rest
                },
            )
        })
        .collect();
    Focused {
        header,
        pane,
        summaries,
        lesson: lesson_area,
        footer,
    }
}

/// Draws `pane` into `area` as its entry in [`panes::PANES`] says, with whatever stands
/// in its place now (the sink experiment or the side-by-side runs in the serving pane's,
/// the looks-at list in the attention pane's).
pub fn draw_pane(app: &App, theme: &Theme, pane: Pane, area: Rect, buf: &mut Buffer) {
    (panes::def_of(app, pane).draw)(app, theme, area, buf)
}

/// Draws the whole screen.
pub fn draw(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    if area.width < MIN_W || area.height < MIN_H {
        too_small(area, buf);
    } else if let Some(e) = &app.worker.fatal {
        stopped(app, e, area, buf);
    } else if !app.worker.ready {
        starting(app, area, buf);
    } else if app.screen.zoomed {
        zoomed(app, theme, area, buf);
    } else {
        grid(app, theme, area, buf);
    }
}

/// What a terminal below the smallest size gets instead of squeezed panes.
fn too_small(area: Rect, buf: &mut Buffer) {
    let msg = format!(
        "inferlab needs a terminal of at least {MIN_W}×{MIN_H}; this one is {}×{}. Enlarge it, or press q to quit.",
        area.width, area.height
    );
    Paragraph::new(msg)
        .wrap(Wrap { trim: true })
        .render(area, buf);
}

/// The worker failed to start or died: its error, full screen.
fn stopped(app: &App, e: &str, area: Rect, buf: &mut Buffer) {
    let b = Block::default()
        .borders(Borders::ALL)
        .title(if app.worker.ready {
            " inferlab · the engine stopped "
        } else {
            " inferlab could not start "
        });
    Paragraph::new(format!("{e}\n\nPress q to quit."))
        .wrap(Wrap { trim: false })
        .block(b)
        .render(area, buf);
}

/// While the model loads: the status line and a gauge of the bytes read.
fn starting(app: &App, area: Rect, buf: &mut Buffer) {
    let b = Block::default()
        .borders(Borders::ALL)
        .title(" inferlab · starting ");
    let inner = b.inner(area);
    b.render(area, buf);
    put(buf, inner, 1, inner.y + 1, &app.status, Style::default());
    if let Some((done, total)) = app.worker.loading {
        let g = Gauge::default()
            .ratio((done as f64 / total.max(1) as f64).clamp(0.0, 1.0))
            .label(format!(
                "{} / {}",
                panes::bytes(done as usize),
                panes::bytes(total as usize)
            ));
        let row = Rect {
            x: inner.x + 1,
            y: inner.y + 3,
            width: inner.width.saturating_sub(2),
            height: 1,
        };
        g.render(row, buf);
    }
}

/// The focused pane with the body, the others as one-line summaries.
fn zoomed(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let f = focused_areas(area, &app.screen, app.tutor.is_some());
    header(app, theme, f.header, buf);
    panes::lesson::render(app, theme, f.lesson, buf);
    draw_pane(app, theme, app.screen.focus, f.pane, buf);
    for (p, r) in &f.summaries {
        panes::summary::render(app, theme, *p, *r, buf);
    }
    footer(app, theme, f.footer, buf);
    overlays(app, theme, area, buf);
}

/// Every pane at once, where [`grid_rects`] places them.
fn grid(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let a = areas(area, app.tutor.is_some());
    header(app, theme, a.header, buf);
    panes::lesson::render(app, theme, a.lesson, buf);
    for (p, r) in grid_rects(&a, app) {
        draw_pane(app, theme, p, r, buf);
    }
    footer(app, theme, a.footer, buf);
    overlays(app, theme, area, buf);
}

/// The lesson list, help and glossary, over whatever is below.
fn overlays(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    if app.tutor.as_ref().is_some_and(|t| t.list_open) {
        panes::lesson::render_list(app, theme, area, buf);
    }
    if app.screen.help {
        panes::help::render(theme, area, buf);
    }
    if app.screen.glossary {
        panes::glossary::render(theme, app.screen.glossary_scroll, area, buf);
    }
}

/// The settings the header names. The layout and kernel are the report's on screen, so
/// the header never disagrees with the panes (`m` and `f` recompute at once, and their
/// new setting shows with that report). The sampler and the cache mode apply from the
/// next step and no report follows `T`, `P` or `k`: live, the app's own; in a replay or
/// while scrubbing history, the report's. The kernel in a word.
fn shown_settings(app: &App) -> Shown {
    let past = app.worker.replaying || app.frames.cursor().is_some();
    let (run, sampler, no_cache) = match app.report() {
        Some(r) if past => (r.settings.run, r.info.sampler, r.info.no_cache),
        Some(r) => (
            r.settings.run,
            app.settings.request.sampler,
            !app.settings.request.kv_cache,
        ),
        None => (
            app.settings.run,
            app.settings.request.sampler,
            !app.settings.request.kv_cache,
        ),
    };
    // The weights the report on screen ran with, as the layout and kernel are.
    let weights = app
        .report()
        .map_or(app.settings.weights, |r| r.settings.weights);
    let kernel = match (run.route, run.kernel) {
        (crate::model::AttnRoute::Batched, _) => "batched",
        (_, k) => k.name(),
    };
    Shown {
        layout: run.layout,
        kernel,
        kv_elem: run.kv_elem,
        sampler,
        no_cache,
        weights,
    }
}

/// The settings the header names: the report's when one is shown.
struct Shown {
    layout: crate::model::HeadLayout,
    kernel: &'static str,
    kv_elem: crate::kv::KvElem,
    sampler: crate::model::SamplerConfig,
    no_cache: bool,
    weights: crate::model::Requant,
}

/// The run on screen: the iteration, its phase, its decode speed, and whether the app
/// runs, waits or shows history.
fn run_state(app: &App) -> (usize, &'static str, f64, String) {
    let (iter, phase, tps) = match app.report() {
        Some(r) => (
            r.iteration,
            if r.finished {
                "finished"
            } else if r.info.step == 0 {
                "prefill"
            } else {
                "decode"
            },
            r.decode_tok_per_s,
        ),
        None => (0, "waiting", 0.0),
    };
    let speed = SPEEDS[app.worker.speed];
    let run = if app.frames.cursor().is_some() {
        "HISTORY".to_string()
    } else if app.worker.running {
        if speed > 0.0 {
            format!("RUNNING {speed}/s")
        } else {
            "RUNNING max".into()
        }
    } else {
        "PAUSED".into()
    };
    (iter, phase, tps, run)
}

/// The header's fixed facts (weights, layout, kernel, KV type, sampler), with the
/// weights, layout and kernel apart for the short line.
fn header_facts(app: &App) -> (String, String, crate::model::HeadLayout, &'static str) {
    let Shown {
        layout,
        kernel,
        kv_elem,
        sampler,
        no_cache,
        weights,
    } = shown_settings(app);
    let cache = match (no_cache, kv_elem) {
        (true, _) => " · NO KV CACHE".to_string(),
        (false, crate::kv::KvElem::F32) => String::new(),
        (false, e) => format!(" · {e} KV"),
    };
    let facts = format!(
        "{} weights · {layout} · {kernel} attention{cache} · {}",
        weights.name().to_uppercase(),
        sampler.describe()
    );
    (facts, weights.name().to_uppercase(), layout, kernel)
}

fn header(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let (iter, phase, tps, run) = run_state(app);
    let (facts, weights, layout, kernel) = header_facts(app);
    let full = format!(
        " inferlab · {} · {facts} · iteration {iter} · {phase} · {tps:.1} tok/s · {run} · ",
        app.worker.model_name,
    );
    // The status (an export path, an error) matters more than the fixed facts: when the
    // line is too narrow those shrink first, and only then is the status cut, with "…".
    // The narrowest lines drop the app's name before the weights, layout and kernel a
    // lesson may be switching.
    let shorter =
        format!(" {weights} · {layout} · {kernel} · iteration {iter} · {phase} · {run} · ");
    let short = format!(
        " inferlab · {weights} · {layout} · {kernel} · iteration {iter} · {phase} · {run} · "
    );
    let width = area.width as usize;
    let status = header_status(app);
    // A report's status opens with its iteration and phase, which the full and short
    // lines say already; the minimal line keeps them, as it cuts the fixed facts. A
    // status that only repeats the run state ("paused" beside "PAUSED") is dropped.
    // (A step that finished its request is a decode step in the status and "finished"
    // in the header: the header's word stands.)
    let rest = match status.strip_prefix(&format!("iteration {iter} · ")) {
        Some(r) => ["prefill · ", "decode · "]
            .iter()
            .find_map(|p| r.strip_prefix(p))
            .unwrap_or(r),
        None => &status,
    };
    let rest = if rest.eq_ignore_ascii_case(&run) {
        ""
    } else {
        rest
    };
    let fits = |f: &String| f.chars().count() + rest.chars().count() <= width;
    let (fixed, status) = match [full, short, shorter].into_iter().find(fits) {
        Some(f) => (f, rest.to_string()),
        None => (
            format!(" {weights} · {layout} · {kernel} · "),
            status.clone(),
        ),
    };
    let status_w = status.chars().count();
    let room = width.saturating_sub(fixed.chars().count());
    let status = if status_w <= room {
        status
    } else {
        let cut: String = status.chars().take(room.saturating_sub(1)).collect();
        format!("{cut}…")
    };
    // With no status the line would end in a dangling " · ".
    let s = format!("{fixed}{status}");
    let s = s.strip_suffix(" · ").unwrap_or(&s).to_string();
    put(buf, area, 0, area.y, s, theme.accent());
}

/// The status the header ends with. An alarm's head stays in front ("RECORDING
/// STOPPED"); its whole text was the status when it happened and is printed on exit.
fn header_status(app: &App) -> String {
    match &app.worker.alarm {
        Some(a) => format!(
            "{} · {}",
            a.split(':').next().unwrap_or(a).to_uppercase(),
            app.status
        ),
        None => app.status.clone(),
    }
}

fn footer(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    if let Some(input) = &app.input {
        put(
            buf,
            area,
            0,
            area.y,
            format!(" prompt> {input}█  (Enter send · Esc cancel)"),
            theme.accent(),
        );
        return;
    }
    let mut x = 0u16;
    let lesson = app.tutor.is_some();
    for (keys, hint) in super::keys::footer_entries(area.width as usize, lesson) {
        let key = format!(" {keys} ");
        put(buf, area, x, area.y, &key, theme.focused());
        x += key.chars().count() as u16;
        let w = format!("{hint} ");
        put(buf, area, x, area.y, &w, Style::default());
        x += w.chars().count() as u16;
    }
}

/// Where each pane stands in the grid: the one place that says it, for drawing, mouse
/// hit-testing and focus. Each place shows what [`panes::shown_in`] picks (the lens, the
/// traffic pane, the sink experiment and the side-by-side runs stand in for others), and
/// an entry that takes a second place's room takes its rectangle too.
fn grid_rects(a: &Areas, app: &App) -> Vec<(Pane, Rect)> {
    let shown: Vec<_> = panes::PLACES
        .iter()
        .map(|&place| (place, panes::shown_in(app, place)))
        .collect();
    let taken: Vec<Pane> = shown.iter().filter_map(|(_, d)| d.also_takes).collect();
    shown
        .iter()
        .filter(|(place, _)| !taken.contains(place))
        .map(|(place, d)| {
            let r = d
                .also_takes
                .map_or(a.of(*place), |other| a.of(other).union(a.of(*place)));
            (d.pane, r)
        })
        .collect()
}

/// Each pane's rectangle as drawn now (grid or focused arrangement), and the lesson's.
fn pane_rects(screen: Rect, app: &App) -> (Vec<(Pane, Rect)>, Rect) {
    let lesson = app.tutor.is_some();
    if app.screen.zoomed {
        let f = focused_areas(screen, &app.screen, lesson);
        let mut out = vec![(app.screen.focus, f.pane)];
        out.extend(f.summaries);
        return (out, f.lesson);
    }
    let a = areas(screen, lesson);
    let out = grid_rects(&a, app);
    (out, a.lesson)
}

/// Keeps the lesson's scroll within its text on a `screen`-sized terminal: `J` or the
/// wheel past the end would otherwise leave the pane blank, and as many presses of `K`
/// before the text moved again.
pub fn clamp_lesson_scroll(screen: Rect, app: &mut App) {
    let (_, lesson) = pane_rects(screen, app);
    let max = super::panes::lesson::max_scroll(app, lesson);
    if let Some(t) = app.tutor.as_mut() {
        t.scroll = t.scroll.min(max);
    }
}

/// Scrolls a verdict just given into view on a `screen`-sized terminal, so an answer's
/// verdict and explanation never land below the fold (a no-op when none is waiting).
pub fn reveal_verdict(screen: Rect, app: &mut App) {
    let Some(qi) = app.tutor.as_ref().and_then(|t| t.reveal) else {
        return;
    };
    let (_, lesson) = pane_rects(screen, app);
    let to = super::panes::lesson::scroll_to_reveal(app, lesson, qi);
    if let Some(t) = app.tutor.as_mut() {
        if let Some(to) = to {
            t.scroll = to;
        }
        t.reveal = None;
    }
}

/// The action for a mouse event on a `screen`-sized terminal: the wheel scrolls the lesson
/// or moves through layers over the heatmap; a click on a pane's title (or on its
/// summary line) focuses it, and a click in the heads pane picks that head. The event
/// loop turns a second click on the same title into [`Action::ZoomPane`].
pub fn mouse_action(
    m: ratatui::crossterm::event::MouseEvent,
    screen: Rect,
    app: &App,
) -> Option<Action> {
    use ratatui::crossterm::event::MouseEventKind;
    let (rects, lesson) = pane_rects(screen, app);
    let inside = |r: Rect| {
        m.column >= r.x && m.column < r.x + r.width && m.row >= r.y && m.row < r.y + r.height
    };
    let (pane, r) = rects.iter().copied().find(|(_, r)| inside(*r)).unzip();
    match m.kind {
        MouseEventKind::ScrollDown if inside(lesson) => Some(Action::ScrollLesson(2)),
        MouseEventKind::ScrollUp if inside(lesson) => Some(Action::ScrollLesson(-2)),
        MouseEventKind::ScrollDown if pane == Some(Pane::Attention) => Some(Action::LayerDown),
        MouseEventKind::ScrollUp if pane == Some(Pane::Attention) => Some(Action::LayerUp),
        MouseEventKind::Down(_) => {
            let (p, r) = (pane?, r?);
            if m.row == r.y {
                return Some(Action::Set(super::app::Setting::Focus(p)));
            }
            if p != Pane::Heads || r.height < 3 {
                return None;
            }
            let inner = ratatui::widgets::Block::bordered().inner(r);
            let n = app.report().map_or(0, |r| r.cfg.n_head);
            super::panes::heads::head_at(inner, m.column, m.row, n).map(Action::SelectHead)
        }
        _ => None,
    }
}
