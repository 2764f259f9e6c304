//! The attention-sink experiment's lanes, decided once: what each cache is called and, per
//! page of the text read so far, whether the cache holds it (and how full the page being
//! filled is), evicted it, or has not read it yet.

use crate::sink::{SinkLane, SinkView};

/// One page of the text, as one lane sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Page {
    Held,
    /// Held and being filled, this full (0..1].
    Filling(f32),
    Evicted,
    Unread,
}

/// How a lane is named.
pub fn lane_title(name: &str) -> &'static str {
    match name {
        "full" => "full cache",
        "window" => "window, oldest evicted",
        _ => "window + first page",
    }
}

/// Pages of the whole text.
pub fn pages(v: &SinkView) -> usize {
    v.text_tokens.div_ceil(v.page_size.max(1))
}

/// Every page of the text as lane `l` holds it.
pub fn lane_pages(v: &SinkView, l: &SinkLane) -> Vec<Page> {
    let ps = v.page_size.max(1);
    let now = v.pos.saturating_sub(1) / ps;
    (0..pages(v))
        .map(
            |p| match (l.kept_pages.binary_search(&p).is_ok(), p <= now) {
                (true, _) if p == now => Page::Filling((v.pos - p * ps) as f32 / ps as f32),
                (true, _) => Page::Held,
                (false, true) => Page::Evicted,
                (false, false) => Page::Unread,
            },
        )
        .collect()
}
