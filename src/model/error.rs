//! Errors callers branch on: the kind tells the CLI what to say and the tests what to expect.

use std::path::PathBuf;

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model file not found: {0}")]
    NotFound(PathBuf),
    #[error("{}: not a readable {} ({reason})", .path.display(), file_kind(.path))]
    CorruptFile { path: PathBuf, reason: Malformed },
    #[error("unsupported architecture `{0}`: inferlab runs Llama-family models (general.architecture = llama)")]
    UnsupportedArchitecture(String),
    #[error("tensor `{tensor}` has quant type {dtype}, which inferlab does not support (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K..Q6K)")]
    UnsupportedQuant { tensor: String, dtype: String },
    #[error("GGUF metadata is missing `{0}`")]
    MissingMetadata(String),
    /// A config value that is present but impossible or beyond inferlab's bounds.
    #[error("{field} = {value}: {why}")]
    InvalidConfig {
        field: String,
        value: String,
        why: String,
    },
    /// An HF `config.json` that does not describe a model inferlab can run.
    #[error("{0}")]
    Config(Malformed),
    /// Any load error, with the file it came from (config and tokenizer errors lack it).
    #[error("{path}: {inner}")]
    InFile {
        path: PathBuf,
        inner: Box<ModelError>,
    },
    #[error("the prompt is empty: give at least one token of text")]
    EmptyPrompt,
    #[error("the prompt is {tokens} tokens plus {max_new} to generate, over the model's context of {context} tokens (shorten the prompt or lower --max-tokens)")]
    PromptTooLong {
        tokens: usize,
        max_new: usize,
        context: usize,
    },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The logits hold a NaN or an infinity: the weights hold such values, or the device's
    /// kernels computed them. Sampling would pick a token from garbage without saying so.
    #[error("the model's output is not a number (NaN or infinite logits) on the {device}: the weights hold such values, or this device's kernels computed them")]
    NotFinite { device: String },
    /// A file that is not a regular file of a sane size (a FIFO, a device, 5 GB of
    /// "config"), or that could not be read.
    #[error(transparent)]
    File(crate::files::FileError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

message_error!(
    /// What is wrong inside a model's files, in words that name the place (a tensor, a
    /// metadata key, a byte offset, a config field); the caller adds which file
    /// ([`ModelError::CorruptFile`], [`ModelError::InFile`]).
    Malformed
);

/// Result alias for model code.
pub type Result<T> = std::result::Result<T, ModelError>;

/// The message a panic carried (`panic!` gives a `String` or a `&str`), for reporting a
/// contained panic to the user; `fallback` when it carried neither.
pub fn panic_message(payload: &(dyn std::any::Any + Send), fallback: &str) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| fallback.to_string())
}

impl From<crate::files::FileError> for ModelError {
    fn from(e: crate::files::FileError) -> Self {
        match e {
            crate::files::FileError::NotFound { path } => ModelError::NotFound(path),
            e => ModelError::File(e),
        }
    }
}

/// What a model's file is, in words, from its name: errors about a tokenizer or a shard
/// must not call it a GGUF file.
fn file_kind(path: &std::path::Path) -> &'static str {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase());
    match name.as_deref() {
        Some("tokenizer.json") => "tokenizer.json",
        Some("config.json") => "config.json",
        Some(n) if n.ends_with(".safetensors") => "safetensors file",
        Some(n) if n.ends_with(".json") => "JSON file",
        _ if path.is_dir() => "model directory",
        _ => "GGUF file",
    }
}
