//! Benchmarks that compare configurations side by side in one run.

/// Refuses to measure, with what is wrong, unless `cond` holds: a flag out of range, or an
/// input that cannot give a measurement.
macro_rules! refuse_unless {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err($crate::bench::BenchError::Refused(format!($($msg)*)));
        }
    };
}

pub mod arrivals;
pub mod attention;
pub mod decode;
pub mod heads;
pub mod kv;
pub mod peer;
pub mod render;
pub mod serve;
pub mod sink;

use std::path::PathBuf;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A flag out of range, or an input that cannot give a measurement.
    #[error("{0}")]
    Refused(String),
    #[error("loading {}: {err}", .path.display())]
    Load {
        path: PathBuf,
        err: crate::model::ModelError,
    },
    #[error("opening {}: {err}", .path.display())]
    Open { path: PathBuf, err: std::io::Error },
    /// The real server beside ours (`--peer`) failed or answered nonsense.
    #[error("{server}: {what}")]
    Peer { server: String, what: String },
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error(transparent)]
    Serve(#[from] crate::serve::ServeError),
    #[error(transparent)]
    Worker(#[from] crate::worker::WorkerError),
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    #[error(transparent)]
    Kv(#[from] crate::kv::KvError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Layout(#[from] crate::model::heads::LayoutError),
    #[error(transparent)]
    Tiles(#[from] crate::model::flash::TileError),
    #[error(transparent)]
    Machine(#[from] crate::machine::MachineError),
}

impl From<std::convert::Infallible> for BenchError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

/// Result alias for the benchmarks.
pub type Result<T> = std::result::Result<T, BenchError>;

/// Median of a non-empty list: of an even count, the mean of the middle two (the upper one
/// alone would lean every even-count figure, and a ratio's against its target, upwards).
pub fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "the median of nothing");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n % 2 {
        1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_an_odd_count_is_the_middle_and_of_an_even_count_the_middle_twos_mean() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(vec![0.9, 1.1, 0.95, 1.0]), 0.975);
        assert_eq!(super::median(vec![5.0]), 5.0);
    }
}
