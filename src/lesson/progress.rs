//! Lesson progress, saved as JSON in the user's data directory so a walkthrough resumes
//! where it stopped.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Progress of every lesson, by lesson id.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Progress {
    #[serde(default)]
    pub lessons: BTreeMap<String, LessonProgress>,
}

/// Where one lesson stands.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LessonProgress {
    /// The step the user was on (0-based).
    pub step: usize,
    /// Steps whose task was done, or that had none and were read.
    #[serde(default)]
    pub done_steps: Vec<usize>,
    /// Questions answered right, as `step.question`.
    #[serde(default)]
    pub right: Vec<String>,
    /// Questions answered wrong at least once.
    #[serde(default)]
    pub wrong: Vec<String>,
}

/// The progress file: `$INFERLAB_DATA_DIR/progress.json`, else the user data dir.
pub fn path() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("INFERLAB_DATA_DIR") {
        return Some(PathBuf::from(d).join("progress.json"));
    }
    dirs::data_dir().map(|d| d.join("inferlab").join("progress.json"))
}

impl Progress {
    /// Reads saved progress; a missing or unreadable file starts fresh (progress is a
    /// convenience, never a reason to refuse to open a lesson).
    pub fn load() -> Self {
        path()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// Writes progress, creating the directory; written to a temporary file first so a
    /// crash never leaves half a file.
    pub fn save(&self) -> std::io::Result<()> {
        let Some(p) = path() else { return Ok(()) };
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = p.with_extension("json.part");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)?)?;
        std::fs::rename(tmp, p)
    }

    /// The entry of one lesson, created when missing.
    pub fn of(&mut self, id: &str) -> &mut LessonProgress {
        self.lessons.entry(id.to_string()).or_default()
    }
}

impl LessonProgress {
    /// Records a step as done once.
    pub fn mark_done(&mut self, step: usize) {
        if !self.done_steps.contains(&step) {
            self.done_steps.push(step);
            self.done_steps.sort_unstable();
        }
    }
}
