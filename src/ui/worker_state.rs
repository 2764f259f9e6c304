//! What the app knows of the worker thread and asks of it: loading and readiness,
//! failures, the machine's measured limits, the iteration in flight and the ones queued
//! behind it, and the pace of a running session.

/// The worker as the app sees it.
#[derive(Debug, Clone)]
pub struct WorkerState {
    /// Bytes of the model fetched so far, of all, while it downloads.
    pub loading: Option<(u64, u64)>,
    pub model_name: String,
    pub ready: bool,
    /// The worker cannot go on (the model failed to load, or the thread died).
    pub fatal: Option<String>,
    /// A failure that stays in the header until the app exits, and is printed then (a
    /// recording that stopped on a full disk).
    pub alarm: Option<String>,
    /// This machine's measured limits, for the traffic pane (the worker measures them
    /// once, or reads them from `bench machine`'s cache).
    pub machine: Option<crate::machine::Machine>,
    /// How each weight type loaded so far predicts the evaluation text.
    pub scored: Vec<crate::model::eval::Scored>,
    /// The reports come from a recording, not the model.
    pub replaying: bool,
    /// An iteration was asked for and has not answered yet.
    pub in_flight: bool,
    /// Space presses that came while an iteration ran, run one after another.
    pub steps_queued: usize,
    /// A new prompt was sent and its prefill has not run yet.
    pub prompt_queued: bool,
    /// `Apply` commands sent and not yet answered: only the answer to the newest one
    /// says what runs (an older one would take back a change still on its way).
    pub applies_pending: usize,
    /// Iterations run on their own, at `SPEEDS[speed]` per second.
    pub running: bool,
    pub speed: usize,
}

impl Default for WorkerState {
    fn default() -> Self {
        Self {
            loading: None,
            model_name: String::new(),
            ready: false,
            fatal: None,
            alarm: None,
            machine: None,
            scored: Vec::new(),
            replaying: false,
            in_flight: false,
            steps_queued: 0,
            prompt_queued: false,
            applies_pending: 0,
            running: false,
            speed: 2,
        }
    }
}
