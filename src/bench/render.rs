//! `bench render`: time to draw the full screen at 200×60 from real step reports.

use super::Result;
use crate::model::Model;
use crate::ui::app::App;
use crate::ui::draw;
use crate::ui::theme::{ColorMode, Theme};
use crate::worker::run_request;
use crate::worker::Event;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde::Serialize;
use std::time::Instant;

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct RenderReport {
    pub width: u16,
    pub height: u16,
    pub frames: usize,
    pub kv_len: usize,
    pub frame_ms_mean: f64,
    pub frame_ms_p99: f64,
}

impl RenderReport {
    /// A table for people.
    pub fn table(&self) -> String {
        format!(
            "full screen {}×{}, {} frames, context {} tokens\nframe time mean {:.3} ms, p99 {:.3} ms (target ≤ 2 ms)\n",
            self.width, self.height, self.frames, self.kv_len, self.frame_ms_mean, self.frame_ms_p99
        )
    }
}

/// Runs a real request for `steps` iterations, then draws the screen `frames` times.
pub fn run(model: &Model, steps: usize, frames: usize) -> Result<RenderReport> {
    let reports = run_request(
        model,
        "Explain how a KV cache speeds up decoding.",
        256,
        steps,
    )?;
    let mut app = App::new(model.run_options());
    app.on_event(Event::Ready {
        model: "bench".into(),
    });
    for r in reports {
        app.on_event(Event::Report(Box::new(r)));
    }
    let kv_len = app.report().map(|r| r.kv.used).unwrap_or(0);
    let theme = Theme {
        mode: ColorMode::TrueColor,
    };
    let (w, h) = (200, 60);
    let mut term = Terminal::new(TestBackend::new(w, h))?;
    let mut times = Vec::with_capacity(frames);
    for i in 0..frames {
        // Alternate layers so every frame does the full work of a changed picture.
        app.screen.layer = i % model.cfg.n_layer;
        let t = Instant::now();
        term.draw(|f| draw::draw(&app, &theme, f.area(), f.buffer_mut()))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    times.sort_by(f64::total_cmp);
    let p99 = times[(times.len() * 99 / 100).min(times.len() - 1)];
    Ok(RenderReport {
        width: w,
        height: h,
        frames,
        kv_len,
        frame_ms_mean: mean,
        frame_ms_p99: p99,
    })
}
