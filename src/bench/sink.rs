//! The attention-sink experiment: perplexity of the shipped text read token by token with
//! the full cache, with a sliding window that evicts the oldest pages, and with the same
//! window that always keeps the first page.

use super::Result;
use crate::model::Model;
use crate::sink::SinkRun;
use serde::Serialize;

/// One configuration's result.
#[derive(Debug, Clone, Serialize)]
pub struct SinkFigures {
    pub perplexity: f64,
    /// Perplexity over the tokens read after the first eviction only.
    pub perplexity_after_eviction: f64,
    pub evicted_pages: usize,
    /// Tokens held in the cache at the end.
    pub cached_tokens: usize,
}

/// The three configurations side by side.
#[derive(Debug, Clone, Serialize)]
pub struct SinkReport {
    pub text_tokens: usize,
    pub window_tokens: usize,
    pub page_size: usize,
    pub full: SinkFigures,
    pub window: SinkFigures,
    pub window_sink: SinkFigures,
}

impl SinkReport {
    /// The table for people.
    pub fn table(&self) -> String {
        let mut s = format!(
            "attention sink: {} tokens of assets/eval.txt read one at a time; window {} tokens, pages of {}\n\n{:<26}{:>12}{:>22}{:>10}\n",
            self.text_tokens,
            self.window_tokens,
            self.page_size,
            "cache",
            "perplexity",
            "after first eviction",
            "evicted"
        );
        for (name, f) in [
            ("full", &self.full),
            ("window (oldest evicted)", &self.window),
            ("window + first page kept", &self.window_sink),
        ] {
            s += &format!(
                "{name:<26}{:>12.2}{:>22.2}{:>10}\n",
                f.perplexity, f.perplexity_after_eviction, f.evicted_pages
            );
        }
        s
    }
}

/// Runs the three configurations on `tokens`: the app's live experiment read to the end.
pub fn run(model: &Model, tokens: &[u32], window: usize, page_size: usize) -> Result<SinkReport> {
    let mut r = SinkRun::new(model, tokens.to_vec(), window, page_size)?;
    let mut last = None;
    while !r.done() {
        last = Some(r.step(model)?);
    }
    let lanes = last.map(|v| v.lanes).unwrap_or_default();
    let fig = |i: usize| {
        let l = &lanes[i];
        SinkFigures {
            perplexity: l.perplexity,
            // The text is longer than the window (checked at the start), so this is set.
            perplexity_after_eviction: l.perplexity_after_eviction.unwrap_or(f64::NAN),
            evicted_pages: l.evicted_pages,
            cached_tokens: l.cached_tokens,
        }
    };
    Ok(SinkReport {
        text_tokens: tokens.len(),
        window_tokens: window,
        page_size,
        full: fig(0),
        window: fig(1),
        window_sink: fig(2),
    })
}
