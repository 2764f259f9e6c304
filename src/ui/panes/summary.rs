//! One-line summaries of the panes that give their room to another (`z`, a lesson step):
//! the pane's name and its headline figure, so nothing disappears from view.

use super::put;
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::views::units::fit;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

/// The pane's name and headline now, as its entry in [`super::PANES`] words them.
pub fn line(app: &App, pane: Pane) -> String {
    let def = super::def_of(app, pane);
    match app.report() {
        Some(r) => format!("{} · {}", def.name, (def.summary)(app, r)),
        // The attached server's figures come from its polls, not from our iterations.
        None if def.pane == Pane::Server => format!("{} · {}", def.name, super::server::now(app)),
        None => format!("{} · waiting for the first iteration", def.name),
    }
}

/// Draws the summary of `pane` on the row `area`.
pub fn render(app: &App, theme: &Theme, pane: Pane, area: Rect, buf: &mut Buffer) {
    let text = format!("▸ {}", line(app, pane));
    let style = if app.screen.focus == pane {
        theme.focused()
    } else {
        theme.dim()
    };
    put(buf, area, 0, area.y, fit(&text, area.width as usize), style);
}
