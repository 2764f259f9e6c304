//! llama.cpp's `/slots`, read into the active set our own timeline draws: per poll, which
//! requests hold a slot and whether they are still reading their prompt or decoding.
//! Polls are a few a second, not one per decode call, so a column is a poll: a request
//! shorter than a poll interval can fall between two columns.

use crate::serve::ReqPhase;
use std::collections::{HashMap, VecDeque};

/// One slot as `/slots` gives it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slot {
    pub busy: bool,
    /// The task (request) it serves while busy.
    pub task: Option<i64>,
    /// Tokens it has generated for that task: 0 while it still reads the prompt.
    pub decoded: u64,
}

/// Reads `/slots` (llama.cpp), or nothing from an answer that is not that list.
pub fn parse(text: &str) -> Vec<Slot> {
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let Some(list) = v.as_array() else {
        return Vec::new();
    };
    list.iter()
        .map(|s| {
            // Builds differ: `next_token` is one object or a list of one.
            let next = match &s["next_token"] {
                serde_json::Value::Array(a) => a.first().cloned().unwrap_or_default(),
                other => other.clone(),
            };
            let busy = s["is_processing"].as_bool().unwrap_or(false);
            Slot {
                busy,
                task: s["id_task"].as_i64().filter(|t| busy && *t >= 0),
                decoded: next["n_decoded"].as_u64().unwrap_or(0),
            }
        })
        .collect()
}

/// The server's active set over the polls, as rows of our timeline: each task gets a row
/// id (0, 1, 2, … in the order they were first seen), a column per poll.
#[derive(Debug, Clone, Default)]
pub struct ActiveSet {
    pub columns: VecDeque<Vec<(u64, ReqPhase)>>,
    rows: HashMap<i64, u64>,
    /// The tasks of the last column, to mark those gone since as finished.
    last: Vec<i64>,
}

impl ActiveSet {
    /// Adds the column of one poll's slots, keeping the newest `keep` columns.
    pub fn push(&mut self, slots: &[Slot], keep: usize) {
        let mut column = Vec::new();
        let mut now = Vec::new();
        for s in slots {
            let Some(task) = s.task else { continue };
            let next = self.rows.len() as u64;
            let row = *self.rows.entry(task).or_insert(next);
            let phase = match s.decoded {
                0 => ReqPhase::Prefill,
                _ => ReqPhase::Decode,
            };
            column.push((row, phase));
            now.push(task);
        }
        for gone in self.last.iter().filter(|t| !now.contains(t)) {
            column.push((self.rows[gone], ReqPhase::Finished));
        }
        column.sort_by_key(|c| c.0);
        self.last = now;
        self.columns.push_back(column);
        while self.columns.len() > keep {
            self.columns.pop_front();
        }
    }

    /// Requests seen so far.
    pub fn requests(&self) -> usize {
        self.rows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_become_rows_that_prefill_decode_and_finish() {
        let text = r#"[{"id":0,"id_task":17,"is_processing":true,"next_token":[{"n_decoded":0}]},
                       {"id":1,"id_task":-1,"is_processing":false,"next_token":{"n_decoded":5}}]"#;
        let slots = parse(text);
        assert_eq!(slots.len(), 2);
        assert_eq!(slots[0].task, Some(17));
        assert_eq!(slots[1].task, None);
        let mut a = ActiveSet::default();
        a.push(&slots, 3);
        let decoding = [Slot {
            busy: true,
            task: Some(17),
            decoded: 4,
        }];
        a.push(&decoding, 3);
        a.push(&[], 3);
        a.push(&[], 3);
        let cols: Vec<_> = a.columns.iter().cloned().collect();
        assert_eq!(
            cols,
            vec![
                vec![(0, ReqPhase::Decode)],
                vec![(0, ReqPhase::Finished)],
                vec![]
            ]
        );
        assert_eq!(a.requests(), 1);
        assert!(parse("<html>").is_empty());
    }
}
