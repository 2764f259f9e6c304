//! What each picture shows, decided once: which rows and columns, which labels, which
//! colour scale. A pane draws a view in terminal cells and its export draws the same view
//! in SVG, so the two never disagree about what is on screen.

pub mod forward;
pub mod heads;
pub mod heatmap;
pub mod lens;
pub mod looks;
pub mod output;
pub mod pages;
pub mod palette;
pub mod request_kv;
pub mod sharpest;
pub mod sink;
pub mod timeline;
pub mod traffic;
pub mod units;
