//! A real server attached to the app: the collector thread ([`crate::attach::poll`])
//! sends a snapshot per poll and the load thread an outcome per request; the event loop
//! keeps the newest of each in [`AttachView`] on the app, which the server pane draws.
//! Nothing here waits on the network.

use crate::attach::http::Base;
use crate::attach::poll::{self, Snapshot};
use crate::attach::{load, LoadSummary};
use crate::serve::Request;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Duration;

/// What the app knows of the attached server: its newest snapshot and our load's outcomes.
#[derive(Debug, Clone)]
pub struct AttachView {
    pub snap: Snapshot,
    /// Requests `--rate` planned, their rate, and their outcomes so far.
    pub load: Option<(usize, f64, Vec<load::Outcome>)>,
}

impl AttachView {
    /// What our load has seen so far, when we send one.
    pub fn load_summary(&self) -> Option<LoadSummary> {
        self.load.as_ref().map(|(n, _, o)| LoadSummary::of(*n, o))
    }
}

/// A server to attach to: its URL, and the requests to send it with their rate.
#[derive(Debug, Clone)]
pub struct Attach {
    pub base: Base,
    pub plan: Option<(Vec<Request>, f64)>,
}

/// The threads' ends the event loop reads; dropping it stops them within a poll.
pub struct Feed {
    snaps: Receiver<Snapshot>,
    outcomes: Receiver<load::Outcome>,
    stop: Arc<AtomicBool>,
}

impl Feed {
    /// Starts polling `a.base` four times a second, and sending its load if it has one.
    pub fn start(a: Attach) -> (Self, AttachView) {
        let stop = Arc::new(AtomicBool::new(false));
        let (stx, snaps) = mpsc::channel();
        poll::spawn(
            a.base.clone(),
            Duration::from_millis(250),
            stop.clone(),
            stx,
        );
        let (ltx, outcomes) = mpsc::channel();
        let mut view = AttachView {
            snap: poll::Poller::new(a.base.as_str()).snap,
            load: None,
        };
        if let Some((reqs, rate)) = a.plan {
            view.load = Some((reqs.len(), rate, Vec::new()));
            load::spawn(a.base, reqs, stop.clone(), ltx);
        }
        let feed = Self {
            snaps,
            outcomes,
            stop,
        };
        (feed, view)
    }

    /// Takes in what came since the last frame: the newest snapshot of a burst and every
    /// outcome. True when a new snapshot came (it may grade a prediction).
    pub fn absorb(&self, view: &mut AttachView) -> bool {
        if let Some((_, _, outcomes)) = &mut view.load {
            outcomes.extend(self.outcomes.try_iter());
        }
        match self.snaps.try_iter().last() {
            Some(s) => {
                view.snap = s;
                true
            }
            None => false,
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        // The threads see this within a poll and end; nothing waits for them.
        self.stop.store(true, Ordering::Relaxed);
    }
}
