//! The help overlay, generated from the key table.

use crate::ui::keys::BINDINGS;
use crate::ui::theme::Theme;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::{Block, Borders, Clear, Widget};

/// Draws the help box centred in `area`.
pub fn render(theme: &Theme, area: Rect, buf: &mut Buffer) {
    let rows: Vec<_> = BINDINGS.iter().collect();
    let r = super::centered(area, 80, rows.len() as u16 + 2);
    Clear.render(r, buf);
    // The mouse line sits in the bottom border so a 24-line terminal still shows every key.
    let b = Block::default()
        .borders(Borders::ALL)
        .title(" help · keys (any key closes) ")
        .title_bottom(" mouse: wheel scrolls · click a head or a title · double-click zooms ");
    let inner = b.inner(r);
    b.render(r, buf);
    for (i, k) in rows.iter().enumerate() {
        let y = inner.y + i as u16;
        if y >= inner.y + inner.height {
            break;
        }
        super::put(buf, inner, 1, y, format!("{:<8}", k.keys), theme.accent());
        super::put(buf, inner, 10, y, k.help, Style::default());
    }
}
