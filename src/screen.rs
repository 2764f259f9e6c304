//! What the screen is made of, by name: the panes that can take focus. The UI draws them,
//! a lesson names the one a step is about, an export picks its picture by it.

/// Panes that can take focus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Pane {
    Attention,
    Heads,
    Output,
    Kv,
    Serving,
    Forward,
    /// Shares the forward pane's place: focusing one shows it.
    Traffic,
    /// The logit lens; shares the attention pane's place.
    Lens,
    /// A real server's serving figures (`inferlab attach`): the attention pane's place
    /// while the app is attached.
    Server,
}

impl Pane {
    /// Every pane, in focus order (tab).
    pub const ALL: [Pane; 9] = [
        Pane::Attention,
        Pane::Heads,
        Pane::Output,
        Pane::Kv,
        Pane::Serving,
        Pane::Forward,
        Pane::Traffic,
        Pane::Lens,
        Pane::Server,
    ];

    /// The pane whose place in the grid it is drawn in: its own, or for a pane that only
    /// stands in for another (`ui::panes::PANES` says when), that one's.
    pub fn place(self) -> Pane {
        match self {
            Pane::Lens | Pane::Server => Pane::Attention,
            Pane::Traffic => Pane::Forward,
            Pane::Attention => Pane::Attention,
            Pane::Heads => Pane::Heads,
            Pane::Output => Pane::Output,
            Pane::Kv => Pane::Kv,
            Pane::Serving => Pane::Serving,
            Pane::Forward => Pane::Forward,
        }
    }
}
