//! What a lesson is, as plain data: the parser builds it, the app walks it.

pub use crate::screen::Pane;

/// One lesson file.
#[derive(Debug, Clone, PartialEq)]
pub struct Lesson {
    /// File name without directory, e.g. `03-kv-cache.md`; also the key of saved progress.
    pub file: String,
    pub title: String,
    /// Prose before the first step.
    pub intro: String,
    pub steps: Vec<Step>,
}

impl Lesson {
    /// The progress key: the file name without its number and `.md` (`kv-cache` for
    /// `03-kv-cache.md`), so progress survives lessons being renumbered.
    pub fn id(&self) -> &str {
        lesson_id(&self.file)
    }
}

/// `03-kv-cache.md` → `kv-cache`; a name without a number prefix stays as it is.
pub fn lesson_id(file: &str) -> &str {
    let stem = file.strip_suffix(".md").unwrap_or(file);
    match stem.split_once('-') {
        Some((n, rest)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => rest,
        _ => stem,
    }
}

/// One step: what to read, what the app shows, what to do, what to answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub title: String,
    /// Line of the `## ` heading, 1-based.
    pub line: usize,
    pub prose: String,
    pub set: StepSettings,
    /// A new request for the live model, sent when the step opens.
    pub prompt: Option<String>,
    /// What the user should notice, shown highlighted.
    pub notice: Option<String>,
    /// What the step's text points at: pieces of screen text that must be on screen,
    /// whole, once the step is done (the scripted learner checks them at 80×24, 120×40
    /// and 200×60), and that the panes keep when they are short of rows.
    pub shows: Vec<String>,
    pub task: Option<Task>,
    pub questions: Vec<Question>,
}

pub use super::keys::{AttnKind, StepSettings, Values, DEFAULT_HEADS, DEFAULT_LAYERS};

pub use crate::settings::Compare;

/// Something for the user to do, and how the app notices it is done.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub text: String,
    /// Every condition must hold.
    pub check: Vec<Cond>,
}

/// One condition of a task check: `var op value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cond {
    pub var: Var,
    pub op: Op,
    pub value: CondValue,
}

/// What a check can look at in the live app: a count or fact of the run, or a setting
/// (by its index in [`super::keys::KEYS`], under the key's own name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// Iterations run since the step opened.
    Steps,
    /// Decode steps of the live request run since the step opened.
    DecodeSteps,
    /// Tokens generated for the current request.
    Generated,
    /// The current request reached EOS or its token limit.
    Finished,
    /// Pages the serving run on screen has copied on write so far.
    Copies,
    /// Whether the serving batch's last iteration read more cached tokens than the
    /// crossover, where the KV read passes the weight read (the traffic pane's "past it").
    PastCrossover,
    /// Tokens of the eval text the attention-sink experiment on screen has read.
    SinkTokens,
    /// A setting the live app reads back.
    Key(usize),
}

impl Var {
    /// The counts and facts, with their names in lesson files.
    const COUNTS: [(&'static str, Var); 7] = [
        ("steps", Var::Steps),
        ("decode_steps", Var::DecodeSteps),
        ("generated", Var::Generated),
        ("finished", Var::Finished),
        ("copies", Var::Copies),
        ("past_crossover", Var::PastCrossover),
        ("sink_tokens", Var::SinkTokens),
    ];

    /// Every variable with its name in lesson files: the counts, then every setting a
    /// check can read.
    pub fn all() -> Vec<(&'static str, Var)> {
        let keys = super::keys::KEYS.iter().enumerate();
        let keys = keys.filter(|(_, k)| k.live.is_some());
        let mut out = Self::COUNTS.to_vec();
        out.extend(keys.map(|(i, k)| (k.name, Var::Key(i))));
        out
    }

    /// The variable named `name`.
    pub fn named(name: &str) -> Option<Var> {
        Self::all()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// True for variables compared as numbers.
    pub fn numeric(self) -> bool {
        match self {
            Var::Steps | Var::DecodeSteps | Var::Generated | Var::Copies | Var::SinkTokens => true,
            Var::Finished | Var::PastCrossover => false,
            Var::Key(k) => super::keys::KEYS[k].numeric(),
        }
    }
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Ge,
    Le,
    Gt,
    Lt,
}

impl Op {
    /// Compares two numbers.
    pub fn num(self, a: f64, b: f64) -> bool {
        match self {
            Op::Eq => a == b,
            Op::Ne => a != b,
            Op::Ge => a >= b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Lt => a < b,
        }
    }
}

/// The right-hand side of a condition.
#[derive(Debug, Clone, PartialEq)]
pub enum CondValue {
    Num(f64),
    Word(String),
}

/// A knowledge check.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub line: usize,
    pub text: String,
    pub kind: QuestionKind,
}

/// A fixed multiple-choice question, or a prediction the live app grades.
#[derive(Debug, Clone, PartialEq)]
pub enum QuestionKind {
    Choice(Vec<Choice>),
    Predict(Predict),
}

/// One answer of a multiple-choice question.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub text: String,
    pub right: bool,
    /// Why this answer is right or wrong.
    pub why: String,
}

/// Predictions the app can grade against what the next iteration really does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Predict {
    /// Which earlier position the focused head attends to most in the next decode step.
    TopAttended,
    /// How many KV pages the first active serving request holds after the next iteration.
    PagesNext,
    /// Which waiting request joins the serving active set in the next iteration.
    NextJoin,
    /// In the live request's next step: do the weights or the KV cache make more bytes?
    DominantLive,
    /// The same for the serving batch's next iteration.
    DominantBatch,
    /// How many MB the live request's next step will move in all.
    NextReadMb,
    /// Switched to MHA (by the answer): what the KV bytes per token become.
    KvAfterMha,
    /// Switched to the tiled kernel (by the answer): what the KV bytes per token become.
    KvAfterTiled,
    /// Switched to the contiguous serving cache (by the answer): its KV utilization after
    /// one iteration against the paged cache's now.
    UtilAfterContiguous,
    /// In which part of the stack the next sampled token becomes the logit lens's top
    /// guess for good.
    LensLayer,
    /// Switched to static batching (by the answer): what happens to the row of a batch
    /// member that finishes first. Graded at the first iteration that shows it.
    FinishedRowStatic,
    /// Switched to temperature 1.5 (by the answer): what the sampler then gives the
    /// model's top token, against the model's own probability.
    TopAfterTemperature,
    /// Switched the KV cache off (by the answer): how many times a cached decode step's
    /// FLOPs the next step takes.
    FlopsWithoutCache,
    /// Static and continuous batching side by side: how static's p99 time to first token
    /// will compare with continuous's once both runs have served every request.
    TtftRatio,
    /// Switched from 8-bit to 4-bit weights (by the answer): the next decode step's model
    /// time against the 8-bit step's now.
    StepAfterQ4,
    /// An attached llama.cpp server: how many requests each of its decode calls will
    /// advance, on average, over the next seconds of polls.
    ServerBatch,
    /// An attached server: the most requests its queue will hold over the next seconds.
    ServerWaiting,
}

impl Predict {
    /// Graded by an attached server's polls, not by our engine's iterations.
    pub fn about_server(self) -> bool {
        matches!(self, Predict::ServerBatch | Predict::ServerWaiting)
    }

    /// Every kind with its name in lesson files.
    pub const ALL: [(&'static str, Predict); 17] = [
        ("top_attended", Predict::TopAttended),
        ("pages_next", Predict::PagesNext),
        ("next_join", Predict::NextJoin),
        ("dominant_live", Predict::DominantLive),
        ("dominant_batch", Predict::DominantBatch),
        ("next_read_mb", Predict::NextReadMb),
        ("kv_after_mha", Predict::KvAfterMha),
        ("kv_after_tiled", Predict::KvAfterTiled),
        ("util_after_contiguous", Predict::UtilAfterContiguous),
        ("lens_layer", Predict::LensLayer),
        ("finished_row_static", Predict::FinishedRowStatic),
        ("top_after_temperature", Predict::TopAfterTemperature),
        ("flops_without_cache", Predict::FlopsWithoutCache),
        ("ttft_ratio", Predict::TtftRatio),
        ("step_after_q4", Predict::StepAfterQ4),
        ("server_batch", Predict::ServerBatch),
        ("server_waiting", Predict::ServerWaiting),
    ];
}

/// Live figures a lesson may quote as `{name}`: the app fills them in from what it shows
/// now (the newest report, the serving runs, this machine's limits).
pub const FIGURES: [(&str, &str); 30] = [
    (
        "kv_bytes_per_token",
        "KV bytes per token under the current layout",
    ),
    ("kv_bytes_per_token_mha", "KV bytes per token under MHA"),
    ("kv_bytes_per_token_gqa", "KV bytes per token under GQA"),
    ("kv_bytes_per_token_mqa", "KV bytes per token under MQA"),
    ("weight_mb_per_token", "MB of weights one pass reads"),
    ("kv_read_mb", "MB of KV the live request's last step read"),
    ("step_mb", "MB the live request's last step moved in all"),
    ("step_ms", "milliseconds of the live request's last step"),
    (
        "perplexity",
        "perplexity on the shipped evaluation text under the weights on screen",
    ),
    (
        "perplexity_q8_0",
        "the same under the 8-bit weights (once they have loaded this session)",
    ),
    ("perplexity_q4", "the same under the 4-bit weights"),
    ("perplexity_f32", "the same under the f32 weights"),
    (
        "top1_q8_0_vs_f32",
        "% of the evaluation text's positions where the 8-bit weights rank first f32's top token (once both have loaded)",
    ),
    (
        "top1_q4_vs_f32",
        "the same for the 4-bit weights",
    ),
    ("step_gb_per_s", "GB/s the live request's last step reached"),
    (
        "step_bandwidth_pct",
        "that as a percentage of this machine's read bandwidth",
    ),
    (
        "crossover_tokens",
        "cached tokens where KV reads pass the weights, current layout",
    ),
    ("crossover_tokens_mha", "the same under MHA"),
    ("crossover_tokens_gqa", "the same under GQA"),
    ("read_gb_per_s", "this machine's memory read bandwidth"),
    (
        "int8_gops",
        "this machine's int8 peak, G operations per second",
    ),
    (
        "ridge_ops_per_byte",
        "operations per byte where the int8 peak is reached",
    ),
    (
        "step_ops_per_byte",
        "operations per byte of the live request's last decode step",
    ),
    (
        "requests_per_weight_read",
        "the ridge over that: about how many requests one weight read could serve",
    ),
    (
        "batch_weight_mb_per_token",
        "MB of weights per token in the serving batch",
    ),
    ("serve_tokens_per_s", "tokens/s of the serving run so far"),
    (
        "serve_ratio",
        "tokens/s of the serving run over the run beside it",
    ),
    (
        "continuous_ttft_p99_ms",
        "p99 time to first token so far, ms, of the run under continuous batching",
    ),
    (
        "static_ttft_p99_ms",
        "the same for the run under static batching (not one at a time)",
    ),
    (
        "serve_arrivals_per_s",
        "chat requests arriving per second in the serving runs (measured at start)",
    ),
];

/// The `{name}`s of a line: identifiers in braces.
pub fn figure_names(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        let name = &after[..close];
        if !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            out.push(name);
        }
        rest = &after[close + 1..];
    }
    out
}
