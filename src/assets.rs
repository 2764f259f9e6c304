//! Text shipped with the program: what the model reads in benchmarks, workloads and
//! experiments, so every run sees the same real tokens.

/// Text shipped for the quality comparison.
pub const EVAL_TEXT: &str = include_str!("../assets/eval.txt");

/// A long story in eight parts (written for inferlab, in the public domain): the app's
/// long-context workload reads one part per request, so the batch's cache outgrows the
/// weights.
pub const LONG_TEXT: &str = include_str!("../assets/long-context.txt");

/// The glossary the app shows on `G`: one `term :: meaning` per line.
pub const GLOSSARY: &str = include_str!("../assets/glossary.md");

/// Prompts shipped with the app.
pub const PROMPTS: &str = include_str!("../assets/prompts.txt");
