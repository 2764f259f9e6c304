//! The app's worker thread: it owns the model, takes [`Command`]s and answers with
//! [`Event`]s. The UI never touches model code; it only reads the reports. It drives the
//! live request, the serving workloads and the attention-sink experiment.

mod beside;
pub mod recording;
pub mod request;
/// The report types, at home in `crate::report`; named here too for the worker's callers.
pub use crate::report;

pub use request::{
    plan_capture, run_request, CAPTURE_ALL_BYTES, CAPTURE_ONE_BYTES, MAX_CAPTURE_ROWS,
};
use request::{start, step, Live};

pub use report::{KvView, StepReport};

use crate::model::source::{self, Progress};
use crate::model::{HeadLayout, LoadOptions, Model, RunOptions, SamplerConfig};
use crate::serve::{CacheKind, Policy, ServeEngine};
use crate::sink::SinkRun;
use beside::Beside;
use report::ServeView;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};

/// What the UI asks of the engine.
#[derive(Debug, Clone)]
pub enum Command {
    /// Run one iteration (prefill first, then one decode step each).
    Step,
    /// Switch head layout / kernel; the current request is recomputed under it.
    SetRun(RunOptions),
    /// Start a new request with this user message (chat template applied).
    Prompt(String),
    /// Restart the serving workload under this setup (and, when it names one, a second copy
    /// beside it under other settings: both see identical work).
    SetServe(ServeSetup),
    /// The layer the screen shows: captures of long contexts keep only that layer.
    Focus(usize),
    /// Start (or stop) the attention-sink experiment beside the request: every step then
    /// reads one more token of the shipped text through a full and two windowed caches.
    SetSink(bool),
    /// Run the logit lens on the live request's steps (only while it is on screen: it
    /// costs an LM head pass over every layer's newest row).
    SetLens(bool),
    /// How the live request picks its next tokens: temperature and top-p (0: greedy).
    SetSampler(SamplerConfig),
    /// The live request with its KV cache (true), or recomputing every key and value of
    /// the sequence at each step (false): the cache's counterfactual.
    SetKvCache(bool),
    /// Run the live request's tokens under a second head layout beside it (or stop).
    SetBeside(Option<crate::model::HeadLayout>),
    Quit,
}

/// What the engine tells the UI.
#[derive(Debug, Clone)]
pub enum Event {
    Status(String),
    Progress {
        done: u64,
        total: u64,
    },
    Ready {
        model: String,
    },
    Report(Box<StepReport>),
    /// This machine's measured limits (for the traffic pane).
    Machine(crate::machine::Machine),
    /// A step found nothing left to run: the live request has finished, and the serving
    /// runs and the sink experiment beside it are done (or off). Running stops; a new
    /// prompt (`a`) or a restarted workload gives the next step work again.
    Idle(String),
    /// A command failed; the engine is still there and takes the next one.
    Error(String),
    /// The engine thread stopped (a panic); nothing more will come.
    Died(String),
    /// The second layout's view of the position on screen, when it starts or changes
    /// without an iteration (an iteration's report carries it otherwise).
    Beside(Option<report::BesideView>),
}

pub use crate::serve::workload::AppWorkload;

/// What the serving side runs: policy, cache, the comparison beside it, the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeSetup {
    pub policy: Policy,
    pub cache: CacheKind,
    pub other: Option<OtherRun>,
    pub workload: AppWorkload,
}

/// The run beside the main one: another policy or cache, or the same requests one at a
/// time (a batch of one, first come first served).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtherRun {
    pub policy: Policy,
    pub cache: CacheKind,
    pub one_at_a_time: bool,
}

impl OtherRun {
    /// "static batching · paged KV", or "one at a time · paged KV".
    pub fn describe(&self) -> String {
        crate::report::describe_run(self.one_at_a_time, self.policy, self.cache)
    }
}

impl Default for ServeSetup {
    fn default() -> Self {
        Self {
            policy: Policy::Continuous,
            cache: CacheKind::Paged,
            other: None,
            workload: AppWorkload::Chat,
        }
    }
}

/// How to start the engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub model: Option<PathBuf>,
    pub load: LoadOptions,
    pub run: RunOptions,
    pub prompt: String,
    pub max_new: usize,
}

/// Why a command failed in the worker: the model could not be found or loaded, or a
/// forward pass, a layout, a serving run or the sink experiment refused. The UI shows it
/// as text (`Event::Error`); callers in the library branch on the kind.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Source(#[from] source::SourceError),
    #[error("loading {}: {err}", path.display())]
    Load {
        path: PathBuf,
        err: crate::model::ModelError,
    },
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error(transparent)]
    Layout(#[from] crate::model::heads::LayoutError),
    #[error(transparent)]
    Serve(#[from] crate::serve::ServeError),
    #[error("the sink experiment: {0}")]
    Sink(String),
}

/// Starts the worker thread.
pub fn spawn(cfg: EngineConfig) -> (Sender<Command>, Receiver<Event>) {
    let (ctx, crx) = mpsc::channel();
    let (etx, erx) = mpsc::channel();
    std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || {
            if let Err(e) = run(cfg, crx, &etx) {
                let _ = etx.send(Event::Error(e.to_string()));
            }
        })
        .expect("spawning the engine thread");
    (ctx, erx)
}

fn run(cfg: EngineConfig, rx: Receiver<Command>, tx: &Sender<Event>) -> Result<(), WorkerError> {
    let send = |e: Event| {
        let _ = tx.send(e);
    };
    let mut w = Worker::start(&cfg, &send)?;
    while let Ok(cmd) = rx.recv() {
        if matches!(cmd, Command::Quit) {
            break;
        }
        // A failed command is reported and the worker carries on with what it has (the
        // live request stays usable; a step whose side comparison fails still stands). A
        // panic leaves no such guarantee, so the thread says it died and stops; the UI
        // then exits non-zero.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.handle(cmd, &send))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => send(Event::Error(e.to_string())),
            Err(p) => {
                let why = crate::model::error::panic_message(p.as_ref(), "a panic");
                send(Event::Died(why));
                return Ok(());
            }
        }
    }
    Ok(())
}

impl Worker {
    /// Finds and loads the model (saying so as it goes), starts the live request and the
    /// serving run, measures the machine once, and says the app is ready.
    fn start(cfg: &EngineConfig, send: &dyn Fn(Event)) -> Result<Self, WorkerError> {
        send(Event::Status("finding the model".into()));
        let mut progress = |p: Progress| match p {
            Progress::Stage(s) => send(Event::Status(s)),
            Progress::Bytes { done, total } => send(Event::Progress { done, total }),
        };
        let (path, _) = source::resolve(cfg.model.as_deref(), &mut progress)?;
        send(Event::Status(format!("loading {}", path.display())));
        let base = Model::load(&path, &cfg.load).map_err(|err| WorkerError::Load {
            path: path.clone(),
            err,
        })?;
        let model = base.with_run(cfg.run)?;
        let live = start(
            &model,
            &cfg.prompt,
            cfg.max_new,
            None,
            SamplerConfig::default(),
        )?;
        let setup = ServeSetup::default();
        let serve = serving(&model, setup.policy, setup.cache, setup.workload, false)?.into();
        send(Event::Status(
            "measuring this machine's memory bandwidth and int8 peak (once per CPU)".into(),
        ));
        // The traffic pane works without the limits, so a failure is said, not fatal.
        match crate::machine::get() {
            Ok(m) => send(Event::Machine(m)),
            Err(e) => send(Event::Status(format!(
                "could not measure this machine: {e:#}"
            ))),
        }
        let name = path.file_name().map(|s| s.to_string_lossy().to_string());
        send(Event::Ready {
            model: name.unwrap_or_default(),
        });
        // Loading noticed something that changes no math: said once, after the ready line.
        if let Some(w) = model.warnings().first() {
            send(Event::Status(format!("warning: {w}")));
        }
        Ok(Self {
            base,
            model,
            max_new: cfg.max_new,
            live,
            iteration: 0,
            serve,
            compare: None,
            setup,
            sink: None,
            last: None,
            focus: 0,
            lens: false,
            sampler: SamplerConfig::default(),
            kv_cache: true,
            beside: None,
        })
    }
}

/// Everything the worker thread holds between commands.
struct Worker {
    /// The model as loaded; `model` is it under the current run options.
    base: Model,
    model: Model,
    max_new: usize,
    live: Live,
    iteration: usize,
    serve: Served,
    compare: Option<Served>,
    /// What `serve` and `compare` run, to start them again under a new head layout.
    setup: ServeSetup,
    sink: Option<SinkRun>,
    /// The newest report without its attention captures, for steps after the request ends.
    last: Option<StepReport>,
    /// The layer on screen.
    focus: usize,
    /// The logit lens is on screen.
    lens: bool,
    /// How the live request picks tokens; a new prompt keeps it.
    sampler: SamplerConfig,
    /// The live request keeps a KV cache (false: recomputes the sequence every step).
    kv_cache: bool,
    /// The live request's tokens under a second head layout, and that layout.
    beside: Option<(HeadLayout, Beside)>,
}

impl Worker {
    fn handle(&mut self, cmd: Command, send: &dyn Fn(Event)) -> Result<(), WorkerError> {
        match cmd {
            Command::Quit => {}
            Command::Focus(layer) => self.focus = layer,
            Command::SetLens(on) => self.lens = on,
            Command::SetBeside(_) | Command::SetKvCache(_) | Command::SetSampler(_) => {
                self.set_live(cmd, send)?
            }
            Command::SetSink(on) => {
                self.sink = None;
                if on {
                    self.sink = Some(sink_run(&self.model)?);
                    send(Event::Status(format!(
                        "attention sink: each step reads one token of the eval text through a full cache and a {SINK_WINDOW}-token window, with and without the first page"
                    )));
                } else {
                    send(Event::Status("attention-sink experiment off".into()));
                }
            }
            Command::SetServe(setup) => {
                (self.serve, self.compare) = serving_pair(&self.model, setup)?;
                self.setup = setup;
                let ServeSetup {
                    policy,
                    cache,
                    other,
                    workload,
                } = setup;
                send(Event::Status(match other {
                    Some(o) => format!(
                        "serving restarted: {workload:?} requests, {policy:?}/{cache:?} beside {} on the same requests",
                        o.describe()
                    ),
                    None => format!(
                        "serving workload restarted: {workload:?} requests, {policy:?} batching, {cache:?} cache"
                    ),
                }));
            }
            Command::Prompt(p) => {
                self.live = start(&self.model, &p, self.max_new, None, self.sampler)?;
                self.live.session.recompute = !self.kv_cache;
                // The layout beside starts over on the new prompt, with the live one; if
                // it cannot, the prompt still stands and the comparison says why it ended.
                if let Err(e) = self.restart_beside() {
                    self.beside = None;
                    send(Event::Beside(None));
                    send(Event::Status(format!("the layout beside stopped: {e}")));
                }
                send(Event::Status(
                    "new request queued: press space to prefill it".into(),
                ));
            }
            Command::SetRun(run) => self.set_run(run, send)?,
            Command::Step => {
                // Fault injection, so the tests can check what the user sees when the
                // engine dies (a bug, or a panic deep in a library).
                if std::env::var_os("INFERLAB_FAULT").is_some_and(|v| v == "engine-panic") {
                    panic!("injected fault (INFERLAB_FAULT=engine-panic)");
                }
                self.step(send)?
            }
        }
        Ok(())
    }

    /// The live request's own settings, which leave everything else running: the layout
    /// run beside it, its KV cache, its sampler.
    fn set_live(&mut self, cmd: Command, send: &dyn Fn(Event)) -> Result<(), WorkerError> {
        match cmd {
            Command::SetBeside(layout) => {
                let view = self.start_beside(layout)?;
                send(Event::Beside(view));
            }
            Command::SetKvCache(on) => {
                self.kv_cache = on;
                self.live.session.recompute = !on;
                send(Event::Status(
                    if on {
                        "KV cache on: each decode step computes one token's keys and values"
                    } else {
                        "KV cache off: each decode step recomputes the keys and values of the whole sequence"
                    }
                    .into(),
                ));
            }
            Command::SetSampler(cfg) => {
                self.sampler = cfg;
                self.live.session.set_sampler(cfg);
                send(Event::Status(format!(
                    "sampler: {} from the next step on",
                    cfg.describe()
                )));
            }
            _ => {}
        }
        Ok(())
    }

    /// Switches head layout or kernel and recomputes the same tokens under it, so the
    /// panes compare like with like: the tokens fed so far run again as one prefill and
    /// the report shows the distribution for the same next position the last one did
    /// (the token it sampled is set aside and sampled again under the new settings).
    /// Stepping then goes on from there.
    fn set_run(&mut self, run: RunOptions, send: &dyn Fn(Event)) -> Result<(), WorkerError> {
        let model = self.base.with_run(run)?;
        // The experiment's caches are shaped for the old layout: start it again.
        let sink = match self.sink {
            Some(_) => Some(sink_run(&model)?),
            None => None,
        };
        let s = &self.live.session;
        let (prompt_len, started) = (s.prompt_len, s.step > 0);
        let mut toks = s.tokens.clone();
        if started {
            toks.pop();
        }
        let fed = toks.len() - prompt_len;
        let remaining = self.max_new.saturating_sub(fed).max(1);
        let mut live = start(
            &model,
            &self.live.prompt,
            remaining,
            Some(toks),
            self.sampler,
        )?;
        live.session.prompt_len = prompt_len;
        live.session.probe.lens = self.lens;
        live.session.recompute = !self.kv_cache;
        // The serving cache is shaped by the layout too: its workload starts again.
        let (serve, compare) = serving_pair(&model, self.setup)?;
        (self.serve, self.compare) = (serve, compare);
        // The layout beside is no comparison once it is the live one.
        if self.beside.as_ref().is_some_and(|b| b.0 == run.layout) {
            self.beside = None;
        }
        if !started {
            // Nothing ran yet: the next space prefills the prompt under the new settings.
            (self.model, self.sink, self.live) = (model, sink, live);
            // The layout beside follows the new kernel.
            self.restart_beside()?;
            send(Event::Status(
                "settings changed: press space to prefill the prompt".into(),
            ));
            return Ok(());
        }
        let mut report = step(
            &mut live,
            &model,
            self.iteration + 1,
            self.max_new,
            self.focus,
        )?;
        (self.model, self.sink, self.live) = (model, sink, live);
        self.iteration += 1;
        report.recomputed = true;
        report.beside = self.restart_beside()?;
        self.keep_last(&mut report);
        send(Event::Report(Box::new(report)));
        Ok(())
    }

    /// Starts the layout beside again (if one runs) on the live request as it is now.
    fn restart_beside(&mut self) -> Result<Option<report::BesideView>, WorkerError> {
        self.start_beside(self.beside.as_ref().map(|b| b.0))
    }

    /// Runs the live request's tokens under `layout` beside it from now on (`None`: stops);
    /// returns its view of the position on screen, when the live request has run.
    fn start_beside(
        &mut self,
        layout: Option<HeadLayout>,
    ) -> Result<Option<report::BesideView>, WorkerError> {
        self.beside = None;
        let Some(layout) = layout else {
            return Ok(None);
        };
        let run = RunOptions {
            layout,
            ..self.model.run_options()
        };
        let (b, view) = Beside::start(&self.base, run, &self.live.session, self.max_new)?;
        self.beside = Some((layout, b));
        Ok(view)
    }

    /// Keeps the newest report without its attention captures (most of its bytes) for
    /// the steps after the request ends; they are taken out for the clone and put back.
    fn keep_last(&mut self, report: &mut StepReport) {
        let captures = std::mem::take(&mut report.info.captures);
        self.last = Some(report.clone());
        report.info.captures = captures;
    }

    /// One iteration of everything that runs: the live request, the serving workload (and
    /// its comparison) and the sink experiment. A finished request stalls none of them.
    fn step(&mut self, send: &dyn Fn(Event)) -> Result<(), WorkerError> {
        if self.live.finished {
            return self.step_beside(send);
        }
        self.live.session.probe.lens = self.lens;
        let mut report = step(
            &mut self.live,
            &self.model,
            self.iteration + 1,
            self.max_new,
            self.focus,
        )?;
        self.iteration += 1;
        // The live token is already taken: a failing comparison ends, the step stands.
        if let Some((_, b)) = self.beside.as_mut() {
            match b.step(report.info.token_id) {
                Ok(v) => report.beside = Some(v),
                Err(e) => {
                    self.beside = None;
                    send(Event::Status(format!("the layout beside stopped: {e}")));
                }
            }
        }
        self.step_others(&mut report)?;
        self.keep_last(&mut report);
        send(Event::Report(Box::new(report)));
        Ok(())
    }

    /// An iteration after the live request has finished: the serving runs and the sink
    /// experiment go on, under the request's last report again (no new attention rows).
    fn step_beside(&mut self, send: &dyn Fn(Event)) -> Result<(), WorkerError> {
        let serving_left =
            !self.serve.engine.done() || self.compare.as_ref().is_some_and(|c| !c.engine.done());
        let sink_left = self.sink.as_ref().is_some_and(|s| !s.done());
        let prev = match self.last.as_ref() {
            Some(p) if serving_left || sink_left => p,
            _ => {
                send(Event::Idle(
                    "request finished and the serving run is done: press a for a new prompt (g, c, b restart the workload)".into(),
                ));
                return Ok(());
            }
        };
        let mut r = prev.clone();
        r.iteration = self.iteration + 1;
        r.recomputed = false;
        r.repeat = true;
        (r.serve, r.serve_b, r.sink) = (None, None, None);
        self.step_others(&mut r)?;
        self.iteration += 1;
        send(Event::Report(Box::new(r)));
        Ok(())
    }

    /// The serving workload, its comparison and the sink experiment, one iteration each,
    /// into `report`.
    fn step_others(&mut self, report: &mut StepReport) -> Result<(), WorkerError> {
        report.serve = serve_step(&mut self.serve)?;
        if let Some(c) = self.compare.as_mut() {
            report.serve_b = serve_step(c)?;
        }
        if let Some(s) = self.sink.as_mut().filter(|s| !s.done()) {
            report.sink = Some(s.step(&self.model).map_err(WorkerError::Sink)?);
        }
        Ok(())
    }
}

/// The sink experiment's window (tokens) and page size: eight pages of sixteen.
pub const SINK_WINDOW: usize = 128;
const SINK_PAGE: usize = APP_PAGE_SIZE;

use crate::serve::workload::long_serving;
pub use crate::serve::workload::{chat_serving, long_parts, APP_PAGE_SIZE};

/// A fresh sink experiment over the shipped eval text.
fn sink_run(model: &Model) -> Result<SinkRun, WorkerError> {
    let tokens = model.tokenizer.encode(crate::assets::EVAL_TEXT.trim())?;
    SinkRun::new(model, tokens, SINK_WINDOW, SINK_PAGE).map_err(WorkerError::Sink)
}

/// A serving engine and what it has done since it started.
struct Served {
    engine: ServeEngine,
    /// The last iteration's view: the running totals the next one adds to, and what is
    /// shown again once the run is done.
    last: Option<ServeView>,
}

impl From<ServeEngine> for Served {
    fn from(engine: ServeEngine) -> Self {
        Self { engine, last: None }
    }
}

/// One iteration of a serving engine as the app shows it; once the run is done, its
/// last view again, so the pane keeps the finished run on screen.
fn serve_step(s: &mut Served) -> Result<Option<ServeView>, WorkerError> {
    let e = &mut s.engine;
    if e.done() {
        return Ok(s.last.clone());
    }
    let step = e.step()?;
    let prev = s.last.as_ref();
    let last_copy = step
        .copies
        .last()
        .map(|&(id, from, to)| (step.iteration, id, from, to));
    let view = ServeView {
        copies_total: prev.map_or(0, |v| v.copies_total) + step.copies.len(),
        last_copy: last_copy.or(prev.and_then(|v| v.last_copy)),
        generated_total: prev.map_or(0, |v| v.generated_total) + step.tokens_generated,
        elapsed_ms: prev.map_or(0.0, |v| v.elapsed_ms) + step.wall_ms,
        policy: e.cfg().policy,
        cache: e.cfg().cache,
        page_size: e.cfg().page_size,
        requests: e.requests().len(),
        max_batch: e.cfg().max_batch,
        step,
        preemptions: e.preemptions(),
        done: e.done(),
    };
    s.last = Some(view.clone());
    Ok(Some(view))
}

/// The serving engine of a setup, and its comparison when the setup names one.
fn serving_pair(model: &Model, s: ServeSetup) -> Result<(Served, Option<Served>), WorkerError> {
    let serve = serving(model, s.policy, s.cache, s.workload, false)?.into();
    let compare = match s.other {
        Some(o) => Some(serving(model, o.policy, o.cache, s.workload, o.one_at_a_time)?.into()),
        None => None,
    };
    Ok((serve, compare))
}

/// The app's serving engine over one of its workloads.
fn serving(
    model: &Model,
    policy: Policy,
    cache: CacheKind,
    workload: AppWorkload,
    one_at_a_time: bool,
) -> Result<ServeEngine, WorkerError> {
    let (mut cfg, reqs) = match workload {
        AppWorkload::Chat => chat_serving(model, policy, cache)?,
        AppWorkload::Long => long_serving(model, policy, cache)?,
    };
    if one_at_a_time {
        cfg.max_batch = 1;
    }
    Ok(ServeEngine::new(model, cfg, reqs)?)
}
