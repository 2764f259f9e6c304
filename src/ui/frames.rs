//! What the screen draws from: the newest report, the earlier ones kept for scrubbing
//! (within a memory bound), and what is derived from them once: the live request's
//! attention rows for the heatmap, and the serving timelines. Scrubbing moves a cursor;
//! the live frame is never moved aside, and the frame at the cursor is built beside it
//! from the reports up to there.

use crate::report::{ServeReport, StepReport};
use crate::serve::ReqPhase;
use std::collections::VecDeque;

/// Iterations of the batching timeline kept for drawing.
pub const TIMELINE: usize = 240;

/// Bytes of attention rows the heatmap history keeps, all layers together. A row of a
/// long context is large (9 heads × 8,000 keys × 2 floats is 576 KB), so the oldest rows
/// give way first.
pub const HISTORY_BYTES: usize = 128 << 20;

/// Retained past reports (for scrubbing), estimated from the captured floats.
pub const MAX_PAST_BYTES: usize = 128 << 20;

/// One serving iteration in the timeline: each request's id and phase.
pub type TimelineColumn = Vec<(u64, ReqPhase)>;

/// Attention rows of the current request for one layer: row `p` holds every head's
/// weights (or scores) of query position `p` over keys `0..=p`.
#[derive(Debug, Clone, Default)]
pub struct LayerHistory {
    /// `rows[p][h]` = weights of head `h` at query position `p`; empty for positions not
    /// captured (a long prompt keeps its newest rows) or dropped to bound memory.
    pub weights: Vec<Vec<Vec<f32>>>,
    pub scores: Vec<Vec<Vec<f32>>>,
    /// Bytes the kept rows hold, and the first position still kept.
    bytes: usize,
    kept_from: usize,
}

impl LayerHistory {
    /// Empties the oldest kept rows until at most `cap` bytes remain (the newest row stays).
    fn trim(&mut self, cap: usize) {
        while self.bytes > cap && self.kept_from + 1 < self.weights.len() {
            let p = self.kept_from;
            let row_bytes: usize = self.weights[p].iter().map(|r| 8 * r.len()).sum();
            self.bytes -= row_bytes;
            self.weights[p] = Vec::new();
            self.scores[p] = Vec::new();
            self.kept_from += 1;
        }
    }
}

/// One frame: a report and what the reports up to it built.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    pub report: Option<Box<StepReport>>,
    /// The request's attention rows, per layer.
    pub history: Vec<LayerHistory>,
    /// The main serving run's timeline, and the run beside it.
    pub timeline: VecDeque<TimelineColumn>,
    pub timeline_compare: VecDeque<TimelineColumn>,
}

impl Frame {
    /// Adds what `r` shows: its attention rows, its serving iterations.
    fn absorb(&mut self, r: &StepReport) {
        absorb_rows(&mut self.history, r);
        push_timeline(&mut self.timeline, r.serve.as_ref());
        push_timeline(&mut self.timeline_compare, r.serve_compare.as_ref());
    }
}

/// The live frame, the reports kept for scrubbing, and the cursor.
#[derive(Debug, Default)]
pub struct Frames {
    live: Frame,
    /// While scrubbing: the index into `past` on screen, and its frame.
    at: Option<(usize, Frame)>,
    /// Every report of the session, oldest first, within [`MAX_PAST_BYTES`].
    past: VecDeque<Box<StepReport>>,
    past_bytes: usize,
    /// Reports dropped from the front of `past` to bound memory.
    dropped: usize,
}

impl Frames {
    /// The frame on screen: the one at the cursor, or the live one.
    pub fn shown(&self) -> &Frame {
        self.at.as_ref().map_or(&self.live, |(_, f)| f)
    }

    /// The report on screen.
    pub fn report(&self) -> Option<&StepReport> {
        self.shown().report.as_deref()
    }

    /// The live report, for what arrives without an iteration (the layout beside).
    pub fn live_report_mut(&mut self) -> Option<&mut StepReport> {
        self.live.report.as_deref_mut()
    }

    /// Every kept report, oldest first.
    pub fn past(&self) -> &VecDeque<Box<StepReport>> {
        &self.past
    }

    /// The index into [`Self::past`] on screen while scrubbing.
    pub fn cursor(&self) -> Option<usize> {
        self.at.as_ref().map(|(i, _)| *i)
    }

    /// A new report: kept, and the live frame built on. Scrubbing ends.
    pub fn push(&mut self, r: Box<StepReport>) {
        self.remember(&r);
        self.at = None;
        self.live.absorb(&r);
        self.live.report = Some(r);
    }

    /// Forgets the live request's attention rows (its tokens run again under a new layout).
    pub fn clear_rows(&mut self) {
        self.live.history.clear();
    }

    /// Forgets the serving timelines (the workload restarted).
    pub fn clear_timelines(&mut self) {
        self.live.timeline.clear();
        self.live.timeline_compare.clear();
    }

    /// Back to the live frame.
    pub fn resume_live(&mut self) {
        self.at = None;
    }

    /// Moves the cursor `delta` iterations through the kept reports; says where it is,
    /// or why it did not move.
    pub fn scrub(&mut self, delta: isize) -> String {
        let n = self.past.len();
        if n == 0 {
            return "no iterations yet".into();
        }
        let live = n - 1;
        let to = self.cursor().unwrap_or(live) as isize + delta;
        if to < 0 {
            return if self.dropped > 0 {
                format!(
                    "start of the retained history ({} older iteration(s) were dropped to bound memory)",
                    self.dropped
                )
            } else {
                "start of the session's history".into()
            };
        }
        let to = to as usize;
        if to >= live {
            let was = self.at.take().is_some();
            return if was {
                "live"
            } else {
                "already at the live iteration"
            }
            .into();
        }
        self.at = Some((to, self.frame_at(to)));
        format!(
            "history: iteration {} ({} of {} kept) · [ ] scrub · space resumes live",
            self.past[to].iteration,
            to + 1,
            n
        )
    }

    /// The frame of `past[to]`: the heatmap rows from its request's prefill on, the
    /// timelines from the last [`TIMELINE`] iterations.
    fn frame_at(&self, to: usize) -> Frame {
        let mut first = to;
        while first > 0 && self.past[first].info.step != 0 {
            first -= 1;
        }
        let mut f = Frame::default();
        for r in self.past.range(first..=to) {
            absorb_rows(&mut f.history, r);
        }
        for r in self.past.range(to.saturating_sub(TIMELINE)..=to) {
            push_timeline(&mut f.timeline, r.serve.as_ref());
            push_timeline(&mut f.timeline_compare, r.serve_compare.as_ref());
        }
        f.report = Some(self.past[to].clone());
        f
    }

    /// Keeps a report for scrubbing, dropping the oldest beyond the memory bound.
    fn remember(&mut self, r: &StepReport) {
        let r = crate::worker::recording::for_screens(r);
        self.past_bytes += report_bytes(&r);
        self.past.push_back(Box::new(r));
        while self.past_bytes > MAX_PAST_BYTES && self.past.len() > 1 {
            if let Some(old) = self.past.pop_front() {
                self.past_bytes -= report_bytes(&old);
                self.dropped += 1;
            }
        }
    }
}

/// Rough bytes one report holds (its captures dominate).
fn report_bytes(r: &StepReport) -> usize {
    let floats: usize = r
        .info
        .captures
        .iter()
        .map(|c| {
            c.q.len() + c.k.len() + c.v.len() + c.scores.len() + c.weights.len() + c.head_out.len()
        })
        .sum();
    // The parts that grow with the session besides the captures: every token's piece,
    // the text, and the serving views' per-request and per-page lists. An estimate on the
    // generous side, so that the cap holds for long sessions whose captures are small.
    let text =
        r.prompt.len() + r.generated.len() + r.pieces.iter().map(|p| p.len() + 24).sum::<usize>();
    let serving: usize = [&r.serve, &r.serve_compare]
        .into_iter()
        .flatten()
        .map(|v| serve_bytes(&v.step) + 16 * v.ttft_ms.len())
        .sum();
    4 * floats + text + serving + 4096
}

/// Heap bytes of one serving iteration's lists, roughly.
fn serve_bytes(s: &crate::serve::ServeStep) -> usize {
    let ids = s.queue.len() + s.finished.len() + s.preempted.len();
    let tables: usize = s.block_tables.iter().map(|(_, t)| 32 + 4 * t.len()).sum();
    128 * s.active.len()
        + 8 * ids
        + 48 * s.pages.len()
        + tables
        + 24 * (s.reservations.len() + s.copies.len() + s.gaps.len())
}

/// Adds one step's attention rows to the request's history (a prefill starts it again).
fn absorb_rows(history: &mut Vec<LayerHistory>, r: &StepReport) {
    if r.info.step == 0 {
        history.clear();
    }
    for c in &r.info.captures {
        if history.len() <= c.layer {
            history.resize_with(c.layer + 1, LayerHistory::default);
        }
        let h = &mut history[c.layer];
        // Rows from pos0 on are (re)computed by this capture; rows before it that were
        // never captured stay empty.
        if h.weights.len() > c.pos0 {
            *h = LayerHistory::default();
        }
        h.weights.resize_with(c.pos0, Vec::new);
        h.scores.resize_with(c.pos0, Vec::new);
        if h.bytes == 0 {
            h.kept_from = c.pos0;
        }
        for i in 0..c.t {
            let row = |v: &[f32]| -> Vec<Vec<f32>> {
                (0..c.n_head)
                    .map(|hh| v[(hh * c.t + i) * c.kv_len..][..c.pos0 + i + 1].to_vec())
                    .collect()
            };
            h.weights.push(row(&c.weights));
            h.scores.push(row(&c.scores));
            h.bytes += 8 * c.n_head * (c.pos0 + i + 1);
        }
    }
    // The cap is shared by the layers holding rows: one focused layer of a long
    // context gets all of it, thirty layers of a short one a thirtieth each.
    let holding = history.iter().filter(|h| h.bytes > 0).count().max(1);
    for h in history.iter_mut() {
        h.trim(HISTORY_BYTES / holding);
    }
}

/// Appends one serving iteration's phases to a timeline, dropping the oldest beyond
/// [`TIMELINE`].
fn push_timeline(t: &mut VecDeque<TimelineColumn>, v: Option<&ServeReport>) {
    let Some(sv) = v else { return };
    // A restarted workload (c, b or s pressed live, or seen in a recording) begins a new
    // timeline: one picture never mixes two runs under one title.
    if sv.step.iteration == 0 {
        t.clear();
    }
    // A request that ran more than one token this iteration was prefilling, even when the
    // prefill finished in it and the scheduler already reports it decoding.
    let mut col: TimelineColumn = sv
        .step
        .active
        .iter()
        .map(|a| match a.phase {
            ReqPhase::Decode if a.scheduled > 1 => (a.id, ReqPhase::Prefill),
            p => (a.id, p),
        })
        .collect();
    // A request preempted in this iteration waits again, but its column says what
    // happened to it: the x the legend promises.
    col.extend(
        sv.step
            .queue
            .iter()
            .map(|&q| match sv.step.preempted.contains(&q) {
                true => (q, ReqPhase::Preempted),
                false => (q, ReqPhase::Waiting),
            }),
    );
    // A finished run's view comes again with every step; it is one column, not many.
    if sv.done && t.back() == Some(&col) {
        return;
    }
    t.push_back(col);
    if t.len() > TIMELINE {
        t.pop_front();
    }
}
