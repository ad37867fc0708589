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
use sluice_core::{Column, Error, Result, Sample, SampleStream, Source, SourceRef, Value};

use crate::arrow_conv::{
    normalize, row_to_sample, rows_to_batch, rows_to_columns, supported, ArrowColumn,
};
use crate::show::show;
use crate::store::{expand, Blob};

/// Decoded row groups kept (over all Parquet sources and threads). Unit tests run side by
/// side over this one cache, so there it holds more: no test evicts another's row groups.
pub const CACHED_ROW_GROUPS: usize = if cfg!(test) { 64 } else { 4 };

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

type CacheKey = (u64, usize, usize);
/// A cached row group: being decoded, decoded, or neither (not yet, or its decode failed:
/// the next reader tries itself and meets its own error). Readers that find it being
/// decoded wait rather than decode it again.
#[derive(Default)]
struct SlotData {
    state: Mutex<SlotState>,
    done: std::sync::Condvar,
}

#[derive(Default)]
enum SlotState {
    #[default]
    Empty,
    Pending,
    Ready(Arc<RecordBatch>),
}

type Slot = Arc<SlotData>;
/// Recently used row groups, shared by all reader threads (most recent last). Shared rather
/// than per thread because the executor hands consecutive chunks of indices to different
/// threads (and may resize its pools): a per-thread cache would decode each row group once per
/// thread that touches it.
static CACHE: Mutex<Vec<(CacheKey, Slot)>> = Mutex::new(Vec::new());

/// Row groups decoded, for tests counting decodes.
#[cfg(test)]
static DECODED_KEYS: Mutex<Vec<CacheKey>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

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

fn pq_err(path: &str, what: &str, e: impl std::fmt::Display) -> Error {
    // The decoder's messages may quote bytes of the file.
    Error::data(format!("{path}: {what}: {}", show(&e.to_string())))
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
                        show(
                            &schema
                                .fields()
                                .iter()
                                .map(|f| f.name().as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
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
                show(f.name()),
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
                ahead: Default::default(),
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

    /// Every row group in order, as batches of at most `rows` rows of its decoded columns
    /// (zero-copy slices), `threads` threads decoding the next row groups meanwhile. A scan
    /// reads each row group once, so it bypasses the shared cache (and evicts nothing).
    ///
    /// ```no_run
    /// let src = sluice_io::ParquetSource::open(&["corpus/*.parquet".into()], None)?;
    /// for batch in src.scan(2, 65536) {
    ///     let batch = batch?; // one `Value::Column` per column
    /// }
    /// # Ok::<(), sluice_core::Error>(())
    /// ```
    pub fn scan(&self, threads: usize, rows: usize) -> impl Iterator<Item = Result<Sample>> + Send {
        let groups: Vec<(usize, usize)> = self
            .inner
            .files
            .iter()
            .enumerate()
            .flat_map(|(fi, f)| {
                f.rg_starts
                    .windows(2)
                    .enumerate()
                    .filter(|(_, w)| w[1] > w[0])
                    .map(move |(rg, _)| (fi, rg))
            })
            .collect();
        let threads = threads.clamp(1, groups.len().max(1));
        let (jobs, queue) = crossbeam_channel::unbounded::<ScanJob>();
        for _ in 0..threads {
            let (me, queue) = (self.clone(), queue.clone());
            let _ = std::thread::Builder::new()
                .name("sluice-parquet-scan".into())
                .spawn(move || {
                    // Ends when the scan is dropped (its job sender with it).
                    for (fi, rg, reply) in queue {
                        let _ = reply.send(me.decode(fi, rg));
                    }
                });
        }
        let mut scan = Scan {
            names: self.inner.names.clone(),
            groups: groups.into_iter(),
            jobs,
            pending: std::collections::VecDeque::new(),
            current: None,
            rows: rows.max(1),
        };
        // Row groups in flight: one per thread plus one ready, so memory stays bounded.
        for _ in 0..threads + 1 {
            scan.dispatch();
        }
        scan
    }

    /// The cache slot of a row group (made if missing; most recently used last).
    fn slot(&self, fi: usize, rg: usize) -> Slot {
        let key = (self.inner.id, fi, rg);
        let mut cache = lock(&CACHE);
        let entry = match cache.iter().position(|(k, _)| *k == key) {
            Some(i) => cache.remove(i),
            None => {
                if cache.len() >= CACHED_ROW_GROUPS {
                    // The least recently used that is not being decoded: evicting one being
                    // decoded (a read-ahead) would throw its work away.
                    let busy = |s: &Slot| {
                        s.state
                            .try_lock()
                            .map_or(true, |st| matches!(*st, SlotState::Pending))
                    };
                    let victim = cache.iter().position(|(_, s)| !busy(s)).unwrap_or(0);
                    cache.remove(victim);
                }
                (key, Slot::default())
            }
        };
        let slot = entry.1.clone();
        cache.push(entry);
        slot
    }

    /// The decoded row group, from the cache when it is there.
    fn row_group(&self, fi: usize, rg: usize) -> Result<Arc<RecordBatch>> {
        let slot = self.slot(fi, rg);
        {
            let mut state = lock(&slot.state);
            loop {
                match &*state {
                    SlotState::Ready(batch) => return Ok(batch.clone()),
                    SlotState::Pending => {
                        state = slot.done.wait(state).unwrap_or_else(|p| p.into_inner())
                    }
                    SlotState::Empty => break,
                }
            }
            *state = SlotState::Pending;
        }
        self.fill(&slot, fi, rg)
    }

    /// Decodes a row group into its slot (marked pending by the caller) and wakes waiters.
    fn fill(&self, slot: &SlotData, fi: usize, rg: usize) -> Result<Arc<RecordBatch>> {
        let res = self.decode(fi, rg).map(Arc::new);
        #[cfg(test)]
        lock(&DECODED_KEYS).push((self.inner.id, fi, rg));
        *lock(&slot.state) = match &res {
            Ok(batch) => SlotState::Ready(batch.clone()),
            Err(_) => SlotState::Empty,
        };
        slot.done.notify_all();
        res
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

    /// A reader starting a row group at its first row is scanning: the next row group is
    /// decoded meanwhile on a helper thread, so a scan's decoding overlaps its conversion
    /// (one row group ahead, so memory stays bounded by the cache). Readers that get there
    /// first wait for it instead of decoding it again; its errors are left for them to meet.
    fn read_ahead(&self, fi: usize, rg: usize) {
        let next = if rg + 2 < self.inner.files[fi].rg_starts.len() {
            (fi, rg + 1)
        } else if fi + 1 < self.inner.files.len() {
            (fi + 1, 0)
        } else {
            return;
        };
        if self.inner.ahead.swap(true, Ordering::AcqRel) {
            return;
        }
        // Marked pending here, before the helper starts, so a reader that gets there first
        // waits for it instead of decoding the same row group.
        let slot = self.slot(next.0, next.1);
        {
            let mut state = lock(&slot.state);
            if !matches!(*state, SlotState::Empty) {
                self.inner.ahead.store(false, Ordering::Release);
                return;
            }
            *state = SlotState::Pending;
        }
        let (me, waiting) = (self.clone(), slot.clone());
        let spawned = std::thread::Builder::new()
            .name("sluice-parquet-ahead".into())
            .spawn(move || {
                let _ = me.fill(&waiting, next.0, next.1);
                me.inner.ahead.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            *lock(&slot.state) = SlotState::Empty;
            slot.done.notify_all();
            self.inner.ahead.store(false, Ordering::Release);
        }
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

type ScanJob = (usize, usize, crossbeam_channel::Sender<Result<RecordBatch>>);

/// [`ParquetSource::scan`]'s iterator: replies come back in row-group order because each
/// job carries its own reply channel, queued in order.
struct Scan {
    names: Vec<Arc<str>>,
    groups: std::vec::IntoIter<(usize, usize)>,
    jobs: crossbeam_channel::Sender<ScanJob>,
    pending: std::collections::VecDeque<crossbeam_channel::Receiver<Result<RecordBatch>>>,
    /// The row group being handed out and the next row of it.
    current: Option<(RecordBatch, usize)>,
    rows: usize,
}

impl Scan {
    fn dispatch(&mut self) {
        if let Some((fi, rg)) = self.groups.next() {
            let (reply, rx) = crossbeam_channel::bounded(1);
            if self.jobs.send((fi, rg, reply)).is_ok() {
                self.pending.push_back(rx);
            }
        }
    }
}

impl Iterator for Scan {
    type Item = Result<Sample>;
    fn next(&mut self) -> Option<Result<Sample>> {
        loop {
            if let Some((batch, at)) = &mut self.current {
                if *at < batch.num_rows() {
                    let n = self.rows.min(batch.num_rows() - *at);
                    let mut out = Sample::with_capacity(self.names.len());
                    for (name, a) in self.names.iter().zip(batch.columns()) {
                        let column = ArrowColumn(a.slice(*at, n));
                        out.set(name.clone(), Value::Column(Column(Arc::new(column))));
                    }
                    *at += n;
                    return Some(Ok(out));
                }
                self.current = None;
            }
            let rx = self.pending.pop_front()?;
            let batch = rx
                .recv()
                .unwrap_or_else(|_| Err(Error::Internal("a Parquet scan thread ended".into())));
            self.dispatch();
            match batch {
                Ok(b) => self.current = Some((b, 0)),
                Err(e) => {
                    // Nothing after an error.
                    self.pending.clear();
                    return Some(Err(e));
                }
            }
        }
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
    fn threads_reading_one_row_group_decode_it_once() {
        let dir = tempfile::tempdir().unwrap();
        write_file(&dir.path().join("a.parquet"), 0..2000, 2000);
        let src = ParquetSource::open(&[dir.path().display().to_string()], None).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let src = &src;
                s.spawn(move || {
                    let ids: Vec<u64> = (t * 500..(t + 1) * 500).collect();
                    assert!(src.get_many(&ids).iter().all(Result::is_ok));
                });
            }
        });
        assert_eq!(decoded(&src), [(src.inner.id, 0, 0)]);
    }

    /// The row groups of `src` decoded so far, in order (other tests decode concurrently).
    fn decoded(src: &ParquetSource) -> Vec<CacheKey> {
        lock(&DECODED_KEYS)
            .iter()
            .filter(|k| k.0 == src.inner.id)
            .copied()
            .collect()
    }

    #[test]
    fn the_cache_stays_within_its_size_and_evicts_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let groups = CACHED_ROW_GROUPS as i64 + 6;
        write_file(&dir.path().join("a.parquet"), 0..groups * 2, 2);
        let src = ParquetSource::open(&[dir.path().display().to_string()], None).unwrap();
        // Backwards, so no read-ahead runs: each row group is decoded by the reader.
        for i in (0..groups as u64 * 2).rev() {
            assert_eq!(src.get(i).unwrap().get("id"), Some(&Value::Int(i as i64)));
        }
        let mine =
            |c: &Vec<(CacheKey, Slot)>| c.iter().filter(|(k, _)| k.0 == src.inner.id).count();
        assert!(lock(&CACHE).len() <= CACHED_ROW_GROUPS);
        assert!(mine(&lock(&CACHE)) <= CACHED_ROW_GROUPS);
        // The last row group read (row group 0) is cached; reading it again decodes nothing.
        let n = decoded(&src).len();
        assert_eq!(n, groups as usize);
        src.get(1).unwrap();
        assert_eq!(decoded(&src).len(), n);
    }

    /// Two files, ids 0..4000, row groups of 500 rows (8 in all).
    fn eight_row_groups(dir: &tempfile::TempDir) -> ParquetSource {
        write_file(&dir.path().join("a.parquet"), 0..3000, 500);
        write_file(&dir.path().join("b.parquet"), 3000..4000, 500);
        ParquetSource::open(&[dir.path().display().to_string()], None).unwrap()
    }

    /// The ids `range` as the batch column a source's columns materialise to.
    fn ids(range: Range<i64>) -> Value {
        let ids: Vec<i64> = range.collect();
        Value::Tensor(
            sluice_core::Tensor::new(vec![ids.len()], sluice_core::TensorData::I64(ids)).unwrap(),
        )
    }

    #[test]
    fn scan_hands_out_every_row_group_in_order_in_slices() {
        let dir = tempfile::tempdir().unwrap();
        let src = eight_row_groups(&dir);
        for (threads, rows, sizes) in [(3, 700, vec![500; 8]), (1, 200, [200, 200, 100].repeat(8))]
        {
            let mut next = 0i64;
            let mut got = Vec::new();
            for batch in src.scan(threads, rows) {
                let column = batch.unwrap().get("id").unwrap().clone();
                let Value::Column(c) = &column else {
                    panic!("not the source's column: {column:?}")
                };
                let n = c.0.len() as i64;
                assert_eq!(column.materialized().unwrap(), ids(next..next + n));
                next += n;
                got.push(n as usize);
            }
            assert_eq!(got, sizes);
        }
        // Dropped after one batch: the scan ends (its threads with it) without reading on.
        let mut scan = src.scan(2, 100);
        assert!(scan.next().unwrap().is_ok());
        drop(scan);
    }

    #[test]
    fn a_scan_reads_ahead_and_decodes_each_row_group_once() {
        let dir = tempfile::tempdir().unwrap();
        let src = eight_row_groups(&dir);
        for chunk in (0..4000u64).collect::<Vec<_>>().chunks(700) {
            let batch = src.get_columns(chunk).unwrap();
            let got = batch.get("id").unwrap().clone().materialized().unwrap();
            let (a, b) = (chunk[0] as i64, chunk[chunk.len() - 1] as i64 + 1);
            assert_eq!(got, ids(a..b));
        }
        // Let a last read-ahead finish, then count: 8 row groups, each decoded once.
        while src.inner.ahead.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let mut mine = decoded(&src);
        let n = mine.len();
        mine.sort();
        mine.dedup();
        assert_eq!((n, mine.len()), (8, 8));
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
