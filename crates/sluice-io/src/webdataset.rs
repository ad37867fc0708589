//! `read_webdataset`: samples from WebDataset tar shards, streamed.
//!
//! Members are grouped into samples by key, WebDataset's convention: `dir/000123.jpg` and
//! `dir/000123.cls` are one sample `{__key__: "dir/000123", __url__: shard, jpg: bytes,
//! cls: bytes}` (the key ends at the first dot of the file name; the rest is the field name).
//! A sample's members must be adjacent in the shard, as WebDataset writers make them.
//!
//! Tar shards have no index, so this source streams (`random_access() == false`): use
//! `shuffle_buffer` rather than `shuffle`. With shard shuffling the order of shards is
//! permuted every epoch, a pure function of (seed, epoch) — the usual WebDataset recipe is
//! shard shuffle plus a buffer shuffle. Each stream reads its shards on one producer thread,
//! [`PREFETCH_SAMPLES`] samples ahead at most; dropping the stream stops it.
//! Members with absolute paths or `..` components are rejected (never followed or written).

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use sluice_core::{Error, Result, Sample, SampleRng, SampleStream, Source, SourceRef, Value};

use crate::store::{expand, Blob};

/// Samples a stream decodes ahead of its consumer.
pub const PREFETCH_SAMPLES: usize = 16;

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
}

/// How shard order is shuffled per epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardShuffle {
    /// From the iteration's seed (`iter(seed=...)`).
    IterationSeed,
    /// From this seed, whatever the iteration's.
    Seed(u64),
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
        let all = expand(entries, Some(&["tar"]))?;
        if let Some(bad) = all
            .iter()
            .find(|p| p.ends_with(".gz") || p.ends_with(".tgz"))
        {
            return Err(Error::invalid(format!(
                "{bad}: compressed tar shards are not supported; use plain .tar shards"
            )));
        }
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

fn unsafe_path(path: &std::path::Path) -> bool {
    path.components().any(|c| {
        matches!(
            c,
            std::path::Component::ParentDir
                | std::path::Component::RootDir
                | std::path::Component::Prefix(_)
        )
    })
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

/// Reads one shard, sending its samples; `false` if the consumer went away or it failed.
fn read_shard(shard: &str, tx: &SyncSender<Result<Sample>>) -> Result<bool> {
    let fail = |e: std::io::Error| Error::data(format!("{shard}: not a readable tar shard: {e}"));
    let blob = Arc::new(Blob::open(shard)?);
    let mut archive = tar::Archive::new(blob.reader()?);
    let mut pending: Option<Pending> = None;
    for entry in archive.entries().map_err(fail)? {
        let mut entry = entry.map_err(fail)?;
        let path = entry.path().map_err(fail)?.into_owned();
        if unsafe_path(&path) {
            return Err(Error::data(format!(
                "{shard}: member '{}' has an absolute or '..' path; refusing it",
                path.display()
            )));
        }
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = path.to_string_lossy().into_owned();
        let Some((key, ext)) = split_key(&name) else {
            continue;
        };
        // The header's size is untrusted: reserve no more than the whole shard holds.
        let mut data = Vec::with_capacity(entry.size().min(blob.size()) as usize);
        std::io::Read::read_to_end(&mut entry, &mut data).map_err(fail)?;
        match &mut pending {
            Some(p) if p.key == key => {
                if p.fields.insert(ext.to_string(), data).is_some() {
                    return Err(Error::data(format!(
                        "{shard}: sample '{key}' has two '{ext}' members"
                    )));
                }
            }
            _ => {
                if let Some(done) = pending.take() {
                    if !emit(shard, done, tx) {
                        return Ok(false);
                    }
                }
                pending = Some(Pending {
                    key: key.to_string(),
                    fields: BTreeMap::from([(ext.to_string(), data)]),
                });
            }
        }
    }
    Ok(pending.is_none_or(|p| emit(shard, p, tx)))
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
        serde_json::json!({
            "source": "read_webdataset",
            "shards": self.shards.len(),
            "rank": self.rank,
            "shuffle_shards": self.shuffle_json(),
        })
    }
    fn len(&self) -> Option<u64> {
        None
    }
    fn ship(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({
            "source": "read_webdataset",
            "paths": *self.all,
            "rank": self.rank.map(|r| r.0),
            "world_size": self.rank.map(|r| r.1),
            "shuffle_shards": self.shuffle_json(),
        }))
    }
    fn random_access(&self) -> bool {
        false
    }
    fn shard_files(&self, rank: u64, world_size: u64) -> Option<Result<SourceRef>> {
        Some(
            WebDatasetSource::open(&self.shards, Some((rank, world_size)))
                .map(|s| Arc::new(s) as _),
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
        std::thread::Builder::new()
            .name("sluice-wds".into())
            .spawn(move || {
                for shard in shards.iter() {
                    match read_shard(shard, &tx) {
                        Ok(true) => {}
                        Ok(false) => return,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
            })
            .map_err(|e| Error::Internal(format!("cannot start a reader thread: {e}")))?;
        Ok(Box::new(ShardStream { rx }))
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

impl WebDatasetSource {
    /// `shuffle_shards` in the pipeline-file syntax: `false`, `true` or a seed.
    fn shuffle_json(&self) -> serde_json::Value {
        match self.shuffle {
            None => false.into(),
            Some(ShardShuffle::IterationSeed) => true.into(),
            Some(ShardShuffle::Seed(s)) => s.into(),
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
    fn member_larger_than_the_shard_is_an_error_not_an_allocation() {
        // Found by fuzzing: a header declaring 2^62 bytes made the reader reserve that much
        // up front (an abort, not an error).
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("huge.tar");
        let mut h = tar::Header::new_gnu();
        h.set_path("a/0.txt").unwrap();
        h.set_size(1 << 62);
        h.set_mode(0o644);
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(&[b'x'; 100]);
        std::fs::write(&p, bytes).unwrap();
        let src = WebDatasetSource::open(&[p.display().to_string()], None).unwrap();
        let e = collect(&src).unwrap_err().to_string();
        assert!(e.contains("huge.tar"), "{e}");
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
