//! `inferlab export`: a picture of one pane at one iteration of a recording.

use anyhow::{bail, Context, Result};
use inferlab::export::{self, ExportPane, ImageFormat};
use inferlab::ui::app::App;
use inferlab::worker::recording::Lines;
use inferlab::worker::Event;
use std::path::PathBuf;

/// Flags of `inferlab export`.
#[derive(clap::Args)]
pub struct Args {
    /// A recording made with `inferlab --record FILE`.
    pub recording: PathBuf,
    /// The iteration to draw (as the header line showed it); default: the last recorded.
    #[arg(long)]
    pub step: Option<usize>,
    /// What to draw (sink: the attention-sink experiment, where the session ran it).
    #[arg(long, value_enum, default_value = "attention")]
    pub pane: ExportPane,
    /// Picture format; default: from --out's extension, else png.
    #[arg(long, value_enum)]
    pub format: Option<ImageFormat>,
    /// Where to write; default: inferlab-PANE[-lLhH]-iterN.EXT in the current directory.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Layer of the attention heatmap.
    #[arg(long, default_value_t = 0)]
    pub layer: usize,
    /// Query head of the attention heatmap (and the one outlined in the heads diagram).
    #[arg(long, default_value_t = 0)]
    pub head: usize,
    /// Draw raw Q·Kᵀ/√d scores instead of softmax weights.
    #[arg(long)]
    pub scores: bool,
    /// Replace an existing file at the output path.
    #[arg(long)]
    pub force: bool,
}

/// Replays the recording up to the chosen iteration and writes the picture.
pub fn run(a: &Args) -> Result<()> {
    if let Some(out) = &a.out {
        let inputs = [a.recording.clone()];
        let rules = inferlab::files::WriteRules {
            force: a.force,
            inputs: &inputs,
        };
        inferlab::files::check_target(out, rules)?;
    }
    // Read as a stream: the app keeps only the history its screens draw, bounded, so a
    // long session exports in the memory of its last screens, not of the whole file.
    let mut lines = inferlab::worker::recording::Lines::open(&a.recording)?;
    let format = format_of(a)?;
    let (app, want) = replay_to(a, &mut lines)?;
    // A recording cut short (a crash) is drawn up to its last whole line, as replay
    // does, and said as replay says it.
    if let Some(w) = &lines.warning {
        eprintln!("inferlab: warning: {}", inferlab::files::printable_text(w));
    }
    let context = || format!("exporting {} at iteration {want}", a.pane.name());
    // As the app's `e` does: `$INFERLAB_EXPORT_DIR` (made if missing), else here.
    let out = match &a.out {
        Some(p) => p.clone(),
        None => {
            let p = export::default_path(&app.scene(), a.pane, format);
            export::make_parent(&p).with_context(context)?;
            p
        }
    };
    let inputs = [a.recording.clone()];
    let rules = inferlab::files::WriteRules {
        force: a.force,
        inputs: &inputs,
    };
    export::write(&app.scene(), a.pane, format, &out, rules).with_context(context)?;
    println!("{}", inferlab::files::printable(&out.display().to_string()));
    Ok(())
}

/// What the replay saw, for the checks that follow it.
struct Seen {
    first: usize,
    last: usize,
    /// The layers the recording captured.
    layers: std::collections::BTreeSet<usize>,
}

/// Checks that the recording held the iteration, the layer and the head asked for.
fn check_choice(
    a: &Args,
    seen: &Seen,
    cfg: &inferlab::model::LlamaConfig,
    want: usize,
) -> Result<()> {
    let Seen { first, last, .. } = seen;
    if want != *last {
        bail!(
            "{}: iteration {want} is not in the recording (it holds iterations {first}..={last})",
            a.recording.display()
        );
    }
    if a.layer >= cfg.n_layer || a.head >= cfg.n_head {
        bail!(
            "layer {} / head {} out of range: the recorded model has {} layers and {} heads",
            a.layer,
            a.head,
            cfg.n_layer,
            cfg.n_head
        );
    }
    if a.pane == inferlab::export::ExportPane::Attention && !seen.layers.contains(&a.layer) {
        bail!(
            "{}: layer {} was not recorded (a recording keeps the layer on screen; it holds layer(s) {:?}): pass --layer",
            a.recording.display(),
            a.layer,
            seen.layers
        );
    }
    Ok(())
}

/// The picture's format: `--format`, else `--out`'s extension, else PNG. The bytes and
/// the name agree: PNG bytes never go into a `.svg` file.
fn format_of(a: &Args) -> Result<ImageFormat> {
    let ext = a
        .out
        .as_ref()
        .and_then(|p| p.extension())
        .and_then(|e| e.to_str());
    let Some(f) = a.format else {
        return match ext {
            Some(e) if e.eq_ignore_ascii_case("svg") => Ok(ImageFormat::Svg),
            Some(e) if e.eq_ignore_ascii_case("png") => Ok(ImageFormat::Png),
            // PNG bytes under another picture's name would mislead every viewer.
            Some(e) => bail!(
                "--out {} ends in .{}: export writes SVG or PNG; name it .svg or .png, or give --format",
                inferlab::files::printable(&a.out.as_ref().map_or(String::new(), |p| p.display().to_string())),
                inferlab::files::printable(e)
            ),
            None => Ok(ImageFormat::Png),
        };
    };
    let other = match f {
        ImageFormat::Svg => "png",
        ImageFormat::Png => "svg",
    };
    if let (Some(p), Some(ext)) = (&a.out, ext) {
        if ext.eq_ignore_ascii_case(other) {
            bail!(
                "--format {} but --out {} ends in .{ext}: give one of them, or make them agree",
                f.ext(),
                p.display()
            );
        }
    }
    Ok(f)
}

/// The same state the app would have reached at the iteration asked for (the last
/// recorded by default), built by the app's own event handling, one report at a time,
/// with the layer, head and values asked for.
fn replay_to(a: &Args, lines: &mut Lines) -> Result<(App, usize)> {
    let Some(r) = lines.next_report()? else {
        unreachable!("Lines refuses a recording without iterations")
    };
    let cfg = r.cfg.clone();
    let mut app = App::new(r.settings.run);
    app.settings = r.settings;
    app.on_event(Event::Ready {
        model: lines.header.model.clone(),
    });
    if let Some(m) = lines.header.machine.clone() {
        app.on_event(Event::Machine(m));
    }
    let mut seen = Seen {
        first: r.iteration,
        last: r.iteration,
        layers: Default::default(),
    };
    let mut next = Some(r);
    while let Some(r) = next {
        seen.last = r.iteration;
        seen.layers.extend(r.info.captures.iter().map(|c| c.layer));
        app.on_event(Event::Report(Box::new(r)));
        if a.step == Some(seen.last) {
            break;
        }
        next = lines.next_report()?;
    }
    let want = a.step.unwrap_or(seen.last);
    check_choice(a, &seen, &cfg, want)?;
    app.screen.layer = a.layer;
    app.screen.head = a.head;
    app.screen.show_scores = a.scores;
    Ok((app, want))
}
