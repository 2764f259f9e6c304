//! The live request's tokens under a second head layout, stepped with it: the next-token
//! distribution of the same position under MHA, GQA or MQA, side by side. The second
//! session never picks its own tokens: it follows the live request's, so what differs is
//! the layout alone.

use crate::model::session::Session;
use crate::model::{Model, RunOptions, SamplerConfig};
use crate::report::BesideReport;

/// The second session and how often it agreed with the live one.
pub(super) struct Beside {
    session: Session,
    compared: usize,
    agreed: usize,
}

impl Beside {
    /// A session under `run` on the live session's tokens. When the live one has run, the
    /// tokens it fed are prefilled at once, so the first view is of the same next
    /// position; otherwise both prefill the prompt at the next step.
    pub(super) fn start(
        base: &Model,
        run: RunOptions,
        live: &Session,
        max_new: usize,
    ) -> Result<(Self, Option<BesideReport>), super::WorkerError> {
        let model = base.with_run(run)?;
        let started = live.step > 0;
        let mut tokens = live.tokens.clone();
        let took = if started { tokens.pop() } else { None };
        let mut session = Session::new(&model, tokens, max_new.max(1), SamplerConfig::default());
        session.prompt_len = live.prompt_len;
        session.top_k = live.top_k;
        let mut b = Self {
            session,
            compared: 0,
            agreed: 0,
        };
        let view = match took {
            Some(id) => Some(b.step(id)?),
            None => None,
        };
        Ok((b, view))
    }

    /// Runs the position the live request just ran; `took` is the token it took there,
    /// which this session then feeds too.
    pub(super) fn step(&mut self, took: u32) -> Result<BesideReport, super::WorkerError> {
        let info = self.session.step()?;
        self.compared += 1;
        if info.top_k.first().map(|t| t.id) == Some(took) {
            self.agreed += 1;
        }
        self.session.follow(took);
        Ok(BesideReport {
            layout: info.layout,
            top_k: info.top_k,
            kv_bytes: self.session.kv.len() * self.session.kv.bytes_per_token(),
            compared: self.compared,
            agreed: self.agreed,
        })
    }
}
