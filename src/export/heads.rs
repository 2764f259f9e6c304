//! The head-sharing diagram: each query head joined to the KV head it reads under the
//! current layout, and what each layout costs in KV bytes.

use super::svg::{hex, Svg};
use super::ExportError;
use crate::model::HeadLayout;
use crate::views::palette::request_rgb;
use crate::worker::report::StepReport;

/// The diagram for a report, the selected query head outlined.
pub fn render(r: &StepReport, selected: usize) -> Result<String, ExportError> {
    let map = &r.info.query_to_kv;
    if map.is_empty() {
        return Err(ExportError::NoData(
            "no head mapping yet: run a step first".into(),
        ));
    }
    let n_kv = map.iter().max().map(|m| m + 1).unwrap_or(1);
    let nq = map.len();
    let (bw, gap) = (54.0, 14.0);
    let width = (nq as f32 * (bw + gap)).max(520.0) + 80.0;
    let mut s = Svg::new(width, 420.0);
    s.text(
        24.0,
        28.0,
        16.0,
        "start",
        &format!(
            "Heads · {} · {nq} query heads read {n_kv} KV head(s)",
            r.run.layout
        ),
        0.0,
    );
    let qx = |h: usize| 40.0 + h as f32 * (bw + gap);
    let span = nq as f32 * (bw + gap) - gap;
    let kvw = (span / n_kv as f32 - gap).min(160.0);
    let kx =
        |g: usize| 40.0 + (span - n_kv as f32 * (kvw + gap) + gap) / 2.0 + g as f32 * (kvw + gap);
    let (qy, ky) = (70.0, 200.0);
    for (h, &g) in map.iter().enumerate() {
        let c = hex(request_rgb(g));
        s.line(
            (qx(h) + bw / 2.0, qy + 34.0),
            (kx(g) + kvw / 2.0, ky),
            &c,
            r#"stroke-width="2""#,
        );
        let extra = if h == selected {
            r##"stroke="#111111" stroke-width="3""##
        } else {
            ""
        };
        s.rect(qx(h), qy, bw, 34.0, &c, extra);
        s.text(
            qx(h) + bw / 2.0,
            qy + 22.0,
            12.0,
            "middle",
            &format!("q{h}"),
            0.0,
        );
    }
    for g in 0..n_kv {
        s.rect(kx(g), ky, kvw, 34.0, &hex(request_rgb(g)), "");
        s.text(
            kx(g) + kvw / 2.0,
            ky + 22.0,
            12.0,
            "middle",
            &format!("K/V head {g}"),
            0.0,
        );
    }
    s.text(24.0, qy - 10.0, 11.0, "start", "query heads", 0.0);
    s.text(
        24.0,
        ky + 54.0,
        11.0,
        "start",
        "KV heads (what the cache stores)",
        0.0,
    );
    // The cost of each layout for this request's cache.
    let tokens = r.kv.capacity.max(r.pieces.len());
    let ty = 300.0;
    s.text(40.0, ty, 12.0, "start", "layout", 0.0);
    s.text(200.0, ty, 12.0, "end", "KV bytes/token", 0.0);
    s.text(
        360.0,
        ty,
        12.0,
        "end",
        &format!("bytes for {tokens} tokens"),
        0.0,
    );
    for (i, l) in HeadLayout::ALL.iter().enumerate() {
        let bpt = r.info.kv_bytes_per_token.get(l).copied().unwrap_or(0);
        let y = ty + 22.0 + i as f32 * 20.0;
        let mark = if *l == r.run.layout { "▶ " } else { "  " };
        s.text(40.0, y, 12.0, "start", &format!("{mark}{l}"), 0.0);
        s.text(200.0, y, 12.0, "end", &bpt.to_string(), 0.0);
        s.text(
            360.0,
            y,
            12.0,
            "end",
            &crate::views::units::bytes(bpt * tokens),
            0.0,
        );
    }
    Ok(s.finish())
}
