//! The attention-sink experiment: perplexity of the shipped text read token by token with
//! the full cache, with a sliding window that evicts the oldest pages, and with the same
//! window that always keeps the first page.

use crate::kv::window::Windowed;
use crate::kv::KvStore;
use crate::model::{Logits, Model};
use anyhow::Result;
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

/// Runs the three configurations on `tokens`.
pub fn run(model: &Model, tokens: &[u32], window: usize, page_size: usize) -> Result<SinkReport> {
    anyhow::ensure!(
        tokens.len() > window + page_size,
        "the text ({} tokens) must be longer than the window ({window}) plus a page",
        tokens.len()
    );
    let cfg = &model.cfg;
    let new_window = |sink: bool| {
        Windowed::new(
            cfg.n_layer,
            model.kv_heads(),
            cfg.head_dim,
            window,
            page_size,
            sink,
            &model.device,
        )
        .map_err(anyhow::Error::msg)
    };
    let mut full = model.new_cache(tokens.len());
    let mut full_fig = read(model, tokens, &mut full, window)?;
    full_fig.cached_tokens = full.len();
    let mut w = new_window(false)?;
    let w_fig = read(model, tokens, &mut w, window)?;
    let mut ws = new_window(true)?;
    let ws_fig = read(model, tokens, &mut ws, window)?;
    let fix = |mut f: SinkFigures, kv: &Windowed| {
        f.evicted_pages = kv.evicted_pages;
        f.cached_tokens = kv.positions.len();
        f
    };
    Ok(SinkReport {
        text_tokens: tokens.len(),
        window_tokens: window,
        page_size,
        full: full_fig,
        window: fix(w_fig, &w),
        window_sink: fix(ws_fig, &ws),
    })
}

/// Reads the text one token at a time, adding up the negative log-likelihood of each next
/// token.
fn read(model: &Model, tokens: &[u32], kv: &mut dyn KvStore, window: usize) -> Result<SinkFigures> {
    let (mut nll, mut n, mut nll_after, mut n_after) = (0f64, 0usize, 0f64, 0usize);
    for i in 0..tokens.len() - 1 {
        let logits = model.forward(&tokens[i..i + 1], kv, None, Logits::Last)?;
        let row = Model::last_logits(&logits)?;
        let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let z: f64 = row.iter().map(|&x| ((x - mx) as f64).exp()).sum();
        let lp = (row[tokens[i + 1] as usize] - mx) as f64 - z.ln();
        nll -= lp;
        n += 1;
        // Positions past the window: the windowed caches have evicted by now.
        if i + 1 > window {
            nll_after -= lp;
            n_after += 1;
        }
    }
    Ok(SinkFigures {
        perplexity: (nll / n as f64).exp(),
        perplexity_after_eviction: (nll_after / n_after.max(1) as f64).exp(),
        evicted_pages: 0,
        cached_tokens: 0,
    })
}
