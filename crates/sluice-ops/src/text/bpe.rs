//! A fast path for `text.tokenize` with byte-level BPE tokenizers (GPT-2, cl100k / Llama 3,
//! o200k, Qwen 2, DeepSeek).
//!
//! `tokenizers::Tokenizer::encode` builds a full `Encoding` (offsets, token strings, word
//! ids, ...) through normalized-string bookkeeping; the op only keeps the ids. [`FastBpe`]
//! computes those ids directly: the pre-tokenizer's split ([`super::pretok`]: GPT-2's, the
//! tiktoken-style patterns of cl100k, o200k, Llama 3 and Qwen 2, DeepSeek's chain of splits),
//! bytes straight to byte-level symbol ids, the BPE merges by rank, the post-processor's
//! special tokens, and a per-thread cache of words already merged.
//!
//! It must give exactly the ids `encode` gives, so it only exists for tokenizers whose
//! pipeline it reproduces ([`FastBpe::new`] says why not otherwise), and it declines a line
//! (the caller then uses `encode`) whenever the line needs a stage it does not implement: an
//! added token in the text (before or after normalization).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::{ModelWrapper, Tokenizer};
use unicode_normalization_alignments::UnicodeNormalization;

use super::frame::Frame;
use super::pretok::Splitter;
use super::word_cache::{CacheKey, WordCache};

/// The normalizer of a tokenizer the fast path takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Norm {
    None,
    Nfc,
    Nfkc,
}

impl Norm {
    /// The normalizer `n` is, when it is one of these: none, NFC or NFKC, alone or as the
    /// only step of a `Sequence` (DeepSeek's files hold an empty one).
    fn of(n: Option<&NormalizerWrapper>) -> Result<Self, Ineligible> {
        match n {
            None => Ok(Norm::None),
            Some(NormalizerWrapper::NFC(_)) => Ok(Norm::Nfc),
            Some(NormalizerWrapper::NFKC(_)) => Ok(Norm::Nfkc),
            Some(NormalizerWrapper::Sequence(seq)) => match seq.as_ref() {
                [] => Ok(Norm::None),
                [only] => Norm::of(Some(only)),
                _ => Err(Ineligible("the normalizer is not NFC or NFKC")),
            },
            Some(_) => Err(Ineligible("the normalizer is not NFC or NFKC")),
        }
    }
}

/// Why a tokenizer gets no fast path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ineligible(pub &'static str);

impl std::fmt::Display for Ineligible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no BPE fast path: {}", self.0)
    }
}

/// Byte-level BPE encoding of whole lines, identical in ids to `Tokenizer::encode` for the
/// tokenizers [`FastBpe::new`] accepts.
///
/// ```no_run
/// use sluice_ops::text::FastBpe;
///
/// let tok = tokenizers::Tokenizer::from_file("tokenizer.json").unwrap();
/// let fast = FastBpe::new(&tok, false).expect("a byte-level BPE tokenizer");
/// let ids = fast.encode("Hello world").unwrap_or_else(|| {
///     tok.encode("Hello world", false).unwrap().get_ids().to_vec() // a line it declines
/// });
/// ```
pub struct FastBpe {
    /// Names this tokenizer's word caches in each thread.
    cache: CacheKey,
    /// The vocab id of each byte's byte-level symbol (GPT-2's byte-to-unicode map).
    byte_ids: [u32; 256],
    /// (left id, right id) -> (rank, merged id).
    merges: Merges,
    /// With `ignore_merges`, a word that is itself in the vocab is that one token.
    whole_words: Option<FxHashMap<Box<[u8]>, u32>>,
    /// The tokenizer's normalizer, applied to non-ASCII text (it leaves ASCII as it is).
    norm: Norm,
    /// Splits the text into words as the pre-tokenizer does.
    split: Splitter,
    /// The special tokens around the line's ids, and the added tokens it must not hold.
    frame: Frame,
}

impl std::fmt::Debug for FastBpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastBpe")
            .field("merges", &self.merges.len())
            .field("ignore_merges", &self.whole_words.is_some())
            .field("split", &self.split)
            .field("norm", &self.norm)
            .field("frame", &self.frame)
            .finish_non_exhaustive()
    }
}

impl FastBpe {
    /// The fast path for `tok` encoding with `add_special_tokens`, if `tok` is a byte-level
    /// BPE whose every stage this path reproduces exactly: a BPE model without dropout,
    /// subword prefix/suffix or byte fallback whose vocab holds all 256 byte symbols (so no
    /// unknown token can arise); a byte-level pre-tokenizer [`Splitter::new`] takes; no
    /// normalizer, or NFC/NFKC; no truncation or padding; and a post-processor that adds
    /// fixed ids around the text's (none, `ByteLevel`, a single-sequence
    /// `TemplateProcessing` such as Llama 3's `<|begin_of_text|>`, or a sequence of those;
    /// any when `add_special_tokens` is false).
    pub fn new(tok: &Tokenizer, add_special_tokens: bool) -> Result<Self, Ineligible> {
        let bpe = plain_bpe(tok)?;
        if bpe.byte_fallback {
            return Err(Ineligible("BPE uses byte fallback"));
        }
        let split = Splitter::new(tok.get_pre_tokenizer())?;
        let norm = Norm::of(tok.get_normalizer())?;
        let frame = Frame::new(tok, add_special_tokens)?;
        let (byte_ids, merges, whole_words) = model_tables(bpe)?;
        Ok(FastBpe {
            cache: CacheKey::new(),
            byte_ids,
            merges,
            whole_words,
            norm,
            split,
            frame,
        })
    }

    /// The ids of `text`, or `None` when the line needs what this path does not do (the
    /// caller then encodes it with the tokenizer).
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        self.encode_prefix(text, usize::MAX)
    }

    /// The ids of `text` as far as its first `limit` at least: the words after the one that
    /// reaches `limit` are not split or merged (a word's ids do not depend on the words after
    /// it), so `tokenize(max_length=...)` of a long document costs what its prefix does.
    /// `None` as for [`FastBpe::encode`].
    pub fn encode_prefix(&self, text: &str, limit: usize) -> Option<Vec<u32>> {
        if self.frame.holds_added(text) {
            return None;
        }
        // `encode` normalizes first, then `ByteLevel` adds the prefix space. NFC and NFKC leave
        // ASCII as it is; other text is normalized with the same crate, so it is the same text.
        let normalized;
        let text = match self.norm {
            Norm::Nfc if !text.is_ascii() => {
                normalized = text.nfc().map(|(c, _)| c).collect::<String>();
                normalized.as_str()
            }
            Norm::Nfkc if !text.is_ascii() => {
                normalized = text.nfkc().map(|(c, _)| c).collect::<String>();
                normalized.as_str()
            }
            _ => text,
        };
        // An added token the normalization made (full-width letters, ligatures).
        if self.norm != Norm::None && self.frame.holds_added(text) {
            return None;
        }
        let prefixed;
        let text = if self.split.add_prefix_space && !text.is_empty() && !text.starts_with(' ') {
            prefixed = format!(" {text}");
            prefixed.as_str()
        } else {
            text
        };
        let guess = (text.len() / 3 + 1).min(limit.saturating_add(16));
        Some(self.frame.ids(guess, |ids| {
            self.cache.with(|cache| {
                self.split.words(text, &mut |word| {
                    self.word(word, cache, ids);
                    ids.len() < limit
                })
            })
        }))
    }

    /// Appends the ids of one pre-tokenized word, from the cache when it holds them.
    fn word(&self, word: &[u8], cache: &mut WordCache, out: &mut Vec<u32>) {
        cache.ids(word, out, |out| self.merge(word, out));
    }

    /// BPE on one word's bytes, as `tokenizers`' `Word::merge_all` does it: repeatedly merge
    /// the adjacent pair of lowest rank, the leftmost among equals.
    fn merge(&self, word: &[u8], out: &mut Vec<u32>) {
        if let Some(&id) = self.whole_words.as_ref().and_then(|w| w.get(word)) {
            out.push(id);
            return;
        }
        if word.len() == 1 {
            out.push(self.byte_ids[usize::from(word[0])]);
            return;
        }
        merge_ids(
            &self.merges,
            word.iter().map(|&b| self.byte_ids[usize::from(b)]),
            out,
        );
    }
}

/// BPE on one word's initial symbols, as `tokenizers`' `Word::merge_all` does it: repeatedly
/// merge the adjacent pair of lowest rank, the leftmost among equals.
pub(super) fn merge_ids(
    merges: &Merges,
    ids: impl ExactSizeIterator<Item = u32>,
    out: &mut Vec<u32>,
) {
    // A linked list over the symbols; a merged-away symbol is marked `removed`.
    const NONE: usize = usize::MAX;
    struct Symbol {
        id: u32,
        prev: usize,
        next: usize,
        removed: bool,
    }
    let n = ids.len();
    let mut symbols: Vec<Symbol> = ids
        .enumerate()
        .map(|(i, id)| Symbol {
            id,
            prev: if i == 0 { NONE } else { i - 1 },
            next: if i + 1 == n { NONE } else { i + 1 },
            removed: false,
        })
        .collect();
    // Min-heap of (rank, left position, merged id). Entries go stale as neighbours
    // merge; one is still valid iff the pair now at its position merges to the same id
    // (a different pair there spans more bytes, so it cannot make the same token).
    let mut heap = BinaryHeap::with_capacity(n);
    for (i, w) in symbols.windows(2).enumerate() {
        if let Some(&(rank, new_id)) = merges.get(&(w[0].id, w[1].id)) {
            heap.push(Reverse((rank, i, new_id)));
        }
    }
    while let Some(Reverse((_, pos, new_id))) = heap.pop() {
        let left = &symbols[pos];
        if left.removed || left.next == NONE {
            continue;
        }
        let next = left.next;
        let current = merges.get(&(left.id, symbols[next].id));
        if current.is_none_or(|&(_, id)| id != new_id) {
            continue;
        }
        let after = symbols[next].next;
        symbols[next].removed = true;
        symbols[pos].id = new_id;
        symbols[pos].next = after;
        if after != NONE {
            symbols[after].prev = pos;
            if let Some(&(rank, id)) = merges.get(&(new_id, symbols[after].id)) {
                heap.push(Reverse((rank, pos, id)));
            }
        }
        let prev = symbols[pos].prev;
        if prev != NONE {
            if let Some(&(rank, id)) = merges.get(&(symbols[prev].id, new_id)) {
                heap.push(Reverse((rank, prev, id)));
            }
        }
    }
    out.extend(symbols.iter().filter(|s| !s.removed).map(|s| s.id));
}

/// `tok`'s model when it is a BPE that merges deterministically at the word level (no dropout,
/// no subword prefix or suffix), and nothing truncates or pads what it makes.
pub(super) fn plain_bpe(tok: &Tokenizer) -> Result<&BPE, Ineligible> {
    let ModelWrapper::BPE(bpe) = tok.get_model() else {
        return Err(Ineligible("the model is not BPE"));
    };
    if bpe.dropout.is_some_and(|d| d != 0.0) {
        return Err(Ineligible("BPE dropout is random"));
    }
    if bpe.continuing_subword_prefix.is_some() || bpe.end_of_word_suffix.is_some() {
        return Err(Ineligible("BPE has a subword prefix or suffix"));
    }
    if tok.get_truncation().is_some() || tok.get_padding().is_some() {
        return Err(Ineligible("the tokenizer truncates or pads"));
    }
    Ok(bpe)
}

type ModelTables = ([u32; 256], Merges, Option<FxHashMap<Box<[u8]>, u32>>);

/// (left id, right id) → (rank, merged id).
pub(super) type Merges = FxHashMap<(u32, u32), (u32, u32)>;

/// The BPE's merges by id.
pub(super) fn merge_table(bpe: &BPE) -> Result<Merges, Ineligible> {
    let vocab = bpe.get_vocab();
    // The model keeps its merges private; its serde form lists them in rank order.
    let json = serde_json::to_value(bpe).map_err(|_| Ineligible("the BPE does not serialize"))?;
    let listed = json["merges"]
        .as_array()
        .ok_or(Ineligible("the BPE has no merge list"))?;
    let mut merges = FxHashMap::default();
    merges.reserve(listed.len());
    for (rank, pair) in listed.iter().enumerate() {
        let (Some(a), Some(b)) = (pair[0].as_str(), pair[1].as_str()) else {
            return Err(Ineligible("a merge is not a pair of strings"));
        };
        let id = |s: &str| vocab.get(s).copied();
        let (Some(ia), Some(ib), Some(merged)) = (id(a), id(b), id(&format!("{a}{b}"))) else {
            return Err(Ineligible("a merge names a token outside the vocab"));
        };
        let rank = u32::try_from(rank).map_err(|_| Ineligible("too many merges"))?;
        merges.insert((ia, ib), (rank, merged));
    }
    Ok(merges)
}

/// The byte symbol ids, the merges by id, and (with `ignore_merges`) the vocab by bytes.
fn model_tables(bpe: &BPE) -> Result<ModelTables, Ineligible> {
    let vocab = bpe.get_vocab();
    let to_char = byte_to_char();
    let mut byte_ids = [0; 256];
    for (b, c) in to_char.iter().enumerate() {
        byte_ids[b] = *vocab
            .get(c.to_string().as_str())
            .ok_or(Ineligible("the vocab lacks a byte-level symbol"))?;
    }
    let merges = merge_table(bpe)?;
    let whole_words = bpe.ignore_merges.then(|| {
        let from_char: FxHashMap<char, u8> =
            (0..=255u8).map(|b| (to_char[usize::from(b)], b)).collect();
        vocab
            .iter()
            .filter_map(|(token, &id)| {
                // Tokens with other characters can never be a byte-level word.
                let bytes: Option<Box<[u8]>> =
                    token.chars().map(|c| from_char.get(&c).copied()).collect();
                Some((bytes?, id))
            })
            .collect()
    });
    Ok((byte_ids, merges, whole_words))
}

/// GPT-2's byte-to-unicode map, in which byte-level BPE vocabularies are written: printable
/// bytes stand for themselves, the others for the characters from U+0100 on, in byte order.
///
/// ```
/// let map = sluice_ops::text::byte_to_char();
/// assert_eq!((map[usize::from(b'a')], map[usize::from(b' ')]), ('a', 'Ġ'));
/// ```
pub fn byte_to_char() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut map = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        map[usize::from(b)] = if printable(b) {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap_or('\0')
        };
    }
    map
}

#[cfg(test)]
#[path = "bpe_tests.rs"]
mod tests;
