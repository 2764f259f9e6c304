//! The Prometheus text format, as serving engines expose it on `/metrics`: `# HELP` and
//! `# TYPE` lines, then one sample per line, `name{label="value",…} value [timestamp]`.
//! Our own small parser, because the names we read contain colons (`vllm:num_requests_running`)
//! and a parser that drops them would map nothing. Lines it cannot read are counted and
//! named, never fatal: one odd line from a server must not hide the rest.

use std::collections::BTreeMap;

/// One sample: a metric name, its labels in the order given, and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if the sample has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A whole `/metrics` response, read.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    /// `# TYPE` of each metric family that declared one (`counter`, `gauge`, `histogram`…).
    pub types: BTreeMap<String, String>,
    /// Lines that were not a comment nor a sample: (line number from 1, why), the first
    /// few only; `skipped_count` counts them all.
    pub skipped: Vec<(usize, String)>,
    pub skipped_count: usize,
    /// Whether samples past `max_samples` were left unread.
    pub truncated: bool,
}

/// Unreadable lines named in [`Exposition::skipped`]; the rest are only counted.
const NAMED_SKIPS: usize = 5;

/// Reads `text`, keeping at most `max_samples` samples (a server that sends a billion
/// lines costs that many lines of scanning, not memory).
pub fn parse(text: &str, max_samples: usize) -> Exposition {
    let mut out = Exposition::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            if let Some((name, kind)) = type_line(rest) {
                out.types.insert(name, kind);
            }
            continue;
        }
        if out.samples.len() >= max_samples {
            out.truncated = true;
            break;
        }
        match sample(line) {
            Ok(s) => out.samples.push(s),
            Err(why) => {
                out.skipped_count += 1;
                if out.skipped.len() < NAMED_SKIPS {
                    out.skipped.push((i + 1, why.0));
                }
            }
        }
    }
    out
}

/// `# TYPE name kind`, or None for any other comment.
fn type_line(rest: &str) -> Option<(String, String)> {
    let mut words = rest.split_whitespace();
    (words.next()? == "TYPE").then_some(())?;
    let name = words.next()?;
    let kind = words.next()?;
    valid_name(name).then(|| (name.to_string(), kind.to_string()))
}

/// A metric or label name: `[a-zA-Z_:][a-zA-Z0-9_:]*` (label names have no colons, which
/// this does not need to refuse).
fn valid_name(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

message_error!(
    /// What is wrong with a line of metrics text, in words (the parse keeps it to name the
    /// line).
    BadLine
);

/// A histogram whose buckets do not add up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadHistogram {
    #[error("{0}_bucket has a sample without a number in `le`")]
    NoBound(String),
    #[error("{0}: bucket counts fall as the bound grows")]
    Falling(String),
    #[error("{0}: no +Inf bucket")]
    NoInf(String),
    #[error("{name}: the +Inf bucket ({last}) is not the count ({count})")]
    NotTheCount { name: String, last: f64, count: f64 },
}

/// One sample line.
fn sample(line: &str) -> Result<Sample, BadLine> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("a name with no value")?;
    let name = &line[..name_end];
    if !valid_name(name) {
        return Err(BadLine(format!("`{}` is not a metric name", clip(name))));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (ls, after) = label_set(inner)?;
        labels = ls;
        rest = after;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("a sample with no value")?;
    let value = number(value).ok_or_else(|| format!("`{}` is not a number", clip(value)))?;
    // An optional timestamp (milliseconds); anything more is not the text format.
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("`{}` after the value is not a timestamp", clip(ts)))?;
    }
    if fields.next().is_some() {
        return Err(BadLine(
            "more than a value and a timestamp after the name".into(),
        ));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// A sample's labels, in the order given.
type Labels = Vec<(String, String)>;

/// The labels after `{`, up to the closing `}`; returns them and what follows.
fn label_set(mut s: &str) -> Result<(Labels, &str), BadLine> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = s.find('=').ok_or("a label with no `=`")?;
        let key = s[..eq].trim();
        if !valid_name(key) {
            return Err(BadLine(format!("`{}` is not a label name", clip(key))));
        }
        let (value, after) = quoted(s[eq + 1..].trim_start())?;
        labels.push((key.to_string(), value));
        s = after.trim_start();
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

/// A double-quoted label value with `\\`, `\"` and `\n` escapes; returns it and what follows.
fn quoted(s: &str) -> Result<(String, &str), BadLine> {
    let body = s.strip_prefix('"').ok_or("a label value not in quotes")?;
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &body[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, e)) => value.push(e),
                None => break,
            },
            c => value.push(c),
        }
    }
    Err(BadLine("a label value with no closing quote".into()))
}

/// A sample value: a float, or `NaN`, `+Inf`, `-Inf` as the format spells them.
fn number(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse::<f64>().ok(),
    }
}

/// At most 40 characters of `s`, for a message about it.
fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if s.chars().count() > 40 {
        out.push('…');
    }
    out
}

/// A histogram: cumulative counts per upper bound (`le`), summed over every other label.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// (upper bound, cumulative count), bounds ascending, the last `+Inf`.
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl Exposition {
    /// The sum of every sample named `name` (over its labels), or None if there is none.
    pub fn total(&self, name: &str) -> Option<f64> {
        let mut found = self.samples.iter().filter(|s| s.name == name).peekable();
        found.peek()?;
        Some(found.map(|s| s.value).sum())
    }

    /// The histogram `name` (its `_bucket`, `_sum` and `_count` samples), or None if the
    /// server has none; an error if its buckets do not add up.
    pub fn histogram(&self, name: &str) -> Option<Result<Histogram, BadHistogram>> {
        let bucket = format!("{name}_bucket");
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.name == bucket) {
            let Some(le) = s.label("le").and_then(number) else {
                return Some(Err(BadHistogram::NoBound(name.to_string())));
            };
            // Ordered by the bound's bits: bounds are non-negative here, whose IEEE bits
            // sort as the numbers do.
            let e = by_le.entry(le.max(0.0).to_bits()).or_insert((le, 0.0));
            e.1 += s.value;
        }
        if by_le.is_empty() {
            return None;
        }
        let buckets: Vec<(f64, f64)> = by_le.into_values().collect();
        Some(check_histogram(
            name,
            Histogram {
                sum: self.total(&format!("{name}_sum")).unwrap_or(f64::NAN),
                count: self
                    .total(&format!("{name}_count"))
                    .unwrap_or(buckets[buckets.len() - 1].1),
                buckets,
            },
        ))
    }
}

/// Buckets must be cumulative (never falling), end in `+Inf`, and that last bucket must
/// equal the count.
fn check_histogram(name: &str, h: Histogram) -> Result<Histogram, BadHistogram> {
    if h.buckets.windows(2).any(|w| w[1].1 < w[0].1) {
        return Err(BadHistogram::Falling(name.to_string()));
    }
    let (last_le, last) = h.buckets[h.buckets.len() - 1];
    if last_le != f64::INFINITY {
        return Err(BadHistogram::NoInf(name.to_string()));
    }
    if (last - h.count).abs() > 0.5 {
        return Err(BadHistogram::NotTheCount {
            name: name.to_string(),
            last,
            count: h.count,
        });
    }
    Ok(h)
}

impl Histogram {
    /// What was observed between `earlier` and this one (the same histogram read later),
    /// or None when the bounds differ (the server restarted with other buckets).
    pub fn since(&self, earlier: &Histogram) -> Option<Histogram> {
        let same = self.buckets.len() == earlier.buckets.len()
            && self
                .buckets
                .iter()
                .zip(&earlier.buckets)
                .all(|(a, b)| a.0 == b.0);
        same.then(|| Histogram {
            buckets: self
                .buckets
                .iter()
                .zip(&earlier.buckets)
                .map(|(a, b)| (a.0, (a.1 - b.1).max(0.0)))
                .collect(),
            sum: self.sum - earlier.sum,
            count: (self.count - earlier.count).max(0.0),
        })
    }

    /// The `q` quantile (0–1), interpolated linearly inside its bucket as Prometheus's
    /// `histogram_quantile` does; None with no observations. A quantile in the `+Inf`
    /// bucket is reported as the highest finite bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * self.count;
        let mut lower = (0.0, 0.0);
        for &(le, c) in &self.buckets {
            if c >= rank {
                if le.is_infinite() {
                    return Some(lower.0);
                }
                let within = (c - lower.1).max(1e-12);
                return Some(
                    lower.0 + (le - lower.0) * ((rank - lower.1) / within).clamp(0.0, 1.0),
                );
            }
            lower = (le, c);
        }
        Some(lower.0)
    }

    /// The mean observation, or None with none.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0 && self.sum.is_finite()).then(|| self.sum / self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_colons_and_labels_their_escapes() {
        let e = parse(
            "# TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{model_name=\"a \\\"b\\\"\\n\",engine=\"0\"} 3\n",
            10,
        );
        assert_eq!(e.samples[0].name, "vllm:num_requests_running");
        assert_eq!(e.samples[0].label("model_name"), Some("a \"b\"\n"));
        assert_eq!(e.types["vllm:num_requests_running"], "gauge");
    }

    #[test]
    fn special_values_timestamps_and_garbage() {
        let e = parse(
            "a NaN\nb +Inf 1700000000000\nc -Inf\n<html>\nd 1 2 3\ne{x=1} 2\n",
            10,
        );
        assert!(e.samples[0].value.is_nan());
        assert_eq!(e.samples[1].value, f64::INFINITY);
        assert_eq!(e.samples[2].value, f64::NEG_INFINITY);
        assert_eq!(e.skipped_count, 3);
        assert_eq!(e.skipped[0].0, 4);
    }

    #[test]
    fn a_sample_limit_stops_reading() {
        let text = "x 1\n".repeat(1000);
        let e = parse(&text, 10);
        assert_eq!(e.samples.len(), 10);
        assert!(e.truncated);
    }

    #[test]
    fn histograms_sum_labels_and_refuse_falling_buckets() {
        let text = "t_bucket{le=\"0.1\",m=\"a\"} 1\nt_bucket{le=\"0.1\",m=\"b\"} 1\n\
                    t_bucket{le=\"1\",m=\"a\"} 3\nt_bucket{le=\"+Inf\",m=\"a\"} 4\n\
                    t_sum 2\nt_count 4\n";
        let h = parse(text, 100).histogram("t").unwrap().unwrap();
        assert_eq!(
            h.buckets,
            vec![(0.1, 2.0), (1.0, 3.0), (f64::INFINITY, 4.0)]
        );
        // Half of 4 is the second observation: the top of the first bucket.
        assert!((h.quantile(0.5).unwrap() - 0.1).abs() < 1e-9);
        let bad = "u_bucket{le=\"1\"} 5\nu_bucket{le=\"+Inf\"} 3\nu_count 3\n";
        assert!(parse(bad, 100).histogram("u").unwrap().is_err());
        let no_inf = "v_bucket{le=\"1\"} 5\nv_count 5\n";
        assert!(parse(no_inf, 100).histogram("v").unwrap().is_err());
        assert!(parse(text, 100).histogram("w").is_none());
    }

    #[test]
    fn a_histogram_since_an_earlier_reading() {
        let a = parse(
            "t_bucket{le=\"1\"} 1\nt_bucket{le=\"+Inf\"} 1\nt_sum 0.5\nt_count 1\n",
            9,
        );
        let b = parse(
            "t_bucket{le=\"1\"} 1\nt_bucket{le=\"+Inf\"} 3\nt_sum 9.5\nt_count 3\n",
            9,
        );
        let (a, b) = (
            a.histogram("t").unwrap().unwrap(),
            b.histogram("t").unwrap().unwrap(),
        );
        let d = b.since(&a).unwrap();
        assert_eq!(d.count, 2.0);
        assert_eq!(d.quantile(0.99), Some(1.0));
        assert_eq!(d.mean(), Some(4.5));
    }
}
