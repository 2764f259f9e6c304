//! Guided lessons: Markdown files under `lessons/` that walk the chapter with the live
//! app. The format is documented in `lessons/README.md`; adding a lesson is adding a file.

pub mod choices;
pub mod figures;
pub mod format;
pub mod keys;
pub mod live;
pub mod parse;
pub mod predict;
pub mod progress;
pub mod quiz;
pub mod server_predict;
pub mod tutor;

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

/// Why a lesson directory could not be listed.
#[derive(Debug, thiserror::Error)]
#[error("{what} {}: {err}", .dir.display())]
pub struct LessonDirError {
    what: &'static str,
    dir: PathBuf,
    err: std::io::Error,
}

/// One lesson file: its name, and its text or why it could not be read.
pub type LessonFile = (String, Result<String, crate::files::FileError>);

/// The raw files of a source, sorted by name: (name, text, or why it could not be read).
/// One unreadable file does not hide the others.
pub fn files(src: &LessonSource) -> Result<Vec<LessonFile>, LessonDirError> {
    let dir = match src {
        LessonSource::Shipped => {
            let shipped = SHIPPED
                .iter()
                .map(|(n, t)| (n.to_string(), Ok(t.to_string())));
            return Ok(shipped.collect());
        }
        LessonSource::Dir(dir) => dir,
    };
    let failed = |what| {
        move |err| LessonDirError {
            what,
            dir: dir.clone(),
            err,
        }
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(failed("reading lesson directory"))? {
        let p = e.map_err(failed("listing"))?.path();
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if !name.ends_with(".md") || name == "README.md" {
            continue;
        }
        out.push((
            name,
            crate::files::read_text(&p, crate::files::Kind::Lesson),
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// What a lesson file that could not be read is told.
fn unreadable(e: crate::files::FileError) -> String {
    match e {
        crate::files::FileError::NotUtf8 { line, .. } => {
            format!("is not UTF-8 text (invalid byte on line {line}); save it as UTF-8")
        }
        e => format!("cannot be read ({e})"),
    }
}

/// Most problems reported per file: a file with a million bad lines is one broken file,
/// not a million lines of output.
const MOST_ERRORS_PER_FILE: usize = 20;

/// Parses every lesson of a source; errors name `file:line` (with the directory for
/// files on disk, so an editor can jump there). Lesson files are untrusted text: control
/// characters (escape sequences, a carriage return that would overprint a line) become
/// `?` before parsing, and names are printed the same way.
pub fn load(src: &LessonSource) -> Result<(Vec<Lesson>, Vec<LessonError>), LessonDirError> {
    let mut lessons: Vec<Lesson> = Vec::new();
    let mut errors = Vec::new();
    for (name, text) in files(src)? {
        let shown = crate::files::printable(&match src {
            LessonSource::Dir(d) => d.join(&name).display().to_string(),
            LessonSource::Shipped => format!("lessons/{name}"),
        });
        let text = match text {
            Ok(t) => clean(&t),
            Err(e) => {
                errors.push(LessonError {
                    file: shown,
                    line: 1,
                    message: crate::files::printable(&unreadable(e)),
                });
                continue;
            }
        };
        match parse(&shown, &text) {
            Ok(mut l) => {
                l.file = name;
                // Two files with one id would share one progress entry.
                if let Some(other) = lessons.iter().find(|o| o.id() == l.id()) {
                    errors.push(LessonError {
                        file: shown,
                        line: 1,
                        message: format!(
                            "lesson id `{}` is also the id of {}: they would share one progress entry; rename one",
                            crate::files::printable(l.id()),
                            crate::files::printable(&other.file)
                        ),
                    });
                    continue;
                }
                lessons.push(l);
            }
            Err(mut e) => {
                if e.len() > MOST_ERRORS_PER_FILE {
                    let more = e.len() - MOST_ERRORS_PER_FILE;
                    e.truncate(MOST_ERRORS_PER_FILE);
                    e.push(LessonError {
                        file: shown.clone(),
                        line: e.last().map_or(1, |x| x.line),
                        message: format!("…and {more} more problems in this file"),
                    });
                }
                errors.extend(e.into_iter().map(|mut x| {
                    x.message = crate::files::printable(&x.message);
                    x
                }))
            }
        }
    }
    Ok((lessons, errors))
}

/// Lesson text with line ends made `\n` and every other control character but tab
/// replaced, so nothing in a lesson reaches the terminal as a control sequence.
fn clean(text: &str) -> String {
    text.replace("\r\n", "\n")
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                '?'
            } else {
                c
            }
        })
        .collect()
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
