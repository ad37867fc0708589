//! Each ASCII scanner against its regex (run by onig), and each [`Splitter`] against the
//! pre-tokenizer it stands for.

use serde_json::{json, Value as Json};
use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

use super::*;
use crate::text::test_strings::{adversarial, ascii_pairs, random_strings, Rng};

const KNOWN: [&str; 7] = [GPT2, CL100K, QWEN2, O200K, DIGITS3, DEEPSEEK_CJK, DEEPSEEK];

/// The pieces of `text` as byte spans, by `split`.
fn spans(split: &Split, text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    split.pieces(text, &mut |piece| {
        let start = piece.as_ptr() as usize - text.as_ptr() as usize;
        out.push((start, start + piece.len()));
        true
    });
    out
}

/// The split of `pattern` with its scanner, and without it (the regex alone).
fn both(pattern: &str) -> (Split, Split) {
    let with = Split::new(pattern).unwrap();
    assert!(with.scanner.is_some(), "{pattern}");
    let without = Split {
        scanner: None,
        ..Split::new(pattern).unwrap()
    };
    (with, without)
}

/// Each known pattern's scanner splits `texts` as its regex does.
fn check_scanners(texts: &[String]) {
    for pattern in KNOWN {
        let (with, without) = both(pattern);
        for text in texts {
            assert_eq!(
                spans(&with, text),
                spans(&without, text),
                "{pattern}: {text:?}"
            );
        }
    }
}

/// ASCII strings weighted towards what the patterns treat specially: case, digits,
/// apostrophes and contractions, line breaks, runs of spaces, `/`.
fn ascii_strings(seed: u64, n: usize) -> Vec<String> {
    let special = b" '  \t\n\r\x0b\x0csStTreRvVmMlLdDaZ019!?./-_";
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| {
            let len = rng.below(48);
            (0..len)
                .map(|_| match rng.below(3) {
                    0 | 1 => char::from(special[rng.below(special.len())]),
                    _ => char::from(rng.below(128) as u8),
                })
                .collect()
        })
        .collect()
}

#[test]
fn every_scanner_matches_its_regex() {
    let mut texts: Vec<String> = adversarial().into_iter().filter(|t| t.is_ascii()).collect();
    texts.extend(
        random_strings(3, 3_000)
            .into_iter()
            .filter(|t| t.is_ascii()),
    );
    texts.extend(ascii_strings(5, 20_000));
    check_scanners(&texts);
}

/// Every pair and triple of ASCII characters, where the alternatives meet.
#[test]
fn every_scanner_on_every_ascii_pair_and_triple() {
    check_scanners(&ascii_pairs());
}

#[test]
fn unknown_patterns_get_no_scanner_and_still_split() {
    let split = Split::new(r"\p{N}{1,4}").unwrap();
    assert!(split.scanner.is_none());
    assert_eq!(spans(&split, "ab123456c"), [(0, 2), (2, 6), (6, 8), (8, 9)]);
    assert_eq!(spans(&split, ""), []);
    assert!(Split::new("(").is_err());
}

fn split(pattern: &str) -> Json {
    json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
           "invert": false})
}

fn byte_level(add_prefix_space: bool, use_regex: bool) -> Json {
    json!({"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": true,
           "use_regex": use_regex})
}

/// A [`Splitter`] gives the words, byte for byte, that `tokenizers` pre-tokenizes into, on
/// any text: GPT-2's `ByteLevel`, each tiktoken-style pattern before a `ByteLevel`, and a
/// chain of three splits (DeepSeek's shape).
#[test]
fn splitters_split_as_the_pre_tokenizer_does() {
    let mut texts = adversarial();
    texts.extend(random_strings(13, 3_000));
    texts.extend(ascii_strings(17, 3_000));
    let mut configs = vec![byte_level(false, true)];
    for pattern in KNOWN {
        configs.push(json!({"type": "Sequence", "pretokenizers": [split(pattern),
                                                                    byte_level(false, false)]}));
    }
    configs.push(json!({"type": "Sequence", "pretokenizers": [
        split(DIGITS3), split(DEEPSEEK_CJK), split(DEEPSEEK), byte_level(false, false)]}));
    // DeepSeek's file writes CR and LF as themselves: the same split, and its scanner too.
    let literal = DEEPSEEK.replace(r"\r", "\r").replace(r"\n", "\n");
    assert_eq!(
        Split::new(&literal).unwrap().scanner,
        Some(Scanner::DeepSeek)
    );
    configs.push(json!({"type": "Sequence", "pretokenizers": [
        split(DIGITS3), split(DEEPSEEK_CJK), split(&literal), byte_level(false, false)]}));
    for config in configs {
        let pre: PreTokenizerWrapper = serde_json::from_value(config.clone()).unwrap();
        let splitter = Splitter::new(Some(&pre)).unwrap();
        assert!(!splitter.add_prefix_space);
        for text in &texts {
            let mut want = PreTokenizedString::from(text.as_str());
            pre.pre_tokenize(&mut want).unwrap();
            let want: Vec<(usize, usize)> = want
                .get_splits(OffsetReferential::Original, OffsetType::Byte)
                .into_iter()
                .map(|(_, offsets, _)| offsets)
                .collect();
            let mut got = Vec::new();
            splitter.words(text, &mut |w| {
                let start = w.as_ptr() as usize - text.as_ptr() as usize;
                got.push((start, start + w.len()));
                true
            });
            // Stopped after the n-th word, it has called back with the first n only.
            let n = want.len() / 2 + 1;
            let mut first = Vec::new();
            splitter.words(text, &mut |w| {
                first.push(w.len());
                first.len() < n
            });
            assert_eq!(first.len(), n.min(want.len()), "{config}: {text:?}");
            assert_eq!(got, want, "{config}: {text:?}");
        }
    }
}

#[test]
fn only_byte_level_splits_are_taken() {
    let splitter = |config: Json| {
        let pre: PreTokenizerWrapper = serde_json::from_value(config).unwrap();
        Splitter::new(Some(&pre)).map(|s| s.add_prefix_space)
    };
    assert_eq!(splitter(byte_level(true, true)), Ok(true));
    let seq = |parts: Vec<Json>| json!({"type": "Sequence", "pretokenizers": parts});
    let cases = [
        (
            byte_level(false, false),
            "the ByteLevel pre-tokenizer does not split",
        ),
        (
            seq(vec![byte_level(false, false)]),
            "the pre-tokenizer does not split",
        ),
        (
            seq(vec![split(CL100K), byte_level(true, false)]),
            "the ByteLevel after the splits splits again or adds a prefix space",
        ),
        (
            seq(vec![split(CL100K), byte_level(false, true)]),
            "the ByteLevel after the splits splits again or adds a prefix space",
        ),
        (
            seq(vec![
                json!({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated",
                       "invert": true}),
                byte_level(false, false),
            ]),
            "a pre-tokenizer before ByteLevel is not Split(regex, Isolated)",
        ),
        (
            seq(vec![
                json!({"type": "Digits", "individual_digits": true}),
                byte_level(false, false),
            ]),
            "a pre-tokenizer before ByteLevel is not Split(regex, Isolated)",
        ),
        (
            json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                "split": true}),
            "the pre-tokenizer is not byte-level",
        ),
    ];
    for (config, why) in cases {
        assert_eq!(splitter(config.clone()), Err(Ineligible(why)), "{config}");
    }
    assert_eq!(
        Splitter::new(None).err(),
        Some(Ineligible("the pre-tokenizer is not byte-level"))
    );
}
