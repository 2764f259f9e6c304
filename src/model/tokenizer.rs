//! Text ⇄ token ids. For GGUF files the tokenizer is rebuilt from the file's metadata
//! (vocabulary, merges, token types); for safetensors directories it is `tokenizer.json`.

use super::error::{ModelError, Result};
use candle_core::quantized::gguf_file;
use std::path::Path;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

/// SmolLM2's default system prompt, as in its chat template.
pub const DEFAULT_SYSTEM: &str =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// A tokenizer plus the special ids inferlab needs.
pub struct TextTokenizer {
    pub inner: Tokenizer,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

fn tok_err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Tokenizer(e.to_string())
}

/// The BPE model: the vocabulary in id order and the merges, each `a b`.
fn bpe(ct: &gguf_file::Content, tokens: &[String]) -> Result<BPE> {
    let merges: Vec<(String, String)> = strings(ct, "tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| tok_err(format!("bad merge `{m}`")))
        })
        .collect::<Result<_>>()?;
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(tok_err)
}

/// The control tokens (type 3), which must match as whole units inside text, e.g.
/// `<|im_start|>`.
fn control_tokens(ct: &gguf_file::Content, tokens: &[String]) -> Result<Vec<AddedToken>> {
    let types: Vec<u32> = match ct.metadata.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()?
            .iter()
            .map(|x| x.to_i32().map(|x| x as u32).or_else(|_| x.to_u32()))
            .collect::<std::result::Result<_, _>>()?,
        None => Vec::new(),
    };
    if types.len() > tokens.len() {
        return Err(tok_err(format!(
            "tokenizer.ggml.token_type has {} entries for {} tokens",
            types.len(),
            tokens.len()
        )));
    }
    Ok(types
        .iter()
        .zip(tokens)
        .filter(|(&ty, _)| ty == 3)
        .map(|(_, t)| AddedToken::from(t.clone(), true))
        .collect())
}

fn strings(ct: &gguf_file::Content, key: &str) -> Result<Vec<String>> {
    let v = ct
        .metadata
        .get(key)
        .ok_or_else(|| ModelError::MissingMetadata(key.into()))?;
    v.to_vec()?
        .iter()
        .map(|s| Ok(s.to_string()?.clone()))
        .collect()
}

impl TextTokenizer {
    /// Rebuilds the byte-level BPE tokenizer from GGUF metadata.
    ///
    /// For `pre = smollm` (and other GPT-2-style vocabularies) the pre-tokenizer first
    /// splits every digit on its own, then applies GPT-2's byte-level split *without*
    /// a prefix space: "What" stays "What", not " What".
    ///
    /// `n_vocab` is the config's vocabulary size: special-token ids must lie inside it.
    pub fn from_gguf(ct: &gguf_file::Content, n_vocab: usize) -> Result<Self> {
        let model = ct
            .metadata
            .get("tokenizer.ggml.model")
            .ok_or_else(|| ModelError::MissingMetadata("tokenizer.ggml.model".into()))?
            .to_string()?
            .clone();
        if model != "gpt2" {
            return Err(ModelError::Tokenizer(format!(
                "tokenizer.ggml.model = {model}: only byte-level BPE (gpt2) vocabularies are supported"
            )));
        }
        let tokens = strings(ct, "tokenizer.ggml.tokens")?;
        let bpe = bpe(ct, &tokens)?;
        let mut tk = Tokenizer::new(bpe);
        let pre = Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ]);
        tk.with_pre_tokenizer(Some(pre));
        tk.with_decoder(Some(ByteLevelDecoder::default()));
        let _added = tk
            .add_special_tokens(control_tokens(ct, &tokens)?)
            .map_err(tok_err)?;
        // An id outside the vocabulary would index past the embedding; treat it as absent.
        let id = |k: &str| {
            ct.metadata
                .get(k)
                .and_then(|v| v.to_u32().ok())
                .filter(|&i| (i as usize) < n_vocab)
        };
        Ok(Self {
            inner: tk,
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
        })
    }

    /// Loads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = crate::files::read(path, crate::files::Kind::Tokenizer)?;
        let inner = Tokenizer::from_bytes(bytes)
            .map_err(|e| tok_err(format!("{}: {e}", path.display())))?;
        let bos = inner
            .token_to_id("<|im_start|>")
            .or_else(|| inner.token_to_id("<s>"));
        let eos = inner
            .token_to_id("<|im_end|>")
            .or_else(|| inner.token_to_id("</s>"));
        Ok(Self { inner, bos, eos })
    }

    /// Text to ids; special tokens written in the text are recognized.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .inner
            .encode(text, false)
            .map_err(tok_err)?
            .get_ids()
            .to_vec())
    }

    /// Ids to text (special tokens kept, so a chat transcript reads as it was).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(tok_err)
    }

    /// The text one id stands for, as it would print.
    pub fn piece(&self, id: u32) -> String {
        self.decode(&[id]).unwrap_or_else(|_| format!("<{id}>"))
    }

    /// Wraps a user message in SmolLM2's ChatML template with the default system prompt,
    /// ending where the assistant's answer begins.
    pub fn chat_prompt(user: &str) -> String {
        format!(
            "<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
        )
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}
