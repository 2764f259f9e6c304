//! The settings a lesson can name, one entry each in [`KEYS`]: the key a `set:` line and
//! a `check:` write, the words it takes, where a value goes in what the app runs, and how
//! the live app reads it back. The words of a setting are its enum's own (every variant,
//! by its snake_case name), so a new variant has its lesson word with nothing written
//! here; a new setting is its field in `settings.rs` and one entry below. The parser, the
//! walker and the checks all go through this table, so a word means one thing in all three.

use super::live::{LiveState, Setting};
use crate::model::sampler::TEMPERATURES;
use crate::model::AttnKernel;
use crate::settings::Settings;
use strum::VariantArray;

/// Attention kernels by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum AttnKind {
    Naive,
    Tiled,
}

/// What the heatmap shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Values {
    Weights,
    Scores,
}

/// The default model's shape, which `layer=` and `head=` are checked against.
pub const DEFAULT_LAYERS: usize = 30;
pub const DEFAULT_HEADS: usize = 9;

/// What a step asks of the app: the settings the worker runs under, and how the screen
/// shows them.
#[derive(Debug, Clone)]
pub struct Asked {
    pub settings: Settings,
    pub screen: Vec<Setting>,
}

/// The values a key takes.
#[derive(Clone, Copy)]
pub enum Takes {
    /// One of these words; a value is the word's index.
    Words(fn() -> Vec<String>),
    /// A whole number below this (a layer or head of the default model); a value is the
    /// number itself, and checks compare it as one.
    Below(usize),
}

/// Why a word is not a value of a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadValue {
    #[error("{what} `{word}` does not exist (0..{last})")]
    OutOfRange {
        what: &'static str,
        word: String,
        last: usize,
    },
    #[error("unknown {what} `{word}` (known: {known})")]
    Unknown {
        what: &'static str,
        word: String,
        known: String,
    },
}

/// One setting a lesson can name.
pub struct Key {
    /// The key in `set:` lines, and the variable in `check:` lines.
    pub name: &'static str,
    /// What its value is, for errors: "head layout".
    pub what: &'static str,
    pub takes: Takes,
    /// Puts value `v` into what a step asks for.
    pub set: fn(&mut Asked, usize),
    /// The live app's value in the same terms; `None` for a key checks cannot read.
    pub live: Option<fn(&LiveState) -> usize>,
}

impl Key {
    /// The words it takes (the numbers, for a numeric key).
    pub fn words(&self) -> Vec<String> {
        match self.takes {
            Takes::Words(words) => words(),
            Takes::Below(n) => (0..n).map(|i| i.to_string()).collect(),
        }
    }

    /// Whether checks compare it as a number.
    pub fn numeric(&self) -> bool {
        matches!(self.takes, Takes::Below(_))
    }

    /// The value `word` names, or what is wrong with it. Among numbers (the
    /// temperatures) a word names the one equal to it, so `1.0` is `1`.
    pub fn parse(&self, word: &str) -> Result<usize, BadValue> {
        let words = self.words();
        let number = |w: &str| w.parse::<f32>().ok();
        let same = |w: &String| match (number(w), number(word)) {
            (Some(a), Some(b)) => (a - b).abs() < 1e-6,
            _ => w == word,
        };
        match (self.takes, words.iter().position(same)) {
            (_, Some(v)) => Ok(v),
            (Takes::Below(n), None) => Err(BadValue::OutOfRange {
                what: self.what,
                word: word.to_string(),
                last: n - 1,
            }),
            (Takes::Words(_), None) => Err(BadValue::Unknown {
                what: self.what,
                word: word.to_string(),
                known: words.join(", "),
            }),
        }
    }
}

/// Every word of a setting's enum, in its declaration order.
fn words<T: VariantArray + Copy + Into<&'static str>>() -> Vec<String> {
    T::VARIANTS.iter().map(|&v| v.into().to_string()).collect()
}

/// Variant `v` of a setting's enum (the parser gave an index below its count).
fn nth<T: VariantArray + Copy>(v: usize) -> T {
    T::VARIANTS[v.min(T::VARIANTS.len() - 1)]
}

/// The index of `value` among its enum's variants.
fn index_of<T: VariantArray + PartialEq>(value: T) -> usize {
    T::VARIANTS.iter().position(|x| *x == value).unwrap_or(0)
}

/// An on/off setting: a value is the bool as 0 or 1.
fn switch() -> Vec<String> {
    vec!["off".into(), "on".into()]
}

/// The heatmap's values as lessons name them.
fn values_now(app: &LiveState) -> Values {
    if app.show_scores {
        Values::Scores
    } else {
        Values::Weights
    }
}

/// The kernel as lessons name it.
fn kernel_now(app: &LiveState) -> AttnKind {
    match app.settings.run.kernel {
        AttnKernel::Naive => AttnKind::Naive,
        AttnKernel::Tiled { .. } => AttnKind::Tiled,
    }
}

/// Naive, or tiled keeping the tile the app runs (a lesson does not pick a tile size).
fn kernel_to(now: AttnKernel, k: AttnKind) -> AttnKernel {
    match (k, now) {
        (AttnKind::Naive, _) => AttnKernel::Naive,
        (AttnKind::Tiled, tiled @ AttnKernel::Tiled { .. }) => tiled,
        (AttnKind::Tiled, naive) => crate::settings::other_kernel(naive),
    }
}

/// The temperature offered nearest `t`.
fn temperature_index(t: f32) -> usize {
    (0..TEMPERATURES.len())
        .min_by(|&a, &b| {
            (TEMPERATURES[a] - t)
                .abs()
                .total_cmp(&(TEMPERATURES[b] - t).abs())
        })
        .unwrap_or(0)
}

/// Every setting a lesson can name.
pub const KEYS: [Key; 18] = [
    Key {
        name: "focus",
        what: "pane",
        takes: Takes::Words(words::<crate::screen::Pane>),
        set: |a, v| a.screen.push(Setting::Focus(nth(v))),
        live: Some(|app| index_of(app.focus)),
    },
    Key {
        name: "layout",
        what: "head layout",
        takes: Takes::Words(words::<crate::model::HeadLayout>),
        set: |a, v| a.settings.run.layout = nth(v),
        live: Some(|app| index_of(app.settings.run.layout)),
    },
    Key {
        name: "cache",
        what: "cache kind",
        takes: Takes::Words(words::<crate::serve::CacheKind>),
        set: |a, v| a.settings.serving.cache = nth(v),
        live: Some(|app| index_of(app.settings.serving.cache)),
    },
    Key {
        name: "policy",
        what: "policy",
        takes: Takes::Words(words::<crate::serve::Policy>),
        set: |a, v| a.settings.serving.policy = nth(v),
        live: Some(|app| index_of(app.settings.serving.policy)),
    },
    Key {
        name: "attention",
        what: "attention kernel",
        takes: Takes::Words(words::<AttnKind>),
        set: |a, v| a.settings.run.kernel = kernel_to(a.settings.run.kernel, nth(v)),
        live: Some(|app| index_of(kernel_now(app))),
    },
    Key {
        name: "compare",
        what: "comparison",
        takes: Takes::Words(words::<crate::settings::Compare>),
        set: |a, v| a.settings.serving.compare = nth(v),
        live: Some(|app| index_of(app.settings.serving.compare)),
    },
    Key {
        name: "values",
        what: "heatmap values",
        takes: Takes::Words(words::<Values>),
        set: |a, v| {
            a.screen
                .push(Setting::Values(nth::<Values>(v) == Values::Scores))
        },
        live: Some(|app| index_of(values_now(app))),
    },
    Key {
        name: "layer",
        what: "layer",
        takes: Takes::Below(DEFAULT_LAYERS),
        set: |a, v| a.screen.push(Setting::Layer(v)),
        live: Some(|app| app.layer),
    },
    Key {
        name: "head",
        what: "head",
        takes: Takes::Below(DEFAULT_HEADS),
        set: |a, v| a.screen.push(Setting::Head(v)),
        live: Some(|app| app.head),
    },
    Key {
        name: "sink",
        what: "sink experiment",
        takes: Takes::Words(switch),
        set: |a, v| a.settings.sink = v == 1,
        live: Some(|app| usize::from(app.settings.sink)),
    },
    Key {
        name: "workload",
        what: "workload",
        takes: Takes::Words(words::<crate::serve::workload::AppWorkload>),
        set: |a, v| a.settings.serving.workload = nth(v),
        live: Some(|app| index_of(app.settings.serving.workload)),
    },
    Key {
        name: "view",
        what: "view",
        takes: Takes::Words(|| vec!["grid".into(), "focus".into()]),
        set: |a, v| a.screen.push(Setting::Zoom(v == 1)),
        live: None,
    },
    Key {
        name: "temperature",
        what: "temperature",
        takes: Takes::Words(|| TEMPERATURES.iter().map(f32::to_string).collect()),
        set: |a, v| a.settings.request.sampler.temperature = TEMPERATURES[v],
        live: Some(|app| temperature_index(app.settings.request.sampler.temperature)),
    },
    Key {
        name: "kv_cache",
        what: "KV cache",
        takes: Takes::Words(switch),
        set: |a, v| a.settings.request.kv_cache = v == 1,
        live: Some(|app| usize::from(app.settings.request.kv_cache)),
    },
    Key {
        name: "chunked",
        what: "chunked prefill",
        takes: Takes::Words(switch),
        set: |a, v| a.settings.serving.chunked = v == 1,
        live: Some(|app| usize::from(app.settings.serving.chunked)),
    },
    Key {
        name: "arrivals",
        what: "arrivals",
        takes: Takes::Words(|| vec!["timed".into(), "burst".into()]),
        set: |a, v| a.settings.serving.burst = v == 1,
        live: Some(|app| usize::from(app.settings.serving.burst)),
    },
    Key {
        name: "kv_elem",
        what: "KV element type",
        takes: Takes::Words(words::<crate::kv::KvElem>),
        set: |a, v| a.settings.run.kv_elem = nth(v),
        live: Some(|app| index_of(app.settings.run.kv_elem)),
    },
    Key {
        name: "weights",
        what: "weight type",
        takes: Takes::Words(words::<crate::model::Requant>),
        set: |a, v| a.settings.weights = nth(v),
        live: Some(|app| index_of(app.settings.weights)),
    },
];

/// The key named `name`, by its index in [`KEYS`].
pub fn key(name: &str) -> Option<usize> {
    KEYS.iter().position(|k| k.name == name)
}

/// The settings a step names: each key (by its index in [`KEYS`]) with its value, in the
/// order written; a key named twice keeps its last value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepSettings(Vec<(usize, usize)>);

impl StepSettings {
    /// Names `key` with value `v`.
    pub fn put(&mut self, key: usize, v: usize) {
        self.0.retain(|&(k, _)| k != key);
        self.0.push((key, v));
    }

    /// The value the step gives the key `name`, if it names it.
    pub fn get(&self, name: &str) -> Option<usize> {
        let k = key(name)?;
        self.0.iter().find(|&&(key, _)| key == k).map(|&(_, v)| v)
    }

    /// These settings over `earlier` ones: what a learner who walked both steps in order
    /// has (a later step's value wins).
    pub fn over(&self, earlier: &StepSettings) -> StepSettings {
        let mut out = earlier.clone();
        for &(k, v) in &self.0 {
            out.put(k, v);
        }
        out
    }

    /// What the step asks of an app now running `now`: what it names changes, the rest
    /// stays.
    pub fn apply(&self, now: Settings) -> Asked {
        let mut asked = Asked {
            settings: now,
            screen: Vec::new(),
        };
        for &(k, v) in &self.0 {
            (KEYS[k].set)(&mut asked, v);
        }
        asked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_its_word_and_a_temperature_any_spelling_of_its_number() {
        let k = |name| &KEYS[key(name).unwrap()];
        let t = k("temperature");
        assert_eq!(t.parse("1.0"), t.parse("1"));
        assert_eq!(t.parse("0.70"), t.parse("0.7"));
        assert!(t.parse("0.5").is_err());
        assert!(k("layout").parse("mha").is_ok());
        assert!(k("layout").parse("MHA").is_err());
        assert!(matches!(
            k("layer").parse("30"),
            Err(BadValue::OutOfRange { last: 29, .. })
        ));
        // A step naming a key twice keeps the last value.
        let mut s = StepSettings::default();
        s.put(key("head").unwrap(), 2);
        s.put(key("head").unwrap(), 5);
        assert_eq!(s.get("head"), Some(5));
    }
}
