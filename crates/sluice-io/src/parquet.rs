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

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::{Buf, Bytes};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::file::reader::{ChunkReader, Length};
use sluice_core::{Error, Result, Sample, Source, SourceRef};

use crate::arrow_conv::{normalize, row_to_sample, supported};
use crate::store::{expand, Blob};

/// Decoded row groups kept (over all Parquet sources and threads).
pub const CACHED_ROW_GROUPS: usize = 4;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

type CacheKey = (u64, usize, usize);
/// Recently decoded row groups, shared by all reader threads (most recent last). Shared rather
/// than per thread because the executor hands consecutive chunks of indices to different
/// threads (and may resize its pools): a per-thread cache would decode each row group once per
/// thread that touches it.
static CACHE: Mutex<Vec<(CacheKey, Arc<RecordBatch>)>> = Mutex::new(Vec::new());

/// Parquet reads through [`Blob`]: `get_bytes` is one ranged read (enough for the footer).
struct BlobChunks<'a>(&'a Blob);

impl Length for BlobChunks<'_> {
    fn len(&self) -> u64 {
        self.0.size()
    }
}

impl ChunkReader for BlobChunks<'_> {
    type T = bytes::buf::Reader<Bytes>;
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let len = (self.0.size() - start.min(self.0.size())) as usize;
        Ok(self.get_bytes(start, len)?.reader())
    }
    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.0
            .read_at(start, length)
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}

/// The column chunks of one row group, fetched up front (so decoding does no I/O).
struct Prefetched {
    len: u64,
    chunks: Vec<(u64, Bytes)>,
}

impl Prefetched {
    fn slice(&self, start: u64, len: Option<usize>) -> parquet::errors::Result<Bytes> {
        for (off, data) in &self.chunks {
            let end = off + data.len() as u64;
            if (*off..end).contains(&start) {
                let from = (start - off) as usize;
                let to = match len {
                    Some(n) if from + n <= data.len() => from + n,
                    Some(_) => break,
                    None => data.len(),
                };
                return Ok(data.slice(from..to));
            }
        }
        Err(parquet::errors::ParquetError::General(format!(
            "byte range at {start} lies outside the column chunk metadata (corrupt file?)"
        )))
    }
}

impl Length for Prefetched {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for Prefetched {
    type T = bytes::buf::Reader<Bytes>;
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(self.slice(start, None)?.reader())
    }
    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.slice(start, Some(length))
    }
}

#[derive(Debug)]
struct PqFile {
    blob: Blob,
    meta: ArrowReaderMetadata,
    /// Cumulative rows at the start of each row group (plus the total at the end).
    rg_starts: Vec<u64>,
    mask: ProjectionMask,
    /// Leaf columns whose chunks are fetched (those under the projected roots).
    leaves: Vec<usize>,
}

#[derive(Debug)]
struct Inner {
    id: u64,
    files: Vec<PqFile>,
    /// Cumulative rows at the start of each file (plus the total at the end).
    file_starts: Vec<u64>,
    names: Vec<Arc<str>>,
    columns: Option<Vec<String>>,
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

fn pq_err(path: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::data(format!("{path}: {what}: {e}"))
}

fn open_file(path: &str, columns: Option<&[String]>) -> Result<(PqFile, SchemaRef)> {
    let blob = Blob::open(path)?;
    let meta =
        ArrowReaderMetadata::load(&BlobChunks(&blob), ArrowReaderOptions::new()).map_err(|e| {
            match e {
                parquet::errors::ParquetError::External(inner) => match inner.downcast::<Error>() {
                    Ok(e) => *e,
                    Err(other) => pq_err(path, "not a readable Parquet file", other),
                },
                e => pq_err(path, "not a readable Parquet file", e),
            }
        })?;
    let schema = meta.schema().clone();
    let roots: Vec<usize> = match columns {
        None => (0..schema.fields().len()).collect(),
        Some(cols) => cols
            .iter()
            .map(|c| {
                schema.index_of(c).map_err(|_| {
                    Error::invalid(format!(
                        "{path}: no column '{c}' (columns: {})",
                        schema
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })
            })
            .collect::<Result<_>>()?,
    };
    for &r in &roots {
        let f = schema.field(r);
        if !supported(f.data_type()) {
            return Err(Error::type_error(format!(
                "{path}: column '{}' has type {}, which sluice cannot read; pass columns=[...] \
                 without it",
                f.name(),
                f.data_type()
            )));
        }
    }
    let descr = meta.metadata().file_metadata().schema_descr_ptr();
    let leaves = (0..descr.num_columns())
        .filter(|&leaf| roots.contains(&descr.get_column_root_idx(leaf)))
        .collect();
    let mask = ProjectionMask::roots(&descr, roots.iter().copied());
    let mut rg_starts = vec![0u64];
    for rg in meta.metadata().row_groups() {
        rg_starts.push(rg_starts.last().copied().unwrap_or(0) + rg.num_rows().max(0) as u64);
    }
    let projected = Arc::new(
        schema
            .project(&roots)
            .map_err(|e| Error::Internal(e.to_string()))?,
    );
    Ok((
        PqFile {
            blob,
            meta,
            rg_starts,
            mask,
            leaves,
        },
        projected,
    ))
}

/// Position of `x` in sorted `starts` (cumulative counts): the `i` with `starts[i] <= x < starts[i+1]`.
fn locate(starts: &[u64], x: u64) -> usize {
    starts.partition_point(|&s| s <= x) - 1
}

impl ParquetSource {
    /// Reads the footers of every file matched by `entries` (paths, directories, globs, URLs);
    /// `columns` projects (and orders) the columns read.
    pub fn open(entries: &[String], columns: Option<&[String]>) -> Result<Self> {
        let paths = expand(entries, Some(&["parquet", "pq"]))?;
        let mut files = Vec::with_capacity(paths.len());
        let mut file_starts = vec![0u64];
        let mut first: Option<SchemaRef> = None;
        for path in &paths {
            let (file, schema) = open_file(path, columns)?;
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
        Ok(ParquetSource {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                files,
                file_starts,
                names: schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str().into())
                    .collect(),
                columns: columns.map(<[String]>::to_vec),
            }),
        })
    }

    /// Number of row groups over all files.
    pub fn num_row_groups(&self) -> usize {
        self.inner.files.iter().map(|f| f.rg_starts.len() - 1).sum()
    }

    fn decode(&self, fi: usize, rg: usize) -> Result<RecordBatch> {
        let file = &self.inner.files[fi];
        let path = file.blob.name();
        let rgm = file.meta.metadata().row_group(rg);
        let ranges: Vec<Range<u64>> = file
            .leaves
            .iter()
            .map(|&c| {
                let (start, len) = rgm.column(c).byte_range();
                start..start + len
            })
            .collect();
        let data = file.blob.read_ranges(&ranges)?;
        let reader = Prefetched {
            len: file.blob.size(),
            chunks: ranges.iter().map(|r| r.start).zip(data).collect(),
        };
        let rows = rgm.num_rows().max(1) as usize;
        let batches = ParquetRecordBatchReaderBuilder::new_with_metadata(reader, file.meta.clone())
            .with_row_groups(vec![rg])
            .with_projection(file.mask.clone())
            .with_batch_size(rows)
            .build()
            .and_then(|r| {
                r.collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(Into::into)
            })
            .map_err(|e| pq_err(path, &format!("row group {rg}"), e))?;
        let schema = batches
            .first()
            .map(|b| b.schema())
            .ok_or_else(|| pq_err(path, &format!("row group {rg}"), "no rows decoded"))?;
        let batch = arrow_select::concat::concat_batches(&schema, &batches)
            .map_err(|e| pq_err(path, &format!("row group {rg}"), e))?;
        let columns = batch
            .columns()
            .iter()
            .map(|c| normalize(c.clone()))
            .collect::<Result<Vec<_>>>()?;
        let fields: Vec<_> = batch
            .schema()
            .fields()
            .iter()
            .zip(&columns)
            .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
            .collect();
        RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns)
            .map_err(|e| Error::Internal(e.to_string()))
    }

    /// The decoded row group, from the cache when it is there.
    fn row_group(&self, fi: usize, rg: usize) -> Result<Arc<RecordBatch>> {
        let key = (self.inner.id, fi, rg);
        let lock = || CACHE.lock().unwrap_or_else(|p| p.into_inner());
        {
            let mut cache = lock();
            if let Some(i) = cache.iter().position(|(k, _)| *k == key) {
                let hit = cache.remove(i);
                let batch = hit.1.clone();
                cache.push(hit);
                return Ok(batch);
            }
        }
        // Decoded outside the lock: other threads keep reading cached row groups meanwhile.
        let batch = Arc::new(self.decode(fi, rg)?);
        let mut cache = lock();
        if !cache.iter().any(|(k, _)| *k == key) {
            if cache.len() >= CACHED_ROW_GROUPS {
                cache.remove(0);
            }
            cache.push((key, batch.clone()));
        }
        Ok(batch)
    }
}

impl Source for ParquetSource {
    fn name(&self) -> &str {
        "read_parquet"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({
            "source": "read_parquet",
            "files": self.inner.files.len(),
            "rows": self.inner.file_starts.last(),
            "columns": self.inner.columns,
        })
    }
    fn len(&self) -> Option<u64> {
        self.inner.file_starts.last().copied()
    }
    fn fields(&self) -> Option<Vec<String>> {
        Some(self.inner.names.iter().map(|n| n.to_string()).collect())
    }
    fn ship(&self) -> Option<serde_json::Value> {
        // The expanded list, so a worker reopens exactly these files in this order.
        let paths: Vec<&str> = self.inner.files.iter().map(|f| f.blob.name()).collect();
        Some(
            serde_json::json!({"source": "read_parquet", "paths": paths, "columns": self.inner.columns}),
        )
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let fi = locate(&self.inner.file_starts, index);
        let file = &self.inner.files[fi];
        let local = index - self.inner.file_starts[fi];
        let rg = locate(&file.rg_starts, local);
        let row = (local - file.rg_starts[rg]) as usize;
        let batch = self.row_group(fi, rg)?;
        row_to_sample(&batch, &self.inner.names, row).map_err(|e| {
            Error::data(format!(
                "{}: row group {rg}, row {row}: {e}",
                file.blob.name()
            ))
        })
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrow_conv::{infer_schema, samples_to_batch};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use sluice_core::Value;

    fn write_file(path: &std::path::Path, ids: Range<i64>, rg_rows: usize) {
        let rows: Vec<Sample> = ids
            .map(|i| {
                Sample::from_pairs([
                    ("id", Value::Int(i)),
                    ("text", Value::from(format!("row {i}"))),
                ])
            })
            .collect();
        let schema = infer_schema(&rows).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(rg_rows))
            .build();
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(path).unwrap(),
            schema.clone(),
            Some(props),
        )
        .unwrap();
        w.write(&samples_to_batch(&rows, &schema).unwrap()).unwrap();
        w.close().unwrap();
    }

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
