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
    assert!(stdout.contains("13 lessons"), "{stdout}");
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
        "prefill and decode",
        "mqa",
        "rope",
        "flashattention",
        "pagedattention",
        "continuous batching",
        "beyond the chapter",
        "a real server",
        "connection map",
        "final knowledge check",
    ];
    for (t, want) in titles.iter().zip(order) {
        assert!(t.contains(want), "{t} should be about {want}");
    }
    // The course ends with its knowledge check, after every lesson it asks about.
    let last = lessons.last().unwrap();
    let qs: Vec<&str> = last
        .steps
        .iter()
        .flat_map(|s| &s.questions)
        .map(|q| q.text.as_str())
        .collect();
    assert!(qs.iter().any(|q| q.contains("FlashAttention")));
    assert!(qs.iter().any(|q| q.contains("grouped-query attention")));
    // Every lesson has at least one question, and every kind of prediction appears.
    assert!(lessons
        .iter()
        .all(|l| l.steps.iter().any(|s| !s.questions.is_empty())));
    for (_, kind) in Predict::ALL {
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
        "# Bad lesson\n\n## Step one\nset: focus=nowhere layout=gqa\ncolour: red\ntask: do it\n\n? Which?\n- a :: no\n- b :: no\n- c :: no\n",
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
    let text = "# T\nintro\n\n## S1\nset: layout=mqa cache=contiguous layer=4 head=2\nprompt: hi there\ntask: switch\ncheck: layout == mha and steps >= 3\nSome prose.\n? Q?\n- no :: because\n* yes :: because\n- maybe :: because\n?predict pages_next: how many?\n\n## S2\nmore\n";
    let l = parse("t.md", text).unwrap();
    assert_eq!(l.title, "T");
    assert_eq!(l.intro, "intro");
    assert_eq!(l.steps.len(), 2);
    let s = &l.steps[0];
    assert_eq!(s.set.get("layer"), Some(4));
    assert_eq!(s.set.get("head"), Some(2));
    assert_eq!(
        s.set.get("cache"),
        Some(0),
        "contiguous is the first cache kind"
    );
    assert_eq!(s.prompt.as_deref(), Some("hi there"));
    let t = s.task.as_ref().unwrap();
    assert_eq!(t.check.len(), 2);
    assert_eq!(t.check[1].var, Var::Steps);
    assert_eq!(s.questions.len(), 2);
    assert_eq!(s.prose, "Some prose.");
    assert_eq!(l.steps[1].line, 16);
    let l = parse(
        "t.md",
        "# T\n\n## S\nset: sink=on\ntask: run\ncheck: sink == on\n",
    )
    .unwrap();
    assert_eq!(l.steps[0].set.get("sink"), Some(1));
    assert_eq!(
        l.steps[0].task.as_ref().unwrap().check[0].var,
        Var::named("sink").unwrap()
    );
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
        ("? Q\n* only one :: ok", "at least three choices"),
        ("? Q\n* one :: ok\n- two :: no", "at least three choices"),
        (
            "Costs {kv_bytes} bytes.",
            "unknown live figure `{kv_bytes}`",
        ),
        ("set: workload=huge", "unknown workload `huge`"),
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
    fresh.of("x").mark_done(2);
    fresh.save_to(&p).unwrap();
    assert_eq!(Progress::load_from(&p).progress, fresh);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    // A save that cannot happen is an error the caller can show.
    let blocked = dir.path().join("progress.json").join("inner.json");
    assert!(fresh.save_to(&blocked).is_err());
}

/// Every lesson of the shipped set, parsed.
fn shipped() -> Vec<inferlab::lesson::Lesson> {
    let (lessons, errors) = inferlab::lesson::load(&inferlab::lesson::LessonSource::Dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/lessons").into(),
    ))
    .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    lessons
}

/// All the text of a lesson a learner reads: intro, prose, notices, tasks, questions,
/// choices and explanations.
fn texts(l: &inferlab::lesson::Lesson) -> Vec<String> {
    let mut out = vec![l.intro.clone()];
    for s in &l.steps {
        out.push(s.prose.clone());
        out.extend(s.notice.clone());
        out.extend(s.task.as_ref().map(|t| t.text.clone()));
        for q in &s.questions {
            out.push(q.text.clone());
            if let QuestionKind::Choice(c) = &q.kind {
                out.extend(c.iter().flat_map(|c| [c.text.clone(), c.why.clone()]));
            }
        }
    }
    out
}

#[test]
fn the_quiz_keeps_its_rules() {
    let lessons = shipped();
    let q = inferlab::lesson::quiz::stats(&lessons);
    assert!(q.min_choices >= 3, "{q:?}");
    assert!(q.predictions >= 12, "{q:?}");
    assert!(q.longest_pct() <= 35.0 && q.shortest_pct() <= 35.0, "{q:?}");
    // Shown in a shuffled order, no key is right much more often than chance.
    assert!(q.busiest_position_pct() <= 35.0, "{q:?}");
    // Nor is any place in the files, for whoever reads them there.
    let mut at = [0usize; 9];
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lessons");
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.file_name().is_some_and(|n| n == "README.md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut choice = None;
        for line in text.lines() {
            choice = match (
                line.starts_with("? "),
                line.starts_with("- ") || line.starts_with("* "),
            ) {
                (true, _) => Some(0),
                (_, true) => choice.map(|i| i + 1),
                _ => None,
            };
            if line.starts_with("* ") {
                at[choice.unwrap() - 1] += 1;
            }
        }
    }
    let most = *at.iter().max().unwrap();
    assert!(
        100 * most <= 35 * q.questions,
        "right answers by place in the files: {at:?}"
    );
    assert!(q.live_figures >= 15, "{q:?}");
    // Predictions asked before a toggle (m, f, c) are among them.
    let kinds: Vec<Predict> = lessons
        .iter()
        .flat_map(|l| &l.steps)
        .flat_map(|s| &s.questions)
        .filter_map(|q| match q.kind {
            QuestionKind::Predict(k) => Some(k),
            QuestionKind::Choice(_) => None,
        })
        .collect();
    for k in [
        Predict::KvAfterMha,
        Predict::KvAfterTiled,
        Predict::UtilAfterContiguous,
    ] {
        assert!(kinds.contains(&k), "{k:?}");
    }
    // No question is asked twice, in any lesson.
    let mut seen = std::collections::HashSet::new();
    for q in lessons
        .iter()
        .flat_map(|l| &l.steps)
        .flat_map(|s| &s.questions)
    {
        assert!(seen.insert(q.text.clone()), "asked twice: {}", q.text);
    }
}

#[test]
fn the_checker_refuses_unknown_figures_thin_choices_and_answers_given_away_by_length() {
    let two = "# T\n\n## S\n? Which?\n- a :: no\n* b :: yes\n";
    let e = parse("t.md", two).unwrap_err();
    assert!(e[0].message.contains("at least three choices"), "{e:?}");
    let figure = "# T\n\n## S\nThe cache takes {kv_bytes_per_token} bytes, not {kv_bites}.\n";
    let e = parse("t.md", figure).unwrap_err();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].line == 4 && e[0].message.contains("`{kv_bites}`"),
        "{e:?}"
    );
    let longest = "# T\n\n## S\n? A?\n- x :: no\n- y :: no\n* the long one :: yes\n? B?\n- p :: no\n- q :: no\n* also the long one :: yes\n";
    let e = parse("t.md", longest).unwrap_err();
    assert!(e[0].message.contains("the longest choice"), "{e:?}");
    // Mixed lengths pass.
    let mixed = longest.replace("* also the long one", "* z");
    assert!(parse("t.md", &mixed).is_ok());
}

#[test]
fn lesson_ids_drop_their_number_and_old_progress_follows() {
    use inferlab::lesson::format::lesson_id;
    use inferlab::lesson::progress::Progress;
    assert_eq!(lesson_id("03-kv-cache.md"), "kv-cache");
    assert_eq!(lesson_id("kv-cache.md"), "kv-cache");
    assert_eq!(lesson_id("my-notes.md"), "my-notes");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("progress.json");
    std::fs::write(
        &p,
        r#"{"lessons":{"04-mha-gqa-mqa":{"step":2,"done_steps":[0,1],"right":[],"wrong":[]}}}"#,
    )
    .unwrap();
    let loaded = Progress::load_from(&p).progress;
    assert_eq!(loaded.lessons["mha-gqa-mqa"].step, 2);
    assert!(!loaded.lessons.contains_key("04-mha-gqa-mqa"));
}

#[test]
fn the_lessons_are_in_our_own_words() {
    // No run of eight words is taken from the chapter (its runs are kept only as hashes).
    let hashes: std::collections::HashSet<u64> = include_str!("data/chapter-8grams.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| u64::from_str_radix(l, 16).unwrap())
        .collect();
    assert!(hashes.len() > 1000);
    let fnv = |s: &str| {
        s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        })
    };
    for l in shipped() {
        let text = texts(&l).join(" ").to_lowercase().replace('’', "'");
        let words: Vec<&str> = text
            .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '\''))
            .filter(|w| !w.is_empty())
            .collect();
        for run in words.windows(8) {
            let run = run.join(" ");
            assert!(
                !hashes.contains(&fnv(&run)),
                "{}: \"{run}\" is the chapter's",
                l.file
            );
        }
    }
}

#[test]
fn every_number_in_the_lessons_is_a_live_figure_or_a_checked_fact() {
    use inferlab::model::{LoadOptions, Model};
    let m = Model::load(&common::real_model(), &LoadOptions::default()).unwrap();
    let c = &m.cfg;
    let llama = inferlab::budget::presets()
        .into_iter()
        .find(|s| s.name == "llama-3-8b")
        .unwrap();
    let b = inferlab::budget::compute(
        &llama,
        24 << 30,
        2,
        4096,
        inferlab::budget::KvNumbers::Bytes(2),
    )
    .unwrap();
    let mut facts: Vec<u64> = vec![
        c.n_layer,
        c.n_head,
        c.n_kv_head,
        c.head_dim,
        c.hidden,
        c.ffn,
        c.vocab,
        (c.head_dim as f64).sqrt() as usize,
        inferlab::worker::APP_PAGE_SIZE,
        inferlab::worker::SINK_WINDOW,
        inferlab::worker::long_parts().len(),
        std::mem::size_of::<f32>(),
        // The cache's element types: int8's largest step count, and one row of a head's
        // numbers as f32 and as int8 with its scale.
        inferlab::kv::elem::INT8_MAX as usize,
        inferlab::kv::KvElem::F32.row_bytes(c.head_dim),
        inferlab::kv::KvElem::Int8.row_bytes(c.head_dim),
        inferlab::serve::workload::APP_CHUNK_TOKENS,
        inferlab::serve::workload::CHAT_MAX_TOKENS,
        // The share of its time the chat arrivals keep continuous batching busy, percent.
        (100.0 * inferlab::serve::rate::BUSY_SHARE).round() as usize,
        llama.layers,
        llama.n_head,
        llama.n_kv_head,
        llama.head_dim,
        0, // the first position, page 0
        2, // bytes of an f16/bf16 element, the budget's default
    ]
    .into_iter()
    .map(|n| n as u64)
    .collect();
    facts.extend(b.lines.iter().map(|l| l.kv_bytes_per_token));
    // Quoted, not claimed about this engine: the chapter's measured ~22× and a citation year.
    facts.extend([22, 2023]);
    for l in shipped() {
        for text in texts(&l) {
            for n in numbers(&text) {
                assert!(
                    facts.contains(&n),
                    "{}: {n} in \"{text}\" is neither a live figure nor a checked fact",
                    l.file
                );
            }
        }
    }
}

/// Numbers written as digits, outside `{figures}`, code spans and names such as `f16` or
/// `SmolLM2-135M`.
fn numbers(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let plain: String = text.split('`').step_by(2).collect::<Vec<_>>().join(" ");
    let chars: Vec<char> = plain.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit()
                    || (chars[i] == ',' && i + 1 < chars.len() && chars[i + 1].is_ascii_digit()))
            {
                i += 1;
            }
            let before = start.checked_sub(1).map(|j| chars[j]);
            let after = chars.get(i).copied();
            let in_name = before
                .is_some_and(|c| c.is_alphabetic() || c == '-' || c == '{' || c == '_')
                || after.is_some_and(|c| c.is_alphabetic() || c == '_' || c == '}');
            if !in_name {
                let digits: String = chars[start..i].iter().filter(|c| **c != ',').collect();
                out.push(digits.parse().unwrap());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Every term a lesson writes as an acronym or a coined name (two capitals or more: GQA,
/// TTFT, RoPE, FlashAttention) is in the glossary (G), unless it names a unit, a machine
/// part, a product or a paper rather than an idea the lessons teach.
#[test]
fn the_glossary_has_every_term_the_lessons_use() {
    let names_not_ideas = [
        "MB",
        "GB",
        "KiB",
        "GFLOP",
        "CPU",
        "GPU",
        "SRAM",
        "RMS",
        "SmolLM2",
        "SmolLM2-135M",
        "vLLM",
        "SGLang",
        "PyPI",
        "TensorRT-LLM",
        "StreamingLLM",
        "ORCA",
        "YaRN",
        "NTK",
    ];
    let glossary: Vec<&str> = inferlab::ui::panes::glossary::entries()
        .iter()
        .flat_map(|(term, _)| term.split(|c: char| !(c.is_alphanumeric() || c == '-')))
        .filter(|w| !w.is_empty())
        .collect();
    let mut missing = std::collections::BTreeSet::new();
    for l in shipped() {
        for text in texts(&l) {
            for w in text.split(|c: char| !(c.is_alphanumeric() || c == '-')) {
                let w = w.trim_matches('-');
                let w = w.strip_suffix("-class").unwrap_or(w);
                let capitals = w.chars().filter(|c| c.is_ascii_uppercase()).count();
                if capitals >= 2 && !names_not_ideas.contains(&w) && !glossary.contains(&w) {
                    missing.insert(format!("{w} ({})", l.file));
                }
            }
        }
    }
    assert!(missing.is_empty(), "not in the glossary: {missing:?}");
}

/// Every step says what its text points at, so the scripted learner can check it is on
/// screen; and `shows:` is parsed into pieces, an empty piece refused with its line.
#[test]
fn every_step_declares_what_it_points_at() {
    let (lessons, errors) = inferlab::lesson::load(&inferlab::lesson::LessonSource::Dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/lessons").into(),
    ))
    .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    for l in &lessons {
        for s in &l.steps {
            assert!(
                !s.shows.is_empty(),
                "{}:{}: `{}` declares no `shows:`",
                l.file,
                s.line,
                s.title
            );
        }
    }
    let l = parse(
        "t.md",
        "# T\n\n## S\nshows: ridge ; time per layer\nText.\n",
    )
    .unwrap();
    assert_eq!(l.steps[0].shows, ["ridge", "time per layer"]);
    let e = parse("t.md", "# T\n\n## S\nshows: ridge ; \nText.\n").unwrap_err();
    assert!(e.iter().any(|e| e.line == 4), "{e:?}");
}

#[test]
fn the_lesson_words_of_element_and_weight_types_are_their_names() {
    use inferlab::lesson::keys::{key, KEYS};
    let words = |name| KEYS[key(name).unwrap()].words();
    let elems: Vec<&str> = inferlab::kv::KvElem::ALL.iter().map(|e| e.name()).collect();
    assert_eq!(words("kv_elem"), elems);
    let weights = [
        inferlab::model::Requant::Keep,
        inferlab::model::Requant::Q8_0,
        inferlab::model::Requant::F32,
        inferlab::model::Requant::F16,
        inferlab::model::Requant::Q4,
    ];
    let names: Vec<&str> = weights.iter().map(|w| w.name()).collect();
    assert_eq!(words("weights"), names);
}

#[test]
fn the_format_guide_lists_every_setting_with_every_word() {
    use inferlab::lesson::keys::{Takes, KEYS};
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/lessons/README.md")).unwrap();
    let set_table = guide
        .split("## `set:` keys")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the guide has a `set:` table");
    for key in &KEYS {
        let row = set_table
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", key.name)))
            .unwrap_or_else(|| panic!("the guide's `set:` table has no row for `{}`", key.name));
        if matches!(key.takes, Takes::Words(_)) {
            for w in key.words() {
                assert!(
                    row.contains(&format!("`{w}`")),
                    "the guide's `{}` row lacks `{w}`: {row}",
                    key.name
                );
            }
        }
    }
}

#[test]
fn a_recompute_under_new_settings_starts_the_decode_step_count_again() {
    use inferlab::lesson::{progress::Progress, tutor::Tutor};
    let mut t = Tutor::new(Vec::new(), 0, Progress::default(), false);
    let step = |i: usize, recomputed: bool| {
        let mut r = common::fixture::numbered(i);
        r.recomputed = recomputed;
        r
    };
    for i in 2..=6 {
        t.observe(&step(i, false));
    }
    assert_eq!(t.decode_seen, 5);
    // `W` loads other weights: the request is recomputed, and only steps on them count.
    t.observe(&step(7, true));
    assert_eq!(t.decode_seen, 0);
    t.observe(&step(8, false));
    assert_eq!(t.decode_seen, 1);
}
