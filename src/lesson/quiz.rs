//! The quiz, counted: how many questions and predictions, how many choices each, and how
//! often the right answer is simply the longest one, which lets a learner answer by
//! length instead of by understanding. `lessons --check` prints these figures and the
//! parser refuses a lesson whose right answers are all the longest.

use super::format::{Lesson, Question, QuestionKind};
use serde::Serialize;

/// Whether a multiple-choice question's right answer is strictly longer than every wrong
/// one (`None` for a prediction, whose choices the app builds).
pub fn right_is_longest(q: &Question) -> Option<bool> {
    right_beats(q, |right, wrong| {
        right > wrong.iter().copied().max().unwrap_or(0)
    })
}

/// Whether the right answer is strictly shorter than every wrong one: the other giveaway.
pub fn right_is_shortest(q: &Question) -> Option<bool> {
    right_beats(q, |right, wrong| {
        right < wrong.iter().copied().min().unwrap_or(usize::MAX)
    })
}

/// Applies `test(right length, wrong lengths)` to each right choice; true if any passes.
fn right_beats(q: &Question, test: impl Fn(usize, &[usize]) -> bool) -> Option<bool> {
    let QuestionKind::Choice(choices) = &q.kind else {
        return None;
    };
    let len = |t: &str| t.chars().count();
    let wrong: Vec<usize> = choices
        .iter()
        .filter(|c| !c.right)
        .map(|c| len(&c.text))
        .collect();
    Some(
        choices
            .iter()
            .filter(|c| c.right)
            .any(|c| test(len(&c.text), &wrong)),
    )
}

/// The quiz's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QuizStats {
    pub lessons: usize,
    pub steps: usize,
    /// Multiple-choice questions.
    pub questions: usize,
    /// Predictions the live app grades.
    pub predictions: usize,
    /// The fewest choices any multiple-choice question has.
    pub min_choices: usize,
    /// Multiple-choice questions whose right answer is the longest choice.
    pub right_is_longest: usize,
    /// … and those whose right answer is the shortest.
    pub right_is_shortest: usize,
    /// `{figure}` placeholders in the lesson text.
    pub live_figures: usize,
    /// Right answers at each shown position (index 0: key 1), over the choice questions.
    pub right_at: Vec<usize>,
}

impl QuizStats {
    /// Share of multiple-choice questions whose right answer is the longest, percent.
    pub fn longest_pct(&self) -> f64 {
        100.0 * self.right_is_longest as f64 / self.questions.max(1) as f64
    }

    /// Share whose right answer is the shortest, percent.
    pub fn shortest_pct(&self) -> f64 {
        100.0 * self.right_is_shortest as f64 / self.questions.max(1) as f64
    }

    /// The largest share of right answers any one position holds, percent: a learner
    /// pressing the same key every time scores this much.
    pub fn busiest_position_pct(&self) -> f64 {
        let most = self.right_at.iter().copied().max().unwrap_or(0);
        100.0 * most as f64 / self.questions.max(1) as f64
    }
}

/// Counts the quiz of `lessons`.
pub fn stats(lessons: &[Lesson]) -> QuizStats {
    let questions: Vec<&Question> = lessons
        .iter()
        .flat_map(|l| &l.steps)
        .flat_map(|s| &s.questions)
        .collect();
    let choices: Vec<usize> = questions
        .iter()
        .filter_map(|q| match &q.kind {
            QuestionKind::Choice(c) => Some(c.len()),
            QuestionKind::Predict(_) => None,
        })
        .collect();
    let texts = lessons.iter().flat_map(|l| {
        std::iter::once(l.intro.as_str()).chain(l.steps.iter().flat_map(|s| {
            let q = s.questions.iter().flat_map(|q| {
                let c: Vec<&str> = match &q.kind {
                    QuestionKind::Choice(c) => c
                        .iter()
                        .flat_map(|c| [c.text.as_str(), c.why.as_str()])
                        .collect(),
                    QuestionKind::Predict(_) => Vec::new(),
                };
                std::iter::once(q.text.as_str()).chain(c)
            });
            [s.prose.as_str(), s.notice.as_deref().unwrap_or("")]
                .into_iter()
                .chain(s.task.iter().map(|t| t.text.as_str()))
                .chain(q)
                .collect::<Vec<_>>()
        }))
    });
    QuizStats {
        right_at: right_positions(&questions),
        lessons: lessons.len(),
        steps: lessons.iter().map(|l| l.steps.len()).sum(),
        questions: choices.len(),
        predictions: questions.len() - choices.len(),
        min_choices: choices.iter().copied().min().unwrap_or(0),
        right_is_longest: questions
            .iter()
            .filter(|q| right_is_longest(q) == Some(true))
            .count(),
        right_is_shortest: questions
            .iter()
            .filter(|q| right_is_shortest(q) == Some(true))
            .count(),
        live_figures: texts
            .map(|t| {
                t.lines()
                    .map(|l| super::format::figure_names(l).len())
                    .sum::<usize>()
            })
            .sum(),
    }
}

/// Right answers at each shown position (index 0: key 1), as many positions as the
/// question with the most choices has.
fn right_positions(questions: &[&Question]) -> Vec<usize> {
    let mut at = Vec::new();
    for q in questions {
        if let QuestionKind::Choice(c) = &q.kind {
            at.resize(at.len().max(c.len()), 0);
            for (i, _) in c.iter().enumerate().filter(|(_, c)| c.right) {
                at[i] += 1;
            }
        }
    }
    at
}
