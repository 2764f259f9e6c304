//! `bench serve --peer URL`: a real server under the same arrivals as our policies. The
//! same seeded requests (token ids of the same model file) are sent at their arrival
//! times as streamed completions, one sequence after another, and timed by us; the
//! latency figures come from the same code as ours ([`Latency::of`]).

use super::{BenchError, Result};
use crate::attach::engines::Gauges;
use crate::attach::http::{self, Base};
use crate::attach::{load, prom};
use crate::serve::Request;
use std::time::Duration;

/// What the server did with the arrivals, as a client saw it.
#[derive(Debug, Clone)]
pub struct Served {
    /// Every request, with its arrival and token times on its sequence's clock.
    pub requests: Vec<Request>,
    /// Each sequence from its start to its last request's end, summed.
    pub wall_s: f64,
    /// Seconds in which at least one request was in flight, summed.
    pub busy_s: f64,
    /// The server's decode calls over the run, where it counts them.
    pub iterations: usize,
    /// What the server is.
    pub server: String,
}

/// What went wrong with the server at `base`.
fn failed(base: &Base, what: String) -> BenchError {
    BenchError::Peer {
        server: base.as_str().to_string(),
        what,
    }
}

/// How many requests `base` serves at once: llama.cpp's `/props` `total_slots`, else the
/// length of its `/slots`.
pub fn slots(base: &Base) -> Result<usize> {
    let agent = http::agent(Duration::from_secs(5));
    let props = http::get_text(&agent, &base.at("/props"), 4 << 20)
        .map_err(|e| failed(base, format!("asking for its slot count: {e}")))?;
    let v: serde_json::Value = serde_json::from_str(&props)
        .map_err(|e| failed(base, format!("/props is not JSON: {e}")))?;
    let n = match v["total_slots"].as_u64() {
        Some(n) => n as usize,
        None => {
            let s = http::get_text(&agent, &base.at("/slots"), 4 << 20)
                .map_err(|e| failed(base, format!("reading /slots: {e}")))?;
            crate::attach::slots::parse(&s).len()
        }
    };
    refuse_unless!(
        (1..=4096).contains(&n),
        "{} reports {n} slots; --peer needs a server with 1–4096",
        base.as_str()
    );
    Ok(n)
}

/// Sends every sequence in turn, waiting for each to finish.
pub fn run(base: &Base, sequences: &[Vec<Request>]) -> Result<Served> {
    let agent = http::agent(Duration::from_secs(5));
    let calls = |what: &str| -> Result<(Option<f64>, String)> {
        let t = http::get_text(&agent, &base.at("/metrics"), 8 << 20)
            .map_err(|e| failed(base, format!("reading /metrics {what}: {e}")))?;
        let g = Gauges::read(&prom::parse(&t, 200_000));
        Ok((
            g.decode_calls_total.map(|r| r.value),
            g.server.name().to_string(),
        ))
    };
    let (before, server) = calls("before the run")?;
    let (mut requests, mut wall_s, mut busy_s) = (Vec::new(), 0.0, 0.0);
    for reqs in sequences {
        let outcomes = load::run_all(base, reqs.clone());
        if let Some(e) = outcomes.iter().find_map(|o| o.error.as_ref()) {
            return Err(failed(base, format!("failed a request: {e}")));
        }
        let done: Vec<Request> = outcomes.into_iter().map(|o| o.request).collect();
        wall_s += done.iter().filter_map(|r| r.finished_s).fold(0.0, f64::max);
        busy_s += busy_seconds(&done);
        requests.extend(done);
    }
    let (after, _) = calls("after the run")?;
    let iterations = match (before, after) {
        (Some(a), Some(b)) => (b - a).max(0.0) as usize,
        _ => 0,
    };
    Ok(Served {
        requests,
        wall_s,
        busy_s,
        iterations,
        server,
    })
}

/// Seconds in which at least one request was in flight (arrived, not yet finished): the
/// server's busy time as a client sees it.
fn busy_seconds(requests: &[Request]) -> f64 {
    let mut spans: Vec<(f64, f64)> = requests
        .iter()
        .filter_map(|r| Some((r.arrival_s, r.finished_s?)))
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut total, mut end) = (0.0, f64::NEG_INFINITY);
    for (a, b) in spans {
        if b > end {
            total += b - a.max(end);
            end = b;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_is_the_union_of_the_requests_in_flight() {
        let span = |a: f64, b: f64| {
            let mut r = Request::new(0, vec![1], 1, 0);
            (r.arrival_s, r.finished_s) = (a, Some(b));
            r
        };
        let rs = [
            span(0.0, 2.0),
            span(1.0, 3.0),
            span(5.0, 6.0),
            span(5.5, 5.7),
        ];
        assert!((busy_seconds(&rs) - 4.0).abs() < 1e-12);
    }
}
