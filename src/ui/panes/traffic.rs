//! Memory traffic: the bytes this iteration moved (weights, KV, attention scores) and the
//! work it did, against this machine's measured limits; where the KV cache overtakes the
//! weights; a roofline with the prefill, a B=1 decode and the serving batch on it.

use super::{block, put};
use crate::model::traffic::Traffic;
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::views::traffic::{self, Roof, Row, TrafficView};
use crate::views::units::{self, fit};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::widgets::canvas::{Canvas, Line as CanvasLine};
use ratatui::widgets::Widget;

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let b = block(
        app,
        theme,
        Pane::Traffic,
        " memory traffic ".into(),
        area.width,
    );
    let inner = b.inner(area);
    b.render(area, buf);
    if let Some(r) = app.report() {
        let past = app.frames.past().iter().map(|p| p.as_ref());
        draw(
            &traffic::view(r, past, app.worker.machine.as_ref()),
            app.points_at(),
            theme,
            inner,
            buf,
        );
    }
}

/// Draws a traffic view into `inner`: the figures first, each line wrapped rather than
/// cut, then the roofline where six rows are left, else the roofline in one line. When
/// the rows do not all fit, those least telling give way first, and a row holding what
/// a lesson step points at (`keep`) last.
pub fn draw(v: &TrafficView, keep: &[String], theme: &Theme, inner: Rect, buf: &mut Buffer) {
    let width = inner.width as usize;
    let mut groups: Vec<(Vec<Row>, u8)> = v
        .rows(inner.width < 60)
        .into_iter()
        .enumerate()
        .map(|(i, row)| match row {
            Row::Text(text) => {
                let give = give_way(i, &text, keep);
                let lines = units::wrap(&text, width).into_iter().map(Row::Text);
                (lines.collect(), give)
            }
            // A bar gives way with its legend's rank: a later pair goes before an earlier.
            bar => (vec![bar], 1),
        })
        .collect();
    let used: usize = groups.iter().map(|g| g.0.len()).sum();
    let chart = v
        .roof
        .filter(|_| used + 6 <= inner.height as usize && inner.width >= 30);
    match (&v.roof, chart) {
        (Some(roof), None) => {
            let text = one_line_roof(v, roof);
            let lines = units::wrap(&text, width).into_iter().map(Row::Text);
            groups.push((lines.collect(), give_way(usize::MAX, &text, keep)));
        }
        (None, _) => groups.push((
            vec![Row::Text(
                "limits: measuring this machine (inferlab bench machine)…".into(),
            )],
            0,
        )),
        _ => {}
    }
    while groups.iter().map(|g| g.0.len()).sum::<usize>() > inner.height as usize {
        let Some(i) = (0..groups.len()).max_by_key(|&i| (groups[i].1, i)) else {
            break;
        };
        groups.remove(i);
    }
    let mut y = inner.y;
    for (i, (rows, _)) in groups.into_iter().enumerate() {
        for row in rows {
            match row {
                Row::Text(text) if i == 0 => put(buf, inner, 0, y, text, theme.accent()),
                Row::Text(text) => put(buf, inner, 0, y, text, Style::default()),
                Row::Bar(t) => share_bar(&t, theme, inner, y, buf),
            }
            y += 1;
        }
    }
    if let Some(roof) = chart {
        let rest = Rect {
            y,
            height: (inner.y + inner.height).saturating_sub(y),
            ..inner
        };
        roofline(v, &roof, theme, rest, buf);
    }
}

/// How readily the `i`th text row gives way when rows run short (higher goes first): the
/// headline never, a bar's legend (and its bar) after the notes, what a step points at
/// never.
fn give_way(i: usize, text: &str, keep: &[String]) -> u8 {
    if i == 0 || keep.iter().any(|k| text.contains(k.as_str())) {
        0
    } else if text.contains('█') {
        1
    } else {
        3
    }
}

/// The roofline where there is no room to draw it: the ridge and where each measured
/// iteration sits against it.
fn one_line_roof(v: &TrafficView, roof: &Roof) -> String {
    let ridge = roof.ridge();
    let points: Vec<String> = v
        .points
        .iter()
        .map(|p| {
            let at = p.at.intensity();
            let side = if at < ridge { "left" } else { "right" };
            format!("{} {at:.1} op/B ({side})", p.label)
        })
        .collect();
    format!(
        "roofline: ridge {ridge:.0} op/B · {} · left of it memory-bound",
        points.join(" · ")
    )
}

/// One row split by share of bytes: weights, KV read, KV written, scores.
fn share_bar(t: &Traffic, theme: &Theme, inner: Rect, y: u16, buf: &mut Buffer) {
    let parts = [
        (t.weight_bytes, '█', theme.accent()),
        (t.kv_read_bytes, '▓', theme.warm()),
        (t.kv_write_bytes, '▒', theme.warm()),
        (t.score_bytes, '░', theme.dim()),
    ];
    let total: u64 = parts.iter().map(|p| p.0).sum();
    if total == 0 || inner.width < 4 {
        return;
    }
    let w = inner.width as u64;
    let mut x = 0u16;
    for (n, ch, style) in parts {
        let cells = ((n * w + total / 2) / total) as u16;
        let cells = cells.min(inner.width - x);
        put(
            buf,
            inner,
            x,
            y,
            ch.to_string().repeat(cells as usize),
            style,
        );
        x += cells;
    }
}

/// The roofline on log-log axes: this machine's slope and roof, and the measured
/// iterations, each labelled where it sits.
fn roofline(v: &TrafficView, roof: &Roof, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let ((x0, x1), (y0, y1)) = traffic::axes(roof, &v.points);
    put(
        buf,
        area,
        0,
        area.y,
        fit(
            &format!(
                "roofline · ridge {:.0} op/B · int8 peak {:.0} G op/s · read {:.1} GB/s · G op/s vs op/byte",
                roof.ridge(),
                roof.peak_gops,
                roof.read_gb_per_s
            ),
            area.width as usize,
        ),
        theme.dim(),
    );
    const LEFT: u16 = 5;
    let plot = Rect {
        x: area.x + LEFT,
        y: area.y + 1,
        width: area.width - LEFT,
        height: area.height - 2,
    };
    axis_labels(plot, (x0, x1), (y0, y1), theme, buf);
    let line_color = theme.dim().fg.unwrap_or(Color::Reset);
    let ridge = (roof.ridge().log10(), roof.peak_gops.log10());
    let start = (x0, (roof.read_gb_per_s * 10f64.powf(x0)).log10());
    Canvas::default()
        .x_bounds([x0, x1])
        .y_bounds([y0, y1])
        .marker(Marker::Braille)
        .paint(|ctx| {
            for ((ax, ay), (bx, by)) in [(start, ridge), (ridge, (x1, ridge.1))] {
                ctx.draw(&CanvasLine::new(ax, ay, bx, by, line_color));
            }
        })
        .render(plot, buf);
    point_labels(v, plot, ((x0, x1), (y0, y1)), theme, buf);
}

/// Each measured point as a dot with its label beside it. Points close together would
/// print over each other's labels, so a label that would overlap one already placed
/// moves to the nearest free row (the dot stays where the point is).
fn point_labels(
    v: &TrafficView,
    plot: Rect,
    ((x0, x1), (y0, y1)): ((f64, f64), (f64, f64)),
    theme: &Theme,
    buf: &mut Buffer,
) {
    // The same cell mapping as the canvas's own labels.
    let cell = |x: f64, y: f64| {
        let col = (x - x0) * f64::from(plot.width.saturating_sub(1)) / (x1 - x0);
        let row = (y1 - y) * f64::from(plot.height.saturating_sub(1)) / (y1 - y0);
        (plot.x + col as u16, plot.y + row as u16)
    };
    let mut taken: Vec<(u16, u16, u16)> = Vec::new(); // (row, first col, past last col)
    let free = |taken: &[(u16, u16, u16)], row: u16, a: u16, b: u16| {
        taken.iter().all(|&(r, s, e)| r != row || b <= s || a >= e)
    };
    let style = |p: &traffic::Point| if p.now { theme.accent() } else { theme.warm() };
    // Every dot first, so that no later dot lands inside an earlier label.
    let dots: Vec<(&traffic::Point, u16, u16)> = (v.points.iter())
        .filter_map(|p| {
            let (x, y) = (p.at.intensity().log10(), p.at.gops().log10());
            let inside = (x0..=x1).contains(&x) && (y0..=y1).contains(&y);
            inside.then(|| (p, cell(x, y).0, cell(x, y).1))
        })
        .collect();
    for &(p, col, row) in &dots {
        buf.set_string(col, row, "●", style(p));
        taken.push((row, col, col + 1));
    }
    for (p, col, row) in dots {
        let style = style(p);
        let len = p.label.chars().count() as u16;
        let right = plot.x + plot.width;
        // Right of the dot where the label fits, else ending just left of it.
        let start = if col + 2 + len <= right {
            col + 2
        } else {
            col.saturating_sub(len + 1).max(plot.x)
        };
        let rows = [
            row,
            row.wrapping_sub(1),
            row + 1,
            row.wrapping_sub(2),
            row + 2,
        ];
        let Some(&r) = rows.iter().find(|&&r| {
            r >= plot.y && r < plot.y + plot.height && free(&taken, r, start, start + len)
        }) else {
            continue;
        };
        buf.set_stringn(start, r, p.label, (right - start) as usize, style);
        taken.push((r, start, start + len));
    }
}

/// Decade labels: G op/s down the left of `plot`, op/byte along the row below it.
fn axis_labels(
    plot: Rect,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
    theme: &Theme,
    buf: &mut Buffer,
) {
    let (w, h) = (
        plot.width.saturating_sub(1) as f64,
        plot.height.saturating_sub(1) as f64,
    );
    for e in y0 as i32..=y1 as i32 {
        let row = plot.y + (h - h * (e as f64 - y0) / (y1 - y0)).round() as u16;
        buf.set_stringn(
            plot.x - 5,
            row,
            format!("{:>4}", power_label(e)),
            4,
            theme.dim(),
        );
    }
    let below = plot.y + plot.height;
    for e in x0 as i32..=x1 as i32 {
        let col = plot.x + (w * (e as f64 - x0) / (x1 - x0)).round() as u16;
        let label = power_label(e);
        let col = col.min(plot.x + plot.width - label.len() as u16);
        buf.set_stringn(col, below, label, 4, theme.dim());
    }
}

/// 10^e as people write it: 0.1, 1, 10, 1k.
fn power_label(e: i32) -> String {
    match e {
        i32::MIN..=-1 => format!("{}", 10f64.powi(e)),
        0..=2 => format!("{}", 10i64.pow(e as u32)),
        _ => format!("{}k", 10i64.pow(e as u32 - 3)),
    }
}

/// The summary's headline: the weight and KV bytes this step read.
pub fn summary(_app: &App, r: &crate::report::StepReport) -> String {
    let t = &r.info.traffic;
    format!(
        "weights {} · KV read {} this step",
        units::bytes(t.weight_bytes as usize),
        units::bytes(t.kv_read_bytes as usize)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::traffic::Traffic;
    use crate::views::traffic::{Measured, Point};

    /// One decode-like point: `flops` over a gigabyte in `ms`.
    fn measured(flops: f64, ms: f64) -> Measured {
        Measured {
            traffic: Traffic {
                flops: flops as u64,
                weight_bytes: 1_000_000_000,
                ..Traffic::default()
            },
            tokens: 1,
            ms,
        }
    }

    /// The roofline of `points` drawn into 60 × 14 cells, as text.
    fn drawn(points: Vec<Point>) -> String {
        let v = TrafficView {
            what: String::new(),
            now: points[0].at,
            serving: None,
            roof: None,
            points,
            crossover: None,
            observe_ms: 0.0,
        };
        let roof = Roof {
            read_gb_per_s: 20.0,
            peak_gops: 1600.0,
        };
        let area = Rect::new(0, 0, 60, 14);
        let mut buf = Buffer::empty(area);
        let theme = Theme {
            mode: crate::ui::theme::ColorMode::None,
        };
        roofline(&v, &roof, &theme, area, &mut buf);
        (0..area.height)
            .map(|y| {
                (0..area.width)
                    .map(|x| buf[(x, y)].symbol())
                    .collect::<String>()
                    + "\n"
            })
            .collect()
    }

    /// Two iterations that land on the same cell keep both labels whole.
    #[test]
    fn labels_of_points_close_together_do_not_overwrite_each_other() {
        let at = measured(2e9, 100.0);
        let point = |label, at, now| Point { label, at, now };
        let text = drawn(vec![
            point("B=1 decode", at, false),
            point("serving batch", at, true),
        ]);
        assert!(text.contains("B=1 decode"), "{text}");
        assert!(text.contains("serving batch"), "{text}");
        // A point a little to the right, on the same row (the same G op/s): its dot must
        // not land inside the first point's label, wherever it falls.
        for k in 1..40 {
            let f = 1.0 + k as f64 * 0.05;
            let right = measured(2e9 * f, 100.0 * f);
            let text = drawn(vec![
                point("B=1 decode", at, false),
                point("prefill", right, true),
            ]);
            let both = text.contains("B=1 decode") && text.contains("prefill");
            assert!(both, "{f}: {text}");
        }
    }
}
