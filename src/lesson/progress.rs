//! Lesson progress, saved as JSON in the user's data directory so a walkthrough resumes
//! where it stopped.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// Progress as loaded, with what the user should be told about the file.
#[derive(Debug)]
pub struct Loaded {
    pub progress: Progress,
    /// Set when the file could not be read and was moved aside.
    pub notice: Option<String>,
    /// False when saving would overwrite a file that could not be read nor moved.
    pub may_save: bool,
}

impl Default for Loaded {
    fn default() -> Self {
        Self {
            progress: Progress::default(),
            notice: None,
            may_save: true,
        }
    }
}

impl Progress {
    /// Reads saved progress. A missing file starts fresh. A file that cannot be parsed is
    /// the user's record all the same: it is moved aside (never overwritten by the next
    /// save) and the notice says where it went.
    pub fn load() -> Loaded {
        match path() {
            Some(p) => Self::load_from(&p),
            None => Loaded::default(),
        }
    }

    /// [`Self::load`] from a given file.
    pub fn load_from(p: &Path) -> Loaded {
        let text = match crate::files::read(p, crate::files::Kind::Progress) {
            Ok(t) => t,
            Err(e) if e.is_not_found() => return Loaded::default(),
            Err(e) => {
                return Loaded {
                    progress: Progress::default(),
                    notice: Some(format!(
                        "lesson progress {} could not be read ({e}); it will not be saved over",
                        p.display()
                    )),
                    may_save: false,
                }
            }
        };
        match serde_json::from_slice::<Progress>(&text) {
            Ok(mut progress) => {
                progress.rename_old_ids();
                Loaded {
                    progress,
                    ..Loaded::default()
                }
            }
            Err(e) => set_aside(p, &e.to_string()),
        }
    }

    /// Files written before ids dropped the lesson number: `04-mha-gqa-mqa` is
    /// `mha-gqa-mqa` now (the newer entry wins if both exist).
    fn rename_old_ids(&mut self) {
        let old: Vec<String> = self
            .lessons
            .keys()
            .filter(|k| super::format::lesson_id(k) != k.as_str())
            .cloned()
            .collect();
        for k in old {
            if let Some(v) = self.lessons.remove(&k) {
                let id = super::format::lesson_id(&k).to_string();
                self.lessons.entry(id).or_insert(v);
            }
        }
    }

    /// Writes progress, creating the directory.
    pub fn save(&self) -> Result<(), crate::files::FileError> {
        match path() {
            Some(p) => self.save_to(&p),
            None => Ok(()),
        }
    }

    /// Replaces `p` whole (a temporary file beside it, synced, then renamed), so a crash or
    /// a second inferlab leaves either the old file or the new one; never through a link.
    pub fn save_to(&self, p: &Path) -> Result<(), crate::files::FileError> {
        let io = |err| crate::files::FileError::Io {
            path: p.to_path_buf(),
            err,
        };
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| io(e.into()))?;
        let rules = crate::files::WriteRules {
            force: true,
            inputs: &[],
        };
        crate::files::write(p, text.as_bytes(), rules)
    }

    /// The entry of one lesson, created when missing.
    pub fn of(&mut self, id: &str) -> &mut LessonProgress {
        self.lessons.entry(id.to_string()).or_default()
    }
}

impl LessonProgress {
    /// Steps done among a lesson's `steps`: a progress file is the user's, but it may be
    /// edited or stale, and "1000000/2 steps done" is not a thing to show.
    pub fn done_of(&self, steps: usize) -> usize {
        let mut done: Vec<usize> = self
            .done_steps
            .iter()
            .copied()
            .filter(|&s| s < steps)
            .collect();
        done.dedup();
        done.len()
    }

    /// Records a step as done once.
    pub fn mark_done(&mut self, step: usize) {
        if !self.done_steps.contains(&step) {
            self.done_steps.push(step);
            self.done_steps.sort_unstable();
        }
    }
}

/// An unreadable progress file is kept beside under a new name, and the learner starts
/// fresh; where it cannot be moved, nothing will be saved over it.
fn set_aside(p: &Path, why: &str) -> Loaded {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let aside = p.with_extension(format!("json.corrupt-{stamp}"));
    let moved = std::fs::rename(p, &aside);
    let notice = match &moved {
        Ok(()) => format!(
            "lesson progress {} was unreadable ({why}); kept as {} and starting fresh",
            p.display(),
            aside.display()
        ),
        Err(m) => format!(
            "lesson progress {} is unreadable ({why}) and could not be moved aside ({m})",
            p.display()
        ),
    };
    Loaded {
        progress: Progress::default(),
        notice: Some(notice),
        may_save: moved.is_ok(),
    }
}
