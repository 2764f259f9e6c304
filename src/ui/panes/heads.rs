//! Heads: which query heads read which KV head under the current layout, and what each
//! layout costs in KV bytes.

use super::{block, bytes, label, put, thousands};
use crate::model::HeadLayout;
use crate::ui::app::{App, Pane};
use crate::ui::theme::Theme;
use crate::views::heads::Heads;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::widgets::Widget;

/// Columns per query-head label in the head row (used for mouse hits too): four where
/// every head fits so, else three (`q8` stays on screen in a narrow pane).
pub fn head_w(n_head: usize, width: u16) -> u16 {
    if n_head as u16 * 4 <= width {
        4
    } else {
        3
    }
}
/// Row (inside the pane) of the query-head labels.
pub const HEAD_ROW: u16 = 1;

/// The query head under column `x` of the pane's inner area, if any.
pub fn head_at(inner: Rect, x: u16, y: u16, n_head: usize) -> Option<usize> {
    if y != inner.y + HEAD_ROW || x < inner.x {
        return None;
    }
    let h = ((x - inner.x) / head_w(n_head, inner.width)) as usize;
    (h < n_head).then_some(h)
}

/// Draws the pane.
pub fn render(app: &App, theme: &Theme, area: Rect, buf: &mut Buffer) {
    let b = block(
        app,
        theme,
        Pane::Heads,
        // The layout the body's report ran under, not the one just asked for.
        format!(
            " heads · {} ",
            app.report()
                .map_or(app.settings.run.layout, |r| r.settings.run.layout)
        ),
        area.width,
    );
    let inner = b.inner(area);
    b.render(area, buf);
    let Some(v) = app.report().and_then(Heads::of) else {
        put(
            buf,
            inner,
            0,
            inner.y,
            "waiting for the first step",
            theme.dim(),
        );
        return;
    };
    let beside = app.report().and_then(beside_lines);
    // Until a lesson has asked what MHA will cost, its row would give the answer away.
    let ask = crate::lesson::format::Predict::KvAfterMha;
    let mut v = v;
    if app.tutor.as_ref().is_some_and(|t| t.keeps_back(ask)) && v.layout != HeadLayout::Mha {
        v.costs.retain(|c| c.0 != HeadLayout::Mha);
    }
    draw(&v, app.screen.head, theme, inner, beside.as_ref(), buf);
}

/// The same tokens under the layout beside the live one: both top tokens, how often they
/// agreed, and both caches so far.
fn beside_lines(r: &crate::report::StepReport) -> Option<[String; 2]> {
    let b = r.beside.as_ref()?;
    let top = |t: Option<&crate::model::sampler::TopToken>| {
        t.map_or("–".to_string(), |t| {
            format!("{} {:.1}%", label(&t.token, 10).trim_end(), 100.0 * t.prob)
        })
    };
    Some([
        format!(
            "beside {}: top {} · {}: {}",
            b.layout,
            top(b.top_k.first()),
            r.info.layout,
            top(r.info.top_k.first())
        ),
        format!(
            "same top token {}/{} steps · KV {} vs {}",
            b.agreed,
            b.compared,
            bytes(b.kv_bytes),
            bytes(r.kv.used * r.kv.bytes_per_token)
        ),
    ])
}

/// Draws a heads view into `inner`, query head `selected` highlighted. Lines about the
/// layout beside, when given, take the place of the KV-head row, right under the map, so
/// a small pane shows them; the bytes table follows.
pub fn draw(
    v: &Heads,
    selected: usize,
    theme: &Theme,
    inner: Rect,
    beside: Option<&[String; 2]>,
    buf: &mut Buffer,
) {
    let line = format!("{} query heads read {} KV head(s)", v.map.len(), v.n_kv);
    super::put_text(buf, inner, 0, inner.y, line, Style::default());
    let row = inner.y + HEAD_ROW;
    let w = head_w(v.map.len(), inner.width);
    for (h, &g) in v.map.iter().enumerate() {
        let kv_style = Style::default().fg(theme.request(g));
        let mut st = kv_style;
        if h == selected {
            st = st.add_modifier(Modifier::REVERSED | Modifier::BOLD);
        }
        put(buf, inner, h as u16 * w, row, format!("q{h:<2}"), st);
        // Under each query head, the KV head it reads.
        put(
            buf,
            inner,
            h as u16 * w,
            row + 1,
            format!("↓{g:<2}"),
            kv_style,
        );
    }
    let table_at = match beside {
        Some(lines) => {
            for (i, l) in lines.iter().enumerate() {
                super::put_text(buf, inner, 0, row + 2 + i as u16, l, theme.accent());
            }
            row + 5
        }
        None => {
            kv_heads_row(v, w, theme, inner, row + 2, buf);
            row + 4
        }
    };
    table(v, theme, inner, table_at, buf);
}

/// "kv heads: k0 k1 k2", each in its colour.
fn kv_heads_row(v: &Heads, w: u16, theme: &Theme, inner: Rect, y: u16, buf: &mut Buffer) {
    put(buf, inner, 0, y, "kv heads: ", theme.dim());
    for g in 0..v.n_kv {
        let st = Style::default().fg(theme.request(g));
        put(buf, inner, 10 + g as u16 * w, y, format!("k{g:<2}"), st);
    }
}

/// KV bytes per token and for the tokens so far, per layout, from row `y` on.
fn table(v: &Heads, theme: &Theme, inner: Rect, y: u16, buf: &mut Buffer) {
    let tok = format!("{} tok", v.tokens);
    put(
        buf,
        inner,
        0,
        y,
        format!("{:<5} {:>10} {tok:>12}", v.kv_elem, "B/token"),
        theme.dim(),
    );
    for (i, &(l, bpt, total)) in v.costs.iter().enumerate() {
        let st = if l == v.layout {
            theme.accent()
        } else {
            Style::default()
        };
        let text = format!(
            "{:<5} {:>10} {:>12}",
            l.to_string(),
            thousands(bpt),
            bytes(total)
        );
        super::put_text(buf, inner, 0, y + 1 + i as u16, text, st);
    }
}

/// The summary's headline: the layout and how many query heads share how many KV heads.
pub fn summary(_app: &App, r: &crate::report::StepReport) -> String {
    format!(
        "{} · {} query heads over {} KV heads",
        r.info.layout,
        r.cfg.n_head,
        r.info.query_to_kv.iter().max().map_or(0, |m| m + 1)
    )
}
