//! Shared-memory segments for the big buffers of one frame.
//!
//! The writer puts every large buffer of a frame into one file under `/dev/shm` (a tmpfs:
//! the pages never touch a disk) and sends only its name; the reader maps it, unlinks it at
//! once and copies the buffers out. So a 10 MB tensor costs two memcpys instead of a trip
//! through a 64 KiB pipe buffer, and a segment lives only while a frame is in flight. Names
//! carry a per-pool prefix, `sluice-<pid>-<start>.<ns>-<random>-<pool>-` ([`ShmConfig::for_pool`]):
//! the pool sweeps what a crashed worker left under it at shutdown, and the first pool of a
//! later process removes the segments of pools whose process is dead (a SIGKILLed trainer).
//! The random part keeps another user from creating a segment's name first; a name that is
//! taken anyway is skipped for a fresh random one.
//!
//! The codec reaches it through its buffer traits: [`ShmSink`] is a
//! [`BufferSink`] that collects a frame's big buffers, and a received `Segment` hands them back.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use memmap2::{Mmap, MmapMut};
use serde::{Deserialize, Serialize};
use sluice_core::codec::{Buffer, BufferSink, Out};
use sluice_core::scratch;

/// A segment that cannot be written or opened.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShmError {
    /// A name that is not one this module makes (a corrupt or hostile frame).
    #[error("bad segment name {0:?}")]
    BadName(String),
    /// The file system refused.
    #[error("shared memory segment {name}: {message}")]
    Io { name: String, message: String },
}

/// Buffer tag of a buffer in the frame's segment: its offset and length follow (u64 each).
pub const SHM_TAG: u8 = 1;

/// Where and how a sender writes segments.
///
/// ```
/// let cfg = sluice_remote::ShmConfig::new("sluice-doc-");
/// assert!(cfg.threshold >= 4096);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmConfig {
    /// Directory of the segments (`/dev/shm` on Linux).
    pub dir: PathBuf,
    /// Name prefix of this sender's segments (unique per pool and sender).
    pub prefix: String,
    /// Buffers of at least this many bytes go through shared memory; smaller ones inline.
    pub threshold: usize,
}

/// Buffers below this size are cheaper to copy through the pipe than to map.
pub const DEFAULT_THRESHOLD: usize = 64 * 1024;

impl ShmConfig {
    /// Segments named `prefix…` in the default directory, with the default threshold.
    pub fn new(prefix: impl Into<String>) -> Self {
        ShmConfig {
            dir: default_dir(),
            prefix: prefix.into(),
            threshold: DEFAULT_THRESHOLD,
        }
    }
    /// The segments of this process's pool number `pool` in the default directory:
    /// `sluice-<pid>-<start>.<ns>-<random>-<pool>-` (the process's [`scratch::tag`] split after
    /// the pid, so the name still starts `sluice-<pid>-`). The first call in a process removes the
    /// segments there that dead processes left.
    ///
    /// ```
    /// let a = sluice_remote::ShmConfig::for_pool(0);
    /// assert!(a.prefix.starts_with(&format!("sluice-{}-", std::process::id())));
    /// assert_ne!(a.prefix, sluice_remote::ShmConfig::for_pool(0).prefix);
    /// ```
    pub fn for_pool(pool: u64) -> Self {
        let dir = default_dir();
        sweep_dead(&dir);
        let tag = scratch::tag();
        let (pid, rest) = tag.split_once('.').unwrap_or((&tag, "0"));
        let prefix = format!("sluice-{pid}-{rest}-{}-{pool}-", scratch::random_hex());
        ShmConfig {
            dir,
            ..ShmConfig::new(prefix)
        }
    }
    /// The same directory and threshold with another name prefix (one per sender).
    pub fn with_prefix(&self, prefix: impl Into<String>) -> Self {
        ShmConfig {
            prefix: prefix.into(),
            ..self.clone()
        }
    }
    /// Removes segments left under this prefix (by a peer that died mid-frame).
    pub fn sweep(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&self.prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// The owner tag of a segment name (see [`scratch::owner_in`]): `<pid>.<start>.<ns>` of
/// `sluice-<pid>-<start>.<ns>-<random>-…`, or the pid of `sluice-<pid>-<pool>-…` as older
/// versions named them (judged by pid alone).
fn segment_owner(name: &str) -> Option<String> {
    let mut parts = name.strip_prefix("sluice-")?.split('-');
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (pid, second, third) = (parts.next()?, parts.next()?, parts.next()?);
    if !digits(pid) || !second.split('.').all(digits) {
        return None;
    }
    let random = third.len() == 16 && third.bytes().all(|b| b.is_ascii_hexdigit());
    match (random, second.contains('.')) {
        (true, _) => Some(format!("{pid}.{second}")),
        (false, false) => Some(pid.to_string()),
        (false, true) => None,
    }
}

/// Removes segments in `dir` whose process is dead, once per process.
fn sweep_dead(dir: &Path) -> usize {
    scratch::sweep_files_once(dir, "shm", segment_owner)
}

/// `/dev/shm` where it exists (Linux), else the temporary directory.
pub fn default_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Creates uniquely named segments under one [`ShmConfig`].
#[derive(Debug)]
pub struct ShmWriter {
    pub config: ShmConfig,
    next: AtomicU64,
}

impl ShmWriter {
    /// A writer for `config`.
    pub fn new(config: ShmConfig) -> Self {
        ShmWriter {
            config,
            next: AtomicU64::new(0),
        }
    }
    /// Creates a new segment file (mode 0600: segments hold the pipeline's data and
    /// `/dev/shm` is shared by every user), under a random name when the next one is taken.
    fn create(&self) -> Result<(String, PathBuf, File), ShmError> {
        let base = format!("{}{}", self.config.prefix, self.next.fetch_add(1, Relaxed));
        let mut name = base.clone();
        for _ in 0..8 {
            let path = self.config.dir.join(&name);
            match scratch::create_new_file(&path, 0o600) {
                Ok(file) => return Ok((name, path, file)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    name = format!("{base}-{}", scratch::random_hex());
                }
                Err(e) => {
                    return Err(ShmError::Io {
                        name: path.display().to_string(),
                        message: e.to_string(),
                    })
                }
            }
        }
        Err(ShmError::Io {
            name: self.config.dir.join(&base).display().to_string(),
            message: "this name and 8 random ones beside it are taken by other files; \
                      is another process creating files there?"
                .into(),
        })
    }
    /// Writes `parts` at their offsets into a new segment of `len` bytes; returns its name.
    fn write(&self, len: u64, parts: &[(u64, &[u8])]) -> Result<String, ShmError> {
        let (name, path, file) = self.create()?;
        let fail = |e: std::io::Error| ShmError::Io {
            name: path.display().to_string(),
            message: e.to_string(),
        };
        let filled = (|| {
            file.set_len(len)?;
            // SAFETY: the file was just created by us (create_new) and nobody else knows
            // its name yet, so no one can truncate it while it is mapped.
            let mut map = unsafe { MmapMut::map_mut(&file)? };
            for (off, bytes) in parts {
                let off = *off as usize;
                map[off..off + bytes.len()].copy_from_slice(bytes);
            }
            Ok(())
        })();
        if let Err(e) = filled {
            let _ = std::fs::remove_file(&path);
            return Err(fail(e));
        }
        Ok(name)
    }
}

/// The big buffers of one frame on their way into a segment: a [`BufferSink`] that takes
/// buffers of at least the writer's threshold, borrowed until [`ShmSink::finish`].
#[derive(Debug)]
pub struct ShmSink<'a> {
    writer: &'a ShmWriter,
    parts: Vec<(u64, &'a [u8])>,
    len: u64,
}

impl<'a> ShmSink<'a> {
    /// A sink writing through `writer`.
    pub fn new(writer: &'a ShmWriter) -> Self {
        ShmSink {
            writer,
            parts: Vec::new(),
            len: 0,
        }
    }
    /// Writes the segment; returns its name, or an empty one when no buffer was taken.
    pub fn finish(self) -> Result<String, ShmError> {
        if self.parts.is_empty() {
            return Ok(String::new());
        }
        self.writer.write(self.len, &self.parts)
    }
}

impl<'a> BufferSink<'a> for ShmSink<'a> {
    fn store(&mut self, buf: Buffer<'a>, out: &mut Out) -> bool {
        let b = buf.bytes();
        if b.len() < self.writer.config.threshold.max(1) {
            return false;
        }
        // 64-byte aligned offsets keep the copies out on cache-line boundaries.
        let off = self.len.div_ceil(64) * 64;
        self.parts.push((off, b));
        self.len = off + b.len() as u64;
        out.u8(SHM_TAG);
        out.u64(off);
        out.u64(b.len() as u64);
        true
    }
}

/// A received segment, mapped read-only; its file is already unlinked.
pub(crate) struct Segment {
    map: Mmap,
}

impl Segment {
    /// Maps segment `name` in `dir` and unlinks it.
    pub(crate) fn open(dir: &Path, name: &str) -> Result<Segment, ShmError> {
        // A corrupt or hostile frame must not name a path outside the segment directory.
        let valid = !name.is_empty()
            && name.len() <= 200
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            && !name.starts_with('.');
        if !valid {
            return Err(ShmError::BadName(name.to_string()));
        }
        let path = dir.join(name);
        let fail = |e: std::io::Error| ShmError::Io {
            name: path.display().to_string(),
            message: e.to_string(),
        };
        let file = File::open(&path).map_err(fail)?;
        let _ = std::fs::remove_file(&path);
        // SAFETY: the writer finished writing before sending the name and never touches the
        // segment again; the file is unlinked, so no one else can open and truncate it.
        let map = unsafe { Mmap::map(&file).map_err(fail)? };
        Ok(Segment { map })
    }
    /// The segment's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-shm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn big_buffers_land_aligned_in_one_segment_that_opening_unlinks() {
        let d = dir("sink");
        let w = ShmWriter::new(ShmConfig {
            dir: d.clone(),
            prefix: "s-".into(),
            threshold: 3,
        });
        let bytes = |b: &[u8]| -> Arc<[u8]> { Arc::from(b) };
        let (a, b, small) = (bytes(&[1u8; 5]), bytes(&[2u8; 3]), bytes(&[9u8]));
        let mut sink = ShmSink::new(&w);
        let mut out = Out::default();
        assert!(
            !sink.store(Buffer::Bytes(&small), &mut out),
            "below threshold"
        );
        assert!(out.is_empty());
        assert!(sink.store(Buffer::Bytes(&a), &mut out));
        assert!(sink.store(Buffer::Bytes(&b), &mut out));
        let refs = out.into_vec();
        assert_eq!(refs.len(), 2 * 17);
        assert_eq!(&refs[18..26], &64u64.to_le_bytes(), "second buffer at 64");
        let name = sink.finish().unwrap();
        let seg = Segment::open(&d, &name).unwrap();
        assert_eq!(seg.bytes().len(), 67);
        assert_eq!((&seg.bytes()[..5], &seg.bytes()[64..]), (&a[..], &b[..]));
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0, "unlinked");
        assert!(matches!(Segment::open(&d, &name), Err(ShmError::Io { .. })));
        // No buffer taken: no segment.
        assert_eq!(ShmSink::new(&w).finish().unwrap(), "");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn names_outside_the_directory_are_refused_before_any_file_access() {
        for bad in ["", "../passwd", ".hidden", "a/b", &"x".repeat(201)] {
            assert!(matches!(
                Segment::open(Path::new("/nonexistent"), bad),
                Err(ShmError::BadName(_))
            ));
        }
    }

    #[test]
    fn segments_of_dead_processes_are_swept_and_live_ones_kept() {
        let d = dir("sweep");
        let (dead, start) = sluice_core::scratch::dead_process();
        let me = std::process::id();
        let my_start = scratch::tag().split_once('.').unwrap().1.to_string();
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let names = [
            // (name, swept)
            (format!("sluice-{dead}-{start}-0123456789abcdef-0-q0"), true),
            (format!("sluice-{dead}-0-rw77-3"), true), // an older version's name
            (
                format!("sluice-{me}-{my_start}-0123456789abcdef-0-q1"),
                false,
            ),
            (format!("sluice-{me}-0-q0"), false),
            // Same pid, another start time: the pid was reused, the owner is dead.
            (format!("sluice-{me}-1-0123456789abcdef-0-q2"), true),
            ("sluice-notapid-0-q0".to_string(), false),
            // Another pid namespace (a container sharing /dev/shm): never judged.
            (
                format!("sluice-{dead}-{start}.1-0123456789abcdef-0-q3"),
                false,
            ),
        ];
        for (n, _) in &names {
            std::fs::write(d.join(n), b"x").unwrap();
        }
        // Links and directories of a dead owner's name are never ours: left alone.
        let link = format!("sluice-{dead}-0-q9");
        std::os::unix::fs::symlink(&victim, d.join(&link)).unwrap();
        std::fs::create_dir(d.join(format!("sluice-{dead}-0-dir"))).unwrap();
        assert_eq!(sweep_dead(&d), 3);
        for (n, swept) in &names {
            assert_eq!(!d.join(n).exists(), *swept, "{n}");
        }
        assert!(d.join(&link).symlink_metadata().is_ok());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(d.join(format!("sluice-{dead}-0-dir")).is_dir());
        std::fs::write(d.join(&names[0].0), b"x").unwrap();
        assert_eq!(sweep_dead(&d), 0, "once per process and directory");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn a_taken_segment_name_is_skipped_for_a_random_one() {
        let d = dir("squat");
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let w = ShmWriter::new(ShmConfig {
            dir: d.clone(),
            prefix: "p-".into(),
            threshold: 1,
        });
        // Names planted in advance: a file and a link to a file the trainer can write.
        std::fs::write(d.join("p-0"), b"squat").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("p-1")).unwrap();
        let data: Arc<[u8]> = Arc::from(&b"abcdefgh"[..]);
        for _ in 0..2 {
            let mut sink = ShmSink::new(&w);
            assert!(sink.store(Buffer::Bytes(&data), &mut Out::default()));
            let name = sink.finish().unwrap();
            assert!(name.starts_with("p-") && name.len() > 4, "{name}");
            assert_eq!(Segment::open(&d, &name).unwrap().bytes(), b"abcdefgh");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(d.join("p-0")).unwrap(), b"squat");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn pool_prefixes_carry_the_owner_and_are_unpredictable() {
        let a = ShmConfig::for_pool(3);
        let b = ShmConfig::for_pool(3);
        assert_ne!(a.prefix, b.prefix);
        let tag = segment_owner(&format!("{}q0", a.prefix)).unwrap();
        assert_eq!(tag, scratch::tag());
        assert!(scratch::owner_alive(&tag));
    }

    #[test]
    #[cfg(unix)]
    fn live_segments_are_private_to_their_user() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("mode");
        let w = ShmWriter::new(ShmConfig {
            dir: d.clone(),
            prefix: "m-".into(),
            threshold: 1,
        });
        let data: Arc<[u8]> = Arc::from(&b"12345678"[..]);
        let mut sink = ShmSink::new(&w);
        assert!(sink.store(Buffer::Bytes(&data), &mut Out::default()));
        let name = sink.finish().unwrap();
        let mode = std::fs::metadata(d.join(&name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let seg = Segment::open(&d, &name).unwrap();
        assert_eq!(seg.bytes(), b"12345678");
        assert!(!d.join(&name).exists(), "unlinked once mapped");
        let _ = std::fs::remove_dir_all(d);
    }
}
