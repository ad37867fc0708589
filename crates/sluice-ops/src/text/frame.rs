//! What goes around a line's own ids on the BPE fast paths: the post-processor's special
//! tokens, and the added tokens a line must not hold (`encode` splits a line on them first,
//! which the fast paths do not do: such a line goes to `tokenizers`).

use aho_corasick::AhoCorasick;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{NormalizedString, Normalizer, Tokenizer};

use super::bpe::Ineligible;

pub(super) struct Frame {
    /// The ids the post-processor puts before and after the text's.
    before: Vec<u32>,
    after: Vec<u32>,
    /// The added tokens' contents (and their normalized forms).
    added: Option<AhoCorasick>,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("before", &self.before)
            .field("after", &self.after)
            .field(
                "added",
                &self.added.as_ref().map_or(0, AhoCorasick::patterns_len),
            )
            .finish()
    }
}

impl Frame {
    /// `tok`'s frame when the fast paths can reproduce it: a post-processor that adds fixed
    /// ids around the text's (none, `ByteLevel`, a single-sequence `TemplateProcessing` such
    /// as Llama's BOS, or a sequence of those; any without `add_special_tokens`).
    pub(super) fn new(tok: &Tokenizer, add_special_tokens: bool) -> Result<Self, Ineligible> {
        let (before, after) = match tok.get_post_processor() {
            Some(p) if add_special_tokens => special_ids(p)?,
            _ => (Vec::new(), Vec::new()),
        };
        Ok(Frame {
            before,
            after,
            added: added_tokens(tok)?,
        })
    }

    /// Whether `text` holds an added token's content.
    pub(super) fn holds_added(&self, text: &str) -> bool {
        self.added.as_ref().is_some_and(|ac| ac.is_match(text))
    }

    /// A line's ids: the special tokens before, what `body` appends (room for `guess`),
    /// the special tokens after.
    pub(super) fn ids(&self, guess: usize, body: impl FnOnce(&mut Vec<u32>)) -> Vec<u32> {
        let mut ids = Vec::with_capacity(guess + self.before.len() + self.after.len());
        ids.extend_from_slice(&self.before);
        body(&mut ids);
        ids.extend_from_slice(&self.after);
        ids
    }
}

/// The ids a post-processor puts before and after a single sequence's, when they are fixed:
/// `ByteLevel` adds none (its offset trimming changes no id), a `TemplateProcessing` whose
/// single-sequence template is special tokens around `$A` adds theirs, and a `Sequence`
/// adds what its parts add.
fn special_ids(p: &PostProcessorWrapper) -> Result<(Vec<u32>, Vec<u32>), Ineligible> {
    const WHY: Ineligible = Ineligible("the post-processor adds special tokens");
    let json = match p {
        PostProcessorWrapper::ByteLevel(_) => return Ok((Vec::new(), Vec::new())),
        PostProcessorWrapper::Template(_) | PostProcessorWrapper::Sequence(_) => {
            serde_json::to_value(p).map_err(|_| WHY)?
        }
        _ => return Err(WHY),
    };
    let mut out = (Vec::new(), Vec::new());
    template_ids(&json, &mut out).ok_or(WHY)?;
    Ok(out)
}

/// Appends the special-token ids of a serialized post-processor to `out`; `None` when it
/// is not one [`special_ids`] takes.
fn template_ids(p: &serde_json::Value, out: &mut (Vec<u32>, Vec<u32>)) -> Option<()> {
    match p["type"].as_str()? {
        "ByteLevel" => Some(()),
        "Sequence" => p["processors"]
            .as_array()?
            .iter()
            .try_for_each(|q| template_ids(q, out)),
        // Two templates would nest (the second's tokens around the first's); none does that.
        "TemplateProcessing" if out.0.is_empty() && out.1.is_empty() => {
            let mut seen_a = false;
            for piece in p["single"].as_array()? {
                if let Some(seq) = piece.get("Sequence") {
                    if seq["id"] != "A" || seen_a {
                        return None;
                    }
                    seen_a = true;
                } else {
                    let name = piece.get("SpecialToken")?["id"].as_str()?;
                    let ids = p["special_tokens"][name]["ids"].as_array()?;
                    let side = if seen_a { &mut out.1 } else { &mut out.0 };
                    for id in ids {
                        side.push(u32::try_from(id.as_u64()?).ok()?);
                    }
                }
            }
            seen_a.then_some(())
        }
        _ => None,
    }
}

/// A matcher for the added tokens' contents, raw and normalized: `encode` looks for the
/// non-normalized ones in the raw text and the normalized ones in the normalized text, which
/// are the same text for every line this path takes.
fn added_tokens(tok: &Tokenizer) -> Result<Option<AhoCorasick>, Ineligible> {
    let mut patterns = Vec::new();
    for token in tok.get_added_tokens_decoder().into_values() {
        if token.normalized {
            if let Some(normalizer) = tok.get_normalizer() {
                let mut n = NormalizedString::from(token.content.as_str());
                normalizer
                    .normalize(&mut n)
                    .map_err(|_| Ineligible("an added token does not normalize"))?;
                patterns.push(n.get().to_string());
            }
        }
        patterns.push(token.content);
    }
    if patterns.is_empty() {
        return Ok(None);
    }
    AhoCorasick::new(&patterns)
        .map(Some)
        .map_err(|_| Ineligible("too many added tokens to scan for"))
}
