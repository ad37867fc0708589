//! `read_text` (`{text}` per line) and `read_jsonl` (one object per line), on local disks or
//! object stores, with random access through a line-offset index.
//!
//! Opening streams each file once (bounded memory; 8 MiB ranged reads from a bucket) and
//! records where every non-empty line starts; `get` then reads that one line (a positioned
//! read locally, one ranged GET remotely). JSON lines are parsed when read, so a bad line
//! fails naming `file:line` — or, with `on_error="skip"`, every line is parsed and checked at
//! open and bad ones (not UTF-8 under `errors="strict"`; for JSONL also not a JSON object or
//! not fitting the schema) are left out and counted (the source's skips in `stats()`).
//!
//! Compressed files (`.gz`, `.zst`, `.bz2`) are decompressed once at open into a temporary
//! file that `get` reads from ([`crate::compressed`]), so they index the same way.
//!
//! A line read back must still be a whole line where the index put it (a line break before
//! and after, none inside): a file edited in place after it was indexed fails the read
//! ("changed since it was indexed") rather than giving text that spans lines. JSON integers
//! outside int64 are refused rather than rounded ([`bigint`]).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::Arc;

use sluice_core::{Error, OnError, Result, Sample, Source, SourceRef, Tensor, TensorData, Value};

use crate::compressed::{read_error, Input};
use crate::show::show;
use crate::spec::CsvType;
use crate::spec::SourceSpec;
pub use crate::spec::Utf8Errors;
use crate::store::expand;

mod bigint;

/// How lines are parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinesFormat {
    /// `{text: line}`.
    Text,
    /// Each line is a JSON object; its keys become fields.
    Jsonl,
}

impl std::str::FromStr for Utf8Errors {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "strict" => Ok(Utf8Errors::Strict),
            "replace" => Ok(Utf8Errors::Replace),
            other => Err(Error::invalid(format!(
                "errors must be 'strict' or 'replace', got '{other}'"
            ))),
        }
    }
}

/// How to read JSON lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JsonlOptions {
    /// Field types (`int`, `float`, `bool`, `str`): values are converted to them when read
    /// (`"3"` → 3 for `int`, 3 → `"3"` for `str`, ...) and a value that does not convert is
    /// an error naming `file:line` and the field; a listed field absent from a line is
    /// `None`. Fields not listed keep their JSON types.
    pub schema: Vec<(String, CsvType)>,
    /// `Skip`: check every line when opening and leave out (and count) lines that are not
    /// UTF-8 (under [`Utf8Errors::Strict`]) and, for JSON lines, that are not JSON objects or
    /// do not fit the schema. Applies to text lines too (`schema` does not).
    pub on_error: OnError,
    pub errors: Utf8Errors,
}

impl JsonlOptions {
    /// From the names the bindings and pipeline files use.
    pub fn from_names(
        schema: &BTreeMap<String, String>,
        on_error: &str,
        errors: &str,
    ) -> Result<Self> {
        Ok(JsonlOptions {
            schema: schema
                .iter()
                .map(|(k, v)| Ok((k.clone(), v.parse()?)))
                .collect::<Result<_>>()?,
            on_error: on_error.parse()?,
            errors: errors.parse()?,
        })
    }
}

#[derive(Debug)]
struct LineIndex {
    files: Vec<Arc<Input>>,
    /// (file number, byte offset, byte length) per non-empty line.
    lines: Vec<(u32, u64, u32)>,
    /// 1-based line number within its file, for error messages.
    line_numbers: Vec<u32>,
    skipped: u64,
    /// Each file's size when indexed.
    sizes: Vec<u64>,
}

/// Lines of text files as samples.
///
/// ```
/// use sluice_core::Source;
/// let p = std::env::temp_dir().join("sluice-doc-lines.txt");
/// std::fs::write(&p, "one\n\ntwo\n").unwrap();
/// let src = sluice_io::LinesSource::open(&[p.display().to_string()], sluice_io::LinesFormat::Text,
///     sluice_io::Utf8Errors::Strict).unwrap();
/// assert_eq!(src.len(), Some(2));
/// assert_eq!(src.get(1).unwrap().get("text").unwrap().as_str(), Some("two"));
/// ```
#[derive(Debug, Clone)]
pub struct LinesSource {
    index: Arc<LineIndex>,
    format: LinesFormat,
    errors: Utf8Errors,
    schema: Arc<Vec<(sluice_core::Name, CsvType)>>,
    on_error: OnError,
}

fn blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

impl LinesSource {
    /// Indexes the non-empty lines of every file matched by `entries` (paths, directories,
    /// globs or `s3://` / `gs://` / `http(s)://` URLs).
    pub fn open(entries: &[String], format: LinesFormat, errors: Utf8Errors) -> Result<Self> {
        Self::open_with(
            entries,
            format,
            &JsonlOptions {
                errors,
                ..Default::default()
            },
        )
    }

    /// [`LinesSource::open`] for JSON lines with a schema and an error policy.
    ///
    /// ```
    /// use sluice_core::{OnError, Source, Value};
    /// use sluice_io::{JsonlOptions, LinesFormat, LinesSource};
    /// let p = std::env::temp_dir().join("sluice-doc-typed.jsonl");
    /// std::fs::write(&p, "{\"id\": \"7\"}\nnot json\n{\"id\": 8.0}\n").unwrap();
    /// let opts = JsonlOptions { schema: vec![("id".into(), "int".parse()?)], on_error: OnError::Skip,
    ///     ..Default::default() };
    /// let src = LinesSource::open_with(&[p.display().to_string()], LinesFormat::Jsonl, &opts)?;
    /// assert_eq!((src.len(), src.skipped()), (Some(2), 1));
    /// assert_eq!(src.get(0)?.get("id"), Some(&Value::Int(7)));
    /// # Ok::<(), sluice_core::Error>(())
    /// ```
    pub fn open_with(entries: &[String], format: LinesFormat, opts: &JsonlOptions) -> Result<Self> {
        let empty = LineIndex {
            files: Vec::new(),
            lines: Vec::new(),
            line_numbers: Vec::new(),
            skipped: 0,
            sizes: Vec::new(),
        };
        let mut src = LinesSource {
            index: Arc::new(empty),
            format,
            errors: opts.errors,
            schema: Arc::new(
                opts.schema
                    .iter()
                    .map(|(k, t)| (sluice_core::Name::new(k), *t))
                    .collect(),
            ),
            on_error: opts.on_error,
        };
        // Skipping means knowing which lines fail before any is read: parse them all now.
        let check = opts.on_error == OnError::Skip;
        // Built here, then put in place of the empty one (`parse` needs the options only).
        let mut index = LineIndex {
            files: Vec::new(),
            lines: Vec::new(),
            line_numbers: Vec::new(),
            skipped: 0,
            sizes: Vec::new(),
        };
        for (fi, path) in expand(entries, None)?.into_iter().enumerate() {
            let (file, scan) = Input::open(&path)?;
            let mut input = std::io::BufReader::with_capacity(1 << 20, scan);
            let (mut offset, mut number, mut line) = (0u64, 0u32, Vec::new());
            loop {
                line.clear();
                let n = input
                    .read_until(b'\n', &mut line)
                    .map_err(|e| read_error(&path, e))?;
                if n == 0 {
                    break;
                }
                number += 1;
                let mut body = &line[..];
                if body.last() == Some(&b'\n') {
                    body = &body[..body.len() - 1];
                }
                if body.last() == Some(&b'\r') {
                    body = &body[..body.len() - 1];
                }
                if !blank(body) {
                    let ok = !check || src.parse(body, &path, number).is_ok();
                    if ok {
                        index.lines.push((fi as u32, offset, body.len() as u32));
                        index.line_numbers.push(number);
                    } else {
                        index.skipped += 1;
                    }
                }
                offset += n as u64;
            }
            index.sizes.push(offset);
            index.files.push(Arc::new(file));
        }
        src.index = Arc::new(index);
        Ok(src)
    }

    /// The `len` bytes of the line at `off`, checked to be a whole line still: the byte before
    /// it a line break (or none), no line break inside, a line break (or the end) after it.
    /// A file edited in place since it was indexed fails here rather than giving text that
    /// spans lines. (An edit that keeps every line where it was is not seen.)
    fn read_line(
        &self,
        blob: &Input,
        size: u64,
        off: u64,
        len: u32,
        line_no: u32,
    ) -> Result<bytes::Bytes> {
        let changed = || {
            Error::data(format!(
                "{}:{line_no}: the file changed since it was indexed; open it again",
                blob.name()
            ))
        };
        let from = off.saturating_sub(1);
        let end = (off + u64::from(len) + 2).min(size);
        let bytes = blob
            .read_at(from, (end - from) as usize)
            .map_err(|e| crate::csv::if_changed(blob, e, changed))?;
        let body_start = (off - from) as usize;
        let body_end = body_start + len as usize;
        if bytes.len() < body_end {
            return Err(changed());
        }
        let (before, body, after) = (
            &bytes[..body_start],
            &bytes[body_start..body_end],
            &bytes[body_end..],
        );
        let starts = before.is_empty() || before == b"\n";
        let ends = matches!(after, [] | [b'\n', ..] | [b'\r'] | [b'\r', b'\n', ..]);
        if !starts || !ends || body.contains(&b'\n') {
            return Err(changed());
        }
        Ok(bytes.slice(body_start..body_end))
    }

    /// Lines left out as invalid (`on_error = Skip`).
    pub fn skipped(&self) -> u64 {
        self.index.skipped
    }

    /// Decodes a line's bytes as UTF-8 per the `errors` policy.
    fn text(&self, raw: Vec<u8>, path: &str, line_no: u32) -> Result<String> {
        match String::from_utf8(raw) {
            Ok(s) => Ok(s),
            Err(e) => match self.errors {
                Utf8Errors::Replace => Ok(String::from_utf8_lossy(e.as_bytes()).into_owned()),
                Utf8Errors::Strict => Err(Error::data(format!(
                    "{path}:{line_no}: invalid UTF-8 ({}); pass errors=\"replace\" to substitute",
                    e.utf8_error()
                ))),
            },
        }
    }

    /// One line's sample.
    fn parse(&self, raw: &[u8], path: &str, line_no: u32) -> Result<Sample> {
        let text = self.text(raw.to_vec(), path, line_no)?;
        match self.format {
            LinesFormat::Text => {
                sluice_core::field_names!(TEXT = "text");
                let mut s = Sample::with_capacity(1);
                s.set(TEXT.clone(), Value::Str(text.into()));
                Ok(s)
            }
            LinesFormat::Jsonl => self.parse_json(&text, path, line_no),
        }
    }

    fn parse_json(&self, text: &str, path: &str, line_no: u32) -> Result<Sample> {
        let parsed: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::data(format!("{path}:{line_no}: invalid JSON: {e}")))?;
        let serde_json::Value::Object(map) = parsed else {
            return Err(Error::data(format!(
                "{path}:{line_no}: expected a JSON object per line"
            )));
        };
        let big = if map.values().any(bigint::may_hold) {
            bigint::find(text)
        } else {
            Vec::new()
        };
        let mut s = Sample::with_capacity(map.len() + self.schema.len());
        for (k, v) in map {
            let ty = self
                .schema
                .iter()
                .find(|(name, _)| **name == *k)
                .map(|t| t.1);
            if let Some(b) = big.iter().find(|b| b.key == k) {
                let value = match ty {
                    // As text, exactly as written.
                    Some(CsvType::Str) if b.whole => Value::Str(b.literal.into()),
                    // Rounding asked for.
                    Some(CsvType::Float) => coerce(v, CsvType::Float).map_err(|m| {
                        Error::data(format!("{path}:{line_no}: field '{}': {m}", show(&k)))
                    })?,
                    _ => {
                        return Err(Error::data(format!(
                            "{path}:{line_no}: field '{}': integer {} is outside the int64 \
                             range; sluice will not round it to a float: give the field the \
                             schema type \"str\" to keep its digits or \"float\" to round it",
                            show(&k),
                            show(b.literal)
                        )))
                    }
                };
                s.set(k, value);
                continue;
            }
            let value = match ty {
                Some(ty) => coerce(v, ty).map_err(|m| {
                    Error::data(format!("{path}:{line_no}: field '{}': {m}", show(&k)))
                })?,
                None => json_to_value(v).map_err(|e| {
                    Error::data(format!("{path}:{line_no}: field '{}': {e}", show(&k)))
                })?,
            };
            s.set(k, value);
        }
        // Every sample has the schema's fields.
        for (name, _) in self.schema.iter() {
            if s.get(name).is_none() {
                s.set(name.clone(), Value::Null);
            }
        }
        Ok(s)
    }
}

/// Converts a JSON value to a schema type; `Err` says why it does not fit.
fn coerce(v: serde_json::Value, ty: CsvType) -> std::result::Result<Value, String> {
    use serde_json::Value as J;
    let show = |v: &J| {
        let t = v.to_string();
        match t.char_indices().nth(40) {
            Some((cut, _)) => format!("{}…", &t[..cut]),
            None => t,
        }
    };
    let bad = |v: &J| format!("cannot convert {} to {}", show(v), ty.name());
    Ok(match (ty, v) {
        (_, J::Null) => Value::Null,
        (CsvType::Int, J::Number(n)) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::Int(f as i64),
                _ => return Err(bad(&J::Number(n))),
            },
        },
        (CsvType::Int, J::String(t)) => match t.trim().parse() {
            Ok(i) => Value::Int(i),
            Err(_) => return Err(bad(&J::String(t))),
        },
        (CsvType::Float, J::Number(n)) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        (CsvType::Float, J::String(t)) => match t.trim().parse() {
            Ok(f) => Value::Float(f),
            Err(_) => return Err(bad(&J::String(t))),
        },
        (CsvType::Bool, J::Bool(b)) => Value::Bool(b),
        (CsvType::Bool, J::String(t)) => match t.trim() {
            "true" | "True" | "1" => Value::Bool(true),
            "false" | "False" | "0" => Value::Bool(false),
            _ => return Err(bad(&J::String(t))),
        },
        (CsvType::Str, J::String(t)) => Value::Str(t.into()),
        (CsvType::Str, v @ (J::Number(_) | J::Bool(_))) => Value::Str(v.to_string().into()),
        (_, v) => return Err(bad(&v)),
    })
}

impl Source for LinesSource {
    fn name(&self) -> &str {
        match self.format {
            LinesFormat::Text => "read_text",
            LinesFormat::Jsonl => "read_jsonl",
        }
    }
    fn spec(&self) -> serde_json::Value {
        self.source_spec().summary(self.len(), self.index.skipped)
    }
    fn len(&self) -> Option<u64> {
        Some(self.index.lines.len() as u64)
    }
    fn skipped(&self) -> u64 {
        self.index.skipped
    }
    fn ship(&self) -> Option<serde_json::Value> {
        Some(self.source_spec().to_json())
    }
    fn fields(&self) -> Option<Vec<String>> {
        match self.format {
            LinesFormat::Text => Some(vec!["text".into()]),
            LinesFormat::Jsonl => None,
        }
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let (fi, off, len) = self.index.lines[index as usize];
        let blob = &self.index.files[fi as usize];
        let line_no = self.index.line_numbers[index as usize];
        let raw = self.read_line(blob, self.index.sizes[fi as usize], off, len, line_no)?;
        self.parse(&raw, blob.name(), line_no)
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

impl LinesSource {
    /// The spec that reopens these files with these options.
    pub fn source_spec(&self) -> SourceSpec {
        let paths: Vec<String> = self
            .index
            .files
            .iter()
            .map(|b| b.name().to_string())
            .collect();
        let cache = crate::store::cache::spec_of(&paths);
        match self.format {
            LinesFormat::Text => SourceSpec::ReadText {
                paths,
                cache,
                errors: self.errors,
                on_error: self.on_error,
            },
            LinesFormat::Jsonl => SourceSpec::ReadJsonl {
                paths,
                cache,
                schema: self
                    .schema
                    .iter()
                    .map(|(k, t)| (k.to_string(), *t))
                    .collect(),
                on_error: self.on_error,
                errors: self.errors,
            },
        }
    }
}

/// Converts JSON to a [`Value`]: arrays of numbers become 1-d tensors, other arrays lists.
pub fn json_to_value(v: serde_json::Value) -> Result<Value> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::Str(s.into()),
        J::Array(items) => {
            if !items.is_empty() && items.iter().all(|x| x.is_i64()) {
                let data: Vec<i64> = items.iter().filter_map(|x| x.as_i64()).collect();
                Value::Tensor(Tensor::new(vec![data.len()], TensorData::I64(data))?)
            } else if !items.is_empty() && items.iter().all(|x| x.is_number()) {
                let data: Vec<f64> = items.iter().filter_map(|x| x.as_f64()).collect();
                Value::Tensor(Tensor::new(vec![data.len()], TensorData::F64(data))?)
            } else {
                Value::List(
                    items
                        .into_iter()
                        .map(json_to_value)
                        .collect::<Result<_>>()?,
                )
            }
        }
        J::Object(_) => {
            return Err(Error::type_error(
                "nested objects are not supported; flatten them or read the line with read_text",
            ))
        }
    })
}

#[cfg(test)]
mod tests;
