//! The output as a picture: the text so far and the next-token distribution the sampler
//! drew from, the sampled token marked — what the output pane shows.

use super::svg::Svg;
use super::ExportError;
use crate::report::StepReport;

/// Characters of generated text kept in the picture (its end, where the newest token is).
const TEXT_CHARS: usize = 300;
/// Characters per line of that text.
const LINE_CHARS: usize = 100;

/// The newest [`TEXT_CHARS`] characters of prompt and answer, in lines of
/// [`LINE_CHARS`], any whitespace a space.
fn text_lines(r: &StepReport) -> Vec<String> {
    let text: Vec<char> = format!("> {} {}", r.prompt, r.generated)
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
    if r.info.top_k.is_empty() {
        return Err(ExportError::NoData("no token sampled yet".into()));
    }
    let lines = text_lines(r);
    let top = 60.0 + 16.0 * lines.len() as f32 + 30.0;
    let (row, bar_w) = (22.0, 520.0);
    let mut s = Svg::new(820.0, top + row * r.info.top_k.len() as f32 + 30.0);
    s.text(
        24.0,
        28.0,
        16.0,
        "start",
        &format!("Output · step {} sampled {:?}", r.info.step, r.info.token),
        0.0,
    );
    for (i, l) in lines.iter().enumerate() {
        s.text(24.0, 56.0 + 16.0 * i as f32, 11.0, "start", l, 0.0);
    }
    s.text(
        24.0,
        top - 10.0,
        12.0,
        "start",
        "next-token distribution (top candidates)",
        0.0,
    );
    for (i, t) in r.info.top_k.iter().enumerate() {
        let y = top + row * i as f32;
        // Clamped: a recording is untrusted and a bar never outgrows the picture.
        let p = if t.prob.is_finite() {
            t.prob.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let fill = if t.id == r.info.token_id {
            "#c77c2a"
        } else {
            "#3b6ea5"
        };
        s.text(150.0, y + 15.0, 12.0, "end", &format!("{:?}", t.token), 0.0);
        s.rect(160.0, y + 4.0, (p * bar_w).max(0.5), row - 6.0, fill, "");
        s.text(
            166.0 + p * bar_w,
            y + 15.0,
            11.0,
            "start",
            &format!("{:.1}%", 100.0 * p),
            0.0,
        );
    }
    Ok(s.finish())
}
