//! Numbers as people read them.

/// Bytes in the most readable unit.
pub fn bytes(n: usize) -> String {
    let f = n as f64;
    if f >= 1073741824.0 {
        format!("{:.2} GiB", f / 1073741824.0)
    } else if f >= 1048576.0 {
        format!("{:.1} MiB", f / 1048576.0)
    } else if f >= 1024.0 {
        format!("{:.1} KiB", f / 1024.0)
    } else {
        format!("{n} B")
    }
}
