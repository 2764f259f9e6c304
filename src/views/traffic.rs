//! The memory-traffic picture, decided once for the pane and its export: what an iteration
//! moved (weights, KV, attention scores) and computed, how fast against this machine's
//! measured limits, a roofline with the iterations that matter, and the context length at
//! which reading the KV cache overtakes reading the weights.
//!
//! Every figure comes from the engine's own counts (`StepInfo::traffic`,
//! `ServeStep::traffic`) and timings; nothing here estimates a byte.

use crate::machine::Machine;
use crate::model::traffic::Traffic;
use crate::model::HeadLayout;
use crate::report::StepReport;
use crate::views::units::{bytes, thousands};

/// One measured iteration: what it moved and computed, and how long it took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub traffic: Traffic,
    /// Tokens the iteration generated (one per sequence that sampled).
    pub tokens: usize,
    pub ms: f64,
}

impl Measured {
    /// Bytes moved through memory: weights, KV read and written, score traffic.
    pub fn bytes(&self) -> u64 {
        let t = &self.traffic;
        t.weight_bytes + t.kv_read_bytes + t.kv_write_bytes + t.score_bytes
    }

    /// Achieved bandwidth, GB/s (10⁹ bytes).
    pub fn gb_per_s(&self) -> f64 {
        self.bytes() as f64 / 1e9 / (self.ms / 1e3).max(1e-9)
    }

    /// Achieved compute, G operations per second (two per multiply-add).
    pub fn gops(&self) -> f64 {
        self.traffic.flops as f64 / 1e9 / (self.ms / 1e3).max(1e-9)
    }

    /// Arithmetic intensity: operations per byte moved.
    pub fn intensity(&self) -> f64 {
        self.traffic.flops as f64 / (self.bytes().max(1)) as f64
    }
}

/// A point of the roofline.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub label: &'static str,
    pub at: Measured,
    /// The iteration on screen.
    pub now: bool,
}

/// This machine's roofline: the bandwidth slope and the compute roof.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roof {
    pub read_gb_per_s: f64,
    /// The int8 instruction peak, as operations (two per multiply-add), G/s.
    pub peak_gops: f64,
}

impl Roof {
    /// The measured limits as a roofline.
    pub fn of(m: &Machine) -> Self {
        Self {
            read_gb_per_s: m.read_gb_per_s,
            peak_gops: 2.0 * m.int8_gmac_per_s,
        }
    }

    /// The best this machine can do at `intensity` operations per byte.
    pub fn at(&self, intensity: f64) -> f64 {
        (self.read_gb_per_s * intensity).min(self.peak_gops)
    }

    /// Where the slope meets the roof: below it, a kernel waits on memory.
    pub fn ridge(&self) -> f64 {
        self.peak_gops / self.read_gb_per_s.max(1e-9)
    }
}

/// When reading the KV cache costs more than reading the weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossover {
    /// Weight bytes one forward pass reads, whatever its batch.
    pub weight_bytes: u64,
    /// The layout the model runs under now.
    pub layout: HeadLayout,
    /// Cached tokens (summed over a batch) at which KV bytes read equal the weights, per
    /// layout.
    pub tokens: Vec<(HeadLayout, u64)>,
    /// Cached tokens read now: the live request's cache, and the serving batch's (the
    /// tokens its attention read in its latest iteration, all requests together).
    pub live: usize,
    pub serving: Option<usize>,
}

impl Crossover {
    /// The crossover under the current layout.
    pub fn now(&self) -> u64 {
        self.tokens
            .iter()
            .find(|(l, _)| *l == self.layout)
            .map_or(0, |t| t.1)
    }
}

/// Everything the pane and the picture show.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficView {
    /// "prefill of 57 tokens", "decode step 12".
    pub what: String,
    pub now: Measured,
    /// The serving engine's latest iteration, when it ran one.
    pub serving: Option<Measured>,
    pub roof: Option<Roof>,
    pub points: Vec<Point>,
    pub crossover: Option<Crossover>,
    /// Milliseconds of the live step the probe spent looking (not in `now.ms`).
    pub observe_ms: f64,
}

/// The view of `report`, with `past` (oldest first) for the roofline's prefill and decode
/// points and `machine` for the limits.
pub fn view<'a>(
    report: &'a StepReport,
    past: impl IntoIterator<Item = &'a StepReport>,
    machine: Option<&Machine>,
) -> TrafficView {
    let serving = report.serve.as_ref().map(|s| Measured {
        traffic: s.step.traffic,
        // Every row the matrices ran on, prompt rows included: they share the weight read.
        tokens: s.step.tokens_scheduled,
        ms: s.step.wall_ms,
    });
    let is_prefill = report.info.step == 0;
    TrafficView {
        what: if is_prefill {
            format!("prefill of {} tokens", report.info.input_len)
        } else if report.info.no_cache {
            format!(
                "decode step {} without cache ({} tokens again)",
                report.info.step, report.info.input_len
            )
        } else {
            format!("decode step {}", report.info.step)
        },
        now: measured(report),
        serving,
        roof: machine.map(Roof::of),
        points: points(report, past, serving),
        crossover: crossover(report),
        observe_ms: report.info.timing.observe_ms,
    }
}

/// The live request's iteration as measured: its traffic over the model's own time, the
/// wall time less what the probe spent looking (the point on the roofline is the model's).
fn measured(r: &StepReport) -> Measured {
    Measured {
        traffic: r.info.traffic,
        tokens: 1,
        ms: model_ms(r),
    }
}

/// The model's own time of the live step: its wall time less the probe's.
pub fn model_ms(r: &StepReport) -> f64 {
    // `max`/`min`, not `clamp`: a recording is untrusted, and `clamp` panics on a negative
    // or NaN wall time where these pass the other number through.
    let wall = r.info.wall_ms.max(0.0);
    wall - r.info.timing.observe_ms.max(0.0).min(wall)
}

/// The roofline's points: the latest prefill and B=1 decode step up to `report` (one of
/// them `report` itself, unless it recomputed the sequence), and the serving batch's
/// iteration.
fn points<'a>(
    report: &'a StepReport,
    past: impl IntoIterator<Item = &'a StepReport>,
    serving: Option<Measured>,
) -> Vec<Point> {
    let (mut prefill, mut decode) = (None, None);
    // Only what came before the report on screen (history may be scrubbed back).
    let earlier = past
        .into_iter()
        .filter(|r| r.iteration < report.iteration && r.info.traffic.flops > 0);
    for r in earlier.chain([report]) {
        match r.info.step {
            0 => prefill = Some(measured(r)),
            // A step that ran the whole sequence again (the cache off, or a toggle's
            // recompute) is not a B=1 decode: its intensity is a prefill's.
            _ if r.info.no_cache || r.recomputed => {}
            _ => decode = Some(measured(r)),
        }
    }
    let is_prefill = report.info.step == 0;
    let mut points = Vec::new();
    if let Some(at) = prefill {
        points.push(Point {
            label: "prefill",
            at,
            now: is_prefill,
        });
    }
    if let Some(at) = decode {
        points.push(Point {
            label: "B=1 decode",
            at,
            now: !is_prefill,
        });
    }
    if let Some(at) = serving.filter(|s| s.traffic.flops > 0 && s.ms > 0.0) {
        points.push(Point {
            label: "serving batch",
            at,
            now: false,
        });
    }
    points.retain(|p| p.at.ms > 0.0);
    points
}

/// Whether the serving batch's latest iteration read as many cached tokens as the
/// crossover under the current layout: the traffic pane's "batch read … (past it)".
pub fn batch_past_crossover(r: &StepReport) -> bool {
    crossover(r).is_some_and(|c| c.serving.is_some_and(|s| s as u64 >= c.now()))
}

/// The crossover from the step's own weight count and the model's KV bytes per token; for
/// the other layouts, their own weight bytes (their K and V projections differ).
fn crossover(r: &StepReport) -> Option<Crossover> {
    let weight_bytes = r.info.traffic.weight_bytes;
    if weight_bytes == 0 {
        return None;
    }
    let tokens = HeadLayout::ALL
        .iter()
        .filter_map(|l| {
            let per = *r.info.kv_bytes_per_token.get(l)? as u64;
            let weights = if *l == r.info.layout {
                weight_bytes
            } else {
                *r.info.weight_bytes_by_layout.get(l)?
            };
            (per > 0).then(|| (*l, weights.div_ceil(per)))
        })
        .collect();
    // What the batch's attention read, not its requests' lengths: a prompt still being
    // prefilled in chunks has only part of its cache.
    let per = *r.info.kv_bytes_per_token.get(&r.info.layout)? as u64;
    Some(Crossover {
        weight_bytes,
        layout: r.info.layout,
        tokens,
        live: r.info.kv_len,
        serving: r
            .serve
            .as_ref()
            .filter(|s| s.step.traffic.flops > 0)
            .map(|s| (s.step.traffic.kv_read_bytes / per.max(1)) as usize),
    })
}

/// Log-log axes that hold the roof and every point: (min, max) of log10 intensity and of
/// log10 G op/s, whole decades.
pub fn axes(roof: &Roof, points: &[Point]) -> ((f64, f64), (f64, f64)) {
    let xs = points
        .iter()
        .map(|p| p.at.intensity())
        .chain([roof.ridge()]);
    let ys = points.iter().map(|p| p.at.gops()).chain([roof.peak_gops]);
    let span = |v: Vec<f64>, pad_lo: f64, pad_hi: f64| {
        let v: Vec<f64> = v
            .into_iter()
            .filter(|x| x.is_finite() && *x > 0.0)
            .collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            return (0.0, 1.0);
        }
        ((lo.log10() - pad_lo).floor(), (hi.log10() + pad_hi).ceil())
    };
    (span(xs.collect(), 0.0, 0.3), span(ys.collect(), 0.0, 0.1))
}

/// A row of the picture: a line of text, or a bar of bytes split by kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    Text(String),
    Bar(Traffic),
}

impl TrafficView {
    /// The figures, row by row: the live step and its bytes, the serving batch and its
    /// bytes, the crossover and where the requests stand. `narrow`: short lines for a
    /// narrow pane.
    pub fn rows(&self, narrow: bool) -> Vec<Row> {
        let mut out = vec![Row::Text(headline(self, narrow))];
        out.push(Row::Text(kinds("live step", &self.now.traffic, narrow)));
        out.push(Row::Bar(self.now.traffic));
        if let Some(s) = self.serving.filter(|s| s.tokens > 0) {
            out.push(Row::Text(kinds("serving batch", &s.traffic, narrow)));
            out.push(Row::Bar(s.traffic));
            out.push(Row::Text(format!(
                "batch of {} token{} (prompt rows too) → {} of weights per token",
                s.tokens,
                if s.tokens == 1 { "" } else { "s" },
                bytes((s.traffic.weight_bytes / s.tokens as u64) as usize),
            )));
        }
        out.extend(crossover_lines(self, narrow).into_iter().map(Row::Text));
        out
    }
}

/// "live  █ weights 151 MB ▓ KV read 2 MB ▒ KV write 46 kB ░ scores 0 B".
fn kinds(who: &str, t: &Traffic, narrow: bool) -> String {
    let b = |n: u64| bytes(n as usize);
    if narrow {
        // ▓ is the KV read, as in the wide legend: the reads the lessons compare.
        let who = who.split(' ').next_back().unwrap_or(who);
        format!("{who} █ {} ▓ {}", b(t.weight_bytes), b(t.kv_read_bytes))
    } else {
        format!(
            "{who} █ weights {} ▓ KV read {} ▒ KV write {} ░ scores {}",
            b(t.weight_bytes),
            b(t.kv_read_bytes),
            b(t.kv_write_bytes),
            b(t.score_bytes)
        )
    }
}

/// "decode step 12 · 14.2 ms · 0.27 GFLOP · 10.8 GB/s = 51% of 21.3 · 2.1 G op/s".
fn headline(v: &TrafficView, narrow: bool) -> String {
    let n = &v.now;
    let gflop = n.traffic.flops as f64 / 1e9;
    if narrow {
        return format!("{} · {:.1} ms · {gflop:.2} GFLOP", v.what, n.ms);
    }
    let of = v
        .roof
        .map(|r| {
            format!(
                " = {:.0}% of {:.1} GB/s",
                100.0 * n.gb_per_s() / r.read_gb_per_s,
                r.read_gb_per_s
            )
        })
        .unwrap_or_default();
    // The probe's looking is timed apart (the figures are the model's), and said last:
    // a narrow pane cuts it before the figures.
    let looking = if v.observe_ms >= 0.05 {
        format!(" · +{:.1} ms capturing for the panes", v.observe_ms)
    } else {
        String::new()
    };
    format!(
        "{} · {:.1} ms · {gflop:.2} GFLOP · {:.1} GB/s{of} · {:.1} G op/s{looking}",
        v.what,
        n.ms,
        n.gb_per_s(),
        n.gops()
    )
}

/// The crossover and how far the live request and the serving batch are from it.
fn crossover_lines(v: &TrafficView, narrow: bool) -> Vec<String> {
    let Some(c) = &v.crossover else {
        return Vec::new();
    };
    if narrow {
        return vec![format!(
            "KV > weights at {} tok",
            thousands(c.now() as usize)
        )];
    }
    let others: Vec<String> = c
        .tokens
        .iter()
        .filter(|(l, _)| *l != c.layout)
        .map(|(l, n)| format!("{l} {}", thousands(*n as usize)))
        .collect();
    let over = |n: usize| {
        if n as u64 >= c.now() {
            "past it"
        } else {
            "below"
        }
    };
    let mut cached = format!("cached now: live {} ({})", thousands(c.live), over(c.live));
    if let Some(s) = c.serving {
        cached.push_str(&format!(" · batch read {} ({})", thousands(s), over(s)));
    }
    vec![
        format!(
            "KV > weights past ≈{} cached tokens ({}; {})",
            thousands(c.now() as usize),
            c.layout,
            others.join(", ")
        ),
        cached,
    ]
}
