//! The KV cache: where each layer's keys and values live between decode steps.
//!
//! The forward pass talks to the cache only through [`BatchKv`], so the layout
//! (contiguous reservation, pages, a window) changes memory, never the math.

/// [`BatchKv`] for a store of one sequence whose own methods take no sequence index
/// (`len`, `append`, `advance(t)`, `pending`, `append_rows`, `rows`): a batch of one.
macro_rules! batch_of_one {
    ($store:ty) => {
        impl $crate::kv::BatchKv for $store {
            fn len(&self, _s: usize) -> usize {
                <$store>::len(self)
            }
            fn append(
                &mut self,
                _s: usize,
                layer: usize,
                k: &candle_core::Tensor,
                v: &candle_core::Tensor,
            ) -> candle_core::Result<(candle_core::Tensor, candle_core::Tensor)> {
                <$store>::append(self, layer, k, v)
            }
            fn advance(&mut self) {
                let t = self.pending();
                <$store>::advance(self, t);
            }
            fn append_rows(
                &mut self,
                _s: usize,
                layer: usize,
                k: &[f32],
                v: &[f32],
            ) -> candle_core::Result<()> {
                <$store>::append_rows(self, layer, k, v)
            }
            fn rows(&self, _s: usize, layer: usize) -> Option<$crate::kv::KvRows<'_>> {
                <$store>::rows(self, layer)
            }
            fn slot_step(&mut self, lens_after: &[usize]) -> Option<$crate::kv::SlotStep> {
                <$store>::slot_step(self, lens_after)
            }
            fn on_host(&self) -> bool {
                <$store>::on_host(self)
            }
            fn gather(
                &self,
                _s: usize,
                layer: usize,
            ) -> candle_core::Result<(candle_core::Tensor, candle_core::Tensor)> {
                <$store>::gather(self, layer)
            }
        }
    };
}

pub mod arena;
pub mod contiguous;
pub mod elem;
pub mod paged;
pub mod pool;
pub mod slots;
pub mod window;

pub use arena::Arena;
pub use contiguous::Contiguous;
pub use elem::{KvElem, RowBuf, RowData};
pub use paged::PagedKv;
pub use pool::{KvError, PagePool, PoolStats, SeqId};
pub use slots::{SlotStep, SlotTensors};

use candle_core::{Result, Tensor};

/// Bytes one token takes in a KV cache: layers × (K and V) × KV heads × one row of head
/// size numbers of the element type (int8's row carries its scale). The one place this
/// formula is written; every count and view uses it.
pub fn bytes_per_token(layers: usize, kv_heads: usize, head_dim: usize, elem: KvElem) -> usize {
    layers * 2 * kv_heads * elem.row_bytes(head_dim)
}

/// The KV caches of the sequences of one forward pass, sequence `s` by sequence: the one
/// interface the forward pass talks to the cache through. A single store (contiguous,
/// windowed) is a batch of one; a paged batch and several contiguous stores are many.
/// Every store in host memory takes new rows and lends them back in place (the host
/// route); on a device, stores take and give tensors.
pub trait BatchKv: Send {
    /// Tokens already cached for sequence `s`: the position its next token takes.
    fn len(&self, s: usize) -> usize;
    /// Stores sequence `s`'s new `k`, `v` (`(n_kv_head, t, head_dim)`) for `layer` and
    /// returns all its keys and values so far, each `(n_kv_head, len + t, head_dim)`.
    fn append(
        &mut self,
        s: usize,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)>;
    /// Marks every sequence's new tokens as cached.
    fn advance(&mut self);
    /// Stores sequence `s`'s new K and V rows (token-major, `n_kv_head × head_dim` per
    /// token, RoPE applied) in host memory; a store on a device refuses.
    fn append_rows(&mut self, s: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()>;
    /// Sequence `s`'s keys and values for `layer`, read in place (`None` on a device).
    fn rows(&self, s: usize, layer: usize) -> Option<KvRows<'_>>;
    /// The batched route's view of the coming step, given each sequence's length once
    /// it has run: the store's slot tensors and every sequence's slots (`None` for a store
    /// that keeps no slot tensors; the pass then runs the host or per-sequence route).
    fn slot_step(&mut self, _lens_after: &[usize]) -> Option<SlotStep> {
        None
    }
    /// Whether every sequence's rows are in host memory, so the host route can read them
    /// in place (else attention runs on tensors, sequence by sequence).
    fn on_host(&self) -> bool;
    /// Sequence `s`'s keys and values for `layer` as f32 `(n_kv_head, len, head_dim)`
    /// tensors, this pass's new rows included: what the probe looks at after the math.
    fn gather(&self, s: usize, layer: usize) -> Result<(Tensor, Tensor)>;
}

/// Rows lent in place as f32 `(n_kv, len, d)` tensors on the CPU, K and V.
pub fn tensors_of(r: KvRows, n_kv: usize, d: usize) -> Result<(Tensor, Tensor)> {
    let len = r.layout.len();
    let gather = |stored: RowData| -> Vec<f32> {
        let (mut out, mut buf) = (Vec::with_capacity(n_kv * len * d), vec![0.0; d]);
        for g in 0..n_kv {
            for j in 0..len {
                out.extend_from_slice(stored.row(r.layout.at(n_kv, d, g, j), &mut buf));
            }
        }
        out
    };
    let cpu = &candle_core::Device::Cpu;
    Ok((
        Tensor::from_vec(gather(r.k), (n_kv, len, d), cpu)?,
        Tensor::from_vec(gather(r.v), (n_kv, len, d), cpu)?,
    ))
}

/// The error of a store whose rows live on a device, asked for host rows.
pub fn no_host_rows() -> candle_core::Error {
    candle_core::Error::Msg("this KV store holds its rows on a device, not in host memory".into())
}

/// One sequence's K/V read in place, and where each position's rows sit in them.
#[derive(Clone, Copy)]
pub struct KvRows<'a> {
    pub k: RowData<'a>,
    pub v: RowData<'a>,
    pub layout: RowLayout<'a>,
}

/// Where position `j` of KV head `g` starts in a [`KvRows`] buffer.
#[derive(Clone, Copy)]
pub enum RowLayout<'a> {
    /// The page pool: each page head-major `(n_kv, page_size, d)`, so one KV head's rows
    /// of a page lie one after another (as in vLLM's block layout); the sequence's slots
    /// in position order (its block table, unrolled).
    Slots { slots: &'a [u32], page_size: usize },
    /// A contiguous reservation: head-major `(n_kv, capacity, d)`, the first `len`
    /// positions in use.
    HeadMajor { capacity: usize, len: usize },
    /// Rows one after another, token-major `(len, n_kv × d)` (a sliding window: its rows
    /// are the positions it still holds, in order).
    TokenMajor { len: usize },
}

impl RowLayout<'_> {
    /// Positions held.
    pub fn len(&self) -> usize {
        match self {
            Self::Slots { slots, .. } => slots.len(),
            Self::HeadMajor { len, .. } | Self::TokenMajor { len } => *len,
        }
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `n` positions alone: what a prompt's row may attend to, the keys up to
    /// its own.
    pub fn prefix(self, n: usize) -> Self {
        match self {
            Self::Slots { slots, page_size } => Self::Slots {
                slots: &slots[..n.min(slots.len())],
                page_size,
            },
            Self::HeadMajor { capacity, len } => Self::HeadMajor {
                capacity,
                len: n.min(len),
            },
            Self::TokenMajor { len } => Self::TokenMajor { len: n.min(len) },
        }
    }

    /// Offsets of KV head `g`'s rows (of `n_kv`, each `d` wide) for every position held, in
    /// order: what a decode row reads. Paged slots run on within a page, so a page's
    /// position is worked out (a division) once per page, not once per row: per row, the
    /// divisions made paged decode attention about 10% slower than a head-major
    /// reservation's at 300 and 1,000 rows; once per page, the two are level.
    pub fn rows(&self, n_kv: usize, d: usize, g: usize) -> Vec<usize> {
        let Self::Slots { slots, page_size } = *self else {
            return (0..self.len()).map(|j| self.at(n_kv, d, g, j)).collect();
        };
        let mut out = Vec::with_capacity(slots.len());
        // The last slot placed, its row, and how many slots its page has after it.
        let mut last: Option<(u32, usize, usize)> = None;
        for &slot in slots {
            let row = match last {
                Some((s, row, left)) if left > 0 && slot == s + 1 => (row + d, left - 1),
                _ => (
                    page_row(slot, page_size, n_kv, d, g),
                    page_size - 1 - slot as usize % page_size,
                ),
            };
            out.push(row.0);
            last = Some((slot, row.0, row.1));
        }
        out
    }

    /// Offset of position `j`'s row of KV head `g` (of `n_kv`, each `d` wide).
    pub fn at(&self, n_kv: usize, d: usize, g: usize, j: usize) -> usize {
        match self {
            Self::Slots { slots, page_size } => page_row(slots[j], *page_size, n_kv, d, g),
            Self::HeadMajor { capacity, .. } => (g * capacity + j) * d,
            Self::TokenMajor { .. } => (j * n_kv + g) * d,
        }
    }
}

/// Offset of KV head `g`'s row in page-pool slot `slot`: pages of `page_size` slots, each
/// head-major `(n_kv, page_size, d)`.
pub fn page_row(slot: u32, page_size: usize, n_kv: usize, d: usize, g: usize) -> usize {
    let (page, at) = (slot as usize / page_size, slot as usize % page_size);
    ((page * n_kv + g) * page_size + at) * d
}

/// Contiguous stores of several requests as one batch.
pub struct ContiguousBatch<'a>(pub Vec<&'a mut Contiguous>);

impl BatchKv for ContiguousBatch<'_> {
    fn len(&self, s: usize) -> usize {
        self.0[s].len()
    }
    fn append(
        &mut self,
        s: usize,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        self.0[s].append(layer, k, v)
    }
    fn append_rows(&mut self, s: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.0[s].append_rows(layer, k, v)
    }
    fn rows(&self, s: usize, layer: usize) -> Option<KvRows<'_>> {
        self.0[s].rows(layer)
    }
    fn on_host(&self) -> bool {
        self.0.iter().all(|c| c.on_host())
    }
    fn gather(&self, s: usize, layer: usize) -> Result<(Tensor, Tensor)> {
        self.0[s].gather(layer)
    }
    fn advance(&mut self) {
        for c in self.0.iter_mut() {
            let t = c.pending();
            c.advance(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rows` works a page's position out once per page; every offset must still be the
    /// one `at` gives: pages out of order, runs cut short, slot numbers that run on across
    /// a page boundary (15 then 16 is the next page), and a page taken up again mid-way.
    #[test]
    fn rows_are_at_for_every_position() {
        let tables: [&[u32]; 4] = [
            &[0, 1, 2, 3, 4],
            &[32, 33, 34, 35, 14, 15, 16, 17, 64],
            &[5, 6, 7, 40, 41, 8, 9, 10],
            &[3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19],
        ];
        for slots in tables {
            for page_size in [1, 4, 16] {
                let layout = RowLayout::Slots { slots, page_size };
                for g in 0..3 {
                    let want: Vec<usize> =
                        (0..slots.len()).map(|j| layout.at(3, 64, g, j)).collect();
                    assert_eq!(
                        layout.rows(3, 64, g),
                        want,
                        "{slots:?} pages of {page_size}"
                    );
                }
            }
        }
        let head_major = RowLayout::HeadMajor {
            capacity: 10,
            len: 4,
        };
        assert_eq!(head_major.rows(3, 64, 1), [640, 704, 768, 832]);
    }
}
