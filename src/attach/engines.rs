//! What each serving engine calls the figures our serving panes show: the running and
//! waiting requests, KV use, preemptions, token counters, and latency histograms. A
//! reading keeps the metric it came from, so the screen can say so. Names that changed
//! between versions are listed newest first.

use super::prom::{Exposition, Histogram};

/// The kind of server a `/metrics` text came from, told by its metric names' prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    LlamaCpp,
    Vllm,
    Sglang,
    Unknown,
}

impl Server {
    /// The server that wrote `e`: the first of the known prefixes any sample carries.
    pub fn detect(e: &Exposition) -> Self {
        let has = |p: &str| e.samples.iter().any(|s| s.name.starts_with(p));
        if has("llamacpp:") {
            Server::LlamaCpp
        } else if has("vllm:") {
            Server::Vllm
        } else if has("sglang:") {
            Server::Sglang
        } else {
            Server::Unknown
        }
    }

    /// Its name for people.
    pub fn name(self) -> &'static str {
        match self {
            Server::LlamaCpp => "llama.cpp server",
            Server::Vllm => "vLLM",
            Server::Sglang => "SGLang",
            Server::Unknown => "unknown server",
        }
    }

    /// The prefix its own metrics carry.
    fn prefix(self) -> &'static str {
        match self {
            Server::LlamaCpp => "llamacpp:",
            Server::Vllm => "vllm:",
            Server::Sglang => "sglang:",
            Server::Unknown => "",
        }
    }

    /// Which metric names (newest first) hold each figure on this server.
    fn names(self) -> Names {
        match self {
            Server::LlamaCpp => Names {
                running: &["llamacpp:requests_processing"],
                waiting: &["llamacpp:requests_deferred"],
                // Older builds had it as a ratio; b11549 no longer exposes KV use.
                kv_used: &["llamacpp:kv_cache_usage_ratio"],
                preemptions: &[],
                generated: &["llamacpp:tokens_predicted_total"],
                prompt: &["llamacpp:prompt_tokens_total"],
                decode_calls: &["llamacpp:n_decode_total"],
                busy_per_decode: &["llamacpp:n_busy_slots_per_decode"],
                step_tokens: &[],
                ttft: &[],
                itl: &[],
            },
            Server::Vllm => Names {
                running: &["vllm:num_requests_running"],
                waiting: &["vllm:num_requests_waiting"],
                kv_used: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
                preemptions: &["vllm:num_preemptions_total", "vllm:num_preemptions"],
                generated: &["vllm:generation_tokens_total"],
                prompt: &["vllm:prompt_tokens_total"],
                decode_calls: &[],
                busy_per_decode: &[],
                step_tokens: &["vllm:iteration_tokens_total"],
                ttft: &["vllm:time_to_first_token_seconds"],
                itl: &[
                    "vllm:inter_token_latency_seconds",
                    "vllm:time_per_output_token_seconds",
                ],
            },
            Server::Sglang => Names {
                running: &["sglang:num_running_reqs"],
                waiting: &["sglang:num_queue_reqs"],
                kv_used: &["sglang:token_usage"],
                preemptions: &["sglang:num_retracted_reqs"],
                generated: &["sglang:generation_tokens_total"],
                prompt: &["sglang:prompt_tokens_total"],
                decode_calls: &[],
                busy_per_decode: &[],
                step_tokens: &[],
                ttft: &["sglang:time_to_first_token_seconds"],
                itl: &[
                    "sglang:inter_token_latency_seconds",
                    "sglang:time_per_output_token_seconds",
                ],
            },
            Server::Unknown => Names::default(),
        }
    }
}

/// Candidate metric names for each figure.
#[derive(Default)]
struct Names {
    running: &'static [&'static str],
    waiting: &'static [&'static str],
    kv_used: &'static [&'static str],
    preemptions: &'static [&'static str],
    generated: &'static [&'static str],
    prompt: &'static [&'static str],
    decode_calls: &'static [&'static str],
    busy_per_decode: &'static [&'static str],
    step_tokens: &'static [&'static str],
    ttft: &'static [&'static str],
    itl: &'static [&'static str],
}

impl Names {
    fn all(&self) -> impl Iterator<Item = &'static str> + '_ {
        [
            self.running,
            self.waiting,
            self.kv_used,
            self.preemptions,
            self.generated,
            self.prompt,
            self.decode_calls,
            self.busy_per_decode,
            self.step_tokens,
            self.ttft,
            self.itl,
        ]
        .into_iter()
        .flatten()
        .copied()
    }
}

/// A value and the metric it was read from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub value: f64,
    pub metric: &'static str,
}

/// A histogram and the metric it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct HistReading {
    pub hist: Histogram,
    pub metric: &'static str,
}

/// One `/metrics` text, mapped onto the figures the panes show. Counters are totals since
/// the server started; the poller turns them into rates.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauges {
    pub server: Server,
    pub running: Option<Reading>,
    pub waiting: Option<Reading>,
    /// KV cache in use, percent (every engine reports a 0–1 fraction).
    pub kv_used_pct: Option<Reading>,
    pub preemptions_total: Option<Reading>,
    pub generated_total: Option<Reading>,
    pub prompt_total: Option<Reading>,
    pub decode_calls_total: Option<Reading>,
    /// llama.cpp's average busy slots per `llama_decode()` since it started.
    pub busy_per_decode_avg: Option<Reading>,
    /// Tokens per engine step (vLLM).
    pub step_tokens: Option<HistReading>,
    pub ttft: Option<HistReading>,
    pub itl: Option<HistReading>,
    /// The server's own metrics that no figure reads, sorted, one per family.
    pub unmapped: Vec<String>,
    /// Histograms that were there but did not add up: (metric, why).
    pub broken: Vec<String>,
}

impl Gauges {
    /// Maps `e` for the server it came from.
    pub fn read(e: &Exposition) -> Self {
        let server = Server::detect(e);
        let n = server.names();
        let first = |names: &'static [&'static str]| {
            names
                .iter()
                .find_map(|&m| e.total(m).map(|value| Reading { value, metric: m }))
        };
        let mut broken = Vec::new();
        let mut hist = |names: &'static [&'static str]| {
            names.iter().find_map(|&m| match e.histogram(m)? {
                Ok(hist) => Some(HistReading { hist, metric: m }),
                Err(why) => {
                    broken.push(why.to_string());
                    None
                }
            })
        };
        let (step_tokens, ttft, itl) = (hist(n.step_tokens), hist(n.ttft), hist(n.itl));
        Self {
            server,
            running: first(n.running),
            waiting: first(n.waiting),
            kv_used_pct: first(n.kv_used).map(|r| Reading {
                value: 100.0 * r.value,
                ..r
            }),
            preemptions_total: first(n.preemptions),
            generated_total: first(n.generated),
            prompt_total: first(n.prompt),
            decode_calls_total: first(n.decode_calls),
            busy_per_decode_avg: first(n.busy_per_decode),
            step_tokens,
            ttft,
            itl,
            unmapped: unmapped(e, server, &n),
            broken,
        }
    }
}

/// The metric families of `e` that no figure reads: for an unknown server every family,
/// for a known one its own prefix's.
fn unmapped(e: &Exposition, server: Server, n: &Names) -> Vec<String> {
    let mapped: Vec<&str> = n.all().collect();
    // A histogram's or summary's samples carry suffixes its family name does not.
    let family = |name: &str| {
        ["_bucket", "_sum", "_count", "_created"]
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .find(|f| {
                e.types
                    .get(*f)
                    .is_some_and(|t| t == "histogram" || t == "summary")
            })
            .unwrap_or(name)
            .to_string()
    };
    let mut out: Vec<String> = e
        .samples
        .iter()
        .filter(|s| s.name.starts_with(server.prefix()))
        .map(|s| family(&s.name))
        .filter(|f| !mapped.contains(&f.as_str()))
        .collect();
    out.sort();
    out.dedup();
    out
}
