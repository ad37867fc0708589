//! Sequential reads of a remote object over ranged requests (tar shards, text, compressed
//! files read start to end), optionally keeping a local copy as they go.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::{Error, Result};

use super::blob::Inner;
use super::{join, Blob, Fetch, STREAM_CHUNK};

/// Sequential reads over ranged requests, the next chunk always in flight while this one is
/// read (so a bucket's latency overlaps the reader's work): memory is two chunks.
pub(super) struct ChunkedReader {
    pub(super) blob: Arc<Blob>,
    pub(super) pos: u64,
    pub(super) buf: Bytes,
    pub(super) next: Option<Fetch<Vec<Bytes>>>,
    /// Where a copy is kept (see [`Blob::reader_keeping_copy`]).
    pub(super) spool: Option<File>,
}

/// An unlinked temporary file (it lives while open) for a local copy of `name`.
pub(super) fn spool_file(name: &str) -> Result<File> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(".sluice-copy-{}-{n}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| Error::io(format!("{} (local copy of {name})", path.display()), e))?;
    let _ = std::fs::remove_file(&path);
    Ok(file)
}

impl ChunkedReader {
    fn range_at(&self, pos: u64) -> Option<Range<u64>> {
        let left = self.blob.size - pos;
        (left > 0).then(|| pos..pos + left.min(STREAM_CHUNK as u64))
    }
}

impl Read for ChunkedReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buf.is_empty() {
            let Some(range) = self.range_at(self.pos) else {
                return Ok(0);
            };
            let fetched = match self.next.take() {
                Some(f) => join(f).map(|mut v| v.pop().unwrap_or_default()),
                None => self
                    .blob
                    .read_at(range.start, (range.end - range.start) as usize),
            };
            self.buf = fetched.map_err(|e| std::io::Error::other(e.to_string()))?;
            if let Some(spool) = &self.spool {
                spool.write_all_at(&self.buf, range.start)?;
                if range.end == self.blob.size {
                    if let (Inner::Remote { copy, .. }, Ok(file)) =
                        (&self.blob.inner, spool.try_clone())
                    {
                        let _ = copy.set(file);
                    }
                }
            }
            self.pos = range.end;
            self.next = self
                .range_at(self.pos)
                .and_then(|r| self.blob.fetch_ahead(vec![r]));
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf = self.buf.slice(n..);
        Ok(n)
    }
}

impl Drop for ChunkedReader {
    fn drop(&mut self) {
        if let Some(f) = self.next.take() {
            f.abort();
        }
    }
}
