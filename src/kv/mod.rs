//! The KV cache: where each layer's keys and values live between decode steps.
//!
//! The forward pass talks to the cache only through [`KvStore`], so the layout
//! (contiguous reservation, or pages) changes memory, never the math.

pub mod contiguous;

pub use contiguous::Contiguous;

use candle_core::{Result, Tensor};

/// Per-request key/value storage for every layer.
pub trait KvStore {
    /// Tokens already cached: the position the next token will take.
    fn len(&self) -> usize;

    /// True when nothing is cached yet.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores `k`, `v` of shape `(n_kv_head, t, head_dim)` for `layer` at positions
    /// `len()..len()+t`, and returns all keys and values of that layer so far,
    /// each `(n_kv_head, len()+t, head_dim)`.
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)>;

    /// Marks `t` new tokens as cached, once every layer has appended them.
    fn advance(&mut self, t: usize);
}
