//! The app's own file writes (a pane's picture, the lesson progress) as effects: `update`
//! decides that a file is to be written and queues it; the event loop writes it
//! ([`super::perform_writes`]) and hands the outcome back. So `update` does no I/O, and a
//! test of the app's logic needs no disk.

use crate::export::{self, ExportPane};
use crate::lesson::progress::Progress;

/// A file write the app asked for.
#[derive(Debug, Clone)]
pub enum FileWrite {
    /// The picture (SVG and PNG) of the focused pane (what stands in its place included) at
    /// the frame on screen.
    ExportFocused,
    /// The lesson progress as it stands.
    SaveProgress(Progress),
}

/// What became of a write, for the app to say.
pub enum Written {
    Exported(ExportPane, Result<std::path::PathBuf, export::ExportError>),
    /// The focused pane has no picture (the attached server's figures).
    NoPicture,
    ProgressSaved(Result<(), crate::files::FileError>),
}
