//! Sinks: `write_parquet` and `write_jsonl` write a stream of samples into a directory (local or
//! an object-store prefix) as numbered part files, `part-00000.parquet`, `part-00001.parquet`,
//! ... Names depend only on the order of samples, so a deterministic pipeline writes the same
//! files byte for byte. Each file appears atomically (temporary name + rename locally; a
//! single completed upload in a store), so readers never see half a file. Memory is bounded by
//! one row group (Parquet) or one line (JSONL), plus one file for uploads to a store.
//!
//! A local temporary is `.part-00000.parquet.tmp-<pid>.<start>-<random>` beside its
//! destination, created with `O_EXCL|O_NOFOLLOW`: a name planted in advance (a link to a file
//! the trainer can write) is never written through. One a killed writer left is removed by
//! the first later write into that directory, once its process is dead.

use std::io::Write;

use arrow_schema::SchemaRef;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use sluice_core::{scratch, with_tensor_data, Error, Result, Sample, Tensor, Value};

use crate::arrow_conv::{infer_schema, samples_to_batch};
use crate::store::{is_url, write_atomic};

/// How sinks split their output.
#[derive(Debug, Clone, Copy)]
pub struct SinkOptions {
    /// Rows per part file.
    pub rows_per_file: usize,
    /// Rows per Parquet row group (also the unit of buffering).
    pub rows_per_group: usize,
}

impl Default for SinkOptions {
    fn default() -> Self {
        SinkOptions {
            rows_per_file: 1 << 20,
            rows_per_group: 1 << 14,
        }
    }
}

impl SinkOptions {
    fn check(&self) -> Result<()> {
        if self.rows_per_file == 0 || self.rows_per_group == 0 {
            return Err(Error::invalid(
                "rows_per_file and rows_per_group must be > 0",
            ));
        }
        Ok(())
    }
}

/// The name of part `n` in `dir`.
pub fn part_name(dir: &str, n: usize, ext: &str) -> String {
    format!("{}/part-{n:05}.{ext}", dir.trim_end_matches('/'))
}

pub(crate) fn prepare_dir(dir: &str) -> Result<()> {
    if !is_url(dir) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        scratch::sweep_files_once(std::path::Path::new(dir), "part-tmp", temp_owner);
    }
    Ok(())
}

/// The owner tag of a part file's temporary (`.part-….tmp-<tag>[-<random>]`; older versions
/// wrote `.tmp-<pid>`).
fn temp_owner(name: &str) -> Option<String> {
    if !name.starts_with(".part-") {
        return None;
    }
    let (_, rest) = name.rsplit_once(".tmp-")?;
    scratch::owner_in(rest, "").map(str::to_owned)
}

/// Creates the hidden temporary of `dest` beside it, under a name no one can plant first.
pub(crate) fn create_temp(dest: &std::path::Path) -> Result<(std::path::PathBuf, std::fs::File)> {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tag = scratch::tag();
    loop {
        let tmp = dest.with_file_name(format!(".{name}.tmp-{tag}-{}", scratch::random_hex()));
        // The mode a plain create gives: the published file is the user's output.
        match scratch::create_new_file(&tmp, 0o666) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(tmp.display(), e)),
        }
    }
}

/// Removes `part-NNNNN.ext` files (or objects, under a bucket prefix) other than the `written`
/// ones, left by an earlier, longer run, so the directory holds exactly this run's output: a
/// reader of the folder would otherwise take the old parts for part of the new output.
pub(crate) fn remove_stale(dir: &str, written: &[String], ext: &str) -> Result<()> {
    let suffix = format!(".{ext}");
    let stale = |name: &str| {
        let is_part = name
            .strip_prefix("part-")
            .and_then(|r| r.strip_suffix(suffix.as_str()))
            .is_some_and(|n| n.parse::<usize>().is_ok());
        is_part && !written.iter().any(|w| w.rsplit('/').next() == Some(name))
    };
    if is_url(dir) {
        return crate::store::delete_where(dir, stale);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if stale(&name) {
            std::fs::remove_file(entry.path()).map_err(|e| Error::io(name, e))?;
        }
    }
    Ok(())
}

/// Numbers samples into parts of `rows_per_file`.
fn numbered(
    samples: impl Iterator<Item = Result<Sample>>,
    rows_per_file: usize,
) -> impl Iterator<Item = Result<(usize, Sample)>> {
    let per = rows_per_file.max(1);
    samples
        .enumerate()
        .map(move |(i, s)| s.map(|s| (i / per, s)))
}

fn out_of_order(part: usize, last: usize) -> Error {
    Error::Internal(format!("sink: part {part} after part {last}"))
}

/// Where a part file's bytes go before it is published: a hidden temporary file beside the
/// destination, or memory for an upload to a store.
pub(crate) struct Staging {
    tmp: Option<std::path::PathBuf>,
    file: Option<std::io::BufWriter<std::fs::File>>,
    mem: Vec<u8>,
}

impl Staging {
    pub(crate) fn new(dest: &str) -> Result<Self> {
        if is_url(dest) {
            return Ok(Staging {
                tmp: None,
                file: None,
                mem: Vec::new(),
            });
        }
        let (tmp, file) = create_temp(std::path::Path::new(dest))?;
        Ok(Staging {
            tmp: Some(tmp),
            file: Some(std::io::BufWriter::with_capacity(1 << 20, file)),
            mem: Vec::new(),
        })
    }
    pub(crate) fn publish(mut self, dest: &str) -> Result<()> {
        let Some(file) = self.file.take() else {
            return write_atomic(dest, Bytes::from(std::mem::take(&mut self.mem)));
        };
        let file = file
            .into_inner()
            .map_err(|e| Error::io(dest, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(dest, e))?;
        if let Some(tmp) = self.tmp.take() {
            std::fs::rename(&tmp, dest).map_err(|e| Error::io(dest, e))?;
        }
        Ok(())
    }
}

impl Write for Staging {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => self.mem.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // An unpublished temporary (an error mid-file) must not stay behind.
        if let Some(tmp) = &self.tmp {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Writes `samples` into `dir` as Parquet part files (zstd); returns the files written. The
/// schema comes from the first row group; later samples must fit it.
///
/// ```
/// use sluice_core::{Sample, Value};
/// let dir = std::env::temp_dir().join("sluice-doc-sink");
/// let rows = (0..3).map(|i| Ok(Sample::from_pairs([("id", Value::Int(i))])));
/// let files = sluice_io::sink::write_parquet(rows, &dir.display().to_string(), &Default::default()).unwrap();
/// assert!(files[0].ends_with("part-00000.parquet"));
/// ```
pub fn write_parquet(
    samples: impl Iterator<Item = Result<Sample>>,
    dir: &str,
    opts: &SinkOptions,
) -> Result<Vec<String>> {
    // The parts writer checks `opts`.
    write_parquet_parts(numbered(samples, opts.rows_per_file), dir, opts)
}

/// Writes samples tagged with their part number (non-decreasing, e.g. a `repartition`'s
/// partition) into `part-<number>.parquet` files, one per part that has rows;
/// `rows_per_file` is not applied.
pub fn write_parquet_parts(
    samples: impl Iterator<Item = Result<(usize, Sample)>>,
    dir: &str,
    opts: &SinkOptions,
) -> Result<Vec<String>> {
    opts.check()?;
    prepare_dir(dir)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(opts.rows_per_group))
        .build();
    let mut files = Vec::new();
    let mut schema: Option<SchemaRef> = None;
    let mut writer: Option<(usize, String, ArrowWriter<Staging>)> = None;
    let mut buf: Vec<Sample> = Vec::with_capacity(opts.rows_per_group);
    let mut buf_part = 0usize;
    let mut rows = 0u64;
    // Writes the buffered rows (all of part `buf_part`) as one row group.
    let mut flush = |buf: &mut Vec<Sample>,
                     part: usize,
                     writer: &mut Option<(usize, String, ArrowWriter<Staging>)>,
                     files: &mut Vec<String>|
     -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let schema = match &schema {
            Some(s) => s.clone(),
            None => schema.insert(infer_schema(buf)?).clone(),
        };
        let batch = samples_to_batch(buf, &schema).map_err(|e| {
            Error::type_error(format!("rows {rows}..{}: {e}", rows + buf.len() as u64))
        })?;
        if writer.as_ref().is_some_and(|(p, _, _)| *p != part) {
            files.push(finish_parquet(writer.take())?);
        }
        if writer.is_none() {
            let dest = part_name(dir, part, "parquet");
            let w = ArrowWriter::try_new(Staging::new(&dest)?, schema.clone(), Some(props.clone()))
                .map_err(|e| Error::Internal(e.to_string()))?;
            *writer = Some((part, dest, w));
        }
        let (_, dest, w) = writer
            .as_mut()
            .ok_or_else(|| Error::Internal("no writer".into()))?;
        w.write(&batch)
            .map_err(|e| Error::io(&*dest, std::io::Error::other(e)))?;
        rows += buf.len() as u64;
        buf.clear();
        Ok(())
    };
    for item in samples {
        let (part, s) = item?;
        if part != buf_part {
            if part < buf_part {
                return Err(out_of_order(part, buf_part));
            }
            flush(&mut buf, buf_part, &mut writer, &mut files)?;
            buf_part = part;
        }
        buf.push(s);
        if buf.len() == opts.rows_per_group {
            flush(&mut buf, buf_part, &mut writer, &mut files)?;
        }
    }
    flush(&mut buf, buf_part, &mut writer, &mut files)?;
    if writer.is_some() {
        files.push(finish_parquet(writer.take())?);
    }
    remove_stale(dir, &files, "parquet")?;
    Ok(files)
}

fn finish_parquet(w: Option<(usize, String, ArrowWriter<Staging>)>) -> Result<String> {
    let (_, dest, w) = w.ok_or_else(|| Error::Internal("no writer".into()))?;
    let staging = w
        .into_inner()
        .map_err(|e| Error::io(&dest, std::io::Error::other(e)))?;
    staging.publish(&dest)?;
    Ok(dest)
}

/// Writes `samples` into `dir` as JSON-lines part files; returns the files written.
pub fn write_jsonl(
    samples: impl Iterator<Item = Result<Sample>>,
    dir: &str,
    opts: &SinkOptions,
) -> Result<Vec<String>> {
    // The parts writer checks `opts`.
    write_jsonl_parts(numbered(samples, opts.rows_per_file), dir, opts)
}

/// [`write_parquet_parts`] for JSON lines: one `part-<number>.jsonl` per part with rows.
pub fn write_jsonl_parts(
    samples: impl Iterator<Item = Result<(usize, Sample)>>,
    dir: &str,
    opts: &SinkOptions,
) -> Result<Vec<String>> {
    opts.check()?;
    prepare_dir(dir)?;
    let mut files = Vec::new();
    let mut current: Option<(usize, String, Staging)> = None;
    for (row, item) in samples.enumerate() {
        let (part, s) = item?;
        match &current {
            Some((p, _, _)) if *p == part => {}
            Some((p, _, _)) if *p > part => return Err(out_of_order(part, *p)),
            _ => {
                if let Some((_, dest, out)) = current.take() {
                    out.publish(&dest)?;
                    files.push(dest);
                }
                let dest = part_name(dir, part, "jsonl");
                current = Some((part, dest.clone(), Staging::new(&dest)?));
            }
        }
        let (_, dest, out) = current
            .as_mut()
            .ok_or_else(|| Error::Internal("no file".into()))?;
        let mut obj = serde_json::Map::with_capacity(s.len());
        for (k, v) in s.iter() {
            let j = value_to_json(v)
                .map_err(|e| Error::type_error(format!("row {row}, field '{k}': {e}")))?;
            obj.insert(k.to_string(), j);
        }
        serde_json::to_writer(&mut *out, &obj).map_err(|e| Error::io(&*dest, e.into()))?;
        out.write_all(b"\n").map_err(|e| Error::io(&*dest, e))?;
    }
    if let Some((_, dest, out)) = current.take() {
        out.publish(&dest)?;
        files.push(dest);
    }
    remove_stale(dir, &files, "jsonl")?;
    Ok(files)
}

fn tensor_json(t: &Tensor) -> serde_json::Value {
    let flat: Vec<serde_json::Value> =
        with_tensor_data!(t.data(), v => v.iter().map(|x| serde_json::json!(x)).collect());
    // Nest innermost dimension first: [2, 3] → 2 arrays of 3.
    let mut level = flat;
    for &d in t.shape().iter().skip(1).rev() {
        let mut it = level.into_iter();
        let mut out = Vec::new();
        loop {
            let chunk: Vec<_> = it.by_ref().take(d.max(1)).collect();
            if chunk.is_empty() {
                break;
            }
            out.push(serde_json::Value::Array(chunk));
        }
        level = out;
    }
    serde_json::Value::Array(level)
}

/// A value as JSON; bytes have no JSON form and are an error.
pub fn value_to_json(v: &Value) -> Result<serde_json::Value> {
    use serde_json::Value as J;
    Ok(match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) => J::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        Value::Str(s) => J::String(s.to_string()),
        Value::Bytes(_) => {
            return Err(Error::type_error(
                "bytes have no JSON form; decode them or drop the field first",
            ))
        }
        Value::Tensor(t) => tensor_json(t),
        Value::List(l) => J::Array(l.iter().map(value_to_json).collect::<Result<_>>()?),
        Value::Column(c) => value_to_json(&c.to_value()?)?,
        Value::Object(_) => {
            return Err(Error::type_error(
                "an object handed through unconverted has no JSON form",
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ParquetSource;
    use sluice_core::{Source, TensorData};

    fn rows(n: i64) -> impl Iterator<Item = Result<Sample>> {
        (0..n).map(|i| {
            Ok(Sample::from_pairs([
                ("id", Value::Int(i)),
                ("name", Value::from(format!("n{i}"))),
            ]))
        })
    }

    #[test]
    fn parquet_parts_round_trip_and_stale_parts_go() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        std::fs::write(dir.path().join("part-00009.parquet"), b"old").unwrap();
        let opts = SinkOptions {
            rows_per_file: 40,
            rows_per_group: 16,
        };
        let files = write_parquet(rows(100), &d, &opts).unwrap();
        assert_eq!(files.len(), 3);
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "part-00000.parquet",
                "part-00001.parquet",
                "part-00002.parquet"
            ]
        );
        let src = ParquetSource::open(&[d], None).unwrap();
        assert_eq!(src.len(), Some(100));
        assert_eq!(
            src.get(77).unwrap().get("name").unwrap().as_str(),
            Some("n77")
        );
    }

    #[test]
    fn a_failing_stream_leaves_no_part_file() {
        let dir = tempfile::tempdir().unwrap();
        let bad = rows(5).chain(std::iter::once(Err(Error::data("boom"))));
        assert!(write_jsonl(bad, &dir.path().display().to_string(), &Default::default()).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn parts_follow_their_numbers_and_stale_files_go() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        std::fs::write(dir.path().join("part-00001.jsonl"), b"old\n").unwrap();
        // Parts 0 and 2 have rows (1 is empty): two files, named by part.
        let tagged = rows(9).map(|s| {
            s.map(|s| {
                let i = s.get("id").unwrap().as_int().unwrap();
                (if i < 4 { 0 } else { 2 }, s)
            })
        });
        let opts = SinkOptions {
            rows_per_file: 1,
            rows_per_group: 3,
        };
        let files = write_parquet_parts(tagged, &d, &opts).unwrap();
        assert!(
            files[0].ends_with("part-00000.parquet") && files[1].ends_with("part-00002.parquet")
        );
        let src = ParquetSource::open(&[files[1].clone()], None).unwrap();
        assert_eq!(src.len(), Some(5));
        let tagged = rows(3).map(|s| s.map(|s| (3, s)));
        let files = write_jsonl_parts(tagged, &d, &opts).unwrap();
        assert_eq!(files.len(), 1);
        assert!(!dir.path().join("part-00001.jsonl").exists());
        let back =
            rows(2).map(|s| s.map(|s| (1 - s.get("id").unwrap().as_int().unwrap() as usize, s)));
        assert!(
            write_jsonl_parts(back, &d, &opts).is_err(),
            "parts must not go backwards"
        );
    }

    #[test]
    fn a_link_planted_at_the_old_temporary_name_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let pid = std::process::id();
        for n in [".part-00000.parquet", ".part-00000.jsonl"] {
            let planted = dir.path().join(format!("{n}.tmp-{pid}"));
            std::os::unix::fs::symlink(&victim, planted).unwrap();
        }
        let files = write_parquet(rows(10), &d, &Default::default()).unwrap();
        write_jsonl(rows(10), &d, &Default::default()).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let src = ParquetSource::open(&files, None).unwrap();
        assert_eq!(src.len(), Some(10));
        // The planted links are someone else's business: left as they are.
        assert!(dir
            .path()
            .join(format!(".part-00000.parquet.tmp-{pid}"))
            .symlink_metadata()
            .is_ok());
    }

    #[test]
    fn temporaries_of_killed_writers_go_at_the_next_write_and_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        let (dead, start) = sluice_core::scratch::dead_process();
        let me = scratch::tag();
        let names = [
            (format!(".part-00000.parquet.tmp-{dead}"), true), // an older version's name
            (
                format!(".part-00001.jsonl.tmp-{dead}.{start}-0123456789abcdef"),
                true,
            ),
            (
                format!(".part-00002.parquet.tmp-{me}-0123456789abcdef"),
                false,
            ),
            (".part-00003.parquet.tmp-x".to_string(), false),
            (format!("notes.tmp-{dead}"), false),
        ];
        for (n, _) in &names {
            std::fs::write(dir.path().join(n), b"half").unwrap();
        }
        write_jsonl(rows(3), &d, &Default::default()).unwrap();
        for (n, swept) in &names {
            assert_eq!(!dir.path().join(n).exists(), *swept, "{n}");
        }
        assert!(dir.path().join("part-00000.jsonl").exists());
    }

    #[test]
    fn jsonl_nests_tensors_and_rejects_bytes() {
        let t = Tensor::new(vec![2, 2], TensorData::I32(vec![1, 2, 3, 4])).unwrap();
        assert_eq!(
            value_to_json(&Value::Tensor(t)).unwrap(),
            serde_json::json!([[1, 2], [3, 4]])
        );
        assert!(value_to_json(&Value::Bytes(vec![1u8].into())).is_err());
    }
}
