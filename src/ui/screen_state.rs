//! How the screen shows what it shows: which pane has the focus and the room, the
//! heatmap's layer, head, values and scroll, the panes that share a place, the request
//! whose pages are marked, and the overlays. None of it changes what the worker computes
//! (the layer and the lens reach it through the settings' `watch`).

use crate::screen::Pane;

/// What the screen shows: focus, zoom, layer and head, what stands in a pane's place,
/// the overlays.
#[derive(Debug, Clone)]
pub struct ScreenState {
    pub focus: Pane,
    /// The focused pane has the body; the others are one-line summaries.
    pub zoomed: bool,
    /// With a lesson open and zoomed: the lesson text shrinks to one line and the focused
    /// pane takes the rest of the body (`z`).
    pub pane_full: bool,
    pub layer: usize,
    pub head: usize,
    /// Raw scores (true) or softmax weights in the heatmap.
    pub show_scores: bool,
    /// Heatmap window: positions back from the newest (0 follows the newest).
    pub scroll: usize,
    /// The ranked list of what the bottom heatmap row attends to, in the heatmap's place.
    pub looks_at: bool,
    /// The panes of their own standing in another's place by the screen's choice (the
    /// logit lens in the attention pane's, the memory traffic in the forward pane's):
    /// focusing one puts it here, focusing its place's pane or tabbing away takes it out.
    pub in_place: Vec<Pane>,
    /// A server is attached: its pane holds the attention place (see `reachable`).
    pub attached: bool,
    /// The serving request whose block table is shown and whose pages are marked.
    pub selected_req: Option<u64>,
    /// Opens the heatmap on the head the first prefill shows sharpest, until the user
    /// picks a layer or head (the live app, without a lesson: lessons name their head).
    pub auto_head: bool,
    pub help: bool,
    /// The glossary overlay is open, and its first entry shown (a short terminal scrolls).
    pub glossary: bool,
    pub glossary_scroll: usize,
}

impl Default for ScreenState {
    fn default() -> Self {
        Self {
            focus: Pane::Attention,
            zoomed: false,
            pane_full: false,
            layer: 0,
            head: 0,
            show_scores: false,
            scroll: 0,
            looks_at: false,
            in_place: Vec::new(),
            attached: false,
            selected_req: None,
            auto_head: false,
            help: false,
            glossary: false,
            glossary_scroll: 0,
        }
    }
}

impl ScreenState {
    /// `z`: zoomed ↔ every pane; in a lesson, the text and the pane → the pane with the
    /// body → every pane → the text and the pane again.
    pub fn toggle_zoom(&mut self, lesson: bool) {
        (self.zoomed, self.pane_full) = match (lesson, self.zoomed, self.pane_full) {
            (false, z, _) => (!z, false),
            (true, true, false) => (true, true),
            (true, true, true) => (false, false),
            (true, false, _) => (true, false),
        }
    }

    /// Focuses the pane `by` places on from the focused one in [`Pane::ALL`]'s order
    /// (`ALL.len() - 1` goes one back).
    /// Tab visits the panes that take another's place (the lens, the traffic pane): leaving
    /// one by Tab gives the place back, so walking the panes changes nothing on its own;
    /// `o` and `t` keep one shown.
    pub fn focus_by(&mut self, by: usize) {
        let n = Pane::ALL.len();
        let i = Pane::ALL.iter().position(|p| *p == self.focus).unwrap_or(0);
        let leaving = self.focus;
        self.in_place.retain(|p| *p != leaving);
        // Two panes may lead to the same one (see `reachable`): the next one that differs.
        let next = (1..=n)
            .map(|k| self.reachable(Pane::ALL[(i + k * by) % n]))
            .find(|p| *p != leaving)
            .unwrap_or(leaving);
        self.focus_on(next);
    }

    /// Whether `p` can take the focus now (the server's pane while attached; the heatmap
    /// and the lens otherwise).
    pub fn can_focus(&self, p: Pane) -> bool {
        self.reachable(p) == p
    }

    /// The pane focusing `p` focuses: while a server is attached its pane holds the
    /// attention place, so the heatmap and the lens lead to it; without one, the server's
    /// pane leads to the heatmap.
    fn reachable(&self, p: Pane) -> Pane {
        match (self.attached, p) {
            (true, _) if p.place() == Pane::Attention => Pane::Server,
            (false, Pane::Server) => Pane::Attention,
            _ => p,
        }
    }

    /// Focuses `p`. A pane that stands in another's place (the lens in the attention
    /// pane's, the traffic pane in the forward pane's) is shown by focusing it, and the
    /// place's own pane takes its place back when it is focused.
    pub fn focus_on(&mut self, p: Pane) {
        let p = self.reachable(p);
        self.focus = p;
        self.in_place.retain(|q| q.place() != p.place());
        if p.place() != p {
            self.in_place.push(p);
        }
    }

    /// Whether `p` stands in its place now (by the screen's choice).
    pub fn shows(&self, p: Pane) -> bool {
        self.in_place.contains(&p)
    }

    /// The logit lens is on screen (the worker then runs it).
    pub fn lens_on_screen(&self) -> bool {
        self.shows(Pane::Lens) || self.focus == Pane::Lens
    }
}
