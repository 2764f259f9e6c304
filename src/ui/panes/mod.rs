//! The panes. Each is a pure function of the app state drawing into a buffer area, and
//! [`PANES`] says in one place what each one is: its name, the place it is drawn in,
//! when it takes another pane's place, its summary line, its picture and how it draws.
//!
//! Adding a pane: a variant in `screen.rs` (its name is its lesson word) with its place,
//! its file here with `render` and `summary`, and its entry in [`PANES`]. Focus, Tab, the
//! grid, the focused arrangement, the summaries, mouse clicks and export read the table.

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
pub mod server;
pub mod serving;
pub mod sink;
pub mod summary;
pub mod traffic;

use super::app::{App, Pane};
use super::screen_state::ScreenState;
use super::theme::Theme;
use crate::export::ExportPane;
use crate::report::StepReport;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::widgets::{Block, Borders};

/// One entry of [`PANES`]: a pane as the screen knows it.
pub struct PaneDef {
    /// The pane that has the focus while this is drawn.
    pub pane: Pane,
    /// The name its summary line starts with.
    pub name: &'static str,
    /// When it takes its place ([`Pane::place`]); `None` for the place's own pane, drawn
    /// when no other entry of the place is asked for.
    pub stands_in: Option<StandIn>,
    /// Another place whose room it takes as well (the runs side by side need two columns).
    pub also_takes: Option<Pane>,
    pub draw: fn(&App, &Theme, Rect, &mut Buffer),
    /// The headline of its one-line summary, from the report on screen.
    pub summary: fn(&App, &StepReport) -> String,
    /// The picture `e` exports while it is focused (none for a server's figures).
    pub export: Option<ExportPane>,
}

/// Why a place (see [`Pane::place`]) shows one of its entries rather than its own pane:
/// every place shows the first of its entries whose reason holds.
#[derive(Clone, Copy)]
pub enum StandIn {
    /// A pane of its own that the screen state put in the place
    /// ([`ScreenState::in_place`]): focusing it does, focusing the place's pane or tabbing
    /// away gives the place back (the lens, the traffic pane).
    Chosen,
    /// Another drawing of the place's own pane, while the screen state's switch for it is
    /// on (the looks-at list, `w`).
    Mode(fn(&ScreenState) -> bool),
    /// What runs asks for it (the sink experiment, a run side by side).
    Runs(fn(&App) -> bool),
}

/// Every pane, each drawing that takes a place listed before that place's own pane.
pub const PANES: [PaneDef; 12] = [
    PaneDef {
        pane: Pane::Server,
        name: "server",
        stands_in: Some(StandIn::Runs(|app| app.attached.is_some())),
        also_takes: None,
        draw: server::render,
        summary: server::summary,
        export: None,
    },
    PaneDef {
        pane: Pane::Lens,
        name: "logit lens",
        stands_in: Some(StandIn::Chosen),
        also_takes: None,
        draw: lens::render,
        summary: lens::summary,
        export: Some(ExportPane::Lens),
    },
    PaneDef {
        pane: Pane::Attention,
        name: "attention",
        stands_in: Some(StandIn::Mode(|v| v.looks_at)),
        also_takes: None,
        draw: looks::render,
        summary: heatmap::summary,
        export: Some(ExportPane::Attention),
    },
    PaneDef {
        pane: Pane::Attention,
        name: "attention",
        stands_in: None,
        also_takes: None,
        draw: heatmap::render,
        summary: heatmap::summary,
        export: Some(ExportPane::Attention),
    },
    PaneDef {
        pane: Pane::Output,
        name: "output",
        stands_in: None,
        also_takes: None,
        draw: output::render,
        summary: output::summary,
        export: Some(ExportPane::Output),
    },
    PaneDef {
        pane: Pane::Heads,
        name: "heads",
        stands_in: None,
        also_takes: None,
        draw: heads::render,
        summary: heads::summary,
        export: Some(ExportPane::Heads),
    },
    PaneDef {
        pane: Pane::Traffic,
        name: "memory traffic",
        stands_in: Some(StandIn::Chosen),
        also_takes: None,
        draw: traffic::render,
        summary: traffic::summary,
        export: Some(ExportPane::Traffic),
    },
    PaneDef {
        pane: Pane::Forward,
        name: "forward pass",
        stands_in: None,
        also_takes: None,
        draw: forward::render,
        summary: forward::summary,
        export: Some(ExportPane::Forward),
    },
    PaneDef {
        pane: Pane::Kv,
        name: "KV cache",
        stands_in: None,
        also_takes: None,
        draw: kv::render,
        summary: kv::summary,
        // The KV pane shows the live request's reservation, not the serving pool.
        export: Some(ExportPane::Request),
    },
    PaneDef {
        pane: Pane::Serving,
        name: "serving",
        stands_in: Some(StandIn::Runs(App::shows_sink)),
        also_takes: Some(Pane::Kv),
        draw: sink::render,
        summary: serving::summary,
        export: Some(ExportPane::Sink),
    },
    PaneDef {
        pane: Pane::Serving,
        name: "serving",
        stands_in: Some(StandIn::Runs(|app| {
            app.settings.serving.compare != crate::settings::Compare::Off
        })),
        also_takes: Some(Pane::Kv),
        draw: serving::render_side_by_side,
        summary: serving::summary,
        export: Some(ExportPane::Batch),
    },
    PaneDef {
        pane: Pane::Serving,
        name: "serving",
        stands_in: None,
        also_takes: None,
        draw: serving::render,
        summary: serving::summary,
        export: Some(ExportPane::Batch),
    },
];

/// The places of the grid, in the order they are drawn and hit-tested.
pub const PLACES: [Pane; 6] = [
    Pane::Attention,
    Pane::Output,
    Pane::Heads,
    Pane::Forward,
    Pane::Kv,
    Pane::Serving,
];

impl PaneDef {
    /// Whether its place shows it now (a place's own pane always could).
    fn asked_for(&self, app: &App) -> bool {
        match self.stands_in {
            None => true,
            Some(StandIn::Chosen) => app.screen.shows(self.pane),
            Some(StandIn::Mode(on)) => on(&app.screen),
            Some(StandIn::Runs(runs)) => runs(app),
        }
    }
}

/// What `place` shows now: the first of its entries asked for.
pub fn shown_in(app: &App, place: Pane) -> &'static PaneDef {
    PANES
        .iter()
        .find(|d| d.pane.place() == place && d.asked_for(app))
        .expect("every place has its own pane, asked for always")
}

/// What is drawn for `pane` now: what its place shows, when that is this pane, else the
/// pane's own entry.
pub fn def_of(app: &App, pane: Pane) -> &'static PaneDef {
    let own = own_def(pane);
    let shown = shown_in(app, pane.place());
    if shown.pane == pane {
        shown
    } else {
        own
    }
}

/// `pane`'s own entry: the last of its entries, the one drawn when nothing stands in.
pub fn own_def(pane: Pane) -> &'static PaneDef {
    PANES
        .iter()
        .rev()
        .find(|d| d.pane == pane)
        .expect("every pane has an entry")
}

/// The picture `e` exports for `pane` now, where it has one.
pub fn export_of(app: &App, pane: Pane) -> Option<ExportPane> {
    def_of(app, pane).export
}

/// The bordered block of a pane `width` columns wide, its title highlighted when focused
/// and ending in `…` where the border has no room for all of it.
pub fn block<'a>(app: &App, theme: &Theme, pane: Pane, title: String, width: u16) -> Block<'a> {
    let title = crate::views::units::fit(&title, (width as usize).saturating_sub(2));
    let b = Block::default().borders(Borders::ALL).title(title);
    if app.screen.focus == pane {
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
