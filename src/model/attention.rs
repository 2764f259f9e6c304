//! Scaled dot-product attention with grouped KV heads, written out so each piece
//! (scores, mask, softmax, weighted sum) can be looked at.
//!
//! [`attend`] is the one entry point of a layer: it decides, sequence by sequence, which
//! route runs — the tensor kernels ([`naive`] or [`tiled`]), or, on the CPU, rows attended
//! one at a time on the host: read in place from the cache (through the page table, as
//! PagedAttention does, or from a contiguous reservation) or from a copy of it. A prompt's
//! row there reads the keys up to its own position, which is the causal mask. The math is
//! the same on every route; only where the bytes sit differs.

use super::flash::{self, IoCount, Tiles};
use super::rope::Rope;
use super::traffic::Traffic;
use crate::kernels::ROWS_AHEAD;
use crate::kv::{BatchKv, KvRows, RowData, RowLayout};
use candle_core::{Result, Tensor};
use rayon::prelude::*;
use std::ops::Range;

/// Which attention kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnKernel {
    /// The textbook algorithm, whose traffic the panes count: the full score matrix in
    /// memory (candle tensors). On the CPU the rows run on the host instead, each over its
    /// keys with the same math, and the matrix is never stored.
    #[default]
    Naive,
    /// FlashAttention-style tiles, with this much on-chip memory.
    Tiled { sram_bytes: usize },
}

impl AttnKernel {
    /// The kernel's name, as the flag spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::Tiled { .. } => "tiled",
        }
    }
}

/// What one attention call produced.
#[derive(Debug, Clone)]
pub struct AttnOut {
    /// `(n_head, t, head_dim)`: each head's weighted sum of values.
    pub out: Tensor,
    /// Bytes this call moved to and from main memory, all heads (FlashAttention IO model).
    pub io: IoCount,
    /// Tiled kernel only: head 0's (query tile, key tile) pairs in processing order.
    pub schedule: Vec<(u32, u32)>,
}

/// Where one sequence's rows sit in a batched layer: rows `off..off + len` of the batch,
/// at positions `pos0..pos0 + len` of the sequence.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub off: usize,
    pub len: usize,
    pub pos0: usize,
}

/// How one layer's attention runs.
pub struct Setup<'a> {
    pub layer: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub kernel: AttnKernel,
    /// What the cache stores each number as: the KV bytes a step reads and writes.
    pub kv_elem: crate::kv::KvElem,
    /// Candle tensor ops only (the reference path the tests compare against).
    pub reference: bool,
    pub rope: &'a Rope,
}

/// Sequence 0's attention as the probe sees it, recomputed from its queries and its cache
/// after the math: queries before and after RoPE, the new keys and values, each head's
/// output, and the scores and weights of its newest rows.
#[derive(Debug, Clone)]
pub struct Observed {
    pub q_pre: Tensor,
    /// The new keys before RoPE, `(n_kv_head, rows, d)`.
    pub k_pre: Tensor,
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    /// `(n_head, t, head_dim)`: each head's weighted sum of values.
    pub out: Tensor,
    /// `(n_head, r, kv_len)`: Q·Kᵀ/√d before the mask, for the newest `r` query rows.
    pub scores: Tensor,
    /// `(n_head, r, kv_len)`: causal softmax weights of the same rows.
    pub weights: Tensor,
    /// The tiled kernel only: head 0's (query tile, key tile) pairs in processing order.
    pub schedule: Vec<(u32, u32)>,
}

/// A layer's attention over a whole batch.
pub struct Attended {
    /// `(rows, n_head × head_dim)`, in the batch's row order.
    pub out: Tensor,
    /// Bytes moved to and from main memory, all sequences and heads.
    pub io: IoCount,
    /// The cache bytes read and written, the score traffic and the FLOPs, all sequences.
    pub traffic: Traffic,
    /// The tiled kernel only: sequence 0's head 0 tile order.
    pub schedule: Vec<(u32, u32)>,
}

/// Attention of every sequence of a batch for one layer. `q`, `k`, `v` are the
/// projections of all rows, `(rows, heads × head_dim)`; each sequence appends its new keys
/// and values to its cache in `kv` and attends over everything cached. What the probe
/// sees is recomputed after, by [`observe`]: no route computes anything for it.
///
/// The route is chosen once: on the CPU with the naive kernel, over rows in host memory,
/// every row runs on the host, reading the cache in place; otherwise every sequence runs
/// on the tensor kernels.
pub fn attend(
    s: &Setup,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    spans: &[Span],
    kv: &mut dyn BatchKv,
) -> Result<Attended> {
    // Rows on the CPU skip the tensor plumbing: at one row the fixed cost of a tensor op
    // is larger than the arithmetic, and a batch pays it per request per layer; a prompt's
    // rows each attend like a decode row over the keys up to their own.
    if !s.reference && s.kernel == AttnKernel::Naive && q.device().is_cpu() && kv.on_host() {
        attend_on_host(s, (q, k, v), spans, kv)
    } else {
        attend_on_tensors(s, (q, k, v), spans, kv)
    }
}

/// Every sequence on the host: its new keys and values go into its store as rows, and
/// each query row reads the rows the store lends, in place.
fn attend_on_host(
    s: &Setup,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    spans: &[Span],
    kv: &mut dyn BatchKv,
) -> Result<Attended> {
    let h = HostQkv::new(q, k, v)?;
    // The traffic of the naive kernel, whose math this is.
    let (io, traffic) = naive_counts(s, spans);
    for (i, &p) in spans.iter().enumerate() {
        let (k_rows, v_rows) = h.new_kv(s, p);
        kv.append_rows(i, s.layer, &k_rows, &v_rows)?;
    }
    let rows = spans.last().map_or(0, |p| p.off + p.len);
    let mut out = vec![0.0; rows * h.q_width];
    host_rows(s, &h, kv, spans, &mut out)?;
    Ok(Attended {
        out: Tensor::from_vec(out, (rows, h.q_width), q.device())?,
        io,
        traffic,
        schedule: Vec::new(),
    })
}

/// Every sequence on the tensor kernels: its store takes the new keys and values as
/// tensors and hands back all of them, which naive or tiled attention reads.
fn attend_on_tensors(
    s: &Setup,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    spans: &[Span],
    kv: &mut dyn BatchKv,
) -> Result<Attended> {
    let width = s.n_head * s.head_dim;
    let shape = (s.n_head, s.n_kv_head, s.head_dim, s.kv_elem);
    let (mut io, mut traffic) = (IoCount::default(), Traffic::default());
    let (mut schedule, mut outs) = (Vec::new(), Vec::with_capacity(spans.len()));
    for (i, &p) in spans.iter().enumerate() {
        let att = on_tensors(s, (q, k, v), p, i, kv)?;
        io.add(att.io);
        let kv_len = p.pos0 + p.len;
        traffic.add(Traffic::attention(p.len, kv_len, shape, att.io.total()));
        outs.push(att.out.transpose(0, 1)?.reshape((p.len, width))?);
        if i == 0 {
            schedule = att.schedule;
        }
    }
    Ok(Attended {
        out: Tensor::cat(&outs, 0)?,
        io,
        traffic,
        schedule,
    })
}

/// What the naive kernel's math moves and computes for every sequence of `spans`: the
/// routes that run that math report it alike.
pub(crate) fn naive_counts(s: &Setup, spans: &[Span]) -> (IoCount, Traffic) {
    let shape = (s.n_head, s.n_kv_head, s.head_dim, s.kv_elem);
    let (mut io, mut traffic) = (IoCount::default(), Traffic::default());
    for p in spans {
        let kv_len = p.pos0 + p.len;
        let rows_io = naive_chunks_io(p.len, kv_len, s.n_head, s.head_dim);
        io.add(rows_io);
        traffic.add(Traffic::attention(p.len, kv_len, shape, rows_io.total()));
    }
    (io, traffic)
}

/// What [`naive`] reports moving for `t` query rows over `kv_len` keys: its blocks of
/// query rows, each the whole score matrix of its rows.
fn naive_chunks_io(t: usize, kv_len: usize, n_head: usize, d: usize) -> IoCount {
    let chunk = naive_rows_per_block(n_head, kv_len);
    let mut io = IoCount::default();
    for r0 in (0..t).step_by(chunk) {
        io.add(flash::naive_io(chunk.min(t - r0), kv_len, d).times(n_head));
    }
    io
}

/// One sequence on the tensor kernels: RoPE, append to the cache, naive or tiled attention.
fn on_tensors(
    s: &Setup,
    qkv: (&Tensor, &Tensor, &Tensor),
    p: Span,
    seq: usize,
    kv: &mut dyn BatchKv,
) -> Result<AttnOut> {
    let (_, _, q, k, v) = heads(s, qkv, p)?;
    let (k_all, v_all) = kv.append(seq, s.layer, &k, &v)?;
    match s.kernel {
        AttnKernel::Naive => naive(&q, &k_all, &v_all, p.pos0),
        AttnKernel::Tiled { sram_bytes } => {
            let tiles = Tiles::from_sram(sram_bytes, s.head_dim)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
            tiled(&q, &k_all, &v_all, p.pos0, tiles)
        }
    }
}

/// Span `p` of the batch's projections as heads, `(heads, rows, d)`: the queries and the
/// keys before RoPE, both after it, the values.
fn heads(
    s: &Setup,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    p: Span,
) -> Result<(Tensor, Tensor, Tensor, Tensor, Tensor)> {
    let split = |a: &Tensor, heads: usize| -> Result<Tensor> {
        a.narrow(0, p.off, p.len)?
            .reshape((p.len, heads, s.head_dim))?
            .transpose(0, 1)?
            .contiguous()
    };
    let q_pre = split(q, s.n_head)?;
    let k_pre = split(k, s.n_kv_head)?;
    let q = s.rope.apply(&q_pre, p.pos0)?;
    let k = s.rope.apply(&k_pre, p.pos0)?;
    Ok((q_pre, k_pre, q, k, split(v, s.n_kv_head)?))
}

/// What the probe shows of sequence 0 (span `p`), recomputed after the layer's math from
/// its projections and its cache, whatever route ran: the naive kernel's output for every
/// row, the scores and weights of the newest `rows` rows, and the tile order the tiled
/// kernel reported (`schedule`). Looking never changes what the model computed.
pub fn observe(
    s: &Setup,
    qkv: (&Tensor, &Tensor, &Tensor),
    p: Span,
    kv: &dyn BatchKv,
    rows: usize,
    schedule: Vec<(u32, u32)>,
) -> Result<Observed> {
    let (q_pre, k_pre, q, k, v) = heads(s, qkv, p)?;
    let (k_all, v_all) = kv.gather(0, s.layer)?;
    let (k_all, v_all) = (k_all.to_device(q.device())?, v_all.to_device(q.device())?);
    let out = naive(&q, &k_all, &v_all, p.pos0)?.out;
    let (scores, weights) = newest_scores(&q, &k_all, p.pos0, rows)?;
    Ok(Observed {
        q_pre,
        k_pre,
        q,
        k,
        v,
        out,
        scores,
        weights,
        schedule,
    })
}

/// The scores Q·Kᵀ/√d and the causal softmax weights of the newest `rows` of `t` query
/// rows (`q` is `(n_head, t, d)` at positions `pos0..`, `k` is `(n_kv_head, kv_len, d)`):
/// `(n_head, r, kv_len)` each, `r = min(rows, t)`.
pub fn newest_scores(q: &Tensor, k: &Tensor, pos0: usize, rows: usize) -> Result<(Tensor, Tensor)> {
    let (n_head, t, d) = q.dims3()?;
    let (n_kv, kv_len, _) = k.dims3()?;
    let r = rows.min(t);
    let first = pos0 + t - r;
    let qg = q
        .narrow(1, t - r, r)?
        .contiguous()?
        .reshape((n_kv, n_head / n_kv * r, d))?;
    let scores =
        (qg.matmul(&k.contiguous()?.t()?)? / (d as f64).sqrt())?.reshape((n_head, r, kv_len))?;
    let masked = scores.broadcast_add(&causal_mask(r, first, kv_len, q.device())?)?;
    Ok((scores, candle_nn::ops::softmax_last_dim(&masked)?))
}

/// The batch's q, k and v as plain rows, for the rows attended on the host.
struct HostQkv {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    q_width: usize,
    kv_width: usize,
}

impl HostQkv {
    fn new(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Self> {
        Ok(Self {
            q_width: q.dim(1)?,
            kv_width: k.dim(1)?,
            q: q.flatten_all()?.to_vec1()?,
            k: k.flatten_all()?.to_vec1()?,
            v: v.flatten_all()?.to_vec1()?,
        })
    }
    /// Span `p`'s new keys, each rotated to its position, and values, token-major.
    fn new_kv(&self, s: &Setup, p: Span) -> (Vec<f32>, Vec<f32>) {
        let mut k = self.k[p.off * self.kv_width..][..p.len * self.kv_width].to_vec();
        for (r, row) in k.chunks_exact_mut(self.kv_width).enumerate() {
            s.rope.rotate(row, p.pos0 + r);
        }
        let v = self.v[p.off * self.kv_width..][..p.len * self.kv_width].to_vec();
        (k, v)
    }

    /// Span `p`'s queries, each rotated to its position, token-major.
    fn queries(&self, s: &Setup, p: Span) -> Vec<f32> {
        let mut q = self.q[p.off * self.q_width..][..p.len * self.q_width].to_vec();
        for (r, row) in q.chunks_exact_mut(self.q_width).enumerate() {
            s.rope.rotate(row, p.pos0 + r);
        }
        q
    }
}

/// The attention of the rows on the host, one request and KV head per task (ORCA runs
/// attention per request; they are independent, so they spread over the cores), written
/// into the batch output. A prompt's row `r` reads the rows up to its own only: the causal
/// mask, as a shorter read.
fn host_rows(
    s: &Setup,
    h: &HostQkv,
    kv: &dyn BatchKv,
    spans: &[Span],
    out: &mut [f32],
) -> Result<()> {
    let width = h.q_width;
    let decoded = decoded_prompts(s, kv, spans)?;
    let views: Vec<(Span, KvRows, Vec<f32>)> = spans
        .iter()
        .zip(&decoded)
        .enumerate()
        .map(|(i, (&p, dec))| {
            let rows = match dec {
                Some((k, v)) => Some(KvRows {
                    k: RowData::F32(k),
                    v: RowData::F32(v),
                    layout: crate::kv::RowLayout::TokenMajor {
                        len: k.len() / (s.n_kv_head * s.head_dim),
                    },
                }),
                None => kv.rows(i, s.layer),
            };
            rows.map(|r| (p, r, h.queries(s, p)))
                .ok_or_else(crate::kv::no_host_rows)
        })
        .collect::<Result<_>>()?;
    // One task per row and KV head: a group's query heads share its cached rows, so
    // that is the finest split that reads each row once, and it keeps both cores busy
    // even for a single request.
    let group_width = width / s.n_kv_head;
    let tasks: Vec<(usize, usize, usize)> = views
        .iter()
        .enumerate()
        .flat_map(|(i, (p, _, _))| (0..p.len).map(move |r| (i, r)))
        .flat_map(|(i, r)| (0..s.n_kv_head).map(move |g| (i, r, g)))
        .collect();
    let results: Vec<(usize, Vec<f32>)> = tasks
        .par_iter()
        .map(|&(i, r, g)| {
            let (p, rows, q) = &views[i];
            // The rows before this span's, and its own up to row `r` (a window holds
            // fewer rows than positions, so they are counted, not taken from `pos0`).
            let before = rows.layout.len() - p.len;
            let upto = KvRows {
                layout: rows.layout.prefix(before + r + 1),
                ..*rows
            };
            let q = &q[r * width..][..width];
            let o = decode_in_place(q, s.n_head, s.n_kv_head, upto, g..g + 1);
            ((p.off + r) * width + g * group_width, o)
        })
        .collect();
    for (start, o) in results {
        out[start..][..o.len()].copy_from_slice(&o);
    }
    Ok(())
}

/// Per span, its sequence's rows as f32 when the span is a prompt's (several rows) and the
/// store holds f16 or int8: a prompt's rows each read all the rows before them, so those
/// are decoded once for the span (and then read by the f32 kernel), not once per query
/// row. A decode row reads each row once anyway, converting it as it goes.
fn decoded_prompts(
    s: &Setup,
    kv: &dyn BatchKv,
    spans: &[Span],
) -> Result<Vec<Option<DecodedRows>>> {
    spans
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let r = kv.rows(i, s.layer).ok_or_else(crate::kv::no_host_rows)?;
            Ok((p.len > 1 && r.k.as_f32().is_none()).then(|| decoded_rows(&r, s)))
        })
        .collect()
}

/// A sequence's keys and values decoded to f32, token-major `(len, n_kv × d)`.
type DecodedRows = (Vec<f32>, Vec<f32>);

/// A sequence's stored rows as f32, token-major `(len, n_kv × d)`: what the decode
/// kernel reads in place.
fn decoded_rows(r: &KvRows, s: &Setup) -> DecodedRows {
    let (n_kv, d, len) = (s.n_kv_head, s.head_dim, r.layout.len());
    let (mut k, mut v) = (vec![0.0f32; len * n_kv * d], vec![0.0f32; len * n_kv * d]);
    let mut buf = vec![0.0f32; d];
    for j in 0..len {
        for g in 0..n_kv {
            let (at, to) = (r.layout.at(n_kv, d, g, j), (j * n_kv + g) * d);
            k[to..][..d].copy_from_slice(r.k.row(at, &mut buf));
            v[to..][..d].copy_from_slice(r.v.row(at, &mut buf));
        }
    }
    (k, v)
}

/// Additive causal mask `(t, kv_len)`: query i sits at position `pos0 + i` and may see
/// keys `0..=pos0 + i`.
pub fn causal_mask(
    t: usize,
    pos0: usize,
    kv_len: usize,
    device: &candle_core::Device,
) -> Result<Tensor> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..kv_len).map(move |j| if j > pos0 + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(mask, (t, kv_len), device)
}

/// Most score elements one naive call holds at once (f32: 64 MB per tensor). Longer
/// prompts run in chunks of query rows: a row's softmax needs only its own scores, so the
/// result is the same and memory stays bounded whatever the prompt's length.
pub const MAX_SCORE_ELEMS: usize = 16 << 20;

/// Query rows per block of [`naive`] over `kv_len` keys: as many as keep the block's
/// scores within [`MAX_SCORE_ELEMS`], at least one.
fn naive_rows_per_block(n_head: usize, kv_len: usize) -> usize {
    (MAX_SCORE_ELEMS / (n_head * kv_len).max(1)).max(1)
}

/// Naive attention: materializes the whole `t × kv_len` score matrix per head (in chunks
/// of query rows beyond [`MAX_SCORE_ELEMS`]), on candle tensor ops in the order of candle's
/// own quantized_llama, so the reference path matches it bit for bit.
///
/// `q` is `(n_head, t, d)`, `k`/`v` are `(n_kv_head, kv_len, d)`; query head `h` reads
/// KV head `h / (n_head / n_kv_head)` — grouped-query attention without copying K/V.
pub fn naive(q: &Tensor, k: &Tensor, v: &Tensor, pos0: usize) -> Result<AttnOut> {
    let (n_head, t, _) = q.dims3()?;
    let kv_len = k.dim(1)?;
    let chunk = naive_rows_per_block(n_head, kv_len);
    if t <= chunk {
        return naive_block(q, k, v, pos0);
    }
    let (mut outs, mut io) = (Vec::new(), IoCount::default());
    for r0 in (0..t).step_by(chunk) {
        let n = chunk.min(t - r0);
        let part = naive_block(&q.narrow(1, r0, n)?, k, v, pos0 + r0)?;
        outs.push(part.out);
        io.add(part.io);
    }
    Ok(AttnOut {
        out: Tensor::cat(&outs, 1)?,
        io,
        schedule: Vec::new(),
    })
}

/// One block of query rows, the whole score matrix at once.
fn naive_block(q: &Tensor, k: &Tensor, v: &Tensor, pos0: usize) -> Result<AttnOut> {
    let (n_head, t, d) = q.dims3()?;
    let (n_kv, kv_len, _) = k.dims3()?;
    let group = n_head / n_kv;
    // Heads of one group are adjacent, so (n_head, t) folds into (n_kv, group * t).
    let qg = q.reshape((n_kv, group * t, d))?;
    let k = k.contiguous()?;
    let v = v.contiguous()?;
    let scores = (qg.matmul(&k.t()?)? / (d as f64).sqrt())?.reshape((n_head, t, kv_len))?;
    // Only rows with keys after them need the mask: a decode row sees every key.
    let masked = if pos0 + 1 < kv_len {
        scores.broadcast_add(&causal_mask(t, pos0, kv_len, q.device())?)?
    } else {
        scores
    };
    let weights = candle_nn::ops::softmax_last_dim(&masked)?;
    let out = weights
        .reshape((n_kv, group * t, kv_len))?
        .matmul(&v)?
        .reshape((n_head, t, d))?;
    Ok(AttnOut {
        out,
        io: flash::naive_io(t, kv_len, d).times(n_head),
        schedule: Vec::new(),
    })
}

/// Tiled (FlashAttention) attention over all heads: same shapes as [`naive`]. Returns the
/// output with the bytes moved by all heads and head 0's tile schedule. It never forms
/// the score matrix; what the probe shows of it, [`observe`] recomputes.
pub fn tiled(q: &Tensor, k: &Tensor, v: &Tensor, pos0: usize, tiles: Tiles) -> Result<AttnOut> {
    let (n_head, t, d) = q.dims3()?;
    let (n_kv, kv_len, _) = k.dims3()?;
    let group = n_head / n_kv;
    let qv = q.flatten_all()?.to_vec1::<f32>()?;
    let kv_ = k.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let vv = v.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let mut out = Vec::with_capacity(n_head * t * d);
    let mut io = IoCount::default();
    let mut schedule = Vec::new();
    for h in 0..n_head {
        let g = h / group;
        let r = flash::tiled_head(
            &qv[h * t * d..][..t * d],
            &kv_[g * kv_len * d..][..kv_len * d],
            &vv[g * kv_len * d..][..kv_len * d],
            d,
            pos0,
            true,
            tiles,
        );
        out.extend_from_slice(&r.out);
        io.add(r.io);
        if h == 0 {
            schedule = r.schedule;
        }
    }
    Ok(AttnOut {
        out: Tensor::from_vec(out, (n_head, t, d), q.device())?,
        io,
        schedule,
    })
}

/// One decode row's attention read in place, as PagedAttention's kernel does: through
/// the block table of the page pool, or straight from a contiguous reservation. No K/V is
/// copied (rows stored as f16 or int8 are decoded one at a time as they are read). Only
/// the query heads of KV heads `kv_heads` are computed: their outputs,
/// `kv_heads.len() × (n_head / n_kv) × d` values.
pub fn decode_in_place(
    qv: &[f32],
    n_head: usize,
    n_kv: usize,
    r: KvRows,
    kv_heads: Range<usize>,
) -> Vec<f32> {
    decode_core(DecodeRow {
        q: qv,
        n_head,
        n_kv,
        kv_heads,
        k: r.k,
        v: r.v,
        layout: r.layout,
    })
}

/// What one decode row's attention reads: its query (`n_head × d`, rotated) and the
/// cached keys and values, of which the KV heads `kv_heads` are wanted. `layout` says
/// how many positions are cached and where KV head `g`'s row for position `j` starts in
/// `k` and `v`, which is all that differs between the contiguous and the paged cache.
struct DecodeRow<'a> {
    q: &'a [f32],
    n_head: usize,
    n_kv: usize,
    kv_heads: Range<usize>,
    k: RowData<'a>,
    v: RowData<'a>,
    layout: RowLayout<'a>,
}

/// [`decode_loops`] on the fastest route this CPU has. Heads 64 wide on AVX-512 run the
/// register-blocked kernel in `kernels/decode.rs` (same math, sums in another order and
/// fused multiply-adds, so the last bits differ), whatever type the cache stores. Otherwise
/// the loops themselves, compiled for 256-bit vectors where the CPU has them (a portable
/// build targets SSE2 only); those two run the same operations in the same order and give
/// the same bits.
fn decode_core(r: DecodeRow) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::decode;
        if let (Some(k), Some(v)) = (kernel_rows(r.k), kernel_rows(r.v)) {
            if r.q.len() == r.n_head * decode::D && decode::available() {
                return decode_by_groups(r, k, v);
            }
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has the feature this function is compiled for.
            return unsafe { decode_avx2(r) };
        }
    }
    decode_loops(r)
}

/// The store's rows as the decode kernel reads them: any type, in rows of its width.
#[cfg(target_arch = "x86_64")]
fn kernel_rows(rows: RowData) -> Option<crate::kernels::decode::Rows> {
    use crate::kernels::decode::{Rows, D};
    match rows {
        RowData::F32(b) => Some(Rows::F32(b)),
        RowData::F16(b) => Some(Rows::F16(b)),
        RowData::Int8 { q, scale, d } => (d == D).then_some(Rows::Int8 { q, scale }),
    }
}

/// The kernel route: per KV head, where its rows sit (looked up once for both passes),
/// then its query heads' attention.
#[cfg(target_arch = "x86_64")]
fn decode_by_groups(
    r: DecodeRow,
    k: crate::kernels::decode::Rows,
    v: crate::kernels::decode::Rows,
) -> Vec<f32> {
    let (width, d) = (r.q.len() / r.n_kv, r.q.len() / r.n_head);
    let mut out = Vec::with_capacity(r.kv_heads.len() * width);
    for g in r.kv_heads.clone() {
        let rows = r.layout.rows(r.n_kv, d, g);
        let q = &r.q[g * width..][..width];
        out.extend(crate::kernels::decode::group_attention(
            q,
            k,
            v,
            &rows,
            softmax_in_place,
        ));
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_avx2(r: DecodeRow) -> Vec<f32> {
    decode_loops(r)
}

/// Attention of one query row, KV head by KV head: every cached key and value row is read
/// once for all the query heads that share it (GQA's saving, in the loop structure).
/// Where the rows sit is looked up once per KV head for both passes, as the kernel route
/// does: looked up per row, a paged cache's page divisions made this loop's attention
/// about 10% slower than a contiguous reservation's (measured on a CPU without AVX-512).
#[inline(always)]
fn decode_loops(r: DecodeRow) -> Vec<f32> {
    let (n_head, kv_len) = (r.n_head, r.layout.len());
    let d = r.q.len() / n_head;
    let group = n_head / r.n_kv;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0.0f32; r.kv_heads.len() * group * d];
    // Weights of the group's heads, head-major: w[i * kv_len + j].
    let mut w = vec![0.0f32; group * kv_len];
    // Where a row stored as f16 or int8 is decoded (an f32 row is read in place).
    let mut buf = vec![0.0f32; d];
    for (o, g) in r.kv_heads.clone().enumerate() {
        let h0 = g * group;
        let at = r.layout.rows(r.n_kv, d, g);
        // Scores: each key row against the group's query heads.
        for j in 0..kv_len {
            if j + ROWS_AHEAD < kv_len {
                r.k.prefetch(at[j + ROWS_AHEAD], d);
            }
            let kr = r.k.row(at[j], &mut buf);
            for i in 0..group {
                w[i * kv_len + j] = dot(&r.q[(h0 + i) * d..][..d], kr) * scale;
            }
        }
        for wi in w.chunks_exact_mut(kv_len) {
            softmax_in_place(wi);
        }
        // Weighted sum: each value row added into the group's outputs.
        let og = &mut out[o * group * d..][..group * d];
        for j in 0..kv_len {
            if j + ROWS_AHEAD < kv_len {
                r.v.prefetch(at[j + ROWS_AHEAD], d);
            }
            let vr = r.v.row(at[j], &mut buf);
            for (i, oh) in og.chunks_exact_mut(d).enumerate() {
                let p = w[i * kv_len + j];
                for (o, x) in oh.iter_mut().zip(vr) {
                    *o += p * x;
                }
            }
        }
    }
    out
}

/// Independent lanes of the sums below: one 256-bit vector.
const LANES: usize = 8;

/// Softmax of one head's scores, in place. The exponentials run as their own loop over
/// [`exp`](crate::kernels::elementwise::exp), which becomes vector code (the standard
/// library's is a call per value); the sum then runs in lanes, like [`dot`].
#[inline(always)]
fn softmax_in_place(w: &mut [f32]) {
    let mx = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for x in w.iter_mut() {
        *x = crate::kernels::elementwise::exp(*x - mx);
    }
    let mut lanes = [0.0f32; LANES];
    let (chunks, rest) = w.as_chunks::<LANES>();
    let tail: f32 = rest.iter().sum();
    for c in chunks {
        for i in 0..LANES {
            lanes[i] += c[i];
        }
    }
    let inv = 1.0 / (lanes.iter().sum::<f32>() + tail);
    for x in w.iter_mut() {
        *x *= inv;
    }
}

/// A dot product in independent lanes, so the compiler keeps it in vector registers
/// instead of one long dependent chain of adds.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let ((ca, ta), (cb, tb)) = (a.as_chunks::<LANES>(), b.as_chunks::<LANES>());
    let tail: f32 = ta.iter().zip(tb).map(|(x, y)| x * y).sum();
    for (x, y) in ca.iter().zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::pseudo_random;
    use crate::kv::{KvElem, RowLayout};

    /// The route `decode_core` takes (on a CPU with AVX-512 the kernel in
    /// `kernels/decode.rs`) against the plain loops: MHA, GQA and MQA groups (1, 3 and 9
    /// query heads per KV head), caches of 1 to 150 rows, rows in scattered pages and
    /// head-major, every KV head and a single one; the cache stored as f32, f16 and int8.
    #[test]
    fn every_decode_route_matches_the_plain_loops() {
        for elem in [KvElem::F32, KvElem::F16, KvElem::Int8] {
            decode_routes_match_the_loops(elem);
        }
    }

    fn decode_routes_match_the_loops(elem: KvElem) {
        let (n_head, d, slots) = (9, 64, 320);
        let stored = |seed| {
            let mut b = crate::kv::RowBuf::zeros(elem, slots * 9, d);
            b.put(0, &pseudo_random(slots * 9 * d, seed));
            b
        };
        let (k, v) = (stored(1), stored(2));
        for n_kv in [9, 3, 1] {
            for kv_len in [1, 2, 17, 150] {
                let q = pseudo_random(n_head * d, 3);
                // Pages of 16 slots, taken out of order.
                let table: Vec<u32> = (0..kv_len)
                    .map(|j| ((j / 16 * 7 % 20) * 16 + j % 16) as u32)
                    .collect();
                let layouts = [
                    RowLayout::Slots {
                        slots: &table,
                        page_size: 16,
                    },
                    RowLayout::HeadMajor {
                        capacity: slots,
                        len: kv_len,
                    },
                ];
                for layout in layouts {
                    for heads in [0..n_kv, n_kv - 1..n_kv] {
                        let row = || DecodeRow {
                            q: &q,
                            n_head,
                            n_kv,
                            kv_heads: heads.clone(),
                            k: k.view(),
                            v: v.view(),
                            layout,
                        };
                        let (got, want) = (decode_core(row()), decode_loops(row()));
                        assert_eq!(got.len(), want.len());
                        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-5,
                                "{elem}: n_kv {n_kv}, {kv_len} rows, value {i}: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}
