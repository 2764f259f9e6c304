//! Numbers and token pieces as people read them.

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

/// `1234567` → `1,234,567`.
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A printable, fixed-width label for a token piece.
pub fn label(piece: &str, width: usize) -> String {
    let clean: String = piece
        .chars()
        .map(|c| match c {
            '\n' => '⏎',
            '\t' => '⇥',
            ' ' => '·',
            c if c.is_control() => '�',
            c => c,
        })
        .collect();
    let mut out: String = clean.chars().take(width).collect();
    while out.chars().count() < width {
        out.push(' ');
    }
    out
}

/// `s` cut to `width` characters, ending in `…` when it was cut.
pub fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    if width > 0 {
        out.push('…');
    }
    out
}
