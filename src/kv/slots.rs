//! The KV cache as device tensors: per layer one K and one V tensor over every slot,
//! token-major `(slots, n_kv_head × head_dim)`. Pages are runs of slots; a contiguous
//! reservation is one longer run. The batched attention route writes a whole step's new
//! rows with one indexed write per layer and reads any set of sequences back with one
//! gather, which is what PagedAttention's block table means on a device.

use candle_core::{DType, Device, Result, Tensor};

/// K and V of every layer over `slots` token slots, as tensors of one element type.
#[derive(Clone)]
pub struct SlotTensors {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    n_kv_head: usize,
    head_dim: usize,
}

/// What a store lends the batched route for one step: its tensors and, for each sequence
/// of the batch, the slot of every key it will hold once the step has run, oldest first
/// and the step's new rows last (one per position, except in a window that has evicted
/// some).
pub struct SlotStep {
    pub store: SlotTensors,
    pub tables: Vec<Vec<u32>>,
}

impl SlotTensors {
    /// Zeroed tensors for `n_layer` layers of `slots` slots each, stored as `dtype`
    /// (f32 or f16: the element types a device tensor holds without a scale).
    pub fn zeros(
        n_layer: usize,
        slots: usize,
        (n_kv_head, head_dim): (usize, usize),
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        if !matches!(dtype, DType::F32 | DType::F16) {
            candle_core::bail!("KV slot tensors hold f32 or f16, not {dtype:?}");
        }
        let shape = (slots, n_kv_head * head_dim);
        let (mut k, mut v) = (Vec::with_capacity(n_layer), Vec::with_capacity(n_layer));
        for _ in 0..n_layer {
            k.push(Tensor::zeros(shape, dtype, device)?);
            v.push(Tensor::zeros(shape, dtype, device)?);
        }
        Ok(Self {
            k,
            v,
            n_kv_head,
            head_dim,
        })
    }

    /// Token slots per layer.
    pub fn slots(&self) -> usize {
        self.k.first().map_or(0, |t| t.dim(0).unwrap_or(0))
    }

    /// The element type the tensors hold.
    pub fn dtype(&self) -> DType {
        self.k.first().map_or(DType::F32, |t| t.dtype())
    }

    /// Numbers in one slot's row: KV heads × head size.
    pub fn width(&self) -> usize {
        self.n_kv_head * self.head_dim
    }

    /// Writes `k_rows`, `v_rows` (`(n, width)`, any float type) into slots `at..at + n`.
    pub fn write_run(
        &self,
        layer: usize,
        at: usize,
        k_rows: &Tensor,
        v_rows: &Tensor,
    ) -> Result<()> {
        let dt = self.dtype();
        self.k[layer].slice_set(&k_rows.to_dtype(dt)?.contiguous()?, 0, at)?;
        self.v[layer].slice_set(&v_rows.to_dtype(dt)?.contiguous()?, 0, at)
    }

    /// Writes row `i` of `k_rows`, `v_rows` (`(n, width)`) into the slot `index[i][..]`
    /// names: one indexed write per tensor, whatever slots the rows go to. `index` is
    /// `(n, width)`, each row its slot repeated (the shape candle's scatter asks for).
    pub fn scatter(
        &self,
        layer: usize,
        index: &Tensor,
        k_rows: &Tensor,
        v_rows: &Tensor,
    ) -> Result<()> {
        let dt = self.dtype();
        self.k[layer].scatter_set(index, &k_rows.to_dtype(dt)?.contiguous()?, 0)?;
        self.v[layer].scatter_set(index, &v_rows.to_dtype(dt)?.contiguous()?, 0)
    }

    /// The rows of the slots `index` names (`(n,)`, u32), as f32 `(n, width)` each.
    pub fn gather(&self, layer: usize, index: &Tensor) -> Result<(Tensor, Tensor)> {
        let pick = |t: &Tensor| t.index_select(index, 0)?.to_dtype(DType::F32);
        Ok((pick(&self.k[layer])?, pick(&self.v[layer])?))
    }

    /// The same tensors with room for `slots` slots, the rows held so far kept in place.
    pub fn grown(&self, slots: usize) -> Result<Self> {
        let have = self.slots();
        if slots <= have {
            return Ok(self.clone());
        }
        let grow = |t: &Tensor| {
            let more = Tensor::zeros((slots - have, self.width()), t.dtype(), t.device())?;
            Tensor::cat(&[t, &more], 0)
        };
        Ok(Self {
            k: self.k.iter().map(grow).collect::<Result<_>>()?,
            v: self.v.iter().map(grow).collect::<Result<_>>()?,
            ..*self
        })
    }

    /// The rows of the slots `index` names, laid out by KV head as attention and the probe
    /// read them: f32 `(n_kv_head, n, head_dim)` each.
    pub fn gather_heads(&self, layer: usize, index: &Tensor) -> Result<(Tensor, Tensor)> {
        let (n, hn, d) = (index.dim(0)?, self.n_kv_head, self.head_dim);
        let (k, v) = self.gather(layer, index)?;
        let heads = |t: Tensor| t.reshape((n, hn, d))?.transpose(0, 1)?.contiguous();
        Ok((heads(k)?, heads(v)?))
    }

    /// Copies `n` slots from `from..` to `to..` in every layer (a page copied on write).
    pub fn copy_slots(&self, from: usize, to: usize, n: usize) -> Result<()> {
        for t in self.k.iter().chain(&self.v) {
            // A copy of its own: candle refuses to set a tensor from its own storage.
            let src = t.narrow(0, from, n)?.copy()?;
            t.slice_set(&src, 0, to)?;
        }
        Ok(())
    }

    /// Bytes the tensors hold, all layers, K and V.
    pub fn bytes(&self) -> usize {
        2 * self.k.len() * self.slots() * self.width() * self.dtype().size_in_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scatter_writes_each_row_into_its_slot_and_a_gather_reads_them_back() -> Result<()> {
        let dev = Device::Cpu;
        for dtype in [DType::F32, DType::F16] {
            let s = SlotTensors::zeros(2, 8, (1, 2), dtype, &dev)?;
            let rows = Tensor::new(&[[1f32, 2.], [3., 4.]], &dev)?;
            let slots = [5u32, 2];
            let index = Tensor::new(&[[5u32, 5], [2, 2]], &dev)?;
            s.scatter(1, &index, &rows, &(&rows * 10.)?)?;
            let (k, v) = s.gather(1, &Tensor::new(&slots, &dev)?)?;
            assert_eq!(k.to_vec2::<f32>()?, vec![vec![1., 2.], vec![3., 4.]]);
            assert_eq!(v.to_vec2::<f32>()?, vec![vec![10., 20.], vec![30., 40.]]);
            // Layer 0 and every other slot are untouched.
            let (k0, _) = s.gather(0, &Tensor::new(&[5u32], &dev)?)?;
            assert_eq!(k0.to_vec2::<f32>()?, vec![vec![0., 0.]]);
            s.copy_slots(4, 0, 2)?;
            let (k, _) = s.gather(1, &Tensor::new(&[0u32, 1], &dev)?)?;
            assert_eq!(k.to_vec2::<f32>()?, vec![vec![0., 0.], vec![1., 2.]]);
        }
        assert!(SlotTensors::zeros(1, 4, (1, 2), DType::U8, &dev).is_err());
        Ok(())
    }
}
