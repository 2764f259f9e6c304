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

/// `s` in rows of at most `width` characters, for a pane too narrow for the line: broken
/// at its ` · ` separators and before a bar legend's glyphs (`▓ ▒ ░`), each continuation
/// row indented two spaces, so a figure is moved to the next row rather than cut. Only a
/// single piece wider than a row is cut, with `…`.
pub fn wrap(s: &str, width: usize) -> Vec<String> {
    if s.chars().count() <= width {
        return vec![s.to_string()];
    }
    let mut rows: Vec<String> = Vec::new();
    for (i, part) in s.split(" · ").enumerate() {
        for (j, piece) in split_before_glyphs(part).into_iter().enumerate() {
            let joiner = match (i, j) {
                (0, 0) => "",
                (_, 0) => " · ",
                _ => " ",
            };
            match rows.last_mut() {
                Some(r)
                    if r.chars().count() + joiner.chars().count() + piece.chars().count()
                        <= width =>
                {
                    r.push_str(joiner);
                    r.push_str(piece);
                }
                Some(_) => rows.push(fit(&format!("  {piece}"), width)),
                None => rows.push(fit(piece, width)),
            }
        }
    }
    rows
}

/// `part` split before each ` ▓ `, ` ▒ ` and ` ░ ` (the space dropped, the glyph kept).
fn split_before_glyphs(part: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in part.match_indices([' ']) {
        let next = part[i + 1..].chars().next();
        if matches!(next, Some('▓' | '▒' | '░')) && i > start {
            out.push(&part[start..i]);
            start = i + 1;
        }
    }
    out.push(&part[start..]);
    out
}

#[cfg(test)]
mod wrap_tests {
    use super::wrap;

    #[test]
    fn a_long_line_breaks_at_its_separators_and_keeps_every_figure() {
        let s = "live step █ weights 142.9 MB ▓ KV read 1.8 MB ▒ KV write 1.8 MB ░ scores 6.9 MB";
        let rows = wrap(s, 40);
        assert_eq!(
            rows,
            [
                "live step █ weights 142.9 MB",
                "  ▓ KV read 1.8 MB ▒ KV write 1.8 MB",
                "  ░ scores 6.9 MB"
            ]
        );
        let rows = wrap("a · bb · ccc", 6);
        assert_eq!(rows, ["a · bb", "  ccc"]);
        assert_eq!(wrap("short", 80), ["short"]);
        assert!(wrap("abcdefghij", 4).iter().all(|r| r.chars().count() <= 4));
    }
}
