//! The app's worker thread: it owns the model, takes [`Command`]s and answers with
//! [`Event`]s. The UI never touches model code; it only reads the reports. It drives the
//! live request, the serving workloads and the attention-sink experiment.

mod beside;
pub mod recording;
pub mod request;
use request::{next_report, start, Live};
pub use request::{
    plan_capture, run_request, CAPTURE_ALL_BYTES, CAPTURE_ONE_BYTES, MAX_CAPTURE_ROWS,
};

use crate::model::source::{self, FetchProgress};
use crate::model::{LoadOptions, Model, RunOptions};
use crate::report::{self, ServeReport, StepReport};
use crate::serve::ServeEngine;
use crate::settings::{RequestSettings, ServingRun, Settings};
use crate::sink::SinkRun;
use beside::Beside;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};

/// What the UI asks of the engine.
#[derive(Debug, Clone)]
pub enum Command {
    /// Run one iteration (prefill first, then one decode step each).
    Step,
    /// Start a new request with this user message (chat template applied).
    Prompt(String),
    /// Run under these settings from now on: the worker rebuilds only what changed (the
    /// model and everything shaped by it for a new layout or kernel, the serving runs, the
    /// sink experiment, the live request's own switches) and echoes them in every report.
    Apply(Settings),
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
    /// The perplexity the weights of this type give on the shipped evaluation text, and
    /// their top token at each position, measured once when they load (lesson 4 quotes
    /// what fewer bytes cost).
    Scored(crate::model::eval::Scored),
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
    Beside(Option<report::BesideReport>),
    /// The answer to every [`Command::Apply`], after whatever else it said: the settings
    /// the worker now runs under (after a failure, not those asked for).
    Applied(Settings),
    /// The worker changed what it runs on its own: the layout beside failed and stopped.
    Settings(Settings),
}

pub use crate::serve::workload::AppWorkload;

/// How to start the engine.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
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
    Sink(#[from] crate::sink::SinkError),
}

/// Starts the worker thread.
pub fn spawn(cfg: WorkerConfig) -> (Sender<Command>, Receiver<Event>) {
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

fn run(cfg: WorkerConfig, rx: Receiver<Command>, tx: &Sender<Event>) -> Result<(), WorkerError> {
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

/// Finds the model (fetching it with progress where it must) and loads it.
fn find_and_load(
    cfg: &WorkerConfig,
    send: &dyn Fn(Event),
) -> Result<(std::path::PathBuf, Model), WorkerError> {
    send(Event::Status("finding the model".into()));
    let mut progress = |p: FetchProgress| match p {
        FetchProgress::Stage(s) => send(Event::Status(s)),
        FetchProgress::Bytes { done, total } => send(Event::Progress { done, total }),
    };
    let (path, _) = source::resolve(cfg.model.as_deref(), &mut progress)?;
    send(Event::Status(format!("loading {}", path.display())));
    let base = Model::load(&path, &cfg.load).map_err(|err| WorkerError::Load {
        path: path.clone(),
        err,
    })?;
    Ok((path, base))
}

impl Worker {
    /// Finds and loads the model (saying so as it goes), starts the live request and the
    /// serving run, measures the machine once, and says the app is ready.
    fn start(cfg: &WorkerConfig, send: &dyn Fn(Event)) -> Result<Self, WorkerError> {
        let (path, base) = find_and_load(cfg, send)?;
        let settings = Settings {
            run: cfg.run,
            weights: cfg.load.requant,
            ..Settings::default()
        };
        let model = base.with_run(cfg.run)?;
        let live = start(
            &model,
            &cfg.prompt,
            cfg.max_new,
            None,
            settings.request.sampler,
        )?;
        send(Event::Status(
            "timing a prefill and a decode step: the chat requests' arrival rate".into(),
        ));
        let (chat_rate, _) = crate::serve::workload::chat_rate(&model)?;
        let (serve, compare) = serving_pair(&model, &settings, chat_rate)?;
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
        send_perplexity(&base, settings.weights, send);
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
            source: (path.clone(), cfg.load.device.clone()),
            model,
            max_new: cfg.max_new,
            live,
            iteration: 0,
            serve,
            compare,
            chat_rate,
            settings,
            sink: None,
            last: None,
            beside: None,
        })
    }
}

/// Everything the worker thread holds between commands.
struct Worker {
    /// The model as loaded; `model` is it under `settings.run`.
    base: Model,
    /// Where it was loaded from and onto what, to load it again with other weights.
    source: (PathBuf, candle_core::Device),
    model: Model,
    max_new: usize,
    live: Live,
    iteration: usize,
    /// The serving run, and the run beside it on the same requests.
    serve: EngineRun,
    compare: Option<EngineRun>,
    /// Chat requests per second arriving in the serving runs: measured once at start, so
    /// every run from then on, whatever its settings, sees the same arrivals.
    chat_rate: f64,
    /// What everything here runs under; every report carries it.
    settings: Settings,
    sink: Option<SinkRun>,
    /// The newest report without its attention captures, for steps after the request ends.
    last: Option<StepReport>,
    /// The live request's tokens under `settings.request.beside`.
    beside: Option<Beside>,
}

impl Worker {
    fn handle(&mut self, cmd: Command, send: &dyn Fn(Event)) -> Result<(), WorkerError> {
        match cmd {
            Command::Quit => {}
            Command::Apply(s) => {
                // Always answered, last, with what now runs: after a failure that is not
                // what was asked, and the app takes it back.
                if let Err(e) = self.apply(s, send) {
                    send(Event::Error(e.to_string()));
                }
                send(Event::Applied(self.settings));
            }
            Command::Prompt(p) => {
                let req = self.settings.request;
                self.live = start(&self.model, &p, self.max_new, None, req.sampler)?;
                self.live.session.recompute = !req.kv_cache;
                // The layout beside starts over on the new prompt, with the live one; if
                // it cannot, the prompt still stands and the comparison says why it ended.
                if let Err(e) = self.start_beside() {
                    self.beside_stopped(&e, send);
                }
                send(Event::Status(
                    "new request queued: press space to prefill it".into(),
                ));
            }
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

    /// Runs under `new` from now on, rebuilding only what changed: a new head layout or
    /// kernel rebuilds the model and everything shaped by it; otherwise the serving runs,
    /// the sink experiment and the live request's switches each change on their own. A
    /// part's settings change only once it runs under them.
    fn apply(&mut self, new: Settings, send: &dyn Fn(Event)) -> Result<(), WorkerError> {
        let new = new.settled();
        self.settings.watch = new.watch;
        if new.run != self.settings.run || new.weights != self.settings.weights {
            return self.set_run(new, send);
        }
        if new.serving != self.settings.serving {
            (self.serve, self.compare) = serving_pair(&self.model, &new, self.chat_rate)?;
            self.settings.serving = new.serving;
            send(Event::Status(serving_restarted(&new, self.chat_rate)));
        }
        if new.sink != self.settings.sink {
            self.sink = match new.sink {
                true => Some(sink_run(&self.model)?),
                false => None,
            };
            self.settings.sink = new.sink;
            send(Event::Status(match new.sink {
                true => format!(
                    "attention sink: each step reads one token of the eval text through a full cache and a {SINK_WINDOW}-token window, with and without the first page"
                ),
                false => "attention-sink experiment off".into(),
            }));
        }
        if new.request != self.settings.request {
            self.set_request(new.request, send)?;
        }
        Ok(())
    }

    /// The live request's own switches, which leave everything else running: the layout
    /// run beside it, its KV cache, its sampler.
    fn set_request(
        &mut self,
        new: RequestSettings,
        send: &dyn Fn(Event),
    ) -> Result<(), WorkerError> {
        let old = std::mem::replace(&mut self.settings.request, new);
        if new.kv_cache != old.kv_cache {
            self.live.session.recompute = !new.kv_cache;
            send(Event::Status(
                if new.kv_cache {
                    "KV cache on: each decode step computes one token's keys and values"
                } else {
                    "KV cache off: each decode step recomputes the keys and values of the whole sequence"
                }
                .into(),
            ));
        }
        if new.sampler != old.sampler {
            self.live.session.set_sampler(new.sampler);
            send(Event::Status(format!(
                "sampler: {} from the next step on",
                new.sampler.describe()
            )));
        }
        if new.beside != old.beside {
            let view = self.start_beside();
            send(Event::Beside(view.as_ref().ok().cloned().flatten()));
            view?;
        }
        Ok(())
    }

    /// Switches head layout or kernel and recomputes the same tokens under it, so the
    /// panes compare like with like: the tokens fed so far run again as one prefill and
    /// the report shows the distribution for the same next position the last one did
    /// (the token it sampled is set aside and sampled again under the new settings).
    /// Stepping then goes on from there. The serving runs and the sink experiment are
    /// shaped by the layout too: they start again.
    fn set_run(&mut self, s: Settings, send: &dyn Fn(Event)) -> Result<(), WorkerError> {
        // Everything is built before anything is replaced: a failure to build leaves all
        // as it ran.
        let base = self.load_weights(s.weights, send)?;
        let model = base.as_ref().unwrap_or(&self.base).with_run(s.run)?;
        if let Some(loaded) = &base {
            send_perplexity(loaded, s.weights, send);
        }
        let sink = match s.sink {
            true => Some(sink_run(&model)?),
            false => None,
        };
        let started = self.live.session.step > 0;
        let live = self.recomputed_live(&model, &s)?;
        let (serve, compare) = serving_pair(&model, &s, self.chat_rate)?;
        (self.serve, self.compare) = (serve, compare);
        (self.model, self.sink, self.live) = (model, sink, live);
        if let Some(b) = base {
            self.base = b;
        }
        // The layout beside followed the old model's session: it starts again below.
        self.beside = None;
        self.settings = s;
        if !started {
            // Nothing ran yet: the next space prefills the prompt under the new settings.
            if let Err(e) = self.start_beside() {
                self.beside_stopped(&e, send);
            }
            send(Event::Status(
                "settings changed: press space to prefill the prompt".into(),
            ));
            return Ok(());
        }
        let mut report = next_report(
            &mut self.live,
            &self.model,
            self.iteration + 1,
            self.max_new,
            &self.settings,
        )?;
        self.iteration += 1;
        report.recomputed = true;
        // The recomputed position stands even if the comparison cannot follow it.
        report.beside = self.start_beside().unwrap_or_else(|e| {
            self.beside_stopped(&e, send);
            None
        });
        report.settings = self.settings;
        self.keep_last(&mut report);
        send(Event::Report(Box::new(report)));
        Ok(())
    }

    /// The model loaded again with `weights`, where they differ from what runs (`None`
    /// where they do not). What is held stays bounded: the old copy goes once the new one
    /// runs, so at most one f32 copy (540 MB) besides it while switching.
    fn load_weights(
        &self,
        weights: crate::model::Requant,
        send: &dyn Fn(Event),
    ) -> Result<Option<Model>, WorkerError> {
        if weights == self.settings.weights {
            return Ok(None);
        }
        let (path, device) = &self.source;
        send(Event::Status(format!(
            "loading the weights as {}",
            weights.name()
        )));
        let load = LoadOptions {
            requant: weights,
            device: device.clone(),
        };
        let m = Model::load(path, &load).map_err(|err| WorkerError::Load {
            path: path.clone(),
            err,
        })?;
        Ok(Some(m))
    }

    /// The live request again under `model`: the tokens it fed so far, less the one it
    /// sampled last (sampled again under the new model), with its switches as they are.
    fn recomputed_live(&self, model: &Model, settings: &Settings) -> Result<Live, WorkerError> {
        let s = &self.live.session;
        let mut toks = s.tokens.clone();
        if s.step > 0 {
            toks.pop();
        }
        let fed = toks.len() - s.prompt_len;
        let remaining = self.max_new.saturating_sub(fed).max(1);
        let req = settings.request;
        let mut live = start(model, &self.live.prompt, remaining, Some(toks), req.sampler)?;
        live.session.prompt_len = s.prompt_len;
        live.session.probe.lens = settings.watch.lens;
        live.session.recompute = !req.kv_cache;
        Ok(live)
    }

    /// Starts the layout beside again (if the settings name one) on the live request as
    /// it is now; returns its view of the position on screen, when the live request has run.
    /// One that fails to start is stopped (in the settings too).
    fn start_beside(&mut self) -> Result<Option<report::BesideReport>, WorkerError> {
        self.beside = None;
        let Some(layout) = self.settings.request.beside else {
            return Ok(None);
        };
        let run = RunOptions {
            layout,
            ..self.model.run_options()
        };
        // A layout that cannot run beside is no comparison: it ends, and the error says why.
        match Beside::start(&self.base, run, &self.live.session, self.max_new) {
            Ok((b, view)) => {
                self.beside = Some(b);
                Ok(view)
            }
            Err(e) => {
                self.stop_beside();
                Err(e)
            }
        }
    }

    /// Ends the layout beside (it failed): the settings say so too, so reports agree.
    fn stop_beside(&mut self) {
        self.beside = None;
        self.settings.request.beside = None;
    }

    /// Says that the layout beside stopped and why, and tells the app the settings that
    /// now run, so its next change does not start the comparison again.
    fn beside_stopped(&self, e: &WorkerError, send: &dyn Fn(Event)) {
        send(Event::Beside(None));
        send(Event::Status(format!("the layout beside stopped: {e}")));
        send(Event::Settings(self.settings));
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
            return self.step_after_finish(send);
        }
        self.live.session.probe.lens = self.settings.watch.lens;
        let mut report = next_report(
            &mut self.live,
            &self.model,
            self.iteration + 1,
            self.max_new,
            &self.settings,
        )?;
        self.iteration += 1;
        // The live token is already taken: a failing comparison ends, the step stands.
        if let Some(b) = self.beside.as_mut() {
            match b.step(report.info.token_id) {
                Ok(v) => report.beside = Some(v),
                Err(e) => {
                    self.stop_beside();
                    report.settings.request.beside = None;
                    self.beside_stopped(&e, send);
                }
            }
        }
        self.step_serving_and_sink(&mut report)?;
        self.keep_last(&mut report);
        send(Event::Report(Box::new(report)));
        Ok(())
    }

    /// An iteration after the live request has finished: the serving runs and the sink
    /// experiment go on, under the request's last report again (no new attention rows).
    fn step_after_finish(&mut self, send: &dyn Fn(Event)) -> Result<(), WorkerError> {
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
        r.settings = self.settings;
        r.recomputed = false;
        r.repeat = true;
        (r.serve, r.serve_compare, r.sink) = (None, None, None);
        self.step_serving_and_sink(&mut r)?;
        self.iteration += 1;
        send(Event::Report(Box::new(r)));
        Ok(())
    }

    /// The serving workload, its comparison and the sink experiment, one iteration each,
    /// into `report`.
    fn step_serving_and_sink(&mut self, report: &mut StepReport) -> Result<(), WorkerError> {
        report.serve = self.serve.step()?;
        if let Some(c) = self.compare.as_mut() {
            report.serve_compare = c.step()?;
        }
        // A finished experiment keeps its results on screen, as a finished serving run does.
        if let Some(s) = self.sink.as_mut() {
            report.sink = match s.done() {
                true => s.last().cloned(),
                false => Some(s.step(&self.model).map_err(WorkerError::Sink)?),
            };
        }
        Ok(())
    }
}

/// The status line after the serving settings changed.
fn serving_restarted(s: &Settings, chat_rate: f64) -> String {
    let w = match s.serving.workload {
        AppWorkload::Chat if s.serving.burst => {
            "Chat requests arriving a few iterations apart".into()
        }
        AppWorkload::Chat => format!("Chat requests arriving {chat_rate:.1}/s"),
        AppWorkload::Long => "The long story's eight parts as requests".to_string(),
    };
    let chunks = match s.serving.chunked {
        true => format!(
            ", prompts in chunks of {}",
            crate::serve::workload::APP_CHUNK_TOKENS
        ),
        false => String::new(),
    };
    match s.serving.other() {
        Some(o) => format!(
            "serving restarted: {w}, {} beside {} on the same requests{chunks}",
            s.serving.main().describe(),
            o.describe()
        ),
        None => format!(
            "serving workload restarted: {w}, {}{chunks}",
            s.serving.main().describe()
        ),
    }
}

/// The sink experiment's window (tokens) and page size: eight pages of sixteen.
pub const SINK_WINDOW: usize = 128;
const SINK_PAGE: usize = APP_PAGE_SIZE;

pub use crate::serve::workload::{chat_serving, long_parts, APP_PAGE_SIZE};

/// Measures the perplexity `model`'s weights give on the shipped evaluation text (the
/// model as loaded: the trained head layout, as `bench decode` scores it) and sends it;
/// a failure is said, not fatal (nothing else needs the figure).
fn send_perplexity(model: &Model, weights: crate::model::Requant, send: &dyn Fn(Event)) {
    send(Event::Status(format!(
        "scoring the {} weights on the evaluation text (their perplexity)",
        weights.name()
    )));
    let scored = model
        .tokenizer
        .encode(crate::assets::EVAL_TEXT.trim())
        .and_then(|t| crate::model::eval::score(model, weights, &t));
    match scored {
        Ok(s) => send(Event::Scored(s)),
        Err(e) => send(Event::Status(format!(
            "could not score the weights on the evaluation text: {e}"
        ))),
    }
}

/// A fresh sink experiment over the shipped eval text.
fn sink_run(model: &Model) -> Result<SinkRun, WorkerError> {
    let tokens = model.tokenizer.encode(crate::assets::EVAL_TEXT.trim())?;
    SinkRun::new(model, tokens, SINK_WINDOW, SINK_PAGE).map_err(WorkerError::Sink)
}

/// One run of a serving engine: the engine, and what it has done since it started.
struct EngineRun {
    engine: ServeEngine,
    /// The last iteration's view: the running totals the next one adds to, and what is
    /// shown again once the run is done.
    last: Option<ServeReport>,
    /// Requests per second arriving on the engine's clock (0: by iteration).
    rate_per_s: f64,
    /// The layout it runs under where it is not the model's (a run beside).
    layout: Option<crate::model::HeadLayout>,
}

impl EngineRun {
    /// One iteration as the app shows it; once the run is done, its last view again, so
    /// the pane keeps the finished run on screen.
    fn step(&mut self) -> Result<Option<ServeReport>, WorkerError> {
        let e = &mut self.engine;
        if e.done() {
            return Ok(self.last.clone());
        }
        let step = e.step()?;
        let prev = self.last.as_ref();
        let last_copy = step
            .copies
            .last()
            // Iterations are counted from 1 on screen (the summary line, the run before).
            .map(|&(id, from, to)| (step.iteration + 1, id, from, to));
        let view = ServeReport {
            copies_total: prev.map_or(0, |v| v.copies_total) + step.copies.len(),
            last_copy: last_copy.or(prev.and_then(|v| v.last_copy)),
            generated_total: prev.map_or(0, |v| v.generated_total) + step.tokens_generated,
            elapsed_ms: prev.map_or(0.0, |v| v.elapsed_ms) + step.wall_ms,
            policy: e.cfg().policy,
            cache: e.cfg().cache,
            page_size: e.cfg().page_size,
            requests: e.requests().len(),
            max_batch: e.cfg().max_batch,
            latency: crate::serve::latency::Latency::so_far(e.requests(), e.clock_s(), |r| {
                e.has_arrived(r.id)
            }),
            ttft_ms: e
                .requests()
                .iter()
                .filter_map(|r| crate::serve::latency::ttft_s(r).map(|s| (r.id, 1e3 * s)))
                .collect(),
            step,
            preemptions: e.preemptions(),
            done: e.done(),
            rate_per_s: self.rate_per_s,
            layout: self.layout,
        };
        self.last = Some(view.clone());
        Ok(Some(view))
    }
}

/// The serving engines the settings ask for: the main run, and the run beside it.
fn serving_pair(
    model: &Model,
    s: &Settings,
    chat_rate: f64,
) -> Result<(EngineRun, Option<EngineRun>), WorkerError> {
    // A burst: the chat requests a few iterations apart (rate 0), whatever the rate.
    let rate = if s.serving.burst { 0.0 } else { chat_rate };
    let (w, chunked) = ((s.serving.workload, rate), s.serving.chunked);
    let serve = serving(model, s.serving.main(), w, chunked)?;
    let compare = match s.serving.other() {
        Some(o) => Some(serving(model, o, w, chunked)?),
        None => None,
    };
    Ok((serve, compare))
}

/// The same memory in bytes as `tokens` at `from` bytes per token: as many tokens as fit
/// at `to` bytes per token, in whole pages of `page` (at least one).
fn same_bytes(tokens: usize, page: usize, (from, to): (usize, usize)) -> usize {
    let fit = tokens.saturating_mul(from) / to.max(1);
    (fit / page.max(1)).max(1) * page.max(1)
}

/// The app's serving engine over one of its workloads.
fn serving(
    model: &Model,
    run: ServingRun,
    w: (AppWorkload, f64),
    chunked: bool,
) -> Result<EngineRun, WorkerError> {
    let how = (run.policy, run.cache);
    let (mut cfg, reqs) =
        crate::serve::workload::app_serving(model, how, w, run.one_at_a_time, chunked)?;
    // A workload's budget is tokens under the file's own heads: another live layout gets
    // the same bytes (MHA a third of the tokens, MQA three times as many).
    let native =
        crate::model::HeadLayout::Gqa.kv_bytes_per_token(&model.cfg, model.run_options().kv_elem);
    cfg.kv_budget_tokens = same_bytes(
        cfg.kv_budget_tokens,
        cfg.page_size,
        (native, model.kv_bytes_per_token()),
    );
    let timed = reqs.iter().any(|r| r.due_s.is_some());
    let (model, layout) = if run.other_layout {
        let mut opts = model.run_options();
        opts.layout = crate::settings::other_serving_layout(opts.layout);
        let other = model.with_run(opts).map_err(|e| {
            WorkerError::Serve(crate::serve::ServeError::Config(format!(
                "the serving run beside cannot use {}: {e}",
                opts.layout
            )))
        })?;
        let bpt = (model.kv_bytes_per_token(), other.kv_bytes_per_token());
        cfg.kv_budget_tokens = same_bytes(cfg.kv_budget_tokens, cfg.page_size, bpt);
        (other, Some(opts.layout))
    } else {
        (model.clone(), None)
    };
    Ok(EngineRun {
        engine: ServeEngine::new(&model, cfg, reqs)?,
        last: None,
        rate_per_s: if timed { w.1 } else { 0.0 },
        layout,
    })
}
