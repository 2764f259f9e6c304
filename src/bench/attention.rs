//! `bench attention`: naive vs tiled attention at growing sequence lengths — the same
//! output, and the bytes each moves under the FlashAttention IO model.

use super::Result;
use crate::model::flash::{naive_head, pseudo_random, tiled_head, Tiles};
use serde::Serialize;
use std::time::Instant;

/// One kernel's figures at one length.
#[derive(Debug, Clone, Serialize)]
pub struct KernelFigures {
    pub bytes: u64,
    pub ms: f64,
}

/// Both kernels at one length.
#[derive(Debug, Clone, Serialize)]
pub struct LengthResult {
    pub seq_len: usize,
    pub naive: KernelFigures,
    pub tiled: KernelFigures,
    pub bytes_ratio: f64,
    pub max_abs_diff: f32,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionReport {
    pub head_dim: usize,
    pub sram_bytes: usize,
    pub block_q: usize,
    pub block_k: usize,
    pub causal: bool,
    pub results: Vec<LengthResult>,
}

impl AttentionReport {
    /// A table for people.
    pub fn table(&self) -> String {
        let mut s = format!(
            "one head, d = {}, on-chip memory {} KiB → tiles {}×{}, causal = {}\n{:>7} {:>14} {:>14} {:>8} {:>10} {:>10} {:>12}\n",
            self.head_dim, self.sram_bytes / 1024, self.block_q, self.block_k, self.causal,
            "N", "naive bytes", "tiled bytes", "ratio", "naive ms", "tiled ms", "max |Δ|"
        );
        for r in &self.results {
            s += &format!(
                "{:>7} {:>14} {:>14} {:>7.1}× {:>10.1} {:>10.1} {:>12.2e}\n",
                r.seq_len,
                r.naive.bytes,
                r.tiled.bytes,
                r.bytes_ratio,
                r.naive.ms,
                r.tiled.ms,
                r.max_abs_diff
            );
        }
        s
    }
}

/// Runs both kernels at each length in `lengths`.
/// `tiles` overrides the tile sizes derived from `sram_bytes`.
pub fn run(
    lengths: &[usize],
    head_dim: usize,
    sram_bytes: usize,
    tiles: Option<Tiles>,
    causal: bool,
) -> Result<AttentionReport> {
    let tiles = match tiles {
        Some(t) => t,
        None => Tiles::from_sram(sram_bytes, head_dim)?,
    };
    let mut results = Vec::new();
    for &n in lengths {
        let q = pseudo_random(n * head_dim, 1);
        let k = pseudo_random(n * head_dim, 2);
        let v = pseudo_random(n * head_dim, 3);
        let t0 = Instant::now();
        let (a, nio) = naive_head(&q, &k, &v, head_dim, 0, causal);
        let naive_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let t = tiled_head(&q, &k, &v, head_dim, 0, causal, tiles);
        let tiled_ms = t1.elapsed().as_secs_f64() * 1e3;
        let diff = a
            .iter()
            .zip(&t.out)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        results.push(LengthResult {
            seq_len: n,
            naive: KernelFigures {
                bytes: nio.total(),
                ms: naive_ms,
            },
            tiled: KernelFigures {
                bytes: t.io.total(),
                ms: tiled_ms,
            },
            bytes_ratio: nio.total() as f64 / t.io.total() as f64,
            max_abs_diff: diff,
        });
    }
    Ok(AttentionReport {
        head_dim,
        sram_bytes,
        block_q: tiles.block_q,
        block_k: tiles.block_k,
        causal,
        results,
    })
}
