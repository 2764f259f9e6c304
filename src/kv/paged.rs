//! The paged KV cache on real tensors: per layer one pool of `n_pages × page_size` slots;
//! each request's keys and values are scattered over its pages and read back through its
//! block table, as PagedAttention does. Which page belongs to whom is the allocator's
//! business ([`PagePool`](super::pool::PagePool), owned by the scheduler); this store holds
//! the bytes.

use super::pool::KvError;
use super::{page_row, BatchKv, KvElem, KvRows, RowBuf, RowLayout, SlotStep, SlotTensors};
use candle_core::{Device, Result, Tensor};

/// Where the pages live.
enum Buffers {
    /// CPU: one buffer of pages per layer of the element type, each page head-major
    /// `(n_kv_head, page_size, head_dim)` ([`page_row`]), written and read in place
    /// (decode attention reads it through the block table, no gather): a KV head's rows
    /// of a page are one run of memory.
    Host { k: Vec<RowBuf>, v: Vec<RowBuf> },
    /// Slot tensors (accelerators, and the batched route anywhere): one token-major
    /// tensor `(slot, n_kv_head × head_dim)` per layer.
    Device(SlotTensors),
}

/// Pages of K and V for every layer.
pub struct PagedKv {
    store: Buffers,
    page_size: usize,
    n_kv_head: usize,
    head_dim: usize,
    device: Device,
}

impl PagedKv {
    /// A pool of `n_pages` pages of `page_size` tokens for a model's KV shape, each
    /// number stored as `elem` in host memory (a device keeps f32 slot tensors).
    pub fn new(
        n_layer: usize,
        n_kv_head: usize,
        head_dim: usize,
        (n_pages, page_size): (usize, usize),
        elem: KvElem,
        device: &Device,
    ) -> std::result::Result<Self, KvError> {
        if !device.is_cpu() {
            let shape = (n_pages, page_size);
            return Self::on_slots(n_layer, (n_kv_head, head_dim), shape, KvElem::F32, device);
        }
        // The allocator's rule, so that every store has a pool that could own it.
        super::pool::check_shape(n_pages, page_size)?;
        let rows = n_pages * page_size * n_kv_head;
        let buf = || RowBuf::zeros(elem, rows, head_dim);
        Ok(Self {
            store: Buffers::Host {
                k: (0..n_layer).map(|_| buf()).collect(),
                v: (0..n_layer).map(|_| buf()).collect(),
            },
            page_size,
            n_kv_head,
            head_dim,
            device: device.clone(),
        })
    }

    /// The same pool held as slot tensors on `device` (f32 or f16): the batched route's
    /// store, which one indexed write and one gather per layer serve for the whole batch.
    pub fn on_slots(
        n_layer: usize,
        (n_kv_head, head_dim): (usize, usize),
        (n_pages, page_size): (usize, usize),
        elem: KvElem,
        device: &Device,
    ) -> std::result::Result<Self, KvError> {
        super::pool::check_shape(n_pages, page_size)?;
        let bad = |e: String| KvError::BadSettings(e);
        let dtype = elem
            .tensor_dtype()
            .ok_or_else(|| bad(format!("{elem:?} KV is kept on the host route only")))?;
        let slots = n_pages * page_size;
        let store = SlotTensors::zeros(n_layer, slots, (n_kv_head, head_dim), dtype, device)
            .map_err(|e| bad(e.to_string()))?;
        Ok(Self {
            store: Buffers::Device(store),
            page_size,
            n_kv_head,
            head_dim,
            device: device.clone(),
        })
    }

    /// The batch view a forward pass writes and reads through: for each sequence, the
    /// slots of all its tokens once the pass has run, of which the first `before` are
    /// already written. The allocator decided them; this store only holds the bytes.
    pub fn batch(&mut self, seqs: Vec<SeqSlots>) -> PagedBatch<'_> {
        PagedBatch { kv: self, seqs }
    }

    /// Copies whole pages `(from, to)`, in order: the allocator's copies on write, made
    /// before the pass writes into the copies.
    pub fn copy_pages(&mut self, copies: &[(u32, u32)]) -> Result<()> {
        for &(from, to) in copies {
            self.copy_page(from, to)?;
        }
        Ok(())
    }

    fn copy_page(&mut self, from: u32, to: u32) -> Result<()> {
        let ps = self.page_size;
        match &mut self.store {
            Buffers::Host { k, v } => {
                let n = ps * self.n_kv_head * self.head_dim;
                for buf in k.iter_mut().chain(v.iter_mut()) {
                    buf.copy_within(from as usize * n..(from as usize + 1) * n, to as usize * n);
                }
            }
            Buffers::Device(store) => {
                store.copy_slots(from as usize * ps, to as usize * ps, ps)?;
            }
        }
        Ok(())
    }

    /// Writes token-major rows `(t, n_kv_head × head_dim)` of K and V into `slots`.
    fn write(&mut self, layer: usize, slots: &[u32], k: &Tensor, v: &Tensor) -> Result<()> {
        let (n_kv, t, d) = k.dims3()?;
        let rows_k = k.transpose(0, 1)?.reshape((t, n_kv * d))?;
        let rows_v = v.transpose(0, 1)?.reshape((t, n_kv * d))?;
        match &mut self.store {
            Buffers::Host { .. } => {
                let kr = rows_k.flatten_all()?.to_vec1::<f32>()?;
                let vr = rows_v.flatten_all()?.to_vec1::<f32>()?;
                self.write_rows(layer, slots, &kr, &vr);
            }
            Buffers::Device(store) => {
                // Each run of consecutive slots (a run never crosses a page) in one go.
                let mut i = 0;
                while i < t {
                    let mut j = i + 1;
                    while j < t && slots[j] == slots[j - 1] + 1 {
                        j += 1;
                    }
                    let at = slots[i] as usize;
                    let (kr, vr) = (rows_k.narrow(0, i, j - i)?, rows_v.narrow(0, i, j - i)?);
                    store.write_run(layer, at, &kr, &vr)?;
                    i = j;
                }
            }
        }
        Ok(())
    }

    /// Host store only: copies token-major rows into their slots.
    fn write_rows(&mut self, layer: usize, slots: &[u32], k: &[f32], v: &[f32]) {
        let Buffers::Host { k: kp, v: vp } = &mut self.store else {
            return;
        };
        let (hn, d, ps) = (self.n_kv_head, self.head_dim, self.page_size);
        for (i, &slot) in slots.iter().enumerate() {
            for h in 0..hn {
                let (at, from) = (page_row(slot, ps, hn, d, h), (i * hn + h) * d);
                kp[layer].put(at, &k[from..from + d]);
                vp[layer].put(at, &v[from..from + d]);
            }
        }
    }

    /// K and V of `slots` as `(n_kv_head, len, head_dim)` tensors (prefill attention and
    /// the probe want them whole).
    fn gather(&self, layer: usize, slots: &[u32]) -> Result<(Tensor, Tensor)> {
        let (hn, d) = (self.n_kv_head, self.head_dim);
        let l = slots.len();
        match &self.store {
            Buffers::Host { k, v } => {
                // One pass: each slot's row split by KV head straight into the result.
                let split = |pool: &RowBuf| {
                    let (stored, mut buf) = (pool.view(), vec![0.0f32; d]);
                    let mut out = vec![0.0f32; hn * l * d];
                    for (pos, &slot) in slots.iter().enumerate() {
                        for h in 0..hn {
                            let at = page_row(slot, self.page_size, hn, d, h);
                            let row = stored.row(at, &mut buf);
                            out[(h * l + pos) * d..][..d].copy_from_slice(row);
                        }
                    }
                    Tensor::from_vec(out, (hn, l, d), &self.device)
                };
                Ok((split(&k[layer])?, split(&v[layer])?))
            }
            Buffers::Device(store) => store.gather_heads(layer, &Tensor::new(slots, &self.device)?),
        }
    }
}

/// Where one sequence of a batch is on the pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqSlots {
    /// Tokens already written before this pass.
    pub before: usize,
    /// The slot of every token once the pass has run, in order.
    pub all: Vec<u32>,
}

impl SeqSlots {
    /// The slots this pass writes.
    fn new_slots(&self) -> &[u32] {
        &self.all[self.before..]
    }
}

/// A planned batch: where each sequence's tokens are.
pub struct PagedBatch<'a> {
    kv: &'a mut PagedKv,
    seqs: Vec<SeqSlots>,
}

impl BatchKv for PagedBatch<'_> {
    fn len(&self, s: usize) -> usize {
        self.seqs[s].before
    }

    fn append(
        &mut self,
        s: usize,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let seq = &self.seqs[s];
        self.kv.write(layer, seq.new_slots(), k, v)?;
        self.kv.gather(layer, &seq.all)
    }

    fn append_rows(&mut self, s: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let slots = self.seqs[s].new_slots();
        let width = self.kv.n_kv_head * self.kv.head_dim;
        if !matches!(self.kv.store, Buffers::Host { .. }) {
            return Err(super::no_host_rows());
        }
        if k.len() != slots.len() * width || v.len() != k.len() {
            candle_core::bail!(
                "K/V rows of {} and {} values for {} slots of {width}",
                k.len(),
                v.len(),
                slots.len()
            );
        }
        self.kv.write_rows(layer, slots, k, v);
        Ok(())
    }

    fn rows(&self, s: usize, layer: usize) -> Option<KvRows<'_>> {
        match &self.kv.store {
            Buffers::Host { k, v } => Some(KvRows {
                k: k[layer].view(),
                v: v[layer].view(),
                layout: RowLayout::Slots {
                    slots: &self.seqs[s].all,
                    page_size: self.kv.page_size,
                },
            }),
            Buffers::Device(_) => None,
        }
    }

    fn on_host(&self) -> bool {
        matches!(self.kv.store, Buffers::Host { .. })
    }

    fn gather(&self, s: usize, layer: usize) -> Result<(Tensor, Tensor)> {
        self.kv.gather(layer, &self.seqs[s].all)
    }

    fn slot_step(&mut self, lens_after: &[usize]) -> Option<SlotStep> {
        let Buffers::Device(store) = &self.kv.store else {
            return None;
        };
        // The allocator has already given every sequence its slots for this step.
        let fits = lens_after.len() == self.seqs.len()
            && self
                .seqs
                .iter()
                .zip(lens_after)
                .all(|(s, &n)| s.all.len() == n);
        fits.then(|| SlotStep {
            store: store.clone(),
            tables: self.seqs.iter().map(|s| s.all.clone()).collect(),
        })
    }

    fn advance(&mut self) {
        // The allocator recorded the tokens when the scheduler planned the batch.
    }
}
