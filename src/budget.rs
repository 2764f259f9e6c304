//! KV-cache budgeting for a model's attention shape: bytes per token, per request, and how
//! many requests fit in a device's memory next to the weights — for the model's own head
//! layout and for MHA and MQA of the same shape.

use crate::kv::KvElem;
use serde::{Deserialize, Serialize};

/// The attention shape of a published model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Shape {
    pub name: String,
    pub display: String,
    pub layers: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub context: usize,
    /// Parameters, billions (for the weights' footprint).
    pub params_b: f64,
}

/// Shapes shipped in assets/presets.json.
pub fn presets() -> Vec<Shape> {
    serde_json::from_str(include_str!("../assets/presets.json"))
        .expect("assets/presets.json is valid")
}

/// One layout's budget line.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub layout: String,
    pub kv_heads: usize,
    pub kv_bytes_per_token: u64,
    pub kv_bytes_per_request: u64,
    pub requests_that_fit: u64,
}

/// The whole answer.
#[derive(Debug, Clone, Serialize)]
pub struct Budget {
    pub model: String,
    pub memory_bytes: u64,
    pub weight_bytes: u64,
    pub seq_len: usize,
    pub kv_elem_bytes: usize,
    /// The element type when one was named (int8 rows carry a 4-byte scale each).
    pub kv_elem: Option<KvElem>,
    pub lines: Vec<Line>,
}

/// What one cached number takes: plain bytes per element, or one of inferlab's element
/// types (whose int8 rows carry a scale each).
#[derive(Debug, Clone, Copy)]
pub enum KvNumbers {
    Bytes(usize),
    Elem(KvElem),
}

impl KvNumbers {
    /// Bytes one row of `d` numbers takes, or `None` when that overflows.
    fn row_bytes(self, d: usize) -> Option<u64> {
        match self {
            Self::Bytes(b) => (d as u64).checked_mul(b as u64),
            Self::Elem(e) => e.checked_row_bytes(d).map(|b| b as u64),
        }
    }
}

/// Why a size or a budget could not be had.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    #[error("`{0}` is not a size (try 24GiB, 80GB, 512MiB)")]
    NotASize(String),
    #[error("unknown unit in `{0}`")]
    UnknownUnit(String),
    #[error("`{0}` is not a size of zero or more bytes")]
    Negative(String),
    #[error("`{0}` is more bytes than any device holds")]
    TooBig(String),
    #[error("{layers} layers × {heads} KV heads × {head_dim} dims × {elem_bytes} byte(s) × {seq_len} tokens overflows a 64-bit size")]
    Overflow {
        layers: usize,
        heads: usize,
        head_dim: usize,
        elem_bytes: usize,
        seq_len: usize,
    },
}

/// Parses sizes such as `24GiB`, `80GB`, `512MiB`, `1e9`.
pub fn parse_bytes(s: &str) -> Result<u64, BudgetError> {
    let t = s.trim();
    // The unit is the trailing letters: a number may hold an exponent (`1e30GB`).
    let split = t.trim_end_matches(|c: char| c.is_ascii_alphabetic()).len();
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| BudgetError::NotASize(s.to_string()))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" | "k" => 1024.0,
        "mib" | "m" => 1048576.0,
        "gib" | "g" => 1073741824.0,
        "tib" | "t" => 1099511627776.0,
        _ => return Err(BudgetError::UnknownUnit(s.to_string())),
    };
    if !n.is_finite() || n < 0.0 {
        return Err(BudgetError::Negative(s.to_string()));
    }
    // An exabyte is past any device; above 2^62 the float no longer converts exactly.
    let bytes = n * mult;
    if bytes > (1u64 << 62) as f64 {
        return Err(BudgetError::TooBig(s.to_string()));
    }
    Ok(bytes as u64)
}

/// Computes the budget. `weight_bytes` defaults to params × `weight_elem_bytes`. Sizes
/// come from the command line, so every product is checked: an overflow is an error,
/// never a wrapped, plausible-looking number.
pub fn compute(
    shape: &Shape,
    memory: u64,
    weight_bytes: u64,
    seq_len: usize,
    kv: KvNumbers,
) -> Result<Budget, BudgetError> {
    let kv_elem_bytes = match kv {
        KvNumbers::Bytes(b) => b,
        KvNumbers::Elem(e) => e.number_bytes(),
    };
    let layouts = [
        (
            format!("own ({} KV heads)", shape.n_kv_head),
            shape.n_kv_head,
        ),
        ("MHA".to_string(), shape.n_head),
        ("MQA".to_string(), 1),
    ];
    let free = memory.saturating_sub(weight_bytes);
    let lines = layouts
        .into_iter()
        .map(|(layout, heads)| {
            let per_token = [shape.layers, 2, heads]
                .iter()
                .try_fold(1u64, |a, &x| a.checked_mul(x as u64))
                .zip(kv.row_bytes(shape.head_dim))
                .and_then(|(a, row)| a.checked_mul(row));
            let per_request = per_token.and_then(|t| t.checked_mul(seq_len as u64));
            let (Some(per_token), Some(per_request)) = (per_token, per_request) else {
                return Err(BudgetError::Overflow {
                    layers: shape.layers,
                    heads,
                    head_dim: shape.head_dim,
                    elem_bytes: kv_elem_bytes,
                    seq_len,
                });
            };
            Ok(Line {
                layout,
                kv_heads: heads,
                kv_bytes_per_token: per_token,
                kv_bytes_per_request: per_request,
                requests_that_fit: free.checked_div(per_request).unwrap_or(0),
            })
        })
        .collect::<Result<_, BudgetError>>()?;
    Ok(Budget {
        model: shape.display.clone(),
        memory_bytes: memory,
        weight_bytes,
        seq_len,
        kv_elem_bytes,
        kv_elem: match kv {
            KvNumbers::Elem(e) => Some(e),
            KvNumbers::Bytes(_) => None,
        },
        lines,
    })
}

impl Budget {
    /// A table for people.
    pub fn table(&self) -> String {
        let gib = |b: u64| b as f64 / 1073741824.0;
        let elem = match self.kv_elem {
            Some(KvElem::Int8) => "int8, 1 byte + a 4-byte scale per row".to_string(),
            Some(e) => format!("{e}, {} bytes", self.kv_elem_bytes),
            None => format!("{} bytes", self.kv_elem_bytes),
        };
        let mut s = format!(
            "{}: memory {:.1} GiB, weights {:.2} GiB, requests of {} tokens, KV element {elem}\n{:<22} {:>8} {:>14} {:>16} {:>10}\n",
            self.model, gib(self.memory_bytes), gib(self.weight_bytes), self.seq_len,
            "layout", "KV heads", "KV B/token", "KV per request", "fit"
        );
        for l in &self.lines {
            s += &format!(
                "{:<22} {:>8} {:>14} {:>12.3} GiB {:>10}\n",
                l.layout,
                l.kv_heads,
                l.kv_bytes_per_token,
                gib(l.kv_bytes_per_request),
                l.requests_that_fit
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama2_7b_is_half_a_mebibyte_per_token_in_f16() {
        let p = presets();
        let l = p.iter().find(|s| s.name == "llama-2-7b").unwrap();
        let b = compute(
            l,
            parse_bytes("80GB").unwrap(),
            13_500_000_000,
            4096,
            KvNumbers::Bytes(2),
        )
        .unwrap();
        // 32 layers × 2 × 32 heads × 128 × 2 bytes = 524,288 bytes per token.
        assert_eq!(b.lines[0].kv_bytes_per_token, 524_288);
        assert_eq!(b.lines[0].kv_bytes_per_request, 2 * 1073741824);
        assert_eq!(
            b.lines[0].requests_that_fit,
            (80_000_000_000u64 - 13_500_000_000) / (2 * 1073741824)
        );
        // MQA of the same shape is 32× smaller.
        assert_eq!(b.lines[2].kv_bytes_per_token * 32, 524_288);
    }

    #[test]
    fn sizes_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("1.5GB").unwrap(), 1_500_000_000);
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3 parsecs").is_err());
        assert_eq!(parse_bytes("1e3MB").unwrap(), 1_000_000_000);
        assert!(parse_bytes("1e30GB")
            .unwrap_err()
            .to_string()
            .contains("more bytes than any device"));
    }
}
