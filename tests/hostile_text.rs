//! Untrusted text and numbers on the command line, in lesson files and in progress:
//! refused with the file and the key or line, never printed raw (escape sequences,
//! forged lines), never wrapped into a plausible number.

mod common;

use std::path::Path;
use std::process::Command;

fn run(args: &[&str], envs: &[(&str, &Path)]) -> (bool, String, String) {
    let mut c = Command::new(common::bin());
    c.args(args)
        .env("INFERLAB_QUIET", "1")
        .env("INFERLAB_OFFLINE", "1");
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const LESSON: &str = "# Title\n\n## Step one\ntask: run\ncheck: steps >= 1\n";

#[test]
fn lesson_titles_and_file_names_cannot_send_escape_sequences_or_forge_lines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("01-evil.md"),
        "# Evil \x1b[2J\x1b]0;owned\x07 title\r\n\n## S\ntask: run\ncheck: steps >= 1\n",
    )
    .unwrap();
    // A newline in a file name would forge an error line of its own.
    std::fs::write(
        d.join("02-x\nerror: all lessons deleted.md"),
        "no title here\n",
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    for args in [
        vec!["lessons", "--dir", d.to_str().unwrap()],
        vec!["lessons", "--check", "--dir", d.to_str().unwrap()],
    ] {
        let (_, out, err) = run(&args, &[("INFERLAB_DATA_DIR", data.path())]);
        let all = format!("{out}{err}");
        assert!(!all.contains('\x1b') && !all.contains('\x07'), "{all:?}");
        assert!(
            !all.lines()
                .any(|l| l.starts_with("error: all lessons deleted")),
            "{all}"
        );
        assert!(all.contains("02-x?error: all lessons deleted.md"), "{all}");
    }
}

#[test]
fn two_lessons_with_one_id_a_byte_order_mark_and_a_flood_of_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Ids drop the number: both files are lesson `cache`.
    std::fs::write(d.join("01-cache.md"), format!("\u{feff}{LESSON}")).unwrap();
    std::fs::write(d.join("02-cache.md"), LESSON).unwrap();
    let flood: String = (0..60_000).map(|i| format!("{{nope{i}}}\n")).collect();
    std::fs::write(d.join("03-flood.md"), format!("{LESSON}{flood}")).unwrap();
    let (ok, _, err) = run(&["lessons", "--check", "--dir", d.to_str().unwrap()], &[]);
    assert!(!ok);
    assert!(
        err.contains("02-cache.md:1: lesson id `cache` is also the id of 01-cache.md"),
        "{err}"
    );
    // The BOM is not a missing title.
    assert!(!err.contains("/01-cache.md:"), "{err}");
    assert!(err.contains("more problems in this file"), "{err}");
    assert!(err.len() < 20_000, "{} bytes of errors", err.len());
}

#[test]
fn progress_from_the_future_is_shown_within_the_lesson() {
    let data = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("01-only.md"), LESSON).unwrap();
    std::fs::write(
        data.path().join("progress.json"),
        r#"{"lessons": {"only": {"step": 99999999, "done_steps": [0, 5, 1000000, 0, 7]}}}"#,
    )
    .unwrap();
    let (ok, out, err) = run(
        &["lessons", "--dir", dir.path().to_str().unwrap()],
        &[("INFERLAB_DATA_DIR", data.path())],
    );
    assert!(ok, "{err}");
    assert!(out.contains("1/1 steps done"), "{out}");
}

#[test]
fn sampling_and_budget_numbers_out_of_range_are_refused_not_wrapped() {
    for (args, want) in [
        (vec!["generate", "--temperature", "NaN"], "temperature"),
        (vec!["generate", "--temperature=-1"], "temperature"),
        (vec!["generate", "--top-p", "NaN"], "top-p"),
        (vec!["generate", "--top-p", "0"], "top-p"),
        (vec!["generate", "--top-p", "1.5"], "top-p"),
        (vec!["budget", "--memory", "nan"], "not a size"),
        (vec!["budget", "--memory", "inf"], "not a size"),
        (
            vec!["budget", "--seq-len", "18446744073709551615"],
            "overflows",
        ),
        (
            vec!["budget", "--kv-bytes", "4611686018427387904"],
            "--kv-bytes",
        ),
        (vec!["budget", "--weight-bytes", "NaN"], "--weight-bytes"),
    ] {
        let mut args = args.clone();
        if args[0] == "generate" {
            args.extend(["--prompt", "hi"]);
        }
        let (ok, out, err) = run(&args, &[]);
        assert!(!ok, "{args:?} was accepted: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn a_config_that_exists_but_is_not_a_config_is_named_for_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let hf = dir.path().join("hf");
    std::fs::create_dir(&hf).unwrap();
    std::fs::write(hf.join("config.json"), b"{\"a\":\n\xff}").unwrap();
    let (ok, _, err) = run(
        &[
            "generate",
            "--prompt",
            "hi",
            "--model",
            hf.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        !ok && err.contains("config.json") && err.contains("not UTF-8"),
        "{err}"
    );
    std::fs::remove_file(hf.join("config.json")).unwrap();
    std::fs::create_dir(hf.join("config.json")).unwrap();
    let (ok, _, err) = run(
        &[
            "generate",
            "--prompt",
            "hi",
            "--model",
            hf.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!ok && err.contains("is a directory"), "{err}");
    std::fs::remove_dir(hf.join("config.json")).unwrap();
    // 5 GB, sparse: refused by its size before a byte is read.
    let f = std::fs::File::create(hf.join("config.json")).unwrap();
    f.set_len(5 << 30).unwrap();
    let (ok, _, err) = run(
        &[
            "generate",
            "--prompt",
            "hi",
            "--model",
            hf.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        !ok && err.contains("more than a config.json may hold"),
        "{err}"
    );
    assert!(!err.contains("not found"), "{err}");
}

#[test]
fn generating_zero_tokens_reports_no_rate_rather_than_billions() {
    let (_d, tiny) = common::tiny_file(&common::Tiny::default());
    let (ok, out, err) = run(
        &[
            "generate",
            "--model",
            tiny.to_str().unwrap(),
            "--prompt",
            "the",
            "--max-tokens",
            "0",
            "--json",
        ],
        &[],
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["prefill_tok_per_s"].is_null(), "{v}");
    assert!(v["decode_tok_per_s"].is_null(), "{v}");
}

#[test]
fn a_lesson_layer_the_model_lacks_is_clamped_and_said() {
    use inferlab::lesson::live::Setting;
    use inferlab::ui::app::{Action, App};
    use inferlab::worker::Event;
    let r = common::fixture::report();
    let mut app = App::new(r.settings.run);
    app.on_event(Event::Ready { model: "m".into() });
    // As a lesson's `set: layer=29 head=8` does before the first report.
    app.update(Action::Set(Setting::Layer(29)));
    app.update(Action::Set(Setting::Head(8)));
    app.on_event(Event::Report(Box::new(r.clone())));
    assert_eq!(app.screen.layer, r.cfg.n_layer - 1);
    assert_eq!(app.screen.head, r.cfg.n_head - 1);
    assert!(app.status.contains("layer 29"), "{}", app.status);
}
