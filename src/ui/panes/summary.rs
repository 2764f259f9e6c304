//! One-line summaries of the panes that give their room to another (`z`, a lesson step):
//! the pane's name and its headline figure, so nothing disappears from view.

use super::{bytes, put};
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::views::units::fit;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

/// The pane's name and headline now.
pub fn line(app: &App, pane: Pane) -> String {
    let Some(r) = app.report() else {
        return format!("{} · waiting for the first iteration", name(pane));
    };
    let what = match pane {
        Pane::Attention => format!(
            "layer {} head {}, {} keys",
            app.view.layer, app.view.head, r.info.kv_len
        ),
        Pane::Output => match r.info.top_k.first() {
            Some(t) => format!(
                "sampled {:?} · top {:?} {:.0}%",
                r.info.token,
                t.token,
                100.0 * t.prob
            ),
            None => format!("sampled {:?}", r.info.token),
        },
        Pane::Heads => format!(
            "{} · {} query heads over {} KV heads",
            r.info.layout,
            r.cfg.n_head,
            r.info.query_to_kv.iter().max().map_or(0, |m| m + 1)
        ),
        Pane::Kv => format!(
            "{} of {} slots hold tokens · {} reserved",
            r.kv.used,
            r.kv.capacity,
            bytes(r.kv.reserved_bytes)
        ),
        Pane::Serving => match r.serve.as_ref() {
            Some(s) => format!(
                "iteration {} · {} active · {} queued{} · KV {}",
                s.step.iteration + 1,
                s.step.active.len(),
                s.step.queue.len(),
                s.tokens_per_s()
                    .map(|t| format!(" · {t:.0} tok/s"))
                    .unwrap_or_default(),
                s.step.memory.describe_utilization()
            ),
            None => "no serving iteration".into(),
        },
        Pane::Forward => format!("{} token(s) in {:.1} ms", r.info.input_len, r.info.wall_ms),
        Pane::Lens => match crate::views::lens::view(r) {
            Some(v) => v.headline(),
            None => "off until shown (o)".into(),
        },
        Pane::Traffic => {
            let t = &r.info.traffic;
            format!(
                "weights {} · KV read {} this step",
                bytes(t.weight_bytes as usize),
                bytes(t.kv_read_bytes as usize)
            )
        }
    };
    format!("{} · {what}", name(pane))
}

/// The name a summary starts with.
pub fn name(pane: Pane) -> &'static str {
    match pane {
        Pane::Attention => "attention",
        Pane::Output => "output",
        Pane::Heads => "heads",
        Pane::Kv => "KV cache",
        Pane::Serving => "serving",
        Pane::Forward => "forward pass",
        Pane::Traffic => "memory traffic",
        Pane::Lens => "logit lens",
    }
}

/// Draws the summary of `pane` on the row `area`.
pub fn render(app: &App, theme: &Theme, pane: Pane, area: Rect, buf: &mut Buffer) {
    let text = format!("▸ {}", line(app, pane));
    let style = if app.view.focus == pane {
        theme.focused()
    } else {
        theme.dim()
    };
    put(buf, area, 0, area.y, fit(&text, area.width as usize), style);
}
