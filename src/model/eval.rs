//! How well the loaded weights predict a text: its perplexity, each next token scored by
//! the probability the model gave it. The app measures it once for each weight type it
//! loads, so a lesson can say what fewer bytes per weight cost in quality, on the same
//! shipped text `bench decode` scores.

use super::error::{ModelError, Result};
use super::forward::{Logits, Model};

/// The logits of every position of `tokens` from one pass, `vocab` wide per position.
pub fn all_logits(m: &Model, tokens: &[u32]) -> Result<Vec<f32>> {
    let logits = m.forward(tokens, &mut m.new_cache(tokens.len()), Logits::All)?;
    Ok(logits.flatten_all()?.to_vec1::<f32>()?)
}

/// How one weight type predicts the evaluation text.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub weights: super::Requant,
    pub perplexity: f64,
    /// The token it ranks first after each position that has a next token: set beside
    /// another type's, how often the two pick the same next token (`bench decode`'s
    /// `top1_agreement_vs_f32` over the same positions).
    pub top1: Vec<u32>,
}

impl Scored {
    /// The share of positions where `self` and `other` rank the same token first.
    pub fn agreement(&self, other: &Scored) -> Option<f64> {
        let n = self.top1.len().min(other.top1.len());
        let same = self
            .top1
            .iter()
            .zip(&other.top1)
            .filter(|(a, b)| a == b)
            .count();
        (n > 0).then(|| same as f64 / n as f64)
    }
}

/// `weights`' perplexity on `tokens` (`exp` of the mean negative log-probability of every
/// next token, the logits of the whole text from one pass) and its top token at each
/// position.
pub fn score(m: &Model, weights: super::Requant, tokens: &[u32]) -> Result<Scored> {
    if tokens.len() < 2 {
        return Err(ModelError::EmptyPrompt);
    }
    let logits = all_logits(m, tokens)?;
    let vocab = m.cfg.vocab;
    let nll: f64 = tokens
        .windows(2)
        .enumerate()
        .map(|(pos, next)| surprise(&logits[pos * vocab..][..vocab], next[1] as usize))
        .sum();
    let top1 = logits
        .chunks_exact(vocab)
        .take(tokens.len() - 1)
        .map(argmax)
        .collect();
    Ok(Scored {
        weights,
        perplexity: (nll / (tokens.len() - 1) as f64).exp(),
        top1,
    })
}

/// The index of the largest value (the first of equals).
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

/// `-ln p(token)` under a softmax of `row`, as a log-sum-exp (no probability underflows).
/// Every perplexity the project reports sums these.
pub fn surprise(row: &[f32], token: usize) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    max + sum.ln() - row.get(token).map_or(f64::NEG_INFINITY, |&x| x as f64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn agreement_is_the_share_of_positions_with_the_same_top_token() {
        let s = |top1: Vec<u32>| super::Scored {
            weights: crate::model::Requant::Q4,
            perplexity: 1.0,
            top1,
        };
        assert_eq!(
            s(vec![1, 2, 3]).agreement(&s(vec![1, 2, 4])),
            Some(2.0 / 3.0)
        );
        assert_eq!(s(vec![]).agreement(&s(vec![1])), None);
        assert_eq!(super::argmax(&[0.5, 2.0, 2.0, -1.0]), 1);
    }

    #[test]
    fn surprise_is_minus_the_log_of_the_softmax_probability() {
        let row = [1.0f32, 2.0, 3.0];
        let z: f64 = row.iter().map(|&x| (x as f64).exp()).sum();
        for (t, &x) in row.iter().enumerate() {
            let want = -((x as f64).exp() / z).ln();
            assert!((super::surprise(&row, t) - want).abs() < 1e-12);
        }
        // Far-apart logits: the log-sum-exp keeps the unlikely token's surprise finite.
        assert!((super::surprise(&[0.0, 1000.0], 0) - 1000.0).abs() < 1e-9);
    }
}
