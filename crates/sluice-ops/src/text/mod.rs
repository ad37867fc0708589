//! `sluice.text` ops: tokenization through the `tokenizers` crate (any Hugging Face
//! `tokenizer.json`, offline), then `truncate`, `add_tokens` and `pad` on id sequences. Each
//! reads `field` and writes `out` (default: `field`); `pad`, whose output length is its
//! argument, checks it against `max_tokens` ([`crate::limits`]). Byte-level BPE tokenizers
//! (GPT-2, cl100k / Llama 3, o200k, Qwen 2, DeepSeek) encode most lines through [`FastBpe`],
//! SentencePiece-style ones (Llama 2, Mistral) through [`SpBpe`]; both give the same ids
//! faster.

mod bpe;
mod frame;
pub use bpe::{byte_to_char, FastBpe, Ineligible};
pub use spbpe::SpBpe;
mod pretok;
mod spbpe;
#[cfg(test)]
mod test_strings;
mod word_cache;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_core::{
    Emit, Error, Op, OpContext, OpKind, OpMeta, OpRef, Result, Sample, Tensor, TensorData, Value,
};

use crate::limits::{default_max_tokens, is_default_max_tokens, refuse};

fn text_field() -> String {
    "text".into()
}
fn ids_field() -> String {
    "input_ids".into()
}
fn yes() -> bool {
    true
}
fn int64() -> String {
    "int64".into()
}
fn strict() -> String {
    "strict".into()
}
fn is_strict(s: &str) -> bool {
    s == "strict"
}

/// The serde form of the `text.*` ops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", deny_unknown_fields)]
pub enum TextSpec {
    /// Encodes `field` with a Hugging Face tokenizer: the `tokenizer.json` file at
    /// `tokenizer`, or that file's JSON itself in `tokenizer_json` (exactly one of them).
    /// The inline form is how a tokenizer object made in Python travels: the spec is what
    /// plans, pickles, worker processes and Ray actors rebuild the op from, so the op needs
    /// no file on the machine that runs it, and fingerprints cover the tokenizer's content.
    #[serde(rename = "text.tokenize")]
    Tokenize {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokenizer: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokenizer_json: Option<String>,
        #[serde(default)]
        max_length: Option<usize>,
        #[serde(default = "yes")]
        add_special_tokens: bool,
        #[serde(default = "text_field")]
        field: String,
        #[serde(default = "ids_field")]
        out: String,
        #[serde(default = "int64")]
        dtype: String,
        /// Also write the attention mask (1 per token) to this field.
        #[serde(default)]
        attention_mask: Option<String>,
        /// A bytes field is decoded as UTF-8: invalid bytes are an error naming the sample
        /// (`strict`) or become U+FFFD (`replace`).
        #[serde(default = "strict", skip_serializing_if = "is_strict")]
        errors: String,
    },
    /// Keeps the first `length` ids.
    #[serde(rename = "text.truncate")]
    Truncate {
        length: usize,
        #[serde(default = "ids_field")]
        field: String,
        /// `None`: same as `field`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
    },
    /// Prepends `bos` and/or appends `eos`.
    #[serde(rename = "text.add_tokens")]
    AddTokens {
        #[serde(default)]
        bos: Option<i64>,
        #[serde(default)]
        eos: Option<i64>,
        #[serde(default = "ids_field")]
        field: String,
        /// `None`: same as `field`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
    },
    /// Pads (right) with `pad_id` to `length`; longer sequences are an error (truncate first).
    #[serde(rename = "text.pad")]
    Pad {
        length: usize,
        #[serde(default)]
        pad_id: i64,
        #[serde(default = "ids_field")]
        field: String,
        /// Also write a mask (1 for tokens, 0 for padding) to this field.
        #[serde(default)]
        mask: Option<String>,
        /// `None`: same as `field`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
        /// The longest `length` allowed ([`crate::limits`]).
        #[serde(
            default = "default_max_tokens",
            skip_serializing_if = "is_default_max_tokens"
        )]
        max_tokens: u64,
    },
}

impl TextSpec {
    /// The API name (`tokenize`, `pad`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            TextSpec::Tokenize { .. } => "tokenize",
            TextSpec::Truncate { .. } => "truncate",
            TextSpec::AddTokens { .. } => "add_tokens",
            TextSpec::Pad { .. } => "pad",
        }
    }

    /// The field the op reads and the one it writes its ids to.
    fn io(&self) -> (&str, &str) {
        match self {
            TextSpec::Tokenize { field, out, .. } => (field, out),
            TextSpec::Truncate { field, out, .. }
            | TextSpec::AddTokens { field, out, .. }
            | TextSpec::Pad { field, out, .. } => (field, out.as_deref().unwrap_or(field)),
        }
    }
}

/// Builds a `text.*` op, loading the tokenizer once; a bad argument is an error naming the op.
pub fn build(spec: &TextSpec) -> Result<OpRef> {
    let op = format!("text.{}", spec.name());
    let named = |e: Error| match e {
        Error::InvalidArgument(m) if !m.starts_with("text.") => {
            Error::InvalidArgument(format!("{op}: {m}"))
        }
        other => other,
    };
    let (field, out) = spec.io();
    for (what, name) in [("field", field), ("out", out)] {
        if name.is_empty() {
            return Err(named(Error::invalid(format!(
                "{what} must be a non-empty field name"
            ))));
        }
    }
    let tokenizer = match spec {
        TextSpec::Tokenize {
            tokenizer,
            tokenizer_json,
            dtype,
            errors,
            add_special_tokens,
            ..
        } => {
            if dtype != "int64" && dtype != "int32" {
                return Err(named(Error::invalid(format!(
                    "dtype must be 'int64' or 'int32', got '{dtype}'"
                ))));
            }
            if errors != "strict" && errors != "replace" {
                return Err(named(Error::invalid(format!(
                    "errors must be 'strict' or 'replace', got '{errors}'"
                ))));
            }
            let tok = load_tokenizer(&op, tokenizer.as_deref(), tokenizer_json.as_deref())?;
            // Not every tokenizer is eligible for the fast path; those encode every line.
            let fast = FastPath::new(&tok, *add_special_tokens).ok();
            Some(Tokenize::new(tok, fast))
        }
        TextSpec::Truncate { length: 0, .. } | TextSpec::Pad { length: 0, .. } => {
            return Err(named(Error::invalid("length must be > 0, got 0")))
        }
        TextSpec::Pad {
            length, max_tokens, ..
        } if *length as u64 > *max_tokens => {
            return Err(refuse(
                &op,
                &format!("length={length} makes {length} ids a sample"),
                "max_tokens",
                *max_tokens,
            ))
        }
        _ => None,
    };
    Ok(Arc::new(TextOp {
        spec: spec.clone(),
        tokenizer,
    }))
}

/// The tokenizer of a `tokenize` spec: from the file at `path` or from the JSON `json`.
fn load_tokenizer(
    op: &str,
    path: Option<&str>,
    json: Option<&str>,
) -> Result<tokenizers::Tokenizer> {
    match (path, json) {
        (Some(path), None) => {
            if !std::path::Path::new(path).is_file() {
                return Err(Error::FileNotFound(format!(
                    "{path}: tokenizer file not found"
                )));
            }
            tokenizers::Tokenizer::from_file(path).map_err(|e| {
                Error::invalid(format!("{op}: {path}: not a valid tokenizer.json: {e}"))
            })
        }
        (None, Some(json)) => json.parse().map_err(|e| {
            Error::invalid(format!(
                "{op}: tokenizer_json is not a valid tokenizer.json ({} bytes): {e}",
                json.len()
            ))
        }),
        (Some(_), Some(_)) => Err(Error::invalid(format!(
            "{op}: give either tokenizer (a tokenizer.json path) or tokenizer_json, not both"
        ))),
        (None, None) => Err(Error::invalid(format!(
            "{op}: tokenizer is required (a tokenizer.json path, or its JSON as tokenizer_json)"
        ))),
    }
}

struct TextOp {
    spec: TextSpec,
    tokenizer: Option<Tokenize>,
}

/// The fast path a tokenizer has: byte-level BPE (GPT-2, tiktoken-style, DeepSeek) or,
/// with byte fallback, SentencePiece-style BPE (Llama 2, Mistral). Either gives exactly the
/// ids `Tokenizer::encode` gives, or declines the line.
///
/// ```no_run
/// use sluice_ops::text::FastPath;
///
/// let tok = tokenizers::Tokenizer::from_file("tokenizer.json").unwrap();
/// match FastPath::new(&tok, true) {
///     Ok(fast) => println!("{:?}", fast.encode("Hello world")),
///     Err(why) => println!("{why}"), // e.g. "no BPE fast path: the model is not BPE"
/// }
/// ```
pub enum FastPath {
    ByteLevel(FastBpe),
    SentencePiece(SpBpe),
}

impl FastPath {
    /// The fast path for `tok` encoding with `add_special_tokens`, or why it has none.
    pub fn new(tok: &tokenizers::Tokenizer, add_special_tokens: bool) -> Result<Self, Ineligible> {
        if bpe::plain_bpe(tok)?.byte_fallback {
            SpBpe::new(tok, add_special_tokens).map(FastPath::SentencePiece)
        } else {
            FastBpe::new(tok, add_special_tokens).map(FastPath::ByteLevel)
        }
    }

    /// The ids of `text`, or `None` when the line needs `tokenizers`.
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        self.encode_prefix(text, usize::MAX)
    }

    /// At least the first `limit` ids of `text`, or `None` when the line needs `tokenizers`.
    pub fn encode_prefix(&self, text: &str, limit: usize) -> Option<Vec<u32>> {
        match self {
            FastPath::ByteLevel(f) => f.encode_prefix(text, limit),
            FastPath::SentencePiece(f) => f.encode_prefix(text, limit),
        }
    }
}

/// What `tokenize` encodes with: the tokenizer, and the fast path when it has one.
struct Tokenize {
    tok: Arc<tokenizers::Tokenizer>,
    fast: Option<FastPath>,
    /// Lines the fast path encoded, and lines `tokenizers` did (the stats show both).
    fast_lines: AtomicU64,
    slow_lines: AtomicU64,
}

impl Tokenize {
    fn new(tok: tokenizers::Tokenizer, fast: Option<FastPath>) -> Self {
        Tokenize {
            tok: Arc::new(tok),
            fast,
            fast_lines: AtomicU64::new(0),
            slow_lines: AtomicU64::new(0),
        }
    }

    /// The ids of `text` (at least its first `limit`), from the fast path unless it declines
    /// the line.
    fn ids(&self, text: &str, add_special_tokens: bool, limit: usize) -> Result<Vec<u32>> {
        if let Some(ids) = self
            .fast
            .as_ref()
            .and_then(|f| f.encode_prefix(text, limit))
        {
            self.fast_lines.fetch_add(1, Relaxed);
            return Ok(ids);
        }
        self.slow_lines.fetch_add(1, Relaxed);
        let enc = self
            .tok
            .encode(text, add_special_tokens)
            .map_err(|e| Error::data(format!("tokenizer failed: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }
}

impl std::fmt::Debug for TextOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TextOp({:?})", self.spec)
    }
}

/// Token ids in either dtype the text ops write.
trait Id: Copy {
    const DTYPE: &'static str;
    fn from_i64(v: i64) -> Option<Self>;
}
impl Id for i32 {
    const DTYPE: &'static str = "int32";
    fn from_i64(v: i64) -> Option<Self> {
        i32::try_from(v).ok()
    }
}
impl Id for i64 {
    const DTYPE: &'static str = "int64";
    fn from_i64(v: i64) -> Option<Self> {
        Some(v)
    }
}

/// `v`, the op's argument `arg`, as an id of the field's dtype.
fn id<T: Id>(arg: &str, v: i64, field: &str) -> Result<T> {
    T::from_i64(v).ok_or_else(|| {
        Error::data(format!(
            "{arg}={v} does not fit the {} ids of field '{field}'",
            T::DTYPE
        ))
    })
}

/// What truncate, add_tokens and pad do to a sequence of ids.
enum IdEdit {
    Truncate(usize),
    Add { bos: Option<i64>, eos: Option<i64> },
    Pad { length: usize, pad_id: i64 },
}

impl IdEdit {
    /// The edited ids of `field`, written once into a buffer of their final size.
    fn apply<T: Id>(&self, ids: &[T], field: &str) -> Result<Vec<T>> {
        Ok(match *self {
            IdEdit::Truncate(n) => ids[..n.min(ids.len())].to_vec(),
            IdEdit::Add { bos, eos } => {
                let bos = bos.map(|b| id::<T>("bos", b, field)).transpose()?;
                let eos = eos.map(|e| id::<T>("eos", e, field)).transpose()?;
                let mut v = Vec::with_capacity(ids.len() + 2);
                v.extend(bos);
                v.extend_from_slice(ids);
                v.extend(eos);
                v
            }
            IdEdit::Pad { length, .. } if ids.len() > length => {
                return Err(Error::data(format!(
                    "a sequence of {} ids in field '{field}' is longer than length={length}; \
                     truncate first",
                    ids.len()
                )))
            }
            IdEdit::Pad { length, pad_id } => {
                let pad = id::<T>("pad_id", pad_id, field)?;
                let mut v = Vec::with_capacity(length);
                v.extend_from_slice(ids);
                v.resize(length, pad);
                v
            }
        })
    }
}

/// Applies `edit` to `field`'s ids (int32/int64 tensors keep their dtype, lists of ints become
/// int64), reading them where they are: ids shared with a cache are read, not copied out
/// first, and nothing is widened and narrowed again. Writes the result to `out`. Returns the
/// number of ids before the edit and whether the result is int64.
fn edit_ids(
    s: &mut Sample,
    (field, out): (&str, &str),
    op: &str,
    edit: &IdEdit,
) -> Result<(usize, bool)> {
    let (data, n) = match s.require(field, op)? {
        Value::Tensor(t) if t.shape().len() == 1 => match t.data() {
            TensorData::I64(v) => (TensorData::I64(edit.apply(v, field)?), v.len()),
            TensorData::I32(v) => (TensorData::I32(edit.apply(v, field)?), v.len()),
            other => {
                return Err(Error::type_error(format!(
                    "field '{field}' must hold int32/int64 ids, got {}",
                    other.dtype().name()
                )))
            }
        },
        Value::List(items) => {
            let v = items
                .iter()
                .map(Value::as_int)
                .collect::<Option<Vec<i64>>>()
                .ok_or_else(|| {
                    Error::type_error(format!("field '{field}' must be a list of ints"))
                })?;
            (TensorData::I64(edit.apply(&v, field)?), v.len())
        }
        other => {
            return Err(Error::type_error(format!(
                "field '{field}' must be a 1-d id array (tokenize first), got {}",
                other.kind()
            )))
        }
    };
    let wide = matches!(data, TensorData::I64(_));
    let len = data.len();
    s.set(out, Value::Tensor(Tensor::new(vec![len], data)?));
    Ok((n, wide))
}

/// `ids` as a 1-d tensor of int64 (`wide`) or int32, built once in that dtype.
fn ids_value(ids: impl ExactSizeIterator<Item = i64>, wide: bool) -> Result<Value> {
    let n = ids.len();
    let data = if wide {
        TensorData::I64(ids.collect())
    } else {
        TensorData::I32(ids.map(|x| x as i32).collect())
    };
    Ok(Value::Tensor(Tensor::new(vec![n], data)?))
}

impl TextOp {
    fn fields(&self) -> (Vec<String>, Vec<String>) {
        match &self.spec {
            TextSpec::Tokenize {
                field,
                out,
                attention_mask,
                ..
            } => {
                let mut w = vec![out.clone()];
                w.extend(attention_mask.clone());
                (vec![field.clone()], w)
            }
            TextSpec::Truncate { .. } | TextSpec::AddTokens { .. } => {
                let (field, out) = self.spec.io();
                (vec![field.to_string()], vec![out.to_string()])
            }
            TextSpec::Pad { mask, .. } => {
                let (field, out) = self.spec.io();
                let mut w = vec![out.to_string()];
                w.extend(mask.clone());
                (vec![field.to_string()], w)
            }
        }
    }
}

impl Op for TextOp {
    fn name(&self) -> &str {
        self.spec.name()
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
    fn meta(&self) -> OpMeta {
        let (reads, writes) = self.fields();
        let kind = match self.spec {
            TextSpec::Tokenize { .. } => OpKind::Decode,
            // Writing another field keeps the input: the sample grows.
            TextSpec::Truncate { .. } if self.spec.io().0 == self.spec.io().1 => {
                OpKind::SizeReducing
            }
            _ => OpKind::Opaque,
        };
        OpMeta {
            reads,
            writes,
            kind,
            random: false,
            python: false,
        }
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.tokenizer.as_ref().map_or_else(Vec::new, |t| {
            vec![
                ("fast_path_lines", t.fast_lines.load(Relaxed)),
                ("tokenizers_lines", t.slow_lines.load(Relaxed)),
            ]
        })
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let name = self.name();
        match &self.spec {
            TextSpec::Tokenize {
                max_length,
                add_special_tokens,
                field,
                out,
                dtype,
                attention_mask,
                errors,
                ..
            } => {
                let v = s.require(field, name)?;
                let text: std::borrow::Cow<'_, str> = match v {
                    Value::Str(t) => (&**t).into(),
                    Value::Bytes(b) if errors == "replace" => String::from_utf8_lossy(b),
                    Value::Bytes(b) => std::str::from_utf8(b)
                        .map_err(|e| {
                            Error::data(format!(
                                "field '{field}' is not valid UTF-8 ({e}); \
                                 tokenize(errors=\"replace\") substitutes U+FFFD"
                            ))
                        })?
                        .into(),
                    other => {
                        return Err(Error::type_error(format!(
                            "field '{field}' must be str or bytes, got {}",
                            other.kind()
                        )))
                    }
                };
                let tok = self.tokenizer.as_ref().expect("tokenize has a tokenizer");
                let ids = tok.ids(&text, *add_special_tokens, max_length.unwrap_or(usize::MAX))?;
                let n = max_length.map_or(ids.len(), |m| m.min(ids.len()));
                let wide = dtype == "int64";
                s.set(
                    out.as_str(),
                    ids_value(ids[..n].iter().map(|&i| i64::from(i)), wide)?,
                );
                if let Some(mask) = attention_mask {
                    s.set(mask.as_str(), ids_value(std::iter::repeat_n(1, n), wide)?);
                }
            }
            TextSpec::Truncate { length, .. } => {
                edit_ids(&mut s, self.spec.io(), name, &IdEdit::Truncate(*length))?;
            }
            TextSpec::AddTokens { bos, eos, .. } => {
                let add = IdEdit::Add {
                    bos: *bos,
                    eos: *eos,
                };
                edit_ids(&mut s, self.spec.io(), name, &add)?;
            }
            TextSpec::Pad {
                length,
                pad_id,
                mask,
                ..
            } => {
                let pad = IdEdit::Pad {
                    length: *length,
                    pad_id: *pad_id,
                };
                let (n, wide) = edit_ids(&mut s, self.spec.io(), name, &pad)?;
                if let Some(mask) = mask {
                    let m = (0..*length).map(|i| (i < n) as i64);
                    s.set(mask.as_str(), ids_value(m, wide)?);
                }
            }
        }
        Ok(Emit::One(s))
    }
}

#[cfg(test)]
mod tests;
