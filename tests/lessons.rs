//! Lesson files: the shipped ones validate, broken ones fail with file:line, and the
//! parser survives any input.

mod common;

use inferlab::lesson::{parse, Predict, QuestionKind, Var};
use proptest::prelude::*;
use std::process::Command;

#[test]
fn shipped_lessons_pass_the_check_through_the_binary() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lessons");
    let out = Command::new(common::bin())
        .args(["lessons", "--check", "--dir", dir])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("11 lessons"), "{stdout}");
}

#[test]
fn the_lessons_walk_the_chapter_in_order_and_ask_its_two_questions() {
    let (lessons, errors) = inferlab::lesson::load(&inferlab::lesson::LessonSource::Dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/lessons").into(),
    ))
    .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let titles: Vec<String> = lessons.iter().map(|l| l.title.to_lowercase()).collect();
    let order = [
        "forward pass",
        "q, k, v",
        "kv cache",
        "mqa",
        "rope",
        "flashattention",
        "pagedattention",
        "continuous batching",
        "connection map",
        "final knowledge check",
        "beyond the chapter",
    ];
    for (t, want) in titles.iter().zip(order) {
        assert!(t.contains(want), "{t} should be about {want}");
    }
    // The chapter ends with its knowledge check; lessons after it go beyond the chapter.
    let last = &lessons[9];
    let qs: Vec<&str> = last
        .steps
        .iter()
        .flat_map(|s| &s.questions)
        .map(|q| q.text.as_str())
        .collect();
    assert!(qs.iter().any(|q| q.contains("FlashAttention")));
    assert!(qs.iter().any(|q| q.contains("grouped-query attention")));
    // Every lesson has at least one question, and all three predictions appear somewhere.
    assert!(lessons
        .iter()
        .all(|l| l.steps.iter().any(|s| !s.questions.is_empty())));
    for kind in [Predict::TopAttended, Predict::PagesNext, Predict::NextJoin] {
        assert!(lessons
            .iter()
            .flat_map(|l| &l.steps)
            .flat_map(|s| &s.questions)
            .any(|q| q.kind == QuestionKind::Predict(kind)));
    }
    // The shipped copy inside the binary is the same set of files.
    assert_eq!(inferlab::lesson::SHIPPED.len(), lessons.len());
}

#[test]
fn broken_lessons_fail_the_check_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("01-bad.md"),
        "# Bad lesson\n\n## Step one\nset: focus=nowhere layout=gqa\ncolour: red\ntask: do it\n\n? Which?\n- a :: no\n- b :: no\n",
    )
    .unwrap();
    let out = Command::new(common::bin())
        .args(["lessons", "--check", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let file = dir.path().join("01-bad.md").display().to_string();
    assert!(
        err.contains(&format!("{file}:4: unknown pane `nowhere`")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{file}:5: unknown key `colour:`")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{file}:6: a task needs a `check:`")),
        "{err}"
    );
    assert!(err.contains(&format!("{file}:8: no right answer")), "{err}");
}

#[test]
fn the_parser_reads_settings_tasks_and_questions() {
    let text = "# T\nintro\n\n## S1\nset: layout=mqa cache=contiguous layer=4 head=2\nprompt: hi there\ntask: switch\ncheck: layout == mha and steps >= 3\nSome prose.\n? Q?\n- no :: because\n* yes :: because\n?predict pages_next: how many?\n\n## S2\nmore\n";
    let l = parse("t.md", text).unwrap();
    assert_eq!(l.title, "T");
    assert_eq!(l.intro, "intro");
    assert_eq!(l.steps.len(), 2);
    let s = &l.steps[0];
    assert_eq!(s.set.layer, Some(4));
    assert_eq!(s.set.head, Some(2));
    assert_eq!(s.prompt.as_deref(), Some("hi there"));
    let t = s.task.as_ref().unwrap();
    assert_eq!(t.check.len(), 2);
    assert_eq!(t.check[1].var, Var::Steps);
    assert_eq!(s.questions.len(), 2);
    assert_eq!(s.prose, "Some prose.");
    assert_eq!(l.steps[1].line, 15);
    let l = parse(
        "t.md",
        "# T\n\n## S\nset: sink=on\ntask: run\ncheck: sink == on\n",
    )
    .unwrap();
    assert_eq!(l.steps[0].set.sink, Some(true));
    assert_eq!(l.steps[0].task.as_ref().unwrap().check[0].var, Var::Sink);
}

#[test]
fn settings_and_checks_that_do_not_exist_are_refused() {
    for (bad, want) in [
        ("set: layer=30", "layer `30` does not exist"),
        ("set: head=9", "head `9` does not exist"),
        ("set: speed=3", "unknown setting `speed`"),
        ("set: cache=ring", "unknown cache kind"),
        ("set: sink=maybe", "sink experiment"),
        ("task: x\ncheck: sink == maybe", "not a value of `sink`"),
        (
            "task: x\ncheck: tokens >= 3",
            "unknown check variable `tokens`",
        ),
        (
            "task: x\ncheck: layout >= mha",
            "compares with == or != only",
        ),
        ("task: x\ncheck: layout == xyz", "not a value of `layout`"),
        ("task: x\ncheck: steps >= many", "is not a number"),
        ("?predict future: q", "unknown prediction `future`"),
        ("? Q\n* only one :: ok", "at least two choices"),
        ("? Q\n* a\n- b :: x", "after `::`"),
        (
            "? Q\n* a :: Right: yes\n- b :: no",
            "the app says `Right:` itself",
        ),
        ("task: x\ncheck: tokens >= 3", "unknown check variable"),
    ] {
        let text = format!("# T\n\n## S\n{bad}\n");
        let e = parse("x.md", &text).unwrap_err();
        assert!(e.iter().any(|e| e.message.contains(want)), "{bad}: {e:?}");
    }
    // A check line that is there but wrong is reported as wrong, not as missing.
    let e = parse("x.md", "# T\n\n## S\ntask: x\ncheck: tokens >= 3\n").unwrap_err();
    assert!(
        !e.iter().any(|e| e.message.contains("needs a `check:`")),
        "{e:?}"
    );
    let e = parse(
        "x.md",
        "# T\n\n## S\ntask: x\ncheck: steps > 1\ncheck: steps > 2\n",
    )
    .unwrap_err();
    assert!(
        e.iter()
            .any(|e| e.message.contains("one `check:` per task")),
        "{e:?}"
    );
    assert!(parse("x.md", "no title\n## S\n").is_err());
    assert!(parse("x.md", "# T\nno steps\n").is_err());
}

proptest! {
    #[test]
    fn the_parser_never_panics(text in "(#|##|\\?|\\?predict|-|\\*|set:|check:|task:|::|=|[a-z ]|\n){0,300}") {
        let _ = parse("fuzz.md", &text);
    }

    #[test]
    fn the_parser_never_panics_on_any_unicode(text in "\\PC{0,400}") {
        let _ = parse("fuzz.md", &text);
    }
}

#[test]
fn a_non_utf8_lesson_is_named_while_the_others_still_list() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/lessons");
    let first = std::fs::read_dir(shipped)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md") && !p.ends_with("README.md"))
        .min()
        .unwrap();
    std::fs::copy(&first, dir.path().join(first.file_name().unwrap())).unwrap();
    std::fs::write(dir.path().join("99-latin1.md"), b"# Caf\xe9\n").unwrap();
    let out = Command::new(common::bin())
        .args(["lessons", "--dir", dir.path().to_str().unwrap()])
        .env("INFERLAB_DATA_DIR", dir.path())
        .output()
        .unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(so.contains(" 1. "), "the good lesson lists: {so}{se}");
    assert!(se.contains("99-latin1.md") && se.contains("UTF-8"), "{se}");
}

#[test]
fn a_corrupt_progress_file_is_moved_aside_and_saves_are_atomic() {
    use inferlab::lesson::progress::Progress;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("progress.json");
    std::fs::write(&p, "{ not json").unwrap();
    let loaded = Progress::load_from(&p);
    let notice = loaded.notice.unwrap();
    assert!(notice.contains("kept as") && loaded.may_save, "{notice}");
    assert!(!p.exists(), "moved aside, not left to be overwritten");
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), "{ not json");
    // A save writes the whole file and leaves no temporary behind.
    let mut fresh = loaded.progress;
    fresh.of("01-x").mark_done(2);
    fresh.save_to(&p).unwrap();
    assert_eq!(Progress::load_from(&p).progress, fresh);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    // A save that cannot happen is an error the caller can show.
    let blocked = dir.path().join("progress.json").join("inner.json");
    assert!(fresh.save_to(&blocked).is_err());
}
