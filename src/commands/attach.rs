//! `inferlab attach URL`: a running llama.cpp, vLLM or SGLang server's serving figures in
//! the app's words, and optionally our seeded load sent to it.

use super::SourceArgs;
use anyhow::{Context, Result};
use inferlab::attach::http::Base;
use inferlab::attach::{load, poll, LoadSummary, Summary};
use inferlab::serve::Request;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// `attach`'s options.
#[derive(clap::Args)]
pub struct Args {
    /// The server's base URL, e.g. http://127.0.0.1:8080 (requests go there and nowhere else).
    url: String,
    /// Send the chat workload's prompts at this many requests per second (seeded Poisson
    /// arrivals, streamed completions, greedy, each as long as ours), timing every token.
    #[arg(long, value_parser = super::bench_cmd::rate)]
    rate: Option<f64>,
    /// Requests that --rate sends.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    requests: u64,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// No screen: poll (and send the load) then print what was seen.
    #[arg(long)]
    headless: bool,
    /// With --headless: stop after this many seconds (default: when the load is done, or 5 s).
    #[arg(long, value_parser = seconds)]
    seconds: Option<f64>,
    /// With --headless: print one JSON object (snake_case keys) instead of lines for people.
    #[arg(long)]
    json: bool,
    /// Open lesson N (as `inferlab lessons` lists it) beside the panes; lesson 11 is
    /// about a real server.
    #[arg(long, value_name = "N")]
    lesson: Option<usize>,
    /// The app (our own engine beside the server), and the model whose tokenizer writes
    /// the prompts (the model the server runs, for real text).
    #[command(flatten)]
    app: super::AppArgs,
}

/// A duration in seconds: above 0 and at most a day (a time a `Duration` can hold).
fn seconds(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 86_400.0 => Ok(x),
        Ok(_) => Err("seconds above 0 and at most 86400 (a day)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `attach`.
pub fn run(a: &Args) -> Result<()> {
    let base = Base::parse(&a.url)?;
    let plan = match a.rate {
        Some(rate) => Some((
            requests(&a.app.model.source, rate, a.requests as usize, a.seed)?,
            rate,
        )),
        None => None,
    };
    if a.headless {
        anyhow::ensure!(
            a.lesson.is_none(),
            "--lesson opens the app: leave out --headless"
        );
        return headless(base, plan, a.seconds, a.json);
    }
    anyhow::ensure!(
        a.seconds.is_none() && !a.json,
        "--seconds and --json go with --headless"
    );
    let tutor = match a.lesson {
        Some(n) => Some(super::lessons::tutor_for(n, None, None)?),
        None => None,
    };
    let server = inferlab::ui::attach::Attach { base, plan };
    super::app::run_with(&a.app, tutor, None, Some(server)).context("running the app attached")
}

/// The chat workload's requests at `rate`: the same seeded lengths and prompts `bench
/// serve`'s chat mix uses, tokenized by the model's own tokenizer.
fn requests(source: &SourceArgs, rate: f64, n: usize, seed: u64) -> Result<Vec<Request>> {
    let (path, _) = super::model_path(source)?;
    let tok = inferlab::model::TextTokenizer::of_model(&path)
        .with_context(|| format!("reading the tokenizer of {}", path.display()))?;
    let src = inferlab::serve::workload::source_tokens(&tok);
    Ok(inferlab::bench::arrivals::chat_requests(
        &src, rate, n, seed,
    ))
}

/// Polls (and sends the load) without a screen, then prints the summary.
fn headless(
    base: Base,
    plan: Option<(Vec<Request>, f64)>,
    seconds: Option<f64>,
    json: bool,
) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let (stx, srx) = mpsc::channel();
    let poller = poll::spawn(base.clone(), Duration::from_millis(250), stop.clone(), stx);
    let (ltx, lrx) = mpsc::channel();
    let planned = plan.as_ref().map(|(r, _)| r.len());
    if let Some((reqs, _)) = plan {
        load::spawn(base.clone(), reqs, stop.clone(), ltx);
    }
    let limit =
        Duration::from_secs_f64(seconds.unwrap_or(if planned.is_some() { 600.0 } else { 5.0 }));
    let (start, mut outcomes, mut last) = (Instant::now(), Vec::new(), None);
    while start.elapsed() < limit {
        outcomes.extend(lrx.try_iter());
        last = srx.try_iter().last().or(last);
        if planned.is_some_and(|n| outcomes.len() >= n) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // One more poll after the last request, so the counters include it (and, where no
    // poll has finished yet, the first one's answer or its 3 s deadline).
    let after = start.elapsed();
    let wait = |last: &Option<poll::Snapshot>| match last {
        Some(_) => Duration::from_secs(2),
        None => Duration::from_secs(5),
    };
    while start.elapsed() < after + wait(&last) {
        if let Some(s) = srx.try_iter().last() {
            last = Some(s.clone());
            if s.since.seconds > after.as_secs_f64() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = poller.join();
    let snap = last.context("no poll finished")?;
    let s = Summary::of(&snap, planned.map(|n| LoadSummary::of(n, &outcomes)));
    if json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        print!("{}", summary_lines(&s, &snap));
    }
    anyhow::ensure!(
        snap.server.is_some(),
        "{} never answered /metrics: {:?}",
        base.as_str(),
        snap.link
    );
    Ok(())
}

/// The summary for people.
fn summary_lines(s: &Summary, snap: &poll::Snapshot) -> String {
    let mut out = format!(
        "{} at {} ({}): {} polls over {:.1} s\n",
        s.server,
        s.url,
        s.version.as_deref().unwrap_or("no version given"),
        s.polls,
        s.seconds
    );
    if let (Some(g), Some(m)) = (s.generated_tokens, s.generated_tokens_metric) {
        out += &format!("generated tokens since attach: {g:.0} ({m})\n");
    }
    out += &format!(
        "peak running {:.0}, peak waiting {:.0}, peak batch per decode step {:.1}\n",
        s.peak_running, s.peak_waiting, s.peak_batch
    );
    if let Some(l) = &s.load {
        out += &format!(
            "our load: {}/{} done, {} failed, {} tokens streamed; TTFT p50 {:.0} ms p99 {:.0} ms; ITL p50 {:.1} ms p99 {:.1} ms\n",
            l.done, l.planned, l.failed, l.generated_tokens,
            l.latency.ttft_ms_p50, l.latency.ttft_ms_p99, l.latency.itl_ms_p50, l.latency.itl_ms_p99
        );
    }
    if let poll::Link::Down { why, tries } = &snap.link {
        out += &format!("the last {tries} polls failed: {why}\n");
    }
    out
}
