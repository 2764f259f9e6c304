//! Contiguous KV cache: each request reserves room for its maximum length up front,
//! as engines before PagedAttention did.

use super::{KvElem, KvRows, RowBuf, RowLayout, SlotStep, SlotTensors};
use candle_core::{DType, Device, Result, Tensor};

/// One layer's keys and values, each laid out `(n_kv_head, capacity, head_dim)`.
enum Slab {
    /// CPU: plain memory of the element type, written and read in place by decode rows.
    Host(RowBuf, RowBuf),
    /// Accelerators: the same layout as tensors.
    Device(Tensor, Tensor),
}

/// A request's cache laid out as one slab per layer, `(n_kv_head, capacity, head_dim)`.
pub struct Contiguous {
    /// Allocated on first use.
    layers: Vec<Option<Slab>>,
    n_kv_head: usize,
    head_dim: usize,
    capacity: usize,
    len: usize,
    pending: usize,
    /// What each number is stored as (host memory only; a device keeps f32).
    elem: KvElem,
    device: Device,
    /// The batched route's store: every layer's slots `0..capacity` as tensors (then
    /// `layers` stays empty).
    slots: Option<SlotTensors>,
}

impl Contiguous {
    /// Reserves `capacity` token slots per layer (allocated on first use), each number
    /// stored as `elem` in host memory (a device keeps f32).
    pub fn new(
        n_layer: usize,
        n_kv_head: usize,
        head_dim: usize,
        capacity: usize,
        elem: KvElem,
        device: &Device,
    ) -> Self {
        let elem = if device.is_cpu() { elem } else { KvElem::F32 };
        Self {
            layers: (0..n_layer).map(|_| None).collect(),
            n_kv_head,
            head_dim,
            capacity,
            len: 0,
            pending: 0,
            elem,
            device: device.clone(),
            slots: None,
        }
    }

    /// A reservation of `capacity` slots held as slot tensors on `device` (f32 or f16),
    /// allocated now: the batched route's store for one sequence.
    pub fn on_slots(
        n_layer: usize,
        (n_kv_head, head_dim): (usize, usize),
        capacity: usize,
        elem: KvElem,
        device: &Device,
    ) -> Result<Self> {
        let dtype = elem.tensor_dtype().ok_or_else(|| {
            candle_core::Error::Msg(format!("{elem:?} KV is kept on the host route only"))
        })?;
        let store = SlotTensors::zeros(n_layer, capacity, (n_kv_head, head_dim), dtype, device)?;
        let mut c = Self::new(n_layer, n_kv_head, head_dim, capacity, elem, device);
        c.elem = elem;
        c.slots = Some(store);
        Ok(c)
    }

    /// The keys and values of `layer`, this pass's rows included, as f32 tensors
    /// `(n_kv_head, len, head_dim)`.
    pub fn gather(&self, layer: usize) -> Result<(Tensor, Tensor)> {
        let (n, n_kv, d) = (self.len + self.pending, self.n_kv_head, self.head_dim);
        if let Some(store) = &self.slots {
            return store.gather_heads(layer, &Tensor::arange(0u32, n as u32, &self.device)?);
        }
        match self.layers.get(layer) {
            Some(Some(Slab::Device(k, v))) => Ok((
                k.narrow(1, 0, n)?.contiguous()?,
                v.narrow(1, 0, n)?.contiguous()?,
            )),
            Some(Some(Slab::Host(..))) => {
                let r = self.rows(layer).ok_or_else(super::no_host_rows)?;
                super::tensors_of(r, n_kv, d)
            }
            _ => candle_core::bail!("layer {layer} holds nothing yet"),
        }
    }

    /// Whether its rows are in host memory (not on a device, nor in slot tensors).
    pub fn on_host(&self) -> bool {
        self.device.is_cpu() && self.slots.is_none()
    }

    /// The batched route's step: slots `0..` the sequence's length after it, the new
    /// ones counted as pending (`None` without slot tensors, or past the reservation).
    pub fn slot_step(&mut self, lens_after: &[usize]) -> Option<SlotStep> {
        let store = self.slots.clone()?;
        let &after = lens_after.first()?;
        if lens_after.len() != 1 || after > self.capacity || after < self.len {
            return None;
        }
        self.pending = after - self.len;
        let table = (0..after as u32).collect();
        Some(SlotStep {
            store,
            tables: vec![table],
        })
    }

    /// Slots reserved per layer.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes reserved for all layers (K and V), used or not.
    pub fn reserved_bytes(&self) -> usize {
        self.bytes_per_token() * self.capacity
    }

    /// Bytes one token takes in this store (all layers, K and V, as its element type).
    pub fn bytes_per_token(&self) -> usize {
        super::bytes_per_token(self.layers.len(), self.n_kv_head, self.head_dim, self.elem)
    }

    /// Drops tokens past `len`, so a step can be recomputed (used by the uncached check).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Refuses `t` more tokens than the reservation holds.
    fn check_room(&self, t: usize) -> Result<()> {
        if self.len + t > self.capacity {
            candle_core::bail!(
                "KV cache full: {} cached + {t} new > {} reserved slots",
                self.len,
                self.capacity
            );
        }
        Ok(())
    }

    /// `layer`'s slab, allocated on first use.
    fn slab(&mut self, layer: usize) -> Result<&mut Slab> {
        let rows = self.n_kv_head * self.capacity;
        if self.layers[layer].is_none() {
            let shape = (self.n_kv_head, self.capacity, self.head_dim);
            self.layers[layer] = Some(if self.device.is_cpu() {
                let buf = || RowBuf::zeros(self.elem, rows, self.head_dim);
                Slab::Host(buf(), buf())
            } else {
                Slab::Device(
                    Tensor::zeros(shape, DType::F32, &self.device)?,
                    Tensor::zeros(shape, DType::F32, &self.device)?,
                )
            });
        }
        Ok(self.layers[layer].as_mut().expect("allocated above"))
    }
}

impl Contiguous {
    /// Tokens cached: the position the next token takes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores `k`, `v` of shape `(n_kv_head, t, head_dim)` for `layer` after what is
    /// cached and returns all of that layer's keys and values so far, each
    /// `(n_kv_head, len + t, head_dim)`: the tensor kernels' route.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.dim(1)?;
        self.check_room(t)?;
        let (len, cap, d, device) = (self.len, self.capacity, self.head_dim, self.device.clone());
        let n_kv = self.n_kv_head;
        let n = len + t;
        if layer == 0 {
            self.pending = t;
        }
        if let Some(store) = &self.slots {
            let rows = |x: &Tensor| x.transpose(0, 1)?.reshape((t, n_kv * d));
            store.write_run(layer, len, &rows(k)?, &rows(v)?)?;
            return self.gather(layer);
        }
        match self.slab(layer)? {
            Slab::Device(kc, vc) => {
                kc.slice_set(&k.contiguous()?, 1, len)?;
                vc.slice_set(&v.contiguous()?, 1, len)?;
                Ok((kc.narrow(1, 0, n)?, vc.narrow(1, 0, n)?))
            }
            Slab::Host(kc, vc) => {
                // Per KV head: write the new rows after the cached ones, then hand back
                // the head's first `n` rows as stored (what attention over the tensors reads).
                let mut out = Vec::with_capacity(2);
                for (slab, new) in [(kc, k), (vc, v)] {
                    let new = new.flatten_all()?.to_vec1::<f32>()?;
                    let mut all = vec![0.0f32; n_kv * n * d];
                    let mut buf = vec![0.0f32; d];
                    for (h, rows) in new.chunks_exact(t * d).enumerate() {
                        slab.put((h * cap + len) * d, rows);
                        let stored = slab.view();
                        for (j, o) in all[h * n * d..][..n * d].chunks_exact_mut(d).enumerate() {
                            o.copy_from_slice(stored.row((h * cap + j) * d, &mut buf));
                        }
                    }
                    out.push(Tensor::from_vec(all, (n_kv, n, d), &device)?);
                }
                let v = out.pop().expect("two");
                Ok((out.pop().expect("two"), v))
            }
        }
    }

    /// Stores the new tokens' K and V rows (token-major, one row of `n_kv_head ×
    /// head_dim` per token, RoPE applied) in host memory: the host route.
    pub fn append_rows(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        if !self.device.is_cpu() || self.slots.is_some() {
            return Err(super::no_host_rows());
        }
        let (len, cap, d) = (self.len, self.capacity, self.head_dim);
        let width = self.n_kv_head * d;
        if k.len() != v.len() || !k.len().is_multiple_of(width) {
            candle_core::bail!(
                "K/V rows of {} and {} values are not rows of {width}",
                k.len(),
                v.len()
            );
        }
        let t = k.len() / width;
        self.check_room(t)?;
        if layer == 0 {
            self.pending = t;
        }
        let Slab::Host(kc, vc) = self.slab(layer)? else {
            return Err(super::no_host_rows());
        };
        // Token-major in, head-major stored: head h's part of each row goes to its slab.
        for (i, (kr, vr)) in k.chunks_exact(width).zip(v.chunks_exact(width)).enumerate() {
            for h in 0..width / d {
                kc.put((h * cap + len + i) * d, &kr[h * d..][..d]);
                vc.put((h * cap + len + i) * d, &vr[h * d..][..d]);
            }
        }
        Ok(())
    }

    /// The keys and values of `layer` read in place, the rows just appended included
    /// (`None` on a device).
    pub fn rows(&self, layer: usize) -> Option<KvRows<'_>> {
        match self.layers.get(layer)? {
            Some(Slab::Host(k, v)) => Some(KvRows {
                k: k.view(),
                v: v.view(),
                layout: RowLayout::HeadMajor {
                    capacity: self.capacity,
                    len: self.len + self.pending,
                },
            }),
            _ => None,
        }
    }

    /// Marks `t` new tokens as cached, once every layer has appended them.
    pub fn advance(&mut self, t: usize) {
        self.len += t;
        self.pending = 0;
    }

    /// Tokens appended to layer 0 since the last `advance`.
    pub fn pending(&self) -> usize {
        self.pending
    }
}

// A single store is a batch of one.
batch_of_one!(Contiguous);
