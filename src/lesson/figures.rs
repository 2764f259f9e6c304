//! Live figures for lesson text: `{kv_bytes_per_token}` and the like, filled in from what
//! the app shows now, so a lesson quotes this model, this layout and this machine rather
//! than numbers written down once. The names are listed in `lesson::format::FIGURES`.

use crate::machine::Machine;
use crate::model::eval::Scored;
use crate::model::{HeadLayout, Requant};
use crate::report::StepReport;
use crate::serve::Policy;
use crate::views::traffic;
use crate::views::units::thousands;

/// What a figure reads until the iteration it comes from has run: it says what to do.
pub const PENDING: &str = "[press space]";

/// What the figures are read from: the report on screen, the reports before it, this
/// machine's limits (plain data, so the app can fill a text without the figures knowing
/// the app).
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    pub report: Option<&'a StepReport>,
    pub past: &'a std::collections::VecDeque<Box<StepReport>>,
    pub machine: Option<&'a Machine>,
    /// The serving runs the settings ask for now: a report of other runs (the ones a
    /// step has just replaced) gives no serving figure.
    pub serving: crate::settings::Serving,
    /// How each weight type loaded so far predicts the evaluation text.
    pub scored: &'a [crate::model::eval::Scored],
}

/// The value of figure `name` now, or `None` when the app has not got it yet.
pub fn value(app: Sources, name: &str) -> Option<String> {
    let r = app.report?;
    let t = &r.info.traffic;
    let mb = |b: u64| format!("{:.1}", b as f64 / 1e6);
    let per_token = |l: HeadLayout| r.info.kv_bytes_per_token.get(&l).map(|&b| thousands(b));
    let view = || traffic::view(r, app.past.iter().map(|p| p.as_ref()), app.machine);
    let crossover = |l: HeadLayout| {
        let c = view().crossover?;
        let n = c.tokens.iter().find(|t| t.0 == l)?.1;
        Some(thousands(n as usize))
    };
    let machine = app.machine;
    // Serving figures only from the runs on screen now, not from those a step replaced.
    let serve = r
        .serve
        .as_ref()
        .filter(|_| r.settings.serving == app.serving);
    // The live step's bytes and speed are quoted as a decode step's: after a prefill
    // (step 0) they wait for the first decode step rather than quote the prompt's pass.
    let decoded = t.weight_bytes > 0 && r.info.step > 0;
    Some(match name {
        "kv_bytes_per_token" => per_token(r.info.layout)?,
        "kv_bytes_per_token_mha" => per_token(HeadLayout::Mha)?,
        "kv_bytes_per_token_gqa" => per_token(HeadLayout::Gqa)?,
        "kv_bytes_per_token_mqa" => per_token(HeadLayout::Mqa)?,
        "weight_mb_per_token" if t.weight_bytes > 0 => mb(t.weight_bytes),
        "kv_read_mb" if decoded => mb(t.kv_read_bytes),
        "step_mb" if decoded => format!("{:.0}", view().now.bytes() as f64 / 1e6),
        "step_ms" => format!("{:.1}", r.info.wall_ms),
        n if n.starts_with("perplexity") || n.starts_with("top1_") => {
            quality(app.scored, n, r.settings.weights)?
        }
        "step_gb_per_s" if decoded => format!("{:.1}", view().now.gb_per_s()),
        "step_bandwidth_pct" if decoded => {
            format!(
                "{:.0}",
                100.0 * view().now.gb_per_s() / machine?.read_gb_per_s
            )
        }
        "crossover_tokens" => crossover(r.info.layout)?,
        "crossover_tokens_mha" => crossover(HeadLayout::Mha)?,
        "crossover_tokens_gqa" => crossover(HeadLayout::Gqa)?,
        "read_gb_per_s" | "int8_gops" | "ridge_ops_per_byte" => machine_figure(machine?, name),
        "step_ops_per_byte" if decoded => format!("{:.1}", view().now.intensity()),
        // One decode row's operations per byte, against the ridge: about how many rows
        // could share a weight read before arithmetic sets the pace (KV reads aside).
        "requests_per_weight_read" if decoded => format!(
            "{:.0}",
            traffic::Roof::of(machine?).ridge() / view().now.intensity().max(1e-9)
        ),
        "batch_weight_mb_per_token" => batch_weight_mb(serve?)?,
        "serve_tokens_per_s" => format!("{:.0}", serve?.tokens_per_s()?),
        "serve_ratio" => format!("{:.2}", serve.and(r.serve_ratio())?),
        "continuous_ttft_p99_ms" => ttft_p99(serve.and(r.serving_run(Policy::Continuous)))?,
        "static_ttft_p99_ms" => ttft_p99(serve.and(r.serving_run(Policy::Static)))?,
        "serve_arrivals_per_s" => arrivals_per_s(&app, r)?,
        _ => return None,
    })
}

/// Timed chat arrivals come at one rate all session (measured at start), so the runs a
/// step just replaced already give it.
fn arrivals_per_s(app: &Sources, r: &StepReport) -> Option<String> {
    let timed_chat =
        app.serving.workload == crate::serve::workload::AppWorkload::Chat && !app.serving.burst;
    let rate = r.serve.as_ref()?.rate_per_s;
    (timed_chat && rate > 0.0).then(|| format!("{rate:.1}"))
}

/// The serving batch's weight megabytes per token, once a batch of decodes has run: with
/// one token the batch's share is the whole read, and an iteration with prompt rows is a
/// prefill's figure, not the decode batch's the lessons quote.
fn batch_weight_mb(s: &crate::report::ServeReport) -> Option<String> {
    let n = s.step.tokens_scheduled;
    (n > 1 && n <= s.step.active.len())
        .then(|| format!("{:.1}", s.step.traffic.weight_bytes as f64 / 1e6 / n as f64))
}

/// A figure of this machine's measured limits.
fn machine_figure(m: &crate::machine::Machine, name: &str) -> String {
    match name {
        "read_gb_per_s" => format!("{:.1}", m.read_gb_per_s),
        "int8_gops" => format!("{:.0}", 2.0 * m.int8_gmac_per_s),
        _ => format!("{:.0}", traffic::Roof::of(m).ridge()),
    }
}

/// Figure `name` of the weight types' quality on the evaluation text: each one's
/// perplexity (`on_screen`'s for plain `perplexity`), and its top-1 agreement with f32.
fn quality(scored: &[Scored], name: &str, on_screen: Requant) -> Option<String> {
    match name {
        "perplexity" => perplexity(scored, on_screen),
        "perplexity_q8_0" => perplexity(scored, Requant::Q8_0),
        "perplexity_q4" => perplexity(scored, Requant::Q4),
        "perplexity_f32" => perplexity(scored, Requant::F32),
        "top1_q8_0_vs_f32" => agreement(scored, Requant::Q8_0),
        "top1_q4_vs_f32" => agreement(scored, Requant::Q4),
        _ => None,
    }
}

/// The perplexity `weights` gave on the evaluation text, once they have loaded.
fn perplexity(scored: &[Scored], weights: Requant) -> Option<String> {
    let s = scored.iter().find(|s| s.weights == weights)?;
    Some(format!("{:.2}", s.perplexity))
}

/// The percentage of the evaluation text's positions where `weights` rank first the token
/// f32 ranks first, once both have loaded.
fn agreement(scored: &[Scored], weights: Requant) -> Option<String> {
    let of = |w: Requant| scored.iter().find(|s| s.weights == w);
    let a = of(weights)?.agreement(of(Requant::F32)?)?;
    Some(format!("{:.1}", 100.0 * a))
}

/// A serving run's p99 time to first token so far, once a request has had its first.
fn ttft_p99(s: Option<&crate::report::ServeReport>) -> Option<String> {
    let p99 = s?.latency.ttft_ms_p99;
    (p99 > 0.0).then(|| format!("{p99:.0}"))
}

/// `text` with every `{figure}` replaced by its value now ([`PENDING`] until it is known).
pub fn fill(app: Sources, text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if is_figure(&after[..close]) => {
                let v = value(app, &after[..close]);
                out.push_str(v.as_deref().unwrap_or(PENDING));
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn is_figure(name: &str) -> bool {
    crate::lesson::format::FIGURES
        .iter()
        .any(|(f, _)| *f == name)
}
