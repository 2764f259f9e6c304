//! Serving many requests at once: a model-free [`scheduler`] decides each iteration's
//! batch, the [`runner`] runs it on the model, [`view`] reports what happened, and
//! [`engine`] ties the three together. [`workload`] makes seeded request streams.

pub mod engine;
pub mod runner;
pub mod scheduler;
pub mod view;
pub mod workload;

pub use engine::ServeEngine;
pub use scheduler::{CacheKind, Policy, ReqPhase, Request, Reserve, ServeConfig};
pub use view::ServeStep;
