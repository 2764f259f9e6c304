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

/// `exp` of the mean negative log-probability of every next token of `tokens`, the logits
/// of the whole text from one pass.
pub fn perplexity(m: &Model, tokens: &[u32]) -> Result<f64> {
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
    Ok((nll / (tokens.len() - 1) as f64).exp())
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
