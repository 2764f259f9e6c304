//! Recordings: a session's step reports as JSON lines, so the same screens replay on
//! another machine without the model.
//!
//! Format, version 2: the first line is a [`Header`] object; every further line is one
//! [`StepReport`] as `serde_json` writes it (the struct's fields are its schema), with the
//! per-layer q/k/v/head-output vectors left empty since no screen draws them. Readers
//! refuse files whose header names a newer version. Version 1 reports carried the head
//! layout and kernel as `run` where version 2 carries all the settings: they are read
//! with their `run` as the settings' and the other settings at their defaults.

use super::{Command, Event};
use crate::report::StepReport;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};

/// The version this build writes and the newest it reads.
pub const VERSION: u32 = 2;
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
    /// The recording machine's measured limits, so a replay's traffic pane compares the
    /// recorded timings with the machine that made them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<crate::machine::Machine>,
}

/// Why a recording could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// The io error is shown in the message, not chained as a source, so that `{:#}`
    /// does not print it twice.
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path} is not an inferlab recording (its first line is not a recording header)")]
    NotARecording { path: PathBuf },
    #[error("{path} is recording format version {found}; this inferlab reads up to version {VERSION}: update inferlab to replay it")]
    TooNew { path: PathBuf, found: u64 },
    #[error("{path}: {size} bytes would take about {need} bytes of memory to replay (reports, screens and history together), and this machine has {available} available; record a shorter session")]
    TooLargeForMemory {
        path: PathBuf,
        size: u64,
        need: u64,
        available: u64,
    },
    #[error("{path}:{line}: not a step report ({reason}); the file is corrupt or truncated")]
    BadLine {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("{path}:{line}: {reason}")]
    BadValue {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// Not a regular file of a recording's size, a link where one is written, an input.
    #[error(transparent)]
    File(crate::files::FileError),
    /// The writer thread stopped on an error; the text says which and where the
    /// iterations before it are.
    #[error("{0}")]
    Stopped(String),
    #[error("{path} holds no iterations")]
    Empty { path: PathBuf },
    #[error("{path} already exists: pass --force to overwrite it, or choose another name")]
    Exists { path: PathBuf },
}

/// A recording as read back.
#[derive(Debug)]
pub struct Recording {
    pub header: Header,
    pub reports: Vec<StepReport>,
    /// What was skipped, for the user to see (a last line cut short by a crash).
    pub warning: Option<String>,
}

/// A [`Recorder`] on its own thread: serializing a report (megabytes for a long prefill)
/// never holds up the screen. Write errors come back through [`Self::error`] and
/// [`Self::finish`].
pub struct BackgroundRecorder {
    tx: Option<Sender<Box<StepReport>>>,
    errors: Receiver<String>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BackgroundRecorder {
    /// Moves `rec` onto a writer thread. When the queue closes, the recording is committed
    /// under its name; after a write error it stays as the partial file the error names.
    pub fn spawn(mut rec: Recorder) -> Self {
        let (tx, rx) = mpsc::channel::<Box<StepReport>>();
        let (etx, errors) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || {
                for r in rx {
                    if let Err(e) = rec.write(&r) {
                        // Put in place only where that replaces nothing: a partial
                        // recording never takes the place of a whole one.
                        let (target, partial) = rec.paths();
                        let kept = match rec.finish_if_new() {
                            Ok(()) => target,
                            Err(_) => partial,
                        };
                        let _ = etx.send(format!(
                            "{e}; the iterations before it are in {}",
                            kept.display()
                        ));
                        return;
                    }
                }
                let (_, partial) = rec.paths();
                if let Err(e) = rec.finish() {
                    let _ = etx.send(format!("{e}; the recording is in {}", partial.display()));
                }
            })
            .ok();
        Self {
            tx: Some(tx),
            errors,
            thread,
        }
    }

    /// Queues one iteration; false once the writer has stopped. Attention is recorded for
    /// the layer on screen only, so a recording grows by what was shown (all 30 layers
    /// of a 200-step session were 188 MB; one layer is about 6).
    pub fn write(&self, r: &StepReport, focus: usize) -> bool {
        let mut r = for_screens(r);
        r.info.captures.retain(|c| c.layer == focus);
        self.tx
            .as_ref()
            .is_some_and(|tx| tx.send(Box::new(r)).is_ok())
    }

    /// The write error that stopped the recording, if one did.
    pub fn error(&self) -> Option<String> {
        self.errors.try_recv().ok()
    }

    /// Writes everything queued, commits the file, and says what went wrong if anything did.
    pub fn finish(mut self) -> Result<(), RecordingError> {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        match self.errors.try_recv() {
            Ok(e) => Err(RecordingError::Stopped(e)),
            Err(_) => Ok(()),
        }
    }
}

impl Drop for BackgroundRecorder {
    /// Everything queued is written before the app exits.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes step reports as they arrive, into a partial file beside the target that
/// [`Self::finish`] (or dropping it) renames over it: an existing recording is replaced
/// only whole, and a partial one stays readable.
pub struct Recorder {
    out: Option<crate::files::AtomicFile>,
    /// A write failed: the file holds a cut-short recording.
    failed: bool,
}

impl Recorder {
    /// Starts a recording at `path` and writes the header. An existing file is only
    /// replaced when `rules.force` is set (a recording is the user's work), never through
    /// a link and never when it is one of `rules.inputs`.
    pub fn create(
        path: &Path,
        model: &str,
        rules: crate::files::WriteRules,
    ) -> Result<Self, RecordingError> {
        let out = crate::files::AtomicFile::create(path, rules).map_err(RecordingError::from)?;
        crate::files::commit_on_exit(out.partial(), out.target(), rules.force);
        let mut r = Self {
            out: Some(out),
            failed: false,
        };
        let h = Header {
            format: FORMAT.into(),
            version: VERSION,
            inferlab: env!("CARGO_PKG_VERSION").into(),
            model: model.into(),
            machine: crate::machine::cached(),
        };
        if let Err(e) = r.line(&serde_json::to_string(&h).expect("a header serializes")) {
            // Not even the header: nothing worth keeping.
            if let Some(out) = r.out.take() {
                crate::files::forget_on_exit(out.partial());
                out.abandon();
            }
            return Err(e);
        }
        Ok(r)
    }

    /// Appends one iteration, flushed so a crash loses at most the line being written.
    pub fn write(&mut self, r: &StepReport) -> Result<(), RecordingError> {
        let s = serde_json::to_string(&for_screens(r)).expect("a step report serializes");
        self.line(&s)
    }

    fn line(&mut self, s: &str) -> Result<(), RecordingError> {
        let out = self
            .out
            .as_mut()
            .expect("a recorder holds its file until finished");
        out.write_all(s.as_bytes())?;
        out.write_all(b"\n")?;
        Ok(out.flush()?)
    }

    /// The recording's name and its partial file's.
    pub fn paths(&self) -> (PathBuf, PathBuf) {
        let out = self
            .out
            .as_ref()
            .expect("a recorder holds its file until finished");
        (out.target().to_path_buf(), out.partial().to_path_buf())
    }

    /// Syncs the recording and puts it under its name.
    pub fn finish(mut self) -> Result<(), RecordingError> {
        self.put_in_place()
    }

    /// The same where that replaces no existing file.
    pub fn finish_if_new(mut self) -> Result<(), RecordingError> {
        self.failed = true;
        self.put_in_place()
    }

    /// Commits the partial file: over an existing target only while nothing failed.
    fn put_in_place(&mut self) -> Result<(), RecordingError> {
        let Some(out) = self.out.take() else {
            return Ok(());
        };
        // Taken off the exit list only once it is in place: a closed terminal ends the
        // process from its signal handler, which may come while this commit is syncing,
        // and must then still find the partial file to put under its name.
        let partial = out.partial().to_path_buf();
        let done = match self.failed {
            true => out.commit_if_new(),
            false => out.commit(),
        };
        crate::files::forget_on_exit(&partial);
        Ok(done?)
    }
}

impl Drop for Recorder {
    /// A recorder dropped unfinished (a panic unwinding) still puts what it wrote in place,
    /// as [`Self::finish`] would.
    fn drop(&mut self) {
        let _ = self.put_in_place();
    }
}

impl From<crate::files::FileError> for RecordingError {
    fn from(e: crate::files::FileError) -> Self {
        match e {
            crate::files::FileError::Exists { path } => RecordingError::Exists { path },
            crate::files::FileError::Io { path, err } => RecordingError::Io { path, err },
            e => RecordingError::File(e),
        }
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

/// Reads a whole recording. Every line is checked before anything draws it: a line
/// that does not parse, or holds an index or length the screens would trust, is an error
/// naming `file:line`. The one exception is a last line cut short (what a crash while
/// writing leaves): everything before it replays, with a warning.
pub fn read(path: &Path) -> Result<Recording, RecordingError> {
    fits_in_memory(path)?;
    let mut lines = Lines::open(path)?;
    let mut reports = Vec::new();
    while let Some(r) = lines.next_report()? {
        reports.push(r);
    }
    Ok(Recording {
        header: lines.header,
        reports,
        warning: lines.warning,
    })
}

/// A recording read one report at a time, so that a reader that keeps only what it
/// draws (export) holds one line in memory, however long the session was. The same
/// checks as [`read`]: every line parsed and checked, a last line cut short skipped with
/// a [`Lines::warning`].
pub struct Lines {
    pub header: Header,
    /// Set once a last line cut short was skipped.
    pub warning: Option<String>,
    path: PathBuf,
    file: std::io::BufReader<std::io::Take<std::fs::File>>,
    /// The file's line number of the next line.
    line: usize,
    reports: usize,
}

impl Lines {
    /// Opens `path` and reads its header.
    pub fn open(path: &Path) -> Result<Self, RecordingError> {
        use std::io::Read;
        let kind = crate::files::Kind::Recording;
        let (file, _) = crate::files::open(path, kind)?;
        let mut lines = Self {
            header: Header {
                format: String::new(),
                version: 0,
                inferlab: String::new(),
                model: String::new(),
                machine: None,
            },
            warning: None,
            path: path.to_path_buf(),
            // One byte past the limit, so that a file that grows past it is caught.
            file: std::io::BufReader::new(file.take(kind.limit() + 1)),
            line: 0,
            reports: 0,
        };
        let not_one = || RecordingError::NotARecording {
            path: path.to_path_buf(),
        };
        let (first, _) = lines.raw_line()?.ok_or_else(not_one)?;
        // A byte-order mark, as some editors save one, is accepted here as everywhere else.
        let first = first.strip_prefix('\u{feff}').unwrap_or(&first);
        lines.header = read_header(path, first)?;
        Ok(lines)
    }

    /// The next report, `None` at the end of the file (or after a last line cut short).
    pub fn next_report(&mut self) -> Result<Option<StepReport>, RecordingError> {
        loop {
            let Some((l, complete)) = self.raw_line()? else {
                return self.end();
            };
            if l.trim().is_empty() {
                continue;
            }
            let parsed = match self.header.version {
                1 => from_version_1(&l),
                _ => serde_json::from_str::<StepReport>(&l),
            };
            let r = match parsed {
                Ok(r) => r,
                // A crash while writing leaves a last line without its newline.
                Err(e) if !complete && self.reports > 0 => {
                    self.warning = Some(format!(
                        "{}:{}: the last line is cut short ({e}); replaying the {} iterations before it",
                        self.path.display(),
                        self.line,
                        self.reports
                    ));
                    return Ok(None);
                }
                Err(e) => {
                    return Err(RecordingError::BadLine {
                        path: self.path.clone(),
                        line: self.line,
                        reason: e.to_string(),
                    })
                }
            };
            r.check().map_err(|reason| RecordingError::BadValue {
                path: self.path.clone(),
                line: self.line,
                reason: reason.0,
            })?;
            self.reports += 1;
            return Ok(Some(r));
        }
    }

    /// The end of the file: an error if it held no iterations.
    fn end(&self) -> Result<Option<StepReport>, RecordingError> {
        if self.reports == 0 {
            return Err(RecordingError::Empty {
                path: self.path.clone(),
            });
        }
        Ok(None)
    }

    /// The next line (lossy UTF-8) and whether it ended in a newline; `None` at the end.
    fn raw_line(&mut self) -> Result<Option<(String, bool)>, RecordingError> {
        use std::io::BufRead;
        let mut bytes = Vec::new();
        let n = self
            .file
            .read_until(b'\n', &mut bytes)
            .map_err(|err| RecordingError::Io {
                path: self.path.clone(),
                err,
            })?;
        if n == 0 {
            return Ok(None);
        }
        if self.file.get_ref().limit() == 0 {
            let kind = crate::files::Kind::Recording;
            return Err(RecordingError::File(crate::files::FileError::TooLarge {
                path: self.path.clone(),
                size: kind.limit() + 1,
                limit: kind.limit(),
                what: kind.name(),
            }));
        }
        self.line += 1;
        let complete = bytes.last() == Some(&b'\n');
        let text = String::from_utf8_lossy(&bytes);
        Ok(Some((
            text.trim_end_matches(['\n', '\r']).to_string(),
            complete,
        )))
    }
}

/// A version 1 report line: its `run` becomes the settings' run.
fn from_version_1(line: &str) -> serde_json::Result<StepReport> {
    let mut v: serde_json::Value = serde_json::from_str(line)?;
    if let Some(o) = v.as_object_mut() {
        let run = o.remove("run").unwrap_or_default();
        o.insert("settings".into(), serde_json::json!({ "run": run }));
    }
    serde_json::from_value(v)
}

/// Memory a replay or an export takes, as a multiple of the recording's size: its bytes,
/// the reports parsed from them, and the app's copies for the screens and the history.
const MEMORY_MULTIPLE: u64 = 6;

/// Refuses, before reading it, a recording this machine could not hold while replaying
/// it (a 1.8 GB file once aborted on allocation at 7 GB): said, with the figures.
fn fits_in_memory(path: &Path) -> Result<(), RecordingError> {
    let Ok(size) = std::fs::metadata(path).map(|m| m.len()) else {
        return Ok(()); // The read that follows names what is wrong with the path.
    };
    let need = size.saturating_mul(MEMORY_MULTIPLE);
    match available_memory() {
        Some(available) if need > available => Err(RecordingError::TooLargeForMemory {
            path: path.to_path_buf(),
            size,
            need,
            available,
        }),
        _ => Ok(()),
    }
}

/// The memory the system can give a process now (`MemAvailable`), where it says.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

fn read_header(path: &Path, first: &str) -> Result<Header, RecordingError> {
    let header: Header = match serde_json::from_str::<Header>(first) {
        Ok(h) if h.format == FORMAT => h,
        _ => {
            // A newer header may have changed shape; its version still tells us.
            let v: Option<u64> = serde_json::from_str::<serde_json::Value>(first)
                .ok()
                .filter(|v| v["format"] == FORMAT)
                .and_then(|v| v["version"].as_u64());
            return Err(match v {
                Some(found) if found > u64::from(VERSION) => RecordingError::TooNew {
                    path: path.to_path_buf(),
                    found,
                },
                _ => RecordingError::NotARecording {
                    path: path.to_path_buf(),
                },
            });
        }
    };
    // Limits that are not positive numbers would only mislead the traffic pane: drop them.
    let mut header = header;
    if header.machine.as_ref().is_some_and(|m| !m.is_plausible()) {
        header.machine = None;
    }
    if header.version > VERSION {
        return Err(RecordingError::TooNew {
            path: path.to_path_buf(),
            found: header.version.into(),
        });
    }
    Ok(header)
}

/// A stand-in for the engine that plays a recording back: each `Step` sends the next
/// recorded iteration; settings are fixed by the recording.
pub fn spawn_player(rec: Recording) -> (Sender<Command>, Receiver<Event>) {
    let Recording {
        header,
        reports,
        warning,
    } = rec;
    let (ctx, crx) = mpsc::channel::<Command>();
    let (etx, erx) = mpsc::channel();
    std::thread::Builder::new()
        .name("player".into())
        .spawn(move || {
            let n = reports.len();
            let _ = etx.send(Event::Ready {
                model: format!("{} (replay, {n} iterations)", header.model),
            });
            if let Some(w) = warning {
                let _ = etx.send(Event::Status(w));
            }
            if let Some(m) = header.machine {
                let _ = etx.send(Event::Machine(m));
            }
            let mut next = reports.into_iter();
            while let Ok(c) = crx.recv() {
                let e = match c {
                    Command::Quit => break,
                    // The layer on screen changes nothing in a replay (the app itself
                    // refuses the settings that would).
                    Command::Apply(_) => continue,
                    Command::Step => match next.next() {
                        Some(r) => Event::Report(Box::new(r)),
                        None => Event::Idle("end of the recording: [ scrubs back".into()),
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
