//! Forward pass: embedding → layers → LM head → sampler for the step, with where the time
//! went, the residual stream of the chosen layer, and the attention bytes moved.

use super::{block, bytes, put_text};
use crate::model::flash::Tiles;
use crate::model::probe::LayerCapture;
use crate::model::{AttnKernel, AttnRoute};
use crate::report::StepReport;
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::views::forward::ForwardView;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let b = block(
        app,
        theme,
        Pane::Forward,
        " forward pass ".into(),
        area.width,
    );
    let inner = b.inner(area);
    b.render(area, buf);
    if let Some(r) = app.report() {
        draw(r, app.screen.layer, app.points_at(), theme, inner, buf);
    }
}

/// Draws where a report's step spent its time, and `layer`'s residual stream, into `inner`:
/// one line each, most telling first, every line within 68 columns so the pane shows them
/// whole zoomed at 80 columns and in the grid at 200. Rows holding what a lesson step
/// points at (`keep`) give way last.
fn draw(
    r: &StepReport,
    layer: usize,
    keep: &[String],
    theme: &Theme,
    inner: Rect,
    buf: &mut Buffer,
) {
    let pass = ForwardView::new(r, layer);
    let [stages, spark] = timing_rows(&pass, theme);
    // (row, how much it may give way when the pane is short: higher goes first)
    let mut rows: Vec<(Row, u8)> = vec![(stages, 0), (spark, 9)];
    if let Some(text) = pass.residual {
        rows.push(((text, theme.dim()), 1));
    }
    let capture = r.info.captures.iter().find(|c| c.layer == layer && c.t > 0);
    rows.push(((attention_row(r), Style::default()), 2));
    rows.extend(shapes_rows(r).map(|t| ((t, theme.dim()), 3)));
    if let Some(c) = capture {
        rows.extend(block_rows(r, c, theme));
    }
    for ((text, _), give) in rows.iter_mut() {
        if keep.iter().any(|k| text.contains(k.as_str())) {
            *give = 0;
        }
    }
    let all = rows.len();
    // Rows that give way leave a last line saying so, when there is room for one.
    let room = match all > inner.height as usize && inner.height >= 3 {
        true => inner.height as usize - 1,
        false => inner.height as usize,
    };
    while rows.len() > room {
        let Some(i) = (0..rows.len()).max_by_key(|&i| (rows[i].1, i)) else {
            break;
        };
        rows.remove(i);
    }
    if rows.len() < all {
        let more = format!(
            "+{} more line(s): z gives the pane its room",
            all - rows.len()
        );
        rows.push(((more, theme.dim()), 0));
    }
    for (y, ((text, style), _)) in rows.into_iter().enumerate() {
        put_text(buf, inner, 0, inner.y + y as u16, text, style);
    }
}

/// A pane row: its text and style.
type Row = (String, Style);

/// The pass in one line, and a sparkline of its layers' times.
fn timing_rows(pass: &ForwardView, theme: &Theme) -> [Row; 2] {
    let layers = pass.layers_ms();
    let max = layers.iter().copied().fold(0.0, f64::max).max(1e-9);
    let spark: String = layers
        .iter()
        .map(|&ms| SPARK[((ms / max) * 7.0).round() as usize])
        .collect();
    [
        (pass.summary(), Style::default()),
        (
            format!("time per layer ({})  {spark}", layers.len()),
            theme.accent(),
        ),
    ]
}

/// The attention kernel and the bytes it moved in this pass, counted per query head as
/// the FlashAttention paper's IO model counts them (under GQA a KV head's rows count once
/// for each query head of its group, where the traffic pane counts them once).
fn attention_row(r: &StepReport) -> String {
    let kernel = match r.settings.run.kernel {
        AttnKernel::Naive => "naive".to_string(),
        // On-chip memory is sized in binary units (an A100 SM's 192 KiB).
        AttnKernel::Tiled { sram_bytes } => format!("tiled for {} KiB on-chip", sram_bytes >> 10),
    };
    // The batched route runs the naive math for the whole step at once: it says so, and
    // how many operations it launched, which does not grow with the batch.
    let kernel = match r.info.route {
        AttnRoute::Host => kernel,
        AttnRoute::Batched => format!("batched ({} launches)", r.info.device_ops),
    };
    format!(
        "attention {kernel}: {} moved (read {}, wrote {}) · {} query heads",
        bytes(r.info.attn_io.total() as usize),
        bytes(r.info.attn_io.read as usize),
        bytes(r.info.attn_io.written as usize),
        r.cfg.n_head
    )
}

/// One layer's matrices at this model's shape, from embedding width to the vocabulary.
fn shapes_rows(r: &StepReport) -> [String; 2] {
    let c = &r.cfg;
    let d = c.head_dim;
    let n = crate::views::units::thousands;
    [
        format!(
            "shapes {} → Q {}×{}, K V {}×{} → concat {} → W_o → {}",
            c.hidden,
            c.n_head,
            d,
            // The layout the pass ran: MHA expands the file's KV heads, MQA merges them.
            r.info.layout.kv_heads(c),
            d,
            c.n_head * d,
            c.hidden
        ),
        format!(
            "       MLP {} → {} → {} · LM head {} → {}",
            c.hidden,
            n(c.ffn),
            c.hidden,
            c.hidden,
            n(c.vocab)
        ),
    ]
}

/// What RoPE, RMSNorm and SwiGLU did to the newest token, and the tile order (tiled
/// kernel only), each with how much it may give way in a short pane.
fn block_rows(r: &StepReport, c: &LayerCapture, theme: &Theme) -> Vec<(Row, u8)> {
    let b = &c.block;
    let mut rows = vec![
        format!(
            "RoPE   ‖q‖ head 0: {:.2} → {:.2} rotated · first pair turned {:.0} rad",
            b.q_norm_pre_rope, b.q_norm_post_rope, b.rope_angle0
        ),
        rope_shift_row(&b.rope_shift),
        format!(
            "RMSNorm  residual RMS {:.2} → {:.2} into attention (÷ RMS, × gain)",
            b.rms_in, b.rms_normed
        ),
        format!(
            "SwiGLU   {:.0}% of the {} silu(gate) values nearly closed (|g| < 0.1)",
            b.gate_closed_pct, r.cfg.ffn
        ),
    ]
    .into_iter()
    .filter(|t| !t.is_empty())
    .map(|t| ((t, Style::default()), 4))
    .collect::<Vec<_>>();
    if !c.tile_schedule.is_empty() {
        let s: Vec<String> = c
            .tile_schedule
            .iter()
            .take(8)
            .map(|(q, k)| format!("Q{q}·K{k}"))
            .collect();
        // The tile size the on-chip memory allows, first: the lesson points at it.
        let size = match r.settings.run.kernel {
            AttnKernel::Tiled { sram_bytes } => Tiles::from_sram(sram_bytes, r.cfg.head_dim)
                .map(|t| format!("{}×{} ", t.block_q, t.block_k))
                .unwrap_or_default(),
            AttnKernel::Naive => String::new(),
        };
        let text = format!("tiles {size}(head 0): {}", s.join(" "));
        rows.push(((text, theme.dim()), 5));
    }
    rows
}

/// RoPE's relative property, measured on the newest query and key of the layer.
fn rope_shift_row(s: &crate::model::probe::RopeShift) -> String {
    if s.offset == 0 {
        return String::new();
    }
    format!(
        "RoPE   q·k {} apart: @{} {:.3} · @{} {:.3} · {} apart {:.3}",
        s.offset,
        s.at,
        s.score,
        s.at + s.shift,
        s.score_shifted,
        2 * s.offset,
        s.score_other_offset
    )
}

/// The summary's headline: how many tokens the pass ran and how long it took.
pub fn summary(_app: &App, r: &StepReport) -> String {
    format!("{} token(s) in {:.1} ms", r.info.input_len, r.info.wall_ms)
}
