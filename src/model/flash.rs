//! Attention for one head on plain slices, two ways, each counting the bytes it moves
//! between main memory (HBM) and on-chip memory (SRAM) under the IO model of the
//! FlashAttention paper (Dao et al. 2022):
//!
//! - [`naive_head`] materializes the whole score matrix S = QKᵀ and the softmax P in main
//!   memory: Θ(N·d + N²) bytes.
//! - [`tiled_head`] is the paper's Algorithm 1: K/V tiles in the outer loop, Q tiles in
//!   the inner loop, a running max `m` and sum `l` per query row, the output rescaled as
//!   each new tile arrives, and S never written out: Θ(N²·d²/M) bytes for SRAM size M.

use serde::{Deserialize, Serialize};

/// Bytes read from and written to main memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoCount {
    pub read: u64,
    pub written: u64,
}

impl IoCount {
    /// Reads plus writes.
    pub fn total(&self) -> u64 {
        self.read + self.written
    }

    fn r(&mut self, elems: usize) {
        self.read += 4 * elems as u64;
    }

    fn w(&mut self, elems: usize) {
        self.written += 4 * elems as u64;
    }

    /// This count repeated `n` times (e.g. once per head).
    pub fn times(&self, n: usize) -> IoCount {
        IoCount {
            read: self.read * n as u64,
            written: self.written * n as u64,
        }
    }

    /// Adds another count.
    pub fn add(&mut self, o: IoCount) {
        self.read += o.read;
        self.written += o.written;
    }
}

/// Tile sizes: `block_q` query rows (Br) against `block_k` keys (Bc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tiles {
    pub block_q: usize,
    pub block_k: usize,
}

/// On-chip memory of one A100 streaming multiprocessor (192 KiB), the FlashAttention
/// paper's setting and the default of the tiled kernel's IO model.
pub const A100_SRAM_BYTES: usize = 196_608;

/// Largest on-chip memory the tiled kernel models: tiles are allocated at this size, so
/// an unbounded setting would be an unbounded allocation.
pub const MAX_SRAM_BYTES: usize = 64 << 20;

/// Bad tile settings.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TileError {
    #[error("tile sizes must be at least 1 (got block_q = {0}, block_k = {1})")]
    Zero(usize, usize),
    #[error("tile of {tile} is larger than the sequence of {seq} tokens")]
    TooLarge { tile: usize, seq: usize },
    #[error("on-chip memory of {0} bytes is more than the {MAX_SRAM_BYTES} this model of a GPU's SRAM allows (an H100 has 228 KB per SM)")]
    SramTooLarge(usize),
    #[error("on-chip memory of {sram_bytes} bytes cannot hold one tile for head dim {head_dim} (needs at least {need})")]
    SramTooSmall {
        sram_bytes: usize,
        head_dim: usize,
        need: usize,
    },
}

impl Tiles {
    /// The paper's choice for SRAM of `sram_bytes`: Bc = ⌈M / 4d⌉, Br = min(Bc, d), with M
    /// counted in f32 elements.
    pub fn from_sram(sram_bytes: usize, head_dim: usize) -> Result<Self, TileError> {
        if sram_bytes > MAX_SRAM_BYTES {
            return Err(TileError::SramTooLarge(sram_bytes));
        }
        let m = sram_bytes / 4;
        if m < 4 * head_dim {
            return Err(TileError::SramTooSmall {
                sram_bytes,
                head_dim,
                need: 16 * head_dim,
            });
        }
        let bc = m.div_ceil(4 * head_dim);
        Ok(Self {
            block_q: bc.min(head_dim),
            block_k: bc,
        })
    }

    /// Explicit tile sizes, checked against the sequence length.
    pub fn explicit(block_q: usize, block_k: usize, seq: usize) -> Result<Self, TileError> {
        if block_q == 0 || block_k == 0 {
            return Err(TileError::Zero(block_q, block_k));
        }
        for tile in [block_q, block_k] {
            if tile > seq {
                return Err(TileError::TooLarge { tile, seq });
            }
        }
        Ok(Self { block_q, block_k })
    }
}

/// Bytes the naive algorithm moves for `nq` queries against `nk` keys, head dim `d`:
/// read Q, K; write S; read S, write P; read P, V; write O.
pub fn naive_io(nq: usize, nk: usize, d: usize) -> IoCount {
    let mut io = IoCount::default();
    io.r(nq * d + nk * d);
    io.w(nq * nk);
    io.r(nq * nk);
    io.w(nq * nk);
    io.r(nq * nk + nk * d);
    io.w(nq * d);
    io
}

fn is_visible(causal: bool, pos0: usize, i: usize, j: usize) -> bool {
    !causal || j <= pos0 + i
}

/// Naive attention of one head. `q` is `nq × d`, `k`/`v` are `nk × d`, row-major;
/// query `i` sits at position `pos0 + i`. Returns the output `nq × d` and the bytes moved.
pub fn naive_head(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d: usize,
    pos0: usize,
    causal: bool,
) -> (Vec<f32>, IoCount) {
    let (nq, nk) = (q.len() / d, k.len() / d);
    let scale = 1.0 / (d as f32).sqrt();
    // S = QKᵀ/√d, written to main memory in full.
    let mut s = vec![f32::NEG_INFINITY; nq * nk];
    for i in 0..nq {
        for j in 0..nk {
            if is_visible(causal, pos0, i, j) {
                s[i * nk + j] = dot(&q[i * d..][..d], &k[j * d..][..d]) * scale;
            }
        }
    }
    // P = softmax(S), row by row, written back.
    for row in s.chunks_mut(nk) {
        let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for x in row.iter_mut() {
            *x = (*x - m).exp();
            sum += *x;
        }
        row.iter_mut().for_each(|x| *x /= sum);
    }
    // O = PV.
    let mut o = vec![0.0; nq * d];
    for i in 0..nq {
        for j in 0..nk {
            let p = s[i * nk + j];
            if p != 0.0 {
                axpy(&mut o[i * d..][..d], p, &v[j * d..][..d]);
            }
        }
    }
    (o, naive_io(nq, nk, d))
}

/// Result of the tiled kernel.
pub struct TiledOut {
    pub out: Vec<f32>,
    pub io: IoCount,
    /// (query tile, key tile) pairs in the order processed; masked-out pairs are skipped.
    pub schedule: Vec<(u32, u32)>,
}

/// FlashAttention (Algorithm 1) for one head; same arguments as [`naive_head`].
pub fn tiled_head(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d: usize,
    pos0: usize,
    causal: bool,
    tiles: Tiles,
) -> TiledOut {
    let (nq, nk) = (q.len() / d, k.len() / d);
    let (br, bc) = (tiles.block_q, tiles.block_k);
    let scale = 1.0 / (d as f32).sqrt();
    let mut io = IoCount::default();
    let mut schedule = Vec::new();
    // O, ℓ and m live in main memory between tiles.
    let mut o = vec![0.0f32; nq * d];
    let mut l = vec![0.0f32; nq];
    let mut m = vec![f32::NEG_INFINITY; nq];
    let mut s_tile = vec![0.0f32; br * bc];
    for (jt, j0) in (0..nk).step_by(bc).enumerate() {
        let jn = bc.min(nk - j0);
        let mut loaded_kv = false;
        for (it, i0) in (0..nq).step_by(br).enumerate() {
            let iq = br.min(nq - i0);
            // Causal: a key tile entirely after the tile's last query contributes nothing.
            if causal && j0 > pos0 + i0 + iq - 1 {
                continue;
            }
            if !loaded_kv {
                io.r(2 * jn * d);
                loaded_kv = true;
            }
            io.r(iq * d + iq * d + 2 * iq); // Q_i, O_i, ℓ_i, m_i
            schedule.push((it as u32, jt as u32));
            for a in 0..iq {
                let i = i0 + a;
                let row = &mut s_tile[a * bc..a * bc + jn];
                let visible = |j| is_visible(causal, pos0, i, j);
                let mt = tile_scores(row, &q[i * d..][..d], k, j0, visible, scale);
                if mt == f32::NEG_INFINITY {
                    continue; // every key of this tile is in this row's future
                }
                let running = Running {
                    o: &mut o[i * d..][..d],
                    l: &mut l[i],
                    m: &mut m[i],
                };
                fold_tile(row, mt, v, j0, running);
            }
            io.w(iq * d + 2 * iq); // O_i, ℓ_i, m_i back to main memory
        }
    }
    TiledOut {
        out: o,
        io,
        schedule,
    }
}

/// S̃ = q·Kⱼᵀ/√d for one query row against the key tile starting at key `j0`, written
/// into `row` (−∞ where the mask hides a key). Returns the tile's row max m̃.
fn tile_scores(
    row: &mut [f32],
    qi: &[f32],
    k: &[f32],
    j0: usize,
    visible: impl Fn(usize) -> bool,
    scale: f32,
) -> f32 {
    let d = qi.len();
    let mut mt = f32::NEG_INFINITY;
    for (b, s) in row.iter_mut().enumerate() {
        let j = j0 + b;
        *s = if visible(j) {
            dot(qi, &k[j * d..][..d]) * scale
        } else {
            f32::NEG_INFINITY
        };
        mt = mt.max(*s);
    }
    mt
}

/// One query row's state between tiles, kept in main memory: its output O_i, the softmax
/// denominator ℓ_i and the running max m_i.
struct Running<'a> {
    o: &'a mut [f32],
    l: &'a mut f32,
    m: &'a mut f32,
}

/// The online softmax: turns the tile's scores into P̃ = exp(S̃ − m̃) in place and folds
/// P̃Vⱼ into the row's running output, rescaling what was there to the new max.
fn fold_tile(row: &mut [f32], mt: f32, v: &[f32], j0: usize, r: Running) {
    let d = r.o.len();
    let mut lt = 0.0;
    for s in row.iter_mut() {
        *s = (*s - mt).exp();
        lt += *s;
    }
    let m_new = r.m.max(mt);
    let a_old = (*r.m - m_new).exp();
    let a_new = (mt - m_new).exp();
    let l_new = a_old * *r.l + a_new * lt;
    // O_i ← (ℓ_i e^{m_i − m_new} O_i + e^{m̃ − m_new} P̃ V_j) / ℓ_new
    let keep = *r.l * a_old / l_new;
    r.o.iter_mut().for_each(|x| *x *= keep);
    for (b, &p) in row.iter().enumerate() {
        if p != 0.0 {
            axpy(r.o, a_new * p / l_new, &v[(j0 + b) * d..][..d]);
        }
    }
    *r.l = l_new;
    *r.m = m_new;
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, x)| *y += a * x);
}

pub use crate::kernels::pseudo_random;
