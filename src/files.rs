//! The user's files, read and written defensively. Every file inferlab reads is untrusted
//! and every file it writes may be the user's work, so all of them pass through here.
//!
//! Reading: the path must name a regular file (after links), no larger than what its kind
//! can reasonably be. A FIFO would block forever and `/dev/zero` would read until memory
//! runs out; a 5 GB "config.json" is not a config. The file is opened without blocking and
//! checked again on the open handle, so it cannot be swapped for a FIFO in between.
//!
//! Writing: the bytes go to a temporary file in the target's directory, which is flushed,
//! synced and then renamed over the target. A failure midway (a full disk) leaves the old
//! file whole. The target is never a symbolic link (a planted link would redirect the
//! write), never one of the command's own inputs, and an existing file is replaced only
//! when the user said `--force`.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// What a file is for, which decides how large it may be and how errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A GGUF model file.
    Model,
    /// One `*.safetensors` shard of an HF model directory.
    Shard,
    /// An HF `config.json`.
    Config,
    /// An HF `tokenizer.json`.
    Tokenizer,
    /// A lesson's Markdown.
    Lesson,
    /// A recording (`--record`, replayed by `replay` and `export`).
    Recording,
    /// Saved lesson progress.
    Progress,
    /// The machine's measured limits (`machine.json`).
    Machine,
}

const MB: u64 = 1 << 20;

impl Kind {
    /// The largest file of this kind inferlab reads. Models are bounded by what a laptop
    /// can hold; text files by far more than any real one needs.
    pub fn limit(self) -> u64 {
        match self {
            Kind::Model | Kind::Shard => 64 << 30,
            Kind::Config => MB,
            // A Llama-3 tokenizer.json is 9 MB.
            Kind::Tokenizer => 64 * MB,
            Kind::Lesson => MB,
            // A 200-step session with every layer recorded was 188 MB.
            Kind::Recording => 2 << 30,
            Kind::Progress => 4 * MB,
            Kind::Machine => 64 << 10,
        }
    }

    /// The kind in words, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Model => "model file",
            Kind::Shard => "safetensors shard",
            Kind::Config => "config.json",
            Kind::Tokenizer => "tokenizer.json",
            Kind::Lesson => "lesson file",
            Kind::Recording => "recording",
            Kind::Progress => "progress file",
            Kind::Machine => "machine measurement",
        }
    }
}

/// Why a file could not be read or written. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: not found")]
    NotFound { path: PathBuf },
    #[error("{path}: is a directory, not a {what}")]
    Directory { path: PathBuf, what: &'static str },
    #[error("{path}: is a {found}, not a regular file; a {what} must be a regular file")]
    Special {
        path: PathBuf,
        found: &'static str,
        what: &'static str,
    },
    #[error("{path}: {size} bytes is more than a {what} may hold ({limit} bytes)")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
        what: &'static str,
    },
    #[error("{path}: not UTF-8 text (invalid byte on line {line}); save it as UTF-8")]
    NotUtf8 { path: PathBuf, line: usize },
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("writing {path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },
    #[error("{path} is a symbolic link: inferlab does not write through links (remove it or choose another name)")]
    Link { path: PathBuf },
    #[error("{path} already exists: pass --force to overwrite it, or choose another name")]
    Exists { path: PathBuf },
    #[error("{path} is this command's own input; choose another name for the output")]
    OwnInput { path: PathBuf },
}

impl FileError {
    /// The io error's kind where there is one (`NotFound` for a missing file).
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::NotFound { .. })
    }
}

/// A failed write, naming the file.
fn wr(path: &Path) -> impl Fn(std::io::Error) -> FileError + '_ {
    move |err| FileError::Write {
        path: path.to_path_buf(),
        err,
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> FileError + '_ {
    move |err| match err.kind() {
        std::io::ErrorKind::NotFound => FileError::NotFound {
            path: path.to_path_buf(),
        },
        _ => FileError::Io {
            path: path.to_path_buf(),
            err,
        },
    }
}

/// What a non-regular file is, in words.
fn file_type_name(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "FIFO (named pipe)";
        }
        if t.is_char_device() || t.is_block_device() {
            return "device";
        }
        if t.is_socket() {
            return "socket";
        }
    }
    let _ = t;
    "special file"
}

/// Checks what `meta` describes is a regular file of at most the kind's size.
fn check_regular(path: &Path, meta: &std::fs::Metadata, kind: Kind) -> Result<u64, FileError> {
    let t = meta.file_type();
    if t.is_dir() {
        return Err(FileError::Directory {
            path: path.to_path_buf(),
            what: kind.name(),
        });
    }
    if !t.is_file() {
        return Err(FileError::Special {
            path: path.to_path_buf(),
            found: file_type_name(t),
            what: kind.name(),
        });
    }
    if meta.len() > kind.limit() {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            limit: kind.limit(),
            what: kind.name(),
        });
    }
    Ok(meta.len())
}

/// Opens a regular file of `kind` for reading; returns it with its length.
pub fn open(path: &Path, kind: Kind) -> Result<(File, u64), FileError> {
    // Checked before opening: opening a FIFO for reading blocks until a writer comes.
    let meta = std::fs::metadata(path).map_err(io(path))?;
    check_regular(path, &meta, kind)?;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Swapped for a FIFO after the check, the open still returns at once.
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(io(path))?;
    let len = check_regular(path, &file.metadata().map_err(io(path))?, kind)?;
    Ok((file, len))
}

/// Reads a whole regular file of `kind`, never more than its limit.
pub fn read(path: &Path, kind: Kind) -> Result<Vec<u8>, FileError> {
    let (file, len) = open(path, kind)?;
    let mut out = Vec::with_capacity(len as usize);
    // `take`: a file that grows while it is read stops at the limit all the same.
    file.take(kind.limit() + 1)
        .read_to_end(&mut out)
        .map_err(io(path))?;
    if out.len() as u64 > kind.limit() {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            size: out.len() as u64,
            limit: kind.limit(),
            what: kind.name(),
        });
    }
    Ok(out)
}

/// Reads a whole text file of `kind`: UTF-8, a leading byte-order mark dropped.
pub fn read_text(path: &Path, kind: Kind) -> Result<String, FileError> {
    let bytes = read(path, kind)?;
    let mut text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
        FileError::NotUtf8 {
            path: path.to_path_buf(),
            line,
        }
    })?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// How a write may treat what is already there.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteRules<'a> {
    /// Replace an existing regular file (the user's `--force`).
    pub force: bool,
    /// The command's own inputs, which the output must never replace.
    pub inputs: &'a [PathBuf],
}

/// Whether `a` and `b` are the same file (both existing).
fn same_file(a: &std::fs::Metadata, b: &Path) -> bool {
    let Ok(b) = std::fs::metadata(b) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

/// Checks `path` may be written under `rules`, before any work is done for it.
pub fn check_target(path: &Path, rules: WriteRules) -> Result<(), FileError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(path)(e)),
    };
    if meta.file_type().is_symlink() {
        return Err(FileError::Link {
            path: path.to_path_buf(),
        });
    }
    if rules.inputs.iter().any(|i| same_file(&meta, i)) {
        return Err(FileError::OwnInput {
            path: path.to_path_buf(),
        });
    }
    if !meta.file_type().is_file() {
        return Err(FileError::Special {
            path: path.to_path_buf(),
            found: if meta.is_dir() {
                "directory"
            } else {
                file_type_name(meta.file_type())
            },
            what: "file inferlab writes",
        });
    }
    if !rules.force {
        return Err(FileError::Exists {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Permissions a newly created file gets: 0666, which the process's umask then narrows.
fn default_permissions() -> std::fs::Permissions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::Permissions::from_mode(0o666)
    }
    #[cfg(not(unix))]
    {
        tempfile::tempfile()
            .and_then(|f| f.metadata())
            .map(|m| m.permissions())
            .expect("a temporary file can be made")
    }
}

/// The directory a path's temporary sibling goes in.
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A file being written beside its target, renamed over it by [`AtomicFile::commit`].
/// Dropped without a commit, the partial file stays (named in [`Self::partial`]): for a
/// recording, what was written before a crash is still the user's.
pub struct AtomicFile {
    target: PathBuf,
    partial: PathBuf,
    out: std::io::BufWriter<File>,
    force: bool,
}

impl AtomicFile {
    /// Starts writing `path` under `rules` (checked now and again at commit).
    pub fn create(path: &Path, rules: WriteRules) -> Result<Self, FileError> {
        check_target(path, rules)?;
        let dir = parent_of(path);
        let stem = partial_stem(path);
        // The mode a new file would get (0666 less the umask), or the replaced file's own:
        // a temporary file is private by default, and the output should not be.
        let mode = match std::fs::metadata(path) {
            Ok(m) => m.permissions(),
            Err(_) => default_permissions(),
        };
        let (file, partial) = tempfile::Builder::new()
            .prefix(&format!(".{stem}."))
            .suffix(".partial")
            .permissions(mode)
            .tempfile_in(dir)
            .map_err(wr(path))?
            .keep()
            .map_err(|e| wr(path)(e.error))?;
        Ok(Self {
            target: path.to_path_buf(),
            partial,
            out: std::io::BufWriter::new(file),
            force: rules.force,
        })
    }

    /// The temporary file's path.
    pub fn partial(&self) -> &Path {
        &self.partial
    }

    /// The file the commit will replace.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Appends bytes (buffered; [`Self::flush`] pushes them to the file).
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        self.out.write_all(bytes).map_err(wr(&self.partial))
    }

    /// Pushes buffered bytes to the file, so a crash loses at most what follows.
    pub fn flush(&mut self) -> Result<(), FileError> {
        self.out.flush().map_err(wr(&self.partial))
    }

    /// Syncs the file and renames it over the target. Without `force` the rename refuses
    /// a target that appeared meanwhile; a target turned into a link is refused too.
    pub fn commit(mut self) -> Result<(), FileError> {
        self.flush()?;
        self.out.get_ref().sync_all().map_err(wr(&self.partial))?;
        check_target(
            &self.target,
            WriteRules {
                force: self.force,
                inputs: &[],
            },
        )?;
        let moved = if self.force {
            std::fs::rename(&self.partial, &self.target)
        } else {
            // A hard link fails when the target exists, where a rename would replace it.
            // Where links are not supported, the check above is the guard.
            match std::fs::hard_link(&self.partial, &self.target) {
                // The target is written; a partial name left behind is only clutter.
                Ok(()) => {
                    let _ = std::fs::remove_file(&self.partial);
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(e),
                Err(_) => std::fs::rename(&self.partial, &self.target),
            }
        };
        moved.map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => FileError::Exists {
                path: self.target.clone(),
            },
            _ => wr(&self.target)(e),
        })?;
        // The rename is durable once the directory is synced (where that works).
        if let Ok(d) = File::open(parent_of(&self.target)) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Commits only where that replaces nothing (the target does not exist): what a
    /// failed recording does, so a partial one never replaces a whole one.
    pub fn commit_if_new(mut self) -> Result<(), FileError> {
        self.force = false;
        self.commit()
    }

    /// Gives up: the partial file is removed.
    pub fn abandon(self) {
        let _ = std::fs::remove_file(&self.partial);
    }
}

/// Partial files to put in place if the process is ended abruptly (a closed terminal,
/// SIGTERM): a recording made until then is the user's, under the name they gave.
static ON_EXIT: std::sync::Mutex<Vec<(PathBuf, PathBuf, bool)>> = std::sync::Mutex::new(Vec::new());

/// Bytes a file name may have (NAME_MAX on Linux and macOS).
const NAME_MAX: usize = 255;

/// What a temporary name for `target` starts with after its dot: the target's name, cut
/// (on a character boundary) so that `.{stem}.XXXXXX.partial` stays within [`NAME_MAX`]
/// even when the target's own name is as long as a name may be.
fn partial_stem(target: &Path) -> String {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // ".", ".", six random characters and ".partial".
    let room = NAME_MAX - 16;
    let mut end = name.len().min(room);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// Partial files an earlier run writing `target` left beside it (it was killed before it
/// could put them in place), for the next run to name: they may hold a session's work.
pub fn leftover_partials(target: &Path) -> Vec<PathBuf> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let prefix = format!(".{}.", partial_stem(target));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&prefix) && n.ends_with(".partial")
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Registers `partial` to be renamed to `target` by [`commit_pending`] (over an existing
/// target only with `force`).
pub fn commit_on_exit(partial: &Path, target: &Path, force: bool) {
    if let Ok(mut v) = ON_EXIT.lock() {
        v.push((partial.to_path_buf(), target.to_path_buf(), force));
    }
}

/// Takes `partial` off that list (it was committed or abandoned).
pub fn forget_on_exit(partial: &Path) {
    if let Ok(mut v) = ON_EXIT.lock() {
        v.retain(|(p, _, _)| p != partial);
    }
}

/// Puts every registered partial file in place; for the signal handler, just before the
/// process exits. Never blocks: if the list is held, it gives up.
pub fn commit_pending() {
    let Ok(mut v) = ON_EXIT.try_lock() else {
        return;
    };
    for (partial, target, force) in v.drain(..) {
        let replace = match std::fs::symlink_metadata(&target) {
            Err(_) => true,
            Ok(m) => force && !m.is_symlink(),
        };
        if replace {
            let _ = std::fs::rename(&partial, &target);
        }
    }
}

/// Writes `bytes` to `path` under `rules`: all of them or, on failure, nothing changed.
pub fn write(path: &Path, bytes: &[u8], rules: WriteRules) -> Result<(), FileError> {
    let mut f = AtomicFile::create(path, rules)?;
    match f.write_all(bytes) {
        Ok(()) => {}
        Err(e) => {
            f.abandon();
            return Err(e);
        }
    }
    let partial = f.partial().to_path_buf();
    f.commit().inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })
}

/// Text from an untrusted file (a lesson title, a file name, a tensor name) made safe to
/// print: control characters, escape sequences among them, become `?`, so a crafted name
/// can neither move the cursor nor forge a line of output.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() || bidi(c) { '?' } else { c })
        .collect()
}

/// [`printable`] for text of several lines (an error and its causes): the line breaks
/// stay, every other control character and direction override becomes `?`.
pub fn printable_text(s: &str) -> String {
    s.lines().map(printable).collect::<Vec<_>>().join("\n")
}

/// Unicode's direction overrides and isolates, which reorder what follows them on a
/// terminal line (a name could show as another).
fn bidi(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_and_a_device_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a plain libc call on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read(&fifo, Kind::Lesson).unwrap_err().to_string();
        assert!(e.contains("FIFO") && e.contains("pipe"), "{e}");
        let link = dir.path().join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read(&link, Kind::Config).unwrap_err().to_string();
        assert!(e.contains("device") && e.contains("zero.json"), "{e}");
        let e = read(dir.path(), Kind::Config).unwrap_err().to_string();
        assert!(e.contains("directory"), "{e}");
    }

    #[test]
    fn a_file_over_its_kinds_limit_is_refused_and_text_must_be_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        std::fs::write(&p, vec![b' '; (MB + 1) as usize]).unwrap();
        assert!(matches!(
            read(&p, Kind::Config),
            Err(FileError::TooLarge { .. })
        ));
        std::fs::write(&p, b"{\n\n\xff}").unwrap();
        let e = read_text(&p, Kind::Config).unwrap_err().to_string();
        assert!(e.contains("line 3"), "{e}");
        std::fs::write(&p, "\u{feff}# Title").unwrap();
        assert_eq!(read_text(&p, Kind::Lesson).unwrap(), "# Title");
    }

    #[test]
    fn writes_replace_only_with_force_never_through_links_or_onto_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.png");
        write(&p, b"one", WriteRules::default()).unwrap();
        let e = write(&p, b"two", WriteRules::default()).unwrap_err();
        assert!(matches!(e, FileError::Exists { .. }), "{e}");
        let force = WriteRules {
            force: true,
            inputs: &[],
        };
        write(&p, b"two", force).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let users = dir.path().join("users-file");
        std::fs::write(&users, b"precious").unwrap();
        let link = dir.path().join("planted.png");
        std::os::unix::fs::symlink(&users, &link).unwrap();
        assert!(matches!(
            write(&link, b"x", force),
            Err(FileError::Link { .. })
        ));
        let own = WriteRules {
            force: true,
            inputs: std::slice::from_ref(&users),
        };
        assert!(matches!(
            write(&users, b"x", own),
            Err(FileError::OwnInput { .. })
        ));
        assert_eq!(std::fs::read(&users).unwrap(), b"precious");
        // Nothing is left beside the targets.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
            .collect();
        assert!(left.is_empty());
    }

    #[test]
    fn a_long_name_keeps_its_temporary_within_name_max_and_a_leftover_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let long = dir
            .path()
            .join(format!("{}é.jsonl", "r".repeat(NAME_MAX - 8)));
        let f = AtomicFile::create(&long, WriteRules::default()).unwrap();
        let name = f.partial().file_name().unwrap().len();
        assert!(name <= NAME_MAX, "{name}");
        // Left as a crash leaves it: the next run finds it.
        let partial = f.partial().to_path_buf();
        std::mem::forget(f);
        assert_eq!(leftover_partials(&long), vec![partial]);
        assert!(leftover_partials(&dir.path().join("other.jsonl")).is_empty());
    }

    #[test]
    fn printable_strips_escapes_and_newlines() {
        assert_eq!(printable("a\x1b[31mb\nc"), "a?[31mb?c");
        assert_eq!(printable_text("a\x1b]0;x\x07\nb\u{202e}c"), "a?]0;x?\nb?c");
    }
}
