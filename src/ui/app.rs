//! App state and what each action does to it. Drawing reads this state; nothing here
//! runs model code — changes that need the model become [`Command`]s for the engine.

use super::tutor::{Reply, Tutor};
use crate::model::sampler::{TEMPERATURES, TOP_PS};
use crate::model::RunOptions;
use crate::serve::ReqPhase;
use crate::settings::{next_layout, other_kernel, Settings, Watch};
use crate::worker::{Command, Event, StepReport};
use std::collections::VecDeque;

/// Everything the user can ask for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    Step,
    ToggleRun,
    Faster,
    Slower,
    CycleLayout,
    ToggleKernel,
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

/// Actions whose effect needs the model (or the engine's workload): a replay refuses them.
fn needs_model(a: Action) -> bool {
    matches!(
        a,
        Action::CycleLayout
            | Action::ToggleKernel
            | Action::ToggleCache
            | Action::TogglePolicy
            | Action::CycleCompare
            | Action::StartInput
            | Action::ToggleSink
            | Action::ToggleWorkload
            | Action::CycleTemperature
            | Action::CycleTopP
            | Action::ToggleKvCache
            | Action::CycleBeside
            | Action::Apply(_)
    )
}

pub use super::live::{LiveState, Pane, Setting};
pub use crate::settings::Compare;

/// Most space presses kept while an iteration runs.
pub const MAX_QUEUED_STEPS: usize = 64;

/// Iterations of the batching timeline kept for drawing.
pub const TIMELINE: usize = 240;

/// Run speeds, iterations per second (`0` = as fast as the model goes).
pub const SPEEDS: [f64; 6] = [1.0, 2.0, 5.0, 10.0, 30.0, 0.0];

/// Attention rows of the current request for one layer: row `p` holds every head's
/// weights (or scores) of query position `p` over keys `0..=p`.
#[derive(Debug, Clone, Default)]
pub struct LayerHistory {
    /// `rows[p][h]` = weights of head `h` at query position `p`; empty for positions not
    /// captured (a long prompt keeps its newest rows) or dropped to bound memory.
    pub weights: Vec<Vec<Vec<f32>>>,
    pub scores: Vec<Vec<Vec<f32>>>,
    /// Bytes the kept rows hold, and the first position still kept.
    bytes: usize,
    kept_from: usize,
}

impl LayerHistory {
    /// Empties the oldest kept rows until at most `cap` bytes remain (the newest row stays).
    fn trim(&mut self, cap: usize) {
        while self.bytes > cap && self.kept_from + 1 < self.weights.len() {
            let p = self.kept_from;
            let row_bytes: usize = self.weights[p].iter().map(|r| 8 * r.len()).sum();
            self.bytes -= row_bytes;
            self.weights[p] = Vec::new();
            self.scores[p] = Vec::new();
            self.kept_from += 1;
        }
    }
}

/// Bytes of attention rows the heatmap history keeps, all layers together. A row of a
/// long context is large (9 heads × 8,000 keys × 2 floats is 576 KB), so the oldest rows
/// give way first.
pub const HISTORY_BYTES: usize = 128 << 20;

/// Retained past reports (for scrubbing), estimated from the captured floats.
pub const MAX_PAST_BYTES: usize = 128 << 20;

/// What the screen showed live, kept while the user scrubs through the past.
struct Stash {
    report: Option<Box<StepReport>>,
    history: Vec<LayerHistory>,
    timeline: VecDeque<Vec<(u64, ReqPhase)>>,
    timeline_b: VecDeque<Vec<(u64, ReqPhase)>>,
}

/// Rough bytes one report holds (its captures dominate).
fn report_bytes(r: &StepReport) -> usize {
    let floats: usize = r
        .info
        .captures
        .iter()
        .map(|c| {
            c.q.len() + c.k.len() + c.v.len() + c.scores.len() + c.weights.len() + c.head_out.len()
        })
        .sum();
    4 * floats + 4096
}

/// The app.
pub struct App {
    pub status: String,
    pub loading: Option<(u64, u64)>,
    pub model_name: String,
    pub ready: bool,
    pub fatal: Option<String>,
    /// A failure that stays in the header until the app exits, and is printed then (a
    /// recording that stopped on a full disk).
    pub alarm: Option<String>,
    pub report: Option<Box<StepReport>>,
    pub history: Vec<LayerHistory>,
    pub layer: usize,
    pub head: usize,
    pub show_scores: bool,
    /// Heatmap window: positions back from the newest (0 follows the newest).
    pub scroll: usize,
    /// Show the ranked list of what the bottom heatmap row attends to instead of the heatmap.
    pub looks_at: bool,
    /// The memory-traffic pane holds the forward pane's place.
    pub traffic_shown: bool,
    /// The logit lens holds the attention pane's place.
    pub lens_shown: bool,
    /// The serving request whose block table is shown and whose pages are marked.
    pub selected_req: Option<u64>,
    /// The focused pane has the body; the others are one-line summaries.
    pub zoomed: bool,
    /// This machine's measured limits, for the traffic pane (the engine measures them
    /// once, or reads them from `bench machine`'s cache).
    pub machine: Option<crate::machine::Machine>,
    /// The reports come from a recording, not the engine.
    pub replaying: bool,
    pub focus: Pane,
    pub help: bool,
    /// The glossary overlay is open, and its first entry shown (a short terminal scrolls).
    pub glossary: bool,
    pub glossary_scroll: usize,
    pub running: bool,
    pub speed: usize,
    pub in_flight: bool,
    /// Space presses that came while an iteration ran, run one after another.
    pub steps_queued: usize,
    pub input: Option<String>,
    /// What the user asked for; each report says what the worker ran under.
    pub settings: Settings,
    /// Per serving iteration: each request's phase (newest last).
    pub timeline: VecDeque<Vec<(u64, ReqPhase)>>,
    pub timeline_b: VecDeque<Vec<(u64, ReqPhase)>>,
    /// Every report of the session, oldest first, within [`MAX_PAST_BYTES`].
    pub past: VecDeque<Box<StepReport>>,
    past_bytes: usize,
    /// Reports dropped from the front of `past` to bound memory.
    pub dropped: usize,
    /// While scrubbing: the index into `past` on screen, and the live state to go back to.
    pub scrub: Option<usize>,
    stash: Option<Stash>,
    /// The open lesson, when the app runs one.
    pub tutor: Option<Tutor>,
    /// Opens the heatmap on the head the first prefill shows sharpest, until the user
    /// picks a layer or head (the live app, without a lesson: lessons name their head).
    pub auto_head: bool,
    /// A new prompt was sent and its prefill has not run yet.
    pub prompt_queued: bool,
    pub quit: bool,
}

impl App {
    /// A fresh app waiting for the engine.
    pub fn new(run: RunOptions) -> Self {
        Self {
            status: "starting".into(),
            loading: None,
            model_name: String::new(),
            ready: false,
            fatal: None,
            alarm: None,
            report: None,
            history: Vec::new(),
            layer: 0,
            head: 0,
            show_scores: false,
            scroll: 0,
            looks_at: false,
            traffic_shown: false,
            lens_shown: false,
            selected_req: None,
            zoomed: false,
            machine: None,
            replaying: false,
            focus: Pane::Attention,
            help: false,
            glossary: false,
            glossary_scroll: 0,
            running: false,
            speed: 2,
            in_flight: false,
            steps_queued: 0,
            input: None,
            settings: Settings {
                run,
                ..Settings::default()
            },
            timeline: VecDeque::new(),
            timeline_b: VecDeque::new(),
            past: VecDeque::new(),
            past_bytes: 0,
            dropped: 0,
            scrub: None,
            stash: None,
            tutor: None,
            auto_head: false,
            prompt_queued: false,
            quit: false,
        }
    }

    /// What lesson text's live figures are read from.
    pub fn figure_sources(&self) -> super::figures::Sources<'_> {
        super::figures::Sources {
            report: self.report.as_deref(),
            past: &self.past,
            machine: self.machine.as_ref(),
        }
    }

    /// The app's state as the lessons and predictions read it.
    pub fn live(&self) -> LiveState<'_> {
        LiveState {
            report: self.report.as_deref(),
            settings: self.settings,
            layer: self.layer,
            head: self.head,
            focus: self.focus,
            show_scores: self.show_scores,
            prompt_queued: self.prompt_queued,
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
        self.report
            .as_ref()
            .map(|r| (r.cfg.n_layer, r.cfg.n_head))
            .unwrap_or((1, 1))
    }

    /// Applies an action; returns the commands the engine must carry out (none when the
    /// action only changes what is shown). A lesson step whose task the action completes
    /// (a view setting such as the layer or the values shown) is recorded at once.
    pub fn update(&mut self, a: Action) -> Vec<Command> {
        let cmds = self.apply(a);
        self.note_progress();
        cmds
    }

    fn apply(&mut self, a: Action) -> Vec<Command> {
        if a == Action::ToggleHelp {
            self.help = !self.help;
            return Vec::new();
        }
        // The glossary scrolls with j k (and J K, the wheel) where it does not fit.
        if self.glossary {
            let step = match a {
                Action::LayerDown => 1,
                Action::LayerUp => -1,
                Action::ScrollLesson(d) => d as isize,
                _ => 0,
            };
            if step != 0 {
                let last = super::panes::glossary::entries().len().saturating_sub(1);
                self.glossary_scroll = self.glossary_scroll.saturating_add_signed(step).min(last);
                return Vec::new();
            }
        }
        // With help or the glossary open, any other key (Esc and q included) only closes it.
        if self.help || self.glossary {
            (self.help, self.glossary) = (false, false);
            return Vec::new();
        }
        if a == Action::ToggleGlossary && self.input.is_none() {
            self.glossary = true;
            self.glossary_scroll = 0;
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
        if self.replaying && needs_model(a) {
            self.status = match a {
                Action::ToggleSink => "a replay shows the experiment only where it was recorded",
                _ => "a replay shows what was recorded: settings cannot change (space steps, [ ] scrub)",
            }
            .into();
            return Vec::new();
        }
        // Anything that changes the live state first returns to it.
        if self.scrub.is_some() && (needs_model(a) || matches!(a, Action::Step | Action::ToggleRun))
        {
            self.resume_live();
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
            Action::Step => {
                self.running = false;
                // A press while an iteration runs is kept, not dropped: a learner counting
                // thirty presses gets thirty iterations.
                if self.in_flight && self.ready && self.fatal.is_none() {
                    self.steps_queued = (self.steps_queued + 1).min(MAX_QUEUED_STEPS);
                    return Vec::new();
                }
                self.request_step().into_iter().collect()
            }
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
                    self.prompt_queued = true;
                    self.steps_queued = 0;
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
            Action::Answer(d) => {
                // The question as the learner reads it now: its figures must not move
                // under the answer (a prediction's own iteration changes them).
                let asked = t
                    .open_question()
                    .and_then(|qi| Some((qi, t.step()?.questions.get(qi)?.text.clone())));
                let filled = asked
                    .map(|(qi, text)| (qi, super::figures::fill(self.figure_sources(), &text)));
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
                Some(out)
            }
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
            Action::ToggleCache => serving.cache = serving.cache.other(),
            Action::TogglePolicy => serving.policy = serving.policy.other(),
            Action::CycleCompare => serving.compare = serving.compare.next(),
            Action::ToggleWorkload => serving.workload = serving.workload.other(),
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
            self.steps_queued = 0;
            self.history.clear();
        }
        if new.run != old.run || new.serving != old.serving {
            self.timeline.clear();
            self.timeline_b.clear();
        }
        vec![Command::Apply(new)]
    }

    /// The command that tells the worker what the screen now watches (the layer whose
    /// captures long contexts keep, whether the lens is shown), when that changed.
    pub fn watch_command(&mut self) -> Option<Command> {
        let watch = Watch {
            layer: self.layer,
            lens: self.lens_shown || self.focus == Pane::Lens,
        };
        if watch == self.settings.watch || self.replaying {
            return None;
        }
        self.settings.watch = watch;
        Some(Command::Apply(self.settings))
    }

    /// What is shown and how: layer, head, values, scrolling, focus, running, speed.
    fn view_action(&mut self, a: Action) {
        let (n_layer, n_head) = self.dims();
        if matches!(
            a,
            Action::LayerUp
                | Action::LayerDown
                | Action::HeadLeft
                | Action::HeadRight
                | Action::SelectHead(_)
                | Action::Set(Setting::Layer(_) | Setting::Head(_))
        ) {
            self.auto_head = false;
        }
        match a {
            Action::ToggleRun => {
                self.running = !self.running;
                self.status = if self.running { "running" } else { "paused" }.into();
            }
            Action::Faster => self.speed = (self.speed + 1).min(SPEEDS.len() - 1),
            Action::Slower => self.speed = self.speed.saturating_sub(1),
            Action::StartInput => {
                self.running = false;
                self.input = Some(String::new());
            }
            Action::LayerUp => self.layer = (self.layer + n_layer - 1) % n_layer,
            Action::LayerDown => self.layer = (self.layer + 1) % n_layer,
            Action::HeadLeft => self.head = (self.head + n_head - 1) % n_head,
            Action::HeadRight => self.head = (self.head + 1) % n_head,
            Action::SelectHead(h) => self.head = h.min(n_head - 1),
            Action::ToggleValues => self.show_scores = !self.show_scores,
            Action::ScrollBack => {
                let n = self.history.get(self.layer).map_or(0, |h| h.weights.len());
                self.scroll = (self.scroll + 8).min(n.saturating_sub(1));
            }
            Action::ScrollForward => self.scroll = self.scroll.saturating_sub(8),
            Action::FocusNext => {
                let i = Pane::ALL.iter().position(|p| *p == self.focus).unwrap_or(0);
                self.focus_on(Pane::ALL[(i + 1) % Pane::ALL.len()]);
            }
            Action::Set(Setting::Focus(p)) => self.focus_on(p),
            Action::ToggleZoom => self.zoomed = !self.zoomed,
            Action::NextRequest => self.select_next_request(),
            Action::ToggleLens => self.focus_on(if self.lens_shown {
                Pane::Attention
            } else {
                Pane::Lens
            }),
            Action::Set(Setting::Zoom(z)) => self.zoomed = z,
            Action::ZoomPane(p) => {
                self.zoomed = !(self.zoomed && self.focus == p);
                self.focus_on(p);
            }
            Action::ToggleTraffic => self.focus_on(if self.traffic_shown {
                Pane::Forward
            } else {
                Pane::Traffic
            }),
            Action::Set(Setting::Values(scores)) => self.show_scores = scores,
            // Before the first report the model's shape is unknown: the lesson checked it.
            Action::Set(Setting::Layer(l)) if self.report.is_none() => self.layer = l,
            Action::Set(Setting::Head(h)) if self.report.is_none() => self.head = h,
            Action::Set(Setting::Layer(l)) => self.layer = l.min(n_layer - 1),
            Action::Set(Setting::Head(h)) => self.head = h.min(n_head - 1),
            Action::ToggleLooksAt => {
                self.looks_at = !self.looks_at;
                // Through `focus_on`: with the lens in the attention pane's place, `w`
                // brings the attention pane back rather than change something hidden.
                self.focus_on(Pane::Attention);
            }
            Action::ScrubBack => self.scrub_to(-1),
            Action::ScrubForward => self.scrub_to(1),
            Action::Export => self.export_focused(),
            _ => {}
        }
    }

    /// Selects the next request of the serving batch by id (the first after the last),
    /// and shows the serving pane.
    fn select_next_request(&mut self) {
        let ids: Vec<u64> = self
            .report
            .as_ref()
            .and_then(|r| r.serve.as_ref())
            .map(|s| s.step.block_tables.iter().map(|t| t.0).collect())
            .unwrap_or_default();
        let next = match self.selected_req {
            Some(cur) => ids.iter().copied().find(|&i| i > cur),
            None => None,
        };
        self.selected_req = next.or_else(|| ids.first().copied());
        self.focus_on(Pane::Serving);
    }

    /// Focuses `p`; the forward and traffic panes share a place, so focusing one shows it.
    fn focus_on(&mut self, p: Pane) {
        self.focus = p;
        match p {
            Pane::Forward => self.traffic_shown = false,
            Pane::Traffic => self.traffic_shown = true,
            Pane::Attention => self.lens_shown = false,
            Pane::Lens => self.lens_shown = true,
            _ => {}
        }
    }

    /// The state the pictures are drawn from.
    pub fn scene(&self) -> crate::export::Scene<'_> {
        let hist = self.history.get(self.layer);
        let rows = hist.map_or(&[][..], |h| {
            if self.show_scores {
                &h.scores[..]
            } else {
                &h.weights[..]
            }
        });
        crate::export::Scene {
            report: self.report.as_deref(),
            attention: rows,
            layer: self.layer,
            head: self.head,
            show_scores: self.show_scores,
            timeline: &self.timeline,
            settings: self.settings,
            past: &self.past,
            machine: self.machine.as_ref(),
        }
    }

    /// Writes the focused pane's picture (SVG and PNG) and says where in the status line.
    fn export_focused(&mut self) {
        use crate::export::{self, ExportPane};
        let pane = ExportPane::for_focus(self.focus, self.shows_sink());
        let r = export::write_fresh(&self.scene(), pane);
        self.status = match r {
            Ok(svg) => format!("exported {} → {} and .png", pane.name(), svg.display()),
            Err(e) => format!("export failed: {e}"),
        };
    }

    /// Moves the view `delta` iterations through the retained history.
    fn scrub_to(&mut self, delta: isize) {
        self.steps_queued = 0;
        let n = self.past.len();
        if n == 0 {
            self.status = "no iterations yet".into();
            return;
        }
        self.running = false;
        let live = n - 1;
        let cur = self.scrub.unwrap_or(live) as isize;
        let to = cur + delta;
        if to < 0 {
            self.status = if self.dropped > 0 {
                format!(
                    "start of the retained history ({} older iteration(s) were dropped to bound memory)",
                    self.dropped
                )
            } else {
                "start of the session's history".into()
            };
            return;
        }
        let to = to as usize;
        if to >= live {
            if self.scrub.is_some() {
                self.resume_live();
            } else {
                self.status = "already at the live iteration".into();
            }
            return;
        }
        if self.stash.is_none() {
            self.stash = Some(Stash {
                report: self.report.take(),
                history: std::mem::take(&mut self.history),
                timeline: std::mem::take(&mut self.timeline),
                timeline_b: std::mem::take(&mut self.timeline_b),
            });
        }
        self.scrub = Some(to);
        // Rebuild what the panes draw from the reports up to `to`: the heatmap rows from
        // the request's prefill on, the timelines from the last TIMELINE iterations.
        let mut first = to;
        while first > 0 && self.past[first].info.step != 0 {
            first -= 1;
        }
        self.history.clear();
        for k in first..=to {
            let r = self.past[k].clone();
            self.absorb(&r);
        }
        self.timeline.clear();
        self.timeline_b.clear();
        for k in to.saturating_sub(TIMELINE)..=to {
            push_timeline(&mut self.timeline, self.past[k].serve.as_ref());
            push_timeline(&mut self.timeline_b, self.past[k].serve_b.as_ref());
        }
        self.report = Some(self.past[to].clone());
        self.status = format!(
            "history: iteration {} ({} of {} kept) · [ ] scrub · space resumes live",
            self.past[to].iteration,
            to + 1,
            n
        );
    }

    /// Leaves the history view for the live state.
    fn resume_live(&mut self) {
        if let Some(s) = self.stash.take() {
            self.report = s.report;
            self.history = s.history;
            self.timeline = s.timeline;
            self.timeline_b = s.timeline_b;
        }
        self.scrub = None;
        self.status = "live".into();
    }

    /// Keeps a report in the history, dropping the oldest beyond the memory bound.
    fn remember(&mut self, r: &StepReport) {
        let r = crate::worker::recording::for_screens(r);
        let b = report_bytes(&r);
        self.past.push_back(Box::new(r));
        self.past_bytes += b;
        while self.past_bytes > MAX_PAST_BYTES && self.past.len() > 1 {
            if let Some(old) = self.past.pop_front() {
                self.past_bytes -= report_bytes(&old);
                self.dropped += 1;
                if let Some(i) = self.scrub.as_mut() {
                    *i = i.saturating_sub(1);
                }
            }
        }
    }

    /// Opens the app on a lesson and applies its current step; returns the commands.
    pub fn open_lesson(&mut self, tutor: Tutor) -> Vec<Command> {
        let (l, s) = (tutor.lesson, tutor.step);
        self.tutor = Some(tutor);
        // A lesson gives the pane each step is about the room; `z` (or a step's
        // `view=grid`) brings the grid back.
        self.zoomed = true;
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
            .view
            .into_iter()
            .flat_map(|s| self.update(Action::Set(s)))
            .collect();
        if let Some(s) = reply.settings {
            out.extend(self.update(Action::Apply(s)));
        }
        if let Some(p) = reply.prompt {
            self.running = false;
            self.prompt_queued = true;
            self.steps_queued = 0;
            out.push(Command::Prompt(p));
        }
        if reply.step {
            match self.request_step() {
                Some(c) => out.push(c),
                // One is running: the answer's own step follows it.
                None if self.in_flight => self.steps_queued += 1,
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
            || (self.replaying && self.report.as_ref().is_some_and(|r| r.sink.is_some()))
    }

    /// A step command unless one is already running or the engine is not ready. A
    /// finished request does not stop it: the engine steps whatever still has work (a
    /// queued prompt, the serving workload, the sink experiment) and says when nothing does.
    pub fn request_step(&mut self) -> Option<Command> {
        if !self.ready || self.in_flight || self.fatal.is_some() {
            return None;
        }
        self.in_flight = true;
        Some(Command::Step)
    }

    /// Takes an event from the engine.
    pub fn on_event(&mut self, e: Event) {
        match e {
            Event::Status(s) => {
                self.status = s;
                self.in_flight = false;
            }
            Event::Progress { done, total } => self.loading = Some((done, total)),
            Event::Machine(m) => self.machine = Some(m),
            Event::Ready { model } => {
                self.ready = true;
                self.loading = None;
                self.model_name = model;
                self.status = "ready: press space to prefill the prompt".into();
            }
            // What the worker runs under now: what was asked, unless it failed (then the
            // keys and the lessons read what really runs). What the screen watches is the
            // screen's own.
            Event::Applied(s) => {
                self.settings = Settings {
                    watch: self.settings.watch,
                    ..s
                }
            }
            Event::Beside(v) => {
                if let Some(r) = self.report.as_mut() {
                    r.beside = v;
                }
            }
            Event::Idle(s) => {
                self.status = s;
                self.in_flight = false;
                self.running = false;
                self.steps_queued = 0;
            }
            Event::Died(e) => {
                self.in_flight = false;
                self.steps_queued = 0;
                self.running = false;
                self.fatal = Some(format!(
                    "the engine thread stopped ({e}). Nothing more can run; your lesson progress and any recording are saved."
                ));
            }
            Event::Error(e) => {
                self.in_flight = false;
                self.steps_queued = 0;
                // A refused prompt leaves the old request in place.
                self.prompt_queued = false;
                self.running = false;
                if self.ready {
                    self.status = format!("error: {e}");
                } else {
                    self.fatal = Some(e);
                }
            }
            Event::Report(r) => {
                self.in_flight = false;
                if r.info.step == 0 && !r.recomputed && !r.repeat {
                    self.prompt_queued = false;
                }
                // A recording holds the layer that was on screen: follow it.
                if self.replaying && !r.info.captures.iter().any(|c| c.layer == self.layer) {
                    if let Some(c) = r.info.captures.first() {
                        self.layer = c.layer;
                    }
                }
                self.remember(&r);
                if self.scrub.is_some() {
                    self.resume_live();
                }
                let old = self.report.take();
                if let Some(mut t) = self.tutor.take() {
                    t.observe(&r, old.as_deref());
                    super::tutor::grade(&mut t, &self.live(), &r);
                    self.tutor = Some(t);
                }
                self.report = old;
                self.absorb(&r);
                push_timeline(&mut self.timeline, r.serve.as_ref());
                push_timeline(&mut self.timeline_b, r.serve_b.as_ref());
                self.status = report_status(&r);
                self.fit_view_to(&r.cfg);
                self.open_on_sharpest_head(&r);
                self.report = Some(r);
                self.note_progress();
            }
        }
    }

    /// A layer or head chosen before the model's shape was known (a lesson's `set:`)
    /// that this model lacks: the last one it has is shown, and the status says why.
    fn fit_view_to(&mut self, cfg: &crate::model::LlamaConfig) {
        let (layer, head) = (self.layer, self.head);
        self.layer = layer.min(cfg.n_layer - 1);
        self.head = head.min(cfg.n_head - 1);
        if (layer, head) != (self.layer, self.head) {
            self.status = format!(
                "layer {layer} / head {head} asked for, but this model has {} layers and {} heads: showing layer {} head {}",
                cfg.n_layer, cfg.n_head, self.layer, self.head
            );
        }
    }

    /// On the first prefill, shows the head whose attention is the sharpest away from the
    /// first token (see [`crate::views::sharpest`]) and says so.
    fn open_on_sharpest_head(&mut self, r: &StepReport) {
        if !self.auto_head || self.tutor.is_some() || r.info.step != 0 {
            return;
        }
        self.auto_head = false;
        if let Some((layer, head)) = crate::views::sharpest::sharpest_head(&r.info.captures) {
            (self.layer, self.head) = (layer, head);
            self.status = format!(
                "{} · showing layer {layer} head {head}, the sharpest pattern off token 0 (j k h l browse)",
                self.status
            );
        }
    }

    /// Adds this step's attention rows to the request's history.
    fn absorb(&mut self, r: &StepReport) {
        if r.info.step == 0 {
            self.history.clear();
        }
        for c in &r.info.captures {
            if self.history.len() <= c.layer {
                self.history.resize_with(c.layer + 1, LayerHistory::default);
            }
            let h = &mut self.history[c.layer];
            // Rows from pos0 on are (re)computed by this capture; rows before it that were
            // never captured stay empty.
            if h.weights.len() > c.pos0 {
                *h = LayerHistory::default();
            }
            h.weights.resize_with(c.pos0, Vec::new);
            h.scores.resize_with(c.pos0, Vec::new);
            if h.bytes == 0 {
                h.kept_from = c.pos0;
            }
            for i in 0..c.t {
                let row = |v: &[f32]| -> Vec<Vec<f32>> {
                    (0..c.n_head)
                        .map(|hh| v[(hh * c.t + i) * c.kv_len..][..c.pos0 + i + 1].to_vec())
                        .collect()
                };
                h.weights.push(row(&c.weights));
                h.scores.push(row(&c.scores));
                h.bytes += 8 * c.n_head * (c.pos0 + i + 1);
            }
        }
        // The cap is shared by the layers holding rows: one focused layer of a long
        // context gets all of it, thirty layers of a short one a thirtieth each.
        let holding = self.history.iter().filter(|h| h.bytes > 0).count().max(1);
        for h in &mut self.history {
            h.trim(HISTORY_BYTES / holding);
        }
    }
}

/// The status line after a report: what the iteration did.
fn report_status(r: &StepReport) -> String {
    let what = if r.repeat {
        "request finished (a: new prompt) · serving and sink go on".to_string()
    } else if r.recomputed {
        format!(
            "recomputed {} token(s) under {} in {:.1} ms: the same next position",
            r.info.input_len, r.info.layout, r.info.wall_ms
        )
    } else {
        format!(
            "{} · {} token(s) in {:.1} ms",
            if r.info.step == 0 {
                "prefill"
            } else {
                "decode"
            },
            r.info.input_len,
            r.info.wall_ms
        )
    };
    format!("iteration {} · {what}", r.iteration)
}

/// Appends one serving iteration's phases to a timeline, dropping the oldest beyond [`TIMELINE`].
fn push_timeline(
    t: &mut VecDeque<Vec<(u64, ReqPhase)>>,
    v: Option<&crate::worker::report::ServeView>,
) {
    let Some(sv) = v else { return };
    // A restarted workload (c, b or s pressed live, or seen in a recording) begins a new
    // timeline: one picture never mixes two runs under one title.
    if sv.step.iteration == 0 {
        t.clear();
    }
    // A request that ran more than one token this iteration was prefilling, even when the
    // prefill finished in it and the scheduler already reports it decoding.
    let mut col: Vec<(u64, ReqPhase)> = sv
        .step
        .active
        .iter()
        .map(|a| match a.phase {
            ReqPhase::Decode if a.scheduled > 1 => (a.id, ReqPhase::Prefill),
            p => (a.id, p),
        })
        .collect();
    col.extend(sv.step.queue.iter().map(|&q| (q, ReqPhase::Waiting)));
    // A finished run's view comes again with every step; it is one column, not many.
    if sv.done && t.back() == Some(&col) {
        return;
    }
    t.push_back(col);
    if t.len() > TIMELINE {
        t.pop_front();
    }
}
