//! Each pane drawn from a fixed step report into ratatui's TestBackend, snapshotted.
//! The theme is NO_COLOR so the values show up as shade characters in the text snapshot.

mod common;

use common::fixture::{app, capture, numbered, report};
use inferlab::lesson::format::QuestionKind;
use inferlab::model::{HeadLayout, RunOptions};
use inferlab::ui::app::{Action, App, Pane};
use inferlab::ui::theme::{ColorMode, Theme};
use inferlab::ui::{draw, panes};
use inferlab::worker::Event;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

const THEME: Theme = Theme {
    mode: ColorMode::None,
};

fn render(w: u16, h: u16, f: impl Fn(&App, &mut ratatui::Frame)) -> TestBackend {
    let app = app();
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|fr| f(&app, fr)).unwrap();
    term.backend().clone()
}

#[test]
fn heatmap_pane() {
    let b = render(60, 16, |a, f| {
        panes::heatmap::render(a, &THEME, f.area(), f.buffer_mut())
    });
    insta::assert_snapshot!(b);
}

#[test]
fn heads_pane() {
    let b = render(44, 12, |a, f| {
        panes::heads::render(a, &THEME, f.area(), f.buffer_mut())
    });
    insta::assert_snapshot!(b);
}

#[test]
fn kv_pane() {
    let b = render(44, 9, |a, f| {
        panes::kv::render(a, &THEME, f.area(), f.buffer_mut())
    });
    insta::assert_snapshot!(b);
}

#[test]
fn output_pane() {
    let b = render(44, 10, |a, f| {
        panes::output::render(a, &THEME, f.area(), f.buffer_mut())
    });
    insta::assert_snapshot!(b);
}

#[test]
fn forward_pane() {
    let b = render(100, 11, |a, f| {
        panes::forward::render(a, &THEME, f.area(), f.buffer_mut())
    });
    insta::assert_snapshot!(b);
}

#[test]
fn help_overlay_lists_every_key() {
    let b = render(90, 26, |_, f| {
        panes::help::render(&THEME, f.area(), f.buffer_mut())
    });
    let text = format!("{b}");
    for k in inferlab::ui::keys::BINDINGS {
        // No blank placeholder rows: every binding is a line of help.
        assert!(!k.keys.is_empty() && !k.help.is_empty() && !k.on.is_empty());
        assert!(text.contains(k.help), "help lacks {}", k.keys);
    }
    insta::assert_snapshot!(b);
    // The smallest terminal the app runs in shows every key too.
    let small = render(80, 24, |_, f| {
        panes::help::render(&THEME, f.area(), f.buffer_mut())
    });
    let small = format!("{small}");
    for k in inferlab::ui::keys::BINDINGS {
        assert!(small.contains(k.help), "80×24 help lacks {}", k.keys);
    }
}

#[test]
fn too_small_terminal_says_so() {
    let b = render(50, 12, |a, f| {
        draw::draw(a, &THEME, f.area(), f.buffer_mut())
    });
    assert!(format!("{b}").contains("at least 80×24"));
}

#[test]
fn head_selection_moves_the_heatmap() {
    let mut a = app();
    a.update(Action::HeadRight);
    a.update(Action::LayerDown);
    assert_eq!((a.screen.head, a.screen.layer), (1, 1));
    a.update(Action::HeadLeft);
    a.update(Action::HeadLeft);
    assert_eq!(a.screen.head, 2, "wraps around");
    // Scrolling moves the heatmap window back and stops at the first position.
    a.update(Action::ScrollBack);
    assert_eq!(a.screen.scroll, 8);
    a.update(Action::ScrollBack);
    assert_eq!(a.screen.scroll, 9);
    a.update(Action::ScrollForward);
    assert_eq!(a.screen.scroll, 1);
    // The history holds every query row for every layer.
    assert_eq!(a.frames.shown().history[1].weights.len(), 10);
    assert_eq!(a.frames.shown().history[1].weights[9][0].len(), 10);
}

#[test]
fn full_screen_render_at_200x60() {
    let b = render(200, 60, |a, f| {
        draw::draw(a, &THEME, f.area(), f.buffer_mut())
    });
    let text = format!("{b}");
    assert!(text.contains("attention · layer 0/1"));
    assert!(text.contains("KV cache"));
}

#[test]
fn serving_pane_from_a_real_engine_on_the_tiny_model() {
    use inferlab::serve::CacheKind;
    for cache in [CacheKind::Paged, CacheKind::Contiguous] {
        let mut a = app();
        a.settings.serving.cache = cache;
        for r in common::fixture::serving_reports(cache, 6) {
            a.on_event(Event::Report(Box::new(r)));
        }
        let mut term = Terminal::new(TestBackend::new(50, 14)).unwrap();
        term.draw(|f| panes::serving::render(&a, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
        insta::assert_snapshot!(format!("serving_{cache:?}").to_lowercase(), term.backend());
    }
}

#[test]
fn a_tall_serving_pane_gives_each_page_its_fill_and_its_owner_and_every_block_table() {
    use inferlab::serve::CacheKind;
    let mut a = app();
    for r in common::fixture::serving_reports(CacheKind::Paged, 3) {
        a.on_event(Event::Report(Box::new(r)));
    }
    let mut term = Terminal::new(TestBackend::new(60, 40)).unwrap();
    term.draw(|f| panes::serving::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    insta::assert_snapshot!("serving_tall", term.backend());
    let text = format!("{}", term.backend());
    let sv = a.report().unwrap().serve.clone().unwrap();
    assert!(sv.step.block_tables.len() > 1);
    for (id, _) in &sv.step.block_tables {
        assert!(
            text.contains(&format!("block table r{id} ")),
            "r{id}\n{text}"
        );
    }
}

#[test]
fn a_narrow_pane_beside_still_names_the_layout_it_ran_under() {
    use inferlab::model::HeadLayout;
    use inferlab::settings::Compare;
    let mut a = app();
    for mut r in common::fixture::serving_reports(inferlab::serve::CacheKind::Paged, 3) {
        r.settings.serving.compare = Compare::Layout;
        let mut beside = r.serve.clone().unwrap();
        beside.layout = Some(HeadLayout::Mha);
        r.serve_compare = Some(beside);
        a.on_event(Event::Report(Box::new(r)));
    }
    a.settings.serving = a.report().unwrap().settings.serving;
    // 37 columns: a third of a 120-column screen, where the long title does not fit.
    let mut term = Terminal::new(TestBackend::new(37, 20)).unwrap();
    term.draw(|f| panes::serving::render_compare(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", term.backend());
    assert!(text.contains("· mha"), "{text}");
}

#[test]
fn static_batching_draws_finished_rows_as_padding() {
    use inferlab::serve::{CacheKind, Policy};
    let mut a = app();
    a.settings.serving.policy = Policy::Static;
    for r in common::fixture::serving_reports_with(Policy::Static, CacheKind::Paged, 14) {
        a.on_event(Event::Report(Box::new(r)));
    }
    let mut term = Terminal::new(TestBackend::new(50, 14)).unwrap();
    term.draw(|f| panes::serving::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", term.backend());
    assert!(text.contains("static batching"), "{text}");
    assert!(
        text.contains('░'),
        "a finished request keeps its row: {text}"
    );
    insta::assert_snapshot!(term.backend());
}

/// The shipped lessons, every one of them valid.
fn shipped_lessons() -> Vec<inferlab::lesson::Lesson> {
    let (lessons, errors) = inferlab::lesson::load(&inferlab::lesson::LessonSource::Dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/lessons").into(),
    ))
    .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    lessons
}

/// Opens the shipped lesson `id` in `a` at step `step` (from 0), as a learner's saved
/// progress resumes it.
fn open_at(a: &mut App, id: &str, step: usize) {
    let lessons = shipped_lessons();
    let l = lessons.iter().position(|l| l.id() == id).unwrap();
    let mut progress = inferlab::lesson::progress::Progress::default();
    progress.of(id).step = step;
    a.open_lesson(inferlab::lesson::tutor::Tutor::new(
        lessons, l, progress, false,
    ));
}

fn tutor_app(lesson: usize) -> App {
    let mut a = app();
    let t =
        inferlab::lesson::tutor::Tutor::new(shipped_lessons(), lesson, Default::default(), false);
    a.open_lesson(t);
    a
}

#[test]
fn lesson_panel() {
    let a = tutor_app(1);
    let mut term = Terminal::new(TestBackend::new(50, 34)).unwrap();
    term.draw(|f| panes::lesson::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let b = term.backend().clone();
    let text = format!("{b}");
    assert!(text.contains("lesson 2/13 · step 1/4"), "{text}");
    // The step opened after the fixture's iteration, so its task is still open.
    assert!(text.contains("[ ] Task: Prefill the prompt."), "{text}");
    insta::assert_snapshot!(b);
}

#[test]
fn a_lesson_step_sets_the_app_and_notices_the_task() {
    use inferlab::worker::Command;
    let mut a = tutor_app(4);
    // Step 1 of the heads lesson asks for GQA and sends its prompt.
    assert_eq!(a.settings.run.layout, HeadLayout::Gqa);
    assert_eq!(a.screen.focus, inferlab::ui::app::Pane::Heads);
    // n: step 2, whose task is "switch to MHA".
    assert!(a.update(Action::NextStep).is_empty());
    assert_eq!(a.tutor.as_ref().unwrap().step, 1);
    assert!(!a.task_done());
    // m cycles GQA → MQA → MHA; only then is the task done.
    assert!(matches!(
        a.update(Action::CycleLayout).as_slice(),
        [Command::Apply(_)]
    ));
    assert!(!a.task_done());
    a.update(Action::CycleLayout);
    assert!(a.task_done());
    // The last step sets GQA back: going there sends the run change.
    a.update(Action::NextStep);
    let c = a.update(Action::NextStep);
    assert!(
        matches!(c.as_slice(), [Command::Apply(s)] if s.run.layout == HeadLayout::Gqa),
        "{c:?}"
    );
    // p goes back a step.
    a.update(Action::PrevStep);
    assert_eq!(a.tutor.as_ref().unwrap().step, 2);
}

/// The key (1–9) of the first shown choice of the open step's question `q` that `pick`
/// accepts: choices are shown shuffled, so tests find them by what they say.
fn key_of(a: &App, q: usize, pick: impl Fn(&inferlab::lesson::format::Choice) -> bool) -> usize {
    let step = a.tutor.as_ref().unwrap().step().unwrap();
    let QuestionKind::Choice(c) = &step.questions[q].kind else {
        panic!("question {q} is a prediction");
    };
    1 + c.iter().position(pick).expect("such a choice")
}

/// The whole screen at `w`×`h` as text.
fn screen_text(a: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| draw::draw(a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    format!("{}", t.backend())
}

/// The lesson pane alone at `w`×`h` as text.
fn lesson_text(a: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| panes::lesson::render(a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    format!("{}", t.backend())
}

/// The key of question `q`'s right answer.
fn right_key(a: &App, q: usize) -> usize {
    key_of(a, q, |c| c.right)
}

#[test]
fn an_answer_s_verdict_is_scrolled_into_view_at_80x24() {
    let mut a = tutor_app(0);
    a.update(Action::NextStep);
    a.update(Action::NextStep);
    let screen = |a: &App| screen_text(a, 80, 24);
    for qi in 0..3 {
        a.update(Action::Answer(right_key(&a, qi)));
        let why = a.tutor.as_ref().unwrap().answers[qi].clone().unwrap().why;
        let start: String = why.chars().take(30).collect();
        let before = screen(&a);
        draw::reveal_verdict(ratatui::layout::Rect::new(0, 0, 80, 24), &mut a);
        let after = screen(&a);
        assert!(after.contains(&start), "question {qi}: {start}\n{after}");
        if qi == 0 {
            // Below the step's prose, the first verdict is off screen until revealed.
            assert!(!before.contains(&start), "{before}");
        }
    }
}

#[test]
fn a_later_question_says_its_choices_open_after_the_one_above() {
    let mut a = tutor_app(0);
    a.update(Action::NextStep);
    a.update(Action::NextStep);
    let pane = |a: &App| lesson_text(a, 70, 60);
    let hint = "choices open once the question above is answered";
    assert_eq!(pane(&a).matches(hint).count(), 2, "{}", pane(&a));
    for qi in 0..3 {
        a.update(Action::Answer(right_key(&a, qi)));
    }
    assert!(!pane(&a).contains(hint), "{}", pane(&a));
}

#[test]
fn answers_are_graded_with_their_explanation() {
    let mut a = tutor_app(0);
    a.update(Action::NextStep);
    a.update(Action::NextStep);
    let t = a.tutor.as_ref().unwrap();
    assert_eq!(t.step().unwrap().questions.len(), 3);
    let wrong = key_of(&a, 0, |c| c.why.contains("works on each position alone"));
    a.update(Action::Answer(wrong));
    let ans = a.tutor.as_ref().unwrap().answers[0].clone().unwrap();
    assert!(!ans.right && ans.why.contains("works on each position alone"));
    assert_eq!(a.tutor.as_ref().unwrap().open_question(), Some(0));
    a.update(Action::Answer(right_key(&a, 0)));
    assert!(a.tutor.as_ref().unwrap().answers[0].as_ref().unwrap().right);
    assert_eq!(a.tutor.as_ref().unwrap().open_question(), Some(1));
    let key = "forward-pass";
    assert_eq!(
        a.tutor.as_ref().unwrap().progress.lessons[key].right,
        ["2.0"]
    );
}

#[test]
fn a_prediction_runs_the_next_step_and_is_graded_by_what_the_model_did() {
    use inferlab::worker::Command;
    let mut a = tutor_app(1);
    for _ in 0..3 {
        a.update(Action::NextStep);
    }
    // The lesson's prompt has been prefilled: the fixture's report stands for it.
    assert!(a.worker.prompt_queued);
    a.worker.prompt_queued = false;
    // Choice 1 is position 0, the first token.
    let live =
        inferlab::lesson::predict::live_choices(&a.live(), inferlab::lesson::Predict::TopAttended)
            .unwrap();
    assert_eq!(live.values[0], 0);
    assert!(matches!(
        a.update(Action::Answer(1)).as_slice(),
        [Command::Step]
    ));
    // The decode step that follows: head 0 of every layer looks hardest at position 0.
    a.on_event(Event::Report(Box::new(
        decode_report_attending_to_the_first_token(),
    )));
    let t = a.tutor.as_ref().unwrap();
    assert!(t.pending.is_none());
    let ans = t.answers[0].as_ref().unwrap();
    assert!(ans.right, "{ans:?}");
    assert!(
        ans.why.contains("70% of its weight on position 0"),
        "{}",
        ans.why
    );
}

/// A decode report in which head 0 of every layer puts 70% of its weight on position 0.
fn decode_report_attending_to_the_first_token() -> inferlab::report::StepReport {
    let mut r = report();
    r.iteration = 4;
    r.info.step = 1;
    r.pieces.push(" keeps".into());
    let kv = r.pieces.len();
    r.info.captures = (0..2)
        .map(|layer| {
            let mut c = capture(layer, 1);
            c.kv_len = kv;
            c.pos0 = kv - 1;
            c.weights = (0..3 * kv)
                .map(|i| {
                    if i % kv == 0 {
                        0.7
                    } else {
                        0.3 / (kv - 1) as f32
                    }
                })
                .collect();
            c.scores = c.weights.clone();
            c
        })
        .collect();
    r
}

#[test]
fn a_wrong_prediction_asks_about_the_next_iteration_instead_of_a_retry() {
    let mut a = tutor_app(1);
    for _ in 0..3 {
        a.update(Action::NextStep);
    }
    // The lesson's prompt has been prefilled: the fixture's report stands for it.
    assert!(a.worker.prompt_queued);
    a.worker.prompt_queued = false;
    // Choice 2 is position 1; the model will look at position 0.
    a.update(Action::Answer(2));
    a.on_event(Event::Report(Box::new(
        decode_report_attending_to_the_first_token(),
    )));
    let ans = a.tutor.as_ref().unwrap().answers[0].clone().unwrap();
    assert!(!ans.right, "{ans:?}");
    let mut term = Terminal::new(TestBackend::new(70, 60)).unwrap();
    term.draw(|f| panes::lesson::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", term.backend());
    assert!(text.contains("Not quite: layer"), "{text}");
    assert!(text.contains("That iteration has passed"), "{text}");
    assert!(!text.contains("try again"), "{text}");
    // The fresh choices are listed, and none is highlighted as the old pick.
    assert!(text.contains("  1. "), "{text}");
}

#[test]
fn explanations_do_not_repeat_the_verdict_and_the_last_step_counts_when_shown() {
    let mut a = tutor_app(0);
    a.update(Action::NextStep);
    a.update(Action::NextStep);
    a.update(Action::Answer(right_key(&a, 0)));
    let mut term = Terminal::new(TestBackend::new(70, 60)).unwrap();
    term.draw(|f| panes::lesson::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", term.backend());
    assert!(text.contains("Right: "), "{text}");
    assert!(!text.contains("Right: Right"), "{text}");
    // This step has no task, so it counts as done once all
    // three questions are answered right, without pressing n past it.
    let key = "forward-pass";
    let done = |a: &App| {
        let t = a.tutor.as_ref().unwrap();
        t.progress
            .lessons
            .get(key)
            .is_some_and(|p| p.done_steps.contains(&2))
    };
    assert_eq!(a.tutor.as_ref().unwrap().step, 2);
    assert_eq!(a.tutor.as_ref().unwrap().current().unwrap().steps.len(), 4);
    assert!(!done(&a));
    a.update(Action::Answer(right_key(&a, 1)));
    assert!(!done(&a));
    a.update(Action::Answer(right_key(&a, 2)));
    assert!(done(&a), "{:?}", a.tutor.as_ref().unwrap().progress);
}

#[test]
fn scrubbing_walks_back_through_the_session_and_resumes_live() {
    let mut a = App::new(RunOptions::default());
    a.on_event(Event::Ready {
        model: "fixture.gguf".into(),
    });
    for i in 1..=4 {
        a.on_event(Event::Report(Box::new(numbered(i))));
    }
    assert_eq!(a.frames.past().len(), 4);
    a.update(Action::ScrubBack);
    assert_eq!(a.report().unwrap().iteration, 3);
    assert!(a.status.contains("history: iteration 3"));
    for _ in 0..5 {
        a.update(Action::ScrubBack);
    }
    assert_eq!(a.report().unwrap().iteration, 1);
    assert!(a.status.contains("start of the session"), "{}", a.status);
    a.update(Action::ScrubForward);
    assert_eq!(a.report().unwrap().iteration, 2);
    // Every pane draws the chosen iteration: the output pane shows its text.
    let mut term = Terminal::new(TestBackend::new(44, 10)).unwrap();
    term.draw(|f| panes::output::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    assert!(format!("{}", term.backend()).contains("text after 2"));
    // Forward past the newest iteration returns to the live state.
    a.update(Action::ScrubForward);
    a.update(Action::ScrubForward);
    assert!(a.frames.cursor().is_none());
    assert_eq!(a.report().unwrap().iteration, 4);
    // A step while scrubbed goes back to live first.
    a.update(Action::ScrubBack);
    assert!(matches!(
        a.update(Action::Step).as_slice(),
        [inferlab::worker::Command::Step]
    ));
    assert!(a.frames.cursor().is_none());
}

#[test]
fn a_recording_round_trips_and_bad_ones_are_refused_by_name() {
    use inferlab::worker::recording::{self, RecordingError};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let mut rec = recording::Recorder::create(&path, "fixture.gguf", Default::default()).unwrap();
    for i in 1..=3 {
        rec.write(&numbered(i)).unwrap();
    }
    drop(rec);
    let rec_back = recording::read(&path).unwrap();
    let (h, reports) = (rec_back.header, rec_back.reports);
    assert_eq!(h.version, recording::VERSION);
    assert_eq!(reports.len(), 3);
    assert_eq!(reports[2].generated, "text after 3");
    let w = &reports[0].info.captures[0].weights;
    assert_eq!(w, &report().info.captures[0].weights);
    // Newer format, corrupt line, not a recording, empty.
    let text = std::fs::read_to_string(&path).unwrap();
    let newer = dir.path().join("newer.jsonl");
    std::fs::write(
        &newer,
        text.replacen(
            &format!("\"version\":{}", recording::VERSION),
            "\"version\":7",
            1,
        ),
    )
    .unwrap();
    assert!(matches!(
        recording::read(&newer),
        Err(RecordingError::TooNew { found: 7, .. })
    ));
    // A version 1 recording kept the head layout and kernel as `run`: it still replays.
    let mut v1 = vec![text.lines().next().unwrap().replacen(
        &format!("\"version\":{}", recording::VERSION),
        "\"version\":1",
        1,
    )];
    for l in text.lines().skip(1) {
        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
        let mut run = v["settings"]["run"].clone();
        run["layout"] = "mha".into();
        let o = v.as_object_mut().unwrap();
        o.remove("settings");
        o.insert("run".into(), run);
        v1.push(v.to_string());
    }
    let old = dir.path().join("v1.jsonl");
    std::fs::write(&old, v1.join("\n") + "\n").unwrap();
    let back = recording::read(&old).unwrap();
    assert_eq!(back.reports.len(), 3);
    assert_eq!(back.reports[0].settings.run.layout, HeadLayout::Mha);
    assert_eq!(
        back.reports[0].settings.run.kernel,
        report().settings.run.kernel
    );
    // A broken line in the middle is an error naming file and line.
    let corrupt = dir.path().join("corrupt.jsonl");
    let lines: Vec<&str> = text.lines().collect();
    let cut = &lines[2][..lines[2].len() / 2];
    let mut broken = lines.clone();
    broken[2] = cut;
    std::fs::write(&corrupt, broken.join("\n") + "\n").unwrap();
    let e = recording::read(&corrupt).unwrap_err().to_string();
    assert!(e.contains("corrupt.jsonl:3: not a step report"), "{e}");
    // The same line cut short at the end of the file (a crash while writing): the
    // iterations before it replay, with a warning that says so.
    let crashed = dir.path().join("crashed.jsonl");
    std::fs::write(&crashed, lines[..3].join("\n").replacen(lines[2], cut, 1)).unwrap();
    let back = recording::read(&crashed).unwrap();
    assert_eq!(back.reports.len(), 1);
    let w = back.warning.unwrap();
    assert!(
        w.contains("crashed.jsonl:3") && w.contains("cut short"),
        "{w}"
    );
    // Parsed but impossible values are refused by file and line, before anything draws them.
    let mut bad = numbered(2);
    bad.info.captures[0].layer = 1_000_000_000_000_000;
    let mut short = numbered(2);
    short.info.captures[0].weights.truncate(3);
    let mut no_rows = numbered(2);
    no_rows.info.captures[0].t = 0;
    let mut no_layers = numbered(2);
    no_layers.cfg.n_layer = 0;
    for (name, r, want) in [
        ("layer", bad, "layer"),
        ("short", short, "weights hold 3 values"),
        ("rows", no_rows, "do not fit"),
        ("layers", no_layers, "block_count"),
    ] {
        let p = dir.path().join(format!("{name}.jsonl"));
        let body = serde_json::to_string(&r).unwrap();
        std::fs::write(&p, format!("{}\n{}\n{body}\n", lines[0], lines[1])).unwrap();
        let e = recording::read(&p).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{name}.jsonl:3:")) && e.contains(want),
            "{e}"
        );
    }
    // An existing recording is kept unless --force says otherwise.
    let before = std::fs::read(&path).unwrap();
    assert!(matches!(
        recording::Recorder::create(&path, "m", Default::default()),
        Err(RecordingError::Exists { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    drop(
        recording::Recorder::create(
            &path,
            "m",
            inferlab::files::WriteRules {
                force: true,
                inputs: &[],
            },
        )
        .unwrap(),
    );
    assert_ne!(std::fs::read(&path).unwrap(), before);
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, "{\"hello\": 1}\n").unwrap();
    assert!(matches!(
        recording::read(&other),
        Err(RecordingError::NotARecording { .. })
    ));
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, lines[0]).unwrap();
    assert!(matches!(
        recording::read(&empty),
        Err(RecordingError::Empty { .. })
    ));
}

#[test]
fn looks_at_view_ranks_what_the_newest_token_attends_to() {
    let mut a = app();
    a.update(Action::ToggleLooksAt);
    assert!(a.screen.looks_at);
    let draw = |a: &App| {
        let mut term = Terminal::new(TestBackend::new(96, 22)).unwrap();
        term.draw(|f| draw::draw(a, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
        let mut t = Terminal::new(TestBackend::new(90, 20)).unwrap();
        t.draw(|f| panes::looks::render(a, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
        format!("{}", t.backend())
    };
    let s = draw(&a);
    // Newest row 9 (generated): head 0 puts 0.6 on itself, 0.4/9 on each earlier key, so
    // 8 × 0.044 = 0.36 of its mass on the 8 prompt tokens.
    assert!(
        s.contains("what does \"·cache\" (pos 9, generated)")
            || s.contains("what does \" cache\" (pos 9, generated)"),
        "{s}"
    );
    assert!(s.contains("the prompt 0.36 · generated tokens 0.64"), "{s}");
    assert!(s.contains(" 1. pos    9"), "{s}");
    insta::assert_snapshot!("looks_at_pane", s);
    // Scrolling the heatmap window back moves the view to an earlier row.
    a.update(Action::ScrollBack);
    let s = draw(&a);
    assert!(s.contains("(pos 1, prompt)"), "{s}");
    // The ranking itself: largest first, ties by position.
    assert_eq!(
        panes::looks::ranked(&[0.1, 0.5, 0.1, 0.3]),
        vec![(1, 0.5), (3, 0.3), (0, 0.1), (2, 0.1)]
    );
}

#[test]
fn the_sink_experiment_takes_the_serving_columns_and_outlives_the_request() {
    use inferlab::worker::Command;
    let mut a = app();
    assert!(matches!(
        a.update(Action::ToggleSink).as_slice(),
        [Command::Apply(s)] if s.sink
    ));
    let mut r = report();
    r.iteration = 4;
    r.finished = true;
    r.sink = Some(common::fixture::sink_view());
    a.on_event(Event::Report(Box::new(r.clone())));
    let mut term = Terminal::new(TestBackend::new(120, 40)).unwrap();
    term.draw(|f| draw::draw(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let s = format!("{}", term.backend());
    assert!(
        s.contains("attention sink · window 12 tokens = 3 pages of 4 · token 20/40"),
        "{s}"
    );
    assert!(s.contains("read ·sat → predict ·on"), "{s}");
    assert!(
        s.contains("window + first page    ppl  11.75 · after 1st eviction  12.75"),
        "{s}"
    );
    // Pages: held █, the one being filled ▄, evicted ×, not read yet ·.
    assert!(
        s.contains("  pages ████▄····· 12 tokens held · 0 page(s)"),
        "{s}"
    );
    assert!(
        s.contains("  pages ××██▄····· 12 tokens held · 2 page(s)"),
        "{s}"
    );
    assert!(
        s.contains("  pages █××█▄····· 12 tokens held · 2 page(s)"),
        "{s}"
    );
    // At the smallest screen (80×24) every lane still shows, the sink lane included.
    let mut small = Terminal::new(TestBackend::new(80, 24)).unwrap();
    small
        .draw(|f| draw::draw(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let s = format!("{}", small.backend());
    for lane in [
        "full cache",
        "window, oldest evicted",
        "window + first page",
    ] {
        assert!(s.contains(lane), "{lane} missing at 80×24:\n{s}");
    }
    assert!(s.contains("  pages █××█▄"), "{s}");
    // A replay of that session shows the pane without the key.
    let mut replay = app();
    replay.worker.replaying = true;
    replay.on_event(Event::Report(Box::new(r.clone())));
    assert!(replay.shows_sink() && !replay.settings.sink);
    assert!(replay.update(Action::ToggleSink).is_empty() && !replay.settings.sink);
    // The request has finished, but the experiment has text left: steps go on.
    assert!(matches!(a.request_step(), Some(Command::Step)));
    a.worker.in_flight = false;
    a.update(Action::ToggleSink);
    // Without it the step still goes to the engine, which runs the serving workload or
    // says that nothing is left; only that answer stops a run.
    a.worker.running = true;
    assert!(matches!(a.request_step(), Some(Command::Step)));
    a.on_event(Event::Idle("nothing left".into()));
    assert!(!a.worker.running && !a.worker.in_flight && a.status == "nothing left");
}

#[test]
fn a_replay_ignores_settings_keys_and_keeps_what_was_recorded() {
    let mut a = app();
    a.worker.replaying = true;
    let before = a.settings;
    let rows = a.frames.shown().history[0].weights.len();
    for act in [
        Action::CycleLayout,
        Action::ToggleKernel,
        Action::ToggleCache,
        Action::TogglePolicy,
        Action::CycleCompare,
        Action::StartInput,
    ] {
        assert!(a.update(act).is_empty(), "{act:?} sends nothing");
        assert!(a.status.contains("replay"), "{}", a.status);
    }
    assert_eq!(a.settings, before);
    assert_eq!(
        a.frames.shown().history[0].weights.len(),
        rows,
        "the heatmap keeps its rows"
    );
    assert!(a.input.is_none());
    let screen = format!("{}", render_app(&a, 160, 48));
    assert!(
        screen.contains("GQA") && screen.contains("naive"),
        "{screen}"
    );
}

fn render_app(a: &App, w: u16, h: u16) -> TestBackend {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| draw::draw(a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    term.backend().clone()
}

#[test]
fn the_footer_always_shows_help_and_quit_then_what_fits() {
    use inferlab::ui::keys::footer_entries;
    for w in [60usize, 80, 120, 160, 240] {
        let e = footer_entries(w, false);
        let text: String = e.iter().map(|(k, h)| format!(" {k} {h} ")).collect();
        assert!(text.chars().count() <= w, "{w}: {text}");
        assert!(
            text.contains(" ? help") && text.contains(" q quit"),
            "{w}: {text}"
        );
        assert!(!text.contains("lesson step"), "no lesson open: {text}");
    }
    // Most useful first: a narrow footer keeps space before the history keys.
    let narrow: Vec<_> = footer_entries(80, false).into_iter().map(|e| e.0).collect();
    assert!(
        narrow.contains(&"space") && !narrow.contains(&"[ ]"),
        "{narrow:?}"
    );
    let lesson: Vec<_> = footer_entries(80, true).into_iter().map(|e| e.0).collect();
    assert!(
        lesson.contains(&"n p") && lesson.contains(&"1-9"),
        "{lesson:?}"
    );
    // And on screen, at 80 columns.
    let screen = format!("{}", render_app(&app(), 80, 24));
    let last = screen
        .lines()
        .rfind(|l| l.contains("space"))
        .unwrap_or_default()
        .to_string();
    assert!(
        last.contains("? help") && last.contains("q quit"),
        "{screen}"
    );
}

#[test]
fn the_header_gives_the_status_room_before_its_fixed_facts() {
    let mut a = app();
    a.status = "wrote /tmp/exports/attention-l0h0-it3.svg and .png".into();
    let screen = format!("{}", render_app(&a, 80, 24));
    let first = screen.lines().next().unwrap().to_string();
    assert!(first.contains("attention-l0h0-it3.svg and .png"), "{first}");
    assert!(first.contains("GQA"), "{first}");
    // Wide: everything.
    let screen = format!("{}", render_app(&a, 200, 40));
    let first = screen.lines().next().unwrap().to_string();
    assert!(
        first.contains("fixture.gguf") && first.contains(".png"),
        "{first}"
    );
    // A status longer than any line ends in an ellipsis, never mid-word at the border.
    a.status = "x".repeat(300);
    let screen = format!("{}", render_app(&a, 80, 24));
    assert!(screen.lines().next().unwrap().contains('…'));
}

#[test]
fn typed_text_and_the_mouse_go_through_actions_like_keys() {
    use inferlab::ui::keys::action_for;
    use inferlab::worker::Command;
    use ratatui::crossterm::event::{
        KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
    };
    let key = |c: KeyCode| KeyEvent::new(c, KeyModifiers::NONE);
    // While typing, q is text and Esc cancels; otherwise q quits.
    assert_eq!(
        action_for(key(KeyCode::Char('q')), true),
        Some(Action::Type('q'))
    );
    assert_eq!(
        action_for(key(KeyCode::Char('q')), false),
        Some(Action::Quit)
    );
    assert_eq!(action_for(key(KeyCode::Esc), true), Some(Action::Cancel));
    let mut a = app();
    a.update(Action::StartInput);
    for act in [
        Action::Type('h'),
        Action::Type('x'),
        Action::Backspace,
        Action::Type('i'),
    ] {
        assert!(a.update(act).is_empty());
    }
    assert_eq!(a.input.as_deref(), Some("hi"));
    let sent = a.update(Action::Submit);
    assert!(
        matches!(sent.as_slice(), [Command::Prompt(p)] if p == "hi"),
        "{sent:?}"
    );
    assert!(a.input.is_none());
    // The mouse: the wheel over the heatmap moves through layers, a click picks a head.
    let screen = ratatui::layout::Rect::new(0, 0, 160, 48);
    let areas = inferlab::ui::draw::areas(screen, false);
    let at = |r: ratatui::layout::Rect, kind| MouseEvent {
        kind,
        column: r.x + r.width / 2,
        row: r.y + r.height / 2,
        modifiers: KeyModifiers::NONE,
    };
    let wheel = at(areas.attention, MouseEventKind::ScrollDown);
    assert_eq!(
        inferlab::ui::draw::mouse_action(wheel, screen, &a),
        Some(Action::LayerDown)
    );
    // Every head of the heads pane can be clicked.
    let r = areas.heads;
    let mut heads: Vec<usize> = (r.y..r.y + r.height)
        .flat_map(|row| (r.x..r.x + r.width).map(move |column| (column, row)))
        .filter_map(|(column, row)| {
            let m = MouseEvent {
                kind: MouseEventKind::Down(MouseButton::Left),
                column,
                row,
                modifiers: KeyModifiers::NONE,
            };
            match inferlab::ui::draw::mouse_action(m, screen, &a) {
                Some(Action::SelectHead(h)) => Some(h),
                _ => None,
            }
        })
        .collect();
    heads.sort();
    heads.dedup();
    let n = a.report().unwrap().cfg.n_head;
    assert_eq!(heads, (0..n).collect::<Vec<_>>());
}

#[test]
fn panes_draw_a_small_view_without_an_app() {
    use inferlab::serve::CacheKind;
    use inferlab::views::heatmap::{Heatmap, Source, Window};
    use inferlab::views::pages::{Cell, Grid};
    let r = report();
    // Three query rows of head 0 over keys 0..=p.
    let rows = vec![
        vec![vec![1.0]],
        vec![vec![0.25, 0.75]],
        vec![vec![0.5, 0.25, 0.25]],
    ];
    let src = Source {
        report: &r,
        rows: &rows,
        layer: 0,
        head: 0,
        scores: false,
    };
    let v = Heatmap::build(&src, Window::ALL).unwrap();
    assert_eq!(v.cell(0, 2), None, "a future key is masked");
    assert_eq!(v.cell(1, 1), Some(0.75));
    assert_eq!((v.lo, v.hi), (0.0, 1.0));
    let looks = vec!["0:the=0.50".to_string()];
    let mut term = Terminal::new(TestBackend::new(64, 8)).unwrap();
    term.draw(|f| panes::heatmap::draw(&v, &looks, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", term.backend());
    assert!(text.contains("keys 0..2"), "{text}");
    assert!(text.contains("newest row looks at  0:the=0.50"), "{text}");
    // Row 0 (the second line, after the ruler): its own key, then two masked keys.
    let line = text.lines().nth(1).unwrap().to_string();
    assert!(line.contains("█··"), "{line}");
    // The serving grid from four cells: full, partly filled, shared, free.
    let g = Grid {
        cache: CacheKind::Paged,
        page_size: 4,
        cells: vec![
            Cell {
                owner: Some(0),
                fill: 4,
                shared: 1,
                stranded: false,
            },
            Cell {
                owner: Some(1),
                fill: 2,
                shared: 1,
                stranded: false,
            },
            Cell {
                owner: Some(0),
                fill: 4,
                shared: 2,
                stranded: false,
            },
            Cell {
                owner: None,
                fill: 0,
                shared: 0,
                stranded: false,
            },
        ],
    };
    let mut term = Terminal::new(TestBackend::new(40, 4)).unwrap();
    term.draw(|f| {
        panes::serving::draw_grid(&g, &[], &THEME, f.area(), f.buffer_mut());
    })
    .unwrap();
    let text = format!("{}", term.backend());
    // With room each page shows its fill, or how many requests share it.
    assert!(
        text.lines().nth(1).unwrap().contains("█4  ▄2  █×2 ·"),
        "{text}"
    );
    assert!(text.contains("one cell per page of 4 slots"), "{text}");
    // Without, one character per page; a shared page is the number of its holders.
    let mut term = Terminal::new(TestBackend::new(6, 4)).unwrap();
    term.draw(|f| {
        panes::serving::draw_grid(&g, &[], &THEME, f.area(), f.buffer_mut());
    })
    .unwrap();
    let text = format!("{}", term.backend());
    assert!(text.lines().nth(1).unwrap().contains("█▄2·"), "{text}");
}

#[test]
fn the_lesson_pane_draws_a_tutor_and_what_the_app_says_of_it() {
    // Lesson 1, step 1 has a task; the live side says whether it holds.
    let t = inferlab::lesson::tutor::Tutor::new(shipped_lessons(), 0, Default::default(), false);
    for (done, mark) in [(false, "[ ] Task"), (true, "[x] Task")] {
        let live = panes::lesson::StepNow {
            task_done: done,
            choices: Vec::new(),
            figures: Vec::new(),
            ran: true,
        };
        let mut term = Terminal::new(TestBackend::new(60, 40)).unwrap();
        term.draw(|f| panes::lesson::draw(&t, &live, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
        let text = format!("{}", term.backend());
        assert!(text.contains(mark), "{text}");
        assert!(!text.contains("more below"), "{text}");
        // Where the task is below the fold, the footer says there is more.
        let mut term = Terminal::new(TestBackend::new(60, 14)).unwrap();
        term.draw(|f| panes::lesson::draw(&t, &live, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
        let text = format!("{}", term.backend());
        assert!(
            !text.contains(mark) && text.contains("↓ more below"),
            "{text}"
        );
    }
}

#[test]
fn the_traffic_pane_at_80x24_and_200x60() {
    let a = common::fixture::traffic_app();
    assert!(a.screen.shows(Pane::Traffic));
    for (w, h) in [(80, 24), (200, 60)] {
        let b = render_app(&a, w, h);
        let text = format!("{b}");
        assert!(text.contains("memory traffic"), "{text}");
        assert!(
            !text.contains("forward pass"),
            "traffic holds the forward pane's place"
        );
        insta::assert_snapshot!(format!("traffic_screen_{w}x{h}"), b);
    }
    // With room, the pane labels every point of the roofline where it sits.
    let mut term = Terminal::new(TestBackend::new(96, 26)).unwrap();
    term.draw(|f| panes::traffic::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", term.backend());
    for s in [
        "● prefill",
        "● B=1 decode",
        "● serving batch",
        "KV > weights past ≈",
        "roofline · ridge ",
        "int8 peak 1600 G op/s",
    ] {
        assert!(text.contains(s), "{s} missing:\n{text}");
    }
    insta::assert_snapshot!("traffic_pane", term.backend());
    // t again gives the forward pane back; tab walks through both.
    let mut a = a;
    a.update(Action::ToggleTraffic);
    assert!(!a.screen.shows(Pane::Traffic));
    assert!(format!("{}", render_app(&a, 200, 60)).contains("forward pass"));
}

/// The traffic fixture app with a one-step lesson holding `questions`.
fn lesson_app(questions: &str) -> App {
    let text = format!("# L\n\n## S\nProse.\n{questions}\n");
    let lesson = inferlab::lesson::parse("l.md", &text).unwrap();
    let mut a = common::fixture::traffic_app();
    let t = inferlab::lesson::tutor::Tutor::new(vec![lesson], 0, Default::default(), false);
    a.open_lesson(t);
    a
}

#[test]
fn lessons_quote_live_figures_from_what_the_app_shows() {
    use inferlab::lesson::figures::{fill, value, PENDING};
    let a = common::fixture::traffic_app();
    let r = a.report().unwrap();
    let kv = r.info.kv_bytes_per_token[&r.info.layout];
    assert_eq!(
        value(a.figure_sources(), "kv_bytes_per_token").unwrap(),
        thousands(kv)
    );
    let w = r.info.traffic.weight_bytes as f64 / 1e6;
    assert_eq!(
        value(a.figure_sources(), "weight_mb_per_token").unwrap(),
        format!("{w:.1}")
    );
    // The fixture's machine: 20 GB/s and 800 GMAC/s make the ridge 1600 / 20 = 80 op/B.
    assert_eq!(
        value(a.figure_sources(), "ridge_ops_per_byte").unwrap(),
        "80"
    );
    assert_eq!(value(a.figure_sources(), "int8_gops").unwrap(), "1600");
    // The serving run: its tokens over its (fixed) 5 ms per iteration.
    let sv = r.serve.as_ref().unwrap();
    let tps = 1e3 * sv.generated_total as f64 / sv.elapsed_ms;
    assert_eq!(
        value(a.figure_sources(), "serve_tokens_per_s").unwrap(),
        format!("{tps:.0}")
    );
    assert!(
        value(a.figure_sources(), "serve_ratio").is_none(),
        "no run beside it"
    );
    assert_eq!(
        fill(
            a.figure_sources(),
            "{kv_bytes_per_token} B, {nonsense}, {serve_ratio}"
        ),
        format!("{} B, {{nonsense}}, {PENDING}", thousands(kv))
    );
    // Before any report everything is pending.
    let fresh = App::new(RunOptions::default());
    assert_eq!(
        fill(fresh.figure_sources(), "{step_ms} ms"),
        format!("{PENDING} ms")
    );
    // The lesson pane shows the filled value.
    let a = lesson_app("? Costs {kv_bytes_per_token} B?\n- a :: x\n* b :: y\n- c :: z");
    let text = format!("{}", render_app(&a, 200, 60));
    assert!(
        text.contains(&format!("Costs {} B?", thousands(kv))),
        "{text}"
    );
}

fn thousands(n: usize) -> String {
    inferlab::views::units::thousands(n)
}

#[test]
fn a_traffic_prediction_is_graded_by_the_bytes_of_the_next_step() {
    use inferlab::worker::Command;
    let mut a = lesson_app("?predict dominant_live: Which read is larger?");
    let live =
        inferlab::lesson::predict::live_choices(&a.live(), inferlab::lesson::Predict::DominantLive)
            .unwrap();
    assert_eq!(live.labels[0], "the weights");
    // Answer "the KV cache": the app runs the next iteration to grade it.
    assert!(matches!(
        a.update(Action::Answer(2)).as_slice(),
        [Command::Step]
    ));
    let mut next = a.report().unwrap().clone();
    next.iteration += 1;
    next.info.traffic.kv_read_bytes = 3 * next.info.traffic.weight_bytes;
    a.on_event(Event::Report(Box::new(next.clone())));
    let ans = a.tutor.as_ref().unwrap().answers[0].clone().unwrap();
    assert!(ans.right, "{}", ans.why);
    assert!(ans.why.contains("MB of weights"), "{}", ans.why);
    // The same answer against a step the weights dominate is wrong.
    let mut a = lesson_app("?predict dominant_live: Which read is larger?");
    a.update(Action::Answer(2));
    next.info.traffic.kv_read_bytes = next.info.traffic.weight_bytes / 10;
    a.on_event(Event::Report(Box::new(next)));
    assert!(!a.tutor.as_ref().unwrap().answers[0].as_ref().unwrap().right);
}

#[test]
fn a_prediction_before_a_toggle_applies_the_toggle_and_grades_what_follows() {
    use inferlab::worker::Command;
    let mut a = lesson_app("?predict kv_after_mha: How many KV bytes per token under MHA?");
    let live =
        inferlab::lesson::predict::live_choices(&a.live(), inferlab::lesson::Predict::KvAfterMha)
            .unwrap();
    // The fixture's tiny model: 4 query heads over 2 KV heads, so MHA doubles the cache.
    // The labels are bytes, so that the factor is the learner's to work out.
    let now = a.report().unwrap().info.kv_bytes_per_token[&a.report().unwrap().info.layout];
    let b = |n: usize| format!("{} bytes", inferlab::views::units::thousands(n));
    assert_eq!(live.labels, [b(now / 2), b(now), b(now * 2), b(now * 4)]);
    let cmds = a.update(Action::Answer(3));
    assert!(
        matches!(cmds.as_slice(), [Command::Apply(s)] if s.run.layout == HeadLayout::Mha),
        "{cmds:?}"
    );
    // The engine's answer: the request recomputed under MHA.
    let mut next = a.report().unwrap().clone();
    next.iteration += 1;
    next.info.layout = HeadLayout::Mha;
    a.on_event(Event::Report(Box::new(next)));
    let ans = a.tutor.as_ref().unwrap().answers[0].clone().unwrap();
    assert!(ans.right, "{}", ans.why);
    // Switching the serving cache: the answer restarts the workload and runs an iteration.
    let mut a = lesson_app("?predict util_after_contiguous: Utilization after the switch?");
    let cmds = a.update(Action::Answer(3));
    assert!(
        matches!(cmds.as_slice(), [Command::Apply(s), Command::Step] if s.serving.cache == inferlab::serve::CacheKind::Contiguous),
        "{cmds:?}"
    );
}

#[test]
fn the_main_screen_a_zoomed_pane_and_a_lesson_layout_at_80x24_and_200x60() {
    use ratatui::crossterm::event::{KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
    let mut a = common::fixture::traffic_app();
    a.update(Action::ToggleTraffic);
    a.update(Action::Set(inferlab::ui::app::Setting::Focus(
        inferlab::ui::app::Pane::Attention,
    )));
    for (w, h) in [(80, 24), (200, 60)] {
        insta::assert_snapshot!(format!("main_{w}x{h}"), render_app(&a, w, h));
    }
    // z: the focused pane takes the body, every other pane keeps one summary line.
    a.update(Action::ToggleZoom);
    for (w, h) in [(80, 24), (200, 60)] {
        let b = render_app(&a, w, h);
        let text = format!("{b}");
        assert!(text.contains("attention · layer 0/1"), "{text}");
        for s in [
            "▸ output ·",
            "▸ heads ·",
            "▸ KV cache ·",
            "▸ serving ·",
            "▸ forward pass ·",
            "▸ memory traffic ·",
        ] {
            assert!(text.contains(s), "{s} missing at {w}×{h}:\n{text}");
        }
        // The heatmap's pane spans the width.
        let top = text.lines().nth(1).unwrap();
        assert!(top.trim_end_matches('"').ends_with('┐'), "{top}");
        insta::assert_snapshot!(format!("zoomed_{w}x{h}"), b);
    }
    // A click on a summary line focuses that pane; a second click on its title (the
    // event loop's double click) gives the grid back.
    let screen = ratatui::layout::Rect::new(0, 0, 200, 60);
    let f = inferlab::ui::draw::focused_areas(screen, &a.screen, false);
    let (pane, row) = f.summaries[0];
    let click = MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column: row.x + 3,
        row: row.y,
        modifiers: KeyModifiers::NONE,
    };
    let act = inferlab::ui::draw::mouse_action(click, screen, &a).unwrap();
    assert_eq!(act, Action::Set(inferlab::ui::app::Setting::Focus(pane)));
    a.update(act);
    assert!(a.screen.zoomed && a.screen.focus == pane);
    a.update(Action::ZoomPane(pane));
    assert!(
        !a.screen.zoomed,
        "zooming the zoomed pane gives the grid back"
    );
    // A lesson gives its step's pane the room: at 80×24 the text above one full-width
    // pane, at 200×60 the text beside it with the others as summaries.
    let mut a = common::fixture::traffic_app();
    a.open_lesson(inferlab::lesson::tutor::Tutor::new(
        shipped_lessons(),
        3,
        Default::default(),
        false,
    ));
    assert!(a.screen.zoomed && a.screen.focus == inferlab::ui::app::Pane::Traffic);
    for (w, h) in [(80, 24), (200, 60)] {
        let b = render_app(&a, w, h);
        let text = format!("{b}");
        assert!(
            text.contains("lesson 4/13") && text.contains("memory traffic"),
            "{text}"
        );
        assert_eq!(text.contains("▸ attention ·"), w >= 120, "{text}");
        insta::assert_snapshot!(format!("lesson_layout_{w}x{h}"), b);
    }
    // A step may ask for the grid.
    a.update(Action::Set(inferlab::ui::app::Setting::Zoom(false)));
    assert!(format!("{}", render_app(&a, 200, 60)).contains("heads · GQA"));
}

#[test]
fn the_serving_pane_shows_a_requests_block_table_and_marks_its_pages() {
    use inferlab::serve::CacheKind;
    use inferlab::views::pages::{block_table, describe_table};
    let mut a = app();
    for r in common::fixture::serving_reports(CacheKind::Paged, 6) {
        a.on_event(Event::Report(Box::new(r)));
    }
    let sv = a.report().unwrap().serve.clone().unwrap();
    assert!(!sv.step.block_tables.is_empty());
    // Each table lists the request's pages in logical order; every page it names holds it.
    for (id, pages) in &sv.step.block_tables {
        let blocks = block_table(&sv, *id);
        assert_eq!(blocks.len(), pages.len());
        for (i, b) in blocks.iter().enumerate() {
            assert_eq!((b.logical, b.page), (i, pages[i]));
            assert!(sv.step.pages[b.page as usize].owners.contains(id));
            assert_eq!(b.refs, sv.step.pages[b.page as usize].owners.len());
        }
        // Only the last block may be partly filled.
        assert!(blocks[..blocks.len() - 1].iter().all(|b| b.fill == 4));
    }
    // u walks through the requests that hold pages; the pane names the chosen one.
    let first = sv.step.block_tables[0].0;
    a.update(Action::NextRequest);
    assert_eq!(a.screen.selected_req, Some(first));
    a.update(Action::NextRequest);
    let second = sv.step.block_tables.get(1).map_or(first, |t| t.0);
    assert_eq!(a.screen.selected_req, Some(second));
    let mut term = Terminal::new(TestBackend::new(120, 24)).unwrap();
    term.draw(|f| panes::serving::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", term.backend());
    let line = describe_table(second, &block_table(&sv, second), 4);
    assert!(text.contains(&line[..40.min(line.len())]), "{line}\n{text}");
    // The picture lists every request's table.
    let svg = inferlab::export::render_svg(&a.scene(), inferlab::export::ExportPane::Kv).unwrap();
    assert_eq!(
        svg.matches("block table r").count(),
        sv.step.block_tables.len()
    );
}

#[test]
fn a_prediction_about_static_batching_waits_for_the_iteration_that_shows_it() {
    use inferlab::serve::{CacheKind, Policy, ReqPhase};
    use inferlab::worker::Command;
    let mut a = lesson_app(
        "?predict finished_row_static: What happens to the row of a member that finishes first?",
    );
    let cmds = a.update(Action::Answer(1));
    assert!(
        matches!(cmds.as_slice(), [Command::Apply(s), Command::Step] if s.serving.policy == Policy::Static),
        "{cmds:?}"
    );
    // A real static run of the tiny engine: iterations before any member is padding
    // leave the prediction open, the first with padding grades it.
    let reports = common::fixture::serving_reports_with(Policy::Static, CacheKind::Paged, 30);
    let first = reports
        .iter()
        .position(|r| {
            r.serve
                .as_ref()
                .unwrap()
                .step
                .active
                .iter()
                .any(|e| e.phase == ReqPhase::Padding)
        })
        .expect("a static batch pads a finished member");
    assert!(first > 0);
    for (i, mut r) in reports.into_iter().enumerate().take(first + 1) {
        r.iteration = 100 + i;
        a.on_event(Event::Report(Box::new(r)));
        let t = a.tutor.as_ref().unwrap();
        assert_eq!(t.pending.is_some(), i < first, "iteration {i}");
    }
    let ans = a.tutor.as_ref().unwrap().answers[0].clone().unwrap();
    assert!(ans.right && ans.why.contains("padding"), "{}", ans.why);
}

#[test]
fn a_lesson_opened_at_a_later_step_sets_what_walking_there_would_have() {
    let mut a = app();
    open_at(&mut a, "continuous-batching", 3);
    // Step 4 names only compare=one_at_a_time; step 1 put the serving pane in front.
    assert_eq!(a.tutor.as_ref().unwrap().step, 3);
    assert_eq!(a.screen.focus, inferlab::ui::app::Pane::Serving);
    assert_eq!(
        a.settings.serving.compare,
        inferlab::ui::app::Compare::OneAtATime
    );
}

#[test]
fn the_sampler_keys_set_temperature_and_top_p_and_the_output_shows_what_was_drawn() {
    use inferlab::worker::Command;
    let mut a = app();
    let cmds = a.update(Action::CycleTemperature);
    let [Command::Apply(s)] = cmds.as_slice() else {
        panic!("{cmds:?}")
    };
    let cfg = s.request.sampler;
    assert_eq!((cfg.temperature, cfg.top_p), (0.7, 0.9));
    a.update(Action::CycleTopP);
    assert_eq!(a.settings.request.sampler.top_p, 0.5);
    let mut r = report();
    r.info.sampler = a.settings.request.sampler;
    r.info.top_k[0].drawn = 0.75;
    a.on_event(Event::Report(Box::new(r)));
    let mut term = Terminal::new(TestBackend::new(60, 12)).unwrap();
    term.draw(|f| panes::output::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let s = format!("{}", term.backend());
    assert!(s.contains("model % → drawn % (T 0.7"), "{s}");
    assert!(s.contains("62.0% → 75.0%"), "{s}");
    let mut term = Terminal::new(TestBackend::new(200, 60)).unwrap();
    term.draw(|f| draw::draw(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    assert!(format!("{}", term.backend()).contains("T 0.7 · top-p 0.5"));
}

#[test]
fn space_pressed_while_an_iteration_runs_is_kept_and_a_restart_drops_the_old_run_s_views() {
    use inferlab::worker::Command;
    let mut a = app();
    a.on_event(Event::Report(Box::new(
        common::fixture::serving_reports(inferlab::serve::CacheKind::Paged, 3)[2].clone(),
    )));
    assert!(matches!(a.update(Action::Step).as_slice(), [Command::Step]));
    assert!(a.update(Action::Step).is_empty() && a.update(Action::Step).is_empty());
    assert_eq!(
        a.worker.steps_queued, 2,
        "two presses wait for the running iteration"
    );
    // c restarts the serving run: the old run's pages are not drawn under the new title;
    // the pane names the new run and waits for its first iteration.
    a.update(Action::Set(inferlab::ui::app::Setting::Focus(
        inferlab::ui::app::Pane::Serving,
    )));
    let before = format!("{:?}", render_app(&a, 200, 60));
    assert!(
        before.contains("paged kv") && !before.contains("starts at the next"),
        "{before}"
    );
    a.update(Action::ToggleCache);
    let after = format!("{:?}", render_app(&a, 200, 60));
    assert!(
        after.contains("contiguous kv") && after.contains("this run starts at the next iteration"),
        "{after}"
    );
    assert!(
        a.report().unwrap().serve.is_some(),
        "the report itself is what ran"
    );
    a.on_event(Event::Idle("nothing left".into()));
    assert_eq!(a.worker.steps_queued, 0);
}

#[test]
fn a_step_s_bytes_are_quoted_from_a_decode_step_never_from_the_prefill() {
    use inferlab::lesson::figures::value;
    let mut a = common::fixture::traffic_app();
    for name in ["step_mb", "kv_read_mb", "step_gb_per_s"] {
        assert!(value(a.figure_sources(), name).is_some(), "{name}");
    }
    // The same report as a prompt's pass: the figures wait for a decode step.
    let mut r = a.report().unwrap().clone();
    r.iteration += 1;
    r.info.step = 0;
    a.on_event(Event::Report(Box::new(r)));
    for name in ["step_mb", "kv_read_mb", "step_gb_per_s"] {
        assert_eq!(value(a.figure_sources(), name), None, "{name}");
    }
    assert!(value(a.figure_sources(), "weight_mb_per_token").is_some());
}

#[test]
fn serving_figures_come_only_from_the_runs_the_settings_ask_for() {
    use inferlab::lesson::figures::value;
    let mut a = app();
    for r in common::fixture::serving_reports(inferlab::serve::CacheKind::Paged, 3) {
        a.on_event(Event::Report(Box::new(r)));
    }
    a.settings.serving = a.report().unwrap().settings.serving;
    assert!(value(a.figure_sources(), "serve_tokens_per_s").is_some());
    // A step asks for other runs: until they report, the old runs' figures are not quoted.
    a.settings.serving.compare = inferlab::settings::Compare::OneAtATime;
    assert_eq!(value(a.figure_sources(), "serve_tokens_per_s"), None);
    assert_eq!(value(a.figure_sources(), "continuous_ttft_p99_ms"), None);
}

#[test]
fn a_question_keeps_the_figures_it_was_answered_with() {
    let mut a = common::fixture::traffic_app();
    open_at(&mut a, "kv-cache", 1);
    let mb = inferlab::lesson::figures::value(a.figure_sources(), "step_mb").unwrap();
    a.update(Action::Answer(1));
    let asked = a.tutor.as_ref().unwrap().asked[&0].clone();
    assert!(asked.contains(&format!("moved {mb} MB")), "{asked}");
    // The iteration the answer ran moves more: the question still reads as it was asked.
    let mut r = a.report().unwrap().clone();
    r.iteration += 1;
    r.info.step += 1;
    r.info.traffic.weight_bytes *= 3;
    a.on_event(Event::Report(Box::new(r)));
    assert_ne!(
        inferlab::lesson::figures::value(a.figure_sources(), "step_mb").unwrap(),
        mb
    );
    let mut term = Terminal::new(TestBackend::new(80, 60)).unwrap();
    term.draw(|f| panes::lesson::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", term.backend());
    assert!(text.contains(&format!("moved {mb} MB")), "{text}");
}

#[test]
fn the_glossary_scrolls_where_it_does_not_fit_and_every_line_fits_80_columns() {
    let entries = panes::glossary::entries();
    assert!(entries.len() > 22, "more terms than a 24-row screen holds");
    let mut a = app();
    a.update(Action::ToggleGlossary);
    let screen = |a: &App| {
        let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
        t.draw(|f| draw::draw(a, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
        format!("{}", t.backend())
    };
    let s = screen(&a);
    assert!(s.contains("glossary lines 1–22 of "), "{s}");
    let last = entries.last().unwrap();
    assert!(!s.contains(last.0), "{s}");
    for _ in 0..panes::glossary::max_scroll() {
        a.update(Action::LayerDown);
    }
    let s = screen(&a);
    // Scrolled to the end: the last term, and every word of its meaning (a meaning too
    // long for the line wraps onto the next, none is cut at 80 columns).
    assert!(s.contains(last.0), "{s}");
    for word in last.1.split_whitespace() {
        assert!(s.contains(word), "{word} missing: {s}");
    }
    assert!(!s.contains('…'), "a glossary line was cut: {s}");
    assert!(a.screen.glossary);
    a.update(Action::Step);
    assert!(!a.screen.glossary, "any other key closes it");
}

#[test]
fn a_prediction_answered_during_an_iteration_is_graded_by_one_that_shows_its_setting() {
    use inferlab::worker::Command;
    let mut a = lesson_app("?predict top_after_temperature: What will the top token get?");
    a.worker.in_flight = true;
    let cmds = a.update(Action::Answer(3));
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Apply(s) if s.request.sampler.temperature > 0.0)),
        "{cmds:?}"
    );
    assert_eq!(
        a.worker.steps_queued, 1,
        "the answer's step waits behind the running one"
    );
    // The running iteration's report was computed greedy: it grades nothing.
    let mut r = a.report().unwrap().clone();
    r.iteration += 1;
    r.info.step += 1;
    a.on_event(Event::Report(Box::new(r.clone())));
    let t = a.tutor.as_ref().unwrap();
    assert!(t.pending.is_some() && t.answers[0].is_none());
    // The next one ran at temperature 1.5: the top token fell, as answered.
    r.iteration += 1;
    r.info.step += 1;
    r.info.sampler.temperature = 1.5;
    r.info.top_k[0].prob = 0.6;
    r.info.top_k[0].drawn = 0.3;
    a.on_event(Event::Report(Box::new(r)));
    let ans = a.tutor.as_ref().unwrap().answers[0].clone().unwrap();
    assert!(ans.right, "{ans:?}");
}

#[test]
fn after_c_the_serving_title_names_what_its_body_draws_until_the_new_run_reports() {
    use inferlab::serve::CacheKind;
    let mut a = app();
    for r in common::fixture::serving_reports(CacheKind::Paged, 3) {
        a.on_event(Event::Report(Box::new(r)));
    }
    let cmds = a.update(Action::ToggleCache);
    assert!(!cmds.is_empty(), "c asks the engine for the other cache");
    assert_eq!(a.settings.serving.cache, CacheKind::Contiguous);
    let draw = |a: &App| {
        let mut term = Terminal::new(TestBackend::new(70, 16)).unwrap();
        term.draw(|f| panes::serving::render(a, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
        format!("{:?}", term.backend())
    };
    // The paged run's picture is gone with it: no title of one run over the body of the
    // other while the new run starts (the report itself stays what it was).
    let before = draw(&a);
    assert!(before.contains("starts at the next iteration"), "{before}");
    assert!(
        !before.contains("paged kv") && before.contains("contiguous kv"),
        "{before}"
    );
    // The contiguous run's first report changes both.
    for r in common::fixture::serving_reports(CacheKind::Contiguous, 1) {
        a.on_event(Event::Report(Box::new(r)));
    }
    let after = draw(&a);
    assert!(after.contains("contiguous kv"), "{after}");
}

#[test]
fn the_header_names_the_settings_the_report_on_screen_ran_under() {
    use inferlab::model::HeadLayout;
    let mut a = app();
    a.worker.replaying = true;
    let mut r = common::fixture::report();
    // A report computed under MHA with sampling and no cache, as a replay shows it while
    // the app's own settings are the defaults.
    r.settings.run.layout = HeadLayout::Mha;
    r.info.sampler.temperature = 0.7;
    r.info.no_cache = true;
    a.on_event(Event::Report(Box::new(r)));
    let screen = format!("{:?}", render_app(&a, 240, 50));
    let top = screen.lines().find(|l| l.contains(" inferlab · ")).unwrap();
    assert!(top.contains("MHA") && !top.contains("GQA"), "{top}");
    assert!(top.contains("NO KV CACHE"), "{top}");
    assert!(top.contains("0.7"), "{top}");
    // Live, `T` and `k` take effect from the next step and no report follows them: the
    // header says what the next step will use.
    let mut a = app();
    a.on_event(Event::Report(Box::new(common::fixture::report())));
    a.update(Action::ToggleKvCache);
    let screen = format!("{:?}", render_app(&a, 240, 50));
    let top = screen.lines().find(|l| l.contains(" inferlab · ")).unwrap();
    assert!(top.contains("NO KV CACHE"), "{top}");
}

#[test]
fn w_with_the_lens_shown_brings_the_attention_pane_back() {
    let mut a = app();
    a.update(Action::ToggleLens);
    assert!(a.screen.shows(Pane::Lens));
    a.update(Action::ToggleLooksAt);
    assert!(
        a.screen.looks_at && !a.screen.shows(Pane::Lens),
        "w changed something visible"
    );
    assert_eq!(a.screen.focus, inferlab::ui::app::Pane::Attention);
}

#[test]
fn the_comparison_title_names_the_run_its_body_draws() {
    use inferlab::serve::CacheKind;
    use inferlab::settings::Compare;
    let draw = |a: &App| {
        let mut term = Terminal::new(TestBackend::new(90, 16)).unwrap();
        term.draw(|f| panes::serving::render_compare(a, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
        format!("{:?}", term.backend())
    };
    // The report on screen ran the same requests one at a time beside the main run.
    let mut a = app();
    let mut r = common::fixture::serving_reports(CacheKind::Paged, 1).remove(0);
    let mut b = r.serve.clone().unwrap();
    b.max_batch = 1;
    r.serve_compare = Some(b);
    r.settings.serving.compare = Compare::OneAtATime;
    a.settings.serving.compare = Compare::OneAtATime;
    a.on_event(Event::Report(Box::new(r)));
    let s = draw(&a);
    assert!(
        s.contains("one at a time") && !s.contains("starts at the next"),
        "{s}"
    );
    // Live, the user now asks for the other cache: the title names that run and the body
    // waits for its first iteration instead of drawing the old run under the new name.
    a.settings.serving.compare = Compare::Cache;
    let s = draw(&a);
    assert!(
        s.contains("contiguous") && !s.contains("one at a time"),
        "{s}"
    );
    assert!(s.contains("starts at the next"), "{s}");
    // In a replay (or history) the report's own run is what is shown.
    a.worker.replaying = true;
    let s = draw(&a);
    assert!(s.contains("one at a time"), "{s}");
}

#[test]
fn the_serving_pane_says_what_its_users_felt_and_side_by_side_compares_it() {
    use inferlab::serve::latency::Latency;
    use inferlab::serve::CacheKind;
    use inferlab::settings::Compare;
    let mut a = app();
    a.settings.serving.compare = Compare::Cache;
    let felt = |ttft: f64| Latency {
        ttft_ms_p50: ttft / 2.0,
        ttft_ms_p99: ttft,
        itl_ms_p50: 9.0,
        itl_ms_p99: 15.0,
    };
    let reports = common::fixture::serving_reports(CacheKind::Paged, 12);
    for mut r in reports {
        r.settings.serving.compare = Compare::Cache;
        let mut beside = r.serve.clone().unwrap();
        beside.latency = felt(200.0);
        r.serve.as_mut().unwrap().latency = felt(500.0);
        r.serve_compare = Some(beside);
        a.on_event(Event::Report(Box::new(r)));
    }
    let draw = |f: fn(&App, &Theme, ratatui::layout::Rect, &mut ratatui::buffer::Buffer)| {
        let mut term = Terminal::new(TestBackend::new(120, 24)).unwrap();
        term.draw(|fr| f(&a, &THEME, fr.area(), fr.buffer_mut()))
            .unwrap();
        format!("{:?}", term.backend())
    };
    let main = draw(panes::serving::render);
    assert!(
        main.contains("p50/p99 TTFT 250/500 · ITL 9/15 ms"),
        "{main}"
    );
    let side = draw(panes::serving::render_compare);
    assert!(
        side.contains("left ÷ this: ") && side.contains("2.50× p99 ttft"),
        "{side}"
    );
}

#[test]
fn beside_the_lesson_at_200_columns_the_latency_line_keeps_its_arrival_rate() {
    use inferlab::serve::latency::Latency;
    use inferlab::serve::CacheKind;
    use inferlab::settings::Compare;
    // The TTFT step: static beside continuous, the lesson in the third column.
    let mut a = app();
    open_at(&mut a, "continuous-batching", 4);
    assert_eq!(a.settings.serving.compare, Compare::Policy);
    // Four-digit times, the widest this line gets in lesson 9's runs.
    let felt = Latency {
        ttft_ms_p50: 1250.0,
        ttft_ms_p99: 2500.0,
        itl_ms_p50: 12.0,
        itl_ms_p99: 150.0,
    };
    for mut r in common::fixture::serving_reports(CacheKind::Paged, 12) {
        r.settings = a.settings;
        let s = r.serve.as_mut().unwrap();
        (s.latency, s.rate_per_s) = (felt, 2.6);
        r.serve_compare = r.serve.clone();
        a.on_event(Event::Report(Box::new(r)));
    }
    let screen = format!("{}", render_app(&a, 200, 60));
    let line = "p50/p99 TTFT 1250/2500 · ITL 12/150 ms · 2.6 arrivals/s";
    assert_eq!(screen.matches(line).count(), 2, "{screen}");
}

#[test]
fn an_older_answer_never_takes_back_a_change_still_on_its_way() {
    use inferlab::worker::Command;
    let mut a = app();
    let first = a.update(Action::CycleLayout);
    let second = a.update(Action::ToggleCache);
    let (Some(Command::Apply(s1)), Some(Command::Apply(s2))) = (first.first(), second.first())
    else {
        panic!("{first:?} {second:?}")
    };
    let (s1, s2) = (*s1, *s2);
    assert_ne!(s1.serving.cache, s2.serving.cache);
    // The worker answers the first while the second waits: the app keeps the second.
    a.on_event(Event::Applied(s1));
    assert_eq!(a.settings.serving.cache, s2.serving.cache);
    a.on_event(Event::Applied(s2));
    assert_eq!(a.settings, s2);
    // The answer to the newest says what runs, even when it is not what was asked.
    let asked = a.update(Action::ToggleSink);
    assert!(matches!(asked.as_slice(), [Command::Apply(s)] if s.sink));
    a.on_event(Event::Applied(s2));
    assert!(
        !a.settings.sink,
        "the sink failed to start: the app says it is off"
    );
    // The layout beside stopping on its own ends it in the app's settings too.
    a.update(Action::CycleBeside);
    let beside = a.settings.request.beside;
    assert!(beside.is_some());
    a.on_event(Event::Applied(a.settings));
    let mut stopped = a.settings;
    stopped.request.beside = None;
    a.on_event(Event::Settings(stopped));
    assert_eq!(a.settings.request.beside, None);
}

#[test]
fn d_feeds_the_serving_prompts_in_chunks_and_the_title_says_so() {
    use inferlab::serve::CacheKind;
    use inferlab::worker::Command;
    let mut a = app();
    for r in common::fixture::serving_reports(CacheKind::Paged, 2) {
        a.on_event(Event::Report(Box::new(r)));
    }
    let key = ratatui::crossterm::event::KeyEvent::new(
        ratatui::crossterm::event::KeyCode::Char('d'),
        ratatui::crossterm::event::KeyModifiers::NONE,
    );
    let act = inferlab::ui::keys::action_for(key, false).unwrap();
    let cmds = a.update(act);
    assert!(
        matches!(cmds.as_slice(), [Command::Apply(s)] if s.serving.chunked),
        "{cmds:?}"
    );
    // The run that answers says it ran chunked; the title names it.
    let mut r = common::fixture::serving_reports(CacheKind::Paged, 1).remove(0);
    r.settings.serving.chunked = true;
    a.on_event(Event::Report(Box::new(r)));
    let mut term = Terminal::new(TestBackend::new(100, 16)).unwrap();
    term.draw(|f| panes::serving::render(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let s = format!("{:?}", term.backend());
    assert!(s.contains("chunked prefill"), "{s}");
}

#[test]
fn policy_figures_name_the_run_by_its_policy_not_its_side() {
    use inferlab::serve::{CacheKind, Policy};
    let mut r = common::fixture::serving_reports(CacheKind::Paged, 3)
        .pop()
        .unwrap();
    let mut beside = r.serve.clone().unwrap();
    r.serve.as_mut().unwrap().policy = Policy::Static;
    beside.policy = Policy::Continuous;
    r.serve_compare = Some(beside);
    // Static on the left, continuous beside it: each found by its policy.
    let policy = |p| r.serving_run(p).map(|v| v.policy);
    assert_eq!(policy(Policy::Continuous), Some(Policy::Continuous));
    assert!(std::ptr::eq(
        r.serving_run(Policy::Continuous).unwrap(),
        r.serve_compare.as_ref().unwrap()
    ));
    assert!(std::ptr::eq(
        r.serving_run(Policy::Static).unwrap(),
        r.serve.as_ref().unwrap()
    ));
    // One request at a time admits like static batching but is not it.
    r.serve.as_mut().unwrap().max_batch = 1;
    assert!(r.serving_run(Policy::Static).is_none());
}

#[test]
fn the_lesson_pane_scrolls_no_further_than_its_text() {
    use inferlab::ui::draw::clamp_lesson_scroll;
    // A step longer than either pane: a hundred sentences of prose, then a question.
    let prose = "Each decode step reads the whole cache once. ".repeat(100);
    let text = format!(
        "# L\n\n## S\n{prose}\n? Why?\n* Because :: it is.\n- Maybe :: hardly.\n- Not so :: no.\n"
    );
    let lesson = inferlab::lesson::parse("l.md", &text).unwrap();
    let mut a = common::fixture::traffic_app();
    a.open_lesson(inferlab::lesson::tutor::Tutor::new(
        vec![lesson],
        0,
        Default::default(),
        false,
    ));
    for (w, h) in [(80, 24), (200, 60)] {
        let screen = ratatui::layout::Rect::new(0, 0, w, h);
        // Far past the end, as forty presses of J would ask.
        for _ in 0..40 {
            a.update(Action::ScrollLesson(3));
        }
        clamp_lesson_scroll(screen, &mut a);
        let at_end = a.tutor.as_ref().unwrap().scroll;
        assert!(
            at_end > 3 && at_end < 120,
            "{w}×{h}: scroll {at_end}, not clamped to the text"
        );
        // The last choice is still on screen, and one K moves the text at once.
        assert!(format!("{}", render_app(&a, w, h)).contains("Not so"));
        a.update(Action::ScrollLesson(-3));
        clamp_lesson_scroll(screen, &mut a);
        assert_eq!(
            a.tutor.as_ref().unwrap().scroll,
            at_end.saturating_sub(3),
            "{w}×{h}"
        );
    }
}

#[test]
fn the_forward_summary_says_when_the_lm_head_stage_holds_the_lens() {
    use inferlab::model::session::LensRow;
    use inferlab::views::forward::ForwardView;
    let mut r = report();
    assert!(ForwardView::new(&r, 0).summary().contains(" · LM head "));
    r.info.logit_lens = vec![LensRow {
        layer: 0,
        id: 1,
        token: "a".into(),
        prob: 0.5,
        chosen_prob: 0.5,
    }];
    let v = ForwardView::new(&r, 0);
    let head = v.stages.iter().rev().nth(1).unwrap();
    assert_eq!(head.name, "LM head + lens");
    let summary = v.summary();
    assert!(
        summary.contains(&format!("LM head + lens {:.1}", head.ms)),
        "{summary}"
    );
}

/// In a lesson, `z` first gives the focused pane the lesson text's room (the text keeps
/// one line saying how to get it back), then shows every pane, then the text again.
#[test]
fn z_in_a_lesson_gives_the_pane_the_body_then_the_grid_then_the_text() {
    let mut a = tutor_app(3);
    let split = screen_text(&a, 80, 24);
    assert!(split.contains("n next · p back"), "{split}");
    let pane = |a: &App| {
        draw::focused_areas(ratatui::layout::Rect::new(0, 0, 80, 24), &a.screen, true)
            .pane
            .height
    };
    let before = pane(&a);
    a.update(Action::ToggleZoom);
    let full = screen_text(&a, 80, 24);
    assert!(
        full.contains("z: every pane, z again: the lesson text"),
        "{full}"
    );
    assert!(!full.contains("n next · p back"), "{full}");
    assert!(pane(&a) >= before + 8, "{} vs {before}", pane(&a));
    a.update(Action::ToggleZoom);
    assert!(!a.screen.zoomed, "the grid");
    a.update(Action::ToggleZoom);
    assert!(a.screen.zoomed && !a.screen.pane_full);
    assert!(screen_text(&a, 80, 24).contains("n next · p back"));
}

/// The run beside under another layout names it from the moment it is asked for, before
/// its first iteration (lesson 8's last step says its title does).
#[test]
fn the_run_beside_names_its_layout_before_its_first_iteration() {
    let mut a = app();
    a.settings.serving.compare = inferlab::ui::app::Compare::Layout;
    let mut t = Terminal::new(TestBackend::new(40, 12)).unwrap();
    t.draw(|f| panes::serving::render_compare(&a, &THEME, f.area(), f.buffer_mut()))
        .unwrap();
    let text = format!("{}", t.backend());
    assert!(text.contains("· mha"), "{text}");
}

#[test]
fn tab_and_shift_tab_move_the_focus_both_ways() {
    let mut a = common::fixture::app();
    let start = a.screen.focus;
    a.update(Action::FocusNext);
    assert_ne!(a.screen.focus, start);
    a.update(Action::FocusPrev);
    assert_eq!(a.screen.focus, start);
    // Back from the first pane is the last.
    a.update(Action::Set(inferlab::lesson::live::Setting::Focus(
        inferlab::screen::Pane::ALL[0],
    )));
    a.update(Action::FocusPrev);
    let last = Pane::ALL.into_iter().rev().find(|p| a.screen.can_focus(*p));
    assert_eq!(Some(a.screen.focus), last);
    assert_ne!(a.screen.focus, Pane::Server, "no server is attached");
}

/// Attached to a server, its pane holds the attention place: Tab reaches it and never the
/// heatmap or the lens, and a step's `focus=attention` focuses it; detached, the opposite.
#[test]
fn attached_the_servers_pane_takes_the_attention_place_and_its_focus() {
    let mut a = common::fixture::app();
    let view = inferlab::ui::attach::AttachView {
        snap: inferlab::attach::poll::Poller::new("http://127.0.0.1:1").snap,
        load: None,
    };
    a.attach(view);
    assert_eq!(a.screen.focus, Pane::Server);
    let mut seen = Vec::new();
    for _ in 0..Pane::ALL.len() {
        a.update(Action::FocusNext);
        seen.push(a.screen.focus);
    }
    assert!(seen.contains(&Pane::Server), "{seen:?}");
    assert!(
        !seen.contains(&Pane::Attention) && !seen.contains(&Pane::Lens),
        "{seen:?}"
    );
    a.update(Action::Set(inferlab::lesson::live::Setting::Focus(
        Pane::Attention,
    )));
    assert_eq!(a.screen.focus, Pane::Server);
    assert_eq!(panes::shown_in(&a, Pane::Attention).pane, Pane::Server);
    let grid = screen_text(&a, 200, 60);
    assert!(
        grid.contains("attached:") && grid.contains("connecting"),
        "{grid}"
    );
    a.detach();
    assert_eq!(a.screen.focus, Pane::Attention);
    assert_eq!(panes::shown_in(&a, Pane::Attention).pane, Pane::Attention);
    a.update(Action::Set(inferlab::lesson::live::Setting::Focus(
        Pane::Server,
    )));
    assert_eq!(a.screen.focus, Pane::Attention);
}

/// Lesson 5 asks the learner to predict MHA's bytes per token in its second step: until
/// the answer is in, the heads pane lists GQA and MQA only, and MHA's row comes back after.
#[test]
fn the_heads_pane_keeps_mhas_bytes_back_until_the_lesson_has_asked_for_them() {
    let mut a = tutor_app(4);
    a.screen.focus_on(Pane::Heads);
    let heads = |a: &App| {
        let mut t = Terminal::new(TestBackend::new(60, 20)).unwrap();
        t.draw(|f| panes::heads::render(a, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
        format!("{}", t.backend())
    };
    let rows = |s: &str, l: &str| s.lines().any(|x| x.contains(&format!("│{l:<5} ")));
    let first = heads(&a);
    assert!(
        rows(&first, "GQA") && rows(&first, "MQA") && !rows(&first, "MHA"),
        "{first}"
    );
    a.update(Action::NextStep);
    let asked = heads(&a);
    assert!(!rows(&asked, "MHA"), "{asked}");
    // The answer switches to MHA; the pass under it grades the prediction.
    a.update(Action::Answer(1));
    let mut r = numbered(2);
    (r.settings.run.layout, r.info.layout) = (HeadLayout::Mha, HeadLayout::Mha);
    a.on_event(Event::Report(Box::new(r)));
    assert!(rows(&heads(&a), "MHA"), "{}", heads(&a));
    // Outside a lesson every layout is listed.
    assert!(rows(&heads(&app()), "MHA"));
}

#[test]
fn the_pane_registry_gives_every_pane_an_entry_and_every_place_its_own_pane_last() {
    use inferlab::ui::panes::{StandIn, PANES, PLACES};
    for place in PLACES {
        let of_place: Vec<_> = PANES.iter().filter(|d| d.pane.place() == place).collect();
        let last = of_place.last().expect("every place has entries");
        // What a place shows is the first entry asked for, and its own pane always is.
        assert!(last.pane == place && last.stands_in.is_none(), "{place:?}");
        let own = of_place.iter().filter(|d| d.stands_in.is_none()).count();
        assert_eq!(own, 1, "{place:?} has one pane of its own");
    }
    for p in Pane::ALL {
        let entries: Vec<_> = PANES.iter().filter(|d| d.pane == p).collect();
        assert!(!entries.is_empty(), "{p:?} has no entry");
        assert!(PLACES.contains(&p.place()), "{p:?} stands in no place");
        // A pane that only stands in for another is put there by focusing it, or, the
        // attached server's, by attaching (which focuses it).
        if p.place() != p {
            assert!(
                entries.iter().all(|d| match d.stands_in {
                    Some(StandIn::Chosen) => true,
                    Some(StandIn::Runs(_)) => p == Pane::Server,
                    _ => false,
                }),
                "{p:?}"
            );
        }
    }
}
