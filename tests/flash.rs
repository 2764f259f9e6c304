//! Tiled online-softmax attention equals naive attention, and both count the bytes the
//! FlashAttention paper's IO model says they move.

use inferlab::model::flash::*;
use proptest::prelude::*;

/// Bytes the tiled algorithm moves without a causal mask (every tile pair visited):
/// K and V once; then for each of the ⌈nk / Bc⌉ key tiles, every query row's Q, O, ℓ, m
/// read and O, ℓ, m written.
fn tiled_io_full(nq: usize, nk: usize, d: usize, tiles: Tiles) -> IoCount {
    let tc = nk.div_ceil(tiles.block_k);
    IoCount {
        read: 4 * (2 * nk * d + tc * nq * (2 * d + 2)) as u64,
        written: 4 * (tc * nq * (d + 2)) as u64,
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn tiled_equals_naive(nq in 1usize..70, extra in 0usize..40, d in prop::sample::select(vec![8usize, 16, 64]),
                          br in 1usize..20, bc in 1usize..20, causal: bool, seed: u64) {
        let nk = nq + extra;
        let pos0 = nk - nq; // the queries are the last nq positions, as in decode/prefill
        let q = pseudo_random(nq * d, seed);
        let k = pseudo_random(nk * d, seed ^ 1);
        let v = pseudo_random(nk * d, seed ^ 2);
        let (a, _) = naive_head(&q, &k, &v, d, pos0, causal);
        let t = tiled_head(&q, &k, &v, d, pos0, causal, Tiles { block_q: br, block_k: bc });
        prop_assert!(max_diff(&a, &t.out) < 1e-5, "diff {}", max_diff(&a, &t.out));
    }
}

#[test]
fn single_token_decode_matches() {
    let (d, nk) = (64, 37);
    let q = pseudo_random(d, 3);
    let k = pseudo_random(nk * d, 4);
    let v = pseudo_random(nk * d, 5);
    let (a, _) = naive_head(&q, &k, &v, d, nk - 1, true);
    let t = tiled_head(
        &q,
        &k,
        &v,
        d,
        nk - 1,
        true,
        Tiles {
            block_q: 1,
            block_k: 16,
        },
    );
    assert!(max_diff(&a, &t.out) < 1e-5);
    assert_eq!(t.schedule, vec![(0, 0), (0, 1), (0, 2)]);
}

#[test]
fn byte_counts_follow_the_formulas() {
    let d = 64;
    let sram = 64 * 1024;
    let tiles = Tiles::from_sram(sram, d).unwrap();
    // M = 16384 floats: Bc = ⌈M/4d⌉ = 64, Br = min(Bc, d) = 64.
    assert_eq!(
        tiles,
        Tiles {
            block_q: 64,
            block_k: 64
        }
    );
    for n in [100usize, 128, 1000] {
        let q = pseudo_random(n * d, 1);
        let k = pseudo_random(n * d, 2);
        let v = pseudo_random(n * d, 3);
        let (_, nio) = naive_head(&q, &k, &v, d, 0, false);
        // Naive: 4 bytes × (4·N·d + 4·N²).
        assert_eq!(nio.total(), 4 * (4 * n * d + 4 * n * n) as u64);
        let t = tiled_head(&q, &k, &v, d, 0, false, tiles);
        let tc = n.div_ceil(64);
        assert_eq!(t.io, tiled_io_full(n, n, d, tiles));
        assert_eq!(t.io.total(), 4 * (2 * n * d + tc * n * (3 * d + 4)) as u64);
        // Causal tiles skip the upper triangle: fewer bytes than the full count.
        let c = tiled_head(&q, &k, &v, d, 0, true, tiles);
        assert!(c.io.total() < t.io.total());
    }
    // Θ(N²d²/M): at N = 4096 doubling M roughly halves the quadratic part.
    let io = |m| tiled_io_full(4096, 4096, d, Tiles::from_sram(m, d).unwrap()).total() as f64;
    let kv = (4 * 2 * 4096 * d) as f64;
    let ratio = (io(sram) - kv) / (io(2 * sram) - kv);
    assert!((ratio - 2.0).abs() < 0.05, "{ratio}");
    assert!(io(sram) < naive_io(4096, 4096, d).total() as f64);
}

#[test]
fn bad_tiles_are_refused() {
    assert_eq!(Tiles::explicit(0, 4, 10), Err(TileError::Zero(0, 4)));
    assert_eq!(
        Tiles::explicit(4, 11, 10),
        Err(TileError::TooLarge { tile: 11, seq: 10 })
    );
    assert!(Tiles::from_sram(100, 64).is_err());
    assert!(Tiles::explicit(4, 4, 10).is_ok());
}
