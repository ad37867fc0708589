//! `read_parquet`: rows of Parquet files as samples, with column projection and random access.
//!
//! Opening reads only each file's footer (two ranged reads), which gives every row group's row
//! count; a global row index then maps to (file, row group, row) by binary search, so
//! `shuffle()` and `shard()` work on indices without scanning the data. `get` fetches the
//! projected column chunks of one row group (ranged reads, concurrent for object stores),
//! decodes them, and keeps the decoded row group in a small cache shared by the reader
//! threads: consecutive indices (a sequential scan, a shard, a batch) decode each row group
//! once.
//!
//! Memory: at most [`CACHED_ROW_GROUPS`] decoded row groups, plus one being decoded per
//! thread. Files written with row groups of ~10k-100k rows suit random access; a global
//! `shuffle()` over files with huge row groups decodes a row group per sample and is slow (use
//! `shuffle_buffer` there).

mod cache;
mod file;
mod group;
mod scan;
#[cfg(test)]
mod testing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use sluice_core::{Error, Result, Sample, SampleStream, Source, SourceRef};

use crate::arrow_conv::{read_fields, row_to_sample, rows_to_batch, rows_to_columns};
use crate::spec::SourceSpec;
pub use cache::CACHED_ROW_GROUPS;
use file::{open_file, PqFile};

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

#[derive(Debug)]
struct Inner {
    id: u64,
    files: Vec<PqFile>,
    /// Cumulative rows at the start of each file (plus the total at the end).
    file_starts: Vec<u64>,
    names: Vec<sluice_core::Name>,
    columns: Option<Vec<String>>,
    /// A read-ahead decode is running (at most one per source).
    ahead: std::sync::atomic::AtomicBool,
}

/// Rows of Parquet files as samples.
///
/// ```no_run
/// use sluice_core::Source;
/// let src = sluice_io::ParquetSource::open(&["data/*.parquet".into()], Some(&["text".into()])).unwrap();
/// println!("{} rows; first: {:?}", src.len().unwrap(), src.get(0).unwrap());
/// ```
#[derive(Debug, Clone)]
pub struct ParquetSource {
    inner: Arc<Inner>,
}

/// A decoded row group a reader holds while it reads neighbouring rows.
struct Held {
    fi: usize,
    rg: usize,
    /// Global index of its first row, and one past its last.
    start: u64,
    end: u64,
    batch: Arc<RecordBatch>,
}

/// Position of `x` in sorted `starts` (cumulative counts): the `i` with `starts[i] <= x < starts[i+1]`.
fn locate(starts: &[u64], x: u64) -> usize {
    starts.partition_point(|&s| s <= x) - 1
}

impl ParquetSource {
    /// Reads the footers of every file matched by `entries` (paths, directories, globs, URLs);
    /// `columns` projects (and orders) the columns read.
    pub fn open(entries: &[String], columns: Option<&[String]>) -> Result<Self> {
        let (paths, expected) = crate::manifest::expand_shards(
            entries,
            &["parquet", "pq"],
            crate::shard_writer::ShardFormat::Parquet,
        )?;
        let mut files = Vec::with_capacity(paths.len());
        let mut file_starts = vec![0u64];
        let mut first: Option<SchemaRef> = None;
        let opened = paths.iter().zip(open_all(&paths, columns)).zip(&expected);
        for ((path, opened), &want) in opened {
            let (file, schema) = opened?;
            let rows = file.rg_starts.last().copied().unwrap_or(0);
            crate::manifest::check_samples(path, want, rows)?;
            match &first {
                None => first = Some(schema),
                Some(s) if s.fields() != schema.fields() => {
                    return Err(Error::invalid(format!(
                        "{path}: its schema differs from {}'s; read files with one schema \
                         together (or pass columns=[...] both have)",
                        paths[0]
                    )))
                }
                Some(_) => {}
            }
            file_starts.push(
                file_starts.last().copied().unwrap_or(0)
                    + file.rg_starts.last().copied().unwrap_or(0),
            );
            files.push(file);
        }
        let schema = first.ok_or_else(|| Error::invalid("no Parquet files"))?;
        let names = read_fields(&schema)
            .map_err(|e| Error::invalid(format!("{}: {e}", paths[0])))?
            .iter()
            .map(|f| f.name().as_str().into())
            .collect();
        Ok(ParquetSource {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                files,
                file_starts,
                names,
                columns: columns.map(<[String]>::to_vec),
                ahead: Default::default(),
            }),
        })
    }

    /// The spec that reopens exactly these files, in this order, with this projection.
    pub fn source_spec(&self) -> SourceSpec {
        let paths: Vec<String> = self
            .inner
            .files
            .iter()
            .map(|f| f.blob.name().to_string())
            .collect();
        SourceSpec::ReadParquet {
            cache: crate::store::cache::spec_of(&paths),
            paths,
            columns: self.inner.columns.clone(),
        }
    }

    /// Number of row groups over all files.
    pub fn num_row_groups(&self) -> usize {
        self.inner.files.iter().map(|f| f.rg_starts.len() - 1).sum()
    }

    /// (file, row group, row in it) of a global row index.
    fn locate_row(&self, index: u64) -> Result<(usize, usize, usize)> {
        let rows = self.inner.file_starts.last().copied().unwrap_or(0);
        if index >= rows {
            return Err(Error::invalid(format!(
                "row {index} is out of range: the files have {rows} rows"
            )));
        }
        let fi = locate(&self.inner.file_starts, index);
        let file = &self.inner.files[fi];
        let local = index - self.inner.file_starts[fi];
        let rg = locate(&file.rg_starts, local);
        Ok((fi, rg, (local - file.rg_starts[rg]) as usize))
    }

    /// The row group holding `index` and the row in it, reusing `held` when it holds the row:
    /// a scan, a shard or a batch asks for runs of neighbours, which then need no search and
    /// no cache lookup.
    fn lookup<'a>(&self, index: u64, held: &'a mut Option<Held>) -> Result<(&'a Held, usize)> {
        let hit = held
            .as_ref()
            .is_some_and(|h| (h.start..h.end).contains(&index));
        if !hit {
            let (fi, rg, row) = self.locate_row(index)?;
            if row == 0 {
                self.read_ahead(fi, rg);
            }
            let starts = &self.inner.files[fi].rg_starts;
            let start = index - row as u64;
            *held = Some(Held {
                fi,
                rg,
                start,
                end: start + (starts[rg + 1] - starts[rg]),
                batch: self.row_group(fi, rg)?,
            });
        }
        let h = held
            .as_ref()
            .ok_or_else(|| Error::Internal("no row group held".into()))?;
        Ok((h, (index - h.start) as usize))
    }

    /// `indices` as runs of rows in one row group each (each row group looked up once per run).
    fn runs(&self, indices: &[u64]) -> Result<Vec<(Arc<RecordBatch>, Vec<usize>)>> {
        let mut held = None;
        let mut runs: Vec<(Arc<RecordBatch>, Vec<usize>)> = Vec::new();
        for &index in indices {
            let (h, row) = self.lookup(index, &mut held)?;
            match runs.last_mut() {
                Some((b, rows)) if Arc::ptr_eq(b, &h.batch) => rows.push(row),
                _ => runs.push((h.batch.clone(), vec![row])),
            }
        }
        Ok(runs)
    }

    fn parts(runs: &[(Arc<RecordBatch>, Vec<usize>)]) -> Vec<(&RecordBatch, &[usize])> {
        runs.iter().map(|(b, rows)| (&**b, &rows[..])).collect()
    }

    fn sample_at(&self, batch: &RecordBatch, fi: usize, rg: usize, row: usize) -> Result<Sample> {
        row_to_sample(batch, &self.inner.names, row).map_err(|e| {
            Error::data(format!(
                "{}: row group {rg}, row {row}: {e}",
                self.inner.files[fi].blob.name()
            ))
        })
    }
}

/// Files whose footers are read at once when a source opens: in a bucket each footer costs
/// a request's latency, so a thousand files read 16 at a time took 3 s at 50 ms.
const OPEN_CONCURRENCY: usize = 64;

/// [`open_file`] of every path, in order, up to [`OPEN_CONCURRENCY`] at once (threads that
/// only wait on requests; where the system starts fewer, the rest open on this one).
fn open_all(paths: &[String], columns: Option<&[String]>) -> Vec<Result<(PqFile, SchemaRef)>> {
    let threads = OPEN_CONCURRENCY.min(paths.len());
    if threads <= 1 || !paths.iter().any(|p| crate::store::is_url(p)) {
        return paths.iter().map(|p| open_file(p, columns)).collect();
    }
    let mut out: Vec<Option<Result<(PqFile, SchemaRef)>>> =
        (0..paths.len()).map(|_| None).collect();
    let stride = |t: usize| {
        (t..paths.len())
            .step_by(threads)
            .map(|i| (i, open_file(&paths[i], columns)))
            .collect::<Vec<_>>()
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                std::thread::Builder::new()
                    .name("sluice-pq-open".into())
                    .spawn_scoped(scope, move || stride(t))
                    .map_err(|_| t)
            })
            .collect();
        for w in workers {
            let opened = match w {
                Ok(handle) => handle.join().unwrap_or_default(),
                Err(t) => stride(t),
            };
            for (i, r) in opened {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter()
        .zip(paths)
        .map(|(r, p)| r.unwrap_or_else(|| Err(Error::Internal(format!("{p}: open failed")))))
        .collect()
}

impl Source for ParquetSource {
    fn name(&self) -> &str {
        "read_parquet"
    }
    fn spec(&self) -> serde_json::Value {
        self.source_spec().summary(self.len(), 0)
    }
    fn len(&self) -> Option<u64> {
        self.inner.file_starts.last().copied()
    }
    fn fields(&self) -> Option<Vec<String>> {
        Some(self.inner.names.iter().map(|n| n.to_string()).collect())
    }
    fn ship(&self) -> Option<serde_json::Value> {
        Some(self.source_spec().to_json())
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let (fi, rg, row) = self.locate_row(index)?;
        self.sample_at(&*self.row_group(fi, rg)?, fi, rg, row)
    }
    fn columnar(&self) -> bool {
        true
    }
    fn get_batch(&self, indices: &[u64]) -> Result<Sample> {
        let runs = self.runs(indices)?;
        rows_to_batch(&Self::parts(&runs), &self.inner.names)
    }
    fn get_columns(&self, indices: &[u64]) -> Result<Sample> {
        let runs = self.runs(indices)?;
        rows_to_columns(&Self::parts(&runs), &self.inner.names)
    }
    fn scan_columns(&self, threads: usize, rows: usize) -> Option<SampleStream> {
        Some(Box::new(self.scan(threads, rows)))
    }
    fn will_need_ahead(&self) -> u64 {
        let files = &self.inner.files;
        if !files.iter().any(|f| f.remote()) {
            return 0;
        }
        files
            .iter()
            .map(|f| {
                let rows = f.rg_starts.windows(2).map(|w| w[1] - w[0]).max();
                rows.unwrap_or(0) * f.rgs_ahead as u64
            })
            .max()
            .unwrap_or(0)
    }
    fn will_need(&self, indices: &[u64]) {
        if !self.inner.files.iter().any(|f| f.remote()) {
            return;
        }
        // A chunk of consecutive rows is a read going through the files in order: its
        // requests take the row groups after it too (`PqFile::fetch_ahead`).
        let in_order = indices.len() > 1 && indices.windows(2).all(|w| w[1] == w[0] + 1);
        // Each distinct row group once: a chunk is mostly runs of neighbours.
        let mut last: Option<(usize, usize, u64, u64)> = None;
        for &i in indices {
            if last.is_some_and(|(_, _, start, end)| (start..end).contains(&i)) {
                continue;
            }
            let Ok((fi, rg, row)) = self.locate_row(i) else {
                continue;
            };
            let file = &self.inner.files[fi];
            let start = i - row as u64;
            let end = start + (file.rg_starts[rg + 1] - file.rg_starts[rg]);
            file.fetch_ahead(rg..rg + 1, in_order);
            last = Some((fi, rg, start, end));
        }
    }
    fn get_many(&self, indices: &[u64]) -> Vec<Result<Sample>> {
        // Per row, the shared cache's lock and refcount would bounce between reader threads'
        // cores: rows of the row group held are read without them.
        let mut held = None;
        indices
            .iter()
            .map(|&index| {
                let (h, row) = self.lookup(index, &mut held)?;
                self.sample_at(&h.batch, h.fi, h.rg, row)
            })
            .collect()
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::testing::write_file;
    use super::*;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use sluice_core::Value;

    #[test]
    fn random_access_across_files_and_row_groups() {
        let dir = tempfile::tempdir().unwrap();
        write_file(&dir.path().join("a.parquet"), 0..25, 10);
        write_file(&dir.path().join("b.parquet"), 25..40, 7);
        let src = ParquetSource::open(&[dir.path().display().to_string()], None).unwrap();
        assert_eq!(src.len(), Some(40));
        assert_eq!(src.num_row_groups(), 3 + 3);
        for i in [39u64, 0, 17, 25, 31, 9, 10] {
            let s = src.get(i).unwrap();
            assert_eq!(s.get("id"), Some(&Value::Int(i as i64)));
            assert_eq!(
                s.get("text").unwrap().as_str(),
                Some(format!("row {i}").as_str())
            );
        }
    }

    #[test]
    fn get_many_matches_get_across_row_groups_and_files() {
        let dir = tempfile::tempdir().unwrap();
        write_file(&dir.path().join("a.parquet"), 0..25, 10);
        write_file(&dir.path().join("b.parquet"), 25..40, 7);
        let src = ParquetSource::open(&[dir.path().display().to_string()], None).unwrap();
        let indices = [3u64, 4, 9, 10, 11, 24, 25, 39, 0, 31, 31, 40];
        let many = src.get_many(&indices);
        assert_eq!(many.len(), indices.len());
        for (&i, got) in indices.iter().zip(&many) {
            match src.get(i) {
                Ok(want) => assert_eq!(got.as_ref().unwrap(), &want),
                Err(_) => assert!(got.is_err(), "index {i} past the end must fail"),
            }
        }
    }

    #[test]
    fn get_batch_equals_collated_rows_for_every_column_kind() {
        use arrow_array::builder::{Int32Builder, ListBuilder};
        use arrow_array::*;
        let n = 30;
        let mut lists = ListBuilder::new(Int32Builder::new());
        for i in 0..n {
            for j in 0..(i % 3) {
                lists.values().append_value(j);
            }
            lists.append(i % 7 != 0);
        }
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("i32", Arc::new(Int32Array::from_iter_values(0..n))),
            (
                "i64_nulls",
                Arc::new(Int64Array::from_iter(
                    (0..n as i64).map(|i| (i % 4 != 0).then_some(i)),
                )),
            ),
            (
                "u64",
                Arc::new(UInt64Array::from_iter_values((0..n as u64).map(|i| i * 3))),
            ),
            (
                "f32",
                Arc::new(Float32Array::from_iter_values(
                    (0..n).map(|i| i as f32 / 4.0),
                )),
            ),
            (
                "flag",
                Arc::new(BooleanArray::from_iter((0..n).map(|i| Some(i % 2 == 0)))),
            ),
            (
                "text",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("row {i}")),
                )),
            ),
            (
                "text_nulls",
                Arc::new(StringArray::from_iter(
                    (0..n).map(|i| (i % 5 != 1).then(|| "é".repeat(i as usize))),
                )),
            ),
            (
                "blob",
                Arc::new(BinaryArray::from_iter_values(
                    (0..n).map(|i| vec![i as u8; 3]),
                )),
            ),
            ("ids", Arc::new(lists.finish())),
        ];
        let batch = RecordBatch::try_from_iter(cols).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(8))
            .build();
        let path = dir.path().join("kinds.parquet");
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(&path).unwrap(),
            batch.schema(),
            Some(props),
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let src = ParquetSource::open(&[path.display().to_string()], None).unwrap();
        assert!(src.columnar());
        for indices in [
            (0..30).collect::<Vec<u64>>(),
            vec![29, 3, 4, 5, 17, 8, 9, 0],
            vec![7],
            vec![],
        ] {
            let rows: Vec<Sample> = src
                .get_many(&indices)
                .into_iter()
                .map(Result::unwrap)
                .collect();
            let want = sluice_core::collate(&rows).unwrap();
            assert_eq!(src.get_batch(&indices).unwrap(), want, "{indices:?}");
            // Arrow columns (slices within a row group, gathers across) hold the same values.
            let columns = src.get_columns(&indices).unwrap();
            let materialized = Sample::from_pairs(
                columns
                    .into_iter()
                    .map(|(k, v)| (k, v.materialized().unwrap())),
            );
            assert_eq!(materialized, want, "{indices:?}");
        }
        assert!(src.get_batch(&[2, 30]).is_err(), "past the end");
    }

    #[test]
    fn small_row_groups_are_fetched_ahead_by_bytes_past_thirty_two() {
        // 600 row groups of 10 rows (~100 bytes each): 128 ahead, the most, where at most 32
        // left a bucket's stalled request holding the scan; 32 MiB of them would be more.
        let dir = tempfile::tempdir().unwrap();
        write_file(&dir.path().join("small.parquet"), 0..6000, 10);
        let src = ParquetSource::open(&[dir.path().display().to_string()], None).unwrap();
        let file = &src.inner.files[0];
        assert_eq!(file.rg_starts.len() - 1, 600);
        assert_eq!(file.rgs_ahead, 128);
        assert_eq!(
            src.will_need_ahead(),
            0,
            "a local file is not fetched ahead"
        );
    }

    #[test]
    fn projection_keeps_only_named_columns() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.parquet");
        write_file(&p, 0..5, 100);
        let p = p.display().to_string();
        let src = ParquetSource::open(std::slice::from_ref(&p), Some(&["text".into()])).unwrap();
        assert_eq!(src.fields().unwrap(), ["text"]);
        assert_eq!(src.get(3).unwrap().names().collect::<Vec<_>>(), ["text"]);
        let e = ParquetSource::open(&[p], Some(&["nope".into()])).unwrap_err();
        assert!(e.to_string().contains("no column 'nope'"), "{e}");
    }

    #[test]
    fn columns_in_another_order_than_the_file_keep_their_names() {
        // The decoder returns projected columns in file order; every read path must pair
        // each value with the name asked for.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.parquet");
        write_file(&p, 0..30, 8);
        let p = p.display().to_string();
        let cols = ["text".to_string(), "id".to_string()];
        let src = ParquetSource::open(std::slice::from_ref(&p), Some(&cols)).unwrap();
        assert_eq!(src.fields().unwrap(), ["text", "id"]);
        let want = |i: i64| {
            Sample::from_pairs([
                ("text", Value::from(format!("row {i}"))),
                ("id", Value::Int(i)),
            ])
        };
        assert_eq!(src.get(9).unwrap(), want(9));
        let indices = [3u64, 17, 18, 2];
        for (&i, got) in indices.iter().zip(src.get_many(&indices)) {
            assert_eq!(got.unwrap(), want(i as i64));
        }
        let rows: Vec<Sample> = indices.iter().map(|&i| want(i as i64)).collect();
        let collated = sluice_core::collate(&rows).unwrap();
        assert_eq!(src.get_batch(&indices).unwrap(), collated);
        let columns = src.get_columns(&indices).unwrap();
        let materialized = Sample::from_pairs(
            columns
                .into_iter()
                .map(|(k, v)| (k, v.materialized().unwrap())),
        );
        assert_eq!(materialized, collated);
        let first = src.scan(1, 4).next().unwrap().unwrap();
        assert_eq!(
            first.get("id").unwrap().clone().materialized().unwrap(),
            super::testing::ids(0..4)
        );
        let e = ParquetSource::open(&[p], Some(&["id".into(), "text".into(), "id".into()]))
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains("'id' is named twice"), "{e}");
    }

    #[test]
    fn truncated_file_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.parquet");
        write_file(&p, 0..50, 100);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
        let e = ParquetSource::open(&[p.display().to_string()], None).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("a.parquet") && msg.contains("Parquet"),
            "{msg}"
        );
        assert!(matches!(e, Error::Data(_)));
    }
}
