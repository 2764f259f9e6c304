//! The glossary overlay (G): every term the lessons use, one line each, from
//! `assets/glossary.md`.

use crate::ui::theme::Theme;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::{Block, Borders, Clear, Widget};

/// The glossary as (term, meaning) pairs, in file order.
pub fn entries() -> Vec<(&'static str, &'static str)> {
    crate::assets::GLOSSARY
        .lines()
        .filter_map(|l| l.split_once(" :: "))
        .map(|(t, m)| (t.trim(), m.trim()))
        .collect()
}

/// Draws the glossary centred in `area`, from line `scroll` on where it does not fit. A
/// meaning too long for the width wraps onto lines of its own under it.
pub fn render(theme: &Theme, scroll: usize, area: Rect, buf: &mut Buffer) {
    let entries = entries();
    let term_w = entries
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(0) as u16;
    let outer = super::centered(area, 80, u16::MAX);
    let room = (outer.width.saturating_sub(2 + term_w + 3) as usize).max(10);
    let lines = wrapped(&entries, room);
    let r = super::centered(area, 80, lines.len() as u16 + 2);
    Clear.render(r, buf);
    let shown = (r.height.saturating_sub(2) as usize).max(1);
    let first = scroll.min(lines.len().saturating_sub(shown));
    let title = if shown >= lines.len() {
        " glossary (j k scroll where it does not fit · other keys close) ".to_string()
    } else {
        format!(
            " glossary lines {}–{} of {} · j k scroll · any other key closes ",
            first + 1,
            (first + shown).min(lines.len()),
            lines.len()
        )
    };
    let b = Block::default().borders(Borders::ALL).title(title);
    let inner = b.inner(r);
    b.render(r, buf);
    for (i, (term, meaning)) in lines.iter().skip(first).take(shown).enumerate() {
        let y = inner.y + i as u16;
        super::put(buf, inner, 1, y, term, theme.accent());
        super::put_text(buf, inner, term_w + 2, y, meaning, Style::default());
    }
}

/// The furthest the glossary scrolls: its wrapped lines at a 60-column box (a wider box
/// has fewer, and the drawing stops at its own last line).
pub fn max_scroll() -> usize {
    let entries = entries();
    let term_w = entries
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(0);
    wrapped(&entries, 60usize.saturating_sub(term_w + 5).max(10)).len()
}

/// Each entry as (term, first line of its meaning), then ("", each further line), the
/// meaning wrapped at words to `room` columns.
fn wrapped(entries: &[(&'static str, &'static str)], room: usize) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for &(term, meaning) in entries {
        let mut line = String::new();
        let mut first = true;
        for word in meaning.split_whitespace() {
            if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > room {
                out.push((if first { term } else { "" }, std::mem::take(&mut line)));
                first = false;
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        out.push((if first { term } else { "" }, line));
    }
    out
}
