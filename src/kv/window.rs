//! A KV cache bounded to a window, for the attention-sink experiment (StreamingLLM,
//! Xiao et al. 2023): when the window is full the oldest page is evicted, either the very
//! first page too or everything but it (the "sink").
//!
//! `len()` is the next token's position, which keeps counting after evictions, so RoPE
//! still sees true distances; the cache itself holds at most `window` (+ the new) tokens.

use super::{KvRows, RowData, RowLayout, SlotStep, SlotTensors};
use candle_core::{DType, Device, Result, Tensor};

/// The batched route's window: the rows live in slot tensors, and `table[i]` is the slot
/// of the row at `positions[i]` (then the pending rows'). An evicted row's slot is reused.
struct WindowSlots {
    store: SlotTensors,
    table: Vec<u32>,
    free: Vec<u32>,
}

/// A windowed cache in f32 (the sink experiment varies which rows are kept, not how
/// precisely): on host memory, or in slot tensors for the batched route.
pub struct Windowed {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// Original position of each cached row.
    pub positions: Vec<usize>,
    pos: usize,
    pending: usize,
    n_kv_head: usize,
    head_dim: usize,
    pub window: usize,
    pub page_size: usize,
    pub keep_sink: bool,
    /// Pages evicted so far.
    pub evicted_pages: usize,
    device: Device,
    slots: Option<WindowSlots>,
}

impl Windowed {
    /// A cache of at most `window` tokens, evicting `page_size` at a time. The window must
    /// hold at least two pages (one to keep as the sink, one to slide).
    pub fn new(
        n_layer: usize,
        n_kv_head: usize,
        head_dim: usize,
        window: usize,
        page_size: usize,
        keep_sink: bool,
        device: &Device,
    ) -> std::result::Result<Self, super::pool::KvError> {
        if page_size == 0 || window < 2 * page_size {
            return Err(super::pool::KvError::BadSettings(format!(
                "a window of {window} tokens must hold at least two pages of {page_size}"
            )));
        }
        Ok(Self {
            k: vec![Vec::new(); n_layer],
            v: vec![Vec::new(); n_layer],
            positions: Vec::new(),
            pos: 0,
            pending: 0,
            n_kv_head,
            head_dim,
            window,
            page_size,
            keep_sink,
            evicted_pages: 0,
            device: device.clone(),
            slots: None,
        })
    }

    /// The same window kept in slot tensors on `device`: the batched route's store. It
    /// starts with room for the window and one more page, and grows if a step brings more.
    pub fn on_slots(
        n_layer: usize,
        (n_kv_head, head_dim): (usize, usize),
        (window, page_size): (usize, usize),
        keep_sink: bool,
        device: &Device,
    ) -> std::result::Result<Self, super::pool::KvError> {
        let mut w = Self::new(
            n_layer, n_kv_head, head_dim, window, page_size, keep_sink, device,
        )?;
        let room = window + page_size;
        let store = SlotTensors::zeros(n_layer, room, (n_kv_head, head_dim), DType::F32, device)
            .map_err(|e| super::pool::KvError::BadSettings(e.to_string()))?;
        w.slots = Some(WindowSlots {
            store,
            table: Vec::new(),
            free: (0..room as u32).rev().collect(),
        });
        Ok(w)
    }

    fn row(&self) -> usize {
        self.n_kv_head * self.head_dim
    }

    /// `(n_kv_head, rows, head_dim)` from token-major rows.
    fn heads(&self, rows: &[f32]) -> Result<Tensor> {
        let (hn, d) = (self.n_kv_head, self.head_dim);
        let n = rows.len() / (hn * d);
        let mut out = vec![0.0f32; rows.len()];
        for p in 0..n {
            for h in 0..hn {
                out[(h * n + p) * d..][..d].copy_from_slice(&rows[(p * hn + h) * d..][..d]);
            }
        }
        Tensor::from_vec(out, (hn, n, d), &self.device)
    }
}

impl Windowed {
    /// Tokens cached: the position the next token takes.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// True when nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores `k`, `v` of shape `(n_kv_head, t, head_dim)` for `layer` after what is
    /// cached and returns all of that layer's keys and values so far, each
    /// `(n_kv_head, len + t, head_dim)`: the tensor kernels' route.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        if self.slots.is_some() {
            candle_core::bail!("a window in slot tensors is written by the batched route only");
        }
        let (hn, t, d) = k.dims3()?;
        // (n_kv, t, d) → token-major rows.
        let rows = |x: &Tensor| -> Result<Vec<f32>> {
            x.transpose(0, 1)?
                .contiguous()?
                .flatten_all()?
                .to_vec1::<f32>()
        };
        debug_assert_eq!(hn * d, self.row());
        let (kr, vr) = (rows(k)?, rows(v)?);
        self.k[layer].extend_from_slice(&kr);
        self.v[layer].extend_from_slice(&vr);
        if layer == 0 {
            self.pending = t;
        }
        Ok((self.heads(&self.k[layer])?, self.heads(&self.v[layer])?))
    }

    /// Marks `t` new tokens as cached, once every layer has appended them.
    pub fn advance(&mut self, t: usize) {
        self.positions.extend(self.pos..self.pos + t);
        self.pos += t;
        self.pending = 0;
        let row = self.row();
        while self.positions.len() > self.window {
            // The oldest page after the sink (or the very first page without one).
            let start = if self.keep_sink { self.page_size } else { 0 };
            let n = self.page_size.min(self.positions.len() - start);
            if let Some(s) = &mut self.slots {
                s.free.extend(s.table.drain(start..start + n));
            } else {
                for l in self.k.iter_mut().chain(self.v.iter_mut()) {
                    l.drain(start * row..(start + n) * row);
                }
            }
            self.positions.drain(start..start + n);
            self.evicted_pages += 1;
        }
    }

    /// Tokens appended to layer 0 since the last `advance`.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Stores the new tokens' K and V rows (token-major, one row of `n_kv_head ×
    /// head_dim` per token, RoPE applied) in host memory: the host route.
    pub fn append_rows(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        if self.slots.is_some() {
            return Err(super::no_host_rows());
        }
        let row = self.row();
        if k.len() != v.len() || !k.len().is_multiple_of(row) {
            candle_core::bail!(
                "K/V rows of {} and {} values are not rows of {row}",
                k.len(),
                v.len()
            );
        }
        self.k[layer].extend_from_slice(k);
        self.v[layer].extend_from_slice(v);
        if layer == 0 {
            self.pending = k.len() / row;
        }
        Ok(())
    }

    /// The keys and values of `layer` read in place, the rows just appended included
    /// (`None` on a device).
    pub fn rows(&self, layer: usize) -> Option<KvRows<'_>> {
        if self.slots.is_some() {
            return None;
        }
        let (k, v) = (self.k.get(layer)?, self.v.get(layer)?);
        Some(KvRows {
            k: RowData::F32(k),
            v: RowData::F32(v),
            layout: RowLayout::TokenMajor {
                len: k.len() / self.row(),
            },
        })
    }

    /// The keys and values of `layer` it holds, as tensors.
    pub fn gather(
        &self,
        layer: usize,
    ) -> candle_core::Result<(candle_core::Tensor, candle_core::Tensor)> {
        if let Some(s) = &self.slots {
            return (s.store).gather_heads(layer, &Tensor::new(s.table.as_slice(), &self.device)?);
        }
        let r = self.rows(layer).ok_or_else(super::no_host_rows)?;
        super::tensors_of(r, self.n_kv_head, self.head_dim)
    }

    /// Whether the rows are in host memory (not in slot tensors).
    pub fn on_host(&self) -> bool {
        self.slots.is_none()
    }

    /// The batched route's step: the kept rows' slots, then a free slot for each new row
    /// (the tensors grow when none is left); `None` on host memory.
    pub fn slot_step(&mut self, lens_after: &[usize]) -> Option<SlotStep> {
        let &[after] = lens_after else {
            return None;
        };
        let t = after.checked_sub(self.pos)?;
        let s = self.slots.as_mut()?;
        // Slots handed to a step that failed before `advance` go back.
        let stale = s.table.split_off(self.positions.len().min(s.table.len()));
        s.free.extend(stale);
        if s.free.len() < t {
            let have = s.store.slots();
            s.store = s.store.grown(have + t).ok()?;
            s.free.extend((have as u32..(have + t) as u32).rev());
        }
        let new = s.free.split_off(s.free.len() - t);
        s.table.extend(new.into_iter().rev());
        self.pending = t;
        Some(SlotStep {
            store: s.store.clone(),
            tables: vec![s.table.clone()],
        })
    }
}

// A single store is a batch of one.
batch_of_one!(Windowed);
