//! The attention heatmap as a picture: every query row of the request against every key,
//! token labels on both axes, the causal mask, the prompt/generation boundary and a legend.

use super::svg::{hex, Svg};
use super::ExportError;
use crate::views::heatmap::{Heatmap, Source, Window};
use crate::views::palette::ramp_rgb;

/// Where the grid sits and how big a cell is.
struct Frame {
    left: f32,
    top: f32,
    /// Cell size: cells shrink for long contexts.
    cs: f32,
    grid: f32,
}

const MASKED: &str = "#e6e6ea";
const BOUNDARY: &str = r##"stroke-width="2" stroke-dasharray="6 3""##;

/// The heatmap of the whole history of `src`'s layer and head.
pub fn render(src: &Source) -> Result<String, ExportError> {
    let v = Heatmap::build(src, Window::ALL).ok_or(ExportError::NoData(
        "no attention rows yet: run the prefill first".into(),
    ))?;
    let (r, n) = (src.report, v.len);
    let cs = (720.0 / n as f32).clamp(3.0, 22.0);
    let f = Frame {
        left: 120.0,
        top: 150.0,
        cs,
        grid: cs * n as f32,
    };
    let mut s = Svg::new(f.left + f.grid + 140.0, f.top + f.grid + 110.0);
    s.text(
        16.0,
        26.0,
        16.0,
        "start",
        &format!(
            "Attention · layer {} · query head {} (reads KV head {}) · {}",
            v.layer,
            v.head,
            v.kv_head,
            v.what()
        ),
        0.0,
    );
    s.text(
        16.0,
        46.0,
        11.0,
        "start",
        &format!(
            "{} · {} layout · iteration {} · {} prompt + {} generated tokens · rows: queries, columns: keys",
            r.cfg.architecture,
            r.settings.run.layout,
            r.iteration,
            v.prompt_len.min(n),
            n.saturating_sub(v.prompt_len)
        ),
        0.0,
    );
    cells(&mut s, &v, &f);
    labels(&mut s, &v, &f);
    boundary(&mut s, &v, &f);
    legend(&mut s, &v, &f);
    Ok(s.finish())
}

/// One rect per run of equal colour in a row (most weights sit near zero, so runs are
/// long), and one for the masked future: a 512-token picture stays a few MB, not 20.
fn cells(s: &mut Svg, v: &Heatmap, f: &Frame) {
    let n = v.len;
    let level = |x: f32| (x * 255.0).round() as u8;
    for i in 0..n {
        let y = f.top + i as f32 * f.cs;
        let mut j = 0;
        while j <= i {
            let Some(l) = v.cell(i, j).map(level) else {
                break;
            };
            let mut e = j + 1;
            while e <= i && v.cell(i, e).map(level) == Some(l) {
                e += 1;
            }
            let fill = hex(ramp_rgb(l as f32 / 255.0));
            s.rect(
                f.left + j as f32 * f.cs,
                y,
                (e - j) as f32 * f.cs,
                f.cs,
                &fill,
                "",
            );
            j = e;
        }
        if j < n {
            s.rect(
                f.left + j as f32 * f.cs,
                y,
                (n - j) as f32 * f.cs,
                f.cs,
                MASKED,
                "",
            );
        }
    }
}

/// Token labels on both axes, thinned out to stay legible; generated rows marked `+`.
fn labels(s: &mut Svg, v: &Heatmap, f: &Frame) {
    let n = v.len;
    let every = (10.0 / f.cs).ceil().max(1.0) as usize;
    let font = (f.cs * 0.62).clamp(8.0, 12.0);
    for i in (0..n).filter(|i| i % every == 0 || *i == n - 1) {
        let y = f.top + (i as f32 + 0.5) * f.cs + font * 0.35;
        let gen = if v.generated(i) { "+ " } else { "" };
        let row = format!("{gen}{}  {i}", short(v.piece(i)));
        s.text(f.left - 6.0, y, font, "end", &row, 0.0);
        let x = f.left + (i as f32 + 0.5) * f.cs + font * 0.35;
        s.text(x, f.top - 6.0, font, "start", &short(v.piece(i)), -60.0);
    }
}

/// The prompt/generation boundary, dashed across both axes.
fn boundary(s: &mut Svg, v: &Heatmap, f: &Frame) {
    if v.prompt_len == 0 || v.prompt_len >= v.len {
        return;
    }
    let b = v.prompt_len as f32 * f.cs;
    let (l, t, g) = (f.left, f.top, f.grid);
    s.line((l - 4.0, t + b), (l + g + 4.0, t + b), "#d62728", BOUNDARY);
    s.line((l + b, t - 4.0), (l + b, t + g + 4.0), "#d62728", BOUNDARY);
    s.text(l + g + 8.0, t + b - 6.0, 11.0, "start", "prompt ↑", 0.0);
    s.text(l + g + 8.0, t + b + 14.0, 11.0, "start", "generated ↓", 0.0);
}

/// The colour scale with its ends, the masked cell, and the boundary line.
fn legend(s: &mut Svg, v: &Heatmap, f: &Frame) {
    let (l, ly) = (f.left, f.top + f.grid + 34.0);
    s.ramp_bar(l, ly, 240.0, 14.0);
    s.text(l, ly + 30.0, 11.0, "start", &format!("{:.3}", v.lo), 0.0);
    s.text(
        l + 240.0,
        ly + 30.0,
        11.0,
        "end",
        &format!("{:.3}", v.hi),
        0.0,
    );
    s.rect(l + 270.0, ly, 14.0, 14.0, MASKED, "");
    s.text(
        l + 290.0,
        ly + 11.0,
        11.0,
        "start",
        "masked (future key)",
        0.0,
    );
    s.line(
        (l + 430.0, ly + 7.0),
        (l + 460.0, ly + 7.0),
        "#d62728",
        BOUNDARY,
    );
    let text = "prompt | generation boundary";
    s.text(l + 466.0, ly + 11.0, 11.0, "start", text, 0.0);
}

/// A token piece cut to a label's length.
fn short(p: &str) -> String {
    let c: String = p.chars().take(14).collect();
    if c.trim().is_empty() {
        format!("'{c}'")
    } else {
        c
    }
}
