//! `read_webdataset(index=...)`: WebDataset tar shards with random access. Each shard's
//! member index ([`super::index`]) says where every sample lies, so `get(i)` is one ranged
//! read of sample `i`'s members: `shuffle()` is a true global permutation, `shard()` exact
//! and resuming O(1), as for any random-access source. Objects in a store are read through
//! the object cache when it is on (the first read of a shard starts its download in
//! parallel parts), else one ranged GET per sample, those of a chunk all at once.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use sluice_core::{Error, Result, Sample, Source, SourceRef};

use super::index::{load_or_build, Ranged, ShardIndex};
use super::members::{broken, Grouper};
use super::WdsOptions;
use crate::shard_writer::ShardFormat;
use crate::spec::{SourceSpec, WdsIndex};
use crate::store::Blob;

/// A sample's bytes are read in one piece up to this size; a larger one (a member near
/// `max_member_size`, or one over it that is skipped) through a positional reader, so memory
/// never holds what the limits refuse.
const READ_WHOLE: u64 = 64 << 20;

#[derive(Debug)]
struct Shard {
    name: String,
    /// An object in a store, opened once (its HEAD, its cached copy). A local shard is
    /// opened per read instead: a dataset of many thousand shards would otherwise hold as
    /// many descriptors.
    remote: Option<Arc<Blob>>,
    index: ShardIndex,
}

impl Shard {
    fn blob(&self) -> Result<Arc<Blob>> {
        if let Some(b) = &self.remote {
            return Ok(b.clone());
        }
        let blob = Blob::open(&self.name)?;
        if blob.size() != self.index.size {
            return Err(Error::data(format!(
                "{}: the shard changed since it was indexed ({} bytes, the index says {}); \
                 open it again",
                self.name,
                blob.size(),
                self.index.size
            )));
        }
        Ok(Arc::new(blob))
    }
}

/// WebDataset tar shards with a member index: random access to every sample.
///
/// ```
/// use sluice_core::Source;
/// use sluice_io::WdsIndex;
/// let dir = std::env::temp_dir().join("sluice-doc-wds-indexed");
/// std::fs::create_dir_all(&dir).unwrap();
/// let shard = dir.join("shard-0.tar");
/// let mut b = tar::Builder::new(std::fs::File::create(&shard).unwrap());
/// for (name, data) in [("a.txt", &b"hi"[..]), ("a.cls", b"1"), ("b.txt", b"yo")] {
///     let mut h = tar::Header::new_gnu();
///     h.set_size(data.len() as u64);
///     h.set_cksum();
///     b.append_data(&mut h, name, data).unwrap();
/// }
/// b.finish().unwrap();
/// let src = sluice_io::webdataset::IndexedWebDataset::open(
///     &[shard.display().to_string()], WdsIndex::Flag(true), Default::default())?;
/// assert_eq!(src.len(), Some(2));
/// assert_eq!(src.get(1)?.get("txt").unwrap().as_bytes(), Some(&b"yo"[..]));
/// # Ok::<(), sluice_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct IndexedWebDataset {
    paths: Arc<Vec<String>>,
    shards: Arc<Vec<Shard>>,
    /// The first sample of each shard, then the total.
    starts: Arc<Vec<u64>>,
    index: WdsIndex,
    opts: WdsOptions,
    skipped: Arc<AtomicU64>,
}

impl IndexedWebDataset {
    /// Opens the shards matched by `entries` with their indexes (`index`: beside the shards,
    /// or in a directory), building those that are missing on up to 16 threads.
    pub fn open(entries: &[String], index: WdsIndex, opts: WdsOptions) -> Result<Self> {
        if opts.max_member_size == 0 {
            return Err(Error::invalid("max_member_size must be > 0"));
        }
        let dir = match &index {
            WdsIndex::Flag(false) => {
                return Err(Error::invalid(
                    "an indexed read needs index=True or a directory",
                ))
            }
            WdsIndex::Flag(true) => None,
            WdsIndex::Dir(d) => Some(d.as_str()),
        };
        let (paths, expected) =
            crate::manifest::expand_shards(entries, &["tar"], ShardFormat::Webdataset)?;
        let shards = build_all(&paths, dir, &opts)?;
        for (s, &want) in shards.iter().zip(&expected) {
            crate::manifest::check_samples(&s.name, want, s.index.samples())?;
        }
        let mut starts = Vec::with_capacity(shards.len() + 1);
        let mut total = 0u64;
        for s in &shards {
            starts.push(total);
            total += s.index.samples();
        }
        starts.push(total);
        Ok(IndexedWebDataset {
            paths: Arc::new(paths),
            shards: Arc::new(shards),
            starts: Arc::new(starts),
            index,
            opts,
            skipped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The shard (its position) and the byte range of sample `i`.
    fn locate(&self, i: u64) -> Result<(usize, std::ops::Range<u64>)> {
        let total = *self.starts.last().unwrap_or(&0);
        if i >= total {
            return Err(Error::invalid(format!(
                "sample {i} out of range ({total} samples)"
            )));
        }
        let s = self.starts.partition_point(|&start| start <= i) - 1;
        let shard = &self.shards[s];
        let k = (i - self.starts[s]) as usize;
        Ok((s, shard.index.offsets[k]..shard.index.offsets[k + 1]))
    }

    /// Sample `i` from its bytes (`None`: read them through a positional reader of `blob`).
    fn parse(
        &self,
        i: u64,
        shard: &Shard,
        range: std::ops::Range<u64>,
        bytes: Option<Bytes>,
        blob: &Arc<Blob>,
    ) -> Result<Sample> {
        match bytes {
            Some(b) => self.group(i, shard, &range, Cursor::new(&b[..]), Some(&b[..])),
            None => {
                let reader = Ranged::new(blob.clone(), range.clone());
                let reader = std::io::BufReader::with_capacity(1 << 20, reader);
                self.group(i, shard, &range, reader, None)
            }
        }
    }

    /// The one sample the archive `reader` holds (sample `i`'s byte range of `shard`); members
    /// not read as fields are skipped by seeking.
    fn group<R: std::io::Read + std::io::Seek>(
        &self,
        i: u64,
        shard: &Shard,
        range: &std::ops::Range<u64>,
        reader: R,
        within: Option<&[u8]>,
    ) -> Result<Sample> {
        let name = shard.name.as_str();
        let mismatch = |what: &str| {
            Error::data(format!(
                "{name}: sample {i} (bytes {}..{}) {what}: the index does not match the shard; \
                 delete {name}.idx (or the index directory's copy) to rebuild it",
                range.start, range.end
            ))
        };
        let mut group = Grouper::new(name, self.opts, &self.skipped);
        let mut archive = tar::Archive::new(reader);
        for entry in archive.entries_with_seek().map_err(|e| broken(name, e))? {
            let entry = entry.map_err(|e| broken(name, e))?;
            if group.push(entry, within)?.is_some() {
                return Err(mismatch("holds more than one sample"));
            }
        }
        group.finish().ok_or_else(|| mismatch("holds no sample"))
    }

    /// The spec that reopens these shards with this index and these options.
    pub fn source_spec(&self) -> SourceSpec {
        SourceSpec::ReadWebdataset {
            cache: crate::store::cache::spec_of(&self.paths),
            paths: self.paths.to_vec(),
            rank: None,
            world_size: None,
            shuffle_shards: Default::default(),
            on_error: self.opts.on_error,
            max_member_size: Some(self.opts.max_member_size),
            index: self.index.clone(),
        }
    }
}

/// Every shard's index, loaded or built on up to 16 threads (a scan of a remote shard waits
/// on the network), in `paths` order.
fn build_all(paths: &[String], dir: Option<&str>, opts: &WdsOptions) -> Result<Vec<Shard>> {
    let threads = paths.len().clamp(1, 16);
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Result<Shard>>>> =
        Mutex::new((0..paths.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Relaxed);
                let Some(path) = paths.get(i) else { break };
                let got = load_or_build(path, dir, opts).map(|(blob, index)| Shard {
                    name: path.clone(),
                    remote: crate::store::is_url(path).then_some(blob),
                    index,
                });
                let failed = got.is_err();
                done.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(got);
                if failed {
                    next.store(paths.len(), Relaxed);
                }
            });
        }
    });
    let done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    // The first failure in path order; shards not reached after it were never needed.
    let mut shards = Vec::with_capacity(paths.len());
    for got in done {
        match got {
            Some(Ok(s)) => shards.push(s),
            Some(Err(e)) => return Err(e),
            None => return Err(Error::Internal("a shard's index was not built".into())),
        }
    }
    Ok(shards)
}

impl Source for IndexedWebDataset {
    fn name(&self) -> &str {
        "read_webdataset"
    }
    fn spec(&self) -> serde_json::Value {
        self.source_spec().summary(self.len(), 0)
    }
    fn len(&self) -> Option<u64> {
        self.starts.last().copied()
    }
    fn ship(&self) -> Option<serde_json::Value> {
        Some(self.source_spec().to_json())
    }
    fn skipped_reading(&self) -> u64 {
        self.skipped.load(Relaxed)
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let (s, range) = self.locate(index)?;
        let shard = &self.shards[s];
        let blob = shard.blob()?;
        let bytes = (range.end - range.start <= READ_WHOLE)
            .then(|| blob.read_at(range.start, (range.end - range.start) as usize))
            .transpose()?;
        self.parse(index, shard, range, bytes, &blob)
    }
    fn get_many(&self, indices: &[u64]) -> Vec<Result<Sample>> {
        // The small samples of each shard in one call: a store fetches them concurrently.
        let mut out: Vec<Option<Result<Sample>>> = indices.iter().map(|_| None).collect();
        let mut by_shard: std::collections::BTreeMap<usize, Vec<(usize, std::ops::Range<u64>)>> =
            Default::default();
        for (slot, &i) in indices.iter().enumerate() {
            match self.locate(i) {
                Ok((s, range)) if range.end - range.start <= READ_WHOLE => {
                    by_shard.entry(s).or_default().push((slot, range));
                }
                _ => out[slot] = Some(self.get(i)),
            }
        }
        for (s, wanted) in by_shard {
            let shard = &self.shards[s];
            let ranges: Vec<_> = wanted.iter().map(|(_, r)| r.clone()).collect();
            match shard.blob().and_then(|b| Ok((b.read_ranges(&ranges)?, b))) {
                Ok((all, blob)) => {
                    for ((slot, range), bytes) in wanted.into_iter().zip(all) {
                        out[slot] =
                            Some(self.parse(indices[slot], shard, range, Some(bytes), &blob));
                    }
                }
                // Each on its own, so every sample gets its own error.
                Err(_) => {
                    for (slot, _) in wanted {
                        out[slot] = Some(self.get(indices[slot]));
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Internal("a sample was not read".into()))))
            .collect()
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
#[path = "indexed_tests.rs"]
mod tests;
