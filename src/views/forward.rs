//! Where one forward pass's time went, decided once: its stages in order with their
//! times, and the chosen layer's residual stream. The forward pane draws it as a line
//! and a sparkline, `export --pane forward` as bars.

use crate::report::StepReport;

/// A stage of the pass and its wall time.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    pub name: String,
    /// Milliseconds; a time a recording gives as negative or not finite reads 0.
    pub ms: f64,
    /// One of the transformer layers (not embed, LM head or sample).
    pub layer: bool,
}

/// One pass: what it ran on, its stages, and the residual line of the chosen layer.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardView {
    /// "prefill" or "decode".
    pub what: &'static str,
    pub input_len: usize,
    /// embed, layer 0 … layer n−1, LM head, sample.
    pub stages: Vec<Stage>,
    /// `layer`'s residual norm of the newest token, in → after attention → after the MLP,
    /// when that layer was captured.
    pub residual: Option<String>,
    /// Of the stages' time, what the panes' capture took (the status line shows the rest).
    pub observe_ms: f64,
}

impl ForwardView {
    /// The pass of report `r`, with `layer`'s residual stream.
    pub fn new(r: &StepReport, layer: usize) -> Self {
        let t = &r.info.timing;
        let stage = |name: String, ms: f64, layer| Stage {
            name,
            ms: if ms.is_finite() { ms.max(0.0) } else { 0.0 },
            layer,
        };
        let mut stages = vec![stage("embed".into(), t.embed_ms, false)];
        stages.extend(
            t.layers_ms
                .iter()
                .enumerate()
                .map(|(i, &ms)| stage(format!("layer {i}"), ms, true)),
        );
        // The logit lens runs every layer's residual through the LM head inside this stage.
        let head = match r.info.logit_lens.is_empty() {
            true => "LM head",
            false => "LM head + lens",
        };
        stages.push(stage(head.into(), t.lm_head_ms, false));
        stages.push(stage("sample".into(), r.info.sample_ms, false));
        Self {
            what: if r.info.step == 0 {
                "prefill"
            } else {
                "decode"
            },
            input_len: r.info.input_len,
            stages,
            observe_ms: t.observe_ms.max(0.0),
            residual: residual(r, layer),
        }
    }

    /// The whole pass, milliseconds.
    pub fn total_ms(&self) -> f64 {
        self.stages.iter().map(|s| s.ms).sum()
    }

    /// Each layer's time, in order.
    pub fn layers_ms(&self) -> Vec<f64> {
        self.stages
            .iter()
            .filter(|s| s.layer)
            .map(|s| s.ms)
            .collect()
    }

    /// The pass in one line: tokens and the whole time, then each kind of stage's.
    pub fn summary(&self) -> String {
        let find = |name: &str| self.stages.iter().find(|s| s.name.starts_with(name));
        let of = |name: &str| find(name).map_or(0.0, |s| s.ms);
        let head = find("LM head").map_or("LM head", |s| s.name.as_str());
        let layers: f64 = self.layers_ms().iter().sum();
        // The total first: a narrow pane cuts the line's end. The stages' times include
        // the capture for the panes, so the total says how much of it that was.
        let looking = match self.observe_ms >= 0.05 {
            true => format!(" ({:.1} ms capturing)", self.observe_ms),
            false => String::new(),
        };
        format!(
            "{} tok in {:.1} ms{looking}: embed {:.2} · layers {:.1} · {head} {:.1} · sample {:.2}",
            self.input_len,
            self.total_ms(),
            of("embed"),
            layers,
            of("LM head"),
            of("sample"),
        )
    }
}

/// `layer`'s residual norms of the newest token, when the report captured that layer.
fn residual(r: &StepReport, layer: usize) -> Option<String> {
    let c = r.info.captures.iter().find(|c| c.layer == layer)?;
    let last = c.t.checked_sub(1)?;
    let norm = |v: &[f32]| v.get(last).copied().unwrap_or(f32::NAN);
    Some(format!(
        "layer {layer} ‖x‖: in {:.1} → +attention {:.1} → +SwiGLU MLP {:.1}",
        norm(&c.resid_norm_in),
        norm(&c.resid_norm_attn),
        norm(&c.resid_norm_out)
    ))
}
