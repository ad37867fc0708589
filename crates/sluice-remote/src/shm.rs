//! Shared-memory segments for the big buffers of one frame.
//!
//! The writer puts every large buffer of a frame into one file under `/dev/shm` (a tmpfs:
//! the pages never touch a disk) and sends only its name; the reader maps it, unlinks it at
//! once and copies the buffers out. So a 10 MB tensor costs two memcpys instead of a trip
//! through a 64 KiB pipe buffer, and a segment lives only while a frame is in flight. Names
//! carry a per-pool prefix so the pool can sweep segments a crashed peer left behind.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use memmap2::{Mmap, MmapMut};
use serde::{Deserialize, Serialize};

use crate::wire::WireError;

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
    /// Writes `parts` at their offsets into a new segment of `len` bytes; returns its name.
    pub(crate) fn write(&self, len: u64, parts: &[(u64, &[u8])]) -> Result<String, WireError> {
        let name = format!("{}{}", self.config.prefix, self.next.fetch_add(1, Relaxed));
        let path = self.config.dir.join(&name);
        let fail = |e: std::io::Error| WireError::Shm {
            name: path.display().to_string(),
            message: e.to_string(),
        };
        let mut options = OpenOptions::new();
        options.read(true).write(true).create_new(true);
        // Segments hold the pipeline's data: only this user (the pool's own processes) may
        // read them. `/dev/shm` is shared by every user of the machine.
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&path).map_err(fail)?;
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

/// A received segment, mapped read-only; its file is already unlinked.
pub(crate) struct Segment {
    map: Mmap,
}

impl Segment {
    /// Maps segment `name` in `dir` and unlinks it.
    pub(crate) fn open(dir: &Path, name: &str) -> Result<Segment, WireError> {
        // A corrupt or hostile frame must not name a path outside the segment directory.
        let valid = !name.is_empty()
            && name.len() <= 200
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            && !name.starts_with('.');
        if !valid {
            return Err(WireError::Corrupt(format!("bad segment name {name:?}")));
        }
        let path = dir.join(name);
        let fail = |e: std::io::Error| WireError::Shm {
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
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(unix)]
    fn live_segments_are_private_to_their_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = ShmConfig {
            dir: dir.path().to_path_buf(),
            ..ShmConfig::new("sluice-test-")
        };
        let writer = ShmWriter::new(config);
        let name = writer.write(8, &[(0, &b"12345678"[..])]).unwrap();
        let mode = std::fs::metadata(dir.path().join(&name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let seg = Segment::open(dir.path(), &name).unwrap();
        assert_eq!(seg.bytes(), b"12345678");
        assert!(!dir.path().join(&name).exists(), "unlinked once mapped");
    }
}
