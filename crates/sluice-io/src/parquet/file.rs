//! One Parquet file of a [`super::ParquetSource`]: its footer (read at open, with the
//! projection checked) and the decoding of one row group.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::{Buf, Bytes};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::file::reader::{ChunkReader, Length};
use sluice_core::{Error, Result};

use super::cache::lock;
use crate::arrow_conv::{read_batch, supported};
use crate::show::show;
use crate::store::Blob;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::group::{Group, GROUP_BYTES};

/// Parquet reads through [`Blob`]: `get_bytes` is one ranged read. An object the open asked
/// the store about came with its last [`TAIL`] bytes, which hold the footer of most files
/// (the request that learnt its size and version fetched them: [`Blob::open_with_tail`]), so
/// the open is one round trip where a HEAD, the footer's length and then the footer were
/// three.
struct BlobChunks<'a> {
    blob: &'a Blob,
    /// Where the prefetched tail starts, and its bytes.
    tail: Option<(u64, Bytes)>,
}

/// How much of a remote file's end is read at open: a footer of a few hundred row groups and
/// columns fits; a bigger one costs the second read it always did.
const TAIL: u64 = 64 << 10;

impl<'a> BlobChunks<'a> {
    fn new(blob: &'a Blob, tail: Option<(u64, Bytes)>) -> Self {
        BlobChunks { blob, tail }
    }
}

impl Length for BlobChunks<'_> {
    fn len(&self) -> u64 {
        self.blob.size()
    }
}

impl ChunkReader for BlobChunks<'_> {
    type T = bytes::buf::Reader<Bytes>;
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let len = (self.blob.size() - start.min(self.blob.size())) as usize;
        Ok(self.get_bytes(start, len)?.reader())
    }
    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        if let Some((at, tail)) = &self.tail {
            let end = start.saturating_add(length as u64);
            if start >= *at && end <= at + tail.len() as u64 {
                return Ok(tail.slice((start - at) as usize..(end - at) as usize));
            }
        }
        self.blob
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
pub(super) struct PqFile {
    pub(super) blob: Blob,
    pub(super) meta: ArrowReaderMetadata,
    /// Cumulative rows at the start of each row group (plus the total at the end).
    pub(super) rg_starts: Vec<u64>,
    mask: ProjectionMask,
    /// The decoder returns projected roots in file order; `order[i]` is the decoded column
    /// that is the `i`-th one asked for (`None` when the two orders agree).
    order: Option<Vec<usize>>,
    /// Leaf columns whose chunks are fetched (those under the projected roots).
    leaves: Vec<usize>,
    /// For objects in a store: column chunks of the row groups a scan reaches next, being
    /// fetched or fetched (at most twice `rgs_ahead`), so a bucket's latency overlaps
    /// decoding.
    ahead: Mutex<Ahead>,
    /// The file's last bytes, read at open, when they hold every row group's projected column
    /// chunks (a small file, often all of it): its row groups are read from them, with no
    /// request of their own.
    tail: Option<Tail>,
    /// Row groups a scan fetches ahead: [`FETCH_AHEAD_BYTES`] of them, 2 to 128. (At most
    /// 32 left the reference corpus's 0.5 MB row groups 16 MB ahead, ~70 ms of reading: a
    /// stalled request's hedge, answered ~120 ms after it was sent, held the scan.)
    pub(super) rgs_ahead: usize,
}

/// Fetches by row group, each with when it was last named (the oldest goes first).
///
/// A fetched row group stays until it is the oldest named, not until it is decoded: a scan
/// that names row groups further ahead than one pass over the data (a small file under
/// `repeat()`, the next epoch) names a row group again before the previous pass has
/// decoded it, and both passes then read the same bytes.
#[derive(Debug, Default)]
struct Ahead {
    fetches: HashMap<usize, (u64, Fetched)>,
    named: u64,
}

/// A row group's column chunks: on their way (with the row groups asked for in the same
/// request), or here.
#[derive(Debug)]
enum Fetched {
    Running(Arc<Group>),
    Done(Held),
}

/// Bytes of small files' tails kept to read their row groups from, over every file of the
/// process: at most [`TAILS_BUDGET`] (past it, a file's row groups are fetched as any file's).
static TAILS_HELD: AtomicU64 = AtomicU64::new(0);

/// What [`TAILS_HELD`] may reach: a thousand files' 64 KiB tails.
const TAILS_BUDGET: u64 = 64 << 20;

/// Bytes counted against a process-wide budget while they live.
#[derive(Debug)]
struct Counted {
    held: &'static AtomicU64,
    size: u64,
}

impl Counted {
    /// `size` more bytes in `held`, if that stays within `budget`.
    fn take(held: &'static AtomicU64, budget: u64, size: u64) -> Option<Counted> {
        if held.fetch_add(size, Ordering::Relaxed) + size > budget {
            held.fetch_sub(size, Ordering::Relaxed);
            return None;
        }
        Some(Counted { held, size })
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.held.fetch_sub(self.size, Ordering::Relaxed);
    }
}

/// A file's tail kept, where it starts, counted in [`TAILS_HELD`] while it lives.
#[derive(Debug)]
struct Tail {
    start: u64,
    data: Bytes,
    _counted: Counted,
}

impl Tail {
    /// Keeps `tail` (which runs to the file's end) if the file's first projected byte,
    /// `first`, lies in it and the budget has room.
    fn keep(tail: Option<(u64, Bytes)>, first: impl FnOnce() -> u64) -> Option<Tail> {
        let (start, data) = tail?;
        if first() < start {
            return None;
        }
        let counted = Counted::take(&TAILS_HELD, TAILS_BUDGET, data.len() as u64)?;
        Some(Tail {
            start,
            data,
            _counted: counted,
        })
    }

    fn slice(&self, r: &Range<u64>) -> Bytes {
        self.data
            .slice((r.start - self.start) as usize..(r.end - self.start) as usize)
    }
}

/// Bytes of decoded-from row groups kept for a later pass, over every file of the process:
/// at most [`FETCH_AHEAD_BYTES`] (past that, a row group's bytes go once it is decoded, so
/// thousands of files scanned once never pile up what each of them last fetched).
static HELD_BYTES: AtomicU64 = AtomicU64::new(0);

/// Fetched column chunks counted in [`HELD_BYTES`] while they live.
#[derive(Debug)]
struct Held {
    data: Vec<Bytes>,
    _counted: Counted,
}

impl Held {
    /// Keeps `data` if the budget has room.
    fn keep(data: &[Bytes]) -> Option<Held> {
        let size = data.iter().map(|b| b.len() as u64).sum();
        let counted = Counted::take(&HELD_BYTES, FETCH_AHEAD_BYTES, size)?;
        Some(Held {
            data: data.to_vec(),
            _counted: counted,
        })
    }
}

/// Starts fetching what a scan reads from row group `first` of `files[fi]` on: that and the
/// file's next row groups, `rgs_ahead` in all, and the next file's first ones when those run
/// past its end (nothing for local files).
pub(super) fn fetch_from(files: &[PqFile], fi: usize, first: usize) {
    let k = files[fi].rgs_ahead;
    files[fi].fetch_ahead(first..first + k, true);
    if first + k > files[fi].rg_starts.len() - 1 {
        if let Some(next_file) = files.get(fi + 1) {
            next_file.fetch_ahead(0..next_file.rgs_ahead, true);
        }
    }
}

/// Compressed bytes of row groups fetched ahead of a scan in an object store. A bucket
/// answers each request after 20–100 ms; a row group of the reference corpus (16 Ki rows,
/// 0.45 MB) decodes in ~4 ms, so a scan must ask ~25 row groups ahead to never wait. Bounded
/// by bytes, not row groups: 128 MB row groups decode slowly enough with two ahead. Memory:
/// at most twice this per file.
pub const FETCH_AHEAD_BYTES: u64 = 32 << 20;

pub(super) fn pq_err(path: &str, what: &str, e: impl std::fmt::Display) -> Error {
    // The decoder's messages may quote bytes of the file.
    Error::data(format!("{path}: {what}: {}", show(&e.to_string())))
}

/// Opens `path`'s footer with `columns` projected (all when `None`): the file and its
/// projected schema.
pub(super) fn open_file(path: &str, columns: Option<&[String]>) -> Result<(PqFile, SchemaRef)> {
    let (blob, tail) = Blob::open_with_tail(path, TAIL)?;
    let meta = ArrowReaderMetadata::load(
        &BlobChunks::new(&blob, tail.clone()),
        ArrowReaderOptions::new(),
    )
    .map_err(|e| match e {
        parquet::errors::ParquetError::External(inner) => match inner.downcast::<Error>() {
            Ok(e) => *e,
            Err(other) => pq_err(path, "not a readable Parquet file", other),
        },
        e => pq_err(path, "not a readable Parquet file", e),
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
    if let Some(cols) = columns {
        for (i, c) in cols.iter().enumerate() {
            if cols[..i].contains(c) {
                return Err(Error::invalid(format!(
                    "{path}: column '{}' is named twice in columns=[...]",
                    show(c)
                )));
            }
        }
    }
    let mut file_order = roots.clone();
    file_order.sort_unstable();
    let order: Vec<usize> = roots
        .iter()
        .map(|r| file_order.partition_point(|x| x < r))
        .collect();
    let order = (!order.iter().enumerate().all(|(i, &o)| i == o)).then_some(order);
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
    let leaves: Vec<usize> = (0..descr.num_columns())
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
    let largest = (0..meta.metadata().num_row_groups())
        .map(|rg| {
            let rgm = meta.metadata().row_group(rg);
            leaves
                .iter()
                .map(|&c| rgm.column(c).byte_range().1)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let rgs_ahead = (FETCH_AHEAD_BYTES / largest.max(1)).clamp(2, 128) as usize;
    // Not while this process downloads the file into the cache: its reads wait for the
    // download, which a process done with the file before it landed would leave unfinished.
    let first = || {
        let rgs = meta.metadata().row_groups().iter();
        rgs.flat_map(|rgm| leaves.iter().map(|&c| rgm.column(c).byte_range().0))
            .min()
            .unwrap_or(u64::MAX)
    };
    let tail = Tail::keep(tail.filter(|_| blob.reads_from_store()), first);
    Ok((
        PqFile {
            blob,
            tail,
            meta,
            rg_starts,
            mask,
            order,
            ahead: Mutex::new(Ahead::default()),
            rgs_ahead,
            leaves,
        },
        projected,
    ))
}

impl PqFile {
    /// Row group `rg`, decoded: its projected column chunks fetched (ranged reads,
    /// concurrent for object stores), then decoded with no further I/O.
    fn ranges(&self, rg: usize) -> Vec<Range<u64>> {
        let rgm = self.meta.metadata().row_group(rg);
        self.leaves
            .iter()
            .map(|&c| {
                let (start, len) = rgm.column(c).byte_range();
                start..start + len
            })
            .collect()
    }

    /// Whether the file is an object in a store.
    pub(super) fn remote(&self) -> bool {
        crate::store::is_url(self.blob.name())
    }

    /// Compressed bytes of row group `rg`'s projected column chunks.
    fn rg_bytes(&self, rg: usize) -> u64 {
        self.ranges(rg).iter().map(|r| r.end - r.start).sum()
    }

    /// Starts fetching the column chunks of row groups `rgs` (those of this file not held
    /// yet, at most twice `rgs_ahead` held: the oldest named goes); nothing for local files.
    /// Consecutive row groups not held yet go in one request of up to [`GROUP_BYTES`]; with
    /// `in_order` (a read going through the file) a request also takes the row groups after
    /// `rgs`, which such a read names next.
    pub(super) fn fetch_ahead(&self, rgs: Range<usize>, in_order: bool) {
        // Read from the tail, or no column to read (a projection of none).
        if self.tail.is_some() || self.leaves.is_empty() {
            return;
        }
        let n = self.rg_starts.len() - 1;
        let reach = if in_order { n } else { rgs.end.min(n) };
        let mut ahead = lock(&self.ahead);
        let mut rg = rgs.start;
        while rg < rgs.end.min(n) {
            ahead.named += 1;
            let named = ahead.named;
            if let Some((seq, _)) = ahead.fetches.get_mut(&rg) {
                *seq = named;
                rg += 1;
                continue;
            }
            let (mut end, mut bytes) = (rg + 1, self.rg_bytes(rg));
            while end < reach && end - rg < self.rgs_ahead && !ahead.fetches.contains_key(&end) {
                let more = self.rg_bytes(end);
                if bytes + more > GROUP_BYTES {
                    break;
                }
                (bytes, end) = (bytes + more, end + 1);
            }
            while ahead.fetches.len() + (end - rg) > 2 * self.rgs_ahead {
                let oldest = ahead
                    .fetches
                    .iter()
                    .min_by_key(|(_, (seq, _))| *seq)
                    .map(|(rg, _)| *rg);
                match oldest {
                    // A request goes once none of its row groups is held (`Group`'s drop).
                    Some(o) => ahead.fetches.remove(&o),
                    None => break,
                };
            }
            let ranges = (rg..end).flat_map(|r| self.ranges(r)).collect();
            let Some(fetch) = self.blob.fetch_ahead(ranges) else {
                return;
            };
            let group = Arc::new(Group::new(rg, self.leaves.len(), fetch));
            for r in rg..end {
                ahead
                    .fetches
                    .insert(r, (named, Fetched::Running(group.clone())));
            }
            rg = end;
        }
    }

    /// The column chunks of row group `rg`: fetched ahead, or read now.
    fn chunks(&self, rg: usize) -> Result<Vec<Bytes>> {
        if let Some(tail) = &self.tail {
            return Ok(self.ranges(rg).iter().map(|r| tail.slice(r)).collect());
        }
        let taken = {
            let mut ahead = lock(&self.ahead);
            match ahead.fetches.get(&rg) {
                Some((_, Fetched::Done(held))) => return Ok(held.data.clone()),
                Some((_, Fetched::Running(_))) => ahead.fetches.remove(&rg),
                None => None,
            }
        };
        let Some((seq, Fetched::Running(group))) = taken else {
            return self.blob.read_ranges(&self.ranges(rg));
        };
        let Some(data) = group.take(rg) else {
            return self.blob.read_ranges(&self.ranges(rg));
        };
        // Kept, within the budget, for a later pass that names it (a scan naming further
        // ahead than its data may have already), until this file's oldest named goes;
        // unless named again meanwhile, which started a fetch of its own.
        if let Some(held) = Held::keep(&data) {
            lock(&self.ahead)
                .fetches
                .entry(rg)
                .or_insert((seq, Fetched::Done(held)));
        }
        Ok(data)
    }

    pub(super) fn decode(&self, rg: usize) -> Result<RecordBatch> {
        let file = self;
        let path = file.blob.name();
        let rgm = file.meta.metadata().row_group(rg);
        let ranges = self.ranges(rg);
        let data = self.chunks(rg)?;
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
        let batch = match &self.order {
            Some(order) => batch
                .project(order)
                .map_err(|e| Error::Internal(e.to_string()))?,
            None => batch,
        };
        read_batch(&batch).map_err(|e| pq_err(path, &format!("row group {rg}"), e))
    }
}
