//! `read_csv`: one sample per CSV record, with random access through a record-offset index.
//!
//! Opening scans each file once with a real CSV parser (so quoted fields with embedded newlines
//! and delimiters are handled) and records where every record starts: 16 bytes per record.
//! `get(i)` reads just that record's bytes and parses it.
//!
//! Errors in a record — a wrong number of fields, bytes that are not UTF-8, a value that is not
//! of its column's type — name the file and line. With [`CsvOnError::Raise`] a wrong field
//! count fails the open (the scan sees it for free) and the other errors fail the read of that
//! record. With [`CsvOnError::Skip`] the scan checks every record completely (each value parsed
//! as its column's type, exactly as `get` will) and leaves the bad ones out of the index,
//! counted ([`CsvSource::skipped`]); `get` then never fails on content. Errors that are not
//! about one record (an unreadable file, headers that differ between files, a schema naming a
//! missing column) raise under both policies, and so do a header naming a column twice and a
//! quoted field whose quote is never closed (the parser would read the rest of the file as
//! that one value, so no later record can be found: [`quote`]).
//!
//! A record read back is checked against the index: it must start right after a line break
//! and (when no record was left out) be the only record up to the next indexed one. A file
//! edited in place after it was indexed fails the read ("changed since it was indexed")
//! rather than giving records cut at the wrong places.
//!
//! Compressed files (`.csv.gz`, `.tsv.zst`, `.csv.bz2`, ...) are decompressed once at open
//! into a temporary file that `get` reads from ([`crate::compressed`]); directories and
//! prefixes list them along with `.csv` and `.tsv` files.
//!
//! Column types are given (`schema`) or inferred from the first [`INFER_ROWS`] records: `int`
//! if every non-empty value parses as an int64, else `str` if one is an integer beyond int64
//! (a float would round it), else `float`, else `bool` (`true`/`false`), else `str`. Empty
//! numeric fields read as null.

use std::str::FromStr;
use std::sync::Arc;

use sluice_core::{Error, OnError, Result, Sample, Source, SourceRef, Value};

use crate::compressed::{expand, read_error, Input};
use crate::show::show;

mod quote;
pub use crate::spec::CsvType;
use crate::spec::SourceSpec;

/// Records read to infer column types.
pub const INFER_ROWS: usize = 1000;

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

/// As its [`CsvType::name`].
impl serde::Serialize for CsvType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// From any name [`CsvType::from_str`] takes (`int64`, `string`, ...).
impl<'de> serde::Deserialize<'de> for CsvType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(|e: Error| serde::de::Error::custom(e))
    }
}

/// What to do with a record that does not parse (wrong field count, invalid UTF-8, a value
/// not of its column's type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsvOnError {
    /// Fail naming file and line: at open for a wrong field count, when the record is read
    /// otherwise.
    Raise,
    /// Check every record at open; leave the bad ones out and count them
    /// ([`CsvSource::skipped`]).
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
    files: Vec<Arc<Input>>,
    /// (file, byte offset, 1-based line) per record.
    records: Vec<(u32, u64, u32)>,
    names: Vec<sluice_core::Name>,
    types: Vec<CsvType>,
    delimiter: u8,
    has_header: bool,
    on_error: CsvOnError,
    skipped: u64,
    /// Each file's size when indexed.
    sizes: Vec<u64>,
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
    } else if non_empty().any(|v| std::str::from_utf8(v).is_ok_and(|s| big_int(s.trim()))) {
        // A float would round it: as text it keeps every digit (pandas keeps such a column
        // as objects).
        CsvType::Str
    } else if parses(|s| s.parse::<f64>().is_ok()) {
        CsvType::Float
    } else if parses(|s| s == "true" || s == "false") {
        CsvType::Bool
    } else {
        CsvType::Str
    }
}

/// An integer written out (sign and digits) that does not fit in int64.
fn big_int(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && s.parse::<i64>().is_err()
}

fn utf8<'a>(raw: &'a [u8], path: &str, line: u32) -> Result<&'a str> {
    std::str::from_utf8(raw).map_err(|e| Error::data(format!("{path}:{line}: invalid UTF-8 ({e})")))
}

/// One field's value as its column's type; the error names file, line and column.
fn parse_field(raw: &[u8], ty: CsvType, path: &str, line: u32, col: &str) -> Result<Value> {
    let text = utf8(raw, path, line)?;
    if text.is_empty() && ty != CsvType::Str {
        return Ok(Value::Null);
    }
    let bad = |what: &str| {
        Error::data(format!(
            "{path}:{line}: column '{}': cannot parse '{}' as {what}",
            show(col),
            show(text)
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

/// The column types: given by the schema, else inferred from `rows`. Inferred types fit
/// every value of `rows` (that is how they are chosen), so those rows never fail to parse.
fn column_types(
    names: &[String],
    schema: &[(String, CsvType)],
    rows: &[csv::ByteRecord],
) -> Vec<CsvType> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| match schema.iter().find(|(c, _)| c == n) {
            Some((_, t)) => *t,
            None => infer(&rows.iter().map(|r| &r[i]).collect::<Vec<_>>()),
        })
        .collect()
}

/// Whether every field of `rec` parses: as its type where `types[i]` is known, as UTF-8 where
/// it is not yet (still being inferred).
fn record_ok(rec: &csv::ByteRecord, types: &[Option<CsvType>]) -> bool {
    rec.iter().zip(types).all(|(raw, ty)| match ty {
        Some(ty) => parse_field(raw, *ty, "", 0, "").is_ok(),
        None => std::str::from_utf8(raw).is_ok(),
    })
}

/// `e`, a failed read of `input`, as `changed()` (which names the record) when the file's
/// size or modification time are no longer those it was indexed at: a read past its new
/// end fails, and so does the read that notices the change.
pub(crate) fn if_changed(input: &Input, e: Error, changed: impl Fn() -> Error) -> Error {
    if input.changed() {
        changed()
    } else {
        e
    }
}

/// A quote opened on line `opened` of `path` and never closed.
fn unclosed_error(path: &str, opened: u32) -> Error {
    Error::data(format!(
        "{path}:{opened}: unterminated quoted field: the quote opened on line {opened} is never \
         closed, so every line after it would be read as one value (raised under \
         on_error=\"skip\" too: the records after it cannot be found); close the quote, or \
         write a quote inside a quoted field as \"\""
    ))
}

/// Refuses a header naming a column twice: a sample holds one value per name, so one of the
/// columns would be dropped.
fn unique_names(names: &[String], path: &str, line: u32) -> Result<()> {
    for (j, name) in names.iter().enumerate() {
        if let Some(i) = names[..j].iter().position(|n| n == name) {
            return Err(Error::invalid(format!(
                "{path}:{line}: the header names column '{}' twice (columns {} and {}); \
                 rename one of them",
                show(name),
                i + 1,
                j + 1
            )));
        }
    }
    Ok(())
}

impl CsvSource {
    /// Indexes every file matched by `entries` (paths, directories, globs, URLs).
    pub fn open(entries: &[String], opts: &CsvOptions) -> Result<Self> {
        let paths = expand(entries, Some(&["csv", "tsv"]))?;
        let skip = opts.on_error == CsvOnError::Skip;
        let mut files = Vec::with_capacity(paths.len());
        let mut records = Vec::new();
        let mut names: Option<Vec<String>> = None;
        let mut sample_rows: Vec<csv::ByteRecord> = Vec::new();
        // Under `Skip`, the type each column is checked against: schema columns from the
        // start, inferred ones once INFER_ROWS records fixed them (`None` until then).
        let mut check_types: Vec<Option<CsvType>> = Vec::new();
        let mut inferred = false;
        let mut skipped = 0u64;
        let mut sizes = Vec::with_capacity(paths.len());
        for (fi, path) in paths.iter().enumerate() {
            let (file, scan) = Input::open(path)?;
            let mut rdr = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .delimiter(opts.delimiter)
                .from_reader(scan);
            let mut rec = csv::ByteRecord::new();
            let mut first = true;
            // Where the latest record starts: the only one that can run to the end of the
            // file inside an unclosed quote.
            let mut last: Option<(u64, u32)> = None;
            loop {
                let more = rdr.read_byte_record(&mut rec).map_err(|e| {
                    let line = e.position().map_or(0, |p| p.line());
                    let message = show(&e.to_string());
                    match e.into_kind() {
                        csv::ErrorKind::Io(e) => read_error(path, e),
                        _ => Error::data(format!("{path}:{line}: {message}")),
                    }
                })?;
                if !more {
                    break;
                }
                let (offset, line) = rec
                    .position()
                    .map_or((0, 0), |p| (p.byte(), p.line() as u32));
                last = Some((offset, line));
                // A record that swallowed the rest of the file is reported as that, not as
                // whatever else is wrong with it (its field count, its header).
                let unclosed = |rdr: &mut csv::Reader<_>, e: Error| -> Error {
                    let mut peek = csv::ByteRecord::new();
                    if !matches!(rdr.read_byte_record(&mut peek), Ok(false)) {
                        return e;
                    }
                    match quote::unterminated_quote(&file, offset, line, opts.delimiter) {
                        Ok(Some(opened)) => unclosed_error(path, opened),
                        _ => e,
                    }
                };
                if first {
                    first = false;
                    let header: Vec<String> = if opts.has_header {
                        rec.iter()
                            .map(|f| utf8(f, path, line).map(|s| s.trim().to_string()))
                            .collect::<Result<_>>()?
                    } else {
                        (0..rec.len()).map(|i| format!("column_{i}")).collect()
                    };
                    if let Err(e) = unique_names(&header, path, line) {
                        return Err(unclosed(&mut rdr, e));
                    }
                    match &names {
                        None => {
                            check_types = header
                                .iter()
                                .map(|n| opts.schema.iter().find(|(c, _)| c == n).map(|c| c.1))
                                .collect();
                            names = Some(header);
                        }
                        Some(n) if *n != header && opts.has_header => {
                            let e = Error::data(format!(
                                "{path}:{line}: header differs from {}'s ({} vs {})",
                                paths[0],
                                show(&header.join(",")),
                                show(&n.join(","))
                            ));
                            return Err(unclosed(&mut rdr, e));
                        }
                        Some(_) => {}
                    }
                    if opts.has_header {
                        continue;
                    }
                }
                let want = names.as_ref().map_or(0, Vec::len);
                if rec.len() != want {
                    if skip {
                        skipped += 1;
                        continue;
                    }
                    let e = Error::data(format!(
                        "{path}:{line}: expected {want} fields, got {}; pass \
                         on_error=\"skip\" to leave such records out",
                        rec.len()
                    ));
                    return Err(unclosed(&mut rdr, e));
                }
                if skip && !record_ok(&rec, &check_types) {
                    skipped += 1;
                    continue;
                }
                if sample_rows.len() < INFER_ROWS {
                    sample_rows.push(rec.clone());
                } else if skip && !inferred {
                    // Types are fixed now: check the rest against them.
                    let names = names.as_deref().unwrap_or_default();
                    let types = column_types(names, &opts.schema, &sample_rows);
                    check_types = types.into_iter().map(Some).collect();
                    inferred = true;
                    if !record_ok(&rec, &check_types) {
                        skipped += 1;
                        continue;
                    }
                }
                records.push((fi as u32, offset, line));
            }
            drop(rdr);
            // Under either policy: the records after the quote cannot be found again, so
            // skipping "one record" would silently drop the rest of the file.
            if let Some((offset, line)) = last {
                if let Some(opened) =
                    quote::unterminated_quote(&file, offset, line, opts.delimiter)?
                {
                    return Err(unclosed_error(path, opened));
                }
            }
            sizes.push(file.size()?);
            files.push(Arc::new(file));
        }
        let names = names.unwrap_or_default();
        for (col, _) in &opts.schema {
            if !names.contains(col) {
                return Err(Error::invalid(format!(
                    "schema names column '{col}', which the CSV header lacks ({})",
                    show(&names.join(", "))
                )));
            }
        }
        let types = column_types(&names, &opts.schema, &sample_rows);
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
                sizes,
            }),
        })
    }

    /// Records left out as unparsable ([`CsvOnError::Skip`]).
    pub fn skipped(&self) -> u64 {
        self.index.skipped
    }

    /// The spec that reopens these files; the column types resolved here travel in it, so
    /// a worker never re-infers them differently.
    pub fn source_spec(&self) -> SourceSpec {
        let ix = &self.index;
        let paths: Vec<String> = ix.files.iter().map(|f| f.name().to_string()).collect();
        SourceSpec::ReadCsv {
            cache: crate::store::cache::spec_of(&paths),
            paths,
            schema: self.schema().into_iter().collect(),
            delimiter: Some(ix.delimiter as char),
            has_header: ix.has_header,
            on_error: match ix.on_error {
                CsvOnError::Raise => OnError::Raise,
                CsvOnError::Skip => OnError::Skip,
            },
        }
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
}

impl Source for CsvSource {
    fn name(&self) -> &str {
        "read_csv"
    }
    fn spec(&self) -> serde_json::Value {
        self.source_spec().summary(self.len(), self.index.skipped)
    }
    fn len(&self) -> Option<u64> {
        Some(self.index.records.len() as u64)
    }
    fn skipped(&self) -> u64 {
        self.index.skipped
    }
    fn ship(&self) -> Option<serde_json::Value> {
        Some(self.source_spec().to_json())
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
            _ => ix.sizes[fi as usize],
        };
        // From the byte before the record: it ends the record before (an edit moving the
        // records is seen there).
        let from = start.saturating_sub(1);
        let changed = || {
            Error::data(format!(
                "{}:{line}: the file changed since it was indexed; open it again",
                blob.name()
            ))
        };
        let bytes = blob
            .read_at(from, (end - from) as usize)
            .map_err(|e| if_changed(blob, e, changed))?;
        if start > 0 && !matches!(bytes[0], b'\n' | b'\r') {
            return Err(changed());
        }
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(ix.delimiter)
            .from_reader(&bytes[(start - from) as usize..]);
        let mut rec = csv::ByteRecord::new();
        let ok = rdr
            .read_byte_record(&mut rec)
            .map_err(|e| Error::data(format!("{}:{line}: {e}", blob.name())))?;
        // With no record left out, the bytes up to the next record hold this one alone.
        let alone = ix.skipped > 0
            || matches!(rdr.read_byte_record(&mut csv::ByteRecord::new()), Ok(false));
        if !ok || rec.len() != ix.names.len() || !alone {
            return Err(changed());
        }
        let mut s = Sample::with_capacity(ix.names.len());
        for ((name, ty), raw) in ix.names.iter().zip(&ix.types).zip(rec.iter()) {
            let value = parse_field(raw, *ty, blob.name(), line, name).map_err(|e| {
                Error::data(format!(
                    "{e}; pass on_error=\"skip\" to leave such records out"
                ))
            })?;
            s.set(name.clone(), value);
        }
        Ok(s)
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
mod tests;
