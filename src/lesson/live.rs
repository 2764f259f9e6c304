//! What the lesson walker and the predictions may read of the app: the user's settings,
//! what the screen shows and the newest report, as plain data. The app hands this view
//! out, so the lesson code never reaches into the app and the app alone depends on the
//! lessons.

use crate::report::StepReport;
use crate::settings::Settings;

pub use crate::screen::Pane;

/// A view setting a lesson step (or a click) can ask for by value; the settings the
/// worker runs under go as one [`Settings`] value instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Focus(Pane),
    /// The focused pane has the body (`true`) or the grid of panes is shown.
    Zoom(bool),
    /// Raw scores (true) or softmax weights.
    Values(bool),
    Layer(usize),
    Head(usize),
}

/// The app's state as the lessons see it, read-only.
#[derive(Debug, Clone, Copy)]
pub struct LiveState<'a> {
    /// The newest report on screen (none before the first iteration, or while a new
    /// one is being graded against it).
    pub report: Option<&'a StepReport>,
    /// What the user asked for (a report says what it ran under).
    pub settings: Settings,
    pub layer: usize,
    pub head: usize,
    pub focus: Pane,
    /// Raw scores (true) or softmax weights in the heatmap.
    pub show_scores: bool,
    /// A new prompt waits for its prefill: the report on screen is the old request's,
    /// and the next iteration will be a prefill, not a decode step.
    pub prompt_queued: bool,
    /// The reports kept before the newest, oldest first: a prediction about timing reads
    /// several steps, not one.
    pub past: &'a std::collections::VecDeque<Box<StepReport>>,
    /// The attached server's newest poll (`inferlab attach`), none without one.
    pub server: Option<&'a crate::attach::poll::Snapshot>,
}
