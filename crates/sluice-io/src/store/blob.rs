//! [`Blob`]: one readable object, a local file or an object in a store, with positional and
//! sequential reads; how a remote object's reads find its bytes (a local copy, the cache's
//! download as it lands, the store, pinned to the version its open saw).

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice_core::{Error, Result};

use super::chunked::{spool_file, ChunkedReader};
use super::RUNTIME;
use super::{block_on, cache, disk, hedge, is_url, pinned, store_error, store_for, tail, Fetch};

#[derive(Debug)]
pub(super) enum Inner {
    Local(File),
    Remote {
        store: Arc<dyn ObjectStore>,
        path: ObjPath,
        /// A complete local copy — the object cache's, or one a [`Blob::reader_keeping_copy`]
        /// read to the end: reads are local preads instead of one request each.
        copy: Arc<OnceLock<File>>,
        /// The object's download into the cache, while it runs.
        fill: Option<Arc<cache::Filling>>,
        /// The store's latencies: ranged reads are hedged too.
        lat: Arc<hedge::Latency>,
        /// `If-Match` for every ranged read: the ETag the open saw ([`pinned`]).
        pin: Option<String>,
    },
}

/// One readable object: a local file or an object in a store, with its size known.
///
/// ```
/// let p = std::env::temp_dir().join("sluice-doc-blob.bin");
/// std::fs::write(&p, b"hello world").unwrap();
/// let blob = sluice_io::Blob::open(&p.display().to_string()).unwrap();
/// assert_eq!(blob.size(), 11);
/// assert_eq!(&blob.read_at(6, 5).unwrap()[..], b"world");
/// ```
#[derive(Debug)]
pub struct Blob {
    pub(super) name: String,
    pub(super) size: u64,
    pub(super) inner: Inner,
    /// A local file's modification time when opened: reads check it has not changed.
    modified: Option<std::time::SystemTime>,
    /// When that was last checked ([`coarse_ms`]).
    checked_ms: std::sync::atomic::AtomicU64,
    /// A check found it changed: every later read fails too (a reader that retries a failed
    /// read-ahead must not get the new bytes between two checks).
    stale: std::sync::atomic::AtomicBool,
}

/// How often a local file is checked for changes while it is read: a `stat` per read would
/// cost as much as reading a text line; every 50 ms costs nothing measurable.
pub(super) const CHECK_EVERY_MS: u64 = 50;

/// Milliseconds since the first call (a monotonic clock).
fn coarse_ms() -> u64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

impl Blob {
    /// Opens a local path or a URL (one HEAD request for a URL, none for one a listing named
    /// whose cached copy is the version the listing gave).
    pub fn open(entry: &str) -> Result<Blob> {
        Ok(Self::open_with_tail(entry, 0)?.0)
    }

    /// [`Blob::open`], and for an object it asks the store about, its last `tail` bytes with
    /// where they start: fetched by the request that learns its size and version instead of a
    /// HEAD, or read after the HEAD where the store has no suffix reads or the cache holds a
    /// copy that may be stale (`None` for a local file or a current cached copy).
    ///
    /// ```
    /// let p = std::env::temp_dir().join("sluice-doc-open-with-tail.bin");
    /// std::fs::write(&p, b"footer").unwrap();
    /// let (blob, tail) = sluice_io::store::Blob::open_with_tail(p.to_str().unwrap(), 4).unwrap();
    /// assert_eq!((blob.size(), tail), (6, None)); // a local file reads its tail itself
    /// ```
    pub fn open_with_tail(entry: &str, tail: u64) -> Result<(Blob, Option<(u64, Bytes)>)> {
        if !is_url(entry) {
            let file = File::open(entry).map_err(|e| Error::io(entry, e))?;
            let meta = file.metadata().map_err(|e| Error::io(entry, e))?;
            let blob = Blob {
                name: entry.to_string(),
                size: meta.len(),
                inner: Inner::Local(file),
                modified: meta.modified().ok(),
                checked_ms: coarse_ms().into(),
                stale: false.into(),
            };
            return Ok((blob, None));
        }
        let (store, path, lat) = store_for(entry)?;
        let path = ObjPath::from(path);
        let cache = cache::cache_for(entry);
        let copy = Arc::new(OnceLock::new());
        // A cached copy of the version the listing that named this object gave is read as
        // it is, with no HEAD: a Parquet dataset's open paid a round trip per file for it
        // (docs/BENCHMARKS.md, "opening a dataset in a bucket"). Without such a copy the HEAD
        // (or the tail's GET) stays: it gives the size and the ETag that ranged reads are
        // pinned to, where a listing made long before (a job's, which a Ray worker adopts)
        // would have every read of an object rewritten since refused.
        if let (Some(c), Some(known)) = (&cache, cache::known(entry)) {
            if let Some(file) = cache::cached_copy(c, entry, known) {
                let _ = copy.set(file);
                // Read from the copy, so no request needs the version pinned.
                return Ok((
                    Blob::remote(
                        entry,
                        known.0,
                        Inner::Remote {
                            store,
                            path,
                            copy,
                            fill: None,
                            lat,
                            pin: None,
                        },
                    ),
                    None,
                ));
            }
        }
        let with_tail = match (tail, &cache) {
            (0, _) => None,
            // A copy is most likely the current version: the HEAD that checks it carries no
            // bytes the copy has.
            (_, Some(c)) if c.holds(entry) => None,
            (n, _) => block_on(tail::head_with_tail(&*store, &path, &lat, n))?,
        };
        let (meta, got) = match with_tail {
            Some((meta, start, bytes)) => (meta, Some((start, bytes))),
            None => {
                let meta = block_on(hedge::hedged(&lat, || store.head(&path)))?
                    .map_err(|e| store_error(entry, e))?;
                (meta, None)
            }
        };
        cache::saw(entry, meta.size, meta.e_tag.as_deref());
        let size = meta.size;
        let pin = pinned::if_match(entry, meta.e_tag.as_deref());
        let version = disk::Version {
            size,
            etag: meta.e_tag,
        };
        let mut fill = None;
        if let Some(c) = cache {
            match cache::cached_copy(&c, entry, cache::key(&version)) {
                Some(file) => {
                    let _ = copy.set(file);
                }
                None => {
                    // `None`: another process or thread is downloading it.
                    if let Ok(Some(f)) = c.begin(entry) {
                        fill = cache::start_fill(f, &store, &path, entry, version, &lat, &copy)
                    }
                }
            }
        }
        let local = copy.get().is_some();
        let inner = Inner::Remote {
            store,
            path,
            copy,
            fill,
            lat,
            pin,
        };
        let blob = Blob::remote(entry, size, inner);
        // Asked by a HEAD (a store without suffix reads: Azure), the tail is read by its
        // bounds now, unless a local copy serves it.
        let got = match got {
            None if tail > 0 && size > 0 && !local => {
                let start = size - size.min(tail);
                Some((start, blob.read_at(start, (size - start) as usize)?))
            }
            got => got,
        };
        Ok((blob, got))
    }

    /// A blob of an object in a store, read through `inner` (an [`Inner::Remote`]).
    fn remote(name: &str, size: u64, inner: Inner) -> Blob {
        Blob {
            name: name.to_string(),
            size,
            inner,
            modified: None,
            checked_ms: 0.into(),
            stale: false.into(),
        }
    }

    /// Whether a read of this blob is a request to the store: `false` for a local file, a
    /// local copy, or an object this process is downloading into the cache (reads wait for
    /// the download's parts).
    ///
    /// ```
    /// let p = std::env::temp_dir().join("sluice-doc-reads-from-store.bin");
    /// std::fs::write(&p, b"local").unwrap();
    /// assert!(!sluice_io::Blob::open(&p.display().to_string()).unwrap().reads_from_store());
    /// ```
    pub fn reads_from_store(&self) -> bool {
        match &self.inner {
            Inner::Local(_) => false,
            Inner::Remote { copy, fill, .. } => copy.get().is_none() && fill.is_none(),
        }
    }

    /// The path or URL it was opened with (used in error messages).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `len` bytes at `offset` (one ranged request for remote objects).
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        let range = offset..offset + len as u64;
        self.read_ranges(std::slice::from_ref(&range))
            .map(|mut v| v.pop().unwrap_or_default())
    }

    /// Several ranges at once; a store coalesces nearby ranges and fetches them concurrently.
    pub fn read_ranges(&self, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        for r in ranges {
            if r.end > self.size || r.start > r.end {
                return Err(Error::data(format!(
                    "{}: read of bytes {}..{} past the end ({} bytes); truncated file?",
                    self.name, r.start, r.end, self.size
                )));
            }
        }
        let local = match &self.inner {
            Inner::Local(file) => Some(file),
            Inner::Remote { copy, .. } => copy.get(),
        };
        if let Inner::Local(file) = &self.inner {
            self.check_unchanged(file)?;
        }
        match (local, &self.inner) {
            (Some(file), _) => ranges
                .iter()
                .map(|r| {
                    let mut buf = vec![0u8; (r.end - r.start) as usize];
                    file.read_exact_at(&mut buf, r.start)
                        .map_err(|e| Error::io(&self.name, e))?;
                    Ok(Bytes::from(buf))
                })
                .collect(),
            (
                None,
                Inner::Remote {
                    store,
                    path,
                    fill,
                    lat,
                    pin,
                    ..
                },
            ) => {
                let landed: Option<Vec<Bytes>> = fill
                    .as_ref()
                    .and_then(|f| ranges.iter().map(|r| f.read(r)).collect());
                match landed {
                    Some(parts) => Ok(parts),
                    // Hedged like every other read: an open's footer reads came here, and
                    // one stalled request held the whole open 2 s (docs/BENCHMARKS.md,
                    // "opening a dataset in a bucket").
                    None => block_on(hedge::hedged(lat, || {
                        pinned::get_ranges(&**store, path, ranges, pin.as_deref())
                    }))?
                    .map_err(|e| store_error(&self.name, e)),
                }
            }
            (None, Inner::Local(_)) => Err(Error::Internal("a local blob without its file".into())),
        }
    }

    /// Refuses a local file whose size or modification time changed since it was opened
    /// (checked every [`CHECK_EVERY_MS`]): an index or footer read at open no longer
    /// describes it, and an edit that keeps every record boundary would otherwise give
    /// other data silently.
    fn check_unchanged(&self, file: &File) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = coarse_ms();
        let due = now.saturating_sub(self.checked_ms.load(Relaxed)) >= CHECK_EVERY_MS;
        if due {
            self.checked_ms.store(now, Relaxed);
            if Self::differs(file, self.size, self.modified) {
                self.stale.store(true, Relaxed);
            }
        }
        if self.stale.load(Relaxed) {
            return Err(Error::data(format!(
                "{}: the file changed since it was opened (its size or modification time); \
                 open it again",
                self.name
            )));
        }
        Ok(())
    }

    /// Whether a local file's size or modification time differ from when it was opened,
    /// asked now (false for objects in a store). Readers ask it when a read fails, to say
    /// the file changed rather than how the read failed.
    pub fn changed(&self) -> bool {
        match &self.inner {
            Inner::Local(file) => Self::differs(file, self.size, self.modified),
            Inner::Remote { .. } => false,
        }
    }

    fn differs(file: &File, size: u64, modified: Option<std::time::SystemTime>) -> bool {
        file.metadata()
            .map_or(true, |m| m.len() != size || m.modified().ok() != modified)
    }

    /// Starts fetching `ranges` in the background, for objects in a store (`None` for local
    /// files: the page cache reads ahead for them). [`join`] waits for the result.
    pub fn fetch_ahead(&self, ranges: Vec<Range<u64>>) -> Option<Fetch<Vec<Bytes>>> {
        let Inner::Remote {
            store,
            path,
            lat,
            pin,
            ..
        } = &self.inner
        else {
            return None;
        };
        // A local copy or a download in progress serves the reads; a range past the end is
        // reported by `read_ranges` when its bytes are needed.
        let past_end = ranges.iter().any(|r| r.end > self.size || r.start > r.end);
        if !self.reads_from_store() || past_end {
            return None;
        }
        let rt = RUNTIME.as_ref().ok()?;
        let (store, path, name, lat, pin) = (
            store.clone(),
            path.clone(),
            self.name.clone(),
            lat.clone(),
            pin.clone(),
        );
        Some(rt.spawn(async move {
            hedge::hedged(&lat, || {
                pinned::get_ranges(&*store, &path, &ranges, pin.as_deref())
            })
            .await
            .map_err(|e| store_error(&name, e))
        }))
    }

    /// The whole object as a sequential reader; remote objects are fetched in 8 MiB ranges,
    /// so memory stays bounded whatever the object's size.
    pub fn reader(self: &Arc<Self>) -> Result<Box<dyn Read + Send>> {
        match &self.inner {
            Inner::Local(file) => Ok(Box::new(std::io::BufReader::with_capacity(
                1 << 20,
                file.try_clone().map_err(|e| Error::io(&self.name, e))?,
            ))),
            Inner::Remote { .. } => Ok(Box::new(ChunkedReader {
                blob: self.clone(),
                pos: 0,
                buf: Bytes::new(),
                next: None,
                spool: None,
            })),
        }
    }

    /// [`Blob::reader`] that, for an object in a store, also keeps what it reads in an
    /// unlinked local temporary file (freed with the blob); once read to the end, reads of
    /// the blob come from that copy. For formats indexed by one pass and then read record by
    /// record (text, JSON lines, CSV): a record would otherwise cost a request each.
    pub fn reader_keeping_copy(self: &Arc<Self>) -> Result<Box<dyn Read + Send>> {
        match &self.inner {
            Inner::Local(_) => return self.reader(),
            // The object cache keeps the copy.
            Inner::Remote { copy, fill, .. } if copy.get().is_some() || fill.is_some() => {
                return self.reader()
            }
            Inner::Remote { .. } => {}
        }
        Ok(Box::new(ChunkedReader {
            blob: self.clone(),
            pos: 0,
            buf: Bytes::new(),
            next: None,
            spool: Some(spool_file(&self.name)?),
        }))
    }
}
