//! `inferlab` with no subcommand: the terminal app.

use super::ModelArgs;
use anyhow::{Context, Result};
use inferlab::serve::EngineConfig;

/// Opens the app on `prompt`.
pub fn run(
    margs: &ModelArgs,
    prompt: &str,
    max_new: usize,
    record: Option<inferlab::ui::Record>,
) -> Result<()> {
    run_with(margs, prompt, max_new, None, record)
}

/// Opens the app, with a lesson beside the panes when `tutor` is given.
pub fn run_with(
    margs: &ModelArgs,
    prompt: &str,
    max_new: usize,
    tutor: Option<inferlab::ui::tutor::Tutor>,
    record: Option<inferlab::ui::Record>,
) -> Result<()> {
    if let Some(r) = &record {
        check_writable(r)?;
    }
    let cfg = EngineConfig {
        model: margs.model.clone(),
        load: margs.load_options()?,
        run: margs.run_options()?,
        prompt: prompt.to_string(),
        max_new,
    };
    inferlab::ui::run(cfg, tutor, record).context("running the terminal app")
}

/// Fails before the screen opens, not after the model has loaded, and without touching
/// an existing recording: the file itself is only created once the model is ready.
fn check_writable(r: &inferlab::ui::Record) -> Result<()> {
    if r.path.exists() && !r.force {
        return Err(inferlab::serve::recording::RecordingError::Exists {
            path: r.path.clone(),
        }
        .into());
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
    let rec = inferlab::serve::recording::read(path)?;
    if let Some(w) = &rec.warning {
        eprintln!("inferlab: warning: {w}");
    }
    inferlab::ui::replay(rec).context("running the replay")
}
