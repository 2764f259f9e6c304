//! Text shipped with the program: what the model reads in benchmarks, workloads and
//! experiments, so every run sees the same real tokens.

/// Text shipped for the quality comparison.
pub const EVAL_TEXT: &str = include_str!("../assets/eval.txt");

/// Prompts shipped with the app.
pub const PROMPTS: &str = include_str!("../assets/prompts.txt");
