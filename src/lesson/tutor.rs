//! The lesson walker inside the app: which step is open, what it set, whether its task is
//! done, and how the user answered. It reads the app's live state; it never computes
//! figures of its own.

use super::live::{LiveState, Setting};
use super::predict::Pending;
use crate::lesson::keys::KEYS;
use crate::lesson::progress::Progress;
use crate::lesson::*;
use crate::report::StepReport;
use crate::settings::Settings;

/// One answer the user gave, with the app's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub choice: usize,
    pub right: bool,
    /// Why, in words: the choice's explanation, or what the model really did.
    pub why: String,
}

/// The open lesson.
#[derive(Debug, Clone)]
pub struct Tutor {
    pub lessons: Vec<Lesson>,
    pub lesson: usize,
    pub step: usize,
    /// The lesson list overlay.
    pub list_open: bool,
    pub list_sel: usize,
    /// The iteration count when this step opened (tasks count iterations from here).
    pub iter_at_open: usize,
    /// Decode steps of the live request seen since this step opened, under the settings
    /// now: a task counts only what happens after it is posed, and a switch that
    /// recomputes the request (other weights, layout, kernel) starts the count again, so
    /// "five steps on the 4-bit weights" are five steps on them.
    pub decode_seen: usize,
    /// Answers to the current step's questions.
    pub answers: Vec<Option<Answer>>,
    /// Each answered question's text as it read when first answered, figures filled in:
    /// its premise stays put while the iterations it set off change the live figures.
    pub asked: std::collections::BTreeMap<usize, String>,
    pub pending: Option<Pending>,
    pub progress: Progress,
    /// Whether progress is written to disk (off in tests).
    pub persist: bool,
    /// The progress changed and its write has not been asked for yet.
    unsaved: bool,
    /// Lines the lesson panel is scrolled down (mouse wheel), reset on every step.
    pub scroll: u16,
    /// A question just graded, whose verdict the panel scrolls into view at the next
    /// frame (the event loop knows the panel's size; the tutor does not).
    pub reveal: Option<usize>,
    /// What the user must know about their progress file: it was unreadable and moved
    /// aside, or the last save failed. Shown at the top of the lesson.
    pub notice: Option<String>,
}

/// How a save error starts, so a later good save can clear it.
const SAVE_FAILED: &str = "progress not saved";

impl Tutor {
    /// A tutor over `lessons`, opened at lesson `lesson` (0-based) where the user left it.
    pub fn new(lessons: Vec<Lesson>, lesson: usize, progress: Progress, persist: bool) -> Self {
        let lesson = lesson.min(lessons.len().saturating_sub(1));
        let step = lessons
            .get(lesson)
            .and_then(|l| {
                progress
                    .lessons
                    .get(l.id())
                    .map(|p| p.step.min(l.steps.len().saturating_sub(1)))
            })
            .unwrap_or(0);
        let n = lessons
            .get(lesson)
            .and_then(|l| l.steps.get(step))
            .map(|s| s.questions.len())
            .unwrap_or(0);
        Self {
            lessons,
            lesson,
            step,
            list_open: false,
            list_sel: lesson,
            iter_at_open: 0,
            decode_seen: 0,
            answers: vec![None; n],
            asked: Default::default(),
            pending: None,
            progress,
            persist,
            unsaved: false,
            scroll: 0,
            reveal: None,
            notice: None,
        }
    }

    /// The lesson open now.
    pub fn current(&self) -> Option<&Lesson> {
        self.lessons.get(self.lesson)
    }

    /// The step open now.
    pub fn step(&self) -> Option<&Step> {
        self.current().and_then(|l| l.steps.get(self.step))
    }

    /// Notes the step open now in the progress, to be written (by the app's effects).
    fn save(&mut self) {
        if let Some(id) = self.current().map(|l| l.id().to_string()) {
            self.progress.of(&id).step = self.step;
        }
        self.unsaved |= self.persist;
    }

    /// The progress to write, when it changed since the last write was asked for.
    pub fn take_unsaved(&mut self) -> Option<Progress> {
        std::mem::take(&mut self.unsaved).then(|| self.progress.clone())
    }

    /// How the last write of the progress went. A failed save must not interrupt the
    /// lesson, but the user is told, until a later save works.
    pub fn saved(&mut self, r: Result<(), crate::files::FileError>) {
        let failed_before = self
            .notice
            .as_deref()
            .is_some_and(|n| n.starts_with(SAVE_FAILED));
        match r {
            Ok(()) if failed_before => self.notice = None,
            Ok(()) => {}
            Err(e) => self.notice = Some(format!("{SAVE_FAILED}: {e}")),
        }
    }

    /// The first question not yet settled, if any.
    pub fn open_question(&self) -> Option<usize> {
        (0..self.answers.len()).find(|&i| !self.settled(i))
    }

    /// The prediction the learner is asked now, if the open question is one: the screen
    /// keeps back what would give its answer away.
    pub fn open_prediction(&self) -> Option<super::format::Predict> {
        let q = self.step()?.questions.get(self.open_question()?)?;
        match q.kind {
            QuestionKind::Predict(k) => Some(k),
            QuestionKind::Choice(_) => None,
        }
    }

    /// Whether the screen should keep back what answers prediction `k`: the lesson asks it
    /// in a later step, or asks it now and it is still open.
    pub fn keeps_back(&self, k: super::format::Predict) -> bool {
        let Some(l) = self.current() else {
            return false;
        };
        let asks = |s: &Step| {
            (s.questions.iter()).any(|q| matches!(q.kind, QuestionKind::Predict(p) if p == k))
        };
        match l.steps.iter().position(asks) {
            Some(i) if i > self.step => true,
            Some(i) if i == self.step => self.open_prediction() == Some(k),
            _ => false,
        }
    }

    /// Whether question `qi` needs no more answers: it was answered right, or it is a
    /// prediction about a whole run's outcome that was graded (right or wrong). Predicting
    /// such a run again would mean serving it all again, to measure noise.
    fn settled(&self, qi: usize) -> bool {
        let Some(a) = self.answers.get(qi).and_then(Option::as_ref) else {
            return false;
        };
        let whole_run = self.step().and_then(|s| s.questions.get(qi)).is_some_and(
            |q| matches!(q.kind, QuestionKind::Predict(k) if super::predict::graded_once(k)),
        );
        a.right || whole_run
    }
}

/// What the lesson runtime asks of the app after a key: settings to apply (the same
/// actions the keys give), a new prompt, one iteration run (to grade a prediction), and a
/// line for the status bar. The runtime never writes the app's fields itself.
#[derive(Debug, Default, PartialEq)]
pub struct Reply {
    /// What the screen shows: focus, zoom, values, layer, head.
    pub screen: Vec<Setting>,
    /// What the worker runs under, when the step or the answer changes it.
    pub settings: Option<Settings>,
    pub prompt: Option<String>,
    pub step: bool,
    pub status: Option<String>,
}

impl Reply {
    fn status(s: &str) -> Self {
        Self {
            status: Some(s.into()),
            ..Self::default()
        }
    }
}

impl Tutor {
    /// Moves to another step (or lesson); the reply carries what the step sets.
    pub fn goto(&mut self, app: &LiveState, lesson: usize, step: usize) -> Reply {
        let Some(l) = self.lessons.get(lesson) else {
            return Reply::default();
        };
        let step = step.min(l.steps.len().saturating_sub(1));
        let mut s = l.steps[step].clone();
        // Walking on, the earlier steps' settings are in place already (and the learner's
        // own changes stay); opening a step any other way sets what the walk would have.
        if !(lesson == self.lesson && step == self.step + 1) {
            s.set = l.steps[..=step]
                .iter()
                .fold(StepSettings::default(), |acc, st| st.set.over(&acc));
        }
        self.lesson = lesson;
        self.step = step;
        self.list_sel = lesson;
        self.pending = None;
        self.scroll = 0;
        self.answers = vec![None; s.questions.len()];
        self.asked.clear();
        self.iter_at_open = app.report.map_or(0, |r| r.iteration);
        self.decode_seen = 0;
        self.save();
        settings_of(app, &s)
    }

    /// Next step, or the next lesson's first step after the last one.
    pub fn next(&mut self, app: &LiveState) -> Reply {
        let (l, s) = (self.lesson, self.step);
        let n = self.lessons[l].steps.len();
        let id = self.lessons[l].id().to_string();
        // Leaving a step with neither task nor question counts as having read it.
        let step = &self.lessons[l].steps[s];
        if step.task.is_none() && step.questions.is_empty() {
            self.progress.of(&id).mark_done(s);
        }
        if s + 1 < n {
            self.goto(app, l, s + 1)
        } else if l + 1 < self.lessons.len() {
            self.goto(app, l + 1, 0)
        } else {
            // The read step above is kept even though no step opens after it.
            self.save();
            Reply::status("that was the last step of the last lesson")
        }
    }

    /// Previous step, or the previous lesson's last step.
    pub fn prev(&mut self, app: &LiveState) -> Reply {
        let (l, s) = (self.lesson, self.step);
        if s > 0 {
            self.goto(app, l, s - 1)
        } else if l > 0 {
            let last = self.lessons[l - 1].steps.len().saturating_sub(1);
            self.goto(app, l - 1, last)
        } else {
            Reply::default()
        }
    }
}

/// What a step asks for: its screen settings, its settings over the learner's own (a
/// step names only what it is about), and its prompt.
fn settings_of(app: &LiveState, s: &Step) -> Reply {
    let asked = s.set.apply(app.settings);
    let (n_layer, n_head) = app
        .report
        .as_ref()
        .map_or((DEFAULT_LAYERS, DEFAULT_HEADS), |r| {
            (r.cfg.n_layer, r.cfg.n_head)
        });
    // A lesson names layers and heads of the default model; a smaller one gets its last.
    let view = asked.screen.into_iter().map(|v| match v {
        Setting::Layer(l) => Setting::Layer(l.min(n_layer - 1)),
        Setting::Head(h) => Setting::Head(h.min(n_head - 1)),
        other => other,
    });
    Reply {
        screen: view.collect(),
        settings: Some(asked.settings),
        prompt: s.prompt.clone(),
        ..Reply::default()
    }
}

/// Whether one condition holds in the live app.
pub fn holds(app: &LiveState, t: &Tutor, c: &Cond) -> bool {
    match (&c.value, live_number(app, t, c.var), live_word(app, c.var)) {
        (CondValue::Num(want), Some(n), _) => c.op.num(n, *want),
        (CondValue::Word(want), _, Some(w)) => match c.op {
            Op::Eq => &w == want,
            Op::Ne => &w != want,
            _ => false,
        },
        _ => false,
    }
}

/// A numeric check variable's value in the live app (`None` for word-valued ones).
fn live_number(app: &LiveState, t: &Tutor, var: Var) -> Option<f64> {
    let r = app.report;
    let n = match var {
        Var::Steps => r.map_or(0, |r| r.iteration).saturating_sub(t.iter_at_open),
        Var::DecodeSteps => t.decode_seen,
        Var::Generated => r.map_or(0, |r| r.pieces.len().saturating_sub(r.prompt_len)),
        // The run on screen's copies so far, which its pane lists: a copy made while an
        // earlier step of the same run was open is still there to read.
        Var::Copies => r
            .and_then(|r| r.serve.as_ref())
            .map_or(0, |s| s.copies_total),
        Var::SinkTokens => r.and_then(|r| r.sink.as_ref()).map_or(0, |s| s.pos),
        Var::Key(k) if KEYS[k].numeric() => (KEYS[k].live?)(app),
        Var::Key(_) | Var::Finished | Var::PastCrossover => return None,
    };
    Some(n as f64)
}

/// A word-valued check variable's value in the live app, as lessons write it (`None`
/// for numeric ones).
fn live_word(app: &LiveState, var: Var) -> Option<String> {
    let yes_no = |b: bool| ["false", "true"][usize::from(b)].to_string();
    match var {
        Var::Finished => Some(yes_no(app.report.is_some_and(|r| r.finished))),
        Var::PastCrossover => Some(yes_no(
            app.report
                .is_some_and(crate::views::traffic::batch_past_crossover),
        )),
        Var::Key(k) if !KEYS[k].numeric() => {
            let v = (KEYS[k].live?)(app);
            KEYS[k].words().into_iter().nth(v)
        }
        _ => None,
    }
}

impl Tutor {
    /// Whether the current step's task holds in `app` (a step without a task counts as done).
    pub fn task_done(&self, app: &LiveState) -> bool {
        let Some(s) = self.step() else {
            return false;
        };
        match &s.task {
            Some(task) => task.check.iter().all(|c| holds(app, self, c)),
            None => true,
        }
    }

    /// Records a finished step in the progress file, once: its task holds (if it has one)
    /// and every question is settled (answered right, or a whole run predicted). A step with neither is done once shown, so
    /// the last step of a lesson counts without pressing `n` past it.
    pub fn note_progress(&mut self, app: &LiveState) {
        let answered = (0..self.answers.len()).all(|i| self.settled(i));
        if !(self.task_done(app) && answered) {
            return;
        }
        let (id, s) = (self.current().map(|l| l.id().to_string()), self.step);
        if let Some(id) = id {
            let p = self.progress.of(&id);
            if !p.done_steps.contains(&s) {
                p.mark_done(s);
                self.save();
            }
        }
    }
}

impl Tutor {
    /// The user pressed digit `d` (1-based): answers the open question. A prediction also
    /// asks for the next iteration, which grades it.
    pub fn answer(&mut self, app: &LiveState, d: usize) -> Reply {
        if self.pending.is_some() {
            return Reply::status("waiting for the iteration that grades your prediction");
        }
        let Some(qi) = self.open_question() else {
            return Reply::default();
        };
        let Some(q) = self.step().map(|s| s.questions[qi].clone()) else {
            return Reply::default();
        };
        let choice = d.saturating_sub(1);
        match &q.kind {
            QuestionKind::Choice(choices) => {
                if let Some(c) = choices.get(choice) {
                    let a = Answer {
                        choice,
                        right: c.right,
                        why: c.why.clone(),
                    };
                    self.record(app, qi, a);
                }
                Reply::default()
            }
            QuestionKind::Predict(kind) => {
                let Some(live) = super::predict::live_choices(app, *kind) else {
                    let ran = app.report.is_some() && !app.prompt_queued;
                    return Reply::status(super::predict::unavailable(*kind, ran));
                };
                if choice >= live.values.len() {
                    return Reply::default();
                }
                self.pending = Some(Pending {
                    question: qi,
                    choice,
                    kind: *kind,
                    subject: live.subject,
                    before: live.before.clone(),
                    shown: live,
                });
                // The answer sets the toggle the question was about, or just runs the
                // next iteration; the report that follows grades it.
                let (settings, step) = super::predict::action(*kind, app);
                Reply {
                    settings,
                    step,
                    ..Reply::default()
                }
            }
        }
    }

    fn record(&mut self, app: &LiveState, qi: usize, a: Answer) {
        self.reveal = Some(qi);
        let key = format!("{}.{}", self.step, qi);
        if let Some(id) = self.current().map(|l| l.id().to_string()) {
            let p = self.progress.of(&id);
            let list = if a.right { &mut p.right } else { &mut p.wrong };
            if !list.contains(&key) {
                list.push(key);
            }
        }
        if qi < self.answers.len() {
            self.answers[qi] = Some(a);
        }
        self.save();
        self.note_progress(app);
    }
}

impl Tutor {
    /// Counts what report `new` did: a decode step of the live request (not a finished
    /// request's repeated report). A recompute under new settings is a prefill, and the
    /// steps before it ran under the old settings: the count starts again.
    pub fn observe(&mut self, new: &StepReport) {
        if new.recomputed {
            self.decode_seen = 0;
        } else if new.info.step > 0 && !new.repeat {
            self.decode_seen += 1;
        }
    }
}

/// Grades a pending prediction about the attached server against its newest poll.
pub fn grade_server(t: &mut Tutor, app: &LiveState) {
    let Some(server) = app.server else {
        return;
    };
    let Some(p) = t.pending.take_if(|p| p.kind.about_server()) else {
        return;
    };
    match super::server_predict::outcome(&p, server) {
        Some((right, why)) => {
            let answer = Answer {
                choice: p.choice,
                right,
                why,
            };
            t.record(app, p.question, answer);
        }
        None => t.pending = Some(p),
    }
}

/// Grades a pending prediction against the iteration that just ran.
pub fn grade(t: &mut Tutor, app: &LiveState, new: &StepReport) {
    let Some(p) = t.pending.take() else {
        return;
    };
    // Graded against the choices as they were shown, not as the state now offers them.
    let live = p.shown.clone();
    let Some((right, why)) = super::predict::outcome(&p, &live, app, new) else {
        // Not yet: the event it is about has not happened; the next report may show it.
        t.pending = Some(p);
        return;
    };
    t.record(
        app,
        p.question,
        Answer {
            choice: p.choice,
            right,
            why,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> LiveState<'static> {
        LiveState {
            report: None,
            settings: Settings::default(),
            layer: 0,
            head: 0,
            focus: Pane::Attention,
            show_scores: false,
            prompt_queued: false,
            past: &NO_PAST,
            server: None,
        }
    }

    static NO_PAST: std::collections::VecDeque<Box<crate::report::StepReport>> =
        std::collections::VecDeque::new();

    /// A live state set as `asked` says: its settings, and its screen settings where
    /// `LiveState` holds them.
    fn as_asked(asked: crate::lesson::keys::Asked) -> LiveState<'static> {
        let mut app = LiveState {
            settings: asked.settings,
            ..base()
        };
        for v in asked.screen {
            match v {
                Setting::Focus(p) => app.focus = p,
                Setting::Values(scores) => app.show_scores = scores,
                Setting::Layer(l) => app.layer = l,
                Setting::Head(h) => app.head = h,
                Setting::Zoom(_) => {}
            }
        }
        app
    }

    #[test]
    fn a_word_check_holds_exactly_when_the_app_has_that_setting() {
        let t = Tutor::new(Vec::new(), 0, Progress::default(), false);
        let mut checked = 0;
        for (k, key) in KEYS.iter().enumerate() {
            if key.live.is_none() || key.numeric() {
                continue;
            }
            let words = key.words();
            for (v, set) in words.iter().enumerate() {
                // The app as a step naming `key=set` leaves it.
                let mut step = StepSettings::default();
                step.put(k, v);
                let app = as_asked(step.apply(Settings::default()));
                for w in &words {
                    let c = Cond {
                        var: Var::Key(k),
                        op: Op::Eq,
                        value: CondValue::Word(w.clone()),
                    };
                    assert_eq!(
                        holds(&app, &t, &c),
                        w == set,
                        "{} == {w} with the app at {set}",
                        key.name
                    );
                    checked += 1;
                }
            }
        }
        // Every word-valued setting took part: a pane, layouts, caches, kernels and more.
        assert!(checked > 100, "{checked}");
    }

    #[test]
    fn a_number_check_compares_the_app_s_number_and_never_a_word() {
        let t = Tutor::new(Vec::new(), 0, Progress::default(), false);
        let app = LiveState {
            layer: 5,
            head: 2,
            ..base()
        };
        let c = |var, op, value| Cond { var, op, value };
        let num = CondValue::Num;
        let var = |name| Var::named(name).unwrap();
        assert!(holds(&app, &t, &c(var("layer"), Op::Eq, num(5.0))));
        assert!(!holds(&app, &t, &c(var("layer"), Op::Gt, num(5.0))));
        assert!(holds(&app, &t, &c(var("head"), Op::Lt, num(3.0))));
        assert!(!holds(&app, &t, &c(var("head"), Op::Ne, num(2.0))));
        // No iteration has run yet.
        assert!(holds(&app, &t, &c(Var::Steps, Op::Ge, num(0.0))));
        assert!(!holds(&app, &t, &c(Var::Steps, Op::Ge, num(1.0))));
        // A word where a number belongs, and a number where a word does, hold nowhere.
        let word = CondValue::Word("5".into());
        assert!(!holds(&app, &t, &c(var("layer"), Op::Eq, word)));
        assert!(!holds(&app, &t, &c(var("cache"), Op::Eq, num(0.0))));
        assert!(!holds(&app, &t, &c(var("cache"), Op::Ne, num(0.0))));
    }
}
