//! The output, decided once: the text so far, what the step took, and the next-token
//! distribution it took it from, one bar per candidate. The output pane and
//! `export --pane output` draw the same bars, so a sampled step shows the probabilities
//! the sampler drew with in both.

use crate::report::StepReport;

/// One candidate next token.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub token: String,
    /// The model's probability, clamped to 0..=1 (a recording is untrusted).
    pub prob: f32,
    /// When sampling: the probability the sampler drew with (after temperature and top-p).
    pub drawn: Option<f32>,
    /// The token the step took.
    pub chosen: bool,
}

impl Bar {
    /// The bar's length as a share of the full width: what the step drew with.
    pub fn share(&self) -> f32 {
        self.drawn.unwrap_or(self.prob)
    }

    /// The bar's figures: the model's percentage, and where sampling changed it, the
    /// sampler's.
    pub fn figures(&self) -> String {
        match self.drawn {
            Some(d) => format!("{:>5.1}% →{:>5.1}%", 100.0 * self.prob, 100.0 * d),
            None => format!("{:>5.1}%", 100.0 * self.prob),
        }
    }
}

/// What the output shows for one report.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputView {
    /// The prompt, then the answer so far.
    pub text: String,
    /// What the step took, and how.
    pub head: String,
    pub bars: Vec<Bar>,
}

impl OutputView {
    /// The output of report `r`.
    pub fn new(r: &StepReport) -> Self {
        let sampling = r.info.sampler.temperature > 0.0;
        // A prefill is named as one, not as "step 0"; a toggle's recompute of the whole
        // sequence as what it is.
        let step = match r.info.phase {
            _ if r.recomputed => "the recompute".to_string(),
            crate::model::session::Phase::Prefill => "prefill".to_string(),
            crate::model::session::Phase::Decode => format!("step {}", r.info.step),
        };
        let head = if sampling {
            format!(
                "{step} drew {:?} · model % → drawn % ({})",
                r.info.token,
                r.info.sampler.describe()
            )
        } else {
            format!("{step} took {:?} (greedy)", r.info.token)
        };
        let unit = |p: f32| {
            if p.is_finite() {
                p.clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        let bars = r
            .info
            .top_k
            .iter()
            .map(|t| Bar {
                token: t.token.clone(),
                prob: unit(t.prob),
                drawn: sampling.then_some(unit(t.drawn)),
                chosen: t.id == r.info.token_id,
            })
            .collect();
        Self {
            text: format!("> {}\n{}", r.prompt, r.generated),
            head,
            bars,
        }
    }
}
