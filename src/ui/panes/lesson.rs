//! The lesson panel beside the live panes, and the lesson list overlay.

use crate::lesson::figures;
use crate::lesson::predict::{self, LiveChoices};
use crate::lesson::tutor::{self, Tutor};
use crate::lesson::{Predict, Question, QuestionKind};
use crate::ui::app::App;
use crate::ui::theme::Theme;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget, Wrap};

/// What the lesson pane needs from the live app beside the tutor's own state.
pub struct StepNow {
    /// Whether the step's task holds now.
    pub task_done: bool,
    /// The choices each prediction kind offers in the app's state now.
    pub choices: Vec<(Predict, Option<LiveChoices>)>,
    /// The live figures the step quotes, by name, with their values now.
    pub figures: Vec<(String, String)>,
    /// An iteration of the request on screen has run (none yet, or a new prompt waits).
    pub ran: bool,
}

impl StepNow {
    /// Read from the app for the tutor's current step.
    pub fn of(app: &App, t: &Tutor) -> Self {
        let kinds = t.step().map_or(Vec::new(), |s| {
            s.questions
                .iter()
                .filter_map(|q| match q.kind {
                    QuestionKind::Predict(k) => Some(k),
                    QuestionKind::Choice(_) => None,
                })
                .collect()
        });
        let state = app.live();
        Self {
            task_done: t.task_done(&state),
            choices: kinds
                .into_iter()
                .map(|k| (k, predict::live_choices(&state, k)))
                .collect(),
            figures: quoted(t)
                .into_iter()
                .map(|name| {
                    let v = figures::value(app.figure_sources(), &name);
                    (name, v.unwrap_or_else(|| figures::PENDING.into()))
                })
                .collect(),
            ran: app.report().is_some() && !app.worker.prompt_queued,
        }
    }

    /// `text` with the step's `{figures}` filled in.
    fn fill(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (name, v) in &self.figures {
            out = out.replace(&format!("{{{name}}}"), v);
        }
        out
    }

    fn choices(&self, k: Predict) -> Option<&LiveChoices> {
        self.choices
            .iter()
            .find(|c| c.0 == k)
            .and_then(|c| c.1.as_ref())
    }
}

/// The figure names the current step (and the lesson's intro) quote.
fn quoted(t: &Tutor) -> Vec<String> {
    let (Some(l), Some(s)) = (t.current(), t.step()) else {
        return Vec::new();
    };
    let mut texts: Vec<&str> = vec![&l.intro, &s.prose];
    texts.extend(s.notice.as_deref());
    texts.extend(s.task.as_ref().map(|t| t.text.as_str()));
    for q in &s.questions {
        texts.push(&q.text);
        if let QuestionKind::Choice(c) = &q.kind {
            texts.extend(c.iter().flat_map(|c| [c.text.as_str(), c.why.as_str()]));
        }
    }
    let mut names: Vec<String> = texts
        .iter()
        .flat_map(|t| t.lines())
        .flat_map(crate::lesson::figure_names)
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Draws the open lesson step into `area`.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    if let Some(t) = app.tutor.as_ref() {
        draw(t, &StepNow::of(app, t), theme, area, buf);
    }
}

/// Draws a tutor's current step, with what the live app says of it, into `area`.
pub fn draw(t: &Tutor, live: &StepNow, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let (Some(l), Some(_)) = (t.current(), t.step()) else {
        return;
    };
    let title = format!(
        " lesson {}/{} · step {}/{} ",
        t.lesson + 1,
        t.lessons.len(),
        t.step + 1,
        l.steps.len()
    );
    let b = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .border_style(theme.accent());
    let inner = b.inner(area);
    b.render(area, buf);
    if inner.height <= 1 {
        let s = t.step().map_or("", |s| s.title.as_str());
        let line = format!("z: every pane, z again: the lesson text · {s}");
        return super::put_text(buf, inner, 0, inner.y, line, theme.accent());
    }
    let text = Paragraph::new(lines(t, live, theme)).wrap(Wrap { trim: false });
    // Never past the text's last row, whatever the scroll asked (the app clamps it too,
    // but the pane may have narrowed since).
    let last = last_scroll(&text, inner);
    let scroll = t.scroll.min(last);
    text.scroll((scroll, 0)).render(
        Rect {
            height: inner.height.saturating_sub(1),
            ..inner
        },
        buf,
    );
    footer(scroll < last, theme, inner, buf);
}

/// The key line at the pane's foot: text below the fold (a task, a question) says so where
/// the eye ends up. The longest wording that fits; the shortest ends in "…" where even it
/// does not.
fn footer(more: bool, theme: &Theme, inner: Rect, buf: &mut Buffer) {
    let (footers, style) = match more {
        true => (
            [
                "↓ more below: J or the wheel scrolls · n next · p back",
                "↓ more below: J scrolls · n next · p back",
                "↓ more below: J scrolls",
            ],
            theme.accent(),
        ),
        false => (
            [
                "n next · p back · 1-9 answer · L lessons · wheel scrolls",
                "n next · p back · 1-9 answer · L lessons",
                "n next · p back · 1-9 answer",
            ],
            theme.dim(),
        ),
    };
    let fits = |f: &&&str| f.chars().count() <= inner.width as usize;
    let text = footers.iter().find(fits).unwrap_or(&footers[2]);
    let y = inner.y + inner.height.saturating_sub(1);
    super::put_text(buf, inner, 0, y, text, style);
}

/// The furthest `text` can scroll in a pane whose inside is `inner`: its rows wrapped to
/// the width, less those shown above the key line.
fn last_scroll(text: &Paragraph, inner: Rect) -> u16 {
    let rows = text.line_count(inner.width).min(u16::MAX as usize) as u16;
    rows.saturating_sub(inner.height.saturating_sub(1))
}

/// The scroll that shows question `qi` in `area` once it is graded: its last line (the
/// verdict and why, or a wrong prediction's fresh choices) as the panel's bottom row, but
/// never past the question's first line, where a prediction's verdict stands. `None` when
/// the scroll is that already.
pub fn scroll_to_reveal(app: &App, area: Rect, qi: usize) -> Option<u16> {
    let t = app.tutor.as_ref().filter(|t| t.step().is_some())?;
    let inner = Block::default().borders(Borders::ALL).inner(area);
    let live = StepNow::of(app, t);
    // Rows of the step's text with its first `n` questions, as the panel wraps them.
    let rows = |n: usize| {
        Paragraph::new(lines_through(t, &live, &Theme::detect(), n))
            .wrap(Wrap { trim: false })
            .line_count(inner.width)
            .min(u16::MAX as usize) as u16
    };
    let shown = inner.height.saturating_sub(1);
    // The blank line before the question is its first row.
    let start = rows(qi) + 1;
    let want = rows(qi + 1).saturating_sub(shown).min(start);
    (want != t.scroll).then_some(want)
}

/// The furthest the open step's text can scroll in the lesson pane `area`.
pub fn max_scroll(app: &App, area: Rect) -> u16 {
    let Some(t) = app.tutor.as_ref().filter(|t| t.step().is_some()) else {
        return 0;
    };
    let inner = Block::default().borders(Borders::ALL).inner(area);
    let text = Paragraph::new(lines(t, &StepNow::of(app, t), &Theme::detect()));
    last_scroll(&text.wrap(Wrap { trim: false }), inner)
}

/// The text of the current step, top to bottom: the lesson and step titles, the prose,
/// the notice, the task, then each question.
fn lines<'a>(t: &Tutor, live: &StepNow, theme: &Theme) -> Vec<Line<'a>> {
    lines_through(t, live, theme, usize::MAX)
}

/// The step's lines with its first `count` questions (their verdicts and explanations).
fn lines_through<'a>(t: &Tutor, live: &StepNow, theme: &Theme, count: usize) -> Vec<Line<'a>> {
    let l = t.current().expect("caller checked");
    let s = t.step().expect("caller checked");
    let mut out = Vec::new();
    if let Some(n) = &t.notice {
        out.push(Line::styled(format!("! {n}"), theme.accent()));
    }
    out.extend([
        Line::styled(l.title.clone(), theme.accent()),
        Line::styled(s.title.clone(), theme.focused()),
        Line::raw(""),
    ]);
    if t.step == 0 && !l.intro.is_empty() {
        out.extend(paragraphs(&live.fill(&l.intro)));
        out.push(Line::raw(""));
    }
    out.extend(paragraphs(&live.fill(&s.prose)));
    if let Some(n) = &s.notice {
        out.push(Line::raw(""));
        out.push(Line::from(vec![
            Span::styled("Notice: ", theme.accent()),
            Span::raw(live.fill(n)),
        ]));
    }
    if let Some(task) = &s.task {
        out.push(Line::raw(""));
        out.extend(task_lines(t, &live.fill(&task.text), live.task_done, theme));
    }
    let open = t.open_question();
    for (qi, q) in s.questions.iter().enumerate().take(count) {
        out.push(Line::raw(""));
        out.extend(question_lines(t, live, theme, qi, q, open == Some(qi)));
    }
    out
}

/// The step's task with its box ticked or not, and once done, what `n` leads to.
fn task_lines<'a>(t: &Tutor, text: &str, done: bool, theme: &Theme) -> Vec<Line<'a>> {
    let (mark, style) = if done {
        ("[x] Task: ", theme.focused())
    } else {
        ("[ ] Task: ", theme.accent())
    };
    let mut out = vec![Line::from(vec![
        Span::styled(mark, style),
        Span::raw(text.to_string()),
    ])];
    if done {
        let steps = t.current().map_or(0, |l| l.steps.len());
        let what = if t.step + 1 < steps {
            "    done: press n for the next step"
        } else if t.lesson + 1 < t.lessons.len() {
            "    done: press n for the next lesson"
        } else {
            "    done: that was the last step of the last lesson"
        };
        out.push(Line::styled(what, theme.dim()));
    }
    out
}

/// A question's mark (answered right, wrong, or not yet) and its text as it was asked.
fn question_head<'a>(
    t: &Tutor,
    live: &StepNow,
    theme: &Theme,
    qi: usize,
    q: &Question,
) -> Line<'a> {
    let mark = match t.answers[qi].as_ref() {
        Some(a) if a.right => "✓ ",
        Some(_) => "✗ ",
        None => "? ",
    };
    let text = t
        .asked
        .get(&qi)
        .cloned()
        .unwrap_or_else(|| live.fill(&q.text));
    Line::from(vec![
        Span::styled(mark, theme.accent()),
        Span::styled(text, Style::default()),
    ])
}

/// What a wrong prediction's fresh choices are about: the next iteration, or for an
/// event that took many iterations, its next time.
fn predict_again(kind: crate::lesson::Predict) -> &'static str {
    if kind.about_server() {
        "  Those seconds have passed. Predict the next ones (the server serves on):"
    } else if predict::waits_for_event(kind) {
        "  That has happened. Predict it again, for when it next does:"
    } else {
        "  That iteration has passed. Predict the next one:"
    }
}

/// One question: its mark and text; then, while it is open or once answered, its
/// choices, the verdict and what to do next.
fn question_lines<'a>(
    t: &Tutor,
    live: &StepNow,
    theme: &Theme,
    qi: usize,
    q: &Question,
    open: bool,
) -> Vec<Line<'a>> {
    let answer = t.answers[qi].as_ref();
    let mut out = vec![question_head(t, live, theme, qi, q)];
    // Only the open question (and answered ones) show their choices; a later one says
    // why its choices are not there yet.
    if !open && answer.is_none() {
        out.push(Line::styled(
            "  (its choices open once the question above is answered)",
            theme.dim(),
        ));
        return out;
    }
    let predict = matches!(q.kind, QuestionKind::Predict(_));
    // A graded prediction is about what has passed: its verdict comes first, and a wrong
    // one is followed by fresh choices for the next time.
    if let (Some(a), QuestionKind::Predict(kind)) = (answer, &q.kind) {
        out.push(verdict(a, live, theme));
        if a.right {
            return out;
        }
        if predict::graded_once(*kind) {
            out.push(Line::styled(
                "  (graded once: the next question is open)",
                theme.dim(),
            ));
            return out;
        }
        out.push(Line::styled(predict_again(*kind), theme.dim()));
    }
    out.extend(choice_lines(t, live, theme, qi, q));
    if let Some(p) = t.pending.as_ref().filter(|p| p.question == qi) {
        out.push(Line::styled(predict::waiting(p.kind), theme.dim()));
    }
    if let (Some(a), false) = (answer, predict) {
        out.push(verdict(a, live, theme));
        if !a.right {
            out.push(Line::styled(
                "  (press another number to try again)",
                theme.dim(),
            ));
        }
    }
    out
}

/// The numbered choices: the lesson's own, or for a prediction the ones the live app
/// offers now; the one chosen (or waiting to be graded) is highlighted.
fn choice_lines<'a>(
    t: &Tutor,
    live: &StepNow,
    theme: &Theme,
    qi: usize,
    q: &Question,
) -> Vec<Line<'a>> {
    let predict = matches!(q.kind, QuestionKind::Predict(_));
    let pending = t.pending.as_ref().filter(|p| p.question == qi);
    // A prediction being checked keeps the choices it was answered from: the answer has
    // changed the very setting the live choices start from.
    let labels: Vec<String> = match (&q.kind, pending) {
        (QuestionKind::Choice(c), _) => c.iter().map(|c| live.fill(&c.text)).collect(),
        (QuestionKind::Predict(_), Some(p)) => p.shown.labels.clone(),
        (QuestionKind::Predict(kind), None) => match live.choices(*kind) {
            Some(c) => c.labels.clone(),
            None => vec![format!("({})", predict::unavailable(*kind, live.ran))],
        },
    };
    let answer = t.answers[qi].as_ref();
    labels
        .iter()
        .enumerate()
        .map(|(i, lab)| {
            let chosen = (!predict && answer.is_some_and(|a| a.choice == i))
                || pending.is_some_and(|p| p.choice == i);
            let style = if chosen {
                theme.focused()
            } else {
                Style::default()
            };
            Line::styled(format!("  {}. {lab}", i + 1), style)
        })
        .collect()
}

/// "Right: …" or "Not quite: …" with the answer's explanation.
fn verdict<'a>(a: &tutor::Answer, live: &StepNow, theme: &Theme) -> Line<'a> {
    Line::from(vec![
        Span::styled(
            if a.right {
                "  Right: "
            } else {
                "  Not quite: "
            },
            theme.accent(),
        ),
        Span::raw(live.fill(&a.why)),
    ])
}

/// Prose as the panel wraps it: the file's line breaks inside a paragraph become spaces,
/// blank lines stay paragraph breaks, and table rows (lines starting with `|`) keep their
/// own lines, indented where the file has the pipe.
fn paragraphs<'a>(text: &str) -> Vec<Line<'a>> {
    let mut out = Vec::new();
    for (i, para) in text.split("\n\n").enumerate() {
        if i > 0 {
            out.push(Line::raw(""));
        }
        let mut joined: Vec<&str> = Vec::new();
        for line in para.lines().map(str::trim) {
            if let Some(row) = line.strip_prefix('|') {
                if !joined.is_empty() {
                    out.push(Line::raw(joined.join(" ")));
                    joined.clear();
                }
                // The pipe marks a row in the file; on screen an indent says it.
                out.push(Line::raw(format!(" {row}")));
            } else {
                joined.push(line);
            }
        }
        if !joined.is_empty() {
            out.push(Line::raw(joined.join(" ")));
        }
    }
    out
}

/// The lesson list, centred over `area`.
pub fn render_list(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let Some(t) = app.tutor.as_ref() else { return };
    let r = super::centered(area, 70, t.lessons.len() as u16 + 4);
    Clear.render(r, buf);
    let b = Block::default()
        .borders(Borders::ALL)
        .title(" lessons · j k choose · Enter open · Esc close ");
    let inner = b.inner(r);
    b.render(r, buf);
    for (i, l) in t.lessons.iter().enumerate() {
        let done = t
            .progress
            .lessons
            .get(l.id())
            .map(|p| p.done_of(l.steps.len()))
            .unwrap_or(0);
        let row = format!(
            "{} {:>2}. {:<44} {done}/{} steps",
            if i == t.list_sel { "›" } else { " " },
            i + 1,
            l.title,
            l.steps.len()
        );
        let style = if i == t.list_sel {
            theme.focused()
        } else {
            Style::default()
        };
        super::put(buf, inner, 0, inner.y + i as u16, row, style);
    }
}
