//! `inferlab` with no subcommand: the terminal app.

use super::AppArgs;
use anyhow::{Context, Result};
use inferlab::worker::WorkerConfig;

/// Opens the app on its first prompt.
pub fn run(app: &AppArgs, record: Option<inferlab::ui::Record>) -> Result<()> {
    run_with(app, None, record, None)
}

/// Opens the app, with a lesson beside the panes when `tutor` is given, and attached to
/// a real server when `server` is.
pub fn run_with(
    app: &AppArgs,
    tutor: Option<inferlab::lesson::tutor::Tutor>,
    record: Option<inferlab::ui::Record>,
    server: Option<inferlab::ui::attach::Attach>,
) -> Result<()> {
    if let Some(r) = &record {
        check_writable(r)?;
    }
    let cfg = WorkerConfig {
        model: app.model.source.model.clone(),
        load: app.model.load_options()?,
        run: app.model.run_options()?,
        prompt: app.prompt.clone(),
        max_new: app.max_tokens,
    };
    inferlab::ui::run(cfg, tutor, record, server).context("running the terminal app")
}

/// Fails before the screen opens, not after the model has loaded, and without touching
/// an existing recording: the file itself is only created once the model is ready.
fn check_writable(r: &inferlab::ui::Record) -> Result<()> {
    inferlab::files::check_target(&r.path, r.rules())?;
    // A recording an earlier run could not finish (killed, or out of room) is named, as
    // it may be the user's only copy of that session.
    for p in inferlab::files::leftover_partials(&r.path) {
        eprintln!(
            "inferlab: {} is what remains of an earlier recording to {} that stopped before it finished; rename it to keep it (`inferlab replay` reads it)",
            inferlab::files::printable(&p.display().to_string()),
            inferlab::files::printable(&r.path.display().to_string())
        );
    }
    let dir = match r.path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    tempfile::NamedTempFile::new_in(&dir)
        .with_context(|| format!("cannot create recording {}", r.path.display()))?;
    Ok(())
}

/// `inferlab replay FILE`: the recorded session's screens, without the model.
pub fn replay(path: &std::path::Path) -> Result<()> {
    let rec = inferlab::worker::recording::read(path)?;
    if let Some(w) = &rec.warning {
        eprintln!("inferlab: warning: {}", inferlab::files::printable_text(w));
    }
    inferlab::ui::replay(rec).context("running the replay")
}
