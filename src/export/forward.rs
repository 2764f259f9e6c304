//! The forward pass as a picture: where one step's time went, stage by stage and layer by
//! layer, with the residual stream of the chosen layer — what the forward pane shows.

use super::svg::Svg;
use super::ExportError;
use crate::report::StepReport;
use crate::views::forward::{ForwardView, Stage};

/// The bar chart for a report; `layer` is the layer whose residual norms are quoted.
pub fn render(r: &StepReport, layer: usize) -> Result<String, ExportError> {
    let pass = ForwardView::new(r, layer);
    if pass.layers_ms().is_empty() {
        return Err(ExportError::NoData("no forward pass timed yet".into()));
    }
    let height = TOP + ROW * pass.stages.len() as f32 + 70.0;
    let mut s = Svg::new(820.0, height);
    let title = format!(
        "Forward pass · {} of {} token(s) · {:.1} ms",
        pass.what,
        pass.input_len,
        pass.total_ms()
    );
    s.text(24.0, 28.0, 16.0, "start", &title, 0.0);
    s.text(
        24.0,
        50.0,
        11.0,
        "start",
        "embed → every layer (attention + MLP) → LM head → sample; bar length = time",
        0.0,
    );
    bars(&mut s, &pass.stages);
    if let Some(text) = &pass.residual {
        let foot = TOP + ROW * pass.stages.len() as f32 + 30.0;
        s.text(24.0, foot, 12.0, "start", text, 0.0);
    }
    Ok(s.finish())
}

/// Height of one stage's row.
const ROW: f32 = 18.0;
/// Where the first row starts, below the title.
const TOP: f32 = 70.0;
/// Length of the slowest stage's bar.
const BAR_W: f32 = 560.0;

/// One bar per stage, its length its share of the slowest stage.
fn bars(s: &mut Svg, stages: &[Stage]) {
    let max = stages.iter().map(|s| s.ms).fold(1e-9, f64::max);
    for (i, stage) in stages.iter().enumerate() {
        let y = TOP + ROW * i as f32;
        let w = (stage.ms / max) as f32 * BAR_W;
        let fill = if stage.layer { "#3b6ea5" } else { "#c77c2a" };
        s.text(100.0, y + 12.0, 11.0, "end", &stage.name, 0.0);
        s.rect(110.0, y + 2.0, w.max(0.5), ROW - 4.0, fill, "");
        s.text(
            116.0 + w,
            y + 12.0,
            10.0,
            "start",
            &format!("{:.2} ms", stage.ms),
            0.0,
        );
    }
}
