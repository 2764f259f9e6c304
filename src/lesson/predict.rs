//! Predictions the live app grades: for each kind, the choices it offers in the current
//! state, what answering it sets off (the next iteration, or the toggle it asks about),
//! and, from the report that follows, whether the prediction came true and why.

use super::live::LiveState;
use crate::lesson::Predict;
use crate::model::traffic::Traffic;
use crate::model::{AttnKernel, HeadLayout};
use crate::report::{ServeReport, StepReport};
use crate::serve::CacheKind;
use crate::settings::Settings;

pub use super::choices::{LiveChoices, Pending};

/// "Something else" / "none of these" in a prediction.
pub const OTHER: u64 = u64::MAX;
/// A request the choices do not list by number.
pub const UNLISTED: u64 = u64::MAX - 1;

/// Which read is bigger: the choices, by index.
const DOMINANT: [&str; 3] = ["the weights", "the KV cache", "about the same (within 10%)"];
// Choices of about equal length: the right one must not stand out by its length.
const KV_AFTER_TILED: [&str; 3] = [
    "fewer: tiles compress it",
    "the same as now, exactly",
    "more: tiles keep copies",
];
const UTIL_AFTER: [&str; 3] = ["higher", "about the same (within 5 points)", "lower"];
const TOP_AFTER_T: [&str; 4] = [
    "it rises above the model's own",
    "it stays the model's own",
    "it falls below the model's own",
    "it becomes 100%, as greedy",
];
/// The temperature the prediction switches to, in tenths.
const PREDICT_TEMPERATURE: u8 = 15;

/// A temperature in tenths, as settings carry it.
fn tenths(t: f32) -> u8 {
    (t * 10.0).round() as u8
}
const FINISHED_ROW: [&str; 3] = [
    "it keeps running as padding until the batch ends",
    "a waiting request takes over its slot in the next iteration",
    "it is freed and the batch runs one row smaller",
];
// Static's p99 TTFT over continuous's, in bands; the labels keep about one length.
const TTFT_RATIO: [&str; 5] = [
    "continuous's is the worse, by over 1.5×",
    "about the same, within 1.5× either way",
    "static's is 1.5 to 3× continuous's",
    "static's is 3 to 6× continuous's",
    "static's is more than 6× continuous's",
];

/// Fixed choices, valued by their index.
fn labelled(labels: &[&str], subject: u64) -> LiveChoices {
    LiveChoices {
        labels: labels.iter().map(|l| l.to_string()).collect(),
        values: (0..labels.len() as u64).collect(),
        subject,
        before: Vec::new(),
    }
}

/// Bytes a pass moved, MB.
fn traffic_mb(t: &Traffic) -> f64 {
    (t.weight_bytes + t.kv_read_bytes + t.kv_write_bytes + t.score_bytes) as f64 / 1e6
}

fn kernel_name(k: AttnKernel) -> &'static str {
    match k {
        AttnKernel::Naive => "naive",
        AttnKernel::Tiled { .. } => "tiled",
    }
}

/// Grades "weights or KV?" against what a pass read.
fn dominant(chosen: u64, t: &Traffic, what: &str) -> (bool, String) {
    let (w, kv) = (t.weight_bytes as f64, t.kv_read_bytes as f64);
    // The smaller read over the larger: "about equal" is 0.9 and up. Within 0.05 of that
    // edge (a walker saw 0.92 graded for "equal" only) the larger read counts too.
    let share = w.min(kv) / w.max(kv).max(1.0);
    let larger = if w > kv { 0 } else { 1 };
    let right = match share {
        s if (s - 0.9).abs() <= 0.05 => vec![2, larger],
        s if s >= 0.9 => vec![2],
        _ => vec![larger],
    };
    let why = format!(
        "{what} read {:.1} MB of weights and {:.1} MB of KV{}",
        w / 1e6,
        kv / 1e6,
        both_said(right.len())
    );
    (right.contains(&chosen), why)
}

/// A measured value within 10% of a band's edge: both bands it touches count as right,
/// so the same reasoning is not graded by the noise of one run.
fn near_edge(x: f64, edge: f64) -> bool {
    (x - edge).abs() <= 0.1 * edge.abs()
}

/// What the verdict adds when the value sat at a band's edge.
fn both_said(right: usize) -> &'static str {
    if right > 1 {
        " (within 10% of the edge between two choices: both count)"
    } else {
        ""
    }
}

/// Why a prediction cannot be asked now; `ran`: an iteration of the request on screen
/// has run.
pub fn unavailable(kind: Predict, ran: bool) -> &'static str {
    if kind.about_server() {
        return "this prediction reads a real server: start one (scripts/llamacpp-server.py), then open this lesson with `inferlab attach URL --rate R --lesson 11`; it needs the server answering, with its slots listed";
    }
    if !ran {
        return "this prediction needs an iteration first: press space";
    }
    match kind {
        Predict::NextJoin => {
            "this prediction needs a request waiting in the queue: press space until the serving pane's queue is above 0 (g, c or b start a new run as they switch workload, cache or policy)"
        }
        Predict::PagesNext
        | Predict::DominantBatch
        | Predict::FinishedRowStatic => {
            "this prediction needs the serving workload running: press space (a finished run starts again when g, c or b switches its workload, cache or policy)"
        }
        Predict::KvAfterMha => "this prediction starts from GQA or MQA: press m first",
        Predict::KvAfterTiled => "this prediction starts from the naive kernel: press f first",
        Predict::TopAfterTemperature => {
            "this prediction starts below temperature 1.5 with a running request: press T, or a for a new prompt"
        }
        Predict::FlopsWithoutCache => {
            "this prediction starts from a cached decode step: press C, then space (a for a new prompt)"
        }
        Predict::UtilAfterContiguous => {
            "this prediction starts from the paged serving cache with work running: press c, then space"
        }
        Predict::TtftRatio => {
            "this prediction needs static and continuous batching side by side, still serving: press s until the right pane compares the policy, or b to run both again"
        }
        Predict::StepAfterQ4 => {
            "this prediction starts from a decode step with 8-bit weights: press W until the header says Q8_0, then space; a gives a new prompt if the request has finished"
        }
        _ => "this prediction needs a running request: press space first",
    }
}

/// What answering sets off: the toggle the question is about (then its report grades
/// it), and whether an iteration must run.
pub fn action(kind: Predict, app: &LiveState) -> (Option<Settings>, bool) {
    let mut s = app.settings;
    let step = match kind {
        Predict::KvAfterMha => {
            s.run.layout = HeadLayout::Mha;
            false
        }
        Predict::KvAfterTiled => {
            s.run.kernel = AttnKernel::Tiled {
                sram_bytes: crate::model::flash::A100_SRAM_BYTES,
            };
            false
        }
        Predict::UtilAfterContiguous => {
            s.serving.cache = CacheKind::Contiguous;
            true
        }
        Predict::FinishedRowStatic => {
            s.serving.policy = crate::serve::Policy::Static;
            true
        }
        Predict::TopAfterTemperature => {
            s.request.sampler.temperature = f32::from(PREDICT_TEMPERATURE) / 10.0;
            true
        }
        Predict::FlopsWithoutCache => {
            s.request.kv_cache = false;
            true
        }
        Predict::StepAfterQ4 => {
            s.weights = crate::model::Requant::Q4;
            true
        }
        // The server serves on whatever load reaches it: its polls grade the answer.
        Predict::ServerBatch | Predict::ServerWaiting => return (None, false),
        _ => return (None, true),
    };
    (Some(s), step)
}

/// The choices of prediction `kind` in the app's current state.
pub fn live_choices(app: &LiveState, kind: Predict) -> Option<LiveChoices> {
    if kind.about_server() {
        return super::server_predict::choices(app.server?, kind);
    }
    // With a new prompt waiting, the next iteration is its prefill: a question about the
    // live request's next decode step cannot be seen until that has run.
    let about_live = matches!(
        kind,
        Predict::TopAttended
            | Predict::DominantLive
            | Predict::NextReadMb
            | Predict::LensLayer
            | Predict::TopAfterTemperature
            | Predict::FlopsWithoutCache
            | Predict::StepAfterQ4
    );
    if about_live && app.prompt_queued {
        return None;
    }
    if kind == Predict::TopAfterTemperature
        && tenths(app.settings.request.sampler.temperature) == PREDICT_TEMPERATURE
    {
        return None;
    }
    if kind == Predict::FlopsWithoutCache && !app.settings.request.kv_cache {
        return None;
    }
    // Choices about the serving runs come from the runs the settings now ask for: right
    // after a step restarts them, the report on screen is still the old runs' (its queue,
    // its batch), and its choices would be about requests that are not coming.
    let about_serving = matches!(
        kind,
        Predict::PagesNext | Predict::NextJoin | Predict::DominantBatch | Predict::TtftRatio
    );
    let r = app.report?;
    if about_serving && r.settings.serving != app.settings.serving {
        return None;
    }
    choices_for(r, kind)
}

/// The choices of prediction `kind` as the state after report `r` offers them.
pub fn choices_for(r: &StepReport, kind: Predict) -> Option<LiveChoices> {
    let kv_now = *r.info.kv_bytes_per_token.get(&r.info.layout).unwrap_or(&0) as u64;
    match kind {
        Predict::TopAttended => top_attended_choices(r),
        Predict::PagesNext => pages_choices(r.serve.as_ref()?),
        Predict::NextJoin => join_choices(r.serve.as_ref()?),
        Predict::DominantLive => {
            (!r.finished && r.info.traffic.flops > 0).then(|| labelled(&DOMINANT, 0))
        }
        Predict::DominantBatch => r
            .serve
            .as_ref()
            .filter(|s| !s.done && !s.step.active.is_empty())
            .map(|_| labelled(&DOMINANT, 0)),
        Predict::NextReadMb => read_mb_choices(r),
        Predict::KvAfterMha => mha_choices(r),
        Predict::KvAfterTiled => matches!(r.settings.run.kernel, AttnKernel::Naive)
            .then(|| labelled(&KV_AFTER_TILED, kv_now)),
        Predict::FinishedRowStatic => r.serve.as_ref().map(|_| labelled(&FINISHED_ROW, 0)),
        Predict::LensLayer => lens_choices(r),
        Predict::TopAfterTemperature => (!r.finished).then(|| labelled(&TOP_AFTER_T, 0)),
        Predict::FlopsWithoutCache => flops_choices(r),
        Predict::UtilAfterContiguous => util_choices(r),
        // Asked while a run still serves: once both are done there is nothing to predict.
        Predict::TtftRatio => static_and_continuous(r)
            .filter(|(s, c)| !(s.done && c.done))
            .map(|_| labelled(&TTFT_RATIO, 0)),
        Predict::StepAfterQ4 => q4_choices(r),
        Predict::ServerBatch | Predict::ServerWaiting => None,
    }
}

impl LiveChoices {
    /// Choices whose state before needs no more than `subject`.
    fn new(labels: Vec<String>, values: Vec<u64>, subject: u64) -> Self {
        Self {
            labels,
            values,
            subject,
            before: Vec::new(),
        }
    }
}

/// The first token, the middle, the previous token, the new token itself, another.
fn top_attended_choices(r: &StepReport) -> Option<LiveChoices> {
    // The next decode query sits at the current length and may see 0..=len.
    let p = r.pieces.len() as u64;
    if p < 3 || r.finished {
        return None;
    }
    let label = |pos: u64| {
        let piece = r
            .pieces
            .get(pos as usize)
            .map(|s| crate::views::units::label(s, 12).trim_end().to_string())
            .unwrap_or_else(|| "the new token itself".into());
        format!("position {pos}: {piece}")
    };
    let mut values = vec![0, p - 1, p];
    let mid = p / 2;
    if mid != 0 && mid != p - 1 {
        values.insert(1, mid);
    }
    let mut labels: Vec<String> = values.iter().map(|&v| label(v)).collect();
    labels[0] = format!("{} (the very first token)", labels[0]);
    let last = labels.len() - 1;
    labels[last] = format!("position {p}: the new token itself");
    labels.push("another position".into());
    values.push(OTHER);
    Some(LiveChoices::new(labels, values, p))
}

/// The pages the first active request holds now, one or two more, another number.
fn pages_choices(sv: &ServeReport) -> Option<LiveChoices> {
    let a = sv.step.active.first()?;
    let held = pages_of(sv, a.id) as u64;
    let labels = vec![
        format!("{held} pages (no new page)"),
        format!("{} pages (one new page)", held + 1),
        format!("{} pages", held + 2),
        "another number (it leaves, is preempted, or prefills many pages)".into(),
    ];
    Some(LiveChoices::new(
        labels,
        vec![held, held + 1, held + 2, OTHER],
        a.id,
    ))
}

/// The first three waiting requests, a request not among them (a new arrival admitted at
/// once, or one further back), or none. Asked only while a request can still join.
fn join_choices(sv: &ServeReport) -> Option<LiveChoices> {
    // With nobody waiting the answer would be a guess at the next random arrival: the
    // question waits until the queue holds someone.
    if sv.done || sv.step.queue.is_empty() {
        return None;
    }
    let mut values: Vec<u64> = sv.step.queue.iter().take(3).copied().collect();
    let mut labels: Vec<String> = values.iter().map(|q| format!("request #{q}")).collect();
    labels.push("a request not listed (say, one arriving now)".into());
    values.push(UNLISTED);
    labels.push("none joins".into());
    values.push(OTHER);
    Some(LiveChoices {
        before: sv.step.active.iter().map(|a| a.id).collect(),
        ..LiveChoices::new(labels, values, 0)
    })
}

/// Around what this step moved: the right one is a question of what changes.
fn read_mb_choices(r: &StepReport) -> Option<LiveChoices> {
    let mb = traffic_mb(&r.info.traffic);
    // Built from a decode step, as the question's {step_mb} is: a prefill moves a
    // different amount, and choices from it would change under the learner's eyes.
    if r.finished || mb <= 0.0 || r.info.step == 0 {
        return None;
    }
    let values: Vec<u64> = [0.1, 0.3, 1.0, 3.0]
        .iter()
        .map(|f| (f * mb).round().max(1.0) as u64)
        .collect();
    let labels = values.iter().map(|v| format!("about {v} MB")).collect();
    Some(LiveChoices::new(labels, values, 0))
}

/// Ratios of KV bytes per token after the switch to MHA, in thousandths.
fn mha_choices(r: &StepReport) -> Option<LiveChoices> {
    let now = *r.info.kv_bytes_per_token.get(&r.info.layout)? as u64;
    let mha = *r.info.kv_bytes_per_token.get(&HeadLayout::Mha)? as u64;
    if r.info.layout == HeadLayout::Mha || now == 0 {
        return None;
    }
    let k = mha / now;
    // Bytes, not ratios: a label reading "3× now" would hand over the factor the
    // learner should work out from the heads.
    let per_token = |b: u64| format!("{} bytes", crate::views::units::thousands(b as usize));
    let labels = vec![
        per_token(now / k),
        per_token(now),
        per_token(now * k),
        per_token(now * k * k),
    ];
    Some(LiveChoices::new(
        labels,
        vec![1000 / k, 1000, 1000 * k, 1000 * k * k],
        now,
    ))
}

/// The thirds of the stack, and its last layer.
fn lens_choices(r: &StepReport) -> Option<LiveChoices> {
    let n = r.cfg.n_layer as u64;
    if r.finished || n < 4 {
        return None;
    }
    let (a, b) = (n / 3, 2 * n / 3);
    let labels = vec![
        format!("in the first third (layers 0–{})", a - 1),
        format!("in the middle third ({a}–{})", b - 1),
        format!("in the last third ({b}–{})", n - 2),
        format!("only at the very last layer ({})", n - 1),
    ];
    Some(LiveChoices::new(labels, vec![0, 1, 2, 3], n))
}

/// Higher, about the same or lower than the paged cache's utilization now.
fn util_choices(r: &StepReport) -> Option<LiveChoices> {
    let sv = r
        .serve
        .as_ref()
        .filter(|s| s.cache == CacheKind::Paged && !s.done)?;
    let u = sv.step.memory.utilization_pct()?.round() as u64;
    let mut c = labelled(&UTIL_AFTER, u);
    c.labels[0] = format!("higher than the paged cache's {u}%");
    c.labels[2] = format!("lower than the paged cache's {u}%");
    Some(c)
}

/// Pages request `id` holds in a serving view (shared pages count for each holder).
pub fn pages_of(sv: &ServeReport, id: u64) -> usize {
    sv.step
        .pages
        .iter()
        .filter(|p| p.owners.contains(&id))
        .count()
}

/// Whether a prediction is graded by an event that may take several iterations to come
/// (the report that follows its answer may not show it yet).
pub fn waits_for_event(kind: Predict) -> bool {
    matches!(
        kind,
        Predict::FinishedRowStatic
            | Predict::DominantBatch
            | Predict::TtftRatio
            | Predict::StepAfterQ4
            | Predict::ServerBatch
            | Predict::ServerWaiting
    )
}

/// What the lesson says while prediction `kind` waits to be graded.
pub fn waiting(kind: Predict) -> &'static str {
    match kind {
        Predict::StepAfterQ4 => {
            "  keep stepping (space): a warm-up step, then three 4-bit decode steps are timed…"
        }
        Predict::ServerBatch => {
            "  the server's polls of the next five seconds grade it, once it has decoded…"
        }
        Predict::ServerWaiting => "  the server's polls of the next ten seconds grade it…",
        k if waits_for_event(k) => "  keep stepping (space, or r to run) until it happens…",
        _ => "  running the next iteration to check…",
    }
}

/// Predictions graded once, right or wrong: their outcome takes a whole serving run, and
/// measures timing that varies from run to run, so asking again would only measure noise.
pub fn graded_once(kind: Predict) -> bool {
    matches!(kind, Predict::TtftRatio)
}

/// Whether prediction `p` (offered as `live`) came true in report `new`, and what
/// happened; `None` while the event it is about has not happened yet. A wrong answer's
/// verdict names the choices that counted.
pub fn outcome(
    p: &Pending,
    live: &LiveChoices,
    app: &LiveState,
    new: &StepReport,
) -> Option<(bool, String)> {
    let (right, why) = outcome_of(p, live, live.values[p.choice], app, new)?;
    if right {
        return Some((right, why));
    }
    let counted: Vec<String> = (live.values.iter().zip(&live.labels))
        .filter(|(&v, _)| outcome_of(p, live, v, app, new).is_some_and(|o| o.0))
        .map(|(_, label)| format!("\"{label}\""))
        .collect();
    Some(match counted.is_empty() {
        true => (right, why),
        false => (
            right,
            format!("{why}. Counted right: {}", counted.join(" and ")),
        ),
    })
}

/// [`outcome`] for the choice worth `chosen`.
fn outcome_of(
    p: &Pending,
    live: &LiveChoices,
    chosen: u64,
    app: &LiveState,
    new: &StepReport,
) -> Option<(bool, String)> {
    let serve = |msg: &str, f: &dyn Fn(&ServeReport) -> (bool, String)| {
        new.serve
            .as_ref()
            .map_or_else(|| (false, msg.to_string()), f)
    };
    const NO_VIEW: &str = "no serving view";
    const NO_ITERATION: &str = "the serving workload ran no iteration";
    // A report computed before the answer's setting took hold (it was already running)
    // grades nothing: the next one will show the setting.
    let settled = match p.kind {
        Predict::KvAfterMha => new.info.layout == HeadLayout::Mha,
        Predict::KvAfterTiled => matches!(new.settings.run.kernel, AttnKernel::Tiled { .. }),
        Predict::TopAfterTemperature => tenths(new.info.sampler.temperature) == PREDICT_TEMPERATURE,
        Predict::FlopsWithoutCache => new.info.no_cache,
        // The switch recomputes the sequence first; a decode step after it grades.
        Predict::StepAfterQ4 => {
            new.settings.weights == crate::model::Requant::Q4 && new.info.input_len == 1
        }
        Predict::UtilAfterContiguous => new
            .serve
            .as_ref()
            .is_some_and(|s| s.cache == CacheKind::Contiguous),
        _ => true,
    };
    if !settled {
        return None;
    }
    Some(match p.kind {
        Predict::TopAttended => top_attended_outcome(live, chosen, app, new),
        Predict::PagesNext => serve(NO_VIEW, &|sv| pages_outcome(p, live, chosen, sv)),
        Predict::NextJoin => serve(NO_VIEW, &|sv| join_outcome(p, live, chosen, sv)),
        Predict::DominantLive => dominant(chosen, &new.info.traffic, "the step"),
        // An iteration in which no request ran read nothing: it grades nothing either.
        Predict::DominantBatch => match new.serve.as_ref() {
            Some(sv) if sv.step.traffic.weight_bytes == 0 && !sv.done => return None,
            _ => serve(NO_ITERATION, &|sv| {
                dominant(chosen, &sv.step.traffic, "the serving iteration")
            }),
        },
        Predict::NextReadMb => read_mb_outcome(live, chosen, new),
        Predict::KvAfterMha | Predict::KvAfterTiled => kv_outcome(p, chosen, new),
        Predict::LensLayer => lens_outcome(p, chosen, new),
        Predict::UtilAfterContiguous => serve(NO_ITERATION, &|sv| util_outcome(p, chosen, sv)),
        Predict::FinishedRowStatic => return padding_outcome(chosen, new.serve.as_ref()?),
        Predict::TopAfterTemperature => top_after_t_outcome(chosen, new),
        Predict::FlopsWithoutCache => flops_outcome(live, chosen, new),
        Predict::TtftRatio => return ttft_outcome(chosen, new),
        Predict::StepAfterQ4 => return q4_outcome(live, chosen, app, new),
        // Graded by the server's polls (`tutor::grade_server`), not by our iterations.
        Predict::ServerBatch | Predict::ServerWaiting => return None,
    })
}

/// Whether `actual` is the chosen value; "another …" is right when it is none of the
/// listed ones.
fn exact(live: &LiveChoices, chosen: u64, actual: u64) -> bool {
    if chosen == OTHER {
        !live.values.iter().any(|&v| v == actual && v != OTHER)
    } else {
        chosen == actual
    }
}

/// Where the focused head of the focused layer looked most in the decode row.
fn top_attended_outcome(
    live: &LiveChoices,
    chosen: u64,
    app: &LiveState,
    new: &StepReport,
) -> (bool, String) {
    let head = app.head;
    let row = new
        .info
        .captures
        .iter()
        .find(|c| c.layer == app.layer && c.t >= 1 && head < c.n_head)
        .and_then(|c| {
            // The newest row: the decode step's own (without a cache the step ran every
            // row again, and the newest is the one that predicts).
            let at = (head * c.t + c.t - 1) * c.kv_len;
            c.weights.get(at..at + c.kv_len).map(<[f32]>::to_vec)
        });
    let Some(w) = row else {
        return (false, "the step produced no decode row to grade".into());
    };
    let (best, wt) = w
        .iter()
        .enumerate()
        .fold((0, f32::MIN), |b, (i, &x)| if x > b.1 { (i, x) } else { b });
    let piece = new
        .pieces
        .get(best)
        .map(|s| crate::views::units::label(s, 12).trim_end().to_string())
        .unwrap_or_default();
    (
        exact(live, chosen, best as u64),
        format!(
            "layer {} head {} put {:.0}% of its weight on position {best} ({piece})",
            app.layer,
            head,
            100.0 * wt
        ),
    )
}

/// The pages the request holds after the iteration.
fn pages_outcome(p: &Pending, live: &LiveChoices, chosen: u64, sv: &ServeReport) -> (bool, String) {
    let n = pages_of(sv, p.subject);
    let active = sv.step.active.iter().any(|a| a.id == p.subject);
    // The tokens its pages hold, as its block table shows them: the token it just drew
    // is not in the cache until the next iteration runs it.
    let cached: u32 = crate::views::pages::block_table(sv, p.subject)
        .iter()
        .map(|b| b.fill)
        .sum();
    let why = match active {
        true => format!(
            "request #{}'s pages now hold {cached} tokens: {n} pages of {} slots",
            p.subject, sv.page_size
        ),
        false => format!("request #{} left the active set", p.subject),
    };
    (exact(live, chosen, n as u64), why)
}

/// The requests that joined the active set in the iteration.
fn join_outcome(p: &Pending, live: &LiveChoices, chosen: u64, sv: &ServeReport) -> (bool, String) {
    let joined: Vec<u64> = sv
        .step
        .active
        .iter()
        .map(|a| a.id)
        .filter(|id| !p.before.contains(id))
        .collect();
    let why = if joined.is_empty() {
        "no request joined this iteration".into()
    } else {
        let ids: Vec<String> = joined.iter().map(|j| format!("#{j}")).collect();
        format!("joined: {}", ids.join(", "))
    };
    let right = match chosen {
        OTHER => joined.is_empty(),
        UNLISTED => joined.iter().any(|j| !live.values.contains(j)),
        id => joined.contains(&id),
    };
    (right, why)
}

/// The value nearest `x` on a log scale: 140 is "about 150", not "about 45".
fn nearest_on_log_scale(values: &[u64], x: f64) -> Option<u64> {
    let d = |v: u64| ((v as f64).ln() - x.max(1e-9).ln()).abs();
    values
        .iter()
        .copied()
        .min_by(|a, b| d(*a).total_cmp(&d(*b)))
}

/// The choices that count for `x`: the nearest on a log scale, and its neighbour too
/// when `x` is within 10% of the edge between them (their geometric mean).
fn nearest_with_edge(values: &[u64], x: f64) -> Vec<u64> {
    let Some(best) = nearest_on_log_scale(values, x) else {
        return Vec::new();
    };
    let mut out = vec![best];
    for &v in values.iter().filter(|&&v| v != best) {
        if near_edge(x, ((v as f64) * (best as f64)).sqrt()) {
            out.push(v);
        }
    }
    out.sort_unstable();
    out
}

/// The nearest choice on a log scale to what the step moved.
fn read_mb_outcome(live: &LiveChoices, chosen: u64, new: &StepReport) -> (bool, String) {
    let t = &new.info.traffic;
    let mb = traffic_mb(t);
    let right = nearest_with_edge(&live.values, mb);
    (
        right.contains(&chosen),
        format!(
            "the step moved {mb:.0} MB: {:.0} MB of weights, {:.1} MB of KV read, {:.1} MB of scores{}",
            t.weight_bytes as f64 / 1e6,
            t.kv_read_bytes as f64 / 1e6,
            t.score_bytes as f64 / 1e6,
            both_said(right.len())
        ),
    )
}

/// The KV bytes per token after the switch, against `p.subject`, those before it.
fn kv_outcome(p: &Pending, chosen: u64, new: &StepReport) -> (bool, String) {
    let before = p.subject.max(1);
    let after = *new
        .info
        .kv_bytes_per_token
        .get(&new.info.layout)
        .unwrap_or(&0) as u64;
    let why = format!(
        "under {} with {} attention each token now stores {} bytes of K and V (before: {})",
        new.info.layout,
        kernel_name(new.settings.run.kernel),
        crate::views::units::thousands(after as usize),
        crate::views::units::thousands(before as usize)
    );
    let right = match p.kind {
        Predict::KvAfterMha => chosen == 1000 * after / before,
        _ => chosen == (after > before) as u64 * 2 + (after == before) as u64,
    };
    (right, why)
}

/// Which part of the stack (of `p.subject` layers) the sampled token formed in.
fn lens_outcome(p: &Pending, chosen: u64, new: &StepReport) -> (bool, String) {
    let Some(v) = crate::views::lens::view(new) else {
        return (
            false,
            "the logit lens did not run for that step (o shows it, and it runs while shown)".into(),
        );
    };
    let n = p.subject.max(1);
    let actual = match v.forms_at.map(|f| f as u64) {
        Some(f) if f == n - 1 => 3,
        Some(f) if f >= 2 * n / 3 => 2,
        Some(f) if f >= n / 3 => 1,
        Some(_) => 0,
        None => 3,
    };
    (chosen == actual, v.headline())
}

/// The contiguous cache's utilization after an iteration, against the paged cache's.
fn util_outcome(p: &Pending, chosen: u64, sv: &ServeReport) -> (bool, String) {
    let now = sv.step.memory.utilization_pct().unwrap_or(0.0);
    let was = p.subject as f64;
    let side = if now > was { 0 } else { 2 };
    let right = match (now - was).abs() {
        d if near_edge(d, 5.0) => vec![1, side],
        d if d <= 5.0 => vec![1],
        _ => vec![side],
    };
    let why = format!(
        "the {:?} cache holds tokens in {now:.0}% of the slots it has set aside (paged: {was:.0}%){}",
        sv.cache,
        both_said(right.len())
    );
    (right.contains(&chosen), why.to_lowercase())
}

/// Multiples of a cached decode step's FLOPs: the same, twice, a quarter and all of the
/// sequence's length. Asked after a cached decode step, whose FLOPs are the subject.
fn flops_choices(r: &StepReport) -> Option<LiveChoices> {
    let f = r.info.traffic.flops;
    if r.finished || r.info.step == 0 || r.info.no_cache || f == 0 {
        return None;
    }
    let n = r.pieces.len() as u64 + 1;
    let values = vec![1, 2, (n / 4).max(3), n];
    let labels = values
        .iter()
        .map(|&m| match m {
            1 => "about the same as a cached step".to_string(),
            m => format!("about {m}× a cached step"),
        })
        .collect();
    Some(LiveChoices::new(labels, values, f))
}

/// The multiple nearest (on a log scale) to the step's FLOPs over the cached step's.
fn flops_outcome(live: &LiveChoices, chosen: u64, new: &StepReport) -> (bool, String) {
    let ratio = new.info.traffic.flops as f64 / live.subject.max(1) as f64;
    let right = nearest_with_edge(&live.values, ratio);
    let why = format!(
        "without the cache the step ran all {} tokens again: {:.1} GFLOP, {ratio:.0}× the cached step's {:.2} (under {}×, since the LM head still scores only the newest position){}",
        new.info.input_len,
        new.info.traffic.flops as f64 / 1e9,
        live.subject as f64 / 1e9,
        new.info.input_len,
        both_said(right.len())
    );
    (right.contains(&chosen), why)
}

/// What the sampler gave the model's top token after the switch, against the model's
/// own probability (within half a point counts as the same).
fn top_after_t_outcome(chosen: u64, new: &StepReport) -> (bool, String) {
    let Some(top) = new.info.top_k.first() else {
        return (false, "the step reported no distribution".into());
    };
    let (own, drawn) = (top.prob, top.drawn);
    // Every description that is true counts: 100% is also a rise.
    // Within 10% of the half-point edge, both sides of it count.
    let d = drawn - own;
    let edge = near_edge(d.abs() as f64, 0.005);
    let true_of = [
        d > 0.005 || (edge && d > 0.0),
        d.abs() <= 0.005 || edge,
        d < -0.005 || (edge && d < 0.0),
        drawn >= 0.9995,
    ];
    let why = format!(
        "at {} the top token {:?} went from the model's {:.1}% to {:.1}% in the distribution the sampler drew from",
        new.info.sampler.describe(),
        top.token,
        100.0 * own,
        100.0 * drawn
    );
    (true_of.get(chosen as usize).copied().unwrap_or(false), why)
}

/// A member of a static batch running on as padding; `None` until one does.
fn padding_outcome(chosen: u64, sv: &ServeReport) -> Option<(bool, String)> {
    let padding = sv
        .step
        .active
        .iter()
        .find(|a| a.phase == crate::serve::ReqPhase::Padding);
    match padding {
        Some(a) => Some((
            chosen == 0,
            format!(
                "request #{} has its answer, yet its row runs on as padding (░) until the last member of its batch is done",
                a.id
            ),
        )),
        None if sv.done => Some((false, "no batch had a member finish early".into())),
        None => None,
    }
}

/// The serving runs of a report when they are static and continuous batching side by
/// side, static first.
fn static_and_continuous(r: &StepReport) -> Option<(&ServeReport, &ServeReport)> {
    use crate::serve::Policy::{Continuous, Static};
    Some((r.serving_run(Static)?, r.serving_run(Continuous)?))
}

/// The band of [`TTFT_RATIO`] that static's p99 TTFT over continuous's falls in.
pub fn ttft_band(ratio: f64) -> u64 {
    match ratio {
        r if r < 1.0 / 1.5 => 0,
        r if r <= 1.5 => 1,
        r if r <= 3.0 => 2,
        r if r <= 6.0 => 3,
        _ => 4,
    }
}

/// The edges between [`TTFT_RATIO`]'s bands: edge `i` parts band `i` from band `i + 1`.
const TTFT_EDGES: [f64; 4] = [1.0 / 1.5, 1.5, 3.0, 6.0];

/// The bands a measured ratio grades right: its own, and the neighbour across an edge
/// within 10% of it. Runs of the same workload scatter by about that much (lesson 9 saw
/// 2.9×, 2.9×, 2.9× and 3.2×), so a ratio at an edge is both bands' answer. Returns the
/// bands and the edge it sits near, if any.
pub fn ttft_bands(ratio: f64) -> (Vec<u64>, Option<f64>) {
    let own = ttft_band(ratio);
    let near = TTFT_EDGES
        .iter()
        .enumerate()
        .find(|(_, &e)| (ratio / e - 1.0).abs() <= 0.1);
    match near {
        Some((i, &e)) => (vec![i as u64, i as u64 + 1], Some(e)),
        None => (vec![own], None),
    }
}

/// Static's p99 TTFT over continuous's once both runs have served every request; `None`
/// until then.
fn ttft_outcome(chosen: u64, new: &StepReport) -> Option<(bool, String)> {
    let Some((st, co)) = static_and_continuous(new) else {
        let why = "static and continuous batching are no longer side by side";
        return Some((false, why.into()));
    };
    if !(st.done && co.done) {
        return None;
    }
    let (s, c) = (st.latency.ttft_ms_p99, co.latency.ttft_ms_p99);
    if !(s > 0.0 && c > 0.0) {
        return Some((false, "a run served no first token".into()));
    }
    let (bands, edge) = ttft_bands(s / c);
    let named: Vec<&str> = bands.iter().map(|&b| TTFT_RATIO[b as usize]).collect();
    let near = edge.map_or(String::new(), |e| {
        format!(" (within 10% of the {e:.1}× edge, so both bands count)")
    });
    let why = format!(
        "with every request served, static batching's p99 TTFT is {s:.0} ms and continuous batching's {c:.0} ms, {:.1}×: {}{near}",
        s / c,
        named.join(" or ")
    );
    Some((bands.contains(&chosen), why))
}

/// Shares of the 8-bit decode step's time the 4-bit one may take, by index; the edges
/// between them in [`Q4_EDGES`].
const Q4_STEP: [&str; 4] = [
    "under half of the 8-bit step's time",
    "between half and three quarters of it",
    "between three quarters and nine tenths",
    "about the same: above nine tenths of it",
];
const Q4_EDGES: [f64; 3] = [0.5, 0.75, 0.9];

/// Asked after an 8-bit decode step: its model time (µs) is the subject; its weight bytes
/// and its iteration are the state before.
fn q4_choices(r: &StepReport) -> Option<LiveChoices> {
    let decoding = !r.finished && r.info.step > 0 && r.info.input_len == 1 && !r.info.no_cache;
    if !(decoding && r.settings.weights == crate::model::Requant::Q8_0) {
        return None;
    }
    let us = (1e3 * crate::views::traffic::model_ms(r)).round() as u64;
    let mut c = labelled(&Q4_STEP, us.max(1));
    c.before = vec![r.info.traffic.weight_bytes, r.iteration as u64];
    Some(c)
}

/// 4-bit decode steps graded together: one step's time scatters too much on a shared
/// machine to grade alone.
const Q4_STEPS: usize = 3;

/// The median model time of the 8-bit decode steps up to the question (the last five) and
/// of the first [`Q4_STEPS`] 4-bit ones after a warm-up step; `None` until those have run.
fn q4_medians(asked_at: u64, app: &LiveState, new: &StepReport) -> Option<(f64, f64, usize)> {
    let decode = |r: &&StepReport, w| {
        r.settings.weights == w && r.info.step > 0 && r.info.input_len == 1 && !r.info.no_cache
    };
    let reports: Vec<&StepReport> = app
        .past
        .iter()
        .map(|b| &**b)
        .filter(|r| r.iteration != new.iteration)
        .chain([new])
        .collect();
    let before: Vec<f64> = reports
        .iter()
        .filter(|r| r.iteration as u64 <= asked_at && decode(r, crate::model::Requant::Q8_0))
        .map(|r| crate::views::traffic::model_ms(r))
        .collect();
    let after: Vec<f64> = reports
        .iter()
        .filter(|r| r.iteration as u64 > asked_at && decode(r, crate::model::Requant::Q4))
        // The first pass over newly loaded weights pays for touching their memory (a
        // walker saw it take three times the steps after it): a warm-up, not timed.
        .skip(1)
        .take(Q4_STEPS)
        .map(|r| crate::views::traffic::model_ms(r))
        .collect();
    let median = crate::serve::latency::percentile;
    let last5 = &before[before.len().saturating_sub(5)..];
    (after.len() >= Q4_STEPS && !last5.is_empty())
        .then(|| (median(last5, 50.0), median(&after, 50.0), last5.len()))
}

/// The band of the 4-bit steps' median model time over the 8-bit ones', and its neighbour
/// when within 10% of the edge between them.
fn q4_outcome(
    live: &LiveChoices,
    chosen: u64,
    app: &LiveState,
    new: &StepReport,
) -> Option<(bool, String)> {
    let asked_at = live.before.get(1).copied().unwrap_or(0);
    let (q8, q4, n8) = q4_medians(asked_at, app, new)?;
    let ratio = q4 / q8.max(1e-9);
    let own = Q4_EDGES.iter().filter(|&&e| ratio > e).count() as u64;
    let mut right = vec![own];
    if let Some(i) = Q4_EDGES.iter().position(|&e| near_edge(ratio, e)) {
        right = vec![i as u64, i as u64 + 1];
    }
    let bytes_before = live.before.first().copied().unwrap_or(0).max(1) as f64;
    let bytes = new.info.traffic.weight_bytes as f64;
    let shrink = bytes / bytes_before;
    let reading = if ratio > shrink + 0.05 {
        "unpacking 4-bit numbers is arithmetic the 8-bit kernel does not do, which keeps the gain below the bytes'"
    } else {
        "the time shrank with the bytes, as a step that waits on memory does"
    };
    let why = format!(
        "the 4-bit steps took {q4:.1} ms of model time (the median of {Q4_STEPS} after a warm-up step) against {q8:.1} ms with 8-bit weights (the median of the last {n8}, {ratio:.2}×), while the weight bytes fell from {:.1} to {:.1} MB ({shrink:.2}×): {reading}{}",
        bytes_before / 1e6,
        bytes / 1e6,
        both_said(right.len())
    );
    Some((right.contains(&chosen), why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttft_ratios_fall_in_the_band_their_label_names() {
        let cases = [
            (0.5, 0),
            (0.7, 1),
            (1.0, 1),
            (1.5, 1),
            (1.6, 2),
            (3.0, 2),
            (3.1, 3),
            (6.0, 3),
            (6.1, 4),
        ];
        for (ratio, band) in cases {
            assert_eq!(ttft_band(ratio), band, "{ratio}");
        }
        assert_eq!(TTFT_RATIO.len(), 5);
    }

    #[test]
    fn a_ratio_near_a_band_edge_grades_both_neighbours_right() {
        assert_eq!(ttft_bands(2.9), (vec![2, 3], Some(3.0)));
        assert_eq!(ttft_bands(3.2), (vec![2, 3], Some(3.0)));
        assert_eq!(ttft_bands(1.4), (vec![1, 2], Some(1.5)));
        assert_eq!(ttft_bands(0.7), (vec![0, 1], Some(1.0 / 1.5)));
        // Away from every edge: one band only.
        assert_eq!(ttft_bands(2.2), (vec![2], None));
        assert_eq!(ttft_bands(4.5), (vec![3], None));
        assert_eq!(ttft_bands(10.0), (vec![4], None));
    }

    #[test]
    fn a_value_near_any_band_edge_grades_both_neighbours_right() {
        // Log-scale choices: 1.0 and 3.0 meet at √3 ≈ 1.73.
        assert_eq!(nearest_with_edge(&[1, 3, 10], 1.7), vec![1, 3]);
        assert_eq!(nearest_with_edge(&[1, 3, 10], 1.2), vec![1]);
        assert_eq!(nearest_with_edge(&[1, 3, 10], 5.6), vec![3, 10]);
        // Weights against KV: "about the same" ends at a 10% gap.
        let t = |w: u64, kv: u64| Traffic {
            weight_bytes: w,
            kv_read_bytes: kv,
            ..Traffic::default()
        };
        let graded =
            |w, kv| -> Vec<u64> { (0..3).filter(|&c| dominant(c, &t(w, kv), "it").0).collect() };
        assert_eq!(graded(100, 50), vec![0]);
        assert_eq!(graded(100, 90), vec![0, 2]);
        assert_eq!(graded(157, 144), vec![0, 2]);
        assert_eq!(graded(100, 84), vec![0]);
        assert_eq!(graded(100, 97), vec![2]);
        assert_eq!(graded(90, 100), vec![1, 2]);
        assert!(dominant(2, &t(100, 90), "it").1.contains("both count"));
    }
}
