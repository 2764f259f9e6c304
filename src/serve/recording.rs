//! Recordings: a session's step reports as JSON lines, so the same screens replay on
//! another machine without the model.
//!
//! Format, version 1: the first line is a [`Header`] object; every further line is one
//! [`StepReport`] as `serde_json` writes it (the struct's fields are its schema), with the
//! per-layer q/k/v/head-output vectors left empty since no screen draws them. Readers
//! refuse files whose header names a newer version.

use super::engine::{Command, Event};
use super::report::StepReport;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};

/// The version this build writes and the newest it reads.
pub const VERSION: u32 = 1;
/// The `format` field of every recording header.
pub const FORMAT: &str = "inferlab-recording";

/// The first line of a recording.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Header {
    pub format: String,
    pub version: u32,
    /// The inferlab version that wrote it.
    pub inferlab: String,
    /// The model file the session ran.
    pub model: String,
}

/// Why a recording could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an inferlab recording (its first line is not a recording header)")]
    NotARecording { path: PathBuf },
    #[error("{path} is recording format version {found}; this inferlab reads up to version {VERSION}: update inferlab to replay it")]
    TooNew { path: PathBuf, found: u32 },
    #[error("{path}:{line}: not a step report ({reason}); the file is corrupt or truncated")]
    BadLine {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("{path} holds no iterations")]
    Empty { path: PathBuf },
}

/// Writes step reports as they arrive.
pub struct Recorder {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
}

impl Recorder {
    /// Creates (or truncates) `path` and writes the header.
    pub fn create(path: &Path, model: &str) -> Result<Self, RecordingError> {
        let io = |source| RecordingError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::create(path).map_err(io)?;
        let mut r = Self {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        };
        let h = Header {
            format: FORMAT.into(),
            version: VERSION,
            inferlab: env!("CARGO_PKG_VERSION").into(),
            model: model.into(),
        };
        r.line(&serde_json::to_string(&h).expect("a header serializes"))?;
        Ok(r)
    }

    /// Appends one iteration, flushed so a crash loses at most the line being written.
    pub fn write(&mut self, r: &StepReport) -> Result<(), RecordingError> {
        let s = serde_json::to_string(&for_screens(r)).expect("a step report serializes");
        self.line(&s)
    }

    fn line(&mut self, s: &str) -> Result<(), RecordingError> {
        let path = self.path.clone();
        let io = |source| RecordingError::Io { path, source };
        writeln!(self.out, "{s}")
            .and_then(|_| self.out.flush())
            .map_err(io)
    }
}

/// The report without what no screen draws (the q, k, v and head-output vectors), which
/// is most of a prefill's bytes; scores and weights stay.
pub fn for_screens(r: &StepReport) -> StepReport {
    let mut r = r.clone();
    for c in &mut r.info.captures {
        c.q = Vec::new();
        c.k = Vec::new();
        c.v = Vec::new();
        c.head_out = Vec::new();
    }
    r
}

/// Reads a whole recording.
pub fn read(path: &Path) -> Result<(Header, Vec<StepReport>), RecordingError> {
    let io = |source| RecordingError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let mut lines = std::io::BufReader::new(f).lines();
    let first = match lines.next() {
        Some(l) => l.map_err(io)?,
        None => {
            return Err(RecordingError::NotARecording {
                path: path.to_path_buf(),
            })
        }
    };
    let header: Header = match serde_json::from_str::<Header>(&first) {
        Ok(h) if h.format == FORMAT => h,
        _ => {
            // A newer header may have changed shape; its version still tells us.
            let v: Option<u32> = serde_json::from_str::<serde_json::Value>(&first)
                .ok()
                .filter(|v| v["format"] == FORMAT)
                .and_then(|v| v["version"].as_u64())
                .map(|v| v as u32);
            return Err(match v {
                Some(found) if found > VERSION => RecordingError::TooNew {
                    path: path.to_path_buf(),
                    found,
                },
                _ => RecordingError::NotARecording {
                    path: path.to_path_buf(),
                },
            });
        }
    };
    if header.version > VERSION {
        return Err(RecordingError::TooNew {
            path: path.to_path_buf(),
            found: header.version,
        });
    }
    let mut reports = Vec::new();
    for (i, l) in lines.enumerate() {
        let l = l.map_err(io)?;
        if l.trim().is_empty() {
            continue;
        }
        let r: StepReport = serde_json::from_str(&l).map_err(|e| RecordingError::BadLine {
            path: path.to_path_buf(),
            line: i + 2,
            reason: e.to_string(),
        })?;
        reports.push(r);
    }
    if reports.is_empty() {
        return Err(RecordingError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok((header, reports))
}

/// A stand-in for the engine that plays a recording back: each `Step` sends the next
/// recorded iteration; settings are fixed by the recording.
pub fn spawn_player(
    header: Header,
    reports: Vec<StepReport>,
) -> (Sender<Command>, Receiver<Event>) {
    let (ctx, crx) = mpsc::channel::<Command>();
    let (etx, erx) = mpsc::channel();
    std::thread::Builder::new()
        .name("player".into())
        .spawn(move || {
            let n = reports.len();
            let _ = etx.send(Event::Ready {
                model: format!("{} (replay, {n} iterations)", header.model),
            });
            let mut next = reports.into_iter();
            while let Ok(c) = crx.recv() {
                let e = match c {
                    Command::Quit => break,
                    Command::Step => match next.next() {
                        Some(r) => Event::Report(Box::new(r)),
                        None => Event::Status("end of the recording: [ scrubs back".into()),
                    },
                    _ => Event::Status(
                        "a replay shows what was recorded; settings cannot change".into(),
                    ),
                };
                if etx.send(e).is_err() {
                    break;
                }
            }
        })
        .expect("spawning the player thread");
    (ctx, erx)
}
