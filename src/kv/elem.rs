//! The cache's element type: how many bytes each cached key and value number takes.
//!
//! f32 keeps exactly what the model computed. f16 halves the bytes and rounds each number
//! to 11 significant bits. int8 stores each row (one token, one KV head) as 8-bit integers
//! times one f32 scale, the row's largest magnitude over 127: a quarter of the bytes plus
//! the scale, and an error of at most half a step per number. Every store holds its rows
//! in a [`RowBuf`] and lends them as [`RowData`]; attention decodes a row as it reads it.

use half::f16;
use half::slice::HalfFloatSliceExt;
use serde::{Deserialize, Serialize};

/// What each cached K and V number is stored as.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
#[derive(strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum KvElem {
    /// 4 bytes: exactly what the model computed.
    #[default]
    F32,
    /// 2 bytes: half precision.
    F16,
    /// 1 byte, plus one f32 scale per token and KV head.
    Int8,
}

impl KvElem {
    /// Every element type, widest first.
    pub const ALL: [KvElem; 3] = [KvElem::F32, KvElem::F16, KvElem::Int8];

    /// Bytes one number takes (int8's rows carry a scale beside them).
    pub fn number_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 => 2,
            Self::Int8 => 1,
        }
    }

    /// The tensor element type that holds it on the batched route, where there is one
    /// (int8 needs a scale per row, which a plain tensor does not carry).
    pub fn tensor_dtype(self) -> Option<candle_core::DType> {
        match self {
            Self::F32 => Some(candle_core::DType::F32),
            Self::F16 => Some(candle_core::DType::F16),
            Self::Int8 => None,
        }
    }

    /// Bytes of the scale each row carries: int8's f32 step; none for the float types.
    pub fn scale_bytes(self) -> usize {
        match self {
            Self::Int8 => std::mem::size_of::<f32>(),
            Self::F32 | Self::F16 => 0,
        }
    }

    /// Bytes one row of `d` numbers (one token of one KV head, K or V) takes: the
    /// numbers, and int8's scale; `None` when that overflows (a shape from a file).
    pub fn checked_row_bytes(self, d: usize) -> Option<usize> {
        d.checked_mul(self.number_bytes())?
            .checked_add(self.scale_bytes())
    }

    /// [`Self::checked_row_bytes`] for a model's head size, which loading has checked.
    pub fn row_bytes(self, d: usize) -> usize {
        self.checked_row_bytes(d)
            .expect("a loaded model's head size is far below usize::MAX")
    }

    /// The next type in [`KvElem::ALL`], round: what the app's key steps through.
    pub fn next(self) -> Self {
        match self {
            Self::F32 => Self::F16,
            Self::F16 => Self::Int8,
            Self::Int8 => Self::F32,
        }
    }

    /// The name the app, the benchmarks, the lessons and the command line use.
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Int8 => "int8",
        }
    }
}

impl std::fmt::Display for KvElem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Rows of `d` numbers, stored as one element type. Offsets are in numbers (a row at
/// `at` is `at..at + d`, `at` a multiple of `d`), the same for every type, so the
/// layouts in [`super::RowLayout`] hold for all of them.
pub enum RowBuf {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Int8 {
        q: Vec<i8>,
        /// One per row: row `at / d`'s step.
        scale: Vec<f32>,
        d: usize,
    },
}

impl RowBuf {
    /// `rows` rows of `d` zeros.
    pub fn zeros(elem: KvElem, rows: usize, d: usize) -> Self {
        match elem {
            KvElem::F32 => Self::F32(vec![0.0; rows * d]),
            KvElem::F16 => Self::F16(vec![f16::ZERO; rows * d]),
            KvElem::Int8 => Self::Int8 {
                q: vec![0; rows * d],
                scale: vec![0.0; rows],
                d,
            },
        }
    }

    /// Stores `row` (any multiple of `d` numbers: consecutive rows) at offset `at`,
    /// rounded to this type.
    pub fn put(&mut self, at: usize, row: &[f32]) {
        match self {
            Self::F32(b) => b[at..][..row.len()].copy_from_slice(row),
            Self::F16(b) => b[at..][..row.len()].convert_from_f32_slice(row),
            Self::Int8 { q, scale, d } => {
                for (i, r) in row.chunks_exact(*d).enumerate() {
                    let at = at + i * *d;
                    scale[at / *d] = quantize(r, &mut q[at..][..*d]);
                }
            }
        }
    }

    /// Copies the numbers `from` (whole rows) to offset `to`, as stored: no rounding again.
    pub fn copy_within(&mut self, from: std::ops::Range<usize>, to: usize) {
        match self {
            Self::F32(b) => b.copy_within(from, to),
            Self::F16(b) => b.copy_within(from, to),
            Self::Int8 { q, scale, d } => {
                let rows = (from.start / *d)..(from.end / *d);
                scale.copy_within(rows, to / *d);
                q.copy_within(from, to);
            }
        }
    }

    /// The rows, lent for reading.
    pub fn view(&self) -> RowData<'_> {
        match self {
            Self::F32(b) => RowData::F32(b),
            Self::F16(b) => RowData::F16(b),
            Self::Int8 { q, scale, d } => RowData::Int8 { q, scale, d: *d },
        }
    }
}

/// Rows of a [`RowBuf`], lent in place.
#[derive(Clone, Copy)]
pub enum RowData<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Int8 {
        q: &'a [i8],
        scale: &'a [f32],
        d: usize,
    },
}

impl<'a> RowData<'a> {
    /// The `buf.len()` numbers at offset `at`: in place when stored as f32, otherwise
    /// decoded into `buf` (a row of int8 must start at a row boundary).
    #[inline(always)]
    pub fn row<'s>(&'s self, at: usize, buf: &'s mut [f32]) -> &'s [f32] {
        let n = buf.len();
        match self {
            Self::F32(b) => &b[at..][..n],
            Self::F16(b) => {
                b[at..][..n].convert_to_f32_slice(buf);
                buf
            }
            Self::Int8 { q, scale, d } => {
                let s = scale[at / d];
                for (o, &x) in buf.iter_mut().zip(&q[at..][..n]) {
                    *o = x as f32 * s;
                }
                buf
            }
        }
    }

    /// The stored numbers when they are f32 (the kernels that read f32 in place).
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match self {
            Self::F32(b) => Some(b),
            _ => None,
        }
    }

    /// Asks the CPU to start loading the row of `n` numbers at `at`.
    #[inline(always)]
    pub fn prefetch(&self, at: usize, n: usize) {
        match self {
            Self::F32(b) => crate::kernels::prefetch(&b[at..][..n]),
            Self::F16(b) => crate::kernels::prefetch(&b[at..][..n]),
            Self::Int8 { q, .. } => crate::kernels::prefetch(&q[at..][..n]),
        }
    }
}

/// The largest int8 a row stores: its largest magnitude becomes ±127 (not −128, so the
/// range is symmetric and zero stays exact).
pub const INT8_MAX: i8 = 127;

/// Rounds `row` to int8 steps of its largest magnitude over [`INT8_MAX`] into `out`;
/// returns the step. A row of zeros keeps step 0 (and decodes to zeros).
fn quantize(row: &[f32], out: &mut [i8]) -> f32 {
    let top = f32::from(INT8_MAX);
    let max = row.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let step = max / top;
    let inv = if step > 0.0 { 1.0 / step } else { 0.0 };
    for (o, &x) in out.iter_mut().zip(row) {
        *o = (x * inv).round().clamp(-top, top) as i8;
    }
    step
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::pseudo_random;

    /// Writes rows through each type and reads them back: f32 exact, f16 within its
    /// rounding (2⁻¹¹ relative), int8 within half a step of the row's scale.
    #[test]
    fn every_type_round_trips_within_its_rounding() {
        let d = 64;
        let x: Vec<f32> = pseudo_random(4 * d, 7).iter().map(|v| v * 3.0).collect();
        for elem in KvElem::ALL {
            let mut b = RowBuf::zeros(elem, 6, d);
            b.put(2 * d, &x);
            let mut buf = vec![0.0; d];
            for r in 0..4 {
                let want = &x[r * d..][..d];
                let step = want.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
                let got = b.view().row((2 + r) * d, &mut buf).to_vec();
                for (g, w) in got.iter().zip(want) {
                    let bound = match elem {
                        KvElem::F32 => 0.0,
                        KvElem::F16 => w.abs() / 2048.0,
                        KvElem::Int8 => step / 2.0 + 1e-6,
                    };
                    assert!((g - w).abs() <= bound, "{elem}: {g} vs {w}");
                }
            }
        }
    }

    /// Copying a page moves the stored numbers and, for int8, the scales with them.
    #[test]
    fn copies_carry_their_scales() {
        let d = 8;
        let x = pseudo_random(2 * d, 3);
        let mut b = RowBuf::zeros(KvElem::Int8, 4, d);
        b.put(0, &x);
        b.copy_within(0..2 * d, 2 * d);
        let (mut a, mut c) = (vec![0.0; d], vec![0.0; d]);
        for r in 0..2 {
            let v = b.view();
            assert_eq!(v.row(r * d, &mut a), v.row((r + 2) * d, &mut c));
        }
        assert_eq!(KvElem::Int8.row_bytes(64), 68);
    }
}
