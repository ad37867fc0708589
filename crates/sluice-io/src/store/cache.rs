//! Which node-local cache ([`DiskCache`]) serves a URL, the object versions listings and HEADs
//! saw, and the two ways objects enter the cache: whole objects ([`fetch_object`], for
//! `read_files` / `read_images`) and large objects read by range (a [`Filling`]: Parquet, tar,
//! TFRecord and text files are downloaded in parallel 8 MiB parts while their readers read the
//! parts as they land).
//!
//! A source's `cache_dir` / `cache_limit` ([`CacheSpec`]) apply to the buckets its paths name,
//! in this process, from when it is opened (the last source opened on a bucket sets it). Without
//! one the default cache is used: `$SLUICE_CACHE_DIR`, else `~/.cache/sluice/objects`, capped at
//! half the disk space free when it is first used.
//!
//! A cached object is used when its size and ETag match what the store said in this process (a
//! listing or a HEAD); when the store has not been asked, a conditional GET (`If-None-Match`)
//! checks it for the price of a request without a body. A source opened over objects named one
//! by one forgets what the process saw of them ([`forget`], from `expand_list`), and a worker
//! takes its job's versions ([`adopt_versions`]): what an earlier source saw never answers for
//! a later one.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjPath;
use object_store::{GetOptions, ObjectStore};
use serde::{Deserialize, Serialize};
use sluice_core::{Error, Result};

use super::disk::{DiskCache, Fill, Version};
use super::hedge::{hedged, Latency};
use super::{is_url, split_url, store_error};

/// A source's `cache_dir` / `cache_limit`, as its spec carries them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    /// The cache directory (`None`: the default one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// The cap in bytes (`None`: half the free disk; 0: no cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// Bytes per ranged request when a large object is downloaded.
const PART: u64 = 8 << 20;
/// Parts of one object in flight at once.
const PARTS_IN_FLIGHT: usize = 8;
/// How long a reader waits for another process's download of the same object before
/// fetching it itself (that process may be stopped).
const WAIT_FOR_OTHER: Duration = Duration::from_secs(10);

/// Per bucket (`s3://bucket`): its settings and the cache they open (`None`: off).
type Rules = HashMap<String, (CacheSpec, Option<Arc<DiskCache>>)>;
static RULES: LazyLock<Mutex<Rules>> = LazyLock::new(Default::default);
/// Open caches by (directory, cap asked for).
type OpenCaches = HashMap<(PathBuf, Option<u64>), Arc<DiskCache>>;
static OPEN: LazyLock<Mutex<OpenCaches>> = LazyLock::new(Default::default);
/// URL hash → (size, ETag hash) as the store last said.
static VERSIONS: LazyLock<Mutex<HashMap<u64, (u64, u64)>>> = LazyLock::new(Default::default);

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The default cache directory: `$SLUICE_CACHE_DIR`, else `$XDG_CACHE_HOME/sluice/objects`,
/// else `~/.cache/sluice/objects`.
pub fn default_dir() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var("SLUICE_CACHE_DIR") {
        return d;
    }
    let base = var("XDG_CACHE_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("sluice").join("objects")
}

/// Half the space free on the disk holding `dir`.
pub fn half_free(dir: &Path) -> u64 {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return 0;
    };
    // SAFETY: a valid C string and a zeroed out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    (st.f_bavail as u64).saturating_mul(st.f_frsize as u64) / 2
}

/// The open cache `spec` names (`None`: caching is off).
fn resolve(spec: &CacheSpec) -> Result<Option<Arc<DiskCache>>> {
    if spec.limit == Some(0) {
        return Ok(None);
    }
    let dir = spec.dir.as_ref().map_or_else(default_dir, PathBuf::from);
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = open.get(&(dir.clone(), spec.limit)) {
        return Ok(Some(c.clone()));
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("{} (cache_dir)", dir.display()), e))?;
    let limit = spec.limit.unwrap_or_else(|| half_free(&dir));
    let cache = Arc::new(DiskCache::open(&dir, limit)?);
    open.insert((dir, spec.limit), cache.clone());
    Ok(Some(cache))
}

/// Sets the cache of the buckets `paths` name (the default one for `None`); checks that the
/// cache directory can be made.
pub fn register(paths: &[String], spec: Option<&CacheSpec>) -> Result<()> {
    let spec = spec.cloned().unwrap_or_default();
    let mut last: Option<String> = None;
    for p in paths.iter().filter(|p| is_url(p)) {
        if last.as_ref().is_some_and(|b| p.starts_with(b.as_str())) {
            continue;
        }
        let (base, _) = split_url(p)?;
        let cache = resolve(&spec)?;
        RULES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(base.clone(), (spec.clone(), cache));
        last = Some(base + "/");
    }
    Ok(())
}

/// The cache settings a source over `paths` was opened with, for its spec (`None`: local
/// paths or the default cache).
pub fn spec_of(paths: &[String]) -> Option<CacheSpec> {
    let url = paths.iter().find(|p| is_url(p))?;
    let (base, _) = split_url(url).ok()?;
    let rules = RULES.lock().unwrap_or_else(|p| p.into_inner());
    rules
        .get(&base)
        .map(|(spec, _)| spec)
        .filter(|s| **s != CacheSpec::default())
        .cloned()
}

/// The cache serving `url`, if caching is on for its bucket (a bucket no source named gets
/// the default cache, resolved once).
pub fn cache_for(url: &str) -> Option<Arc<DiskCache>> {
    let (base, _) = split_url(url).ok()?;
    let mut rules = RULES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, cache)) = rules.get(&base) {
        return cache.clone();
    }
    let cache = resolve(&CacheSpec::default()).ok().flatten();
    rules.insert(base, (CacheSpec::default(), cache.clone()));
    cache
}

/// Notes what the store said `url` is (a listing, a HEAD, a GET).
pub fn saw(url: &str, size: u64, etag: Option<&str>) {
    let mut v = VERSIONS.lock().unwrap_or_else(|p| p.into_inner());
    v.insert(fnv(url), (size, etag.map_or(0, fnv)));
}

/// One object's version as this process knows it, in a form that travels: (hash of its URL,
/// its size, hash of its ETag). A job ships the versions it listed with a stage
/// ([`versions_of`]) and a worker adopts them ([`adopt_versions`]), so a long-lived worker
/// reads the objects as the job saw them, not as it itself first did.
pub type KnownVersion = [u64; 3];

/// The versions this process knows of `urls` (from listings, HEADs and GETs), and how many of
/// them it knows nothing of.
///
/// ```
/// use sluice_io::store::cache::{saw, versions_of};
/// saw("s3://doc-bucket/a.jpg", 5, Some("\"e1\""));
/// let (known, unknown) = versions_of(["s3://doc-bucket/a.jpg", "s3://doc-bucket/b.jpg"]);
/// assert_eq!((known.len(), unknown), (1, 1));
/// ```
pub fn versions_of<'a>(urls: impl IntoIterator<Item = &'a str>) -> (Vec<KnownVersion>, usize) {
    let v = VERSIONS.lock().unwrap_or_else(|p| p.into_inner());
    let (mut known, mut unknown) = (Vec::new(), 0);
    for url in urls {
        let h = fnv(url);
        match v.get(&h) {
            Some(&(size, etag)) => known.push([h, size, etag]),
            None => unknown += 1,
        }
    }
    (known, unknown)
}

/// Takes a job's view of `urls`: what this process saw of them is forgotten, then `known`
/// (from [`versions_of`] in the job's process) is adopted. A cached copy of another version is
/// then fetched again, and an object the job knew nothing of is checked with a conditional
/// GET on its next read.
///
/// ```
/// use sluice_io::store::cache::{adopt_versions, saw, versions_of};
/// let (a, b) = ("s3://doc-adopt/a.jpg", "s3://doc-adopt/b.jpg");
/// saw(a, 5, Some("\"new\""));
/// let (listed, _) = versions_of([a]); // in the job's process
/// saw(a, 5, Some("\"old\""));        // what a worker saw for an earlier job
/// saw(b, 7, Some("\"old\""));
/// adopt_versions([a, b], &listed);   // the worker opens the job's stage
/// assert_eq!(versions_of([a, b]), (listed, 1));
/// ```
pub fn adopt_versions<'a>(urls: impl IntoIterator<Item = &'a str>, known: &[KnownVersion]) {
    // Any source opened before this call may have noted versions of its own: this comes after.
    let mut v = VERSIONS.lock().unwrap_or_else(|p| p.into_inner());
    for url in urls {
        v.remove(&fnv(url));
    }
    v.extend(known.iter().map(|&[h, size, etag]| (h, (size, etag))));
}

/// Forgets what the store said `url` is: its next read checks a cached copy with a
/// conditional GET.
///
/// ```
/// use sluice_io::store::cache::{forget, saw, versions_of};
/// saw("s3://doc-forget/a.jpg", 5, None);
/// forget("s3://doc-forget/a.jpg");
/// assert_eq!(versions_of(["s3://doc-forget/a.jpg"]).1, 1);
/// ```
pub fn forget(url: &str) {
    let mut v = VERSIONS.lock().unwrap_or_else(|p| p.into_inner());
    v.remove(&fnv(url));
}

/// What this process was last told `url` is (a listing, a HEAD, a GET, or the job's view a
/// worker adopted): its size and its ETag's hash.
pub(crate) fn known(url: &str) -> Option<(u64, u64)> {
    VERSIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&fnv(url))
        .copied()
}

/// Whether `v` is the version of `url` the store last gave (`None`: it was not asked).
fn is_current(url: &str, v: &Version) -> Option<bool> {
    Some(known(url)? == key(v))
}

fn io_error(url: &str, e: std::io::Error) -> Error {
    Error::io(format!("{url} (cached copy)"), e)
}

/// One GET of a whole object (hedged), with its version; `Ok(None)` when `if_none_match` is
/// still its ETag.
async fn get_whole(
    store: &Arc<dyn ObjectStore>,
    path: &ObjPath,
    url: &str,
    lat: &Latency,
    if_none_match: Option<String>,
) -> Result<Option<(Bytes, Version)>> {
    let opts = GetOptions {
        if_none_match,
        ..Default::default()
    };
    let got = hedged(lat, || store.get_opts(path, opts.clone())).await;
    let got = match got {
        Ok(g) => g,
        Err(object_store::Error::NotModified { .. }) => return Ok(None),
        Err(e) => return Err(store_error(url, e)),
    };
    let version = Version {
        size: got.meta.size,
        etag: got.meta.e_tag.clone(),
    };
    saw(url, version.size, version.etag.as_deref());
    let bytes = got.bytes().await.map_err(|e| store_error(url, e))?;
    Ok(Some((bytes, version)))
}

/// A whole object, through the cache of its bucket: a current cached copy is read from disk;
/// otherwise one process on the node downloads it (hedged) and stores it while the others wait.
pub(crate) async fn fetch_object(
    store: Arc<dyn ObjectStore>,
    path: ObjPath,
    url: String,
    lat: Arc<Latency>,
) -> Result<Bytes> {
    let Some(cache) = cache_for(&url) else {
        let got = get_whole(&store, &path, &url, &lat, None).await?;
        return Ok(got.map(|g| g.0).unwrap_or_default());
    };
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(hit) = cache.lookup(&url, |v| is_current(&url, v) != Some(false)) {
            // Read once it is known current: a changed object's stale copy is not read at all.
            let read = |hit: &super::disk::Cached| {
                hit.read_all()
                    .map(Bytes::from)
                    .map_err(|e| io_error(&url, e))
            };
            if is_current(&url, &hit.version).is_some() {
                return read(&hit);
            }
            match get_whole(&store, &path, &url, &lat, hit.version.etag.clone()).await? {
                None => {
                    saw(&url, hit.version.size, hit.version.etag.as_deref());
                    return read(&hit);
                }
                Some((bytes, version)) => {
                    let (cache, url, stored) = (cache.clone(), url.clone(), bytes.clone());
                    in_background(move || store_whole(&cache, &url, &version, &stored));
                    return Ok(bytes);
                }
            }
        }
        if started.elapsed() > WAIT_FOR_OTHER || cache.known_full() {
            let got = get_whole(&store, &path, &url, &lat, None).await?;
            return Ok(got.map(|g| g.0).unwrap_or_default());
        }
        match cache.begin(&url)? {
            // Another process may have stored it between the lookup above and the lock: read
            // its copy (a loaded machine widened that window into a quarter more downloads).
            Some(fill)
                if cache
                    .lookup(&url, |v| is_current(&url, v) != Some(false))
                    .is_some() =>
            {
                drop(fill);
            }
            Some(fill) => {
                let (bytes, version) = get_whole(&store, &path, &url, &lat, None)
                    .await?
                    .unwrap_or_default();
                // Until it is stored, the fill's lock makes other readers of the object wait
                // for this copy rather than fetch it again.
                let (url, stored) = (url.clone(), bytes.clone());
                in_background(move || commit(fill, &url, &version, &stored));
                return Ok(bytes);
            }
            None => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        }
    }
}

fn store_whole(cache: &Arc<DiskCache>, url: &str, version: &Version, bytes: &[u8]) {
    match cache.begin(url) {
        Ok(Some(fill)) => commit(fill, url, version, bytes),
        Ok(None) => {} // another reader is storing it
        Err(e) => log_once(url, &e),
    }
}

/// Hands a cache write to this process's cache writer, a thread of its own: writing a file,
/// waiting for the cache's accounting lock or for the kernel's writeback can take a while,
/// and on one of the I/O runtime's two worker threads it would hold every response and hedge
/// timer queued behind it. The bytes go to the reader at once. One thread, since the
/// accounting lock orders the writes anyway (the runtime's blocking pool grew to hundreds of
/// threads waiting on it in a cold pass). When [`WRITES_QUEUED`] writes wait already, this one
/// is dropped: the object is read again next time, and memory stays bounded.
fn in_background(write: impl FnOnce() + Send + 'static) {
    type Write = Box<dyn FnOnce() + Send>;
    // With the process that started it: a forked child has no such thread, so starts its own.
    static WRITER: Mutex<Option<(u32, crossbeam_channel::Sender<Write>)>> = Mutex::new(None);
    let pid = std::process::id();
    let tx = {
        let mut writer = WRITER.lock().unwrap_or_else(|p| p.into_inner());
        if writer.as_ref().is_none_or(|(at, _)| *at != pid) {
            // A forked child's count is its parent's writes, which it will never see done.
            PENDING.store(0, Relaxed);
            let (tx, rx) = crossbeam_channel::bounded::<Write>(WRITES_QUEUED);
            *writer = std::thread::Builder::new()
                .name("sluice-cache".into())
                .spawn(move || rx.into_iter().for_each(|write| write()))
                .ok()
                .map(|_| (pid, tx));
        }
        writer.as_ref().map(|(_, tx)| tx.clone())
    };
    match tx {
        Some(tx) => {
            PENDING.fetch_add(1, Relaxed);
            let counted = move || {
                write();
                PENDING.fetch_sub(1, Release);
            };
            if tx.try_send(Box::new(counted)).is_err() {
                PENDING.fetch_sub(1, Release);
            }
        }
        None => write(),
    }
}

/// Cache writes handed to this process's writer and not done yet.
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Waits, up to `timeout`, for the cache writes this process handed to its writer: a process
/// that exits right after its last read would otherwise lose the copies it fetched, and the
/// other processes of the node waiting on them (their locks released at its exit) would each
/// download them again. The bindings call it at interpreter exit. Whether all were done.
///
/// ```
/// assert!(sluice_io::store::cache::flush_writes(std::time::Duration::from_secs(1)));
/// ```
pub fn flush_writes(timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while PENDING.load(Acquire) > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Writes the cache writer holds at most (each holds its object's bytes).
const WRITES_QUEUED: usize = 256;

/// Stores a downloaded object; a cache that cannot take it (a full disk) only costs the
/// next read a request.
fn commit(fill: Fill, url: &str, version: &Version, bytes: &[u8]) {
    if let Err(e) = fill.commit(version, bytes) {
        log_once(url, &e);
    }
}

fn log_once(url: &str, e: &Error) {
    static SAID: OnceLock<()> = OnceLock::new();
    if SAID.set(()).is_ok() {
        eprintln!("sluice: the object cache could not store {url}: {e} (reading without it)");
    }
}

/// A large object being downloaded into the cache, part by part, readable as parts land.
#[derive(Debug)]
pub(crate) struct Filling {
    file: File,
    size: u64,
    /// Per part: 0 not started, 1 in flight, 2 landed, 3 failed.
    parts: Mutex<Vec<u8>>,
    landed: Condvar,
}

impl Filling {
    /// The bytes of `r` from the download, waiting for parts in flight; `None` when a part
    /// is not started or failed (read it from the store).
    pub(crate) fn read(&self, r: &Range<u64>) -> Option<Bytes> {
        if r.start >= r.end {
            return Some(Bytes::new());
        }
        let (first, last) = ((r.start / PART) as usize, ((r.end - 1) / PART) as usize);
        let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            // Parts start in order, a window at a time: one within the next window while the
            // download is moving is worth waiting for; one further on (a footer read at the
            // end), or any while nothing is in flight, is read from the store.
            let moving = parts.contains(&1);
            let next = parts.iter().position(|&s| s == 0).unwrap_or(parts.len());
            let states = &parts[first..=last];
            let far =
                (first..=last).any(|p| parts[p] == 0 && (!moving || p >= next + PARTS_IN_FLIGHT));
            if far || states.contains(&3) {
                return None;
            }
            if states.iter().all(|&s| s == 2) {
                break;
            }
            let (next, waited) = self
                .landed
                .wait_timeout(parts, WAIT_FOR_OTHER)
                .unwrap_or_else(|p| p.into_inner());
            if waited.timed_out() {
                return None;
            }
            parts = next;
        }
        drop(parts);
        let mut buf = vec![0u8; (r.end - r.start) as usize];
        self.file.read_exact_at(&mut buf, r.start).ok()?;
        Some(buf.into())
    }

    fn mark(&self, part: usize, state: u8) {
        let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        parts[part] = state;
        self.landed.notify_all();
    }
}

/// Starts downloading `url` (of `version`) into its cache through `fill` (what
/// [`DiskCache::begin`] gave: this process downloads it); `None` when the cache will not store
/// it. When the download completes the object's copy is set in `copy` (reads become local
/// preads).
pub(crate) fn start_fill(
    mut fill: Fill,
    store: &Arc<dyn ObjectStore>,
    path: &ObjPath,
    url: &str,
    version: Version,
    lat: &Arc<Latency>,
    copy: &Arc<OnceLock<File>>,
) -> Option<Arc<Filling>> {
    let cache = fill.cache().clone();
    if !fill.reserve(version.size).ok()? {
        return None;
    }
    let file = fill.file()?.try_clone().ok()?;
    let n = version.size.div_ceil(PART) as usize;
    let pin = super::pinned::if_match(url, version.etag.as_deref());
    let filling = Arc::new(Filling {
        file,
        size: version.size,
        // The first window's parts are in flight from here on: a read right after the open
        // (a Parquet footer) waits for them instead of fetching the same bytes beside them
        // because the download's task had not marked them yet.
        parts: Mutex::new((0..n).map(|i| u8::from(i < PARTS_IN_FLIGHT)).collect()),
        landed: Condvar::new(),
    });
    let rt = super::RUNTIME.as_ref().ok()?;
    let (f, store, path, url, lat, cache, copy) = (
        filling.clone(),
        store.clone(),
        path.clone(),
        url.to_string(),
        lat.clone(),
        cache.clone(),
        copy.clone(),
    );
    rt.spawn(async move {
        // However the task ends (a failure, the runtime shutting down), readers waiting on a
        // part that will not land go to the store instead.
        struct Abandon(Arc<Filling>);
        impl Drop for Abandon {
            fn drop(&mut self) {
                let mut parts = self.0.parts.lock().unwrap_or_else(|p| p.into_inner());
                parts.iter_mut().filter(|s| **s != 2).for_each(|s| *s = 3);
                self.0.landed.notify_all();
            }
        }
        let _abandon = Abandon(f.clone());
        let parts = futures::stream::iter(0..n)
            .map(|i| {
                let (f, store, path, lat, pin) = (&f, &store, &path, &lat, &pin);
                async move {
                    f.mark(i, 1);
                    let r = i as u64 * PART..((i as u64 + 1) * PART).min(f.size);
                    // Pinned: parts of two versions would be stored as the first one's.
                    let got = hedged(lat, || {
                        super::pinned::get_range(&**store, path, r.clone(), pin.clone())
                    })
                    .await;
                    let ok = got.is_ok_and(|b| {
                        b.len() as u64 == r.end - r.start
                            && f.file.write_all_at(&b, r.start).is_ok()
                    });
                    f.mark(i, if ok { 2 } else { 3 });
                    ok
                }
            })
            .buffer_unordered(PARTS_IN_FLIGHT)
            .collect::<Vec<bool>>()
            .await;
        if parts.iter().all(|&ok| ok) {
            match fill.finish(&version) {
                Ok(()) => {
                    if let Some(hit) = cache.lookup(&url, |v| v == &version) {
                        let _ = copy.set(hit.file);
                    }
                }
                Err(e) => log_once(&url, &e),
            }
        }
    });
    Some(filling)
}

/// A current cached copy of `url` read in the caller's thread, as a local file is: `None`
/// when its bucket has no cache, this process was not told its version (a listing, a HEAD) or
/// the cache holds no copy of that version. A warm epoch's hits read this way instead of
/// through a task on the I/O runtime: the hand-off, and buffers allocated on one thread and
/// freed on another, cost a warm CV epoch ~50 µs of CPU per image (docs/BENCHMARKS.md,
/// "Warm hits read where they are used").
pub(crate) fn read_current(url: &str) -> Option<Result<Bytes>> {
    let known = known(url)?;
    let hit = cache_for(url)?.lookup(url, |v| key(v) == known)?;
    Some(
        hit.read_all()
            .map(Bytes::from)
            .map_err(|e| io_error(url, e)),
    )
}

/// Whether [`read_current`] will likely find `url` (its version known, a copy in place: one
/// `stat`, no trailer read): a fetch ahead of it would only read the disk on another thread.
pub(crate) fn likely_current(url: &str) -> bool {
    known(url).is_some() && cache_for(url).is_some_and(|c| c.holds(url))
}

/// The cached copy of `url` whose version is `known` (its size and ETag's hash, as
/// [`known`] gives them), if the cache holds it.
pub(crate) fn cached_copy(cache: &DiskCache, url: &str, known: (u64, u64)) -> Option<File> {
    cache.lookup(url, |v| key(v) == known).map(|c| c.file)
}

/// `v` as [`known`] gives a version.
pub(crate) fn key(v: &Version) -> (u64, u64) {
    (v.size, v.etag.as_deref().map_or(0, fnv))
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
