//! The paged KV cache on real tensors: per layer one pool of `n_pages × page_size` slots;
//! each request's keys and values are scattered over its pages and read back through its
//! block table, as PagedAttention does.

use super::pool::{KvError, PagePool, PoolStats, ReqId};
use super::{BatchKv, KvStore};
use candle_core::{DType, Device, Result, Tensor};

/// Pages of K and V for every layer, and the allocator that hands them out.
pub struct PagedKv {
    pub pool: PagePool,
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    n_kv_head: usize,
    head_dim: usize,
    device: Device,
}

impl PagedKv {
    /// A pool of `n_pages` pages of `page_size` tokens for a model's KV shape.
    pub fn new(
        n_layer: usize,
        n_kv_head: usize,
        head_dim: usize,
        n_pages: usize,
        page_size: usize,
        device: &Device,
    ) -> std::result::Result<Self, KvError> {
        let pool = PagePool::new(n_pages, page_size)?;
        let shape = (n_pages * page_size, n_kv_head * head_dim);
        let zeros = || {
            Tensor::zeros(shape, DType::F32, device)
                .map_err(|e| KvError::BadSettings(e.to_string()))
        };
        let mut k = Vec::with_capacity(n_layer);
        let mut v = Vec::with_capacity(n_layer);
        for _ in 0..n_layer {
            k.push(zeros()?);
            v.push(zeros()?);
        }
        Ok(Self {
            pool,
            k,
            v,
            n_kv_head,
            head_dim,
            device: device.clone(),
        })
    }

    /// Bytes one token takes (all layers, K and V, f32).
    pub fn bytes_per_token(&self) -> usize {
        self.k.len() * 2 * self.n_kv_head * self.head_dim * 4
    }

    /// Allocator statistics.
    pub fn stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Plans appending `tokens` to each request (all or nothing) and returns the batch
    /// view the forward pass writes through.
    pub fn batch(
        &mut self,
        work: &[(ReqId, &[u32])],
    ) -> std::result::Result<PagedBatch<'_>, KvError> {
        let mut need = 0;
        for (req, toks) in work {
            need += self.pool.pages_needed(*req, toks.len())?;
        }
        if need > self.pool.free_pages() {
            return Err(KvError::OutOfPages {
                need,
                free: self.pool.free_pages(),
            });
        }
        let ps = self.pool.page_size();
        let mut seqs = Vec::with_capacity(work.len());
        for (req, toks) in work {
            let before = self.pool.table(*req).map(|t| t.tokens.len()).unwrap_or(0);
            let plan = self.pool.append(*req, toks)?;
            for &(from, to) in &plan.copies {
                self.copy_page(from, to)
                    .map_err(|e| KvError::BadSettings(e.to_string()))?;
            }
            let table = self.pool.table(*req).expect("appended");
            let all: Vec<u32> = (0..table.tokens.len())
                .map(|pos| table.pages[pos / ps] * ps as u32 + (pos % ps) as u32)
                .collect();
            seqs.push(Seq {
                before,
                new_slots: plan.slots,
                all_slots: all,
            });
        }
        Ok(PagedBatch { kv: self, seqs })
    }

    fn copy_page(&mut self, from: u32, to: u32) -> Result<()> {
        let ps = self.pool.page_size();
        for t in self.k.iter().chain(self.v.iter()) {
            let src = t.narrow(0, from as usize * ps, ps)?.contiguous()?;
            t.slice_set(&src, 0, to as usize * ps)?;
        }
        Ok(())
    }

    /// The K/V of `req` for `layer`, each `(n_kv_head, len, head_dim)`, read through its block table.
    pub fn read(&self, req: ReqId, layer: usize) -> Result<(Tensor, Tensor)> {
        let ps = self.pool.page_size();
        let t = self
            .pool
            .table(req)
            .ok_or_else(|| candle_core::Error::Msg(format!("request {req} has no pages")))?;
        let slots: Vec<u32> = (0..t.tokens.len())
            .map(|pos| t.pages[pos / ps] * ps as u32 + (pos % ps) as u32)
            .collect();
        self.gather(layer, &slots)
    }

    fn gather(&self, layer: usize, slots: &[u32]) -> Result<(Tensor, Tensor)> {
        if self.device.is_cpu() {
            return Ok((
                self.gather_host(&self.k[layer], slots)?,
                self.gather_host(&self.v[layer], slots)?,
            ));
        }
        let idx = Tensor::new(slots, &self.device)?;
        let l = slots.len();
        let shape = (l, self.n_kv_head, self.head_dim);
        let k = self.k[layer]
            .index_select(&idx, 0)?
            .reshape(shape)?
            .transpose(0, 1)?
            .contiguous()?;
        let v = self.v[layer]
            .index_select(&idx, 0)?
            .reshape(shape)?
            .transpose(0, 1)?
            .contiguous()?;
        Ok((k, v))
    }

    /// The CPU gather in one pass: each slot's row is split by KV head straight into the
    /// `(n_kv_head, len, head_dim)` result, instead of a gather, a transpose and a copy.
    fn gather_host(&self, pool: &Tensor, slots: &[u32]) -> Result<Tensor> {
        let (hn, d) = (self.n_kv_head, self.head_dim);
        let l = slots.len();
        let (storage, layout) = pool.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*storage else {
            candle_core::bail!("gather_host needs a CPU tensor")
        };
        if !layout.is_contiguous() {
            candle_core::bail!("the page pool should be one contiguous block");
        }
        let all = cpu.as_slice::<f32>()?;
        let rows = &all[layout.start_offset()..];
        let mut out = vec![0.0f32; hn * l * d];
        for (pos, &slot) in slots.iter().enumerate() {
            let row = &rows[slot as usize * hn * d..][..hn * d];
            for h in 0..hn {
                out[(h * l + pos) * d..][..d].copy_from_slice(&row[h * d..][..d]);
            }
        }
        drop(storage);
        Tensor::from_vec(out, (hn, l, d), &self.device)
    }
}

struct Seq {
    before: usize,
    new_slots: Vec<u32>,
    all_slots: Vec<u32>,
}

/// A planned batch: where each sequence's new tokens go.
pub struct PagedBatch<'a> {
    kv: &'a mut PagedKv,
    seqs: Vec<Seq>,
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
        let (n_kv, t, d) = k.dims3()?;
        let rows_k = k.transpose(0, 1)?.reshape((t, n_kv * d))?;
        let rows_v = v.transpose(0, 1)?.reshape((t, n_kv * d))?;
        // Write each run of consecutive slots (a run never crosses a page) in one go.
        let mut i = 0;
        while i < t {
            let mut j = i + 1;
            while j < t && seq.new_slots[j] == seq.new_slots[j - 1] + 1 {
                j += 1;
            }
            let at = seq.new_slots[i] as usize;
            self.kv.k[layer].slice_set(&rows_k.narrow(0, i, j - i)?.contiguous()?, 0, at)?;
            self.kv.v[layer].slice_set(&rows_v.narrow(0, i, j - i)?.contiguous()?, 0, at)?;
            i = j;
        }
        self.kv.gather(layer, &seq.all_slots)
    }

    fn advance(&mut self) {
        // The allocator recorded the tokens when the batch was planned.
    }
}

/// One request's paged cache as a [`KvStore`] for a single forward call.
pub struct PagedSeq<'a>(pub PagedBatch<'a>);

impl KvStore for PagedSeq<'_> {
    fn len(&self) -> usize {
        self.0.seqs[0].before
    }
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        BatchKv::append(&mut self.0, 0, layer, k, v)
    }
    fn advance(&mut self, _t: usize) {}
    fn pending(&self) -> usize {
        self.0.seqs[0].new_slots.len()
    }
}
