//! The `inferlab` command line: wiring only; the work lives in `commands/` and the library.

mod commands;

use clap::{Parser, Subcommand};

/// A terminal lab that runs a real small transformer one decode iteration at a time.
#[derive(Parser)]
// The app's flags belong to the app: a subcommand takes its own (`inferlab generate
// --layout mha`), and one put before it is refused rather than silently ignored.
#[command(name = "inferlab", version, about, long_about = None, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(flatten)]
    app: commands::AppArgs,
    /// Write every iteration of the app session to FILE (JSON lines; `inferlab replay FILE`).
    #[arg(long, value_name = "FILE")]
    record: Option<std::path::PathBuf>,
    /// Let --record replace an existing file (without it, an existing file is kept).
    #[arg(long, requires = "record")]
    force: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text from a prompt, streaming tokens as they are produced.
    Generate(commands::generate::Args),
    /// Write one JSON object per step (tokens, top-k, attention) for notebooks.
    Trace(commands::trace::Args),
    /// Fetch the model, describe it, or tokenize text with it.
    Model {
        #[command(subcommand)]
        cmd: commands::model_cmd::Cmd,
    },
    /// How many requests' KV caches fit in a memory size, for MHA/GQA/MQA of a model's shape.
    Budget(commands::budget::Args),
    /// List the guided lessons (or validate them with --check).
    Lessons(commands::lessons::ListArgs),
    /// Open the app at lesson N, beside the live panes.
    Lesson(commands::lessons::OpenArgs),
    /// Replay a recording made with --record: the same screens, no model needed.
    Replay {
        /// The recording file.
        file: std::path::PathBuf,
    },
    /// Write a picture (SVG or PNG) of one pane at one iteration of a recording.
    Export(commands::export::Args),
    /// Attach to a running llama.cpp, vLLM or SGLang server: its serving figures in the
    /// app's words, and optionally our seeded load sent to it.
    Attach(commands::attach::Args),
    /// Measure speed side by side.
    Bench {
        #[command(subcommand)]
        cmd: commands::bench_cmd::Cmd,
    },
}

/// Ctrl-C outside the app's raw mode (a fetch, a bench, generate), or SIGTERM / SIGHUP
/// anywhere: stop a model fetch cleanly (pip killed, temp files removed) and give the
/// terminal back before exiting as interrupted.
fn on_interrupt() {
    inferlab::model::source::abort_fetch();
    // A recording in progress goes under its name, as a normal exit would put it.
    inferlab::files::commit_pending();
    // Restoring writes to the terminal, which after a hang-up may be gone or stuck:
    // give it a moment, then leave regardless (`_exit` takes no locks).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        inferlab::ui::restore_terminal();
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(std::time::Duration::from_millis(300));
    // SAFETY: ends the process at once; nothing after this runs.
    unsafe { libc::_exit(130) }
}

/// Signal dispositions, set before any thread starts.
fn set_signals(prints: bool) {
    // Commands that print: a closed pipe (`inferlab trace | head`) ends the process
    // quietly, as it does for Unix tools, instead of a panic inside `println!`.
    #[cfg(unix)]
    if prints {
        // SAFETY: restoring a signal's default disposition, before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // A file-size limit (`ulimit -f`) is a write error like a full disk (EFBIG), said and
    // survived, not a signal that kills the app with the terminal still taken.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to ignore, before any thread starts.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    #[cfg(not(unix))]
    let _ = prints;
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    set_signals(cli.command.is_some());
    let _ = ctrlc::set_handler(on_interrupt);
    let result = match cli.command {
        None => commands::app::run(
            &cli.app,
            cli.record.map(|path| inferlab::ui::Record {
                path,
                force: cli.force,
                inputs: inferlab::model::source::possible_inputs(
                    cli.app.model.source.model.as_deref(),
                ),
            }),
        ),
        Some(Cmd::Replay { file }) => commands::app::replay(&file),
        Some(Cmd::Export(a)) => commands::export::run(&a),
        Some(Cmd::Generate(a)) => commands::generate::run(&a),
        Some(Cmd::Trace(a)) => commands::trace::run(&a),
        Some(Cmd::Model { cmd }) => commands::model_cmd::run(&cmd),
        Some(Cmd::Budget(a)) => commands::budget::run(&a),
        Some(Cmd::Lessons(a)) => commands::lessons::list(&a),
        Some(Cmd::Lesson(a)) => commands::lessons::open(&a),
        Some(Cmd::Bench { cmd }) => commands::bench_cmd::run(&cmd),
        Some(Cmd::Attach(a)) => commands::attach::run(&a),
    };
    // Quitting the app while it still fetches the model leaves no pip or temp files.
    inferlab::model::source::abort_fetch();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // A reader that went away (`inferlab trace | head`) is not an error: stop quietly,
        // as Unix tools do.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            // Paths and file contents reach the message: neutralised as the screen is.
            eprintln!(
                "error: {}",
                inferlab::files::printable_text(&format!("{e:#}"))
            );
            std::process::ExitCode::FAILURE
        }
    }
}
