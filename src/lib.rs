//! inferlab: a glass-box transformer inference lab.
//!
//! The library holds everything the binary wires together: model loading and the
//! instrumented forward pass (`model`), the KV cache (`kv`) and the benchmarks (`bench`).

/// An error that is a message in words, for a check whose callers only say it: the type
/// (so no `Result<_, String>` crosses a module), its text, and `From` a `String` or a
/// `&str`, so `?` turns a worded reason into it.
macro_rules! message_error {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
        #[error("{0}")]
        pub struct $name(pub String);

        impl From<String> for $name {
            fn from(why: String) -> Self {
                $name(why)
            }
        }

        impl From<&str> for $name {
            fn from(why: &str) -> Self {
                $name(why.to_string())
            }
        }
    };
}

pub mod assets;
pub mod attach;
pub mod bench;
pub mod budget;
pub mod export;
pub mod files;
pub mod kernels;
pub mod kv;
pub mod lesson;
pub mod machine;
pub mod model;
pub mod report;
pub mod screen;
pub mod serve;
pub mod settings;
pub mod sink;
pub mod ui;
pub mod views;
pub mod worker;
