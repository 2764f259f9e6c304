//! What a user of a serving engine feels: time to first token (arrival → first token)
//! and the gaps between the tokens after it (inter-token latency), with their p50 and p99
//! over a run. A request's times are the engine's clock when it arrived and when each of
//! its tokens came out of an iteration.

use super::Request;
use serde::{Deserialize, Serialize};

/// The `p`-th percentile (0–100) of `samples` by linear interpolation between the two
/// nearest ranks; 0 for no samples.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f64::total_cmp);
    let at = p.clamp(0.0, 100.0) / 100.0 * (s.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (at - lo as f64)
}

/// A run's latency figures, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub ttft_ms_p50: f64,
    pub ttft_ms_p99: f64,
    pub itl_ms_p50: f64,
    pub itl_ms_p99: f64,
}

impl Latency {
    /// Over every request that produced a token.
    pub fn of(requests: &[Request]) -> Self {
        let ttft: Vec<f64> = requests
            .iter()
            .filter_map(ttft_s)
            .map(|s| 1e3 * s)
            .collect();
        let itl: Vec<f64> = requests
            .iter()
            .flat_map(|r| r.token_s.windows(2).map(|w| 1e3 * (w[1] - w[0])))
            .collect();
        Self {
            ttft_ms_p50: percentile(&ttft, 50.0),
            ttft_ms_p99: percentile(&ttft, 99.0),
            itl_ms_p50: percentile(&itl, 50.0),
            itl_ms_p99: percentile(&itl, 99.0),
        }
    }
}

impl Latency {
    /// [`Self::of`] as a run stands at its clock `now_s`: a request that has arrived
    /// (`arrived`) and still waits for its first token counts its wait so far, a lower
    /// bound on its TTFT. Mid-run, a run that keeps requests waiting must not look faster
    /// for it than one that has served them.
    pub fn so_far(requests: &[Request], now_s: f64, arrived: impl Fn(&Request) -> bool) -> Self {
        let waits: Vec<f64> = requests
            .iter()
            .filter_map(|r| match ttft_s(r) {
                Some(s) => Some(s),
                None if arrived(r) && r.reject_reason.is_none() => {
                    Some((now_s - r.arrival_s).max(0.0))
                }
                None => None,
            })
            .map(|s| 1e3 * s)
            .collect();
        Self {
            ttft_ms_p50: percentile(&waits, 50.0),
            ttft_ms_p99: percentile(&waits, 99.0),
            ..Self::of(requests)
        }
    }
}

/// Seconds from a request's arrival to its first token, once it has one.
pub fn ttft_s(r: &Request) -> Option<f64> {
    r.token_s.first().map(|t| t - r.arrival_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_hand_made_samples() {
        let s = [4.0, 1.0, 3.0, 2.0, 5.0];
        assert_eq!(percentile(&s, 50.0), 3.0);
        assert_eq!(percentile(&s, 0.0), 1.0);
        assert_eq!(percentile(&s, 100.0), 5.0);
        // Between ranks: 25% of the way from 4 to 5.
        assert!((percentile(&s, 81.25) - 4.25).abs() < 1e-12);
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!((percentile(&hundred, 99.0) - 99.01).abs() < 1e-9);
        assert_eq!(percentile(&[], 50.0), 0.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
    }

    #[test]
    fn ttft_and_inter_token_gaps_come_from_the_token_times() {
        let mut a = Request::new(0, vec![1, 2], 3, 0);
        (a.arrival_s, a.token_s) = (1.0, vec![1.5, 1.6, 1.8]);
        let mut b = Request::new(1, vec![1], 3, 0);
        (b.arrival_s, b.token_s) = (2.0, vec![3.0, 3.1]);
        let waiting = Request::new(2, vec![1], 3, 0);
        let l = Latency::of(&[a, b, waiting]);
        // TTFTs 500 and 1000 ms; gaps 100, 200, 100 ms.
        assert!((l.ttft_ms_p50 - 750.0).abs() < 1e-6, "{l:?}");
        assert!((l.itl_ms_p50 - 100.0).abs() < 1e-6, "{l:?}");
        assert!(l.itl_ms_p99 > 195.0 && l.itl_ms_p99 <= 200.0, "{l:?}");
        // Mid-run, the request still waiting since 2.0 s counts its wait at 6.0 s: 4 s.
        let (mut a, mut b) = (
            Request::new(0, vec![1], 3, 0),
            Request::new(1, vec![1], 3, 0),
        );
        (a.arrival_s, a.token_s) = (0.0, vec![0.5]);
        b.arrival_s = 2.0;
        let l = Latency::so_far(&[a.clone(), b.clone()], 6.0, |_| true);
        assert!((l.ttft_ms_p99 - 3965.0).abs() < 1.0, "{l:?}");
        let not_yet = Latency::so_far(&[a, b], 6.0, |r| r.id == 0);
        assert!((not_yet.ttft_ms_p99 - 500.0).abs() < 1e-6, "{not_yet:?}");
    }
}
