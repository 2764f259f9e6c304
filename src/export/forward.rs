//! The forward pass as a picture: where one step's time went, stage by stage and layer by
//! layer, with the residual stream of the chosen layer — what the forward pane shows.

use super::svg::Svg;
use super::ExportError;
use crate::report::StepReport;

/// The bar chart for a report; `layer` is the layer whose residual norms are quoted.
pub fn render(r: &StepReport, layer: usize) -> Result<String, ExportError> {
    let stages = stages(r)?;
    let total: f64 = stages.iter().map(|s| s.1).sum();
    let height = TOP + ROW * stages.len() as f32 + 70.0;
    let mut s = Svg::new(820.0, height);
    let what = if r.info.step == 0 {
        "prefill"
    } else {
        "decode"
    };
    s.text(
        24.0,
        28.0,
        16.0,
        "start",
        &format!(
            "Forward pass · {what} of {} token(s) · {total:.1} ms",
            r.info.input_len
        ),
        0.0,
    );
    s.text(
        24.0,
        50.0,
        11.0,
        "start",
        "embed → every layer (attention + MLP) → LM head → sample; bar length = time",
        0.0,
    );
    bars(&mut s, &stages);
    let foot = TOP + ROW * stages.len() as f32 + 30.0;
    if let Some(c) = r.info.captures.iter().find(|c| c.layer == layer && c.t > 0) {
        let last = c.t - 1;
        let norm = |v: &[f32]| v.get(last).copied().unwrap_or(f32::NAN);
        s.text(
            24.0,
            foot,
            12.0,
            "start",
            &format!(
                "layer {layer} residual ‖x‖ of the newest token: in {:.1} → +attention {:.1} → +SwiGLU MLP {:.1}",
                norm(&c.resid_norm_in),
                norm(&c.resid_norm_attn),
                norm(&c.resid_norm_out)
            ),
            0.0,
        );
    }
    Ok(s.finish())
}

/// Height of one stage's row.
const ROW: f32 = 18.0;
/// Where the first row starts, below the title.
const TOP: f32 = 70.0;
/// Length of the slowest stage's bar.
const BAR_W: f32 = 560.0;

/// Every stage of the pass in order, with its time in ms.
fn stages(r: &StepReport) -> Result<Vec<(String, f64)>, ExportError> {
    let t = &r.info.timing;
    if t.layers_ms.is_empty() {
        return Err(ExportError::NoData("no forward pass timed yet".into()));
    }
    let mut stages: Vec<(String, f64)> = vec![("embed".into(), t.embed_ms)];
    stages.extend(
        t.layers_ms
            .iter()
            .enumerate()
            .map(|(i, &ms)| (format!("layer {i}"), ms)),
    );
    stages.push(("LM head".into(), t.lm_head_ms));
    stages.push(("sample".into(), r.info.sample_ms));
    Ok(stages)
}

/// One bar per stage, its length its share of the slowest stage.
fn bars(s: &mut Svg, stages: &[(String, f64)]) {
    // Non-finite times (a hand-edited recording) draw as zero rather than poison the scale.
    let max = stages
        .iter()
        .map(|s| s.1)
        .filter(|ms| ms.is_finite())
        .fold(1e-9, f64::max);
    for (i, (name, ms)) in stages.iter().enumerate() {
        let y = TOP + ROW * i as f32;
        let ms = if ms.is_finite() { ms.max(0.0) } else { 0.0 };
        let w = (ms / max) as f32 * BAR_W;
        let fill = if name.starts_with("layer") {
            "#3b6ea5"
        } else {
            "#c77c2a"
        };
        s.text(100.0, y + 12.0, 11.0, "end", name, 0.0);
        s.rect(110.0, y + 2.0, w.max(0.5), ROW - 4.0, fill, "");
        s.text(
            116.0 + w,
            y + 12.0,
            10.0,
            "start",
            &format!("{ms:.2} ms"),
            0.0,
        );
    }
}
