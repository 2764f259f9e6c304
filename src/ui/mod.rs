//! The terminal app: the UI thread draws plain data and sends commands; the worker thread
//! owns the model.

pub mod app;
pub mod attach;
pub mod draw;
pub mod effect;
pub mod frames;
pub mod keys;
pub mod panes;
pub mod screen_state;
pub mod theme;
pub mod worker_state;

use crate::worker::{self, Command, WorkerConfig};
use app::{App, SPEEDS};
use ratatui::crossterm::event::{
    self, DisableMouseCapture, EnableMouseCapture, Event as TermEvent, KeyEventKind,
};
use ratatui::crossterm::execute;
use ratatui::layout::Rect;
use std::time::{Duration, Instant};

/// Runs the app until the user quits. The terminal is restored on every exit path,
/// panics included.
pub fn run(
    cfg: WorkerConfig,
    tutor: Option<crate::lesson::tutor::Tutor>,
    record: Option<Record>,
    server: Option<attach::Attach>,
) -> std::io::Result<()> {
    let settings = crate::settings::Settings {
        run: cfg.run,
        ..Default::default()
    };
    let (tx, rx) = worker::spawn(cfg);
    let session = Session {
        tutor,
        record,
        server,
        replaying: false,
    };
    with_terminal(|t| event_loop(t, settings, tx, rx, session))
}

/// What a session of the app starts with besides the worker.
struct Session {
    tutor: Option<crate::lesson::tutor::Tutor>,
    record: Option<Record>,
    /// A real server to attach beside our engine.
    server: Option<attach::Attach>,
    replaying: bool,
}

/// Where to record the session, and whether an existing file may be replaced.
#[derive(Debug, Clone)]
pub struct Record {
    pub path: std::path::PathBuf,
    pub force: bool,
    /// The session's own input files (the model), which the recording must never replace.
    pub inputs: Vec<std::path::PathBuf>,
}

impl Record {
    /// The rules the recording is written under.
    pub fn rules(&self) -> crate::files::WriteRules<'_> {
        crate::files::WriteRules {
            force: self.force,
            inputs: &self.inputs,
        }
    }
}

/// Opens a recording: the same screens, driven by the recorded iterations.
pub fn replay(rec: worker::recording::Recording) -> std::io::Result<()> {
    let settings = rec.reports[0].settings;
    let (tx, rx) = worker::recording::spawn_player(rec);
    let session = Session {
        tutor: None,
        record: None,
        server: None,
        replaying: true,
    };
    with_terminal(|t| event_loop(t, settings, tx, rx, session))
}

/// Whether the app has the terminal in raw mode, alternate screen and mouse capture.
static TERMINAL_TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Gives the terminal back (mouse, raw mode, alternate screen) if the app holds it. For
/// exits that bypass the app's own path: SIGTERM or SIGHUP handled in `main`.
pub fn restore_terminal() {
    if TERMINAL_TAKEN.swap(false, std::sync::atomic::Ordering::SeqCst) {
        let _ = execute!(std::io::stdout(), DisableMouseCapture);
        ratatui::restore();
    }
}

/// Runs `f` with the terminal taken (raw mode, alternate screen, mouse), giving it back
/// on every exit, panics of this thread included.
pub(crate) fn with_terminal(
    f: impl FnOnce(&mut ratatui::DefaultTerminal) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut terminal = ratatui::try_init()?;
    TERMINAL_TAKEN.store(true, std::sync::atomic::Ordering::SeqCst);
    execute!(std::io::stdout(), EnableMouseCapture)?;
    // ratatui's hook restores the screen; ours also gives the mouse back first.
    let prev = std::panic::take_hook();
    // Only a panic of this (the UI) thread ends the app. Panics hooks run before any
    // unwinding, also for a panic the worker thread then catches and reports on screen
    // (`Event::Died`): restoring the terminal for those would pull the screen away.
    let ui_thread = std::thread::current().id();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() == ui_thread {
            restore_terminal();
            prev(info);
        }
    }));
    let result = f(&mut terminal);
    restore_terminal();
    result
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    settings: crate::settings::Settings,
    tx: std::sync::mpsc::Sender<Command>,
    rx: std::sync::mpsc::Receiver<worker::Event>,
    session: Session,
) -> std::io::Result<()> {
    let Session {
        tutor,
        record,
        server,
        replaying,
    } = session;
    let mut app = App::new(settings.run);
    app.settings = settings;
    app.worker.replaying = replaying;
    app.screen.auto_head = !replaying;
    let mut recorder: Option<worker::recording::BackgroundRecorder> = None;
    let send = |cmds: Vec<Command>| {
        for c in cmds {
            let _ = tx.send(c);
        }
    };
    let feed = server.map(|s| {
        let (feed, view) = attach::Feed::start(s);
        app.attach(view);
        feed
    });
    if let Some(t) = tutor {
        send(app.open_lesson(t));
    }
    perform_writes(&mut app);
    let looped = frames(
        terminal,
        &mut app,
        (&rx, feed.as_ref()),
        (record.as_ref(), &mut recorder),
        &send,
    );
    // What the last keys asked for (the progress of a step left just before quitting, or
    // before the terminal failed).
    perform_writes(&mut app);
    let _ = tx.send(Command::Quit);
    looped?;
    if let Some(Err(e)) = recorder.map(|r| r.finish()) {
        app.worker.alarm = Some(format!("recording failed: {e}"));
    }
    // A model that failed to load, or a recording that stopped, was shown in the app;
    // the exit status and stderr say so too.
    match app.worker.fatal.or(app.worker.alarm) {
        Some(e) => Err(std::io::Error::other(e)),
        None => Ok(()),
    }
}

/// Frames until the user quits: the worker's events and the commands they call for, the
/// app's file writes, a redraw when anything changed, then the terminal's events.
fn frames(
    terminal: &mut ratatui::DefaultTerminal,
    app: &mut App,
    (rx, feed): (
        &std::sync::mpsc::Receiver<worker::Event>,
        Option<&attach::Feed>,
    ),
    (record, recorder): (
        Option<&Record>,
        &mut Option<worker::recording::BackgroundRecorder>,
    ),
    send: &dyn Fn(Vec<Command>),
) -> std::io::Result<()> {
    let theme = theme::Theme::detect();
    let mut loop_state = LoopState::new();
    let frame = Duration::from_millis(33);
    let mut dirty = true;
    while !app.quit {
        // Engine events: every report is absorbed (the heatmap history needs them all),
        // but the screen is drawn once per frame.
        let replaying = app.worker.replaying;
        dirty |= absorb_events(app, rx, record, recorder, replaying)?;
        // The attached server's newest poll, which may grade a prediction about it.
        if let (Some(f), Some(v)) = (feed, app.attached.as_mut()) {
            if f.absorb(v) {
                app.server_polled();
                dirty = true;
            }
        }
        send(loop_state.worker_commands(app));
        // The files the app asked for (the lesson progress after a report), before the
        // frame that says how they went.
        perform_writes(app);
        if dirty {
            // A verdict given by a key or graded by a report: scrolled into view first.
            let size = terminal.size()?;
            draw::reveal_verdict(Rect::new(0, 0, size.width, size.height), app);
            terminal.draw(|f| draw::draw(app, &theme, f.area(), f.buffer_mut()))?;
            dirty = false;
        }
        if event::poll(frame)? {
            loop_state.terminal_events(terminal, app, send)?;
            dirty = true;
        }
    }
    Ok(())
}

/// Carries out every file write `app` has queued, in order, and tells the app how each
/// went.
pub fn perform_writes(app: &mut App) {
    use effect::{FileWrite, Written};
    for w in app.take_writes() {
        let outcome = match w {
            FileWrite::ExportFocused => match panes::export_of(app, app.screen.focus) {
                Some(pane) => {
                    Written::Exported(pane, crate::export::write_fresh(&app.scene(), pane))
                }
                None => Written::NoPicture,
            },
            FileWrite::SaveProgress(p) => Written::ProgressSaved(p.save()),
        };
        app.written(outcome);
    }
}

/// What the event loop remembers between frames: when the last iteration was asked
/// for, and the last title clicked.
struct LoopState {
    last_step: Instant,
    /// The last title clicked and when: a second click soon after is a double click.
    last_click: Option<(app::Pane, Instant)>,
}

impl LoopState {
    fn new() -> Self {
        Self {
            last_step: Instant::now() - Duration::from_secs(10),
            last_click: None,
        }
    }

    /// What the worker must hear before the next frame: the layer on screen, whether
    /// the lens is shown, and, while running, the next iteration when its time has come.
    fn worker_commands(&mut self, app: &mut App) -> Vec<Command> {
        // The worker keeps long contexts' captures to the layer on screen, and runs the
        // lens (an LM head pass per layer) only while it is shown.
        let mut out: Vec<Command> = app.watch_command().into_iter().collect();
        if app.worker.steps_queued > 0 && !app.worker.in_flight {
            app.worker.steps_queued -= 1;
            out.extend(app.request_step());
        }
        if app.worker.running && !app.worker.in_flight {
            let speed = SPEEDS[app.worker.speed];
            if speed == 0.0 || self.last_step.elapsed().as_secs_f64() >= 1.0 / speed {
                let c = app.request_step();
                if c.is_some() {
                    self.last_step = Instant::now();
                }
                out.extend(c);
            }
        }
        out
    }

    /// Reads a burst of terminal events (resize storms, key repeat) before the next
    /// redraw. Keys, typed text and the mouse all become actions, and only actions
    /// change the app; their commands go out as they come.
    fn terminal_events(
        &mut self,
        terminal: &ratatui::DefaultTerminal,
        app: &mut App,
        send: &dyn Fn(Vec<Command>),
    ) -> std::io::Result<()> {
        loop {
            let size = terminal.size()?;
            let screen = ratatui::layout::Rect::new(0, 0, size.width, size.height);
            let action = match event::read()? {
                TermEvent::Key(k) if k.kind == KeyEventKind::Press => {
                    keys::action_for(k, app.input.is_some())
                }
                TermEvent::Mouse(m) => {
                    double_click(draw::mouse_action(m, screen, app), &mut self.last_click)
                }
                _ => None,
            };
            if let Some(a) = action {
                let scrolled = matches!(a, app::Action::ScrollLesson(_));
                let cmds = app.update(a);
                if scrolled {
                    draw::clamp_lesson_scroll(screen, app);
                }
                if cmds.iter().any(|c| matches!(c, Command::Step)) {
                    self.last_step = Instant::now();
                }
                send(cmds);
                // At once: a picture shows the frame the key was pressed on, before a
                // later key or report moves it.
                perform_writes(app);
            }
            if !event::poll(Duration::ZERO)? {
                return Ok(());
            }
        }
    }
}

/// A click on a title that follows one on the same title within 400 ms zooms that pane.
fn double_click(
    a: Option<app::Action>,
    last: &mut Option<(app::Pane, Instant)>,
) -> Option<app::Action> {
    let Some(app::Action::Set(app::Setting::Focus(p))) = a else {
        return a;
    };
    let double = last.is_some_and(|(q, t)| q == p && t.elapsed() < Duration::from_millis(400));
    *last = (!double).then(|| (p, Instant::now()));
    Some(if double {
        app::Action::ZoomPane(p)
    } else {
        app::Action::Set(app::Setting::Focus(p))
    })
}

/// Takes every event the worker has sent; true when any arrived. Reports also go to the
/// recording, when one is being made.
fn absorb_events(
    app: &mut App,
    rx: &std::sync::mpsc::Receiver<worker::Event>,
    record: Option<&Record>,
    recorder: &mut Option<worker::recording::BackgroundRecorder>,
    replaying: bool,
) -> std::io::Result<bool> {
    let mut any = false;
    // The writer fails on its own thread, between events: looked at every frame.
    if let Some(err) = recorder.as_ref().and_then(|r| r.error()) {
        // Kept in the header until the app exits, and printed then.
        app.worker.alarm = Some(format!("recording stopped: {err}"));
        app.status = app.worker.alarm.clone().unwrap_or_default();
        *recorder = None;
        any = true;
    }
    loop {
        let e = match rx.try_recv() {
            Ok(e) => e,
            Err(std::sync::mpsc::TryRecvError::Empty) => return Ok(any),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                // The worker is gone without a word (it sends `Died` when it can).
                if app.worker.fatal.is_none() && !replaying {
                    app.on_event(worker::Event::Died("it exited without a message".into()));
                    any = true;
                }
                return Ok(any);
            }
        };
        if let (Some(rec), worker::Event::Ready { model }) = (record, &e) {
            let r = worker::recording::Recorder::create(&rec.path, model, rec.rules())
                .map_err(std::io::Error::other)?;
            *recorder = Some(worker::recording::BackgroundRecorder::spawn(r));
        }
        if let (Some(rec), worker::Event::Report(r)) = (recorder.as_ref(), &e) {
            rec.write(r, app.screen.layer);
        }
        app.on_event(e);
        any = true;
    }
}
