//! How the BPE fast path splits a line into words: the pre-tokenizers of byte-level BPE
//! tokenizers it reproduces exactly.
//!
//! Each split is the tokenizer's own regex, run by the same engine (onig) `tokenizers` uses,
//! so a split is the same on any text. For the patterns of the families that matter (GPT-2,
//! cl100k / Llama 3, Qwen 2, o200k, DeepSeek V3's three) a hand-written scanner does the same
//! split on ASCII text, several times faster than the regex; `tests` check each scanner
//! against its regex.

use tokenizers::pre_tokenizers::split::SplitPattern;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::utils::SysRegex;
use tokenizers::SplitDelimiterBehavior;

use super::bpe::Ineligible;

/// `ByteLevel`'s own pre-tokenizer regex (GPT-2's).
pub(crate) const GPT2: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// tiktoken's cl100k_base split, as Llama 3's and GPT-4's `tokenizer.json` carry it.
pub(crate) const CL100K: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's: cl100k's with one digit a word.
pub(crate) const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// tiktoken's o200k_base split (GPT-4o): words break at case changes, contractions stay on.
pub(crate) const O200K: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek V3's first split: digits in threes.
pub(crate) const DIGITS3: &str = r"\p{N}{1,3}";
/// DeepSeek V3's second split: runs of CJK ideographs, hiragana and katakana.
pub(crate) const DEEPSEEK_CJK: &str = "[一-龥\u{3040}-ゟ゠-ヿ]+";
/// DeepSeek V3's third split (its `tokenizer.json` writes CR and LF as the characters
/// themselves; [`Scanner::for_pattern`] takes either form).
pub(crate) const DEEPSEEK: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// A hand-written equivalent of a known pattern, for ASCII text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scanner {
    Gpt2,
    /// cl100k's shape; the most digits one word takes (3, or 1 for Qwen 2).
    Cl100k {
        digits: usize,
    },
    O200k,
    Digits3,
    /// A pattern no ASCII text matches.
    NoAscii,
    DeepSeek,
}

impl Scanner {
    fn for_pattern(pattern: &str) -> Option<Self> {
        // A line break in a pattern matches what its escape does.
        let escaped = pattern.replace('\r', r"\r").replace('\n', r"\n");
        match escaped.as_str() {
            GPT2 => Some(Scanner::Gpt2),
            CL100K => Some(Scanner::Cl100k { digits: 3 }),
            QWEN2 => Some(Scanner::Cl100k { digits: 1 }),
            O200K => Some(Scanner::O200k),
            DIGITS3 => Some(Scanner::Digits3),
            DEEPSEEK_CJK => Some(Scanner::NoAscii),
            DEEPSEEK => Some(Scanner::DeepSeek),
            _ => None,
        }
    }

    /// Where the pattern's match starting at `start` ends, if one starts there. The
    /// GPT-2, cl100k and o200k patterns match at every position (the last alternative is
    /// `\s+`, the others cover every other byte), so their matches tile the text; the
    /// others leave gaps.
    fn match_at(self, s: &[u8], start: usize) -> Option<usize> {
        match self {
            Scanner::Gpt2 => Some(gpt2_end(s, start)),
            Scanner::Cl100k { digits } => Some(cl100k_end(s, start, digits)),
            Scanner::O200k => Some(o200k_end(s, start)),
            Scanner::Digits3 => {
                let n = run(s, start, |b| class(b) == Class::Number);
                (n > 0).then(|| start + n.min(3))
            }
            Scanner::NoAscii => None,
            Scanner::DeepSeek => deepseek_end(s, start),
        }
    }
}

/// One `Split` of the chain: its regex, and a scanner when the regex is a known one.
struct Split {
    regex: SysRegex,
    scanner: Option<Scanner>,
    pattern: String,
}

impl Split {
    fn new(pattern: &str) -> Result<Self, Ineligible> {
        Ok(Split {
            regex: SysRegex::new(pattern)
                .map_err(|_| Ineligible("a split regex does not compile"))?,
            scanner: Scanner::for_pattern(pattern),
            pattern: pattern.to_string(),
        })
    }

    /// Calls `f` with each piece of `text` (`Isolated`: the matches and the text between
    /// them), in order, while it returns true; false when `f` stopped it.
    fn pieces(&self, text: &str, f: &mut dyn FnMut(&str) -> bool) -> bool {
        if let (Some(scanner), true) = (self.scanner, text.is_ascii()) {
            if scanner == Scanner::NoAscii {
                return text.is_empty() || f(text);
            }
            let bytes = text.as_bytes();
            let (mut start, mut gap) = (0, 0);
            while start < bytes.len() {
                match scanner.match_at(bytes, start) {
                    Some(end) => {
                        if gap < start && !f(&text[gap..start]) || !f(&text[start..end]) {
                            return false;
                        }
                        (start, gap) = (end, end);
                    }
                    None => start += 1,
                }
            }
            return gap == bytes.len() || f(&text[gap..]);
        }
        let mut last = 0;
        for (start, end) in self.regex.find_iter(text) {
            if start > last && !f(&text[last..start]) || end > start && !f(&text[start..end]) {
                return false;
            }
            last = end;
        }
        last == text.len() || f(&text[last..])
    }
}

/// A byte-level BPE tokenizer's pre-tokenizer: `Split`s applied in turn, each to the pieces of
/// the one before (GPT-2's `ByteLevel` regex; a tiktoken-style pattern before a `ByteLevel`
/// that does not split again; DeepSeek's digit and CJK splits before its own).
pub(crate) struct Splitter {
    splits: Vec<Split>,
    /// `ByteLevel` puts a space before the text (GPT-2 style tokenizers, optionally).
    pub(crate) add_prefix_space: bool,
}

impl std::fmt::Debug for Splitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Splitter")
            .field(
                "patterns",
                &self.splits.iter().map(|s| &s.pattern).collect::<Vec<_>>(),
            )
            .field("add_prefix_space", &self.add_prefix_space)
            .finish()
    }
}

impl Splitter {
    /// The splitter reproducing `pre`, if it is one this path takes: a `ByteLevel` with its
    /// regex, or a sequence of `Split(regex, Isolated)` ending in a `ByteLevel` that neither
    /// splits nor adds a prefix space (it would add one to every piece).
    pub(crate) fn new(pre: Option<&PreTokenizerWrapper>) -> Result<Self, Ineligible> {
        match pre {
            Some(PreTokenizerWrapper::ByteLevel(b)) if b.use_regex => Ok(Splitter {
                splits: vec![Split::new(GPT2)?],
                add_prefix_space: b.add_prefix_space,
            }),
            Some(PreTokenizerWrapper::ByteLevel(_)) => {
                Err(Ineligible("the ByteLevel pre-tokenizer does not split"))
            }
            Some(PreTokenizerWrapper::Sequence(seq)) => {
                let Some((PreTokenizerWrapper::ByteLevel(b), splits)) = seq.as_ref().split_last()
                else {
                    return Err(Ineligible(
                        "the pre-tokenizer sequence does not end in ByteLevel",
                    ));
                };
                if b.use_regex || b.add_prefix_space {
                    return Err(Ineligible(
                        "the ByteLevel after the splits splits again or adds a prefix space",
                    ));
                }
                if splits.is_empty() {
                    return Err(Ineligible("the pre-tokenizer does not split"));
                }
                let splits = splits
                    .iter()
                    .map(|p| match p {
                        PreTokenizerWrapper::Split(s)
                            if s.behavior == SplitDelimiterBehavior::Isolated && !s.invert =>
                        {
                            match &s.pattern {
                                SplitPattern::Regex(r) => Split::new(r),
                                SplitPattern::String(_) => {
                                    Err(Ineligible("a Split splits on a string, not a regex"))
                                }
                            }
                        }
                        _ => Err(Ineligible(
                            "a pre-tokenizer before ByteLevel is not Split(regex, Isolated)",
                        )),
                    })
                    .collect::<Result<_, _>>()?;
                Ok(Splitter {
                    splits,
                    add_prefix_space: false,
                })
            }
            _ => Err(Ineligible("the pre-tokenizer is not byte-level")),
        }
    }

    /// Calls `word` with each word of `text`, in order, while it returns true (a caller
    /// that needs only the first ids stops there: the words after cannot change them).
    pub(crate) fn words(&self, text: &str, word: &mut dyn FnMut(&[u8]) -> bool) {
        split_with(&self.splits, text, word);
    }
}

fn split_with(splits: &[Split], text: &str, word: &mut dyn FnMut(&[u8]) -> bool) -> bool {
    match splits {
        [] => true,
        [only] => only.pieces(text, &mut |piece| word(piece.as_bytes())),
        [first, rest @ ..] => first.pieces(text, &mut |piece| split_with(rest, piece, word)),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Upper,
    Lower,
    Number,
    Space,
    Other,
}

/// `\p{Lu}`/`\p{Ll}`, `\p{N}`, `\s` and the rest, for an ASCII byte (onig's `\s` includes `\v`).
fn class(b: u8) -> Class {
    match b {
        b'a'..=b'z' => Class::Lower,
        b'A'..=b'Z' => Class::Upper,
        b'0'..=b'9' => Class::Number,
        b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ' => Class::Space,
        _ => Class::Other,
    }
}

fn letter(b: u8) -> bool {
    b.is_ascii_alphabetic()
}

/// How many bytes from `from` satisfy `f`.
fn run(s: &[u8], from: usize, f: impl Fn(u8) -> bool) -> usize {
    s[from.min(s.len())..].iter().take_while(|&&b| f(b)).count()
}

/// The length of a contraction (`'s|'t|'re|'ve|'m|'ll|'d`, with `ignore_case`) at `at`, or 0.
fn contraction(s: &[u8], at: usize, ignore_case: bool) -> usize {
    if s.get(at) != Some(&b'\'') {
        return 0;
    }
    let fold = |b: u8| {
        if ignore_case {
            b.to_ascii_lowercase()
        } else {
            b
        }
    };
    let (a, b) = (
        s.get(at + 1).map(|&c| fold(c)),
        s.get(at + 2).map(|&c| fold(c)),
    );
    match (a, b) {
        (Some(b'r'), Some(b'e')) | (Some(b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => 3,
        (Some(b's' | b't' | b'm' | b'd'), _) => 2,
        _ => 0,
    }
}

/// The whitespace alternatives the tiktoken patterns share, at a space byte:
/// `\s*[\r\n]+` (up to the last line break of the run), `\s+(?!\S)` (the run but its last
/// byte, or all of it at the end of the text), `\s+`.
fn space_end(s: &[u8], start: usize, line_breaks: bool) -> usize {
    let end = start + run(s, start, |b| class(b) == Class::Space);
    if line_breaks {
        if let Some(last) = s[start..end]
            .iter()
            .rposition(|&b| b == b'\r' || b == b'\n')
        {
            return start + last + 1;
        }
    }
    if end == s.len() {
        end
    } else if end - start >= 2 {
        end - 1
    } else {
        start + 1
    }
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d`, ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`,
/// `\s+(?!\S)`, `\s+`.
fn gpt2_end(s: &[u8], start: usize) -> usize {
    let c = contraction(s, start, false);
    if c > 0 {
        return start + c;
    }
    // ` ?X+`: a space joins the run that follows it unless that is more space.
    let kind = |b: u8| match class(b) {
        Class::Upper | Class::Lower => Class::Lower,
        k => k,
    };
    let (run_start, k) = match &s[start..] {
        [b' ', next, ..] if kind(*next) != Class::Space => (start + 1, kind(*next)),
        rest => (start, kind(rest[0])),
    };
    if k != Class::Space {
        return run_start + run(s, run_start, |b| kind(b) == k);
    }
    space_end(s, start, false)
}

/// cl100k: `(?i:'s|'t|'re|'ve|'m|'ll|'d)`, `[^\r\n\p{L}\p{N}]?\p{L}+`, `\p{N}{1,digits}`,
/// ` ?[^\s\p{L}\p{N}]+[\r\n]*`, then the whitespace alternatives.
fn cl100k_end(s: &[u8], start: usize, digits: usize) -> usize {
    let c = contraction(s, start, true);
    if c > 0 {
        return start + c;
    }
    let b = s[start];
    let next = s.get(start + 1).copied();
    if letter(b) {
        return start + run(s, start, letter);
    }
    if b != b'\r' && b != b'\n' && class(b) != Class::Number && next.is_some_and(letter) {
        return start + 1 + run(s, start + 1, letter);
    }
    if class(b) == Class::Number {
        return start + run(s, start, |x| class(x) == Class::Number).min(digits);
    }
    if let Some(end) = punctuation_end(s, start, b"\r\n") {
        return end;
    }
    space_end(s, start, true)
}

/// ` ?[^\s\p{L}\p{N}]+[<tail>]*` at `start`, if it matches there.
fn punctuation_end(s: &[u8], start: usize, tail: &[u8]) -> Option<usize> {
    let from = if s[start] == b' ' { start + 1 } else { start };
    let n = run(s, from, |x| class(x) == Class::Other);
    (n > 0).then(|| from + n + run(s, from + n, |x| tail.contains(&x)))
}

/// o200k: `[^\r\n\p{L}\p{N}]?` then upper-case letters and lower-case ones (a word breaks
/// where lower case turns upper) and an optional contraction; `\p{N}{1,3}`;
/// ` ?[^\s\p{L}\p{N}]+[\r\n/]*`; then the whitespace alternatives.
fn o200k_end(s: &[u8], start: usize) -> usize {
    let b = s[start];
    let next = s.get(start + 1).copied();
    let prefixed = b != b'\r' && b != b'\n' && !letter(b) && class(b) != Class::Number;
    let word_start = if letter(b) {
        Some(start)
    } else if prefixed && next.is_some_and(letter) {
        Some(start + 1)
    } else {
        None
    };
    if let Some(w) = word_start {
        // `U*L+` and `U+L*` both end after the upper-case run and the lower-case run after it.
        let upper = run(s, w, |x| x.is_ascii_uppercase());
        let lower = run(s, w + upper, |x| x.is_ascii_lowercase());
        let end = w + upper + lower;
        return end + contraction(s, end, true);
    }
    if class(b) == Class::Number {
        return start + run(s, start, |x| class(x) == Class::Number).min(3);
    }
    if let Some(end) = punctuation_end(s, start, b"\r\n/") {
        return end;
    }
    space_end(s, start, true)
}

/// DeepSeek V3: `[\p{P}\p{S}][A-Za-z]+`, `[^\r\n\p{L}\p{P}\p{S}]?\p{L}+`,
/// ` ?[\p{P}\p{S}]+[\r\n]*`, then the whitespace alternatives; nothing starts at a digit
/// or a control character not followed by a letter (ASCII punctuation and symbols are
/// exactly `\p{P}` and `\p{S}` there).
fn deepseek_end(s: &[u8], start: usize) -> Option<usize> {
    let b = s[start];
    let next_letter = s.get(start + 1).is_some_and(|&x| letter(x));
    if letter(b) {
        return Some(start + run(s, start, letter));
    }
    if next_letter && b != b'\r' && b != b'\n' {
        return Some(start + 1 + run(s, start + 1, letter));
    }
    let from = if b == b' ' { start + 1 } else { start };
    let n = run(s, from, |x| x.is_ascii_punctuation());
    if n > 0 {
        return Some(from + n + run(s, from + n, |x| x == b'\r' || x == b'\n'));
    }
    (class(b) == Class::Space).then(|| space_end(s, start, true))
}

#[cfg(test)]
#[path = "pretok_tests.rs"]
mod tests;
