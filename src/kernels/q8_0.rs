//! The Q8_0 matrix multiply: int8 weights (a scale per block of 32) times activations
//! quantized to int8 the same way, each weight block read once for all activation rows.
//! The SIMD paths (AVX2, AVX-512 VNNI) live in their own files; [`scalar_dot_rows`] is the
//! portable reference every path is tested against.

use candle_core::Result;
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

const QK: usize = 32;

/// Blocks per interleaved group of the AVX-512 kernel: one 64-byte vector holds four bytes
/// of each of 16 blocks, so each of its 16 int32 lanes sums one block's products and a
/// group needs a single int → float conversion per activation row (not one per block pair).
const GROUP: usize = 16;

/// A weight matrix in Q8_0 laid out for the batched kernel: per block a scale and 32 int8.
pub struct BatchedQ8 {
    pub n: usize,
    pub k: usize,
    /// Per row, block scales in block order.
    scales: Vec<f32>,
    /// Per row, the blocks' bytes: in block order, or (when `interleaved`) whole groups of
    /// `GROUP` blocks interleaved four bytes at a time and the remaining blocks as they are.
    qs: Vec<i8>,
    interleaved: bool,
}

/// Reorders one row's bytes for the AVX-512 kernel: within each group of `GROUP` blocks,
/// chunk `c` holds bytes `4c..4c + 4` of every block in turn. Blocks after the last whole
/// group keep their order. `flip` is XORed into every byte (0x80 turns i8 into `i8 + 128`).
fn interleave(src: &[u8], dst: &mut [u8], flip: u8) {
    let kb = src.len() / QK;
    let main = kb / GROUP * GROUP * QK;
    let flip4 = u32::from_ne_bytes([flip; 4]);
    // Four bytes move together, as one u32.
    let word = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    for g in 0..kb / GROUP {
        let s = &src[g * GROUP * QK..][..GROUP * QK];
        let d = &mut dst[g * GROUP * QK..][..GROUP * QK];
        for (n, out) in d.chunks_exact_mut(4).enumerate() {
            // Output word n is chunk c = n / GROUP of block j = n % GROUP.
            let (c, j) = (n / GROUP, n % GROUP);
            out.copy_from_slice(&(word(s, j * QK + c * 4) ^ flip4).to_ne_bytes());
        }
    }
    for (d, s) in dst[main..].iter_mut().zip(&src[main..]) {
        *d = s ^ flip;
    }
}

/// Activations quantized to Q8_0, row by row (as candle does for its own dot products).
struct QActs {
    scales: Vec<f32>,
    qs: Vec<i8>,
    /// The same activations in the form the AVX-512 VNNI kernel wants, when the CPU has it.
    wide: Option<WideActs>,
}

/// Activations for the AVX-512 kernel: offset to unsigned (`q + 128`, what `vpdpbusd`
/// multiplies) and interleaved as the weights are; per row the scales of the whole groups
/// in block order, then each remaining block's scale repeated eight times (one 64-byte
/// load then feeds a two-block dot product).
struct WideActs {
    offset: Vec<u8>,
    scales: Vec<f32>,
    /// Floats of `scales` per row.
    s_stride: usize,
}

#[cfg(target_arch = "x86_64")]
impl WideActs {
    /// Rows `r0..r0 + m` (of `kb` blocks each) as the AVX-512 kernel reads them.
    fn rows(&self, r0: usize, m: usize, kb: usize) -> avx512::Acts<'_> {
        avx512::Acts {
            q: &self.offset[r0 * kb * QK..(r0 + m) * kb * QK],
            s: &self.scales[r0 * self.s_stride..(r0 + m) * self.s_stride],
            q_stride: kb * QK,
            s_stride: self.s_stride,
        }
    }
}

/// Whether the AVX-512 VNNI kernel runs; `INFERLAB_NO_AVX512` turns it off to compare.
fn use_avx512_vnni() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vnni")
                && std::env::var_os("INFERLAB_NO_AVX512").is_none()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// One block of 32 activations to int8 with scale `max|x| / 127`; returns the scale.
fn quantize_block(chunk: &[f32], out: &mut [i8]) -> f32 {
    let amax = chunk.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (o, &v) in out.iter_mut().zip(chunk) {
        // Round half away from zero, as `f32::round` does, without its libm call.
        let x = v * id;
        *o = (x + 0.5f32.copysign(x)) as i8;
    }
    d
}

fn quantize_rows(x: &[f32], m: usize, k: usize, wide: bool) -> QActs {
    let kb = k / QK;
    let mut scales = vec![0.0; m * kb];
    let mut qs = vec![0i8; m * k];
    let simd = use_avx512_vnni();
    for (bi, (chunk, out)) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK)).enumerate() {
        #[cfg(target_arch = "x86_64")]
        let d = if simd {
            // SAFETY: the AVX-512 features were detected.
            unsafe { avx512::quantize_block(chunk, out) }
        } else {
            quantize_block(chunk, out)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let d = quantize_block(chunk, out);
        // candle stores the scale as f16; round the same way so results agree.
        scales[bi] = half::f16::from_f32(d).to_f32();
    }
    let wide = wide.then(|| {
        let main = kb / GROUP * GROUP;
        let s_stride = main + (kb - main) * 8;
        let mut offset = vec![0u8; m * k];
        let mut wide_scales = Vec::with_capacity(m * s_stride);
        for r in 0..m {
            // SAFETY: i8 and u8 have the same size and alignment.
            let row: &[u8] =
                unsafe { std::slice::from_raw_parts(qs[r * k..].as_ptr() as *const u8, k) };
            interleave(row, &mut offset[r * k..(r + 1) * k], 0x80);
            let rs = &scales[r * kb..(r + 1) * kb];
            wide_scales.extend_from_slice(&rs[..main]);
            wide_scales.extend(rs[main..].iter().flat_map(|&s| [s; 8]));
        }
        WideActs {
            offset,
            scales: wide_scales,
            s_stride,
        }
    });
    QActs { scales, qs, wide }
}

impl BatchedQ8 {
    /// From GGUF Q8_0 bytes, in the layout of the fastest kernel this CPU runs.
    pub fn for_this_cpu(data: &[u8], n: usize, k: usize) -> Result<Self> {
        Self::from_q8_0(data, n, k, use_avx512_vnni())
    }

    /// From GGUF Q8_0 bytes (per block an f16 scale and 32 int8) of an `(n, k)` matrix.
    /// `interleaved` lays the bytes out for the AVX-512 VNNI kernel, and needs that CPU.
    /// Sizes are checked, not trusted: they come from a model file.
    pub fn from_q8_0(data: &[u8], n: usize, k: usize, interleaved: bool) -> Result<Self> {
        assert!(!interleaved || use_avx512_vnni());
        if n == 0 || k == 0 || !k.is_multiple_of(QK) {
            candle_core::bail!("Q8_0 matrix ({n}, {k}): rows must be whole blocks of {QK}");
        }
        let blocks = n
            .checked_mul(k / QK)
            .filter(|b| b.checked_mul(34) == Some(data.len()))
            .ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "Q8_0 matrix ({n}, {k}) does not match its {} bytes",
                    data.len()
                ))
            })?;
        let mut scales = Vec::with_capacity(blocks);
        let mut bytes = Vec::with_capacity(blocks * QK);
        for b in data.chunks_exact(34) {
            scales.push(half::f16::from_le_bytes([b[0], b[1]]).to_f32());
            bytes.extend_from_slice(&b[2..]);
        }
        if interleaved {
            let mut out = vec![0u8; bytes.len()];
            for (src, dst) in bytes.chunks_exact(k).zip(out.chunks_exact_mut(k)) {
                interleave(src, dst, 0);
            }
            bytes = out;
        }
        Ok(Self {
            n,
            k,
            scales,
            qs: bytes.into_iter().map(|x| x as i8).collect(),
            interleaved,
        })
    }

    /// `(m, k) × (n, k)ᵀ → (m, n)`. The unsafe writes below rely on these sizes, so they
    /// are checked here, where a wrong shape becomes an error instead of a stray write.
    pub fn matmul(&self, x: &[f32], m: usize) -> Result<Vec<f32>> {
        let out_len = m.checked_mul(self.n);
        if m.checked_mul(self.k) != Some(x.len()) || out_len.is_none() {
            candle_core::bail!(
                "batched matmul: {} inputs are not {m} rows of {} (weight {}×{})",
                x.len(),
                self.k,
                self.n,
                self.k
            );
        }
        debug_assert!(self.k.is_multiple_of(QK) && self.scales.len() * QK == self.qs.len());
        let a = quantize_rows(x, m, self.k, self.interleaved);
        let kb = self.k / QK;
        // Output rows of W in chunks per task. Each task computes a (rows × m) slab and
        // writes it straight into its own columns of the (m, n) result. 64 rows rather than
        // 32: on two cores fewer tasks mean fewer rayon wake-ups, measured at 30 layers of
        // the model's shapes as 15.5 → 12.3 ms at 8 rows and 4.7 → 4.6 ms at one (minima).
        const CHUNK: usize = 64;
        let n = self.n;
        let mut out = vec![0.0f32; m * n];
        let dst = OutPtr(out.as_mut_ptr());
        (0..n.div_ceil(CHUNK)).into_par_iter().for_each(|c| {
            let n0 = c * CHUNK;
            let rows = CHUNK.min(n - n0);
            let mut slab = [0.0f32; CHUNK * 32];
            let mut r0 = 0;
            // Activation rows in groups of 32 so the slab stays on the stack.
            while r0 < m {
                let g = (m - r0).min(32);
                let mut i = 0;
                while i < rows {
                    // Below eight activation rows, two weight rows at a time share every
                    // activation load on the AVX-512 kernel and keep two weight streams in
                    // flight (measured: B=1 steps 10% faster). From eight rows on, the
                    // sixteen accumulators of a pair spill registers and it is slower.
                    let pair = a.wide.is_some() && i + 1 < rows && g < 8;
                    let w = if pair { 2 } else { 1 };
                    let (row, out) = (n0 + i, &mut slab[i * g..(i + w) * g]);
                    let wr = |r: usize| {
                        (
                            &self.scales[r * kb..(r + 1) * kb],
                            &self.qs[r * self.k..(r + 1) * self.k],
                        )
                    };
                    if w == 2 {
                        dot_rows_pair(wr(row), wr(row + 1), &a, r0, g, kb, out);
                    } else {
                        let (ws, wq) = wr(row);
                        dot_rows(ws, wq, &a, r0, g, kb, out);
                    }
                    i += w;
                }
                for r in 0..g {
                    for i in 0..rows {
                        // SAFETY: column n0 + i belongs to this task alone and r0 + r < m.
                        unsafe { *dst.at((r0 + r) * n + n0 + i) = slab[i * g + r] };
                    }
                }
                r0 += g;
            }
        });
        Ok(out)
    }
}

/// The result buffer shared by the matmul's tasks; each writes only its own columns.
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint elements and the buffer outlives the parallel loop.
unsafe impl Sync for OutPtr {}
impl OutPtr {
    /// A method (not field access) so closures capture the whole Sync wrapper.
    fn at(&self, i: usize) -> *mut f32 {
        // SAFETY: callers index inside the buffer.
        unsafe { self.0.add(i) }
    }
}

/// One weight row against activation rows `r0..r0 + m`.
#[allow(clippy::too_many_arguments)]
fn dot_rows(w_s: &[f32], w_q: &[i8], a: &QActs, r0: usize, m: usize, kb: usize, dst: &mut [f32]) {
    let a_s = &a.scales[r0 * kb..(r0 + m) * kb];
    let a_q = &a.qs[r0 * kb * QK..(r0 + m) * kb * QK];
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(wide) = &a.wide {
            let view = wide.rows(r0, m, kb);
            // SAFETY: `wide` only exists when the AVX-512 features were detected.
            unsafe { avx512::dot_rows(w_s, w_q, &view, m, dst) };
            odd_block(w_s, w_q, a, r0, m, kb, dst);
            return;
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the features were just detected; slices are sized by the caller.
            unsafe { avx2::dot_rows(w_s, w_q, a_s, a_q, m, kb, dst) };
            return;
        }
    }
    scalar_dot_rows(w_s, w_q, a_s, a_q, m, kb, dst);
}

/// Two weight rows against activation rows `r0..r0 + m` on the AVX-512 kernel (the caller
/// checked it runs); `dst` holds row one's `m` results, then row two's.
#[allow(clippy::too_many_arguments)]
fn dot_rows_pair(
    w1: (&[f32], &[i8]),
    w2: (&[f32], &[i8]),
    a: &QActs,
    r0: usize,
    m: usize,
    kb: usize,
    dst: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(wide) = &a.wide {
        let view = wide.rows(r0, m, kb);
        let (d1, d2) = dst.split_at_mut(m);
        // SAFETY: `wide` only exists when the AVX-512 features were detected.
        unsafe {
            avx512::dot_rows_w::<2>([w1.0, w2.0], [w1.1, w2.1], &view, m, [&mut *d1, &mut *d2])
        };
        for (w, d) in [(w1, d1), (w2, d2)] {
            odd_block(w.0, w.1, a, r0, m, kb, d);
        }
        return;
    }
    let (d1, d2) = dst.split_at_mut(m);
    dot_rows(w1.0, w1.1, a, r0, m, kb, d1);
    dot_rows(w2.0, w2.1, a, r0, m, kb, d2);
}

/// The AVX-512 kernel's two-block tail leaves out an odd last block: added here.
fn odd_block(w_s: &[f32], w_q: &[i8], a: &QActs, r0: usize, m: usize, kb: usize, dst: &mut [f32]) {
    if (kb % GROUP).is_multiple_of(2) {
        return;
    }
    let a_s = &a.scales[r0 * kb..(r0 + m) * kb];
    let a_q = &a.qs[r0 * kb * QK..(r0 + m) * kb * QK];
    let b = kb - 1;
    for (r, d) in dst.iter_mut().enumerate().take(m) {
        let wq = &w_q[b * QK..][..QK];
        let aq = &a_q[(r * kb + b) * QK..][..QK];
        let dot: i32 = wq.iter().zip(aq).map(|(&x, &y)| x as i32 * y as i32).sum();
        *d += dot as f32 * w_s[b] * a_s[r * kb + b];
    }
}

/// Portable reference: per block an exact int32 dot, scaled by both block scales.
pub fn scalar_dot_rows(
    w_s: &[f32],
    w_q: &[i8],
    a_s: &[f32],
    a_q: &[i8],
    m: usize,
    kb: usize,
    dst: &mut [f32],
) {
    for r in 0..m {
        let mut acc = 0.0f32;
        for b in 0..kb {
            let wq = &w_q[b * QK..(b + 1) * QK];
            let aq = &a_q[(r * kb + b) * QK..][..QK];
            let dot: i32 = wq.iter().zip(aq).map(|(&x, &y)| x as i32 * y as i32).sum();
            acc += dot as f32 * w_s[b] * a_s[r * kb + b];
        }
        dst[r] = acc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::pseudo_random;
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::{Device, Module, Tensor};

    #[test]
    fn batched_kernel_matches_candle_and_the_scalar_reference() {
        // Block counts: 18 = one interleaved group + a pair, 19 = group + pair + odd block,
        // 33 = two groups + odd block, 48 = three groups and no tail; 41 rows leave one
        // weight row without a partner for the two-row kernel.
        for (n, k) in [(96, 576), (41, 576), (40, 608), (24, 1056), (20, 1536)] {
            let w = Tensor::from_vec(pseudo_random(n * k, 3), (n, k), &Device::Cpu).unwrap();
            let qt = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
            let data = qt.data().unwrap().to_vec();
            let q = QMatMul::from_qtensor(qt).unwrap();
            let plain = BatchedQ8::from_q8_0(&data, n, k, false).unwrap();
            let mut layouts = vec![&plain];
            let wide;
            if use_avx512_vnni() {
                wide = BatchedQ8::from_q8_0(&data, n, k, true).unwrap();
                layouts.push(&wide);
            }
            for m in [1usize, 2, 3, 5, 9, 16, 19] {
                let x = Tensor::from_vec(pseudo_random(m * k, m as u64 + 9), (m, k), &Device::Cpu)
                    .unwrap();
                let theirs: Vec<f32> = q
                    .forward(&x)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap();
                let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
                for f in &layouts {
                    let ours = f.matmul(&xs, m).unwrap();
                    let d = ours
                        .iter()
                        .zip(&theirs)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0, f32::max);
                    assert!(d < 1e-3, "n={n} k={k} m={m} wide={}: {d}", f.interleaved);
                }
                // Scalar fallback on the same quantized data.
                let a = quantize_rows(&xs, m, k, false);
                let kb = k / QK;
                let reference = plain.matmul(&xs, m).unwrap();
                for row in [0usize, 17, n - 1] {
                    let mut s = vec![0.0; m];
                    scalar_dot_rows(
                        &plain.scales[row * kb..][..kb],
                        &plain.qs[row * k..][..k],
                        &a.scales,
                        &a.qs,
                        m,
                        kb,
                        &mut s,
                    );
                    for r in 0..m {
                        assert!((s[r] - reference[r * n + row]).abs() < 1e-3);
                    }
                }
            }
        }
    }

    #[test]
    fn simd_quantization_gives_the_same_bytes_as_the_scalar_one() {
        let mut x = pseudo_random(QK * 64, 5);
        // Exact halves, zeros and a block of zeros: the rounding and d = 0 edges.
        x[3] = 0.0;
        x[40..72].fill(0.0);
        x[100] = -x[101] * 0.5;
        for chunk in x.chunks_exact(QK) {
            let (mut a, mut b) = ([0i8; QK], [0i8; QK]);
            let da = quantize_block(chunk, &mut a);
            #[cfg(target_arch = "x86_64")]
            if use_avx512_vnni() {
                // SAFETY: detected.
                let db = unsafe { avx512::quantize_block(chunk, &mut b) };
                assert_eq!(da.to_bits(), db.to_bits());
                assert_eq!(a, b);
            }
            let _ = &mut b;
            assert!(a.iter().any(|&q| q.unsigned_abs() == 127) || da == 0.0);
        }
    }

    #[test]
    fn interleaving_puts_each_block_in_its_own_lane() {
        // Two groups and a tail of three blocks; byte value = block index.
        let kb = 2 * GROUP + 3;
        let src: Vec<u8> = (0..kb * QK).map(|i| (i / QK) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        interleave(&src, &mut dst, 0);
        for g in 0..2 {
            for c in 0..QK / 4 {
                let chunk = &dst[(g * GROUP * QK + c * 64)..][..64];
                for (lane, four) in chunk.chunks_exact(4).enumerate() {
                    assert!(four.iter().all(|&b| b as usize == g * GROUP + lane));
                }
            }
        }
        assert_eq!(&dst[2 * GROUP * QK..], &src[2 * GROUP * QK..]);
    }
}
