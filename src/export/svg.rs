//! A small SVG writer: just the shapes the pictures use, with text escaped. Coordinates
//! are in user units (one unit = one pixel at scale 1).

use std::fmt::Write;

/// An SVG document being built.
pub struct Svg {
    w: f32,
    h: f32,
    body: String,
}

/// `#rrggbb` for an RGB triple.
pub fn hex((r, g, b): (u8, u8, u8)) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// Text with the five XML special characters escaped and control characters made visible.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push('⏎'),
            '\t' => out.push('⇥'),
            c if c.is_control() => out.push('�'),
            c => out.push(c),
        }
    }
    out
}

impl Svg {
    /// An empty white canvas of `w × h`.
    pub fn new(w: f32, h: f32) -> Self {
        let mut s = Self {
            w,
            h,
            body: String::new(),
        };
        s.rect(0.0, 0.0, w, h, "#ffffff", "");
        s
    }

    /// A filled rectangle; `extra` is added to the element as is (stroke, opacity…).
    pub fn rect(&mut self, x: f32, y: f32, w: f32, h: f32, fill: &str, extra: &str) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{h:.2}" fill="{fill}" {extra}/>"#
        );
    }

    /// A line.
    pub fn line(&mut self, (x1, y1): (f32, f32), (x2, y2): (f32, f32), stroke: &str, extra: &str) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{x1:.2}" y1="{y1:.2}" x2="{x2:.2}" y2="{y2:.2}" stroke="{stroke}" {extra}/>"#
        );
    }

    /// Text at `(x, y)` (baseline); `anchor` is start, middle or end; `rotate` in degrees
    /// turns it about its anchor point.
    pub fn text(&mut self, x: f32, y: f32, size: f32, anchor: &str, s: &str, rotate: f32) {
        let tr = if rotate != 0.0 {
            format!(r#" transform="rotate({rotate:.1} {x:.2} {y:.2})""#)
        } else {
            String::new()
        };
        let _ = writeln!(
            self.body,
            r##"<text x="{x:.2}" y="{y:.2}" font-size="{size:.1}" text-anchor="{anchor}" fill="#222222"{tr}>{}</text>"##,
            escape(s)
        );
    }

    /// A horizontal gradient bar over the viridis ramp, for legends.
    pub fn ramp_bar(&mut self, x: f32, y: f32, w: f32, h: f32) {
        let steps = 64;
        for i in 0..steps {
            let f = i as f32 / (steps - 1) as f32;
            let fill = hex(crate::views::palette::ramp_rgb(f));
            // Slight overlap so no hairline gaps show between the steps.
            self.rect(
                x + w * i as f32 / steps as f32,
                y,
                w / steps as f32 + 0.5,
                h,
                &fill,
                "",
            );
        }
        self.rect(
            x,
            y,
            w,
            h,
            "none",
            r##"stroke="#444444" stroke-width="0.5""##,
        );
    }

    /// A row of legend swatches `(fill, extra attributes, text)`, each spaced by its text's
    /// length; returns the x where the row ends.
    pub fn legend(&mut self, x: f32, y: f32, items: &[(&str, &str, &str)]) -> f32 {
        let mut x = x;
        for (fill, extra, text) in items {
            self.rect(x, y, 14.0, 14.0, fill, extra);
            self.text(x + 20.0, y + 11.0, 11.0, "start", text, 0.0);
            x += 20.0 + 6.8 * text.chars().count() as f32 + 24.0;
        }
        x
    }

    /// The finished document.
    pub fn finish(self) -> String {
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="DejaVu Sans, sans-serif">
{body}</svg>
"#,
            w = self.w,
            h = self.h,
            body = self.body
        )
    }
}
