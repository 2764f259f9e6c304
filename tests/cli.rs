//! The README's promises on the command line: `--json` on every command that reports,
//! help text for every flag, quiet exits on a closed pipe, errors said once.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn out(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(bin())
        .args(args)
        .env("INFERLAB_QUIET", "1")
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

#[test]
fn generate_and_trace_speak_json_when_asked_and_tables_otherwise() {
    let (_d, p) = tiny_file(&Tiny::default());
    let m = p.to_str().unwrap();
    for extra in [&[][..], &["--stats"][..]] {
        let mut args = vec![
            "generate",
            "--model",
            m,
            "--prompt",
            "the",
            "--max-tokens",
            "4",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (ok, so, se) = out(&args);
        assert!(ok, "{se}");
        let v: serde_json::Value = serde_json::from_str(so.trim()).expect("one JSON object");
        for k in [
            "text",
            "prompt_tokens",
            "generated_tokens",
            "finish_reason",
            "decode_tok_per_s",
        ] {
            assert!(!v[k].is_null(), "{k} in {v}");
        }
    }
    let (ok, so, se) = out(&[
        "trace",
        "--model",
        m,
        "--prompt",
        "the",
        "--max-tokens",
        "3",
    ]);
    assert!(ok, "{se}");
    assert!(
        so.starts_with("step  phase")
            && serde_json::from_str::<serde_json::Value>(so.lines().nth(1).unwrap()).is_err(),
        "{so}"
    );
    let (ok, so, _) = out(&[
        "trace",
        "--model",
        m,
        "--prompt",
        "the",
        "--max-tokens",
        "3",
        "--json",
    ]);
    assert!(ok);
    for l in so.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v["attention"].is_array());
        // Every step says what it moved and computed.
        for k in [
            "weight_bytes",
            "kv_read_bytes",
            "kv_write_bytes",
            "score_bytes",
            "flops",
        ] {
            assert!(v["traffic"][k].as_u64().unwrap() > 0, "{k}: {l}");
        }
    }
    // Without the cache a decode step recomputes every row, and writes only its newest:
    // the lines grow with the length, not with its square.
    let (ok, so, se) = out(&[
        "trace",
        "--model",
        m,
        "--prompt",
        "the cat sat on",
        "--max-tokens",
        "5",
        "--json",
        "--kv-cache",
        "off",
    ]);
    assert!(ok, "{se}");
    let lines: Vec<serde_json::Value> = so
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let prompt_rows = lines[0]["attention"].as_array().unwrap().len();
    assert!(prompt_rows > 1 && lines[0]["first_row"] == 0);
    for (i, v) in lines.iter().enumerate().skip(1) {
        let rows = v["attention"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "step {i}");
        assert_eq!(
            v["first_row"].as_u64().unwrap() as usize,
            prompt_rows + i - 1
        );
        assert_eq!(
            rows[0].as_array().unwrap().len(),
            prompt_rows + i,
            "step {i}: its keys"
        );
    }
}

#[test]
fn lessons_speak_json_with_and_without_check() {
    let (ok, so, se) = out(&["lessons", "--json"]);
    assert!(ok, "{se}");
    let v: serde_json::Value = serde_json::from_str(so.trim()).unwrap();
    assert_eq!(v["lessons"].as_array().unwrap().len(), 13);
    // The quiz's figures travel with the list.
    assert!(v["quiz"]["predictions"].as_u64().unwrap() >= 12, "{v}");
    assert_eq!(v["valid"], true);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("01-bad.md"), "no title here\n").unwrap();
    let (ok, so, _) = out(&[
        "lessons",
        "--check",
        "--json",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!ok, "a failed check exits non-zero");
    let v: serde_json::Value = serde_json::from_str(so.trim()).unwrap();
    assert_eq!(v["valid"], false);
    assert!(
        v["problems"][0]["file"]
            .as_str()
            .unwrap()
            .contains("01-bad.md"),
        "{v}"
    );
}

#[test]
fn every_json_flag_has_a_help_line() {
    for cmd in [
        &["model", "fetch"][..],
        &["model", "info"],
        &["budget"],
        &["bench", "serve"],
        &["bench", "decode"],
        &["generate"],
        &["trace"],
        &["lessons"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let (ok, so, _) = out(&args);
        assert!(ok);
        // clap puts the help beside the flag, or on the next line in long help.
        let lines: Vec<&str> = so.lines().collect();
        let i = lines.iter().position(|l| l.contains("--json")).unwrap();
        let text = format!(
            "{} {}",
            lines[i].trim(),
            lines.get(i + 1).unwrap_or(&"").trim()
        );
        assert!(text.contains("JSON"), "{cmd:?}: {text:?}");
    }
}

#[test]
fn a_closed_pipe_ends_quietly_and_errors_are_said_once() {
    let (_d, p) = tiny_file(&Tiny::default());
    let mut c = Command::new(bin())
        .args([
            "trace",
            "--model",
            p.to_str().unwrap(),
            "--prompt",
            "the",
            "--max-tokens",
            "40",
            "--json",
        ])
        .env("INFERLAB_QUIET", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is gone now; the writer must not complain.
    let o = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("Broken pipe") && !err.contains("panicked"),
        "{err}"
    );
    let (ok, _, err) = out(&["replay", "/nonexistent/missing.jsonl"]);
    assert!(!ok);
    assert_eq!(err.matches("not found").count(), 1, "{err}");
}

#[test]
fn each_command_lists_only_the_flags_that_mean_something_for_it() {
    let help = |args: &[&str]| {
        let mut a = args.to_vec();
        a.push("--help");
        let (ok, stdout, _) = out(&a);
        assert!(ok, "{args:?}");
        stdout
    };
    let model_flags = [
        "--device",
        "--layout",
        "--attention",
        "--sram-bytes",
        "--weights",
    ];
    for cmd in [
        vec!["budget"],
        vec!["lessons"],
        vec!["replay"],
        vec!["export"],
    ] {
        let h = help(&cmd);
        for f in model_flags.iter().chain(&["--model"]) {
            assert!(!h.contains(f), "{cmd:?} lists {f}:\n{h}");
        }
    }
    // Fetching needs only where the model comes from; decode benchmarks its own settings.
    let fetch = help(&["model", "fetch"]);
    assert!(
        fetch.contains("--model") && !fetch.contains("--layout"),
        "{fetch}"
    );
    let attention = help(&["bench", "attention"]);
    assert!(attention.contains("--sram-bytes") && !attention.contains("--model"));
    let decode = help(&["bench", "decode"]);
    assert!(
        decode.contains("--device") && !decode.contains("--layout"),
        "{decode}"
    );
    for cmd in [
        vec!["generate"],
        vec!["trace"],
        vec!["lesson"],
        vec!["bench", "serve"],
    ] {
        let h = help(&cmd);
        for f in model_flags {
            assert!(h.contains(f), "{cmd:?} lacks {f}");
        }
    }
    // A model flag put before a subcommand is refused, not silently dropped.
    let (ok, _, err) = out(&["--layout", "mha", "generate", "--prompt", "hi"]);
    assert!(!ok);
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn bench_serve_refuses_arrival_settings_it_cannot_run_before_it_starts() {
    // Each is refused before the model loads (its path is never named): the arrivals part
    // runs last, minutes in.
    for (flag, value) in [
        ("--rate", "0"),
        ("--rate", "-2"),
        ("--rate", "inf"),
        ("--chunk-tokens", "0"),
        ("--arrival-seeds", "0"),
    ] {
        let arg = format!("{flag}={value}");
        let (ok, _, err) = out(&["bench", "serve", "--model", "/nonexistent/model.gguf", &arg]);
        assert!(!ok, "{flag} {value}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(!err.contains("nonexistent"), "{flag} {value}: {err}");
    }
}

/// Text from a file or an argument reaches the terminal neutralised, as the screen's is:
/// a path or a lesson line holding an escape sequence or a direction override prints
/// `?` in its place, in errors, warnings and listings alike.
#[test]
fn escapes_in_paths_and_files_never_reach_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let evil = dir.path().join("x\x1b]0;owned\x07\u{202e}.gguf");
    let lessons = dir.path().join("lessons");
    std::fs::create_dir(&lessons).unwrap();
    std::fs::write(
        lessons.join("01-x.md"),
        "# T\x1b[2J\n\n## S\nset: focus=\x1b[31mx\n",
    )
    .unwrap();
    let runs: [Vec<std::ffi::OsString>; 3] = [
        vec![
            "model".into(),
            "info".into(),
            "--model".into(),
            evil.clone().into(),
        ],
        vec!["replay".into(), evil.into()],
        vec![
            "lessons".into(),
            "--check".into(),
            "--dir".into(),
            lessons.into(),
        ],
    ];
    for args in runs {
        let o = std::process::Command::new(common::bin())
            .args(&args)
            .output()
            .unwrap();
        let all = [o.stdout, o.stderr].concat();
        let text = String::from_utf8_lossy(&all);
        assert!(!o.status.success(), "{args:?}: {text}");
        assert!(
            !text.contains('\x1b') && !text.contains('\x07') && !text.contains('\u{202e}'),
            "{args:?} printed a raw escape: {text:?}"
        );
    }
}
