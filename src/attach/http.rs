//! The only network code: GETs with a size cap and a deadline, and one streamed
//! completion. Requests go to the URL the user gave and nowhere else: no redirects are
//! followed and no proxy is read from the environment.

use std::io::Read;
use std::time::Duration;

/// What went wrong talking to a server, by kind: the attach pane says which.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NetError {
    #[error("`{0}` is not an http:// or https:// URL of a server (say http://127.0.0.1:8080)")]
    BadUrl(String),
    #[error("no answer from {0}")]
    Unreachable(String),
    #[error("{url} answered HTTP {code}")]
    Status { url: String, code: u16 },
    #[error("{0} sent more than {1} bytes; read no further")]
    TooLarge(String, usize),
    #[error("{0} answered with HTML, not Prometheus metrics text")]
    Html(String),
    #[error("{0}: {1}")]
    Read(String, String),
}

/// A server's base URL, checked: scheme, a host, an optional port and path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base(String);

impl Base {
    /// Checks `url` is http(s) with a host, and drops a trailing `/`.
    pub fn parse(url: &str) -> Result<Self, NetError> {
        let bad = || NetError::BadUrl(crate::files::printable_text(url));
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(bad)?;
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        let ok_host = !host.is_empty()
            && !host.contains('@')
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-.:[]_".contains(c));
        if !ok_host || rest.contains(['?', '#']) || url.chars().any(char::is_whitespace) {
            return Err(bad());
        }
        Ok(Self(url.trim_end_matches('/').to_string()))
    }

    /// The URL as given (without a trailing slash).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `path` (starting with `/`) under this base.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }
}

/// An HTTP client for short polls: connect within 2 s, the whole answer within `total`.
pub fn agent(total: Duration) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(2))
        .timeout(total)
        .redirects(0)
        .build()
}

/// GETs `url`, reading at most `limit` bytes of its body.
pub fn get_text(agent: &ureq::Agent, url: &str, limit: usize) -> Result<String, NetError> {
    let resp = agent.get(url).call().map_err(|e| failed(url, e))?;
    // With redirects off, a 3xx comes back as an answer: it is not the metrics.
    if !(200..300).contains(&resp.status()) {
        return Err(NetError::Status {
            url: url.into(),
            code: resp.status(),
        });
    }
    let html = resp.content_type().contains("html");
    let mut body = Vec::new();
    resp.into_reader()
        .take(limit as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| NetError::Read(url.into(), e.to_string()))?;
    if body.len() > limit {
        return Err(NetError::TooLarge(url.into(), limit));
    }
    if html || body.trim_ascii_start().starts_with(b"<") {
        return Err(NetError::Html(url.into()));
    }
    String::from_utf8(body).map_err(|_| NetError::Read(url.into(), "not UTF-8 text".into()))
}

/// The error for a call that did not get a 2xx answer.
pub fn failed(url: &str, e: ureq::Error) -> NetError {
    match e {
        ureq::Error::Status(code, _) => NetError::Status {
            url: url.into(),
            code,
        },
        ureq::Error::Transport(_) => NetError::Unreachable(url.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_with_a_host_are_taken() {
        assert_eq!(
            Base::parse("http://127.0.0.1:8080/")
                .unwrap()
                .at("/metrics"),
            "http://127.0.0.1:8080/metrics"
        );
        assert!(Base::parse("https://example.org/v1").is_ok());
        assert!(Base::parse("http://[::1]:8000").is_ok());
        for bad in [
            "ftp://x",
            "file:///etc/passwd",
            "127.0.0.1:8080",
            "http://",
            "http:///metrics",
            "http://user@host",
            "http://a b",
            "http://h/?q=1",
            "",
        ] {
            assert!(
                matches!(Base::parse(bad), Err(NetError::BadUrl(_))),
                "{bad}"
            );
        }
    }
}
