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

/// Draws the glossary centred in `area`, from entry `scroll` on where it does not fit.
pub fn render(theme: &Theme, scroll: usize, area: Rect, buf: &mut Buffer) {
    let rows = entries();
    let term_w = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0) as u16;
    let r = super::centered(area, 80, rows.len() as u16 + 2);
    Clear.render(r, buf);
    let shown = (r.height.saturating_sub(2) as usize).max(1);
    let first = scroll.min(rows.len().saturating_sub(shown));
    let title = if shown >= rows.len() {
        " glossary (j k scroll where it does not fit · other keys close) ".to_string()
    } else {
        format!(
            " glossary {}–{} of {} · j k scroll · any other key closes ",
            first + 1,
            (first + shown).min(rows.len()),
            rows.len()
        )
    };
    let b = Block::default().borders(Borders::ALL).title(title);
    let inner = b.inner(r);
    b.render(r, buf);
    for (i, (term, meaning)) in rows.iter().skip(first).take(shown).enumerate() {
        let y = inner.y + i as u16;
        super::put(buf, inner, 1, y, term, theme.accent());
        super::put(buf, inner, term_w + 2, y, meaning, Style::default());
    }
}
