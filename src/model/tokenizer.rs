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
    /// What loading noticed that changes no math (a token string listed twice).
    pub warnings: Vec<String>,
}

/// Tokens whose text an earlier id already has: the text encodes to the earlier id only,
/// so the later one can be sampled but never typed. llama.cpp accepts such files; they
/// are named, not refused.
fn repeated_tokens(tokens: &[String]) -> Vec<String> {
    let mut first = std::collections::HashMap::with_capacity(tokens.len());
    let mut out = Vec::new();
    for (id, t) in tokens.iter().enumerate() {
        if let Some(was) = first.insert(t.as_str(), id) {
            first.insert(t.as_str(), was);
            if out.len() < 5 {
                out.push(format!(
                    "token {id} repeats token {was} ({:?}): typed text encodes to {was}",
                    crate::files::printable(t)
                ));
            } else {
                out.push("…and more repeated tokens".into());
                break;
            }
        }
    }
    out
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
        Some(v) => {
            let key = "tokenizer.ggml.token_type";
            let items = v
                .to_vec()
                .map_err(|_| tok_err(format!("`{key}` = {}: not an array", brief(v))))?;
            items
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    x.to_i32()
                        .map(|x| x as u32)
                        .or_else(|_| x.to_u32())
                        .map_err(|_| {
                            tok_err(format!("`{key}`[{i}] = {}: not an integer", brief(x)))
                        })
                })
                .collect::<Result<_>>()?
        }
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
    let Ok(items) = v.to_vec() else {
        return Err(tok_err(format!(
            "`{key}` = {}: not an array of strings",
            brief(v)
        )));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            gguf_file::Value::String(s) => Ok(s.clone()),
            other => Err(tok_err(format!(
                "`{key}`[{i}] = {}: not a string",
                brief(other)
            ))),
        })
        .collect()
}

/// A metadata value for a message: short, whatever its size.
pub(crate) fn brief(v: &gguf_file::Value) -> String {
    match v {
        gguf_file::Value::Array(a) => format!("an array of {}", a.len()),
        gguf_file::Value::String(s) => format!("{:?}", crate::files::printable(s)),
        other => format!("{other:?}"),
    }
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
        let model = match ct.metadata.get("tokenizer.ggml.model") {
            None => return Err(ModelError::MissingMetadata("tokenizer.ggml.model".into())),
            Some(gguf_file::Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(tok_err(format!(
                    "`tokenizer.ggml.model` = {}: not a string",
                    brief(other)
                )))
            }
        };
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
        let mut warnings = repeated_tokens(&tokens);
        warnings.extend(check_special_ids(ct, n_vocab)?);
        let id = |k: &str| {
            super::audit::special_id(ct, k, n_vocab)
                .map_err(|e| ModelError::Tokenizer(e.to_string()))
        };
        Ok(Self {
            inner: tk,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            warnings,
        })
    }

    /// The tokenizer alone of the model at `path` (a GGUF file, or a folder with
    /// `tokenizer.json`), without its weights: for the prompts sent to a server.
    pub fn of_model(path: &Path) -> Result<Self> {
        if path.is_dir() {
            return Self::from_file(&path.join("tokenizer.json"));
        }
        let (ct, _) = super::gguf::open(path)?;
        let cfg = super::LlamaConfig::from_gguf(&ct)?;
        Self::from_gguf(&ct, cfg.vocab)
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
        Ok(Self {
            inner,
            bos,
            eos,
            warnings: Vec::new(),
        })
    }

    /// Every id the tokenizer can produce is a row of the embedding: a `tokenizer.json`
    /// whose ids run past the config's `vocab_size` is refused here, not as an index error
    /// in the middle of a prompt.
    pub fn check_vocab(&self, vocab: usize) -> std::result::Result<(), super::Malformed> {
        let ids = self.inner.get_vocab(true);
        match ids.iter().max_by_key(|(_, &id)| id) {
            Some((tok, &id)) if id as usize >= vocab => Err(super::Malformed(format!(
                "token {:?} has id {id}, outside config.json's vocab_size of {vocab}",
                crate::files::printable(tok)
            ))),
            _ => Ok(()),
        }
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

    /// A person's text as ids: with `as_text`, control tokens written in it
    /// (`<|im_end|>`) are split into ordinary pieces, as HF's `split_special_tokens`
    /// does, so the text cannot close its own turn; without, they become the control
    /// tokens (HF's default, and [`Self::encode`]'s).
    pub fn encode_user(&self, text: &str, as_text: bool) -> Result<Vec<u32>> {
        if !as_text {
            return self.encode(text);
        }
        let mut t = self.inner.clone();
        t.set_encode_special_tokens(true);
        Ok(t.encode(text, false).map_err(tok_err)?.get_ids().to_vec())
    }

    /// A person's message in the chat template: the template's markers are control
    /// tokens, the message is [`Self::encode_user`]'s.
    pub fn encode_chat(&self, user: &str, as_text: bool) -> Result<Vec<u32>> {
        if !as_text {
            return self.encode(&Self::chat_prompt(user));
        }
        // The template splits into separate pieces at its line breaks anyway, so the
        // parts encoded apart give the ids the whole would.
        let (head, tail) = Self::chat_parts();
        let mut ids = self.encode(&head)?;
        ids.extend(self.encode_user(user, true)?);
        ids.extend(self.encode(tail)?);
        Ok(ids)
    }

    /// Whether `id` is a control token (an added special token such as `<|im_end|>`),
    /// not a piece of text.
    pub fn is_control(&self, id: u32) -> bool {
        self.inner
            .get_added_tokens_decoder()
            .get(&id)
            .is_some_and(|t| t.special)
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
        let (head, tail) = Self::chat_parts();
        format!("{head}{user}{tail}")
    }

    /// The chat template before the user's message and after it.
    fn chat_parts() -> (String, &'static str) {
        (
            format!("<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\n"),
            "<|im_end|>\n<|im_start|>assistant\n",
        )
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// Every special id the file sets must be usable, the ones inferlab reads and the others
/// alike: a bad one is a damaged file, not an absent token. The ids inferlab reads (BOS,
/// EOS) must lie in the vocabulary; one of the others (padding, unknown…) one past it is
/// only noted, as llama.cpp ignores those too. Returns the notes.
fn check_special_ids(ct: &gguf_file::Content, n_vocab: usize) -> Result<Vec<String>> {
    let mut special = ct
        .metadata
        .keys()
        .filter(|k| k.starts_with("tokenizer.ggml.") && k.ends_with("_token_id"))
        .collect::<Vec<_>>();
    special.sort();
    let mut warnings = Vec::new();
    for k in special {
        match super::audit::special_id(ct, k, n_vocab) {
            Ok(_) => {}
            Err(super::audit::BadId::OutsideVocabulary(why))
                if !k.ends_with("bos_token_id") && !k.ends_with("eos_token_id") =>
            {
                warnings.push(format!("{why}; inferlab does not use it"))
            }
            Err(e) => return Err(ModelError::Tokenizer(e.to_string())),
        }
    }
    Ok(warnings)
}
