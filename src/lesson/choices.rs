//! What a prediction question offers and what is pending once it is answered: plain data
//! that the grading of our engine's iterations (`predict.rs`) and of an attached server's
//! polls (`server_predict.rs`) share.

use crate::lesson::Predict;

/// Choices of a prediction question, built from the live state when it is shown.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveChoices {
    pub labels: Vec<String>,
    /// Per choice, what it stands for: a position, a page count, a request id, a ratio in
    /// thousandths, or an index into fixed choices (`OTHER` for "something else" / "none").
    pub values: Vec<u64>,
    /// What the prediction is about: a request id, a position, or the value before.
    pub subject: u64,
    pub before: Vec<u64>,
}

/// A prediction waiting for the next iteration to grade it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub question: usize,
    pub choice: usize,
    pub kind: Predict,
    /// What the prediction is about: a request id, or the query position.
    pub subject: u64,
    /// The state it was asked in: the active request ids before the step.
    pub before: Vec<u64>,
    /// The choices as they were shown: a prediction that waits for its event is graded
    /// against them however many iterations later that comes.
    pub shown: LiveChoices,
}
