//! `inferlab bench ...`: side-by-side measurements.

use super::{model_path, ModelArgs};
use anyhow::Result;
use inferlab::bench::decode;

/// Benchmarks.
#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Prefill and decode tok/s: ours (capture off / one layer / all) vs candle's quantized_llama.
    Decode {
        /// Tokens to decode per measurement.
        #[arg(long, default_value_t = 32)]
        tokens: usize,
        /// Rounds; each configuration runs once per round, interleaved, and the median counts.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long)]
        json: bool,
    },
}

/// Runs a benchmark.
pub fn run(margs: &ModelArgs, cmd: &Cmd) -> Result<()> {
    match cmd {
        Cmd::Decode {
            tokens,
            rounds,
            json,
        } => {
            let (path, _) = model_path(margs)?;
            let report = decode::run(&path, &margs.device()?, *tokens, (*rounds).max(1), !json)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{}", report.table());
            }
        }
    }
    Ok(())
}
