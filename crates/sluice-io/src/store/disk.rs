//! The node-local cache of remote objects: one directory shared by every process, rank and job
//! on a node, capped in bytes; a full cache keeps what was used within a window that covers
//! an epoch and evicts the rest, least recently used first ([`super::reuse`]).
//!
//! Layout under the cache directory:
//! - `objects/<2 hex>/<32 hex>`: a cached object, its bytes then a trailer naming its URL, its
//!   ETag and its size (a hash collision or an object changed in its bucket is a miss, never
//!   wrong bytes; a file cut short fails the trailer check);
//! - `tmp/<32 hex>.<pid>.<n>`: a download in progress, made as long as the object at once, so
//!   the bytes it will take count against the cap from the start;
//! - `usage`: the bytes held (objects + downloads in progress), a counter every process updates;
//! - `lock`: byte 0 guards `usage` and eviction;
//! - `fills/<hex digit>`: one of 16 files, by the object's hash; byte `hash mod 2⁴⁰` is held by
//!   the one process downloading that object.
//!
//! Both are open file description locks ([`libc::F_OFD_SETLK`]) on single bytes. The kernel
//! drops them when their holder exits, so a killed download never blocks anyone; its
//! temporary file is removed by the next eviction scan (its lock is free). The kernel walks
//! every lock on a file to take or release one, so the downloads in flight (hundreds per
//! process, from every process of the node) are spread over 16 files and kept off `lock`,
//! which every download takes twice: on one file each of those took a walk as long as all
//! the downloads, ~4 % of a cold pass's client CPU with one process (`perf`,
//! `benchmarks/bucket.py`'s raw case). A process of a sluice from before this layout locks
//! its downloads in `lock`, so beside one of these the same object can be fetched twice at
//! once: both copies are whole and the later rename wins.
//!
//! A download becomes visible by `rename` only once complete, so a partial object is never read.
//! Eviction scans the directory only when the counter passes the cap, removes the least
//! recently used objects idle past the window down to 90 % of it and resets the counter from
//! what it found (healing counts a crash left behind); when that is not enough the object is
//! read without being stored, and the cache is not scanned again until something may leave.
//! Readers with a file open keep reading an evicted object.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sluice_core::{Error, Result};

const MAGIC: u64 = 0x3145_4843_4143_4c53; // "SLCACHE1", little-endian
/// Fixed part of the trailer: url length, etag length (u32 each), size, magic (u64 each).
const FIXED: u64 = 24;
/// Eviction frees down to this share of the cap, so a full cache is not scanned per download.
const EVICT_TO: f64 = 0.9;
/// A hit refreshes an object's recency at most this often (one `futimens`).
const TOUCH_EVERY: Duration = Duration::from_secs(30);

/// What an object is in its store: its size and, when the store gives one, its ETag.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Version {
    pub size: u64,
    pub etag: Option<String>,
}

/// A cached object, open: its first `size` bytes are the object's.
#[derive(Debug)]
pub struct Cached {
    pub file: File,
    pub version: Version,
}

impl Cached {
    /// The whole object in memory.
    pub fn read_all(&self) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; self.version.size as usize];
        self.file.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
}

/// One cache directory with its byte cap.
///
/// ```
/// use sluice_io::store::disk::{DiskCache, Version};
/// let dir = tempfile::tempdir().unwrap();
/// let cache = std::sync::Arc::new(DiskCache::open(dir.path(), 1 << 20).unwrap());
/// let v = Version { size: 5, etag: Some("\"e1\"".into()) };
/// let fill = cache.begin("s3://b/k").unwrap().expect("nobody else is filling it");
/// fill.commit(&v, b"hello").unwrap();
/// let hit = cache.lookup("s3://b/k", |got| got == &v).unwrap();
/// assert_eq!(hit.read_all().unwrap(), b"hello");
/// // The object changed in its bucket: a miss.
/// assert!(cache.lookup("s3://b/k", |got| got.etag.as_deref() == Some("\"e2\"")).is_none());
/// ```
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    limit: u64,
    /// This process's descriptions of `lock` and `usage`, opened once: the accounting lock is
    /// taken twice or more per download, and opening both files each time was most of its
    /// cost. The mutex orders this process's threads (locks on one description do not
    /// exclude each other); the byte lock on it, the other processes.
    books: Mutex<Option<Books>>,
    /// When this process sees its objects used again: what a full cache keeps.
    reuse: super::reuse::Reuse,
}

/// The accounting files, open, and the process that opened them: a forked child reopens
/// them, since descriptions it inherited would share its parent's locks.
#[derive(Debug)]
struct Books {
    pid: u32,
    lock: File,
    usage: File,
}

/// Holds byte 0 of `lock` (the accounting lock) until dropped.
struct Accounting<'a>(&'a File);

impl Drop for Accounting<'_> {
    fn drop(&mut self) {
        let _ = set_lock(self.0, 0, libc::F_UNLCK, false);
    }
}

/// What an eviction scan keeps: objects used since `since` (`window` ago); `next` is when
/// the first of them leaves the window.
#[derive(Debug, Clone, Copy)]
struct Keep {
    since: SystemTime,
    window: Duration,
    next: Option<SystemTime>,
}

/// The download of one object, holding its lock: [`Fill::commit`] (or [`Fill::finish`] after
/// writing through [`Fill::file`]) makes it visible; dropped unfinished, it leaves nothing.
#[derive(Debug)]
pub struct Fill {
    cache: Arc<DiskCache>,
    url: String,
    hash: u128,
    _lock: File,
    tmp: Option<(PathBuf, File)>,
    /// Bytes counted in `usage` for the download (0 until [`Fill::reserve`]).
    reserved: u64,
}

/// A 128-bit hash of a URL (two FNV-1a passes with other offsets): file names, not security —
/// the trailer holds the URL, so a collision is a miss.
fn hash_url(url: &str) -> u128 {
    let pass = |mut h: u64| {
        for b in url.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    ((pass(0xcbf2_9ce4_8422_2325) as u128) << 64) | pass(0x84222325cbf29ce4) as u128
}

/// Which of the 16 fill lock files holds `hash`'s download lock. FNV's top bits barely
/// change between URLs that differ in their last bytes (`…/0`, `…/1`), so the two halves are
/// mixed by a multiply first.
fn fill_shard(hash: u128) -> u64 {
    ((hash as u64) ^ ((hash >> 64) as u64)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60
}

fn trailer(url: &str, v: &Version) -> Vec<u8> {
    let etag = v.etag.as_deref().unwrap_or("");
    let mut t = Vec::with_capacity(url.len() + etag.len() + FIXED as usize);
    t.extend_from_slice(url.as_bytes());
    t.extend_from_slice(etag.as_bytes());
    t.extend_from_slice(&(url.len() as u32).to_le_bytes());
    t.extend_from_slice(&(etag.len() as u32).to_le_bytes());
    t.extend_from_slice(&v.size.to_le_bytes());
    t.extend_from_slice(&MAGIC.to_le_bytes());
    t
}

/// The URL and version a cached file's trailer names (`None`: not a complete cached object).
fn read_trailer(file: &File, len: u64) -> Option<(String, Version)> {
    let mut fixed = [0u8; FIXED as usize];
    file.read_exact_at(&mut fixed, len.checked_sub(FIXED)?)
        .ok()?;
    let word = |i: usize| u64::from_le_bytes(fixed[i..i + 8].try_into().unwrap_or_default());
    let url_len = u32::from_le_bytes(fixed[0..4].try_into().ok()?) as u64;
    let etag_len = u32::from_le_bytes(fixed[4..8].try_into().ok()?) as u64;
    let size = word(8);
    if word(16) != MAGIC || size.checked_add(url_len + etag_len + FIXED)? != len {
        return None;
    }
    let mut names = vec![0u8; (url_len + etag_len) as usize];
    file.read_exact_at(&mut names, size).ok()?;
    let etag = String::from_utf8(names.split_off(url_len as usize)).ok()?;
    let url = String::from_utf8(names).ok()?;
    let etag = (!etag.is_empty()).then_some(etag);
    Some((url, Version { size, etag }))
}

/// Takes an open-file-description write lock on byte `at` of `file`; `false` when another
/// holder has it and `wait` is false. Released when the file is closed.
fn lock_byte(file: &File, at: u64, wait: bool) -> io::Result<bool> {
    set_lock(file, at, libc::F_WRLCK, wait)
}

/// `fcntl` with an open-file-description lock of `kind` (`F_WRLCK` or `F_UNLCK`) on byte `at`.
fn set_lock(file: &File, at: u64, kind: libc::c_int, wait: bool) -> io::Result<bool> {
    // SAFETY: `flock` is plain data; zeroed is a valid value before the fields are set.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = at as libc::off_t;
    fl.l_len = 1;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        // SAFETY: a valid descriptor and a pointer to a live `flock`.
        if unsafe { libc::fcntl(file.as_raw_fd(), cmd, &fl) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if !wait => return Ok(false),
            _ => return Err(e),
        }
    }
}

impl DiskCache {
    /// Opens (creating) the cache at `dir`, holding at most `limit` bytes.
    pub fn open(dir: &Path, limit: u64) -> Result<DiskCache> {
        for sub in ["objects", "tmp", "fills"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| Error::io(format!("{} (object cache)", dir.display()), e))?;
        }
        let cache = DiskCache {
            dir: dir.to_path_buf(),
            limit,
            books: Mutex::new(None),
            reuse: Default::default(),
        };
        cache.lock_file()?;
        Ok(cache)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cap in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    fn err(&self, what: impl std::fmt::Display, e: io::Error) -> Error {
        Error::io(format!("{} (object cache: {what})", self.dir.display()), e)
    }

    /// A new open file description of `lock` (each lock holder needs its own: locks on one
    /// description do not exclude each other).
    fn lock_file(&self) -> Result<File> {
        self.open_lock(self.dir.join("lock"), "lock file")
    }

    /// A new open file description of the file holding the download lock of `hash`, and the
    /// byte to lock in it.
    fn fill_lock(&self, hash: u128) -> Result<(File, u64)> {
        let path = self
            .dir
            .join("fills")
            .join(format!("{:x}", fill_shard(hash)));
        let file = self.open_lock(path, "download lock file")?;
        Ok((file, hash as u64 & ((1 << 40) - 1)))
    }

    /// Opens (creating) a lock file: a new open file description of it.
    fn open_lock(&self, path: PathBuf, what: &str) -> Result<File> {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| self.err(what, e))
    }

    fn object_path(&self, hash: u128) -> PathBuf {
        let name = format!("{hash:032x}");
        self.dir.join("objects").join(&name[..2]).join(name)
    }

    /// The cached copy of `url`, if there is one whose version `fits` (the caller compares it
    /// with what the store says, or asks the store).
    pub fn lookup(&self, url: &str, fits: impl Fn(&Version) -> bool) -> Option<Cached> {
        let file = File::open(self.object_path(hash_url(url))).ok()?;
        let meta = file.metadata().ok()?;
        let (named, version) = read_trailer(&file, meta.len())?;
        let fits = named == url && fits(&version);
        if !fits {
            return None;
        }
        let now = SystemTime::now();
        let idle = (meta.modified().ok()).and_then(|m| now.duration_since(m).ok());
        if let Some(idle) = idle {
            self.reuse.hit(idle);
        }
        if idle.is_some_and(|d| d > TOUCH_EVERY) {
            // Recency for eviction; a read-only file of another user cannot be touched.
            let _ = file.set_modified(now);
        }
        Some(Cached { file, version })
    }

    /// Whether this process found the cache full (nothing it may evict) and something may
    /// leave only later: a download is then read without being offered to the cache, which
    /// would only take its locks to say no (a capped epoch's misses paid more CPU than
    /// reads without the cache: docs/BENCHMARKS.md, "a full cache's misses").
    pub fn known_full(&self) -> bool {
        self.reuse.full_at(SystemTime::now())
    }

    /// Whether a file for `url` is in place — one `stat`, with no check of its trailer: a
    /// planning hint, for callers whose later [`DiskCache::lookup`] handles a miss.
    pub fn holds(&self, url: &str) -> bool {
        self.object_path(hash_url(url)).exists()
    }

    /// Starts filling `url`: `None` when another process or thread is downloading it now
    /// (look it up again a little later).
    pub fn begin(self: &Arc<Self>, url: &str) -> Result<Option<Fill>> {
        let hash = hash_url(url);
        let (lock, at) = self.fill_lock(hash)?;
        if !lock_byte(&lock, at, false).map_err(|e| self.err("lock", e))? {
            return Ok(None);
        }
        Ok(Some(Fill {
            cache: self.clone(),
            url: url.to_string(),
            hash,
            _lock: lock,
            tmp: None,
            reserved: 0,
        }))
    }

    /// Runs `change` under the accounting lock with the bytes held; it returns how that
    /// count changes. Every change to what the directory holds (a download reserved, sealed or
    /// dropped) goes through here, so a scan never misses a reservation made beside it.
    fn with_usage<T>(&self, change: impl FnOnce(&Self, u64) -> Result<(i64, T)>) -> Result<T> {
        let mut books = self.books.lock().unwrap_or_else(|p| p.into_inner());
        let pid = std::process::id();
        if books.as_ref().is_none_or(|b| b.pid != pid) {
            let usage = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(self.dir.join("usage"))
                .map_err(|e| self.err("usage", e))?;
            *books = Some(Books {
                pid,
                lock: self.lock_file()?,
                usage,
            });
        }
        let Some(Books { lock, usage, .. }) = books.as_ref() else {
            unreachable!("opened above")
        };
        lock_byte(lock, 0, true).map_err(|e| self.err("lock", e))?;
        let _held = Accounting(lock);
        let mut word = [0u8; 8];
        let held = match usage.read_exact_at(&mut word, 0) {
            Ok(()) => u64::from_le_bytes(word),
            Err(_) => self.scan_and_evict(u64::MAX, None)?.0,
        };
        let (delta, out) = change(self, held)?;
        usage
            .write_all_at(&held.saturating_add_signed(delta).to_le_bytes(), 0)
            .map_err(|e| self.err("usage", e))?;
        Ok(out)
    }

    /// Makes room for `size` more bytes within the cap (evicting if needed); under the
    /// accounting lock, given the bytes held. Returns the bytes held after eviction, or `None`
    /// when `size` does not fit even so — or is over half the cap: one object would evict
    /// everything else.
    ///
    /// Objects used within the window of [`super::reuse`] are not evicted for it: when only
    /// those are left, `size` does not fit.
    fn make_room(&self, held: u64, size: u64) -> Result<Option<u64>> {
        if size > self.limit / 2 {
            return Ok(None);
        }
        if held + size <= self.limit {
            return Ok(Some(held));
        }
        let now = SystemTime::now();
        if self.reuse.full_at(now) {
            return Ok(None);
        }
        let window = self.reuse.window();
        let keep = Keep {
            since: now.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH),
            window,
            next: None,
        };
        let target = ((self.limit as f64 * EVICT_TO) as u64).saturating_sub(size);
        let (after, kept) = self.scan_and_evict(target, Some(keep))?;
        // What is left may be downloads in progress elsewhere, or objects kept.
        let fits = after + size <= self.limit;
        if !fits {
            self.reuse.found_full(now, kept.and_then(|k| k.next));
        }
        Ok(fits.then_some(after))
    }

    /// Under the accounting lock: removes abandoned downloads, then the least recently used
    /// objects until at most `target` bytes are held — except those used since `keep.since`;
    /// returns the bytes held after, and `keep` with the time the first object kept leaves
    /// its window.
    fn scan_and_evict(&self, target: u64, mut keep: Option<Keep>) -> Result<(u64, Option<Keep>)> {
        let mut held = 0u64;
        let tmp_dir = self.dir.join("tmp");
        for entry in std::fs::read_dir(&tmp_dir).map_err(|e| self.err("tmp", e))? {
            let Ok(entry) = entry else { continue };
            let path = entry.path();
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            let hash = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split('.').next())
                .and_then(|h| u128::from_str_radix(h, 16).ok());
            // Its download's lock is free: the process that made it is gone.
            let abandoned = match hash {
                Some(h) => {
                    let (probe, at) = self.fill_lock(h)?;
                    lock_byte(&probe, at, false).unwrap_or(false)
                }
                None => true,
            };
            if abandoned {
                let _ = std::fs::remove_file(&path);
            } else {
                held += len;
            }
        }
        let mut objects: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        let top =
            std::fs::read_dir(self.dir.join("objects")).map_err(|e| self.err("objects", e))?;
        for sub in top.flatten() {
            let Ok(files) = std::fs::read_dir(sub.path()) else {
                continue;
            };
            for f in files.flatten() {
                if let Ok(m) = f.metadata() {
                    let when = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    objects.push((when, m.len(), f.path()));
                }
            }
        }
        held += objects.iter().map(|o| o.1).sum::<u64>();
        objects.sort_unstable_by_key(|o| o.0);
        for (when, len, path) in objects {
            if held <= target {
                break;
            }
            if let Some(k) = keep.as_mut().filter(|k| when >= k.since) {
                // The oldest kept object: the rest are newer.
                k.next = Some(when + k.window);
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                held -= len;
            }
        }
        Ok((held, keep))
    }

    /// Bytes the cache holds now (objects and downloads in progress), from its directory (the
    /// count every process keeps is set to it).
    pub fn held_bytes(&self) -> Result<u64> {
        self.with_usage(|cache, held| {
            let (found, _) = cache.scan_and_evict(u64::MAX, None)?;
            Ok((found as i64 - held as i64, found))
        })
    }

    /// Moves a sealed download at `from` to `dest`, making its folder when it is the first
    /// object there.
    fn publish(&self, from: &Path, dest: &Path) -> io::Result<()> {
        match std::fs::rename(from, dest) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dest.parent().unwrap_or(Path::new(".")))?;
                std::fs::rename(from, dest)
            }
            done => done,
        }
    }
}

impl Fill {
    /// The cache it fills.
    pub(crate) fn cache(&self) -> &Arc<DiskCache> {
        &self.cache
    }

    /// A new name for this download's temporary file (its hash first: the eviction scan
    /// finds its lock by it).
    fn tmp_path(&self) -> PathBuf {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Relaxed);
        let name = format!("{:032x}.{}.{n}", self.hash, std::process::id());
        self.cache.dir.join("tmp").join(name)
    }

    /// Counts `size` bytes of object (plus its trailer) against the cap and makes the
    /// temporary file that long; `false`: it does not fit (read it without caching).
    pub fn reserve(&mut self, size: u64) -> Result<bool> {
        let total = size + trailer(&self.url, &Version { size, etag: None }).len() as u64 + 256;
        let path = self.tmp_path();
        let file = self.cache.with_usage(|cache, held| {
            let Some(after) = cache.make_room(held, total)? else {
                return Ok((0, None));
            };
            let file = File::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .and_then(|f| f.set_len(total).map(|()| f))
                .map_err(|e| cache.err("download", e))?;
            Ok((after as i64 - held as i64 + total as i64, Some(file)))
        })?;
        let Some(file) = file else {
            return Ok(false);
        };
        self.reserved = total;
        self.tmp = Some((path, file));
        Ok(true)
    }

    /// The temporary file to write the object's bytes into (at their offsets), after
    /// [`Fill::reserve`].
    pub fn file(&self) -> Option<&File> {
        self.tmp.as_ref().map(|(_, f)| f)
    }

    /// Stores `data` as the object `version` describes. With nothing reserved yet (the whole
    /// object in hand) that is one hold of the accounting lock: room made, the file written
    /// and renamed into place, the count changed.
    pub fn commit(self, version: &Version, data: &[u8]) -> Result<()> {
        if let Some((_, f)) = &self.tmp {
            f.write_all_at(data, 0)
                .map_err(|e| self.cache.err("download", e))?;
            return self.finish(version);
        }
        let t = trailer(&self.url, version);
        let total = data.len() as u64 + t.len() as u64;
        let path = self.tmp_path();
        let dest = self.cache.object_path(self.hash);
        let stored = self.cache.with_usage(|cache, held| {
            let Some(after) = cache.make_room(held, total)? else {
                return Ok((0, Ok(()))); // it does not fit: read without caching
            };
            let replaced = std::fs::metadata(&dest).map_or(0, |m| m.len());
            let done = File::options()
                .write(true)
                .create_new(true)
                .open(&path)
                .and_then(|f| {
                    f.write_all_at(data, 0)?;
                    f.write_all_at(&t, data.len() as u64)
                })
                .and_then(|()| cache.publish(&path, &dest));
            // What eviction freed counts either way.
            let freed = after as i64 - held as i64;
            match done {
                Ok(()) => Ok((freed + total as i64 - replaced as i64, Ok(()))),
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    Ok((freed, Err(cache.err("download", e))))
                }
            }
        })?;
        stored
    }

    /// Seals the bytes written through [`Fill::file`] with their trailer and makes the object
    /// visible (an atomic rename over any older copy).
    pub fn finish(mut self, version: &Version) -> Result<()> {
        let Some((path, file)) = self.tmp.take() else {
            return Ok(());
        };
        let t = trailer(&self.url, version);
        let total = version.size + t.len() as u64;
        let dest = self.cache.object_path(self.hash);
        let reserved = std::mem::take(&mut self.reserved);
        let sealed = self.cache.with_usage(|cache, _| {
            let replaced = std::fs::metadata(&dest).map_or(0, |m| m.len());
            let done = file
                .write_all_at(&t, version.size)
                .and_then(|()| file.set_len(total))
                .and_then(|()| cache.publish(&path, &dest));
            match done {
                // The reservation becomes the object's size; an older copy it replaced is freed.
                Ok(()) => Ok((total as i64 - (reserved + replaced) as i64, Ok(()))),
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    Ok((-(reserved as i64), Err(cache.err("download", e))))
                }
            }
        })?;
        sealed?;
        Ok(())
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        if let Some((path, _)) = self.tmp.take() {
            let reserved = std::mem::take(&mut self.reserved) as i64;
            let _ = self.cache.with_usage(|_, _| {
                let _ = std::fs::remove_file(&path);
                Ok((-reserved, ()))
            });
        }
    }
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
