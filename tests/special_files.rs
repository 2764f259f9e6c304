//! Every file inferlab reads, given as a FIFO or a link to a device: refused at once with
//! a message naming the file, never a hang or a read until memory runs out. Each case runs
//! the real binary under a timeout.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a plain libc call on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Runs inferlab with `args` and `envs`; it must fail within 20 s, and its stderr must
/// name `what`. Killed (and the test failed) if it hangs.
fn refuses(args: &[&str], envs: &[(&str, &Path)], what: &str) {
    let mut c = Command::new(common::bin());
    c.args(args)
        .env("INFERLAB_QUIET", "1")
        .env("INFERLAB_OFFLINE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("inferlab {args:?} hung on a special file");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(
        err.contains(what) && (err.contains("FIFO") || err.contains("device")),
        "{args:?}: {err}"
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn fifos_and_devices_are_refused_for_every_file_kind() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("model.gguf");
    mkfifo(&fifo);
    let zero = d.join("zero.gguf");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    refuses(
        &["generate", "--model", s(&fifo), "--prompt", "hi"],
        &[],
        "model.gguf",
    );
    refuses(
        &["generate", "--model", s(&zero), "--prompt", "hi"],
        &[],
        "zero.gguf",
    );
    refuses(&["model", "info", "--model", s(&zero)], &[], "zero.gguf");
    // An HF directory whose config, tokenizer or shard is special.
    let hf: PathBuf = d.join("hf");
    std::fs::create_dir(&hf).unwrap();
    mkfifo(&hf.join("config.json"));
    refuses(
        &["generate", "--model", s(&hf), "--prompt", "hi"],
        &[],
        "config.json",
    );
    std::fs::remove_file(hf.join("config.json")).unwrap();
    std::fs::write(
        hf.join("config.json"),
        r#"{"num_hidden_layers":2,"hidden_size":64,"intermediate_size":128,"num_attention_heads":4,"vocab_size":261}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink("/dev/zero", hf.join("tokenizer.json")).unwrap();
    refuses(
        &["generate", "--model", s(&hf), "--prompt", "hi"],
        &[],
        "tokenizer.json",
    );
    // Recordings: replay and export.
    let rec = d.join("session.jsonl");
    mkfifo(&rec);
    refuses(&["replay", s(&rec)], &[], "session.jsonl");
    refuses(&["export", s(&rec)], &[], "session.jsonl");
    // A lesson directory holding a FIFO lesson: named by `lessons --check`.
    let lessons = d.join("lessons");
    std::fs::create_dir(&lessons).unwrap();
    mkfifo(&lessons.join("01-pipe.md"));
    refuses(
        &["lessons", "--check", "--dir", s(&lessons)],
        &[],
        "01-pipe.md",
    );
}

#[test]
fn a_progress_file_that_is_a_fifo_is_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("progress.json"));
    let mut c = Command::new(common::bin())
        .args(["lessons"])
        .env("INFERLAB_DATA_DIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(20) {
            let _ = c.kill();
            panic!("lessons hung on a FIFO progress file");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = c.wait_with_output().unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        all.contains("progress.json") && all.contains("FIFO"),
        "{all}"
    );
}

#[test]
fn a_machine_json_link_is_not_written_through() {
    let data = tempfile::tempdir().unwrap();
    let users = data.path().join("users-notes.txt");
    std::fs::write(&users, "precious").unwrap();
    std::os::unix::fs::symlink(&users, data.path().join("machine.json")).unwrap();
    let o = Command::new(common::bin())
        .args(["bench", "machine", "--fresh"])
        .env("INFERLAB_DATA_DIR", data.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&users).unwrap(), "precious");
}
