//! The scripted learner: all thirteen lessons walked start to end on the real model, through
//! the app's own update and event code (the worker thread as the app runs it, the screen
//! drawn on ratatui's TestBackend at 80×24 and 200×60). For every step it does the task
//! with the keys a learner would press, answers every question (a wrong answer first,
//! then the right one), and checks what the issue of the learner's walk asks: a task is
//! not ticked before it is done, every prediction offers what then really happens, space
//! always runs an iteration whatever the live request's state, and at the end
//! `inferlab lessons` lists every lesson complete.

mod common;

use inferlab::attach::poll::Link;
use inferlab::lesson::format::{Cond, CondValue, Op, Predict, QuestionKind, Var};
use inferlab::lesson::progress::Progress;
use inferlab::lesson::tutor::Tutor;
use inferlab::lesson::{predict, server_predict};
use inferlab::ui::app::{Action, App, Pane};
use inferlab::ui::draw;
use inferlab::ui::theme::{ColorMode, Theme};
use inferlab::worker::{self, Command, Event, WorkerConfig};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

const THEME: Theme = Theme {
    mode: ColorMode::None,
};

/// The app, its worker and what the event loop would tell the worker between frames.
struct Learner {
    app: App,
    tx: Sender<Command>,
    rx: Receiver<Event>,
    /// Iterations the learner ran (space, or an answer that runs one).
    iterations: usize,
    small: Terminal<TestBackend>,
    middle: Terminal<TestBackend>,
    large: Terminal<TestBackend>,
    /// What each prediction offered and what happened, for the test's output.
    log: Vec<String>,
    /// Every report the engine sent, as a recording would hold them.
    reports: Vec<inferlab::report::StepReport>,
    /// The real llama.cpp server lesson 11 attaches to, and the app's feed from it.
    server: Option<(
        common::llama_server::LlamaServer,
        inferlab::ui::attach::Feed,
    )>,
}

impl Learner {
    fn start() -> Self {
        let cfg = WorkerConfig {
            model: Some(common::real_model()),
            load: Default::default(),
            run: Default::default(),
            prompt: "Write one sentence about the sea.".into(),
            max_new: 200,
        };
        let run = cfg.run;
        let (tx, rx) = worker::spawn(cfg);
        let mut l = Self {
            app: App::new(run),
            tx,
            rx,
            iterations: 0,
            small: Terminal::new(TestBackend::new(80, 24)).unwrap(),
            middle: Terminal::new(TestBackend::new(120, 40)).unwrap(),
            large: Terminal::new(TestBackend::new(200, 60)).unwrap(),
            log: Vec::new(),
            reports: Vec::new(),
            server: None,
        };
        let t0 = Instant::now();
        while !l.app.worker.ready {
            assert!(l.app.worker.fatal.is_none(), "{:?}", l.app.worker.fatal);
            let e = l.recv(t0);
            l.app.on_event(e);
        }
        l
    }

    fn recv(&self, since: Instant) -> Event {
        let left = Duration::from_secs(300).saturating_sub(since.elapsed());
        self.rx
            .recv_timeout(left)
            .expect("the engine answers within five minutes")
    }

    /// Sends commands as the event loop does, then takes the engine's answer to each
    /// one (to an `Apply`, everything up to its `Applied`), so the app is settled when
    /// this returns.
    fn send(&mut self, mut cmds: Vec<Command>) {
        // The event loop tells the engine the layer on screen and whether the lens is.
        cmds.splice(0..0, self.app.watch_command());
        self.iterations += cmds.iter().filter(|c| matches!(c, Command::Step)).count();
        for c in &cmds {
            self.tx.send(c.clone()).unwrap();
        }
        let t0 = Instant::now();
        for c in cmds {
            loop {
                let e = self.recv(t0);
                if let Event::Died(why) = &e {
                    panic!("the engine died: {why}");
                }
                if let Event::Report(r) = &e {
                    self.reports.push((**r).clone());
                }
                let last = !matches!(c, Command::Apply(_)) || matches!(e, Event::Applied(_));
                self.app.on_event(e);
                if last {
                    break;
                }
            }
        }
        // The files the app asked for, as the event loop writes them.
        inferlab::ui::perform_writes(&mut self.app);
        self.absorb_server();
    }

    fn press(&mut self, a: Action) {
        let cmds = self.app.update(a);
        self.send(cmds);
    }

    /// Space: it must always run an iteration (or say there is nothing left to run).
    fn space(&mut self) {
        let before = self.app.report().map_or(0, |r| r.iteration);
        self.press(Action::Step);
        let after = self.app.report().map_or(0, |r| r.iteration);
        assert!(
            after > before
                || self.app.status.contains("nothing")
                || self.app.status.contains("press a"),
            "space ran no iteration (status: {})",
            self.app.status
        );
    }

    /// The screen at 80×24, 120×40 and 200×60, as text.
    fn screens(&mut self) -> [String; 3] {
        let app = &self.app;
        [&mut self.small, &mut self.middle, &mut self.large].map(|t| {
            t.draw(|f| draw::draw(app, &THEME, f.area(), f.buffer_mut()))
                .unwrap();
            format!("{}", t.backend())
        })
    }

    /// At 80×24 and 200×60: the step's title, the pane it focuses and that pane's key
    /// figure are on screen, and the engine is alive.
    fn check_screens(&mut self, at: &str) {
        let title: String = self
            .tutor()
            .step()
            .unwrap()
            .title
            .chars()
            .take(24)
            .collect();
        let pane = match self.app.screen.focus {
            Pane::Attention if self.app.screen.looks_at => " what does",
            Pane::Attention => " attention · layer",
            Pane::Heads => " heads · ",
            Pane::Output => " output · ",
            Pane::Kv => " KV cache · ",
            Pane::Serving if self.app.settings.sink => " attention sink",
            // Side by side, a narrow serving pane's title is its policy and cache alone.
            Pane::Serving
                if self.app.settings.serving.compare == inferlab::ui::app::Compare::Off =>
            {
                " serving · "
            }
            Pane::Serving => " · paged ",
            Pane::Forward => " forward pass ",
            Pane::Traffic => " memory traffic ",
            Pane::Lens => " logit lens ",
            Pane::Server => " attached: ",
        };
        // The pane's key figure, whole (once an iteration has given it one).
        let figure: &[&str] = match (self.app.report().is_some(), self.app.screen.focus) {
            (false, _) => &[],
            (_, Pane::Heads) => &["q8"],
            (_, Pane::Output) => &["(greedy)", "drawn %"],
            (_, Pane::Kv) => &["utilization "],
            (_, Pane::Serving) if self.app.settings.sink => {
                match self.app.report().and_then(|r| r.sink.as_ref()) {
                    Some(_) => &["ppl"],
                    None => &[],
                }
            }
            (_, Pane::Serving)
                if self.app.settings.serving.compare != inferlab::ui::app::Compare::Off =>
            {
                &["ratio after", "× the tokens/s"]
            }
            (_, Pane::Forward) => &[" ms"],
            (_, Pane::Traffic) => &["GFLOP"],
            (_, Pane::Server) => &["per decode"],
            _ => &[],
        };
        for s in self.screens() {
            assert!(
                s.contains(&title),
                "{at}: the step's title is not on screen\n{s}"
            );
            assert!(
                figure.is_empty() || figure.iter().any(|f| s.contains(f)),
                "{at}: the pane's key figure {figure:?} is not on screen whole\n{s}"
            );
            assert!(
                s.contains(pane),
                "{at}: the step's pane {pane:?} is not on screen\n{s}"
            );
            assert!(!s.contains("engine thread stopped"), "{at}\n{s}");
        }
    }

    /// Writes the three screens under the test's target folder, for a person to read.
    fn dump(&mut self, name: &str) {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("learner-screens");
        std::fs::create_dir_all(&dir).unwrap();
        for (s, size) in self.screens().iter().zip(["80x24", "120x40", "200x60"]) {
            std::fs::write(dir.join(format!("{name}-{size}.txt")), s).unwrap();
        }
    }

    /// What the open step's text points at (`shows:`), on screen whole at every size: each
    /// piece is found on some line of the step's pane (not in the lesson's own text), and
    /// the text after it up to the next ` · `, legend gap or pane border is not cut short
    /// with `…`. Returns what is missing, with the screen.
    fn missing_shows(&mut self, at: &str) -> Vec<String> {
        let shows = self.tutor().step().unwrap().shows.clone();
        let screens = self.screens();
        let mut missing = Vec::new();
        for (t, screen) in [&self.small, &self.middle, &self.large]
            .iter()
            .zip(&screens)
        {
            let buf = t.backend().buffer();
            let pane = draw::focused_areas(buf.area, &self.app.screen, true).pane;
            let lines: Vec<String> = (pane.y..pane.y + pane.height)
                .map(|y| {
                    (pane.x..pane.x + pane.width)
                        .map(|x| buf[(x, y)].symbol())
                        .collect()
                })
                .collect();
            for piece in &shows {
                let whole = lines.iter().any(|line| {
                    line.match_indices(piece.as_str()).any(|(i, _)| {
                        let after = &line[i + piece.len()..];
                        let end = [after.find(" · "), after.find("  "), after.find('│')]
                            .into_iter()
                            .flatten()
                            .min()
                            .unwrap_or(after.len());
                        !after[..end].contains('…')
                    })
                });
                if !whole {
                    let size = format!("{}×{}", buf.area.width, buf.area.height);
                    missing.push(format!(
                        "{at} at {size}: `{piece}` is not in the pane whole\n{screen}"
                    ));
                }
            }
        }
        missing
    }

    fn tutor(&self) -> &Tutor {
        self.app.tutor.as_ref().expect("a lesson is open")
    }

    fn holds(&self, c: &Cond) -> bool {
        inferlab::lesson::tutor::holds(&self.app.live(), self.tutor(), c)
    }

    /// The key a learner presses to move `c` towards holding.
    fn key_for(&self, c: &Cond) -> Action {
        let word = |w: &str| matches!(&c.value, CondValue::Word(x) if x == w);
        let setting = match c.var {
            Var::Key(k) => inferlab::lesson::keys::KEYS[k].name,
            Var::Steps
            | Var::DecodeSteps
            | Var::Generated
            | Var::Finished
            | Var::Copies
            | Var::SinkTokens
            | Var::PastCrossover => return Action::Step,
        };
        match setting {
            "layout" => Action::CycleLayout,
            "attention" => Action::ToggleKernel,
            "cache" => Action::ToggleCache,
            "policy" => Action::TogglePolicy,
            "compare" => Action::CycleCompare,
            "values" => Action::ToggleValues,
            "sink" => Action::ToggleSink,
            "workload" => Action::ToggleWorkload,
            "kv_cache" => Action::ToggleKvCache,
            "chunked" => Action::ToggleChunked,
            "kv_elem" => Action::CycleKvElem,
            "weights" => Action::CycleWeights,
            "focus" if word("lens") => Action::ToggleLens,
            "focus" if word("traffic") => Action::ToggleTraffic,
            "focus" => Action::FocusNext,
            "layer" => Action::LayerDown,
            "head" if matches!(c.op, Op::Lt | Op::Le) => Action::HeadLeft,
            "head" => Action::HeadRight,
            other => panic!("the learner knows no key for the setting `{other}`"),
        }
    }

    /// Does the open step's task, key by key; returns the keys it took.
    fn do_task(&mut self, at: &str) -> usize {
        let Some(task) = self.tutor().step().and_then(|s| s.task.clone()) else {
            return 0;
        };
        for n in 0..600 {
            let Some(c) = task.check.iter().find(|c| !self.holds(c)) else {
                return n;
            };
            let a = self.key_for(c);
            if a == Action::Step {
                self.space();
            } else {
                self.press(a);
            }
        }
        panic!("{at}: the task `{}` was not done after 600 keys", task.text);
    }

    /// Answers question `qi` of the open step: a wrong choice first, then the right one.
    /// A prediction is answered until it is graded right, each time with what really
    /// happened in the iteration before, and every grading must have offered it.
    fn answer(&mut self, at: &str, qi: usize) {
        let q = self.tutor().step().unwrap().questions[qi].clone();
        match &q.kind {
            QuestionKind::Choice(choices) => {
                let wrong = choices.iter().position(|c| !c.right).unwrap();
                let right = choices.iter().position(|c| c.right).unwrap();
                self.press(Action::Answer(wrong + 1));
                let a = self.tutor().answers[qi]
                    .clone()
                    .expect("an answer is recorded");
                assert!(!a.right, "{at}: a wrong choice graded right");
                self.press(Action::Answer(right + 1));
                let a = self.tutor().answers[qi].clone().unwrap();
                assert!(a.right, "{at}: the right choice graded wrong");
            }
            QuestionKind::Predict(kind) => self.predict(at, qi, *kind),
        }
    }

    /// Starts the real llama.cpp server and attaches the app to it, sending it our chat
    /// requests as `inferlab attach URL --rate 2` does.
    fn attach(&mut self) {
        let server = common::llama_server::LlamaServer::start(4);
        let tok = inferlab::model::TextTokenizer::of_model(&common::real_model()).unwrap();
        let src = inferlab::serve::workload::source_tokens(&tok);
        let reqs = inferlab::bench::arrivals::chat_requests(&src, 2.0, 600, 7);
        let a = inferlab::ui::attach::Attach {
            base: inferlab::attach::http::Base::parse(&server.url).unwrap(),
            plan: Some((reqs, 2.0)),
        };
        let (feed, view) = inferlab::ui::attach::Feed::start(a);
        self.app.attach(view);
        self.server = Some((server, feed));
        // A learner reads the pane once the server has answered.
        let t0 = Instant::now();
        while self.app.attached.as_ref().unwrap().snap.link != Link::Up {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the server never answered"
            );
            std::thread::sleep(Duration::from_millis(100));
            self.absorb_server();
        }
    }

    /// Takes in the server's newest poll, as the event loop does between frames.
    fn absorb_server(&mut self) {
        if let (Some((_, feed)), Some(v)) = (&self.server, self.app.attached.as_mut()) {
            if feed.absorb(v) {
                self.app.server_polled();
            }
        }
    }

    /// What a prediction offered, what the learner chose and the verdict, for the log.
    fn log_verdict(&mut self, kind: Predict, chose: &str, a: &inferlab::lesson::tutor::Answer) {
        let verdict = if a.right { "right" } else { "wrong" };
        self.log.push(format!(
            "  {kind:?}: chose {chose:?}, {verdict} ({})",
            a.why
        ));
    }

    /// A prediction about the attached server: answered, then graded by its polls.
    fn predict_server(&mut self, at: &str, qi: usize, kind: Predict) {
        let mut pick = 0;
        for attempt in 0..8 {
            let t0 = Instant::now();
            let live = loop {
                self.absorb_server();
                if let Some(c) = predict::live_choices(&self.app.live(), kind) {
                    break c;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "{at}: {kind:?} never posed"
                );
                std::thread::sleep(Duration::from_millis(100));
            };
            let choice = pick.min(live.values.len() - 1);
            self.press(Action::Answer(choice + 1));
            while self.tutor().pending.is_some() {
                assert!(
                    t0.elapsed() < Duration::from_secs(120),
                    "{at}: {kind:?} never graded"
                );
                std::thread::sleep(Duration::from_millis(100));
                self.absorb_server();
            }
            let a = self.tutor().answers[qi].clone().expect("graded");
            // Every choice graded against the same polls: what happened is offered.
            let snap = &self.app.attached.as_ref().unwrap().snap;
            let p = predict::Pending {
                question: qi,
                choice,
                kind,
                subject: live.subject,
                before: Vec::new(),
                shown: live.clone(),
            };
            let rights: Vec<usize> = (0..live.values.len())
                .filter(|&i| {
                    let p = predict::Pending {
                        choice: i,
                        ..p.clone()
                    };
                    server_predict::outcome(&p, snap).is_some_and(|(right, _)| right)
                })
                .collect();
            assert!(
                !rights.is_empty(),
                "{at}: {kind:?} offered {:?}, none came true ({})",
                live.labels,
                a.why
            );
            assert_eq!(
                a.right,
                rights.contains(&choice),
                "{at}: {kind:?} {}",
                a.why
            );
            self.log_verdict(kind, &live.labels[choice], &a);
            if a.right {
                return;
            }
            assert!(attempt < 7, "{at}: {kind:?} never graded right");
            pick = rights[0];
        }
    }

    fn predict(&mut self, at: &str, qi: usize, kind: Predict) {
        if kind.about_server() {
            return self.predict_server(at, qi, kind);
        }
        let mut pick = 0;
        for attempt in 0..12 {
            // Not asked while its outcome cannot be seen: a learner steps until it is.
            let mut waited = 0;
            while predict::live_choices(&self.app.live(), kind).is_none() {
                assert!(
                    waited < 40,
                    "{at}: {kind:?} was never posed (app {:?}, report {:?}, status {})",
                    self.app.settings.run,
                    self.app
                        .report()
                        .map(|r| (r.info.layout, r.recomputed, r.repeat, r.finished)),
                    self.app.status
                );
                // What the app's line under the question says to do.
                match kind {
                    Predict::KvAfterMha => self.press(Action::CycleLayout),
                    Predict::KvAfterTiled => self.press(Action::ToggleKernel),
                    Predict::TopAfterTemperature if !self.app.report().unwrap().finished => {
                        self.press(Action::CycleTemperature)
                    }
                    Predict::FlopsWithoutCache if !self.app.settings.request.kv_cache => {
                        self.press(Action::ToggleKvCache);
                        self.space();
                    }
                    Predict::UtilAfterContiguous
                        if self.app.settings.serving.cache
                            == inferlab::serve::CacheKind::Contiguous =>
                    {
                        self.press(Action::ToggleCache)
                    }
                    // Asked from 8-bit weights: W cycles q4 → f32 → q8_0.
                    Predict::StepAfterQ4
                        if self.app.settings.weights != inferlab::model::Requant::Q8_0 =>
                    {
                        self.press(Action::CycleWeights)
                    }
                    // Both runs done: b swaps the policies and runs both again.
                    Predict::TtftRatio
                        if self.app.report().is_some_and(|r| {
                            r.serve.as_ref().is_some_and(|s| s.done)
                                && r.serve_compare.as_ref().is_some_and(|s| s.done)
                        }) =>
                    {
                        self.press(Action::TogglePolicy);
                        self.space();
                    }
                    _ => self.space(),
                }
                waited += 1;
            }
            let live = predict::live_choices(&self.app.live(), kind).unwrap();
            let choice = pick.min(live.values.len() - 1);
            let before = self.app.report().cloned();
            self.press(Action::Answer(choice + 1));
            // Some predictions wait for their event: keep stepping.
            let mut n = 0;
            while self.tutor().pending.is_some() {
                assert!(n < 1500, "{at}: {kind:?} was never graded");
                self.space();
                n += 1;
            }
            let a = self.tutor().answers[qi].clone().unwrap_or_else(|| {
                panic!(
                    "{at}: {kind:?} answered {choice} of {:?} but not graded ({})",
                    live.labels, self.app.status
                )
            });
            let new = self.app.report().cloned().unwrap();
            // Every choice graded against the same iteration: what happened is offered.
            let p = predict::Pending {
                question: qi,
                choice,
                kind,
                subject: live.subject,
                before: live.before.clone(),
                shown: live.clone(),
            };
            let rights: Vec<usize> = (0..live.values.len())
                .filter(|&i| {
                    let p = predict::Pending {
                        choice: i,
                        ..p.clone()
                    };
                    predict::outcome(&p, &live, &self.app.live(), &new)
                        .is_some_and(|(right, _)| right)
                })
                .collect();
            assert!(
                !rights.is_empty() || predict::waits_for_event(kind),
                "{at}: {kind:?} offered {:?} but none came true ({})",
                live.labels,
                a.why
            );
            assert_eq!(
                a.right,
                rights.contains(&choice),
                "{at}: {kind:?} graded {} for choice {choice} of {:?}",
                a.right,
                live.labels
            );
            drop(before);
            self.log_verdict(kind, &live.labels[choice], &a);
            if a.right {
                return;
            }
            // A whole run's outcome is graded once: the next question opens, wrong or not.
            if predict::graded_once(kind) {
                assert_ne!(
                    self.tutor().open_question(),
                    Some(qi),
                    "{at}: {kind:?} graded wrong but still open"
                );
                return;
            }
            assert!(attempt < 11, "{at}: {kind:?} never graded right");
            pick = rights.first().copied().unwrap_or(pick + 1);
        }
    }
}

/// The tests' data folder (progress file, this machine's measured limits), set once for
/// both tests of this file, which run in one process.
fn data_dir() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("learner-data");
        std::fs::create_dir_all(&d).unwrap();
        let _ = std::fs::remove_file(d.join("progress.json"));
        std::env::set_var("INFERLAB_DATA_DIR", &d);
        d
    })
    .clone()
}

#[test]
fn a_toggle_recomputes_the_same_position_and_mha_matches_gqa() {
    data_dir();
    let mut l = Learner::start();
    for _ in 0..4 {
        l.space();
    }
    let gqa = l.app.report().cloned().unwrap();
    assert_eq!(gqa.info.step, 3);
    let top = |r: &inferlab::report::StepReport| -> Vec<(u32, f32)> {
        r.info.top_k.iter().map(|t| (t.id, t.prob)).collect()
    };
    // m: GQA → MQA → MHA. Each recomputes the tokens so far and shows the next token of
    // the same position: the sequence does not grow.
    for layout in ["mqa", "mha"] {
        l.press(Action::CycleLayout);
        let r = l.app.report().cloned().unwrap();
        assert!(r.recomputed, "{layout}");
        assert_eq!(r.info.layout.to_string().to_lowercase(), layout);
        assert_eq!(
            r.pieces.len(),
            gqa.pieces.len(),
            "{layout}: the position moved"
        );
        assert_eq!(r.kv.used, gqa.kv.used, "{layout}");
    }
    // MHA repeats GQA's K/V heads exactly: the same distribution, to the digits shown.
    let mha = l.app.report().cloned().unwrap();
    for ((a, pa), (b, pb)) in top(&gqa).into_iter().zip(top(&mha)) {
        assert_eq!(a, b, "the same tokens in the same order");
        assert!((pa - pb).abs() < 5e-5, "GQA {pa} vs MHA {pb}");
    }
    // f, too, stays at the position; stepping then goes on from there.
    l.press(Action::ToggleKernel);
    assert_eq!(l.app.report().unwrap().pieces.len(), gqa.pieces.len());
    l.space();
    let next = l.app.report().cloned().unwrap();
    assert_eq!(next.pieces.len(), gqa.pieces.len() + 1);
    assert!(!next.recomputed && next.info.step > 0);
}

#[test]
fn a_scripted_learner_walks_every_lesson_to_the_end() {
    let t0 = Instant::now();
    let data = data_dir();
    let (lessons, errors) =
        inferlab::lesson::load(&inferlab::lesson::source(None)).expect("the shipped lessons");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(lessons.len(), 13);
    let mut l = Learner::start();
    let tutor = Tutor::new(lessons.clone(), 0, Progress::default(), true);
    let cmds = l.app.open_lesson(tutor);
    l.send(cmds);
    let mut log = Vec::new();
    let mut missing = Vec::new();
    for (li, lesson) in lessons.iter().enumerate() {
        // The lesson on a real server runs attached to one, as its first step says.
        let real_server = lesson.file.contains("a-real-server");
        if real_server {
            l.attach();
        }
        for (si, step) in lesson.steps.iter().enumerate() {
            let at = format!("{} step {} ({})", lesson.file, si + 1, step.title);
            assert_eq!((l.tutor().lesson, l.tutor().step), (li, si), "{at}");
            // A task counts only what happens after its step opens.
            if step.task.is_some() {
                assert!(
                    !l.app.task_done(),
                    "{at}: ticked before the learner did anything"
                );
            }
            l.check_screens(&at);
            // The task, then the questions, as the step reads; but a prediction about a
            // toggle comes first, since answering it makes the toggle the task asks for.
            let toggle_first = step.questions.iter().any(|q| {
                matches!(
                    q.kind,
                    QuestionKind::Predict(
                        Predict::KvAfterMha
                            | Predict::KvAfterTiled
                            | Predict::UtilAfterContiguous
                            | Predict::FinishedRowStatic
                            | Predict::TopAfterTemperature
                            | Predict::FlopsWithoutCache
                    )
                )
            });
            let mut keys = 0;
            if !toggle_first {
                keys = l.do_task(&at);
            }
            for qi in 0..step.questions.len() {
                l.answer(&at, qi);
            }
            keys += l.do_task(&at);
            assert!(l.app.task_done() || step.task.is_none(), "{at}");
            let done = l
                .tutor()
                .progress
                .lessons
                .get(lesson.id())
                .is_some_and(|p| p.done_steps.contains(&si));
            assert!(done, "{at}: done but not recorded");
            log.push(format!("{at}: {keys} key(s)"));
            log.append(&mut l.log);
            l.check_screens(&at);
            missing.extend(l.missing_shows(&at));
            l.dump(&format!(
                "{}-{}",
                lesson.file.trim_end_matches(".md"),
                si + 1
            ));
            l.press(Action::NextStep);
        }
        if real_server {
            l.app.detach();
            l.server = None;
        }
    }
    assert!(
        missing.is_empty(),
        "{} piece(s) a step points at are not on screen whole:\n{}",
        missing.len(),
        missing.join("\n")
    );
    // Lesson 4 loaded the 4-bit weights: each weight type was scored on the evaluation text
    // as it loaded (the figures its last step quotes), and 4 bits cost little perplexity.
    let scored = |w| l.app.worker.scored.iter().find(|s| s.weights == w);
    use inferlab::model::Requant;
    let q8 = scored(Requant::Q8_0).expect("the 8-bit weights were scored");
    let q4 = scored(Requant::Q4).expect("the 4-bit weights were scored");
    let f32 = scored(Requant::F32).expect("lesson 4 loads f32 to compare with");
    let (p8, p4) = (q8.perplexity, q4.perplexity);
    let (a8, a4) = (q8.agreement(f32).unwrap(), q4.agreement(f32).unwrap());
    eprintln!("evaluation text: perplexity q8_0 {p8:.3}, q4 {p4:.3}; top-1 as f32's q8_0 {a8:.3}, q4 {a4:.3}");
    assert!(
        p8 > 1.0 && p8 < 1000.0 && (p4 / p8 - 1.0).abs() < 0.1,
        "{p8} {p4}"
    );
    // Both keep most of f32's top tokens (the file is 4-bit: f32 is its blocks widened).
    assert!(a4 > 0.6 && a8 > 0.6 && a4 <= 1.0 && a8 <= 1.0, "{a8} {a4}");
    // The learner then types a new prompt after the last request finished: space prefills it.
    let last = l.app.report().map_or(0, |r| r.iteration);
    l.press(Action::StartInput);
    for c in "Name a colour.".chars() {
        l.press(Action::Type(c));
    }
    l.press(Action::Submit);
    l.space();
    let r = l.app.report().cloned().unwrap();
    assert!(r.iteration > last && r.info.step == 0 && r.prompt == "Name a colour.");
    drop(l);
    let out = std::process::Command::new(common::bin())
        .arg("lessons")
        .env("INFERLAB_DATA_DIR", &data)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    for (i, lesson) in lessons.iter().enumerate() {
        let n = lesson.steps.len();
        assert!(
            listing.contains(&format!("{n}/{n} steps done")),
            "lesson {} is not complete:\n{listing}",
            i + 1
        );
    }
    eprintln!(
        "{}\nscripted learner: {:.0} s",
        log.join("\n"),
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn the_same_tokens_run_beside_under_another_layout() {
    data_dir();
    let mut l = Learner::start();
    for _ in 0..3 {
        l.space();
    }
    // M: the live (GQA) request's tokens under MHA beside it, for the same position.
    l.press(Action::CycleBeside);
    let r = l.app.report().cloned().unwrap();
    let b = r.beside.clone().expect("the view beside");
    assert_eq!(b.layout, inferlab::model::HeadLayout::Mha);
    assert_eq!((b.compared, b.agreed), (1, 1));
    assert_eq!(b.kv_bytes, 3 * r.kv.used * r.kv.bytes_per_token);
    for (a, m) in r.info.top_k.iter().zip(&b.top_k) {
        assert_eq!(a.id, m.id);
        assert!((a.prob - m.prob).abs() < 5e-5, "{} vs {}", a.prob, m.prob);
    }
    // It steps with the live request, on the live request's tokens.
    for _ in 0..3 {
        l.space();
    }
    let b = l.app.report().unwrap().beside.clone().unwrap();
    assert_eq!(
        (b.compared, b.agreed),
        (4, 4),
        "MHA repeats GQA's heads exactly"
    );
    // M again: MQA, a different model, compared from the same position on; then off.
    l.press(Action::CycleBeside);
    let b = l.app.report().unwrap().beside.clone().unwrap();
    assert_eq!(b.layout, inferlab::model::HeadLayout::Mqa);
    assert_eq!(b.compared, 1);
    l.space();
    assert_eq!(l.app.report().unwrap().beside.as_ref().unwrap().compared, 2);
    l.press(Action::Set(inferlab::ui::app::Setting::Focus(Pane::Heads)));
    for s in l.screens() {
        assert!(s.contains("beside MQA: top"), "{s}");
    }
    l.press(Action::CycleBeside);
    assert!(l.app.settings.request.beside.is_none() && l.app.report().unwrap().beside.is_none());
    let [small, _, large] = l.screens();
    assert!(!small.contains("beside ") && !large.contains("beside "));
}

/// The chapter's GQA claim, seen: the long story served under GQA beside the same
/// requests under MHA in the same KV memory in bytes runs more requests at once.
#[test]
fn side_by_side_layouts_run_more_requests_under_gqa_in_the_same_kv_bytes() {
    use inferlab::model::HeadLayout;
    use inferlab::ui::app::Compare;
    let mut l = Learner::start();
    l.press(Action::ToggleWorkload);
    while l.app.settings.serving.compare != Compare::Layout {
        l.press(Action::CycleCompare);
    }
    let running = |v: &inferlab::report::ServeReport| v.step.running();
    let (mut gqa, mut mha) = (0, 0);
    for _ in 0..40 {
        l.space();
        let r = l.app.report().unwrap();
        let (main, beside) = (r.serve.as_ref().unwrap(), r.serve_compare.as_ref().unwrap());
        assert_eq!((main.layout, beside.layout), (None, Some(HeadLayout::Mha)));
        // The same bytes: a third of the tokens at three times the bytes each.
        let bytes = |v: &inferlab::report::ServeReport| {
            v.step.memory.capacity_tokens * v.step.memory.bytes_per_token
        };
        let page = main.page_size * beside.step.memory.bytes_per_token;
        assert!(
            bytes(main) - bytes(beside) < page,
            "{} vs {}",
            bytes(main),
            bytes(beside)
        );
        gqa = gqa.max(running(main));
        mha = mha.max(running(beside));
    }
    eprintln!("in the same KV bytes: GQA ran at most {gqa} requests at once, MHA {mha}");
    assert!(mha < gqa, "MHA ran at most {mha} at once, GQA {gqa}");
    let s = l.screens();
    assert!(
        s[2].contains("· mha"),
        "the run beside names its layout\n{}",
        s[2]
    );
}

/// A session through every setting a user can reach (each followed by an iteration) is
/// recorded, read back whole and exported, pane by pane, at the iterations each setting
/// produced: the checks a recording passes follow the layout and settings each report
/// ran under, not the model's trained shape alone.
#[test]
fn a_session_through_every_setting_records_replays_and_exports() {
    use inferlab::worker::recording::{self, Recorder};
    data_dir();
    let mut l = Learner::start();
    l.space();
    l.space();
    let keys = [
        Action::CycleLayout, // m: MQA
        Action::CycleLayout, // m: MHA
        Action::CycleBeside, // M: beside
        Action::ToggleKernel,
        Action::CycleKvElem,
        Action::ToggleKvCache,
        Action::CycleTemperature,
        Action::CycleTopP,
        Action::ToggleWorkload,
        Action::ToggleChunked,
        Action::TogglePolicy,
        Action::ToggleCache,
        Action::CycleCompare,
        Action::CycleCompare,
        Action::ToggleSink,
        Action::NextRequest,
        Action::CycleLayout, // back to GQA, with everything else changed
    ];
    for a in keys {
        l.press(a);
        l.space();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("every-setting.jsonl");
    let mut rec = Recorder::create(&path, "SmolLM2", Default::default()).unwrap();
    for r in &l.reports {
        rec.write(r).unwrap();
    }
    rec.finish().unwrap();
    let read = recording::read(&path).unwrap_or_else(|e| panic!("the session is refused: {e}"));
    assert_eq!(read.reports.len(), l.reports.len());
    assert!(read.warning.is_none(), "{:?}", read.warning);
    // The replay's screens: every report drawn as the player hands it to the app.
    let mut app = App::new(Default::default());
    app.on_event(Event::Ready { model: "m".into() });
    let mut term = Terminal::new(TestBackend::new(80, 24)).unwrap();
    for r in &read.reports {
        app.on_event(Event::Report(Box::new(r.clone())));
        term.draw(|f| draw::draw(&app, &THEME, f.area(), f.buffer_mut()))
            .unwrap();
    }
    assert!(format!("{}", term.backend()).contains("iteration"));
    // Export every pane at every tenth report and the last.
    let steps: Vec<usize> = read.reports.iter().map(|r| r.iteration).collect();
    let panes = [
        "attention",
        "kv",
        "heads",
        "batch",
        "forward",
        "output",
        "traffic",
    ];
    let last = steps.len() - 1;
    for (i, step) in steps.iter().enumerate() {
        if i % 10 != 0 && i + 1 != steps.len() {
            continue;
        }
        let sink = (i == last).then_some("sink");
        for pane in panes.into_iter().chain(sink) {
            let out = dir.path().join(format!("{pane}-{step}.svg"));
            let o = std::process::Command::new(common::bin())
                .args(["export", path.to_str().unwrap(), "--pane", pane])
                .args(["--step", &step.to_string(), "--out", out.to_str().unwrap()])
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "export --pane {pane} --step {step}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// Lesson 8's side by side as the lesson sets it (the chat requests in a burst): within
/// the step's thirty iterations, the contiguous cache runs at most 60% of the requests the
/// paged one runs at once in the same KV memory.
#[test]
fn lesson_eights_side_by_side_shows_paging_within_its_thirty_iterations() {
    use inferlab::serve::CacheKind;
    data_dir();
    let (lessons, _) = inferlab::lesson::load(&inferlab::lesson::source(None)).unwrap();
    let li = lessons
        .iter()
        .position(|l| l.file.starts_with("08-"))
        .unwrap();
    let mut progress = Progress::default();
    progress.of(lessons[li].id()).step = 3;
    let mut l = Learner::start();
    let cmds = l.app.open_lesson(Tutor::new(lessons, li, progress, true));
    l.send(cmds);
    assert!(l.app.settings.serving.burst, "the lesson sets a burst");
    let running = |v: &inferlab::report::ServeReport| v.step.running();
    let (mut paged, mut contiguous) = (0, 0);
    for _ in 0..30 {
        l.space();
        let r = l.app.report().unwrap();
        for v in [r.serve.as_ref(), r.serve_compare.as_ref()]
            .into_iter()
            .flatten()
        {
            match v.cache {
                CacheKind::Paged => paged = paged.max(running(v)),
                CacheKind::Contiguous => contiguous = contiguous.max(running(v)),
            }
        }
    }
    eprintln!("lesson 8 step 4, 30 iterations: paged ran {paged} at once, contiguous {contiguous}");
    assert!(
        contiguous * 10 <= paged * 6,
        "contiguous {contiguous} against paged {paged}"
    );
}
