//! The memory-traffic pane as a picture: the iteration's bytes by kind, the crossover, and
//! the roofline of this machine with the measured iterations on it.

use super::svg::Svg;
use super::ExportError;
use crate::model::traffic::Traffic;
use crate::views::traffic::{self, Roof, Row, TrafficView};

/// Colours of the byte kinds, in the order of `kinds`.
const FILLS: [&str; 4] = ["#3b6ea5", "#c0392b", "#e08e79", "#9a9a9a"];

/// The picture of a traffic view.
pub fn render(v: &TrafficView) -> Result<String, ExportError> {
    if v.now.traffic.flops == 0 {
        return Err(ExportError::NoData(
            "this iteration has no traffic counts (a recording made before they existed)".into(),
        ));
    }
    let mut s = Svg::new(820.0, 640.0);
    s.text(24.0, 28.0, 15.0, "start", "Memory traffic", 0.0);
    let mut y = 52.0;
    for row in v.rows(false) {
        match row {
            Row::Text(t) => {
                // The bars carry their own legend; the terminal's glyph keys go.
                let t = t.replace(['█', '▓', '▒', '░'], "").replace("  ", " ");
                s.text(24.0, y, 11.0, "start", &t, 0.0);
                y += 18.0;
            }
            Row::Bar(t) => {
                share_bar(&mut s, &t, y - 8.0);
                y += 22.0;
            }
        }
    }
    let items: Vec<(&str, &str, &str)> = ["weights", "KV read", "KV write", "scores"]
        .iter()
        .zip(FILLS)
        .map(|(name, fill)| (fill, "", *name))
        .collect();
    s.legend(24.0, y, &items);
    match &v.roof {
        Some(roof) => roofline(&mut s, v, roof, y + 60.0),
        None => s.text(
            24.0,
            y + 50.0,
            12.0,
            "start",
            "No roofline: this machine's limits were not measured (inferlab bench machine).",
            0.0,
        ),
    }
    Ok(s.finish())
}

/// One bar split by bytes: weights, KV read, KV written, scores.
fn share_bar(s: &mut Svg, t: &Traffic, y: f32) {
    let kinds = [
        t.weight_bytes,
        t.kv_read_bytes,
        t.kv_write_bytes,
        t.score_bytes,
    ];
    let total = kinds.iter().sum::<u64>().max(1) as f32;
    let mut x = 24.0;
    for (n, fill) in kinds.iter().zip(FILLS) {
        let dx = 770.0 * *n as f32 / total;
        s.rect(x, y, dx, 14.0, fill, "");
        x += dx;
    }
}

/// Log-log axes with the machine's slope and roof and one marker per measured iteration.
fn roofline(s: &mut Svg, v: &TrafficView, roof: &Roof, top: f32) {
    let (x, y) = traffic::axes(roof, &v.points);
    let plot = Plot {
        x,
        y,
        left: 90.0,
        right: 780.0,
        top,
        bottom: 590.0,
    };
    grid(s, &plot);
    roof_lines(s, &plot, roof);
    for p in &v.points {
        let (x, y) = (
            plot.px(p.at.intensity().log10()),
            plot.py(p.at.gops().log10()),
        );
        let fill = if p.now { "#c77c2a" } else { "#3b6ea5" };
        s.rect(x - 5.0, y - 5.0, 10.0, 10.0, fill, "");
        s.text(
            x + 8.0,
            y + 4.0,
            10.0,
            "start",
            &format!(
                "{} · {:.1} op/B · {:.1} G op/s",
                p.label,
                p.at.intensity(),
                p.at.gops()
            ),
            0.0,
        );
    }
}

/// Where the roofline sits: its log10 ranges and its box on the picture.
struct Plot {
    /// log10 of the operations per byte at the left and right edges.
    x: (f64, f64),
    /// log10 of G op/s at the bottom and top edges.
    y: (f64, f64),
    left: f32,
    right: f32,
    top: f32,
    bottom: f32,
}

impl Plot {
    fn px(&self, lx: f64) -> f32 {
        let (x0, x1) = self.x;
        self.left + (self.right - self.left) * ((lx - x0) / (x1 - x0)) as f32
    }

    fn py(&self, ly: f64) -> f32 {
        let (y0, y1) = self.y;
        self.bottom - (self.bottom - self.top) * ((ly - y0) / (y1 - y0)) as f32
    }
}

/// A grid line and label at every power of ten, and the axis names.
fn grid(s: &mut Svg, p: &Plot) {
    let (left, right, top, bottom) = (p.left, p.right, p.top, p.bottom);
    for e in p.x.0 as i32..=p.x.1 as i32 {
        let x = p.px(e as f64);
        s.line((x, top), (x, bottom), "#e6e6e6", "");
        s.text(
            x,
            bottom + 16.0,
            10.0,
            "middle",
            &format!("{}", 10f64.powi(e)),
            0.0,
        );
    }
    for e in p.y.0 as i32..=p.y.1 as i32 {
        let y = p.py(e as f64);
        s.line((left, y), (right, y), "#e6e6e6", "");
        s.text(
            left - 6.0,
            y + 4.0,
            10.0,
            "end",
            &format!("{}", 10f64.powi(e)),
            0.0,
        );
    }
    s.text(
        (left + right) / 2.0,
        bottom + 34.0,
        11.0,
        "middle",
        "arithmetic intensity (operations per byte moved)",
        0.0,
    );
    s.text(30.0, (top + bottom) / 2.0, 11.0, "middle", "G op/s", -90.0);
}

/// The bandwidth slope up to the ridge, the compute roof after it, and their figures.
fn roof_lines(s: &mut Svg, p: &Plot, roof: &Roof) {
    let ridge = roof.ridge().log10();
    let slope_start = (p.x.0, (roof.read_gb_per_s * 10f64.powf(p.x.0)).log10());
    let at_ridge = (ridge, roof.peak_gops.log10());
    let stroke = r#"stroke-width="2""#;
    s.line(
        (p.px(slope_start.0), p.py(slope_start.1)),
        (p.px(at_ridge.0), p.py(at_ridge.1)),
        "#333333",
        stroke,
    );
    s.line(
        (p.px(at_ridge.0), p.py(at_ridge.1)),
        (p.px(p.x.1), p.py(at_ridge.1)),
        "#333333",
        stroke,
    );
    s.text(
        p.right - 4.0,
        p.py(at_ridge.1) - 6.0,
        10.0,
        "end",
        &format!(
            "int8 peak {:.0} G op/s · ridge {:.0} op/byte · read {:.1} GB/s",
            roof.peak_gops,
            roof.ridge(),
            roof.read_gb_per_s
        ),
        0.0,
    );
}
