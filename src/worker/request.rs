//! The live request: one chat request run step by step, every layer captured within a
//! memory bound, each step turned into a report. The app's worker drives it; benchmarks
//! and recordings run it headlessly through [`run_request`].

use crate::model::session::Session;
use crate::model::{LayerSelect, Model, Probe, SamplerConfig};
use crate::report::{KvReport, StepReport};
use crate::settings::Settings;

/// The live request: its session and the figures its reports carry.
pub(super) struct Live {
    pub(super) session: Session,
    pub(super) prompt: String,
    decode_ms: f64,
    decode_steps: usize,
    pub(super) finished: bool,
}

/// Starts a chat request on `prompt` (or on `tokens` as they are).
pub(super) fn start(
    model: &Model,
    prompt: &str,
    max_new: usize,
    tokens: Option<Vec<u32>>,
    sampler: SamplerConfig,
) -> Result<Live, super::WorkerError> {
    let ids = match tokens {
        Some(t) => t,
        // What a person types is text: a `<|im_end|>` in it cannot close the turn.
        None => model.tokenizer.encode_chat(prompt, true)?,
    };
    model.cfg.check_fits(ids.len(), max_new)?;
    let mut session = Session::new(model, ids, max_new, sampler);
    session.probe.select = LayerSelect::All;
    session.top_k = 8;
    Ok(Live {
        session,
        prompt: prompt.to_string(),
        decode_ms: 0.0,
        decode_steps: 0,
        finished: false,
    })
}

/// Scores and weights (f32 each) all layers may capture in one step: short contexts show
/// every layer, so j / k move through layers with their history intact.
pub const CAPTURE_ALL_BYTES: usize = 16 << 20;
/// Most query rows a layer's capture keeps (more than any screen shows at once).
pub const MAX_CAPTURE_ROWS: usize = 512;
/// What one focused layer may capture in one step, when all layers would be too much.
pub const CAPTURE_ONE_BYTES: usize = 48 << 20;

/// Decides what the probe captures in the next step, so that a report's size is bounded
/// by what the screen shows, whatever the prompt's length: every layer while that is
/// small, else the focused layer's newest rows.
pub fn plan_capture(
    probe: &mut Probe,
    cfg: &crate::model::LlamaConfig,
    rows: (usize, usize),
    focus: usize,
) {
    let (t, keys) = rows;
    let per_row = (cfg.n_head * keys * 8).max(1);
    let all_rows = CAPTURE_ALL_BYTES / (cfg.n_layer * per_row).max(1);
    if all_rows >= t.min(MAX_CAPTURE_ROWS) {
        probe.select = LayerSelect::All;
        probe.row_limit = Some(all_rows.max(1));
    } else {
        probe.select = LayerSelect::One(focus.min(cfg.n_layer - 1));
        probe.row_limit = Some((CAPTURE_ONE_BYTES / per_row).clamp(1, MAX_CAPTURE_ROWS));
    }
}

/// Runs one iteration of the live request and builds its report.
pub(super) fn next_report(
    live: &mut Live,
    model: &Model,
    iteration: usize,
    max_new: usize,
    settings: &Settings,
) -> Result<StepReport, super::WorkerError> {
    let rows = live.session.next_rows();
    plan_capture(
        &mut live.session.probe,
        &model.cfg,
        rows,
        settings.watch.layer,
    );
    let info = live.session.step()?;
    if info.step > 0 {
        live.decode_ms += info.wall_ms;
        live.decode_steps += 1;
    }
    let s = &live.session;
    live.finished = info.is_eos || s.generated().len() >= max_new;
    let tok = &model.tokenizer;
    let pieces = s.tokens[..s.tokens.len() - 1]
        .iter()
        .map(|&t| tok.piece(t))
        .collect();
    let generated = tok.decode(s.generated()).unwrap_or_default();
    Ok(StepReport {
        iteration,
        cfg: model.cfg.clone(),
        // The model's own options: what this iteration really ran under.
        settings: Settings {
            run: model.run_options(),
            ..*settings
        },
        prompt: live.prompt.clone(),
        pieces,
        prompt_len: s.prompt_len,
        generated,
        kv: KvReport {
            capacity: s.kv.capacity(),
            used: s.kv.len(),
            bytes_per_token: s.kv.bytes_per_token(),
            reserved_bytes: s.kv.reserved_bytes(),
        },
        decode_tok_per_s: if live.decode_ms > 0.0 {
            live.decode_steps as f64 / (live.decode_ms / 1e3)
        } else {
            0.0
        },
        finished: live.finished,
        recomputed: false,
        repeat: false,
        info,
        serve: None,
        serve_compare: None,
        sink: None,
        beside: None,
    })
}

/// Runs `steps` iterations of one chat request headlessly and returns their reports
/// (what the app would have received), for benchmarks and recordings.
pub fn run_request(
    model: &Model,
    prompt: &str,
    max_new: usize,
    steps: usize,
) -> Result<Vec<StepReport>, super::WorkerError> {
    let mut live = start(model, prompt, max_new, None, SamplerConfig::default())?;
    let mut out = Vec::new();
    for i in 0..steps {
        if live.finished {
            break;
        }
        out.push(next_report(
            &mut live,
            model,
            i + 1,
            max_new,
            &Settings::default(),
        )?);
    }
    Ok(out)
}
