//! The model: where weights come from, how text becomes ids, and the Llama forward pass
//! written out step by step so that every intermediate can be captured.

pub mod attention;
pub mod audit;
pub mod batched;
pub mod config;
pub mod error;
pub mod eval;
pub mod flash;
pub mod forward;
pub mod gguf;
pub mod heads;
pub mod hf_dir;
pub mod linear;
pub mod observe;
pub mod probe;
pub mod rope;
pub mod sample_on_device;
pub mod sampler;
pub mod session;
pub mod source;
pub mod tokenizer;
pub mod traffic;
pub mod weights;

pub use config::LlamaConfig;
pub use error::{Malformed, ModelError};
pub use forward::{AttnKernel, AttnRoute, Logits, Model, RunOptions};
pub use heads::HeadLayout;
pub use observe::{Observer, Pass, PassCounts, Unobserved};
pub use probe::{LayerCapture, LayerSelect, Probe};
pub use sampler::{Sampler, SamplerConfig};
pub use tokenizer::TextTokenizer;
pub use weights::{LoadOptions, Requant};
