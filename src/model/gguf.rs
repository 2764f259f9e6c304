//! Opening a GGUF file defensively. A model file is untrusted input: a truncated download,
//! a foreign file or a crafted one must give a clear error naming the file and the field,
//! never a panic, a wrapped size or a huge allocation.
//!
//! So the header is read here, once, through a buffer, with every count bounded by the
//! bytes that remain in the file and every size computed with checked arithmetic. The
//! result is candle's own `Content`, whose tensor reads then only see validated shapes.

use super::error::{Malformed, ModelError, Result};
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value, VersionedMagic};
use candle_core::quantized::GgmlDType;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Longest string a header may hold (a chat template is a few KB; a token a few bytes).
const MAX_STRING_BYTES: u64 = 1 << 20;
/// Most values all metadata arrays may hold together. A Llama-3 vocabulary with its
/// merges is ~400k strings; each parsed value costs ~32 bytes, so this bounds the
/// header's memory to a few hundred MB whatever the file declares.
const MAX_METADATA_VALUES: u64 = 4 << 20;
/// Arrays nest in the format; nothing we read nests more than once.
const MAX_DEPTH: usize = 4;
/// Most tensors a file may declare (a 512-layer Llama has ~4,600).
const MAX_TENSORS: u64 = 1 << 16;
/// ggml's own limit on a tensor's rank.
const MAX_DIMS: u32 = 4;
/// Largest `general.alignment` accepted; it must also be a power of two, as in ggml.
const MAX_ALIGNMENT: u64 = 1 << 20;

/// Quant types our loader accepts. Anything else is refused up front.
pub fn supported_dtype(d: GgmlDType) -> bool {
    use GgmlDType::*;
    matches!(
        d,
        F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2K | Q3K | Q4K | Q5K | Q6K
    )
}

/// Bytes a tensor of `elems` elements takes in `dtype`, or why that is not a valid size.
pub fn tensor_bytes(elems: u64, dtype: GgmlDType) -> R<u64> {
    let block = dtype.block_size() as u64;
    if !elems.is_multiple_of(block) {
        return Err(Malformed(format!(
            "{elems} elements are not a whole number of {dtype:?} blocks of {block}"
        )));
    }
    (elems / block)
        .checked_mul(dtype.type_size() as u64)
        .ok_or_else(|| {
            Malformed(format!(
                "{elems} elements of {dtype:?} overflow a 64-bit size"
            ))
        })
}

/// Reads the header and checks every tensor's bytes lie inside the file. Returns the
/// header and the open file, positioned anywhere (tensor reads seek).
pub fn open(path: &Path) -> Result<(Content, File)> {
    let (file, len) = crate::files::open(path, crate::files::Kind::Model)?;
    let corrupt = |reason: Malformed| ModelError::CorruptFile {
        path: path.to_path_buf(),
        reason,
    };
    let mut r = Header {
        inner: BufReader::with_capacity(1 << 16, file),
        len,
        pos: 0,
        values: 0,
    };
    let ct = r.content().map_err(corrupt)?;
    for (name, info) in &ct.tensor_infos {
        if !supported_dtype(info.ggml_dtype) {
            return Err(ModelError::UnsupportedQuant {
                tensor: name.clone(),
                dtype: format!("{:?}", info.ggml_dtype),
            });
        }
    }
    let mut file = r.inner.into_inner();
    file.seek(SeekFrom::Start(0))
        .map_err(|e| corrupt(Malformed(e.to_string())))?;
    Ok((ct, file))
}

/// A bounded, buffered reader over the header. Errors are plain text; `open` adds the path.
struct Header {
    inner: BufReader<File>,
    len: u64,
    pos: u64,
    /// Metadata values read so far, against `MAX_METADATA_VALUES`.
    values: u64,
}

type R<T> = std::result::Result<T, Malformed>;

impl Header {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn bytes<const N: usize>(&mut self) -> R<[u8; N]> {
        let mut b = [0u8; N];
        self.inner.read_exact(&mut b).map_err(|_| {
            format!(
                "truncated: the header ends early at byte {} of {}",
                self.pos, self.len
            )
        })?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> R<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> R<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    /// A count that each item of which takes at least `min_item` bytes of what remains.
    fn count(&mut self, what: &str, min_item: u64, max: u64) -> R<u64> {
        let n = self.u64()?;
        if n > max {
            return Err(Malformed(format!("{what}: {n} exceeds the limit of {max}")));
        }
        if n.saturating_mul(min_item) > self.remaining() {
            return Err(Malformed(format!(
                "{what}: {n} cannot fit in the {} bytes left in the file",
                self.remaining()
            )));
        }
        Ok(n)
    }

    /// A string; `what` and `index` name it if it is not UTF-8 (a token that is not text
    /// would be silently replaced by U+FFFD and become another token's twin).
    fn string(&mut self, what: &str, index: Option<u64>, strict: bool) -> R<String> {
        let n = self.count(what, 1, MAX_STRING_BYTES)?;
        let mut v = vec![0u8; n as usize];
        self.inner
            .read_exact(&mut v)
            .map_err(|_| format!("truncated inside {what}"))?;
        self.pos += n;
        // Some writers NUL-terminate strings; the format says they should not.
        while v.last() == Some(&0) {
            v.pop();
        }
        // Only token text must be exact; a name or a note in another encoding is shown
        // with U+FFFD, as before.
        if !strict {
            return Ok(String::from_utf8_lossy(&v).into_owned());
        }
        String::from_utf8(v).map_err(|e| -> Malformed {
            let at = match index {
                Some(i) => format!("{what}[{i}]"),
                None => what.to_string(),
            };
            format!(
                "{at} is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )
            .into()
        })
    }

    fn value(&mut self, key: &str, ty: u32, depth: usize, index: Option<u64>) -> R<Value> {
        self.values += 1;
        if self.values > MAX_METADATA_VALUES {
            return Err(Malformed(format!(
                "metadata holds more than {MAX_METADATA_VALUES} values (at `{key}`)"
            )));
        }
        Ok(match ty {
            0 => Value::U8(self.bytes::<1>()?[0]),
            1 => Value::I8(self.bytes::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.bytes()?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(self.u32()? as i32),
            6 => Value::F32(f32::from_le_bytes(self.bytes()?)),
            7 => match self.bytes::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(Malformed(format!("`{key}`: {b} is not a boolean"))),
            },
            8 => Value::String(self.string(
                &format!("`{key}`"),
                index,
                key.starts_with("tokenizer.ggml."),
            )?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(Malformed(format!(
                        "`{key}`: arrays nested deeper than {MAX_DEPTH}"
                    )));
                }
                let ety = self.u32()?;
                let min = match ety {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    _ => {
                        return Err(Malformed(format!(
                            "`{key}`: unknown array element type {ety}"
                        )))
                    }
                };
                let left = MAX_METADATA_VALUES - self.values;
                let n = self.count(&format!("array `{key}` length"), min, left)?;
                let mut vs = Vec::with_capacity(n as usize);
                for i in 0..n {
                    vs.push(self.value(key, ety, depth + 1, Some(i))?);
                }
                Value::Array(vs)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_le_bytes(self.bytes()?)),
            _ => return Err(Malformed(format!("`{key}`: unknown value type {ty}"))),
        })
    }

    fn content(&mut self) -> R<Content> {
        let magic = self.bytes::<4>()?;
        if &magic != b"GGUF" {
            return Err(Malformed("no GGUF magic at the start".into()));
        }
        let magic = match self.u32()? {
            2 => VersionedMagic::GgufV2,
            3 => VersionedMagic::GgufV3,
            v => {
                return Err(Malformed(format!(
                    "GGUF version {v} (inferlab reads versions 2 and 3)"
                )))
            }
        };
        // Minimum sizes: a tensor info is a name, a rank, a type and an offset; a
        // metadata entry is a key, a type and at least one byte of value.
        let n_tensors = self.count("tensor count", 8 + 4 + 4 + 8, MAX_TENSORS)?;
        let n_kv = self.count("metadata count", 8 + 4 + 1, MAX_METADATA_VALUES)?;
        let mut metadata = HashMap::new();
        for _ in 0..n_kv {
            let key = self.string("a metadata key", None, true)?;
            let ty = self.u32()?;
            let v = self.value(&key, ty, 0, None)?;
            // The format has no rule for a repeated key; a second `block_count` must not
            // silently shrink the model.
            if metadata.insert(key.clone(), v).is_some() {
                return Err(Malformed(format!("metadata key `{key}` appears twice")));
            }
        }
        let mut infos = Vec::new();
        for _ in 0..n_tensors {
            infos.push(self.tensor_info()?);
        }
        let alignment = alignment(&metadata)?;
        let data_start = self
            .pos
            .checked_next_multiple_of(alignment)
            .ok_or("the tensor data offset overflows")?;
        let tensor_infos = self.place_tensors(infos, data_start, alignment)?;
        Ok(Content {
            magic,
            metadata,
            tensor_infos,
            tensor_data_offset: data_start,
        })
    }

    /// The tensors by name, each checked to lie inside the file. Each tensor's bytes
    /// start where the one before ended, or later: overlapping ranges would let a small
    /// file declare a model many times its size.
    fn place_tensors(
        &self,
        infos: Vec<(String, TensorInfo)>,
        data_start: u64,
        alignment: u64,
    ) -> R<HashMap<String, TensorInfo>> {
        let mut tensor_infos = HashMap::new();
        let mut end_of_previous: Option<(String, u64)> = None;
        for (name, info) in infos {
            let end = self.check_extent(&name, &info, data_start, alignment)?;
            if let Some((prev, prev_end)) = &end_of_previous {
                if info.offset < *prev_end {
                    return Err(Malformed(format!(
                        "tensor `{name}` starts at data offset {} inside the bytes of `{prev}` (which end at {prev_end}): tensor data must not overlap and must be in order",
                        info.offset
                    )));
                }
            }
            end_of_previous = Some((name.clone(), end - data_start));
            if tensor_infos.insert(name.clone(), info).is_some() {
                return Err(Malformed(format!("tensor `{name}` is declared twice")));
            }
        }
        Ok(tensor_infos)
    }

    fn tensor_info(&mut self) -> R<(String, TensorInfo)> {
        let name = self.string("a tensor name", None, true)?;
        let rank = self.u32()?;
        if rank == 0 || rank > MAX_DIMS {
            return Err(Malformed(format!(
                "tensor `{name}` has {rank} dimensions (1 to {MAX_DIMS} allowed)"
            )));
        }
        let mut dims = Vec::with_capacity(rank as usize);
        for _ in 0..rank {
            dims.push(self.u64()?);
        }
        let ty = self.u32()?;
        let dtype =
            dtype_from_id(ty).ok_or_else(|| format!("tensor `{name}` has unknown type id {ty}"))?;
        let offset = self.u64()?;
        // Checked: dims like (2^59 + 64, 32) wrap to a small product in plain arithmetic.
        dims.iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .filter(|&e| e > 0 && usize::try_from(e).is_ok())
            .ok_or_else(|| format!("tensor `{name}` has dimensions {dims:?}: no valid size"))?;
        // GGUF lists the innermost dimension first; candle's shapes are outermost first.
        let shape: Vec<usize> = dims.iter().rev().map(|&d| d as usize).collect();
        Ok((
            name,
            TensorInfo {
                ggml_dtype: dtype,
                shape: shape.into(),
                offset,
            },
        ))
    }

    /// Checks a tensor's bytes lie inside the file; returns where they end.
    fn check_extent(&self, name: &str, t: &TensorInfo, start: u64, align: u64) -> R<u64> {
        let elems = t.shape.dims().iter().product::<usize>() as u64;
        let bytes =
            tensor_bytes(elems, t.ggml_dtype).map_err(|e| format!("tensor `{name}`: {e}"))?;
        if !t.offset.is_multiple_of(align) {
            return Err(Malformed(format!(
                "tensor `{name}` starts at offset {} which is not a multiple of the alignment {align}",
                t.offset
            )));
        }
        let end = start
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(bytes))
            .ok_or_else(|| format!("tensor `{name}`: its offset and size overflow"))?;
        if end > self.len {
            return Err(Malformed(format!(
                "truncated: tensor `{name}` ends at byte {end} but the file has {} bytes",
                self.len
            )));
        }
        Ok(end)
    }
}

/// ggml's type ids (ggml.h), for the types candle knows.
fn dtype_from_id(id: u32) -> Option<GgmlDType> {
    use GgmlDType::*;
    Some(match id {
        0 => F32,
        1 => F16,
        2 => Q4_0,
        3 => Q4_1,
        6 => Q5_0,
        7 => Q5_1,
        8 => Q8_0,
        9 => Q8_1,
        10 => Q2K,
        11 => Q3K,
        12 => Q4K,
        13 => Q5K,
        14 => Q6K,
        15 => Q8K,
        30 => BF16,
        _ => return None,
    })
}

/// `general.alignment`: absent means 32; present it must be a power of two, as in ggml.
fn alignment(md: &HashMap<String, Value>) -> R<u64> {
    let v = match md.get("general.alignment") {
        None => return Ok(32),
        Some(Value::U8(v)) => *v as u64,
        Some(Value::U16(v)) => *v as u64,
        Some(Value::U32(v)) => *v as u64,
        Some(Value::U64(v)) => *v,
        Some(Value::I32(v)) if *v > 0 => *v as u64,
        Some(other) => {
            return Err(Malformed(format!(
                "general.alignment = {other:?} is not a size"
            )))
        }
    };
    if !v.is_power_of_two() || v > MAX_ALIGNMENT {
        return Err(Malformed(format!(
            "general.alignment = {v}: it must be a power of two up to {MAX_ALIGNMENT}"
        )));
    }
    Ok(v)
}
