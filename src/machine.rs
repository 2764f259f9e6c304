//! This machine's limits, measured in about a second: memory read bandwidth (what bounds
//! a decode step) and the compute peaks of the instruction mixes our kernels use (what
//! bounds a batched step). `bench machine` prints them, the other benchmarks and the
//! traffic pane say how close they come to them. Cached per CPU in the data directory.

use crate::kernels::q8_0::BatchedQ8;

/// Why this machine's measurement could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("creating {}: {err}", .path.display())]
    CreateDir {
        path: std::path::PathBuf,
        err: std::io::Error,
    },
    #[error("saving the machine's measurement: {0}")]
    Save(#[from] crate::files::FileError),
    #[error("writing the machine's measurement as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

type Result<T> = std::result::Result<T, MachineError>;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Instant;

/// Bytes read per bandwidth pass: far beyond any cache, small enough for a laptop.
const READ_BYTES: usize = 512 << 20;

/// What was measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    /// The CPU's name, as the OS reports it (the cache key).
    pub cpu: String,
    pub threads: usize,
    /// Memory read bandwidth with every thread, and with one.
    pub read_gb_per_s: f64,
    pub read_gb_per_s_one_thread: f64,
    /// The int8 multiply-accumulates our kernel uses (`vpdpbusd`; on AVX2 alone `maddubs`
    /// with the kernel's sign and widening steps; `sdot` on arm64) at full rate in
    /// registers, all threads: the ceiling of any int8 kernel here.
    pub int8_gmac_per_s: f64,
    /// f32 fused multiply-adds at full rate in registers, all threads.
    pub f32_gflop_per_s: f64,
    /// Our Q8_0 kernel itself on cache-resident data with 32 activation rows, all threads.
    pub q8_kernel_gmac_per_s: f64,
    /// The SIMD features our kernels use that this CPU has.
    pub features: Vec<String>,
    /// When it was measured, seconds since the Unix epoch (absent in caches and
    /// recordings written before it was kept).
    #[serde(default)]
    pub measured_at_unix_s: Option<u64>,
}

/// The CPU's name from `/proc/cpuinfo` (or the architecture where there is none).
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The SIMD features our kernels can use, present on this CPU.
pub fn features() -> Vec<String> {
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let have = [
            ("avx2", std::is_x86_feature_detected!("avx2")),
            ("fma", std::is_x86_feature_detected!("fma")),
            ("avx512f", std::is_x86_feature_detected!("avx512f")),
            ("avx512bw", std::is_x86_feature_detected!("avx512bw")),
            ("avx512vnni", std::is_x86_feature_detected!("avx512vnni")),
            ("avxvnni", std::is_x86_feature_detected!("avxvnni")),
            ("f16c", std::is_x86_feature_detected!("f16c")),
        ];
        out.extend(have.iter().filter(|h| h.1).map(|h| h.0.to_string()));
    }
    #[cfg(target_arch = "aarch64")]
    {
        out.push("neon".to_string());
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            out.push("dotprod".to_string());
        }
    }
    out
}

/// Said under the benchmarks that divide by these limits, with how old they are: they
/// come from a cache that a measurement on a busy machine would leave too low until
/// measured again.
pub fn cached_note(age_s: Option<u64>) -> String {
    format!(
        "(machine limits measured {} by `inferlab bench machine`; \
         `inferlab bench machine --fresh` measures them again on a quiet machine)\n",
        when(age_s)
    )
}

/// "2 h ago", or "at an unknown time" for a measurement that kept no date.
fn when(age_s: Option<u64>) -> String {
    age_s.map_or("at an unknown time".to_string(), |a| {
        format!("{} ago", age(a))
    })
}

/// A duration as people say it: seconds, minutes, hours or days, rounded down.
pub fn age(s: u64) -> String {
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Where the measurement is kept: `$INFERLAB_DATA_DIR/machine.json`, else the user data dir.
pub fn cache_path() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("INFERLAB_DATA_DIR") {
        return Some(PathBuf::from(d).join("machine.json"));
    }
    dirs::data_dir().map(|d| d.join("inferlab").join("machine.json"))
}

/// The cached measurement, if it was made on this CPU with as many threads: a name like
/// "AMD EPYC" covers machines of any size, and the figures are for all threads.
pub fn cached() -> Option<Machine> {
    let text = crate::files::read_text(&cache_path()?, crate::files::Kind::Machine).ok()?;
    let mut m: Machine = serde_json::from_str(&text).ok()?;
    // The file is read back into tables and the header: no escape reaches the terminal.
    m.cpu = crate::files::printable(&m.cpu);
    for f in &mut m.features {
        *f = crate::files::printable(f);
    }
    m.fits_here().then_some(m)
}

/// Measures this machine (a few seconds) and caches the result.
pub fn measure() -> Result<Machine> {
    let buf: Vec<u64> = (0..READ_BYTES / 8).map(|i| i as u64).collect();
    let m = Machine {
        cpu: cpu_name(),
        threads: rayon::current_num_threads(),
        read_gb_per_s: best_of(5, || read_gb_per_s(&buf, true)),
        read_gb_per_s_one_thread: best_of(3, || read_gb_per_s(&buf, false)),
        int8_gmac_per_s: best_of(5, || on_every_thread(crate::kernels::peak::int8_macs)),
        f32_gflop_per_s: best_of(5, || on_every_thread(crate::kernels::peak::f32_flops)),
        q8_kernel_gmac_per_s: best_of(5, q8_kernel_gmac_per_s),
        features: features(),
        measured_at_unix_s: Some(now_unix_s()),
    };
    if let Some(p) = cache_path() {
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|err| MachineError::CreateDir {
                path: dir.to_path_buf(),
                err,
            })?;
        }
        let text = serde_json::to_string_pretty(&m)?;
        // Replaced whole, never through a link: a planted `machine.json` link must not
        // turn a re-measure into overwriting the file it points to.
        let rules = crate::files::WriteRules {
            force: true,
            inputs: &[],
        };
        crate::files::write(&p, text.as_bytes(), rules)?;
    }
    Ok(m)
}

/// The cached figures, or a fresh measurement.
pub fn get() -> Result<Machine> {
    match cached() {
        Some(m) => Ok(m),
        None => measure(),
    }
}

impl Machine {
    /// Whether it was measured on this CPU with as many threads, and its figures are
    /// numbers a measurement can give.
    pub fn fits_here(&self) -> bool {
        self.cpu == cpu_name()
            && self.threads == rayon::current_num_threads()
            && self.is_plausible()
    }

    /// Seconds since it was measured, when known.
    pub fn age_s(&self) -> Option<u64> {
        self.measured_at_unix_s
            .map(|t| now_unix_s().saturating_sub(t))
    }

    /// A table for people.
    pub fn table(&self) -> String {
        let when = when(self.age_s());
        format!(
            "{}\n{} threads · SIMD: {} · measured {when}\n\
             memory read bandwidth   {:>8.1} GB/s (all threads)  {:>8.1} GB/s (one thread)\n\
             int8 peak (in registers){:>8.1} GMAC/s   our Q8_0 kernel reaches {:.1} GMAC/s\n\
             f32 peak (in registers) {:>8.1} GFLOP/s\n\
             ridge point             {:>8.1} int8 MAC per byte read\n",
            self.cpu,
            self.threads,
            self.features.join(" "),
            self.read_gb_per_s,
            self.read_gb_per_s_one_thread,
            self.int8_gmac_per_s,
            self.q8_kernel_gmac_per_s,
            self.f32_gflop_per_s,
            self.ridge_macs_per_byte()
        )
    }

    /// Whether the figures are positive, finite numbers, with an int8 peak that its cores
    /// could reach (a recording's copy is untrusted; an older build's AVX2 loop was folded
    /// away by the compiler and cached an impossible peak).
    pub fn is_plausible(&self) -> bool {
        [
            self.read_gb_per_s,
            self.read_gb_per_s_one_thread,
            self.int8_gmac_per_s,
            self.f32_gflop_per_s,
            self.q8_kernel_gmac_per_s,
        ]
        .iter()
        .all(|x| x.is_finite() && *x > 0.0)
            && self.int8_gmac_per_s
                <= crate::kernels::peak::MAX_INT8_GMAC_PER_S_PER_THREAD * self.threads as f64
    }

    /// Arithmetic intensity where the int8 kernel stops being bandwidth-bound: compute
    /// peak ÷ read bandwidth, in MACs per byte.
    pub fn ridge_macs_per_byte(&self) -> f64 {
        self.int8_gmac_per_s / self.read_gb_per_s.max(f64::MIN_POSITIVE)
    }
}

fn best_of(n: usize, f: impl Fn() -> f64) -> f64 {
    (0..n).map(|_| f()).fold(0.0, f64::max)
}

/// Reads `buf` (far larger than the caches) once, summing it so nothing is optimized
/// away; `all`: split over every thread.
fn read_gb_per_s(buf: &[u64], all: bool) -> f64 {
    let sum_chunk = |c: &[u64]| -> u64 {
        // Eight independent lanes, so the loop is bound by loads, not by one add chain.
        let mut acc = [0u64; 8];
        for w in c.chunks_exact(8) {
            for (a, x) in acc.iter_mut().zip(w) {
                *a = a.wrapping_add(*x);
            }
        }
        acc.iter().fold(0, |a, x| a.wrapping_add(*x))
    };
    let t = Instant::now();
    let total = if all {
        buf.par_chunks(1 << 20)
            .map(sum_chunk)
            .reduce(|| 0, u64::wrapping_add)
    } else {
        sum_chunk(buf)
    };
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(total);
    std::mem::size_of_val(buf) as f64 / secs / 1e9
}

/// `work(iters)` on every thread at once; returns the work per second, in billions.
fn on_every_thread(work: fn(usize) -> u64) -> f64 {
    let iters = 2_000_000;
    let t = Instant::now();
    let done: u64 = rayon::broadcast(|_| work(iters)).into_iter().sum();
    done as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// Our Q8_0 kernel on a cache-resident matrix with 32 activation rows.
fn q8_kernel_gmac_per_s() -> f64 {
    let (n, k, m) = (512usize, 1024usize, 32usize);
    let blocks = n * k / 32;
    let mut data = Vec::with_capacity(blocks * 34);
    for b in 0..blocks {
        data.extend_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        data.extend((0..32).map(|i| ((b * 7 + i * 13) % 255) as u8));
    }
    let Ok(w) = BatchedQ8::for_this_cpu(&data, n, k) else {
        return 0.0;
    };
    let x: Vec<f32> = (0..m * k).map(|i| ((i % 17) as f32 - 8.0) * 0.1).collect();
    let reps = 20;
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(w.matmul(&x, m).ok());
    }
    (reps * n * k * m) as f64 / t.elapsed().as_secs_f64() / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    fn here() -> Machine {
        Machine {
            cpu: cpu_name(),
            threads: rayon::current_num_threads(),
            read_gb_per_s: 30.0,
            read_gb_per_s_one_thread: 20.0,
            int8_gmac_per_s: 400.0,
            f32_gflop_per_s: 200.0,
            q8_kernel_gmac_per_s: 150.0,
            features: vec![],
            measured_at_unix_s: Some(now_unix_s() - 7200),
        }
    }

    #[test]
    fn a_cache_is_used_only_on_the_same_cpu_with_as_many_threads() {
        assert!(here().fits_here());
        let more = Machine {
            threads: here().threads + 1,
            ..here()
        };
        assert!(!more.fits_here());
        let other = Machine {
            cpu: format!("{} (another)", cpu_name()),
            ..here()
        };
        assert!(!other.fits_here());
        let broken = Machine {
            int8_gmac_per_s: f64::NAN,
            ..here()
        };
        assert!(!broken.fits_here());
        // What the AVX2 peak loop measured before it stopped being folded away: such a
        // cache is measured again instead of dividing every kernel's speed by it.
        let folded = Machine {
            int8_gmac_per_s: 11_000.0 * here().threads as f64,
            ..here()
        };
        assert!(!folded.fits_here());
    }

    #[test]
    fn a_cache_written_before_the_date_was_kept_still_reads_and_says_so() {
        let mut v = serde_json::to_value(here()).unwrap();
        v.as_object_mut().unwrap().remove("measured_at_unix_s");
        let old: Machine = serde_json::from_value(v).unwrap();
        assert_eq!(old.age_s(), None);
        assert!(old.table().contains("measured at an unknown time"));
        assert!(cached_note(old.age_s()).contains("at an unknown time"));
    }

    #[test]
    fn the_age_is_said_in_the_unit_people_use() {
        let a = here().age_s().unwrap();
        assert!((7200..7300).contains(&a), "{a}");
        assert!(
            here().table().contains("measured 2 h ago"),
            "{}",
            here().table()
        );
        assert_eq!(age(59), "59 s");
        assert_eq!(age(600), "10 min");
        assert_eq!(age(3 * 86_400 + 5), "3 days");
        assert!(cached_note(Some(90)).contains("measured 90 s ago"));
    }
}
