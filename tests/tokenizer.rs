//! The tokenizer rebuilt from GGUF metadata must give the ids llama.cpp gives for
//! SmolLM2 (`pre = smollm`: digits split one by one, byte-level BPE without a prefix space).

mod common;

use inferlab::model::{LoadOptions, Model, TextTokenizer};

fn tok() -> Model {
    Model::load(&common::real_model(), &LoadOptions::default()).unwrap()
}

fn id(t: &TextTokenizer, piece: &str) -> u32 {
    t.inner
        .token_to_id(piece)
        .unwrap_or_else(|| panic!("{piece:?} not in vocab"))
}

#[test]
fn known_ids_and_rules() {
    let m = tok();
    let t = &m.tokenizer;
    assert_eq!(t.vocab_size(), 49152);
    assert_eq!((t.bos, t.eos), (Some(1), Some(2)));
    // No prefix space: "What" at the start is the bare word, not " What".
    assert_eq!(t.encode("What").unwrap(), vec![id(t, "What")]);
    assert_eq!(t.encode("What").unwrap(), vec![1780]);
    assert_eq!(t.encode(" What").unwrap(), vec![id(t, "ĠWhat")]);
    assert_ne!(id(t, "What"), id(t, "ĠWhat"));
    // Digits one by one, the space before them on its own.
    assert_eq!(t.encode("2024").unwrap(), vec![34, 32, 34, 36]);
    assert_eq!(
        t.encode("x 42").unwrap(),
        vec![id(t, "x"), id(t, "Ġ"), 36, 34]
    );
    // A run of spaces keeps all but the last, which joins the next word.
    assert_eq!(
        t.encode("a   b").unwrap(),
        vec![id(t, "a"), id(t, "ĠĠ"), id(t, "Ġb")]
    );
    // Control tokens (ids 0–16) match as units inside text.
    assert_eq!(t.encode("<|endoftext|>").unwrap(), vec![0]);
    assert_eq!(
        t.encode("<|im_start|>user\nHi<|im_end|>").unwrap(),
        vec![1, id(t, "user"), id(t, "Ċ"), id(t, "Hi"), 2]
    );
}

#[test]
fn chat_prompt_is_chatml_with_default_system() {
    let m = tok();
    let ids = m
        .tokenizer
        .encode(&TextTokenizer::chat_prompt("Hello"))
        .unwrap();
    assert_eq!(ids[0], 1);
    assert_eq!(
        ids.iter().filter(|&&i| i == 1).count(),
        3,
        "system, user, assistant turns"
    );
    assert_eq!(ids.iter().filter(|&&i| i == 2).count(), 2);
    let text = m.tokenizer.decode(&ids).unwrap();
    assert!(text.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"));
    assert!(text.ends_with("<|im_start|>assistant\n"));
}

#[test]
fn decode_round_trips_varied_text() {
    let m = tok();
    for s in [
        "héllo wörld — naïve café",
        "世界 こんにちは 🦀🚀",
        "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
        "tabs\tand\n\nnewlines   and   spaces",
        "3.14159 1,000,000 0x1F",
        "<|im_start|>assistant\nSure.<|im_end|>",
    ] {
        let ids = m.tokenizer.encode(s).unwrap();
        assert_eq!(m.tokenizer.decode(&ids).unwrap(), s, "{ids:?}");
    }
}
