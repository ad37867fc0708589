//! Shared pieces of sluice's fuzz targets (see `fuzz/README.md`).
//!
//! Every target calls the entry point a user reaches (an op's `apply`, a source's `open` and
//! `get`/`stream`, `Dataset::iter_from`, `PipelineSpec::parse` + `build`): an `Err` is the
//! right answer to bad input; a panic, abort, out-of-memory or timeout is a finding.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

pub mod media;
pub mod pipelines;
pub mod spec;

/// Lets a panic raised *inside a third-party crate* (a path under cargo's registry) unwind
/// instead of aborting, printing its location once. Used by the decoder targets: sluice
/// wraps zune-jpeg, jpeg-decoder, png and symphonia in `catch_unwind` and reports their
/// panics as a corrupt file, which is what a user sees, so such a panic is only a finding
/// when it escapes that backstop — and then it reaches libfuzzer-sys's own `catch_unwind`,
/// which aborts. Panics anywhere else (sluice's own code) still abort at once.
///
/// Call it from the target's `init` block: libfuzzer-sys installs its aborting hook before.
pub fn tolerate_backstopped_upstream_panics() {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let aborting = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let upstream = info
            .location()
            .is_some_and(|l| l.file().contains("/.cargo/registry/"));
        if !upstream {
            return aborting(info);
        }
        let loc = info.location().map(|l| l.to_string()).unwrap_or_default();
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if seen.get_or_insert_with(HashSet::new).insert(loc.clone()) {
            eprintln!("sluice-fuzz: upstream panic (left to sluice's catch_unwind): {info}");
        }
    }));
}

/// A directory for this process's scratch files (in RAM when `/dev/shm` exists).
pub fn scratch_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("sluice-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    })
}

/// Writes `data` to a fresh file named `*.{ext}` in the scratch dir and returns its path.
/// Fresh per call, so a reader thread left over from the previous input never sees it
/// rewritten under it.
pub fn scratch_file(ext: &str, data: &[u8]) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let path = scratch_dir().join(format!("input-{n}.{ext}"));
    std::fs::write(&path, data).expect("write scratch file");
    path.display().to_string()
}

/// A scratch file removed when dropped.
pub struct ScratchFile(pub String);

impl ScratchFile {
    /// See [`scratch_file`].
    pub fn new(ext: &str, data: &[u8]) -> Self {
        ScratchFile(scratch_file(ext, data))
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Drains at most `limit` items of an iterator (outputs or errors alike).
pub fn drain<T>(it: impl Iterator<Item = T>, limit: usize) -> usize {
    it.take(limit).count()
}
