//! `read_csv`: one sample per CSV record, with random access through a record-offset index.
//!
//! Opening scans each file once with a real CSV parser (so quoted fields with embedded newlines
//! and delimiters are handled) and records where every record starts: 16 bytes per record.
//! `get(i)` reads just that record's bytes and parses it. Malformed records (a wrong number of
//! fields) are found during that scan: they fail the open naming file and line, or, with
//! [`CsvOnError::Skip`], are left out of the index and counted.
//!
//! Column types are given (`schema`) or inferred from the first [`INFER_ROWS`] records: `int`
//! if every non-empty value parses as an integer, else `float`, else `bool` (`true`/`false`),
//! else `str`. Empty numeric fields read as null.

use std::str::FromStr;
use std::sync::Arc;

use sluice_core::{Error, Result, Sample, Source, SourceRef, Value};

use crate::store::{expand, Blob};

/// Records read to infer column types.
pub const INFER_ROWS: usize = 1000;

/// A CSV column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsvType {
    Int,
    Float,
    Bool,
    Str,
}

impl CsvType {
    /// The name [`CsvType::from_str`] parses.
    pub fn name(self) -> &'static str {
        match self {
            CsvType::Int => "int",
            CsvType::Float => "float",
            CsvType::Bool => "bool",
            CsvType::Str => "str",
        }
    }
}

impl FromStr for CsvType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "int" | "int64" => CsvType::Int,
            "float" | "float64" => CsvType::Float,
            "bool" => CsvType::Bool,
            "str" | "string" => CsvType::Str,
            other => {
                return Err(Error::invalid(format!(
                    "unknown column type '{other}' (use int, float, bool or str)"
                )))
            }
        })
    }
}

/// What to do with malformed records (a wrong number of fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsvOnError {
    /// Fail when the source is opened, naming file and line.
    Raise,
    /// Leave them out and count them ([`CsvSource::skipped`]).
    Skip,
}

/// How to read CSV files.
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// Column types by name; columns not named are inferred.
    pub schema: Vec<(String, CsvType)>,
    pub delimiter: u8,
    /// Whether the first record holds column names (otherwise `column_0`, `column_1`, ...).
    pub has_header: bool,
    pub on_error: CsvOnError,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            schema: Vec::new(),
            delimiter: b',',
            has_header: true,
            on_error: CsvOnError::Raise,
        }
    }
}

#[derive(Debug)]
struct Index {
    files: Vec<Arc<Blob>>,
    /// (file, byte offset, 1-based line) per record.
    records: Vec<(u32, u64, u32)>,
    names: Vec<Arc<str>>,
    types: Vec<CsvType>,
    delimiter: u8,
    has_header: bool,
    on_error: CsvOnError,
    skipped: u64,
}

/// Records of CSV files as samples.
///
/// ```
/// use sluice_core::Source;
/// let p = std::env::temp_dir().join("sluice-doc.csv");
/// std::fs::write(&p, "id,name\n1,\"a, b\"\n2,c\n").unwrap();
/// let src = sluice_io::CsvSource::open(&[p.display().to_string()], &Default::default()).unwrap();
/// assert_eq!(src.len(), Some(2));
/// assert_eq!(src.get(0).unwrap().get("name").unwrap().as_str(), Some("a, b"));
/// ```
#[derive(Debug, Clone)]
pub struct CsvSource {
    index: Arc<Index>,
}

fn infer(values: &[&[u8]]) -> CsvType {
    let non_empty = || values.iter().filter(|v| !v.is_empty());
    let parses = |f: fn(&str) -> bool| non_empty().all(|v| std::str::from_utf8(v).is_ok_and(f));
    if non_empty().next().is_none() {
        CsvType::Str
    } else if parses(|s| s.parse::<i64>().is_ok()) {
        CsvType::Int
    } else if parses(|s| s.parse::<f64>().is_ok()) {
        CsvType::Float
    } else if parses(|s| s == "true" || s == "false") {
        CsvType::Bool
    } else {
        CsvType::Str
    }
}

fn utf8<'a>(raw: &'a [u8], path: &str, line: u32) -> Result<&'a str> {
    std::str::from_utf8(raw).map_err(|e| Error::data(format!("{path}:{line}: invalid UTF-8 ({e})")))
}

impl CsvSource {
    /// Indexes every file matched by `entries` (paths, directories, globs, URLs).
    pub fn open(entries: &[String], opts: &CsvOptions) -> Result<Self> {
        let paths = expand(entries, Some(&["csv", "tsv"]))?;
        let mut files = Vec::with_capacity(paths.len());
        let mut records = Vec::new();
        let mut names: Option<Vec<String>> = None;
        let mut sample_rows: Vec<csv::ByteRecord> = Vec::new();
        let mut skipped = 0u64;
        for (fi, path) in paths.iter().enumerate() {
            let blob = Arc::new(Blob::open(path)?);
            let mut rdr = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .delimiter(opts.delimiter)
                .from_reader(blob.reader()?);
            let mut rec = csv::ByteRecord::new();
            let mut first = true;
            loop {
                let more = rdr.read_byte_record(&mut rec).map_err(|e| {
                    let line = e.position().map_or(0, |p| p.line());
                    Error::data(format!("{path}:{line}: {e}"))
                })?;
                if !more {
                    break;
                }
                let (offset, line) = rec
                    .position()
                    .map_or((0, 0), |p| (p.byte(), p.line() as u32));
                if first {
                    first = false;
                    let header: Vec<String> = if opts.has_header {
                        rec.iter()
                            .map(|f| utf8(f, path, line).map(|s| s.trim().to_string()))
                            .collect::<Result<_>>()?
                    } else {
                        (0..rec.len()).map(|i| format!("column_{i}")).collect()
                    };
                    match &names {
                        None => names = Some(header),
                        Some(n) if *n != header && opts.has_header => {
                            return Err(Error::data(format!(
                                "{path}:{line}: header differs from {}'s ({} vs {})",
                                paths[0],
                                header.join(","),
                                n.join(",")
                            )))
                        }
                        Some(_) => {}
                    }
                    if opts.has_header {
                        continue;
                    }
                }
                let want = names.as_ref().map_or(0, Vec::len);
                if rec.len() != want {
                    match opts.on_error {
                        CsvOnError::Skip => {
                            skipped += 1;
                            continue;
                        }
                        CsvOnError::Raise => {
                            return Err(Error::data(format!(
                                "{path}:{line}: expected {want} fields, got {}; pass \
                                 on_error=\"skip\" to leave such rows out",
                                rec.len()
                            )))
                        }
                    }
                }
                if sample_rows.len() < INFER_ROWS {
                    sample_rows.push(rec.clone());
                }
                records.push((fi as u32, offset, line));
            }
            files.push(blob);
        }
        let names = names.unwrap_or_default();
        for (col, _) in &opts.schema {
            if !names.contains(col) {
                return Err(Error::invalid(format!(
                    "schema names column '{col}', which the CSV header lacks ({})",
                    names.join(", ")
                )));
            }
        }
        let types = names
            .iter()
            .enumerate()
            .map(|(i, n)| match opts.schema.iter().find(|(c, _)| c == n) {
                Some((_, t)) => *t,
                None => infer(&sample_rows.iter().map(|r| &r[i]).collect::<Vec<_>>()),
            })
            .collect();
        Ok(CsvSource {
            index: Arc::new(Index {
                files,
                records,
                names: names.into_iter().map(Into::into).collect(),
                types,
                delimiter: opts.delimiter,
                has_header: opts.has_header,
                on_error: opts.on_error,
                skipped,
            }),
        })
    }

    /// Malformed records left out ([`CsvOnError::Skip`]).
    pub fn skipped(&self) -> u64 {
        self.index.skipped
    }

    /// Column names and their (given or inferred) types.
    pub fn schema(&self) -> Vec<(String, CsvType)> {
        self.index
            .names
            .iter()
            .zip(&self.index.types)
            .map(|(n, t)| (n.to_string(), *t))
            .collect()
    }

    fn parse(&self, raw: &[u8], ty: CsvType, path: &str, line: u32, col: &str) -> Result<Value> {
        let text = utf8(raw, path, line)?;
        if text.is_empty() && ty != CsvType::Str {
            return Ok(Value::Null);
        }
        let bad = |what: &str| {
            Error::data(format!(
                "{path}:{line}: column '{col}': cannot parse '{text}' as {what}"
            ))
        };
        Ok(match ty {
            CsvType::Str => Value::Str(text.into()),
            CsvType::Int => Value::Int(text.trim().parse().map_err(|_| bad("int"))?),
            CsvType::Float => Value::Float(text.trim().parse().map_err(|_| bad("float"))?),
            CsvType::Bool => match text.trim() {
                "true" | "True" | "1" => Value::Bool(true),
                "false" | "False" | "0" => Value::Bool(false),
                _ => return Err(bad("bool")),
            },
        })
    }
}

impl Source for CsvSource {
    fn name(&self) -> &str {
        "read_csv"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({
            "source": "read_csv",
            "files": self.index.files.len(),
            "records": self.index.records.len(),
            "skipped": self.index.skipped,
        })
    }
    fn len(&self) -> Option<u64> {
        Some(self.index.records.len() as u64)
    }
    fn skipped(&self) -> u64 {
        self.index.skipped
    }
    fn ship(&self) -> Option<serde_json::Value> {
        // Types resolved here travel explicitly, so a worker never re-infers them differently.
        let ix = &self.index;
        let paths: Vec<&str> = ix.files.iter().map(|f| f.name()).collect();
        let schema: serde_json::Map<String, serde_json::Value> = ix
            .names
            .iter()
            .zip(&ix.types)
            .map(|(n, t)| (n.to_string(), t.name().into()))
            .collect();
        Some(serde_json::json!({
            "source": "read_csv",
            "paths": paths,
            "schema": schema,
            "delimiter": (ix.delimiter as char).to_string(),
            "has_header": ix.has_header,
            "on_error": match ix.on_error { CsvOnError::Raise => "raise", CsvOnError::Skip => "skip" },
        }))
    }
    fn fields(&self) -> Option<Vec<String>> {
        Some(self.index.names.iter().map(|n| n.to_string()).collect())
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let ix = &self.index;
        let (fi, start, line) = ix.records[index as usize];
        let blob = &ix.files[fi as usize];
        let end = match ix.records.get(index as usize + 1) {
            Some(&(f, next, _)) if f == fi => next,
            _ => blob.size(),
        };
        let bytes = blob.read_at(start, (end - start) as usize)?;
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(ix.delimiter)
            .from_reader(&bytes[..]);
        let mut rec = csv::ByteRecord::new();
        let ok = rdr
            .read_byte_record(&mut rec)
            .map_err(|e| Error::data(format!("{}:{line}: {e}", blob.name())))?;
        if !ok || rec.len() != ix.names.len() {
            return Err(Error::data(format!(
                "{}:{line}: the file changed since it was indexed",
                blob.name()
            )));
        }
        let mut s = Sample::with_capacity(ix.names.len());
        for ((name, ty), raw) in ix.names.iter().zip(&ix.types).zip(rec.iter()) {
            s.set(name.clone(), self.parse(raw, *ty, blob.name(), line, name)?);
        }
        Ok(s)
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(content: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.csv");
        std::fs::write(&p, content).unwrap();
        (dir, p.display().to_string())
    }

    #[test]
    fn quoted_newlines_keep_random_access_exact() {
        let (_d, p) = write("id,text,score\n1,\"two\nlines\",0.5\n2,\"a,b\",\n3,plain,2\n");
        let src = CsvSource::open(&[p], &CsvOptions::default()).unwrap();
        assert_eq!(src.len(), Some(3));
        assert_eq!(
            src.schema().iter().map(|(_, t)| *t).collect::<Vec<_>>(),
            [CsvType::Int, CsvType::Str, CsvType::Float]
        );
        let s = src.get(2).unwrap();
        assert_eq!(s.get("id"), Some(&Value::Int(3)));
        assert_eq!(s.get("text").unwrap().as_str(), Some("plain"));
        assert_eq!(
            src.get(0).unwrap().get("text").unwrap().as_str(),
            Some("two\nlines")
        );
        assert_eq!(src.get(1).unwrap().get("score"), Some(&Value::Null));
    }

    #[test]
    fn malformed_rows_name_the_line_or_are_skipped() {
        let (_d, p) = write("a,b\n1,2\n3\n4,5\n");
        let e = CsvSource::open(std::slice::from_ref(&p), &CsvOptions::default()).unwrap_err();
        assert!(e.to_string().contains("f.csv:3:"), "{e}");
        let opts = CsvOptions {
            on_error: CsvOnError::Skip,
            ..Default::default()
        };
        let src = CsvSource::open(&[p], &opts).unwrap();
        assert_eq!((src.len(), src.skipped()), (Some(2), 1));
        assert_eq!(src.get(1).unwrap().get("a"), Some(&Value::Int(4)));
    }

    #[test]
    fn explicit_schema_overrides_and_reports_bad_values() {
        let (_d, p) = write("a,b\n1,2\n2,y\n");
        let opts = CsvOptions {
            schema: vec![("a".into(), CsvType::Str), ("b".into(), CsvType::Int)],
            ..Default::default()
        };
        let src = CsvSource::open(&[p], &opts).unwrap();
        assert_eq!(src.get(0).unwrap().get("a").unwrap().as_str(), Some("1"));
        let e = src.get(1).unwrap_err().to_string();
        assert!(
            e.contains(":3:") && e.contains("'b'") && e.contains("int"),
            "{e}"
        );
    }
}
