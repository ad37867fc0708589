//! `read_text` (`{text}` per line) and `read_jsonl` (one object per line), with random access
//! through a line-offset index.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use sluice_core::{Error, Result, Sample, Source, SourceRef, Tensor, TensorData, Value};

use crate::files::expand_paths;

/// How lines are parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinesFormat {
    /// `{text: line}`.
    Text,
    /// Each line is a JSON object; its keys become fields.
    Jsonl,
}

/// What to do with invalid UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Utf8Errors {
    /// Fail naming the file and line.
    Strict,
    /// Replace invalid sequences with U+FFFD.
    Replace,
}

#[derive(Debug)]
struct LineIndex {
    files: Vec<(String, File)>,
    /// (file number, byte offset, byte length) per non-empty line.
    lines: Vec<(u32, u64, u32)>,
    /// 1-based line number within its file, for error messages.
    line_numbers: Vec<u32>,
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
}

impl LinesSource {
    /// Indexes the non-empty lines of every file matched by `entries`.
    pub fn open(entries: &[String], format: LinesFormat, errors: Utf8Errors) -> Result<Self> {
        let paths = expand_paths(entries, None)?;
        let mut files = Vec::with_capacity(paths.len());
        let mut lines = Vec::new();
        let mut line_numbers = Vec::new();
        for (fi, path) in paths.into_iter().enumerate() {
            let data = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            let mut start = 0usize;
            let mut number = 0u32;
            let ends = memchr::memchr_iter(b'\n', &data).chain(std::iter::once(data.len()));
            for end in ends {
                if start > data.len() {
                    break;
                }
                number += 1;
                let mut line = &data[start..end];
                if line.last() == Some(&b'\r') {
                    line = &line[..line.len() - 1];
                }
                if !line.iter().all(u8::is_ascii_whitespace) {
                    lines.push((fi as u32, start as u64, line.len() as u32));
                    line_numbers.push(number);
                }
                start = end + 1;
            }
            let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
            files.push((path, file));
        }
        Ok(LinesSource {
            index: Arc::new(LineIndex {
                files,
                lines,
                line_numbers,
            }),
            format,
            errors,
        })
    }

    fn line(&self, index: u64) -> Result<(String, &str)> {
        let (fi, off, len) = self.index.lines[index as usize];
        let (path, file) = &self.index.files[fi as usize];
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, off)
            .map_err(|e| Error::io(path, e))?;
        let text = match String::from_utf8(buf) {
            Ok(s) => s,
            Err(e) => match self.errors {
                Utf8Errors::Replace => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                Utf8Errors::Strict => {
                    return Err(Error::data(format!(
                        "{path}:{}: invalid UTF-8 ({e}); pass errors=\"replace\" to substitute",
                        self.index.line_numbers[index as usize]
                    )))
                }
            },
        };
        Ok((text, path))
    }
}

impl Source for LinesSource {
    fn name(&self) -> &str {
        match self.format {
            LinesFormat::Text => "read_text",
            LinesFormat::Jsonl => "read_jsonl",
        }
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({
            "source": self.name(),
            "files": self.index.files.len(),
            "lines": self.index.lines.len(),
        })
    }
    fn len(&self) -> Option<u64> {
        Some(self.index.lines.len() as u64)
    }
    fn ship(&self) -> Option<serde_json::Value> {
        let paths: Vec<&str> = self.index.files.iter().map(|(p, _)| p.as_str()).collect();
        let mut spec = serde_json::json!({"source": self.name(), "paths": paths});
        if self.format == LinesFormat::Text {
            let errors = match self.errors {
                Utf8Errors::Strict => "strict",
                Utf8Errors::Replace => "replace",
            };
            spec["errors"] = errors.into();
        }
        Some(spec)
    }
    fn fields(&self) -> Option<Vec<String>> {
        match self.format {
            LinesFormat::Text => Some(vec!["text".into()]),
            LinesFormat::Jsonl => None,
        }
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let (text, path) = self.line(index)?;
        match self.format {
            LinesFormat::Text => {
                sluice_core::field_names!(TEXT = "text");
                let mut s = Sample::with_capacity(1);
                s.set(TEXT.clone(), Value::Str(text.into()));
                Ok(s)
            }
            LinesFormat::Jsonl => {
                let line_no = self.index.line_numbers[index as usize];
                let parsed: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| Error::data(format!("{path}:{line_no}: invalid JSON: {e}")))?;
                let serde_json::Value::Object(map) = parsed else {
                    return Err(Error::data(format!(
                        "{path}:{line_no}: expected a JSON object per line"
                    )));
                };
                let mut s = Sample::with_capacity(map.len());
                for (k, v) in map {
                    let value = json_to_value(v)
                        .map_err(|e| Error::data(format!("{path}:{line_no}: field '{k}': {e}")))?;
                    s.set(k, value);
                }
                Ok(s)
            }
        }
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
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
mod tests {
    use super::*;

    fn write(content: &[u8]) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        std::fs::write(&p, content).unwrap();
        (dir, p.display().to_string())
    }

    #[test]
    fn text_lines_skip_blank_and_strip_cr() {
        let (_d, p) = write(b"a\r\n\n  \nb\nlast");
        let src = LinesSource::open(&[p], LinesFormat::Text, Utf8Errors::Strict).unwrap();
        let lines: Vec<String> = (0..src.len().unwrap())
            .map(|i| {
                src.get(i)
                    .unwrap()
                    .get("text")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(lines, ["a", "b", "last"]);
    }

    #[test]
    fn invalid_utf8_strict_names_line_or_replaces() {
        let (_d, p) = write(b"ok\nbad \xff here\n");
        let strict = LinesSource::open(
            std::slice::from_ref(&p),
            LinesFormat::Text,
            Utf8Errors::Strict,
        )
        .unwrap();
        let e = strict.get(1).unwrap_err().to_string();
        assert!(e.contains(":2:") && e.contains("UTF-8"), "{e}");
        let lossy = LinesSource::open(&[p], LinesFormat::Text, Utf8Errors::Replace).unwrap();
        assert!(lossy
            .get(1)
            .unwrap()
            .get("text")
            .unwrap()
            .as_str()
            .unwrap()
            .contains('\u{FFFD}'));
    }

    #[test]
    fn jsonl_parses_objects_and_reports_bad_lines() {
        let (_d, p) = write(b"{\"a\": 1, \"t\": \"x\", \"v\": [1, 2]}\nnot json\n");
        let src = LinesSource::open(&[p], LinesFormat::Jsonl, Utf8Errors::Strict).unwrap();
        let s = src.get(0).unwrap();
        assert_eq!(s.get("a"), Some(&Value::Int(1)));
        assert!(matches!(s.get("v"), Some(Value::Tensor(t)) if t.shape() == [2]));
        let e = src.get(1).unwrap_err().to_string();
        assert!(e.contains(":2:") && e.contains("invalid JSON"), "{e}");
    }
}
