//! [`FastBpe`] against `tokenizers::Tokenizer::encode`, which it must match id for id.

use std::time::Instant;

use serde_json::{json, Value as Json};
use tokenizers::Tokenizer;

use super::*;
use crate::text::pretok;
use crate::text::test_strings::{adversarial, ascii_pairs, learn_merges, random_strings};
use crate::text::word_cache::pooled;

/// Text the test merges are learnt from: English with contractions, digits, code-ish
/// punctuation, runs of spaces, and some non-ASCII words.
const TRAIN: &str = "the quick brown fox jumps over the lazy dog. it's the dog's day; \
    they're here, we've seen it, I'm sure they'll say he'd go. The THE the 1234 5678 90 \
    2024-11-27 3.14159 foo_bar(baz) -> qux; if x == y { return z; } // comment \
    naïve café résumé Straße Ελληνικά русский 日本語 中文 emoji 😀 \
    \t\tindented    spaced   out    text with     many     spaces\n\nnew lines \r\n";

/// GPT-2's byte-level symbols of `text`, one string per byte.
fn symbols(text: &str) -> Vec<String> {
    let map = byte_to_char();
    text.bytes()
        .map(|b| map[usize::from(b)].to_string())
        .collect()
}

/// `n` merges learnt greedily (most frequent pair, ties by the pair) from the words of
/// [`TRAIN`], then a few that make the same token two ways ("xy"+"z" and "x"+"yz"), and
/// ones where a lower-rank pair on the right turns a queued pair stale ("QJ" after "JK").
fn merges(n: usize) -> Vec<(String, String)> {
    let words = TRAIN
        .split(' ')
        .map(|w| symbols(&format!(" {w}")))
        .collect();
    let mut merges = learn_merges(words, n);
    for (a, b) in [
        ("x", "y"),
        ("y", "z"),
        ("xy", "z"),
        ("x", "yz"),
        ("xyz", "xyz"),
        ("J", "K"),
        ("Q", "J"),
        ("Q", "JK"),
        ("QJ", "K"),
        ("QJK", "QJK"),
    ] {
        merges.push((a.into(), b.into()));
    }
    merges
}

/// Knobs of the test tokenizer.
#[derive(Clone)]
struct Cfg {
    normalizer: Json,
    pre_tokenizer: Json,
    post_processor: Json,
    model_type: &'static str,
    dropout: Json,
    ignore_merges: bool,
    byte_fallback: bool,
    /// Leave these bytes' symbols out of the vocab.
    missing_bytes: Vec<u8>,
}

impl Default for Cfg {
    fn default() -> Self {
        Cfg {
            normalizer: Json::Null,
            pre_tokenizer: byte_level(false, true),
            post_processor: Json::Null,
            model_type: "BPE",
            dropout: Json::Null,
            ignore_merges: false,
            byte_fallback: false,
            missing_bytes: vec![],
        }
    }
}

/// The GPT-2 split as `Sequence[Split(regex), ByteLevel]`, as some exported tokenizers
/// write it.
fn split_then_byte_level(pattern: &str, add_prefix_space: bool) -> Json {
    json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
        byte_level(add_prefix_space, false),
    ]})
}

/// DeepSeek V3's shape: digits in threes, then runs of CJK, then a pattern of its own, each
/// split applied to the pieces of the one before.
fn deepseek_like() -> Json {
    let split = |pattern: &str| {
        json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
               "invert": false})
    };
    json!({"type": "Sequence", "pretokenizers": [
        split(pretok::DIGITS3),
        split(pretok::DEEPSEEK_CJK),
        split(pretok::DEEPSEEK),
        byte_level(false, false),
    ]})
}

/// Llama 3's post-processor: `<|endoftext|>` (the test tokenizer's special token) before
/// the text.
fn bos_template() -> Json {
    json!({"type": "TemplateProcessing",
           "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}},
                    {"Sequence": {"id": "B", "type_id": 1}}],
           "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [558],
                                                "tokens": ["<|endoftext|>"]}}})
}

fn byte_level(add_prefix_space: bool, use_regex: bool) -> Json {
    json!({"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": true,
           "use_regex": use_regex})
}

/// A byte-level BPE tokenizer: 256 byte symbols, the merges of [`merges`], and added
/// tokens `<|endoftext|>` (special) and `[xyz]` (normalized).
fn tokenizer(cfg: &Cfg) -> Tokenizer {
    let map = byte_to_char();
    let mut vocab = serde_json::Map::new();
    for b in 0..=255u8 {
        if !cfg.missing_bytes.contains(&b) {
            vocab.insert(map[usize::from(b)].to_string(), json!(b));
        }
    }
    let merges = merges(300);
    for (a, b) in &merges {
        let n = vocab.len();
        vocab.entry(format!("{a}{b}")).or_insert(json!(n));
    }
    let n = vocab.len();
    let model = if cfg.model_type == "WordLevel" {
        json!({"type": "WordLevel", "vocab": vocab, "unk_token": "<|endoftext|>"})
    } else {
        json!({"type": "BPE", "dropout": cfg.dropout, "unk_token": null,
               "continuing_subword_prefix": null, "end_of_word_suffix": null,
               "fuse_unk": false, "byte_fallback": cfg.byte_fallback,
               "ignore_merges": cfg.ignore_merges, "vocab": vocab, "merges": merges})
    };
    let added = |id: usize, content: &str, special: bool| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": !special, "special": special})
    };
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(n, "<|endoftext|>", true), added(n + 1, "[xyz]", false)],
        "normalizer": cfg.normalizer, "pre_tokenizer": cfg.pre_tokenizer,
        "post_processor": cfg.post_processor, "decoder": null, "model": model,
    });
    tok.to_string().parse().expect("a valid test tokenizer")
}

/// Checks the fast path against `encode` on `texts`; returns how many it took.
fn check(tok: &Tokenizer, fast: &FastBpe, add_special_tokens: bool, texts: &[String]) -> usize {
    let mut taken = 0;
    for text in texts {
        if let Some(ids) = fast.encode(text) {
            let want = tok.encode(text.as_str(), add_special_tokens).unwrap();
            assert_eq!(ids, want.get_ids(), "{text:?}");
            taken += 1;
        }
    }
    taken
}

/// Every string in each eligible configuration; the fast path must take every line except
/// those with added tokens (normalized or not).
#[test]
fn matches_encode_on_adversarial_and_random_strings() {
    let mut texts = adversarial();
    texts.extend(random_strings(7, 3_000));
    let nfkc = json!({"type": "NFKC"});
    let configs = [
        (Cfg::default(), true),
        (
            Cfg {
                pre_tokenizer: byte_level(true, true),
                ..Cfg::default()
            },
            true,
        ),
        (
            Cfg {
                normalizer: nfkc.clone(),
                ..Cfg::default()
            },
            true,
        ),
        (
            Cfg {
                normalizer: json!({"type": "NFC"}),
                pre_tokenizer: byte_level(true, true),
                ..Cfg::default()
            },
            false,
        ),
        (
            Cfg {
                ignore_merges: true,
                post_processor: byte_level(false, true),
                ..Cfg::default()
            },
            true,
        ),
        (
            Cfg {
                post_processor: json!({"type": "BertProcessing", "sep": ["[xyz]", 1],
                                       "cls": ["<|endoftext|>", 0]}),
                ..Cfg::default()
            },
            false,
        ),
        (
            Cfg {
                dropout: json!(0.0),
                ..Cfg::default()
            },
            true,
        ),
        (
            Cfg {
                pre_tokenizer: split_then_byte_level(pretok::GPT2, false),
                ..Cfg::default()
            },
            true,
        ),
        // The tiktoken-style patterns: Llama 3 (cl100k's, ignore_merges, a BOS token), GPT-4o
        // (o200k), Qwen 2 (NFC, one digit a word), and DeepSeek's chain of splits.
        (
            Cfg {
                pre_tokenizer: split_then_byte_level(pretok::CL100K, false),
                ignore_merges: true,
                post_processor: json!({"type": "Sequence", "processors": [
                    byte_level(true, true), bos_template()]}),
                ..Cfg::default()
            },
            true,
        ),
        (
            Cfg {
                pre_tokenizer: split_then_byte_level(pretok::O200K, false),
                post_processor: bos_template(),
                ..Cfg::default()
            },
            false,
        ),
        (
            Cfg {
                normalizer: json!({"type": "NFC"}),
                pre_tokenizer: split_then_byte_level(pretok::QWEN2, false),
                ..Cfg::default()
            },
            true,
        ),
        (
            Cfg {
                normalizer: json!({"type": "Sequence", "normalizers": []}), // DeepSeek's file
                pre_tokenizer: deepseek_like(),
                post_processor: bos_template(),
                ..Cfg::default()
            },
            true,
        ),
        (
            Cfg {
                normalizer: json!({"type": "Sequence", "normalizers": [{"type": "NFKC"}]}),
                ..Cfg::default()
            },
            true,
        ),
    ];
    for (i, (cfg, add_special_tokens)) in configs.iter().enumerate() {
        let tok = tokenizer(cfg);
        let fast = FastBpe::new(&tok, *add_special_tokens).expect("eligible");
        // Under NFKC a full-width added token becomes one (NFC leaves it as it is).
        let nfkc_form = |t: &str| -> String {
            use unicode_normalization_alignments::UnicodeNormalization;
            if cfg.normalizer.to_string().contains("NFKC") {
                t.nfkc().map(|(c, _)| c).collect()
            } else {
                t.to_string()
            }
        };
        let expected = texts
            .iter()
            .map(|t| nfkc_form(t))
            .filter(|t| !t.contains("<|endoftext|>") && !t.contains("[xyz]"))
            .count();
        assert_eq!(
            check(&tok, &fast, *add_special_tokens, &texts),
            expected,
            "config {i}"
        );
    }
}

/// The words the cache keeps give the same ids the second time, across lines.
#[test]
fn cached_words_give_the_same_ids() {
    let tok = tokenizer(&Cfg::default());
    let fast = FastBpe::new(&tok, true).unwrap();
    let texts = random_strings(11, 500);
    for _ in 0..2 {
        check(&tok, &fast, true, &texts);
    }
}

#[test]
fn every_ascii_pair_and_triple() {
    let tok = tokenizer(&Cfg::default());
    let fast = FastBpe::new(&tok, true).unwrap();
    let texts = ascii_pairs();
    assert_eq!(check(&tok, &fast, true, &texts), texts.len());
}

#[test]
fn ineligible_tokenizers_get_no_fast_path() {
    let cases = [
        (
            Cfg {
                model_type: "WordLevel",
                ..Cfg::default()
            },
            true,
            "the model is not BPE",
        ),
        (
            Cfg {
                dropout: json!(0.1),
                ..Cfg::default()
            },
            true,
            "BPE dropout is random",
        ),
        (
            Cfg {
                byte_fallback: true,
                ..Cfg::default()
            },
            true,
            "BPE uses byte fallback",
        ),
        (
            Cfg {
                post_processor: json!({"type": "BertProcessing", "sep": ["[xyz]", 1],
                                       "cls": ["<|endoftext|>", 0]}),
                ..Cfg::default()
            },
            true,
            "the post-processor adds special tokens",
        ),
        (
            Cfg {
                normalizer: json!({"type": "Lowercase"}),
                ..Cfg::default()
            },
            true,
            "the normalizer is not NFC or NFKC",
        ),
        (
            Cfg {
                normalizer: json!({"type": "Sequence", "normalizers": [{"type": "NFC"},
                                                                       {"type": "Lowercase"}]}),
                ..Cfg::default()
            },
            true,
            "the normalizer is not NFC or NFKC",
        ),
        (
            Cfg {
                pre_tokenizer: json!({"type": "Whitespace"}),
                ..Cfg::default()
            },
            true,
            "the pre-tokenizer is not byte-level",
        ),
        (
            Cfg {
                pre_tokenizer: byte_level(false, false),
                ..Cfg::default()
            },
            true,
            "the ByteLevel pre-tokenizer does not split",
        ),
        (
            Cfg {
                pre_tokenizer: split_then_byte_level(pretok::GPT2, true),
                ..Cfg::default()
            },
            true,
            "the ByteLevel after the splits splits again or adds a prefix space",
        ),
        (
            Cfg {
                pre_tokenizer: json!({"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed",
                     "invert": false},
                    byte_level(false, false)]}),
                ..Cfg::default()
            },
            true,
            "a pre-tokenizer before ByteLevel is not Split(regex, Isolated)",
        ),
        (
            Cfg {
                pre_tokenizer: json!({"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated",
                     "invert": false},
                    byte_level(false, false)]}),
                ..Cfg::default()
            },
            true,
            "a Split splits on a string, not a regex",
        ),
        (
            Cfg {
                pre_tokenizer: json!({"type": "Sequence", "pretokenizers": [
                    byte_level(false, false),
                    {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated",
                     "invert": false}]}),
                ..Cfg::default()
            },
            true,
            "the pre-tokenizer sequence does not end in ByteLevel",
        ),
        (
            Cfg {
                post_processor: json!({"type": "TemplateProcessing",
                    "single": [{"Sequence": {"id": "A", "type_id": 0}},
                               {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [], "special_tokens": {}}),
                ..Cfg::default()
            },
            true,
            "the post-processor adds special tokens",
        ),
        (
            Cfg {
                missing_bytes: vec![0],
                ..Cfg::default()
            },
            true,
            "the vocab lacks a byte-level symbol",
        ),
    ];
    for (cfg, add_special_tokens, why) in cases {
        let err = FastBpe::new(&tokenizer(&cfg), add_special_tokens).unwrap_err();
        assert_eq!(err.0, why);
    }
}

/// Why a prefix space rules the `Split` form out: `ByteLevel` then prefixes every piece.
#[test]
fn a_split_sequence_with_a_prefix_space_prefixes_every_piece() {
    let encode = |pre_tokenizer: Json, text: &str| {
        let tok = tokenizer(&Cfg {
            pre_tokenizer,
            ..Cfg::default()
        });
        tok.encode(text, false).unwrap().get_ids().to_vec()
    };
    let split = encode(split_then_byte_level(pretok::GPT2, true), "a,b");
    assert_ne!(split, encode(byte_level(true, true), "a,b"));
    assert_eq!(split, encode(byte_level(false, true), " a , b"));
}

/// `text.tokenize` gives `encode`'s ids whether a line takes the fast path or not (an added
/// token; a non-ASCII line under NFKC, normalized first), with `max_length` and the mask
/// applied after.
#[test]
fn the_op_gives_the_ids_of_encode() {
    use sluice_core::{Sample, TensorData, Value};
    let cfg = Cfg {
        normalizer: json!({"type": "NFKC"}),
        ..Cfg::default()
    };
    let tok = tokenizer(&cfg);
    let json = tok.to_string(false).unwrap();
    let spec = json!({"op": "text.tokenize", "tokenizer_json": json, "max_length": 40,
                      "attention_mask": "m"});
    let op = crate::OpSpec::from_json(&spec.to_string())
        .unwrap()
        .build()
        .unwrap();
    for text in [
        "it's the dog's day",
        "a<|endoftext|>b",
        "naïve café",
        "",
        "x".repeat(99).as_str(),
    ] {
        let s = Sample::from_pairs([("text", Value::Str(text.into()))]);
        let s = crate::testing::one(op.apply(s, &crate::testing::cx(1, 0)).unwrap());
        let want: Vec<i64> = tok
            .encode(text, true)
            .unwrap()
            .get_ids()
            .iter()
            .take(40)
            .map(|&i| i64::from(i))
            .collect();
        match (s.get("input_ids"), s.get("m")) {
            (Some(Value::Tensor(ids)), Some(Value::Tensor(m))) => {
                assert_eq!(ids.data(), &TensorData::I64(want.clone()), "{text:?}");
                assert_eq!(m.data(), &TensorData::I64(vec![1; want.len()]), "{text:?}");
            }
            other => panic!("{other:?}"),
        }
    }
    // The added token's line went through `tokenizers`; the others took the fast path.
    assert_eq!(
        op.counters(),
        [("fast_path_lines", 4), ("tokenizers_lines", 1)]
    );
}

/// The corpus and tokenizer of `SLUICE_BPE_CORPUS` / `SLUICE_BPE_TOKENIZER`, when both are set.
fn corpus() -> Option<(Tokenizer, Vec<String>)> {
    let lines = std::env::var("SLUICE_BPE_CORPUS").ok()?;
    let tok = std::env::var("SLUICE_BPE_TOKENIZER").ok()?;
    let text = std::fs::read_to_string(lines).expect("SLUICE_BPE_CORPUS is readable text");
    let tok = Tokenizer::from_file(tok).expect("SLUICE_BPE_TOKENIZER is a tokenizer.json");
    Some((tok, text.lines().map(str::to_string).collect()))
}

/// Every line of a real corpus, both with and without special tokens.
#[test]
#[ignore = "needs SLUICE_BPE_CORPUS and SLUICE_BPE_TOKENIZER"]
fn matches_encode_on_a_corpus() {
    let (tok, lines) = corpus().expect("SLUICE_BPE_CORPUS and SLUICE_BPE_TOKENIZER are set");
    for add_special_tokens in [true, false] {
        let fast = FastBpe::new(&tok, add_special_tokens).expect("eligible");
        let taken = check(&tok, &fast, add_special_tokens, &lines);
        println!(
            "add_special_tokens={add_special_tokens}: {} lines, {taken} on the fast path \
             ({:.1}%), all ids identical",
            lines.len(),
            100.0 * taken as f64 / lines.len() as f64
        );
    }
}

/// Lines per second on one thread: `encode` for every line, then the fast path (falling
/// back to `encode` for the lines it declines) from a cold and then a warm word cache.
#[test]
#[ignore = "needs SLUICE_BPE_CORPUS and SLUICE_BPE_TOKENIZER; run with --profile dev-release"]
fn speed_on_a_corpus() {
    let (tok, lines) = corpus().expect("SLUICE_BPE_CORPUS and SLUICE_BPE_TOKENIZER are set");
    let t = Instant::now();
    let fast = FastBpe::new(&tok, true).expect("eligible");
    println!("FastBpe::new: {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    let rate = |name: &str, f: &dyn Fn(&str) -> usize| {
        let t = Instant::now();
        let ids: usize = lines.iter().map(|l| f(l)).sum();
        let s = t.elapsed().as_secs_f64();
        println!(
            "{name}: {:.0} lines/s ({ids} ids, {s:.2} s)",
            lines.len() as f64 / s
        );
        s
    };
    let encode = |l: &str| tok.encode(l, true).unwrap().get_ids().len();
    let generic = rate("generic encode", &encode);
    let either = |l: &str| fast.encode(l).map_or_else(|| encode(l), |ids| ids.len());
    let cold = rate("fast path, cold cache", &either);
    let warm = rate("fast path, warm cache", &either);
    println!(
        "speedup: {:.2}x cold, {:.2}x warm",
        generic / cold,
        generic / warm
    );
    // The whole op, samples in and tensors out, with and without its fast path.
    let spec: crate::OpSpec =
        serde_json::from_value(json!({"op": "text.tokenize", "tokenizer": "unused"})).unwrap();
    let crate::OpSpec::Text(spec) = spec else {
        unreachable!()
    };
    let tok = std::sync::Arc::new(tok);
    let op = |fast| super::super::TextOp {
        spec: spec.clone(),
        tokenizer: Some(super::super::Tokenize::new((*tok).clone(), fast)),
    };
    let apply = |op: &super::super::TextOp, l: &str| {
        use sluice_core::{Op, Sample, Value};
        let s = Sample::from_pairs([("text", Value::Str(l.into()))]);
        let out = crate::testing::one(op.apply(s, &crate::testing::cx(1, 0)).unwrap());
        match out.get("input_ids") {
            Some(Value::Tensor(ids)) => ids.shape()[0],
            other => panic!("{other:?}"),
        }
    };
    let generic_op = op(None);
    let generic = rate("op, generic", &|l| apply(&generic_op, l));
    let fast_op = op(Some(super::super::FastPath::ByteLevel(
        FastBpe::new(&tok, true).unwrap(),
    )));
    let fast = rate("op, fast path", &|l| apply(&fast_op, l));
    println!("op speedup: {:.2}x", generic / fast);
}

#[test]
fn a_thread_that_ends_hands_its_word_cache_to_the_next() {
    let tok = tokenizer(&Cfg::default());
    let fast = std::sync::Arc::new(FastBpe::new(&tok, false).expect("eligible"));
    let key = fast.cache.id();
    let line = "the quick brown fox jumps over the lazy dog";
    let want = fast.encode(line);
    assert!(want.is_some());
    assert_eq!(pooled(key), 0);
    // Joined threads (a thread's locals are dropped before its join returns).
    let on_a_thread = |check_pool: bool| {
        let (fast, want) = (fast.clone(), want.clone());
        std::thread::spawn(move || {
            assert_eq!(fast.encode(line), want);
            if check_pool {
                assert_eq!(fast.cache.pooled(), 0, "the cache was taken");
            }
        })
        .join()
        .unwrap();
    };
    // A worker encodes and ends: its cache waits for the next thread.
    on_a_thread(false);
    assert_eq!(pooled(key), 1);
    // The next thread takes it (warm), gives the same ids, and hands it on when it ends.
    on_a_thread(true);
    assert_eq!(pooled(key), 1);
    // A dropped tokenizer's caches go with it.
    drop(fast);
    assert_eq!(pooled(key), 0);
}

/// A prefix encode gives the first ids of the whole line, and stops early: a long document
/// truncated to a few ids costs what its first words do.
#[test]
fn a_prefix_encode_gives_the_first_ids_and_stops_early() {
    let cfg = Cfg {
        pre_tokenizer: split_then_byte_level(pretok::CL100K, false),
        post_processor: bos_template(),
        ..Cfg::default()
    };
    let tok = tokenizer(&cfg);
    let fast = FastBpe::new(&tok, true).unwrap();
    let mut texts = adversarial();
    texts.extend(random_strings(23, 500));
    for text in texts
        .iter()
        .filter(|t| !t.contains("<|endoftext|>") && !t.contains("[xyz]"))
    {
        let whole = fast.encode(text).unwrap();
        for limit in [0, 1, 2, 5, 17, 1000] {
            let prefix = fast.encode_prefix(text, limit).unwrap();
            let n = limit.min(whole.len());
            assert_eq!(prefix[..n], whole[..n], "{text:?} limit {limit}");
        }
    }
    let long = "the quick brown fox ".repeat(100_000);
    let prefix = fast.encode_prefix(&long, 8).unwrap();
    assert!((8..16).contains(&prefix.len()), "{}", prefix.len());
    assert_eq!(prefix[..8], fast.encode(&long).unwrap()[..8]);
}
