//! Contiguous KV cache: each request reserves room for its maximum length up front,
//! as engines before PagedAttention did.

use super::KvStore;
use candle_core::{DType, Device, Result, Tensor};

/// A request's cache laid out as one slab per layer, `(n_kv_head, capacity, head_dim)`.
pub struct Contiguous {
    layers: Vec<Option<(Tensor, Tensor)>>,
    n_kv_head: usize,
    head_dim: usize,
    capacity: usize,
    len: usize,
    pending: usize,
    device: Device,
}

impl Contiguous {
    /// Reserves `capacity` token slots per layer (allocated on first use).
    pub fn new(
        n_layer: usize,
        n_kv_head: usize,
        head_dim: usize,
        capacity: usize,
        device: &Device,
    ) -> Self {
        Self {
            layers: (0..n_layer).map(|_| None).collect(),
            n_kv_head,
            head_dim,
            capacity,
            len: 0,
            pending: 0,
            device: device.clone(),
        }
    }

    /// Slots reserved per layer.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes reserved for all layers (K and V), used or not.
    pub fn reserved_bytes(&self) -> usize {
        self.bytes_per_token() * self.capacity
    }

    /// Bytes one token takes in this store (all layers, K and V, f32).
    pub fn bytes_per_token(&self) -> usize {
        self.layers.len() * 2 * self.n_kv_head * self.head_dim * 4
    }

    /// Forgets every cached token, keeping the reservation.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Drops tokens past `len`, so a step can be recomputed (used by the uncached check).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl KvStore for Contiguous {
    fn len(&self) -> usize {
        self.len
    }

    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.dim(1)?;
        if self.len + t > self.capacity {
            candle_core::bail!(
                "KV cache full: {} cached + {t} new > {} reserved slots",
                self.len,
                self.capacity
            );
        }
        let slot = &mut self.layers[layer];
        if slot.is_none() {
            let shape = (self.n_kv_head, self.capacity, self.head_dim);
            *slot = Some((
                Tensor::zeros(shape, DType::F32, &self.device)?,
                Tensor::zeros(shape, DType::F32, &self.device)?,
            ));
        }
        let (kc, vc) = slot.as_ref().expect("allocated above");
        kc.slice_set(&k.contiguous()?, 1, self.len)?;
        vc.slice_set(&v.contiguous()?, 1, self.len)?;
        let n = self.len + t;
        if layer == 0 {
            self.pending = t;
        }
        Ok((kc.narrow(1, 0, n)?, vc.narrow(1, 0, n)?))
    }

    fn advance(&mut self, t: usize) {
        self.len += t;
        self.pending = 0;
    }

    fn pending(&self) -> usize {
        self.pending
    }
}
