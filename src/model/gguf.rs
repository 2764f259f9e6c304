//! Opening a GGUF file defensively: a truncated download or a foreign file must give a
//! clear error naming the file, never a panic deep inside a tensor read.

use super::error::{ModelError, Result};
use candle_core::quantized::{gguf_file, GgmlDType};
use std::fs::File;
use std::path::Path;

/// Quant types our loader accepts. Anything else is refused up front.
pub fn supported_dtype(d: GgmlDType) -> bool {
    use GgmlDType::*;
    matches!(
        d,
        F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2K | Q3K | Q4K | Q5K | Q6K
    )
}

/// Reads the header and checks every tensor's bytes lie inside the file.
pub fn open(path: &Path) -> Result<(gguf_file::Content, File)> {
    if !path.exists() {
        return Err(ModelError::NotFound(path.to_path_buf()));
    }
    let corrupt = |reason: String| ModelError::CorruptFile {
        path: path.to_path_buf(),
        reason,
    };
    let mut file = File::open(path).map_err(|e| corrupt(e.to_string()))?;
    let len = file.metadata().map_err(|e| corrupt(e.to_string()))?.len();
    let ct = gguf_file::Content::read(&mut file).map_err(|e| corrupt(format!("header: {e}")))?;
    for (name, info) in &ct.tensor_infos {
        if !supported_dtype(info.ggml_dtype) {
            return Err(ModelError::UnsupportedQuant {
                tensor: name.clone(),
                dtype: format!("{:?}", info.ggml_dtype),
            });
        }
        let elems = info.shape.elem_count();
        let bytes = elems / info.ggml_dtype.block_size() * info.ggml_dtype.type_size();
        let end = ct.tensor_data_offset + info.offset + bytes as u64;
        if end > len {
            return Err(corrupt(format!(
                "truncated: tensor `{name}` ends at byte {end} but the file has {len} bytes"
            )));
        }
    }
    Ok((ct, file))
}
