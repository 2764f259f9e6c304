//! `inferlab lessons` (list or check) and `inferlab lesson N` (open the app at a lesson).

use anyhow::{bail, Context, Result};
use inferlab::lesson::{self, progress::Progress};
use std::path::PathBuf;

/// Flags of `inferlab lessons`.
#[derive(clap::Args)]
pub struct ListArgs {
    /// Validate every lesson (keys, settings, panes, questions) and report file:line errors.
    #[arg(long)]
    pub check: bool,
    /// Read lessons from this directory instead of the ones built in (also $INFERLAB_LESSONS).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print one JSON object (the lessons with progress, or the check's findings).
    #[arg(long)]
    pub json: bool,
}

/// Flags of `inferlab lesson`.
#[derive(clap::Args)]
pub struct OpenArgs {
    #[command(flatten)]
    pub app: super::AppArgs,
    /// Lesson number as `inferlab lessons` lists it (1-based).
    pub number: usize,
    /// Start at this step (1-based) instead of where you left off.
    #[arg(long)]
    pub step: Option<usize>,
    /// Read lessons from this directory instead of the ones built in (also $INFERLAB_LESSONS).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Lists or checks the lessons.
pub fn list(a: &ListArgs) -> Result<()> {
    let src = lesson::source(a.dir.as_deref());
    let (lessons, errors) = lesson::load(&src)?;
    if a.json {
        return list_json(a, &lessons, &errors);
    }
    if a.check {
        return check(&lessons, &errors);
    }
    let loaded = Progress::load();
    if let Some(n) = &loaded.notice {
        eprintln!("inferlab: {}", inferlab::files::printable_text(n));
    }
    let progress = loaded.progress;
    let title_w = lessons
        .iter()
        .map(|l| l.title.chars().count())
        .max()
        .unwrap_or(0);
    for (i, l) in lessons.iter().enumerate() {
        let done = progress
            .lessons
            .get(l.id())
            .map(|p| p.done_of(l.steps.len()))
            .unwrap_or(0);
        println!(
            "{:>2}. {:<title_w$}  {done}/{} steps done",
            i + 1,
            l.title,
            l.steps.len()
        );
    }
    if !errors.is_empty() {
        // Each problem by file and line; the listing above still shows every good lesson.
        for e in &errors {
            eprintln!("{}", inferlab::files::printable_text(&e.to_string()));
        }
        let files: std::collections::BTreeSet<&str> =
            errors.iter().map(|e| e.file.as_str()).collect();
        let dir = a
            .dir
            .as_ref()
            .map(|d| format!(" --dir {}", d.display()))
            .unwrap_or_default();
        eprintln!(
            "{} problem(s) in {} lesson file(s) not listed; `inferlab lessons --check{dir}` checks them all",
            errors.len(),
            files.len()
        );
    }
    println!("\nOpen one with `inferlab lesson N`.");
    Ok(())
}

/// `lessons --check`: every problem by file and line and a failing exit, or the quiz's
/// figures when all are valid.
fn check(lessons: &[lesson::Lesson], errors: &[lesson::LessonError]) -> Result<()> {
    for e in errors {
        eprintln!("{}", inferlab::files::printable_text(&e.to_string()));
    }
    if !errors.is_empty() {
        bail!("{} problem(s) in the lessons", errors.len());
    }
    let q = lesson::quiz::stats(lessons);
    println!(
        "{} lessons, {} steps, {} questions and {} predictions: all valid\n\
         fewest choices in a question: {} · the right answer is the longest choice in {} of {} ({:.0}%), the shortest in {} ({:.0}%) · right answers at keys 1, 2, …: {:?} · live figures quoted: {}",
        q.lessons,
        q.steps,
        q.questions,
        q.predictions,
        q.min_choices,
        q.right_is_longest,
        q.questions,
        q.longest_pct(),
        q.right_is_shortest,
        q.shortest_pct(),
        q.right_at,
        q.live_figures
    );
    Ok(())
}

/// Opens the app at lesson `number`.
pub fn open(a: &OpenArgs) -> Result<()> {
    let tutor = tutor_for(a.number, a.step, a.dir.as_deref())?;
    super::app::run_with(&a.app, Some(tutor), None, None).context("running the lesson")
}

/// The tutor at lesson `number` (1-based), at `step` (1-based) or where the user left it.
pub fn tutor_for(
    number: usize,
    step: Option<usize>,
    dir: Option<&std::path::Path>,
) -> Result<inferlab::lesson::tutor::Tutor> {
    let src = lesson::source(dir);
    let (lessons, errors) = lesson::load(&src)?;
    if !errors.is_empty() {
        for e in &errors {
            eprintln!("{}", inferlab::files::printable_text(&e.to_string()));
        }
        bail!("fix the lessons first ({} problem(s))", errors.len());
    }
    if number == 0 || number > lessons.len() {
        bail!(
            "there is no lesson {number} (there are {}; `inferlab lessons` lists them)",
            lessons.len()
        );
    }
    let loaded = Progress::load();
    let mut progress = loaded.progress;
    let l = &lessons[number - 1];
    if let Some(s) = step {
        if s == 0 || s > l.steps.len() {
            bail!("lesson {number} has steps 1 to {}", l.steps.len());
        }
        progress.of(l.id()).step = s - 1;
    }
    let mut tutor =
        inferlab::lesson::tutor::Tutor::new(lessons, number - 1, progress, loaded.may_save);
    tutor.notice = loaded.notice;
    Ok(tutor)
}

/// `lessons --json` and `lessons --check --json`: one object, problems included (a check
/// that finds some still exits non-zero).
fn list_json(
    a: &ListArgs,
    lessons: &[lesson::Lesson],
    errors: &[lesson::LessonError],
) -> Result<()> {
    let progress = Progress::load().progress;
    let problems: Vec<_> = errors
        .iter()
        .map(|e| serde_json::json!({"file": e.file, "line": e.line, "message": e.message}))
        .collect();
    let list: Vec<_> = lessons
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let p = progress.lessons.get(l.id());
            serde_json::json!({
                "number": i + 1,
                "id": l.id(),
                "title": l.title,
                "steps": l.steps.len(),
                "questions": l.steps.iter().map(|s| s.questions.len()).sum::<usize>(),
                "done_steps": p.map(|p| p.done_of(l.steps.len())).unwrap_or(0),
            })
        })
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "valid": errors.is_empty(),
            "lessons": list,
            "problems": problems,
            "quiz": lesson::quiz::stats(lessons),
        })
    );
    if a.check && !errors.is_empty() {
        bail!("{} problem(s) in the lessons", errors.len());
    }
    Ok(())
}
