//! A real serving engine beside ours: `inferlab attach URL` reads a running llama.cpp,
//! vLLM or SGLang server's metrics and shows them in our serving words (running and
//! waiting requests, batch per decode step, tokens/s, KV use, TTFT and ITL), each figure
//! naming the metric it came from; `--rate` sends it the same seeded arrivals our own
//! engine serves in `bench serve`, timed by us.
//!
//! - [`prom`]: the Prometheus text format, read.
//! - [`engines`]: each engine's metric names mapped onto our figures.
//! - [`http`]: the network calls, capped and bounded in time.
//! - [`poll`]: the collector thread; [`slots`]: llama.cpp's slots as an active set;
//!   [`load`]: the arrivals sender.

pub mod engines;
pub mod http;
pub mod load;
pub mod poll;
pub mod prom;
pub mod slots;

use crate::serve::latency::Latency;
use crate::serve::Request;
use serde::Serialize;

/// What the requests inferlab sent have seen so far.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadSummary {
    pub planned: usize,
    pub done: usize,
    pub failed: usize,
    /// Tokens streamed back to us.
    pub generated_tokens: usize,
    #[serde(flatten)]
    pub latency: Latency,
    /// The first failure, in words.
    pub first_error: Option<String>,
}

impl LoadSummary {
    /// Over the outcomes so far of `planned` requests.
    pub fn of(planned: usize, outcomes: &[load::Outcome]) -> Self {
        let done: Vec<Request> = outcomes
            .iter()
            .filter(|o| o.error.is_none())
            .map(|o| o.request.clone())
            .collect();
        Self {
            planned,
            done: done.len(),
            failed: outcomes.len() - done.len(),
            generated_tokens: done.iter().map(|r| r.generated.len()).sum(),
            latency: Latency::of(&done),
            first_error: outcomes.iter().find_map(|o| o.error.clone()),
        }
    }
}

/// `attach --headless --json`: what the session saw, for scripts and the end-to-end test.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub url: String,
    pub server: String,
    pub version: Option<String>,
    pub polls: usize,
    pub seconds: f64,
    /// The server's own counters since the attach began, and the metrics they came from.
    pub generated_tokens: Option<f64>,
    pub generated_tokens_metric: Option<&'static str>,
    pub decode_calls: Option<f64>,
    /// Highest running and waiting counts any poll saw.
    pub peak_running: f64,
    pub peak_waiting: f64,
    /// Highest batch per decode step over a poll interval.
    pub peak_batch: f64,
    pub unmapped: Vec<String>,
    pub load: Option<LoadSummary>,
}

impl Summary {
    /// From the last snapshot and what the load saw.
    pub fn of(s: &poll::Snapshot, load: Option<LoadSummary>) -> Self {
        let peak =
            |f: fn(&poll::Point) -> Option<f64>| s.history.iter().filter_map(f).fold(0.0, f64::max);
        Self {
            url: s.url.clone(),
            server: s.server.map_or("none", |v| v.name()).to_string(),
            version: s.version.clone(),
            polls: s.polls,
            seconds: s.since.seconds,
            generated_tokens: s.since.generated.map(|r| r.value),
            generated_tokens_metric: s.since.generated.map(|r| r.metric),
            decode_calls: s.since.decode_calls.map(|r| r.value),
            peak_running: peak(|p| p.running),
            peak_waiting: peak(|p| p.waiting),
            peak_batch: peak(|p| p.batch),
            unmapped: s
                .gauges
                .as_ref()
                .map(|g| g.unmapped.clone())
                .unwrap_or_default(),
            load,
        }
    }
}
