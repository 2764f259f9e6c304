//! App state and what each action does to it. Drawing reads this state; nothing here
//! runs model code — changes that need the model become [`Command`]s for the worker.

use super::effect::{FileWrite, Written};
use super::frames::Frames;
use super::screen_state::ScreenState;
use super::worker_state::WorkerState;
use crate::lesson::tutor::{Reply, Tutor};
use crate::model::sampler::{TEMPERATURES, TOP_PS};
use crate::model::RunOptions;
use crate::report::StepReport;
use crate::settings::{next_layout, other_kernel, Settings, Watch};
use crate::worker::{Command, Event};

/// Everything the user can ask for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    Step,
    ToggleRun,
    Faster,
    Slower,
    CycleLayout,
    ToggleKernel,
    /// What the KV cache stores each number as: f32 → f16 → int8.
    CycleKvElem,
    CycleWeights,
    ToggleCache,
    TogglePolicy,
    StartInput,
    LayerUp,
    LayerDown,
    HeadLeft,
    HeadRight,
    SelectHead(usize),
    ToggleValues,
    ScrollBack,
    ScrollForward,
    FocusNext,
    FocusPrev,
    ToggleHelp,
    CycleCompare,
    /// Lessons: next / previous step, the lesson list, an answer (1-based), Enter.
    NextStep,
    PrevStep,
    ToggleLessons,
    Answer(usize),
    Confirm,
    /// History: one iteration back / forward (pauses the run).
    ScrubBack,
    ScrubForward,
    /// Write the focused pane as SVG and PNG.
    Export,
    /// The "what does this token look at" view in place of the heatmap.
    ToggleLooksAt,
    /// The attention-sink experiment on / off.
    ToggleSink,
    /// The memory-traffic pane in the forward pane's place, and back.
    ToggleTraffic,
    /// The glossary overlay.
    ToggleGlossary,
    /// The logit lens in the attention pane's place, and back.
    ToggleLens,
    /// The next request whose block table the serving pane shows.
    NextRequest,
    /// The focused pane takes the body (the others shrink to one line), and back.
    ToggleZoom,
    /// Focus a pane and give it the body (a double click on its title), or give the
    /// body back if it has it already.
    ZoomPane(Pane),
    /// The serving workload: chat prompts ↔ the long story.
    ToggleWorkload,
    /// The serving run's prompts: whole ↔ in chunks (chunked prefill).
    ToggleChunked,
    /// The live request's KV cache on ↔ off (recompute the sequence every step).
    ToggleKvCache,
    /// The live request's tokens under another head layout beside it: off → the next
    /// layout that is not the current one → … → off.
    CycleBeside,
    /// The live request's sampler: the next temperature, the next top-p.
    CycleTemperature,
    CycleTopP,
    /// Scroll the lesson text (mouse wheel), lines.
    ScrollLesson(i16),
    /// The new-prompt line: a character, Backspace, Enter, Esc.
    Type(char),
    Backspace,
    Submit,
    Cancel,
    /// A lesson step's view setting, applied as if the user had chosen it.
    Set(Setting),
    /// A lesson step's settings, applied as if the user had chosen them (what the
    /// screen watches stays as the screen has it).
    Apply(Settings),
    Quit,
}

/// Lesson actions: with no lesson open they only say how to open one.
fn is_lesson_action(a: Action) -> bool {
    matches!(
        a,
        Action::NextStep | Action::PrevStep | Action::ToggleLessons | Action::Answer(_)
    )
}

/// Actions whose effect needs the model (or the worker's workload): a replay refuses them.
fn needs_model(a: Action) -> bool {
    matches!(
        a,
        Action::CycleLayout
            | Action::ToggleKernel
            | Action::CycleKvElem
            | Action::CycleWeights
            | Action::ToggleCache
            | Action::TogglePolicy
            | Action::CycleCompare
            | Action::StartInput
            | Action::ToggleSink
            | Action::ToggleWorkload
            | Action::ToggleChunked
            | Action::CycleTemperature
            | Action::CycleTopP
            | Action::ToggleKvCache
            | Action::CycleBeside
            | Action::Apply(_)
    )
}

pub use super::frames::{LayerHistory, HISTORY_BYTES, MAX_PAST_BYTES, TIMELINE};
pub use crate::lesson::live::{LiveState, Pane, Setting};
pub use crate::settings::Compare;

/// Most space presses kept while an iteration runs.
pub const MAX_QUEUED_STEPS: usize = 64;

/// Run speeds, iterations per second (`0` = as fast as the model goes).
pub const SPEEDS: [f64; 6] = [1.0, 2.0, 5.0, 10.0, 30.0, 0.0];

/// The app: what the user asked for, how the screen shows it, what it knows of the
/// worker, the frames it draws, and the lesson, the status line and the prompt being typed.
pub struct App {
    /// What the user asked for; each report says what the worker ran under.
    pub settings: Settings,
    pub screen: ScreenState,
    pub worker: WorkerState,
    pub frames: Frames,
    pub status: String,
    /// The new prompt being typed.
    pub input: Option<String>,
    /// The open lesson, when the app runs one.
    pub tutor: Option<Tutor>,
    /// The real server attached beside our engine (`inferlab attach URL`), as of its
    /// newest poll.
    pub attached: Option<crate::ui::attach::AttachView>,
    /// File writes asked for and not yet carried out (`ui::perform_writes` does them).
    writes: Vec<FileWrite>,
    pub quit: bool,
}

impl App {
    /// A fresh app waiting for the worker.
    pub fn new(run: RunOptions) -> Self {
        Self {
            settings: Settings {
                run,
                ..Settings::default()
            },
            screen: ScreenState::default(),
            worker: WorkerState::default(),
            frames: Frames::default(),
            status: "starting".into(),
            input: None,
            tutor: None,
            attached: None,
            writes: Vec::new(),
            quit: false,
        }
    }

    /// Attaches a server: its pane takes the attention place and the focus.
    pub fn attach(&mut self, view: crate::ui::attach::AttachView) {
        self.attached = Some(view);
        self.screen.attached = true;
        self.screen.focus_on(Pane::Server);
    }

    /// Lets the server go: the attention place is the heatmap's again.
    pub fn detach(&mut self) {
        self.attached = None;
        self.screen.attached = false;
        if self.screen.focus == Pane::Server {
            self.screen.focus_on(Pane::Attention);
        }
    }

    /// What the open lesson step's text points at (its `shows:`): the panes keep the rows
    /// that hold these when they are short of room.
    pub fn points_at(&self) -> &[String] {
        self.tutor
            .as_ref()
            .and_then(|t| t.step())
            .map_or(&[], |s| s.shows.as_slice())
    }

    /// The report on screen (the newest, or the one scrubbed to).
    pub fn report(&self) -> Option<&StepReport> {
        self.frames.report()
    }

    /// What lesson text's live figures are read from.
    pub fn figure_sources(&self) -> crate::lesson::figures::Sources<'_> {
        crate::lesson::figures::Sources {
            report: self.report(),
            past: self.frames.past(),
            machine: self.worker.machine.as_ref(),
            serving: self.settings.serving,
            scored: &self.worker.scored,
        }
    }

    /// The app's state as the lessons and predictions read it.
    pub fn live(&self) -> LiveState<'_> {
        LiveState {
            report: self.report(),
            settings: self.settings,
            layer: self.screen.layer,
            head: self.screen.head,
            focus: self.screen.focus,
            show_scores: self.screen.show_scores,
            prompt_queued: self.worker.prompt_queued,
            past: self.frames.past(),
            server: self.attached.as_ref().map(|a| &a.snap),
        }
    }

    /// A new poll of the attached server: it may grade the prediction about it.
    pub fn server_polled(&mut self) {
        if let Some(mut t) = self.tutor.take() {
            crate::lesson::tutor::grade_server(&mut t, &self.live());
            self.tutor = Some(t);
            self.note_progress();
        }
    }

    /// Whether the open lesson step's task holds now (false with no lesson open).
    pub fn task_done(&self) -> bool {
        self.tutor
            .as_ref()
            .is_some_and(|t| t.task_done(&self.live()))
    }

    /// Layers and heads of the model once a report has arrived (one of each before).
    pub fn dims(&self) -> (usize, usize) {
        self.report()
            .map(|r| (r.cfg.n_layer, r.cfg.n_head))
            .unwrap_or((1, 1))
    }

    /// Applies an action; returns the commands the worker must carry out (none when the
    /// action only changes what is shown). A lesson step whose task the action completes
    /// (a view setting such as the layer or the values shown) is recorded at once.
    pub fn update(&mut self, a: Action) -> Vec<Command> {
        let cmds = self.apply(a);
        self.note_progress();
        cmds
    }

    fn apply(&mut self, a: Action) -> Vec<Command> {
        if self.overlay_action(a) {
            return Vec::new();
        }
        if self.input.is_some() {
            return self.typing(a);
        }
        if self.tutor.is_some() || is_lesson_action(a) {
            if let Some(cmds) = self.lesson_action(a) {
                return cmds;
            }
        }
        if self.worker.replaying && needs_model(a) {
            self.status = match a {
                Action::ToggleSink => "a replay shows the experiment only where it was recorded",
                _ => "a replay shows what was recorded: settings cannot change (space steps, [ ] scrub)",
            }
            .into();
            return Vec::new();
        }
        // Anything that changes the live state first returns to it.
        if self.frames.cursor().is_some()
            && (needs_model(a) || matches!(a, Action::Step | Action::ToggleRun))
        {
            self.frames.resume_live();
            self.status = "live".into();
        }
        match a {
            Action::Quit => {
                self.quit = true;
                vec![Command::Quit]
            }
            Action::Cancel => {
                self.status = "nothing to close: q quits".into();
                Vec::new()
            }
            Action::Step => self.step_pressed(),
            _ if needs_model(a) && a != Action::StartInput => match self.asked_settings(a) {
                Some(new) => self.change_settings(new),
                None => Vec::new(),
            },
            _ => {
                self.view_action(a);
                Vec::new()
            }
        }
    }

    /// A digit: answers the open question. The question is kept as the learner read it
    /// when the answer was taken: its figures must not move under the answer (a
    /// prediction's own iteration changes them).
    fn answer(&mut self, d: usize) -> Vec<Command> {
        let asked = self.tutor.as_ref().and_then(|t| {
            let qi = t.open_question()?;
            Some((qi, t.step()?.questions.get(qi)?.text.clone()))
        });
        let filled = asked.map(|(qi, text)| {
            (
                qi,
                crate::lesson::figures::fill(self.figure_sources(), &text),
            )
        });
        let before = self
            .tutor
            .as_ref()
            .map(|t| (t.answers.clone(), t.pending.clone()));
        let out = self.with_tutor(|t, app| t.answer(app, d));
        // Kept only when the answer was taken (recorded, or waiting to be graded).
        if let (Some((qi, text)), Some(t)) = (filled, self.tutor.as_mut()) {
            if before != Some((t.answers.clone(), t.pending.clone())) {
                t.asked.insert(qi, text);
            }
        }
        out
    }

    /// Help and the glossary: `?` and `G` open them; while one is open, the glossary
    /// scrolls with j k (and J K, the wheel) and any other key only closes it. True when
    /// the action was theirs.
    fn overlay_action(&mut self, a: Action) -> bool {
        let v = &mut self.screen;
        if a == Action::ToggleHelp {
            v.help = !v.help;
            return true;
        }
        if v.glossary {
            let step = match a {
                Action::LayerDown => 1,
                Action::LayerUp => -1,
                Action::ScrollLesson(d) => d as isize,
                _ => 0,
            };
            if step != 0 {
                let last = super::panes::glossary::max_scroll();
                v.glossary_scroll = v.glossary_scroll.saturating_add_signed(step).min(last);
                return true;
            }
        }
        // Esc and q included: they close the overlay, not the app.
        if v.help || v.glossary {
            (v.help, v.glossary) = (false, false);
            return true;
        }
        if a == Action::ToggleGlossary && self.input.is_none() {
            (v.glossary, v.glossary_scroll) = (true, 0);
            return true;
        }
        false
    }

    /// Space: one iteration, or one more after the running one. A press while an
    /// iteration runs is kept, not dropped: a learner counting thirty presses gets thirty.
    fn step_pressed(&mut self) -> Vec<Command> {
        let e = &mut self.worker;
        e.running = false;
        if e.in_flight && e.ready && e.fatal.is_none() {
            e.steps_queued = (e.steps_queued + 1).min(MAX_QUEUED_STEPS);
            return Vec::new();
        }
        self.request_step().into_iter().collect()
    }

    /// Keys while a new prompt is typed: text, except Enter, Esc and Backspace.
    fn typing(&mut self, a: Action) -> Vec<Command> {
        let Some(input) = self.input.as_mut() else {
            return Vec::new();
        };
        match a {
            Action::Type(c) => input.push(c),
            Action::Backspace => {
                input.pop();
            }
            Action::Cancel => self.input = None,
            Action::Submit => {
                let p = std::mem::take(input);
                self.input = None;
                if p.trim().is_empty() {
                    self.status = "empty prompt ignored".into();
                } else {
                    self.worker.prompt_queued = true;
                    self.worker.steps_queued = 0;
                    return vec![Command::Prompt(p)];
                }
            }
            Action::Quit => {
                self.quit = true;
                return vec![Command::Quit];
            }
            _ => {}
        }
        Vec::new()
    }

    /// Lesson keys and the lesson list; `None` when the action is not the lesson's.
    fn lesson_action(&mut self, a: Action) -> Option<Vec<Command>> {
        let Some(t) = self.tutor.as_mut() else {
            self.status =
                "no lesson open: run `inferlab lesson N` (list: `inferlab lessons`)".into();
            return Some(Vec::new());
        };
        // The lesson list takes the arrow keys, Enter and Esc while it is open.
        if t.list_open {
            match a {
                Action::LayerDown => {
                    t.list_sel = (t.list_sel + 1).min(t.lessons.len().saturating_sub(1))
                }
                Action::LayerUp => t.list_sel = t.list_sel.saturating_sub(1),
                Action::ToggleLessons | Action::Quit | Action::Cancel => t.list_open = false,
                Action::Confirm => {
                    t.list_open = false;
                    let l = t.list_sel;
                    let step = t
                        .lessons
                        .get(l)
                        .and_then(|x| t.progress.lessons.get(x.id()))
                        .map_or(0, |p| p.step);
                    return Some(self.with_tutor(|t, app| t.goto(app, l, step)));
                }
                _ => return None,
            }
            return Some(Vec::new());
        }
        match a {
            Action::NextStep => Some(self.with_tutor(|t, app| t.next(app))),
            Action::PrevStep => Some(self.with_tutor(|t, app| t.prev(app))),
            Action::Answer(d) => Some(self.answer(d)),
            Action::ScrollLesson(d) => {
                t.scroll = t.scroll.saturating_add_signed(d);
                Some(Vec::new())
            }
            Action::ToggleLessons => {
                t.list_open = true;
                t.list_sel = t.lesson;
                Some(Vec::new())
            }
            _ => None,
        }
    }

    /// The settings an action asks for, if it is about them.
    fn asked_settings(&self, a: Action) -> Option<Settings> {
        let mut s = self.settings;
        let (serving, request) = (&mut s.serving, &mut s.request);
        let next = |list: &[f32], now: f32| {
            let i = list.iter().position(|&x| (x - now).abs() < 1e-6);
            list[i.map_or(0, |i| (i + 1) % list.len())]
        };
        match a {
            Action::CycleLayout => s.run.layout = next_layout(s.run.layout),
            Action::ToggleKernel => s.run.kernel = other_kernel(s.run.kernel),
            Action::CycleKvElem => s.run.kv_elem = s.run.kv_elem.next(),
            Action::CycleWeights => s.weights = s.weights.next_live(),
            Action::ToggleCache => serving.cache = serving.cache.other(),
            Action::TogglePolicy => serving.policy = serving.policy.other(),
            Action::CycleCompare => serving.compare = serving.compare.next(),
            Action::ToggleWorkload => serving.workload = serving.workload.other(),
            Action::ToggleChunked => serving.chunked = !serving.chunked,
            Action::ToggleSink => s.sink = !s.sink,
            Action::ToggleKvCache => request.kv_cache = !request.kv_cache,
            Action::CycleBeside => request.beside = self.settings.next_beside(),
            Action::CycleTemperature => {
                request.sampler.temperature = next(&TEMPERATURES, request.sampler.temperature)
            }
            Action::CycleTopP => request.sampler.top_p = next(&TOP_PS, request.sampler.top_p),
            Action::Apply(new) => {
                s = Settings {
                    watch: s.watch,
                    ..new
                }
            }
            _ => return None,
        }
        Some(s.settled())
    }

    /// Takes new settings: what the app keeps of the old ones' output goes (a new layout
    /// starts the heatmap rows again, a restarted workload its timelines), and one
    /// command tells the worker.
    fn change_settings(&mut self, new: Settings) -> Vec<Command> {
        let old = std::mem::replace(&mut self.settings, new);
        if new == old {
            return Vec::new();
        }
        if new.run != old.run {
            self.worker.steps_queued = 0;
            self.frames.clear_rows();
        }
        if new.run != old.run || new.serving != old.serving {
            self.frames.clear_timelines();
        }
        self.worker.applies_pending += 1;
        vec![Command::Apply(new)]
    }

    /// The command that tells the worker what the screen now watches (the layer whose
    /// captures long contexts keep, whether the lens is shown), when that changed.
    pub fn watch_command(&mut self) -> Option<Command> {
        let watch = Watch {
            layer: self.screen.layer,
            lens: self.screen.lens_on_screen(),
        };
        if watch == self.settings.watch || self.worker.replaying {
            return None;
        }
        self.settings.watch = watch;
        self.worker.applies_pending += 1;
        Some(Command::Apply(self.settings))
    }

    /// What is shown and how: layer, head, values, scrolling, focus, running, speed.
    fn view_action(&mut self, a: Action) {
        if self.navigate(a) {
            return;
        }
        let lesson = self.tutor.is_some();
        let v = &mut self.screen;
        match a {
            Action::ToggleRun => {
                self.worker.running = !self.worker.running;
                self.status = if self.worker.running {
                    "running"
                } else {
                    "paused"
                }
                .into();
            }
            Action::Faster => self.worker.speed = (self.worker.speed + 1).min(SPEEDS.len() - 1),
            Action::Slower => self.worker.speed = self.worker.speed.saturating_sub(1),
            Action::StartInput => {
                self.worker.running = false;
                self.input = Some(String::new());
            }
            Action::FocusNext => v.focus_by(1),
            Action::FocusPrev => v.focus_by(Pane::ALL.len() - 1),
            Action::Set(Setting::Focus(p)) => v.focus_on(p),
            Action::ToggleZoom => v.toggle_zoom(lesson),
            Action::Set(Setting::Zoom(z)) => (v.zoomed, v.pane_full) = (z, false),
            Action::ZoomPane(p) => {
                v.zoomed = !(v.zoomed && v.focus == p);
                v.focus_on(p);
            }
            Action::NextRequest => self.select_next_request(),
            Action::ToggleLens => v.focus_on(if v.shows(Pane::Lens) {
                Pane::Attention
            } else {
                Pane::Lens
            }),
            Action::ToggleTraffic => v.focus_on(if v.shows(Pane::Traffic) {
                Pane::Forward
            } else {
                Pane::Traffic
            }),
            Action::ToggleLooksAt => {
                v.looks_at = !v.looks_at;
                // Through `focus_on`: with the lens in the attention pane's place, `w`
                // brings the attention pane back rather than change something hidden.
                v.focus_on(Pane::Attention);
            }
            Action::ScrubBack | Action::ScrubForward => {
                self.worker.steps_queued = 0;
                self.worker.running = false;
                let back = a == Action::ScrubBack;
                self.status = self.frames.scrub(if back { -1 } else { 1 });
            }
            Action::Export => self.export_focused(),
            _ => {}
        }
    }

    /// The heatmap's layer, head, values and scroll; true when the action was one of them.
    /// Picking a layer or head ends opening on the sharpest head.
    fn navigate(&mut self, a: Action) -> bool {
        let (n_layer, n_head) = self.dims();
        // Before the first report the model's shape is unknown: the lesson checked it.
        let shaped = self.report().is_some();
        let rows = &self.frames.shown().history;
        let v = &mut self.screen;
        match a {
            Action::LayerUp => v.layer = (v.layer + n_layer - 1) % n_layer,
            Action::LayerDown => v.layer = (v.layer + 1) % n_layer,
            Action::HeadLeft => v.head = (v.head + n_head - 1) % n_head,
            Action::HeadRight => v.head = (v.head + 1) % n_head,
            Action::SelectHead(h) => v.head = h.min(n_head - 1),
            Action::Set(Setting::Layer(l)) if !shaped => v.layer = l,
            Action::Set(Setting::Head(h)) if !shaped => v.head = h,
            Action::Set(Setting::Layer(l)) => v.layer = l.min(n_layer - 1),
            Action::Set(Setting::Head(h)) => v.head = h.min(n_head - 1),
            Action::ToggleValues => v.show_scores = !v.show_scores,
            Action::Set(Setting::Values(scores)) => v.show_scores = scores,
            Action::ScrollBack => {
                let n = rows.get(v.layer).map_or(0, |h| h.weights.len());
                v.scroll = (v.scroll + 8).min(n.saturating_sub(1));
            }
            Action::ScrollForward => v.scroll = v.scroll.saturating_sub(8),
            _ => return false,
        }
        if !matches!(
            a,
            Action::ToggleValues
                | Action::Set(Setting::Values(_))
                | Action::ScrollBack
                | Action::ScrollForward
        ) {
            v.auto_head = false;
        }
        true
    }

    /// Selects the next request of the serving batch by id (the first after the last),
    /// and shows the serving pane.
    fn select_next_request(&mut self) {
        let ids: Vec<u64> = self
            .report()
            .and_then(|r| r.serve.as_ref())
            .map(|s| s.step.block_tables.iter().map(|t| t.0).collect())
            .unwrap_or_default();
        let next = match self.screen.selected_req {
            Some(cur) => ids.iter().copied().find(|&i| i > cur),
            None => None,
        };
        self.screen.selected_req = next.or_else(|| ids.first().copied());
        self.screen.focus_on(Pane::Serving);
    }

    /// The state the pictures are drawn from.
    pub fn scene(&self) -> crate::export::Scene<'_> {
        let shown = self.frames.shown();
        let hist = shown.history.get(self.screen.layer);
        let rows = hist.map_or(&[][..], |h| {
            if self.screen.show_scores {
                &h.scores[..]
            } else {
                &h.weights[..]
            }
        });
        crate::export::Scene {
            report: self.report(),
            attention: rows,
            layer: self.screen.layer,
            head: self.screen.head,
            show_scores: self.screen.show_scores,
            timeline: &shown.timeline,
            settings: self.settings,
            past: self.frames.past(),
            machine: self.worker.machine.as_ref(),
        }
    }

    /// Asks for the focused pane's picture (SVG and PNG); the status says where once it
    /// is written.
    fn export_focused(&mut self) {
        self.writes.push(FileWrite::ExportFocused);
    }

    /// The file writes asked for since the last call, the lesson progress's included.
    pub fn take_writes(&mut self) -> Vec<FileWrite> {
        if let Some(p) = self.tutor.as_mut().and_then(Tutor::take_unsaved) {
            self.writes.push(FileWrite::SaveProgress(p));
        }
        std::mem::take(&mut self.writes)
    }

    /// Says how a write went: where a picture went, or why a file was not written.
    pub fn written(&mut self, w: Written) {
        match w {
            Written::Exported(pane, Ok(svg)) => {
                self.status = format!("exported {} → {} and .png", pane.name(), svg.display())
            }
            Written::Exported(_, Err(e)) => self.status = format!("export failed: {e}"),
            Written::NoPicture => {
                self.status =
                    "the server's pane has no picture: e exports this app's own panes".into()
            }
            Written::ProgressSaved(r) => {
                if let Some(t) = self.tutor.as_mut() {
                    t.saved(r)
                }
            }
        }
    }

    /// Opens the app on a lesson and applies its current step; returns the commands.
    pub fn open_lesson(&mut self, tutor: Tutor) -> Vec<Command> {
        let (l, s) = (tutor.lesson, tutor.step);
        self.tutor = Some(tutor);
        // A lesson gives the pane each step is about the room; `z` gives it the text's
        // room too, then brings the grid back (as a step's `view=grid` does).
        self.screen.zoomed = true;
        self.screen.pane_full = false;
        self.with_tutor(|t, app| t.goto(app, l, s))
    }

    /// Runs the lesson runtime on its own state with a read-only view of the app, then
    /// carries out its reply: its settings through the same actions keys give, its prompt,
    /// an iteration, its status line. Progress is noted once the settings are in place.
    fn with_tutor(&mut self, f: impl FnOnce(&mut Tutor, &LiveState) -> Reply) -> Vec<Command> {
        let Some(mut t) = self.tutor.take() else {
            return Vec::new();
        };
        let reply = f(&mut t, &self.live());
        self.tutor = Some(t);
        let mut out: Vec<Command> = reply
            .screen
            .into_iter()
            .flat_map(|s| self.update(Action::Set(s)))
            .collect();
        if let Some(s) = reply.settings {
            out.extend(self.update(Action::Apply(s)));
        }
        if let Some(p) = reply.prompt {
            self.worker.running = false;
            self.worker.prompt_queued = true;
            self.worker.steps_queued = 0;
            out.push(Command::Prompt(p));
        }
        if reply.step {
            match self.request_step() {
                Some(c) => out.push(c),
                // One is running: the answer's own step follows it.
                None if self.worker.in_flight => self.worker.steps_queued += 1,
                None => {}
            }
        }
        if let Some(s) = reply.status {
            self.status = s;
        }
        self.note_progress();
        out
    }

    /// Lets the lesson runtime record a finished step.
    fn note_progress(&mut self) {
        if let Some(mut t) = self.tutor.take() {
            t.note_progress(&self.live());
            self.tutor = Some(t);
        }
    }

    /// Whether the sink experiment's pane is on screen: while it runs, or in a replay of
    /// a session that ran it.
    pub fn shows_sink(&self) -> bool {
        self.settings.sink
            || (self.worker.replaying && self.report().is_some_and(|r| r.sink.is_some()))
    }

    /// A step command unless one is already running or the worker is not ready. A
    /// finished request does not stop it: the worker steps whatever still has work (a
    /// queued prompt, the serving workload, the sink experiment) and says when nothing does.
    pub fn request_step(&mut self) -> Option<Command> {
        if !self.worker.ready || self.worker.in_flight || self.worker.fatal.is_some() {
            return None;
        }
        self.worker.in_flight = true;
        Some(Command::Step)
    }

    /// Takes an event from the worker.
    pub fn on_event(&mut self, e: Event) {
        match e {
            Event::Status(s) => {
                self.status = s;
                self.worker.in_flight = false;
            }
            Event::Progress { done, total } => self.worker.loading = Some((done, total)),
            Event::Machine(m) => self.worker.machine = Some(m),
            Event::Scored(s) => {
                self.worker.scored.retain(|w| w.weights != s.weights);
                self.worker.scored.push(s);
            }
            Event::Ready { model } => {
                self.worker.ready = true;
                self.worker.loading = None;
                self.worker.model_name = model;
                self.status = "ready: press space to prefill the prompt".into();
            }
            // What the worker runs under now: what was asked, unless it failed (then the
            // keys and the lessons read what really runs). What the screen watches is the
            // screen's own.
            Event::Applied(s) => self.applied(s),
            // The layout beside stopped: only that changed (a change still on its way is
            // answered by its own `Applied`).
            Event::Settings(s) => self.settings.request.beside = s.request.beside,
            Event::Beside(v) => {
                if let Some(r) = self.frames.live_report_mut() {
                    r.beside = v;
                }
            }
            Event::Idle(s) => {
                self.status = s;
                self.worker.in_flight = false;
                self.worker.running = false;
                self.worker.steps_queued = 0;
            }
            Event::Died(e) => {
                self.worker.in_flight = false;
                self.worker.steps_queued = 0;
                self.worker.running = false;
                self.worker.fatal = Some(format!(
                    "the engine thread stopped ({e}). Nothing more can run; your lesson progress and any recording are saved."
                ));
            }
            Event::Error(e) => {
                self.worker.in_flight = false;
                self.worker.steps_queued = 0;
                // A refused prompt leaves the old request in place.
                self.worker.prompt_queued = false;
                self.worker.running = false;
                if self.worker.ready {
                    self.status = format!("error: {e}");
                } else {
                    self.worker.fatal = Some(e);
                }
            }
            Event::Report(r) => self.take_report(r),
        }
    }

    /// The answer to an `Apply`: the newest says what runs.
    fn applied(&mut self, s: Settings) {
        let e = &mut self.worker;
        e.applies_pending = e.applies_pending.saturating_sub(1);
        if e.applies_pending == 0 {
            self.adopt(s);
        }
    }

    /// Takes the settings the worker runs under as the app's (what the screen watches is
    /// the screen's own).
    fn adopt(&mut self, s: Settings) {
        self.settings = Settings {
            watch: self.settings.watch,
            ..s
        };
    }

    /// A new iteration: graded by the open lesson, kept, and shown.
    fn take_report(&mut self, r: Box<StepReport>) {
        self.worker.in_flight = false;
        if r.info.step == 0 && !r.recomputed && !r.repeat {
            self.worker.prompt_queued = false;
        }
        // A recording holds the layer that was on screen: follow it.
        let layer = self.screen.layer;
        if self.worker.replaying && !r.info.captures.iter().any(|c| c.layer == layer) {
            if let Some(c) = r.info.captures.first() {
                self.screen.layer = c.layer;
            }
        }
        self.frames.resume_live();
        if let Some(mut t) = self.tutor.take() {
            t.observe(&r);
            // Graded against the question as it stood: no report of the new iteration yet.
            let live = LiveState {
                report: None,
                ..self.live()
            };
            crate::lesson::tutor::grade(&mut t, &live, &r);
            self.tutor = Some(t);
        }
        self.status = report_status(&r);
        self.fit_view_to(&r.cfg);
        self.open_on_sharpest_head(&r);
        self.frames.push(r);
        self.note_progress();
    }

    /// A layer or head chosen before the model's shape was known (a lesson's `set:`)
    /// that this model lacks: the last one it has is shown, and the status says why.
    fn fit_view_to(&mut self, cfg: &crate::model::LlamaConfig) {
        let (layer, head) = (self.screen.layer, self.screen.head);
        self.screen.layer = layer.min(cfg.n_layer - 1);
        self.screen.head = head.min(cfg.n_head - 1);
        if (layer, head) != (self.screen.layer, self.screen.head) {
            self.status = format!(
                "layer {layer} / head {head} asked for, but this model has {} layers and {} heads: showing layer {} head {}",
                cfg.n_layer, cfg.n_head, self.screen.layer, self.screen.head
            );
        }
    }

    /// On the first prefill, shows the head whose attention is the sharpest away from the
    /// first token (see [`crate::views::sharpest`]) and says so.
    fn open_on_sharpest_head(&mut self, r: &StepReport) {
        if !self.screen.auto_head || self.tutor.is_some() || r.info.step != 0 {
            return;
        }
        self.screen.auto_head = false;
        if let Some((layer, head)) = crate::views::sharpest::sharpest_head(&r.info.captures) {
            (self.screen.layer, self.screen.head) = (layer, head);
            self.status = format!(
                "{} · showing layer {layer} head {head}, the sharpest pattern off token 0 (j k h l browse)",
                self.status
            );
        }
    }
}

/// The status line after a report: what the iteration did.
fn report_status(r: &StepReport) -> String {
    let what = if r.repeat {
        "request finished (a: new prompt) · serving and sink go on".to_string()
    } else if r.recomputed {
        format!(
            "recomputed {} token(s) under {} · {} KV · {} weights in {:.1} ms: the same next position",
            r.info.input_len,
            r.info.layout,
            r.settings.run.kv_elem,
            r.settings.weights.name().to_uppercase(),
            r.info.wall_ms
        )
    } else {
        // The model's own time: what looking inside cost (the panes' captures, the lens)
        // is left out, so a step's time compares with another's whatever the panes showed
        // (the traffic pane gives that cost).
        let looked = r.info.timing.observe_ms.max(0.0);
        format!(
            "{} · {} token(s) in {:.1} ms",
            if r.info.step == 0 {
                "prefill"
            } else {
                "decode"
            },
            r.info.input_len,
            (r.info.wall_ms - looked).max(0.0)
        )
    };
    format!("iteration {} · {what}", r.iteration)
}
