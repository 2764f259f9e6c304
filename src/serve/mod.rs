//! Serving: the engine thread that owns the model and runs one iteration per command,
//! and the plain-data step reports it sends to whoever draws them.

pub mod batch;
pub mod engine;
pub mod recording;
pub mod report;
pub mod sink;
pub mod workload;

pub use engine::{spawn, Command, EngineConfig, Event};
pub use report::{KvView, StepReport};
