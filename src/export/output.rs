//! The output as a picture: the text so far and the next-token distribution the sampler
//! drew from, the sampled token marked — what the output pane shows.

use super::svg::Svg;
use super::ExportError;
use crate::report::StepReport;
use crate::views::output::OutputView;

/// Characters of generated text kept in the picture (its end, where the newest token is).
const TEXT_CHARS: usize = 300;
/// Characters per line of that text.
const LINE_CHARS: usize = 100;

/// The newest [`TEXT_CHARS`] characters of prompt and answer, in lines of
/// [`LINE_CHARS`], any whitespace a space.
fn text_lines(out: &OutputView) -> Vec<String> {
    let text: Vec<char> = out
        .text
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    let tail = &text[text.len().saturating_sub(TEXT_CHARS)..];
    tail.chunks(LINE_CHARS)
        .map(|c| c.iter().collect())
        .collect()
}

/// The picture for a report.
pub fn render(r: &StepReport) -> Result<String, ExportError> {
    let out = OutputView::new(r);
    if out.bars.is_empty() {
        return Err(ExportError::NoData("no token sampled yet".into()));
    }
    let lines = text_lines(&out);
    let top = 60.0 + 16.0 * lines.len() as f32 + 30.0;
    let (row, bar_w) = (22.0, 520.0);
    let mut s = Svg::new(820.0, top + row * out.bars.len() as f32 + 30.0);
    s.text(
        24.0,
        28.0,
        16.0,
        "start",
        &format!("Output · {}", out.head),
        0.0,
    );
    for (i, l) in lines.iter().enumerate() {
        s.text(24.0, 56.0 + 16.0 * i as f32, 11.0, "start", l, 0.0);
    }
    let what = "next-token distribution (top candidates); bar length = what the step drew with";
    s.text(24.0, top - 10.0, 12.0, "start", what, 0.0);
    for (i, b) in out.bars.iter().enumerate() {
        let y = top + row * i as f32;
        let fill = if b.chosen { "#c77c2a" } else { "#3b6ea5" };
        let w = b.share() * bar_w;
        s.text(150.0, y + 15.0, 12.0, "end", &format!("{:?}", b.token), 0.0);
        s.rect(160.0, y + 4.0, w.max(0.5), row - 6.0, fill, "");
        s.text(166.0 + w, y + 15.0, 11.0, "start", b.figures().trim(), 0.0);
    }
    Ok(s.finish())
}
