//! `inferlab` with no subcommand: a demonstration generation until the TUI lands.

use super::ModelArgs;
use anyhow::Result;

/// Runs a short chat generation so a first run shows the model working.
pub fn run(margs: &ModelArgs) -> Result<()> {
    let a = super::generate::Args {
        prompt: "What is a KV cache?".into(),
        chat: true,
        max_tokens: 96,
        temperature: 0.0,
        top_p: 0.9,
        seed: 42,
        stats: true,
    };
    eprintln!("inferlab: demo generation (the TUI is not built yet); try `inferlab --help`");
    super::generate::run(margs, &a)
}
