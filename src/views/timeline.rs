//! The batching timeline, decided once: a row per request, a column per iteration, each
//! cell the request's phase as the scheduler reported it, and what each phase is called.

use crate::serve::ReqPhase;
use std::collections::VecDeque;

/// Every phase with its one-character glyph and its name, in legend order.
pub const PHASES: [(ReqPhase, char, &str); 7] = [
    (ReqPhase::Prefill, 'P', "prefill"),
    (ReqPhase::Decode, '█', "decode"),
    (ReqPhase::Padding, '░', "pad"),
    (ReqPhase::Finished, '✓', "done"),
    (ReqPhase::Waiting, '·', "wait"),
    (ReqPhase::Preempted, 'x', "preempt"),
    (ReqPhase::Rejected, '!', "rejected"),
];

/// A phase as one terminal character.
pub fn glyph(p: ReqPhase) -> char {
    PHASES.iter().find(|x| x.0 == p).map_or('?', |x| x.1)
}

/// The newest `cols` columns of a timeline (all of it when it is shorter).
pub fn window(
    t: &VecDeque<Vec<(u64, ReqPhase)>>,
    cols: usize,
) -> impl Iterator<Item = &Vec<(u64, ReqPhase)>> {
    t.iter().skip(t.len().saturating_sub(cols))
}

/// Requests in the timeline (ids run from 0).
pub fn requests(t: &VecDeque<Vec<(u64, ReqPhase)>>) -> usize {
    t.iter()
        .flat_map(|c| c.iter().map(|(id, _)| *id + 1))
        .max()
        .unwrap_or(0) as usize
}

/// The most requests running (prefill or decode) in one iteration.
pub fn peak_active(t: &VecDeque<Vec<(u64, ReqPhase)>>) -> usize {
    t.iter()
        .map(|c| {
            c.iter()
                .filter(|(_, p)| matches!(p, ReqPhase::Prefill | ReqPhase::Decode))
                .count()
        })
        .max()
        .unwrap_or(0)
}
