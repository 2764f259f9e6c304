//! The arithmetic ceilings of the instructions our kernels are built from, measured with
//! register-resident loops (no memory traffic): int8 multiply-accumulates with
//! `vpdpbusd` (AVX-512 VNNI or AVX-VNNI), `maddubs` (AVX2) or `sdot` (arm64), each where
//! the matmul kernel uses it, and f32 fused multiply-adds. A kernel's speed divided by
//! these says how much of the machine it uses.

/// Independent accumulators per loop: enough to hide the instructions' latency.
const ACC: usize = 12;

/// More int8 GMAC/s than any core retires on one thread (two 512-bit `vpdpbusd` per cycle
/// at 5 GHz are 640): a figure above it comes from a loop the compiler folded away.
pub const MAX_INT8_GMAC_PER_S_PER_THREAD: f64 = 1000.0;

/// Runs `iters` rounds of the best int8 multiply-accumulate this CPU has on one thread;
/// returns the MACs done (0 where no SIMD path exists).
pub fn int8_macs(iters: usize) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512vnni") && std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the features were just detected.
            return unsafe { x86::vnni(iters) };
        }
        if std::is_x86_feature_detected!("avxvnni") {
            // SAFETY: the feature was just detected.
            return unsafe { x86::vnni256(iters) };
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the feature was just detected.
            return unsafe { x86::maddubs(iters) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        // SAFETY: the feature was just detected.
        return unsafe { arm::sdot(iters) };
    }
    let _ = iters;
    0
}

/// Runs `iters` rounds of f32 fused multiply-adds at the widest width this CPU has on one
/// thread; returns the floating-point operations done (a multiply-add counts two).
pub fn f32_flops(iters: usize) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was just detected.
            return unsafe { x86::fma512(iters) };
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the features were just detected.
            return unsafe { x86::fma256(iters) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("neon") {
        // SAFETY: the feature was just detected.
        return unsafe { arm::fma128(iters) };
    }
    let _ = iters;
    0
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::ACC;
    use std::arch::aarch64::*;

    /// 16 int8 MACs per `sdot` (4 lanes × 4 bytes), written as assembly because Rust's
    /// `vdotq_s32` is nightly-only (see `q8_0/neon.rs`).
    #[target_feature(enable = "neon,dotprod")]
    pub unsafe fn sdot(iters: usize) -> u64 {
        let a = vdupq_n_s8(3);
        let b = vdupq_n_s8(5);
        let mut acc = [vdupq_n_s32(0); ACC];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                // SAFETY: register-only arithmetic; this function enables `dotprod`.
                unsafe {
                    std::arch::asm!(
                        "sdot {x:v}.4s, {a:v}.16b, {b:v}.16b",
                        x = inout(vreg) *x,
                        a = in(vreg) a,
                        b = in(vreg) b,
                        options(pure, nomem, nostack),
                    );
                }
            }
        }
        let sum = acc.iter().fold(vdupq_n_s32(0), |s, x| vaddq_s32(s, *x));
        std::hint::black_box(vaddvq_s32(sum));
        (iters * ACC * 16) as u64
    }

    /// 4 lanes × 2 flops per instruction.
    #[target_feature(enable = "neon")]
    pub unsafe fn fma128(iters: usize) -> u64 {
        let a = vdupq_n_f32(0.999);
        let b = vdupq_n_f32(1e-3);
        let mut acc = [vdupq_n_f32(0.0); ACC];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = vfmaq_f32(b, *x, a);
            }
        }
        let sum = acc.iter().fold(vdupq_n_f32(0.0), |s, x| vaddq_f32(s, *x));
        std::hint::black_box(vaddvq_f32(sum));
        (iters * ACC * 8) as u64
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::ACC;
    use std::arch::x86_64::*;

    /// 64 int8 MACs per instruction (16 lanes × 4 bytes).
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn vnni(iters: usize) -> u64 {
        let a = _mm512_set1_epi8(3);
        let b = _mm512_set1_epi8(5);
        let mut acc = [_mm512_setzero_si512(); ACC];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm512_dpbusd_epi32(*x, a, b);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm512_setzero_si512(), |s, x| _mm512_add_epi32(s, *x));
        std::hint::black_box(_mm512_reduce_add_epi32(sum));
        (iters * ACC * 64) as u64
    }

    /// 32 int8 MACs per instruction (8 lanes × 4 bytes): CPUs with AVX-VNNI but no AVX-512.
    #[target_feature(enable = "avx2,avxvnni")]
    pub unsafe fn vnni256(iters: usize) -> u64 {
        let a = _mm256_set1_epi8(3);
        let b = _mm256_set1_epi8(5);
        let mut acc = [_mm256_setzero_si256(); ACC];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_dpbusd_avx_epi32(*x, a, b);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm256_setzero_si256(), |s, x| _mm256_add_epi32(s, *x));
        std::hint::black_box(sum);
        (iters * ACC * 32) as u64
    }

    /// 32 int8 MACs per `maddubs`, in the AVX2 kernel's mix (`q8_0/avx2.rs`): the weights'
    /// absolute values once per round, then per accumulator the activations given the
    /// weights' signs, `maddubs`, `madd` into 32 bits and an add. The weights change every
    /// round: with constant inputs the compiler hoisted the products out of the loop and
    /// the "peak" came out near 11,000 GMAC/s.
    #[target_feature(enable = "avx2")]
    pub unsafe fn maddubs(iters: usize) -> u64 {
        let step = _mm256_set1_epi8(1);
        let ones = _mm256_set1_epi16(1);
        let mut w = _mm256_set1_epi8(-5);
        let acts: [__m256i; ACC] = std::array::from_fn(|i| _mm256_set1_epi8(i as i8 - 6));
        let mut acc = [_mm256_setzero_si256(); ACC];
        for _ in 0..iters {
            w = _mm256_add_epi8(w, step);
            let w_abs = _mm256_abs_epi8(w);
            for (x, a) in acc.iter_mut().zip(&acts) {
                let pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(*a, w));
                *x = _mm256_add_epi32(*x, _mm256_madd_epi16(pairs, ones));
            }
        }
        let sum = acc
            .iter()
            .fold(_mm256_setzero_si256(), |s, x| _mm256_add_epi32(s, *x));
        std::hint::black_box(sum);
        (iters * ACC * 32) as u64
    }

    /// 16 lanes × 2 flops per instruction.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fma512(iters: usize) -> u64 {
        let a = _mm512_set1_ps(0.999);
        let b = _mm512_set1_ps(1e-3);
        let mut acc = [_mm512_setzero_ps(); ACC];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm512_fmadd_ps(*x, a, b);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm512_setzero_ps(), |s, x| _mm512_add_ps(s, *x));
        std::hint::black_box(_mm512_reduce_add_ps(sum));
        (iters * ACC * 32) as u64
    }

    /// 8 lanes × 2 flops per instruction.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma256(iters: usize) -> u64 {
        let a = _mm256_set1_ps(0.999);
        let b = _mm256_set1_ps(1e-3);
        let mut acc = [_mm256_setzero_ps(); ACC];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_fmadd_ps(*x, a, b);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm256_setzero_ps(), |s, x| _mm256_add_ps(s, *x));
        std::hint::black_box(sum);
        (iters * ACC * 16) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loops_count_the_work_they_do() {
        let per_iter = |n: u64| n / 1000;
        let (i, f) = (int8_macs(1000), f32_flops(1000));
        // Whatever the CPU, the counts are whole rounds of the accumulators.
        assert_eq!(i % 1000, 0);
        assert_eq!(f % 1000, 0);
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            assert!(per_iter(i) >= (ACC * 32) as u64);
            assert!(per_iter(f) >= (ACC * 16) as u64);
        }
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            assert!(per_iter(i) >= (ACC * 16) as u64);
            assert!(per_iter(f) >= (ACC * 8) as u64);
        }
        let _ = per_iter;
    }

    /// A peak loop: it runs `iters` rounds and returns the MACs done.
    type Loop = unsafe fn(usize) -> u64;

    /// Every int8 loop this CPU can run, by name.
    fn int8_loops() -> Vec<(&'static str, Loop)> {
        let mut loops: Vec<(&'static str, Loop)> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            if has!("avx2") {
                loops.push(("maddubs", x86::maddubs));
            }
            if has!("avxvnni") {
                loops.push(("256-bit vpdpbusd", x86::vnni256));
            }
            if has!("avx512vnni") && has!("avx512f") {
                loops.push(("vpdpbusd", x86::vnni));
            }
        }
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            loops.push(("sdot", arm::sdot));
        }
        loops
    }

    /// A loop the compiler folded away would report more than any core can do. A loaded
    /// machine only lowers the figure, so this cannot fail from noise; the AVX2 loop once
    /// reported about 11,000.
    #[test]
    fn the_int8_loops_are_not_folded_away() {
        for (name, run) in int8_loops() {
            let t = std::time::Instant::now();
            // SAFETY: `int8_loops` lists only loops whose features this CPU has.
            let macs = unsafe { run(2_000_000) };
            let gmac_per_s = macs as f64 / t.elapsed().as_secs_f64() / 1e9;
            assert!(
                gmac_per_s < MAX_INT8_GMAC_PER_S_PER_THREAD,
                "{name} loop: {gmac_per_s:.0} GMAC/s"
            );
        }
    }
}
