//! `inferlab` with no subcommand: the terminal app.

use super::ModelArgs;
use anyhow::{Context, Result};
use inferlab::serve::EngineConfig;

/// Opens the app on `prompt`.
pub fn run(
    margs: &ModelArgs,
    prompt: &str,
    max_new: usize,
    record: Option<&std::path::Path>,
) -> Result<()> {
    run_with(margs, prompt, max_new, None, record)
}

/// Opens the app, with a lesson beside the panes when `tutor` is given.
pub fn run_with(
    margs: &ModelArgs,
    prompt: &str,
    max_new: usize,
    tutor: Option<inferlab::ui::tutor::Tutor>,
    record: Option<&std::path::Path>,
) -> Result<()> {
    if let Some(p) = record {
        // Fail before the screen opens, not after the model has loaded.
        std::fs::File::create(p).with_context(|| format!("creating recording {}", p.display()))?;
    }
    let cfg = EngineConfig {
        model: margs.model.clone(),
        load: margs.load_options()?,
        run: margs.run_options()?,
        prompt: prompt.to_string(),
        max_new,
    };
    inferlab::ui::run(cfg, tutor, record.map(Into::into)).context("running the terminal app")
}

/// `inferlab replay FILE`: the recorded session's screens, without the model.
pub fn replay(path: &std::path::Path) -> Result<()> {
    let (header, reports) = inferlab::serve::recording::read(path)?;
    inferlab::ui::replay(header, reports).context("running the replay")
}
