//! The logit lens as a picture: one bar per layer for the probability it gives the token
//! the step sampled, labelled with that layer's own top guess.

use super::svg::Svg;
use super::ExportError;
use crate::views::lens::LensView;

/// The picture of a lens view.
pub fn render(v: &LensView) -> Result<String, ExportError> {
    let (row, top, bar_w) = (18.0, 78.0, 420.0);
    let height = top + row * v.rows.len() as f32 + 30.0;
    let mut s = Svg::new(820.0, height);
    s.text(
        24.0,
        28.0,
        15.0,
        "start",
        "Logit lens: what each layer would predict",
        0.0,
    );
    s.text(24.0, 50.0, 11.0, "start", &v.headline(), 0.0);
    s.text(
        24.0,
        68.0,
        10.0,
        "start",
        &format!(
            "bar: the probability of {:?} after that layer (final RMSNorm and LM head applied early); text: that layer's top guess",
            v.chosen
        ),
        0.0,
    );
    for (i, r) in v.rows.iter().enumerate() {
        let y = top + row * i as f32;
        let formed = v.forms_at.is_some_and(|f| r.layer >= f);
        let fill = if formed { "#c77c2a" } else { "#3b6ea5" };
        s.text(
            80.0,
            y + 12.0,
            11.0,
            "end",
            &format!("layer {}", r.layer),
            0.0,
        );
        let p = if r.chosen_prob.is_finite() {
            r.chosen_prob.clamp(0.0, 1.0)
        } else {
            0.0
        };
        s.rect(90.0, y + 2.0, (p * bar_w).max(0.5), row - 4.0, fill, "");
        s.text(
            90.0 + bar_w + 12.0,
            y + 12.0,
            10.0,
            "start",
            &format!("{:.2} · top {:?} {:.2}", p, r.token, r.prob),
            0.0,
        );
    }
    Ok(s.finish())
}
