//! The attention heatmap as a picture: every query row of the request against every key,
//! token labels on both axes, the causal mask, the prompt/generation boundary and a legend.

use super::svg::{hex, Svg};
use super::ExportError;
use crate::views::heatmap::{Heatmap, Source, Window};
use crate::views::palette::ramp_rgb;

/// The heatmap of the whole history of `src`'s layer and head.
pub fn render(src: &Source) -> Result<String, ExportError> {
    let v = Heatmap::build(src, Window::ALL).ok_or(ExportError::NoData(
        "no attention rows yet: run the prefill first".into(),
    ))?;
    let (r, head, n) = (src.report, v.head, v.len);
    // Cells shrink for long contexts; labels thin out to stay legible.
    let cs = (720.0 / n as f32).clamp(3.0, 22.0);
    let every = (10.0 / cs).ceil().max(1.0) as usize;
    let font = (cs * 0.62).clamp(8.0, 12.0);
    let (left, top) = (120.0, 150.0);
    let grid = cs * n as f32;
    let (w, h) = (left + grid + 140.0, top + grid + 110.0);
    let mut s = Svg::new(w, h);
    s.text(
        16.0,
        26.0,
        16.0,
        "start",
        &format!(
            "Attention · layer {} · query head {head} (reads KV head {}) · {}",
            v.layer,
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
            r.run.layout,
            r.iteration,
            r.prompt_len.min(n),
            n.saturating_sub(r.prompt_len)
        ),
        0.0,
    );
    // One rect per run of equal colour in a row (most weights sit near zero, so runs are
    // long), and one for the masked future: a 512-token picture stays a few MB, not 20.
    let level = |x: f32| (x * 255.0).round() as u8;
    let value = |i: usize, j: usize| v.cell(i, j);
    for i in 0..n {
        let y = top + i as f32 * cs;
        let mut j = 0;
        while j <= i {
            let Some(l) = value(i, j).map(level) else {
                break;
            };
            let mut e = j + 1;
            while e <= i && value(i, e).map(level) == Some(l) {
                e += 1;
            }
            let fill = hex(ramp_rgb(l as f32 / 255.0));
            s.rect(left + j as f32 * cs, y, (e - j) as f32 * cs, cs, &fill, "");
            j = e;
        }
        if j < n {
            s.rect(
                left + j as f32 * cs,
                y,
                (n - j) as f32 * cs,
                cs,
                "#e6e6ea",
                "",
            );
        }
    }
    let piece = |i: usize| v.piece(i);
    for i in (0..n).filter(|i| i % every == 0 || *i == n - 1) {
        let y = top + (i as f32 + 0.5) * cs + font * 0.35;
        let gen = if v.generated(i) { "+ " } else { "" };
        s.text(
            left - 6.0,
            y,
            font,
            "end",
            &format!("{gen}{}  {i}", short(piece(i))),
            0.0,
        );
        let x = left + (i as f32 + 0.5) * cs + font * 0.35;
        s.text(x, top - 6.0, font, "start", &short(piece(i)), -60.0);
    }
    if r.prompt_len > 0 && r.prompt_len < n {
        let b = r.prompt_len as f32 * cs;
        let dash = r##"stroke-width="2" stroke-dasharray="6 3""##;
        s.line(
            (left - 4.0, top + b),
            (left + grid + 4.0, top + b),
            "#d62728",
            dash,
        );
        s.line(
            (left + b, top - 4.0),
            (left + b, top + grid + 4.0),
            "#d62728",
            dash,
        );
        s.text(
            left + grid + 8.0,
            top + b - 6.0,
            11.0,
            "start",
            "prompt ↑",
            0.0,
        );
        s.text(
            left + grid + 8.0,
            top + b + 14.0,
            11.0,
            "start",
            "generated ↓",
            0.0,
        );
    }
    // Legend.
    let ly = top + grid + 34.0;
    s.ramp_bar(left, ly, 240.0, 14.0);
    s.text(left, ly + 30.0, 11.0, "start", &format!("{:.3}", v.lo), 0.0);
    s.text(
        left + 240.0,
        ly + 30.0,
        11.0,
        "end",
        &format!("{:.3}", v.hi),
        0.0,
    );
    s.rect(left + 270.0, ly, 14.0, 14.0, "#e6e6ea", "");
    s.text(
        left + 290.0,
        ly + 11.0,
        11.0,
        "start",
        "masked (future key)",
        0.0,
    );
    s.line(
        (left + 430.0, ly + 7.0),
        (left + 460.0, ly + 7.0),
        "#d62728",
        r##"stroke-width="2" stroke-dasharray="6 3""##,
    );
    s.text(
        left + 466.0,
        ly + 11.0,
        11.0,
        "start",
        "prompt | generation boundary",
        0.0,
    );
    Ok(s.finish())
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
