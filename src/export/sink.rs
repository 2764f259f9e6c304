//! The attention-sink experiment as a picture: for the full cache, the sliding window and
//! the window that keeps page 0, the pages each still holds and what it costs in perplexity.

use super::svg::{hex, Svg};
use super::ExportError;
use crate::sink::{SinkLane, SinkView};
use crate::views::palette::request_rgb;
use crate::views::sink::{lane_pages, lane_title, pages, Page};

const CELL: f32 = 26.0;
/// Height of one cache's lane.
const LANE_H: f32 = 110.0;

/// The three lanes of one step of the experiment.
pub fn render(v: &SinkView) -> Result<String, ExportError> {
    let ps = v.page_size.max(1);
    let pages = pages(v);
    let left = 24.0;
    let w = (left * 2.0 + pages as f32 * CELL).max(900.0);
    let h = 110.0 + v.lanes.len() as f32 * LANE_H + 50.0;
    let mut s = Svg::new(w, h);
    s.text(
        left,
        30.0,
        16.0,
        "start",
        &format!(
            "Attention sink · window {} tokens ({} pages of {ps}) · token {} of {}",
            v.window,
            v.window / ps,
            v.pos,
            v.text_tokens
        ),
        0.0,
    );
    s.text(
        left,
        52.0,
        11.0,
        "start",
        &format!(
            "the same text read one token at a time through three caches; just read {:?}, next {:?}",
            v.token, v.next
        ),
        0.0,
    );
    for (k, l) in v.lanes.iter().enumerate() {
        lane(&mut s, v, k, l, (left, 90.0 + k as f32 * LANE_H));
    }
    let ly = 90.0 + v.lanes.len() as f32 * LANE_H;
    s.legend(
        left,
        ly,
        &[
            (&hex(request_rgb(0)), "", "page held"),
            (
                "#f4f4f6",
                r##"stroke="#d62728" stroke-width="0.8""##,
                "evicted",
            ),
            (
                "none",
                r##"stroke="#d0d0d6" stroke-width="0.8""##,
                "not read yet",
            ),
        ],
    );
    Ok(s.finish())
}

/// One cache's lane at `(left, y)`: its name, its perplexity and what it predicts next,
/// then its pages.
fn lane(s: &mut Svg, v: &SinkView, k: usize, l: &SinkLane, (left, y): (f32, f32)) {
    s.text(left, y, 13.0, "start", lane_title(&l.name), 0.0);
    let after = l.after_eviction_label();
    let top: Vec<String> = l
        .top
        .iter()
        .map(|(p, pr)| format!("{p:?} {pr:.2}"))
        .collect();
    s.text(
        left,
        y + 18.0,
        11.0,
        "start",
        &format!(
            "perplexity {:.2} · after the first eviction {after} · p(next) {:.3} · top: {} · {} tokens held, {} page(s) evicted",
            l.perplexity,
            l.p_next,
            top.join(", "),
            l.cached_tokens,
            l.evicted_pages
        ),
        0.0,
    );
    let c = hex(request_rgb(k));
    for (p, page) in lane_pages(v, l).into_iter().enumerate() {
        page_cell(s, left + p as f32 * CELL, y + 32.0, page, &c);
    }
}

/// One page of a lane at `(x, y)`: held (filled from the bottom), evicted (crossed out),
/// or not read yet (an outline).
fn page_cell(s: &mut Svg, x: f32, y: f32, page: Page, color: &str) {
    let (cw, ch) = (CELL - 4.0, CELL - 4.0);
    match page {
        Page::Held | Page::Filling(_) => {
            let fill = if let Page::Filling(f) = page { f } else { 1.0 };
            s.rect(
                x,
                y,
                cw,
                ch,
                "#ffffff",
                r##"stroke="#9a9aa0" stroke-width="0.8""##,
            );
            s.rect(x, y + ch * (1.0 - fill), cw, ch * fill, color, "");
        }
        Page::Evicted => {
            s.rect(
                x,
                y,
                cw,
                ch,
                "#f4f4f6",
                r##"stroke="#d62728" stroke-width="0.8""##,
            );
            s.line(
                (x + 4.0, y + 4.0),
                (x + cw - 4.0, y + ch - 4.0),
                "#d62728",
                "",
            );
            s.line(
                (x + cw - 4.0, y + 4.0),
                (x + 4.0, y + ch - 4.0),
                "#d62728",
                "",
            );
        }
        Page::Unread => {
            s.rect(
                x,
                y,
                cw,
                ch,
                "none",
                r##"stroke="#d0d0d6" stroke-width="0.8""##,
            );
        }
    }
}
