//! The head-sharing diagram: each query head joined to the KV head it reads under the
//! current layout, and what each layout costs in KV bytes.

use super::svg::{hex, Svg};
use super::ExportError;
use crate::report::StepReport;
use crate::views::heads::Heads;
use crate::views::palette::request_rgb;

/// Width of a query head's box.
const BOX_W: f32 = 54.0;
/// Gap between two boxes.
const GAP: f32 = 14.0;

/// The diagram for a report, the selected query head outlined.
pub fn render(r: &StepReport, selected: usize) -> Result<String, ExportError> {
    let v = Heads::of(r).ok_or(ExportError::NoData(
        "no head mapping yet: run a step first".into(),
    ))?;
    let (nq, n_kv) = (v.map.len(), v.n_kv);
    let width = (nq as f32 * (BOX_W + GAP)).max(520.0) + 80.0;
    let mut s = Svg::new(width, 420.0);
    s.text(
        24.0,
        28.0,
        16.0,
        "start",
        &format!(
            "Heads · {} · {nq} query heads read {n_kv} KV head(s)",
            r.settings.run.layout
        ),
        0.0,
    );
    mapping(&mut s, &v.map, n_kv, selected);
    costs(&mut s, &v);
    Ok(s.finish())
}

/// Query heads above, KV heads below, a line from each query head to the KV head it reads.
fn mapping(s: &mut Svg, map: &[usize], n_kv: usize, selected: usize) {
    let nq = map.len();
    let (bw, gap) = (BOX_W, GAP);
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
}

/// The cost of each layout for this request's cache.
fn costs(s: &mut Svg, v: &Heads) {
    let ty = 300.0;
    s.text(40.0, ty, 12.0, "start", "layout", 0.0);
    s.text(200.0, ty, 12.0, "end", "KV bytes/token", 0.0);
    let total = format!("bytes for {} tokens", v.tokens);
    s.text(360.0, ty, 12.0, "end", &total, 0.0);
    for (i, &(l, bpt, total)) in v.costs.iter().enumerate() {
        let y = ty + 22.0 + i as f32 * 20.0;
        let mark = if l == v.layout { "▶ " } else { "  " };
        s.text(40.0, y, 12.0, "start", &format!("{mark}{l}"), 0.0);
        s.text(200.0, y, 12.0, "end", &bpt.to_string(), 0.0);
        s.text(
            360.0,
            y,
            12.0,
            "end",
            &crate::views::units::bytes(total),
            0.0,
        );
    }
}
