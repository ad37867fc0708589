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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use sluice_core::{
    Error, OnError, Result, Sample, SampleRng, SampleStream, Source, SourceRef, Value,
};

use crate::show::show;
use crate::spec::SourceSpec;
pub use crate::spec::{ShardShuffle, DEFAULT_MAX_MEMBER_SIZE};
use crate::store::Blob;

/// Samples a stream decodes ahead of its consumer.
pub const PREFETCH_SAMPLES: usize = 16;

/// Bytes reserved for a member before reading it: its declared size up to this. Larger
/// members grow their buffer as their bytes actually arrive, so a header that lies about the
/// size costs nothing up front.
const RESERVE_LIMIT: u64 = 8 << 20;

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
        let all = crate::compressed::expand(entries, Some(&["tar"]))?;
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

/// Splits a member path into (key, extension); `None` for names without an extension.
fn split_key(path: &str) -> Option<(&str, &str)> {
    let base_start = path.rfind('/').map_or(0, |i| i + 1);
    let dot = path[base_start..].find('.')? + base_start;
    Some((&path[..dot], &path[dot + 1..]))
}

/// Whether a member name leaves the shard's tree: absolute (`/x`, `\\x`, `C:x`) or with a
/// `..` component. Checked on the raw bytes, the same on every platform.
fn unsafe_path(name: &[u8]) -> bool {
    let absolute = matches!(name.first(), Some(b'/' | b'\\'))
        || (name.len() >= 2 && name[1] == b':' && name[0].is_ascii_alphabetic());
    absolute || name.split(|&b| b == b'/' || b == b'\\').any(|c| c == b"..")
}

struct Pending {
    key: String,
    fields: BTreeMap<String, Vec<u8>>,
}

fn emit(shard: &str, p: Pending, tx: &SyncSender<Result<Sample>>) -> bool {
    sluice_core::field_names!(KEY = "__key__", URL = "__url__");
    let mut s = Sample::with_capacity(p.fields.len() + 2);
    s.set(KEY.clone(), Value::Str(p.key.into()));
    s.set(URL.clone(), Value::Str(shard.into()));
    for (ext, data) in p.fields {
        s.set(ext, Value::Bytes(data.into()));
    }
    tx.send(Ok(s)).is_ok()
}

/// Why a member cannot be a field, or `None` if it is a regular file.
fn not_a_file(kind: tar::EntryType) -> Option<&'static str> {
    use tar::EntryType as T;
    match kind {
        T::Regular | T::Continuous => None,
        T::Symlink => Some("a symbolic link"),
        T::Link => Some("a hard link"),
        T::Fifo => Some("a FIFO"),
        T::Char => Some("a character device"),
        T::Block => Some("a block device"),
        _ => Some("not a regular file"),
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
    /// A member that cannot be a field: skipped and counted, or the error.
    fn bad_member(&self, name: &str, why: &str) -> Result<()> {
        match self.opts.on_error {
            OnError::Skip => {
                self.skipped.fetch_add(1, Relaxed);
                Ok(())
            }
            OnError::Raise => Err(Error::data(format!(
                "{}: member '{}' {why}; pass on_error=\"skip\" to leave such members out",
                self.shard,
                show(name)
            ))),
        }
    }

    /// Damage to the tar structure: fatal under every policy.
    fn broken(&self, e: std::io::Error) -> Error {
        Error::data(format!(
            "{}: not a readable tar shard: {}",
            self.shard,
            show(&e.to_string())
        ))
    }

    /// Reads the shard, sending its samples; `false` if the consumer went away.
    fn read(&self) -> Result<bool> {
        let blob = Arc::new(Blob::open(self.shard)?);
        let mut archive = tar::Archive::new(crate::compressed::reader(&blob)?);
        let mut pending: Option<Pending> = None;
        for entry in archive.entries().map_err(|e| self.broken(e))? {
            let mut entry = entry.map_err(|e| self.broken(e))?;
            let kind = entry.header().entry_type();
            if kind.is_dir() || kind.is_pax_global_extensions() {
                continue;
            }
            let raw_name = entry.path_bytes().into_owned();
            let name = String::from_utf8_lossy(&raw_name).into_owned();
            if unsafe_path(&raw_name) {
                self.bad_member(&name, "has an absolute or '..' path; refusing it")?;
                continue;
            }
            if let Some(what) = not_a_file(kind) {
                self.bad_member(&name, &format!("is {what}; only regular files are read"))?;
                continue;
            }
            let Some((key, ext)) = split_key(&name) else {
                continue;
            };
            let size = entry.size();
            if size > self.opts.max_member_size {
                self.bad_member(
                    &name,
                    &format!(
                        "declares {size} bytes, over max_member_size ({})",
                        self.opts.max_member_size
                    ),
                )?;
                continue;
            }
            let mut data = Vec::with_capacity(size.min(RESERVE_LIMIT) as usize);
            std::io::Read::read_to_end(&mut entry, &mut data).map_err(|e| self.broken(e))?;
            if (data.len() as u64) < size {
                return Err(Error::data(format!(
                    "{}: member '{}' is cut short ({} of {size} bytes): the shard is truncated",
                    self.shard,
                    show(&name),
                    data.len()
                )));
            }
            if let Some(p) = pending.as_mut().filter(|p| p.key == key) {
                if p.fields.contains_key(ext) {
                    self.bad_member(&name, &format!("is a second '{}' of its sample", show(ext)))?;
                } else {
                    p.fields.insert(ext.to_string(), data);
                }
                continue;
            }
            if let Some(done) = pending.take() {
                if !emit(self.shard, done, self.tx) {
                    return Ok(false);
                }
            }
            pending = Some(Pending {
                key: key.to_string(),
                fields: BTreeMap::from([(ext.to_string(), data)]),
            });
        }
        Ok(pending.is_none_or(|p| emit(self.shard, p, self.tx)))
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
                for shard in shards.iter() {
                    let reader = ShardReader {
                        shard,
                        opts,
                        skipped: &skipped,
                        tx: &tx,
                    };
                    match reader.read() {
                        Ok(true) => {}
                        Ok(false) => return,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(dir: &std::path::Path, name: &str, members: &[(&str, &[u8])]) -> String {
        let p = dir.join(name);
        let mut b = tar::Builder::new(std::fs::File::create(&p).unwrap());
        for (path, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            // `set_path` refuses '..', so write the raw name the way a hostile shard would.
            let raw = &mut h.as_old_mut().name;
            raw[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.finish().unwrap();
        p.display().to_string()
    }

    fn collect(src: &WebDatasetSource) -> Result<Vec<Sample>> {
        src.stream()?.collect()
    }

    #[test]
    fn groups_members_by_key_across_shards() {
        let dir = tempfile::tempdir().unwrap();
        shard(
            dir.path(),
            "a.tar",
            &[("x/1.jpg", b"J1"), ("x/1.cls", b"0"), ("x/2.jpg", b"J2")],
        );
        shard(
            dir.path(),
            "b.tar",
            &[("3.seg.png", b"P"), ("3.jpg", b"J3")],
        );
        let src = WebDatasetSource::open(&[dir.path().display().to_string()], None).unwrap();
        assert!(!src.random_access());
        let got = collect(&src).unwrap();
        let keys: Vec<_> = got
            .iter()
            .map(|s| s.get("__key__").unwrap().as_str().unwrap())
            .collect();
        assert_eq!(keys, ["x/1", "x/2", "3"]);
        assert_eq!(got[0].get("cls").unwrap().as_bytes(), Some(&b"0"[..]));
        assert_eq!(got[2].get("seg.png").unwrap().as_bytes(), Some(&b"P"[..]));
    }

    #[test]
    fn traversal_members_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        shard(
            dir.path(),
            "evil.tar",
            &[("ok.txt", b"x"), ("../../etc/passwd.txt", b"y")],
        );
        let src = WebDatasetSource::open(&[dir.path().display().to_string()], None).unwrap();
        let e = collect(&src).unwrap_err().to_string();
        assert!(e.contains("evil.tar") && e.contains("'..'"), "{e}");
    }

    /// A shard of (name, type, data) members, written raw.
    fn typed_shard(dir: &std::path::Path, members: &[(&[u8], tar::EntryType, &[u8])]) -> String {
        let p = dir.join("typed.tar");
        let mut b = tar::Builder::new(std::fs::File::create(&p).unwrap());
        for (name, kind, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.as_old_mut().name[..name.len()].copy_from_slice(name);
            if kind.is_symlink() || kind.is_hard_link() {
                h.set_link_name("0.txt").unwrap();
            }
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.finish().unwrap();
        p.display().to_string()
    }

    fn open_opts(p: &str, on_error: OnError, max: u64) -> WebDatasetSource {
        let opts = WdsOptions {
            on_error,
            max_member_size: max,
        };
        WebDatasetSource::open_with(&[p.to_string()], None, None, opts).unwrap()
    }

    fn keys(samples: &[Sample]) -> Vec<&str> {
        samples
            .iter()
            .map(|s| s.get("__key__").unwrap().as_str().unwrap())
            .collect()
    }

    #[test]
    fn links_fifos_and_devices_raise_or_are_skipped_and_counted() {
        use tar::EntryType as T;
        let dir = tempfile::tempdir().unwrap();
        let p = typed_shard(
            dir.path(),
            &[
                (b"0.txt", T::Regular, b"a"),
                (b"d/", T::Directory, b""),
                (b"1.txt", T::Symlink, b""),
                (b"2.txt", T::Link, b""),
                (b"3.txt", T::Fifo, b""),
                (b"4.txt", T::Char, b""),
                (b"5.txt", T::Block, b""),
                (b"6.txt", T::Regular, b"b"),
            ],
        );
        let raising = open_opts(&p, OnError::Raise, DEFAULT_MAX_MEMBER_SIZE);
        let e = collect(&raising).unwrap_err().to_string();
        assert!(
            e.contains("typed.tar") && e.contains("'1.txt'") && e.contains("symbolic link"),
            "{e}"
        );
        let skipping = open_opts(&p, OnError::Skip, DEFAULT_MAX_MEMBER_SIZE);
        let got = collect(&skipping).unwrap();
        assert_eq!(keys(&got), ["0", "6"]);
        assert_eq!(skipping.skipped_reading(), 5);
        // Clones share the count; every stream adds to it.
        collect(&skipping.clone()).unwrap();
        assert_eq!(skipping.skipped_reading(), 10);
    }

    #[test]
    fn oversized_members_raise_or_are_skipped_without_being_held() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![7u8; 5000];
        let p = typed_shard(
            dir.path(),
            &[
                (b"0.txt", tar::EntryType::Regular, b"a"),
                (b"1.bin", tar::EntryType::Regular, &big),
                (b"2.txt", tar::EntryType::Regular, b"c"),
            ],
        );
        let e = collect(&open_opts(&p, OnError::Raise, 4096))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'1.bin'") && e.contains("5000 bytes") && e.contains("max_member_size"),
            "{e}"
        );
        let skipping = open_opts(&p, OnError::Skip, 4096);
        assert_eq!(keys(&collect(&skipping).unwrap()), ["0", "2"]);
        assert_eq!(skipping.skipped_reading(), 1);
        assert_eq!(
            collect(&open_opts(&p, OnError::Raise, 5000)).unwrap().len(),
            3
        );
    }

    #[test]
    fn a_member_declaring_more_than_the_shard_holds_is_an_error_not_an_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("short.tar");
        let mut h = tar::Header::new_gnu();
        h.set_path("0.bin").unwrap();
        h.set_size(8 << 30);
        h.set_mode(0o644);
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(&[1u8; 1024]);
        std::fs::write(&p, bytes).unwrap();
        let p = p.display().to_string();
        let e = collect(&open_opts(&p, OnError::Raise, DEFAULT_MAX_MEMBER_SIZE))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("'0.bin'") && e.contains("8589934592 bytes"),
            "{e}"
        );
        // Allowed, it is read as far as the shard goes, then reported as cut short.
        let e = collect(&open_opts(&p, OnError::Raise, u64::MAX))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cut short") && e.contains("1024 of"), "{e}");
        // Skipped, the skip runs into the end of the shard: structure damage always raises.
        let e = collect(&open_opts(&p, OnError::Skip, DEFAULT_MAX_MEMBER_SIZE))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a readable tar shard"), "{e}");
    }

    #[test]
    fn bytes_from_the_shard_are_escaped_in_messages() {
        let dir = tempfile::tempdir().unwrap();
        let p = typed_shard(
            dir.path(),
            &[(b"\x1b[2J\x07evil.txt", tar::EntryType::Symlink, b"")],
        );
        let e = collect(&open_opts(&p, OnError::Raise, DEFAULT_MAX_MEMBER_SIZE))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\\x1b[2J\\x07evil.txt"), "{e}");
        // Random bytes: the tar parser quotes header fields (here a newline among them); none
        // reach the message raw.
        let noise: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let q = dir.path().join("noise.tar");
        std::fs::write(&q, noise).unwrap();
        let src = open_opts(
            &q.display().to_string(),
            OnError::Raise,
            DEFAULT_MAX_MEMBER_SIZE,
        );
        let e = collect(&src).unwrap_err().to_string();
        assert!(e.contains("noise.tar"), "{e}");
        assert!(!e.chars().any(|c| c.is_control()), "{e:?}");
    }

    #[test]
    fn ranks_get_disjoint_shards() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..4 {
            shard(
                dir.path(),
                &format!("s{i}.tar"),
                &[(&format!("{i}.txt"), b"x")],
            );
        }
        let all = dir.path().display().to_string();
        let r1 = WebDatasetSource::open(std::slice::from_ref(&all), Some((1, 2))).unwrap();
        assert!(r1.shards()[0].ends_with("s1.tar") && r1.shards()[1].ends_with("s3.tar"));
        assert!(WebDatasetSource::open(&[all], Some((0, 5))).is_err());
    }

    #[test]
    fn shard_order_is_shuffled_per_epoch_deterministically() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..8 {
            shard(
                dir.path(),
                &format!("s{i}.tar"),
                &[(&format!("{i}.txt"), b"x")],
            );
        }
        let all = dir.path().display().to_string();
        let open = |rank, shuffle| {
            WebDatasetSource::open_shuffled(std::slice::from_ref(&all), rank, shuffle).unwrap()
        };
        let plain = open(None, None);
        assert_eq!(plain.epoch_shards(5, 3), plain.shards());
        let seeded = open(None, Some(ShardShuffle::Seed(11)));
        let (e0, e1) = (seeded.epoch_shards(0, 0), seeded.epoch_shards(99, 1));
        assert_ne!(e0, e1, "epochs differ");
        assert_ne!(e0, plain.shards(), "shuffled");
        assert_eq!(
            e0,
            open(None, Some(ShardShuffle::Seed(11))).epoch_shards(42, 0)
        );
        let mut sorted = e1.clone();
        sorted.sort();
        assert_eq!(sorted, plain.shards(), "a permutation");
        // The iteration seed drives it when no seed is given.
        let by_iter = open(None, Some(ShardShuffle::IterationSeed));
        assert_ne!(by_iter.epoch_shards(1, 0), by_iter.epoch_shards(2, 0));
        // Ranks split the permuted list: disjoint and covering, every epoch.
        for epoch in 0..4 {
            let a = open(Some((0, 2)), Some(ShardShuffle::Seed(3))).epoch_shards(0, epoch);
            let b = open(Some((1, 2)), Some(ShardShuffle::Seed(3))).epoch_shards(0, epoch);
            let mut both: Vec<_> = a.iter().chain(&b).cloned().collect();
            both.sort();
            assert_eq!((a.len(), b.len()), (4, 4));
            assert_eq!(both, plain.shards());
        }
        // The stream of an epoch follows its shard order.
        let keys: Vec<String> = seeded
            .stream_epoch(0, 1)
            .unwrap()
            .map(|s| {
                s.unwrap()
                    .get("__key__")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let want: Vec<String> = e1
            .iter()
            .map(|p| {
                p.rsplit('/')
                    .next()
                    .unwrap()
                    .trim_start_matches('s')
                    .trim_end_matches(".tar")
                    .to_string()
            })
            .collect();
        assert_eq!(keys, want);
    }

    #[test]
    fn dropping_the_stream_stops_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let members: Vec<(String, Vec<u8>)> = (0..200)
            .map(|i| (format!("{i:04}.bin"), vec![0u8; 10]))
            .collect();
        let refs: Vec<(&str, &[u8])> = members.iter().map(|(n, d)| (n.as_str(), &d[..])).collect();
        shard(dir.path(), "big.tar", &refs);
        let src = WebDatasetSource::open(&[dir.path().display().to_string()], None).unwrap();
        let first: Vec<_> = src.stream().unwrap().take(3).collect();
        assert_eq!(first.len(), 3);
    }
}
