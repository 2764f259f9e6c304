//! Guided lessons: Markdown files under `lessons/` that walk the chapter with the live
//! app. The format is documented in `lessons/README.md`; adding a lesson is adding a file.

pub mod format;
pub mod parse;
pub mod progress;
pub mod quiz;

pub use format::*;
pub use parse::{parse, LessonError};

use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/lessons.rs"));

/// Where lessons come from.
#[derive(Debug, Clone)]
pub enum LessonSource {
    /// The lessons built into the binary.
    Shipped,
    /// Every `*.md` (but README.md) in this directory.
    Dir(PathBuf),
}

/// The raw files of a source, sorted by name: (name, text, or why it could not be read).
/// One unreadable file does not hide the others.
pub fn files(src: &LessonSource) -> anyhow::Result<Vec<(String, Result<String, String>)>> {
    use anyhow::Context;
    match src {
        LessonSource::Shipped => Ok(SHIPPED
            .iter()
            .map(|(n, t)| (n.to_string(), Ok(t.to_string())))
            .collect()),
        LessonSource::Dir(dir) => {
            let mut out = Vec::new();
            let rd = std::fs::read_dir(dir)
                .with_context(|| format!("reading lesson directory {}", dir.display()))?;
            for e in rd {
                let p = e
                    .with_context(|| format!("listing {}", dir.display()))?
                    .path();
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_default();
                if !name.ends_with(".md") || name == "README.md" {
                    continue;
                }
                let text =
                    crate::files::read_text(&p, crate::files::Kind::Lesson).map_err(|e| match e {
                        crate::files::FileError::NotUtf8 { line, .. } => format!(
                            "is not UTF-8 text (invalid byte on line {line}); save it as UTF-8"
                        ),
                        e => format!("cannot be read ({e})"),
                    });
                out.push((name, text));
            }
            out.sort();
            Ok(out)
        }
    }
}

/// Parses every lesson of a source; errors name `file:line` (with the directory for
/// files on disk, so an editor can jump there).
pub fn load(src: &LessonSource) -> anyhow::Result<(Vec<Lesson>, Vec<LessonError>)> {
    let mut lessons = Vec::new();
    let mut errors = Vec::new();
    for (name, text) in files(src)? {
        let shown = match src {
            LessonSource::Dir(d) => d.join(&name).display().to_string(),
            LessonSource::Shipped => format!("lessons/{name}"),
        };
        let text = match text {
            Ok(t) => t,
            Err(message) => {
                errors.push(LessonError {
                    file: shown,
                    line: 1,
                    message,
                });
                continue;
            }
        };
        match parse(&shown, &text) {
            Ok(mut l) => {
                l.file = name;
                lessons.push(l);
            }
            Err(e) => errors.extend(e),
        }
    }
    Ok((lessons, errors))
}

/// The source named by a `--dir` flag or `INFERLAB_LESSONS`, else the shipped lessons.
pub fn source(dir: Option<&Path>) -> LessonSource {
    match dir
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("INFERLAB_LESSONS").map(PathBuf::from))
    {
        Some(d) => LessonSource::Dir(d),
        None => LessonSource::Shipped,
    }
}
