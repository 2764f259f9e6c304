//! The attention-sink experiment, one token at a time: the shipped text is read through
//! three caches side by side — the full cache, a window that evicts its oldest page, and
//! the same window that always keeps the first page (the "sink" of StreamingLLM, Xiao et
//! al. 2023) — so the app can show, per token, what each cache holds and what it costs in
//! next-token probability. `inferlab bench sink` runs the same reader to the end.

use crate::kv::window::Windowed;
use crate::kv::BatchKv;
use crate::model::{Logits, Model, ModelError};
use serde::{Deserialize, Serialize};

/// Why the experiment cannot start or go on.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The text gives the window nothing to evict.
    #[error("the text ({tokens} tokens) must be longer than the window ({window}) plus a page")]
    TextTooShort { tokens: usize, window: usize },
    /// Every prediction the text holds has been scored.
    #[error("the sink experiment has read the whole text")]
    Finished,
    /// The window's settings were refused.
    #[error(transparent)]
    Window(#[from] crate::kv::pool::KvError),
    /// The model failed on a token.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// One cache's state after a token.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SinkLane {
    /// `full`, `window` or `window_sink`.
    pub name: String,
    /// Perplexity over every token predicted so far.
    pub perplexity: f64,
    /// Perplexity over the tokens predicted after the window first filled (none before;
    /// JSON has no NaN, so this is an option rather than a NaN).
    pub perplexity_after_eviction: Option<f64>,
    /// Probability this cache gave the text's actual next token.
    pub p_next: f32,
    /// The most likely next tokens under this cache: (piece, probability).
    pub top: Vec<(String, f32)>,
    /// Page index (position / page size) of every page the cache still holds.
    pub kept_pages: Vec<usize>,
    pub cached_tokens: usize,
    pub evicted_pages: usize,
}

impl SinkLane {
    /// The after-eviction perplexity as the pane and the picture print it: "—" before
    /// the window first fills.
    pub fn after_eviction_label(&self) -> String {
        match self.perplexity_after_eviction {
            Some(p) => format!("{p:.2}"),
            None => "—".into(),
        }
    }
}

/// The experiment after one more token, as the app draws it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SinkView {
    /// Tokens read so far.
    pub pos: usize,
    pub text_tokens: usize,
    pub window: usize,
    pub page_size: usize,
    /// The token just read and the one the lanes tried to predict.
    pub token: String,
    pub next: String,
    pub lanes: Vec<SinkLane>,
    pub done: bool,
}

/// Running negative log-likelihood of one lane.
#[derive(Default, Clone, Copy)]
struct Nll {
    sum: f64,
    n: usize,
    sum_after: f64,
    n_after: usize,
}

impl Nll {
    /// Scores one prediction, `log p(next)`; `after` when the window has begun evicting.
    fn add(&mut self, lp: f64, after: bool) {
        self.sum -= lp;
        self.n += 1;
        if after {
            self.sum_after -= lp;
            self.n_after += 1;
        }
    }

    fn ppl(s: f64, n: usize) -> Option<f64> {
        (n > 0).then(|| (s / n as f64).exp())
    }
}

/// The three caches reading the same text.
pub struct SinkRun {
    tokens: Vec<u32>,
    pos: usize,
    window: usize,
    page_size: usize,
    full: crate::kv::Contiguous,
    windows: [Windowed; 2],
    nll: [Nll; 3],
    /// The last step's view: a finished run keeps showing its results.
    last: Option<SinkView>,
}

/// Lane names, in order.
pub const LANES: [&str; 3] = ["full", "window", "window_sink"];

impl SinkRun {
    /// Readers for `tokens` with a window of `window` tokens evicting `page_size` at a time.
    pub fn new(
        model: &Model,
        tokens: Vec<u32>,
        window: usize,
        page_size: usize,
    ) -> Result<Self, SinkError> {
        if tokens.len() <= window + page_size {
            return Err(SinkError::TextTooShort {
                tokens: tokens.len(),
                window,
            });
        }
        let (cfg, shape) = (&model.cfg, (model.kv_heads(), model.cfg.head_dim));
        // The batched route keeps all three caches in slot tensors.
        let batched = model.run_options().route == crate::model::AttnRoute::Batched;
        let w = |sink| {
            if batched {
                let sizes = (window, page_size);
                return Windowed::on_slots(cfg.n_layer, shape, sizes, sink, &model.device);
            }
            Windowed::new(
                cfg.n_layer,
                shape.0,
                shape.1,
                window,
                page_size,
                sink,
                &model.device,
            )
        };
        // f32 like the windows: the experiment varies which rows are kept, not how
        // precisely, whatever the app's caches store.
        let (f32, len) = (crate::kv::KvElem::F32, tokens.len().min(cfg.context));
        let full = match batched {
            true => crate::kv::Contiguous::on_slots(cfg.n_layer, shape, len, f32, &model.device)
                .map_err(|e| crate::kv::pool::KvError::BadSettings(e.to_string()))?,
            false => {
                crate::kv::Contiguous::new(cfg.n_layer, shape.0, shape.1, len, f32, &model.device)
            }
        };
        Ok(Self {
            full,
            windows: [w(false)?, w(true)?],
            tokens,
            pos: 0,
            window,
            page_size,
            nll: [Nll::default(); 3],
            last: None,
        })
    }

    /// The newest step's view, if a step has run: what a finished run goes on showing.
    pub fn last(&self) -> Option<&SinkView> {
        self.last.as_ref()
    }

    /// The text has been read to its last prediction.
    pub fn done(&self) -> bool {
        self.pos + 1 >= self.tokens.len()
    }

    /// What cache `k` (0 the full one, then the windows) holds after reading position `i`:
    /// the pages it keeps, the tokens it caches and the pages it has evicted.
    fn held(&self, k: usize, i: usize) -> (Vec<usize>, usize, usize) {
        if k == 0 {
            return ((0..=i / self.page_size).collect(), self.full.len(), 0);
        }
        let w = &self.windows[k - 1];
        let mut pages: Vec<usize> = w.positions.iter().map(|p| p / self.page_size).collect();
        pages.dedup();
        (pages, w.positions.len(), w.evicted_pages)
    }

    /// Reads one token through all three caches and scores their prediction of the next.
    pub fn step(&mut self, model: &Model) -> Result<SinkView, SinkError> {
        if self.done() {
            return Err(SinkError::Finished);
        }
        let i = self.pos;
        let (tok, next) = (self.tokens[i], self.tokens[i + 1] as usize);
        let after = i + 1 > self.window;
        let mut lanes = Vec::with_capacity(3);
        for (k, name) in LANES.iter().enumerate() {
            let kv: &mut dyn BatchKv = match k {
                0 => &mut self.full,
                1 => &mut self.windows[0],
                _ => &mut self.windows[1],
            };
            let logits = model.forward(&[tok], kv, Logits::Last)?;
            let (lp, top) = lane_figures(model, &logits, next)?;
            self.nll[k].add(lp, after);
            let s = self.nll[k];
            let (kept, cached, evicted) = self.held(k, i);
            lanes.push(SinkLane {
                name: name.to_string(),
                // At least one token has been scored by now.
                perplexity: Nll::ppl(s.sum, s.n).unwrap_or(f64::NAN),
                perplexity_after_eviction: Nll::ppl(s.sum_after, s.n_after),
                p_next: lp.exp() as f32,
                top,
                kept_pages: kept,
                cached_tokens: cached,
                evicted_pages: evicted,
            });
        }
        self.pos += 1;
        let view = SinkView {
            pos: self.pos,
            text_tokens: self.tokens.len(),
            window: self.window,
            page_size: self.page_size,
            token: model.tokenizer.piece(tok),
            next: model.tokenizer.piece(next as u32),
            lanes,
            done: self.done(),
        };
        self.last = Some(view.clone());
        Ok(view)
    }
}

/// What a lane shows of one prediction: log p(`next`), the text's next token, and its three
/// most likely tokens. On the batched route the device works them out and sends back
/// those few numbers; on the host route the logits come back.
fn lane_figures(
    model: &Model,
    logits: &candle_core::Tensor,
    next: usize,
) -> Result<(f64, Vec<(String, f32)>), SinkError> {
    let piece = |(id, p): (u32, f32)| (model.tokenizer.piece(id), p);
    if model.run_options().route == crate::model::AttnRoute::Batched {
        let at = |e: candle_core::Error| SinkError::Model(e.into());
        let last = logits
            .narrow(0, logits.dim(0).map_err(at)? - 1, 1)
            .map_err(at)?;
        let (lp, top) = crate::model::sample_on_device::log_probs_and_top(&last, &[next as u32], 3)
            .map_err(at)?;
        return Ok((f64::from(lp[0]), top.into_iter().map(piece).collect()));
    }
    let row = Model::last_logits(logits)?;
    let probs = crate::model::sampler::softmax(&row, 1.0);
    let top = top3(&probs)
        .into_iter()
        .map(|t| piece((t as u32, probs[t])));
    Ok((log_prob(&row, next), top.collect()))
}

/// log p(`next`) under `logits`, in f64 (a log-sum-exp), so rare tokens do not underflow
/// to -inf.
fn log_prob(logits: &[f32], next: usize) -> f64 {
    let mx = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let z: f64 = logits.iter().map(|&x| ((x - mx) as f64).exp()).sum();
    (logits[next] - mx) as f64 - z.ln()
}

/// The three most likely ids, most likely first.
fn top3(probs: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..probs.len()).collect();
    idx.select_nth_unstable_by(3, |&a, &b| probs[b].total_cmp(&probs[a]));
    idx.truncate(3);
    idx.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
    idx
}
