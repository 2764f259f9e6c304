//! Embeds every `lessons/*.md` in the binary, so adding a lesson means adding a file.

use std::fmt::Write;
use std::path::Path;

fn main() {
    // Read when the script runs, not baked in when it compiles (`env!`): cargo reuses a
    // compiled build script across checkouts that share a target directory, and one that
    // looked in another checkout's (since deleted) folder shipped no lessons at all.
    let root = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&root).join("lessons");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading the lessons in {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "md")
                && p.file_name().is_some_and(|n| n != "README.md")
        })
        .collect();
    assert!(!files.is_empty(), "no lessons in {}", dir.display());
    files.sort();
    let mut out = String::from(
        "/// Shipped lessons: (file name, text).\npub const SHIPPED: &[(&str, &str)] = &[\n",
    );
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f.file_name().unwrap().to_string_lossy();
        writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            f.display().to_string()
        )
        .unwrap();
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("lessons.rs");
    std::fs::write(dest, out).unwrap();
}
