//! Serving many requests at once: a model-free [`scheduler`] decides each iteration's
//! batch, the [`runner`] runs it on the model, [`view`] reports what happened, and
//! [`engine`] ties the three together. [`workload`] makes seeded request streams, [`rate`]
//! says how fast they arrive, and [`latency`] says what their users felt.

pub mod engine;
pub mod latency;
pub mod memory;
pub mod rate;
pub mod runner;
pub mod scheduler;
pub mod snapshot;
pub mod workload;

pub use engine::ServeEngine;

/// Why a serving run could not be built or stepped: callers branch on the kind (a user's
/// settings, the memory, the model, or a bug).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Settings or requests that cannot run (a zero page size, ids out of order …).
    #[error("{0}")]
    Config(String),
    /// The page pool or the arena refused, or found its state broken.
    #[error(transparent)]
    Kv(#[from] crate::kv::pool::KvError),
    /// The model failed on the batch.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// The scheduler and the KV store disagree: a bug in inferlab, said plainly.
    #[error("internal: {0}")]
    Invariant(String),
}
pub use scheduler::{CacheKind, Policy, ReqPhase, Request, Reserve, ServeConfig};
pub use snapshot::ServeStep;

/// A request's id. The KV memory holds each request's pages (or its reservation) as one
/// of its sequences, under this id.
pub type ReqId = crate::kv::SeqId;
