//! The collector thread: polls a server's `/metrics` (and llama.cpp's `/slots`) a few
//! times a second and sends the UI one plain [`Snapshot`] per poll. Counters become rates
//! here, between two polls; histograms are read since the attach began, so a p99 is this
//! session's, not the server's whole life's.

use super::engines::{Gauges, HistReading, Reading, Server};
use super::http::{self, Base, NetError};
use super::prom;
use super::slots::{self, ActiveSet, Slot};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest `/metrics` or `/slots` body read, and most samples kept from it.
pub const MAX_BODY: usize = 8 << 20;
pub const MAX_SAMPLES: usize = 200_000;
/// Points of history kept: a minute at four polls a second.
pub const HISTORY: usize = 240;

/// One poll's figures, for the timeline.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Point {
    /// Seconds since the attach began.
    pub t_s: f64,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    /// Requests per decode call over the last interval (llama.cpp: busy slots; vLLM: tokens
    /// per engine step, prompt tokens included).
    pub batch: Option<f64>,
    /// Decode calls over the last interval (llama.cpp), which weigh its batch in a mean.
    pub calls: Option<f64>,
    /// Generated tokens per second over the last [`RATE_WINDOW_S`] (llama.cpp counts a
    /// request's tokens when it finishes, so one interval alone jumps between 0 and bursts).
    pub tok_per_s: Option<f64>,
    /// The server's generated-token counter at this poll.
    pub generated: Option<f64>,
}

/// Seconds of polls the token rate is taken over.
pub const RATE_WINDOW_S: f64 = 5.0;

/// Whether the last poll got an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    Connecting,
    Up,
    /// The last polls failed: why, and how many in a row.
    Down {
        why: String,
        tries: usize,
    },
}

/// Everything the attach screen draws, as of one poll.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub url: String,
    pub server: Option<Server>,
    /// What the server says of its version, where it says (llama.cpp `/props` build_info,
    /// vLLM `/version`).
    pub version: Option<String>,
    pub link: Link,
    pub polls: usize,
    pub gauges: Option<Gauges>,
    pub history: Vec<Point>,
    /// Counted since the attach began.
    pub since: Since,
    /// Each slot as the last `/slots` gave it (llama.cpp).
    pub slots: Vec<Slot>,
    /// The requests holding a slot at each poll, as our timeline draws an active set.
    pub active: ActiveSet,
    /// Lines of the last `/metrics` that were not samples, and whether it was cut short.
    pub skipped_lines: usize,
    pub truncated: bool,
}

/// Counters and histograms since the attach began.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Since {
    pub seconds: f64,
    pub generated: Option<Reading>,
    pub prompt: Option<Reading>,
    pub decode_calls: Option<Reading>,
    pub preemptions: Option<Reading>,
    pub ttft: Option<HistReading>,
    pub itl: Option<HistReading>,
}

/// What the poller remembers between polls.
#[derive(Debug, Clone)]
pub struct Poller {
    pub snap: Snapshot,
    first: Option<(f64, Gauges)>,
    last: Option<(f64, Gauges)>,
}

impl Poller {
    /// A poller for `url` that has not polled yet.
    pub fn new(url: &str) -> Self {
        Self {
            snap: Snapshot {
                url: url.to_string(),
                server: None,
                version: None,
                link: Link::Connecting,
                polls: 0,
                gauges: None,
                history: Vec::new(),
                since: Since::default(),
                slots: Vec::new(),
                active: ActiveSet::default(),
                skipped_lines: 0,
                truncated: false,
            },
            first: None,
            last: None,
        }
    }

    /// A poll that failed.
    pub fn failed(&mut self, e: &NetError) {
        let tries = match &self.snap.link {
            Link::Down { tries, .. } => tries + 1,
            _ => 1,
        };
        self.snap.link = Link::Down {
            why: e.to_string(),
            tries,
        };
        self.snap.polls += 1;
    }

    /// A poll that read `metrics` at `t_s` seconds since the attach began.
    pub fn read(&mut self, t_s: f64, metrics: &str) {
        let e = prom::parse(metrics, MAX_SAMPLES);
        let g = Gauges::read(&e);
        let first = self.first.get_or_insert_with(|| (t_s, g.clone())).clone();
        let mut point = Point {
            t_s,
            running: g.running.map(|r| r.value),
            waiting: g.waiting.map(|r| r.value),
            generated: g.generated_total.map(|r| r.value),
            ..self
                .last
                .as_ref()
                .map(|l| batch(l, (t_s, &g)))
                .unwrap_or_default()
        };
        point.tok_per_s = token_rate(&self.snap.history, &point);
        self.snap.history.push(point);
        let over = self.snap.history.len().saturating_sub(HISTORY);
        self.snap.history.drain(..over);
        self.snap.since = since(&first, (t_s, &g));
        (self.snap.skipped_lines, self.snap.truncated) = (e.skipped_count, e.truncated);
        self.snap.server = Some(g.server);
        self.snap.link = Link::Up;
        self.snap.polls += 1;
        self.snap.gauges = Some(g.clone());
        self.last = Some((t_s, g));
    }

    /// The slots read after this poll's metrics.
    pub fn read_slots(&mut self, slots: Vec<Slot>) {
        self.snap.active.push(&slots, HISTORY);
        self.snap.slots = slots;
    }
}

/// Generated tokens per second from the oldest poll within [`RATE_WINDOW_S`] of `now`.
fn token_rate(history: &[Point], now: &Point) -> Option<f64> {
    let then = history
        .iter()
        .find(|p| p.t_s >= now.t_s - RATE_WINDOW_S && p.generated.is_some())?;
    let dt = now.t_s - then.t_s;
    (dt > 0.0).then_some(((now.generated? - then.generated?).max(0.0)) / dt)
}

/// The batch per decode step between the last poll and this one.
fn batch((_, a): &(f64, Gauges), (t1, b): (f64, &Gauges)) -> Point {
    let delta = |x: Option<Reading>, y: Option<Reading>| Some(y?.value - x?.value);
    // llama.cpp's average since start, times its calls, is the busy slots summed over
    // every call: their difference over the calls between two polls is this interval's.
    let busy = |g: &Gauges| Some(g.busy_per_decode_avg?.value * g.decode_calls_total?.value);
    let calls = delta(a.decode_calls_total, b.decode_calls_total);
    let batch = match (busy(a), busy(b), calls) {
        (Some(x), Some(y), Some(n)) if n > 0.0 => Some((y - x) / n),
        _ => match (&a.step_tokens, &b.step_tokens) {
            (Some(x), Some(y)) => y.hist.since(&x.hist).and_then(|d| d.mean()),
            _ => None,
        },
    };
    Point {
        t_s: t1,
        batch,
        calls,
        ..Default::default()
    }
}

/// Counters and histograms between the first poll and this one.
fn since((t0, a): &(f64, Gauges), (t1, b): (f64, &Gauges)) -> Since {
    let delta = |x: Option<Reading>, y: Option<Reading>| {
        let (x, y) = (x?, y?);
        Some(Reading {
            value: (y.value - x.value).max(0.0),
            metric: y.metric,
        })
    };
    let hist = |x: &Option<HistReading>, y: &Option<HistReading>| {
        let (x, y) = (x.as_ref()?, y.as_ref()?);
        Some(HistReading {
            hist: y.hist.since(&x.hist)?,
            metric: y.metric,
        })
    };
    Since {
        seconds: t1 - t0,
        generated: delta(a.generated_total, b.generated_total),
        prompt: delta(a.prompt_total, b.prompt_total),
        decode_calls: delta(a.decode_calls_total, b.decode_calls_total),
        preemptions: delta(a.preemptions_total, b.preemptions_total),
        ttft: hist(&a.ttft, &b.ttft),
        itl: hist(&a.itl, &b.itl),
    }
}

/// The server's version in its own words, where it gives one.
fn version(agent: &ureq::Agent, base: &Base) -> Option<String> {
    let props = http::get_text(agent, &base.at("/props"), 1 << 20).ok();
    let from_props = props
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["build_info"].as_str().map(|s| format!("build {s}")));
    from_props.or_else(|| {
        let t = http::get_text(agent, &base.at("/version"), 1 << 20).ok()?;
        let v: serde_json::Value = serde_json::from_str(&t).ok()?;
        v["version"].as_str().map(str::to_string)
    })
}

/// Polls `base` every `every` until `stop`, sending a snapshot after each poll; the
/// thread ends when the receiver is gone.
pub fn spawn(
    base: Base,
    every: Duration,
    stop: Arc<AtomicBool>,
    tx: Sender<Snapshot>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let agent = http::agent(Duration::from_secs(3));
        let mut p = Poller::new(base.as_str());
        let start = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let tick = Instant::now();
            match http::get_text(&agent, &base.at("/metrics"), MAX_BODY) {
                Ok(text) => {
                    p.read(start.elapsed().as_secs_f64(), &text);
                    if p.snap.server == Some(Server::LlamaCpp) {
                        let s = http::get_text(&agent, &base.at("/slots"), MAX_BODY);
                        p.read_slots(s.map(|t| slots::parse(&t)).unwrap_or_default());
                    }
                    if p.snap.version.is_none() && p.snap.polls == 1 {
                        p.snap.version = version(&agent, &base);
                    }
                }
                Err(e) => p.failed(&e),
            }
            if tx.send(p.snap.clone()).is_err() {
                return;
            }
            let rest = every.saturating_sub(tick.elapsed());
            sleep_unless(rest, &stop);
        }
    })
}

/// Sleeps `d` in short naps, waking early when `stop` is set.
fn sleep_unless(d: Duration, stop: &AtomicBool) {
    let until = Instant::now() + d;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
    }
}
