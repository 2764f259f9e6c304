//! Load for a real server: the same seeded requests our engine serves, sent at their
//! Poisson arrival times as streamed OpenAI completions, each timed by us (arrival, then
//! every streamed token), so a server's TTFT and inter-token latency are measured exactly
//! as our engine's are ([`crate::serve::latency::Latency`] over the same `Request`s).

use super::http::{self, Base, NetError};
use crate::serve::Request;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most requests in flight at once; an arrival past it fails as "client limit" rather
/// than opening without bound.
pub const MOST_IN_FLIGHT: usize = 256;
/// Most bytes a streamed answer may send, per requested token.
const BYTES_PER_TOKEN: u64 = 64 << 10;
/// A streamed answer that sends nothing for this long has failed.
const STALL: Duration = Duration::from_secs(60);

/// One request's outcome: the request with its arrival and token times on the load's
/// clock (seconds from its start), or why it failed.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub request: Request,
    pub error: Option<String>,
}

/// Sends `requests` (each at its `due_s`, seconds from now) to `base`'s
/// `/v1/completions`, greedy, `max_new` tokens each with the end-of-text token ignored so
/// every request is as long as ours. Each outcome is sent on `tx` as it finishes.
pub fn spawn(
    base: Base,
    requests: Vec<Request>,
    stop: Arc<AtomicBool>,
    tx: Sender<Outcome>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(2))
            .timeout_read(STALL)
            .redirects(0)
            .build();
        let start = Instant::now();
        let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for r in requests {
            let due = Duration::from_secs_f64(r.due_s.unwrap_or(0.0).max(0.0));
            while start.elapsed() < due {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(
                    due.saturating_sub(start.elapsed())
                        .min(Duration::from_millis(20)),
                );
            }
            if in_flight.load(Ordering::SeqCst) >= MOST_IN_FLIGHT {
                let error = Some(format!(
                    "client limit: {MOST_IN_FLIGHT} requests already in flight"
                ));
                let _ = tx.send(Outcome { request: r, error });
                continue;
            }
            in_flight.fetch_add(1, Ordering::SeqCst);
            let (agent, base, tx, n) = (agent.clone(), base.clone(), tx.clone(), in_flight.clone());
            std::thread::spawn(move || {
                let _ = tx.send(one(&agent, &base, r, start));
                n.fetch_sub(1, Ordering::SeqCst);
            });
        }
    })
}

/// Sends `requests` and waits for every one: what `bench serve --peer` runs.
pub fn run_all(base: &Base, requests: Vec<Request>) -> Vec<Outcome> {
    let n = requests.len();
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let sender = spawn(base.clone(), requests, stop, tx);
    let out: Vec<Outcome> = rx.iter().take(n).collect();
    let _ = sender.join();
    out
}

/// One streamed request, timed.
fn one(agent: &ureq::Agent, base: &Base, mut r: Request, start: Instant) -> Outcome {
    r.arrival_s = start.elapsed().as_secs_f64();
    let url = base.at("/v1/completions");
    let body = serde_json::json!({
        "prompt": r.prompt,
        "max_tokens": r.max_new,
        "stream": true,
        "temperature": 0.0,
        "ignore_eos": true,
    });
    let error = match agent.post(&url).send_json(body) {
        Ok(resp) => stream(resp.into_reader(), &mut r, start, &url).err(),
        Err(e) => Some(http::failed(&url, e)),
    };
    r.finished_s = error.is_none().then(|| start.elapsed().as_secs_f64());
    Outcome {
        error: error.map(|e| e.to_string()),
        request: r,
    }
}

/// Reads server-sent events until `[DONE]`, timing each chunk that carries a token.
fn stream(reader: impl Read, r: &mut Request, start: Instant, url: &str) -> Result<(), NetError> {
    let limit = BYTES_PER_TOKEN * (r.max_new as u64 + 4);
    let mut lines = BufReader::new(reader.take(limit));
    let (mut line, mut total) = (String::new(), 0u64);
    loop {
        line.clear();
        let n = lines
            .read_line(&mut line)
            .map_err(|e| NetError::Read(url.into(), e.to_string()))?;
        total += n as u64;
        if n == 0 {
            return match r.generated.len() {
                _ if total >= limit => Err(NetError::TooLarge(url.into(), limit as usize)),
                0 => Err(NetError::Read(
                    url.into(),
                    "the stream ended with no token".into(),
                )),
                _ => Ok(()),
            };
        }
        let Some(data) = line.trim().strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(());
        }
        let v: serde_json::Value = serde_json::from_str(data)
            .map_err(|_| NetError::Read(url.into(), "a stream chunk that is not JSON".into()))?;
        if let Some(err) = v.get("error") {
            return Err(NetError::Read(url.into(), err.to_string()));
        }
        // llama.cpp closes with an empty chunk that has a finish reason; vLLM puts the
        // last token in the chunk with the finish reason.
        let c = &v["choices"][0];
        let text = c["text"].as_str();
        if text.is_some_and(|t| !t.is_empty()) || (text.is_some() && c["finish_reason"].is_null()) {
            r.token_s.push(start.elapsed().as_secs_f64());
            r.generated.push(0);
        }
    }
}
