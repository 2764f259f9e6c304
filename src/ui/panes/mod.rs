//! The panes. Each is a pure function of the app state drawing into a buffer area.

pub mod forward;
pub mod glossary;
pub mod heads;
pub mod heatmap;
pub mod help;
pub mod kv;
pub mod lens;
pub mod lesson;
pub mod looks;
pub mod output;
pub mod serving;
pub mod sink;
pub mod summary;
pub mod traffic;

use super::app::{App, Pane};
use super::theme::Theme;
use ratatui::widgets::{Block, Borders};

/// The bordered block of a pane `width` columns wide, its title highlighted when focused
/// and ending in `…` where the border has no room for all of it.
pub fn block<'a>(app: &App, theme: &Theme, pane: Pane, title: String, width: u16) -> Block<'a> {
    let title = crate::views::units::fit(&title, (width as usize).saturating_sub(2));
    let b = Block::default().borders(Borders::ALL).title(title);
    if app.view.focus == pane {
        b.title_style(theme.focused()).border_style(theme.focused())
    } else {
        b
    }
}

pub use crate::views::units::{bytes, label, thousands};

/// Writes `s` at column `dx` of row `y` inside `inner`, clipped to `inner`'s width.
pub fn put(
    buf: &mut ratatui::buffer::Buffer,
    inner: ratatui::layout::Rect,
    dx: u16,
    y: u16,
    s: impl AsRef<str>,
    style: ratatui::style::Style,
) {
    if dx >= inner.width || y < inner.y || y >= inner.y + inner.height {
        return;
    }
    buf.set_stringn(inner.x + dx, y, s, (inner.width - dx) as usize, style);
}

/// [`put`] for text: a line longer than the room left ends in `…` instead of being cut
/// at the border.
pub fn put_text(
    buf: &mut ratatui::buffer::Buffer,
    inner: ratatui::layout::Rect,
    dx: u16,
    y: u16,
    s: impl AsRef<str>,
    style: ratatui::style::Style,
) {
    let room = inner.width.saturating_sub(dx) as usize;
    put(
        buf,
        inner,
        dx,
        y,
        crate::views::units::fit(s.as_ref(), room),
        style,
    );
}

/// A `w × h` box centred in `area` (clipped to it), for overlays.
pub fn centered(area: ratatui::layout::Rect, w: u16, h: u16) -> ratatui::layout::Rect {
    let (w, h) = (w.min(area.width), h.min(area.height));
    ratatui::layout::Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}
