//! Pictures of the panes for papers and slides: SVG written by us from the same state the
//! panes draw, PNG rasterized from that SVG by resvg with an embedded DejaVu font (so a
//! picture looks the same on every machine, fonts installed or not).

pub mod attention;
pub mod forward;
pub mod heads;
pub mod lens;
pub mod output;
pub mod pages;
pub mod request;
pub mod sink;
pub mod svg;
pub mod timeline;
pub mod traffic;

use crate::report::StepReport;
use crate::serve::ReqPhase;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// What a picture is drawn from: the state the panes show, without the app around it.
pub struct Scene<'a> {
    pub report: Option<&'a StepReport>,
    /// The focused layer's attention rows `rows[p][h]`, as shown (weights or scores).
    pub attention: &'a [Vec<Vec<f32>>],
    pub layer: usize,
    pub head: usize,
    pub show_scores: bool,
    /// The batching timeline: per iteration, each request's phase.
    pub timeline: &'a VecDeque<Vec<(u64, ReqPhase)>>,
    /// The app's settings, for a timeline without a serving report.
    pub settings: crate::settings::Settings,
    /// Earlier reports, oldest first (the roofline's prefill and decode points).
    pub past: &'a VecDeque<Box<StepReport>>,
    /// This machine's limits, when measured.
    pub machine: Option<&'a crate::machine::Machine>,
}

/// What can be exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportPane {
    /// The attention heatmap of the current layer and head.
    Attention,
    /// The serving engine's KV page grid (or contiguous reservations).
    Kv,
    /// The live request's own KV reservation (the app's "KV cache · contiguous" pane).
    Request,
    /// The head-sharing diagram.
    Heads,
    /// The batching timeline.
    Batch,
    /// The attention-sink experiment (when the session ran it).
    Sink,
    /// The forward pass: time per stage and layer.
    Forward,
    /// The generated text and the next-token distribution.
    Output,
    /// Memory traffic: bytes moved, the crossover, the roofline.
    Traffic,
    /// The logit lens: each layer's guess for the next token.
    Lens,
}

impl ExportPane {
    /// The word used in file names and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Attention => "attention",
            Self::Kv => "kv",
            Self::Request => "request-kv",
            Self::Heads => "heads",
            Self::Batch => "batch",
            Self::Sink => "sink",
            Self::Forward => "forward",
            Self::Output => "output",
            Self::Traffic => "traffic",
            Self::Lens => "lens",
        }
    }
}

/// Picture formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImageFormat {
    Svg,
    Png,
}

impl ImageFormat {
    /// The file extension.
    pub fn ext(self) -> &'static str {
        match self {
            Self::Svg => "svg",
            Self::Png => "png",
        }
    }
}

/// Why a picture could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("nothing to export: {0}")]
    NoData(String),
    #[error("writing {path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },
    #[error("rasterizing the picture: {0}")]
    Render(String),
    #[error("{}: is a file, not a folder; point INFERLAB_EXPORT_DIR (or --out) at a folder", .0.display())]
    NotAFolder(PathBuf),
    #[error(transparent)]
    File(#[from] crate::files::FileError),
}

/// The SVG of `pane` as the app state shows it now.
pub fn render_svg(app: &Scene, pane: ExportPane) -> Result<String, ExportError> {
    let report = app
        .report
        .ok_or_else(|| ExportError::NoData("no iteration has run yet".into()))?;
    match pane {
        ExportPane::Attention => attention::render(&crate::views::heatmap::Source {
            report,
            rows: app.attention,
            layer: app.layer,
            head: app.head,
            scores: app.show_scores,
        }),
        ExportPane::Heads => heads::render(report, app.head),
        ExportPane::Forward => forward::render(report, app.layer),
        ExportPane::Output => output::render(report),
        ExportPane::Lens => lens::render(&crate::views::lens::view(report).ok_or_else(|| {
            ExportError::NoData("the logit lens did not run at this iteration (o shows it)".into())
        })?),
        ExportPane::Traffic => traffic::render(&crate::views::traffic::view(
            report,
            app.past.iter().map(|r| r.as_ref()),
            app.machine,
        )),
        ExportPane::Request => request::render(report),
        ExportPane::Kv => {
            let sv = report.serve.as_ref().ok_or_else(|| {
                ExportError::NoData(
                    "the serving workload has no iteration here (finished, or not started)".into(),
                )
            })?;
            pages::render(sv)
        }
        ExportPane::Batch => {
            let (policy, cache) = report
                .serve
                .as_ref()
                .map(|s| (s.policy, s.cache))
                .unwrap_or((app.settings.serving.policy, app.settings.serving.cache));
            let title = format!("Batching timeline · {policy:?} batching · {cache:?} KV cache")
                .to_lowercase();
            let ttft = report.serve.as_ref().map_or(&[][..], |s| &s.ttft_ms[..]);
            timeline::render(&title, app.timeline, ttft)
        }
        ExportPane::Sink => {
            let v = report.sink.as_ref().ok_or_else(|| {
                ExportError::NoData(
                    "the attention-sink experiment did not run at this iteration (x starts it)"
                        .into(),
                )
            })?;
            sink::render(v)
        }
    }
}

/// PNG bytes of an SVG, `scale` pixels per SVG unit.
pub fn to_png(svg: &str, scale: f32) -> Result<Vec<u8>, ExportError> {
    use resvg::{tiny_skia, usvg};
    let mut opt = usvg::Options {
        font_family: "DejaVu Sans".into(),
        ..Default::default()
    };
    opt.fontdb_mut()
        .load_font_data(dejavu::sans::regular().to_vec());
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| ExportError::Render(e.to_string()))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(scale)
        .ok_or_else(|| ExportError::Render("the picture has no size".into()))?;
    // The panes' pictures are at most a few thousand units a side; anything larger came
    // from counts no session produces, and would allocate gigabytes of pixels.
    let pixels = u64::from(size.width()) * u64::from(size.height());
    if pixels > MAX_PIXELS {
        return Err(ExportError::Render(format!(
            "the picture would be {}×{} pixels, over the limit of {MAX_PIXELS}",
            size.width(),
            size.height()
        )));
    }
    let mut pix = tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| ExportError::Render("the picture is too large".into()))?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pix.as_mut(),
    );
    pix.encode_png()
        .map_err(|e| ExportError::Render(e.to_string()))
}

/// Largest PNG export, in pixels (64 M: 256 MB of RGBA).
const MAX_PIXELS: u64 = 1 << 26;

/// Writes `pane` to `path` as `format` (PNG at 2× for print) under `rules`: checked before
/// anything is drawn, then written whole or not at all.
pub fn write(
    app: &Scene,
    pane: ExportPane,
    format: ImageFormat,
    path: &Path,
    rules: crate::files::WriteRules,
) -> Result<(), ExportError> {
    crate::files::check_target(path, rules)?;
    let svg = render_svg(app, pane)?;
    let bytes = match format {
        ImageFormat::Svg => svg.into_bytes(),
        ImageFormat::Png => to_png(&svg, 2.0)?,
    };
    Ok(crate::files::write(path, &bytes, rules)?)
}

/// Makes the folder `path` goes in (`$INFERLAB_EXPORT_DIR` may not exist yet).
pub fn make_parent(path: &Path) -> Result<(), ExportError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // A file where the folder should be: said as such, not as "File exists".
        if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
            return Err(ExportError::NotAFolder(dir.to_path_buf()));
        }
        std::fs::create_dir_all(dir).map_err(|err| ExportError::Write {
            path: dir.to_path_buf(),
            err,
        })?;
    }
    Ok(())
}

/// The app's `e`: the SVG and the PNG of `pane` under the default name, or, where a file
/// (or a link) already has that name, the first free `…-2`, `…-3`: nothing is replaced.
/// Returns the SVG's path.
pub fn write_fresh(app: &Scene, pane: ExportPane) -> Result<PathBuf, ExportError> {
    let svg = default_path(app, pane, ImageFormat::Svg);
    make_parent(&svg)?;
    let taken = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let stem = svg.with_extension("");
    let (svg, png) = (1..10_000)
        .map(|n| {
            let s = match n {
                1 => stem.clone(),
                n => PathBuf::from(format!("{}-{n}", stem.display())),
            };
            (s.with_extension("svg"), s.with_extension("png"))
        })
        .find(|(a, b)| !taken(a) && !taken(b))
        .ok_or_else(|| ExportError::NoData(format!("no free name beside {}", svg.display())))?;
    let rules = crate::files::WriteRules::default();
    write(app, pane, ImageFormat::Svg, &svg, rules)?;
    write(app, pane, ImageFormat::Png, &png, rules)?;
    Ok(svg)
}

/// Where the app's `e` key writes: `$INFERLAB_EXPORT_DIR` or the current directory.
pub fn default_path(app: &Scene, pane: ExportPane, format: ImageFormat) -> PathBuf {
    let dir = std::env::var_os("INFERLAB_EXPORT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let iter = app.report.map(|r| r.iteration).unwrap_or(0);
    let detail = match pane {
        ExportPane::Attention | ExportPane::Heads => format!("-l{}h{}", app.layer, app.head),
        _ => String::new(),
    };
    dir.join(format!(
        "inferlab-{}{detail}-iter{iter}.{}",
        pane.name(),
        format.ext()
    ))
}
