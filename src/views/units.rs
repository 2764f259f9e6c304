//! Numbers and token pieces as people read them.

/// Bytes in the most readable decimal unit (kB, MB, GB: powers of 1,000), the unit the
/// lessons and the chapter use, so a figure reads the same in the text and on the pane.
pub fn bytes(n: usize) -> String {
    let f = n as f64;
    if f >= 1e9 {
        format!("{:.2} GB", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1} MB", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1} kB", f / 1e3)
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
