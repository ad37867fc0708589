//! [`SpBpe`] against `tokenizers::Tokenizer::encode`, which it must match id for id.

use serde_json::{json, Value as Json};
use tokenizers::Tokenizer;

use super::*;
use crate::text::test_strings::{adversarial, ascii_pairs, learn_merges, random_strings};

/// Text the merges are learnt from, SentencePiece style (each space a `▁`, one in front).
const TRAIN: &str = "the quick brown fox jumps over the lazy dog. it's the dog's day; they're \
    here 1234 5678 2024-11-27 foo_bar(baz) naïve café résumé Straße Ελληνικά русский 日本語 \
    中文 emoji 😀   spaced   out  the the the";

/// `n` merges learnt greedily (most frequent pair, ties by the pair) within the words of
/// [`TRAIN`], as SentencePiece learns them (no merge across the start of a word).
fn merges(n: usize) -> Vec<(String, String)> {
    // No `ß`: it stays outside the vocab.
    let text = format!("{MARK}{}", TRAIN.replace(' ', &MARK.to_string())).replace('ß', "s");
    let corpus = words(&text)
        .map(|w| w.chars().map(String::from).collect())
        .collect();
    learn_merges(corpus, n)
}

/// A Llama 2 style tokenizer: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, the characters of
/// [`TRAIN`] but `ß` (so it falls back to bytes), the merges of [`merges`].
fn tokenizer(normalizer: Json, pre_tokenizer: Json, byte_fallback: bool, post: Json) -> Tokenizer {
    let mut vocab = serde_json::Map::new();
    for t in ["<unk>", "<s>", "</s>"] {
        let n = vocab.len();
        vocab.insert(t.into(), json!(n));
    }
    for b in 0..=255u8 {
        let n = vocab.len();
        vocab.insert(format!("<0x{b:02X}>"), json!(n));
    }
    let mut chars: Vec<char> = format!("{MARK}{TRAIN}")
        .chars()
        .filter(|&c| c != 'ß')
        .collect();
    chars.sort_unstable();
    chars.dedup();
    for c in chars {
        let n = vocab.len();
        vocab.entry(c.to_string()).or_insert(json!(n));
    }
    let merges = merges(200);
    for (a, b) in &merges {
        let n = vocab.len();
        vocab.entry(format!("{a}{b}")).or_insert(json!(n));
    }
    let added = |id: usize, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post,
        "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": true, "byte_fallback": byte_fallback, "ignore_merges": false,
                  "vocab": vocab, "merges": merges},
    })
    .to_string()
    .parse()
    .expect("a valid test tokenizer")
}

fn metaspace(scheme: &str, split: bool) -> Json {
    json!({"type": "Metaspace", "replacement": MARK.to_string(), "prepend_scheme": scheme,
           "split": split})
}

fn bos() -> Json {
    json!({"type": "TemplateProcessing",
           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}})
}

/// Both of Llama 2's forms, with and without its BOS: every line but the empty one and
/// those holding a special token takes the fast path, with `encode`'s ids.
#[test]
fn matches_encode_on_adversarial_and_random_strings() {
    let mut texts = adversarial();
    texts.extend(random_strings(31, 3_000));
    texts.extend(ascii_pairs().into_iter().step_by(7));
    texts.extend(
        [
            "  two spaces",
            " one",
            "Straße ß",
            "<s>x",
            "▁marked",
            " ▁x",
            "x▁ y",
            "▁",
        ]
        .map(String::from),
    );
    let forms = [
        (prepend_and_replace(), Json::Null),
        (Json::Null, metaspace("first", false)),
        (Json::Null, metaspace("always", false)),
    ];
    for (normalizer, pre) in forms {
        for (post, add) in [(bos(), true), (bos(), false), (Json::Null, true)] {
            let tok = tokenizer(normalizer.clone(), pre.clone(), true, post.clone());
            let fast = SpBpe::new(&tok, add).expect("eligible");
            assert!(
                fast.words,
                "no token crosses a word: each merges alone, cached"
            );
            let mut taken = 0;
            for text in &texts {
                let want = tok.encode(text.as_str(), add).unwrap();
                match fast.encode(text) {
                    Some(ids) => {
                        assert_eq!(ids, want.get_ids(), "{pre} {add}: {text:?}");
                        taken += 1;
                    }
                    None => assert!(
                        text.is_empty()
                            || ["<unk>", "<s>", "</s>"].iter().any(|t| text.contains(t)),
                        "declined {text:?}"
                    ),
                }
            }
            assert!(taken > texts.len() * 9 / 10, "{taken} of {}", texts.len());
            // Again from the word cache.
            for text in texts.iter().take(500) {
                if let Some(ids) = fast.encode(text) {
                    assert_eq!(ids, tok.encode(text.as_str(), add).unwrap().get_ids());
                }
            }
        }
    }
}

#[test]
fn other_tokenizers_are_refused_with_the_reason() {
    let none = Json::Null;
    let cases = [
        (
            tokenizer(prepend_and_replace(), none.clone(), false, none.clone()),
            "a SentencePiece-style BPE needs byte fallback",
        ),
        (
            tokenizer(json!({"type": "NFKC"}), none.clone(), true, none.clone()),
            "the normalizer and pre-tokenizer are not SentencePiece's space handling",
        ),
        (
            tokenizer(none.clone(), metaspace("first", true), true, none.clone()),
            "the normalizer and pre-tokenizer are not SentencePiece's space handling",
        ),
        (
            tokenizer(none.clone(), metaspace("never", false), true, none.clone()),
            "the normalizer and pre-tokenizer are not SentencePiece's space handling",
        ),
    ];
    for (tok, why) in cases {
        assert_eq!(SpBpe::new(&tok, true).unwrap_err(), Ineligible(why));
    }
}

#[test]
fn words_start_where_a_mark_follows_another_character() {
    fn w(s: &str) -> Vec<&str> {
        words(s).collect()
    }
    assert_eq!(w("▁a▁bc▁▁d▁"), ["▁a", "▁bc", "▁▁d", "▁"]);
    assert_eq!(w("x▁▁"), ["x", "▁▁"]);
    assert_eq!(w(""), Vec::<&str>::new());
}

/// A token with a `▁` inside (`a▁b`) can make a merge cross words: the line is then merged
/// whole, with the same ids; otherwise words merge alone and a prefix stops early.
#[test]
fn a_vocab_with_marks_inside_tokens_merges_whole_lines() {
    let tok = tokenizer(prepend_and_replace(), Json::Null, true, bos());
    let fast = SpBpe::new(&tok, true).unwrap();
    assert!(fast.words);
    let long = "the quick brown fox ".repeat(50_000);
    let prefix = fast.encode_prefix(&long, 10).unwrap();
    assert!((10..20).contains(&prefix.len()), "{}", prefix.len());
    assert_eq!(prefix[..10], fast.encode(&long).unwrap()[..10]);

    let mut spec: Json = serde_json::from_str(&tok.to_string(false).unwrap()).unwrap();
    let n = spec["model"]["vocab"].as_object().unwrap().len();
    spec["model"]["vocab"]["e▁"] = json!(n);
    spec["model"]["merges"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!(["e", "▁"]));
    let crossing: Tokenizer = spec.to_string().parse().unwrap();
    let fast = SpBpe::new(&crossing, true).unwrap();
    assert!(!fast.words);
    for text in ["the quick brown fox", "one  two", " lead trail "] {
        let want = crossing.encode(text, true).unwrap();
        assert_eq!(fast.encode(text).unwrap(), want.get_ids(), "{text:?}");
        assert!(
            want.get_ids().contains(&(n as u32)) || !text.contains("e "),
            "{text:?}"
        );
    }
}
