//! `read_webdataset`: samples from WebDataset tar shards, streamed.
//!
//! Members are grouped into samples by key, WebDataset's convention: `dir/000123.jpg` and
//! `dir/000123.cls` are one sample `{__key__: "dir/000123", __url__: shard, jpg: bytes,
//! cls: bytes}` (the key ends at the first dot of the file name; the rest is the field name).
//! A sample's members must be adjacent in the shard, as WebDataset writers make them.
//!
//! Shards compressed as a whole (`.tar.gz`/`.tgz`, `.tar.zst`, `.tar.bz2`) are decompressed
//! as they are read; damaged compressed data is a data error naming the shard and the codec.
//!
//! Tar shards have no index, so this source streams (`random_access() == false`): use
//! `shuffle_buffer` rather than `shuffle`. With shard shuffling the order of shards is
//! permuted every epoch, a pure function of (seed, epoch) — the usual WebDataset recipe is
//! shard shuffle plus a buffer shuffle. Each stream reads its shards on one producer thread,
//! [`PREFETCH_SAMPLES`] samples ahead at most; dropping the stream stops it.
//!
//! Only regular-file members become fields. Directory entries and pax global headers carry
//! no data and are passed over. Every other member is an error in the record that names
//! shard and member, under the reader's `on_error` ([`WdsOptions`]): raised, or with `Skip`
//! left out and counted (`stats()`, plus a warning when the iteration ends). Such members
//! are links (symbolic or hard: never followed), FIFOs and devices, members with absolute or
//! `..` paths (never followed or written), a second member for a field a sample already has,
//! and members declaring more than `max_member_size` bytes — checked against the header
//! before anything is read, so a hostile header cannot make the reader allocate its declared
//! size; a skipped member's bytes are read past, never held. Damage to the tar structure
//! itself (a bad header checksum, a shard cut short) raises under both policies: nothing
//! after it in that shard can be trusted. Text from the shard (member names, the tar
//! parser's messages about header fields) is escaped in messages ([`crate::show`]).

mod index;
mod indexed;
mod members;

pub use index::ShardIndex;
pub use indexed::IndexedWebDataset;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use sluice_core::{Error, OnError, Result, Sample, SampleRng, SampleStream, Source, SourceRef};

use crate::spec::SourceSpec;
pub use crate::spec::{ShardShuffle, DEFAULT_MAX_MEMBER_SIZE};
use crate::store::Blob;
use members::{broken, Grouper};

/// Samples a stream decodes ahead of its consumer.
pub const PREFETCH_SAMPLES: usize = 16;

/// How `read_webdataset` treats members it cannot make a field of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WdsOptions {
    /// `Raise`: fail naming shard and member. `Skip`: leave the member out and count it.
    pub on_error: OnError,
    /// Members declaring more bytes than this are such errors.
    pub max_member_size: u64,
}

impl Default for WdsOptions {
    fn default() -> Self {
        WdsOptions {
            on_error: OnError::Raise,
            max_member_size: DEFAULT_MAX_MEMBER_SIZE,
        }
    }
}

/// WebDataset tar shards as a stream of samples.
///
/// ```
/// use sluice_core::Source;
/// let dir = std::env::temp_dir().join("sluice-doc-wds");
/// std::fs::create_dir_all(&dir).unwrap();
/// let shard = dir.join("shard-0.tar");
/// let mut b = tar::Builder::new(std::fs::File::create(&shard).unwrap());
/// for (name, data) in [("a.txt", &b"hi"[..]), ("a.cls", b"1"), ("b.txt", b"yo"), ("b.cls", b"0")] {
///     let mut h = tar::Header::new_gnu();
///     h.set_size(data.len() as u64);
///     h.set_cksum();
///     b.append_data(&mut h, name, data).unwrap();
/// }
/// b.finish().unwrap();
/// let src = sluice_io::WebDatasetSource::open(&[shard.display().to_string()], None).unwrap();
/// let samples: Vec<_> = src.stream().unwrap().collect::<Result<_, _>>().unwrap();
/// assert_eq!(samples.len(), 2);
/// assert_eq!(samples[1].get("txt").unwrap().as_bytes(), Some(&b"yo"[..]));
/// ```
#[derive(Debug, Clone)]
pub struct WebDatasetSource {
    /// Every shard matched, sorted.
    all: Arc<Vec<String>>,
    /// This rank's shards in file order (what an unshuffled epoch reads).
    shards: Arc<Vec<String>>,
    rank: Option<(u64, u64)>,
    shuffle: Option<ShardShuffle>,
    opts: WdsOptions,
    /// Members left out under `on_error = Skip`, by every stream of this source (and of its
    /// clones) so far.
    skipped: Arc<AtomicU64>,
}

/// Op id of the shard-order shuffle in [`SampleRng`] keys.
const SHARD_SHUFFLE_OP: u64 = 0x5348_4152_4453_4846; // "SHARDSHF"

impl WebDatasetSource {
    /// The shards matched by `entries` (paths, directories, globs, URLs), sorted; with
    /// `rank = Some((r, n))` only every n-th shard starting at r (shard-level sharding: ranks
    /// get disjoint shards, equal in number when n divides the shard count).
    pub fn open(entries: &[String], rank: Option<(u64, u64)>) -> Result<Self> {
        Self::open_shuffled(entries, rank, None)
    }

    /// [`WebDatasetSource::open`], with the shard order permuted every epoch by `shuffle`.
    /// The permutation is of all shards and comes before the rank split, so ranks (which
    /// share the seed) still read disjoint shards, different ones every epoch.
    ///
    /// ```no_run
    /// use sluice_io::{webdataset::ShardShuffle, WebDatasetSource};
    /// let src = WebDatasetSource::open_shuffled(&["shards/".into()], Some((0, 2)), Some(ShardShuffle::Seed(7)))?;
    /// let epoch0 = src.epoch_shards(0, 0);
    /// let epoch1 = src.epoch_shards(0, 1);   // another order (and, with ranks, other shards)
    /// # Ok::<(), sluice_core::Error>(())
    /// ```
    pub fn open_shuffled(
        entries: &[String],
        rank: Option<(u64, u64)>,
        shuffle: Option<ShardShuffle>,
    ) -> Result<Self> {
        Self::open_with(entries, rank, shuffle, WdsOptions::default())
    }

    /// [`WebDatasetSource::open_shuffled`] with an error policy and a member size limit.
    pub fn open_with(
        entries: &[String],
        rank: Option<(u64, u64)>,
        shuffle: Option<ShardShuffle>,
        opts: WdsOptions,
    ) -> Result<Self> {
        if opts.max_member_size == 0 {
            return Err(Error::invalid("max_member_size must be > 0"));
        }
        let (all, _) = crate::manifest::expand_shards(
            entries,
            &["tar"],
            crate::shard_writer::ShardFormat::Webdataset,
        )?;
        let all = Arc::new(all);
        let shards = match rank {
            None => (*all).clone(),
            Some((r, n)) => {
                if n == 0 || r >= n {
                    return Err(Error::invalid(format!(
                        "rank must be in 0..world_size, got rank {r}, world_size {n}"
                    )));
                }
                if (all.len() as u64) < n {
                    return Err(Error::invalid(format!(
                        "{} shards cannot be split over {n} ranks; use more shards or \
                         shard(rank, world_size) on samples",
                        all.len()
                    )));
                }
                pick_rank(all.iter().cloned(), Some((r, n)))
            }
        };
        Ok(WebDatasetSource {
            all,
            shards: Arc::new(shards),
            rank,
            shuffle,
            opts,
            skipped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The shards this source reads without shuffling, in order.
    pub fn shards(&self) -> &[String] {
        &self.shards
    }

    /// The shards epoch `epoch` of an iteration seeded `seed` reads, in order.
    pub fn epoch_shards(&self, seed: u64, epoch: u64) -> Vec<String> {
        let key = match self.shuffle {
            None => return (*self.shards).clone(),
            Some(ShardShuffle::IterationSeed) => seed,
            Some(ShardShuffle::Seed(s)) => s,
        };
        // Fisher–Yates from a generator keyed by (seed, epoch): no shared state.
        let mut order: Vec<String> = (*self.all).clone();
        let mut rng = SampleRng::new(key, epoch, 0, SHARD_SHUFFLE_OP);
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        pick_rank(order.into_iter(), self.rank)
    }
}

/// Every n-th shard from r (all of them without ranks).
fn pick_rank(shards: impl Iterator<Item = String>, rank: Option<(u64, u64)>) -> Vec<String> {
    match rank {
        None => shards.collect(),
        Some((r, n)) => shards.skip(r as usize).step_by(n as usize).collect(),
    }
}

/// One shard's reading: its samples go to `tx`, its skips to `skipped`.
struct ShardReader<'a> {
    shard: &'a str,
    opts: WdsOptions,
    skipped: &'a AtomicU64,
    tx: &'a SyncSender<Result<Sample>>,
}

impl ShardReader<'_> {
    /// Reads the shard (opened as `blob`), sending its samples; `false` if the consumer went away.
    fn read(&self, blob: Result<Blob>) -> Result<bool> {
        let blob = Arc::new(blob?);
        let mut archive = tar::Archive::new(crate::compressed::reader(&blob)?);
        let mut group = Grouper::new(self.shard, self.opts, self.skipped);
        for entry in archive.entries().map_err(|e| broken(self.shard, e))? {
            let entry = entry.map_err(|e| broken(self.shard, e))?;
            if let Some(done) = group.push(entry, None)? {
                if self.tx.send(Ok(done)).is_err() {
                    return Ok(false);
                }
            }
        }
        Ok(group.finish().is_none_or(|s| self.tx.send(Ok(s)).is_ok()))
    }
}

/// Samples arriving from the producer thread.
struct ShardStream {
    rx: Receiver<Result<Sample>>,
}

impl Iterator for ShardStream {
    type Item = Result<Sample>;
    fn next(&mut self) -> Option<Self::Item> {
        self.rx.recv().ok()
    }
}

impl Source for WebDatasetSource {
    fn name(&self) -> &str {
        "read_webdataset"
    }
    fn spec(&self) -> serde_json::Value {
        self.source_spec().summary(None, 0)
    }
    fn len(&self) -> Option<u64> {
        None
    }
    fn ship(&self) -> Option<serde_json::Value> {
        Some(self.source_spec().to_json())
    }
    fn skipped_reading(&self) -> u64 {
        self.skipped.load(Relaxed)
    }
    fn random_access(&self) -> bool {
        false
    }
    fn shard_files(&self, rank: u64, world_size: u64) -> Option<Result<SourceRef>> {
        Some(
            WebDatasetSource::open_with(&self.shards, Some((rank, world_size)), None, self.opts)
                .map(|s| {
                    Arc::new(WebDatasetSource {
                        skipped: self.skipped.clone(),
                        ..s
                    }) as _
                }),
        )
    }
    fn get(&self, _index: u64) -> Result<Sample> {
        Err(Error::invalid(
            "read_webdataset streams (tar has no index); use shuffle_buffer, not shuffle",
        ))
    }
    fn stream(&self) -> Result<SampleStream> {
        self.stream_epoch(0, 0)
    }
    fn stream_epoch(&self, seed: u64, epoch: u64) -> Result<SampleStream> {
        let (tx, rx) = sync_channel(PREFETCH_SAMPLES);
        let shards = self.epoch_shards(seed, epoch);
        let (opts, skipped) = (self.opts, self.skipped.clone());
        std::thread::Builder::new()
            .name("sluice-wds".into())
            .spawn(move || {
                std::thread::scope(|scope| {
                    // The next shard is opened while this one is read: in a bucket, its HEAD
                    // (and its download into the object cache) overlap this shard's samples.
                    let open = |i: usize| shards.get(i).map(|s| scope.spawn(|| Blob::open(s)));
                    let mut next = open(0);
                    for (i, shard) in shards.iter().enumerate() {
                        let blob = match next.take().map(|h| h.join()) {
                            Some(Ok(blob)) => blob,
                            _ => Err(Error::Internal(format!("{shard}: its opening failed"))),
                        };
                        next = open(i + 1);
                        let reader = ShardReader {
                            shard,
                            opts,
                            skipped: &skipped,
                            tx: &tx,
                        };
                        match reader.read(blob) {
                            Ok(true) => {}
                            Ok(false) => return,
                            Err(e) => {
                                let _ = tx.send(Err(e));
                                return;
                            }
                        }
                    }
                })
            })
            .map_err(|e| Error::no_thread("a WebDataset reader", e))?;
        Ok(Box::new(ShardStream { rx }))
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

impl WebDatasetSource {
    /// `shuffle_shards` in the pipeline-file syntax: `false`, `true` or a seed.
    /// The spec that reopens these shards with this rank, shuffle and options.
    pub fn source_spec(&self) -> SourceSpec {
        SourceSpec::ReadWebdataset {
            cache: crate::store::cache::spec_of(&self.all),
            paths: self.all.to_vec(),
            rank: self.rank.map(|r| r.0),
            world_size: self.rank.map(|r| r.1),
            shuffle_shards: self.shuffle.into(),
            on_error: self.opts.on_error,
            max_member_size: Some(self.opts.max_member_size),
            index: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests;
