//! What one forward pass moved through memory and computed, counted from the operations
//! it ran: the matrices it read, the keys and values attention read and wrote, the score
//! traffic of the attention kernel, and the floating-point work.

use serde::{Deserialize, Serialize};

/// Bytes and FLOPs of one forward pass (all sequences of a batch, all layers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// Matrix weights read, as stored: every projection, the MLP and the LM head, each once
    /// per pass however many rows the batch has.
    pub weight_bytes: u64,
    /// Cached keys and values attention read: every row of each sequence's cache, once per
    /// layer.
    pub kv_read_bytes: u64,
    /// Keys and values written to the cache: the pass's new rows.
    pub kv_write_bytes: u64,
    /// Attention's traffic beyond reading Q, K, V and writing the output once: the score
    /// matrix written and read back (naive), or the tiles' repeated passes (tiled).
    pub score_bytes: u64,
    /// Floating-point operations, two per multiply-accumulate: the matrices and attention.
    pub flops: u64,
}

impl Traffic {
    /// Adds another count to this one.
    pub fn add(&mut self, o: Traffic) {
        self.weight_bytes += o.weight_bytes;
        self.kv_read_bytes += o.kv_read_bytes;
        self.kv_write_bytes += o.kv_write_bytes;
        self.score_bytes += o.score_bytes;
        self.flops += o.flops;
    }

    /// One linear layer on `rows` rows: its matrix read once, two FLOPs per MAC per row.
    pub fn matrix(bytes: usize, out: usize, inp: usize, rows: usize) -> Self {
        Self {
            weight_bytes: bytes as u64,
            flops: 2 * (out * inp * rows) as u64,
            ..Self::default()
        }
    }

    /// Attention of one sequence in one layer: `t` new rows against `kv_len` keys, with
    /// `n_head` query heads over `n_kv` KV heads of `d`, the cache storing `elem`; `io` is
    /// what its kernel moved. The cache's bytes are counted in the type it stores (f16
    /// halves them, int8 with its scales takes about a quarter); the kernel's own traffic
    /// model counts in f32, the type it computes in.
    pub fn attention(
        t: usize,
        kv_len: usize,
        (n_head, n_kv, d, elem): (usize, usize, usize, crate::kv::KvElem),
        io_total: u64,
    ) -> Self {
        let row = 2 * n_kv * elem.row_bytes(d);
        // What any kernel must move per head: Q in, K and V in, the output out.
        let base = 4 * n_head * (2 * t * d + 2 * kv_len * d);
        Self {
            kv_read_bytes: (kv_len * row) as u64,
            kv_write_bytes: (t * row) as u64,
            score_bytes: io_total.saturating_sub(base as u64),
            // Q·Kᵀ and weights·V: two multiply-adds per head, query row, key and dimension.
            flops: (4 * n_head * t * kv_len * d) as u64,
            ..Self::default()
        }
    }
}
