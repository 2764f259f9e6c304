//! `inferlab` with no subcommand: the terminal app.

use super::ModelArgs;
use anyhow::{Context, Result};
use inferlab::serve::EngineConfig;

/// Opens the app on `prompt`.
pub fn run(margs: &ModelArgs, prompt: &str, max_new: usize) -> Result<()> {
    run_with(margs, prompt, max_new, None)
}

/// Opens the app, with a lesson beside the panes when `tutor` is given.
pub fn run_with(
    margs: &ModelArgs,
    prompt: &str,
    max_new: usize,
    tutor: Option<inferlab::ui::tutor::Tutor>,
) -> Result<()> {
    let cfg = EngineConfig {
        model: margs.model.clone(),
        load: margs.load_options()?,
        run: margs.run_options()?,
        prompt: prompt.to_string(),
        max_new,
    };
    inferlab::ui::run(cfg, tutor).context("running the terminal app")
}
