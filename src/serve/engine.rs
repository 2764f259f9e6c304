//! The serving engine: one iteration is the scheduler's plan, the runner's forward pass,
//! the scheduler's bookkeeping of the tokens that came out, and a report of it all.

use super::runner::Runner;
use super::scheduler::{Request, Scheduler, ServeConfig};
use super::snapshot::{self, ServeStep};
use super::ReqId;
use super::ServeError;
use crate::model::Model;
use std::time::Instant;

/// A scheduler and a runner over one model.
pub struct ServeEngine {
    pub scheduler: Scheduler,
    runner: Runner,
    /// The engine's clock, seconds: the wall time its own iterations took, plus the waits
    /// for the next arrival while it had nothing to do. Not the wall clock since it
    /// started: in the app an engine shares the machine with the live request and the run
    /// beside it, and waits between iterations for the learner, and none of that is time
    /// its requests spent being served.
    clock_s: f64,
    /// The part of `clock_s` spent waiting for arrivals with nothing to do.
    idle_s: f64,
}

impl ServeEngine {
    /// An engine over `model` with `requests` (ids must be 0..n in order).
    pub fn new(
        model: &Model,
        cfg: ServeConfig,
        requests: Vec<Request>,
    ) -> Result<Self, ServeError> {
        // The scheduler validates the settings the runner sizes its stores from.
        let scheduler = Scheduler::new(cfg, requests, model.cfg.context)?;
        Ok(Self {
            runner: Runner::new(model, &scheduler.cfg)?,
            scheduler,
            clock_s: 0.0,
            idle_s: 0.0,
        })
    }

    /// Runs one iteration. With nothing running or queued and a request still to come by
    /// the clock, the engine first waits for it: its clock jumps to that arrival.
    pub fn step(&mut self) -> Result<ServeStep, ServeError> {
        if let Some(due) = self.scheduler.idle_until() {
            self.idle_s += (due - self.clock_s).max(0.0);
            self.clock_s = self.clock_s.max(due);
        }
        let t0 = Instant::now();
        let plan = self.scheduler.schedule(self.clock_s)?;
        let (tokens, traffic) = self.runner.run(&plan)?;
        let eos = self.runner.model().tokenizer.eos;
        // The tokens come out when the pass is done.
        let out_s = self.clock_s + t0.elapsed().as_secs_f64();
        let finished = self.scheduler.postprocess(&plan, &tokens, eos, out_s);
        // Finished requests' contiguous stores go now, not at the next iteration.
        self.runner.release(&finished);
        let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
        self.clock_s += wall_ms / 1e3;
        Ok(snapshot::step(
            &self.scheduler,
            &plan,
            &finished,
            self.bytes_per_token(),
            wall_ms,
            traffic,
        ))
    }

    /// The engine's clock, seconds (what timed arrivals are due by): its iterations' wall
    /// time and its idle waits since it started.
    pub fn clock_s(&self) -> f64 {
        self.clock_s
    }

    /// Seconds of the clock spent idle, waiting for the next arrival.
    pub fn idle_s(&self) -> f64 {
        self.idle_s
    }

    /// KV bytes of one token under the model's layout.
    fn bytes_per_token(&self) -> usize {
        self.runner.model().kv_bytes_per_token()
    }

    /// The engine's settings.
    pub fn cfg(&self) -> &ServeConfig {
        &self.scheduler.cfg
    }

    /// Every request, in id order.
    pub fn requests(&self) -> &[Request] {
        &self.scheduler.requests
    }

    /// Whether request `id` has arrived by now.
    pub fn has_arrived(&self, id: ReqId) -> bool {
        self.scheduler.has_arrived(id)
    }

    /// True when every request has finished or been rejected.
    pub fn done(&self) -> bool {
        self.scheduler.done()
    }

    /// Running requests, in admission order.
    pub fn running(&self) -> &[ReqId] {
        self.scheduler.running()
    }

    /// Waiting requests, head first.
    pub fn queue(&self) -> Vec<ReqId> {
        self.scheduler.queue()
    }

    /// Preemptions so far.
    pub fn preemptions(&self) -> usize {
        self.scheduler.preemptions
    }

    /// Rows run for already finished requests (static batching's padding) so far.
    pub fn padding_rows(&self) -> usize {
        self.scheduler.padding_rows
    }

    /// Iterations run so far.
    pub fn iteration(&self) -> usize {
        self.scheduler.iteration
    }

    /// Token slots the KV memory really has (whole pages for the paged pool).
    pub fn capacity_tokens(&self) -> usize {
        self.scheduler.cfg.capacity_tokens()
    }

    /// Checks the KV memory's invariants.
    #[cfg(any(test, feature = "testing"))]
    pub fn check_pool(&self) -> Result<(), crate::kv::pool::KvError> {
        self.scheduler.check_memory()
    }

    /// Free pages (paged) or unreserved slots (contiguous).
    pub fn free_capacity(&self) -> usize {
        self.scheduler.free_capacity()
    }
}
