//! The prefix cache's node-local tier: records in a directory on the worker's node, shared by
//! every service worker there, ahead of the cache shards.
//!
//! A record read through a shard costs a Ray call, a transfer between object stores and a copy
//! (~2.3 ms for a 263 KB resized image on the reference machine: more than decoding it again);
//! the same record read from a file on the node is a page-cache copy (tens of µs). So a worker
//! looks for a chunk's records here first, asks the shards only for the rest, and keeps every
//! record it computed or fetched here too: from the second epoch on, a node reads the prefix
//! from its own disk. The directory is an object cache of `sluice_io::store::disk` (byte cap;
//! when full, what was used within ten minutes kept and later records not stored, so the
//! epochs of a prefix bigger than the cap each find the same share; safe between processes: a
//! record half written is never read);
//! a record's name is its prefix key and source index, its size checked on every read.
//!
//! ```
//! use sluice_remote::service::node_cache::NodeCache;
//! let dir = tempfile::tempdir().unwrap();
//! let node = NodeCache::open(dir.path(), 1 << 20).unwrap();
//! node.put("p", 7, b"record");
//! assert_eq!(node.get("p", 7).as_deref(), Some(&b"record"[..]));
//! assert!(node.get("p", 8).is_none() && node.get("q", 7).is_none());
//! ```

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use sluice_core::{Error, Result};
use sluice_io::store::cache;
use sluice_io::store::disk::{DiskCache, Version};

/// The node-local tier of one service's prefix cache.
#[derive(Debug)]
pub struct NodeCache {
    disk: Arc<DiskCache>,
    /// The directory's identity ([`NodeCache::tier`]).
    tier: String,
    hits: AtomicU64,
    misses: AtomicU64,
    stored: AtomicU64,
}

fn name(prefix: &str, index: u64) -> String {
    format!("sluice-prefix:{prefix}/{index}")
}

impl NodeCache {
    /// Opens (creating) the tier at `dir`, holding at most `limit` bytes.
    pub fn open(dir: &Path, limit: u64) -> Result<NodeCache> {
        Ok(NodeCache {
            disk: Arc::new(DiskCache::open(dir, limit)?),
            tier: tier_id(dir)?,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            stored: AtomicU64::new(0),
        })
    }

    /// The tier of service `service` on this node: in `dir` (default: `services/<service>` in
    /// the object cache's directory, `$SLUICE_CACHE_DIR` or `~/.cache/sluice/objects`), at
    /// most `limit` bytes (default: a quarter of the disk space free there); `None` when
    /// `limit` is 0 (the tier is off).
    pub fn for_service(
        service: &str,
        dir: Option<&Path>,
        limit: Option<u64>,
    ) -> Result<Option<NodeCache>> {
        if limit == Some(0) {
            return Ok(None);
        }
        let dir = dir.map_or_else(
            || cache::default_dir().join("services").join(service),
            Path::to_path_buf,
        );
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("{} (node_cache_dir)", dir.display()), e))?;
        let limit = limit.unwrap_or_else(|| cache::half_free(&dir) / 2);
        NodeCache::open(&dir, limit).map(Some)
    }

    /// Whether the record of `prefix` for source `index` seems to be here (not counted as a
    /// read): its file exists. Opening and checking it is left to [`NodeCache::get`], which
    /// the worker calls next — a file that fails that check is a miss there, and the record
    /// is computed.
    pub fn has(&self, prefix: &str, index: u64) -> bool {
        self.disk.holds(&name(prefix, index))
    }

    /// The record of `prefix` for source `index`, if it is here.
    pub fn get(&self, prefix: &str, index: u64) -> Option<Vec<u8>> {
        // An object-cache entry has an ETag: not a record.
        let got = (self.disk.lookup(&name(prefix, index), |v| v.etag.is_none()))
            .and_then(|c| c.read_all().ok());
        let counter = if got.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Relaxed);
        got
    }

    /// Keeps `record` here; a record another process is writing now, or one the cap has no
    /// room for, is skipped (a later miss costs a computation, never a wrong byte).
    pub fn put(&self, prefix: &str, index: u64, record: &[u8]) {
        let version = Version {
            size: record.len() as u64,
            etag: None,
        };
        if let Ok(Some(fill)) = self.disk.begin(&name(prefix, index)) {
            if fill.commit(&version, record).is_ok() {
                self.stored.fetch_add(1, Relaxed);
            }
        }
    }

    /// Completes the shards' answers (`found`) for a chunk's source `indices` with the
    /// records here — returned with the seconds reading them took — and keeps the shards'
    /// answers here for the next time this node needs them.
    pub fn complete(
        &self,
        prefix: &str,
        indices: &[u64],
        found: &HashMap<u64, &[u8]>,
    ) -> (Vec<(u64, Vec<u8>)>, f64) {
        let t0 = Instant::now();
        let local = (indices.iter())
            .filter(|i| !found.contains_key(i))
            .filter_map(|&i| Some((i, self.get(prefix, i)?)))
            .collect();
        let took = t0.elapsed().as_secs_f64();
        self.keep(prefix, found.iter().map(|(&i, &r)| (i, r)));
        (local, took)
    }

    /// Keeps records (a worker computed them, or a shard answered them).
    pub fn keep<'a>(&self, prefix: &str, records: impl IntoIterator<Item = (u64, &'a [u8])>) {
        for (index, record) in records {
            self.put(prefix, index, record);
        }
    }

    /// The directory's identity: the same for every worker that opens this directory,
    /// whatever the path or node it is reached from (a shared disk, one machine's nodes),
    /// different for another directory. Workers that all report one tier hold every
    /// record any of them made: the service then keeps no copy in its shards.
    pub fn tier(&self) -> &str {
        &self.tier
    }

    /// `(hits, misses, stored)` so far, and the directory with its cap and identity.
    pub fn report(&self) -> serde_json::Value {
        serde_json::json!({
            "tier": self.tier,
            "dir": self.disk.dir().display().to_string(),
            "limit": self.disk.limit(),
            "hits": self.hits.load(Relaxed),
            "misses": self.misses.load(Relaxed),
            "stored": self.stored.load(Relaxed),
        })
    }
}

/// The identity in `dir`'s `tier` file, made by the first opener: written under a name of
/// its own, then linked into place (a link never replaces a file), so every opener reads
/// the one that won.
fn tier_id(dir: &Path) -> Result<String> {
    let path = dir.join("tier");
    if let Ok(id) = std::fs::read_to_string(&path) {
        return Ok(id);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mine = format!(
        "{:016x}",
        sluice_core::rng::combine(now, u64::from(std::process::id()))
    );
    // Its own name per opener (threads of one process may draw the same `mine`).
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Relaxed);
    let tmp = dir.join(format!(".tier-{mine}.{}.{n}", std::process::id()));
    let io = |e| Error::io(format!("{} (node cache tier)", path.display()), e);
    std::fs::write(&tmp, &mine).map_err(io)?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(mine),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::read_to_string(&path).map_err(io)
        }
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_shared_between_openers_and_kept_within_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let a = NodeCache::open(dir.path(), 64 << 10).unwrap();
        let b = NodeCache::open(dir.path(), 64 << 10).unwrap();
        a.put("p", 1, &[1u8; 1000]);
        // Another worker on the node reads what this one stored.
        assert_eq!(b.get("p", 1), Some(vec![1u8; 1000]));
        assert!(b.has("p", 1) && !b.has("p", 2));
        // The shards' answers are not read again; the rest is, when here.
        let shard_record = [9u8; 3];
        let found = HashMap::from([(3u64, &shard_record[..])]);
        b.put("p", 3, &[3u8; 10]);
        let (local, _) = b.complete("p", &[1, 2, 3], &found);
        assert_eq!(local, vec![(1, vec![1u8; 1000])]);
        // ... and what the shards answered is kept here.
        assert_eq!(a.get("p", 3), Some(vec![9u8; 3]));
        // 100 records of 1 KB under a 64 KB cap: the first that fit stay (the next epoch
        // reads them again), the rest are not stored, and nothing passes the cap.
        for i in 100..200 {
            a.put("p", i, &[i as u8; 1024]);
        }
        assert!(a.get("p", 100).is_some() && !a.has("p", 199));
        assert!((100..200).filter(|&i| a.has("p", i)).count() < 64);
        let r = a.report();
        assert!(r["stored"].as_u64().unwrap() >= 100 && r["hits"].as_u64().unwrap() == 2);
    }

    #[test]
    fn openers_of_one_directory_share_its_tier_and_another_directory_differs() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let openers: Vec<NodeCache> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| NodeCache::open(d1.path(), 1 << 20).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let tier = openers[0].tier().to_string();
        assert!(tier.len() >= 16 && openers.iter().all(|n| n.tier() == tier));
        assert_eq!(openers[0].report()["tier"], tier.as_str());
        let other = NodeCache::open(d2.path(), 1 << 20).unwrap();
        assert_ne!(other.tier(), tier);
        // Reopened later (a worker restarted), the directory keeps its identity.
        assert_eq!(NodeCache::open(d1.path(), 1 << 20).unwrap().tier(), tier);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(d1.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.to_string_lossy().starts_with(".tier-")),
            "{names:?}"
        );
    }

    #[test]
    fn a_service_tier_is_off_at_zero_and_named_after_its_service() {
        let dir = tempfile::tempdir().unwrap();
        assert!(NodeCache::for_service("s", Some(dir.path()), Some(0))
            .unwrap()
            .is_none());
        let at = dir.path().join("svc");
        let node = NodeCache::for_service("s", Some(&at), None)
            .unwrap()
            .unwrap();
        assert!(node.disk.limit() > 0 && at.join("objects").is_dir());
    }

    #[test]
    fn a_record_of_another_size_or_an_object_is_never_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let node = NodeCache::open(dir.path(), 1 << 20).unwrap();
        // An object cache entry (it has an ETag) under the same name does not count.
        let disk = Arc::new(DiskCache::open(dir.path(), 1 << 20).unwrap());
        let v = Version {
            size: 2,
            etag: Some("\"e\"".into()),
        };
        disk.begin(&name("p", 5))
            .unwrap()
            .unwrap()
            .commit(&v, b"ab")
            .unwrap();
        assert!(node.get("p", 5).is_none());
        node.put("p", 5, b"abc");
        assert_eq!(node.get("p", 5).as_deref(), Some(&b"abc"[..]));
    }
}
