//! The fast path for SentencePiece-style BPE tokenizers (Llama 2, Mistral): spaces become
//! `▁`, a `▁` goes in front, and the characters start as their vocab ids (or, for a
//! character outside the vocab, its UTF-8 bytes as `<0xXX>` tokens) and merge by rank —
//! word by word when no token can cross a word, else the line whole — the ids `tokenizers`
//! gives, without its alignment bookkeeping or the `Encoding` it builds.

use rustc_hash::FxHashMap;
use tokenizers::Tokenizer;

use super::bpe::{merge_ids, merge_table, plain_bpe, Ineligible, Merges};
use super::frame::Frame;
use super::word_cache::CacheKey;

/// SentencePiece's word boundary mark.
const MARK: char = '▁';

/// How the `▁` before the text comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prepend {
    /// The `Prepend("▁")` normalizer: always (Llama 2's original `tokenizer.json`).
    Always,
    /// `Metaspace` without splitting: unless the text already starts with one (a space).
    UnlessMarked,
}

/// SentencePiece-style BPE encoding of whole lines, identical in ids to `Tokenizer::encode`
/// for the tokenizers [`SpBpe::new`] accepts.
///
/// ```no_run
/// use sluice_ops::text::SpBpe;
///
/// let tok = tokenizers::Tokenizer::from_file("llama-2/tokenizer.json").unwrap();
/// let fast = SpBpe::new(&tok, true).expect("a SentencePiece-style BPE");
/// assert_eq!(fast.encode("Hello world").unwrap()[0], 1); // <s>
/// ```
pub struct SpBpe {
    merges: Merges,
    /// The vocab id of each single-character token.
    char_ids: FxHashMap<char, u32>,
    /// The `<0xXX>` token of each byte.
    byte_ids: [u32; 256],
    prepend: Prepend,
    /// No token holds a `▁` after another character, so no merge crosses the start of a
    /// word (a run of `▁` and what follows it up to the next run): each word merges alone,
    /// through the word cache, and a prefix of the words gives a prefix of the ids.
    words: bool,
    cache: CacheKey,
    /// The special tokens around the line's ids, and the added tokens it must not hold.
    frame: Frame,
}

impl std::fmt::Debug for SpBpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpBpe")
            .field("merges", &self.merges.len())
            .field("prepend", &self.prepend)
            .field("frame", &self.frame)
            .finish_non_exhaustive()
    }
}

impl SpBpe {
    /// The fast path for `tok` encoding with `add_special_tokens`, if `tok` is a
    /// SentencePiece-style BPE: a BPE model with byte fallback and all 256 `<0xXX>` tokens (so
    /// no unknown token can arise), without dropout, subword prefix/suffix or
    /// `ignore_merges`; either the normalizer `Sequence[Prepend("▁"), Replace(" ", "▁")]` and
    /// no pre-tokenizer, or no normalizer and a `Metaspace("▁")` pre-tokenizer that does not
    /// split; and a post-processor `FastBpe` takes too (Llama 2's `<s> $A`).
    pub fn new(tok: &Tokenizer, add_special_tokens: bool) -> Result<Self, Ineligible> {
        let bpe = plain_bpe(tok)?;
        if !bpe.byte_fallback {
            return Err(Ineligible("a SentencePiece-style BPE needs byte fallback"));
        }
        if bpe.ignore_merges {
            return Err(Ineligible("a SentencePiece-style BPE with ignore_merges"));
        }
        let json = |v: Result<serde_json::Value, serde_json::Error>| v.unwrap_or_default();
        let normalizer = json(serde_json::to_value(tok.get_normalizer()));
        let pre = json(serde_json::to_value(tok.get_pre_tokenizer()));
        let prepend = match (&normalizer, &pre) {
            (n, serde_json::Value::Null) if *n == prepend_and_replace() => Prepend::Always,
            (serde_json::Value::Null, p)
                if p["type"] == "Metaspace"
                    && p["replacement"] == MARK.to_string()
                    && p["split"] == false
                    && (p["prepend_scheme"] == "first" || p["prepend_scheme"] == "always") =>
            {
                Prepend::UnlessMarked
            }
            _ => {
                return Err(Ineligible(
                    "the normalizer and pre-tokenizer are not SentencePiece's space handling",
                ))
            }
        };
        let vocab = bpe.get_vocab();
        let mut byte_ids = [0; 256];
        for (b, id) in byte_ids.iter_mut().enumerate() {
            *id = *vocab
                .get(&format!("<0x{b:02X}>"))
                .ok_or(Ineligible("the vocab lacks a <0xXX> byte token"))?;
        }
        let words = !vocab.keys().any(|t| {
            let c: Vec<char> = t.chars().collect();
            c.windows(2).any(|w| w[0] != MARK && w[1] == MARK)
        });
        let char_ids = vocab
            .iter()
            .filter_map(|(token, &id)| {
                let mut chars = token.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Some((c, id)),
                    _ => None,
                }
            })
            .collect();
        Ok(SpBpe {
            merges: merge_table(bpe)?,
            char_ids,
            byte_ids,
            prepend,
            words,
            cache: CacheKey::new(),
            frame: Frame::new(tok, add_special_tokens)?,
        })
    }

    /// The ids of `text`, or `None` when the line needs what this path does not do: an added
    /// token in it, or no text at all (the caller then encodes it with the tokenizer).
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        self.encode_prefix(text, usize::MAX)
    }

    /// The ids of `text` as far as its first `limit` at least, when words merge alone (else
    /// all of them). `None` as for [`SpBpe::encode`].
    pub fn encode_prefix(&self, text: &str, limit: usize) -> Option<Vec<u32>> {
        if text.is_empty() || self.frame.holds_added(text) {
            return None;
        }
        let mut marked = String::with_capacity(text.len() + 3);
        // `Metaspace` replaces spaces first, so a text starting with a space or a `▁` of
        // its own already starts with one.
        if self.prepend == Prepend::Always || !text.starts_with([' ', MARK]) {
            marked.push(MARK);
        }
        marked.extend(text.chars().map(|c| if c == ' ' { MARK } else { c }));
        Some(self.frame.ids(marked.len() / 2, |ids| {
            if !self.words {
                return self.merge(&marked, ids);
            }
            self.cache.with(|cache| {
                for word in words(&marked) {
                    cache.ids(word.as_bytes(), ids, |out| self.merge(word, out));
                    if ids.len() >= limit {
                        break;
                    }
                }
            })
        }))
    }

    /// BPE on `text`'s characters (each its vocab id or its bytes' `<0xXX>` tokens).
    fn merge(&self, text: &str, out: &mut Vec<u32>) {
        let mut initial = Vec::with_capacity(text.len());
        for c in text.chars() {
            self.push_char(c, &mut initial);
        }
        merge_ids(&self.merges, initial.into_iter(), out);
    }

    /// Appends `c`'s initial symbol: its vocab id, or its UTF-8 bytes' `<0xXX>` tokens.
    fn push_char(&self, c: char, out: &mut Vec<u32>) {
        match self.char_ids.get(&c) {
            Some(&id) => out.push(id),
            None => {
                let mut buf = [0; 4];
                out.extend(
                    c.encode_utf8(&mut buf)
                        .bytes()
                        .map(|b| self.byte_ids[usize::from(b)]),
                );
            }
        }
    }
}

/// `marked`'s words: each run of `▁` with the characters up to the next run.
fn words(marked: &str) -> impl Iterator<Item = &str> {
    let mut rest = marked;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        // The word ends where a `▁` follows another character.
        let mut prev = None;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                let starts = c == MARK && prev.is_some_and(|p| p != MARK);
                prev = Some(c);
                starts
            })
            .map_or(rest.len(), |(i, _)| i);
        let (word, tail) = rest.split_at(end);
        rest = tail;
        Some(word)
    })
}

/// Llama 2's normalizer: `▁` before the text, each space a `▁`.
fn prepend_and_replace() -> serde_json::Value {
    serde_json::json!({"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": MARK.to_string()},
        {"type": "Replace", "pattern": {"String": " "}, "content": MARK.to_string()},
    ]})
}

#[cfg(test)]
#[path = "spbpe_tests.rs"]
mod tests;
